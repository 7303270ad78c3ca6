#!/bin/sh
# Runs era5_end_to_end.py with an interpreter that imports xarray, netCDF4, h5py and numpy
# (Debian's python3-xarray, python3-netcdf4 and python3-h5py import only in /usr/bin/python3).
# Exits 77 (CTest: skipped), saying why, when none does. Usage: run_era5.sh SQUALL MPIRUN WORKDIR
here=$(dirname "$0")
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c "import xarray, netCDF4, h5py, numpy" >/dev/null 2>&1; then
    exec "$py" "$here/era5_end_to_end.py" "$@"
  fi
done
echo "skipped: no Python interpreter here imports xarray, netCDF4, h5py and numpy (Debian: apt install python3-xarray python3-netcdf4 python3-h5py)"
exit 77
