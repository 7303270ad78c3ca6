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

Throughput is the steady rate, summary.json's steady_samples_per_s (docs/metrics.md, "Steady
rate": without the first steps, the evaluations and the checkpoints), since these runs
evaluate every epoch. There is no PyTorch side: it compares squall with itself.

--budget SECONDS: a run that would end past it is not started, and the ones left out are
named (gpu-check's lease plan gives it a step of its own); --deadline EPOCH_SECONDS the same
for a wall-clock time fixed before Python started. --rehearse: a check of the script
(12 steps on 512 training and 128 test samples, one seed, one thread; its figures mean
nothing). Output
(scripts/gpu-check reads it): as the last two lines `figure: <the first reduced precision's
accuracy against fp32's and its samples/s>` and `ratio: -` (no PyTorch here). With
--backend cuda and no usable GPU: `SKIP: <reason>`, exit 77.

    python3 bench/mixed_precision.py --squall build/bin/squall --models lenet5 --seeds 1,2,3
    python3 bench/mixed_precision.py --models resnet20 --epochs 2 --seeds 1
    python3 bench/mixed_precision.py --ranks 2 --precisions fp32,fp32+bf16comm --seeds 1,2
    python3 bench/mixed_precision.py --backend cpu --rehearse --budget 60
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402


def run_one(a, model, variant, seed, workdir, timeout=None):
    run_dir = tempfile.mkdtemp(dir=workdir)
    precision, _, comm = variant.partition("+")
    sets = [f"run.backend={a.backend}", f"train.precision={precision}", f"run.seed={seed}", f"run.dir={run_dir}",
            f"data.train={a.data}", f"data.test={a.data}"]
    if a.backend == "cpu" and precision != "fp32":
        sets.append(f"train.cpu_precision={a.cpu_precision}")
    if comm:
        if comm != "bf16comm":
            sys.exit(f"unknown variant {variant}: <precision> or <precision>+bf16comm")
        sets.append("parallel.comm_precision=bf16")
    if a.epochs:
        sets.append(f"train.epochs={a.epochs}")
    if a.rehearse:
        # 12 steps (a steady rate needs 11), one thread: a busy machine's cores make OpenMP teams wait on each other.
        sets += ["train.max_steps=12", "data.train_samples=512", "data.test_samples=128", "schedule.warmup_steps=0",
                 "run.threads=1"]
    cmd = [a.squall, "train", "--config", os.path.join(ROOT, "configs", f"fashion-mnist-{model}.toml")]
    if a.ranks > 1:
        cmd = ["mpiexec", "-np", str(a.ranks), "--oversubscribe", "--bind-to", "none"] + cmd
    for s in sets:
        cmd += ["--set", s]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        bc.keep_run(f"{model}-{variant}-seed{seed} (cut at the budget)", cmd, "killed at the budget's end",
                    e.stdout, e.stderr, run_dir)
        raise
    bc.keep_run(f"{model}-{variant}-seed{seed}", cmd, r.returncode, r.stdout, r.stderr, run_dir)
    if r.returncode == 1 and bc.NO_GPU in r.stderr:
        bc.skip(r.stderr.strip().splitlines()[-1])
    if r.returncode != 0:
        sys.exit(f"squall train failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    try:
        rate = bc.steady_rate(s)
    except bc.CaseFailed as e:
        sys.exit(f"{' '.join(cmd)}: {e}")
    return {"accuracy": s["final"]["test_accuracy"], "samples_per_s": rate, "skipped": s.get("skipped_steps", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", default="lenet5", help="lenet5,resnet20")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--cpu-precision", default="reference", choices=["auto", "native", "reference"],
                    help="train.cpu_precision of the CPU runs at bf16/fp16 (native: oneDNN's bf16 primitives, "
                         "where the CPU has AVX512-BF16 or AMX)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=0, help="override train.epochs (0: the config's)")
    ap.add_argument("--ranks", type=int, default=1, help="mpiexec -np (ssgd across ranks)")
    ap.add_argument("--budget", type=float, default=0, help="seconds this call may use (0: no limit)")
    bc.add_deadline_argument(ap)
    ap.add_argument("--rehearse", action="store_true", help="a short check of the script (one seed, 12 steps)")
    ap.add_argument("--json", action="store_true", help="also print every number as one JSON line (before the last two)")
    a = ap.parse_args()
    precisions = a.precisions.split(",")
    if precisions[0] != "fp32":  # the reference
        sys.exit("--precisions must start with fp32 (the reference)")
    seeds = [int(x) for x in a.seeds.split(",")][:1 if a.rehearse else None]
    budget = bc.Budget(a.budget, a.deadline)
    report, left_out, spent, figure = {}, [], [], None
    with tempfile.TemporaryDirectory() as workdir:
        a.data = bc.fashion_mnist(a.data, workdir)
        bc.out(f"{a.models} on {a.backend}, {a.ranks} rank(s), epochs {a.epochs or 'as configured'}, seeds "
               f"{','.join(map(str, seeds))}" + (" (rehearsal: the figures mean nothing)" if a.rehearse else ""))
        bc.print_table_head(["model", "seed", "variant", "test accuracy", "steady samples/s", "skipped steps"])
        results = {}
        for model in a.models.split(","):
            results[model] = {p: [] for p in precisions}
            for seed in seeds:
                for p in precisions:  # alternating within a seed: machine noise falls on every precision
                    if not budget.fits(1.2 * max(spent, default=0.0)):
                        left_out.append(f"{model} seed {seed} {p}")
                        continue
                    t0 = time.monotonic()
                    try:
                        r = run_one(a, model, p, seed, workdir, budget.timeout())
                    except subprocess.TimeoutExpired:
                        left_out.append(f"{model} seed {seed} {p} (cut at the budget's end)")
                        continue
                    spent.append(time.monotonic() - t0)
                    results[model][p].append(r)
                    bc.print_row([model, seed, p, f"{r['accuracy']:.4f}", bc.fmt(r["samples_per_s"]),
                                  r["skipped"] if p.startswith("fp16") else ""])
        for model, by_precision in results.items():
            if not by_precision["fp32"]:
                bc.out(f"\n{model}: no fp32 run, nothing to compare against")
                continue
            ref_acc = statistics.median(r["accuracy"] for r in by_precision["fp32"])
            ref_rate = statistics.median(r["samples_per_s"] for r in by_precision["fp32"])
            bc.out(f"\n{model}: medians over seeds")
            bc.print_table_head(["variant", "accuracies", "median", "vs fp32", "steady samples/s", "ratio to fp32",
                                 "skipped steps"])
            report[model] = {}
            for p in precisions:
                runs = by_precision[p]
                if not runs:
                    continue
                accs = [r["accuracy"] for r in runs]
                acc = statistics.median(accs)
                rate = statistics.median(r["samples_per_s"] for r in runs)
                skipped = [r["skipped"] for r in runs]
                delta = 100 * (acc - ref_acc)
                bc.print_row([p, " ".join(f"{x:.4f}" for x in accs), f"{acc:.4f}", f"{delta:+.2f} pt", bc.fmt(rate),
                              bc.fmt(rate / ref_rate, 2), skipped if p.startswith("fp16") else ""])
                report[model][p] = {"accuracies": accs, "median": acc, "points_vs_fp32": delta,
                                    "samples_per_s": rate, "ratio": rate / ref_rate, "skipped_steps": skipped}
                if figure is None and p != "fp32":
                    figure = (f"{model} {p}: accuracy {acc:.4f} ({delta:+.2f} pt vs fp32), {rate:.0f} samples/s "
                              f"({rate / ref_rate:.2f}x fp32)")
            # The bar is reaching fp32's accuracy within 0.5 point: only a shortfall counts.
            shortfall = max(0.0, -min(v["points_vs_fp32"] for v in report[model].values()))
            verdict = "reaches" if shortfall <= 0.5 else "does NOT reach"
            bc.out(f"verdict: {verdict} fp32's accuracy within 0.5 point (largest shortfall {shortfall:.2f})")
    if left_out:
        bc.out(f"\nleft out, past the budget of {budget.seconds:.0f} s: {', '.join(left_out)}")
    if a.json:
        bc.out(json.dumps(report))
    bc.contract_end(figure or "no reduced precision compared with fp32", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
