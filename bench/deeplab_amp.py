#!/usr/bin/env python3
"""DeepLabv3+ at DeepCAM's size in reduced precision: squall against PyTorch AMP, side by side.

squall trains its deeplabv3plus (width 16, 4 encoder stages, ASPP rates 6/12/18; src/nn/models/
zoo.cpp) at train.precision = bf16 (or fp16) on synthetic DeepCAM-layout files of H x W x 16
(768 x 1152 by default) with 3 classes, written by `squall data climate` (docs/data.md; its
labels are all background, which costs the same to train on as real masks); PyTorch trains
the same network (bench/torch_models.py, layer for layer; the parameter counts are checked)
under torch.autocast with cudnn.benchmark, on a batch of the same shape already on the
device, with the same optimizer (SGD, momentum 0.9).

Cases per batch (--layout picks the layouts; the first case is the headline):
  squall nhwc          model.layout = nhwc                     against AMP channels_last
  squall nhwc+graphs   the same with parallel.cuda_graphs (GPU only)  against AMP channels_last
  squall nchw          model.layout = nchw                     against AMP NCHW

What is measured, on both sides, is the steady rate of --steps steps: squall trains exactly
--steps steps (train.max_steps decides; the files hold batch x steps samples, so one epoch
and no loader restart; one evaluation, after the last step; no checkpoint; the script checks
the step count in summary.json) and reports summary.json's steady_samples_per_s (the steps
after the first max(10, 5%), docs/metrics.md "Steady rate"); PyTorch trains the same number
of steps after a warm-up of the same count (bench/torch_peer.py). squall reads its samples
from files with --workers loader threads keeping --prefetch batches ready; its io_wait
(summary.json's time_breakdown_s) says whether the loader kept up. PyTorch loads nothing.

On the GPU one run per case by default (--runs 1: a lease is short); on the CPU --runs
alternating runs and medians. --budget SECONDS: a case that would end past it is not
started, and the ones left out are named; --deadline EPOCH_SECONDS the same for a wall-clock
time fixed before Python started (torch's import counts). --rehearse (with --device cpu): a check of the
script in seconds (with --size 96x144 --batch 1, as gpu-check gives it): 11 steps, NHWC only,
one thread a side, PyTorch timing 1 step after 1 (its ratios mean nothing).

Output (scripts/gpu-check reads it): a markdown table, a row as each case finishes, then as
the last two lines `figure: <headline: squall's samples/s>` and `ratio: <squall / PyTorch of
the headline>`. Needs PyTorch and the standard library only: without torch, or with --device
cuda and no GPU, `SKIP: <reason>` and exit 77.

    python3 bench/deeplab_amp.py --squall build/bin/squall --batch 2 --budget 120
    python3 bench/deeplab_amp.py --device cpu --rehearse --size 96x144 --batch 1
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402
import torch_peer  # noqa: E402

ROOT = bc.ROOT
CHANNELS, CLASSES = 16, 3


def squall_sets(a, data, batch, graphs, layout):
    return bc.rate_sets(a.steps) + [
        f"run.backend={a.device}", "model.name=deeplabv3plus", f"train.precision={a.precision}",
        f"train.batch_size={batch}", f"data.train={data}", f"data.test={data}", f"data.test_samples={batch}",
        f"data.workers={a.workers}", f"data.prefetch={a.prefetch}", "optimizer.name=sgd", "optimizer.lr=0.01",
        "optimizer.momentum=0.9", "optimizer.weight_decay=0", f"parallel.cuda_graphs={'true' if graphs else 'false'}",
        f"model.layout={layout}"] + ([f"run.threads={a.threads}"] if a.device == "cpu" else [])


def main():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--size", default="768x1152")
    ap.add_argument("--batch", default="2", help="batches, comma-separated (the first is the headline's)")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--layout", default="", help="squall's layouts, comma-separated: nhwc, nchw (default: both; "
                                                 "nhwc rehearsing)")
    ap.add_argument("--steps", type=int, default=0, help="steps a run (default 40; 11 rehearsing)")
    ap.add_argument("--runs", type=int, default=0, help="runs a case (default: 1 on cuda or rehearsing, 3 on cpu)")
    ap.add_argument("--budget", type=float, default=0, help="seconds this call may use (0: no limit)")
    bc.add_deadline_argument(ap)
    ap.add_argument("--rehearse", action="store_true", help="tiny sizes, to check the script (with --device cpu)")
    ap.add_argument("--workers", type=int, default=min(8, cpus),
                    help="squall's loader threads, data.workers (default: the cores, at most 8; here %(default)s)")
    ap.add_argument("--prefetch", type=int, default=4, help="batches squall keeps ready, data.prefetch")
    ap.add_argument("--distinct", type=int, default=4, help="distinct generated samples, repeated by links")
    ap.add_argument("--json", action="store_true", help="also print the medians as one JSON line (before the last two)")
    a = ap.parse_args()
    if a.rehearse and a.device != "cpu":
        sys.exit("--rehearse runs on the CPU: give --device cpu")
    a.steps = a.steps or (11 if a.rehearse else 40)
    a.runs = a.runs or (1 if a.device == "cuda" or a.rehearse else 3)
    layouts = (a.layout or ("nhwc" if a.rehearse else "nhwc,nchw")).split(",")
    a.threads = cpus
    if a.rehearse:  # one thread a side: a busy machine's cores make OpenMP teams wait on each other
        a.threads, a.workers = 1, 1
    if not layouts or any(x not in ("nhwc", "nchw") for x in layouts):
        sys.exit(f"--layout {a.layout}: nhwc, nchw or both")
    if a.workers < 1 or a.prefetch < 1:
        sys.exit("--workers and --prefetch must be at least 1")
    skip = torch_peer.steady_skip(a.steps)
    if a.steps <= skip:
        sys.exit(f"--steps {a.steps}: a steady rate leaves out the first {skip}: give at least {skip + 1}")
    # Rehearsing, PyTorch times 1 step after 1: its figures mean nothing, and its CPU bf16 is slow.
    peer_warmup, peer_steps = (1, 1) if a.rehearse else (skip, a.steps - skip)
    torch = bc.import_torch()
    if a.device == "cuda" and not torch.cuda.is_available():
        bc.skip("PyTorch sees no GPU")
    import torch_models
    torch_peer.configure(torch, a.device, a.threads if a.device == "cpu" else None)
    h, w = (int(v) for v in a.size.split("x"))
    batches = [int(b) for b in a.batch.split(",")]
    budget = bc.Budget(a.budget, a.deadline)
    device_name = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    cases = [(f"squall {layout}" + ("+graphs" if graphs else ""), layout, graphs)
             for layout in layouts for graphs in ((False, True) if layout == "nhwc" and a.device == "cuda" else (False,))]
    spent = {"squall": [], "torch": []}
    estimate = lambda k, n: 1.2 * n * (max(spent[k]) if spent[k] else 0.0)  # noqa: E731
    params, report, left_out, failed = {}, [], [], []
    headline = None
    with tempfile.TemporaryDirectory() as workdir:
        data = bc.climate_data(a.squall, os.path.join(workdir, "deepcam"), max(batches) * a.steps,
                               min(max(batches) * a.steps, a.distinct), h, w, seed=7, label=False)
        bc.out(f"deeplabv3plus {h}x{w}x{CHANNELS}, {a.precision}, {device_name}, {a.steps} steps a run (steady rate "
               f"over the last {a.steps - skip}), {a.runs} run(s) a case, squall's loader: {a.workers} workers, "
               f"prefetch {a.prefetch}" + (" (rehearsal: the figures mean nothing)" if a.rehearse else ""))
        bc.print_table_head(["batch", "case", "squall samples/s", "PyTorch samples/s", "PyTorch", "squall / PyTorch",
                             "squall io_wait s"])
        for b in batches:
            peer = {}  # channels_last -> [samples/s]
            for label, layout, graphs in cases:
                cl = layout == "nhwc"
                if not budget.fits(estimate("squall", a.runs) + (estimate("torch", a.runs) if cl not in peer else 0)):
                    left_out.append(f"batch {b} {label}")
                    continue
                sq, io, pt = [], [], peer.get(cl, [])
                try:
                    for _ in range(a.runs):  # alternating: both sides see the same machine
                        t0 = time.monotonic()
                        s = bc.squall_train(a.squall, os.path.join(ROOT, "configs", "climate-tiny.toml"),
                                            squall_sets(a, data, b, graphs, layout), workdir, a.steps,
                                            timeout=budget.timeout(),
                                            name=f"deeplab-b{b}-{a.precision}-{label.removeprefix('squall ')}")
                        spent["squall"].append(time.monotonic() - t0)
                        params["squall"] = s["parameters"]
                        sq.append(bc.steady_rate(s))
                        io.append(s["time_breakdown_s"]["io_wait"])
                        if cl not in peer:
                            t0 = time.monotonic()
                            net = torch_models.deeplabv3plus(CLASSES, CHANNELS)
                            params["pytorch"] = torch_models.parameter_count(net)
                            feed = torch_peer.fixed_batch(torch, (b, CHANNELS, h, w), CLASSES, a.device, True, cl)
                            pt.append(torch_peer.train_rate(torch, net, feed, b, peer_steps, peer_warmup, a.device,
                                                            a.precision, cl, deadline=budget.deadline()))
                            del net, feed
                            if a.device == "cuda":
                                torch.cuda.empty_cache()
                            spent["torch"].append(time.monotonic() - t0)
                except (bc.OutOfBudget, torch_peer.PastDeadline) as e:
                    left_out.append(f"batch {b} {label} ({e})")
                    bc.print_row([b, label, "cut", "-", "-", "-", "-"])
                    continue
                except bc.CaseFailed as e:
                    failed.append(f"batch {b} {label}: {e}")
                    bc.print_row([b, label, "FAILED", "-", "-", "-", "-"])
                    continue
                except bc.NoGpu as e:
                    bc.skip(f"squall: {e}")
                peer[cl] = pt
                s_rate, p_rate = statistics.median(sq), statistics.median(pt)
                peer_name = f"AMP {a.precision} " + ("channels_last" if cl else "NCHW")
                bc.print_row([b, label, bc.fmt(s_rate, 2), bc.fmt(p_rate, 2), peer_name, bc.fmt(s_rate / p_rate, 2),
                              bc.fmt(statistics.median(io), 2)])
                report.append({"batch": b, "case": label, "squall": s_rate, "pytorch": p_rate, "peer": peer_name,
                               "ratio": s_rate / p_rate})
                if headline is None:
                    headline = (b, label, s_rate, s_rate / p_rate)
    if a.device == "cuda" and a.runs == 1:
        bc.out("\none run per case (a GPU lease is short): no spread is known")
    if left_out:
        bc.out(f"\nleft out, past the budget of {budget.seconds:.0f} s: {', '.join(left_out)}")
    for f in failed:
        bc.out(f"\nFAILED {f}")
    if params and params.get("squall") != params.get("pytorch"):
        failed.append("networks")
        bc.out(f"\nFAILED: the two networks differ: {params.get('squall')} parameters in squall's, "
               f"{params.get('pytorch')} in PyTorch's")
    elif params:
        bc.out(f"\nboth networks have {params['squall']} parameters")
    if a.json:
        bc.out(json.dumps({"size": [h, w], "precision": a.precision, "device": a.device, "steps": a.steps,
                           "workers": a.workers, "prefetch": a.prefetch, "cases": report}))
    if headline is None:
        bc.contract_end(f"deeplabv3plus {h}x{w}: no case ran", None)
    else:
        b, label, rate, ratio = headline
        bc.contract_end(f"deeplabv3plus {h}x{w} b{b} {a.precision} {label.removeprefix('squall ')}: {rate:.2f} samples/s",
                        ratio)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
