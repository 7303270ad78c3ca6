#!/bin/sh
# Peer tests: every tests/peer/gen_*.py writes PyTorch references into DATA, then the
# squall_peer_tests binary compares squall against them. Exit 77 = skipped (no torch).
# usage: run_peer.sh PYTHON PEER_SOURCE_DIR DATA_DIR TEST_BINARY [catch args]
py=$1; src=$2; data=$3; bin=$4; shift 4
if [ -z "$py" ] || ! "$py" -c "import torch, numpy" >/dev/null 2>&1; then
  echo "SKIP: no Python interpreter imports torch and numpy (install python3-torch, or configure with -DSQUALL_PEER_PYTHON=...)"
  exit 77
fi
rm -rf "$data" && mkdir -p "$data" || exit 1
for gen in "$src"/gen_*.py; do
  [ -e "$gen" ] || continue
  name=$(basename "$gen" .py); name=${name#gen_}
  mkdir -p "$data/$name" && "$py" "$gen" "$data/$name" || { echo "peer: $gen failed"; exit 1; }
done
exec "$bin" "$@"
