#!/bin/sh
# peer:records: the records a run leaves, read by the readers their formats belong to.
# squall_records_probe writes two TensorBoard event files and a DeepCAM MLPerf log with known
# contents; check_records.py reads them with TensorBoard's own reader and with the mlperf_logging
# package's parser and compliance checker, compares every tag, step, value and line exactly,
# and checks that damaged copies are refused. The packages come from a virtual environment made
# here once (pinned versions) and reused; when it cannot be made (no venv module, no network for
# pip), exit 77: skipped.
# usage: run_records.sh PYTHON SOURCE_DIR VENV_DIR DATA_DIR PROBE
py=$1; src=$2; venv=$3; data=$4; probe=$5
# tensorboard's reader takes any protobuf from 3.19 on; the pin keeps the reading repeatable.
pins="tensorboard==2.20.0 mlperf-logging==4.1.68 protobuf==5.29.5 numpy==1.26.4"
skip() { echo "SKIP: $*"; exit 77; }

[ -n "$py" ] && "$py" -c "import venv" >/dev/null 2>&1 || skip "no Python interpreter with the venv module (install python3-venv)"
stamp="$venv/.squall-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ] ||
   ! "$venv/bin/python" -c "import tensorboard, mlperf_logging" >/dev/null 2>&1; then
  rm -rf "$venv"
  "$py" -m venv "$venv" || skip "cannot create a virtual environment in $venv"
  # shellcheck disable=SC2086  # the pins are words
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --retries 2 --timeout 30 $pins ||
    { rm -rf "$venv"; skip "pip cannot install $pins"; }
  echo "$pins" > "$stamp"
fi
vpy=$venv/bin/python

rm -rf "$data" && mkdir -p "$data" || exit 1
"$probe" "$data" || { echo "records: the probe failed"; exit 1; }
"$vpy" "$src/check_records.py" probe "$data" || { echo "records: FAILED"; exit 1; }
# The commands an integrator runs on a real run dir, once each: they must print and succeed.
"$vpy" "$src/check_records.py" tensorboard "$data/tb" >"$data/tb.json" || { echo "records: tensorboard DIR failed"; exit 1; }
"$vpy" "$src/check_records.py" mllog "$data/mllog.txt" >"$data/mllog.json" || { echo "records: mllog FILE failed"; exit 1; }
"$vpy" -c "import json, sys; t = json.load(open(sys.argv[1])); l = json.load(open(sys.argv[2])); print(f'records: check_records.py printed {len(t)} tags and {len(l)} log lines')" \
  "$data/tb.json" "$data/mllog.json" || exit 1
rm -rf "$data"
versions=$("$vpy" -c 'from importlib.metadata import version as v; print(", ".join(p + " " + v(p) for p in ("tensorboard", "protobuf", "mlperf-logging")))')
echo "records: ok ($versions)"
