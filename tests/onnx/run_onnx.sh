#!/bin/sh
# ONNX export test: squall_onnx_probe exports every zoo model and writes squall's logits, then
# check_onnx.py validates the files with onnx.checker and runs them on onnxruntime.
# onnxruntime and numpy come from a virtual environment made here once (pinned versions) and
# reused; when it cannot be made (no venv module, no network for pip), exit 77: skipped.
# With SQUALL (the binary) and Debian's Fashion-MNIST, the command too: a LeNet-5 trained for a
# few steps with a checkpoint, `squall export --run` and --checkpoint, the files checked, and
# the refusals' exit codes.
# usage: run_onnx.sh PYTHON SOURCE_DIR VENV_DIR DATA_DIR PROBE [SQUALL]
py=$1; src=$2; venv=$3; data=$4; probe=$5; squall=$6
fmnist=/usr/share/datasets/fashion-mnist
pins="onnxruntime==1.19.2 numpy==1.26.4"
onnx_pin="onnx==1.16.2"
skip() { echo "SKIP: $*"; exit 77; }

[ -n "$py" ] && "$py" -c "import venv" >/dev/null 2>&1 || skip "no Python interpreter with the venv module (install python3-venv)"
stamp="$venv/.squall-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ] || ! "$venv/bin/python" -c "import onnxruntime, numpy" >/dev/null 2>&1; then
  rm -rf "$venv"
  "$py" -m venv "$venv" || skip "cannot create a virtual environment in $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --retries 2 --timeout 30 $pins ||
    { rm -rf "$venv"; skip "pip cannot install $pins"; }
  echo "$pins" > "$stamp"
fi
# onnx.checker: the interpreter's own onnx (Debian's python3-onnx), else one in the venv.
checker_py=$py
if ! "$py" -c "import onnx" >/dev/null 2>&1; then
  checker_py=$venv/bin/python
  "$checker_py" -c "import onnx" >/dev/null 2>&1 || "$checker_py" -m pip install --quiet --disable-pip-version-check --retries 2 --timeout 30 "$onnx_pin" ||
    skip "no onnx package for the checker (install python3-onnx)"
fi

rm -rf "$data" && mkdir -p "$data" || exit 1
"$probe" "$data" || { echo "onnx: the probe failed"; exit 1; }
"$checker_py" "$src/check_onnx.py" checker "$data" || { echo "onnx: onnx.checker refused a model"; exit 1; }
"$venv/bin/python" "$src/check_onnx.py" run "$data" || exit 1

if [ -n "$squall" ] && [ -d "$fmnist" ]; then
  fail() { echo "onnx: squall export: $*"; exit 1; }
  run="$data/run"
  "$squall" train --config "$src/../../configs/fashion-mnist-lenet5.toml" --set run.dir="$run" \
    --set train.epochs=1 --set data.train_samples=256 --set data.test_samples=64 --set checkpoint.every_steps=4 \
    --set schedule.warmup_steps=0 \
    >"$data/train.log" 2>&1 || { cat "$data/train.log"; fail "training the model to export failed"; }
  "$squall" export --run "$run" --format onnx --out "$data/run.onnx" || fail "--run failed"
  ck=$(ls -d "$run"/checkpoints/step-* | tail -n 1)
  "$squall" export --checkpoint "$ck" --out "$data/ck.onnx" || fail "--checkpoint failed"
  cmp -s "$data/run.onnx" "$data/ck.onnx" || fail "--run and --checkpoint of the same checkpoint differ"
  for f in run ck; do
    "$checker_py" -c "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)" \
      "$data/$f.onnx" || fail "onnx.checker refused $f.onnx"
  done
  "$venv/bin/python" "$src/check_onnx.py" cli "$data/run.onnx" 1 28 28 10 || exit 1
  "$squall" export --run "$run" --format tflite --out "$data/x.onnx" >/dev/null 2>&1
  [ $? -eq 2 ] || fail "an unknown --format does not exit 2"
  "$squall" export --out "$data/x.onnx" >/dev/null 2>&1
  [ $? -eq 2 ] || fail "no --run or --checkpoint does not exit 2"
  err=$("$squall" export --run "$run" --out "$data/no/such/dir/x.onnx" 2>&1)
  [ $? -eq 1 ] || fail "an unwritable --out does not exit 1"
  case "$err" in *"$data/no/such/dir/x.onnx"*) ;; *) fail "the error does not name the file: $err" ;; esac
  [ ! -e "$data/x.onnx" ] || fail "a refused export left a file"
  echo "onnx: squall export --run/--checkpoint ok"
else
  echo "onnx: squall export's command not tested (no squall binary given, or no $fmnist)"
fi
rm -rf "$data"
