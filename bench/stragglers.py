#!/usr/bin/env python3
"""A slow node and the algorithms that wait for it (issue 48; docs/training.md, "Asynchronous
outer steps").

LeNet-5 on Fashion-MNIST (configs/fashion-mnist-sma.toml), or with --model unet the climate
U-Net of configs/climate-tiny.toml on the 640 generated training samples of `make
demo-climate` (made here, in a temporary folder, unless --climate-data names one holding
train/ and test/) with the held-out mean IoU as the metric, on --nodes network-namespace nodes of
the test cluster (tests/cluster/cluster, as root), one rank per node with --learners learners of
--batch samples, the links limited to --rate. The last node is made --factors times slower by
its own CPU quota (`cluster slow`; factor 1: every node capped alike, nobody slower), never by a
sleep in squall. Every seed runs every variant at every factor once, interleaved. Reported, as
medians over the seeds with the spread: the training seconds (evaluations excluded) at which the
test accuracy first reaches each of --targets, the accuracy at the end, the bytes the nodes sent
each other, for the asynchronous variants the staleness the nodes' pushes saw (the mean over
the nodes' means, the largest), and under train.epoch_quorum the steps the slow node trained and
the samples carried at the end.

Variants are written as bench/outer.py's ("ssgd lr0.1", "outer H8 mu0.0 lr0.1", "outer H8
mu0.0 lr0.1 async", "... async stale2", "... quorum0.75": train.epoch_quorum).

    python3 bench/stragglers.py                      # as root; bench/RESULTS.md has the runs
    python3 bench/stragglers.py --seeds 1 --epochs 1 --factors 1 3
    python3 bench/stragglers.py --model unet --learners 1 --batch 4 --epochs 6 --targets 0.75 \
        --variants "ssgd lr0.002" "outer H8 mu0.0 lr0.002" "outer H8 mu0.0 lr0.002 async quorum0.75"
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_runs as cr  # noqa: E402
from outer import variant_sets  # noqa: E402

UNET_CONFIG = os.path.join(cr.ROOT, "configs", "climate-tiny.toml")
DEFAULT_VARIANTS = ["ssgd lr0.1", "outer H8 mu0.0 lr0.1", "outer H8 mu0.0 lr0.1 async",
                    "outer H8 mu0.0 lr0.1 quorum0.75", "outer H8 mu0.0 lr0.1 async quorum0.75"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(cr.ROOT, "build", "bin", "squall"))
    ap.add_argument("--cluster", default="sbench", help="the test cluster's name (brought up and down here)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--learners", type=int, default=2, help="learners per node (one rank per node)")
    ap.add_argument("--batch", type=int, default=16, help="samples per learner")
    ap.add_argument("--rate", default="100mbit", help="the links' rate limit (tc's notation)")
    ap.add_argument("--factors", type=float, nargs="+", default=[1, 2, 3],
                    help="how many times slower the last node is (1: none slower)")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.88])
    ap.add_argument("--test-samples", type=int, default=10000)
    ap.add_argument("--model", choices=["lenet5", "unet"], default="lenet5")
    ap.add_argument("--climate-data", help="--model unet: a folder with train/ and test/ (default: generated)")
    ap.add_argument("--json", default="stragglers.json", help="where every number goes")
    a = ap.parse_args()
    plans = {v: variant_sets(v, a.batch) for v in a.variants}
    config, metric, train_samples, test_samples = cr.CONFIG, "test_accuracy", cr.TRAIN_SAMPLES, a.test_samples
    cr.up(a.cluster, a.nodes)
    runs = []
    try:
        cr.cluster("rate", a.cluster, a.rate)
        with tempfile.TemporaryDirectory() as work:
            if a.model == "unet":
                config, metric, train_samples, test_samples = UNET_CONFIG, "test_miou", 640, None
                data = a.climate_data or make_climate_data(a.squall, work)
                extra = [f"data.train={os.path.join(data, 'train')}", f"data.test={os.path.join(data, 'test')}"]
            else:
                extra = []
            for seed in a.seeds:
                for factor in a.factors:
                    # Every node capped at its share of the machine's cores, the last one factor
                    # times below it (factor 1: the cap alone, so that the runs compare alike).
                    for node in range(1, a.nodes + 1):
                        f = factor if node == a.nodes else 1
                        cr.cluster("slow", a.cluster, str(node), format(f, "g"))
                    for v in a.variants:
                        sets, batch = plans[v]
                        sets = sets + extra + cr.schedule_sets(a.nodes, a.learners, batch, a.epochs, test_samples,
                                                               seed, train_samples)
                        d = os.path.join(work, f"{re.sub(r'[^A-Za-z0-9.]+', '-', v)}-x{factor:g}-{seed}")
                        r = cr.train(a.squall, a.cluster, a.nodes, 1, sets, d, a.targets, config, metric)
                        runs.append({"variant": v, "factor": factor, "seed": seed, **r})
                        reached = [f"{t}: " + (f"{sec:.1f} s" if (sec := r[f"seconds@{t}"]) is not None else "not reached")
                                   for t in a.targets]
                        print(f"# {v} x{factor:g} seed {seed}: {', '.join(reached)}, final {cr.fmt(r['final'], '.4f')}",
                              file=sys.stderr, flush=True)
    finally:
        cr.down(a.cluster)
    with open(a.json, "w") as f:
        json.dump({"model": a.model, "nodes": a.nodes, "learners": a.learners, "batch": a.batch, "rate": a.rate,
                   "epochs": a.epochs, "targets": a.targets, "factors": a.factors, "runs": runs}, f, indent=1)
    report(a, runs)


def make_climate_data(squall, work):
    """make demo-climate's samples: 640 for training (seed 11), 64 held out (seed 12), labelled."""
    data = os.path.join(work, "climate")
    for part, samples, seed in (("train", 640, 11), ("test", 64, 12)):
        raw = os.path.join(data, "raw-" + part)
        subprocess.run([squall, "data", "climate", "--out", raw, "--samples", str(samples), "--height", "96",
                        "--width", "144", "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([squall, "data", "label", "--in", raw, "--out", os.path.join(data, part)], check=True,
                       stdout=subprocess.DEVNULL)
    return data


def report(a, runs):
    print(f"{a.model}: {a.nodes} nodes x {a.learners} learners x {a.batch} samples, links {a.rate}, "
          f"{a.epochs} epochs, seeds {a.seeds}; the last node slowed by its CPU quota; medians (spread)\n")
    head = " | ".join(f"s to {t} | spread" for t in a.targets)
    metric = "accuracy" if a.model == "lenet5" else "mean IoU"
    print(f"| slower | variant | {head} | {metric} at the end | MB sent | staleness (mean, max) "
          f"| slow node's steps | steps (planned) | carried | slow node's s per step / typical | shard thread CPU s, fast / slow | leader's CPU s in its waits / its wait s, slow node |")
    print("|---|---|" + "---:|---:|" * len(a.targets) + "---:|---:|---|---:|---:|---:|---:|---|---|")
    for factor in a.factors:
        for v in a.variants:
            rs = [r for r in runs if r["variant"] == v and r["factor"] == factor]
            cells = []
            for t in a.targets:
                vals = [r[f"seconds@{t}"] for r in rs]
                cells += [cr.fmt(cr.median_or_none(vals), ".1f"), cr.spread(vals)]
            # A run that diverged has no final accuracy: it counts as the worst, not (as a time
            # would) as the slowest.
            final = cr.median_or_none([0.0 if r["final"] is None else r["final"] for r in rs])
            mb = cr.median_or_none([r["bytes"] / 1e6 if r["bytes"] else None for r in rs])
            st = [r.get("outer_async") for r in rs if r.get("outer_async")]
            nodes = [n for s in st for n in s.get("nodes", [s])]
            stale = (f"{cr.median_or_none([n['staleness_mean'] for n in nodes]):.2f}, "
                     f"{max(n['staleness_max'] for n in nodes)}") if nodes else "-"
            paces = [r["pace"] for r in rs if r.get("pace")]
            steps = (f"{cr.median_or_none([p['node_trained_steps'][-1] for p in paces]):.0f} of "
                     f"{paces[0]['node_trained_steps'][0] + paces[0]['node_idle_steps'][0]}") if paces else "-"
            # A paced run goes on past its planned steps until it has trained its samples.
            clock = (f"{cr.median_or_none([p['steps'] for p in paces if 'steps' in p]):.0f} "
                     f"({paces[0].get('planned_steps', '-')})") if paces and 'steps' in paces[0] else "-"
            carried = cr.fmt(cr.median_or_none([p["carried_samples"] for p in paces]), ".0f") if paces else "-"
            # The slow node's measured seconds per trained step against the typical node's (the
            # lower median of the others', as pace.hpp fits rounds to), and the CPU seconds the
            # shards' threads took: the fast nodes' median and the slow node's.
            ratios = []
            for p in paces:
                t = p.get("node_step_seconds") or []
                others = sorted(x for x in t[:-1] if x > 0)
                if others and t[-1] > 0:
                    ratios.append(t[-1] / others[(len(others) - 1) // 2])
            ratio = cr.fmt(cr.median_or_none(ratios), ".2f") if ratios else "-"
            cpu_fast = [n["serve_cpu_s"] for n in nodes if "serve_cpu_s" in n and n.get("node") != a.nodes - 1]
            cpu_slow = [n["serve_cpu_s"] for n in nodes if "serve_cpu_s" in n and n.get("node") == a.nodes - 1]
            cpu = (f"{cr.fmt(cr.median_or_none(cpu_fast), '.1f')} / {cr.fmt(cr.median_or_none(cpu_slow), '.1f')}"
                   if cpu_fast or cpu_slow else "-")
            # The CPU the slow node's leader spent looking for the centre's answers, against the
            # seconds it waited for them: what its quota paid for the waits.
            slow = [n for n in nodes if n.get("node") == a.nodes - 1 and "wait_cpu_s" in n]
            waits = (f"{cr.fmt(cr.median_or_none([n['wait_cpu_s'] for n in slow]), '.2f')} / "
                     f"{cr.fmt(cr.median_or_none([n['wait_s'] for n in slow]), '.1f')}") if slow else "-"
            print(f"| {factor:g}x | {v} | " + " | ".join(cells) +
                  f" | {cr.fmt(final, '.4f')} | {cr.fmt(mb, '.0f')} | {stale} | {steps} | {clock} | {carried} | {ratio} | {cpu}"
                  f" | {waits} |")


if __name__ == "__main__":
    main()
