#!/usr/bin/env bash
# The job scripts without a batch system: shellcheck on every one (skipped, visibly, where it
# is not installed), the LSF script rendered for a fake 2-node allocation (LSF cannot run here)
# and, elastic, after a lost host, and the scaling-study's submissions for a weak and a strong
# sweep, with and without splits (--spatial).
#   test_scripts.sh REPO_ROOT
set -euo pipefail
root=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-scripts.XXXXXX")
trap 'rm -rf "$work"' EXIT
scripts=("$root"/jobscripts/slurm/*.sbatch "$root"/jobscripts/lsf/*.lsf "$root"/jobscripts/scaling-study)

# LSF, rendered: 2 compute nodes (and the launch node) -> 12 ranks, one GPU and 7 cores each.
printf 'batch1\nh1\nh1\nh2\nh2\n' >"$work/hosts"
out=$(cd "$work" && LSB_JOBID=77 LSB_DJOB_HOSTFILE="$work/hosts" SQUALL_DRY_RUN=1 SQUALL_CONFIG=c.toml SQUALL_CPUS_PER_RANK=7 \
      SQUALL_ARGS="--set train.max_steps=5" SQUALL_BIN=/opt/squall "$root/jobscripts/lsf/summit.lsf")
[[ $out == "jsrun -n 12 -r 6 -a 1 -c 7 -g 1 --bind packed:7 --smpiargs=-gpu /opt/squall train --config c.toml --resume auto --set run.dir=runs/squall-77 --set train.max_steps=5 --set checkpoint.every_minutes=30" ]] ||
  fail "summit.lsf rendered: $out"
echo "ok: summit.lsf renders: $out"
out=$(cd "$work" && LSB_JOBID=78 LSB_DJOB_HOSTFILE="$work/hosts" SQUALL_DRY_RUN=1 SQUALL_CONFIG=c.toml SQUALL_CPUS_PER_RANK=7 \
      SQUALL_STAGE_FROM=/gpfs/data USER=u SQUALL_BIN=/opt/squall "$root/jobscripts/lsf/summit.lsf")
grep -q "^jsrun -n 2 -r 1 -a 1 -c 42 /opt/squall stage --from /gpfs/data --to /mnt/bb/u/squall$" <<<"$out" || fail "staging: $out"
grep -q -- "--set data.train=/mnt/bb/u/squall" <<<"$out" || fail "staged data not used: $out"
echo "ok: summit.lsf stages to the NVMe and trains on the copy"

# LSF, elastic (rendered): the dry run's launches end with SQUALL_DRY_RUN_STATUS's statuses in
# turn and LSF "reports" SQUALL_DRY_RUN_LOST's hosts gone. lsf VAR=VALUE... sets $out and $rc.
lsf() {
  rc=0
  out=$(cd "$work" && env LSB_JOBID=77 LSB_DJOB_HOSTFILE="$work/hosts" SQUALL_DRY_RUN=1 SQUALL_CONFIG=c.toml \
        SQUALL_CPUS_PER_RANK=7 SQUALL_BIN=/opt/squall "$@" "$root/jobscripts/lsf/summit.lsf" 2>&1) || rc=$?
}
train_cmd="/opt/squall train --config c.toml --resume auto --set run.dir=runs/squall-77 --set checkpoint.every_minutes=30"
# Host h2 lost, 1 host left and SQUALL_MIN_NODES=1: jsrun again on h1 alone, 6 ranks.
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h2
[[ $rc -eq 0 && $(grep -c '^jsrun' <<<"$out") -eq 2 ]] || fail "relaunch (rc $rc): $out"
[[ $(grep '^jsrun' <<<"$out" | tail -n 1) == "jsrun -n 6 -r 6 -a 1 -c 7 -g 1 --bind packed:7 --smpiargs=-gpu $train_cmd" ]] ||
  fail "relaunch on one host: $out"
grep -q "^summit.lsf: host h2 is gone (jsrun status 137); relaunching on 1 host(s) (h1), 6 rank(s) each" <<<"$out" ||
  fail "no relaunch line: $out"
echo "ok: summit.lsf relaunches on the host left: $(tail -n 1 <<<"$out" | cut -d' ' -f1-12) ..."
# Staged data: staged again on the host left (its files are skipped) before the relaunch.
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h2 SQUALL_STAGE_FROM=/gpfs/data USER=u
[[ $(grep ' stage ' <<<"$out" | cut -d' ' -f1-3 | tr '\n' ' ') == "jsrun -n 2 jsrun -n 1 " ]] || fail "staging on relaunch: $out"
# 3 hosts, h3 lost, at least 2: 12 ranks on h1 and h2.
printf 'batch1\nh1\nh2\nh3\n' >"$work/hosts3"
lsf LSB_DJOB_HOSTFILE="$work/hosts3" SQUALL_MIN_NODES=2 SQUALL_DRY_RUN_STATUS="137" SQUALL_DRY_RUN_LOST=h3
[[ $rc -eq 0 && $(grep '^jsrun' <<<"$out" | tail -n 1) == "jsrun -n 12 -r 6 -a 1 -c 7 -g 1 --bind packed:7 --smpiargs=-gpu $train_cmd" ]] ||
  fail "relaunch on 2 of 3 hosts (rc $rc): $out"
# Fewer than SQUALL_MIN_NODES (default: the hosts at the start) left: brequeue, no relaunch.
lsf SQUALL_DRY_RUN_STATUS="137" SQUALL_DRY_RUN_LOST=h2
[[ $rc -eq 0 && $(grep -c '^jsrun' <<<"$out") -eq 1 && $(tail -n 1 <<<"$out") == "brequeue 77" ]] || fail "requeue below the minimum (rc $rc): $out"
grep -q "1 host(s) left, fewer than 2 (SQUALL_MIN_NODES): requeueing job 77" <<<"$out" || fail "no requeue line: $out"
# A failure with every host up, and a usage error: no relaunch, the jsrun's status.
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="1"
[[ $rc -eq 1 && $(grep -c '^jsrun' <<<"$out") -eq 1 ]] && grep -q "all 2 host(s) are up: not a lost host, not relaunching" <<<"$out" ||
  fail "a failure with all hosts up (rc $rc): $out"
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="2" SQUALL_DRY_RUN_LOST=h2
[[ $rc -eq 2 && $(grep -c '^jsrun' <<<"$out") -eq 1 ]] || fail "a usage error (rc $rc): $out"
# The relaunch bound.
lsf SQUALL_MIN_NODES=1 SQUALL_MAX_RELAUNCHES=0 SQUALL_DRY_RUN_STATUS="137" SQUALL_DRY_RUN_LOST=h2
[[ $rc -eq 137 && $(grep -c '^jsrun' <<<"$out") -eq 1 ]] && grep -q "relaunched 0 time(s) already (SQUALL_MAX_RELAUNCHES): not again" <<<"$out" ||
  fail "the relaunch bound (rc $rc): $out"
echo "ok: summit.lsf requeues below SQUALL_MIN_NODES and relaunches neither a failure with every host up, a usage error, nor past SQUALL_MAX_RELAUNCHES"

# parallel.spatial = [2, 2] in the config: groups of 4 ranks, hosts of 6. 3 hosts take 2 (12
# ranks); 4 hosts, h4 lost, relaunch on 2 of the 3 left; SQUALL_ARGS' split outranks the config's.
printf '[parallel]\nspatial = [2, 2]\n' >"$work/s.toml"
printf 'batch1\nh1\nh2\nh3\nh4\n' >"$work/hosts4"
s_cmd="/opt/squall train --config s.toml --resume auto --set run.dir=runs/squall-77 --set checkpoint.every_minutes=30"
lsf SQUALL_CONFIG=s.toml LSB_DJOB_HOSTFILE="$work/hosts3"
[[ $rc -eq 0 && $(grep '^jsrun' <<<"$out") == "jsrun -n 12 -r 6 -a 1 -c 7 -g 1 --bind packed:7 --smpiargs=-gpu $s_cmd" ]] &&
  grep -q "launching on 2 of the 3 host(s), 6 rank(s) each (parallel.spatial = \[2,2\]: whole groups of 4 ranks)" <<<"$out" ||
  fail "parallel.spatial on 3 hosts (rc $rc): $out"
lsf SQUALL_CONFIG=s.toml LSB_DJOB_HOSTFILE="$work/hosts4" SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h4
[[ $rc -eq 0 && $(grep '^jsrun' <<<"$out" | head -n 1) == "jsrun -n 24 "* && $(grep '^jsrun' <<<"$out" | tail -n 1) == "jsrun -n 12 "* ]] &&
  grep -q "relaunching on 2 of the 3 host(s) (h1 h2 h3), 6 rank(s) each, .*(parallel.spatial = \[2,2\]: whole groups of 4 ranks; 1 host(s) wait)" <<<"$out" ||
  fail "parallel.spatial, a host lost (rc $rc): $out"
lsf SQUALL_CONFIG=s.toml LSB_DJOB_HOSTFILE="$work/hosts4" SQUALL_MIN_NODES=3 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h4
[[ $rc -eq 0 && $(tail -n 1 <<<"$out") == "brequeue 77" ]] &&
  grep -q "3 host(s) left, 2 of them whole groups of 4 ranks (parallel.spatial = \[2,2\]), fewer than 3 (SQUALL_MIN_NODES)" <<<"$out" ||
  fail "parallel.spatial below the minimum (rc $rc): $out"
lsf SQUALL_CONFIG=s.toml SQUALL_ARGS="--set parallel.spatial=[1,1]" LSB_DJOB_HOSTFILE="$work/hosts3"
[[ $rc -eq 0 && $(grep '^jsrun' <<<"$out") == "jsrun -n 18 "* ]] || fail "SQUALL_ARGS' parallel.spatial (rc $rc): $out"
echo "ok: summit.lsf launches whole groups of parallel.spatial, a lost host drops its groups"

# The scaling study: weak keeps each learner's batch, strong divides the global batch.
cd "$work" && cp "$root/configs/fashion-mnist-sma.toml" c.toml
weak=$("$root/jobscripts/scaling-study" --config c.toml --nodes 1,2,4 --mode weak --study w --gpus-per-node 4 --submit print)
[[ $(grep -c '^sbatch' <<<"$weak") == 3 ]] || fail "weak: $weak"
grep -q -- "-N 4 -n 16 .*run.dir=$work/w/n4" <<<"$weak" || fail "weak, 4 nodes: $weak"
grep -q "batch_size" <<<"$weak" && fail "weak scaling changed the batch: $weak"
strong=$("$root/jobscripts/scaling-study" --config c.toml --nodes 1,2,4 --mode strong --global-batch 256 --study s \
         --gpus-per-node 4 --submit print)
grep -q -- "-N 1 -n 4 .*train.batch_size=64" <<<"$strong" || fail "strong, 1 node: $strong"
grep -q -- "-N 4 -n 16 .*train.batch_size=16" <<<"$strong" || fail "strong, 4 nodes: $strong"
[[ $(wc -l <s/study.tsv) == 3 ]] || fail "study.tsv: $(cat s/study.tsv)"
if "$root/jobscripts/scaling-study" --config c.toml --nodes 3 --mode strong --global-batch 256 --study x --gpus-per-node 4 --submit print 2>"$work/err"; then
  fail "a global batch that does not divide was accepted"
fi
grep -q "does not divide" "$work/err" || fail "message: $(cat "$work/err")"
echo "ok: scaling-study prints weak and strong sweeps and refuses a batch that does not divide"

# Splits beside the node counts: a run dir per (node count, split), a group of R x C ranks one
# learner (strong: the batch is global / groups), study.tsv's fourth column the split.
weak=$("$root/jobscripts/scaling-study" --config c.toml --nodes 1,4 --mode weak --study ws --gpus-per-node 4 \
       --spatial 1,1:4,1 --submit print)
[[ $(grep -c '^sbatch' <<<"$weak") == 4 ]] || fail "weak with splits: $weak"
grep -q -- "-N 4 -n 16 --job-name scaling-n4-s4x1 .*run.dir=$work/ws/n4-s4x1 .*parallel.spatial=\[4,1\]" <<<"$weak" ||
  fail "weak, 4 nodes split [4, 1]: $weak"
grep -q -- "run.dir=$work/ws/n1-s1x1 .*parallel.spatial=\[1,1\]" <<<"$weak" || fail "weak, 1 node unsplit: $weak"
grep -q "batch_size" <<<"$weak" && fail "weak scaling with splits changed the batch: $weak"
[[ $(cut -f3,4 ws/study.tsv | tr '\t\n' ' ') == "$work/ws/n1-s1x1 1x1 $work/ws/n1-s4x1 4x1 $work/ws/n4-s1x1 1x1 $work/ws/n4-s4x1 4x1 " ]] ||
  fail "study.tsv with splits: $(cat ws/study.tsv)"
strong=$("$root/jobscripts/scaling-study" --config c.toml --nodes 1,2 --mode strong --global-batch 64 --study ss \
         --gpus-per-node 4 --spatial 2,1:2,2 --submit print)
# 1 node: [2, 1] is 2 groups (32 each), [2, 2] one group (64); 2 nodes: 4 groups (16), 2 (32).
for want in "n1-s2x1 .*train.batch_size=32" "n1-s2x2 .*train.batch_size=64" "n2-s2x1 .*train.batch_size=16" \
            "n2-s2x2 .*train.batch_size=32"; do
  grep -q -- "run.dir=$work/ss/$want" <<<"$strong" || fail "strong with splits, $want: $strong"
done
# 1 node x 6 GPUs in groups of 4: refused before any job (2 nodes, checked first, would fit),
# naming both numbers; a split that is not ROWS,COLS; a global batch that does not divide over
# the groups.
if "$root/jobscripts/scaling-study" --config c.toml --nodes 2,1 --mode weak --study xs --gpus-per-node 6 --spatial 2,1:4,1 \
   --submit print >"$work/out" 2>"$work/err"; then
  fail "groups of 4 on 6 ranks were accepted"
fi
grep -q -- "--spatial 4,1: 6 rank(s) (1 node(s) x 6 GPU(s)) are not a whole number of groups of 4" "$work/err" ||
  fail "message: $(cat "$work/err")"
[[ ! -s $work/out ]] || fail "a refused study printed submissions: $(cat "$work/out")"
if "$root/jobscripts/scaling-study" --config c.toml --nodes 1 --mode weak --study xs --spatial 2x1 --submit print 2>"$work/err"; then
  fail "--spatial 2x1 was accepted"
fi
grep -q -- "--spatial: '2x1' is not ROWS,COLS" "$work/err" || fail "message: $(cat "$work/err")"
if "$root/jobscripts/scaling-study" --config c.toml --nodes 1 --mode strong --global-batch 9 --study xs --gpus-per-node 4 \
   --spatial 2,1 --submit print 2>"$work/err"; then
  fail "a global batch of 9 over 4 ranks in groups of 2 was accepted"
fi
grep -q "does not divide over 2 group(s) x 1 learner(s)" "$work/err" || fail "message: $(cat "$work/err")"
echo "ok: scaling-study sweeps splits beside node counts and refuses ranks that are not whole groups"

if ! command -v shellcheck >/dev/null; then
  echo "SKIP: shellcheck is not installed (scripts/install-deps installs it); the scripts rendered fine"
  exit 77
fi
shellcheck -S warning "${scripts[@]}" || fail "shellcheck found problems"
echo "ok: shellcheck -S warning: ${#scripts[@]} scripts clean"
