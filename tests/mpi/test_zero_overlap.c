/* test_zero_overlap.c — ZeRO-2's reduce-scatters overlap the backward (notes/04-zero2.md), checked
 * from the trace the program records (--trace: each collective's start, duration and "queued",
 * the time between the caller issuing it and its start; issued = ts − queued):
 *   1. every step's first gradient reduce-scatter is issued before the backward of unit 0 starts;
 *   2. some backward starts while a reduce-scatter issued before it is still running (a
 *      reduce-scatter that is waited for at once, blocking, never lets that happen).
 * A body that gets the numbers right without this is "correct but not overlapped": the suite
 * ch04_zero2_overlap sorts after ch04_zero2, so `make exercise CH=04` (stopping at the first
 * failing test) reaches it only once the numbers are right. */
#include "zl_test.h" // zl_run, zl_read_file, zl_tmpdir, zl_trace_overlap

#define SHAPE \
  "--layers 3 --hidden 64 --input 32 --classes 10 --batch 60 --steps 20 --seed 7 --quiet --log-every 0"

static void expect_overlapped(const char *prog, const char *op, const char *what) {
  char dir[256], trace[512], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "zero_overlap");
  snprintf(trace, sizeof trace, "%s/%s.trace.json", dir, prog);
  const char *ex = getenv("ZL_EXERCISE_TIMEOUT_S"); /* exercise mode: a short deadline */
  int deadline = ex && atoi(ex) > 0 ? atoi(ex) : 60;
  int rc = zl_run(2, 3 * deadline + 10, &out, "%s/%s " SHAPE " --trace %s --timeout-s %d", ZL_BIN, prog,
                  trace, deadline);
  cr_assert_neq(rc, 124, "%s: timed out after %d s: a deadlock?\n%s", prog, 3 * deadline + 10, out);
  cr_assert_eq(rc, 0, "%s exited %d:\n%s", prog, rc, out);
  char *t = zl_read_file(trace, NULL);
  cr_assert(t, "no trace file %s", trace);
  zl_overlap_t o = zl_trace_overlap(t, op, op);
  cr_assert_gt(o.steps, 0, "%s: no \"step\" spans in the trace %s", prog, trace);
  cr_assert_eq(o.late, 0,
               "%s: correct but not overlapped: in %d of %d rank-steps the first %s is issued only after the "
               "backward of unit 0 starts (%s). %s",
               prog, o.late, o.steps, op, o.first_late, what);
  cr_assert_gt(o.running, 0,
               "%s: correct but not overlapped: no backward ever starts while a %s is running: each one is "
               "waited for as soon as it is issued. %s",
               prog, op, what);
  free(t);
  free(out);
}

Test(ch04_zero2_overlap, reduce_scatters_issued_during_backward, .timeout = 90) {
  expect_overlapped(
      "ch04_zero2", "reduce_scatter",
      "Issue each unit's reduce-scatter (comm_reduce_scatter_async) as its backward ends and wait "
      "for it only when its buffer is needed again.");
}
