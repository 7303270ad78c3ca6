#!/usr/bin/env bash
# bundle:gpu-check: scripts/gpu-check as it runs on a lease machine (--lease, not a rehearsal),
# against a made-up lease folder: a squall-bundle.tar.xz of small shell programs standing in
# for squall, mpirun and the test binaries, tiny data files, and a python, nvidia-smi and
# compute-sanitizer of the same kind (the real ones need a GPU).
#   test_gpu_check.sh GPU_CHECK
# Checks: the bundle is unpacked from the lease folder and part 2's xz data decompressed; each
# gpu test area runs in its own process, its Catch2 XML report streamed and made a JUnit file,
# a crashing one is a CRASH naming the case it crashed in, one killed at its limit a TIMEOUT
# naming the case that was running (summary.md and the JUnit file), a failed case is named, and
# the rest go on; a bench's last "figure:" and "ratio:" lines fill the summary, a bench without
# them shows "-"; the benches get a --deadline on the wall clock beside --budget, and keep their
# squall runs in runs/; the torch step warms the import before them; a non-finite loss and a
# run whose learners never replay a capture are FAILs; the MPI preflight passes, falls back to
# its settings (which the later steps then run with), or fails and the MPI steps skip naming
# it; NCCL_DEBUG=WARN reaches the steps; part 2's --budget auto reads part 1's state (and takes
# 240 s without it); the NCCL refusal and the sanitizer's "Device not supported" (a named SKIP)
# are read right; the exit status is 1 after a failure, 0 without, 77 with no GPU; --out holds
# summary.md and one tarball.
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
# The benches print their arguments and keep a fake squall run where SQUALL_BENCH_RUNS says;
# the torch step's script (read from stdin, "- cuda") is answered as if torch were there.
prog "$work/tools/python" <<EOF
#!/bin/sh
case "\$*" in
  *torch.cuda*) [ -n "\${FAKE_NO_GPU:-}" ] && echo "" || echo "NVIDIA H100 80GB HBM3 (fake)"; exit 0 ;;
  "- cuda") cat >/dev/null; echo "figure: torch 2.11 (fake): import 0.1 s"; echo "ratio: -"; exit 0 ;;
  *bench/gpu_training.py*--group\ resnet20*) echo "| case | squall | PyTorch |"; echo "| f32 | 1 | 1 |"; exit 0 ;;
  *bench/*.py*)
    echo "args: \$*"
    [ -n "\${SQUALL_BENCH_RUNS:-}" ] && mkdir -p "\$SQUALL_BENCH_RUNS" && echo "squall stderr (fake)" >"\$SQUALL_BENCH_RUNS/01-fake.log"
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
  info) echo "squall (fake): ${FAKE_RANKS:-1} rank(s)"; echo "  cuda backend: CUDA 13.0, cuDNN 9 (fake)"
        echo "NCCL_DEBUG=${NCCL_DEBUG:-unset}"; exit 0 ;;
  bench) echo "  67108864  nccl   20.0  3355.4  0.000"; exit 0 ;;
  data) while [ $# -gt 0 ]; do case $1 in --out) mkdir -p "$2"; shift 2 ;; *) shift ;; esac; done; exit 0 ;;
  train) ;;
  *) echo "fake squall: $1?"; exit 2 ;;
esac
case "$*" in *parallel.device_allreduce=nccl*)
  echo "squall: error: NCCL needs one GPU per rank, but ranks 0 and 1 share GPU 0000:01:00.0 on host fake"; exit 1 ;;
esac
captured=null world=1
case "$*" in *parallel.cuda_graphs=true*) captured=${FAKE_CAPTURED:-2} ;; esac
# A split on the one GPU: parallel.halo_exchange = auto takes host memory and says why.
case "$*" in *parallel.spatial=*)
  echo "parallel.spatial = [2, 1]: 1 group(s) of 2 ranks; halos through host memory over MPI (NCCL needs one GPU per rank, but ranks 0 and 1 share GPU 0000:01:00.0 on host fake)" ;;
esac
[ -n "${FAKE_RANKS:-}" ] && world=$FAKE_RANKS
dir=""
while [ $# -gt 0 ]; do
  case $1 in --set) case $2 in run.dir=*) dir=${2#run.dir=} ;; esac; shift 2 ;; *) shift ;; esac
done
mkdir -p "$dir"
printf '{"backend": "cuda", "world_size": %s, "steps": 40, "samples_per_s": 1000.0, "parallel": {"captured_learners": %s, "spatial": {"halo": {"exchange": "host", "exposed_s": 0.01, "hidden_s": 0.2}}}, "final": {"train_loss": %s, "test_accuracy": 0.9}}\n' \
  "$world" "$captured" "${FAKE_LOSS:-0.5}" >"$dir/summary.json"
for step in 1 2 3 4 5 6; do printf '{"kind": "train", "step": %s, "loss": %s}\n' "$step" "${FAKE_LOSS:-0.5}"; done >"$dir/metrics.jsonl"
echo "done (fake)"
EOF
# mpirun: drops its options and runs the program once, telling it the rank count. FAKE_MPI=broken:
# it never starts; FAKE_MPI=fallback: only with the preflight's fallback settings (pml ob1).
prog "$B/libexec/mpirun" <<'EOF'
#!/bin/sh
case ${FAKE_MPI:-}:${OMPI_MCA_pml:-} in
  broken:*|fallback:|fallback:[!o]*) echo "mpirun (fake): MPI_INIT failed"; exit 1 ;;
esac
n=1
while [ $# -gt 0 ]; do
  case $1 in -np) n=$2; shift 2 ;; --bind-to) shift 2 ;; -*) shift ;; *) break ;; esac
done
FAKE_RANKS=$n exec "$@"
EOF
# squall_gpu_tests: Catch2's XML reporter, as it streams (-r xml -d yes -o FILE): the [layers]
# area crashes in its second case; with FAKE_HANG the [cuda] area hangs in its second case;
# with FAKE_FAIL the [cpu] area's second case fails a CHECK; the others pass 2 cases.
prog "$B/libexec/squall_gpu_tests" <<'EOF'
#!/bin/sh
case "$*" in *--list-tests*) exit 0 ;; esac
area=$1 xml=/dev/null
while [ $# -gt 0 ]; do case $1 in -o) xml=$2; shift 2 ;; *) shift ;; esac; done
begin() { printf '    <TestCase name="%s" tags="[x]" filename="/src/tests/unit/test_x.cpp" line="%s">\n' "$1" "$2" >>"$xml"; }
end() { printf '      <OverallResult success="%s" durationInSeconds="0.25"/>\n    </TestCase>\n' "$1" >>"$xml"; }
printf '<?xml version="1.0" encoding="UTF-8"?>\n<Catch name="squall_gpu_tests">\n  <Group name="squall_gpu_tests">\n' >"$xml"
begin "first case" 10; end true
case $area in
  "[layers]~[cpu-only]") begin "conv &amp; pool backward" 20; echo "crashing (fake)" >&2; kill -SEGV $$ ;;
  "[cuda]~[cpu-only]") [ -n "${FAKE_HANG:-}" ] && { begin "graph capture waits" 30; sleep 600; } ;;
  "[cpu]~[cpu-only]") if [ -n "${FAKE_FAIL:-}" ]; then
      begin "b" 40
      printf '      <Expression success="false" type="CHECK" filename="/src/tests/unit/test_x.cpp" line="45">\n' >>"$xml"
      printf '        <Original>\n          x == y\n        </Original>\n        <Expanded>\n          1 == 2\n' >>"$xml"
      printf '        </Expanded>\n      </Expression>\n' >>"$xml"
      end false
      printf '  </Group>\n</Catch>\n' >>"$xml"
      exit 1
    fi ;;
esac
begin "b" 40; end true
printf '  </Group>\n</Catch>\n' >>"$xml"
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
export SQUALL_GPU_CHECK_STATE=$work/state   # part 1 leaves it, part 2's --budget auto reads it

run() {  # run NAME PART [ENV...] [-- GPU_CHECK_ARGS...]: gpu-check --part PART into $work/NAME; prints its exit status
  local o=$work/$1 p=$2 envs=()
  shift 2
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  env "${envs[@]}" "$gpu_check" --lease "$L" --part "$p" --python "$work/tools/python" --out "$o" "$@" >"$o.log" 2>&1 &&
    echo 0 || echo $?
}
in_tarball() {  # in_tarball NAME PART PATH: the file's text
  tar -xzf "$work/$1/gpu-check-part$2.tar.gz" -O "gpu-check-part$2/$3"
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
p1_began=$(date +%s)
rc=$(run p1 1)
[[ $rc == 1 ]] || { cat "$work/p1.log"; fail "part 1 exited $rc after a crashed area, not 1"; }
[[ $(find "$work/p1" -type f | wc -l) == 2 && -f $work/p1/summary.md && -f $work/p1/gpu-check-part1.tar.gz ]] ||
  fail "--out holds $(find "$work/p1" | tr '\n' ' '), not summary.md and gpu-check-part1.tar.gz"
want p1 setup ok
want p1 gpu ok "NVIDIA H100 80GB HBM3"
want p1 mpi ok "2 ranks start"
want p1 info ok "CUDA 13.0, cuDNN 9 (fake)"
want p1 torch ok "torch 2.11 (fake): import 0.1 s"
want p1 bench:lenet5 ok "fake 1250 samples/s" 1.25
want p1 bench:resnet20 ok - -
want p1 tests:ops ok "2 cases, 0 failed"
want p1 tests:cuda ok
want p1 tests:layers "CRASH (SIGSEGV)" "2 cases, 0 failed; CRASH in 'conv & pool backward'"
want p1 train:2ranks ok
want p1 mpi:learners ok
want p1 train:graphs ok
want p1 allreduce ok
for a in ops cuda layers; do tarball_has p1 1 "junit/$a.xml"; tarball_has p1 1 "junit/$a.catch.xml"; done
tarball_has p1 1 logs/tests-layers.log
for r in train-2ranks train-graphs; do tarball_has p1 1 "runs/$r-summary.json"; tarball_has p1 1 "runs/$r.log"; done
tarball_has p1 1 runs/bench-lenet5/01-fake.log
tarball_has p1 1 runs/bench-deeplab/01-fake.log
grep -q '<error message="running when the step ended: CRASH (SIGSEGV)"' <(in_tarball p1 1 junit/layers.xml) ||
  fail "junit/layers.xml does not name the case the area crashed in"
grep -q '<testcase classname="layers" name="conv &amp; pool backward"' <(in_tarball p1 1 junit/layers.xml) ||
  fail "junit/layers.xml lacks the crashed case, its name escaped"
grep -qF 'running when the step ended: conv & pool backward (test_x.cpp:20)' "$work/p1/summary.md" ||
  fail "summary.md does not name the case tests:layers crashed in"
grep -q '^NCCL_DEBUG=WARN$' <(in_tarball p1 1 logs/info.log) || fail "NCCL_DEBUG=WARN did not reach the steps"
# Each bench got --budget and a --deadline on the wall clock, within the step's limit of now.
args=$(grep -a '^args: ' <(in_tarball p1 1 logs/bench-lenet5.log))
deadline=$(grep -o -- '--deadline [0-9.]*' <<<"$args" | cut -d' ' -f2)
[[ $args == *"--budget "* && -n $deadline ]] || fail "bench:lenet5 got no --budget or no --deadline: $args"
awk -v d="$deadline" -v a="$p1_began" -v b="$(date +%s)" 'BEGIN { exit !(d > a && d < b + 60) }' ||
  fail "bench:lenet5's --deadline $deadline is not within its step's limit (began $p1_began)"
grep -q '^| fake | 1250 | 1000 | 1.25 |' "$work/p1/summary.md" || fail "summary.md lacks bench:lenet5's table"
[[ $(tail -n 1 "$work/p1/summary.md") == "| allreduce |"* ]] || fail "summary.md does not end with the summary table"
[[ $(tail -n 1 "$work/p1.log") == "| allreduce |"* ]] || fail "stdout does not end with the summary table"
echo "ok: part 1 from a lease folder; a crashing area is a CRASH naming its case and the rest run; bench figures read"

# --- a NaN loss, learners that never replay a capture, a failed case, a hung area ------------------
rc=$(run p1bad 1 FAKE_LOSS=NaN FAKE_CAPTURED=0 FAKE_FAIL=1 FAKE_HANG=1 -- --inject limit:tests:cuda:3)
[[ $rc == 1 ]] || fail "gpu-check exited $rc with a NaN loss, not 1"
want p1bad train:2ranks "FAIL (1)"
want p1bad train:graphs "FAIL (1)"
grep -q 'FAIL: captured_learners 0' "$work/p1bad/summary.md" || fail "summary.md does not say why train:graphs failed"
want p1bad tests:ops "FAIL (1)" "2 cases, 1 failed"
grep -qF 'failed: b (test_x.cpp:45: CHECK( x == y ) with 1 == 2)' "$work/p1bad/summary.md" ||
  fail "summary.md does not name the failed case and its check"
want p1bad tests:cuda "TIMEOUT (limit 3 s)" "2 cases, 0 failed; TIMEOUT in 'graph capture waits'"
grep -qF 'running when the step ended: graph capture waits (test_x.cpp:30)' "$work/p1bad/summary.md" ||
  fail "summary.md does not name the case running when tests:cuda was killed"
grep -q 'name="graph capture waits" time="0.000">' <(in_tarball p1bad 1 junit/cuda.xml) ||
  fail "junit/cuda.xml lacks the case running at the kill"
grep -q 'name="first case" time="0.250"/>' <(in_tarball p1bad 1 junit/cuda.xml) ||
  fail "junit/cuda.xml lacks the case that passed before the kill, with its seconds"
echo "ok: a non-finite loss and a run whose learners never replay are FAILs; a failed case and the case" \
     "running when its area was killed are named"

# --- the MPI preflight: a fallback that the later steps keep, and no MPI at all ------------------------
only=(-- --only "bench:lenet5,mpi:learners,train:2ranks,allreduce")
rc=$(run mpifb 1 FAKE_MPI=fallback "${only[@]}")
[[ $rc == 0 ]] || fail "part 1 with the fallback exited $rc, not 0"
grep -q '^| tests:ops |' "$work/mpifb/summary.md" && fail "--only ran a step it does not name"
want mpifb mpi ok "2 ranks start only with the fallback (OMPI_MCA_btl=self,vader, pml ob1, plm isolated, ...)"
want mpifb train:2ranks ok
want mpifb allreduce ok
grep -q '^export OMPI_MCA_pml=ob1$' <(in_tarball mpifb 1 env.txt) || fail "env.txt does not list the fallback's settings"
rc=$(run nompi 1 FAKE_MPI=broken "${only[@]}")
want nompi mpi "FAIL (1)" "no 2 ranks start"
for s in train:2ranks mpi:learners allreduce; do
  want nompi "$s" "SKIP (MPI preflight (step mpi): no 2 ranks start, also not with the fallback settings (logs/mpi.log))"
done
want nompi bench:lenet5 ok
echo "ok: the MPI preflight falls back to Open MPI's settings and the later steps keep them; without MPI they skip"

# --- part 2: xz data, the sanitizers, the NCCL refusal, its budget -----------------------------------
# Part 1 began 600 s ago on this machine: 900 - 120 (start) - 600 - 30 (margin) = 150 s.
echo "part1_started_ms=$((($(date +%s) - 600) * 1000))" >"$SQUALL_GPU_CHECK_STATE"
rc=$(run p2 2)
[[ $rc == 0 ]] || { cat "$work/p2/summary.md"; fail "part 2 exited $rc, not 0"; }
grep -qE 'of a 1(49|50) s budget \(auto: part 1 began 60[01] s ago' "$work/p2/summary.md" ||
  { head -3 "$work/p2/summary.md"; fail "part 2's auto budget is not 150 s after a part 1 begun 600 s ago"; }
# A rerun of part 1 with --budget auto: the same reckoning; the first part 1's start is kept.
state_before=$(cat "$SQUALL_GPU_CHECK_STATE")
rc=$(run p1rerun 1 -- --only info --budget auto)
[[ $rc == 0 ]] || fail "a rerun of part 1's info exited $rc"
grep -qE 'of a 1[0-9][0-9] s budget \(auto: part 1 began 6[0-9][0-9] s ago' "$work/p1rerun/summary.md" ||
  { head -3 "$work/p1rerun/summary.md"; fail "a rerun of part 1 with --budget auto did not reckon from the first part 1"; }
[[ $(cat "$SQUALL_GPU_CHECK_STATE") == "$state_before" ]] || fail "a rerun of part 1 replaced the first part 1's start"
rm -f "$SQUALL_GPU_CHECK_STATE"
rc=$(run p2fixed 2)
grep -q 'of a 240 s budget (auto: no part 1 on this machine' "$work/p2fixed/summary.md" ||
  fail "part 2 without part 1's state does not take the fixed 240 s"
want p2 setup ok
want p2 lenet5:accuracy ok "test accuracy 0.9000 after 40 steps"
want p2 nccl:shared-gpu ok
want p2 train:spatial ok "[2, 1]: losses within 0.0e+00 of unsplit; halos by host, 0.010 s exposed, 0.200 s hidden"
want p2 bench:mixed-precision ok "fake 1250 samples/s" 1.25
want p2 sanitizer:memcheck ok "ERROR SUMMARY: 0 errors"
want p2 sanitizer:racecheck 'SKIP (compute-sanitizer cannot use this device here ("Device not supported"))'
want p2 tests:bn-plain ok
want p2 mpi ok
tarball_has p2 2 runs/lenet5.log
tarball_has p2 2 runs/lenet5-summary.json
tarball_has p2 2 runs/nccl-shared-gpu.log
tarball_has p2 2 runs/spatial-2-summary.json
tarball_has p2 2 runs/bench-mixed-precision/01-fake.log
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
