#!/bin/sh
# Runs a check written in Python with h5py: Debian's python3-h5py imports in /usr/bin/python3
# only, so that interpreter is tried first. Exits 77 (CTest: skipped), saying why, when no
# interpreter imports h5py. Usage: run_h5py.sh SCRIPT ARGS...
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c "import h5py, numpy" >/dev/null 2>&1; then
    exec "$py" "$@"
  fi
done
echo "skipped: no Python interpreter here imports h5py and numpy (Debian: apt install python3-h5py)"
exit 77
