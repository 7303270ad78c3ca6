#!/usr/bin/env python3
"""GPU training throughput: squall's CUDA backend against PyTorch eager, side by side in one run,
and Crossbow's reason to exist: several learners on one GPU against one.

1. Per step, squall against PyTorch: for each case (lenet5 at batch 64, resnet20 at batch 32)
   it alternates `squall train --set run.backend=cuda` (one learner; its summary.json
   samples/s) and bench/torch_train.py --device cuda (same model, batch, optimizer, fp32
   without TF32, cudnn.benchmark on) --runs times, and prints the medians and their ratio.
   Goal (issue 9): >= 1.0.
2. Learners: resnet20 at batch 32 per learner with 1 and with 4 learners on the GPU
   (parallel.replicas_per_device, ssgd), samples/s of each and the ratio. Goal: >= 1.5.

Both skip, saying so (exit status 77), where no GPU can be used (torch.cuda.is_available() is false, or
squall reports that no GPU can be used), and where PyTorch is missing ("SKIP: needs torch"). It needs
PyTorch and the standard library only (no numpy): bench/torch_train.py reads the IDX files itself.
Run with an interpreter that imports torch:

    python3 bench/gpu_training.py --squall build/bin/squall --runs 3
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


class NoGpu(Exception):
    pass


def squall_run(a, model, batch, steps, learners, workdir):
    run_dir = tempfile.mkdtemp(dir=workdir)
    sets = ["run.backend=cuda", f"model.name={model}", f"train.batch_size={batch}", f"train.max_steps={steps}",
            f"run.dir={run_dir}", "data.test_samples=256", "schedule.warmup_steps=0", "optimizer.weight_decay=0",
            f"train.log_every_steps={steps}", f"data.train={a.data}", f"data.test={a.data}",
            f"parallel.replicas_per_device={learners}", f"parallel.max_replicas_per_device={learners}"]
    cmd = [a.squall, "train", "--config", os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml")]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        if "no GPU can be used" in done.stderr:
            raise NoGpu(done.stderr.strip().splitlines()[-1])
        sys.exit(f"squall failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)["samples_per_s"]


def torch_run(a, model, batch, steps):
    cmd = [sys.executable, os.path.join(HERE, "torch_train.py"), "--model", model, "--batch", str(batch),
           "--steps", str(steps), "--threads", "4", "--warmup", str(max(10, steps // 10)), "--device", "cuda",
           "--data", a.data]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 77:  # torch_train.py's named skip (a module it needs is missing)
        raise NoGpu(done.stdout.strip().splitlines()[-1].removeprefix("SKIP: "))
    if done.returncode != 0:
        sys.exit(f"bench/torch_train.py failed ({done.returncode}): {(done.stdout + done.stderr).strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", default="lenet5:64:2000,resnet20:32:600", help="model:batch:steps,...")
    ap.add_argument("--learners", default="1,4", help="learner counts for resnet20 at batch 32")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print(f"SKIP: needs torch ({sys.executable} cannot import it)")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: PyTorch sees no GPU here")
        return 77
    device = torch.cuda.get_device_name(0)
    rows, scaling = [], []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for case in args.cases.split(","):
                model, batch, steps = case.split(":")
                batch, steps = int(batch), int(steps)
                sq, pt = [], []
                for _ in range(args.runs):  # alternate: both see the same machine noise
                    sq.append(squall_run(args, model, batch, steps, 1, workdir))
                    pt.append(torch_run(args, model, batch, steps))
                ratios = [s / p for s, p in zip(sq, pt)]
                rows.append({"model": model, "batch": batch, "squall": statistics.median(sq),
                             "pytorch": statistics.median(pt), "ratio": statistics.median(ratios),
                             "min": min(ratios), "max": max(ratios)})
            for learners in [int(v) for v in args.learners.split(",")]:
                runs = [squall_run(args, "resnet20", 32, 300, learners, workdir) for _ in range(args.runs)]
                scaling.append({"learners": learners, "samples_per_s": statistics.median(runs)})
    except NoGpu as e:
        print(f"SKIP: {e}")
        return 77
    if args.json:
        print(json.dumps({"device": device, "per_step": rows, "learners": scaling}))
        return 0
    print(f"device: {device}, runs: {args.runs}\n")
    print("| model | batch | squall samples/s | PyTorch samples/s | ratio (median, min-max) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['squall']:.0f} | {r['pytorch']:.0f} | "
              f"{r['ratio']:.2f} ({r['min']:.2f}-{r['max']:.2f}) |")
    print("\n| resnet20, batch 32 per learner | samples/s | against 1 learner |\n|---|---|---|")
    base = scaling[0]["samples_per_s"] if scaling else 1
    for s in scaling:
        print(f"| {s['learners']} learner(s) | {s['samples_per_s']:.0f} | {s['samples_per_s'] / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
