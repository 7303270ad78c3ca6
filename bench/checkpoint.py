#!/usr/bin/env python3
"""Checkpoint cost: squall's checkpoint against writing the same bytes, side by side in one run.

`squall train` runs a ResNet-20 of width 64 (about 4.3 M parameters: a checkpoint of weights and
SGD momentum of about 35 MB) for a few steps with `checkpoint.every_steps=1`, and reads each
checkpoint's seconds from metrics.jsonl (copying the model off the backend, writing model.h5
with its checksums, fsync, rename). Between squall's runs it writes the same number of bytes
two other ways: a raw file (write, fsync, rename: the floor for any durable checkpoint) and,
where an interpreter imports torch, torch.save of a state dict of the same tensors followed by
fsync and rename (what a PyTorch trainer does). Prints the medians and the ratios.

    /usr/bin/python3 bench/checkpoint.py --squall build/bin/squall --runs 3 --dir /tmp

With --parts BASELINE_SQUALL it measures instead the checkpoints whose replicas differ from rank
to rank: `sma` (2 learners per rank) on --ranks ranks under mpiexec, --ranks-per-node to a node
(emulated), for the squall under test and BASELINE_SQUALL (an earlier build, say main's)
alternately, run after run. It prints each one's median checkpoint seconds (rank 0's record:
gather, write, fsync, agreement, rename) and the files in a checkpoint folder (issue 23: one
file per node instead of one per rank).

    /usr/bin/python3 bench/checkpoint.py --squall build/bin/squall --parts main/build/bin/squall \
        --ranks 4 --ranks-per-node 2 --runs 5 --dir /tmp
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def squall_run(a, workdir):
    run_dir = tempfile.mkdtemp(dir=workdir)
    cmd = [a.squall, "train", "--config", os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml"),
           "--set", "model.name=resnet20", "--set", f"model.width={a.width}", "--set", "train.batch_size=8",
           "--set", f"train.max_steps={a.steps}", "--set", "schedule.warmup_steps=0",
           "--set", "checkpoint.every_steps=1",
           "--set", f"checkpoint.keep={a.steps + 1}", "--set", "data.train_samples=512",
           "--set", "data.test_samples=64", "--set", f"run.dir={run_dir}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    seconds = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "checkpoint":
                seconds.append(r["seconds"])
    ck = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1]
    size = os.path.getsize(os.path.join(run_dir, "checkpoints", ck, "model.h5"))
    return seconds, size


def parts_run(a, squall, workdir):
    """One sma run of --ranks ranks: its checkpoints' seconds and the files in the last one."""
    run_dir = tempfile.mkdtemp(dir=workdir)
    env = dict(os.environ, SQUALL_RANKS_PER_NODE=str(a.ranks_per_node), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpiexec", "-n", str(a.ranks), "--oversubscribe", squall, "train", "--config",
           os.path.join(ROOT, "configs", "fashion-mnist-sma.toml"),
           "--set", "model.name=resnet20", "--set", f"model.width={a.width}", "--set", "train.batch_size=4",
           "--set", f"train.max_steps={a.steps}", "--set", "schedule.warmup_steps=0",
           "--set", "checkpoint.every_steps=1", "--set", f"checkpoint.keep={a.steps + 1}",
           "--set", "data.train_samples=512", "--set", "data.test_samples=64", "--set", "run.threads=1",
           "--set", f"run.dir={run_dir}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    seconds = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "checkpoint":
                seconds.append(r["seconds"])
    ck = os.path.join(run_dir, "checkpoints", sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1])
    files = sorted(os.listdir(ck))
    size = sum(os.path.getsize(os.path.join(ck, f)) for f in files)
    return seconds, files, size


def parts_main(a):
    med = statistics.median
    runs = {"under test": ([], None, 0), "baseline": ([], None, 0)}
    with tempfile.TemporaryDirectory(dir=a.dir) as work:
        for _ in range(a.runs):  # interleaved: A B A B ...
            for name, squall in (("under test", a.squall), ("baseline", a.parts)):
                seconds, files, size = parts_run(a, squall, work)
                runs[name] = (runs[name][0] + seconds, files, size)
    print(f"sma, {a.ranks} ranks, {a.ranks_per_node} per node, ResNet-20 width {a.width}, "
          f"{a.runs} runs of {a.steps} checkpoints each")
    print("| squall | files per checkpoint | MB | median s | baseline / this |")
    print("|---|---|---|---|---|")
    base = med(runs["baseline"][0])
    for name, (seconds, files, size) in runs.items():
        print(f"| {name} | {len(files)} ({', '.join(files)}) | {size / 1e6:.1f} | {med(seconds):.3f} | "
              f"{base / med(seconds):.2f} |")


def durable(path, write):
    tmp = path + ".tmp"
    t0 = time.perf_counter()
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - t0


def raw_run(size, workdir):
    data = os.urandom(size)
    return durable(os.path.join(workdir, "raw.bin"), lambda f: f.write(data))


def torch_run(size, workdir):
    import torch
    n = size // 8  # two float32 tensors (weights, momentum) of the same total size
    state = {"model": torch.randn(n), "optimizer": torch.randn(n)}
    return durable(os.path.join(workdir, "torch.pt"), lambda f: torch.save(state, f))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--dir", default=None, help="where to write (the file system to measure)")
    p.add_argument("--parts", default=None, metavar="BASELINE_SQUALL",
                   help="measure sma checkpoints with a part per rank against this earlier squall")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=2)
    a = p.parse_args()
    if a.parts:
        parts_main(a)
        return
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        print("torch does not import in this interpreter: torch.save is not measured")
    squall_s, raw_s, torch_s = [], [], []
    size = 0
    with tempfile.TemporaryDirectory(dir=a.dir) as work:
        for _ in range(a.runs):
            seconds, size = squall_run(a, work)
            squall_s += seconds
            raw_s.append(raw_run(size, work))
            if have_torch:
                torch_s.append(torch_run(size, work))
    med = statistics.median
    print(f"checkpoint of {size / 1e6:.1f} MB (model.h5), {len(squall_s)} squall checkpoints, {a.runs} of each peer")
    print("| writer | median s | MB/s | squall / this |")
    print("|---|---|---|---|")
    rows = [("squall checkpoint", squall_s), ("raw write + fsync + rename", raw_s)]
    if torch_s:
        rows.append(("torch.save + fsync + rename", torch_s))
    for name, xs in rows:
        print(f"| {name} | {med(xs):.3f} | {size / 1e6 / med(xs):.0f} | {med(squall_s) / med(xs):.2f} |")


if __name__ == "__main__":
    main()
