#!/usr/bin/env python3
"""PyTorch references for tests/peer/test_peer_layers.cpp: for each layer, random inputs,
parameters and an upstream gradient dy; PyTorch's output y and the gradients of sum(y*dy)
with respect to the input(s) and the parameters. Format: tests/support/peer.hpp."""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

out_dir = sys.argv[1]
torch.manual_seed(7)
cases = []


def save(name, params, tensors):
    entry = {"name": name, "params": params, "tensors": {}}
    for key, t in tensors.items():
        arr = t.detach().to(torch.float32).contiguous().numpy()
        fname = f"{name}.{key}.f32"
        arr.astype("<f4").tofile(os.path.join(out_dir, fname))
        entry["tensors"][key] = {"file": fname, "shape": list(arr.shape)}
    cases.append(entry)


def run(name, params, fn, inputs, weights):
    """inputs/weights: dicts name -> tensor (leaf, requires grad)."""
    for t in list(inputs.values()) + list(weights.values()):
        t.requires_grad_(True)
    y = fn(**inputs, **weights)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    tensors = {"y": y, "dy": dy}
    for k, t in list(inputs.items()) + list(weights.items()):
        tensors[k] = t
        tensors["d" + k] = t.grad
    save(name, params, tensors)


def r(*shape):
    return torch.randn(*shape, dtype=torch.float64).float()


# convolutions: (name, n, c, h, w, k, kernel, stride, pad, dilation, bias)
for (name, n, c, h, w, k, ks, st, pd, dl, bias) in [
        ("conv3x3_s1_p1", 2, 3, 7, 6, 4, 3, 1, 1, 1, True),
        ("conv3x3_s2_p1_nobias", 2, 3, 9, 7, 5, 3, 2, 1, 1, False),
        ("conv3x3_dil2", 2, 4, 9, 8, 3, 3, 1, 2, 2, True),
        ("conv5x5_p2", 3, 1, 12, 12, 6, 5, 1, 2, 1, True),
        ("conv1x1_s2", 2, 6, 8, 8, 4, 1, 2, 0, 1, False)]:
    weights = {"weight": r(k, c, ks, ks) * 0.3}
    if bias:
        weights["bias"] = r(k)
    run(name, {"layer": "conv2d", "out_channels": k, "kernel": ks, "stride": st, "padding": pd, "dilation": dl,
               "bias": bias},
        lambda x, weight, bias=None: F.conv2d(x, weight, bias, st, pd, dl), {"x": r(n, c, h, w)}, weights)

for (name, n, c, h, w, k, ks, st, pd, op) in [("deconv2x2_s2", 2, 4, 5, 6, 3, 2, 2, 0, 0),
                                             ("deconv3x3_s2_p1_op1", 2, 3, 5, 4, 2, 3, 2, 1, 1)]:
    weights = {"weight": r(c, k, ks, ks) * 0.3, "bias": r(k)}
    run(name, {"layer": "conv_transpose2d", "out_channels": k, "kernel": ks, "stride": st, "padding": pd,
               "output_padding": op},
        lambda x, weight, bias: F.conv_transpose2d(x, weight, bias, st, pd, op), {"x": r(n, c, h, w)}, weights)

run("linear", {"layer": "linear", "out_features": 7},
    lambda x, weight, bias: F.linear(x, weight, bias), {"x": r(4, 20)}, {"weight": r(7, 20) * 0.2, "bias": r(7)})

# batch norm, training mode: also the running statistics after one step (momentum 0.1)
x = r(4, 3, 5, 6) * 2 + 1
rm, rv = r(3) * 0.1, torch.rand(3) + 0.5
rm_after, rv_after = rm.clone(), rv.clone()
run("batch_norm_train", {"layer": "batch_norm", "train": True},
    lambda x, weight, bias: F.batch_norm(x, rm_after, rv_after, weight, bias, True, 0.1, 1e-5),
    {"x": x}, {"weight": r(3), "bias": r(3)})
cases[-1]["tensors"]  # running stats before/after
for key, t in (("running_mean", rm), ("running_var", rv), ("running_mean_after", rm_after),
               ("running_var_after", rv_after)):
    fname = f"batch_norm_train.{key}.f32"
    t.numpy().astype("<f4").tofile(os.path.join(out_dir, fname))
    cases[-1]["tensors"][key] = {"file": fname, "shape": [3]}

rm2, rv2 = r(3) * 0.1, torch.rand(3) + 0.5
run("batch_norm_eval", {"layer": "batch_norm", "train": False},
    lambda x, weight, bias: F.batch_norm(x, rm2, rv2, weight, bias, False, 0.1, 1e-5),
    {"x": r(2, 3, 4, 5)}, {"weight": r(3), "bias": r(3)})
for key, t in (("running_mean", rm2), ("running_var", rv2)):
    fname = f"batch_norm_eval.{key}.f32"
    t.numpy().astype("<f4").tofile(os.path.join(out_dir, fname))
    cases[-1]["tensors"][key] = {"file": fname, "shape": [3]}

run("relu", {"layer": "relu"}, lambda x: F.relu(x), {"x": r(2, 3, 5, 4)}, {})
# distinct values so that max pooling has no ties
perm = torch.randperm(2 * 3 * 9 * 8).float().reshape(2, 3, 9, 8) / 100.0
run("max_pool2_s2", {"layer": "max_pool", "kernel": 2, "stride": 2, "padding": 0},
    lambda x: F.max_pool2d(x, 2, 2), {"x": perm.clone()}, {})
run("max_pool3_s2_p1", {"layer": "max_pool", "kernel": 3, "stride": 2, "padding": 1},
    lambda x: F.max_pool2d(x, 3, 2, 1), {"x": perm.clone()}, {})
run("avg_pool3_s2_p1", {"layer": "avg_pool", "kernel": 3, "stride": 2, "padding": 1},
    lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), {"x": r(2, 3, 9, 8)}, {})
run("global_avg_pool", {"layer": "global_avg_pool"},
    lambda x: F.adaptive_avg_pool2d(x, 1).flatten(1), {"x": r(3, 4, 5, 6)}, {})
run("upsample_bilinear", {"layer": "upsample_bilinear", "out_h": 11, "out_w": 9},
    lambda x: F.interpolate(x, size=(11, 9), mode="bilinear", align_corners=False), {"x": r(2, 3, 5, 6)}, {})
run("upsample_bilinear_down", {"layer": "upsample_bilinear", "out_h": 3, "out_w": 4},
    lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", align_corners=False), {"x": r(2, 2, 7, 9)}, {})
run("upsample_pooled_vector", {"layer": "upsample_bilinear", "out_h": 4, "out_w": 5},
    lambda x: F.interpolate(x.reshape(2, 3, 1, 1), size=(4, 5), mode="bilinear", align_corners=False),
    {"x": r(2, 3)}, {})
run("dropout_eval", {"layer": "dropout", "p": 0.3}, lambda x: F.dropout(x, 0.3, training=False), {"x": r(2, 5)}, {})
run("add", {"layer": "add"}, lambda x, x1: x + x1, {"x": r(2, 3, 4, 4), "x1": r(2, 3, 4, 4)}, {})
run("concat", {"layer": "concat"}, lambda x, x1, x2: torch.cat([x, x1, x2], 1),
    {"x": r(2, 3, 4, 5), "x1": r(2, 1, 4, 5), "x2": r(2, 2, 4, 5)}, {})
run("flatten", {"layer": "flatten"}, lambda x: torch.flatten(x, 1), {"x": r(2, 3, 4, 5)}, {})

# softmax cross-entropy (the loss): mean over samples (pixels), class weights, ignored labels
for (name, shape, weighted) in [("ce_classify", (6, 5), False), ("ce_pixels_weighted", (2, 3, 4, 5), True)]:
    logits = r(*shape).requires_grad_(True)
    classes = shape[1]
    label_shape = (shape[0],) + tuple(shape[2:])
    labels = torch.randint(0, classes, label_shape)
    labels.view(-1)[1] = -1  # ignored
    w = (torch.rand(classes) + 0.5) if weighted else None
    loss = F.cross_entropy(logits, labels, weight=w, ignore_index=-1)
    loss.backward()
    tensors = {"logits": logits, "labels": labels.float(), "loss": loss.reshape(1), "dlogits": logits.grad}
    if weighted:
        tensors["class_weights"] = w
    save(name, {"layer": "softmax_cross_entropy"}, tensors)

with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)
print(f"gen_layers: {len(cases)} cases from torch {torch.__version__}")
