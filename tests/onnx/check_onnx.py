"""Checks the files squall_onnx_probe wrote (tests/onnx/onnx_probe.cpp).

  check_onnx.py checker DIR   onnx.checker.check_model (full check) on every exported model
  check_onnx.py run DIR       onnxruntime on each model's input against squall's logits
  check_onnx.py cli FILE C H W CLASSES
                              a file `squall export` wrote: the checker, the names and shapes of
                              input and logits, and a batch of 3 through onnxruntime
  check_onnx.py netcdf SRC DST  the DeepCAM-layout samples of folder SRC as one CAM5-style netCDF
                              file DST of as many time steps (netCDF4 and h5py), labels included,
                              for a model trained on netCDF input (which names its channels and
                              has a grid)
  check_onnx.py meta FILE MODEL_H5 KIND VERSION
                              the metadata_props of a file `squall export` wrote, read through
                              onnxruntime, against the checkpoint's model.h5 (read with h5py);
                              KIND climate (named channels, a lat/lon grid, 3 classes) or image
                              (no channel names, no grid, 10 classes); VERSION squall's

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


CAM5_NAMES = ["TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL", "T200", "T500", "PRECT", "TS", "TREFHT",
              "Z1000", "Z200", "ZBOT"]


def netcdf(src, dst):
    import glob
    # netCDF4 before h5py: each wheel brings its own HDF5, and the one loaded second fails to
    # write ("NetCDF: HDF error") when h5py's came first.
    import netCDF4
    import h5py
    import numpy as np
    fields, labels = [], []
    for f in sorted(glob.glob(os.path.join(src, "data-*.h5"))):
        with h5py.File(f, "r") as h:
            fields.append(h["climate/data"][...])
            labels.append(h["climate/labels_0"][...])
            lat, lon = h["climate/lat"][...], h["climate/lon"][...]
    fields, labels = np.stack(fields), np.stack(labels)  # time, lat, lon (, channel)
    with netCDF4.Dataset(dst, "w", format="NETCDF4") as d:
        d.createDimension("time", None)
        d.createDimension("lat", len(lat))
        d.createDimension("lon", len(lon))
        t = d.createVariable("time", "f8", ("time",))
        t.units = "hours since 2001-01-01 00:00:00"
        t.calendar = "noleap"
        t[:] = 3.0 * np.arange(len(fields))
        d.createVariable("lat", "f8", ("lat",))[:] = lat
        d.createVariable("lon", "f8", ("lon",))[:] = lon
        for c, name in enumerate(CAM5_NAMES):
            d.createVariable(name, "f4", ("time", "lat", "lon"))[:] = fields[..., c]
        d.createVariable("labels", "i4", ("time", "lat", "lon"))[:] = labels
    print(f"netcdf: {dst}: {len(fields)} time steps on {len(lat)} x {len(lon)}")
    return 0


def meta(path, model_h5, kind, version):
    """Every documented key of docs/inference.md, "Metadata", equal to what model.h5 holds."""
    import h5py
    import numpy as np
    import onnxruntime as ort
    m = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map
    failed = []

    def check(what, ok, got):
        if not ok:
            failed.append(f"{what}: {got!r}")

    def text(a):  # squall writes a text attribute as a one-element array of a string
        if isinstance(a, np.ndarray):
            (a,) = a.reshape(-1)
        return a.decode() if isinstance(a, (bytes, np.bytes_)) else str(a)

    with h5py.File(model_h5, "r") as f:
        attrs = f.attrs

        def lines(key):
            return text(attrs[key]).split("\n") if key in attrs else []

        check("squall_version", m.get("squall_version") == version, m.get("squall_version"))
        check("model", m.get("model") == text(attrs["t:spec/name"]), m.get("model"))
        check("checkpoint_step", m.get("checkpoint_step") == str(int(attrs["i:step"])), m.get("checkpoint_step"))
        check("normalization_kind", m.get("normalization_kind") == text(attrs["t:normalization/kind"]),
              m.get("normalization_kind"))
        # float32 values, written so that they read back to the same float32: equal, bit for bit.
        for key in ("mean", "std"):
            got = np.array(json.loads(m["normalization_" + key]), dtype=np.float32)
            want = f["normalization/" + key][...].astype(np.float32)
            check("normalization_" + key, got.shape == want.shape and np.array_equal(got, want), (got, want))
        check("input_scale", np.float32(json.loads(m["input_scale"])) == np.float32(attrs["r:normalization/input_scale"]),
              m.get("input_scale"))
        names, units = json.loads(m["channel_names"]), json.loads(m["channel_units"])
        check("channel_names", names == lines("t:input/channel_names"), names)
        check("channel_units", units == lines("t:input/channel_units"), units)
        check("grid_rows", m.get("grid_rows") == str(int(attrs["i:input/height"])), m.get("grid_rows"))
        check("grid_cols", m.get("grid_cols") == str(int(attrs["i:input/width"])), m.get("grid_cols"))
        classes = json.loads(m["class_names"])
        check("class_names", classes == lines("t:class_names"), classes)
        grid_keys = [k for a in ("lat", "lon") for k in (a + "_first", a + "_last", a + "_spacing")]
        if "input/lat" in f:
            for a in ("lat", "lon"):
                v = f["input/" + a][...].astype(np.float32)
                check(a + "_first", np.float32(json.loads(m[a + "_first"])) == v[0], m.get(a + "_first"))
                check(a + "_last", np.float32(json.loads(m[a + "_last"])) == v[-1], m.get(a + "_last"))
                step = (float(v[-1]) - float(v[0])) / (len(v) - 1)
                check(a + "_spacing", abs(float(json.loads(m[a + "_spacing"])) - step) <= 1e-6 * abs(step),
                      m.get(a + "_spacing"))
        else:
            check("no grid keys without a grid", not any(k in m for k in grid_keys), sorted(m))
        # What the kind of model must show, so that an empty model.h5 cannot pass.
        if kind == "climate":
            check("climate: 16 named channels", len(names) == 16 and "TMQ" in names and len(units) == 16, names)
            check("climate: a grid", "input/lat" in f and all(k in m for k in grid_keys), sorted(m))
            check("climate: 3 classes", len(classes) == 3, classes)
            check("climate: a normalisation", m["normalization_kind"] != "none" and len(json.loads(m["normalization_mean"])) == 16,
                  m["normalization_kind"])
        else:
            check("image: no channel names", names == [] and units == [], names)
            check("image: 10 classes", len(classes) == 10, classes)
    for what in failed:
        print(f"FAIL {path}: metadata {what}")
    if not failed:
        print(f"onnxruntime {ort.__version__}: {path}: {len(m)} metadata keys equal {model_h5}'s ({kind}: "
              f"{m['normalization_kind']}, {len(json.loads(m['channel_names']))} named channels, classes {m['class_names']})")
    return 1 if failed else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "netcdf":
        return netcdf(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 6 and sys.argv[1] == "meta":
        return meta(*sys.argv[2:6])
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
