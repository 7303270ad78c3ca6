#!/usr/bin/env python3
"""Mixed precision against fp32: test accuracy and throughput of `squall train` at
train.precision = fp32, bf16 and fp16, side by side in one run (issue 10's bar: reduced
precision within 0.5 point of fp32's accuracy on LeNet-5 and ResNet-20).

For each model, each seed and each precision it trains the model's Fashion-MNIST config
(configs/fashion-mnist-<model>.toml; --epochs overrides train.epochs) on the chosen backend,
alternating the precisions within each seed so that machine noise falls on all of them, and
prints per precision the test accuracies, their median, the difference of the median from
fp32's (points), the median samples/s and its ratio to fp32's, and for fp16 the skipped steps.
A variant `<precision>+bf16comm` also sums the gradients across ranks in bf16
(parallel.comm_precision = bf16); with --ranks N every run is an mpiexec of N ranks (ssgd).

On the CPU backend reduced precision is the reference computation (f32 rounded after every
operation; docs/training.md, "Mixed precision"): its accuracy is what a GPU would reach, its
speed is not meaningful (slower than fp32). On a GPU (--backend cuda) both are.

    python3 bench/mixed_precision.py --squall build/bin/squall --models lenet5 --seeds 1,2,3
    python3 bench/mixed_precision.py --models resnet20 --epochs 2 --seeds 1
    python3 bench/mixed_precision.py --ranks 2 --precisions fp32,fp32+bf16comm --seeds 1,2
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


def run_one(a, model, variant, seed, workdir):
    run_dir = tempfile.mkdtemp(dir=workdir)
    precision, _, comm = variant.partition("+")
    sets = [f"run.backend={a.backend}", f"train.precision={precision}", f"run.seed={seed}", f"run.dir={run_dir}",
            f"data.train={a.data}", f"data.test={a.data}"]
    if comm:
        if comm != "bf16comm":
            sys.exit(f"unknown variant {variant}: <precision> or <precision>+bf16comm")
        sets.append("parallel.comm_precision=bf16")
    if a.epochs:
        sets.append(f"train.epochs={a.epochs}")
    cmd = [a.squall, "train", "--config", os.path.join(ROOT, "configs", f"fashion-mnist-{model}.toml")]
    if a.ranks > 1:
        cmd = ["mpiexec", "-np", str(a.ranks), "--oversubscribe", "--bind-to", "none"] + cmd
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 1 and "no GPU can be used" in r.stderr:
        print(f"SKIP: {r.stderr.strip().splitlines()[-1]}")
        sys.exit(77)
    if r.returncode != 0:
        sys.exit(f"squall train failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    return {"accuracy": s["final"]["test_accuracy"], "samples_per_s": s["samples_per_s"],
            "skipped": s.get("skipped_steps", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", default="lenet5", help="lenet5,resnet20")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=0, help="override train.epochs (0: the config's)")
    ap.add_argument("--ranks", type=int, default=1, help="mpiexec -np (ssgd across ranks)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    precisions = a.precisions.split(",")
    if precisions[0] != "fp32":  # the reference
        sys.exit("--precisions must start with fp32 (the reference)")
    report = {}
    with tempfile.TemporaryDirectory() as workdir:
        for model in a.models.split(","):
            results = {p: [] for p in precisions}
            for seed in [int(s) for s in a.seeds.split(",")]:
                for p in precisions:
                    results[p].append(run_one(a, model, p, seed, workdir))
                    print(f"  {model} seed {seed} {p}: accuracy {results[p][-1]['accuracy']:.4f}, "
                          f"{results[p][-1]['samples_per_s']:.0f} samples/s", file=sys.stderr, flush=True)
            ref_acc = statistics.median(r["accuracy"] for r in results["fp32"])
            ref_rate = statistics.median(r["samples_per_s"] for r in results["fp32"])
            print(f"{model} on {a.backend}, {a.ranks} rank(s), epochs {a.epochs or 'as configured'}, seeds {a.seeds}")
            print(f"  {'variant':14} {'accuracies':28} {'median':>7} {'vs fp32':>8} {'samples/s':>10} {'ratio':>6} skipped")
            report[model] = {}
            for p in precisions:
                accs = [r["accuracy"] for r in results[p]]
                acc = statistics.median(accs)
                rate = statistics.median(r["samples_per_s"] for r in results[p])
                skipped = [r["skipped"] for r in results[p]]
                delta = 100 * (acc - ref_acc)
                print(f"  {p:14} {' '.join(f'{x:.4f}' for x in accs):28} {acc:7.4f} {delta:+7.2f}pt {rate:10.0f} "
                      f"{rate / ref_rate:6.2f} {skipped if p.startswith('fp16') else ''}")
                report[model][p] = {"accuracies": accs, "median": acc, "points_vs_fp32": delta,
                                    "samples_per_s": rate, "ratio": rate / ref_rate, "skipped_steps": skipped}
            # The bar is reaching fp32's accuracy within 0.5 point: only a shortfall counts.
            shortfall = max(0.0, -min(report[model][p]["points_vs_fp32"] for p in precisions))
            verdict = "reaches" if shortfall <= 0.5 else "does NOT reach"
            print(f"  verdict: {verdict} fp32's accuracy within 0.5 point (largest shortfall {shortfall:.2f})")
    if a.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
