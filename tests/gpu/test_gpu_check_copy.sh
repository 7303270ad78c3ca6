#!/usr/bin/env bash
# bundle:gpu-check-copy: the lease calls of docs/gpu.md, as written there, from a copy of the
# project in a git-ignored folder of another repository's working tree (a lease carries that
# folder, `carry: ["squall"]`, and runs `cd squall && scripts/gpu-check ...`), rehearsed.
#   test_gpu_check_copy.sh SOURCE_DIR BUNDLE_TGZ DATA_DIR
# A scratch repository under TMPDIR ignores squall/; squall/ gets the project's files as a call
# would send them (tracked, or untracked and not ignored) and a lease folder made from the
# bundle:make fixture's tarball (squall and Open MPI, recompressed with xz; the test programs
# and the 60k set are left out for speed: their steps skip or read DATA_DIR). From the scratch
# repository's root: part 1 rehearsed as docs/gpu.md writes it, then part 2 right after, its
# budget worked out from part 1's state. Checks: what the carry sends stays under 64 MiB; both
# calls end with the steps that need no GPU, PyTorch or test programs ok, --out holds 2 files;
# the summary names the commit of the project (from the lease's README.txt: the copy is no
# checkout, and git would answer with the scratch repository's); part 2's budget is "auto";
# runs/ holds each squall run's log and summary.
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 SOURCE_DIR BUNDLE_TGZ DATA_DIR" >&2; exit 2; }
src=$(cd "$1" && pwd -P) bundle=$2 data=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -f $bundle ]] || { echo "SKIP: no bundle $bundle (bundle:make)"; exit 77; }
[[ -f $data/t10k-images-idx3-ubyte.gz ]] || { echo "SKIP: no Fashion-MNIST in $data"; exit 77; }
command -v git >/dev/null && command -v xz >/dev/null || { echo "SKIP: needs git and xz"; exit 77; }
python3 -c 'import lzma' 2>/dev/null || { echo "SKIP: python3 has no lzma module"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-gpu-copy.XXXXXX")
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT

# --- the other repository, the copy, the lease folder ----------------------------------------------
outer=$work/other
mkdir -p "$outer/squall"
git -C "$outer" init -q
echo "another project" >"$outer/README"
echo "squall/" >"$outer/.gitignore"
git -C "$outer" add README .gitignore
git -C "$outer" -c user.name=test -c user.email=test@example.org commit -q -m "another project"
outer_commit=$(git -C "$outer" rev-parse --short HEAD)
if git -C "$src" rev-parse --show-toplevel >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
     [[ -f $f ]] && printf '%s\0' "$f"; done | tar --null -T - -cf -) | tar -C "$outer/squall" -xf -
  commit=$(git -C "$src" rev-parse HEAD)
else  # a source tree that is no checkout: its files but the build folders
  tar -C "$src" --exclude='./build*' --exclude=./lease -cf - . | tar -C "$outer/squall" -xf -
  commit=0000000000000000000000000000000000000000
fi
L=$outer/squall/lease
mkdir -p "$L/data/fashion-mnist-10k"
gzip -dc "$bundle" | xz -0 -T2 >"$L/squall-bundle.tar.xz"
cp "$data"/t10k-images-idx3-ubyte.gz "$data"/t10k-labels-idx1-ubyte.gz "$L/data/fashion-mnist-10k/"
printf 'squall lease folder (made by test_gpu_check_copy.sh from the bundle:make tarball)\ncommit: %s\n' "$commit" >"$L/README.txt"
[[ -z $(git -C "$outer" status --porcelain) ]] || fail "the scratch repository does not ignore squall/"
sent=$(du -sb "$outer/squall" | cut -f1)
((sent < 64 * 1048576)) || fail "the copy and its lease folder hold $((sent >> 20)) MiB, over a lease's 64"
echo "ok: the copy in the other repository's ignored folder squall/: $((sent >> 10)) KiB to carry"

# --- the calls, from the other repository's root, as docs/gpu.md writes them ------------------------
export SQUALL_GPU_CHECK_STATE=$work/state OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
call() {  # call PART: the documented rehearsal of part PART into $work/outPART; prints its exit status
  local OUT=$work/out$1
  mkdir -p "$OUT"
  (cd "$outer" && cd squall && scripts/gpu-check --rehearse --lease lease --part "$1" --out "$OUT") \
    >"$work/call$1.log" 2>&1 && echo 0 || echo $?
}
field() { grep -F "| $2 | " "$work/out$1/summary.md" | head -1 | awk -F'|' '{ gsub(/^ +| +$/, "", $3); print $3 }'; }
for part in 1 2; do
  rc=$(call "$part")
  [[ $rc == 0 ]] || { tail -30 "$work/call$part.log"; fail "part $part from the copy exited $rc, not 0"; }
  [[ $(find "$work/out$part" -type f | wc -l) == 2 ]] || fail "part $part's --out holds $(find "$work/out$part" -type f | wc -l) files, not 2"
  grep -q "commit ${commit:0:7} (the bundle's)" "$work/out$part/summary.md" ||
    { head -3 "$work/out$part/summary.md"; fail "part $part's summary does not name the project's commit ${commit:0:7}"; }
  grep -q "commit $outer_commit" "$work/out$part/summary.md" && fail "part $part names the scratch repository's commit"
done
for s in setup mpi info train:2ranks train:graphs allreduce; do
  [[ $(field 1 "$s") == ok ]] || { cat "$work/out1/summary.md"; fail "part 1's $s is '$(field 1 "$s")' from the copy"; }
done
for s in setup mpi lenet5:accuracy; do
  [[ $(field 2 "$s") == ok ]] || { cat "$work/out2/summary.md"; fail "part 2's $s is '$(field 2 "$s")' from the copy"; }
done
grep -q 'budget (auto: part 1 began [0-9]* s ago on this machine' "$work/out2/summary.md" ||
  { head -3 "$work/out2/summary.md"; fail "part 2's budget was not worked out from part 1's state"; }
list=$(tar -tzf "$work/out1/gpu-check-part1.tar.gz")
for f in runs/train-2ranks.log runs/train-2ranks-summary.json runs/train-graphs.log env.txt logs/mpi.log; do
  grep -qx "gpu-check-part1/$f" <<<"$list" || fail "part 1's tarball has no $f"
done
grep -qx "gpu-check-part2/runs/lenet5.log" <(tar -tzf "$work/out2/gpu-check-part2.tar.gz") || fail "part 2's tarball has no runs/lenet5.log"
echo "ok: parts 1 and 2 rehearsed from the copy as docs/gpu.md writes them (commit ${commit:0:7}, part 2's budget auto)"
echo PASS
