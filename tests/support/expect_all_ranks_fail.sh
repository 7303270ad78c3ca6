#!/bin/sh
# Runs a test binary on NP ranks and passes only if every rank exits non-zero.
# usage: expect_all_ranks_fail.sh MPIEXEC NP BINARY [ARGS...]
mpiexec=$1; np=$2; shift 2
out=$("$mpiexec" -n "$np" --oversubscribe sh -c '"$@" >/dev/null 2>&1; echo "rank ${OMPI_COMM_WORLD_RANK:-?} exit $?"' sh "$@")
echo "$out"
total=$(echo "$out" | grep -c '^rank .* exit ')
failed=$(echo "$out" | grep -c '^rank .* exit [1-9]')
[ "$total" -eq "$np" ] && [ "$failed" -eq "$np" ]
