#!/usr/bin/env python3
"""PyTorch peer for bench/cpu_training.py (and the Fashion-MNIST data of bench/gpu_training.py):
trains the same network as squall (bench/torch_models.py) on the same Fashion-MNIST samples
(same normalisation, batch and thread count) and prints one JSON line with its throughput:
--steps steps timed after --warmup untimed ones (bench/torch_peer.py; give the count squall's
steady rate leaves out, max(10, 5% of its steps), so that both measure the same steps). Reads
Debian's IDX files directly, with the standard library and PyTorch alone (no numpy).
--device cuda trains on the GPU in eager mode, fp32 without TF32 (squall's precision).
Exits 77 ("SKIP: needs torch") where this interpreter cannot import PyTorch."""
import argparse
import gzip
import json
import os
import struct
import sys

try:
    import torch
except ImportError:
    print("SKIP: needs torch (this interpreter cannot import it)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402
import torch_peer  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["lenet5", "resnet20"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    dev = torch_peer.configure(torch, args.device, args.threads)
    x, y = load(args.data)
    x, y = x.to(dev), y.to(dev)
    model = torch_models.build(args.model, 10, 1)
    batches = torch_peer.gathered_batches(torch, x, y, args.batch)
    rate = torch_peer.train_rate(torch, model, batches, args.batch, args.steps, args.warmup, args.device, lr=args.lr)
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "model": args.model, "batch": args.batch,
                      "threads": args.threads, "steps": args.steps, "warmup": args.warmup, "device": args.device,
                      "samples_per_s": rate}))


if __name__ == "__main__":
    main()
