#!/usr/bin/env bash
# bench/cuda_coverage.sh: how much of cuda/ runs on a machine without a GPU, and what only a
# GPU can check (issue 19, bench/RESULTS.md "What of cuda/ runs without a GPU").
#
#   bench/cuda_coverage.sh [BUILD_DIR]      (default: build-coverage; needs the CUDA toolkit)
#
# Builds the CUDA backend with its host code instrumented for gcov (-DSQUALL_CUDA_COVERAGE=ON:
# squall_cuda's .cpp files and the host side of its .cu files, and the kernel bodies' host
# copies in the cuda-host kernel test), runs what a CI machine runs that reaches cuda/ (the
# cuda-host tests, the gpu tests, which find no device and skip, and `squall info`), and
# prints, per file of cuda/, the lines gcov counts as executable and those that ran. Device
# code has no host lines (a __global__ kernel's body, the shuffles of block_sum): it is in
# neither column, and the kernel bodies it calls are measured through the host emulator.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-coverage}
command -v gcov >/dev/null || { echo "cuda_coverage: needs gcov" >&2; exit 2; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSQUALL_CUDA=ON -DSQUALL_CUDA_COVERAGE=ON \
  -DCMAKE_CUDA_ARCHITECTURES=80 "${launcher[@]}" >/dev/null
jobs=$("$root/scripts/ncpus")
cmake --build "$build" -j "$jobs" --target squall squall_cuda_host_kernel_tests squall_cuda_host_plans_tests \
  squall_gpu_tests >/dev/null
find "$build" -name '*.gcda' -delete
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "$build" && ctest -L 'cuda-host|gpu' -E 'gpu:learners-mpi|gpu:lenet5' --output-on-failure >"$build/coverage-ctest.log" 2>&1) ||
  { tail -20 "$build/coverage-ctest.log"; echo "cuda_coverage: a test failed" >&2; exit 1; }
"$build/bin/squall" info >/dev/null 2>&1 || true
grep -E 'tests passed|Total Test' "$build/coverage-ctest.log" >&2 || true

# gcov per object, in a scratch folder; then every cuda/ file's lines merged over objects
# (a header compiled into several objects counts a line as run when any of them ran it).
gcov_dir=$(mktemp -d "${TMPDIR:-/tmp}/squall-gcov.XXXXXX")
trap 'rm -rf "$gcov_dir"' EXIT
# gcov runs where the object was compiled (the target's binary folder), so that the relative
# source names ccache's base_dir leaves resolve; -t writes the annotated sources to stdout.
n=0
while IFS= read -r -d '' gcda; do
  n=$((n + 1))
  (cd "${gcda%%/CMakeFiles/*}" && gcov -t -o "$(dirname "$gcda")" "$gcda" 2>/dev/null) >"$gcov_dir/$n.gcov" || true
done < <(find "$build/cuda" "$build/tests" -name '*.gcda' -print0)
python3 - "$gcov_dir" "$root" <<'PY'
import collections, glob, os, sys
gcov_dir, root = sys.argv[1], os.path.realpath(sys.argv[2])
lines = collections.defaultdict(dict)  # file -> line -> ran (bool)
for path in glob.glob(os.path.join(gcov_dir, "*.gcov")):
    with open(path, errors="replace") as f:
        source, named = None, None
        for raw in f:
            parts = raw.split(":", 2)
            if len(parts) < 3:
                continue
            count, number = parts[0].strip(), parts[1].strip()
            if number == "0":
                key, value = parts[2].split(":", 1)[0], parts[2].split(":", 1)[-1].strip()
                if key == "Source":
                    named = value
                elif key == "Graph" and named is not None:
                    # A relative source name (ccache's base_dir) is relative to the folder the
                    # object was compiled in: the CMake target's binary folder.
                    compiled_in = value.split("/CMakeFiles/")[0]
                    source = os.path.realpath(os.path.join(compiled_in, named))
                continue
            if source is None or count == "-":
                continue
            rel = os.path.relpath(source, root)
            if not rel.startswith("cuda/"):
                continue
            ran = not count.startswith("#") and not count.startswith("=")
            line = int(number)
            lines[rel][line] = lines[rel].get(line, False) or ran
rows, total, done = [], 0, 0
for rel in sorted(lines):
    n = len(lines[rel]); r = sum(lines[rel].values())
    total += n; done += r
    rows.append((rel, n, r))
print("| file | host lines | run without a GPU | share |")
print("|---|---:|---:|---:|")
for rel, n, r in rows:
    print(f"| `{rel}` | {n} | {r} | {100.0 * r / n:.0f}% |")
print(f"| **cuda/ in all** | **{total}** | **{done}** | **{100.0 * done / max(total, 1):.0f}%** |")
missing = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "cuda", "*"))
                 if os.path.relpath(p, root) not in lines and not p.endswith("CMakeLists.txt"))
if missing:
    print("\nNo host lines seen (declarations only, or device code only): " + ", ".join(f"`{m}`" for m in missing))
PY
