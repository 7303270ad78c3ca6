"""Checks the files squall_onnx_probe wrote (tests/onnx/onnx_probe.cpp).

  check_onnx.py checker DIR   onnx.checker.check_model (full check) on every exported model
  check_onnx.py run DIR       onnxruntime on each model's input against squall's logits

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


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("checker", "run"):
        print(__doc__)
        return 2
    dir_ = sys.argv[2]
    with open(os.path.join(dir_, "manifest.json")) as f:
        manifest = json.load(f)
    return checker(dir_, manifest) if sys.argv[1] == "checker" else run(dir_, manifest)


if __name__ == "__main__":
    sys.exit(main())
