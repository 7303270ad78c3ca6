#!/usr/bin/env python3
"""Hierarchical allreduce against MPI_Allreduce: repeated `squall bench allreduce` runs.

Each run launches `mpirun -np N --oversubscribe squall bench allreduce --json` for every
configuration (default: 2 ranks, 4 ranks, 4 ranks as 2 emulated nodes of 2), one after the
other, so that a slow spell of the machine hits all of them; inside a run squall itself
interleaves mpi and hier per size and iteration. Reported per configuration and size: the
median over runs of each algorithm's busbw (nccl-tests' bus bandwidth, GB/s) and of the
per-run ratio hier/mpi, with its min-max. Prints Markdown tables for bench/RESULTS.md.

Cluster mode (--cluster, as root): the same across real network links. It brings up a test
cluster of --nodes network-namespace nodes (tests/cluster/cluster) and, for every link rate
of --rates (tc notation, or "none"), runs `squall bench allreduce` --runs times with
--ranks-per-node ranks on each node, and prints per rate and size the median time of flat
MPI_Allreduce and of the hierarchical allreduce, their ratio (median and min-max over runs),
and the link bounds: the least time any allreduce needs when each node's link carries
2(N-1)/N * S per direction (what the hierarchy sends), and the time of a flat ring over all
ranks, whose node boundaries each carry 2(R-1)/R * S (R ranks). For example:

    bench/allreduce.py --cluster --nodes 2 --ranks-per-node 2 --rates none,10gbit,1gbit --runs 3 \
        -- --sizes 1M,4M,16M --iters 10 --warmup 2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"np2": (2, []), "np4": (4, []), "np4-K2": (4, ["--ranks-per-node", "2"])}


def run_once(squall, mpirun, np, extra, bench_args):
    env = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI refuses root unless told
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cmd = [mpirun, "-np", str(np), "--oversubscribe", squall, "bench", "allreduce", "--json"] + extra + bench_args
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def human(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def rate_bytes_per_s(rate):
    """tc's rate notation (1gbit, 100mbit) in bytes per second; None for no limit."""
    if rate == "none":
        return None
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    for unit, scale in units.items():
        if rate.lower().endswith(unit):
            return float(rate[: -len(unit)]) * scale / 8
    raise SystemExit(f"--rates: '{rate}' is not a tc rate (e.g. 1gbit, 100mbit) or none")


def cluster_mode(a):
    tool = os.path.join(ROOT, "tests", "cluster", "cluster")
    name = "benchar"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run([tool, "down", name], check=False, capture_output=True)
    subprocess.run([tool, "up", name, "--nodes", str(a.nodes)], check=True, env=env)
    hosts = ",".join(f"{name}-n{i + 1}:{a.ranks_per_node}" for i in range(a.nodes))
    ranks = a.nodes * a.ranks_per_node
    rates = a.rates.split(",")
    results = {}  # rate -> bytes -> {"mpi": [...], "hier": [...], "ratio": [...]}
    try:
        for run in range(a.runs):
            for rate in rates:  # rates interleaved, so a slow spell of the machine hits each
                subprocess.run([tool, "rate", name, rate], check=True, capture_output=True)
                cmd = [tool, "mpirun", name, "--host", hosts] + a.mpirun_args.split() + \
                      ["--", a.squall, "bench", "allreduce", "--json"]
                out = subprocess.run(cmd + a.bench_args, check=True, capture_output=True, text=True, env=env).stdout
                doc = json.loads(out)
                per = {}
                for r in doc["results"]:
                    per.setdefault(r["bytes"], {})[r["algo"]] = r["time_us"]
                for nbytes, t in per.items():
                    slot = results.setdefault(rate, {}).setdefault(nbytes, {"mpi": [], "hier": [], "ratio": []})
                    slot["mpi"].append(t["mpi"])
                    slot["hier"].append(t["hier"])
                    slot["ratio"].append(t["mpi"] / t["hier"])
                print(f"run {run + 1}/{a.runs} rate {rate}: done", file=sys.stderr)
    finally:
        subprocess.run([tool, "down", name], check=False, capture_output=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nodes": a.nodes, "ranks_per_node": a.ranks_per_node, "mpirun_args": a.mpirun_args,
                       "results": {rate: {str(b): v for b, v in per.items()} for rate, per in results.items()}},
                      f, indent=1)

    n = a.nodes
    print(f"\n{n} nodes x {a.ranks_per_node} ranks over veth links ({a.runs} runs, medians; "
          f"hier/flat = flat time / hier time, the busbw ratio){' with ' + a.mpirun_args if a.mpirun_args else ''}\n")
    print("| link | bytes | flat MPI_Allreduce ms | hier ms | hier/flat (median, min-max) "
          "| hier bound ms | hier / its bound | flat-ring bound ms |")
    print("|---|---|---|---|---|---|---|---|")
    for rate in rates:
        bps = rate_bytes_per_s(rate)
        for nbytes in sorted(results.get(rate, {})):
            r = results[rate][nbytes]
            mpi_ms, hier_ms = statistics.median(r["mpi"]) / 1e3, statistics.median(r["hier"]) / 1e3
            ratio = r["ratio"]
            if bps:
                bound = 2 * (n - 1) / n * nbytes / bps * 1e3
                ring = 2 * (ranks - 1) / ranks * nbytes / bps * 1e3
                btext = f"{bound:.1f} | {hier_ms / bound:.2f} | {ring:.1f}"
            else:
                btext = "- | - | -"
            print(f"| {rate if bps else 'unlimited'} | {human(nbytes)} | {mpi_ms:.2f} | {hier_ms:.2f} | "
                  f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f}) | {btext} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--cluster", action="store_true", help="across network-namespace nodes (tests/cluster)")
    ap.add_argument("--nodes", type=int, default=2, help="cluster mode: nodes")
    ap.add_argument("--ranks-per-node", type=int, default=2, help="cluster mode: ranks on each node")
    ap.add_argument("--rates", default="none,10gbit,1gbit", help="cluster mode: link rates, comma-separated")
    ap.add_argument("--json", default="", help="cluster mode: write every run's times (us) here")
    ap.add_argument("--mpirun-args", default="", help="cluster mode: more mpirun options, e.g. to pick Open "
                    "MPI's flat algorithm: '--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4'")
    ap.add_argument("bench_args", nargs="*", help="passed to squall bench allreduce (after --)")
    a = ap.parse_args()
    if a.cluster:
        cluster_mode(a)
        return
    configs = a.configs.split(",")

    # busbw[config][bytes][algo] = [per run]; ratio[config][bytes] = [per run]
    busbw, ratio, time_us = {}, {}, {}
    for run in range(a.runs):
        for name in configs:
            np, extra = CONFIGS[name]
            doc = run_once(a.squall, a.mpirun, np, extra, a.bench_args)
            per_size = {}
            for r in doc["results"]:
                per_size.setdefault(r["bytes"], {})[r["algo"]] = r
                busbw.setdefault(name, {}).setdefault(r["bytes"], {}).setdefault(r["algo"], []).append(r["busbw_GBps"])
                time_us.setdefault(name, {}).setdefault(r["bytes"], {}).setdefault(r["algo"], []).append(r["time_us"])
            for nbytes, algos in per_size.items():
                if "mpi" in algos and "hier" in algos and algos["mpi"]["busbw_GBps"] > 0:
                    ratio.setdefault(name, {}).setdefault(nbytes, []).append(
                        algos["hier"]["busbw_GBps"] / algos["mpi"]["busbw_GBps"])
            print(f"run {run + 1}/{a.runs} {name}: done", file=sys.stderr)

    for name in configs:
        print(f"\n{name} ({a.runs} runs): median over runs\n")
        print("| bytes | mpi time_us | hier time_us | mpi busbw GB/s | hier busbw GB/s "
              "| hier/mpi busbw (median, min-max) |")
        print("|---|---|---|---|---|---|")
        for nbytes in sorted(busbw[name]):
            b, t = busbw[name][nbytes], time_us[name][nbytes]
            rs = ratio.get(name, {}).get(nbytes, [])
            rtext = f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})" if rs else "-"
            print(f"| {human(nbytes)} | {statistics.median(t['mpi']):.1f} | {statistics.median(t['hier']):.1f} | "
                  f"{statistics.median(b['mpi']):.3f} | {statistics.median(b['hier']):.3f} | {rtext} |")


if __name__ == "__main__":
    main()
