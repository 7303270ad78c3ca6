#!/usr/bin/env bash
# Tests on the one-machine cluster (tests/cluster/cluster): each brings up its own cluster,
# checks one thing, and takes the cluster down whatever happens. Exit 77 (CTest: skipped) when
# no cluster can be made here, with the reason.
#
#   test_cluster.sh SQUALL_BIN PYTHON TEST
#   TEST: info | allreduce | rate | slurm | train | resume | streams
set -euo pipefail

squall=$1 python=$2 test=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster=$here/cluster
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-cluster-test.XXXXXX")
# What the nodes write for this script to read (job output, run directories) lives beside the binary.
shared=$(dirname "$squall")/../cluster-test-$test
rm -rf "$shared" && mkdir -p "$shared"

"$cluster" check || exit 77
# SQUALL_CLUSTER_TEST_PREFIX (default "t") keeps the clusters of two checkouts tested at once apart.
name=${SQUALL_CLUSTER_TEST_PREFIX:-t}$test
name=${name:0:8}
cleanup() {
  "$cluster" down "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$cluster" down "$name" >/dev/null 2>&1 || true  # a cluster left by a killed run

fail() { echo "FAIL: $*" >&2; exit 1; }
# json FILE EXPR: evaluates a Python expression on the JSON document `d` in FILE.
json() { "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

case $test in
  info)
    # 2 nodes x 2 ranks: real hosts, not emulated ones.
    "$cluster" up "$name" --nodes 2
    "$cluster" mpirun "$name" --host "$("$cluster" hosts "$name" 2)" -- "$squall" info --json >"$work/info.json"
    [[ $(json "$work/info.json" 'd["world_size"]') == 4 ]] || fail "world_size is not 4"
    [[ $(json "$work/info.json" 'd["nodes"]') == 2 ]] || fail "nodes is not 2"
    hosts=$(json "$work/info.json" '",".join(r["host"] for r in d["ranks"])')
    [[ $hosts == "$name-n1,$name-n1,$name-n2,$name-n2" ]] || fail "ranks' hosts are $hosts"
    locals=$(json "$work/info.json" '",".join(str(r["local_rank"]) for r in d["ranks"])')
    [[ $locals == "0,1,0,1" ]] || fail "local ranks are $locals"
    echo "ok: 4 ranks on $hosts"
    ;;

  allreduce)
    # The hierarchical allreduce against MPI_Allreduce across real nodes: 2 x 2, 3 x 2 and
    # unequal nodes (2, 2, 1). bench allreduce fails on any difference from MPI_Allreduce.
    "$cluster" up "$name" --nodes 3
    for layout in "2:2" "3:2" "unequal"; do
      case $layout in
        2:2) hosts="$name-n1:2,$name-n2:2" nodes=2 np=4 ;;
        3:2) hosts=$("$cluster" hosts "$name" 2) nodes=3 np=6 ;;
        unequal) hosts="$name-n1:2,$name-n2:2,$name-n3:1" nodes=3 np=5 ;;
      esac
      "$cluster" mpirun "$name" --host "$hosts" -np "$np" -- "$squall" bench allreduce --json --iters 2 --warmup 1 \
        --sizes 4,4K,1M,3M --algos mpi,hier >"$work/ar.json" || fail "bench allreduce on $layout failed"
      [[ $(json "$work/ar.json" 'd["nodes"]') == "$nodes" ]] || fail "$layout: not $nodes nodes"
      [[ $(json "$work/ar.json" 'd["ranks"]') == "$np" ]] || fail "$layout: not $np ranks"
      [[ $(json "$work/ar.json" 'd["modes"]["hier"]') == pipeline ]] || fail "$layout: hier does not pipeline"
      [[ $(json "$work/ar.json" 'len(d["results"])') == 8 ]] || fail "$layout: results missing"
      echo "ok: $layout, $np ranks on $nodes nodes, hier equals MPI_Allreduce"
    done
    ;;

  rate)
    # The rate limit is real: 100 Mbit/s measured over the link, and far more without it.
    "$cluster" up "$name" --nodes 2 --rate 100mbit
    measure() {
      "$cluster" exec "$name" 2 -- "$python" "$here/linkrate.py" serve >"$work/port" &
      local server=$!
      local tries=0
      until [[ -s $work/port ]]; do sleep 0.1; tries=$((tries + 1)); [[ $tries -lt 100 ]] || fail "no server"; done
      "$cluster" exec "$name" 1 -- "$python" "$here/linkrate.py" send "$name-n2" "$(cat "$work/port")" "$1"
      wait "$server"
      rm -f "$work/port"
    }
    limited=$(measure 6000000)
    echo "100mbit link: $limited Mbit/s"
    "$python" -c "import sys; r=float(sys.argv[1]); sys.exit(0 if 60 <= r <= 110 else 1)" "$limited" ||
      fail "a 100mbit link carried $limited Mbit/s"
    "$cluster" rate "$name" none
    free=$(measure 60000000)
    echo "unlimited link: $free Mbit/s"
    "$python" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 300 else 1)" "$free" ||
      fail "an unlimited link carried only $free Mbit/s"
    ;;

  slurm)
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
      { echo "SKIP: slurmctld/slurmd are not installed (scripts/install-deps installs them)"; exit 77; }
    "$cluster" up "$name" --nodes 2 --slurm
    "$cluster" srun "$name" -N2 -n4 --mpi=pmix "$squall" info --json >"$work/info.json" ||
      fail "srun -N2 -n4 --mpi=pmix squall info failed"
    [[ $(json "$work/info.json" 'd["world_size"]') == 4 ]] || fail "srun: world_size is not 4"
    [[ $(json "$work/info.json" 'd["nodes"]') == 2 ]] || fail "srun: nodes is not 2"
    echo "ok: srun -N2 -n4 --mpi=pmix: 4 ranks on 2 nodes"
    printf '#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 2\nsrun hostname\n' >"$shared/job.sh"
    "$cluster" sbatch "$name" --wait -o "$shared/job.out" "$shared/job.sh" || fail "sbatch --wait failed"
    [[ $(sort "$shared/job.out" | tr '\n' ' ') == "$name-n1 $name-n2 " ]] || fail "job output: $(cat "$shared/job.out")"
    echo "ok: a batch job ran on both nodes"
    ;;

  train)
    # ssgd across 2 nodes x 2 ranks over a 1 Gbit/s link: the gradient buckets in flight.
    "$cluster" up "$name" --nodes 2 --rate 1gbit
    "$cluster" mpirun "$name" --host "$("$cluster" hosts "$name" 2)" -- "$squall" train \
      --config "$root/configs/fashion-mnist-sma.toml" --set parallel.algorithm=ssgd \
      --set parallel.replicas_per_device=1 --set train.max_steps=20 --set schedule.warmup_steps=0 \
      --set data.train_samples=4096 \
      --set data.test_samples=512 --set parallel.bucket_mb=0.01 --set run.dir="$shared/run" >"$work/train.log" 2>&1 ||
      { cat "$work/train.log" >&2; fail "training across 2 nodes failed"; }
    s=$shared/run/summary.json
    [[ $(json "$s" 'd["nodes"]') == 2 ]] || fail "summary: nodes is not 2"
    [[ $(json "$s" 'd["world_size"]') == 4 ]] || fail "summary: world_size is not 4"
    [[ $(json "$s" 'd["steps"]') == 20 ]] || fail "summary: not 20 steps"
    [[ $(json "$s" 'd["parallel"]["buckets"] > 1') == True ]] || fail "summary: one gradient bucket"
    echo "ok: 20 ssgd steps on 2 nodes x 2 ranks, $(json "$s" 'd["parallel"]["buckets"]') buckets, at most $(json "$s" 'd["parallel"]["max_buckets_in_flight"]') in flight"
    ;;

  resume)
    # sma across 2 nodes x 2 ranks: each node's leader gathers its ranks' checkpoint parts and
    # writes one node file into the run dir the nodes share (model.h5 and 2 node files, no file
    # per rank). A rank on node 2 fails at step 25; the job resumes from step 20 with
    # --resume auto and ends bit for bit as the job that ran through.
    "$cluster" up "$name" --nodes 2 --rate 1gbit
    hosts=$("$cluster" hosts "$name" 2)
    job=(train --config "$root/configs/fashion-mnist-sma.toml" --set train.max_steps=40 --set schedule.warmup_steps=0
         --set checkpoint.every_steps=10
         --set data.train_samples=4096 --set data.test_samples=512 --set run.threads=1)
    "$cluster" mpirun "$name" --host "$hosts" -- "$squall" "${job[@]}" --set run.dir="$shared/whole" \
      >"$work/whole.log" 2>&1 || { cat "$work/whole.log" >&2; fail "the uninterrupted job failed"; }
    if "$cluster" mpirun "$name" --host "$hosts" -x SQUALL_FAIL_AT=3:25 -- "$squall" "${job[@]}" \
      --set run.dir="$shared/crashed" >"$work/crash.log" 2>&1; then
      fail "the job whose rank 3 failed exited 0"
    fi
    grep -q "rank 3" "$work/crash.log" || { cat "$work/crash.log" >&2; fail "the failing rank is not named"; }
    ck=$shared/crashed/checkpoints/step-00000020
    files=$(cd "$ck" && ls | tr '\n' ' ')
    [[ $files == "model.h5 node-00000.h5 node-00001.h5 " ]] || fail "$ck holds $files, not model.h5 and one file per node"
    if "$python" -c "import h5py" 2>/dev/null; then  # the groups, as another program reads them
      groups=$("$python" -c "import h5py,sys; print(' '.join(h5py.File(sys.argv[1], 'r').keys()))" "$ck/node-00001.h5")
      [[ $groups == "rank-00002 rank-00003" ]] || fail "node-00001.h5 holds groups '$groups', not rank-00002 rank-00003"
    fi
    [[ ! -e $shared/crashed/checkpoints/step-00000030 ]] || fail "a checkpoint after the failure"
    "$cluster" mpirun "$name" --host "$hosts" -- "$squall" "${job[@]}" --set run.dir="$shared/crashed" --resume auto \
      >"$work/resume.log" 2>&1 || { cat "$work/resume.log" >&2; fail "the resumed job failed"; }
    grep -q "resuming from .*step-00000020" "$work/resume.log" || fail "did not resume from step 20"
    a=$(json "$shared/whole/summary.json" 'd["model_checksum"]')
    b=$(json "$shared/crashed/summary.json" 'd["model_checksum"]')
    [[ $a == "$b" ]] || fail "model_checksum of the resumed job $b differs from the uninterrupted job's $a"
    for d in "$shared"/whole/checkpoints/step-*; do
      [[ $(ls "$d" | wc -l) == 3 && -f $d/node-00001.h5 ]] || fail "$d does not hold model.h5 and 2 node files"
    done
    echo "ok: a job of 2 nodes x 2 ranks failed on node 2 at step 25, resumed from step 20 (model.h5 + 2 node files), model_checksum $b as uninterrupted"
    ;;

  streams)
    # run.cpu_streams = async with SQUALL_CPU_STREAM_JITTER (every stream a worker thread,
    # each queued operation delayed at random) ends with the model inline streams give, bit
    # for bit, on 2 nodes x 1 rank x 2 learners over 1 Gbit/s links: ssgd with several
    # gradient buckets in flight, sma and local-sgd. A host wait or an event that the
    # learners or the allreduce leave out shows as another model_checksum (or a crash).
    "$cluster" up "$name" --nodes 2 --rate 1gbit
    hosts=$("$cluster" hosts "$name" 1)
    # The jitter reaches the ranks by mpirun -x NAME=VALUE only: an exported variable would get
    # to node 2 through the agent, which inherits mpirun's environment as no ssh would. First,
    # proof that it arrives on both nodes.
    unset SQUALL_CPU_STREAM_JITTER
    jitter=50,7
    seen=$("$cluster" mpirun "$name" --host "$hosts" -np 2 -x SQUALL_CPU_STREAM_JITTER="$jitter" -- \
      /bin/sh -c 'echo "$(hostname)=${SQUALL_CPU_STREAM_JITTER:-unset}"' | sort | tr '\n' ' ')
    [[ $seen == "$name-n1=$jitter $name-n2=$jitter " ]] || fail "SQUALL_CPU_STREAM_JITTER on the ranks: $seen"
    declare -A sets=(
      [ssgd]="parallel.algorithm=ssgd parallel.bucket_mb=0.02"
      [sma]="parallel.algorithm=sma"
      [local-sgd]="parallel.algorithm=local-sgd parallel.start_step=8 parallel.period=3")
    for algorithm in ssgd sma local-sgd; do
      declare -A sum=()
      for mode in inline async; do
        job=(train --config "$root/configs/fashion-mnist-lenet5.toml" --set train.max_steps=24 --set schedule.warmup_steps=0
             --set parallel.replicas_per_device=2 --set data.train_samples=4096 --set data.test_samples=256
             --set run.threads=1 --set run.cpu_streams="$mode" --set run.dir="$shared/$algorithm-$mode")
        for kv in ${sets[$algorithm]}; do job+=(--set "$kv"); done
        env=()
        [[ $mode == async ]] && env=(-x SQUALL_CPU_STREAM_JITTER="$jitter")
        "$cluster" mpirun "$name" --host "$hosts" -np 2 "${env[@]}" -- "$squall" "${job[@]}" \
          >"$work/$algorithm-$mode.log" 2>&1 ||
          { cat "$work/$algorithm-$mode.log" >&2; fail "$algorithm on $mode streams across 2 nodes failed"; }
        s=$shared/$algorithm-$mode/summary.json
        [[ $(json "$s" 'd["nodes"]') == 2 ]] || fail "$algorithm $mode: nodes is not 2"
        [[ $(json "$s" 'd["world_size"]') == 2 ]] || fail "$algorithm $mode: world_size is not 2"
        [[ $(json "$s" 'd["replicas_per_device"]') == 2 ]] || fail "$algorithm $mode: not 2 learners per rank"
        [[ $(json "$s" 'd["steps"]') == 24 ]] || fail "$algorithm $mode: not 24 steps"
        [[ $(json "$s" 'd["algorithm"]') == "$algorithm" ]] || fail "$algorithm $mode: summary says another algorithm"
        [[ $(json "$s" 'd.get("cpu_streams")') == "$mode" ]] ||
          fail "$algorithm: the run asked for $mode streams, summary.json says $(json "$s" 'd.get("cpu_streams")')"
        if [[ $mode == async ]]; then
          [[ $(json "$s" 'd.get("cpu_stream_jitter_us")') == "${jitter%%,*}" ]] ||
            fail "$algorithm: the async run's jitter is $(json "$s" 'd.get("cpu_stream_jitter_us")') µs, not ${jitter%%,*}"
        fi
        extra=""
        if [[ $algorithm == ssgd ]]; then
          [[ $(json "$s" 'd["parallel"]["buckets"] > 1') == True ]] || fail "ssgd $mode: one gradient bucket"
          # The count includes the sum of the step's state that follows the last bucket, so
          # more than 2 means at least two gradient buckets were in flight at once.
          [[ $(json "$s" 'd["parallel"]["max_buckets_in_flight"] > 2') == True ]] ||
            fail "ssgd $mode: never two gradient buckets in flight at once"
          extra=", $(json "$s" 'd["parallel"]["buckets"]') buckets, up to $(json "$s" 'd["parallel"]["max_buckets_in_flight"]') in flight"
        fi
        sum[$mode]=$(json "$s" 'd["model_checksum"]')
        echo "$algorithm on $mode streams: model_checksum ${sum[$mode]}$extra"
      done
      [[ ${sum[async]} == "${sum[inline]}" ]] ||
        fail "$algorithm: async streams with jitter end with model_checksum ${sum[async]}, inline ones with ${sum[inline]}"
      echo "ok: $algorithm on 2 nodes x 1 rank x 2 learners, async streams with jitter $jitter as inline: ${sum[inline]}"
    done
    ;;

  *) fail "unknown test '$test'" ;;
esac
