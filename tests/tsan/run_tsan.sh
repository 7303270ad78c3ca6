#!/bin/sh
# run_tsan.sh <suppressions> <probe> <command> [args...]
# Runs a ThreadSanitizer test command (tests/tsan/CMakeLists.txt):
#  - TSAN_OPTIONS: the first report ends the process (halt_on_error) with exit status 66, so
#    a report can never pass as a success; third-party frames are suppressed by the file given,
#    squall's never. Options already in TSAN_OPTIONS are kept and come last (they win).
#  - Address-space randomisation off (setarch -R) where the kernel lets us: tsan's fixed
#    shadow layout (GCC 12's runtime) clashes with the randomised mappings of newer kernels
#    (vm.mmap_rnd_bits above 28) and dies with "unexpected memory mapping". The personality
#    is inherited, so under mpiexec every rank runs with it too.
#  - <probe>, a tsan-built Catch binary, is started first, listing no case: if it cannot start
#    because of that layout clash, the test is skipped (77) with the reason, not failed and
#    not passed. Any other failure of the probe fails the test.
set -u
suppressions=$1
probe=$2
shift 2

TSAN_OPTIONS="suppressions=$suppressions halt_on_error=1 exitcode=66 second_deadlock_stack=1 report_signal_unsafe=0 ${TSAN_OPTIONS:-}"
export TSAN_OPTIONS

norandom=""
arch=$(uname -m)
if command -v setarch >/dev/null 2>&1 && setarch "$arch" -R true >/dev/null 2>&1; then
  norandom="setarch $arch -R"
fi

if ! out=$($norandom "$probe" --list-tests '[no-such-case]' 2>&1); then
  case $out in
    *"unexpected memory mapping"*|*"memory layout is incompatible"*)
      echo "SKIP: the tsan runtime cannot start here (its shadow memory clashes with this kernel's address-space layout; setarch -R: ${norandom:-unavailable}):"
      echo "$out" | head -n 5 | sed 's/ThreadSanitizer/tsan/g'  # not the banner CTest fails on
      exit 77 ;;
  esac
  echo "run_tsan.sh: the tsan probe $probe failed:"
  echo "$out"
  exit 1
fi

echo "run_tsan.sh: TSAN_OPTIONS=$TSAN_OPTIONS${norandom:+ (under $norandom)}"
# shellcheck disable=SC2086  # $norandom is a command and its arguments, or nothing
exec $norandom "$@"
