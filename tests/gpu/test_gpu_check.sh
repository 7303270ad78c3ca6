#!/usr/bin/env bash
# bundle:gpu-check: scripts/gpu-check's own logic, on any machine, against a made-up bundle of
# small shell programs standing in for squall, mpirun, the gpu test binaries and
# compute-sanitizer (the real ones need a GPU: scripts/gpu-check runs them on a GPU machine).
#   test_gpu_check.sh GPU_CHECK DATA_DIR
# Checks: one process per gpu test area (SQUALL_GPU_AREAS), each with its own JUnit file and
# log, a crash in one losing none of the others; the 2-rank learner tests and training steps;
# a summary.json with a non-finite loss is a FAIL; a sanitizer that cannot use the device is a
# named SKIP; summary.txt has one line per step; the exit status is 1 after a failure, 0
# without, and 77 where PyTorch sees no GPU.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 GPU_CHECK DATA_DIR" >&2; exit 2; }
gpu_check=$1 data=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "SKIP: no Fashion-MNIST in $data"; exit 77; }
real_python=$(command -v python3) || { echo "SKIP: needs python3"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
B=$work/bundle
mkdir -p "$B/bin" "$B/libexec" "$work/tools"

prog() { cat >"$1"; chmod +x "$1"; }
# python3: PyTorch "sees a GPU" unless FAKE_NO_GPU is set; everything else is the real one.
prog "$work/tools/python3" <<EOF
#!/bin/sh
case "\$*" in *torch.cuda.is_available*) [ -z "\${FAKE_NO_GPU:-}" ]; exit \$? ;; esac
exec "$real_python" "\$@"
EOF
# squall: info, and train writing a summary.json (loss FAKE_LOSS, default finite).
prog "$B/bin/squall" <<'EOF'
#!/bin/sh
case $1 in
  info) echo "squall (fake): 1 rank(s)"; exit 0 ;;
  train) ;;
  *) echo "fake squall: $1?"; exit 2 ;;
esac
case "$*" in *parallel.device_allreduce=nccl*)
  echo "squall: error: NCCL needs one GPU per rank, but ranks 0 and 1 share GPU 0000:01:00.0 on host fake"; exit 1 ;;
esac
captured=0
case "$*" in *parallel.cuda_graphs=true*) captured=${FAKE_CAPTURED:-2} ;; esac
dir=""
while [ $# -gt 0 ]; do
  case $1 in --set) case $2 in run.dir=*) dir=${2#run.dir=} ;; esac; shift 2 ;; *) shift ;; esac
done
mkdir -p "$dir"
printf '{"backend": "cuda", "world_size": 2, "steps": 40, "parallel": {"captured_learners": %s}, "final": {"train_loss": %s, "test_accuracy": 0.9}}\n' \
  "$captured" "${FAKE_LOSS:-0.5}" >"$dir/summary.json"
echo "done (fake)"
EOF
# mpirun: drops its options and runs the program once.
prog "$B/bin/mpirun" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
  case $1 in -np|--bind-to) shift 2 ;; -*) shift ;; *) break ;; esac
done
exec "$@"
EOF
# squall_gpu_tests: the [layers] area crashes; the others write their JUnit file.
prog "$B/libexec/squall_gpu_tests" <<'EOF'
#!/bin/sh
case "$*" in *--list-tests*) exit 0 ;; "[layers]~[cpu-only]"*) echo "crashing (fake)" >&2; kill -SEGV $$ ;; esac
xml=""
while [ $# -gt 0 ]; do case $1 in -o) xml=$2; shift 2 ;; *) shift ;; esac; done
[ -z "$xml" ] || echo '<testsuites tests="1" failures="0"/>' >"$xml"
echo "All tests passed (fake)"
EOF
ln -s ../libexec/squall_gpu_tests "$B/bin/squall_gpu_tests"
prog "$B/bin/squall_gpu_mpi_tests" <<'EOF'
#!/bin/sh
echo "learners on 2 ranks (fake): $*"
EOF
prog "$B/bin/squall-env" <<'EOF'
#!/bin/sh
exec "$@"
EOF
# compute-sanitizer: memcheck runs the program; racecheck cannot use the device (as on gVisor).
prog "$work/tools/compute-sanitizer" <<'EOF'
#!/bin/sh
[ "$2" = racecheck ] && { echo "========= Error: Device not supported"; exit 1; }
shift 2
while [ $# -gt 0 ]; do case $1 in --*) shift 2 ;; *) break ;; esac; done
exec "$@"
EOF
export PATH="$work/tools:$PATH"

run() {  # run OUT [ENV...]: gpu-check --quick into OUT; prints its exit status
  local o=$1; shift
  env "$@" "$gpu_check" --bundle "$B" --data "$data" --out "$o" --quick >"$o.log" 2>&1 && echo 0 || echo $?
}
want() {  # want OUT LINE: summary.txt holds LINE
  grep -qxF "$2" "$1/summary.txt" || { cat "$1/summary.txt"; fail "summary.txt has no line '$2'"; }
}

o=$work/out1
mkdir -p "$o"
rc=$(run "$o")
[[ $rc == 1 ]] || { cat "$o.log"; fail "gpu-check exited $rc after a crashed area, not 1"; }
mapfile -t areas < <(sed -n '/^set(SQUALL_GPU_AREAS/,/)/p' "$(dirname "$gpu_check")/../tests/CMakeLists.txt" |
                     grep -o '"[^"]*"' | tr -d '"' | cut -d: -f1)
((${#areas[@]} >= 2)) || fail "found ${#areas[@]} gpu areas in tests/CMakeLists.txt"
for a in "${areas[@]}"; do
  [[ -f $o/gpu-tests-$a.txt ]] || fail "no log for area $a"
  if [[ $a == layers ]]; then
    want "$o" "gpu-tests:layers: FAIL (139)"
  else
    want "$o" "gpu-tests:$a: ok"
    [[ -s $o/gpu-tests-$a.xml ]] || fail "no JUnit file for area $a"
  fi
done
want "$o" "info: ok"
want "$o" "learners-mpi: ok"
want "$o" "train-2ranks: ok"
[[ -f $o/train-2ranks-summary.json ]] || fail "no train-2ranks-summary.json"
want "$o" "gpu-tests:bn-plain: ok"
want "$o" "nccl-shared-gpu: ok"
want "$o" "train-graphs: ok"
want "$o" "lenet5: ok"
want "$o" "sanitizer-memcheck: ok"
want "$o" 'sanitizer-racecheck: SKIP (compute-sanitizer cannot use this device here ("Device not supported"))'
[[ $(wc -l <"$o/summary.txt") == $((${#areas[@]} + 9)) ]] || { cat "$o/summary.txt"; fail "not one line per step"; }
echo "ok: a crashing area fails alone; the other $((${#areas[@]} - 1)) areas and every other step report (exit 1)"

o=$work/out2
mkdir -p "$o"
rc=$(run "$o" FAKE_LOSS=NaN)
[[ $rc == 1 ]] || fail "gpu-check exited $rc with a NaN loss, not 1"
want "$o" "train-2ranks: FAIL (1)"
echo "ok: a non-finite loss in the 2-rank run is a FAIL"

o=$work/out4
mkdir -p "$o"
rc=$(run "$o" FAKE_CAPTURED=0)
[[ $rc == 1 ]] || fail "gpu-check exited $rc when no learner replayed a capture, not 1"
want "$o" "train-graphs: FAIL (1)"
echo "ok: a run whose learners never replay a captured pass is a FAIL"

o=$work/out3
mkdir -p "$o"
rc=$(run "$o" FAKE_NO_GPU=1)
[[ $rc == 77 ]] || fail "gpu-check exited $rc without a GPU, not 77"
grep -q '^SKIP: no GPU here' "$o/summary.txt" || fail "no SKIP line without a GPU: $(cat "$o/summary.txt")"
echo "ok: without a GPU, exit 77 and a SKIP line"
echo PASS
