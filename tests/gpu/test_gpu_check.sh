#!/usr/bin/env bash
# bundle:gpu-check: scripts/gpu-check as it runs on a lease machine (--lease, not a rehearsal),
# against a made-up lease folder: a squall-bundle.tar.xz of small shell programs standing in
# for squall, mpirun and the test binaries, tiny data files, and a python, nvidia-smi and
# compute-sanitizer of the same kind (the real ones need a GPU).
#   test_gpu_check.sh GPU_CHECK
# Checks: the bundle is unpacked from the lease folder and part 2's xz data decompressed; each
# gpu test area runs in its own process with its own JUnit file, a crashing one is a CRASH and
# the rest go on; a bench's last "figure:" and "ratio:" lines fill the summary, a bench without
# them shows "-"; a non-finite loss and a run whose learners never replay a capture are FAILs;
# the NCCL refusal and the sanitizer's "Device not supported" (a named SKIP) are read right;
# the exit status is 1 after a failure, 0 without, 77 with no GPU; --out holds summary.md and
# one tarball.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 GPU_CHECK" >&2; exit 2; }
gpu_check=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
real_python=$(command -v python3) || { echo "SKIP: needs python3"; exit 77; }
"$real_python" -c 'import lzma' 2>/dev/null || { echo "SKIP: $real_python has no lzma module"; exit 77; }
command -v xz >/dev/null || { echo "SKIP: needs xz"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-gpu-check.XXXXXX")
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
B=$work/stage/squall-bundle
L=$work/lease
mkdir -p "$B/bin" "$B/libexec" "$work/tools" "$L/data/fashion-mnist-10k" "$L/data/fashion-mnist-train"

prog() { cat >"$1"; chmod +x "$1"; }
# python: PyTorch "sees a GPU" unless FAKE_NO_GPU is set; the benches print a table and the
# contract's last two lines (resnet20's leaves them out, as an older bench would); anything
# else is the real interpreter.
prog "$work/tools/python" <<EOF
#!/bin/sh
case "\$*" in
  *torch.cuda*) [ -n "\${FAKE_NO_GPU:-}" ] && echo "" || echo "NVIDIA H100 80GB HBM3 (fake)"; exit 0 ;;
  *bench/gpu_training.py*--group\ resnet20*) echo "| case | squall | PyTorch |"; echo "| f32 | 1 | 1 |"; exit 0 ;;
  *bench/*.py*)
    echo "| case | squall samples/s | PyTorch samples/s | ratio |"
    echo "|---|---|---|---|"
    echo "| fake | 1250 | 1000 | 1.25 |"
    echo "figure: fake 1250 samples/s"
    echo "ratio: 1.25"
    exit 0 ;;
esac
exec "$real_python" "\$@"
EOF
prog "$work/tools/nvidia-smi" <<'EOF'
#!/bin/sh
[ -n "${FAKE_NO_GPU:-}" ] && { echo "No devices were found"; exit 6; }
case "$*" in -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-fake)" ;; *) echo "name, driver_version"; echo "H100, 580" ;; esac
EOF
# compute-sanitizer: memcheck runs the program; racecheck cannot use the device (as on gVisor).
prog "$work/tools/compute-sanitizer" <<'EOF'
#!/bin/sh
[ "$2" = racecheck ] && { echo "========= Error: Device not supported"; exit 1; }
shift 2
while [ $# -gt 0 ]; do case $1 in --*) shift 2 ;; *) break ;; esac; done
"$@"
echo "========= ERROR SUMMARY: 0 errors"
EOF
# squall: info, bench allreduce, and train writing a summary.json (loss FAKE_LOSS, default finite).
prog "$B/libexec/squall" <<'EOF'
#!/bin/sh
case $1 in
  info) echo "squall (fake): 1 rank(s)"; echo "  cuda backend: CUDA 13.0, cuDNN 9 (fake)"; exit 0 ;;
  bench) echo "  67108864  nccl   20.0  3355.4  0.000"; exit 0 ;;
  train) ;;
  *) echo "fake squall: $1?"; exit 2 ;;
esac
case "$*" in *parallel.device_allreduce=nccl*)
  echo "squall: error: NCCL needs one GPU per rank, but ranks 0 and 1 share GPU 0000:01:00.0 on host fake"; exit 1 ;;
esac
captured=null world=1
case "$*" in *parallel.cuda_graphs=true*) captured=${FAKE_CAPTURED:-2} ;; esac
[ -n "${FAKE_RANKS:-}" ] && world=$FAKE_RANKS
dir=""
while [ $# -gt 0 ]; do
  case $1 in --set) case $2 in run.dir=*) dir=${2#run.dir=} ;; esac; shift 2 ;; *) shift ;; esac
done
mkdir -p "$dir"
printf '{"backend": "cuda", "world_size": %s, "steps": 40, "samples_per_s": 1000.0, "parallel": {"captured_learners": %s}, "final": {"train_loss": %s, "test_accuracy": 0.9}}\n' \
  "$world" "$captured" "${FAKE_LOSS:-0.5}" >"$dir/summary.json"
echo "done (fake)"
EOF
# mpirun: drops its options and runs the program once, telling it the rank count.
prog "$B/libexec/mpirun" <<'EOF'
#!/bin/sh
n=1
while [ $# -gt 0 ]; do
  case $1 in -np) n=$2; shift 2 ;; --bind-to) shift 2 ;; -*) shift ;; *) break ;; esac
done
FAKE_RANKS=$n exec "$@"
EOF
# squall_gpu_tests: the [layers] area crashes; the others write their JUnit file.
prog "$B/libexec/squall_gpu_tests" <<'EOF'
#!/bin/sh
case "$*" in *--list-tests*) exit 0 ;; "[layers]~[cpu-only]"*) echo "crashing (fake)" >&2; kill -SEGV $$ ;; esac
xml=""
while [ $# -gt 0 ]; do case $1 in -o) xml=$2; shift 2 ;; *) shift ;; esac; done
[ -z "$xml" ] || echo '<testsuites><testsuite tests="2" failures="0"><testcase name="a"/><testcase name="b"/></testsuite></testsuites>' >"$xml"
echo "All tests passed (fake)"
EOF
prog "$B/libexec/squall_gpu_mpi_tests" <<'EOF'
#!/bin/sh
echo "learners on 2 ranks (fake): $*"
EOF
for p in squall mpirun squall_gpu_tests squall_gpu_mpi_tests; do
  prog "$B/bin/$p" <<EOF
#!/bin/sh
exec "\$(dirname "\$0")/../libexec/$p" "\$@"
EOF
done
prog "$B/bin/squall-env" <<'EOF'
#!/bin/sh
exec "$@"
EOF
echo "squall bundle (fake)" >"$B/MANIFEST"
tar -C "$work/stage" -cf - squall-bundle | xz -1 >"$L/squall-bundle.tar.xz"
echo images >"$L/data/fashion-mnist-10k/t10k-images-idx3-ubyte.gz"
echo labels >"$L/data/fashion-mnist-10k/t10k-labels-idx1-ubyte.gz"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do echo "$f" | xz >"$L/data/fashion-mnist-train/$f.xz"; done
export PATH="$work/tools:$PATH"

run() {  # run NAME PART [ENV...]: gpu-check --part PART into $work/NAME; prints its exit status
  local o=$work/$1 p=$2
  shift 2
  env "$@" "$gpu_check" --lease "$L" --part "$p" --python "$work/tools/python" --out "$o" >"$o.log" 2>&1 && echo 0 || echo $?
}
# want NAME STEP VERDICT [FIGURE [RATIO]]: the summary's row for STEP.
trim() { sed 's/^ *//; s/ *$//' <<<"$1"; }
want() {
  local row verdict figure ratio
  row=$(grep -F "| $2 | " "$work/$1/summary.md" | grep -F -m1 "| $2 | ") || { cat "$work/$1/summary.md"; fail "$1: no row for $2"; }
  IFS='|' read -r _ _ verdict _ figure ratio _ <<<"$row"
  verdict=$(trim "$verdict") figure=$(trim "$figure") ratio=$(trim "$ratio")
  [[ $verdict == "$3" ]] || { cat "$work/$1/summary.md"; fail "$1: $2 is '$verdict', not '$3'"; }
  [[ $# -lt 4 || $figure == "$4" ]] || fail "$1: $2's figure is '$figure', not '$4'"
  [[ $# -lt 5 || $ratio == "$5" ]] || fail "$1: $2's ratio is '$ratio', not '$5'"
}
tarball_has() {  # tarball_has NAME PART PATH
  local list
  list=$(tar -tzf "$work/$1/gpu-check-part$2.tar.gz")
  grep -qx "gpu-check-part$2/$3" <<<"$list" || fail "$1: the tarball has no $3"
}

# --- part 1: a crashing area, benches with and without the contract's lines ---------------------
rc=$(run p1 1)
[[ $rc == 1 ]] || { cat "$work/p1.log"; fail "part 1 exited $rc after a crashed area, not 1"; }
[[ $(find "$work/p1" -type f | wc -l) == 2 && -f $work/p1/summary.md && -f $work/p1/gpu-check-part1.tar.gz ]] ||
  fail "--out holds $(find "$work/p1" | tr '\n' ' '), not summary.md and gpu-check-part1.tar.gz"
want p1 setup ok
want p1 gpu ok "NVIDIA H100 80GB HBM3"
want p1 info ok "CUDA 13.0, cuDNN 9 (fake)"
want p1 bench:lenet5 ok "fake 1250 samples/s" 1.25
want p1 bench:resnet20 ok - -
want p1 tests:ops ok "2 cases, 0 failed"
want p1 tests:cuda ok
want p1 tests:layers "CRASH (SIGSEGV)"
want p1 train:2ranks ok
want p1 mpi:learners ok
want p1 train:graphs ok
want p1 allreduce ok
for a in ops cuda; do tarball_has p1 1 "junit/$a.xml"; done
tarball_has p1 1 logs/tests-layers.log
tarball_has p1 1 runs/train-2ranks-summary.json
grep -q '^| fake | 1250 | 1000 | 1.25 |' "$work/p1/summary.md" || fail "summary.md lacks bench:lenet5's table"
[[ $(tail -n 1 "$work/p1/summary.md") == "| allreduce |"* ]] || fail "summary.md does not end with the summary table"
[[ $(tail -n 1 "$work/p1.log") == "| allreduce |"* ]] || fail "stdout does not end with the summary table"
echo "ok: part 1 from a lease folder; a crashing area is a CRASH and the rest run; bench figures read"

# --- a NaN loss, learners that never replay a capture ----------------------------------------------
rc=$(run p1bad 1 FAKE_LOSS=NaN FAKE_CAPTURED=0)
[[ $rc == 1 ]] || fail "gpu-check exited $rc with a NaN loss, not 1"
want p1bad train:2ranks "FAIL (1)"
want p1bad train:graphs "FAIL (1)"
grep -q 'FAIL: captured_learners 0' "$work/p1bad/summary.md" || fail "summary.md does not say why train:graphs failed"
echo "ok: a non-finite loss and a run whose learners never replay a captured pass are FAILs"

# --- part 2: xz data, the sanitizers, the NCCL refusal ----------------------------------------------
rc=$(run p2 2)
[[ $rc == 0 ]] || { cat "$work/p2/summary.md"; fail "part 2 exited $rc, not 0"; }
want p2 setup ok
want p2 lenet5:accuracy ok "test accuracy 0.9000 after 40 steps"
want p2 nccl:shared-gpu ok
want p2 bench:mixed-precision ok "fake 1250 samples/s" 1.25
want p2 sanitizer:memcheck ok "ERROR SUMMARY: 0 errors"
want p2 sanitizer:racecheck 'SKIP (compute-sanitizer cannot use this device here ("Device not supported"))'
want p2 tests:bn-plain ok
grep -q 'train-images-idx3-ubyte$' <(tar -xzf "$work/p2/gpu-check-part2.tar.gz" -O gpu-check-part2/logs/setup.log) ||
  fail "part 2's setup did not decompress the training images"
echo "ok: part 2 decompresses the full data, reads the sanitizers' verdicts and the NCCL refusal"

# --- no GPU ------------------------------------------------------------------------------------------
rc=$(run nogpu 1 FAKE_NO_GPU=1)
[[ $rc == 77 ]] || fail "gpu-check exited $rc without a GPU, not 77"
want nogpu gpu "SKIP (no GPU here: nvidia-smi lists none and PyTorch ($work/tools/python) sees none)"
grep -q '^| info |' "$work/nogpu/summary.md" && fail "steps ran after the gpu step found no GPU"
echo "ok: without a GPU, exit 77 and a SKIP naming why"
echo PASS
