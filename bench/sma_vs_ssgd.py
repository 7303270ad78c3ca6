#!/usr/bin/env python3
"""Statistical efficiency, honestly: Crossbow's SMA against synchronous SGD on Fashion-MNIST
(LeNet-5, configs/fashion-mnist-sma.toml), at several global batches, each algorithm with its
learning rate tuned by a sweep of the same budget.

For each global batch G (default 64, 256, 1024) on --np ranks:
  ssgd  np ranks x 1 learner x G/np samples (one large batch per rank);
  sma   np ranks x G/(np*b) learners x b samples (b = --batch, 16: Crossbow's small batches),
        with SMA's default coefficients (docs/training.md, "SMA at any scale").
1. Sweep: every candidate learning rate of the algorithm (the same number for both: ssgd's
   are the global-batch rates, sma's each learner's) trains --sweep-epochs epochs with seed 1;
   the rate with the best final test accuracy is chosen.
2. Runs: the chosen rate trains --epochs epochs for each of --seeds, evaluating every quarter
   epoch; "epochs" and "train seconds" are those until the test accuracy first reaches
   --target (evaluations excluded), or "not reached".
Warm-up is half an epoch and the schedule a cosine over the run, whatever the batch. The runs
go one after the other, ssgd and sma alternating, so a slow spell of the machine hits both.
Prints Markdown tables for bench/RESULTS.md and writes every number to --json. Their samples/s
is the steady rate (summary.json's steady_samples_per_s: without the first steps and the
evaluations; docs/metrics.md, "Steady rate").

    python3 bench/sma_vs_ssgd.py                       # about 20 minutes on two cores
    python3 bench/sma_vs_ssgd.py --quick               # a smoke run of about a minute
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_SAMPLES = 60000
CANDIDATES = {"ssgd": [0.05, 0.1, 0.2], "sma": [0.02, 0.05, 0.1]}


def settings(a, algo, global_batch):
    per_rank = global_batch // a.np
    if algo == "ssgd":
        learners, batch = 1, per_rank
    else:
        learners, batch = max(1, per_rank // a.batch), a.batch
    return learners, batch


def train(a, algo, global_batch, lr, seed, epochs, eval_quarters, run_dir):
    learners, batch = settings(a, algo, global_batch)
    steps_per_epoch = TRAIN_SAMPLES // (a.np * learners * batch)
    sets = [f"parallel.algorithm={algo}", f"parallel.replicas_per_device={learners}",
            f"parallel.max_replicas_per_device={learners}", f"train.batch_size={batch}", f"optimizer.lr={lr}",
            f"schedule.warmup_steps={max(1, steps_per_epoch // 2)}", f"train.epochs={epochs}",
            f"train.eval_every_steps={max(1, steps_per_epoch // 4) if eval_quarters else 0}",
            f"train.log_every_steps={steps_per_epoch}", f"run.seed={seed}", f"run.dir={run_dir}"]
    cmd = [a.mpirun, "-np", str(a.np), "--oversubscribe", a.squall, "train", "--config",
           os.path.join(ROOT, "configs", "fashion-mnist-sma.toml")]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        # A divergence is a result of the sweep, not a failure of the benchmark.
        print(f"# {algo} G={global_batch} lr={lr} seed={seed}: failed: {done.stderr.strip()[-300:]}",
              file=sys.stderr)
        return {"final": None, "epochs": None, "seconds": None, "samples_per_s": None}
    evals = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["kind"] == "eval":
                evals.append(m)
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    hit = next((e for e in evals if e["test_accuracy"] >= a.target), None)
    return {"final": s["final"]["test_accuracy"], "epochs": hit["epochs_done"] if hit else None,
            "seconds": hit["train_s"] if hit else None, "samples_per_s": s.get("steady_samples_per_s")}


def fmt(v, spec):
    return "not reached" if v is None else format(v, spec)


def median_or_none(values):
    # A run that never reaches the target counts as infinitely slow: the median is "not
    # reached" when half of the runs or more did not reach it.
    m = statistics.median([float("inf") if v is None else v for v in values])
    return None if m == float("inf") else m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="samples per sma learner")
    ap.add_argument("--global-batches", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--sweep-epochs", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--json", default="sma_vs_ssgd.json", help="where every number goes")
    ap.add_argument("--quick", action="store_true", help="global batch 64, 2 candidates, 1 epoch, 1 seed")
    a = ap.parse_args()
    candidates = dict(CANDIDATES)
    if a.quick:
        a.global_batches, a.sweep_epochs, a.epochs, a.seeds = [64], 1, 1, [1]
        candidates = {k: v[:2] for k, v in candidates.items()}
    for g in a.global_batches:
        if g % (a.np * a.batch):
            sys.exit(f"--global-batches: {g} is not a multiple of np x batch = {a.np * a.batch}")

    out = {"np": a.np, "batch_per_sma_learner": a.batch, "target": a.target, "sweep_epochs": a.sweep_epochs,
           "epochs": a.epochs, "seeds": a.seeds, "sweep": [], "runs": []}
    with tempfile.TemporaryDirectory() as work:
        chosen = {}
        for g in a.global_batches:
            best = {}
            for i in range(len(candidates["ssgd"])):
                for algo in ("ssgd", "sma"):
                    lr = candidates[algo][i]
                    r = train(a, algo, g, lr, 1, a.sweep_epochs, False, os.path.join(work, f"sweep-{algo}-{g}-{i}"))
                    out["sweep"].append({"algo": algo, "global_batch": g, "lr": lr, **r})
                    print(f"# sweep {algo} G={g} lr={lr}: final {fmt(r['final'], '.4f')}", file=sys.stderr)
                    if r["final"] is not None and r["final"] > best.get(algo, (None, -1))[1]:
                        best[algo] = (lr, r["final"])
            for algo in ("ssgd", "sma"):
                chosen[(algo, g)] = best.get(algo, (None, None))[0]
            for seed in a.seeds:
                for algo in ("ssgd", "sma"):
                    lr = chosen[(algo, g)]
                    if lr is None:
                        continue
                    r = train(a, algo, g, lr, seed, a.epochs, True, os.path.join(work, f"run-{algo}-{g}-{seed}"))
                    out["runs"].append({"algo": algo, "global_batch": g, "lr": lr, "seed": seed, **r})
                    print(f"# run {algo} G={g} lr={lr} seed={seed}: epochs {fmt(r['epochs'], '.2f')}, "
                          f"seconds {fmt(r['seconds'], '.1f')}, final {fmt(r['final'], '.4f')}", file=sys.stderr)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)

    print(f"Sweep ({a.sweep_epochs} epochs, seed 1; final test accuracy per learning rate):\n")
    print("| global batch | algorithm | " + " | ".join(f"lr {i + 1}" for i in range(len(candidates["ssgd"]))) + " |")
    print("|---|---|" + "---|" * len(candidates["ssgd"]))
    for g in a.global_batches:
        for algo in ("ssgd", "sma"):
            cells = [f"{s['lr']}: {fmt(s['final'], '.4f')}" for s in out["sweep"]
                     if s["algo"] == algo and s["global_batch"] == g]
            print(f"| {g} | {algo} | " + " | ".join(cells) + " |")
    print(f"\nRuns ({a.epochs} epochs, seeds {' '.join(map(str, a.seeds))}; to test accuracy {a.target}):\n")
    print("| global batch | algorithm | layout | lr | epochs to target (median; per seed) "
          "| train seconds to target (median; per seed) | final accuracy (median) | steady samples/s |")
    print("|---|---|---|---|---|---|---|---|")
    for g in a.global_batches:
        for algo in ("ssgd", "sma"):
            runs = [r for r in out["runs"] if r["algo"] == algo and r["global_batch"] == g]
            if not runs:
                print(f"| {g} | {algo} | | | every candidate failed | | | |")
                continue
            learners, batch = settings(a, algo, g)
            ep, sec = [r["epochs"] for r in runs], [r["seconds"] for r in runs]
            finals = [r["final"] for r in runs if r["final"] is not None]
            rates = [r["samples_per_s"] for r in runs if r["samples_per_s"] is not None]
            print(f"| {g} | {algo} | {a.np} x {learners} x {batch} | {runs[0]['lr']} | "
                  f"{fmt(median_or_none(ep), '.2f')}; {', '.join(fmt(e, '.2f') for e in ep)} | "
                  f"{fmt(median_or_none(sec), '.1f')}; {', '.join(fmt(s, '.1f') for s in sec)} | "
                  f"{fmt(statistics.median(finals) if finals else None, '.4f')} | "
                  f"{fmt(statistics.median(rates) if rates else None, '.0f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
