#!/usr/bin/env python3
"""CPU inference: `squall eval` of the climate U-Net against ONNX Runtime running the file
`squall export` writes from the same checkpoint, side by side in one run.

Setup (untimed, in a temporary folder): `squall data climate` and `squall data label` make
--samples labelled DeepCAM files of 16 x 96 x 144 (--distinct of them, linked to make up the
rest, as bench/gpu_training.py does); a short `squall train` of configs/climate-tiny.toml
(model unet, width 16, depth 4, 3 classes; --train-steps steps) leaves a checkpoint; `squall
export --batch B` writes its ONNX file. Every file is read once so that both sides read from
the page cache.

Then --runs runs (default 3) alternate the two, each over the same --samples files at the same
batch (default 8) and thread count:
  squall  `squall eval --run RUN --data FOLDER --json` (run.threads, train.eval_batch_size):
          its eval_s, the time of the evaluation loop after the checkpoint is read and the
          model built: per batch, reading the HDF5 files (opened on first use, kept open),
          normalising and transposing HWC to CHW, the forward pass, the weighted
          cross-entropy, the argmax and the confusion matrix
  ORT     onnxruntime 1.32's InferenceSession (CPUExecutionProvider, intra_op_num_threads =
          threads, inter_op_num_threads = 1, sequential, all graph optimisations), made
          before the clock starts as squall's model is, then the same work timed the same way
          in Python: h5py reads each file (opened on first use, kept open), numpy normalises
          with the checkpoint's statistics (normalization/mean, std, input_scale of model.h5)
          and transposes, session.run, the cross-entropy weighted by the run's
          data.class_weights, the argmax and the confusion matrix (numpy)
and, for `squall predict`, the same files turned into mask files:
  squall  `squall predict --run RUN --data FOLDER --out DIR --format h5`: the time its last
          line gives (from the model built to the last mask file written): per batch of
          files, reading, normalising, the forward pass and the argmax; per file, the pixel
          and region counts and an HDF5 mask file (/mask, /lat, /lon and attributes)
  ORT     the same session on the same batches of files, numpy's argmax, and h5py writing
          each file's /mask (uint8 [1, H, W])
Both sides' first batch is inside the time (squall's first forward, ORT's first run). The
ratio (squall / ORT samples/s, run by run: median, min-max) compares the same work; the ORT
column "run() only" adds the time inside session.run alone, the compute without the Python
data path. ORT's pixel accuracy must equal squall's (the same model on the same normalised
samples): a difference above 1e-3 is printed as a warning.

Each row names the ISA of each side: squall's is what oneDNN dispatches to (ONEDNN_VERBOSE), which
ONEDNN_MAX_CPU_ISA=AVX2 caps; ORT's is the widest its own kernels (MLAS) take on this CPU, which they
pick from CPUID with no switch to cap them: on an AVX-512 machine, ONEDNN_MAX_CPU_ISA=AVX2 gives the
conservative comparison of squall on AVX2 against ORT on AVX-512.

ONNX Runtime, numpy and h5py come from build/bench-venv (bench/peer_venv.py; SKIP and exit 77
where it cannot be made), or with --no-venv from this interpreter. Prints a markdown table for
bench/RESULTS.md, or --json.

    python3 bench/eval_onnx.py --squall build/bin/squall --runs 3
"""
import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402
import cpu_peak  # noqa: E402
import peer_venv  # noqa: E402

CHANNELS, HEIGHT, WIDTH, CLASSES = 16, 96, 144, 3


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        if "built without ONNX export" in r.stderr:
            bc.skip(f"squall was built without ONNX export: {r.stderr.strip().splitlines()[-1]}")
        sys.exit(f"{what} failed (exit {r.returncode}): {' '.join(cmd)}\n{(r.stdout + r.stderr).strip()[-2000:]}")
    return r.stdout


class Checkpoint:
    """What the ORT side needs from model.h5: the normalisation and the class weights."""

    def __init__(self, run_dir):
        import tomllib
        import h5py
        import numpy as np
        found = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "step-*", "model.h5")))
        if not found:
            sys.exit(f"{run_dir}: the training run left no checkpoint")
        self.path = found[-1]
        text = lambda v: (v[0] if hasattr(v, "__len__") and not isinstance(v, (str, bytes)) else v)  # noqa: E731
        with h5py.File(self.path, "r") as f:
            kind = text(f.attrs.get("t:normalization/kind", "none"))
            self.kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            self.scale = float(f.attrs.get("r:normalization/input_scale", 1.0))
            self.mean = np.asarray(f["normalization/mean"][()], dtype=np.float32) if self.kind != "none" else None
            self.std = np.asarray(f["normalization/std"][()], dtype=np.float32) if self.kind != "none" else None
            config = text(f.attrs["t:config"])
            config = config.decode() if isinstance(config, bytes) else str(config)
        weights = tomllib.loads(config).get("data", {}).get("class_weights", [])
        self.weights = np.asarray(weights, dtype=np.float32) if weights else None

    def normalise(self, hwc):
        import numpy as np
        x = hwc * np.float32(self.scale) if self.scale != 1.0 else hwc
        if self.mean is not None:
            x = (x - self.mean) / self.std
        return x.transpose(2, 0, 1)


def ort_session(onnx_path, threads):
    """ONNX Runtime as the bench runs it: the CPU provider, `threads` intra-op threads, one
    inter-op thread, sequential, every graph optimisation."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])


def ort_eval(onnx_path, paths, batch, threads, ck):
    """ORT's side of one run: samples/s of the whole loop, samples/s of session.run alone, the
    pixel accuracy."""
    import h5py
    import numpy as np
    sess = ort_session(onnx_path, threads)
    name = sess.get_inputs()[0].name
    x = np.empty((batch, CHANNELS, HEIGHT, WIDTH), dtype=np.float32)
    y = np.empty((batch, HEIGHT, WIDTH), dtype=np.int64)
    confusion = np.zeros(CLASSES * CLASSES, dtype=np.int64)
    loss_sum, in_run, files = 0.0, 0.0, {}
    n = len(paths)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        valid = min(batch, n - start)
        for k in range(batch):  # a short last batch repeats its last sample, as squall's does
            i = start + min(k, valid - 1)
            f = files.get(i) or files.setdefault(i, h5py.File(paths[i], "r"))
            x[k] = ck.normalise(f["climate/data"][()])
            y[k] = f["climate/labels_0"][()]
        r0 = time.perf_counter()
        logits = sess.run(None, {name: x})[0]
        in_run += time.perf_counter() - r0
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        nll = -np.take_along_axis(logp, y[:, None], axis=1)[:, 0]
        w = ck.weights[y] if ck.weights is not None else np.ones_like(nll)
        loss_sum += float((w * nll)[:valid].sum() / w[:valid].sum()) * valid
        pred = logits.argmax(axis=1)
        confusion += np.bincount((y[:valid] * CLASSES + pred[:valid]).ravel(), minlength=CLASSES * CLASSES)
    seconds = time.perf_counter() - t0
    for f in files.values():
        f.close()
    cm = confusion.reshape(CLASSES, CLASSES)
    return {"samples_per_s": n / seconds, "run_only_samples_per_s": n / in_run, "seconds": seconds,
            "accuracy": float(np.trace(cm) / cm.sum()), "loss": loss_sum / n}


def ort_predict(onnx_path, paths, batch, threads, ck, out_dir):
    """ONNX Runtime as a predict: every file's mask, from batches of --batch files."""
    import h5py
    import numpy as np
    sess = ort_session(onnx_path, threads)
    name = sess.get_inputs()[0].name
    x = np.empty((batch, CHANNELS, HEIGHT, WIDTH), dtype=np.float32)
    os.makedirs(out_dir, exist_ok=True)
    n = len(paths)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        valid = min(batch, n - start)
        for k in range(valid):
            with h5py.File(paths[start + k], "r") as f:
                x[k] = ck.normalise(f["climate/data"][()])
        pred = sess.run(None, {name: x})[0].argmax(axis=1).astype(np.uint8)
        for k in range(valid):
            stem = os.path.splitext(os.path.basename(paths[start + k]))[0]
            with h5py.File(os.path.join(out_dir, stem + "-mask.h5"), "w") as f:
                f.create_dataset("mask", data=pred[k][None])
    seconds = time.perf_counter() - t0
    return {"samples_per_s": n / seconds, "seconds": seconds}


def squall_predict(a, run_dir, folder, samples, out_dir):
    out = run([a.squall, "predict", "--run", run_dir, "--data", folder, "--out", out_dir, "--format", "h5",
               "--set", f"run.threads={a.threads}", "--set", f"train.eval_batch_size={a.batch}"], "squall predict")
    m = re.search(r"(\d+) time steps? in ([0-9.]+) s", out)
    if not m or int(m.group(1)) != samples:
        sys.exit(f"squall predict: no line 'N time steps in S s' for {samples} time steps in:\n{out[-2000:]}")
    seconds = float(m.group(2))
    return {"samples_per_s": samples / seconds, "seconds": seconds}


def squall_eval(a, run_dir, folder, samples):
    out = run([a.squall, "eval", "--run", run_dir, "--data", folder, "--set", f"data.test_samples={samples}",
               "--set", f"run.threads={a.threads}", "--set", f"train.eval_batch_size={a.batch}", "--json"],
              "squall eval")
    r = json.loads(out)
    if r["samples"] != samples:
        sys.exit(f"squall eval evaluated {r['samples']} samples, asked for {samples}")
    return {"samples_per_s": samples / r["eval_s"], "seconds": r["eval_s"], "accuracy": r["test_accuracy"],
            "loss": r["test_loss"], "miou": r["test_miou"]}


def keep_dir(path):
    os.makedirs(path, exist_ok=True)
    if os.listdir(path):
        sys.exit(f"--keep {path}: not empty")
    return os.path.abspath(path)


def prepare(a, workdir):
    folder = bc.climate_data(a.squall, os.path.join(workdir, "climate"), a.samples, min(a.samples, a.distinct),
                             HEIGHT, WIDTH)
    sets = [f"data.train={folder}", f"data.test={folder}", f"data.test_samples={a.batch}",
            f"train.batch_size={a.batch}", f"train.max_steps={a.train_steps}", f"train.epochs={a.train_steps}",
            f"train.eval_every_steps={a.train_steps}", "schedule.warmup_steps=0", "checkpoint.at_end=true",
            f"run.threads={a.threads}"]
    summary = bc.squall_train(a.squall, os.path.join(ROOT, "configs", "climate-tiny.toml"), sets, workdir,
                              a.train_steps)
    run_dir = summary["_run_dir"]
    onnx_path = os.path.join(workdir, "unet.onnx")
    run([a.squall, "export", "--run", run_dir, "--out", onnx_path, "--batch", str(a.batch), "--data", folder],
        "squall export")
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.startswith("data-") and f.endswith(".h5"))
    for p in paths:  # into the page cache, for both sides
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass
    return folder, run_dir, onnx_path, paths


def ort_isa():
    """The widest ISA ONNX Runtime's CPU kernels (MLAS) take here: MLAS picks its kernels from CPUID
    when it loads, and has no switch that caps them (ONEDNN_MAX_CPU_ISA caps squall's side only)."""
    flags = cpu_peak.cpu_flags()
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "SSE/AVX"


def short_isa(isa):
    """oneDNN's name for its ISA, shortened for a table cell: "Intel AVX-512 with Intel DL Boost and
    bfloat16 support" -> "AVX-512 (bf16)", "Intel AVX2" -> "AVX2"."""
    if not isa:
        return "?"
    if "AMX" in isa:
        return "AMX"
    if "AVX-512" in isa:
        return "AVX-512 (bf16)" if "bfloat16" in isa else "AVX-512 (VNNI)" if "DL Boost" in isa else "AVX-512"
    return isa.replace("Intel ", "")


def main():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squall", default=os.path.join(ROOT, "build", "bin", "squall"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=cpus, help=f"threads of both sides (default: the cores, {cpus})")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--samples", type=int, default=256, help="samples evaluated per run")
    ap.add_argument("--distinct", type=int, default=32, help="distinct files generated (links make up the rest)")
    ap.add_argument("--train-steps", type=int, default=4, help="steps of the training that makes the checkpoint")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    ap.add_argument("--keep", metavar="DIR", help="make the data, run and ONNX file in DIR (new or empty) and "
                    "leave them there, for profiling either side by hand")
    peer_venv.add_arguments(ap)
    a = ap.parse_args()
    if not os.access(a.squall, os.X_OK):
        sys.exit(f"--squall {a.squall}: not an executable (build it: cmake --build build --target squall)")
    if not a.no_venv:
        peer_venv.activate(a.venv)
    try:
        import h5py  # noqa: F401
        import numpy  # noqa: F401
        import onnxruntime
    except ImportError as e:
        bc.skip(f"needs onnxruntime, numpy and h5py ({sys.executable}: {e}); leave out --no-venv for the pinned ones")
    with contextlib.nullcontext(keep_dir(a.keep)) if a.keep else tempfile.TemporaryDirectory() as workdir:
        folder, run_dir, onnx_path, paths = prepare(a, workdir)
        ck = Checkpoint(run_dir)
        sq, ort_runs, sq_pred, ort_pred = [], [], [], []
        masks = os.path.join(workdir, "masks")
        for _ in range(a.runs):  # alternating: both sides see the same machine
            sq.append(squall_eval(a, run_dir, folder, len(paths)))
            ort_runs.append(ort_eval(onnx_path, paths, a.batch, a.threads, ck))
            shutil.rmtree(masks, ignore_errors=True)
            sq_pred.append(squall_predict(a, run_dir, folder, len(paths), masks))
            shutil.rmtree(masks, ignore_errors=True)
            ort_pred.append(ort_predict(onnx_path, paths, a.batch, a.threads, ck, masks))
        dnn = cpu_peak.onednn_isa([a.squall, "eval", "--run", run_dir, "--data", folder, "--set",
                                   f"data.test_samples={a.batch}", "--set", f"run.threads={a.threads}", "--set",
                                   f"train.eval_batch_size={a.batch}"])
        gflop = json.loads(run([a.squall, "model", "--model", "unet", "--width", "16", "--depth", "4", "--classes",
                                str(CLASSES), "--input", f"{CHANNELS},{HEIGHT},{WIDTH}", "--json"],
                               "squall model"))["forward_gflop_per_sample"]
    ratios = [s["samples_per_s"] / o["samples_per_s"] for s, o in zip(sq, ort_runs)]
    pred_ratios = [s["samples_per_s"] / o["samples_per_s"] for s, o in zip(sq_pred, ort_pred)]
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    result = {"model": "unet", "input": [CHANNELS, HEIGHT, WIDTH], "batch": a.batch, "threads": a.threads,
              "samples": len(paths), "runs": a.runs, "cpu": cpu_peak.cpu_model(), "squall_onednn": dnn,
              "onnxruntime": onnxruntime.__version__, "ort_isa": ort_isa(), "forward_gflop_per_sample": gflop,
              "squall_samples_per_s": med(sq, "samples_per_s"), "ort_samples_per_s": med(ort_runs, "samples_per_s"),
              "ort_run_only_samples_per_s": med(ort_runs, "run_only_samples_per_s"),
              "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
              "squall_runs": sq, "ort_runs": ort_runs,
              "squall_predict_samples_per_s": med(sq_pred, "samples_per_s"),
              "ort_predict_samples_per_s": med(ort_pred, "samples_per_s"),
              "predict_ratio_median": statistics.median(pred_ratios), "predict_ratio_min": min(pred_ratios),
              "predict_ratio_max": max(pred_ratios), "squall_predict_runs": sq_pred, "ort_predict_runs": ort_pred,
              "accuracy_difference": max(abs(s["accuracy"] - o["accuracy"]) for s, o in zip(sq, ort_runs))}
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    bc.out(f"CPU: {result['cpu']}; squall: oneDNN {dnn.get('version') or '?'}, ISA {dnn.get('isa') or '?'}; "
           f"ONNX Runtime {result['onnxruntime']} (CPUExecutionProvider, MLAS on {result['ort_isa']}: it picks its "
           f"kernels from CPUID, and nothing caps them) from {sys.executable}")
    bc.out(f"{len(paths)} DeepCAM files a run, read, normalised and evaluated by both sides (loss, argmax, "
           "confusion matrix); medians of the runs\n")
    isas = f"{short_isa(dnn.get('isa'))} / {result['ort_isa']}"
    bc.print_table_head(["command", "ISA (squall / ORT)", "model", "input", "batch", "threads", "samples", "runs",
                         "squall samples/s",
                         "ORT samples/s (same work)", "squall / ORT (median, min-max)", "ORT run() only samples/s",
                         "squall forward GFLOP/s"])
    bc.print_row(["eval", isas, "unet", f"{CHANNELS}x{HEIGHT}x{WIDTH}", a.batch, a.threads, len(paths), a.runs,
                  bc.fmt(result["squall_samples_per_s"]), bc.fmt(result["ort_samples_per_s"]),
                  f"{result['ratio_median']:.2f} ({result['ratio_min']:.2f}-{result['ratio_max']:.2f})",
                  bc.fmt(result["ort_run_only_samples_per_s"]), bc.fmt(result["squall_samples_per_s"] * gflop, 1)])
    bc.print_row(["predict", isas, "unet", f"{CHANNELS}x{HEIGHT}x{WIDTH}", a.batch, a.threads, len(paths), a.runs,
                  bc.fmt(result["squall_predict_samples_per_s"]), bc.fmt(result["ort_predict_samples_per_s"]),
                  f"{result['predict_ratio_median']:.2f} ({result['predict_ratio_min']:.2f}-"
                  f"{result['predict_ratio_max']:.2f})", "", ""])
    bc.out(f"\npixel accuracy: squall {sq[0]['accuracy']:.6f}, ORT {ort_runs[0]['accuracy']:.6f}; "
           f"loss: squall {sq[0]['loss']:.6f}, ORT {ort_runs[0]['loss']:.6f}")
    if result["accuracy_difference"] > 1e-3:
        bc.out(f"WARNING: the accuracies differ by {result['accuracy_difference']:.2g}: the two sides do not "
               "evaluate the same thing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
