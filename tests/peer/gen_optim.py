#!/usr/bin/env python3
"""PyTorch references for squall's optimizers (tests/peer/test_peer_optim.cpp).

For each case: three tensors (a weight, a bias without weight decay, a 4-D kernel), the
gradients of three steps, the learning rate of each step, and the weights after step 1 and
after step 3. SGD, Adam and AdamW are torch.optim's; torch has no LAMB, so LAMB is written out
here with torch ops (You et al. 2020, with bias correction, trust ratio ||w|| / ||u||, 1 when
either norm is 0). Format: tests/support/peer.hpp. Usage: gen_optim.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
import torch

SHAPES = [[8, 4], [8], [3, 3, 2, 2]]
DECAY = [True, False, True]
STEPS = 3
LRS = [0.1, 0.05, 0.08]


def lamb(params, grads_per_step, lrs, cfg, decay, record):
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1, b2, eps, wd = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"]
    for s, grads in enumerate(grads_per_step):
        t = s + 1
        with torch.no_grad():
            for k, p in enumerate(params):
                g = grads[k]
                m[k].mul_(b1).add_(g, alpha=1 - b1)
                v[k].mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = m[k] / (1 - b1 ** t)
                v_hat = v[k] / (1 - b2 ** t)
                u = m_hat / (v_hat.sqrt() + eps)
                if decay[k]:
                    u = u + wd * p
                w_norm = p.norm().item()
                u_norm = u.norm().item()
                trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p.sub_(lrs[s] * trust * u)
        record(t, params)


def torch_optimizer(name, groups, cfg):
    if name == "sgd":
        return torch.optim.SGD(groups, lr=LRS[0], momentum=cfg["momentum"], nesterov=cfg["nesterov"])
    if name == "adam":
        return torch.optim.Adam(groups, lr=LRS[0], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=LRS[0], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    raise ValueError(name)


def make_case(out, name, cfg, seed):
    rng = np.random.default_rng(seed)
    w0 = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) * 0.2 for s in SHAPES] for _ in range(STEPS)]
    tensors = {}

    def save(key, arr):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        fname = f"{name}.{key}.f32"
        arr.tofile(os.path.join(out, fname))
        tensors[key] = {"file": fname, "shape": list(arr.shape)}

    for k, w in enumerate(w0):
        save(f"w0.t{k}", w)
    for s in range(STEPS):
        for k, g in enumerate(grads[s]):
            save(f"g{s}.t{k}", g)

    params = [torch.tensor(w, requires_grad=True) for w in w0]

    def record(t, ps):
        if t in (1, 3):
            for k, p in enumerate(ps):
                save(f"w{t}.t{k}", p.detach().numpy().copy())

    opt_name = cfg["name"]
    if opt_name == "lamb":
        lamb(params, [[torch.tensor(g) for g in gs] for gs in grads], LRS, cfg, DECAY, record)
    else:
        groups = [{"params": [p], "weight_decay": cfg["weight_decay"] if DECAY[k] else 0.0}
                  for k, p in enumerate(params)]
        opt = torch_optimizer(opt_name, groups, cfg)
        for s in range(STEPS):
            for k, p in enumerate(params):
                p.grad = torch.tensor(grads[s][k])
            for group in opt.param_groups:
                group["lr"] = LRS[s]
            opt.step()
            record(s + 1, params)

    return {"name": name,
            "params": {"optimizer": cfg, "tensors": len(SHAPES), "decay": DECAY, "lr": LRS, "steps": STEPS},
            "tensors": tensors}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    base = {"momentum": 0.0, "nesterov": False, "weight_decay": 0.0,
            "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    configs = [
        ("sgd_momentum_nesterov_wd", {"name": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
        ("sgd_momentum_wd", {"name": "sgd", "momentum": 0.9, "weight_decay": 5e-4}),
        ("adam_wd", {"name": "adam", "weight_decay": 0.01}),
        ("adamw_wd", {"name": "adamw", "weight_decay": 0.05, "beta2": 0.99}),
        ("lamb_wd", {"name": "lamb", "weight_decay": 0.01, "eps": 1e-6}),
    ]
    cases = []
    for i, (name, overrides) in enumerate(configs):
        cfg = dict(base)
        cfg.update(overrides)
        cases.append(make_case(out, name, cfg, seed=100 + i))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
