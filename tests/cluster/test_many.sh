#!/usr/bin/env bash
# Many ranks on the one-machine cluster (tests/cluster/cluster): 8 nodes x 4 ranks = 32 ranks,
# oversubscribed on a machine of 2 cores. Each test brings up its own cluster, checks one thing
# and takes the cluster down whatever happens; exit 77 (CTest: skipped) when no cluster can be
# made here, with the reason. The jobs are small on purpose (LeNet-5 on a few hundred samples,
# a dozen steps): what is tested is that 32 ranks on 8 hosts start, agree, fail, resume and
# stall as 4 ranks on 2 do, within a CI budget (about 40 s for the three on 2 cores).
#
#   test_many.sh SQUALL_BIN PYTHON TEST
#   TEST: train | resume | stall
set -euo pipefail

squall=$1 python=$2 test=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster=$here/cluster
nodes=8 per_node=4 ranks=32
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-many-test.XXXXXX")
# What the nodes write for this script to read (run directories) lives beside the binary.
shared=$(dirname "$squall")/../cluster-test-many-$test
rm -rf "$shared" && mkdir -p "$shared"

"$cluster" check || exit 77
# SQUALL_CLUSTER_TEST_PREFIX (default "t") keeps the clusters of two checkouts tested at once
# apart; "m" keeps these apart from test_cluster.sh's.
name=${SQUALL_CLUSTER_TEST_PREFIX:-t}m$test
name=${name:0:8}
cleanup() {
  "$cluster" down "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$cluster" down "$name" >/dev/null 2>&1 || true  # a cluster left by a killed run

fail() { echo "FAIL: $*" >&2; exit 1; }
# json FILE EXPR: evaluates a Python expression on the JSON document `d` in FILE.
json() { "$python" -c "import json,math,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# run LOG MPIRUN-ARGS... -- SQUALL-ARGS...: one job across every node, its output in LOG. A job
# that hangs past 120 s fails the test here (timeout's 124), before CTest's TIMEOUT; the
# cluster's `down` on exit then ends whatever it left on the nodes.
run() {
  local log=$1; shift
  timeout 120 "$cluster" mpirun "$name" --host "$hosts" "$@" >"$log" 2>&1
}

# A small Fashion-MNIST, uncompressed: the first 1024 training and 256 test samples of
# Debian's files. Each rank reads its whole split, and 32 ranks decompressing the 26 MB of
# training images took most of a job's set-up (about 0.2 s of a core each).
fmnist=/usr/share/datasets/fashion-mnist
[[ -f $fmnist/train-images-idx3-ubyte.gz ]] || { echo "SKIP: $fmnist missing (install dataset-fashion-mnist)"; exit 77; }
"$python" - "$fmnist" "$shared/data" <<'PY' || fail "cannot write the small Fashion-MNIST"
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for split, n in (("train", 1024), ("t10k", 256)):
    for kind, dims in (("images-idx3", 3), ("labels-idx1", 1)):
        with gzip.open(f"{src}/{split}-{kind}-ubyte.gz") as f:
            head = struct.unpack(">" + "I" * (1 + dims), f.read(4 * (1 + dims)))
            per = 1
            for d in head[2:]:
                per *= d
            body = f.read(n * per)
        with open(f"{dst}/{split}-{kind}-ubyte", "wb") as f:
            f.write(struct.pack(">" + "I" * (1 + dims), head[0], n, *head[2:]) + body)
PY

"$cluster" up "$name" --nodes "$nodes"
hosts=$("$cluster" hosts "$name" "$per_node")
# The last node's first rank: ranks are placed by slot, 4 to a node, so 28..31 are on node 8
# (topology node 7).
late=$(((nodes - 1) * per_node + 1))
late_host=$name-n$nodes
# LeNet-5 on Fashion-MNIST, one learner per rank: 32 x 16 = 512 samples a step, so 1024
# training samples are 2 steps an epoch, each epoch ending with an evaluation of 256 samples.
job=(train --config "$root/configs/fashion-mnist-lenet5.toml" --set parallel.replicas_per_device=1
     --set data.train="$shared/data" --set data.test="$shared/data"
     --set train.batch_size=16 --set schedule.warmup_steps=0 --set run.threads=1)

case $test in
  train)
    # ssgd, 10 steps: every rank trains, the summary counts 32 ranks on 8 nodes, the loss is finite.
    run "$work/train.log" -- "$squall" "${job[@]}" --set parallel.algorithm=ssgd --set train.max_steps=10 \
      --set run.dir="$shared/run" || { cat "$work/train.log" >&2; fail "training on $nodes nodes x $per_node ranks failed"; }
    s=$shared/run/summary.json
    [[ $(json "$s" 'd["world_size"]') == "$ranks" ]] || fail "summary: world_size is $(json "$s" 'd["world_size"]'), not $ranks"
    [[ $(json "$s" 'd["nodes"]') == "$nodes" ]] || fail "summary: nodes is $(json "$s" 'd["nodes"]'), not $nodes"
    [[ $(json "$s" 'd["steps"]') == 10 ]] || fail "summary: not 10 steps"
    [[ $(json "$s" 'd["global_batch"]') == $((ranks * 16)) ]] || fail "summary: global batch is not $((ranks * 16))"
    [[ $(json "$s" 'all(math.isfinite(d["final"][k]) for k in ("train_loss", "test_loss"))') == True ]] ||
      fail "summary: a loss is not finite: $(json "$s" 'd["final"]')"
    echo "ok: 10 ssgd steps on $nodes nodes x $per_node ranks, train loss $(json "$s" 'd["final"]["train_loss"]')"
    ;;

  resume)
    # sma, 8 steps, a checkpoint every 4: rank $late (node 8) fails at step 7, and the job
    # resumes from step 4 with --resume auto and ends bit for bit as the job that ran through.
    sma=("${job[@]}" --set parallel.algorithm=sma --set train.max_steps=8 --set checkpoint.every_steps=4)
    run "$work/whole.log" -- "$squall" "${sma[@]}" --set run.dir="$shared/whole" ||
      { cat "$work/whole.log" >&2; fail "the uninterrupted job failed"; }
    if run "$work/crash.log" -x SQUALL_FAIL_AT="$late:7" -- "$squall" "${sma[@]}" --set run.dir="$shared/crashed"; then
      fail "the job whose rank $late failed exited 0"
    fi
    grep -q "rank $late fails at step 7" "$work/crash.log" || { cat "$work/crash.log" >&2; fail "the failing rank is not named"; }
    # One file per node, not per rank: model.h5 and node-00000.h5 .. node-00007.h5, rank $late's
    # part a group of the last.
    ck=$shared/crashed/checkpoints/step-00000004
    files=$(cd "$ck" && ls | tr '\n' ' ')
    expect="model.h5 $(for ((n = 0; n < nodes; ++n)); do printf 'node-%05d.h5 ' "$n"; done)"
    [[ $files == "$expect" ]] || fail "$ck holds $files, not model.h5 and one file per node"
    printf -v group 'rank-%05d' "$late"
    printf -v last 'node-%05d.h5' $((nodes - 1))
    "$python" -c "import h5py,sys; sys.exit(0 if sys.argv[2] in h5py.File(sys.argv[1], 'r') else 1)" "$ck/$last" "$group" ||
      fail "$last holds no group $group: no checkpoint part of rank $late (node $nodes) at step 4"
    [[ ! -e $shared/crashed/checkpoints/step-00000008 ]] || fail "a checkpoint after the failure"
    run "$work/resume.log" -- "$squall" "${sma[@]}" --set run.dir="$shared/crashed" --resume auto ||
      { cat "$work/resume.log" >&2; fail "the resumed job failed"; }
    grep -q "resuming from .*step-00000004" "$work/resume.log" || { cat "$work/resume.log" >&2; fail "did not resume from step 4"; }
    [[ $(json "$shared/crashed/summary.json" 'd["world_size"]') == "$ranks" ]] || fail "the resumed job is not $ranks ranks"
    a=$(json "$shared/whole/summary.json" 'd["model_checksum"]')
    b=$(json "$shared/crashed/summary.json" 'd["model_checksum"]')
    [[ $a == "$b" ]] || fail "model_checksum of the resumed job $b differs from the uninterrupted job's $a"
    echo "ok: $ranks ranks on $nodes nodes, rank $late (node $nodes) failed at step 7, resumed from step 4, model_checksum $b as uninterrupted"
    ;;

  stall)
    # Rank $late (node 8) never joins its 5th collective (SQUALL_STALL_AT sleeps an hour): the
    # watchdog on rank 0 warns after 1 s naming that rank, its host and node, and ends the job
    # after 3 s instead of hanging.
    t0=$SECONDS
    rc=0
    run "$work/stall.log" -x SQUALL_STALL_AT="$late:5" -- "$squall" "${job[@]}" --set parallel.algorithm=sma \
      --set train.max_steps=12 --set run.dir="$shared/run" --stall-warn 1 --stall-abort 3 || rc=$?
    took=$((SECONDS - t0))
    [[ $rc -ne 0 ]] || fail "the job with a stalled rank exited 0"
    [[ $rc -ne 124 ]] || { cat "$work/stall.log" >&2; fail "the job with a stalled rank hung (killed after 120 s)"; }
    grep -q "^squall: warning: rank 0 on $name-n1: stall: collective 5 " "$work/stall.log" ||
      { cat "$work/stall.log" >&2; fail "no warning from rank 0 about collective 5"; }
    who="rank $late (host $late_host, node $((nodes - 1)))"
    grep -q "stall: collective 5 (.*) waited .* s; $who has not joined; ending the job" "$work/stall.log" ||
      { cat "$work/stall.log" >&2; fail "the watchdog did not end the job naming $who"; }
    ((took < 100)) || fail "the stalled job took $took s to end"
    echo "ok: $ranks ranks on $nodes nodes, the watchdog named $who and ended the job in $took s"
    ;;

  *) fail "unknown test '$test'" ;;
esac
