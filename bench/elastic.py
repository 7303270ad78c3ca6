#!/usr/bin/env python3
"""Elastic resume (docs/training.md, "Elastic resume"): does a run interrupted on 4 ranks and
resumed on another number of ranks end at the test accuracy of the uninterrupted run?

LeNet-5 on Fashion-MNIST (all 60000 training and 10000 test samples), --ranks ranks (4) x one
learner x --batch samples (24: a global batch of 96, which 2, 3, 4 and 6 ranks divide),
run.threads = 1 per rank, --epochs epochs with a cosine schedule. For each algorithm of
--algorithms (ssgd and local-sgd from configs/fashion-mnist-lenet5.toml, sma from
configs/fashion-mnist-sma.toml; learning rates in ALGORITHMS below):

  1. the uninterrupted run on --ranks ranks, seed 1;
  2. the same run again with seed 2: the seed-to-seed difference, what noise alone makes;
  3. the same run (seed 1) with a checkpoint at step S, just past the middle and inside an
     epoch, and SQUALL_FAIL_AT making rank 0 fail as it starts step S + 1 (the job fails);
  4. a copy of that run dir for each of --resume-ranks (2, 3, 6), resumed there with
     `--resume auto` and elastic.batch = global; for ssgd also one with elastic.batch =
     learner on --learner-ranks ranks (6: the global batch and the learning rate grow by 6/4).

Each resumed run must say that it resumed at step S on its new number of ranks
(summary.json's attempt.shape_change). Prints a Markdown table (final test accuracy, its
difference to the uninterrupted run in points, steps, the global batch and learning-rate
factor after the resume, wall seconds of the attempt) and with --json every number.

    /usr/bin/python3 bench/elastic.py                     # about 7 minutes on two cores
    /usr/bin/python3 bench/elastic.py --epochs 2 --algorithms ssgd    # a shorter look
    /usr/bin/python3 bench/elastic.py --epochs 1 --train-samples 6000  # a smoke run
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_SAMPLES = 60000

# name -> (config, keys of its own). Learning rates: ssgd's is the global batch's (96: between
# bench/sma_vs_ssgd.py's tuned 0.05 at 64 and 0.2 at 256), sma's and local-sgd's each learner's
# (the configs' 0.05). local-sgd is post-local SGD: ssgd for its first --local-start epochs,
# then an average every 4 steps.
ALGORITHMS = {
    "ssgd": ("fashion-mnist-lenet5.toml", ["optimizer.lr=0.1"]),
    "sma": ("fashion-mnist-sma.toml", ["optimizer.lr=0.05"]),
    "local-sgd": ("fashion-mnist-lenet5.toml", ["parallel.algorithm=local-sgd", "parallel.period=4",
                                                "optimizer.lr=0.05"]),
}
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
ENV.pop("SQUALL_FAIL_AT", None)


class Failed(Exception):
    pass


def plan(a):
    """Steps per epoch and in all, and the checkpoint step S: the middle plus a third of an
    epoch, so that the resume starts inside an epoch (the epoch's position carries over)."""
    per_epoch = a.train_samples // (a.ranks * a.batch)
    total = per_epoch * a.epochs
    ckpt = total // 2 + per_epoch // 3
    if ckpt % per_epoch == 0:
        ckpt += 1
    return per_epoch, total, min(ckpt, total - 1)


def sets_for(a, algo, seed):
    config, own = ALGORITHMS[algo]
    per_epoch, _, _ = plan(a)
    sets = ["run.threads=1", "parallel.replicas_per_device=1", f"train.batch_size={a.batch}",
            f"train.epochs={a.epochs}", "train.eval_every_steps=0", f"train.log_every_steps={per_epoch}",
            f"schedule.warmup_steps={per_epoch // 4}", "checkpoint.at_end=false", f"run.seed={seed}"] + own
    if a.train_samples != TRAIN_SAMPLES:
        sets.append(f"data.train_samples={a.train_samples}")
    if algo == "local-sgd":
        sets.append(f"parallel.start_step={int(per_epoch * a.local_start)}")
    return os.path.join(ROOT, "configs", config), sets


def squall(a, ranks, config, sets, run_dir, resume=False, fail_at=None):
    """Runs `mpirun -np RANKS squall train ...` into run_dir; returns (exit status, wall
    seconds). Its output goes to run_dir + '.log'."""
    cmd = [a.mpirun, "-np", str(ranks), "--oversubscribe", a.squall, "train", "--config", config,
           "--set", f"run.dir={run_dir}"]
    for s in sets:
        cmd += ["--set", s]
    if resume:
        cmd += ["--resume", "auto"]
    env = dict(ENV)
    if fail_at is not None:
        env["SQUALL_FAIL_AT"] = f"0:{fail_at}"
    t0 = time.monotonic()
    with open(run_dir + ".log", "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    return rc, time.monotonic() - t0


def tail(run_dir, n=15):
    with open(run_dir + ".log") as f:
        return "".join(f.readlines()[-n:])


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def full_run(a, algo, seed, run_dir):
    config, sets = sets_for(a, algo, seed)
    rc, wall = squall(a, a.ranks, config, sets, run_dir)
    if rc != 0:
        raise Failed(f"{algo} seed {seed}: squall failed (exit {rc}):\n{tail(run_dir)}")
    s = summary(run_dir)
    return {"ranks": s["world_size"], "global_batch": s["global_batch"], "steps": s["steps"],
            "accuracy": s["final"]["test_accuracy"], "wall_s": wall, "learner_batch": a.batch, "lr_factor": 1.0}


def interrupted_run(a, algo, run_dir):
    config, sets = sets_for(a, algo, 1)
    _, _, ckpt = plan(a)
    rc, wall = squall(a, a.ranks, config, sets + [f"checkpoint.every_steps={ckpt}"], run_dir, fail_at=ckpt + 1)
    if rc == 0:
        raise Failed(f"{algo}: the run meant to fail at step {ckpt + 1} ended normally")
    if not os.path.isdir(os.path.join(run_dir, "checkpoints", f"step-{ckpt:08d}")):
        raise Failed(f"{algo}: no checkpoint of step {ckpt} after the failure (exit {rc}):\n{tail(run_dir)}")
    return {"ranks": a.ranks, "learner_batch": a.batch, "global_batch": a.ranks * a.batch, "steps": ckpt,
            "wall_s": wall, "exit": rc}


def resumed_run(a, algo, crashed, ranks, batch_mode, run_dir):
    config, sets = sets_for(a, algo, 1)
    _, _, ckpt = plan(a)
    shutil.copytree(crashed, run_dir)
    rc, wall = squall(a, ranks, config, sets + [f"elastic.batch={batch_mode}"], run_dir, resume=True)
    if rc != 0:
        raise Failed(f"{algo} on {ranks} ranks ({batch_mode}): the resume failed (exit {rc}):\n{tail(run_dir)}")
    s = summary(run_dir)
    at = s.get("attempt", {})
    change = at.get("shape_change")
    if at.get("first_step") != ckpt or s["world_size"] != ranks or (ranks != a.ranks and not change):
        raise Failed(f"{algo} on {ranks} ranks: not resumed at step {ckpt} on {ranks} ranks (first step "
                     f"{at.get('first_step')}, world size {s['world_size']}, shape change {change})")
    return {"ranks": ranks, "global_batch": s["global_batch"], "steps": s["steps"],
            "accuracy": s["final"]["test_accuracy"], "wall_s": wall,
            "learner_batch": (change or {}).get("to", {}).get("learner_batch", a.batch * a.ranks // ranks),
            "lr_factor": (change or {}).get("lr_scale"), "shape_change": change}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=4, help="ranks of the uninterrupted run and of the first attempt")
    ap.add_argument("--batch", type=int, default=24, help="samples per learner on --ranks ranks (one learner each)")
    ap.add_argument("--resume-ranks", type=int, nargs="+", default=[2, 3, 6])
    ap.add_argument("--learner-ranks", type=int, default=6,
                    help="ssgd's resume with elastic.batch = learner runs on this many ranks (0: none)")
    ap.add_argument("--seeds", type=int, nargs=2, default=[1, 2], metavar=("SEED", "OTHER"),
                    help="the runs' seed and the seed-to-seed reference's")
    ap.add_argument("--local-start", type=float, default=0.5,
                    help="local-sgd: epochs of ssgd before the local phase (parallel.start_step)")
    ap.add_argument("--train-samples", type=int, default=TRAIN_SAMPLES, help="for a smoke run")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR and keep the run dirs (default: a temporary folder)")
    ap.add_argument("--json", metavar="PATH", help="also write every number here")
    a = ap.parse_args()
    if not os.access(a.squall, os.X_OK):
        sys.exit(f"--squall: {a.squall} is not an executable (build it, or pass its path)")
    per_epoch, total, ckpt = plan(a)
    if per_epoch < 4 or ckpt <= per_epoch * a.local_start:
        sys.exit("too few steps: raise --epochs or --train-samples")

    rows, failures = [], []
    t_start = time.monotonic()
    work = a.keep or tempfile.mkdtemp(prefix="squall-elastic-")
    os.makedirs(work, exist_ok=True)
    try:
        for algo in a.algorithms:
            d = lambda name: os.path.join(work, f"{algo}-{name}")  # noqa: E731
            cases = [("uninterrupted", lambda: full_run(a, algo, a.seeds[0], d("base")))]
            cases.append((f"uninterrupted, seed {a.seeds[1]}", lambda: full_run(a, algo, a.seeds[1], d("seed"))))
            cases.append((f"first attempt, fails at step {ckpt + 1}", lambda: interrupted_run(a, algo, d("crashed"))))
            resumes = [(r, "global") for r in a.resume_ranks]
            if algo == "ssgd" and a.learner_ranks:
                resumes.append((a.learner_ranks, "learner"))
            for r, mode in resumes:
                cases.append((f"resumed on {r}, elastic.batch = {mode}",
                              lambda r=r, mode=mode: resumed_run(a, algo, d("crashed"), r, mode, d(f"resume-{r}-{mode}"))))
            base = None
            for name, fn in cases:
                if name.startswith("resumed") and not os.path.isdir(os.path.join(d("crashed"), "checkpoints")):
                    failures.append(f"{algo}: {name}: skipped, the first attempt left no checkpoint")
                    continue
                try:
                    r = fn()
                except Failed as e:
                    failures.append(str(e))
                    print(f"# {algo}: {name}: FAILED: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
                    continue
                r.update(algorithm=algo, run=name)
                if name == "uninterrupted":
                    base = r["accuracy"]
                if "accuracy" in r and base is not None:
                    r["points"] = 100 * (r["accuracy"] - base)
                rows.append(r)
                acc = f"accuracy {r['accuracy']:.4f}" if "accuracy" in r else f"exit {r['exit']}"
                print(f"# {algo}: {name}: {acc}, {r['steps']} steps, {r['wall_s']:.1f} s", file=sys.stderr, flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    total_s = time.monotonic() - t_start

    print(f"LeNet-5 on Fashion-MNIST ({a.train_samples} training, 10000 test samples), {a.epochs} epochs, "
          f"{a.ranks} ranks x 1 learner x {a.batch} samples (global batch {a.ranks * a.batch}), run.threads = 1, "
          f"{total} steps; checkpoint at step {ckpt}, rank 0 fails at step {ckpt + 1}; seed {a.seeds[0]} "
          f"unless named; {total_s:.0f} s in all\n")
    print("| algorithm | run | ranks | batch per learner | global batch | lr factor | steps | test accuracy "
          "| vs uninterrupted, points | wall s of the attempt |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        acc = f"{r['accuracy']:.4f}" if "accuracy" in r else "-"
        pts = f"{r['points']:+.2f}" if "points" in r and r["run"] != "uninterrupted" else "-"
        lr = f"{r['lr_factor']:.4g}" if r.get("lr_factor") is not None else "-"
        gb, lb = str(r.get("global_batch", "-")), str(r.get("learner_batch", "-"))
        print(f"| {r['algorithm']} | {r['run']} | {r['ranks']} | {lb} | {gb} | {lr} | {r['steps']} | {acc} | {pts} | "
              f"{r['wall_s']:.1f} |")
    print()
    for algo in a.algorithms:
        el = [abs(r["points"]) for r in rows if r["algorithm"] == algo and r["run"].startswith("resumed")
              and "points" in r]
        seed = [abs(r["points"]) for r in rows if r["algorithm"] == algo and r["run"].startswith("uninterrupted, seed")
                and "points" in r]
        if el:
            ref = f"; seed-to-seed {seed[0]:.2f} points" if seed else ""
            print(f"{algo}: largest elastic difference {max(el):.2f} points over {len(el)} resume(s){ref}")
    for f in failures:
        print(f"\nFAILED: {f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"epochs": a.epochs, "ranks": a.ranks, "batch": a.batch, "train_samples": a.train_samples,
                       "steps": total, "checkpoint_step": ckpt, "seconds": total_s, "runs": rows,
                       "failures": failures}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
