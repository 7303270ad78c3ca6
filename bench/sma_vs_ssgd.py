#!/usr/bin/env python3
"""Statistical efficiency: Crossbow's SMA with several small-batch learners against
synchronous SGD with one large batch, at the same samples per step, on Fashion-MNIST
(LeNet-5, configs/fashion-mnist-sma.toml). Both run under mpirun in the same invocation,
alternating, for each seed; evaluation every --eval-every steps gives the epochs and the
training seconds (evaluations excluded) until the test accuracy first reaches --target.

    python3 bench/sma_vs_ssgd.py --squall build/bin/squall --np 2 --seeds 1 2

ssgd: np ranks x 1 learner x (learners * batch) samples; sma: np ranks x learners x batch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, algo, seed, run_dir):
    if algo == "ssgd":
        extra = ["parallel.algorithm=ssgd", "parallel.replicas_per_device=1",
                 f"train.batch_size={args.learners * args.batch}"]
    else:
        extra = ["parallel.algorithm=sma", f"parallel.replicas_per_device={args.learners}",
                 f"train.batch_size={args.batch}", f"parallel.alpha={args.alpha}", f"parallel.period={args.period}"]
    sets = extra + [f"run.seed={seed}", f"run.dir={run_dir}", f"train.epochs={args.epochs}",
                    f"train.eval_every_steps={args.eval_every}"]
    cmd = ["mpirun", "-np", str(args.np), "--oversubscribe", args.squall, "train", "--config",
           os.path.join(ROOT, "configs", "fashion-mnist-sma.toml")]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    evals = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["kind"] == "eval":
                evals.append(m)
    hit = next((e for e in evals if e["test_accuracy"] >= args.target), None)
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    return {"epochs": hit["epochs_done"] if hit else None, "seconds": hit["train_s"] if hit else None,
            "final": s["final"]["test_accuracy"], "samples_per_s": s["samples_per_s"]}


def fmt(v, spec):
    return "not reached" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--learners", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="per sma learner")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--period", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:
            for algo in ("ssgd", "sma"):
                r = run(args, algo, seed, os.path.join(work, f"{algo}-{seed}"))
                rows.append((algo, seed, r))
                print(f"# {algo} seed {seed}: {r}", file=sys.stderr)
    per_step = args.np * args.learners * args.batch
    print(f"samples per step {per_step}: ssgd = {args.np} ranks x 1 learner x {args.learners * args.batch}; "
          f"sma = {args.np} ranks x {args.learners} learners x {args.batch}, alpha {args.alpha}, period {args.period}")
    print(f"| algorithm | seed | epochs to {args.target} | train seconds to {args.target} | final accuracy | samples/s |")
    print("|---|---|---|---|---|---|")
    for algo, seed, r in rows:
        print(f"| {algo} | {seed} | {fmt(r['epochs'], '.2f')} | {fmt(r['seconds'], '.1f')} | {r['final']:.4f} | "
              f"{r['samples_per_s']:.0f} |")
    for algo in ("ssgd", "sma"):
        got = [r for a, _, r in rows if a == algo]
        ep = [r["epochs"] for r in got if r["epochs"] is not None]
        sec = [r["seconds"] for r in got if r["seconds"] is not None]
        print(f"{algo}: median epochs {fmt(statistics.median(ep) if ep else None, '.2f')}, median seconds "
              f"{fmt(statistics.median(sec) if sec else None, '.1f')} ({len(ep)}/{len(got)} runs reached the target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
