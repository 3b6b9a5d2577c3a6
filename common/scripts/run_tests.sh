#!/usr/bin/env bash
# run_tests.sh TEST_BINARY [FILTER] — one Criterion run of the unit and multi-rank tests.
# Multi-rank tests launch mpirun themselves (through common/scripts/zlrun), one scenario per
# launch, so Criterion runs one test at a time (ZL_TEST_JOBS=2 to try two). Runs from the
# repository root (the tests name common/scripts/zlrun and build/ paths relative to it).
# Progress: one line per suite as it finishes (`ch02_ddp: 8/8 passed (41.2 s; 2m05s so far)`);
# a failing test prints its messages as it happens; a test that skips itself (no root for the
# emulated nodes, no GPU) prints `skipped: suite::test: why` and counts on its suite's line. The last line printed is Criterion's
# summary; the exit code is Criterion's (non-zero when a test failed or crashed), so
# `make test` fails with it.
#   FILTER: Criterion's --filter, e.g. 'ch01*/*' (one chapter) or 'common_exercises/*'. Without
#   one, suites named *_long are left out: they are the longer sweeps of `make test-long`
#   (filter '*_long/*'); `make test` covers each of their contracts at a smaller size.
#   ZL_TEST_VERBOSE=1: Criterion's own --verbose output, unfiltered (a line as each test starts
#   and ends, and the tests' info lines).
set -u
bin=${1:?usage: run_tests.sh TEST_BINARY [FILTER]}
filter=${2:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
[ -x "$bin" ] || { echo "error: $bin not built (make build)" >&2; exit 2; }
cd "$root" || exit 2
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# References that several tests share (test_zero.c's DDP runs) are cached for this run only, in a
# directory made here and removed when the run ends (zl_test.h, zl_cache_stem): no result of a
# test depends on an earlier run, or on a run under another BLAS kernel.
ZL_TEST_CACHE=$(mktemp -d "${TMPDIR:-/tmp}/zl_test_cache.XXXXXX") || exit 2
export ZL_TEST_CACHE
trap 'rm -rf "$ZL_TEST_CACHE"' EXIT
# This is the CPU suite: the same results on a laptop and on a GPU box. GPUs are hidden so that
# --device auto stays on the CPU; `make test-gpu` runs the GPU suite (ZL_TEST_GPUS=1 keeps them).
[ "${ZL_TEST_GPUS:-0}" = 1 ] || export CUDA_VISIBLE_DEVICES=
args=(--jobs "${ZL_TEST_JOBS:-1}" --short-filename --verbose)
[ -n "$filter" ] || filter='!(*_long)/*'
args+=(--filter "$filter")
echo "tests: ${bin#"$root"/}${filter:+ --filter '$filter'}, one at a time; a line per suite, failures as they happen (ZL_TEST_VERBOSE=1 shows each test)"
if [ "${ZL_TEST_VERBOSE:-0}" = 1 ]; then "$bin" "${args[@]}" </dev/null; exit $?; fi
# Criterion --verbose prints [RUN ] / [PASS] / [FAIL] per test, the [----] lines of a failure (or
# of cr_log_info) before its [FAIL], and the [====] Synthesis line at the end. Keep a failing
# test's lines, fold passing ones into the suite's line, and pass anything else through.
"$bin" "${args[@]}" </dev/null 2>&1 | awk '
  function now() { srand(); return srand() }            # seconds, in any awk
  function suite_of(name) { sub(/::.*/, "", name); return name }
  function flush_suite() {
    if (suite == "") return
    el = now() - t0
    printf "  %s: %d/%d passed%s (%.1f s; %dm%02ds so far)\n", suite, npass, nrun,
           nskip ? sprintf(", %d skipped", nskip) : "", secs, el / 60, el % 60
    fflush(); suite = ""
  }
  BEGIN { t0 = now(); suite = "" }
  /^\[RUN \] / { s = suite_of($3); if (s != suite) { flush_suite(); suite = s; npass = 0; nrun = 0; nskip = 0; secs = 0 }
                  nbuf = 0; intest = 1; next }
  /^\[PASS\] / { nrun++; npass++; if (match($0, /\([0-9.]+s\)/)) secs += substr($0, RSTART + 1, RLENGTH - 3)
                  nbuf = 0; intest = 0; next }
  /^\[(FAIL|ERR |WARN)\]/ { for (i = 1; i <= nbuf; i++) print buf[i]; nbuf = 0
                  if ($1 == "[FAIL]") nrun++
                  if (match($0, /\([0-9.]+s\)/)) secs += substr($0, RSTART + 1, RLENGTH - 3)
                  print; fflush(); intest = 0; next }
  /^\[----\] / { if (intest) buf[++nbuf] = $0; next }
  # a test that ran and skipped itself (no root, no GPU): listed with its reason, counted on the suite line
  /^\[SKIP\] / { if (intest) { nskip++; sub(/^\[SKIP\] /, "  skipped: "); print; fflush() } intest = 0; nbuf = 0; next }
  /^\[====\] Running / { next }
  /^\[====\] Synthesis/ { flush_suite()
                  if (ENVIRON["ZL_TEST_T0"] != "") { el = now() - ENVIRON["ZL_TEST_T0"]
                    printf "make test: %dm%02ds from its start, the set-up and the build included (budget: 12 minutes on 2 cores)\n", el / 60, el % 60 }
                  print; fflush(); next }
  { if (intest) buf[++nbuf] = $0; else { print; fflush() } }
'
exit "${PIPESTATUS[0]}"
