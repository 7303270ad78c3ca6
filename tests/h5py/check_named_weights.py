"""A short squall training run's checkpoint, read with h5py as another program would: every
layer's parameter is under model/<name> with the shape PyTorch gives LeNet-5, each named tensor
is the matching slice of the flat central arrays, and the input shape, classes and
normalisation are there (docs/formats.md, "Checkpoints").

Usage: check_named_weights.py SQUALL_BINARY SOURCE_DIR
Exits 77 (skipped) when Debian's Fashion-MNIST files are not installed."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"

# LeNet-5 as torch.nn layers: Conv2d(1, 6, 5, padding=2), Conv2d(6, 16, 5), Linear(400, 120),
# Linear(120, 84), Linear(84, 10); weights [out, in, kh, kw] and [out, in].
LENET5 = {
    "conv1.weight": (6, 1, 5, 5), "conv1.bias": (6,),
    "conv2.weight": (16, 6, 5, 5), "conv2.bias": (16,),
    "fc1.weight": (120, 400), "fc1.bias": (120,),
    "fc2.weight": (84, 120), "fc2.bias": (84,),
    "fc3.weight": (10, 84), "fc3.bias": (10,),
}


def text(f, name):
    v = f.attrs["t:" + name]
    v = v[0] if isinstance(v, np.ndarray) else v
    return v.decode() if isinstance(v, bytes) else str(v)


def integer(f, name):
    return int(np.asarray(f.attrs["i:" + name]).reshape(-1)[0])


def main():
    squall, source = sys.argv[1], sys.argv[2]
    if not os.path.exists(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")):
        print("skipped: " + FASHION + " missing (install dataset-fashion-mnist)")
        return 77
    with tempfile.TemporaryDirectory(prefix="squall-h5py-") as tmp:
        run = os.path.join(tmp, "run")
        subprocess.run([squall, "train", "--config", os.path.join(source, "configs/fashion-mnist-lenet5.toml"),
                        "--set", "run.dir=" + run, "--set", "train.max_steps=4", "--set", "schedule.warmup_steps=0",
                        "--set", "data.train_samples=512",
                        "--set", "data.test_samples=128"], check=True)
        path = os.path.join(run, "checkpoints", "step-00000004", "model.h5")
        failures = []
        with h5py.File(path, "r") as f:
            params = f["central/params"][()]
            model = f["model"]
            names = sorted(model.keys())
            if sorted(LENET5) != names:
                failures.append("model/ holds %s, expected %s" % (names, sorted(LENET5)))
            total = 0
            flat = params.tobytes()
            for name, shape in LENET5.items():
                if name not in model:
                    continue
                t = model[name]
                if t.shape != shape or t.dtype != np.float32:
                    failures.append("model/%s is %s %s, expected float32 %s" % (name, t.dtype, t.shape, shape))
                total += t.size
                if t[()].tobytes() not in flat:  # a contiguous slice of the flat arena
                    failures.append("model/%s is not a slice of central/params" % name)
            if total != integer(f, "param_count") or total != params.size:
                failures.append("named parameters hold %d values, central/params %d" % (total, params.size))
            if text(f, "spec/name") != "lenet5":
                failures.append("spec/name = %r" % text(f, "spec/name"))
            shape = tuple(integer(f, "input/" + k) for k in ("channels", "height", "width"))
            if shape != (1, 28, 28):
                failures.append("input shape %s, expected (1, 28, 28)" % (shape,))
            classes = text(f, "class_names").split("\n")
            if len(classes) != 10 or classes[0] != "T-shirt/top":
                failures.append("class_names = %r" % classes)
            if text(f, "normalization/kind") != "zscore":
                failures.append("normalization/kind = %r" % text(f, "normalization/kind"))
            mean, std = f["normalization/mean"][()], f["normalization/std"][()]
            if not (np.allclose(mean, [0.2860]) and np.allclose(std, [0.3530])):
                failures.append("normalization mean %s std %s" % (mean, std))
        for line in failures:
            print("FAIL: " + line)
        if not failures:
            print("ok: %s holds LeNet-5's %d tensors by name and shape" % (path, len(LENET5)))
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
