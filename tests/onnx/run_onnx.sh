#!/bin/sh
# ONNX export test: squall_onnx_probe exports every zoo model and writes squall's logits, then
# check_onnx.py validates the files with onnx.checker and runs them on onnxruntime.
# onnxruntime and numpy come from a virtual environment made here once (pinned versions) and
# reused; when it cannot be made (no venv module, no network for pip), exit 77: skipped.
# With SQUALL (the binary) and Debian's Fashion-MNIST, the command too: a LeNet-5 trained for a
# few steps with a checkpoint, `squall export --run` and --checkpoint, the files checked, and
# the refusals' exit codes. The files' metadata (docs/inference.md, "Metadata") is read back
# with onnxruntime and compared with the checkpoint's model.h5 (h5py, in the same environment):
# LeNet-5's, and a small climate U-Net's trained here on netCDF input (written with netCDF4),
# whose checkpoint names its channels and keeps its grid.
# usage: run_onnx.sh PYTHON SOURCE_DIR VENV_DIR DATA_DIR PROBE [SQUALL]
py=$1; src=$2; venv=$3; data=$4; probe=$5; squall=$6
fmnist=/usr/share/datasets/fashion-mnist
pins="onnxruntime==1.19.2 numpy==1.26.4"
onnx_pin="onnx==1.16.2"
meta_pins="h5py==3.11.0 netCDF4==1.7.2"
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

fail() { echo "onnx: squall export: $*"; exit 1; }
# h5py for reading the checkpoints back and netCDF4 for the climate model's input: the venv's,
# installed once (pinned); without them the metadata is not compared, and the test ends
# skipped, saying so.
meta_skip=""
if [ -n "$squall" ] && ! "$venv/bin/python" -c "import h5py, netCDF4" >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --retries 2 --timeout 30 $meta_pins ||
    meta_skip="pip cannot install $meta_pins: the ONNX files' metadata was not compared with the checkpoints"
fi
version=""
[ -n "$squall" ] && version=$("$squall" --version | sed 's/^squall //')
# meta FILE MODEL_H5 KIND: the file's metadata against the checkpoint's (unless h5py is missing).
meta() {
  [ -z "$meta_skip" ] || return 0
  "$venv/bin/python" "$src/check_onnx.py" meta "$1" "$2" "$3" "$version" || fail "the metadata of $1 is not its checkpoint's"
}

if [ -n "$squall" ] && [ -d "$fmnist" ]; then
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
  meta "$data/run.onnx" "$ck/model.h5" image
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

# A climate U-Net on generated CAM5-like fields as a netCDF file (16 named channels, a lat/lon
# grid, three classes): its metadata names them all.
if [ -n "$squall" ] && [ -z "$meta_skip" ]; then
  raw="$data/climate-raw" clim="$data/climate"
  "$squall" data climate --out "$raw" --samples 4 --height 16 --width 24 >"$data/climate.log" 2>&1 ||
    { cat "$data/climate.log"; fail "generating climate fields failed"; }
  mkdir -p "$clim" && cp "$raw/stats.h5" "$clim/" || fail "cannot copy $raw/stats.h5"
  "$venv/bin/python" "$src/check_onnx.py" netcdf "$raw" "$clim/cam5.nc" || fail "writing the climate fields as netCDF failed"
  "$squall" train --config "$src/../../configs/climate-tiny.toml" --set data.train="$clim" --set data.test="$clim" \
    --set run.dir="$data/climate-run" --set train.max_steps=2 --set train.batch_size=2 --set model.width=4 \
    --set model.depth=2 --set schedule.warmup_steps=0 >"$data/climate.log" 2>&1 ||
    { cat "$data/climate.log"; fail "training the climate model to export failed"; }
  "$squall" export --run "$data/climate-run" --out "$data/climate.onnx" || fail "--run of the climate model failed"
  meta "$data/climate.onnx" "$data/climate-run/checkpoints/step-00000002/model.h5" climate
  echo "onnx: squall export writes the checkpoint's normalisation, channels, grid and classes as metadata"
fi
rm -rf "$data"
if [ -n "$meta_skip" ]; then
  echo "SKIP: $meta_skip"
  exit 77
fi
