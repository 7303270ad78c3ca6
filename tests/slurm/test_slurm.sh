#!/usr/bin/env bash
# The job scripts under a real Slurm (tests/cluster/cluster: slurmctld and one slurmd per
# network-namespace node, started here and stopped by PID when the test ends):
#   train    jobscripts/slurm/train.sbatch trains across 2 nodes x 2 ranks; summary.json says 2 nodes
#   requeue  a job signalled with SIGUSR1 (what --signal=B:USR1@120 sends) checkpoints, exits 75,
#            requeues itself, and the requeued job resumes and finishes
# Exit 77 (CTest: skipped), with the reason, where Slurm or the namespaces are missing.
#
#   test_slurm.sh SQUALL_BIN PYTHON TEST
set -euo pipefail

squall=$1 python=$2 test=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster=$root/tests/cluster/cluster
# The nodes share this folder (beside the binary): job output and run dirs.
shared=$(cd "$(dirname "$squall")/.." && pwd)/slurm-test-$test
rm -rf "$shared" && mkdir -p "$shared"

command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null ||
  { echo "SKIP: slurmctld/slurmd/sbatch are not installed (scripts/install-deps installs them)"; exit 77; }
"$cluster" check || exit 77
name=s$test
name=${name:0:8}
cleanup() { "$cluster" down "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$cluster" down "$name" >/dev/null 2>&1 || true  # a cluster left by a killed run
"$cluster" up "$name" --nodes 2 --slurm

fail() { echo "FAIL: $*" >&2; for f in "$shared"/job-*.out; do [[ -f $f ]] && tail -n 40 "$f" >&2; done; exit 1; }
json() { "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# The squall binary the job runs, and a config path the nodes see.
export SQUALL_BIN=$squall
config=$root/configs/fashion-mnist-sma.toml
cd "$shared"

case $test in
  train)
    # The issue's command: 2 nodes, 4 ranks, --overcommit (2 cores), 40 steps. A job whose rank
    # died of SIGSEGV before squall's first line (docs/jobs.md, "Known problems") is shown and
    # submitted once more, visibly (a line RETRY:), as in the requeue test below.
    for attempt in 1 2; do
      out=$(timeout 300 "$cluster" sbatch "$name" --wait -N 2 -n 4 --overcommit -o "$shared/job-%j.out" \
        "$root/jobscripts/slurm/train.sbatch" "$config" --set train.max_steps=40 --set schedule.warmup_steps=0 \
        --set data.test_samples=512) && break
      job=$(grep -o '[0-9]*$' <<<"${out%%$'\n'*}" || true)
      log=$shared/job-$job.out
      if [[ $attempt -eq 1 && -n $job ]] && grep -q "Segmentation fault" "$log" 2>/dev/null &&
         ! grep -q "squall train:" "$log"; then
        echo "RETRY: job $job died at start-up, before squall's first line; its log:"
        tail -n 15 "$log"
        continue
      fi
      fail "sbatch --wait train.sbatch failed: $out"
    done
    echo "$out"
    summary=$(ls "$shared"/runs/squall-*/summary.json 2>/dev/null | head -n 1)
    [[ -n $summary ]] || fail "no runs/squall-<job id>/summary.json"
    [[ $(json "$summary" 'd["nodes"]') == 2 ]] || fail "summary.json: nodes is not 2"
    [[ $(json "$summary" 'd["world_size"]') == 4 ]] || fail "summary.json: world_size is not 4"
    [[ $(json "$summary" 'd["steps"]') == 40 ]] || fail "summary.json: not 40 steps"
    echo "ok: train.sbatch on 2 nodes x 2 ranks: $(dirname "$summary"), nodes 2, 40 steps"
    ;;

  requeue)
    # A run long enough to be signalled: every 100 steps a checkpoint, and 300 steps (about 4 s
    # here) after the first one for the signal to arrive (it took 11 steps). Once, in about twenty
    # launches under srun here, a rank died of SIGSEGV before squall printed its first line (MPI
    # start-up, reading the data, building the model; not reproduced since: docs/jobs.md, "Known
    # problems"). Such a job is shown and submitted once more, visibly, so that this test stays a
    # test of the requeue.
    submit() {
      local out
      out=$(timeout 60 "$cluster" sbatch "$name" -N 2 -n 2 --overcommit -o "$shared/job-%j.out" \
        "$root/jobscripts/slurm/train.sbatch" "$config" --set parallel.algorithm=ssgd \
        --set parallel.replicas_per_device=1 --set train.max_steps=400 --set checkpoint.every_steps=100 \
        --set data.test_samples=512 --set schedule.warmup_steps=0) || fail "sbatch failed: $out"
      echo "${out##* }"
    }
    for attempt in 1 2; do
      job=$(submit)
      run=$shared/runs/squall-$job
      for _ in $(seq 1 600); do
        [[ -d $run/checkpoints/step-00000100 ]] && break
        grep -q "Segmentation fault" "$shared/job-$job.out" 2>/dev/null && break
        sleep 0.2
      done
      [[ -d $run/checkpoints/step-00000100 ]] && break
      if [[ $attempt -eq 1 ]] && grep -q "Segmentation fault" "$shared/job-$job.out" 2>/dev/null &&
         ! grep -q "squall train:" "$shared/job-$job.out"; then
        echo "RETRY: job $job died at start-up, before squall's first line; its log:"
        tail -n 15 "$shared/job-$job.out"
        "$cluster" scancel "$name" "$job" >/dev/null 2>&1 || true
        continue
      fi
      fail "job $job wrote no checkpoint"
    done
    # What Slurm does 120 s before the time limit with --signal=B:USR1@120: SIGUSR1 to the batch shell.
    "$cluster" scancel "$name" --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job failed"
    # Slurm makes a requeued job eligible again about cred_expire seconds later (30 s on the
    # test cluster, tests/cluster/cluster; 120 s by default): its nodes clean up the first
    # run's step meanwhile, and starting it sooner made the step's launch fail here. Wait.
    for _ in $(seq 1 1500); do [[ -f $run/summary.json ]] && break; sleep 0.2; done
    [[ -f $run/summary.json ]] || fail "the requeued job $job did not finish (state: $("$cluster" scontrol "$name" show job "$job" | grep -o 'JobState=[A-Z]*'))"
    log=$shared/job-$job.out
    grep -q "requeueing job $job" "$log" || fail "the job did not requeue itself"
    grep -q "stopped by SIGUSR1" "$log" || fail "the ranks did not stop on SIGUSR1"
    grep -q "resuming from" "$log" || fail "the requeued job did not resume"
    grep -q '"kind": *"resume"' "$run/metrics.jsonl" || fail "metrics.jsonl has no resume record"
    [[ $(json "$run/summary.json" 'd["steps"]') == 400 ]] || fail "summary.json: not 400 steps"
    echo "ok: job $job checkpointed on SIGUSR1, exited 75, requeued itself and resumed to step 400"
    ;;

  *) fail "unknown test '$test'" ;;
esac
