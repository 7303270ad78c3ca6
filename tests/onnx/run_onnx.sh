#!/bin/sh
# ONNX export test: squall_onnx_probe exports every zoo model and writes squall's logits, then
# check_onnx.py validates the files with onnx.checker and runs them on onnxruntime.
# onnxruntime and numpy come from a virtual environment made here once (pinned versions) and
# reused; when it cannot be made (no venv module, no network for pip), exit 77: skipped.
# usage: run_onnx.sh PYTHON SOURCE_DIR VENV_DIR DATA_DIR PROBE
py=$1; src=$2; venv=$3; data=$4; probe=$5
pins="onnxruntime==1.19.2 numpy==1.26.4"
onnx_pin="onnx==1.16.2"
skip() { echo "SKIP: $*"; exit 77; }

[ -n "$py" ] && "$py" -c "import venv" >/dev/null 2>&1 || skip "no Python interpreter with the venv module (install python3-venv)"
stamp="$venv/.squall-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ] || ! "$venv/bin/python" -c "import onnxruntime, numpy" >/dev/null 2>&1; then
  rm -rf "$venv"
  "$py" -m venv "$venv" || skip "cannot create a virtual environment in $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $pins ||
    { rm -rf "$venv"; skip "pip cannot install $pins"; }
  echo "$pins" > "$stamp"
fi
# onnx.checker: the interpreter's own onnx (Debian's python3-onnx), else one in the venv.
checker_py=$py
if ! "$py" -c "import onnx" >/dev/null 2>&1; then
  checker_py=$venv/bin/python
  "$checker_py" -c "import onnx" >/dev/null 2>&1 || "$checker_py" -m pip install --quiet --disable-pip-version-check "$onnx_pin" ||
    skip "no onnx package for the checker (install python3-onnx)"
fi

rm -rf "$data" && mkdir -p "$data" || exit 1
"$probe" "$data" || { echo "onnx: the probe failed"; exit 1; }
"$checker_py" "$src/check_onnx.py" checker "$data" || { echo "onnx: onnx.checker refused a model"; exit 1; }
"$venv/bin/python" "$src/check_onnx.py" run "$data" || exit 1
rm -rf "$data"
