#!/usr/bin/env bash
# bundle:no-remote-shell: the bundle starts Open MPI on a machine with no remote shell at all
# (a GPU box or container with neither ssh nor rsh). Open MPI 4.1 starts a helper daemon (orted)
# for a singleton MPI_Init and for mpirun through its plm framework, whose rsh component looks
# for plm_rsh_agent ("ssh : rsh") and aborts the start when it finds neither; the bundle's
# env.sh must steer around that (scripts/bundle's header says how).
#
#   test_no_remote_shell.sh BUNDLE_SCRIPT BUILD_DIR SQUALL_BINARY [TARBALL]
#
# 1. bundles BUILD_DIR (or takes TARBALL, the bundle it made) and unpacks it under BUILD_DIR/bundle-norsh;
# 2. builds a PATH of symlinks to the few tools the wrappers need, with no ssh, rsh, qrsh or
#    llspawn (the agents the rsh component can look for), and runs `bin/squall info` and
#    `bin/mpirun -np 2 bin/squall info` in an environment holding only that PATH: both must
#    start and report their ranks;
# 3. env.sh's choice: without a remote shell it leaves out the rsh component; with an ssh on
#    PATH, or a plm the user chose, it sets nothing; under a Slurm allocation the slurm
#    component is still the one selected.
# Exits 77 (skipped) when a tool it needs is missing or squall is built without Open MPI.
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

work=$build/bundle-norsh
rm -rf "$work"
mkdir -p "$work/unpack" "$work/home" "$work/tmp"

# --- 1. bundle, unpack ---------------------------------------------------------------------------
if [[ -z $tarball ]]; then
  tarball=$work/squall-bundle.tar.gz
  "$bundle_script" --build "$build" --out "$tarball"
fi
[[ -f $tarball && $tarball -nt $squall_bin ]] || fail "$tarball is missing or older than $squall_bin"
tar -C "$work/unpack" -xzf "$tarball"
B=$work/unpack/squall-bundle
[[ -x $B/bin/mpirun ]] || skip "the bundle has no mpirun (squall built without Open MPI)"

# --- 2. a PATH without any remote shell -----------------------------------------------------------
# The agents Open MPI 4.1's rsh component may look for: plm_rsh_agent's list (read from this
# Open MPI, default "ssh : rsh"), and qrsh/llspawn (Grid Engine, LoadLeveler; looked for only
# when their variables are set, and env -i below sets none).
agents=$(ompi_info --param plm rsh --level 9 --parsable 2>/dev/null |
         sed -n 's/^mca:plm:rsh:param:plm_rsh_agent:value:"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
[[ -n $agents ]] || agents="ssh : rsh"
read -ra agent_words <<<"${agents//:/ }"
remote=(ssh rsh qrsh llspawn)
for w in "${agent_words[@]}"; do
  case " ${remote[*]} " in *" $(basename "$w") "*) ;; *) remote+=("$(basename "$w")") ;; esac
done
mkpath() {  # mkpath DIR TOOL...: DIR holds a symlink to each tool, found on this PATH
  local dir=$1 t; shift
  mkdir -p "$dir"
  for t in "$@"; do
    ln -sf "$(command -v "$t")" "$dir/$t" || fail "needs $t"
  done
}
tools=(sh dirname readlink env cat)
mkpath "$work/path" "${tools[@]}"
for r in "${remote[@]}"; do
  [[ ! -e $work/path/$r ]] || fail "the test's PATH holds $r"
done
clean_env=(env -i "PATH=$work/path" "HOME=$work/home" "TMPDIR=$work/tmp"
           OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
# The same lookup Open MPI makes, in that environment: nothing may be found.
for r in "${remote[@]}"; do
  if "${clean_env[@]}" sh -c 'command -v "$1"' sh "$r" >/dev/null 2>&1; then fail "$r is still found"; fi
done
echo "PATH: ${tools[*]} only; none of ${remote[*]} can be found (plm_rsh_agent: $agents)"

(cd / && "${clean_env[@]}" "$B/bin/squall" info) >"$work/single.log" 2>&1 ||
  { cat "$work/single.log"; fail "bin/squall info failed without a remote shell"; }
grep -q '1 rank(s)' "$work/single.log" || { cat "$work/single.log"; fail "bin/squall info: no '1 rank(s)'"; }
echo "ok: bin/squall info (singleton MPI_Init) without a remote shell"
(cd / && "${clean_env[@]}" "$B/bin/mpirun" --oversubscribe -np 2 "$B/bin/squall" info) >"$work/mpi.log" 2>&1 ||
  { cat "$work/mpi.log"; fail "bin/mpirun -np 2 bin/squall info failed without a remote shell"; }
grep -q '2 rank(s)' "$work/mpi.log" || { cat "$work/mpi.log"; fail "mpirun: no '2 rank(s)'"; }
echo "ok: bin/mpirun -np 2 bin/squall info without a remote shell"

# --- 3. what env.sh chooses ------------------------------------------------------------------------
# shellcheck disable=SC2016  # expanded by the inner sh
show_plm='echo "${OMPI_MCA_plm-unset}"'
got=$("${clean_env[@]}" "$B/bin/squall-env" sh -c "$show_plm")
[[ $got == "^rsh" ]] || fail "without a remote shell env.sh set OMPI_MCA_plm to '$got', not '^rsh'"
mkdir -p "$work/fake"
printf '#!/bin/sh\nexit 255\n' >"$work/fake/ssh"
chmod +x "$work/fake/ssh"
got=$("${clean_env[@]}" "PATH=$work/path:$work/fake" "$B/bin/squall-env" sh -c "$show_plm")
[[ $got == unset ]] || fail "with an ssh on PATH env.sh set OMPI_MCA_plm to '$got'"
got=$("${clean_env[@]}" OMPI_MCA_plm=isolated "$B/bin/squall-env" sh -c "$show_plm")
[[ $got == isolated ]] || fail "env.sh replaced the user's OMPI_MCA_plm=isolated by '$got'"
got=$("${clean_env[@]}" OMPI_MCA_plm_rsh_agent=/opt/site/launcher "$B/bin/squall-env" sh -c "$show_plm")
[[ $got == unset ]] || fail "with the user's own plm_rsh_agent env.sh set OMPI_MCA_plm to '$got'"
echo "ok: env.sh leaves out plm rsh only when no remote shell is found and the user chose nothing"

# Which plm mpirun selects: isolated on one host outside Slurm; under Slurm (an allocation of
# this one node, made up) still the slurm component, which starts daemons on other nodes with
# srun: -np 1 needs none, so no srun is run.
(cd / && "${clean_env[@]}" "$B/bin/mpirun" --mca plm_base_verbose 10 -np 1 "$B/bin/squall" info) >"$work/plm.log" 2>&1 ||
  { cat "$work/plm.log"; fail "mpirun -np 1 with plm_base_verbose failed"; }
grep -q 'Selected component \[isolated\]' "$work/plm.log" ||
  { cat "$work/plm.log"; fail "outside Slurm mpirun did not select plm isolated"; }
host=$(uname -n)
(cd / && "${clean_env[@]}" SLURM_JOBID=1 SLURM_JOB_ID=1 SLURM_NODELIST="$host" SLURM_JOB_NODELIST="$host" \
   SLURM_TASKS_PER_NODE=2 SLURM_NNODES=1 SLURM_JOB_NUM_NODES=1 SLURM_CPUS_ON_NODE=2 \
   "$B/bin/mpirun" --mca plm_base_verbose 10 -np 1 "$B/bin/squall" info) >"$work/slurm.log" 2>&1 || true
grep -q 'Selected component \[slurm\]' "$work/slurm.log" ||
  { cat "$work/slurm.log"; fail "in a Slurm allocation mpirun did not select plm slurm"; }
echo "ok: mpirun selects plm isolated on one host, and still plm slurm in a Slurm allocation"
echo "PASS"
