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
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_SAMPLES = 60000
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


def train(a, tool, cluster, hosts, variant, seed, run_dir):
    algo, lr, own = VARIANTS[variant]
    ranks = a.nodes * a.ranks_per_node
    steps_per_epoch = TRAIN_SAMPLES // (ranks * a.batch)
    sets = [f"parallel.algorithm={algo}", "parallel.replicas_per_device=1", f"train.batch_size={a.batch}",
            f"optimizer.lr={lr}", f"schedule.warmup_steps={max(1, steps_per_epoch // 4)}",
            f"train.epochs={a.epochs}", f"train.eval_every_steps={max(1, steps_per_epoch // 4)}",
            f"train.log_every_steps={steps_per_epoch}", f"data.test_samples={a.test_samples}",
            f"run.seed={seed}", f"run.dir={run_dir}", "checkpoint.at_end=false"]
    sets += own
    cmd = [tool, "mpirun", cluster, "--host", hosts, "-np", str(ranks), "--", a.squall, "train", "--config",
           os.path.join(ROOT, "configs", "fashion-mnist-sma.toml")]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        print(f"# {variant} seed {seed}: failed: {done.stderr.strip()[-400:]}", file=sys.stderr)
        return {"final": None, "epochs": None, "seconds": None, "train_s": None}
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
            "seconds": hit["train_s"] if hit else None, "train_s": evals[-1]["train_s"] if evals else None}


def median_or_none(values):
    # A run that never reaches the target counts as infinitely slow.
    m = statistics.median([float("inf") if v is None else v for v in values])
    return None if m == float("inf") else m


def fmt(v, spec):
    return "not reached" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
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
    tool = os.path.join(ROOT, "tests", "cluster", "cluster")
    hosts = ",".join(f"{a.cluster}-n{i + 1}:{a.ranks_per_node}" for i in range(a.nodes))
    subprocess.run([tool, "down", a.cluster], check=False, capture_output=True)
    subprocess.run([tool, "up", a.cluster, "--nodes", str(a.nodes)], check=True)
    rates = a.rates.split(",")
    runs = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for rate in rates:
                subprocess.run([tool, "rate", a.cluster, rate], check=True, capture_output=True)
                for seed in a.seeds:
                    for v in variants:
                        d = os.path.join(work, f"{rate}-{v.replace(' ', '').replace(',', '-')}-{seed}")
                        r = train(a, tool, a.cluster, hosts, v, seed, d)
                        runs.append({"rate": rate, "variant": v, "seed": seed, **r})
                        print(f"# {rate} {v} seed {seed}: epochs {fmt(r['epochs'], '.2f')}, "
                              f"seconds {fmt(r['seconds'], '.1f')}, final {fmt(r['final'], '.4f')}", file=sys.stderr)
    finally:
        subprocess.run([tool, "down", a.cluster], check=False, capture_output=True)
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
            med[v] = (median_or_none([r["seconds"] for r in rs]), median_or_none([r["epochs"] for r in rs]),
                      statistics.median(finals) if finals else None, statistics.median(whole) if whole else None)
        for v in variants:
            t, e, fin, whole = med[v]
            bt, be = med[base][0], med[base][1]
            rt = f"{t / bt:.2f}" if t and bt else "-"
            re = f"{e / be:.2f}" if e and be else "-"
            print(f"| {rate} | {v} | {fmt(t, '.1f')} | {rt} | {fmt(e, '.2f')} | {re} | {fmt(fin, '.4f')} | "
                  f"{fmt(whole, '.1f')} |")


if __name__ == "__main__":
    main()
