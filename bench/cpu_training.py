#!/usr/bin/env python3
"""CPU training throughput: squall against PyTorch, side by side in one run.

For each model (lenet5 at batch 64, resnet20 at batch 32 by default) it alternates
`squall train` and bench/torch_train.py (the same network, bench/torch_models.py; the same
batch, thread count and Fashion-MNIST samples; SGD with momentum) several times and prints
the median training samples/s of each and their ratio.

What is measured, on both sides, is the steady rate of a run of STEPS steps: squall's
summary.json steady_samples_per_s (docs/metrics.md, "Steady rate": the steps after the first
max(10, 5% of STEPS), without evaluation or checkpoint time; the run evaluates only after its
last step and writes no checkpoint), and PyTorch's timed loop of the same number of steps
after a warm-up of the same count (no evaluation, the samples already in memory). Run with
an interpreter that imports torch (Debian: /usr/bin/python3):

    /usr/bin/python3 bench/cpu_training.py --squall build/bin/squall --runs 5
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
from torch_peer import steady_skip  # noqa: E402


def squall_run(binary, model, batch, steps, threads, workdir):
    """squall's steady samples/s of a run of `steps` steps (from its records for a squall older
    than summary.json's steady rate: bench/step_before_after.py's --before)."""
    sets = bc.rate_sets(steps) + [f"model.name={model}", f"train.batch_size={batch}", f"run.threads={threads}",
                                  "data.test_samples=256", "optimizer.weight_decay=0"]
    summary = bc.squall_train(binary, os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml"), sets, workdir, steps)
    return bc.steady_rate(summary, summary["_run_dir"])


def torch_run(model, batch, steps, threads):
    """PyTorch's samples/s over the same steps: `steps` less squall's skip, after that many."""
    skip = steady_skip(steps)
    cmd = [sys.executable, os.path.join(HERE, "torch_train.py"), "--model", model, "--batch", str(batch),
           "--steps", str(steps - skip), "--threads", str(threads), "--warmup", str(skip)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cases", default="lenet5:64:600,resnet20:32:60", help="model:batch:steps,...")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: this interpreter cannot import torch; run with /usr/bin/python3 (Debian's python3-torch)")
        return 77
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for case in args.cases.split(","):
            model, batch, steps = case.split(":")
            batch, steps = int(batch), int(steps)
            sq, pt = [], []
            if steps <= steady_skip(steps):
                sys.exit(f"{case}: {steps} steps leave none after the {steady_skip(steps)} a steady rate leaves out")
            for _ in range(args.runs):  # alternate so both see the same machine noise
                try:
                    sq.append(squall_run(args.squall, model, batch, steps, args.threads, workdir))
                except bc.CaseFailed as e:
                    sys.exit(f"{case}: {e}")
                pt.append(torch_run(model, batch, steps, args.threads))
            ratios = [a / b for a, b in zip(sq, pt)]
            results.append({"model": model, "batch": batch, "steps": steps, "threads": args.threads,
                            "runs": args.runs, "squall_samples_per_s": statistics.median(sq),
                            "pytorch_samples_per_s": statistics.median(pt), "ratio_median": statistics.median(ratios),
                            "ratio_min": min(ratios), "ratio_max": max(ratios)})
    if args.json:
        print(json.dumps({"results": results}, indent=2))
        return 0
    print("steady samples/s: the steps after the first max(10, 5%) of each run, no evaluation (both sides)\n")
    print("| model | batch | threads | runs | squall samples/s | PyTorch samples/s | ratio (median, min-max) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['batch']} | {r['threads']} | {r['runs']} | {r['squall_samples_per_s']:.0f} | "
              f"{r['pytorch_samples_per_s']:.0f} | {r['ratio_median']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
