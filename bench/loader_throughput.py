#!/usr/bin/env python3
"""Loader throughput against a raw sequential read of the same files, side by side.

Datasets (made in --workdir, which should sit on the file system you care about):
  fmnist   native uint8 shards from `squall data fashion-mnist` (small samples, many chunks)
  deepcam  DeepCAM-layout files written by h5py: float32 [768, 1152, 16] channels-last with
           float32 labels, one sample per file, plus stats.h5 (the MLPerf HPC layout)
For each, it alternates `cat FILES > /dev/null` and `squall bench loader --data DIR --json`
and reports the file bytes per second of each, their medians and the ratio (goal >= 0.8).
Both read through the page cache after a first warm-up read, so the figure is the loader's
own overhead (decode, normalise, copy, threads) against the cheapest possible read, not the
disk. Run with an interpreter that imports h5py and numpy (Debian: /usr/bin/python3).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_deepcam(folder, files, h, w, c):
    import h5py
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(files):
        path = os.path.join(folder, f"data-{i:04d}.h5")
        if os.path.exists(path):
            continue
        data = rng.standard_normal((h, w, c), dtype=np.float32)
        labels = (rng.random((h, w)) * 3).astype(np.float32)
        labels = np.floor(labels)
        with h5py.File(path, "w") as f:
            f.create_dataset("climate/data", data=data)
            f.create_dataset("climate/labels_0", data=labels)
    stats = os.path.join(folder, "stats.h5")
    if not os.path.exists(stats):
        with h5py.File(stats, "w") as f:
            f["climate/count"] = np.full(c, h * w * files, dtype=np.float64)
            f["climate/mean"] = np.zeros(c, dtype=np.float32)
            f["climate/sqmean"] = np.ones(c, dtype=np.float32)
            f["climate/minval"] = np.full(c, -5.0, dtype=np.float32)
            f["climate/maxval"] = np.full(c, 5.0, dtype=np.float32)


def raw_read(files):
    t0 = time.perf_counter()
    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)
    dt = time.perf_counter() - t0
    return sum(os.path.getsize(f) for f in files) / dt / 1e6


def loader_read(squall, folder, split, workers, batch):
    out = subprocess.run([squall, "bench", "loader", "--data", folder, "--split", split, "--workers", str(workers),
                          "--batch", str(batch), "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--workdir", default="/tmp/squall-loader-bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--deepcam-files", type=int, default=8)
    args = ap.parse_args()
    try:
        import h5py  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        print("SKIP: this interpreter cannot import h5py and numpy; run with /usr/bin/python3 (Debian's python3-h5py)")
        return 0

    fmnist = os.path.join(args.workdir, "fmnist")
    if not glob.glob(os.path.join(fmnist, "train-*.h5")):
        subprocess.run([args.squall, "data", "fashion-mnist", "--out", fmnist, "--shards", "8"], check=True,
                       stdout=subprocess.DEVNULL)
    deepcam = os.path.join(args.workdir, "deepcam")
    make_deepcam(deepcam, args.deepcam_files, 768, 1152, 16)

    cases = [("fmnist shards (uint8 28x28)", fmnist, "train", sorted(glob.glob(os.path.join(fmnist, "train-*.h5"))), 64),
             ("DeepCAM files (float32 768x1152x16)", deepcam, "train",
              sorted(glob.glob(os.path.join(deepcam, "data-*.h5"))), 2)]
    rows = []
    for name, folder, split, files, batch in cases:
        raw_read(files)  # warm the page cache for both
        raw, ld, sps = [], [], []
        for _ in range(args.runs):
            raw.append(raw_read(files))
            r = loader_read(args.squall, folder, split, args.workers, batch)
            ld.append(r["file_MBps"])
            sps.append(r["samples_per_s"])
        ratios = [a / b for a, b in zip(ld, raw)]
        rows.append((name, statistics.median(raw), statistics.median(ld), statistics.median(sps),
                     statistics.median(ratios), min(ratios), max(ratios)))
    print(f"| dataset | raw read MB/s | loader MB/s | loader samples/s | ratio (median, min-max) |")
    print(f"|---|---|---|---|---|")
    for name, raw, ld, sps, rm, rmin, rmax in rows:
        print(f"| {name} | {raw:.0f} | {ld:.0f} | {sps:.0f} | {rm:.2f} ({rmin:.2f}-{rmax:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
