"""Checks the files squall_onnx_probe wrote (tests/onnx/onnx_probe.cpp).

  check_onnx.py checker DIR   onnx.checker.check_model (full check) on every exported model
  check_onnx.py run DIR       onnxruntime on each model's input against squall's logits
  check_onnx.py cli FILE C H W CLASSES
                              a file `squall export` wrote: the checker, the names and shapes of
                              input and logits, and a batch of 3 through onnxruntime

`run` prints each model's largest absolute difference and fails when one exceeds the
tolerance (1e-4, absolute), or when a batch of one does not give the first row again.
"""
import json
import os
import sys

TOLERANCE = 1e-4


def load(dir_, name, suffix, shape):
    import numpy as np
    data = np.fromfile(os.path.join(dir_, name + suffix), dtype="<f4")
    return data.reshape(shape)


def checker(dir_, manifest):
    import onnx
    for case in manifest:
        path = os.path.join(dir_, case["name"] + ".onnx")
        onnx.checker.check_model(onnx.load(path), full_check=True)
        print(f"onnx.checker: {case['name']} ok (onnx {onnx.__version__})")
    return 0


def run(dir_, manifest):
    import numpy as np
    import onnxruntime as ort
    failed = []
    for case in manifest:
        name = case["name"]
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(os.path.join(dir_, name + ".onnx"), options,
                                       providers=["CPUExecutionProvider"])
        names_in = [i.name for i in session.get_inputs()]
        names_out = [o.name for o in session.get_outputs()]
        if names_in != ["input"] or names_out != ["logits"]:
            failed.append(f"{name}: inputs {names_in}, outputs {names_out}")
            continue
        x = load(dir_, name, ".input.f32", case["input"])
        want = load(dir_, name, ".logits.f32", case["logits"])
        (got,) = session.run(["logits"], {"input": x})
        if got.shape != want.shape:
            failed.append(f"{name}: onnxruntime gives shape {got.shape}, squall {want.shape}")
            continue
        diff = float(np.max(np.abs(got.astype(np.float64) - want)))
        (one,) = session.run(["logits"], {"input": x[:1]})
        diff_one = float(np.max(np.abs(one[0].astype(np.float64) - want[0])))
        scale = float(np.max(np.abs(want)))
        print(f"onnxruntime {ort.__version__}: {name}: logits {list(want.shape)}, max |logits| {scale:.3g}, "
              f"max |difference| {diff:.3g} (batch of 1: {diff_one:.3g})")
        if not (diff <= TOLERANCE and diff_one <= TOLERANCE):
            failed.append(f"{name}: max |difference| {max(diff, diff_one):.3g} > {TOLERANCE}")
    for f in failed:
        print("FAIL " + f)
    return 1 if failed else 0


def cli(path, c, h, w, classes):
    import numpy as np
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    if inp.name != "input" or inp.shape != ["N", c, h, w] or out.name != "logits" or out.shape != ["N", classes]:
        print(f"FAIL {path}: input {inp.name} {inp.shape}, output {out.name} {out.shape}")
        return 1
    x = np.random.default_rng(1).standard_normal((3, c, h, w)).astype(np.float32)
    (y,) = session.run(["logits"], {"input": x})
    if y.shape != (3, classes) or not np.all(np.isfinite(y)):
        print(f"FAIL {path}: logits of shape {y.shape}, finite: {bool(np.all(np.isfinite(y)))}")
        return 1
    print(f"onnxruntime {ort.__version__}: {path}: input {inp.shape}, logits {out.shape} ok")
    return 0


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "cli":
        return cli(sys.argv[2], *(int(v) for v in sys.argv[3:7]))
    if len(sys.argv) != 3 or sys.argv[1] not in ("checker", "run"):
        print(__doc__)
        return 2
    dir_ = sys.argv[2]
    with open(os.path.join(dir_, "manifest.json")) as f:
        manifest = json.load(f)
    return checker(dir_, manifest) if sys.argv[1] == "checker" else run(dir_, manifest)


if __name__ == "__main__":
    sys.exit(main())
