#!/bin/sh
# peer:records: the records a run leaves, read by the readers their formats belong to.
# squall_records_probe writes two TensorBoard event files and a DeepCAM MLPerf log with known
# contents; check_records.py reads them with TensorBoard's own reader and with the mlperf_logging
# package's parser and compliance checker, compares every tag, step, value and line exactly,
# and checks that damaged copies are refused. The packages come from a virtual environment made
# here once (pinned versions) and reused; when it cannot be made (no venv module, no network for
# pip), exit 77: skipped.
# With SQUALL and MPIEXEC (and Debian's Fashion-MNIST), a real run too: 2 ranks train LeNet-5
# with run.mllog = true, rank 1 fails at step 13, the job resumes from its checkpoint, and the
# run dir's event files and MLPerf log are checked against its metrics.jsonl and summary.json.
# usage: run_records.sh PYTHON SOURCE_DIR VENV_DIR DATA_DIR PROBE [SQUALL MPIEXEC]
py=$1; src=$2; venv=$3; data=$4; probe=$5; squall=$6; mpiexec=$7
fmnist=/usr/share/datasets/fashion-mnist
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
if [ -n "$squall" ] && [ -n "$mpiexec" ] && [ -d "$fmnist" ]; then
  run="$data/run"
  job() {  # job RANKS RUN_DIR [ARGS...]
    np=$1; dir=$2; shift 2
    "$mpiexec" -n "$np" --oversubscribe -x SQUALL_FAIL_AT "$squall" train --config "$src/../../configs/fashion-mnist-lenet5.toml" \
      --set run.dir="$dir" --set run.mllog=true --set train.epochs=2 --set data.train_samples=2048 \
      --set data.test_samples=512 --set checkpoint.every_steps=5 --set train.log_every_steps=4 \
      --set train.eval_every_steps=6 --set schedule.warmup_steps=0 --set run.threads=1 "$@"
  }
  SQUALL_FAIL_AT=1:13 job 2 "$run" >"$data/attempt1.log" 2>&1 && { cat "$data/attempt1.log"; echo "records: the first attempt did not fail"; exit 1; }
  # A copy resumed on 3 ranks: its MLPerf log states the shape change (check_records.py reshaped).
  cp -r "$run" "$data/reshaped"
  SQUALL_FAIL_AT='' job 2 "$run" --resume auto >"$data/attempt2.log" 2>&1 || { cat "$data/attempt2.log"; echo "records: the resumed attempt failed"; exit 1; }
  "$vpy" "$src/check_records.py" run "$run" || { echo "records: run: FAILED"; exit 1; }
  SQUALL_FAIL_AT='' job 3 "$data/reshaped" --resume auto >"$data/reshaped.log" 2>&1 || { cat "$data/reshaped.log"; echo "records: the resume on 3 ranks failed"; exit 1; }
  "$vpy" "$src/check_records.py" reshaped "$data/reshaped" || { echo "records: reshaped: FAILED"; exit 1; }
fi
rm -rf "$data"
versions=$("$vpy" -c 'from importlib.metadata import version as v; print(", ".join(p + " " + v(p) for p in ("tensorboard", "protobuf", "mlperf-logging")))')
echo "records: ok ($versions)"
