#!/usr/bin/env bash
# The job scripts' decisions, offline: train.sbatch and summit.lsf in their dry runs
# (SQUALL_DRY_RUN=1), where only the commands that talk to the batch system (srun, scontrol;
# jsrun, bhosts, brequeue) are replaced by scripted answers, and the real signals reach the
# scripts' real traps. No Slurm or LSF needed; a few seconds.
#   - two nodes lost at once, one declared down by Slurm and one not: both are left out
#   - SIGUSR1 during the probe, the staging (first or before a relaunch), a step, or as a step
#     ends: the job is requeued, and nothing is launched after it
#   - a failed relaunch: another node lost (relaunched again), its staging failed (requeued),
#     every node up (its status)
#   - SIGUSR1 and then a step status other than 75: requeued
#   - SIGTERM (scancel): passed to the step as SIGUSR1; never requeued
#   - the requeue bound (SQUALL_MAX_REQUEUES) of both scripts
#   - parallel.spatial: a launch takes whole groups, a lost node drops its groups, and a node
#     left over waits (train.sbatch)
#   test_decisions.sh REPO_ROOT
set -euo pipefail
root=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-decisions.XXXXXX")
trap 'rm -rf "$work"' EXIT
: >"$work/c.toml"
printf '#!/bin/sh\nexit 0\n' >"$work/squall"
chmod +x "$work/squall"
sbatch_script=$root/jobscripts/slurm/train.sbatch
lsf_script=$root/jobscripts/lsf/summit.lsf

# sb VAR=VALUE...: train.sbatch's dry run as job 77 on nodes n1, n2 and n3 (one rank each), of
# the config $sb_config (c.toml) with squall train's arguments sb_args (none); sets $out (what it
# printed), $rc, and $trains (the launches of squall train, one a line).
sb_config=c.toml
sb_args=()
sb() {
  rc=0
  out=$(cd "$work" && env SLURM_JOB_ID=77 SLURM_JOB_NODELIST=n1,n2,n3 SLURM_JOB_NUM_NODES=3 SLURM_NTASKS=3 \
        SQUALL_DRY_RUN=1 SQUALL_BIN="$work/squall" "$@" timeout 60 "$sbatch_script" "$sb_config" "${sb_args[@]}" 2>&1) ||
    rc=$?
  trains=$(grep '^srun .* train ' <<<"$out" || true)
}
launched() { [[ -z $trains ]] && echo 0 || wc -l <<<"$trains"; }
has() { grep -qF -- "$1" <<<"$out"; }
requeued() { [[ $(tail -n 1 <<<"$out") == "scontrol requeue 77" && $rc -eq 0 ]]; }
train="$work/squall train --config c.toml --resume auto --set run.dir=runs/squall-77 --set checkpoint.every_minutes=30"

sb
[[ $rc -eq 0 && $(launched) -eq 1 && $trains == "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores $train" ]] ||
  fail "the first launch (rc $rc): $out"
has "srun --overlap --quiet -N 1 -n 1 --ntasks-per-node=1 -w n2 --mpi=none --input=none --output=/dev/null --error=/dev/null bash -c GUARD guard 30 n1 /dev/null" ||
  fail "no guard on n2: $out"
echo "ok: train.sbatch (dry run) launches squall on the allocation, guards on n2 and n3"

# Node n3 declared down (out of the job's NodeList) and n2 dead but not declared: the probe of
# the nodes Slurm still lists finds n2, and squall goes on on n1 alone.
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_DOWN=n3 SQUALL_DRY_RUN_LOST=n2
[[ $rc -eq 0 && $(launched) -eq 2 ]] || fail "two lost nodes (rc $rc): $out"
[[ $(tail -n 1 <<<"$trains") == "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores --overlap -N 1 -n 1 --ntasks-per-node=1 --nodelist=n1 $train" ]] ||
  fail "not relaunched on n1 alone: $out"
has "train.sbatch: node n2 n3 is gone (step status 137); relaunching on 1 node(s) (n1)" || fail "no relaunch line: $out"
echo "ok: two nodes lost, n3 declared down and n2 not: relaunched on n1 alone"

# A failed relaunch: n3 lost, relaunched on n1 and n2; then n2 lost: relaunched on n1.
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 137 0" SQUALL_DRY_RUN_DOWN=n3@1 SQUALL_DRY_RUN_LOST=n2@2
[[ $rc -eq 0 && $(launched) -eq 3 && $(tail -n 1 <<<"$trains") == *"--nodelist=n1 $train" ]] &&
  has "node n2 is gone (step status 137); relaunching on 1 node(s) (n1)" || fail "a relaunch that lost a node (rc $rc): $out"
# ... below SQUALL_MIN_NODES: requeued.
sb SQUALL_MIN_NODES=2 SQUALL_DRY_RUN_STATUS="137 137 0" SQUALL_DRY_RUN_DOWN=n3@1 SQUALL_DRY_RUN_LOST=n2@2
[[ $(launched) -eq 2 ]] && requeued && has "node n2 is gone; 1 node(s) left, fewer than 2 (SQUALL_MIN_NODES): requeueing job 77" ||
  fail "a relaunch that lost a node, below the minimum (rc $rc): $out"
# ... failed with every node up: its status, no requeue.
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 1" SQUALL_DRY_RUN_LOST=n3
[[ $rc -eq 1 && $(launched) -eq 2 ]] && has "all 2 node(s) are still there: not a lost node, not relaunching" ||
  fail "a relaunch that failed on its own (rc $rc): $out"
# ... its staging failed: requeued (a requeued job stages on the nodes it gets).
stage=(SQUALL_STAGE_FROM=/data SQUALL_STAGE_TO=/local)
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n3 "${stage[@]}" SQUALL_DRY_RUN_STAGE_FAIL=2
[[ $(launched) -eq 1 && $(grep -c " stage --from /data --to /local" <<<"$out") -eq 2 ]] && requeued &&
  has "staging /data to /local on the 2 node(s) left failed: requeueing job 77" || fail "a relaunch whose staging failed (rc $rc): $out"
# ... the first staging failed: the data's or the folder's problem, no requeue.
sb "${stage[@]}" SQUALL_DRY_RUN_STAGE_FAIL=1
[[ $rc -eq 2 && $(launched) -eq 0 ]] && has "staging /data to /local failed" || fail "a first staging that failed (rc $rc): $out"
echo "ok: a failed relaunch: another node lost (relaunched again, or requeued below the minimum), its staging failed (requeued), every node up (its status)"

# SIGUSR1 between launches: no launch after it, and the job is requeued.
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n3 SQUALL_DRY_RUN_SIGNAL=USR1@probe:1
[[ $(launched) -eq 1 ]] && requeued && has "USR1 received between launches" || fail "SIGUSR1 during the probe (rc $rc): $out"
sb "${stage[@]}" SQUALL_DRY_RUN_SIGNAL=USR1@stage:1
[[ $(launched) -eq 0 ]] && requeued || fail "SIGUSR1 during the first staging (rc $rc): $out"
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n3 "${stage[@]}" SQUALL_DRY_RUN_SIGNAL=USR1@stage:2
[[ $(launched) -eq 1 ]] && requeued && has "relaunching on 2 node(s)" || fail "SIGUSR1 during a relaunch's staging (rc $rc): $out"
echo "ok: SIGUSR1 during the probe, the first staging or a relaunch's staging: nothing launched after it, the job requeued"

# SIGUSR1 during a step: passed on; a 75 requeues, and so does any other status but 0 and 2
# (the ranks killed before they took it, during a relaunch's start, say).
sb SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
requeued && has "dry run: launch 1 got SIGUSR1" && has "stopped after a checkpoint: requeueing job 77" ||
  fail "SIGUSR1 during a step (rc $rc): $out"
sb SQUALL_DRY_RUN_STATUS=143 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
requeued && has "the step ended with status 143" || fail "SIGUSR1, then status 143 (rc $rc): $out"
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 138" SQUALL_DRY_RUN_LOST=n3 SQUALL_DRY_RUN_SIGNAL=USR1@step:2
[[ $(launched) -eq 2 ]] && requeued && has "dry run: launch 2 got SIGUSR1" || fail "SIGUSR1 during a relaunched step, status 138 (rc $rc): $out"
sb SQUALL_DRY_RUN_STATUS=0 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
[[ $rc -eq 0 ]] && ! has "scontrol requeue" || fail "SIGUSR1, then the run completed (rc $rc): $out"
# The signal as the step ends: `wait` returns early for the trap; the step's own status (75)
# counts, not the 138 of the interrupted wait. Five times: it is a race.
for _ in 1 2 3 4 5; do
  sb SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@exit:1
  requeued && has "stopped after a checkpoint" || fail "SIGUSR1 as the step ended with 75 (rc $rc): $out"
done
# 75 with no signal to the script: the steps were signalled directly (scancel --signal=USR1 JOB,
# a preemption's grace time): requeued.
sb SQUALL_DRY_RUN_STATUS=75
requeued || fail "a step that stopped by itself with 75 (rc $rc): $out"
echo "ok: SIGUSR1 during a step is passed on; 75, 143 and 138 requeue, 0 does not; the step's status survives a signal as it ends"

# SIGTERM: passed to srun as SIGUSR1 (srun would SIGKILL its tasks on a SIGTERM); never requeued.
sb SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=TERM@step:1
[[ $rc -eq 75 ]] && has "dry run: launch 1 got SIGUSR1" && has "stopped by SIGTERM" && ! has "scontrol requeue" ||
  fail "SIGTERM during a step (rc $rc): $out"
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n3 SQUALL_DRY_RUN_SIGNAL=TERM@probe:1
[[ $rc -eq 75 && $(launched) -eq 1 ]] && ! has "scontrol requeue" || fail "SIGTERM during the probe (rc $rc): $out"
sb SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL="USR1@step:1 TERM@exit:1"
[[ $rc -eq 75 ]] && ! has "scontrol requeue" || fail "SIGUSR1, then SIGTERM (rc $rc): $out"
echo "ok: SIGTERM reaches the step as SIGUSR1, during a step or between launches, and never requeues"

# The requeue bound.
sb SLURM_RESTART_COUNT=20 SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
[[ $rc -eq 75 ]] && ! has "scontrol requeue" && has "requeued 20 times already (SQUALL_MAX_REQUEUES): not again" ||
  fail "the requeue bound after a stop (rc $rc): $out"
sb SLURM_RESTART_COUNT=3 SQUALL_MAX_REQUEUES=3 SQUALL_DRY_RUN_STATUS=137 SQUALL_DRY_RUN_LOST=n3
[[ $rc -eq 137 ]] && ! has "scontrol requeue" && has "requeued 3 times already" || fail "the requeue bound below the minimum (rc $rc): $out"
sb SLURM_RESTART_COUNT=3 SQUALL_MAX_REQUEUES=3 SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS=137 SQUALL_DRY_RUN_LOST=n3 \
  SQUALL_DRY_RUN_SIGNAL=USR1@probe:1
[[ $rc -eq 75 ]] && ! has "scontrol requeue" || fail "the requeue bound after a signal between launches (rc $rc): $out"
sb SLURM_RESTART_COUNT=2 SQUALL_MAX_REQUEUES=3 SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
requeued || fail "below the requeue bound (rc $rc): $out"
echo "ok: train.sbatch requeues at most SQUALL_MAX_REQUEUES times (SLURM_RESTART_COUNT)"

# parallel.spatial = [2, 1] in the config's [parallel] table, 4 nodes of one rank: n2 lost, 3
# nodes left, of which 2 hold whole groups of 2 ranks: relaunched on n1 and n3, n4 waits.
printf '[parallel]\n# spatial = [4, 1]\nspatial = [2, 1]  # two ranks a sample\n' >"$work/s.toml"
four=("SLURM_JOB_NODELIST=n1,n2,n3,n4" SLURM_JOB_NUM_NODES=4 SLURM_NTASKS=4)
sb_config=s.toml
sb "${four[@]}" SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n2
[[ $rc -eq 0 && $(launched) -eq 2 && $(head -n 1 <<<"$trains") == "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores $work/squall train --config s.toml "* ]] ||
  fail "parallel.spatial, a node lost (rc $rc): $out"
[[ $(tail -n 1 <<<"$trains") == "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores --overlap -N 2 -n 2 --ntasks-per-node=1 --nodelist=n1,n3 "* ]] &&
  has "relaunching on 2 node(s) (n1,n3), 1 rank(s) each" &&
  has "(parallel.spatial = [2,1]: whole groups of 2 ranks; node n4 waits)" || fail "not relaunched on whole groups: $out"
# ... with SQUALL_MIN_NODES=3: the 2 nodes of whole groups are too few: requeued.
sb "${four[@]}" SQUALL_MIN_NODES=3 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n2
[[ $(launched) -eq 1 ]] && requeued &&
  has "node n2 is gone; 3 node(s) left, 2 of them whole groups of 2 ranks (parallel.spatial = [2,1]), fewer than 3 (SQUALL_MIN_NODES)" ||
  fail "parallel.spatial below the minimum (rc $rc): $out"
# The arguments' split outranks the config's: [1, 1] takes every node.
sb_args=(--set 'parallel.spatial=[1, 1]')
sb
[[ $(launched) -eq 1 && $trains == "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores $work/squall train "* ]] &&
  ! has "waits" || fail "parallel.spatial=[1, 1] in the arguments (rc $rc): $out"
# A node range that gave the job 3 nodes: the first launch takes 2 (n3 waits); n1 lost, the
# relaunch takes n2 and n3.
sb_config=c.toml
sb_args=(--set 'parallel.spatial=[2,1]')
sb SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=n1
[[ $rc -eq 0 && $(launched) -eq 2 && $(head -n 1 <<<"$trains") == *" -N 2 -n 2 --ntasks-per-node=1 --nodelist=n1,n2 $work/squall train "* ]] &&
  has "launching on 2 of the 3 node(s) (n1,n2), 1 rank(s) each (parallel.spatial = [2,1]: whole groups of 2 ranks; node n3 waits)" ||
  fail "parallel.spatial on 3 nodes: not launched on 2 (rc $rc): $out"
[[ $(tail -n 1 <<<"$trains") == *"--overlap -N 2 -n 2 --ntasks-per-node=1 --nodelist=n2,n3 "* ]] ||
  fail "parallel.spatial: the waiting node not taken on the relaunch: $out"
sb_args=()
echo "ok: train.sbatch launches whole groups of parallel.spatial (the config's or the arguments'), a lost node drops its groups"

# summit.lsf: the same decisions on LSF's commands. lsf VAR=VALUE...: its dry run as job 77 on
# hosts h1 and h2, in $work (its requeue count, squall-77.requeues, is removed first).
printf 'batch1\nh1\nh1\nh2\nh2\n' >"$work/hosts"
lsf() {
  rc=0
  rm -f "$work/squall-77.requeues"
  [[ -n ${requeues:-} ]] && echo "$requeues" >"$work/squall-77.requeues"
  out=$(cd "$work" && env LSB_JOBID=77 LSB_DJOB_HOSTFILE="$work/hosts" SQUALL_DRY_RUN=1 SQUALL_CONFIG=c.toml \
        SQUALL_CPUS_PER_RANK=7 SQUALL_BIN=/opt/squall "$@" timeout 60 "$lsf_script" 2>&1) || rc=$?
  trains=$(grep '^jsrun .* train ' <<<"$out" || true)
}
brequeued() { [[ $(tail -n 1 <<<"$out") == "brequeue 77" && $rc -eq 0 ]]; }
lsf SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
brequeued && has "dry run: launch 1 got SIGUSR1" && [[ $(cat "$work/squall-77.requeues") == 1 ]] ||
  fail "summit.lsf: SIGUSR1 during a step (rc $rc): $out"
lsf SQUALL_DRY_RUN_STATUS=143 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
brequeued || fail "summit.lsf: SIGUSR1, then status 143 (rc $rc): $out"
for _ in 1 2 3; do
  lsf SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@exit:1
  brequeued && has "stopped after a checkpoint" || fail "summit.lsf: SIGUSR1 as jsrun ended with 75 (rc $rc): $out"
done
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h2 SQUALL_DRY_RUN_SIGNAL=USR1@wait:1
[[ $(launched) -eq 1 ]] && brequeued || fail "summit.lsf: SIGUSR1 while asking LSF about the hosts (rc $rc): $out"
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h2 SQUALL_STAGE_FROM=/gpfs USER=u \
  SQUALL_DRY_RUN_SIGNAL=USR1@stage:2
[[ $(launched) -eq 1 ]] && brequeued || fail "summit.lsf: SIGUSR1 during a relaunch's staging (rc $rc): $out"
lsf SQUALL_STAGE_FROM=/gpfs USER=u SQUALL_DRY_RUN_SIGNAL=USR1@stage:1
[[ $(launched) -eq 0 ]] && brequeued || fail "summit.lsf: SIGUSR1 during the first staging (rc $rc): $out"
lsf SQUALL_MIN_NODES=1 SQUALL_DRY_RUN_STATUS="137 0" SQUALL_DRY_RUN_LOST=h2 SQUALL_STAGE_FROM=/gpfs USER=u \
  SQUALL_DRY_RUN_STAGE_FAIL=2
[[ $(launched) -eq 1 ]] && brequeued && has "staging on the 1 host(s) left failed" ||
  fail "summit.lsf: a relaunch whose staging failed (rc $rc): $out"
echo "ok: summit.lsf: SIGUSR1 during a jsrun, as it ends, while LSF is asked about the hosts, or during staging requeues, launching nothing after it"
requeues=20 lsf SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
[[ $rc -eq 75 ]] && ! has "brequeue" && has "requeued 20 times already" || fail "summit.lsf: the requeue bound (rc $rc): $out"
requeues=3 lsf SQUALL_MAX_REQUEUES=3 SQUALL_DRY_RUN_STATUS=137 SQUALL_DRY_RUN_LOST=h2
[[ $rc -eq 137 ]] && ! has "brequeue" || fail "summit.lsf: the requeue bound below the minimum (rc $rc): $out"
requeues=2 lsf SQUALL_MAX_REQUEUES=3 SQUALL_DRY_RUN_STATUS=75 SQUALL_DRY_RUN_SIGNAL=USR1@step:1
brequeued && [[ $(cat "$work/squall-77.requeues") == 3 ]] || fail "summit.lsf: below the requeue bound (rc $rc): $out"
echo "ok: summit.lsf requeues at most SQUALL_MAX_REQUEUES times (counted in squall-<job id>.requeues)"
