"""What squall's benches share: running `squall train` and reading its steady rate, the data
they train on, the time budget, and the output contract with scripts/gpu-check.

The contract (gpu-check reads it): a bench prints a markdown table as its cases finish
(flushed, so that a bench cut short leaves its rows), and its last two lines are
`figure: <short text>` and `ratio: <number>` (squall over PyTorch for the headline case;
`ratio: -` where there is none). Where PyTorch or the GPU it needs is missing it prints
`SKIP: <reason>` and exits 77. With --budget SECONDS it starts no case that it expects to end
past the budget, and names the cases it left out; with --deadline EPOCH_SECONDS (gpu-check
gives both) the same holds for a wall-clock time fixed before the interpreter started, so that
a slow `import torch` comes out of the bench's time, not on top of it.

With SQUALL_BENCH_RUNS=DIR in the environment every squall run a bench makes (squall_train,
climate_data, keep_run) leaves in DIR its command, exit status, stdout and stderr
(`NN-<name>.log`) and its summary.json (`NN-<name>-summary.json`): gpu-check packs them.

Standard library only: a bench that needs torch imports it itself, after its own check.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NO_GPU = "no GPU can be used"  # what squall says when run.backend = cuda cannot run


class NoGpu(Exception):
    pass


class CaseFailed(Exception):
    """A squall run that failed or did not train what it was asked to."""


class OutOfBudget(Exception):
    """A run cut at the budget's end: left out, not failed."""


def out(text=""):
    print(text, flush=True)


def skip(reason):
    out(f"SKIP: {reason}")
    sys.exit(77)


def import_torch():
    """torch, or a SKIP (exit 77) naming this interpreter."""
    try:
        import torch
        return torch
    except ImportError:
        skip(f"needs torch ({sys.executable} cannot import it)")


def contract_end(figure, ratio):
    """The last two lines gpu-check reads."""
    out(f"figure: {figure}")
    out(f"ratio: {ratio:.2f}" if isinstance(ratio, (int, float)) and ratio == ratio else "ratio: -")


class Budget:
    """Seconds a bench may use (0: no limit), from when it was made, and at most up to
    `deadline`, a wall-clock time (seconds since the epoch, time.time()'s clock; 0 or None:
    none), fixed by the caller before this interpreter started: the time spent starting Python
    and importing torch counts against it. With a deadline, `seconds` is what is left then."""

    def __init__(self, seconds, deadline=None):
        self.start = time.monotonic()
        self.seconds = float(seconds or 0)
        if deadline:
            left = float(deadline) - time.time()
            self.seconds = max(0.0, min(self.seconds, left) if self.seconds > 0 else left)
            self.seconds = self.seconds or 1e-9  # a deadline already past: nothing fits

    def elapsed(self):
        return time.monotonic() - self.start

    def left(self):
        return self.seconds - self.elapsed() if self.seconds > 0 else float("inf")

    def fits(self, estimate):
        return self.left() >= estimate

    def deadline(self):
        """The budget's end on time.monotonic()'s clock (None: no limit)."""
        return self.start + self.seconds if self.seconds > 0 else None

    def timeout(self):
        """A subprocess's limit: what is left (None: no limit)."""
        return max(1.0, self.left()) if self.seconds > 0 else None


def add_deadline_argument(ap):
    """--deadline, as gpu-check passes it beside --budget."""
    ap.add_argument("--deadline", type=float, default=0,
                    help="wall-clock time (seconds since the epoch) by which this call ends, its start and "
                         "torch's import included (0: none); the earlier of it and --budget counts")


_kept = [0]


def keep_base(name):
    """With SQUALL_BENCH_RUNS set, the path (without suffix) where the next squall run named
    `name` is kept (the module's docstring); None otherwise."""
    keep = os.environ.get("SQUALL_BENCH_RUNS")
    if not keep:
        return None
    import re
    _kept[0] += 1
    try:
        os.makedirs(keep, exist_ok=True)
    except OSError:
        return None
    return os.path.join(keep, f"{_kept[0]:02d}-" + (re.sub(r"[^A-Za-z0-9.+-]+", "-", name).strip("-") or "run"))


def keep_summary(base, run_dir):
    if base and run_dir and os.path.exists(os.path.join(run_dir, "summary.json")):
        import shutil
        try:
            shutil.copyfile(os.path.join(run_dir, "summary.json"), base + "-summary.json")
        except OSError:
            pass


def keep_run(name, cmd, returncode, stdout, stderr, run_dir=None):
    """A finished run's output and summary.json kept where SQUALL_BENCH_RUNS says (nothing
    without it)."""
    base = keep_base(name)
    if base is None:
        return
    stdout, stderr = (x.decode(errors="replace") if isinstance(x, bytes) else x for x in (stdout, stderr))
    try:
        with open(base + ".log", "w") as f:
            f.write(f"$ {' '.join(map(str, cmd))}\n--- stdout\n{stdout or ''}\n--- stderr\n{stderr or ''}\n"
                    f"--- exit status {returncode}\n")
    except OSError as e:  # keeping is a help, never a failure of the bench
        print(f"(SQUALL_BENCH_RUNS: {e})", file=sys.stderr)
    keep_summary(base, run_dir)


def squall_train(squall, config, sets, workdir, steps, timeout=None, launcher=(), name=None):
    """Runs `squall train --config CONFIG --set ...` in a fresh run dir under `workdir` and
    returns its summary.json, after checking that it trained exactly `steps` steps. Raises
    NoGpu where squall says no GPU can be used, OutOfBudget past `timeout` seconds (the whole
    process group is killed), CaseFailed on any other failure. With SQUALL_BENCH_RUNS set, the
    run's stdout and stderr go, as they come, to a file there named after `name` (a bench
    killed in the middle of a run leaves what squall had written), and its summary.json beside."""
    import json
    run_dir = tempfile.mkdtemp(dir=workdir)
    cmd = list(launcher) + [squall, "train", "--config", config, "--set", f"run.dir={run_dir}"]
    for s in sets:
        cmd += ["--set", s]
    base = keep_base(name or "train-" + os.path.splitext(os.path.basename(config))[0])
    log = None
    if base:
        log = open(base + ".log", "w")
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
    p = subprocess.Popen(cmd, stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT if log else subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        if log:
            log.write(f"--- killed at the budget's end after {timeout:.0f} s\n")
            log.close()
        raise OutOfBudget(f"squall cut at the budget's end after {timeout:.0f} s")
    if log:
        log.close()
        with open(base + ".log", errors="replace") as f:
            stdout, stderr = "", f.read().split("\n", 1)[-1]  # stdout and stderr together, for the checks below
        with open(base + ".log", "a") as f:
            f.write(f"--- exit status {p.returncode}\n")
        keep_summary(base, run_dir)
    if p.returncode != 0:
        if NO_GPU in stderr:
            raise NoGpu(stderr.strip().splitlines()[-1])
        raise CaseFailed(f"squall train failed (exit {p.returncode}): {' '.join(cmd)}\n{stderr.strip()[-2000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    summary["_run_dir"] = run_dir
    trained = summary["attempt"]["steps"] if "attempt" in summary else summary["steps"]
    if trained != steps:
        raise CaseFailed(f"asked squall for {steps} steps and it trained {trained}: {' '.join(cmd)}")
    return summary


def steady_rate(summary, run_dir=None):
    """summary.json's steady_samples_per_s (docs/metrics.md, "Steady rate"); a run too short
    to have one is an error, never a number taken from elsewhere. A squall older than the
    steady rate (a --before binary) writes no such key: with its `run_dir` the same rate comes
    from metrics.jsonl's train records, when one was logged at the last step left out and the
    run evaluated only after its last step (rate_sets())."""
    if "steady_samples_per_s" not in summary and run_dir is not None:
        return steady_rate_from_records(summary, run_dir)
    rate = summary.get("steady_samples_per_s")
    if rate is None:
        skipped = summary.get("attempt", {}).get("steady", {}).get("skipped_steps", "?")
        raise CaseFailed(f"summary.json has no steady rate: {summary['attempt']['steps']} steps, of which the first "
                         f"{skipped} are left out; train more steps")
    return rate


def steady_rate_from_records(summary, run_dir):
    import json
    steps, first = summary["steps"], summary.get("attempt", {}).get("first_step", 0)
    skip = max(10, (steps - first) // 20)
    at = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train":
                at[r["step"]] = r["elapsed_s"]
            elif r.get("kind") in ("eval", "checkpoint") and first + skip <= r["step"] < steps:
                raise CaseFailed(f"{run_dir}: an older squall's run with an evaluation or checkpoint inside its "
                                 "steady steps: its rate cannot be told from its records")
    if first + skip not in at or steps not in at:
        raise CaseFailed(f"{run_dir}: an older squall's run without train records at steps {first + skip} and {steps}")
    return (steps - first - skip) * summary["global_batch"] / (at[steps] - at[first + skip])


def rate_sets(steps):
    """The --set values that make a run of `steps` steps measure its steady rate cleanly, also
    for a squall older than summary.json's steady_samples_per_s: max_steps decides the length,
    one evaluation after the last step, no checkpoint, a train record at the last step left
    out."""
    return [f"train.max_steps={steps}", f"train.epochs={steps}", f"train.eval_every_steps={steps}",
            f"train.log_every_steps={max(10, steps // 20)}", "checkpoint.at_end=false", "schedule.warmup_steps=0"]


def fashion_mnist(data, workdir):
    """A Fashion-MNIST folder with both splits. A folder that has only the 10000 t10k samples
    (the lease bundle's) gets a folder of links in which they are the training split too."""
    names = ["images-idx3-ubyte.gz", "labels-idx1-ubyte.gz"]
    has = lambda split: all(os.path.exists(os.path.join(data, f"{split}-{n}")) for n in names)
    if has("train") and has("t10k"):
        return data
    if not has("t10k"):
        sys.exit(f"{data}: not a Fashion-MNIST folder (no t10k-{names[0]})")
    linked = os.path.join(workdir, "fashion-mnist")
    os.makedirs(linked, exist_ok=True)
    for split in ("train", "t10k"):
        for n in names:
            os.symlink(os.path.abspath(os.path.join(data, f"t10k-{n}")), os.path.join(linked, f"{split}-{n}"))
    return linked


def climate_data(squall, folder, samples, distinct, height, width, seed=11, label=True):
    """DeepCAM-layout climate samples, as `make demo-climate` makes them: `squall data climate`
    writes `distinct` fields, `squall data label` labels them (label=False: the generator's
    all-background masks, which cost the same to train on), and links repeat them up to
    `samples` files, so that a run of many steps reads one epoch without generating gigabytes
    (a step's cost does not depend on the values)."""
    raw = folder + "-raw" if label else folder
    cmds = [[squall, "data", "climate", "--out", raw, "--samples", str(distinct), "--height", str(height),
             "--width", str(width), "--seed", str(seed)]]
    if label:
        cmds.append([squall, "data", "label", "--in", raw, "--out", folder])
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        keep_run(f"data-{cmd[2]}", cmd, r.returncode, r.stdout, r.stderr)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    files = sorted(f for f in os.listdir(folder) if f.startswith("data-") and f.endswith(".h5"))
    for i in range(len(files), samples):
        os.symlink(files[i % len(files)], os.path.join(folder, f"data-link-{i:06d}.h5"))
    return folder


def print_table_head(columns):
    out("| " + " | ".join(columns) + " |")
    out("|" + "---|" * len(columns))


def print_row(cells):
    out("| " + " | ".join(str(c) for c in cells) + " |")


def fmt(v, digits=0):
    return "-" if v is None else f"{v:.{digits}f}"
