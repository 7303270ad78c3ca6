#!/usr/bin/env python3
"""parallel.algorithm = outer against tuned ssgd, sma and local-sgd over slow links (issue 31;
docs/training.md, "The outer optimizer").

LeNet-5 on Fashion-MNIST (configs/fashion-mnist-sma.toml) on --nodes network-namespace nodes
of the test cluster (tests/cluster/cluster, as root), one rank per node with --learners
learners of --batch samples each, the links between nodes limited to --rate. Every seed runs
every variant once (interleaved: a slow spell of the shared machine hits every variant), for
--epochs epochs, evaluated every quarter epoch on --test-samples test samples. Reported, as
medians over the seeds with the spread: the training seconds (evaluations excluded) and
epochs at which the test accuracy first reaches each of --targets, the accuracy at the end,
and the bytes the nodes sent each other.

A variant is named by what it runs, so that a grid is written on the command line:
    ssgd lr0.1               synchronous SGD, the global batch's learning rate 0.1
    ssgd accum4 lr0.4        ssgd summing across nodes once per 4 batches: each learner's batch
                             is 4 x --batch (for a model without BatchNorm, as LeNet-5, the same
                             update as accumulating 4 gradients; it computes faster, so it flatters ssgd)
    sma [1,4] lr0.05         sma (or local-sgd) averaging inside a node every step and across
                             nodes every 4 (parallel.periods); the rate is each learner's
    outer H8 mu0.5 lr0.1     outer with period 8 and outer momentum 0.5 (outer lr 0.7, or 1
                             where the momentum is 0: then an outer step is the nodes' mean);
                             the rate is the inner one, a node's batch's; add eta<x> to set the outer lr,
                             qsr<a> for QSR's growing period, "streamed" for parallel.outer.streaming,
                             "async" for parallel.outer.async (and stale<B> for its max_staleness)

    python3 bench/outer.py                                   # as root; bench/RESULTS.md has the runs
    python3 bench/outer.py --seeds 1 --epochs 1 --variants "ssgd lr0.1" "outer H8 mu0.5 lr0.1"
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_runs as cr  # noqa: E402

DEFAULT_VARIANTS = (["ssgd lr0.05", "ssgd lr0.1", "ssgd lr0.15", "ssgd lr0.2", "ssgd accum4 lr0.1", "ssgd accum4 lr0.2",
                     "sma [1,4] lr0.05", "local-sgd [1,4] lr0.05"] +
                    [f"outer H{h} mu{mu} lr0.1" for h in (4, 8, 16) for mu in (0.0, 0.5, 0.7)])


def variant_sets(name, batch):
    """The --set keys of a variant, and the samples of one learner's batch; SystemExit when the name
    says something this bench does not know."""
    words = name.split()
    lr = next((w[2:] for w in words if re.fullmatch(r"lr[0-9.]+", w)), None)
    if lr is None:
        sys.exit(f"variant '{name}': no learning rate (lr<x>)")
    sets = [f"optimizer.lr={lr}"]
    algo = words[0]
    if algo == "ssgd":
        accum = next((int(w[5:]) for w in words if re.fullmatch(r"accum[0-9]+", w)), 1)
        return sets + ["parallel.algorithm=ssgd"], batch * accum
    if algo in ("sma", "local-sgd"):
        m = re.search(r"\[(\d+),(\d+)\]", name)
        if not m:
            sys.exit(f"variant '{name}': {algo} needs its periods, e.g. [1,4]")
        return sets + [f"parallel.algorithm={algo}", f"parallel.periods=[{m.group(1)}, {m.group(2)}]"], batch
    if algo == "outer":
        h = next((w[1:] for w in words if re.fullmatch(r"H[0-9]+", w)), None)
        mu = next((w[2:] for w in words if re.fullmatch(r"mu[0-9.]+", w)), "0.0")
        eta = next((w[3:] for w in words if re.fullmatch(r"eta[0-9.]+", w)), "0.7" if float(mu) else "1.0")
        if h is None:
            sys.exit(f"variant '{name}': outer needs its period (H<n>)")
        sets += ["parallel.algorithm=outer", f"parallel.outer.period={h}", f"parallel.outer.momentum={mu}",
                 f"parallel.outer.lr={eta}"]
        qsr = next((w[3:] for w in words if re.fullmatch(r"qsr[0-9.]+", w)), None)
        if qsr is not None:
            sets.append(f"parallel.outer.qsr={qsr}")
        if "streamed" in words:
            sets.append("parallel.outer.streaming=true")
        quorum = next((w[6:] for w in words if re.fullmatch(r"quorum[0-9.]+", w)), None)
        if quorum is not None:
            sets.append(f"train.epoch_quorum={quorum}")
        if "async" in words:
            sets.append("parallel.outer.async=true")
            stale = next((w[5:] for w in words if re.fullmatch(r"stale-?[0-9]+", w)), None)
            if stale is not None:
                sets.append(f"parallel.outer.max_staleness={stale}")
        return sets, batch
    sys.exit(f"variant '{name}': unknown algorithm '{algo}' (ssgd, sma, local-sgd, outer)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(cr.ROOT, "build", "bin", "squall"))
    ap.add_argument("--cluster", default="obench", help="the test cluster's name (brought up and down here)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--learners", type=int, default=4, help="learners per node (one rank per node)")
    ap.add_argument("--batch", type=int, default=16, help="samples per learner")
    ap.add_argument("--rate", default="100mbit", help="the links' rate limit (tc's notation)")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.88, 0.89])
    ap.add_argument("--test-samples", type=int, default=10000)
    ap.add_argument("--json", default="outer.json", help="where every number goes")
    ap.add_argument("--report", metavar="JSON", help="print the table of an earlier run's --json, run nothing")
    a = ap.parse_args()
    if a.report:
        with open(a.report) as f:
            saved = json.load(f)
        for key in ("nodes", "learners", "batch", "rate", "epochs", "targets", "test_samples"):
            setattr(a, key, saved[key])
        a.seeds = sorted({r["seed"] for r in saved["runs"]})
        a.variants = list(dict.fromkeys(r["variant"] for r in saved["runs"]))
        report(a, saved["runs"])
        return
    plans = {v: variant_sets(v, a.batch) for v in a.variants}
    cr.up(a.cluster, a.nodes)
    runs = []
    try:
        cr.cluster("rate", a.cluster, a.rate)
        with tempfile.TemporaryDirectory() as work:
            for seed in a.seeds:
                for v in a.variants:
                    sets, batch = plans[v]
                    sets = sets + cr.schedule_sets(a.nodes, a.learners, batch, a.epochs, a.test_samples, seed)
                    d = os.path.join(work, f"{re.sub(r'[^A-Za-z0-9.]+', '-', v)}-{seed}")
                    r = cr.train(a.squall, a.cluster, a.nodes, 1, sets, d, a.targets)
                    runs.append({"variant": v, "seed": seed, **r})
                    print(f"# {v} seed {seed}: " +
                          ", ".join(f"{t}: {cr.fmt(r[f'seconds@{t}'], '.1f')} s" for t in a.targets) +
                          f", final {cr.fmt(r['final'], '.4f')}, {cr.fmt(r['bytes'] and r['bytes'] / 1e6, '.0f')} MB",
                          file=sys.stderr, flush=True)
    finally:
        cr.down(a.cluster)
    with open(a.json, "w") as f:
        json.dump({"nodes": a.nodes, "learners": a.learners, "batch": a.batch, "rate": a.rate, "epochs": a.epochs,
                   "targets": a.targets, "test_samples": a.test_samples, "runs": runs}, f, indent=1)
    report(a, runs)


def report(a, runs):
    ssgd = [v for v in a.variants if v.startswith("ssgd") and "accum" not in v]
    t0 = a.targets[0]
    med = {}
    for v in a.variants:
        rs = [r for r in runs if r["variant"] == v]
        med[v] = {k: cr.median_or_none([r[k] for r in rs]) for k in
                  [f"seconds@{t}" for t in a.targets] + [f"epochs@{t}" for t in a.targets] + ["final", "bytes"]}
        med[v]["spread"] = {t: cr.spread([r[f"seconds@{t}"] for r in rs]) for t in a.targets}
        finals = [r["final"] for r in rs if r["final"] is not None]
        med[v]["final_spread"] = f"{min(finals):.4f}-{max(finals):.4f}" if len(finals) > 1 else ""
        # A run that ended at chance (0.1 on ten classes) or stopped on a non-finite step diverged.
        med[v]["diverged"] = sum(1 for r in rs if r.get("diverged") or (r["final"] is not None and r["final"] <= 0.11))
        med[v]["runs"] = len(rs)
    # The best tuned ssgd: the grid's fastest to the first target (ties and misses by final accuracy).
    best = min(ssgd, key=lambda v: (med[v][f"seconds@{t0}"] or float("inf"), -(med[v]["final"] or 0))) if ssgd else None
    print(f"{a.nodes} nodes x {a.learners} learners x {a.batch} samples (global batch "
          f"{a.nodes * a.learners * a.batch}), links {a.rate}, {a.epochs} epochs, seeds "
          f"{' '.join(map(str, a.seeds))}, {a.test_samples} test samples; medians (spread: lowest-highest); "
          f"'vs ssgd' against the best tuned ssgd ({best})\n")
    cols = []
    for t in a.targets:
        cols += [f"s to {t}", "spread", "vs ssgd", f"epochs to {t}"]
    print("| variant | " + " | ".join(cols) + f" | accuracy after {a.epochs} epochs | spread | MB sent between nodes |")
    print("|---|" + "---:|" * (len(cols) + 3))
    for v in a.variants:
        m = med[v]
        cells = []
        for t in a.targets:
            s, bs = m[f"seconds@{t}"], med[best][f"seconds@{t}"] if best else None
            cells += [cr.fmt(s, ".1f"), m["spread"][t], f"{bs / s:.2f}x" if s and bs else "-",
                      cr.fmt(m[f"epochs@{t}"], ".2f")]
        mb = cr.fmt(m["bytes"] and m["bytes"] / 1e6, ".0f")
        final = cr.fmt(m["final"], ".4f") if m["final"] is not None else "diverged"
        if m["diverged"]:
            final += f" ({m['diverged']} of {m['runs']} diverged)"
        print(f"| {v} | " + " | ".join(cells) + f" | {final} | {m['final_spread']} | {mb} |")
    print("\n'vs ssgd' is how many times sooner than the best ssgd the variant reached the target (> 1: sooner).")


if __name__ == "__main__":
    main()
