#!/usr/bin/env python3
"""Many ranks on the test cluster: start-up time, memory per rank and step time.

As root, brings up a test cluster (tests/cluster/cluster) of the largest layout's node count
and, --runs times, for every layout of --layouts (NODESxRANKS, e.g. 16x4 = 64 ranks; layouts
interleaved, so that a slow spell of the machine hits each), runs

  1. `squall info --json` across the layout's nodes: the time from launching mpirun to its
     exit, which is the launch of every rank, MPI_Init, the topology and MPI_Finalize;
  2. a short `squall train` of LeNet-5 (ssgd, one learner per rank, --steps steps of batch 16
     per rank, all in one epoch, one evaluation at its end) with each rank under
     `/usr/bin/time -f %M`, which gives every rank's peak RSS. The MLPerf log's
     `init_start` (the run starts on rank 0, after MPI_Init) and `run_start` (the loop
     starts) split the start-up: launch to init_start is mpirun's launch and MPI_Init;
     init_start to run_start is squall's set-up (topology, data, model, the allreduce and its
     watchdog, the run directory); launch to run_start the whole wait for the first step.
     The step time is the median interval between consecutive steps of metrics.jsonl
     (train.log_every_steps = 1), from the third step on.

--psec native,default adds the same runs with PMIx's own choice of security (munge first
where it is installed, then native; tests/cluster/cluster sets native), interleaved.

Prints a Markdown table (medians over runs; peak RSS median and max over ranks) for
bench/RESULTS.md. For example:

    bench/many_ranks.py --layouts 16x4,2x4 --psec native,default --runs 3 --steps 20
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tests", "cluster", "cluster")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# Each rank under /usr/bin/time, its peak RSS (KiB) in DIR/rss-RANK. Open MPI starts the
# program itself (no shell), so the wrapper is a shell of its own.
# --psec's names: "default" is PMIx's own order where munge is built in, munge first.
PSEC = {"default": "munge,native"}
RSS_WRAPPER = 'exec /usr/bin/time -f %M -o "$0/rss-$OMPI_COMM_WORLD_RANK" "$@"'


def parse_layout(text):
    try:
        nodes, per_node = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--layouts: '{text}' is not NODESxRANKS (e.g. 16x4)")
    if nodes < 1 or per_node < 1:
        raise SystemExit(f"--layouts: '{text}' needs at least 1 node and 1 rank per node")
    return nodes, per_node


def mpirun(name, nodes, per_node, program, log, psec):
    hosts = ",".join(f"{name}-n{i + 1}:{per_node}" for i in range(nodes))
    cmd = [TOOL, "mpirun", name, "--host", hosts, "--"] + program
    t0 = time.time()
    with open(log, "w") as out, open(log + ".err", "w") as err:
        rc = subprocess.run(cmd, stdout=out, stderr=err, env=dict(ENV, PMIX_MCA_psec=PSEC.get(psec, psec)), timeout=600).returncode
    t1 = time.time()
    if rc != 0:
        sys.stderr.write(open(log + ".err").read()[-4000:])
        raise SystemExit(f"{' '.join(program[:2])} on {nodes}x{per_node} exited {rc} (log {log}, {log}.err)")
    return t0, t1


def info_run(a, name, nodes, per_node, psec, work):
    log = os.path.join(work, "info.json")
    t0, t1 = mpirun(name, nodes, per_node, [a.squall, "info", "--json"], log, psec)
    doc = json.load(open(log))
    if doc["world_size"] != nodes * per_node or doc["nodes"] != nodes:
        raise SystemExit(f"squall info on {nodes}x{per_node}: {doc['world_size']} ranks on {doc['nodes']} nodes")
    return t1 - t0


def mllog_ms(path, key):
    for line in open(path):
        if line.startswith(":::MLLOG "):
            rec = json.loads(line[len(":::MLLOG "):])
            if rec["key"] == key:
                return rec["time_ms"]
    raise SystemExit(f"{path}: no {key}")


def train_run(a, name, nodes, per_node, psec, work):
    ranks = nodes * per_node
    run_dir = os.path.join(work, "run")
    rss_dir = os.path.join(work, "rss")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(rss_dir, ignore_errors=True)
    os.makedirs(rss_dir)
    sets = {"parallel.algorithm": "ssgd", "parallel.replicas_per_device": 1, "train.batch_size": 16,
            "train.max_steps": a.steps, "train.log_every_steps": 1, "schedule.warmup_steps": 0,
            "data.train_samples": ranks * 16 * a.steps, "data.test_samples": 256, "run.threads": 1,
            "run.mllog": "true", "run.dir": run_dir}
    program = ["/bin/sh", "-c", RSS_WRAPPER, rss_dir, a.squall, "train", "--config",
               os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml")]
    for k, v in sets.items():
        program += ["--set", f"{k}={v}"]
    t0, t1 = mpirun(name, nodes, per_node, program, os.path.join(work, "train.log"), psec)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    if summary["world_size"] != ranks or summary["nodes"] != nodes or summary["steps"] != a.steps:
        raise SystemExit(f"train on {nodes}x{per_node}: summary says {summary['world_size']} ranks, "
                         f"{summary['nodes']} nodes, {summary['steps']} steps")
    mllog = os.path.join(run_dir, "mlperf.log")
    init_start = mllog_ms(mllog, "init_start") / 1e3
    run_start = mllog_ms(mllog, "run_start") / 1e3
    steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    at = {r["step"]: r["elapsed_s"] for r in steps if r["kind"] == "train"}
    gaps = [at[s] - at[s - 1] for s in sorted(at) if s >= 3 and s - 1 in at]
    rss = sorted(int(open(os.path.join(rss_dir, f)).read().split()[-1]) / 1024 for f in os.listdir(rss_dir))
    if len(rss) != ranks:
        raise SystemExit(f"train on {nodes}x{per_node}: peak RSS of {len(rss)} ranks, not {ranks}")
    return {"launch_to_init_s": init_start - t0, "setup_s": run_start - init_start,
            "launch_to_first_step_s": run_start - t0, "mpirun_s": t1 - t0,
            "step_ms": statistics.median(gaps) * 1e3, "rss_median_mib": statistics.median(rss),
            "rss_max_mib": max(rss)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--layouts", default="16x4,2x4", help="NODESxRANKS, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--name", default="manybnch", help="the cluster's name (1-8 letters or digits)")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench-many-ranks"),
                    help="run directories and logs (on a path every node sees)")
    ap.add_argument("--psec", default="native", help="PMIx security components to compare, comma-separated "
                    "(tests/cluster/cluster sets native; default: munge, then native, as PMIx picks unset)")
    ap.add_argument("--json", default="", help="write every run's figures here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("many_ranks.py makes a test cluster: run it as root")
    layouts = [parse_layout(t) for t in a.layouts.split(",")]
    variants = [(n, k, p) for n, k in layouts for p in a.psec.split(",")]
    subprocess.run([TOOL, "down", a.name], check=False, capture_output=True)
    subprocess.run([TOOL, "up", a.name, "--nodes", str(max(n for n, _ in layouts))], check=True, env=ENV)
    results = {}  # "NxK" -> list of per-run dicts
    try:
        for run in range(a.runs):
            for nodes, per_node, psec in variants:
                key = f"{nodes}x{per_node} {psec}"
                work = os.path.join(a.work, f"{nodes}x{per_node}-{psec}")
                os.makedirs(work, exist_ok=True)
                r = {"info_s": info_run(a, a.name, nodes, per_node, psec, work)}
                r.update(train_run(a, a.name, nodes, per_node, psec, work))
                results.setdefault(key, []).append(r)
                print(f"run {run + 1}/{a.runs} {key}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()),
                      file=sys.stderr)
    finally:
        subprocess.run([TOOL, "down", a.name], check=False, capture_output=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": a.steps, "results": results}, f, indent=1)

    print(f"\n{a.runs} runs, medians; LeNet-5 ssgd, batch 16 per rank, {a.steps} steps\n")
    print("| nodes x ranks | ranks | PMIx psec | `squall info` s | launch to init_start s | set-up (init_start to run_start) s "
          "| launch to first step s | step ms | peak RSS per rank MiB, median (max) | mpirun s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for nodes, per_node, psec in variants:
        rs = results[f"{nodes}x{per_node} {psec}"]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {nodes} x {per_node} | {nodes * per_node} | {psec} | {med['info_s']:.1f} | {med['launch_to_init_s']:.1f} | "
              f"{med['setup_s']:.1f} | {med['launch_to_first_step_s']:.1f} | {med['step_ms']:.0f} | "
              f"{med['rss_median_mib']:.0f} ({max(r['rss_max_mib'] for r in rs):.0f}) | {med['mpirun_s']:.1f} |")


if __name__ == "__main__":
    main()
