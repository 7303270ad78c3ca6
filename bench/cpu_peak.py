"""What the CPU can do, for the CPU benches: its model name, the vector ISA it has, the ISA
oneDNN dispatches to in squall, and its measured single-precision FMA peak.

fma_peak(threads) compiles a small C loop with the system compiler (cc, or $CC) and OpenMP:
every thread runs ACC independent chains of vector FMAs (a = a * b + c, AVX-512 on 16 floats
where /proc/cpuinfo lists avx512f, else AVX2+FMA on 8), enough chains to cover the FMA
latency on every FMA port, so that the loop is bound by FMA throughput alone. The time runs
from a barrier before the loops to a barrier after them (the slowest thread's); the best of
five repetitions counts, 2 FLOPs per lane per FMA. A peak measured this way is what a
convolution could reach at best on these threads: the share of it a run reaches is its
efficiency. Standard library only.
"""
import os
import re
import subprocess
import tempfile
import time

FMA_SOURCE = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __AVX512F__
typedef __m512 vec;
#define LANES 16
#define ACC 24
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET(x) _mm512_set1_ps(x)
#define ADD(a, b) _mm512_add_ps(a, b)
#define STORE(p, a) _mm512_storeu_ps(p, a)
#else
typedef __m256 vec;
#define LANES 8
#define ACC 12
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET(x) _mm256_set1_ps(x)
#define ADD(a, b) _mm256_add_ps(a, b)
#define STORE(p, a) _mm256_storeu_ps(p, a)
#endif

int main(int argc, char** argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 100000000L;
  double best = 0.0;
  float sink = 0.0f;
  int threads = 1;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = 0.0, t1 = 0.0;
#pragma omp parallel reduction(+ : sink)
    {
      vec acc[ACC];
      for (int k = 0; k < ACC; ++k) acc[k] = SET(1.0f + 1e-3f * (float)(k + omp_get_thread_num()));
      /* a -> a b + c converges to c / (1 - b) = 1: no overflow, no denormals */
      const vec b = SET(0.9999999f), c = SET(1e-7f);
#pragma omp barrier
#pragma omp master
      t0 = omp_get_wtime();
      for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 32
        for (int k = 0; k < ACC; ++k) acc[k] = FMA(acc[k], b, c);
      }
#pragma omp barrier
#pragma omp master
      {
        t1 = omp_get_wtime();
        threads = omp_get_num_threads();
      }
      vec s = acc[0];
      for (int k = 1; k < ACC; ++k) s = ADD(s, acc[k]);
      float lanes[LANES];
      STORE(lanes, s);
      for (int l = 0; l < LANES; ++l) sink += lanes[l];
    }
    const double gflops = 2.0 * LANES * ACC * (double)iters * threads / (t1 - t0) / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.3f %d %.1f\n", best, threads, sink);
  return 0;
}
"""


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def isa():
    """The widest FMA ISA present: avx512f, avx2 (with fma), or None."""
    flags = cpu_flags()
    if "avx512f" in flags:
        return "avx512f"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    return None


def fma_peak(threads, seconds=0.5):
    """{"isa", "threads", "gflops"} of the FMA loop on `threads` OpenMP threads (about `seconds`
    a repetition), or {"isa", "error"} where it cannot be built or run."""
    which = isa()
    if which is None:
        return {"isa": None, "error": "no AVX2+FMA or AVX-512 in /proc/cpuinfo"}
    flags = ["-mavx512f"] if which == "avx512f" else ["-mavx2", "-mfma"]
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "fma.c"), os.path.join(tmp, "fma")
        with open(src, "w") as f:
            f.write(FMA_SOURCE)
        r = subprocess.run([cc, "-O2", "-fopenmp"] + flags + [src, "-o", exe], capture_output=True, text=True)
        if r.returncode != 0:
            return {"isa": which, "error": f"{cc} cannot build the FMA loop: {r.stderr.strip()[-300:]}"}
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread", OMP_PLACES="cores")
        # A short calibration run sizes the loop to about `seconds` a repetition.
        probe = 2_000_000
        t0 = time.perf_counter()
        r = subprocess.run([exe, str(probe)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return {"isa": which, "error": f"the FMA loop failed: {r.stderr.strip()[-300:]}"}
        per_rep = max(1e-4, (time.perf_counter() - t0) / 5)
        iters = max(probe, int(probe * seconds / per_rep))
        r = subprocess.run([exe, str(iters)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return {"isa": which, "error": f"the FMA loop failed: {r.stderr.strip()[-300:]}"}
        gflops, ran = r.stdout.split()[:2]
        return {"isa": which, "threads": int(ran), "gflops": float(gflops)}


def onednn_isa(cmd):
    """The ISA oneDNN reports in the first lines of ONEDNN_VERBOSE (e.g. "Intel AVX2"), and its
    version, from running `cmd` (a short squall command that runs a oneDNN primitive); None
    where it prints none."""
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = r.stdout + r.stderr
    m = re.search(r"(?:onednn|dnnl)_verbose,info,cpu,isa:([^\n]+)", text)
    v = re.search(r"(?:onednn|dnnl)_verbose,info,oneDNN v([0-9.]+)", text)
    return {"isa": m.group(1).strip() if m else None, "version": v.group(1) if v else None}
