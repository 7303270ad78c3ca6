"""A short sma run's checkpoint of 4 ranks on 2 nodes (emulated: SQUALL_RANKS_PER_NODE=2), read
with h5py as another program would (docs/formats.md, "Checkpoints"): the folder holds model.h5
and one node-NNNNN.h5 per node, no file per rank; each node file holds one group per rank of its
node, named by global rank, and each group is laid out as a checkpoint file's root (format
attributes, the entry lists, the rank's datasets: its learners' parameters, as many as the
model has).

Usage: check_node_files.py SQUALL_BINARY MPIEXEC SOURCE_DIR
Exits 77 (skipped) when Debian's Fashion-MNIST files are not installed."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def attr_text(obj, name):
    v = obj.attrs[name]
    v = v[0] if isinstance(v, np.ndarray) and v.ndim else v
    return v.decode() if isinstance(v, bytes) else str(v)


def attr_texts(obj, name):
    return [x.decode() if isinstance(x, bytes) else str(x) for x in np.asarray(obj.attrs[name]).reshape(-1)]


def integer(obj, name):
    return int(np.asarray(obj.attrs["i:" + name]).reshape(-1)[0])


def main():
    squall, mpiexec, source = sys.argv[1], sys.argv[2], sys.argv[3]
    if not os.path.exists(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")):
        print("skipped: " + FASHION + " missing (install dataset-fashion-mnist)")
        return 77
    env = dict(os.environ, SQUALL_RANKS_PER_NODE="2", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory(prefix="squall-h5py-nodes-") as tmp:
        run = os.path.join(tmp, "run")
        subprocess.run([mpiexec, "-n", "4", "--oversubscribe", squall, "train", "--config",
                        os.path.join(source, "configs/fashion-mnist-sma.toml"), "--set", "run.dir=" + run,
                        "--set", "train.max_steps=4", "--set", "schedule.warmup_steps=0",
                        "--set", "data.train_samples=1024", "--set", "data.test_samples=128",
                        "--set", "run.threads=1"], check=True, env=env)
        folder = os.path.join(run, "checkpoints", "step-00000004")
        failures = []
        names = sorted(os.listdir(folder))
        if names != ["model.h5", "node-00000.h5", "node-00001.h5"]:
            failures.append("the checkpoint folder holds %s, expected model.h5 and 2 node files" % names)
        with h5py.File(os.path.join(folder, "model.h5"), "r") as f:
            param_count = integer(f, "param_count")
            learners = integer(f, "learners")
        for node, ranks in ((0, (0, 1)), (1, (2, 3))):
            path = os.path.join(folder, "node-%05d.h5" % node)
            if not os.path.exists(path):
                continue
            with h5py.File(path, "r") as f:
                groups = sorted(f.keys())
                expected = ["rank-%05d" % r for r in ranks]
                if groups != expected:
                    failures.append("%s holds groups %s, expected %s" % (path, groups, expected))
                if attr_text(f, "format") != "squall-checkpoint-groups" or attr_texts(f, "groups") != expected:
                    failures.append("%s: format %r, groups attribute %r" % (path, attr_text(f, "format"),
                                                                          attr_texts(f, "groups")))
                for r in ranks:
                    name = "rank-%05d" % r
                    if name not in f:
                        continue
                    g = f[name]
                    # Unsplit, each rank is its own group of parallel.spatial.
                    if attr_text(g, "format") != "squall-checkpoint" or integer(g, "group") != r:
                        failures.append("%s:/%s is not rank %d's part" % (path, name, r))
                    arrays = attr_texts(g, "arrays")
                    for i in range(learners):
                        p = "learner_%d/params" % i
                        if p not in arrays or p not in g:
                            failures.append("%s:/%s has no %s" % (path, name, p))
                            continue
                        d = g[p]
                        if d.dtype != np.float32 or d.shape != (param_count,) or not np.all(np.isfinite(d[()])):
                            failures.append("%s:/%s/%s is %s %s, expected %d finite float32" %
                                            (path, name, p, d.dtype, d.shape, param_count))
        for line in failures:
            print("FAIL: " + line)
        if not failures:
            print("ok: %s holds model.h5 and a node file per node, a group per rank of %d learners" % (folder, learners))
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
