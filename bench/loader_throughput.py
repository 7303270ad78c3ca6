#!/usr/bin/env python3
"""Loader throughput against a raw sequential read of the same files, side by side.

Datasets (made in --workdir, which should sit on the file system you care about):
  fmnist   native uint8 shards from `squall data fashion-mnist` (small samples, many chunks)
  deepcam  DeepCAM-layout files written by h5py: float32 [768, 1152, 16] channels-last with
           float32 labels, one sample per file, plus stats.h5 (the MLPerf HPC layout)
  deepcam-shards  the same DeepCAM samples converted to native float32 shards (CHW already)
For each, it alternates `cat FILES > /dev/null` and `squall bench loader --data DIR --json`
(one untimed warm-up epoch, then three timed ones) and reports the file bytes per second of each,
their medians and the ratio, twice:
  cold  the files are evicted from the page cache (posix_fadvise DONTNEED) before every
        timed read, so both sides read from storage, as a fresh epoch on NVMe does;
  warm  both read from the page cache: the loader's own ceiling (decode, normalise, copy).
Run with an interpreter that imports h5py and numpy (Debian: /usr/bin/python3).
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


def evict(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def raw_read(files):
    t0 = time.perf_counter()
    subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)
    dt = time.perf_counter() - t0
    return sum(os.path.getsize(f) for f in files) / dt / 1e6


def loader_read(squall, folder, split, workers, batch, epochs, cold):
    out = subprocess.run([squall, "bench", "loader", "--data", folder, "--split", split, "--workers", str(workers),
                          "--batch", str(batch), "--epochs", str(epochs), "--warmup-epochs", "1", "--json"] +
                         (["--cold"] if cold else []),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--workdir", default="/tmp/squall-loader-bench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--deepcam-files", type=int, default=16)
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
    deepcam_shards = os.path.join(args.workdir, "deepcam-shards")
    if not glob.glob(os.path.join(deepcam_shards, "train-*.h5")):
        subprocess.run([args.squall, "data", "deepcam", "--from", deepcam, "--out", deepcam_shards, "--shards", "2"],
                       check=True, stdout=subprocess.DEVNULL)

    cases = [("fmnist shards (uint8 28x28)", fmnist, "train", sorted(glob.glob(os.path.join(fmnist, "train-*.h5"))), 64),
             ("DeepCAM files (float32 768x1152x16)", deepcam, "train",
              sorted(glob.glob(os.path.join(deepcam, "data-*.h5"))), 2),
             ("DeepCAM samples as native shards (float32 CHW)", deepcam_shards, "train",
              sorted(glob.glob(os.path.join(deepcam_shards, "train-*.h5"))), 2)]
    rows = []
    for name, folder, split, files, batch in cases:
        for mode in ("cold", "warm"):
            raw, ld, sps = [], [], []
            for _ in range(args.runs):
                if mode == "cold":
                    evict(files)
                else:
                    raw_read(files)
                raw.append(raw_read(files))
                # after one untimed warm-up epoch; cold: squall evicts the files before each timed one
                r = loader_read(args.squall, folder, split, args.workers, batch, 3, mode == "cold")
                ld.append(r["file_MBps"])
                sps.append(r["samples_per_s"])
            ratios = [a / b for a, b in zip(ld, raw)]
            rows.append((name, mode, statistics.median(raw), statistics.median(ld), statistics.median(sps),
                         statistics.median(ratios), min(ratios), max(ratios)))
    print(f"| dataset | cache | raw read MB/s | loader MB/s | loader samples/s | ratio (median, min-max) |")
    print(f"|---|---|---|---|---|---|")
    for name, mode, raw, ld, sps, rm, rmin, rmax in rows:
        print(f"| {name} | {mode} | {raw:.0f} | {ld:.0f} | {sps:.1f} | {rm:.2f} ({rmin:.2f}-{rmax:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
