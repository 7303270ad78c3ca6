#!/usr/bin/env python3
"""io_wait in training: LeNet-5 on Fashion-MNIST read from HDF5 shards through the loader,
side by side with the same run reading Debian's IDX files (held in memory), alternating,
several runs; prints the median share of step time spent waiting for data (goal <= 5%) and
the median steady samples/s (summary.json's steady_samples_per_s: without the first steps
and the evaluations; docs/metrics.md, "Steady rate").

    python3 bench/io_wait.py --squall build/bin/squall --runs 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_common as bc  # noqa: E402


def train(squall, config, extra, epochs, run_dir):
    # --overwrite: every run reuses the one run dir.
    subprocess.run([squall, "train", "--config", config, "--overwrite", "--set", f"train.epochs={epochs}", "--set",
                    f"run.dir={run_dir}"] + extra, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    t = s["time_breakdown_s"]
    return 100.0 * t["io_wait"] / (t["io_wait"] + t["compute"]), bc.steady_rate(s, run_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    config = os.path.join(ROOT, "configs", "fashion-mnist-shards.toml")
    with tempfile.TemporaryDirectory() as work:
        shards = os.path.join(work, "shards")
        subprocess.run([args.squall, "data", "fashion-mnist", "--out", shards, "--shards", "8"], check=True,
                       stdout=subprocess.DEVNULL)
        results = {"shards": [], "idx": []}
        idx_dir = "/usr/share/datasets/fashion-mnist"
        for _ in range(args.runs):
            for name, folder in (("shards", shards), ("idx", idx_dir)):
                results[name].append(train(args.squall, config, ["--set", f"data.train={folder}", "--set",
                                                                 f"data.test={folder}"], args.epochs,
                                           os.path.join(work, "run")))
    print("| data | runs | io_wait % of step time (median, min-max) | steady samples/s (median) |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        waits = [w for w, _ in rows]
        print(f"| {name} | {len(rows)} | {statistics.median(waits):.1f} ({min(waits):.1f}-{max(waits):.1f}) | "
              f"{statistics.median([s for _, s in rows]):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
