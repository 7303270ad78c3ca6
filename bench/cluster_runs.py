"""What the time-to-accuracy benches on the test cluster share (bench/periods.py, bench/outer.py):
one `squall train` of LeNet-5 on Fashion-MNIST across the cluster's nodes, read back as its
evaluations, the time and epochs at which a test accuracy was first reached, and the bytes the
nodes sent each other.

The cluster is tests/cluster/cluster's: network-namespace nodes joined by veth links with an
optional rate limit, so "bytes sent between nodes" is what left the nodes' eth0 (shared memory
inside a node does not cross it). Standard library only.
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tests", "cluster", "cluster")
TRAIN_SAMPLES = 60000
CONFIG = os.path.join(ROOT, "configs", "fashion-mnist-sma.toml")


def cluster(*args, check=True):
    return subprocess.run([TOOL, *args], check=check, capture_output=True, text=True)


def up(name, nodes):
    cluster("down", name, check=False)
    subprocess.run([TOOL, "up", name, "--nodes", str(nodes)], check=True)


def down(name):
    cluster("down", name, check=False)


def hosts(name, nodes, ranks_per_node):
    return ",".join(f"{name}-n{i + 1}:{ranks_per_node}" for i in range(nodes))


def sent_bytes(name, nodes):
    """Bytes sent so far on the nodes' links (eth0's transmit counter, summed over the nodes)."""
    total = 0
    for i in range(1, nodes + 1):
        dev = cluster("exec", name, str(i), "--", "cat", "/proc/net/dev").stdout
        for line in dev.splitlines():
            if line.strip().startswith("eth0:"):
                total += int(line.split(":", 1)[1].split()[8])
    return total


def schedule_sets(nodes, learners, batch, epochs, test_samples, seed, train_samples=TRAIN_SAMPLES):
    """The --set keys every variant of bench/outer.py and bench/stragglers.py shares: nodes x
    learners x batch samples a step, a quarter-epoch warm-up, evaluated every quarter epoch on
    test_samples samples (None: the whole test set), a metrics line an epoch, no checkpoint at
    the end."""
    steps_per_epoch = train_samples // (nodes * learners * batch)
    quarter = max(1, steps_per_epoch // 4)
    return [f"parallel.replicas_per_device={learners}", f"train.batch_size={batch}",
            f"schedule.warmup_steps={quarter}", f"train.epochs={epochs}", f"train.eval_every_steps={quarter}",
            f"train.log_every_steps={steps_per_epoch}", f"run.seed={seed}", "checkpoint.at_end=false"] + \
        ([f"data.test_samples={test_samples}"] if test_samples else [])


def train(squall, name, nodes, ranks_per_node, sets, run_dir, targets, config=CONFIG, metric="test_accuracy"):
    """One training across the cluster. sets: the --set keys (run.dir is added); metric: the
    evaluations' field the targets and "final" read (test_accuracy, or test_miou for a
    segmentation). Returns the final metric, its value and training seconds at each
    evaluation (as "accuracy"), the epochs and training seconds at which each of targets was
    first reached (None where it was not), the whole run's training seconds and the bytes the
    nodes sent; or all None when the run failed."""
    ranks = nodes * ranks_per_node
    cmd = [TOOL, "mpirun", name, "--host", hosts(name, nodes, ranks_per_node), "-np", str(ranks), "--", squall,
           "train", "--config", config]
    for s in sets + [f"run.dir={run_dir}"]:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    before = sent_bytes(name, nodes)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    sent = sent_bytes(name, nodes) - before
    if done.returncode != 0:
        # A run whose gradients or models stopped being finite ends with NonFiniteStep's message.
        diverged = "not finite" in done.stderr
        print(f"# {'diverged' if diverged else 'failed'}: {' '.join(sets)}: {done.stderr.strip()[-400:]}",
              file=sys.stderr)
        return {"final": None, "train_s": None, "bytes": None, "evals": [], "diverged": diverged,
                **{f"epochs@{t}": None for t in targets}, **{f"seconds@{t}": None for t in targets}}
    evals = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["kind"] == "eval":
                evals.append({"epochs": m["epochs_done"], "accuracy": m[metric], "train_s": m["train_s"]})
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    r = {"final": s["final"][metric], "train_s": evals[-1]["train_s"] if evals else None, "bytes": sent,
         "evals": evals, "diverged": False, "allreduce_s": s["time_breakdown_s"]["allreduce"],
         "overlapped_s": s["time_breakdown_s"]["allreduce_overlapped"],
         "outer_async": s["parallel"].get("outer_async"), "pace": s["parallel"].get("pace")}
    for t in targets:
        hit = next((e for e in evals if e["accuracy"] >= t), None)
        r[f"epochs@{t}"] = hit["epochs"] if hit else None
        r[f"seconds@{t}"] = hit["train_s"] if hit else None
    return r


def median_or_none(values):
    """The median, where a run that never reached its target (None) counts as infinitely slow."""
    if not values:
        return None
    m = statistics.median([float("inf") if v is None else v for v in values])
    return None if m == float("inf") else m


def spread(values):
    """'lo-hi' over the runs that reached it, '' when fewer than two did."""
    got = [v for v in values if v is not None]
    return f"{min(got):.1f}-{max(got):.1f}" if len(got) > 1 else ""


def fmt(v, spec):
    return "not reached" if v is None else format(v, spec)
