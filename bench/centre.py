#!/usr/bin/env python3
"""Where the asynchronous centre lives (issue 48, "measure and choose"; docs/design.md,
"Asynchronous outer steps"): `squall bench centre` on --nodes nodes of the test cluster
(tests/cluster/cluster, as root; one rank per node, TCP between nodes over links limited to
--rate), both homes of the centre side by side in one job: a thread per shard
(mpi::AsyncCentre, what squall trains with) and one-sided MPI windows (MPI_Fetch_and_op,
MPI_Accumulate, MPI_Get under a passive-target lock). Each case is a model size with a round's
compute (LeNet-5's 61,706 floats and 8 steps of it; the climate U-Net's 1,944,483 and a
second of compute), at each --factors (how many times longer the last node computes).
Printed: a markdown table, the fast nodes' and the slow node's medians and the window's round
over the threads' (> 1: the window is slower).

Open MPI 4.1 as Debian builds it has one one-sided component that works between nodes over
TCP with MPI_THREAD_MULTIPLE: osc/ucx (osc/pt2pt refuses MPI_THREAD_MULTIPLE; osc/rdma needs
an RDMA network). Debian's openmpi-mca-params.conf turns osc/ucx off; the job here turns it on
(--mca osc ucx), for the windows only (the threads' messages go over ob1 and TCP as training's
do).

    python3 bench/centre.py                       # as root; bench/RESULTS.md has the runs
    python3 bench/centre.py --no-cluster          # one box: mpirun, shared-memory windows
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_runs as cr  # noqa: E402

CASES = {"lenet5": (61706, 150, 30), "unet": (1944483, 1000, 10)}  # floats, compute ms, rounds


def run(a, floats, compute_ms, rounds, factor):
    args = [a.squall, "bench", "centre", "--ranks-per-node", "1", "--floats", str(floats), "--compute-ms",
            str(compute_ms), "--rounds", str(rounds), "--slow-factor", format(factor, "g"), "--json"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if a.no_cluster:
        cmd = ["mpirun", "--oversubscribe", "-np", str(a.nodes), *args]
    else:
        cmd = [cr.TOOL, "mpirun", a.cluster, "--host", cr.hosts(a.cluster, a.nodes, 1), "-np", str(a.nodes),
               "--mca", "osc", "ucx", "--", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        sys.exit(f"bench centre failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    start = done.stdout.index("{")
    return json.loads(done.stdout[start:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(cr.ROOT, "build", "bin", "squall"))
    ap.add_argument("--cluster", default="scentre", help="the test cluster's name (brought up and down here)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="100mbit", help="the links' rate limit (tc's notation)")
    ap.add_argument("--factors", type=float, nargs="+", default=[1, 3])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--no-cluster", action="store_true", help="one box under mpirun (shared memory between ranks)")
    ap.add_argument("--json", default="centre.json", help="where every number goes")
    a = ap.parse_args()
    if not a.no_cluster:
        cr.up(a.cluster, a.nodes)
        cr.cluster("rate", a.cluster, a.rate)
    rows = []
    try:
        for case in a.cases:
            floats, compute_ms, rounds = CASES[case]
            for factor in a.factors:
                doc = run(a, floats, compute_ms, rounds, factor)
                for r in doc["results"]:
                    rows.append({"case": case, "factor": factor, "compute_ms": compute_ms, "rounds": rounds, **r})
                print(f"# {case} x{factor:g} done", file=sys.stderr, flush=True)
    finally:
        if not a.no_cluster:
            cr.down(a.cluster)
    with open(a.json, "w") as f:
        json.dump({"nodes": a.nodes, "rate": None if a.no_cluster else a.rate, "rows": rows}, f, indent=1)
    print("| model (floats) | slow node | home | push ms, fast nodes (p90) | round ms, fast nodes | push ms, slow node "
          "| staleness mean / max | round, window / threads |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "unavailable" in r:
            print(f"| {r['case']} ({r['floats']}) | {r['factor']:g}x | {r['transport']} | unavailable: "
                  f"{r['unavailable']} | | | | |")
            continue
        threads = next((t for t in rows if t["case"] == r["case"] and t["factor"] == r["factor"]
                        and t["transport"] == "threads" and "unavailable" not in t), None)
        ratio = (f"**{r['round_s_fast_median'] / threads['round_s_fast_median']:.2f}**"
                 if r["transport"] == "window" and threads else "")
        print(f"| {r['case']} ({r['floats']}) | {r['factor']:g}x | {r['transport']} | "
              f"{1e3 * r['push_s_fast_median']:.1f} ({1e3 * r['push_s_fast_p90']:.1f}) | "
              f"{1e3 * r['round_s_fast_median']:.1f} | {1e3 * r['push_s_slow_median']:.1f} | "
              f"{r['staleness_mean']:.2f} / {r['staleness_max']:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
