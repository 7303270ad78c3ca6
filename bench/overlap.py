#!/usr/bin/env python3
"""How much of ssgd's allreduce hides behind the backward pass: ResNet-20 on Fashion-MNIST,
2 ranks x 1 learner, gradients in buckets of --bucket-mb (several in flight) against the
same run with one bucket of the whole model (handed over only when the backward pass has
ended: nothing can hide), alternating, --runs times.

Reported per setting (medians over runs): samples/s (the steady rate, summary.json's
steady_samples_per_s: the steps after the first max(10, 5%), no evaluation or checkpoint in
their time; docs/metrics.md, "Steady rate"), the allreduce seconds hidden behind the
passes and exposed after them (summary.json time_breakdown_s), the hidden share
= hidden / (hidden + exposed), the buckets and the most in flight at once, and the
throughput against the one-bucket run.

    python3 bench/overlap.py                          # 2 ranks on this machine (shared memory)
    python3 bench/overlap.py --cluster --rate 1gbit   # 2 nodes x 1 rank over a 1 Gbit/s link (root)
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


def run_train(a, bucket_mb, run_dir):
    sets = bc.rate_sets(a.steps) + ["parallel.algorithm=ssgd", "parallel.replicas_per_device=1",
                                    f"parallel.bucket_mb={bucket_mb}", "data.test_samples=512", f"run.dir={run_dir}"]
    args = [a.squall, "train", "--config", os.path.join(ROOT, "configs", "fashion-mnist-resnet20.toml")]
    for s in sets:
        args += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if a.cluster:
        tool = os.path.join(ROOT, "tests", "cluster", "cluster")
        cmd = [tool, "mpirun", "benchov", "--host", "benchov-n1:1,benchov-n2:1", "--"] + args
    else:
        cmd = ["mpirun", "-np", "2", "--oversubscribe"] + args
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    t = s["time_breakdown_s"]
    return {"samples_per_s": bc.steady_rate(s, run_dir), "hidden": t["allreduce_overlapped"], "exposed": t["allreduce"],
            "buckets": s["parallel"]["buckets"], "in_flight": s["parallel"]["max_buckets_in_flight"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, nargs="+", default=[0.25, 1.0])
    ap.add_argument("--cluster", action="store_true", help="2 nodes x 1 rank on tests/cluster")
    ap.add_argument("--rate", default="1gbit", help="cluster mode: the links' rate (tc notation) or none")
    a = ap.parse_args()
    # One bucket of the whole model: ResNet-20 has 0.27 M parameters (about 1.1 MB).
    settings = a.bucket_mb + [1024.0]
    rows = {b: [] for b in settings}
    tool = os.path.join(ROOT, "tests", "cluster", "cluster")
    if a.cluster:
        subprocess.run([tool, "down", "benchov"], capture_output=True)
        subprocess.run([tool, "up", "benchov", "--nodes", "2", "--rate", a.rate], check=True)
    try:
        with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as work:
            for run in range(a.runs):
                for b in settings:
                    rows[b].append(run_train(a, b, os.path.join(work, f"{b}-{run}")))
                print(f"run {run + 1}/{a.runs}: done", file=sys.stderr)
    finally:
        if a.cluster:
            subprocess.run([tool, "down", "benchov"], capture_output=True)
    base = statistics.median(r["samples_per_s"] for r in rows[1024.0])
    where = f"2 nodes x 1 rank, {a.rate} links" if a.cluster else "2 ranks on one machine"
    print(f"\nResNet-20, ssgd, {where}, {a.steps} steps of batch 64 per rank ({a.runs} runs, medians)\n")
    print("| buckets of | samples/s | allreduce hidden s | exposed s | hidden share | buckets | most in flight "
          "| throughput vs one bucket |")
    print("|---|---|---|---|---|---|---|---|")
    for b in settings:
        r = rows[b]
        med = lambda k: statistics.median(x[k] for x in r)  # noqa: E731
        share = statistics.median(x["hidden"] / max(x["hidden"] + x["exposed"], 1e-12) for x in r)
        label = "the whole model" if b == 1024.0 else f"{b:g} MiB"
        print(f"| {label} | {med('samples_per_s'):.0f} | {med('hidden'):.2f} | {med('exposed'):.2f} | {share:.2f} | "
              f"{r[0]['buckets']} | {max(x['in_flight'] for x in r)} | {med('samples_per_s') / base:.2f} |")


if __name__ == "__main__":
    main()
