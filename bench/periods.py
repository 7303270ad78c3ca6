#!/usr/bin/env python3
"""Averaging by level (parallel.periods = [inside, across], docs/training.md): time and epochs
to a target test accuracy on a test cluster whose nodes are joined by rate-limited links.

LeNet-5 on Fashion-MNIST (configs/fashion-mnist-sma.toml) on --nodes network-namespace nodes
(tests/cluster/cluster, as root) x --ranks-per-node ranks, one learner of --batch samples per
rank. Variants (--variants): ssgd, and sma (or local-sgd) with periods [1, 1] (today's
period 1), [1, 4] and [1, 16]: the node's ranks average every step over shared memory, the
nodes every 4 or 16 steps over the network; and outer (docs/training.md, "The outer
optimizer") with H in {4, 8, 16} and outer momentum in {0, 0.5, 0.7}. For every link rate of --rates, every seed and
every variant (interleaved: a slow spell of the shared machine hits every variant), one run
of --epochs epochs, evaluated every quarter epoch on --test-samples test samples; "time" is
the training seconds (evaluations excluded) and "epochs" the epochs done when the test
accuracy first reaches --target. Prints a Markdown table of medians per rate with ratios
against sma [1, 1], and writes every number to --json.

    python3 bench/periods.py                                  # as root; see bench/RESULTS.md
    python3 bench/periods.py --rates 1gbit --seeds 1 --epochs 1   # a smoke run
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_runs as cr  # noqa: E402

# name -> (algorithm, learning rate, its own keys): sma's rate is each learner's (the config's),
# ssgd's the global batch's (bench/sma_vs_ssgd.py's sweep at global batch 256), outer's a
# node's batch's (its inner steps are ssgd over the node).
VARIANTS = {
    "ssgd": ("ssgd", 0.1, []),
    "ssgd lr0.05": ("ssgd", 0.05, []),
    "ssgd lr0.2": ("ssgd", 0.2, []),
    "sma [1,1]": ("sma", 0.05, ["parallel.periods=[1, 1]"]),
    "sma [1,4]": ("sma", 0.05, ["parallel.periods=[1, 4]"]),
    "sma [1,16]": ("sma", 0.05, ["parallel.periods=[1, 16]"]),
    "local-sgd [1,1]": ("local-sgd", 0.05, ["parallel.periods=[1, 1]"]),
    "local-sgd [1,4]": ("local-sgd", 0.05, ["parallel.periods=[1, 4]"]),
    "local-sgd [1,16]": ("local-sgd", 0.05, ["parallel.periods=[1, 16]"]),
}
for h in (4, 8, 16):
    for mu in (0.0, 0.5, 0.7):
        VARIANTS[f"outer H{h} mu{mu}"] = ("outer", 0.1, [f"parallel.outer.period={h}", f"parallel.outer.momentum={mu}",
                                                          "parallel.outer.lr=0.7" if mu else "parallel.outer.lr=1.0"])


def train(a, variant, seed, run_dir):
    algo, lr, own = VARIANTS[variant]
    ranks = a.nodes * a.ranks_per_node
    steps_per_epoch = cr.TRAIN_SAMPLES // (ranks * a.batch)
    sets = [f"parallel.algorithm={algo}", "parallel.replicas_per_device=1", f"train.batch_size={a.batch}",
            f"optimizer.lr={lr}", f"schedule.warmup_steps={max(1, steps_per_epoch // 4)}",
            f"train.epochs={a.epochs}", f"train.eval_every_steps={max(1, steps_per_epoch // 4)}",
            f"train.log_every_steps={steps_per_epoch}", f"data.test_samples={a.test_samples}",
            f"run.seed={seed}", "checkpoint.at_end=false"] + own
    r = cr.train(a.squall, a.cluster, a.nodes, a.ranks_per_node, sets, run_dir, [a.target])
    return {"final": r["final"], "epochs": r[f"epochs@{a.target}"], "seconds": r[f"seconds@{a.target}"],
            "train_s": r["train_s"], "bytes": r["bytes"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(cr.ROOT, "build", "bin", "squall"))
    ap.add_argument("--cluster", default="pbench", help="the test cluster's name (brought up and down here)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank (one learner each)")
    ap.add_argument("--rates", default="1gbit,100mbit")
    ap.add_argument("--variants", nargs="+", default=["ssgd", "sma [1,1]", "sma [1,4]", "sma [1,16]"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--json", default="periods.json", help="where every number goes")
    a = ap.parse_args()
    variants = a.variants
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"--variants: unknown '{v}' (known: {', '.join(VARIANTS)})")
    cr.up(a.cluster, a.nodes)
    rates = a.rates.split(",")
    runs = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for rate in rates:
                cr.cluster("rate", a.cluster, rate)
                for seed in a.seeds:
                    for v in variants:
                        d = os.path.join(work, f"{rate}-{v.replace(' ', '').replace(',', '-')}-{seed}")
                        r = train(a, v, seed, d)
                        runs.append({"rate": rate, "variant": v, "seed": seed, **r})
                        print(f"# {rate} {v} seed {seed}: epochs {cr.fmt(r['epochs'], '.2f')}, "
                              f"seconds {cr.fmt(r['seconds'], '.1f')}, final {cr.fmt(r['final'], '.4f')}", file=sys.stderr)
    finally:
        cr.down(a.cluster)
    with open(a.json, "w") as f:
        json.dump({"nodes": a.nodes, "ranks_per_node": a.ranks_per_node, "batch": a.batch, "epochs": a.epochs,
                   "target": a.target, "test_samples": a.test_samples, "runs": runs}, f, indent=1)

    base = "sma [1,1]" if "sma [1,1]" in variants else variants[0]
    print(f"{a.nodes} nodes x {a.ranks_per_node} ranks x 1 learner x {a.batch} samples, {a.epochs} epochs, "
          f"seeds {' '.join(map(str, a.seeds))}; target test accuracy {a.target} on {a.test_samples} test "
          f"samples; medians; ratios against {base}\n")
    print("| link | variant | time to target s | vs base | epochs to target | vs base | final accuracy | "
          "train s (whole run) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for rate in rates:
        med = {}
        for v in variants:
            rs = [r for r in runs if r["rate"] == rate and r["variant"] == v]
            finals = [r["final"] for r in rs if r["final"] is not None]
            whole = [r["train_s"] for r in rs if r["train_s"] is not None]
            med[v] = (cr.median_or_none([r["seconds"] for r in rs]), cr.median_or_none([r["epochs"] for r in rs]),
                      statistics.median(finals) if finals else None, statistics.median(whole) if whole else None)
        for v in variants:
            t, e, fin, whole = med[v]
            bt, be = med[base][0], med[base][1]
            rt = f"{t / bt:.2f}" if t and bt else "-"
            re = f"{e / be:.2f}" if e and be else "-"
            print(f"| {rate} | {v} | {cr.fmt(t, '.1f')} | {rt} | {cr.fmt(e, '.2f')} | {re} | {cr.fmt(fin, '.4f')} | "
                  f"{cr.fmt(whole, '.1f')} |")


if __name__ == "__main__":
    main()
