#!/usr/bin/env bash
# bundle:gpu-check-rehearsal: scripts/gpu-check's lease plan rehearsed end to end on this
# machine (--rehearse: the build's real squall and test binaries, the CPU standing in for the
# GPU), with two steps replaced: one that hangs (it and a child in a process group of its own
# ignore SIGTERM, as mpirun's ranks sit in groups of their own) and one that dies of SIGSEGV.
#   test_gpu_check_rehearsal.sh GPU_CHECK BUILD_DIR PYTHON DATA_DIR
# Checks: each part's step limits and reserve fit the 540 s budget (--plan), and a plan past it
# is refused (exit 2); the hang is cut at its limit (its seconds within limit + grace) and
# none of its processes survive; the summary names the hang TIMEOUT and the crash CRASH, and
# every step after them still runs; the CPU runs the rehearsal stands in with pass; --out holds
# at most 8 files at most 2 folders down, the tarball every step's log, and the summary table
# comes last in summary.md and on stdout; a deadline shorter than the plan cuts the running
# step and leaves the rest "no time left". Where the build has the gpu tests' CPU twins
# (squall_unit_tests), the test areas run them: part 1's areas pass, with a JUnit file each, and
# an area killed at its limit (part 2's models, whose last case takes many seconds) names, from
# Catch2's streamed report, the cases that passed and the one it was killed in. It does not read
# the benches' figures.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 GPU_CHECK BUILD_DIR PYTHON DATA_DIR" >&2; exit 2; }
gpu_check=$1 build=$2 python=${3:-python3} data=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -x $build/bin/squall ]] || { echo "SKIP: no $build/bin/squall"; exit 77; }
[[ -f $data/t10k-images-idx3-ubyte.gz ]] || { echo "SKIP: no Fashion-MNIST in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: needs mpirun"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-rehearsal.XXXXXX")
trap 'rm -rf "$work"' EXIT
readonly hang_limit=4 grace=5

# --- the plan's budget ------------------------------------------------------------------------
for part in 1 2; do
  plan=$("$gpu_check" --plan --part "$part") || fail "--plan --part $part exited $?"
  total=$(awk -F'|' 'NF > 4 && $3 ~ /^ *[0-9]+ *$/ { s += $3 } END { print s + 0 }' <<<"$plan")
  steps=$(awk -F'|' 'NF > 4 && $3 ~ /^ *[0-9]+ *$/' <<<"$plan" | wc -l)
  ((steps >= 10)) || fail "part $part's plan lists $steps steps"
  ((total <= 540)) || fail "part $part's step limits add up to $total s, over 540"
  echo "ok: part $part: $steps steps, limits $total s <= 540 s"
done
rc=0
"$gpu_check" --plan --part 1 --inject hang:info:600 >/dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a plan past 540 s exited $rc, not 2"
echo "ok: a plan past the budget is refused (exit 2)"

# --- the rehearsal with a hang and a crash ---------------------------------------------------------
o=$work/out
rc=0
export SQUALL_GPU_CHECK_STATE=$work/state
"$gpu_check" --rehearse --build "$build" --python "$python" --data "$data" --out "$o" \
  --inject "hang:info:$hang_limit,crash:tests:ops" >"$work/stdout" 2>&1 || rc=$?
[[ $rc == 1 ]] || { tail -40 "$work/stdout"; fail "the rehearsal exited $rc after a hang and a crash, not 1"; }
summary=$o/summary.md
[[ -f $summary ]] || fail "no summary.md in --out"
row() { grep -F "| $1 | " "$summary" | head -1; }
field() { row "$1" | awk -F'|' -v n="$2" '{ gsub(/^ +| +$/, "", $n); print $n }'; }

[[ $(field info 3) == "TIMEOUT (limit $hang_limit s)" ]] || { cat "$summary"; fail "the hang is '$(field info 3)', not a TIMEOUT"; }
secs=$(field info 4)
awk -v s="$secs" -v m=$((hang_limit + grace + 2)) -v l=$hang_limit 'BEGIN { exit !(s >= l && s <= m) }' ||
  fail "the hang took $secs s; its limit is $hang_limit s and the grace $grace s"
[[ $(field tests:ops 3) == "CRASH (SIGSEGV)" ]] || { cat "$summary"; fail "the crash is '$(field tests:ops 3)', not CRASH (SIGSEGV)"; }
echo "ok: the hang is cut after $secs s (limit $hang_limit s + grace $grace s) and the crash is named"

# The hang's processes, the one in a process group of its own included, are gone.
tar -xzf "$o/gpu-check-part1.tar.gz" -C "$work"
pids=$(sed -n 's/^injected hang: pids //p' "$work/gpu-check-part1/logs/info.log")
[[ -n $pids ]] || fail "the hang's log names no pids"
for p in $pids; do
  if [[ -e /proc/$p ]] && [[ $(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null) != Z ]] &&
     grep -q sleep "/proc/$p/cmdline" 2>/dev/null; then
    kill -KILL "$p" 2>/dev/null
    fail "process $p of the hang outlived its step"
  fi
done
echo "ok: none of the hang's processes ($pids) outlived it"

# Every step after the hang and the crash ran, and the CPU stand-ins passed.
mapfile -t names < <(awk -F'|' 'NF > 4 && $3 ~ /^ *[0-9]+ *$/ { gsub(/ /, "", $2); print $2 }' \
                     <<<"$("$gpu_check" --plan --part 1)")
for n in "${names[@]}"; do
  v=$(field "$n" 3)
  [[ -n $v && $v != "no time left" ]] || fail "step $n did not run after the hang and the crash ('$v')"
  [[ -f $work/gpu-check-part1/logs/${n//:/-}.log ]] || fail "the tarball has no log of $n"
done
for n in setup mpi train:2ranks train:graphs allreduce; do
  [[ $(field "$n" 3) == ok ]] || { cat "$summary"; fail "$n is '$(field "$n" 3)' in the rehearsal, not ok"; }
done
[[ $(field gpu 3) == SKIP* ]] || fail "the rehearsal's gpu step is '$(field gpu 3)', not a SKIP"
echo "ok: all ${#names[@]} steps ran; setup, mpi, train:2ranks, train:graphs and allreduce pass on the CPU"
twins=0
[[ -x $build/tests/squall_unit_tests ]] && twins=1
if ((twins)); then
  for n in tests:cuda tests:layers mpi:learners; do
    [[ $(field "$n" 3) == ok ]] || { cat "$summary"; fail "$n is '$(field "$n" 3)' on its CPU twin, not ok"; }
  done
  [[ -s $work/gpu-check-part1/junit/layers.xml ]] || fail "tests:layers left no JUnit file"
  [[ $(field tests:layers 5) =~ ^[1-9][0-9]*\ cases,\ 0\ failed$ ]] || fail "tests:layers' figure is '$(field tests:layers 5)'"
  echo "ok: the test areas ran on their CPU twins: tests:layers $(field tests:layers 5)"
fi

# What comes back: at most 8 files, at most 2 folders down; the summary table last.
files=$(find "$o" -mindepth 1 -type f | wc -l)
deep=$(find "$o" -mindepth 4 | wc -l)
((files >= 2 && files <= 8 && deep == 0)) || fail "--out holds $files files, $deep paths deeper than 2 folders"
[[ $(tail -n 1 "$summary") == "| allreduce |"* ]] || fail "summary.md does not end with the summary table"
[[ $(tail -n 1 "$work/stdout") == "| allreduce |"* ]] || fail "stdout does not end with the summary table"
echo "ok: --out holds $files files, none deeper than 2 folders; the summary table comes last"

# --- a deadline shorter than the plan ------------------------------------------------------------------
o=$work/short
rc=0
"$gpu_check" --rehearse --build "$build" --python "$python" --data "$data" --out "$o" --budget 20 \
  --inject "hang:setup:15" >"$work/stdout-short" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "a run past its deadline exited $rc, not 1"
summary=$o/summary.md
[[ $(field setup 3) =~ ^TIMEOUT\ \(limit\ [1-5]\ s\)$ ]] || fail "setup under a 20 s budget is '$(field setup 3)'"
[[ $(field allreduce 3) == "no time left" ]] || fail "the last step is '$(field allreduce 3)' past the deadline"
echo "ok: past the deadline the running step is cut and the rest say 'no time left'"

# --- an area killed at its limit names its cases (real Catch2, streamed) ------------------------------
# The area's second case hangs (SQUALL_TEST_HANG_AT_CASE, tests/support/catch_session.cpp), so
# the kill finds one case passed and one running however fast this machine runs them.
if ((twins)); then
  o=$work/killed
  rc=0
  SQUALL_TEST_HANG_AT_CASE=2 "$gpu_check" --rehearse --build "$build" --python "$python" --data "$data" --out "$o" \
    --part 2 --only tests:models --inject limit:tests:models:6 >"$work/stdout-killed" 2>&1 || rc=$?
  summary=$o/summary.md
  [[ $rc == 1 ]] || { tail -20 "$work/stdout-killed"; fail "a killed area exited $rc, not 1"; }
  [[ $(field tests:models 3) == "TIMEOUT (limit 6 s)" ]] || { cat "$summary"; fail "tests:models is '$(field tests:models 3)'"; }
  [[ $(field tests:models 5) =~ ^[1-9][0-9]*\ cases,\ 0\ failed\;\ TIMEOUT\ in\ \'.+\'$ ]] ||
    fail "the killed area's figure '$(field tests:models 5)' names no case"
  grep -q '^running when the step ended: ' "$summary" || { cat "$summary"; fail "summary.md does not name the case running at the kill"; }
  tar -xzf "$o/gpu-check-part2.tar.gz" -C "$work"
  grep -q '<error message="running when the step ended: TIMEOUT (limit 6 s)"' "$work/gpu-check-part2/junit/models.xml" ||
    fail "junit/models.xml has no case ended by the kill"
  passed=$(grep -c '<testcase [^>]*/>' "$work/gpu-check-part2/junit/models.xml" || true)
  ((passed >= 1)) || fail "junit/models.xml names no case that passed before the kill"
  echo "ok: an area killed at its limit names its $passed passed case(s) and $(field tests:models 5 | sed 's/.*; //')"
fi
echo PASS
