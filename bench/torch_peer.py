"""PyTorch's side of squall's benches: one training loop, timed the way squall's
summary.json times its steady rate (docs/metrics.md, "Steady rate").

train_rate() trains a model of bench/torch_models.py with SGD (momentum 0.9) in eager mode
for `warmup` steps, untimed (squall leaves out the same count, max(10, 5% of its steps):
steady_skip()), then times `steps` more, synchronising the device before and after, and
returns samples/s. No evaluation, no data loading in the timed loop: each step takes a batch
already on the device (a fresh index gather from a tensor of samples, or one fixed batch).
Precision: "fp32" (TF32 off, squall's fp32 uses none), "bf16" or "fp16" under torch.autocast
(fp16 with a GradScaler); channels_last puts the model and the batches in NHWC; compile
wraps the model in torch.compile (the first warm-up step compiles it: the warm-up's time, in
`report`, holds the compilation).
"""
import contextlib
import time


def steady_skip(steps):
    """The steps squall's steady rate leaves out of a run of `steps` (io/records/steady_rate.hpp)."""
    return max(10, steps // 20)


def configure(torch, device, threads=None):
    """Settings every PyTorch case shares: no TF32 anywhere, cuDNN picks algorithms by
    measurement (as squall does), `threads` CPU threads."""
    if threads:
        torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    return torch.device(device)


def synchronize(torch, device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class PastDeadline(Exception):
    pass


def train_rate(torch, model, batches, batch, steps, warmup, device, precision="fp32", channels_last=False, lr=0.01,
               deadline=None, compile=False, report=None):
    """samples/s of `steps` training steps after `warmup` untimed ones. `batches(i)` gives step
    i's (inputs, labels) on the device, inputs in the memory format asked for. Raises
    PastDeadline when time.monotonic() passes `deadline` (a bench's budget) between steps.
    `report` (a dict) receives warmup_s, the warm-up's seconds."""
    dev = torch.device(device)
    model = model.to(dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if compile:
        model = torch.compile(model)
    reduced = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"precision {precision}: fp32, bf16 or fp16")
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
    else:  # older PyTorch (Debian's 1.13): the CUDA one, which passes everything through when disabled
        scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16" and dev.type == "cuda")

    def step(i):
        x, y = batches(i)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=reduced) if reduced is not None else contextlib.nullcontext():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if deadline is not None and time.monotonic() > deadline:
            raise PastDeadline(f"PyTorch cut at the budget's end, at step {i + 1} of {warmup + steps}")

    t0 = time.perf_counter()
    for i in range(warmup):
        step(i)
    synchronize(torch, device)
    if report is not None:
        report["warmup_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(steps):
        step(warmup + i)
    synchronize(torch, device)
    return steps * batch / (time.perf_counter() - t0)


def gathered_batches(torch, x, y, batch, channels_last=False):
    """Step i's batch: `batch` samples of (x, y) from a fixed random order, gathered on x's device."""
    n = x.shape[0]
    if n < batch:
        raise ValueError(f"{n} samples for a batch of {batch}")
    perm = torch.randperm(n, device=x.device)
    span = max(1, n - batch)

    def batches(i):
        idx = perm[(i * batch) % span:][:batch]
        xb = x[idx]
        return (xb.contiguous(memory_format=torch.channels_last) if channels_last else xb), y[idx]

    return batches


def fixed_batch(torch, shape, classes, device, per_pixel, channels_last=False):
    """One random batch of `shape` [n, c, h, w] and its labels (per pixel, or per sample), on the device."""
    n, _, h, w = shape
    x = torch.randn(*shape, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (n, h, w) if per_pixel else (n,), device=device)
    return lambda i: (x, y)
