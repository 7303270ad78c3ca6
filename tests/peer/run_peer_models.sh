#!/bin/sh
# peer:models: the benches' PyTorch networks against squall's zoo (check_peer_models.py).
# usage: run_peer_models.sh PYTHON SQUALL BENCH_DIR; exit 77 (skipped) without a Python that imports torch.
py=$1; squall=$2; bench=$3
if [ -z "$py" ] || ! "$py" -c "import torch" >/dev/null 2>&1; then
  echo "SKIP: no Python interpreter imports torch (install python3-torch, or configure with -DSQUALL_PEER_PYTHON=...)"
  exit 77
fi
exec "$py" "$(dirname "$0")/check_peer_models.py" "$squall" "$bench"
