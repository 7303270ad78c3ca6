#!/usr/bin/env python3
"""CPU training throughput: squall against PyTorch, side by side in one run.

For each model (lenet5 at batch 64, resnet20 at batch 32 by default) it alternates
`squall train` and bench/torch_train.py (same model, batch, thread count and Fashion-MNIST
samples, SGD with momentum) several times and prints the median training samples/s of
each and their ratio. Run with an interpreter that imports torch (Debian: /usr/bin/python3):

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


def squall_run(binary, model, batch, steps, threads, workdir):
    run_dir = tempfile.mkdtemp(dir=workdir)
    cmd = [binary, "train", "--config", os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml"),
           "--set", f"model.name={model}", "--set", f"train.batch_size={batch}", "--set", f"train.max_steps={steps}",
           "--set", f"run.threads={threads}", "--set", f"run.dir={run_dir}", "--set", "data.test_samples=256",
           "--set", "schedule.warmup_steps=0", "--set", "optimizer.weight_decay=0", "--set", f"train.log_every_steps={steps}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)["samples_per_s"]


def torch_run(model, batch, steps, threads):
    cmd = [sys.executable, os.path.join(HERE, "torch_train.py"), "--model", model, "--batch", str(batch),
           "--steps", str(steps), "--threads", str(threads), "--warmup", str(max(3, steps // 20))]
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
        return 0
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for case in args.cases.split(","):
            model, batch, steps = case.split(":")
            batch, steps = int(batch), int(steps)
            sq, pt = [], []
            for _ in range(args.runs):  # alternate so both see the same machine noise
                sq.append(squall_run(args.squall, model, batch, steps, args.threads, workdir))
                pt.append(torch_run(model, batch, steps, args.threads))
            ratios = [a / b for a, b in zip(sq, pt)]
            results.append({"model": model, "batch": batch, "steps": steps, "threads": args.threads,
                            "runs": args.runs, "squall_samples_per_s": statistics.median(sq),
                            "pytorch_samples_per_s": statistics.median(pt), "ratio_median": statistics.median(ratios),
                            "ratio_min": min(ratios), "ratio_max": max(ratios)})
    if args.json:
        print(json.dumps({"results": results}, indent=2))
        return 0
    print(f"| model | batch | threads | runs | squall samples/s | PyTorch samples/s | ratio (median, min-max) |")
    print(f"|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['batch']} | {r['threads']} | {r['runs']} | {r['squall_samples_per_s']:.0f} | "
              f"{r['pytorch_samples_per_s']:.0f} | {r['ratio_median']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
