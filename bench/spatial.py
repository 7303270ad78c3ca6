#!/usr/bin/env python3
"""One sample across ranks (parallel.spatial): the U-Net on DeepCAM-size climate fields
(768 x 1152 x 16, configs/climate-tiny.toml's model: width 16, depth 4, batch 1).

Local mode (this machine): the same cores used two ways, alternating, --runs times:
  whole   1 rank x 2 threads, each rank holding whole samples;
  split   2 ranks x 1 thread, parallel.spatial = [2, 1] (each sample split in rows).
Reported (medians): samples/s (the steady rate, summary.json's steady_samples_per_s), the
split's halo seconds exposed (the graph waited for them) and hidden (they travelled under
compute), its hidden share, and the split's throughput over the whole-sample run's.

Cluster mode (--cluster, root): 2 nodes of tests/cluster joined by a --rate link (1 Gbit/s by
default), 1 rank each, parallel.spatial = [2, 1]: the halo exchanges cross the link; reported
as above, with the exposed share = exposed / (exposed + hidden).

    python3 bench/spatial.py                           # 2 cores: split against whole samples
    python3 bench/spatial.py --cluster --rate 1gbit    # 2 nodes over a 1 Gbit/s link (root)
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_common as bc  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "climate-tiny.toml")


def run(a, data, work, split, threads, launcher):
    sets = bc.rate_sets(a.steps) + [f"data.train={data}", f"data.test={data}", "data.test_samples=2",
                                    "train.batch_size=1", f"run.threads={threads}", "data.workers=1"]
    if split:
        sets.append("parallel.spatial=[2,1]")
    s = bc.squall_train(a.squall, CONFIG, sets, work, a.steps, launcher=launcher,
                        name=f"spatial-{'split' if split else 'whole'}")
    halo = s["parallel"].get("spatial", {}).get("halo", {})
    return {"rate": bc.steady_rate(s, s["_run_dir"]), "exposed": halo.get("exposed_s"), "hidden": halo.get("hidden_s"),
            "bytes": halo.get("bytes")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--steps", type=int, default=16, help="steps per run (the first 10 are left out of the rate)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cluster", action="store_true", help="2 nodes x 1 rank on tests/cluster")
    ap.add_argument("--rate", default="1gbit", help="cluster mode: the link's rate (tc notation) or none")
    a = ap.parse_args()
    env_root = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    os.environ.update(env_root)
    tool = os.path.join(ROOT, "tests", "cluster", "cluster")
    if a.cluster:
        subprocess.run([tool, "down", "benchsp"], capture_output=True)
        subprocess.run([tool, "up", "benchsp", "--nodes", "2", "--rate", a.rate], check=True)
    rows = {"whole": [], "split": []}
    try:
        with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as work:
            data = bc.climate_data(a.squall, os.path.join(work, "deepcam"), samples=64, distinct=4, height=768,
                                   width=1152)
            for r in range(a.runs):
                if a.cluster:
                    launcher = [tool, "mpirun", "benchsp", "--host", "benchsp-n1:1,benchsp-n2:1", "--"]
                    rows["split"].append(run(a, data, work, True, 1, launcher))
                else:
                    rows["whole"].append(run(a, data, work, False, 2, ()))
                    rows["split"].append(run(a, data, work, True, 1, ("mpirun", "-np", "2", "--bind-to", "none")))
                print(f"run {r + 1}/{a.runs}: done", file=sys.stderr)
    finally:
        if a.cluster:
            subprocess.run([tool, "down", "benchsp"], capture_output=True)
    med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
    where = f"2 nodes x 1 rank, {a.rate} link" if a.cluster else "2 ranks x 1 thread against 1 rank x 2 threads"
    bc.out(f"\nU-Net (width 16, depth 4) on 768 x 1152 x 16 fields, batch 1, {where}, {a.steps} steps "
           f"({a.runs} runs, medians); {platform.processor() or platform.machine()}\n")
    bc.print_table_head(["run", "samples/s", "halo exposed s", "halo hidden s", "exposed share", "halo MB sent"])
    for name in ("whole", "split"):
        rs = rows[name]
        if not rs:
            continue
        if name == "whole":
            bc.print_row([name, bc.fmt(med(rs, "rate"), 3), "-", "-", "-", "-"])
            continue
        share = statistics.median(x["exposed"] / max(x["exposed"] + x["hidden"], 1e-12) for x in rs)
        bc.print_row(["split [2, 1]", bc.fmt(med(rs, "rate"), 3), bc.fmt(med(rs, "exposed"), 3),
                      bc.fmt(med(rs, "hidden"), 3), bc.fmt(share, 3), bc.fmt(med(rs, "bytes") / 1e6, 1)])
    if rows["whole"]:
        ratio = med(rows["split"], "rate") / med(rows["whole"], "rate")
        bc.out(f"\nsplit / whole samples/s: {ratio:.2f}")
        bc.contract_end("split [2, 1] samples/s over whole samples", ratio)
    else:
        share = statistics.median(x["exposed"] / max(x["exposed"] + x["hidden"], 1e-12) for x in rows["split"])
        bc.contract_end("halo exposed share over the link", share)


if __name__ == "__main__":
    main()
