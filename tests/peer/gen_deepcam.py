#!/usr/bin/env python3
"""DeepCAM-layout files and their expected tensors (tests/peer/test_peer_deepcam.cpp).

Writes into OUT_DIR a few small files as DeepCAM stores them (data-*.h5: /climate/data
float32 [H,W,C] channels last, /climate/labels_0 [H,W] with 0 background, 1 tropical
cyclone, 2 atmospheric river; float32 in most files, int32 in one), stats.h5
(/climate/{count,mean,sqmean,minval,maxval}), and manifest.json (tests/support/peer.hpp) with
what a reader must return: CHW tensors, raw and normalised the way DeepCAM's PyTorch loader
does (zscore: (x - mean) / sqrt(sqmean - mean^2); minmax: (x - minval) / (maxval - minval)),
computed in float64 with numpy, and the labels. Usage: gen_deepcam.py OUT_DIR
"""
import json
import os
import sys

import h5py
import numpy as np

H, W, C = 16, 24, 16
FILES = ["data-2106-01-01-00-1.h5", "data-2106-01-01-03-1.h5", "data-2106-01-01-06-1.h5"]


def main(out):
    rng = np.random.default_rng(20240611)
    samples = []
    for i, name in enumerate(FILES):
        # Channel c around 10 c with spread 1 + c, like physical fields of different scales.
        data = (rng.normal(size=(H, W, C)) * (1 + np.arange(C)) + 10 * np.arange(C)).astype(np.float32)
        labels = rng.integers(0, 3, size=(H, W))
        with h5py.File(os.path.join(out, name), "w") as f:
            g = f.create_group("climate")
            g.create_dataset("data", data=data)
            g.create_dataset("labels_0", data=labels.astype(np.int32 if i == 1 else np.float32))
            g.create_dataset("data_stats", data=np.stack([data.min((0, 1)), data.max((0, 1)),
                                                          data.mean((0, 1)), data.std((0, 1))]))
        samples.append((data, labels))

    stack = np.stack([d for d, _ in samples]).astype(np.float64)
    stats = {
        "count": np.array([stack.shape[0] * H * W] * C, np.float32),
        "mean": stack.mean((0, 1, 2)).astype(np.float32),
        "sqmean": (stack ** 2).mean((0, 1, 2)).astype(np.float32),
        "minval": stack.min((0, 1, 2)).astype(np.float32),
        "maxval": stack.max((0, 1, 2)).astype(np.float32),
    }
    with h5py.File(os.path.join(out, "stats.h5"), "w") as f:
        g = f.create_group("climate")
        for k, v in stats.items():
            g.create_dataset(k, data=v)

    # What the reader sees: the float32 statistics, std formed in float64 then stored as float32.
    mean = stats["mean"].astype(np.float64)
    std = np.sqrt(np.maximum(stats["sqmean"].astype(np.float64) - mean ** 2, 0)).astype(np.float32).astype(np.float64)
    lo = stats["minval"].astype(np.float64)
    span = (stats["maxval"] - stats["minval"]).astype(np.float32).astype(np.float64)

    cases = []
    for i, (data, labels) in enumerate(samples):
        chw = np.transpose(data.astype(np.float64), (2, 0, 1))
        tensors = {
            "raw": chw,
            "zscore": (chw - mean[:, None, None]) / std[:, None, None],
            "minmax": (chw - lo[:, None, None]) / span[:, None, None],
            "labels": labels.astype(np.float64),
        }
        entry = {"name": "sample%d" % i, "params": {"file": FILES[i], "index": i}, "tensors": {}}
        for key, t in tensors.items():
            fname = "sample%d.%s.f32" % (i, key)
            t.astype("<f4").tofile(os.path.join(out, fname))
            entry["tensors"][key] = {"file": fname, "shape": list(t.shape)}
        cases.append(entry)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"cases": cases, "shape": [C, H, W]}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
