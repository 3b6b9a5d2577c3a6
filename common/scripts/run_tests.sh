#!/usr/bin/env bash
# run_tests.sh TEST_BINARY [FILTER] — run the Criterion suite (unit + multi-rank scenarios).
# Multi-rank tests launch mpirun themselves (through common/scripts/zlrun), one scenario per
# launch, so Criterion runs one test at a time. The last line printed is Criterion's summary.
set -u
bin=${1:?usage: run_tests.sh TEST_BINARY [FILTER]}
filter=${2:-}
[ -x "$bin" ] || { echo "error: $bin not built (make build)" >&2; exit 2; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
args=(--jobs "${ZL_TEST_JOBS:-1}" --short-filename)
[ -n "$filter" ] && args+=(--filter "$filter")
exec "$bin" "${args[@]}"
