#!/bin/sh
# gpu:lenet5-accuracy: LeNet-5 trained by the squall binary on the CUDA backend reaches the
# CPU's test accuracy (>= 0.89 on Fashion-MNIST in 5 epochs). Exits 77 (skipped) where no GPU
# can be used: squall itself says why, and that line is printed.
# Usage: lenet5_accuracy.sh SQUALL CONFIG RUN_ROOT [BACKEND [MIN_ACCURACY [squall train args...]]]
# (scripts/gpu-check passes its data folder as --set arguments, and in a rehearsal the CPU
# backend, a short run and a lower bar).
set -u
[ $# -ge 3 ] || { echo "usage: $0 SQUALL CONFIG RUN_ROOT [BACKEND [MIN_ACCURACY [squall train args...]]]" >&2; exit 2; }
squall=$1 config=$2 root=$3 backend=${4:-cuda} bar=${5:-0.89}
shift 3
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
rm -rf "$root/lenet5" && mkdir -p "$root"
out=$("$squall" train -c "$config" --set run.backend="$backend" --set run.dir="$root/lenet5" "$@" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -5
if [ $rc -ne 0 ]; then
  if printf '%s' "$out" | grep -q "no GPU can be used"; then
    echo "SKIP: no GPU here"
    exit 77
  fi
  echo "FAIL: squall exited $rc"
  exit 1
fi
python3 - "$root/lenet5/summary.json" "$backend" "$bar" <<'PY'
import json, sys
path, backend, bar = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = json.load(open(path))
acc = s["final"]["test_accuracy"]
ok = s.get("backend") == backend and acc >= bar
print(f"backend {s.get('backend')}: test accuracy {acc:.4f} (want >= {bar} on {backend})")
print(f"figure: test accuracy {acc:.4f} after {s.get('steps')} steps")
print("ratio: -")
sys.exit(0 if ok else 1)
PY
