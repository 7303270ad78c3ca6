#!/usr/bin/env bash
# The site examples' placeholders (docs/jobs.md, "Edit these lines for your site"): left as
# they are, each fails loudly, naming the line to edit; edited, each gets past its checks.
#   - perlmutter.sbatch and frontier.sbatch, their bodies run by bash with the SLURM_*
#     variables a job would have: the placeholder account (in lower case, as Slurm gives it)
#     exits 2 naming the #SBATCH --account line, no CPUs per task exits 2 naming the
#     --cpus-per-task line; an edited copy launches train.sbatch (its dry run)
#   - the same scripts through sbatch's own parser (an offline slurm.conf: nothing is
#     submitted): unedited, sbatch refuses --cpus-per-task; edited, it reads the site's values
#   - summit.lsf: the placeholder project and cores per rank exit 2 naming their lines; edited,
#     jsrun gets the cores
#   - train.sbatch and summit.lsf add a checkpoint every SQUALL_CHECKPOINT_MINUTES (30) minutes
#     unless the config or the arguments set an interval (0 included)
#   - with a real Slurm (tests/cluster/cluster), a copy of perlmutter.sbatch with the account
#     left unedited runs as a job and exits 2 with the message
# Skipped (77, saying so) after the offline checks where sbatch or the test cluster is missing.
#   test_site.sh REPO_ROOT
set -euo pipefail
root=$(cd "$1" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/squall-site.XXXXXX")
cluster_name=''
cleanup() {
  [[ -n $cluster_name ]] && "$root/tests/cluster/cluster" down "$cluster_name" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
: >"$work/c.toml"
printf '#!/bin/sh\nexit 0\n' >"$work/squall"
chmod +x "$work/squall"

# run SCRIPT VAR=VALUE...: the script's body under bash in $work, as Slurm or LSF would start
# it; sets $out (stdout and stderr) and $rc.
run() {
  local script=$1; shift
  rc=0
  out=$(cd "$work" && env -u SLURM_JOB_ACCOUNT -u SLURM_CPUS_PER_TASK -u LSB_PROJECT_NAME -u SQUALL_CPUS_PER_RANK \
        SQUALL_BIN="$work/squall" SQUALL_JOBSCRIPTS="$root/jobscripts" "$@" timeout 60 bash "$script" c.toml 2>&1) || rc=$?
}
# names_line FILE PATTERN: the message says "line N:" and line N of FILE matches PATTERN.
names_line() {
  local n
  n=$(sed -n 's/.*: line \([0-9][0-9]*\): .*/\1/p' <<<"$out" | head -n 1)
  [[ -n $n ]] || fail "$(basename "$1"): the message names no line: $out"
  sed -n "${n}p" "$1" | grep -qE -- "$2" || fail "$(basename "$1"): line $n is '$(sed -n "${n}p" "$1")', not the line to edit: $out"
}
# placeholders FILE: its lines (directives and code, not comments) that still hold EDIT_ME.
placeholders() { grep -nE '^(#SBATCH|#BSUB|[^#])' "$1" | grep EDIT_ME; }
job=(SLURM_JOB_ID=77 SLURM_JOB_NODELIST=n1 SLURM_JOB_NUM_NODES=1 SQUALL_DRY_RUN=1)

# ---- Slurm's site examples, run by bash -----------------------------------------------------
for site in perlmutter:32:4 frontier:7:8; do
  name=${site%%:*} cpus=$(cut -d: -f2 <<<"$site") ranks=${site##*:}
  script=$root/jobscripts/slurm/$name.sbatch
  grep -q '^#SBATCH --account=EDIT_ME_account$' "$script" || fail "$name.sbatch: no placeholder account line"
  grep -q '^#SBATCH --cpus-per-task=EDIT_ME_cpus_per_rank$' "$script" || fail "$name.sbatch: no placeholder --cpus-per-task line"
  # The account as the unedited line makes it (Slurm lower-cases it: SLURM_JOB_ACCOUNT=edit_me_account).
  run "$script" "${job[@]}" SLURM_JOB_ACCOUNT=edit_me_account SLURM_CPUS_PER_TASK="$cpus"
  [[ $rc -eq 2 ]] || fail "$name.sbatch with the placeholder account exits $rc, not 2: $out"
  grep -q "^$name.sbatch: line [0-9]*: #SBATCH --account is still the placeholder" <<<"$out" || fail "$name.sbatch: message: $out"
  names_line "$script" '^#SBATCH --account=EDIT_ME_account$'
  grep -q '^srun' <<<"$out" && fail "$name.sbatch launched with the placeholder account: $out"
  # No CPUs per task (sbatch refuses the unedited line: below; this is a script run without it).
  run "$script" "${job[@]}" SLURM_JOB_ACCOUNT=m1234
  [[ $rc -eq 2 ]] || fail "$name.sbatch without --cpus-per-task exits $rc, not 2: $out"
  grep -q "^$name.sbatch: line [0-9]*: the job has no CPUs per rank" <<<"$out" || fail "$name.sbatch: message: $out"
  names_line "$script" '^#SBATCH --cpus-per-task='
  # Edited: past the checks, train.sbatch's dry run launches the ranks with the site's binding.
  sed -e 's/^#SBATCH --account=EDIT_ME_account$/#SBATCH --account=m1234/' \
      -e "s/^#SBATCH --cpus-per-task=EDIT_ME_cpus_per_rank\$/#SBATCH --cpus-per-task=$cpus/" "$script" >"$work/$name.sbatch"
  placeholders "$work/$name.sbatch" && fail "$name.sbatch: a placeholder the test does not edit: $(placeholders "$work/$name.sbatch")"
  run "$work/$name.sbatch" "${job[@]}" SLURM_JOB_ACCOUNT=m1234 SLURM_CPUS_PER_TASK="$cpus" SLURM_NTASKS="$ranks"
  [[ $rc -eq 0 ]] || fail "the edited $name.sbatch exits $rc: $out"
  grep -q "^srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=[a-z]* --gpus-per-task=1 --gpu-bind=closest $work/squall train --config c.toml --resume auto" <<<"$out" ||
    fail "the edited $name.sbatch did not launch squall: $out"
  echo "ok: $name.sbatch: the placeholder account and no CPUs per task exit 2 naming their lines; edited, it launches"
done

# ---- LSF's site example ---------------------------------------------------------------------
script=$root/jobscripts/lsf/summit.lsf
printf 'batch1\nh1\nh1\n' >"$work/hosts"
lsf=(LSB_JOBID=77 LSB_DJOB_HOSTFILE="$work/hosts" SQUALL_DRY_RUN=1 SQUALL_CONFIG=c.toml)
grep -q '^#BSUB -P EDIT_ME_project$' "$script" || fail "summit.lsf: no placeholder project line"
run "$script" "${lsf[@]}" LSB_PROJECT_NAME=EDIT_ME_project SQUALL_CPUS_PER_RANK=7
[[ $rc -eq 2 ]] && grep -q "^summit.lsf: line [0-9]*: '#BSUB -P EDIT_ME_project' is still the placeholder" <<<"$out" ||
  fail "summit.lsf with the placeholder project (rc $rc): $out"
names_line "$script" '^#BSUB -P EDIT_ME_project$'
run "$script" "${lsf[@]}" LSB_PROJECT_NAME=abc123
[[ $rc -eq 2 ]] && grep -q "^summit.lsf: line [0-9]*: cpus_per_rank is 'EDIT_ME_cores_per_rank', not a number of cores" <<<"$out" ||
  fail "summit.lsf with the placeholder cores per rank (rc $rc): $out"
names_line "$script" '^cpus_per_rank='
sed -e 's/^#BSUB -P EDIT_ME_project$/#BSUB -P abc123/' -e 's/EDIT_ME_cores_per_rank/7/' "$script" >"$work/summit.lsf"
placeholders "$work/summit.lsf" && fail "summit.lsf: a placeholder the test does not edit: $(placeholders "$work/summit.lsf")"
run "$work/summit.lsf" "${lsf[@]}" LSB_PROJECT_NAME=abc123
[[ $rc -eq 0 ]] && grep -q "^jsrun -n 6 -r 6 -a 1 -c 7 -g 1 --bind packed:7 --smpiargs=-gpu $work/squall train" <<<"$out" ||
  fail "the edited summit.lsf (rc $rc): $out"
echo "ok: summit.lsf: the placeholder project and cores per rank exit 2 naming their lines; edited, jsrun gets 7 cores a rank"

# ---- periodic checkpoints: the job scripts' default, and what turns it off -----------------------
# ckpt SCRIPT CONFIG_TEXT VAR=VALUE... -- ARGS...: the --set checkpoint.* the launch got ("" none).
ckpt() {
  local script=$1 text=$2 vars=() args=()
  shift 2
  while [[ $# -gt 0 && $1 != -- ]]; do vars+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  args=("$@")
  printf '%s\n' "$text" >"$work/k.toml"
  rc=0
  if [[ $script == lsf ]]; then
    out=$(cd "$work" && env "${lsf[@]}" SQUALL_CONFIG=k.toml SQUALL_CPUS_PER_RANK=7 SQUALL_ARGS="${args[*]}" \
          SQUALL_BIN="$work/squall" "${vars[@]}" timeout 60 bash "$root/jobscripts/lsf/summit.lsf" 2>&1) || rc=$?
    got=$(grep '^jsrun .* train ' <<<"$out" | grep -o -- '--set checkpoint\.every_minutes=[0-9.]*' || true)
  else
    out=$(cd "$work" && env "${job[@]}" SQUALL_BIN="$work/squall" "${vars[@]}" \
          timeout 60 bash "$root/jobscripts/slurm/train.sbatch" k.toml "${args[@]}" 2>&1) || rc=$?
    got=$(grep '^srun .* train ' <<<"$out" | grep -o -- '--set checkpoint\.every_minutes=[0-9.]*' || true)
  fi
  [[ $rc -eq 0 ]] || fail "$script (rc $rc): $out"
}
for script in sbatch lsf; do
  ckpt "$script" ''
  [[ $got == "--set checkpoint.every_minutes=30" ]] || fail "$script: no checkpoint every 30 minutes by default: $out"
  ckpt "$script" '' SQUALL_CHECKPOINT_MINUTES=12.5
  [[ $got == "--set checkpoint.every_minutes=12.5" ]] || fail "$script: SQUALL_CHECKPOINT_MINUTES=12.5: $out"
  ckpt "$script" '' SQUALL_CHECKPOINT_MINUTES=0
  [[ -z $got ]] || fail "$script: SQUALL_CHECKPOINT_MINUTES=0 still checkpoints: $out"
  # The config's or the arguments' own interval, 0 included, wins; a comment or log_every_steps does not count.
  ckpt "$script" $'[checkpoint]\nevery_steps = 500'
  [[ -z $got ]] || fail "$script: the config's checkpoint.every_steps was overridden: $out"
  ckpt "$script" $'[checkpoint]\nevery_minutes = 0   # none'
  [[ -z $got ]] || fail "$script: the config's checkpoint.every_minutes = 0 was overridden: $out"
  ckpt "$script" $'[train]\nlog_every_steps = 10\n# every_minutes = 5'
  [[ $got == "--set checkpoint.every_minutes=30" ]] || fail "$script: log_every_steps or a comment taken for an interval: $out"
  ckpt "$script" '' -- --set checkpoint.every_steps=100
  [[ -z $got ]] || fail "$script: --set checkpoint.every_steps was overridden: $out"
done
rc=0
out=$(cd "$work" && env "${job[@]}" SQUALL_BIN="$work/squall" SQUALL_CHECKPOINT_MINUTES=soon \
      timeout 60 bash "$root/jobscripts/slurm/train.sbatch" c.toml 2>&1) || rc=$?
[[ $rc -eq 2 ]] && grep -q "SQUALL_CHECKPOINT_MINUTES must be a number of minutes" <<<"$out" || fail "SQUALL_CHECKPOINT_MINUTES=soon (rc $rc): $out"
echo "ok: train.sbatch and summit.lsf checkpoint every 30 minutes unless SQUALL_CHECKPOINT_MINUTES, the config or the arguments say otherwise"

# ---- sbatch's own parser ----------------------------------------------------------------------
if ! command -v sbatch >/dev/null; then
  echo "SKIP: sbatch is not installed (scripts/install-deps installs slurm-client): the #SBATCH lines were not parsed by Slurm"
  exit 77
fi
# A slurm.conf whose controller nobody runs: sbatch parses the script, then cannot submit.
printf 'ClusterName=offline\nSlurmctldHost=localhost\nSlurmctldPort=1\nNodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n' \
  >"$work/slurm.conf"
for name in perlmutter frontier; do
  rc=0
  out=$(SLURM_CONF=$work/slurm.conf timeout 60 sbatch --test-only "$root/jobscripts/slurm/$name.sbatch" 2>&1) || rc=$?
  [[ $rc -ne 0 ]] && grep -qF 'Invalid numeric value "EDIT_ME_cpus_per_rank" for --cpus-per-task' <<<"$out" ||
    fail "sbatch accepted the unedited $name.sbatch (rc $rc): $out"
  # The edited copy: sbatch -v lists the options it parsed before it looks for the controller;
  # read up to that list's end, then stop it.
  parsed=''
  exec {sb}< <(SLURM_CONF=$work/slurm.conf exec timeout 60 sbatch -v --test-only "$work/$name.sbatch" 2>&1)
  sb_pid=$!
  while IFS= read -r line <&"$sb"; do
    parsed+="$line"$'\n'
    [[ $line == *"end of defined options"* ]] && break
  done
  kill "$sb_pid" 2>/dev/null || true
  exec {sb}<&-
  grep -q "Invalid" <<<"$parsed" && fail "sbatch refused the edited $name.sbatch: $parsed"
  grep -qE 'account +: m1234' <<<"$parsed" && grep -qE 'cpus-per-task +: [0-9]+' <<<"$parsed" ||
    fail "sbatch did not read the edited $name.sbatch's account and CPUs per task: $parsed"
done
echo "ok: sbatch refuses the unedited --cpus-per-task of perlmutter.sbatch and frontier.sbatch, and parses the edited ones"

# ---- a real Slurm: the job of an unedited account -------------------------------------------
cluster=$root/tests/cluster/cluster
command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
  { echo "SKIP: slurmctld/slurmd are not installed: the account check did not run under a real Slurm"; exit 77; }
"$cluster" check >/dev/null 2>&1 || { echo "SKIP: the test cluster cannot run here ($("$cluster" check 2>&1 | tail -n 1))"; exit 77; }
cluster_name=ssite
"$cluster" down "$cluster_name" >/dev/null 2>&1 || true
"$cluster" up "$cluster_name" --nodes 1 --slurm >/dev/null
# perlmutter.sbatch as the test cluster can run it: CPUs per task edited, the GPU lines out, the
# account as it was.
sed -e 's/^#SBATCH --cpus-per-task=EDIT_ME_cpus_per_rank$/#SBATCH --cpus-per-task=1/' \
    -e '/^#SBATCH --\(constraint\|qos\|gpus-per-node\|ntasks-per-node\)=/d' \
    "$root/jobscripts/slurm/perlmutter.sbatch" >"$work/perlmutter-cpu.sbatch"
out=$(timeout 60 "$cluster" sbatch "$cluster_name" -o "$work/job-%j.out" "$work/perlmutter-cpu.sbatch" "$work/c.toml") ||
  fail "sbatch failed: $out"
jobid=${out##* }
for _ in $(seq 1 300); do
  [[ -z $("$cluster" squeue "$cluster_name" -h -j "$jobid" -o %T 2>/dev/null || true) ]] && break
  sleep 0.2
done
log=$work/job-$jobid.out
line=$(grep -n -m1 '^#SBATCH --account=' "$work/perlmutter-cpu.sbatch" | cut -d: -f1)
grep -q "^perlmutter.sbatch: line $line: #SBATCH --account is still the placeholder (the job runs under account 'edit_me_account')" "$log" ||
  fail "the job's output: $(cat "$log" 2>&1)"
"$cluster" scontrol "$cluster_name" show job "$jobid" | grep -q 'ExitCode=2:0' ||
  fail "job $jobid did not exit 2: $("$cluster" scontrol "$cluster_name" show job "$jobid")"
echo "ok: under Slurm, perlmutter.sbatch with the placeholder account ends with exit code 2 and says which line to edit"
