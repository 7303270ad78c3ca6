#!/bin/sh
# gpu:lenet5-accuracy: LeNet-5 trained by the squall binary on the CUDA backend reaches the
# CPU's test accuracy (>= 0.89 on Fashion-MNIST in 5 epochs). Exits 77 (skipped) where no GPU
# can be used: squall itself says why, and that line is printed.
# Usage: lenet5_accuracy.sh SQUALL CONFIG RUN_ROOT
set -u
squall=$1 config=$2 root=$3
rm -rf "$root/lenet5" && mkdir -p "$root"
out=$("$squall" train -c "$config" --set run.backend=cuda --set run.dir="$root/lenet5" 2>&1)
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
python3 - "$root/lenet5/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
acc = s["final"]["test_accuracy"]
print(f"backend {s.get('backend')}: test accuracy {acc:.4f} (want >= 0.89)")
sys.exit(0 if s.get("backend") == "cuda" and acc >= 0.89 else 1)
PY
