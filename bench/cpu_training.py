#!/usr/bin/env python3
"""CPU training throughput: squall against PyTorch 2.x, side by side in one run.

Cases (--cases model:batch[:steps],...; default lenet5:64, resnet20:32, unet:8):
  lenet5    LeNet-5 on Fashion-MNIST, 600 steps a run
  resnet20  ResNet-20 on Fashion-MNIST, 60 steps a run
  unet      the climate U-Net (model.width 16, depth 4, 3 classes, configs/climate-tiny.toml)
            on 16 x 96 x 144 fields, 40 steps a run: squall trains on DeepCAM files made by
            `squall data climate` and labelled by `squall data label` (as `make demo-climate`
            does) in a temporary folder; PyTorch on one fixed random batch of the same shape
For each case --runs runs (default 3) alternate `squall train` and the PyTorch variants, each
in its own process (bench/torch_train.py: the same network from bench/torch_models.py, the
same batch and thread count, SGD with momentum 0.9, fp32):
  eager NCHW            PyTorch eager, contiguous NCHW tensors
  eager channels_last   the model and batches in NHWC (torch.channels_last)
  torch.compile         torch.compile of the model (CPU inductor, default mode); a variant
                        that fails (or runs past --peer-timeout, compilation included) is
                        recorded as "failed: <reason>" and not run again; inductor
                        caches what it compiled (in the system's temporary folder), so
                        only the first run's warm-up holds a full compilation
The table gives the medians; the ratio is squall against the best peer variant (the highest
median), run by run (median, min-max).

What is measured, on both sides, is the steady rate of a run of STEPS steps. squall: summary.json
steady_samples_per_s (docs/metrics.md, "Steady rate": the steps after the first max(10, 5% of
STEPS), each from the end of the step before to its own end, so it holds whatever the loop does
between two steps, the wait for the loader among them; the loader itself works in its own
thread, data.workers = 1, reading and normalising the next batch while the step computes; the
run evaluates only after its last step and writes no checkpoint). PyTorch: the same number of
steps timed after a warm-up of the same count (which holds torch.compile's compilation), each
step taking a batch already in memory: no data loading at all. squall's loader time and its
io_wait (in the JSON) are the difference between the two.

FLOPs: a training sample costs 3x the forward FLOPs of `squall model` (docs/model.md: the
zoo's conv, linear and pooling layers for these shapes, a multiply-add counting 2). The first
eager run also counts a training step with PyTorch's FlopCounterMode (convolutions and matrix
products only), printed beside it as a check. The machine's FMA peak (bench/cpu_peak.py: an
AVX-512 or AVX2 FMA loop on the bench's threads) gives each squall case's share of it.

PyTorch comes from build/bench-venv (bench/peer_venv.py: torch 2.15.0 from PyPI, made on
first use, about 4.5 GB; SKIP and exit 77 where it cannot be made); --no-venv uses this
interpreter's torch instead (Debian's python3-torch 1.13 has no torch.compile: that variant
then fails). Prints a markdown table for bench/RESULTS.md, or --json.

    python3 bench/cpu_training.py --squall build/bin/squall --runs 3
    python3 bench/cpu_training.py --cases unet:8:20 --runs 1 --variants eager
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402
import cpu_peak  # noqa: E402
import peer_venv  # noqa: E402
from torch_peer import steady_skip  # noqa: E402

DEFAULT_STEPS = {"lenet5": 600, "resnet20": 60, "unet": 40}
UNET = {"width": 16, "depth": 4, "channels": 16, "height": 96, "width_px": 144, "classes": 3}
# key, table heading, torch_train.py flags
VARIANTS = [("eager", "eager NCHW", []), ("channels_last", "eager channels_last", ["--channels-last"]),
            ("compile", "torch.compile", ["--compile"])]


class Case:
    def __init__(self, text):
        parts = text.split(":")
        if len(parts) not in (2, 3) or parts[0] not in DEFAULT_STEPS:
            sys.exit(f"--cases: '{text}' is not model:batch[:steps] with model one of {', '.join(DEFAULT_STEPS)}")
        self.model, self.batch = parts[0], int(parts[1])
        self.steps = int(parts[2]) if len(parts) == 3 else DEFAULT_STEPS[self.model]
        if self.steps <= steady_skip(self.steps):
            sys.exit(f"{text}: {self.steps} steps leave none after the {steady_skip(self.steps)} a steady rate "
                     "leaves out")


class Bench:
    def __init__(self, a, workdir):
        self.a, self.workdir = a, workdir
        self.fmnist = None
        self.climate = {}  # samples -> folder

    # --- data -------------------------------------------------------------------------------
    def data_for(self, case):
        if case.model == "unet":
            n = case.batch * case.steps  # one epoch holds every step: no loader restart
            if n not in self.climate:
                folder = os.path.join(self.workdir, f"climate-{n}")
                self.climate[n] = bc.climate_data(self.a.squall, folder, n, min(n, 64), UNET["height"],
                                                  UNET["width_px"])
            return self.climate[n]
        if self.fmnist is None:
            self.fmnist = bc.fashion_mnist(self.a.data, self.workdir)
        return self.fmnist

    # --- squall -----------------------------------------------------------------------------
    def config_and_sets(self, case, steps):
        data = self.data_for(case)
        sets = bc.rate_sets(steps) + [
            f"model.name={case.model}", f"train.batch_size={case.batch}", f"run.threads={self.a.threads}",
            "optimizer.name=sgd", "optimizer.lr=0.01", "optimizer.momentum=0.9", "optimizer.weight_decay=0",
            f"data.train={data}", f"data.test={data}"]
        if case.model == "unet":
            sets += [f"model.width={UNET['width']}", f"model.depth={UNET['depth']}", f"data.test_samples={case.batch}"]
            config = "climate-tiny.toml"
        else:
            sets += ["data.test_samples=256"]
            config = "fashion-mnist-lenet5.toml"
        return os.path.join(ROOT, "configs", config), sets + list(self.a.squall_set)

    def squall_run(self, case):
        config, sets = self.config_and_sets(case, case.steps)
        summary = bc.squall_train(self.a.squall, config, sets, self.workdir, case.steps)
        return bc.steady_rate(summary), summary.get("time_breakdown_s", {}).get("io_wait")

    def forward_gflop(self, case):
        cmd = [self.a.squall, "model", "--model", case.model, "--batch", str(case.batch), "--json"]
        if case.model == "unet":
            cmd += ["--width", str(UNET["width"]), "--depth", str(UNET["depth"]), "--classes", str(UNET["classes"]),
                    "--input", f"{UNET['channels']},{UNET['height']},{UNET['width_px']}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)["forward_gflop_per_sample"]

    def onednn(self, case):
        """oneDNN's ISA in squall: one step of the first case under ONEDNN_VERBOSE."""
        config, sets = self.config_and_sets(case, 1)
        cmd = [self.a.squall, "train", "--config", config, "--set", f"run.dir={tempfile.mkdtemp(dir=self.workdir)}"]
        for s in sets:
            cmd += ["--set", s]
        return cpu_peak.onednn_isa(cmd)

    # --- PyTorch ----------------------------------------------------------------------------
    def peer_run(self, case, flags, flops=False):
        skip = steady_skip(case.steps)
        cmd = [sys.executable, os.path.join(HERE, "torch_train.py"), "--model", case.model, "--batch", str(case.batch),
               "--steps", str(case.steps - skip), "--warmup", str(skip), "--threads", str(self.a.threads)] + flags
        if case.model == "unet":
            cmd += ["--in-channels", str(UNET["channels"]), "--height", str(UNET["height"]),
                    "--width", str(UNET["width_px"]), "--classes", str(UNET["classes"]),
                    "--unet-width", str(UNET["width"]), "--depth", str(UNET["depth"])]
        else:
            cmd += ["--data", self.data_for(case)]
        if flops:
            cmd.append("--flops")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=self.a.peer_timeout)
        except subprocess.TimeoutExpired:
            return {"samples_per_s": None, "failed": f"past --peer-timeout {self.a.peer_timeout:.0f} s"}
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or not lines:
            tail = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
            return {"samples_per_s": None, "failed": f"exit {r.returncode}: {tail}"[:300]}
        return json.loads(lines[-1])

    # --- a case -----------------------------------------------------------------------------
    def run_case(self, case):
        a = self.a
        variants = [v for v in VARIANTS if v[0] in a.variants]
        sq, io_wait = [], []
        peer = {key: [] for key, _, _ in variants}
        failed, warmups, lines = {}, {key: [] for key, _, _ in variants}, []
        for run in range(a.runs):  # alternating: every side sees the same machine
            rate, wait = self.squall_run(case)
            sq.append(rate)
            io_wait.append(wait)
            for key, _, flags in variants:
                if key in failed:
                    continue
                line = self.peer_run(case, flags, flops=run == 0 and key == variants[0][0])
                lines.append(line)
                if line.get("samples_per_s") is None:
                    failed[key] = line.get("failed", "no rate")
                    continue
                peer[key].append(line["samples_per_s"])
                warmups[key].append(line.get("warmup_s"))
        medians = {k: statistics.median(v) for k, v in peer.items() if k not in failed and v}
        best = max(medians, key=medians.get) if medians else None
        ratios = [s / p for s, p in zip(sq, peer[best])] if best else []
        gflop = self.forward_gflop(case)
        train_gflop = 3 * gflop if gflop is not None else None
        counted = next((l["train_flops_per_sample"] for l in lines if "train_flops_per_sample" in l), None)
        s = statistics.median(sq)
        r = {"model": case.model, "batch": case.batch, "steps": case.steps, "threads": a.threads, "runs": a.runs,
             "squall_samples_per_s": s, "squall_runs": sq, "squall_io_wait_s": io_wait,
             "peer_samples_per_s": {k: medians.get(k) for k, _, _ in variants}, "peer_runs": peer,
             "peer_warmup_s": warmups, "peer_failed": failed, "best_peer": best,
             "ratio_median": statistics.median(ratios) if ratios else None,
             "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
             "train_gflop_per_sample": train_gflop,
             "pytorch_flopcounter_gflop_per_sample": counted / 1e9 if counted else None,
             "squall_gflops": s * train_gflop if train_gflop else None}
        if lines:
            r["pytorch"] = {k: lines[0].get(k) for k in ("torch", "cpu_capability", "onednn")}
        if case.model == "unet":
            r["input"] = [UNET["channels"], UNET["height"], UNET["width_px"]]
        return r


def print_head(machine, variants):
    peak = machine["fma_peak"]
    bc.out(f"CPU: {machine['cpu']}; ISA present: {peak.get('isa') or 'no AVX2/AVX-512'}; "
           + (f"FMA peak {peak['gflops']:.0f} GFLOP/s fp32 on {peak['threads']} thread(s)" if "gflops" in peak
              else f"FMA peak not measured ({peak.get('error')})"))
    dnn = machine.get("squall_onednn") or {}
    bc.out(f"squall: oneDNN {dnn.get('version') or '?'}, ISA {dnn.get('isa') or '? (no ONEDNN_VERBOSE line)'}")
    pt = machine.get("pytorch") or {}
    bc.out(f"PyTorch {pt.get('torch') or '?'} (CPU capability {pt.get('cpu_capability') or '?'}, "
           f"oneDNN {pt.get('onednn') or '?'}) from {machine['python']}")
    bc.out("steady samples/s: squall's summary.json steady rate (the steps after the first max(10, 5%)), PyTorch "
           "the same steps after as many warm-up steps; medians of the runs\n")
    bc.print_table_head(["model", "batch", "threads", "runs", "squall samples/s"] + [h for _, h, _ in variants]
                        + ["squall / best peer (median, min-max)", "train GFLOP/sample", "squall GFLOP/s",
                           "squall % of FMA peak"])


def print_row(r, variants, peak):
    cells = [r["model"] + (" {}x{}x{}".format(*r["input"]) if "input" in r else ""), r["batch"], r["threads"],
             r["runs"], bc.fmt(r["squall_samples_per_s"])]
    for key, _, _ in variants:
        v = r["peer_samples_per_s"].get(key)
        cells.append("failed" if key in r["peer_failed"] else bc.fmt(v))
    best = dict((k, h) for k, h, _ in variants).get(r["best_peer"], "-")
    cells.append(f"{r['ratio_median']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) vs {best}"
                 if r["ratio_median"] is not None else "-")
    cells.append(f"{r['train_gflop_per_sample']:.4g}" if r["train_gflop_per_sample"] else "-")
    cells.append(bc.fmt(r["squall_gflops"], 1))
    share = r["squall_gflops"] / peak["gflops"] * 100 if r["squall_gflops"] and "gflops" in peak else None
    r["squall_share_of_fma_peak"] = share / 100 if share is not None else None
    cells.append(bc.fmt(share, 1) + ("%" if share is not None else ""))
    bc.print_row(cells)


def main():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="a Fashion-MNIST folder")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=cpus, help=f"threads of both sides (default: the cores, {cpus})")
    ap.add_argument("--cases", default="lenet5:64,resnet20:32,unet:8", help="model:batch[:steps],...")
    ap.add_argument("--variants", default=",".join(k for k, _, _ in VARIANTS),
                    help="PyTorch variants, of " + ", ".join(k for k, _, _ in VARIANTS))
    ap.add_argument("--peer-timeout", type=float, default=900,
                    help="seconds a PyTorch run may take, warm-up and compilation included (default 900)")
    ap.add_argument("--squall-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra --set for every squall run (e.g. model.layout=nhwc)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    peer_venv.add_arguments(ap)
    a = ap.parse_args()
    a.variants = a.variants.split(",")
    for v in a.variants:
        if v not in [k for k, _, _ in VARIANTS]:
            sys.exit(f"--variants: unknown variant '{v}'")
    cases = [Case(c) for c in a.cases.split(",")]
    if not os.access(a.squall, os.X_OK):
        sys.exit(f"--squall {a.squall}: not an executable (build it: cmake --build build --target squall)")
    if not a.no_venv:
        peer_venv.activate(a.venv)
    elif subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0:
        bc.skip(f"needs torch ({sys.executable} cannot import it; leave out --no-venv for the pinned one)")
    variants = [v for v in VARIANTS if v[0] in a.variants]
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        bench = Bench(a, workdir)
        machine = {"cpu": cpu_peak.cpu_model(), "fma_peak": cpu_peak.fma_peak(a.threads),
                   "squall_onednn": bench.onednn(cases[0]), "python": sys.executable}
        for i, case in enumerate(cases):
            try:
                r = bench.run_case(case)
            except bc.CaseFailed as e:
                sys.exit(f"{case.model}:{case.batch}:{case.steps}: {e}")
            results.append(r)
            if i == 0:
                machine["pytorch"] = r.get("pytorch")
                if not a.json:
                    print_head(machine, variants)
            if not a.json:
                print_row(r, variants, machine["fma_peak"])
            else:
                peak = machine["fma_peak"]
                r["squall_share_of_fma_peak"] = (r["squall_gflops"] / peak["gflops"]
                                                 if r["squall_gflops"] and "gflops" in peak else None)
    if a.json:
        print(json.dumps({"machine": machine, "results": results}, indent=2))
        return 0
    bc.out()
    for r in results:
        if r["pytorch_flopcounter_gflop_per_sample"] and r["train_gflop_per_sample"]:
            bc.out(f"{r['model']}: {r['train_gflop_per_sample']:.4g} GFLOP per training sample (3x squall model's "
                   f"forward); PyTorch's FlopCounterMode counts {r['pytorch_flopcounter_gflop_per_sample']:.4g}")
        for key, why in r["peer_failed"].items():
            bc.out(f"{r['model']}: PyTorch {key} failed: {why}")
        compiled = [w for w in r["peer_warmup_s"].get("compile", []) if w is not None]
        if compiled:
            bc.out(f"{r['model']}: torch.compile's warm-up (compilation included): "
                   f"{statistics.median(compiled):.0f} s (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
