#!/usr/bin/env python3
"""ERA5 at 0.25 degrees (721 x 1440, a grid no U-Net stride divides), end to end: what a user's
own reanalysis costs in squall, with the statistics step side by side with its peer.

Writes ERA5-named files with xarray (tests/era5/era5_data.py: latitude north to south, `u` on
two pressure levels, labels of synthetic lows), then times, each --runs times (medians):
  - `squall data stats` on 1 and on --ranks ranks, against xarray + numpy computing the same
    per-channel mean and standard deviation of the same variables (float64 sums, the level
    selected with .sel): the ratio is xarray's seconds over squall's;
  - `squall train` of a U-Net with data.pad = "pad" (721 -> 736 rows) for --steps steps: its
    steady samples per second from summary.json;
  - `squall predict` of the trained run on a file of --predict-steps time steps, masks written
    on the input's own 721 x 1440 grid: seconds per time step.

    /usr/bin/python3 bench/era5_grid.py --squall build/bin/squall --mpirun mpirun --dir DIR

Needs xarray, netCDF4 and numpy (Debian's python3-xarray, python3-netcdf4 import only in
/usr/bin/python3); prints SKIP and exits 77 without them.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHANNELS = '["TMQ=tcwv", "U850=u@850", "PSL=msl", "TREFHT=t2m"]'


def out(text=""):
    print(text, flush=True)


def timed(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        out(p.stdout + p.stderr)
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {p.returncode}")
    return time.perf_counter() - t, p.stdout + p.stderr


def peer_stats(folder):
    import numpy as np
    import xarray as xr
    sums = None
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".nc"):
            continue
        with xr.open_dataset(os.path.join(folder, name)) as ds:
            fields = [ds.tcwv, ds.u.sel(pressure_level=850), ds.msl, ds.t2m]
            stats = [(f.size, float(f.astype(np.float64).sum()), float((f.astype(np.float64) ** 2).sum()))
                     for f in fields]
        sums = stats if sums is None else [tuple(a + b for a, b in zip(s, t)) for s, t in zip(sums, stats)]
    return [(s / n, (q / n - (s / n) ** 2) ** 0.5) for n, s, q in sums]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--files", type=int, default=4, help="training files")
    ap.add_argument("--steps-per-file", type=int, default=4, help="time steps per training file")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="training steps")
    ap.add_argument("--predict-steps", type=int, default=4)
    a = ap.parse_args()
    a.squall = os.path.abspath(a.squall)  # the bench runs in --dir
    try:
        sys.path.insert(0, os.path.join(ROOT, "tests", "era5"))
        from era5_data import era5_dataset, write
    except ImportError as e:
        out(f"SKIP: needs xarray, netCDF4 and numpy ({sys.executable}: {e})")
        sys.exit(77)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    os.chdir(a.dir)
    t = time.perf_counter()
    for i in range(a.files):
        ds, _ = era5_dataset(a.steps_per_file, 10 + i, rows=721, cols=1440)
        write(ds, f"train/era5_{i:03d}.nc")
    ds, _ = era5_dataset(2, 99, rows=721, cols=1440)
    write(ds, "test/era5_test.nc")
    ds, _ = era5_dataset(a.predict_steps, 100, rows=721, cols=1440)
    write(ds, "new/era5_new.nc")
    out(f"data: {a.files} x {a.steps_per_file} time steps of 721 x 1440 written in {time.perf_counter() - t:.1f} s")

    sets = ["--set", f"data.channels={CHANNELS}"]
    out("\n| case | median s | runs |\n|---|---|---|")
    rows = {}
    for name, ranks in (("squall data stats, 1 rank", 1), (f"squall data stats, {a.ranks} ranks", a.ranks)):
        times = []
        for _ in range(a.runs):
            cmd = ([a.mpirun, "--oversubscribe", "-n", str(ranks)] if ranks > 1 else []) + \
                  [a.squall, "data", "stats", "--in", "train", "--overwrite"] + sets
            times.append(timed(cmd, env)[0])
        rows[name] = statistics.median(times)
        out(f"| {name} | {rows[name]:.2f} | {a.runs} |")
    times = []
    for _ in range(a.runs):
        t = time.perf_counter()
        peer = peer_stats("train")
        times.append(time.perf_counter() - t)
    rows["xarray + numpy"] = statistics.median(times)
    out(f"| xarray + numpy (float64 sums) | {rows['xarray + numpy']:.2f} | {a.runs} |")

    import h5py
    import numpy as np
    with h5py.File("train/stats.h5", "r") as f:
        mean = np.asarray(f["climate/mean"]).ravel()
    worst = max(abs(m - p[0]) / abs(p[0]) for m, p in zip(mean, peer))
    out(f"\nsquall's means against xarray's: largest relative difference {worst:.2e}")

    config = f"""[run]
dir = "run"
tensorboard = false
[data]
train = "train"
test = "test"
channels = {CHANNELS}
pad = "pad"
[model]
name = "unet"
[train]
epochs = 100
max_steps = {a.steps}
batch_size = 1
log_every_steps = 1
eval_every_steps = {a.steps}
[checkpoint]
at_end = true
"""
    with open("era5.toml", "w") as f:
        f.write(config)
    seconds, log = timed([a.squall, "train", "-c", "era5.toml", "--overwrite"], env)
    summary = json.load(open("run/summary.json"))
    rate = summary.get("steady_samples_per_s") or summary.get("samples_per_s")
    out(f"| squall train, U-Net, 721 x 1440 padded to 736 x 1440, {a.steps} steps | {seconds:.1f} | 1 |")
    out(f"train: steady {rate} samples/s")
    times = []
    for r in range(a.runs):
        times.append(timed([a.squall, "predict", "--run", "run", "--data", "new", "--out", f"masks{r}"], env)[0])
    per_step = statistics.median(times) / a.predict_steps
    out(f"| squall predict, {a.predict_steps} time steps (whole command) | {statistics.median(times):.2f} | {a.runs} |")
    import xarray as xr
    with xr.open_dataset(os.path.join("masks0", sorted(os.listdir("masks0"))[0])) as m:
        shape = tuple(m["mask"].shape)
    out(f"predict: {per_step:.2f} s per time step; mask shape {shape} (input 721 x 1440)")
    ratio = rows["xarray + numpy"] / rows[f"squall data stats, {a.ranks} ranks"]
    out(f"figure: data stats {rows['squall data stats, 1 rank']:.2f} s (1 rank), "
        f"{rows[f'squall data stats, {a.ranks} ranks']:.2f} s ({a.ranks} ranks); xarray {rows['xarray + numpy']:.2f} s")
    out(f"ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
