#!/usr/bin/env python3
"""peer:models: the benches' PyTorch networks (bench/torch_models.py) are squall's zoo models,
layer for layer: each peer's parameter count equals what `squall model --model NAME ... --json`
builds (src/nn/models/zoo.cpp), and the peer maps a sample of that shape to one score per
class (per pixel for segmentation). A layer dropped or added, or of another width, kernel or
bias, in a peer changes its count and fails the check.

usage: check_peer_models.py SQUALL BENCH_DIR
Exit 77 (skipped) where this interpreter cannot import torch.
"""
import json
import subprocess
import sys

try:
    import torch  # noqa: F401
except ImportError:
    print(f"SKIP: {sys.executable} cannot import torch")
    sys.exit(77)

# name, squall model's flags, the peer's builder arguments
CASES = [
    ("lenet5", ["--input", "1,28,28", "--classes", "10"], dict(classes=10, in_channels=1)),
    ("resnet20", ["--input", "1,28,28", "--classes", "10"], dict(classes=10, in_channels=1)),
    ("unet", ["--depth", "4", "--width", "16", "--input", "16,96,144", "--classes", "3"],
     dict(classes=3, in_channels=16, width=16, depth=4)),
    ("unet", ["--depth", "3", "--width", "8", "--input", "16,32,48", "--classes", "3"],
     dict(classes=3, in_channels=16, width=8, depth=3)),
    ("deeplabv3plus", ["--input", "16,96,144", "--classes", "3"], dict(classes=3, in_channels=16)),
]


def squall_parameters(squall, name, flags):
    cmd = [squall, "model", "--model", name, "--json", "--nodes", "1"] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr}")
    return json.loads(r.stdout)["parameters"]


def main():
    squall, bench = sys.argv[1], sys.argv[2]
    sys.path.insert(0, bench)
    import torch_models
    failed = 0
    for name, flags, knobs in CASES:
        model = torch_models.build(name, **knobs)
        peer = torch_models.parameter_count(model)
        theirs = squall_parameters(squall, name, flags)
        verdict = "ok" if peer == theirs else "FAILED"
        failed += peer != theirs
        print(f"{verdict}: {name} {' '.join(flags)}: squall {theirs} parameters, PyTorch peer {peer}")
        # The peer must also run on a sample of that shape and give one score per class (per pixel
        # for segmentation), which a wrong concatenation or stride would break.
        c, h, w = (int(v) for v in flags[flags.index("--input") + 1].split(","))
        model.eval()
        with torch.no_grad():
            y = model(torch.zeros(2, c, h, w))
        want = (2, knobs["classes"]) + ((h, w) if name in ("unet", "deeplabv3plus") else ())
        if tuple(y.shape) != want:
            failed += 1
            print(f"FAILED: {name}: the peer's output is {tuple(y.shape)}, not {want}")
    if failed:
        print(f"peer:models: {failed} check(s) failed")
        return 1
    print(f"peer:models: {len(CASES)} peers match squall's models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
