"""A user's own ERA5-style data, end to end, as docs/data.md tells a climate user to run it.

The files are written by xarray with ERA5's own names and layout: latitude from 90 to -90
(north to south), longitude 0..359, a 1-degree grid of 181 x 360 rows that no U-Net stride
divides, one variable on pressure levels (u on (time, pressure_level, latitude, longitude)
with two levels, so the channel must select one), sea-level pressure in Pa and, in a second
copy, in hPa. Labels are an integer variable squall reads beside the fields: the pixels inside
synthetic lows (a learnable target, not a climate truth).

The steps, each checked:
  1. `squall data inspect` lists the variables, the level dimension and the units, and marks
     every configured channel as suppliable; a channel list naming three absent variables is
     refused in one message that names all three.
  2. `squall data stats` (two ranks) writes stats.h5; its means equal numpy's over the same
     values, in the units training reads (PSL in Pa).
  3. `squall train` with data.pad = "pad" trains on the 181 x 360 grid with those statistics.
  4. `squall predict` writes masks on the input's own grid (181 x 360, latitude descending as
     the file stores it), and the hPa copy gives the same masks as the Pa file.

Usage: era5_end_to_end.py SQUALL MPIRUN WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import xarray as xr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from era5_data import era5_dataset, write  # noqa: E402

SQUALL, MPIRUN, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
CHANNELS = '["TMQ=tcwv", "U850=u@850", "PSL=msl", "TREFHT=t2m"]'
FAILURES = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


def run(args, expect=0, mpi=0):
    cmd = ([MPIRUN, "--oversubscribe", "-n", str(mpi)] if mpi else []) + [SQUALL] + args
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    out = p.stdout + p.stderr
    if (expect == 0) != (p.returncode == 0) or (expect and p.returncode != expect):
        print(out)
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {p.returncode}, expected {expect}")
    return out


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    os.chdir(WORK)
    train, train_msl = era5_dataset(6, 1)
    test, _ = era5_dataset(2, 2)
    pa, _ = era5_dataset(2, 3)
    hpa, _ = era5_dataset(2, 3, msl_units="hPa")
    write(train, "train/era5_train.nc")
    write(test, "test/era5_test.nc")
    write(pa, "new_pa/era5_pa.nc")
    write(hpa, "new_hpa/era5_hpa.nc")
    sets = ["--set", f"data.channels={CHANNELS}"]

    # 1. inspect: what the file has and which channels it can supply.
    out = run(["data", "inspect", "train/era5_train.nc"] + sets)
    for word in ["msl", "t2m", "tcwv", "pressure_level", "hPa", "kg m**-2"]:
        check(word in out, f"inspect lists {word!r}")
    for channel in ["TMQ", "U850", "PSL", "TREFHT"]:
        check(channel in out, f"inspect names channel {channel}")
    absent = 'data.channels=["TMQ=tcwv", "QREFHT=q2m", "ZBOT=zbot", "PS=sp"]'
    # inspect reports the file as unreadable (exit 1); a command that needs the data refuses it (exit 2).
    for args, status in ((["data", "inspect", "train/era5_train.nc"], 1), (["data", "stats", "--in", "train"], 2)):
        missing = run(args + ["--set", absent], expect=status)
        lines = [line for line in missing.splitlines()
                 if "'q2m'" in line and "'zbot'" in line and "'sp'" in line and "msl" in line]
        check(len(lines) >= 1, f"squall {' '.join(args[:2])}: one message names all three missing variables "
                               "(q2m, zbot, sp) beside what the file has")

    # 2. statistics, on two ranks.
    run(["data", "stats", "--in", "train"] + sets, mpi=2)
    check(os.path.exists("train/stats.h5"), "squall data stats wrote train/stats.h5")
    import h5py
    with h5py.File("train/stats.h5", "r") as f:
        mean = np.asarray(f["climate/mean"]).ravel()
    ds = xr.open_dataset("train/era5_train.nc")
    expect = [float(ds.tcwv.astype(np.float64).mean()), float(ds.u.sel(pressure_level=850).astype(np.float64).mean()),
              float(ds.msl.astype(np.float64).mean()), float(ds.t2m.astype(np.float64).mean())]
    # float32 fields summed in double in another order: agreement to 1e-6 relative.
    for c, (got, want) in enumerate(zip(mean, expect)):
        check(abs(got - want) <= 1e-6 * abs(want) + 1e-6, f"stats.h5 mean of channel {c} = {got:.6f} (numpy {want:.6f})")

    # 3. training on the 181 x 360 grid, padded to the U-Net's stride.
    config = f"""[run]
dir = "run"
tensorboard = false
[data]
train = "train"
test = "test"
channels = {CHANNELS}
pad = "pad"
workers = 1
[model]
name = "unet"
width = 4
depth = 2
[train]
epochs = 3
batch_size = 2
log_every_steps = 1
[optimizer]
lr = 0.01
"""
    with open("era5.toml", "w") as f:
        f.write(config)
    out = run(["train", "-c", "era5.toml"])
    summary = json.load(open("run/summary.json"))
    check(summary.get("steps", 0) > 0, f"training ran {summary.get('steps')} steps on 181 x 360")

    # 4. predictions on the input's own grid; the hPa copy gives the same masks.
    run(["predict", "--run", "run", "--data", "new_pa/era5_pa.nc", "--out", "out_pa", "--probabilities"])
    run(["predict", "--run", "run", "--data", "new_hpa/era5_hpa.nc", "--out", "out_hpa", "--probabilities"])
    masks = [f for f in os.listdir("out_pa") if f.endswith(".nc")]
    check(len(masks) == 1, f"one mask file for the Pa input ({masks})")
    m_pa = xr.open_dataset(os.path.join("out_pa", masks[0]))
    m_hpa = xr.open_dataset(os.path.join("out_hpa", [f for f in os.listdir("out_hpa") if f.endswith(".nc")][0]))
    src = xr.open_dataset("new_pa/era5_pa.nc")
    check(m_pa["mask"].shape == (2, 181, 360), f"mask shape {m_pa['mask'].shape} is the input's (2, 181, 360)")
    check(np.array_equal(m_pa["latitude"].values, src["latitude"].values),
          "mask latitude equals the input's, north to south as stored")
    check(np.array_equal(m_pa["longitude"].values, src["longitude"].values), "mask longitude equals the input's")
    check(np.array_equal(m_pa["mask"].values, m_hpa["mask"].values), "the hPa file's masks equal the Pa file's")
    # The masks of a briefly trained model may be mostly background whatever the input; its
    # probabilities are not: read as Pa, the hPa field would sit ~1e4 standard deviations off.
    # The two inputs differ by the rounding of one conversion (a float ulp), hence 1e-4.
    diff = float(np.nanmax(np.abs(m_pa["probability"].values - m_hpa["probability"].values)))
    check(diff < 1e-4, f"the hPa file's probabilities equal the Pa file's (largest difference {diff:.2e})")

    if FAILURES:
        raise SystemExit(f"{len(FAILURES)} checks failed: {FAILURES}")
    print("all checks passed")


main()
