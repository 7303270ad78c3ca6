#!/usr/bin/env python3
"""DeepLabv3+ at DeepCAM's size in reduced precision: squall against PyTorch AMP, side by side.

squall trains its deeplabv3plus (width 16, 4 encoder stages, ASPP rates 6/12/18; src/nn/models/
zoo.cpp) at train.precision = bf16 (or fp16) on synthetic DeepCAM-layout files of H x W x 16
(768 x 1152 by default) with 3 classes, written by `squall data climate` (docs/data.md; its
labels are all background, which costs the same to train on as real masks); PyTorch trains
the same network (the module below mirrors squall's graph: conv without bias -> BatchNorm ->
ReLU blocks, the same strides, dilations and projections) under torch.autocast with
channels_last memory format and cudnn.benchmark, batch and optimizer (SGD, momentum 0.9) the
same. Each side runs --steps steps after --warmup, alternating --runs times. squall runs
channels last (model.layout = nhwc) with and without parallel.cuda_graphs, and NCHW, to show
what the layout is worth.

It measures the backend, not the loader: squall reads its samples from files with
--workers loader threads (data.workers; default: the cores, at most 8) keeping --prefetch
batches ready (data.prefetch), and for each side the script prints, beside the samples/s of
the whole run, the compute time: squall's summary.json time_breakdown_s.compute (its
io_wait too: time the learners waited for the loader) and PyTorch's timed loop, which
trains on a batch already on the device (no data loading at all). The ratios squall /
PyTorch are given for both (issue 10's bar: >= 1.0 at batch 1-2, bf16, on a GPU).

Needs PyTorch and the standard library only (no numpy, no h5py): a missing module is a
skip ("SKIP: needs torch", exit 77). On a machine without a GPU it runs both on the CPU at a
small size to check that the script works (--device cpu --size 96x144); the ratios then mean
nothing and are labelled so. Exit 77 when --device cuda is asked for and no GPU can be used.

    python3 bench/deeplab_amp.py --squall build/bin/squall --batch 1,2 --runs 3
    python3 bench/deeplab_amp.py --device cpu --size 96x144 --batch 1 --steps 2 --warmup 1 --runs 1
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHANNELS, CLASSES = 16, 3
PARAMS = {}  # parameter counts of both networks: they must agree


def write_deepcam(a, folder, h, w, samples):
    """DeepCAM-layout files (data-*.h5 and stats.h5) from squall's own generator."""
    cmd = [a.squall, "data", "climate", "--out", folder, "--samples", str(samples), "--height", str(h),
           "--width", str(w), "--seed", "7"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"squall data climate failed ({r.returncode}): {' '.join(cmd)}\n{(r.stdout + r.stderr)[-3000:]}")


def squall_run(a, data, batch, steps, precision, graphs, layout, workdir):
    run_dir = tempfile.mkdtemp(dir=workdir)
    sets = [f"run.backend={a.device}", "model.name=deeplabv3plus", f"train.precision={precision}",
            f"train.batch_size={batch}", f"train.max_steps={steps}", f"train.log_every_steps={steps}",
            f"data.train={data}", f"data.test={data}", "data.test_samples=2", "schedule.warmup_steps=0",
            f"data.workers={a.workers}", f"data.prefetch={a.prefetch}",
            "optimizer.lr=0.01", "optimizer.weight_decay=0", f"parallel.cuda_graphs={'true' if graphs else 'false'}",
            f"model.layout={layout}",
            f"run.dir={run_dir}"]
    cmd = [a.squall, "train", "--config", os.path.join(ROOT, "configs", "fashion-mnist-lenet5.toml")]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 1 and "no GPU can be used" in r.stderr:
        print("SKIP: squall: " + r.stderr.strip().splitlines()[-1])
        sys.exit(77)
    if r.returncode != 0:
        sys.exit(f"squall failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    PARAMS["squall"] = s["parameters"]
    t = s.get("time_breakdown_s", {})
    done = s.get("steps", steps)
    compute = t.get("compute", 0.0)
    return {"rate": s["samples_per_s"], "compute_ms": 1000 * compute / max(done, 1),
            "compute_rate": batch * done / compute if compute > 0 else float("nan"),
            "io_wait_s": t.get("io_wait", 0.0)}


def torch_model(torch, width=16, stages=4, rates=(6, 12, 18)):
    nn = torch.nn
    F = torch.nn.functional

    def conv_bn(cin, cout, k, stride=1, dilation=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, dilation * (k - 1) // 2, dilation, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*(layers + [nn.ReLU()] if relu else layers))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, dilation):
            super().__init__()
            self.a = conv_bn(cin, cout, 3, stride, dilation)
            self.b = conv_bn(cout, cout, 3, 1, dilation, relu=False)
            self.proj = conv_bn(cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else None

        def forward(self, x):
            return F.relu(self.b(self.a(x)) + (self.proj(x) if self.proj is not None else x))

    class DeepLab(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(CHANNELS, width, 3, 2)
            enc, ch, dil = [], width, 1
            for s in range(stages):
                out = width << min(s + 1, 4)
                stride = 2 if s < 2 else 1
                if s >= 2:
                    dil *= 2
                enc.append(nn.Sequential(Block(ch, out, stride, dil), Block(out, out, 1, dil)))
                ch = out
            self.enc = nn.ModuleList(enc)
            a = width * 4
            self.aspp = nn.ModuleList([conv_bn(ch, a, 1)] + [conv_bn(ch, a, 3, 1, r) for r in rates])
            self.pool_fc = nn.Linear(ch, a)
            self.project = conv_bn(a * (len(rates) + 2), a, 1)
            self.low = conv_bn(width << 1, max(width, 8), 1)
            self.dec_a = conv_bn(a + max(width, 8), a, 3)
            self.dec_b = conv_bn(a, a, 3)
            self.classifier = nn.Conv2d(a, CLASSES, 1)

        def forward(self, x):
            h, w = x.shape[-2:]
            x = self.stem(x)
            low = None
            for s, e in enumerate(self.enc):
                x = e(x)
                if s == 0:
                    low = x
            fh, fw = x.shape[-2:]
            pooled = F.relu(self.pool_fc(x.mean((2, 3))))[:, :, None, None]
            branches = [b(x) for b in self.aspp] + [F.interpolate(pooled, (fh, fw), mode="bilinear", align_corners=False)]
            x = self.project(torch.cat(branches, 1))
            x = F.interpolate(x, (h // 4, w // 4), mode="bilinear", align_corners=False)
            x = self.dec_b(self.dec_a(torch.cat([x, self.low(low)], 1)))
            return F.interpolate(self.classifier(x), (h, w), mode="bilinear", align_corners=False)

    return DeepLab()


def torch_run(torch, a, h, w, batch, steps, precision):
    dev = torch.device(a.device)
    model = torch_model(torch).to(dev).to(memory_format=torch.channels_last)
    PARAMS["pytorch"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    if hasattr(torch.amp, "GradScaler"):
        scaler = torch.amp.GradScaler(a.device, enabled=precision == "fp16")
    else:  # older PyTorch (Debian's): the CUDA one; disabled it passes everything through
        scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16" and a.device == "cuda")
    x = torch.randn(batch, CHANNELS, h, w, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (batch, h, w), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(a.warmup):
        step()
    if a.device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if a.device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    # The batch is on the device already: the timed loop is all compute.
    return {"rate": batch * steps / dt, "compute_ms": 1000 * dt / steps, "compute_rate": batch * steps / dt,
            "io_wait_s": 0.0}


def main():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--size", default="768x1152")
    ap.add_argument("--batch", default="1,2")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=min(8, cpus),
                    help="squall's loader threads, data.workers (default: the cores, at most 8; here %(default)s)")
    ap.add_argument("--prefetch", type=int, default=4, help="batches squall keeps ready, data.prefetch")
    ap.add_argument("--json", action="store_true", help="also print the medians as one JSON line")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print(f"SKIP: needs torch ({sys.executable} cannot import it)")
        sys.exit(77)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: PyTorch sees no GPU")
        sys.exit(77)
    if a.workers < 1 or a.prefetch < 1:
        sys.exit("--workers and --prefetch must be at least 1")
    torch.backends.cudnn.benchmark = True
    h, w = (int(v) for v in a.size.split("x"))
    report = []
    with tempfile.TemporaryDirectory() as workdir:
        data = os.path.join(workdir, "deepcam")
        batches = [int(b) for b in a.batch.split(",")]
        write_deepcam(a, data, h, w, max(batches) * 2)
        print(f"deeplabv3plus {h}x{w}x{CHANNELS}, {a.precision}, {a.device}, {a.steps} steps, {a.runs} runs, "
              f"squall's loader: {a.workers} workers, prefetch {a.prefetch}"
              + ("" if a.device == "cuda" else " (CPU: a check of the script, not a measurement)"))
        print("\nsamples/s: the whole run (squall: its summary.json, warm-up and loading included); compute: "
              "squall's time_breakdown_s.compute, PyTorch's timed loop (its batch is on the device already)\n")
        print("| batch | run | samples/s | compute ms/step | samples/s of compute | io_wait s |")
        print("|---|---|---|---|---|---|")
        for b in batches:
            runs = {"squall nhwc": [], "squall nhwc+graphs": [], "squall nchw": [], "pytorch amp": []}
            for _ in range(a.runs):
                # squall's own warm-up: its summary rate covers the whole run, so it runs
                # warmup + steps and the first steps' cost (algorithm search) is in it.
                n = a.warmup + a.steps
                runs["squall nhwc"].append(squall_run(a, data, b, n, a.precision, False, "nhwc", workdir))
                runs["squall nchw"].append(squall_run(a, data, b, n, a.precision, False, "nchw", workdir))
                if a.device == "cuda":
                    runs["squall nhwc+graphs"].append(squall_run(a, data, b, n, a.precision, True, "nhwc", workdir))
                runs["pytorch amp"].append(torch_run(torch, a, h, w, b, a.steps, a.precision))
            med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items() if v}
            for k, m in med.items():
                print(f"| {b} | {k} | {m['rate']:.2f} | {m['compute_ms']:.1f} | {m['compute_rate']:.2f} | "
                      f"{m['io_wait_s']:.2f} |")
            best = max(m["rate"] for k, m in med.items() if k.startswith("squall"))
            best_c = max(m["compute_rate"] for k, m in med.items() if k.startswith("squall"))
            pt = med["pytorch amp"]
            ratios = {"batch": b, "squall_over_pytorch": best / pt["rate"],
                      "squall_over_pytorch_compute": best_c / pt["compute_rate"], "medians": med}
            report.append(ratios)
        print()
        for r in report:
            print(f"batch {r['batch']}: squall / pytorch = {r['squall_over_pytorch']:.2f} (whole run), "
                  f"{r['squall_over_pytorch_compute']:.2f} (compute)"
                  + ("" if a.device == "cuda" else " (CPU: means nothing)"))
        if PARAMS.get("squall") != PARAMS.get("pytorch"):
            sys.exit(f"the two networks differ: {PARAMS['squall']} parameters in squall's, {PARAMS['pytorch']} in PyTorch's")
        print(f"both networks have {PARAMS['squall']} parameters")
        if a.json:
            print(json.dumps({"size": [h, w], "precision": a.precision, "device": a.device, "workers": a.workers,
                              "prefetch": a.prefetch, "batches": report}))


if __name__ == "__main__":
    main()
