#!/usr/bin/env python3
"""Hierarchical allreduce against MPI_Allreduce: repeated `squall bench allreduce` runs.

Each run launches `mpirun -np N --oversubscribe squall bench allreduce --json` for every
configuration (default: 2 ranks, 4 ranks, 4 ranks as 2 emulated nodes of 2), one after the
other, so that a slow spell of the machine hits all of them; inside a run squall itself
interleaves mpi and hier per size and iteration. Reported per configuration and size: the
median over runs of each algorithm's busbw (nccl-tests' bus bandwidth, GB/s) and of the
per-run ratio hier/mpi, with its min-max. Prints Markdown tables for bench/RESULTS.md.

Cluster mode (--cluster, as root): the same across real network links. It brings up a test
cluster (tests/cluster/cluster, named --name) of the largest of --nodes (one count or a
list) network-namespace nodes and, for every node count and every link rate of --rates (tc
notation, or "none"), runs `squall bench allreduce` --runs times with --ranks-per-node ranks on
each node (node counts and rates interleaved), and prints per node count, rate and size the
median time of flat MPI_Allreduce and of each other algorithm of the run, each one's speed-up
over MPI_Allreduce (MPI's time over its time: median and min-max of the per-run ratios), with
--cross-node ring,halving-doubling the ring's time over halving-doubling's, the algorithms
auto's sums took across nodes, and the link bound: the least time any allreduce needs when each
node's link carries 2(N-1)/N * S per direction (what the hierarchy sends). For example:

    bench/allreduce.py --cluster --nodes 2 --ranks-per-node 2 --rates none,10gbit,1gbit --runs 3 \
        -- --sizes 1M,4M,16M --iters 10 --warmup 2
    bench/allreduce.py --cluster --name xbench --nodes 2,4,8 --ranks-per-node 1 --rates 1gbit \
        --cross-node auto,ring,halving-doubling -- --algos mpi,hier-pipeline --sizes 256K,4M
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
    name = a.name
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    node_counts = [int(n) for n in str(a.nodes).split(",")]
    subprocess.run([tool, "down", name], check=False, capture_output=True)
    subprocess.run([tool, "up", name, "--nodes", str(max(node_counts))], check=True, env=env)
    rates = a.rates.split(",")
    cross = ["--cross-node", a.cross_node] if a.cross_node else []
    # results[(nodes, rate)][bytes][algo] = [time_us per run]; crossed[...][bytes][algo] = set of cross_node
    results, crossed = {}, {}
    try:
        for run in range(a.runs):
            for n in node_counts:  # node counts and rates interleaved: a slow spell hits each
                hosts = ",".join(f"{name}-n{i + 1}:{a.ranks_per_node}" for i in range(n))
                for rate in rates:
                    subprocess.run([tool, "rate", name, rate], check=True, capture_output=True)
                    cmd = [tool, "mpirun", name, "--host", hosts, "-np", str(n * a.ranks_per_node)] + \
                        a.mpirun_args.split() + ["--", a.squall, "bench", "allreduce", "--json"] + cross
                    out = subprocess.run(cmd + a.bench_args, check=True, capture_output=True, text=True,
                                         env=env).stdout
                    for r in json.loads(out)["results"]:
                        slot = results.setdefault((n, rate), {}).setdefault(r["bytes"], {})
                        slot.setdefault(r["algo"], []).append(r["time_us"])
                        if "cross_node" in r:
                            crossed.setdefault((n, rate), {}).setdefault(r["bytes"], {}).setdefault(
                                r["algo"], set()).add(r["cross_node"])
                    print(f"run {run + 1}/{a.runs} {n} nodes rate {rate}: done", file=sys.stderr)
    finally:
        subprocess.run([tool, "down", name], check=False, capture_output=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nodes": node_counts, "ranks_per_node": a.ranks_per_node, "mpirun_args": a.mpirun_args,
                       "cross_node": a.cross_node,
                       "results": {f"{n}x{rate}": {str(b): v for b, v in per.items()}
                                   for (n, rate), per in results.items()}}, f, indent=1)

    algos = []
    for per in results.values():
        for t in per.values():
            algos += [x for x in t if x not in algos]
    others = [x for x in algos if x != "mpi"]
    ring = next((x for x in others if x.endswith(":ring")), None)
    hd = next((x for x in others if x.endswith(":halving-doubling")), None)
    print(f"\n{','.join(map(str, node_counts))} nodes x {a.ranks_per_node} ranks over veth links ({a.runs} runs; "
          f"times are medians over runs of the median iteration of the slowest rank; X/mpi = MPI_Allreduce "
          f"time / X time, the median of the per-run ratios and their min-max)"
          f"{' with ' + a.mpirun_args if a.mpirun_args else ''}\n")
    head = ["link", "nodes", "bytes"] + [f"{x} ms" for x in algos] + [f"{x}/mpi" for x in others]
    if ring and hd:
        head.append("ring time / halving-doubling time")
    head += [f"{x} crossed by" for x in others if not (x.endswith(":ring") or x.endswith(":halving-doubling"))]
    head.append("link bound ms")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))

    def ratio(num, den):
        rs = [x / y for x, y in zip(num, den)]
        return f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})"

    for n in node_counts:
        for rate in rates:
            bps = rate_bytes_per_s(rate)
            per = results.get((n, rate), {})
            for nbytes in sorted(per):
                t = per[nbytes]
                row = [rate if bps else "unlimited", str(n), human(nbytes)]
                row += [f"{statistics.median(t[x]) / 1e3:.2f}" if x in t else "-" for x in algos]
                row += [ratio(t["mpi"], t[x]) if "mpi" in t and x in t else "-" for x in others]
                if ring and hd:
                    row.append(ratio(t[ring], t[hd]) if ring in t and hd in t else "-")
                for x in others:
                    if x.endswith(":ring") or x.endswith(":halving-doubling"):
                        continue
                    seen = crossed.get((n, rate), {}).get(nbytes, {}).get(x, set())
                    row.append(" / ".join(sorted(seen)) if seen else "-")
                row.append(f"{2 * (n - 1) / n * nbytes / bps * 1e3:.2f}" if bps else "-")
                print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--cluster", action="store_true", help="across network-namespace nodes (tests/cluster)")
    ap.add_argument("--nodes", default="2", help="cluster mode: nodes, or a comma-separated list of node counts "
                    "(a cluster of the largest, the first N of its nodes for each)")
    ap.add_argument("--name", default="benchar", help="cluster mode: the test cluster's name")
    ap.add_argument("--cross-node", default="", help="cluster mode: passed to squall bench allreduce --cross-node, "
                    "e.g. ring,halving-doubling: each hier algo runs once per value, side by side")
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
