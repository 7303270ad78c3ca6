#!/usr/bin/env python3
"""Hierarchical allreduce against MPI_Allreduce: repeated `squall bench allreduce` runs.

Each run launches `mpirun -np N --oversubscribe squall bench allreduce --json` for every
configuration (default: 2 ranks, 4 ranks, 4 ranks as 2 emulated nodes of 2), one after the
other, so that a slow spell of the machine hits all of them; inside a run squall itself
interleaves mpi and hier per size and iteration. Reported per configuration and size: the
median over runs of each algorithm's busbw (nccl-tests' bus bandwidth, GB/s) and of the
per-run ratio hier/mpi, with its min-max. Prints Markdown tables for bench/RESULTS.md.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("bench_args", nargs="*", help="passed to squall bench allreduce (after --)")
    a = ap.parse_args()
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
