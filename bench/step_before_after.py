#!/usr/bin/env python3
"""A change to the training step, measured against the build before it, in one run.

Two squall binaries (--before, --after) and PyTorch, alternating --runs times:
  1. one rank on this machine: lenet5 (batch 64), resnet20 (batch 32) and the climate U-Net
     (batch 8) as in bench/cpu_training.py, each binary's samples/s against PyTorch's eager
     NCHW run of this interpreter (same model, batch, threads, samples, SGD with momentum);
  2. 2 nodes x 1 rank of tests/cluster over --rate links (root): ssgd and sma, LeNet-5 on
     Fashion-MNIST with 2 learners per rank, after against before.
Prints medians and the ratios (after / before, and each against PyTorch). Every rate is a
steady rate (docs/metrics.md, "Steady rate"): squall's steady_samples_per_s, or for a
binary older than it the same steps' rate read from its train records, and PyTorch's timed
loop over the same steps after a warm-up of the same count (bench/cpu_training.py). Run with
an interpreter that imports torch (Debian: /usr/bin/python3):

    /usr/bin/python3 bench/step_before_after.py --before OLD/bin/squall --after build/bin/squall
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402
import cpu_training  # noqa: E402  (squall_run, torch_run)


def cluster_run(binary, algorithm, steps, run_dir, name):
    tool = os.path.join(ROOT, "tests", "cluster", "cluster")
    sets = bc.rate_sets(steps) + [f"parallel.algorithm={algorithm}", "parallel.replicas_per_device=2",
                                  "parallel.period=1", "data.test_samples=256", f"run.dir={run_dir}", "run.threads=1"]
    args = [binary, "train", "--config", os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml")]
    for s in sets:
        args += ["--set", s]
    cmd = [tool, "mpirun", name, "--host", f"{name}-n1:1,{name}-n2:1", "--"] + args
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    with open(os.path.join(run_dir, "summary.json")) as f:
        return bc.steady_rate(json.load(f), run_dir)


def med(x):
    return statistics.median(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cases", default="lenet5:64:600,resnet20:32:60,unet:8:40", help="model:batch:steps,...")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="a Fashion-MNIST folder")
    ap.add_argument("--cluster-steps", type=int, default=300)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--no-cluster", action="store_true")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: this interpreter cannot import torch; run with /usr/bin/python3 (Debian's python3-torch)")
        return 0
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as work:
        print("| model | batch | threads | runs | before samples/s | after samples/s | PyTorch samples/s "
              "| after / before | before / PyTorch | after / PyTorch |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        # cpu_training's bench, once per binary (its data is made by the after binary, once).
        bench_args = argparse.Namespace(squall=a.after, data=a.data, threads=a.threads, squall_set=[],
                                        peer_timeout=900)
        bench = cpu_training.Bench(bench_args, work)
        for text in a.cases.split(","):
            case = cpu_training.Case(text)
            bench.data_for(case)
            b, f, t = [], [], []
            for _ in range(a.runs):  # alternate so all three see the same machine noise
                for binary, rates in ((a.before, b), (a.after, f)):
                    bench.a.squall = binary
                    rates.append(bench.squall_run(case)[0])
                t.append(bench.peer_run(case, [])["samples_per_s"])
            bench.a.squall = a.after
            peer = [x for x in t if x]
            ratio = (lambda xs, ys: f"{med([y / x for x, y in zip(xs, ys)]):.2f}") if len(peer) == len(t) else None
            print(f"| {case.model} | {case.batch} | {a.threads} | {a.runs} | {med(b):.1f} | {med(f):.1f} | "
                  f"{(f'{med(peer):.1f}') if peer else 'failed'} | {med([y / x for x, y in zip(b, f)]):.3f} | "
                  f"{ratio(t, b) if ratio else '-'} | {ratio(t, f) if ratio else '-'} |", flush=True)
        if a.no_cluster:
            return 0
        tool = os.path.join(ROOT, "tests", "cluster", "cluster")
        name = "benchba"
        subprocess.run([tool, "down", name], capture_output=True)
        subprocess.run([tool, "up", name, "--nodes", "2", "--rate", a.rate], check=True)
        try:
            print(f"\n2 nodes x 1 rank x 2 learners, {a.rate} links, LeNet-5 batch 64, {a.cluster_steps} steps")
            print("| algorithm | runs | before samples/s | after samples/s | after / before |")
            print("|---|---|---|---|---|")
            for algorithm in ("ssgd", "sma"):
                b, f = [], []
                for r in range(a.runs):
                    b.append(cluster_run(a.before, algorithm, a.cluster_steps, os.path.join(work, f"b-{algorithm}-{r}"), name))
                    f.append(cluster_run(a.after, algorithm, a.cluster_steps, os.path.join(work, f"a-{algorithm}-{r}"), name))
                print(f"| {algorithm} | {a.runs} | {med(b):.0f} | {med(f):.0f} | "
                      f"{med([y / x for x, y in zip(b, f)]):.3f} |", flush=True)
        finally:
            subprocess.run([tool, "down", name], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
