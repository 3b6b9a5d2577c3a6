#!/usr/bin/env bash
# run_tests.sh TEST_BINARY [FILTER] — one Criterion run of the unit and multi-rank tests.
# Multi-rank tests launch mpirun themselves (through common/scripts/zlrun), one scenario per
# launch, so Criterion runs one test at a time (ZL_TEST_JOBS=2 to try two). Runs from the
# repository root (the tests name common/scripts/zlrun and build/ paths relative to it).
# The last line printed is Criterion's summary; the exit code is Criterion's (non-zero when a
# test failed or crashed), so `make test` fails with it.
#   FILTER: Criterion's --filter, e.g. 'ch01*/*' (one chapter) or 'common_exercises/*'.
#   ZL_TEST_VERBOSE=1: Criterion's --verbose (a line as each test starts and ends).
set -u
bin=${1:?usage: run_tests.sh TEST_BINARY [FILTER]}
filter=${2:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
[ -x "$bin" ] || { echo "error: $bin not built (make build)" >&2; exit 2; }
cd "$root" || exit 2
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# This is the CPU suite: the same results on a laptop and on a GPU box. GPUs are hidden so that
# --device auto stays on the CPU; `make test-gpu` runs the GPU suite (ZL_TEST_GPUS=1 keeps them).
[ "${ZL_TEST_GPUS:-0}" = 1 ] || export CUDA_VISIBLE_DEVICES=
args=(--jobs "${ZL_TEST_JOBS:-1}" --short-filename)
[ -n "$filter" ] && args+=(--filter "$filter")
[ "${ZL_TEST_VERBOSE:-0}" = 1 ] && args+=(--verbose)
echo "tests: ${bin#"$root"/}${filter:+ --filter '$filter'}, one at a time; failures print as they happen (ZL_TEST_VERBOSE=1 shows each test)"
exec "$bin" "${args[@]}" </dev/null
