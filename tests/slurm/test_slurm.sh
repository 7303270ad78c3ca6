#!/usr/bin/env bash
# The job scripts under a real Slurm (tests/cluster/cluster: slurmctld and one slurmd per
# network-namespace node, started here and stopped by PID when the test ends):
#   train    jobscripts/slurm/train.sbatch trains across 2 nodes x 2 ranks; summary.json says 2 nodes
#   requeue  a job signalled with SIGUSR1 (what --signal=B:USR1@120 sends) checkpoints, exits 75,
#            requeues itself, and the requeued job resumes and finishes
#   elastic  3 nodes: a job of -N 2-3 loses node 3 and finishes on the 2 left (train.sbatch
#            relaunches squall, which resumes 3 -> 2 ranks); a job of -N 3 then resumes 2 -> 3
#   batch-host  a job on nodes 2 and 3 loses node 2, its batch host: a guard on node 3 requeues
#            it, and it resumes on node 3 alone
#   scancel  `scancel JOB` (and `--batch --signal=TERM`) stops a job after a checkpoint, which its
#            log names, without a requeue; `--signal=USR1` (to the steps) and `--full
#            --signal=USR1` (to the batch shell's process group) stop it so and requeue it
#   elastic-accuracy  (longer, alone) 2 epochs on 3 nodes, once uninterrupted and once elastic
#            (3 -> 2 nodes on a node's loss, 2 -> 3 at the requeue): both test accuracies
# The jobs that a test acts on while they run are held at a known step (SQUALL_HOLD_AT: the
# ranks wait before it until a file exists or a stop signal arrives), so that the test meets
# them there however fast the machine is, and lets them go after.
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
[[ $test == elastic-accuracy ]] && name=selacc
[[ $test == batch-host ]] && name=sbhost
[[ $test == scancel ]] && name=sscancel
name=${name:0:8}
cleanup() { "$cluster" down "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$cluster" down "$name" >/dev/null 2>&1 || true  # a cluster left by a killed run
nodes=2
[[ $test == elastic* || $test == batch-host ]] && nodes=3
"$cluster" up "$name" --nodes "$nodes" --slurm

fail() { echo "FAIL: $*" >&2; for f in "$shared"/job-*.out; do [[ -f $f ]] && tail -n 40 "$f" >&2; done; exit 1; }
json() { "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# The squall binary the job runs, and a config path the nodes see.
export SQUALL_BIN=$squall
config=$root/configs/fashion-mnist-sma.toml
cd "$shared"

# The elastic tests' jobs: ssgd with one rank per node (a job of -N 2-3 and no task count gets
# srun's one task per node), checkpoints, and node 3 lost and brought back; scancel's too.
if [[ $test == elastic* || $test == batch-host || $test == scancel ]]; then
  # The lower end of the node range (Slurm does not tell a running job its range).
  export SQUALL_MIN_NODES=2
  elastic_args=(--set parallel.algorithm=ssgd --set parallel.replicas_per_device=1 --set schedule.warmup_steps=0)
  job_state() { "$cluster" squeue "$name" -h -j "$1" -o %T 2>/dev/null || true; }
  # wait_job JOB SECONDS: until the job has left the queue (sbatch --wait polls Slurm at
  # growing intervals, up to half a minute late here).
  wait_job() {
    local t
    for ((t = 0; t < $2 * 5; t++)); do [[ -z $(job_state "$1") ]] && return 0; sleep 0.2; done
    return 1
  }
  # launch RUN_DIR CHECKPOINT SBATCH_ARGS... -- SQUALL_ARGS...: submits train.sbatch and waits
  # for the checkpoint folder CHECKPOINT of RUN_DIR; sets $job. A job whose rank died of
  # SIGSEGV before squall's first line (docs/jobs.md, "Known problems") is shown and submitted
  # once more, visibly (RETRY:), as in the tests above.
  launch() {
    local run=$1 ckpt=$2 sb=() out attempt log; shift 2
    while [[ $1 != -- ]]; do sb+=("$1"); shift; done
    shift
    for attempt in 1 2; do
      out=$(timeout 60 "$cluster" sbatch "$name" "${sb[@]}" -o "$shared/job-%j.out" \
        "$root/jobscripts/slurm/train.sbatch" "$config" "${elastic_args[@]}" --set "run.dir=$run" "$@") ||
        fail "sbatch failed: $out"
      job=${out##* }
      log=$shared/job-$job.out
      for _ in $(seq 1 900); do
        [[ -d $run/checkpoints/$ckpt ]] && return 0
        grep -q "Segmentation fault" "$log" 2>/dev/null && break
        [[ -z $(job_state "$job") ]] && break
        sleep 0.2
      done
      if [[ $attempt -eq 1 ]] && grep -q "Segmentation fault" "$log" 2>/dev/null && ! grep -q "squall train:" "$log"; then
        echo "RETRY: job $job died at start-up, before squall's first line; its log:"
        tail -n 15 "$log"
        "$cluster" scancel "$name" "$job" >/dev/null 2>&1 || true
        wait_job "$job" 30 || true
        continue
      fi
      fail "job $job wrote no checkpoint $ckpt"
    done
  }
  # Node I dies (its link, then every process in it: slurmd, slurmstepd, the rank; tests/cluster
  # README) and is set down, as a health check or Slurm's SlurmdTimeout would.
  lose_node() {
    "$cluster" fail "$name" "$1"
    "$cluster" scontrol "$name" update nodename="$name-n$1" state=down reason="slurm:$test: node lost" ||
      fail "scontrol update state=down failed"
  }
  # Node I comes back (link, slurmd; ReturnToService=2 puts it back in service) and is idle.
  revive_node() {
    "$cluster" revive "$name" "$1"
    "$cluster" scontrol "$name" update nodename="$name-n$1" state=resume >/dev/null 2>&1 || true
    for _ in $(seq 1 150); do
      [[ $("$cluster" sinfo "$name" -h -n "$name-n$1" -o %t 2>/dev/null) == idle ]] && return 0
      sleep 0.2
    done
    fail "node $1 is not idle again: $("$cluster" sinfo "$name" -h -n "$name-n$1" -o %T)"
  }
  # The step of RUN_DIR's newest checkpoint (0: none).
  last_step() {
    local d n=0
    for d in "$1"/checkpoints/step-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do [[ -d $d ]] && n=$((10#${d##*step-})); done
    echo "$n"
  }
  finite() { "$python" -c "import math,sys; sys.exit(0 if math.isfinite(float(sys.argv[1])) else 1)" "$1"; }
fi

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
    # A run of 400 steps, a checkpoint every 100, held before step 101 until the signal arrives
    # (SQUALL_HOLD_AT; $shared/go is made after it, for the requeued job). Once, in about twenty
    # launches under srun here, a rank died of SIGSEGV before squall printed its first line (MPI
    # start-up, reading the data, building the model; not reproduced since: docs/jobs.md, "Known
    # problems"). Such a job is shown and submitted once more, visibly, so that this test stays a
    # test of the requeue.
    submit() {
      local out
      out=$(SQUALL_HOLD_AT=101:$shared/go timeout 60 "$cluster" sbatch "$name" -N 2 -n 2 --overcommit \
        -o "$shared/job-%j.out" "$root/jobscripts/slurm/train.sbatch" "$config" --set parallel.algorithm=ssgd \
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
    touch "$shared/go"
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

  elastic)
    run=$shared/runs/elastic
    # A job of -N 2-3 on 3 idle nodes has 3. 400 steps of 48 samples (about 10 s here), a
    # checkpoint every 50; node 3 is lost once the first one is written, while the ranks are
    # held before step 51, and then they go on.
    SQUALL_HOLD_AT=51:$shared/go launch "$run" step-00000050 -N 2-3 -- --set train.max_steps=400 \
      --set checkpoint.every_steps=50 --set data.test_samples=512
    log=$shared/job-$job.out
    grep -q "3 rank(s) on 3 node(s)" "$log" || fail "job $job did not start on 3 nodes"
    lose_node 3
    touch "$shared/go"
    echo "node 3 lost after the checkpoint of step $(last_step "$run")"
    wait_job "$job" 180 || fail "job $job did not finish on the nodes left (state $(job_state "$job"))"
    grep -q "train.sbatch: node $name-n3 is gone.*relaunching on 2 node(s)" "$log" || fail "no relaunch line in the job's log"
    grep -q "resuming step [0-9]* of a job of 3 rank(s) on 3 node(s) on 2 rank(s) on 2 node(s)" "$log" ||
      fail "the relaunched run did not resume 3 -> 2 ranks"
    [[ -f $run/summary.json ]] || fail "job $job ended without summary.json"
    cp "$run/summary.json" "$shared/summary-shrunk.json"  # for a look afterwards: the next job rewrites it
    s=$run/summary.json
    [[ $(json "$s" 'd["steps"]') == 400 ]] || fail "summary.json: $(json "$s" 'd["steps"]') steps, not 400"
    [[ $(json "$s" 'd["nodes"], d["world_size"]') == "2 2" ]] || fail "summary.json: not 2 ranks on 2 nodes"
    change=$(json "$s" 'json.dumps(d["attempt"]["shape_change"])')
    [[ $(json "$s" '*(lambda c: (c["from"]["ranks"], c["from"]["nodes"], c["to"]["ranks"], c["to"]["nodes"]))(d["attempt"]["shape_change"])') == "3 3 2 2" ]] ||
      fail "summary.json: attempt.shape_change is not 3 -> 2 ranks and nodes: $change"
    step=$(json "$s" 'd["attempt"]["shape_change"]["step"]')
    [[ $step -ge 50 && $((step % 50)) -eq 0 ]] || fail "shape change at step $step, not at a checkpoint"
    grep -q '"kind":"resume".*"shape_change"' "$run/metrics.jsonl" || fail "metrics.jsonl has no resume record with shape_change"
    for key in train_loss test_loss; do finite "$(json "$s" "d['final']['$key']")" || fail "final $key is not finite"; done
    acc=$(json "$s" 'd["final"]["test_accuracy"]')
    "$python" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)" "$acc" || fail "test accuracy $acc: the model did not train"
    echo "ok: job $job lost node 3 after step $step and finished on 2 nodes: 400 steps, shape change 3 -> 2 ranks, test accuracy $acc"

    # Node 3 is back: a job of 3 nodes goes on from step 400 to 500 on all three.
    revive_node 3
    launch "$run" step-00000500 -N 3 -- --set train.max_steps=500 --set checkpoint.every_steps=50 \
      --set data.test_samples=512
    wait_job "$job" 60 || fail "job $job did not finish"
    log=$shared/job-$job.out
    grep -q "resuming step 400 of a job of 2 rank(s) on 2 node(s) on 3 rank(s) on 3 node(s)" "$log" ||
      fail "job $job did not resume 2 -> 3 ranks"
    [[ $(json "$s" 'd["steps"], d["nodes"], d["world_size"]') == "500 3 3" ]] || fail "summary.json: not 500 steps on 3 ranks on 3 nodes"
    [[ $(json "$s" '*(lambda c: (c["step"], c["from"]["ranks"], c["to"]["ranks"]))(d["attempt"]["shape_change"])') == "400 2 3" ]] ||
      fail "summary.json: attempt.shape_change is not 2 -> 3 ranks at step 400: $(json "$s" 'd["attempt"]["shape_change"]')"
    echo "ok: job $job resumed step 400 on 3 nodes (2 -> 3 ranks) and ended at step 500, test accuracy $(json "$s" 'd["final"]["test_accuracy"]')"
    ;;

  batch-host)
    # The batch host's loss ends train.sbatch, and with --no-kill Slurm keeps the job running
    # without it. The script's guards on the other nodes see the batch host leave the job and
    # requeue it. Node 1 runs slurmctld here, so the job leaves it out: its batch host is node
    # 2, its other node 3; a guard looks every 2 s. The ranks are held before step 51 until
    # node 2 is lost (on a fast machine the job had ended before the test looked).
    run=$shared/runs/batch-host
    SQUALL_MIN_NODES=1 SQUALL_GUARD_PERIOD=2 SQUALL_HOLD_AT=51:$shared/go launch "$run" step-00000050 -N 1-2 \
      -x "$name-n1" -- --set train.max_steps=300 --set checkpoint.every_steps=50 --set data.test_samples=512
    log=$shared/job-$job.out
    grep -q "2 rank(s) on 2 node(s)" "$log" || fail "job $job did not start on 2 nodes"
    lose_node 2
    touch "$shared/go"
    echo "node 2, the batch host, lost after the checkpoint of step $(last_step "$run")"
    # The requeued job waits about cred_expire (30 s) before it starts again, on node 3 alone.
    for _ in $(seq 1 900); do [[ -f $run/summary.json ]] && break; sleep 0.2; done
    wait_job "$job" 30 || fail "job $job did not end (state $(job_state "$job"))"
    grep -q "guard on $name-n3: the batch host $name-n2 is gone: requeueing job $job" "$log" ||
      fail "no guard requeued the job"
    grep -q "train.sbatch: job $job (restart 1) on 1 node(s)" "$log" || fail "the requeued job did not start on 1 node"
    grep -q "resuming step [0-9]* of a job of 2 rank(s) on 2 node(s) on 1 rank(s) on 1 node(s)" "$log" ||
      fail "the requeued job did not resume 2 -> 1 ranks"
    s=$run/summary.json
    [[ -f $s ]] || fail "the requeued job wrote no summary.json"
    [[ $(json "$s" 'd["steps"], d["nodes"], d["world_size"]') == "300 1 1" ]] || fail "summary.json: not 300 steps on 1 rank"
    echo "ok: the loss of job $job's batch host requeued it (a guard on node 3); it resumed on node 3 alone and ended at step 300"
    ;;

  scancel)
    # Stopping a job by hand (docs/jobs.md, "Stopping a job"). Each job: ssgd on 2 nodes x 1
    # rank, 3000 steps, a checkpoint every 100, held before step 101 until a stop signal reaches
    # its ranks (the file is never made). stop NAME ARGS...: submits one, runs `scancel ARGS JOB`
    # once the checkpoint of step 100 is there, waits until the job has stopped running, and
    # checks that the step squall says it stopped after ("stopped by SIG... after step N") has
    # its checkpoint, the newest; sets $job, $log, $n and $state.
    stop() {
      local run=$shared/runs/scancel-$1
      SQUALL_HOLD_AT=101:$shared/never launch "$run" step-00000100 -N 2 -- --set train.max_steps=3000 \
        --set checkpoint.every_steps=100 --set data.test_samples=512
      log=$shared/job-$job.out
      "$cluster" scancel "$name" "${@:2}" "$job" || fail "scancel ${*:2} $job failed"
      for _ in $(seq 1 300); do
        state=$("$cluster" scontrol "$name" show job -o "$job" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2)
        [[ $state =~ ^(CANCELLED|FAILED|COMPLETED|PENDING)$ ]] && break
        sleep 0.2
      done
      [[ $state =~ ^(CANCELLED|FAILED|COMPLETED|PENDING)$ ]] || fail "job $job still runs after scancel ${*:2} (state $state)"
      n=$(grep -oE "stopped by SIG[A-Z0-9]+ after step [0-9]+" "$log" | tail -n 1 | grep -oE '[0-9]+$' || true)
      [[ -n $n ]] || fail "scancel ${*:2}: the ranks of job $job did not stop after a checkpoint (state $state)"
      [[ -d $run/checkpoints/$(printf 'step-%08d' "$n") && $(last_step "$run") -eq $n ]] ||
        fail "scancel ${*:2}: job $job stopped after step $n, but its newest checkpoint is of step $(last_step "$run")"
    }
    # Not requeued: the script says so, and the job's restart count is 0.
    not_requeued() {
      grep -q "train.sbatch: stopped by SIGTERM" "$log" || fail "scancel $*: the script did not say it stopped on SIGTERM"
      ! grep -q "requeueing job $job" "$log" && "$cluster" scontrol "$name" show job -o "$job" | grep -q " Restarts=0 " ||
        fail "scancel $*: job $job was requeued"
    }
    # Requeued: it waits (PENDING) for about cred_expire; cancelled then, it does not run again.
    requeued() {
      grep -q "stopped after a checkpoint: requeueing job $job" "$log" || fail "scancel $*: job $job did not requeue itself"
      "$cluster" scancel "$name" "$job" || true
    }
    # scancel JOB: Slurm sends SIGTERM to every process of the job (the ranks, srun, the script),
    # and SIGKILL KillWait seconds later (5 here, 30 by default).
    stop plain
    [[ $state == CANCELLED ]] || fail "scancel $job: state $state, not CANCELLED"
    not_requeued "(plain)"
    echo "ok: scancel $job: its ranks stopped after step $n, whose checkpoint is the newest; the job ended $state, not requeued"
    # SIGTERM to the batch shell alone: the script passes it on as SIGUSR1 (on a SIGTERM srun
    # kills its tasks) and exits 75.
    stop batch-term --batch --signal=TERM
    not_requeued --batch --signal=TERM
    grep -q "stopped by SIGUSR1 after step $n" "$log" || fail "scancel --batch --signal=TERM: not passed on as SIGUSR1"
    echo "ok: scancel --batch --signal=TERM $job: stopped after step $n, its checkpoint the newest; ended $state, not requeued"
    # SIGUSR1 to every step (the ranks; the guards ignore it): requeued.
    stop steps-usr1 --signal=USR1
    requeued --signal=USR1
    echo "ok: scancel --signal=USR1 $job: stopped after step $n, its checkpoint the newest; requeued"
    # SIGUSR1 to the batch shell's process group: srun, in a session of its own, gets it once,
    # from the script.
    stop full-usr1 --full --signal=USR1
    requeued --full --signal=USR1
    echo "ok: scancel --full --signal=USR1 $job: stopped after step $n, its checkpoint the newest; requeued"
    ;;

  elastic-accuracy)
    # 2 epochs of Fashion-MNIST (60,000 samples each) and the whole test set, from seed 1: once
    # uninterrupted on 3 nodes (2500 steps of 48 samples), once elastic: node 3 is lost at step
    # 300 or so, the job goes on on 2 nodes (32 samples a step) into epoch 2, node 3 comes back,
    # and the job, signalled as at its time limit, requeues itself and Slurm starts it on 3.
    # squall keeps the global batch across the shape change (elastic.batch = global, the
    # default: 24 samples per learner on 2 nodes). The elastic run ended 0.13 and 0.17 points
    # below and 0.12 above the uninterrupted one (seeds 1-3, docs/jobs.md "The batch"); the
    # test asks for what the issue asks, half a point (SQUALL_ELASTIC_TOLERANCE, a fraction),
    # three times the largest of those, though the seeds' uninterrupted runs alone spread over
    # 0.35 points. (What a resume carries over is checked bit for bit elsewhere: tests/mpi;
    # bench/elastic.py measures 4 epochs on 2, 3 and 6 ranks for three algorithms.)
    # SQUALL_ELASTIC_SEED (1) and SQUALL_ELASTIC_ARGS (more squall train arguments, for both
    # runs) vary the runs.
    read -r -a more <<<"${SQUALL_ELASTIC_ARGS:-}"
    acc_args=(--set train.epochs=2 --set checkpoint.every_steps=100 --set data.test_samples=10000
              --set "run.seed=${SQUALL_ELASTIC_SEED:-1}" ${more[@]+"${more[@]}"})
    t0=$SECONDS
    launch "$shared/runs/full" step-00000100 -N 3 -- "${acc_args[@]}"
    wait_job "$job" 600 || fail "the uninterrupted job $job did not finish"
    full=$shared/runs/full/summary.json
    [[ -f $full ]] || fail "the uninterrupted job $job wrote no summary.json"
    t_full=$((SECONDS - t0))
    echo "uninterrupted: job $job, $(json "$full" 'd["steps"]') steps in ${t_full} s, test accuracy $(json "$full" 'd["final"]["test_accuracy"]')"

    t0=$SECONDS
    run=$shared/runs/elastic
    # Held before step 301 until node 3 is lost, and before step 2101 until the signal.
    SQUALL_HOLD_AT="301:$shared/go,2101:$shared/go2" launch "$run" step-00000300 -N 2-3 -- "${acc_args[@]}"
    log=$shared/job-$job.out
    lose_node 3
    touch "$shared/go"
    echo "node 3 lost after the checkpoint of step $(last_step "$run")"
    # Epoch 2 on 2 nodes: its checkpoints past step 2100 (epoch 1 ends near step 1725).
    for _ in $(seq 1 3000); do
      [[ $(last_step "$run") -ge 2100 ]] && break
      [[ -z $(job_state "$job") ]] && fail "job $job ended early: $(tail -n 5 "$log")"
      sleep 0.2
    done
    revive_node 3
    "$cluster" scancel "$name" --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job failed"
    touch "$shared/go2"
    echo "node 3 back; job $job signalled after the checkpoint of step $(last_step "$run")"
    for _ in $(seq 1 3000); do
      [[ -f $run/summary.json && $(json "$run/summary.json" 'd["attempt"]["number"]') == 3 ]] && break
      sleep 0.2
    done
    wait_job "$job" 60 || fail "job $job did not finish"
    el=$run/summary.json
    [[ $(json "$el" 'd["attempt"]["number"], d["nodes"]') == "3 3" ]] || fail "the requeued job did not end on 3 nodes (attempt 3)"
    grep -q "relaunching on 2 node(s)" "$log" || fail "no relaunch on 2 nodes"
    grep -q "of a job of 2 rank(s) on 2 node(s) on 3 rank(s) on 3 node(s)" "$log" || fail "the requeued job did not resume 2 -> 3"
    t_el=$((SECONDS - t0))
    a_full=$(json "$full" 'd["final"]["test_accuracy"]')
    a_el=$(json "$el" 'd["final"]["test_accuracy"]')
    echo "elastic: job $job, $(json "$el" 'd["steps"]') steps in ${t_el} s (3 -> 2 -> 3 nodes), test accuracy $a_el"
    echo "accuracy: uninterrupted $a_full, elastic $a_el ($("$python" -c "import sys; print('%+.2f' % (100 * (float(sys.argv[2]) - float(sys.argv[1]))))" "$a_full" "$a_el") points)"
    "$python" -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= float(sys.argv[3]) else 1)" \
      "$a_full" "$a_el" "${SQUALL_ELASTIC_TOLERANCE:-0.005}" ||
      fail "the elastic run's accuracy is more than ${SQUALL_ELASTIC_TOLERANCE:-0.005} from the uninterrupted one's"
    echo "ok: 2 epochs, uninterrupted $a_full, elastic $a_el: within ${SQUALL_ELASTIC_TOLERANCE:-0.005}"
    ;;

  *) fail "unknown test '$test'" ;;
esac
