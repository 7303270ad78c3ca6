#!/usr/bin/env bash
# bundle:relocatable: scripts/bundle makes a tarball that runs from wherever it is unpacked,
# using only its own libraries, Open MPI plugins and help files (plus glibc and the GPU stack).
#
#   test_bundle.sh BUNDLE_SCRIPT BUILD_DIR SQUALL_BINARY [TARBALL]
#
# 1. bundles BUILD_DIR (or takes TARBALL, the bundle it made), unpacks it under
#    BUILD_DIR/bundle-test and moves it to another name;
# 2. ldd, in the bundle's environment, on every program, library and plugin: each dependency
#    resolves inside the bundle, or is glibc's or the GPU stack's;
# 3. `bin/squall info` and `bin/mpirun -np 2 bin/squall info` under LD_DEBUG: every object
#    the loader tries or loads (plugins included) is the bundle's, or glibc's;
# 4. the same two runs in a mount namespace where Debian's Open MPI, PMIx, HDF5, hwloc and UCX
#    directories are hidden and every system copy of a bundled library reads as empty.
# Exits 77 (skipped) when a tool it needs is missing, or, after 1-3 passed, when it may not
# make a mount namespace (unshare -m) for 4.
set -euo pipefail

[[ $# -eq 3 || $# -eq 4 ]] || { echo "usage: $0 BUNDLE_SCRIPT BUILD_DIR SQUALL_BINARY [TARBALL]" >&2; exit 2; }
bundle_script=$1
build=$(cd "$2" && pwd -P)
squall_bin=$3
tarball=${4:-}  # a bundle scripts/bundle already made of BUILD_DIR (the bundle:make fixture)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in ldd readelf tar ompi_info; do
  command -v "$tool" >/dev/null || skip "needs $tool"
done
[[ $(readlink -f "$squall_bin") == "$(readlink -f "$build/bin/squall")" ]] ||
  fail "scripts/bundle takes BUILD_DIR/bin/squall, but the squall target is $squall_bin"

work=$build/bundle-test
rm -rf "$work"
mkdir -p "$work/unpack"

# --- 1. bundle, unpack, move ---------------------------------------------------------------------
if [[ -z $tarball ]]; then
  tarball=$work/squall-bundle.tar.gz
  "$bundle_script" --build "$build" --out "$tarball"
fi
[[ -f $tarball && $tarball -nt $squall_bin ]] || fail "$tarball is missing or older than $squall_bin"
tar -C "$work/unpack" -xzf "$tarball"
[[ -x $work/unpack/squall-bundle/bin/squall ]] || fail "no squall-bundle/bin/squall in the tarball"
B=$work/moved-$$
mv "$work/unpack/squall-bundle" "$B"
grep -q '^commit: ' "$B/MANIFEST" || fail "MANIFEST names no commit"
echo "bundle unpacked and moved to $B"

# Libraries the bundle leaves to the machine (keep in step with scripts/bundle).
allowed_outside() {
  case $(basename "$1") in
    linux-vdso.so*|linux-gate.so*|ld-linux*|libc.so*|libm.so*|libmvec.so*|libdl.so*|\
    libpthread.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|libnss_*|libthread_db.so*|\
    libBrokenLocale.so*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudnn*|libcublas*|libnccl*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}

# --- 2. ldd on everything, in the bundle's environment ---------------------------------------------
elfs=()
while IFS= read -r -d '' f; do
  [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == '177ELF' ]] && elfs+=("$f")
done < <(find "$B/libexec" "$B/lib" -type f -print0)
# Each line: FILE<TAB>ldd's line for it. Several ldd run at once into one pipe: sed -u writes each
# line in one write (atomic below PIPE_BUF), so their lines interleave but are never cut.
# shellcheck disable=SC2016  # expanded by the inner sh
mapfile -t bad < <(printf '%s\0' "${elfs[@]}" |
  xargs -0 -n 16 -P 4 "$B/bin/squall-env" sh -c 'for f; do ldd "$f" 2>/dev/null | sed -u "s|^|$f	|"; done' sh |
  awk -F'\t' -v b="$B/" '{ split($3, w, " ") }
                          w[2] == "=>" && index(w[3], b) != 1 { print substr($1, length(b) + 1) ": " w[1] " => " w[3] }' |
  while IFS= read -r line; do
    name=${line#*: }; name=${name%% *}
    allowed_outside "$name" || echo "$line"
  done || true)
checked=${#elfs[@]}
((${#bad[@]} == 0)) || fail "$(printf 'resolves outside the bundle: %s\n' "${bad[@]}")"
((checked > 50)) || fail "only $checked ELF files in the bundle"
echo "ldd: $checked programs, libraries and plugins resolve inside the bundle (or glibc/GPU)"

# --- 3. what the loader really opens -------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_both() {  # run_both LOGPREFIX [LD_DEBUG_OUTPUT]: squall info, then mpirun -np 2 squall info, from another dir
  local trace=()
  [[ -z ${2:-} ]] || trace=(env "LD_DEBUG=files,libs" "LD_DEBUG_OUTPUT=$2")
  (cd / && "${trace[@]}" "$B/bin/squall" info) >"$1.single" 2>&1 || { cat "$1.single"; fail "bin/squall info failed"; }
  grep -q '1 rank(s)' "$1.single" || { cat "$1.single"; fail "bin/squall info: no '1 rank(s)'"; }
  (cd / && "${trace[@]}" "$B/bin/mpirun" --oversubscribe -np 2 "$B/bin/squall" info) >"$1.mpi" 2>&1 ||
    { cat "$1.mpi"; fail "bin/mpirun -np 2 bin/squall info failed"; }
  grep -q '2 rank(s)' "$1.mpi" || { cat "$1.mpi"; fail "mpirun: no '2 rank(s)'"; }
}
mkdir -p "$work/ld"
run_both "$work/ld-run" "$work/ld/ld"
mapfile -t opened < <(cat "$work"/ld/ld.* |
  grep -o 'trying file=[^ ]*\|calling init: [^ ]*\|file=/[^ ]*' | sed 's/^[^=:]*[=:] *//' | sort -u)
bad=()
for p in "${opened[@]}"; do
  [[ $p == "$B"/* ]] && continue
  allowed_outside "$p" && continue
  bad+=("$p")
done
((${#bad[@]} == 0)) || fail "$(printf 'loaded from outside the bundle: %s\n' "${bad[@]}")"
for want in lib/libmpi.so lib/libdnnl.so lib/libhdf5 lib/openmpi/mca_ lib/libpmix.so lib/pmix/; do
  printf '%s\n' "${opened[@]}" | grep "^$B/$want" >/dev/null || fail "the runs never loaded $want from the bundle"
done
echo "LD_DEBUG: ${#opened[@]} objects tried or loaded, none outside the bundle but glibc's"

# --- 4. with the system's copies hidden -------------------------------------------------------------
if ! unshare -m --propagation private true 2>/dev/null; then
  skip "checks 1-3 passed; the hidden-libraries run needs a mount namespace (unshare -m), not permitted here"
fi
empty=$work/empty
mkdir -p "$empty"
hide=()
for d in /usr/lib/x86_64-linux-gnu/{openmpi,pmix2,hdf5,hwloc,ucx} /usr/share/openmpi /etc/openmpi; do
  [[ -d $d ]] && hide+=("$d")
done
hide_files=()
for so in "$B"/lib/*.so*; do
  for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    [[ -e $d/$(basename "$so") ]] && hide_files+=("$(readlink -f "$d/$(basename "$so")")")
  done
done
for p in /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info; do
  [[ -e $p ]] && hide_files+=("$(readlink -f "$p")")
done
mapfile -t hide_files < <(printf '%s\n' "${hide_files[@]}" | sort -u)
export B empty work
export -f run_both fail
# shellcheck disable=SC2016  # expanded by the inner bash
unshare -m --propagation private bash -euo pipefail -c '
  # Files first (some lie under the directories), then the directories.
  for p in "$@"; do
    if [[ $p == --dirs ]]; then dirs=1; continue; fi
    if [[ -n ${dirs:-} ]]; then mount --bind "$empty" "$p"; else mount --bind /dev/null "$p"; fi
  done
  if ompi_info --version >/dev/null 2>&1; then fail "the system Open MPI still runs: hiding failed"; fi
  run_both "$work/hidden-run"
' hide "${hide_files[@]}" --dirs "${hide[@]}"
echo "hidden: ${#hide[@]} directories and ${#hide_files[@]} system libraries/programs hidden; both runs pass"
echo "PASS"
