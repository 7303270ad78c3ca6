#!/usr/bin/env python3
"""GPU training throughput, one group of cases per call: squall's CUDA backend against PyTorch
eager on the same GPU, and Crossbow's reason to exist, several learners on one GPU.

Groups (--group; gpu-check's lease plan calls one per step, each with its own --budget):
  lenet5    LeNet-5 at batch 64 on Fashion-MNIST, 300 steps a case
  resnet20  ResNet-20 at batch 32 on Fashion-MNIST, 150 steps a case
  unet      the climate U-Net (width 16, depth 4, 3 classes) at batch 8 on 96 x 144 x 16
            fields made by `squall data climate` and labelled by `squall data label` (as
            `make demo-climate` does) in a temporary folder, 150 steps a case
  learners  ResNet-20 at batch 32 per learner with 1, 2 and 4 learners on the one GPU
            (parallel.replicas_per_device, ssgd, fp32): samples/s and the ratio to 1 learner
The model groups run these cases, in this order (the first is the headline):
  bf16 nhwc          train.precision = bf16, model.layout = nhwc   against AMP bf16, channels_last
  f32 nchw           fp32, NCHW                                    against fp32 eager, TF32 off
  bf16 nhwc graphs   bf16, NHWC, parallel.cuda_graphs = true       against AMP bf16, channels_last
  bf16 nchw          bf16, NCHW                                    against AMP bf16, NCHW
  f32 nchw graphs    fp32, NCHW, parallel.cuda_graphs = true       against fp32 eager
What is measured, on both sides, is the steady rate: squall's summary.json
steady_samples_per_s (docs/metrics.md, "Steady rate": the steps after the first max(10, 5%)
of the run, with no evaluation or checkpoint in their time; the run evaluates only after its
last step), and PyTorch's timed loop of the same number of steps after a warm-up of the same
count (bench/torch_peer.py: SGD with momentum, cudnn.benchmark, the batch already on the
device). Both train the same network (bench/torch_models.py, layer for layer) on batches of
the same shape. Each squall case is its own `squall train`; all PyTorch cases of a group run
in this one process (importing torch and warming cuDNN once), one measurement per PyTorch
setting shared by the squall cases it is compared with.

On the GPU one run per case (--runs 1, the default there: a lease is short); on the CPU
(--device cpu) --runs runs per case (default 3), alternating squall and PyTorch, and medians.
--budget SECONDS: a case that would end past it is not started; the ones left out are named.
--deadline EPOCH_SECONDS: the same for a wall-clock time fixed before Python started (gpu-check
passes both: importing torch on a cold machine takes tens of seconds, counted against it).
--rehearse (with --device cpu): the same groups at tiny sizes so that CI runs the script end
to end in seconds: 11 steps (the fewest with a steady rate), LeNet-5 b16, ResNet-20 b2, U-Net
at 32 x 48 b1, the first two cases only, one thread a side, PyTorch timing 1 step after 1;
its figures mean nothing.

Output (scripts/gpu-check reads it): a markdown table, a row as each case finishes, then the
cases left out, and as the last two lines `figure: <headline case: squall's samples/s>` and
`ratio: <squall / PyTorch of the headline>` (`ratio: -` for learners). Exit 77 with
`SKIP: <reason>` where torch is missing or, with --device cuda, no GPU can be used. Needs
PyTorch and the standard library only.

    python3 bench/gpu_training.py --squall build/bin/squall --group resnet20 --budget 100
    python3 bench/gpu_training.py --device cpu --rehearse --group unet
"""
import argparse
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
GROUPS = ("lenet5", "resnet20", "unet", "learners")
# label, squall precision, layout, CUDA graphs, PyTorch precision, channels_last
CASES = [("bf16 nhwc", "bf16", "nhwc", False, "bf16", True),
         ("f32 nchw", "fp32", "nchw", False, "fp32", False),
         ("bf16 nhwc graphs", "bf16", "nhwc", True, "bf16", True),
         ("bf16 nchw", "bf16", "nchw", False, "bf16", False),
         ("f32 nchw graphs", "fp32", "nchw", True, "fp32", False)]
PEER_NAMES = {("fp32", False): "fp32 eager, no TF32", ("bf16", True): "AMP bf16 channels_last",
              ("bf16", False): "AMP bf16 NCHW", ("fp32", True): "fp32 channels_last"}


class Model:
    """What a group trains: the model, its batch and steps, its data."""

    def __init__(self, name, batch, steps, config, size=None, depth=None):
        self.name, self.batch, self.steps, self.config = name, batch, steps, config
        self.size, self.depth = size, depth  # the U-Net's H x W and depth

    def label(self):
        shape = f" {self.size[0]}x{self.size[1]}x16 depth {self.depth}" if self.size else ""
        return f"{self.name}{shape} b{self.batch}"


REHEARSAL_STEPS = 11  # the fewest with a steady rate: 10 left out, 1 measured


def model_of(group, rehearse):
    steps = lambda n: REHEARSAL_STEPS if rehearse else n  # noqa: E731
    if group == "lenet5":
        return Model("lenet5", 16 if rehearse else 64, steps(300), "fashion-mnist-lenet5.toml")
    if group in ("resnet20", "learners"):
        return Model("resnet20", 2 if rehearse else 32, steps(150), "fashion-mnist-resnet20.toml")
    return Model("unet", 1 if rehearse else 8, steps(150), "climate-tiny.toml", (32, 48) if rehearse else (96, 144), 4)


class Bench:
    def __init__(self, a, workdir, torch):
        self.a, self.workdir, self.torch = a, workdir, torch
        self.model = model_of(a.group, a.rehearse)
        self.budget = bc.Budget(a.budget, a.deadline)
        self.peer_rates = {}  # (precision, channels_last) -> [samples/s per run]
        self.spent = {"squall": [], "torch": []}  # seconds of each run, for the budget's estimates
        self.data = None
        self.tensors = None  # Fashion-MNIST on the device, for PyTorch

    # --- squall -----------------------------------------------------------------------------
    def squall_sets(self, precision, layout, graphs, learners):
        m, a = self.model, self.a
        sets = bc.rate_sets(m.steps) + [
                f"run.backend={a.device}", f"model.name={m.name}", f"train.batch_size={m.batch}", "optimizer.name=sgd",
                "optimizer.lr=0.01", "optimizer.momentum=0.9", "optimizer.weight_decay=0",
                f"train.precision={precision}", f"model.layout={layout}",
                f"parallel.cuda_graphs={'true' if graphs else 'false'}",
                f"parallel.replicas_per_device={learners}", f"parallel.max_replicas_per_device={learners}",
                f"data.train={self.data}", f"data.test={self.data}"]
        if m.name == "unet":
            sets += ["model.width=16", f"model.depth={m.depth}", f"data.test_samples={m.batch}"]
        else:
            sets += [f"data.test_samples={m.batch if a.rehearse else 256}"]
            if a.rehearse:
                sets.append("data.train_samples=1024")
        if a.device == "cuda":
            sets.append(f"data.workers={min(4, os.cpu_count() or 1)}")
        else:
            sets.append(f"run.threads={a.threads}")
        return sets

    def squall_rate(self, precision, layout, graphs, learners=1):
        t0 = time.monotonic()
        name = f"{self.model.name}-{precision}-{layout}" + ("-graphs" if graphs else "") + \
            (f"-x{learners}" if learners > 1 else "")
        summary = bc.squall_train(self.a.squall, os.path.join(ROOT, "configs", self.model.config),
                                  self.squall_sets(precision, layout, graphs, learners), self.workdir, self.model.steps,
                                  timeout=self.budget.timeout(), name=name)
        self.spent["squall"].append(time.monotonic() - t0)
        return bc.steady_rate(summary)

    # --- PyTorch ----------------------------------------------------------------------------
    def peer_rate(self, precision, channels_last):
        import torch_models
        torch, m, a = self.torch, self.model, self.a
        t0 = time.monotonic()
        # Rehearsing, PyTorch times 1 step after 1: its figures mean nothing, and its CPU bf16 is slow.
        skip = 1 if a.rehearse else torch_peer.steady_skip(m.steps)
        timed = 1 if a.rehearse else m.steps - skip
        if m.name == "unet":
            net = torch_models.unet(classes=3, in_channels=16, width=16, depth=m.depth)
            batches = torch_peer.fixed_batch(torch, (m.batch, 16, m.size[0], m.size[1]), 3, a.device, True,
                                             channels_last)
        else:
            net = torch_models.build(m.name, 10, 1)
            x, y = self.tensors
            batches = torch_peer.gathered_batches(torch, x, y, m.batch, channels_last)
        try:
            rate = torch_peer.train_rate(torch, net, batches, m.batch, timed, skip, a.device, precision, channels_last,
                                         deadline=self.budget.deadline())
        except torch_peer.PastDeadline as e:
            raise bc.OutOfBudget(str(e))
        del net
        if a.device == "cuda":
            torch.cuda.empty_cache()  # give the memory back before the next squall run
        self.spent["torch"].append(time.monotonic() - t0)
        return rate

    # --- the budget -------------------------------------------------------------------------
    def estimate(self, squall_runs, torch_runs):
        """Seconds the next case should take, from the runs so far (0 before the first)."""
        worst = lambda k: max(self.spent[k]) if self.spent[k] else 0.0
        return 1.2 * (squall_runs * worst("squall") + torch_runs * worst("torch"))

    # --- the groups -------------------------------------------------------------------------
    def prepare(self):
        m, a = self.model, self.a
        if m.name == "unet":
            h, w = m.size
            # One epoch holds every step: no loader restart, and the one evaluation after the last step.
            self.data = bc.climate_data(a.squall, os.path.join(self.workdir, "climate"), m.batch * m.steps,
                                        min(m.batch * m.steps, 16 if a.rehearse else 64), h, w)
        else:
            self.data = bc.fashion_mnist(a.data, self.workdir)
        if a.group != "learners":
            torch_peer.configure(self.torch, a.device, a.threads if a.device == "cpu" else None)
            if m.name != "unet":
                import torch_train
                x, y = torch_train.load(self.data)
                self.tensors = (x.to(a.device), y.to(a.device))

    def model_group(self):
        m, a = self.model, self.a
        bc.out(f"{m.label()} on {self.device_name()}, {m.steps} steps a case (steady rate over the last "
               f"{m.steps - torch_peer.steady_skip(m.steps)}), {a.runs} run(s) a case"
               + (", medians" if a.runs > 1 else "") + (" (rehearsal: the figures mean nothing)" if a.rehearse else ""))
        bc.print_table_head(["case", "squall samples/s", "PyTorch samples/s", "PyTorch", "squall / PyTorch"])
        headline, left_out, failed = None, [], []
        # Rehearsing, the headline and f32 NCHW: every path of the script, in seconds.
        for label, precision, layout, graphs, peer_precision, channels_last in CASES[:2] if a.rehearse else CASES:
            key = (peer_precision, channels_last)
            need_peer = key not in self.peer_rates
            if not self.budget.fits(self.estimate(a.runs, a.runs if need_peer else 0)):
                left_out.append(label)
                continue
            sq, pt = [], self.peer_rates.get(key, [])
            try:
                for _ in range(a.runs):  # alternating: both sides see the same machine
                    sq.append(self.squall_rate(precision, layout, graphs))
                    if need_peer:
                        pt.append(self.peer_rate(peer_precision, channels_last))
            except bc.OutOfBudget as e:
                left_out.append(f"{label} ({e})")
                bc.print_row([label, "cut", "-", PEER_NAMES[key], "-"])
                continue
            except bc.CaseFailed as e:
                failed.append(f"{label}: {e}")
                bc.print_row([label, "FAILED", "-", PEER_NAMES[key], "-"])
                continue
            self.peer_rates[key] = pt
            s, p = statistics.median(sq), statistics.median(pt)
            bc.print_row([label, bc.fmt(s), bc.fmt(p), PEER_NAMES[key], bc.fmt(s / p, 2)])
            if headline is None:
                headline = (label, s, s / p)
        self.notes(left_out, failed)
        if headline is None:
            bc.contract_end(f"{m.label()}: no case ran", None)
        else:
            bc.contract_end(f"{self.model.name} b{m.batch} {headline[0]}: {headline[1]:.0f} samples/s", headline[2])
        return 1 if failed else 0

    def learners_group(self):
        m, a = self.model, self.a
        bc.out(f"{m.label()} per learner, fp32 NCHW, ssgd, on {self.device_name()}, {m.steps} steps a case, "
               f"{a.runs} run(s) a case" + (" (rehearsal: the figures mean nothing)" if a.rehearse else ""))
        bc.print_table_head(["learners", "samples/s", "against 1 learner"])
        rates, left_out, failed, last = {}, [], [], 1
        for learners in (1, 2, 4):
            # A step of L learners trains L batches: the time grows with the count.
            if not self.budget.fits(self.estimate(a.runs, 0) * learners / last):
                left_out.append(f"{learners} learners")
                continue
            last = learners
            try:
                runs = [self.squall_rate("fp32", "nchw", False, learners) for _ in range(a.runs)]
            except bc.OutOfBudget as e:
                left_out.append(f"{learners} learners ({e})")
                bc.print_row([learners, "cut", "-"])
                continue
            except bc.CaseFailed as e:
                failed.append(f"{learners} learners: {e}")
                bc.print_row([learners, "FAILED", "-"])
                continue
            rates[learners] = statistics.median(runs)
            base = rates.get(1)
            bc.print_row([learners, bc.fmt(rates[learners]), bc.fmt(rates[learners] / base, 2) if base else "-"])
        self.notes(left_out, failed)
        top = max(rates) if rates else None
        if top is None:
            bc.contract_end(f"{m.label()}: no case ran", None)
        elif 1 in rates:
            bc.contract_end(f"{m.name} b{m.batch} x{top} learners: {rates[top]:.0f} samples/s, "
                            f"{rates[top] / rates[1]:.2f}x 1 learner", None)
        else:
            bc.contract_end(f"{m.name} b{m.batch} x{top} learners: {rates[top]:.0f} samples/s", None)
        return 1 if failed else 0

    def notes(self, left_out, failed):
        if self.a.device == "cuda" and self.a.runs == 1:
            bc.out("\none run per case (a GPU lease is short): no spread is known")
        if self.a.device == "cpu" and not self.a.rehearse:
            bc.out("\nCPU: parallel.cuda_graphs has nothing to capture there; its cases repeat the eager ones")
        if left_out:
            bc.out(f"\nleft out, past the budget of {self.budget.seconds:.0f} s: {', '.join(left_out)}")
        for f in failed:
            bc.out(f"\nFAILED {f}")

    def device_name(self):
        if self.a.device == "cuda":
            return self.torch.cuda.get_device_name(0)
        return self.a.device


def main():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="a Fashion-MNIST folder")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--group", required=True, choices=GROUPS)
    ap.add_argument("--budget", type=float, default=0, help="seconds this call may use (0: no limit)")
    bc.add_deadline_argument(ap)
    ap.add_argument("--rehearse", action="store_true", help="tiny sizes, to check the script (with --device cpu)")
    ap.add_argument("--runs", type=int, default=0, help="runs per case (default: 1 on cuda, 3 on cpu, 1 rehearsing)")
    ap.add_argument("--threads", type=int, default=0,
                    help=f"CPU threads of both sides with --device cpu (default: the cores, {cpus}; 1 rehearsing, "
                         "where a busy machine's cores make OpenMP teams wait on each other)")
    a = ap.parse_args()
    if a.rehearse and a.device != "cpu":
        sys.exit("--rehearse runs on the CPU: give --device cpu")
    a.runs = a.runs or (1 if a.device == "cuda" or a.rehearse else 3)
    a.threads = a.threads or (1 if a.rehearse else cpus)
    torch = bc.import_torch()  # every group needs it: the GPU check, the PyTorch side
    if a.device == "cuda" and not torch.cuda.is_available():
        bc.skip("PyTorch sees no GPU here")
    with tempfile.TemporaryDirectory() as workdir:
        bench = Bench(a, workdir, torch)
        try:
            bench.prepare()
            return bench.learners_group() if a.group == "learners" else bench.model_group()
        except bc.NoGpu as e:
            bc.skip(f"squall: {e}")


if __name__ == "__main__":
    sys.exit(main())
