#!/usr/bin/env bash
# sanitize.sh SAN_BUILD TSAN_BUILD FILTER TSAN_FILTER — make test-sanitize's run (the Makefile builds
# both trees first: SAN_BUILD with AddressSanitizer + UndefinedBehaviorSanitizer, TSAN_BUILD with
# ThreadSanitizer, CPU only).
#   1. FILTER's suites (make test's by default) with SAN_BUILD's test binary, so every program a test
#      launches (under mpirun too) is the sanitized one: heap and stack overflows, use after free,
#      double free, leaks of our own allocations at a normal exit, undefined behaviour (signed
#      overflow, misaligned or null accesses, shifts, out-of-range enums and bools) — any error
#      aborts its process (abort_on_error; UBSan built with -fno-sanitize-recover=all), so its test
#      fails;
#   2. TSAN_FILTER's suites (the communication engine's: its threads, its fibers, the main thread's
#      waits) with TSAN_BUILD's: data races and lock-order inversions among OUR threads.
# Every report is also kept ($logs: ASan's and TSan's log_path files, and the outputs the tests read
# that hold one), so none is lost to a test that expected a failure anyway (a --fault run, a refused
# checkpoint); after both runs the findings are listed, each once, and the run fails if there is
# one. Open MPI, hwloc, PMIx and OpenBLAS are not instrumented: what they allocate and never free
# is theirs — suppressed by library in sanitize.supp, and a leak whose allocation stack holds no
# frame of our sources (a component Open MPI unloaded leaves an unknown module) is not counted.
# The times of both runs are printed last.
set -u
san=${1:?usage: sanitize.sh SAN_BUILD TSAN_BUILD FILTER TSAN_FILTER}
tsan=${2:?}
filter=${3:?}
tfilter=${4:?}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
logs=$(mktemp -d "${TMPDIR:-/tmp}/zl_sanitize.XXXXXX") || exit 2
supp="$root/common/scripts/sanitize.supp"
# A finding aborts its process (SIGABRT: exit 134, or its job under mpirun); ASan's reports go to
# $logs/asan.PID, the test harness keeps any output holding a report in $logs/output.* (zl_test.h:
# zl_sanitize_keep; UBSan writes there). Leaks do not change an exit code (LSan exitcode 0): the
# reports are read below, and a leak counts when its allocation stack holds a frame of ours.
export ZL_SANITIZE_LOG=$logs
export ASAN_OPTIONS="log_path=$logs/asan:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0:exitcode=0"
export UBSAN_OPTIONS="print_stacktrace=1:abort_on_error=1"
t0=$(date +%s)
echo "test-sanitize: 1. AddressSanitizer + UndefinedBehaviorSanitizer ($san), reports into $logs"
bash common/scripts/run_tests.sh "$san/tests/zl_tests" "$filter"
rc1=$?
t1=$(date +%s)
# Criterion's runner cannot run under ThreadSanitizer (its arena maps at random fixed addresses, inside
# TSan's shadow: "Could not initialize inheritable arena"), so SAN_BUILD's runner runs the suites and
# every program a test launches through zl_run is TSAN_BUILD's (ZL_RUN_BUILD, tests/zl_test.h); a
# report makes its program exit 66 (its test fails) and is kept in $logs/tsan.PID.
echo "test-sanitize: 2. ThreadSanitizer ($tsan's programs, $san's runner), suites $tfilter"
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=0" UBSAN_OPTIONS="print_stacktrace=1:abort_on_error=1"
unset LSAN_OPTIONS
# ignore_noninstrumented_modules: what Open MPI does inside itself (its memcpy into our receive buffer on
# a helper's progress, its transport's own locks) is not seen; its synchronisation is invisible to
# TSan (uninstrumented atomics), so those accesses could only be reported as false races.
ZL_RUN_BUILD=$tsan TSAN_OPTIONS="log_path=$logs/tsan:second_deadlock_stack=1:ignore_noninstrumented_modules=1" \
  bash common/scripts/run_tests.sh "$san/tests/zl_tests" "$tfilter"
rc2=$?
t2=$(date +%s)
# The findings: every report of ours, each named once (by its kind and its first frames of ours).
n=$(python3 - "$logs" <<'PY'
import glob, os, re, sys
ours = re.compile(r"(common|solutions|chapters|tests|exercises)/[^ :]+\.c(u)?:[0-9]+")
found, leaks_theirs = {}, 0
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*"))):
    text = open(path, errors="replace").read()
    # one block per report: a leak each, or the error (ASan, UBSan's "runtime error", TSan)
    blocks = re.split(r"\n(?=(?:Direct|Indirect) leak of|[^\n]*runtime error:|==\d+==ERROR|WARNING: ThreadSanitizer)",
                      text)
    for b in blocks:
        kind = ("leak" if re.match(r"(Direct|Indirect) leak", b) else
                "undefined behaviour" if "runtime error:" in b.split("\n")[0] else
                "AddressSanitizer" if "ERROR: AddressSanitizer" in b.split("\n")[0] else
                "ThreadSanitizer" if "ThreadSanitizer" in b.split("\n")[0] else None)
        if not kind:
            continue
        # where: its first frame of ours; a leak: its first 5 (the allocator's helpers, then whose)
        frames = [m.group(0) for m in ours.finditer(b)][:5 if kind == "leak" else 1]
        if kind == "leak" and not frames:
            leaks_theirs += 1  # allocated inside an uninstrumented library: not ours to free
            continue
        key = (kind, " < ".join(frames) if frames else b.split("\n")[0][:120])
        found.setdefault(key, (os.path.basename(path), b.strip().split("\n")[:8]))
for (kind, where), (f, lines) in sorted(found.items()):
    print(f"---- {kind} at {where} ({f}):", file=sys.stderr)
    for l in lines:
        print("    " + l, file=sys.stderr)
print(f"(leaks inside the uninstrumented libraries, not counted: {leaks_theirs})", file=sys.stderr)
print(len(found))
PY
)
printf 'test-sanitize: ASan+UBSan %dm%02ds (suites %s), TSan %dm%02ds (suites %s): %s finding(s) of ours%s\n' \
  $(((t1 - t0) / 60)) $(((t1 - t0) % 60)) "$filter" $(((t2 - t1) / 60)) $(((t2 - t1) % 60)) "$tfilter" "$n" \
  "$([ "$n" != 0 ] && echo ", the reports kept in $logs")"
[ "$n" = 0 ] && rm -rf "$logs"
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && [ "$n" = 0 ]
