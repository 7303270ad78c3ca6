#!/usr/bin/env python3
"""PyTorch peer for bench/cpu_training.py and bench/gpu_training.py: trains the same model as
squall on the same Fashion-MNIST samples (same normalisation, batch and thread count) and
prints one JSON line with the training throughput. Reads Debian's IDX files directly, with
the standard library and PyTorch alone (no numpy).
--device cuda trains on the GPU in eager mode, fp32 without TF32 (squall's precision).
Exits 77 ("SKIP: needs torch") where this interpreter cannot import PyTorch."""
import argparse
import gzip
import json
import os
import struct
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIP: needs torch (this interpreter cannot import it)")
    sys.exit(77)


def read_idx(path):
    """An IDX file (optionally gzipped) of unsigned bytes as a uint8 tensor of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = bytearray(f.read())
    zero, kind, ndim = struct.unpack_from(">HBB", data, 0)
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes (magic {zero:#06x} {kind:#04x})")
    dims = struct.unpack_from(f">{ndim}I", data, 4)
    offset, count = 4 + 4 * ndim, 1
    for d in dims:
        count *= d
    if len(data) != offset + count:
        raise ValueError(f"{path}: {len(data) - offset} bytes of data for shape {dims}")
    return torch.frombuffer(data, dtype=torch.uint8, count=count, offset=offset).reshape(dims)


def load(folder):
    x = read_idx(os.path.join(folder, "train-images-idx3-ubyte.gz")).float() / 255.0
    y = read_idx(os.path.join(folder, "train-labels-idx1-ubyte.gz")).long()
    x = (x - 0.2860) / 0.3530
    return x.unsqueeze(1), y


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.abn = nn.BatchNorm2d(cout)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bbn = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.abn(self.a(x)))
        y = self.bbn(self.b(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class ResNet20(nn.Module):
    def __init__(self, classes=10, w=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        layers, cin = [], w
        for stage in range(3):
            for k in range(3):
                cout = w << stage
                layers.append(Block(cin, cout, 2 if stage > 0 and k == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["lenet5", "resnet20"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True  # squall also picks its algorithms by measurement
    x, y = load(args.data)
    x, y = x.to(dev), y.to(dev)
    model = (LeNet5() if args.model == "lenet5" else ResNet20()).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    n = x.shape[0]
    perm = torch.randperm(n, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step(i):
        idx = perm[(i * args.batch) % (n - args.batch):][:args.batch]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    sync()
    dt = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "model": args.model, "batch": args.batch,
                      "threads": args.threads, "steps": args.steps, "device": args.device,
                      "samples_per_s": args.steps * args.batch / dt, "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
