#!/usr/bin/env python3
"""PyTorch peer for bench/cpu_training.py (and the Fashion-MNIST data of bench/gpu_training.py):
trains the same network as squall (bench/torch_models.py) with the same batch and thread count
and prints one JSON line with its throughput: --steps steps timed after --warmup untimed ones
(bench/torch_peer.py; give the count squall's steady rate leaves out, max(10, 5% of its
steps), so that both measure the same steps).

Data: lenet5 and resnet20 train on Fashion-MNIST's samples (same normalisation as squall's),
read from Debian's IDX files with the standard library and PyTorch alone; unet trains on one
fixed random batch of --in-channels x --height x --width with a label per pixel (a step's
cost does not depend on the values), already in memory.

Variants: eager NCHW (the default), --channels-last (model and batches in NHWC), --compile
(torch.compile, CPU inductor; the compilation falls in the warm-up, whose seconds the line
reports as warmup_s). A variant that fails prints {"failed": "<reason>"} and exits 0, so that
the bench records it and goes on. --flops counts one training step's FLOPs per sample with
torch.utils.flop_counter.FlopCounterMode (eager, before the timed steps).
--device cuda trains on the GPU in eager mode, fp32 without TF32 (squall's precision).
Exits 77 ("SKIP: needs torch") where this interpreter cannot import PyTorch."""
import argparse
import gzip
import json
import os
import re
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


def training_flops_per_sample(model, batches, batch):
    """FlopCounterMode's count of one forward and backward, per sample (convolutions and matrix
    products, a multiply-add counting 2; batch norm and element-wise passes count nothing); None
    for a PyTorch without it (before 2.1)."""
    import logging
    logging.getLogger("torch.utils.flop_counter").setLevel(logging.ERROR)  # "triton not found": CPU only here
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    x, y = batches(0)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def library_info():
    """PyTorch's version, the CPU capability its kernels dispatch to, and its oneDNN version."""
    info = {"torch": torch.__version__}
    try:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # PyTorch before 2.0
        info["cpu_capability"] = None
    m = re.search(r"(?:oneDNN|MKL-DNN) v?([0-9][0-9.]*)", torch.__config__.show())
    info["onednn"] = m.group(1) if m else None
    return info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["lenet5", "resnet20", "unet"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST (lenet5, resnet20)")
    ap.add_argument("--in-channels", type=int, default=16, help="unet's input channels")
    ap.add_argument("--height", type=int, default=96, help="unet's input height")
    ap.add_argument("--width", type=int, default=144, help="unet's input width")
    ap.add_argument("--classes", type=int, default=3, help="unet's classes")
    ap.add_argument("--unet-width", type=int, default=16, help="unet's base channels (model.width)")
    ap.add_argument("--depth", type=int, default=4, help="unet's levels (model.depth)")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile (inductor)")
    ap.add_argument("--flops", action="store_true", help="count a training step's FLOPs per sample first")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    dev = torch_peer.configure(torch, args.device, args.threads)
    line = {"peer": "pytorch", **library_info(), "model": args.model, "batch": args.batch, "threads": args.threads,
            "steps": args.steps, "warmup": args.warmup, "device": args.device, "channels_last": args.channels_last,
            "compile": args.compile}
    if args.model == "unet":
        model = torch_models.unet(args.classes, args.in_channels, args.unet_width, args.depth)
        shape = (args.batch, args.in_channels, args.height, args.width)
        batches = torch_peer.fixed_batch(torch, shape, args.classes, dev, True, args.channels_last)
        line["input"] = list(shape[1:])
    else:
        x, y = load(args.data)
        x, y = x.to(dev), y.to(dev)
        model = torch_models.build(args.model, 10, 1)
        batches = torch_peer.gathered_batches(torch, x, y, args.batch, args.channels_last)
    if args.flops:
        line["train_flops_per_sample"] = training_flops_per_sample(model.to(dev), batches, args.batch)
    report = {}
    try:
        rate = torch_peer.train_rate(torch, model, batches, args.batch, args.steps, args.warmup, args.device,
                                     channels_last=args.channels_last, lr=args.lr, compile=args.compile,
                                     report=report)
    except Exception as e:  # noqa: BLE001 - a variant that cannot run is a result to record
        if not args.compile:
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        print(json.dumps({**line, "samples_per_s": None, "failed": f"{type(e).__name__}: {first}"[:300]}))
        return
    print(json.dumps({**line, "samples_per_s": rate, "warmup_s": report.get("warmup_s")}))


if __name__ == "__main__":
    main()
