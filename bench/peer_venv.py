"""The peers' Python environment: a virtual environment under the build folder
(build/bench-venv) with pinned PyTorch, ONNX Runtime, numpy and h5py, made on first use and
reused, as the peer tests make build/onnx-venv and build/records-venv (tests/onnx,
tests/records). A bench calls `activate()` first: it re-executes the script under the
environment's interpreter, so that the script and the peer scripts it starts (sys.executable)
all use the pinned versions.

What it installs: PyPI's torch 2.15.0 wheel for Linux, the default one (built with CUDA; there
is no CPU-only wheel on PyPI), with the CUDA library wheels it declares (about 3 GB: libtorch
links them, so `import torch` needs them even on a machine without a GPU), but without
Triton (about 1 GB), which only compiles GPU kernels: torch.compile on the CPU generates C++
with the system compiler instead. Then onnxruntime, numpy and h5py at the versions below.
About 4.5 GB on disk, a few minutes the first time.

When the environment cannot be made (no venv module, pip cannot reach the package index) the
bench prints `SKIP: <reason>` and exits 77. Standard library only.
"""
import fcntl
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DIR = os.path.join(ROOT, "build", "bench-venv")
TORCH = "torch==2.15.0"
OTHERS = ["numpy==2.4.6", "onnxruntime==1.32.0", "h5py==3.16.0"]
LEFT_OUT = ("triton",)  # torch's declared dependencies not installed (GPU kernel compiler)
STAMP = ".squall-pins"
ACTIVE = "SQUALL_BENCH_VENV_ACTIVE"  # set in the re-executed process: no second re-exec
PIP = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--retries", "2", "--timeout", "30"]


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(77)


def note(text):
    print(f"bench-venv: {text}", file=sys.stderr, flush=True)


def base_python():
    """The interpreter the environment is made from: Debian's, as the peer tests use, else this
    one's base (not a venv's own python)."""
    for py in ("/usr/bin/python3", getattr(sys, "_base_executable", None), sys.executable):
        if py and os.path.exists(py) and subprocess.run([py, "-c", "import venv, ensurepip"],
                                                        capture_output=True).returncode == 0:
            return py
    skip("no Python interpreter with the venv module (install python3-venv)")


def stamp_text(py):
    version = subprocess.run([py, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                             text=True).stdout.strip()
    return " ".join([TORCH] + OTHERS + [f"without {' '.join(LEFT_OUT)}", f"python {version}"])


def python_of(venv):
    return os.path.join(venv, "bin", "python")


def usable(venv, stamp):
    try:
        with open(os.path.join(venv, STAMP)) as f:
            if f.read().strip() != stamp:
                return False
    except OSError:
        return False
    probe = "import torch, onnxruntime, numpy, h5py"
    return subprocess.run([python_of(venv), "-c", probe], capture_output=True).returncode == 0


def pip_install(py, args, venv, what):
    r = subprocess.run([py] + PIP + args, capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["rm", "-rf", venv])
        last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
        skip(f"pip cannot install {what} into {venv}: {last}")


def torch_requirements(py):
    """torch's declared run-time requirements (markers kept for pip), less LEFT_OUT and extras."""
    code = ("from importlib.metadata import requires\n"
            "for r in requires('torch') or []: print(r)")
    reqs = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    name = lambda r: r.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("~")[0].strip()
    return [r for r in reqs if "extra ==" not in r and name(r).lower() not in LEFT_OUT]


def make(venv):
    """The environment at `venv`, made (or remade when its pins differ); its python's path."""
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv + ".lock", "w") as lock:  # two benches started at once make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = base_python()
        stamp = stamp_text(base)
        if usable(venv, stamp):
            return python_of(venv)
        subprocess.run(["rm", "-rf", venv])
        note(f"making {venv}: {stamp} (about 4.5 GB, once; pip's output in the SKIP line if it fails)")
        if subprocess.run([base, "-m", "venv", venv], capture_output=True).returncode != 0:
            skip(f"cannot create a virtual environment in {venv} with {base}")
        py = python_of(venv)
        pip_install(py, ["--no-deps", TORCH], venv, TORCH)
        pip_install(py, torch_requirements(py) + OTHERS, venv, f"torch's requirements and {' '.join(OTHERS)}")
        if subprocess.run([py, "-c", "import torch, onnxruntime, numpy, h5py"], capture_output=True).returncode:
            subprocess.run(["rm", "-rf", venv])
            skip(f"{venv} was installed but cannot import torch, onnxruntime, numpy and h5py")
        with open(os.path.join(venv, STAMP), "w") as f:
            f.write(stamp + "\n")
        note("ready")
        return py


def activate(venv=None):
    """Re-executes this script under the environment's python (made first if needed); returns in
    the re-executed process. Skips (77) where the environment cannot be made."""
    venv = os.path.abspath(venv or DEFAULT_DIR)
    if os.environ.get(ACTIVE) == venv:
        return
    py = make(venv)
    os.environ[ACTIVE] = venv
    sys.stdout.flush()
    os.execv(py, [py, os.path.abspath(sys.argv[0])] + sys.argv[1:])


def add_arguments(ap):
    ap.add_argument("--venv", default=DEFAULT_DIR,
                    help="the peers' virtual environment, made there on first use (bench/peer_venv.py)")
    ap.add_argument("--no-venv", action="store_true",
                    help="use this interpreter's own packages instead (e.g. Debian's python3-torch)")
