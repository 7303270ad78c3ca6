#!/usr/bin/env python3
"""The scaling study with splits on the test cluster (root): jobscripts/scaling-study's runs,
`squall report` on them, and `squall model`'s forecast of each split run's step time against
the measured one.

A cluster of 2 tests/cluster nodes joined by a --rate link (1 Gbit/s by default), one thread per
rank. Three weak-scaling studies of jobscripts/scaling-study, in print mode (the cluster has no
Slurm here: each printed `sbatch -N N -n R ... CONFIG ARGS` runs as `cluster mpirun` on N nodes
x R/N ranks):

  2x1: --nodes 2 --gpus-per-node 1 --spatial 1,1:2,1      2 ranks, one a node: the split's
       halos and the unsplit run's allreduce cross the link;
  1x2: --nodes 1 --gpus-per-node 2 --spatial 1,1:2,1      2 ranks on one node: shared memory;
  2x2: --nodes 2 --gpus-per-node 2 --spatial 1,1:2,1:4,1  4 ranks on the machine's 2 cores.

The model: configs/climate-tiny.toml's U-Net (width 16, depth 4, Adam) on generated climate
fields of --height x --width x 16, batch 1 per learner. `squall report` collects the first
repetition's runs (checked: a line per split run naming its split). `squall model --calibrate`
on a study's unsplit run forecasts its split runs (`--spatial R,C --nodes 1`: as many ranks), and
2x2's n2-s2x1 forecasts n2-s4x1 (a split run calibrating); alpha and beta come from `squall bench
allreduce` on the study's nodes and ranks (`--calibrate-allreduce`: the link, or shared memory),
since a run's own allreduce time measures its ranks' skew more than the link. The nodes share the machine's cores,
so a rank's compute rate depends on how many ranks run: a calibration stands for runs of its own
rank count, and 2x2 puts two ranks on each core, which the model (a rank, a device of its own)
does not describe. Step time: global batch / samples_per_s (summary.json, what the calibration
reads). Medians of --runs repetitions; error = predicted / measured - 1, its median.

    python3 bench/spatial_study.py --runs 3              # root: brings its own cluster up and down
"""
import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_common as bc  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "climate-tiny.toml")
CLUSTER = "spstudy"
TOOL = os.path.join(ROOT, "tests", "cluster", "cluster")
# (label, nodes, ranks per node, splits)
STUDIES = [("2x1", "2", "1", "1,1:2,1"), ("1x2", "1", "2", "1,1:2,1"), ("2x2", "2", "2", "1,1:2,1:4,1")]
# (calibration run, forecast run): a calibration forecasts runs of its own rank count.
PAIRS = [("2x1 n2-s1x1", "2x1 n2-s2x1"), ("1x2 n1-s1x1", "1x2 n1-s2x1"), ("2x2 n2-s1x1", "2x2 n2-s2x1"),
         ("2x2 n2-s1x1", "2x2 n2-s4x1"), ("2x2 n2-s2x1", "2x2 n2-s4x1")]


def study_runs(a, folder, data):
    """The scaling study's submissions, printed, as (name, nodes, ranks, squall train args)."""
    runs = []
    sets = bc.rate_sets(a.steps) + [f"data.train={data}", f"data.test={data}", "data.test_samples=2",
                                    "run.threads=1", "data.workers=1", "train.batch_size=1"]
    extra = [x for s in sets for x in ("--set", s)]
    for label, nodes, gpn, splits in STUDIES:
        cmd = [os.path.join(ROOT, "jobscripts", "scaling-study"), "--config", CONFIG, "--mode", "weak", "--nodes",
               nodes, "--gpus-per-node", gpn, "--spatial", splits, "--study", os.path.join(folder, label),
               "--submit", "print", "--", *extra]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if not line.startswith("sbatch "):
                continue
            words = shlex.split(line)
            n, ranks = int(words[words.index("-N") + 1]), int(words[words.index("-n") + 1])
            name = words[words.index("--job-name") + 1].removeprefix("scaling-")
            args = words[words.index(CONFIG):]  # CONFIG ARGS... after the batch script
            runs.append((f"{label} {name}", n, ranks, args))
    return runs


def train(a, name, nodes, ranks, args):
    per = ranks // nodes
    hosts = ",".join(f"{CLUSTER}-n{i + 1}:{per}" for i in range(nodes))
    cmd = [TOOL, "mpirun", CLUSTER, "--host", hosts, "-np", str(ranks), "--", a.squall, "train", "--config", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    run_dir = next(x.split("=", 1)[1] for x in args if x.startswith("run.dir="))
    bc.keep_run(name, cmd, r.returncode, r.stdout, r.stderr, run_dir)
    if r.returncode != 0:
        raise bc.CaseFailed(f"{name}: {' '.join(cmd)} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    sp = s.get("parallel", {}).get("spatial", {})
    return {"dir": run_dir, "step_ms": 1e3 * s["global_batch"] / s["samples_per_s"], "ranks": s["world_size"],
            "split": f"[{sp['rows']}, {sp['cols']}]" if sp else "[1, 1]",
            "halo_exposed_ms": 1e3 * sp["halo"]["exposed_s"] / s["steps"] if sp else 0.0}


def allreduce_fit(a, label, work):
    """`squall bench allreduce --json` on a study's nodes and ranks (its link, or shared memory):
    what --calibrate-allreduce fits the model's alpha and beta to."""
    nodes, per = (int(x) for x in label.split("x"))
    hosts = ",".join(f"{CLUSTER}-n{i + 1}:{per}" for i in range(nodes))
    cmd = [TOOL, "mpirun", CLUSTER, "--host", hosts, "-np", str(nodes * per), "--", a.squall, "bench", "allreduce",
           "--sizes", "64K,256K,1M,4M,16M", "--algos", "mpi", "--iters", "5", "--warmup", "1", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise bc.CaseFailed(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
    path = os.path.join(work, f"allreduce-{label}.json")
    with open(path, "w") as f:
        f.write(r.stdout[r.stdout.index("{"):])
    return path


def model(a, calibration, target, fit):
    """squall model calibrated on `calibration` (and the allreduce benchmark `fit` of its nodes),
    forecasting `target`'s split on as many ranks."""
    rows, cols = target["split"].strip("[]").split(", ")
    cmd = [a.squall, "model", "--calibrate", calibration["dir"], "--spatial", f"{rows},{cols}", "--nodes", "1",
           "--json"] + (["--calibrate-allreduce", fit] if fit else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise bc.CaseFailed(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    row = doc["rows"][0]
    return {"step_ms": row["step_ms"], "compute_ms": row["compute_ms"], "halo_exposed_ms": row["halo_exposed_ms"],
            "group_sum_ms": row["group_sum_ms"], "memory": doc.get("memory_per_gpu", {}).get("bytes"),
            "beta": doc["machine"]["intra_node_GBps"]}


def report(a, runs, out):
    """squall report on one repetition's runs of 2 ranks a node (1x2 and 2x2: 1 and 2 nodes), as a
    study's --collect would: each split run on a line of its own."""
    runs = {k: r for k, r in runs.items() if not k.startswith("2x1")}
    dirs = [r["dir"] for r in runs.values()]
    subprocess.run([a.squall, "report", *dirs, "--out", out], check=True, capture_output=True)
    j = json.loads(subprocess.run([a.squall, "report", *dirs, "--json", "--out", out], check=True,
                                  capture_output=True, text=True).stdout)
    with open(os.path.join(out, "report.md")) as f:
        md = f.read()
    for name, r in runs.items():
        if r["split"] == "[1, 1]":
            continue
        line = f"{os.path.basename(r['dir'])}: parallel.spatial = {r['split']}"
        if line not in md:
            raise bc.CaseFailed(f"report.md has no line '{line}'")
    splits = sorted({str(x.get("spatial")) for x in (j if isinstance(j, list) else j.get("runs", []))})
    return splits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--steps", type=int, default=16, help="steps per run (the first 10 are left out of the steady rate)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions of the whole study")
    ap.add_argument("--rate", default="1gbit", help="the link's rate (tc notation) or none")
    ap.add_argument("--height", type=int, default=384)
    ap.add_argument("--width", type=int, default=576)
    ap.add_argument("--keep", help="a folder to leave the studies and the report in (default: a temporary one)")
    a = ap.parse_args()
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if subprocess.run([TOOL, "check"], capture_output=True).returncode != 0:
        bc.skip("tests/cluster cannot make namespaces here (needs root)")
    subprocess.run([TOOL, "down", CLUSTER], capture_output=True)
    subprocess.run([TOOL, "up", CLUSTER, "--nodes", "2", "--rate", a.rate], check=True, capture_output=True)
    reps = []
    try:
        work = a.keep or tempfile.mkdtemp(dir=os.path.join(ROOT, "build"), prefix="spatial-study-")
        os.makedirs(work, exist_ok=True)
        data = bc.climate_data(a.squall, os.path.join(work, "climate"), samples=64, distinct=4, height=a.height,
                               width=a.width)
        fits = {label: allreduce_fit(a, label, work) for label, _, _, _ in STUDIES}
        for rep in range(a.runs):
            runs = {}
            for name, nodes, ranks, args in study_runs(a, os.path.join(work, f"rep{rep + 1}"), data):
                runs[name] = train(a, name, nodes, ranks, args)
            preds = {(c, t): model(a, runs[c], runs[t], fits[c.split()[0]]) for c, t in PAIRS}
            # The same without the benchmark: alpha and beta from the calibrated run's allreduce.
            preds.update({(c, t, "run"): model(a, runs[c], runs[t], None) for c, t in PAIRS})
            if rep == 0:
                splits = report(a, runs, os.path.join(work, "report"))
                print(f"squall report: {work}/report, splits {', '.join(splits)}", file=sys.stderr)
            reps.append((runs, preds))
            print(f"repetition {rep + 1}/{a.runs}: done", file=sys.stderr)
    finally:
        subprocess.run([TOOL, "down", CLUSTER], capture_output=True)
    med = statistics.median
    info = subprocess.run([a.squall, "info"], capture_output=True, text=True).stdout
    isa = next((line.strip() for line in info.splitlines() if "ISA" in line), "ISA: not said")
    cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if line.startswith("Model name")), platform.processor())
    bc.out(f"\nU-Net (width 16, depth 4) on {a.height} x {a.width} x 16 fields, batch 1 per learner, 2 nodes, "
           f"1 thread per rank, {a.rate} link, {a.steps} steps, {a.runs} repetitions (medians); "
           f"{cpu}, {os.cpu_count()} cores; {isa}\n")
    bc.print_table_head(["run", "ranks", "split", "measured ms/step", "halo exposed ms/step"])
    for name in reps[0][0]:
        rs = [r[0][name] for r in reps]
        bc.print_row([name, str(rs[0]["ranks"]), rs[0]["split"], bc.fmt(med(x["step_ms"] for x in rs), 1),
                      bc.fmt(med(x["halo_exposed_ms"] for x in rs), 2)])
    bc.out()
    bc.print_table_head(["calibrated on", "predicts", "predicted ms/step", "measured ms/step", "error",
                         "predicted compute ms", "halo exposed ms", "group sum ms", "beta GB/s", "memory per rank MiB",
                         "error, the run's beta"])
    worst = 0.0  # over the runs whose ranks have a core each (the model's premise)
    for c, t in PAIRS:
        pred = [r[1][(c, t)] for r in reps]
        meas = [r[0][t]["step_ms"] for r in reps]
        err = med(p["step_ms"] / m - 1 for p, m in zip(pred, meas))
        if not t.startswith("2x2"):
            worst = max(worst, abs(err))
        mem = pred[0]["memory"]
        bc.print_row([c, t, bc.fmt(med(p["step_ms"] for p in pred), 1), bc.fmt(med(meas), 1), f"{100 * err:+.1f}%",
                      bc.fmt(med(p["compute_ms"] for p in pred), 1), bc.fmt(med(p["halo_exposed_ms"] for p in pred), 1),
                      bc.fmt(med(p["group_sum_ms"] for p in pred), 1), f"{pred[0]['beta']:.3f}",
                      bc.fmt(mem / 2**20, 0) if mem else "-",
                      f"{100 * med(r[1][(c, t, 'run')]['step_ms'] / r[0][t]['step_ms'] - 1 for r in reps):+.1f}%"])
    bc.contract_end("largest |predicted / measured - 1| of a split's step time, a core per rank", worst)


if __name__ == "__main__":
    main()
