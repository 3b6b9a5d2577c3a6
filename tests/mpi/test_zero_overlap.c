/* test_zero_overlap.c — ZeRO-2's reduce-scatters overlap the backward (notes/04-zero2.md), checked
 * from the trace the program records (--trace: each collective's start, duration and "queued",
 * the time between the caller issuing it and its start; issued = ts − queued):
 *   1. every step's first gradient reduce-scatter is issued before the backward of unit 0 starts;
 *   2. some backward starts while a reduce-scatter issued before it is still running (a
 *      reduce-scatter that is waited for at once, blocking, never lets that happen).
 * A body that gets the numbers right without this is "correct but not overlapped": the suite
 * ch04_zero2_overlap sorts after ch04_zero2, so `make exercise CH=04` (stopping at the first
 * failing test) reaches it only once the numbers are right. */
#include "zl_test.h" // zl_run, zl_read_file, zl_tmpdir

#define SHAPE "--layers 3 --hidden 64 --input 32 --classes 10 --batch 60 --steps 20 --seed 7 --quiet --log-every 0"

/* One complete event of a --trace file (row 0 compute, 1 comm); coll: a collective of `op`. */
typedef struct zev { char name[48]; int pid, tid, coll; double ts, dur, issued; } zev_t;

/* Every "ph": "X" event (one per line, as common/trace.c writes them); coll marks those whose
 * args say "op":"<op>". */
static int read_events(const char *text, const char *op, zev_t *ev, int max) {
  char want[64];
  snprintf(want, sizeof want, "\"op\":\"%s\"", op);
  int n = 0;
  for (const char *p = text; p && *p && n < max; p = strchr(p, '\n')) {
    if (*p == '\n') p++;
    const char *end = strchr(p, '\n');
    zev_t e = {0};
    if (sscanf(p, "{\"name\": \"%47[^\"]\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %lf, \"dur\": %lf", e.name,
               &e.pid, &e.tid, &e.ts, &e.dur) != 5)
      continue;
    const char *q = strstr(p, "\"queued\":"), *o = strstr(p, want);
    e.issued = q && (!end || q < end) ? e.ts - strtod(q + 9, NULL) : e.ts;
    e.coll = e.tid == 1 && o && (!end || o < end);
    ev[n++] = e;
  }
  return n;
}

static void expect_overlapped(const char *prog, const char *op, const char *what) {
  char dir[256], trace[512], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "zero_overlap");
  snprintf(trace, sizeof trace, "%s/%s.trace.json", dir, prog);
  const char *ex = getenv("ZL_EXERCISE_TIMEOUT_S"); /* exercise mode: a short deadline */
  int deadline = ex && atoi(ex) > 0 ? atoi(ex) : 60;
  int rc = zl_run(2, 3 * deadline + 10, &out, "%s/%s " SHAPE " --trace %s --timeout-s %d", ZL_BIN, prog, trace, deadline);
  cr_assert_neq(rc, 124, "%s: timed out after %d s: a deadlock?\n%s", prog, 3 * deadline + 10, out);
  cr_assert_eq(rc, 0, "%s exited %d:\n%s", prog, rc, out);
  char *t = zl_read_file(trace, NULL);
  cr_assert(t, "no trace file %s", trace);
  enum { MAXEV = 8192 };
  zev_t *ev = calloc(MAXEV, sizeof *ev);
  int n = read_events(t, op, ev, MAXEV), steps = 0, late = 0, running = 0;
  char first_late[256] = "";
  for (int i = 0; i < n; i++) {
    if (ev[i].tid != 0 || strncmp(ev[i].name, "step ", 5) != 0) continue;
    double s0 = ev[i].ts, s1 = ev[i].ts + ev[i].dur, bwd0 = -1, first = -1;
    for (int k = 0; k < n; k++) {
      if (ev[k].pid != ev[i].pid) continue;
      if (ev[k].tid == 0 && strcmp(ev[k].name, "bwd 0") == 0 && ev[k].ts >= s0 && ev[k].ts <= s1) bwd0 = ev[k].ts;
      if (ev[k].coll && ev[k].issued >= s0 && ev[k].issued <= s1 && (first < 0 || ev[k].issued < first)) first = ev[k].issued;
    }
    steps++;
    if ((bwd0 < 0 || first < 0 || first >= bwd0) && !late++)
      snprintf(first_late, sizeof first_late, "rank %d %s: first %s issued at %.1f us, bwd 0 starts at %.1f us", ev[i].pid,
               ev[i].name, op, first, bwd0);
  }
  for (int k = 0; k < n; k++)
    for (int b = 0; ev[k].coll && b < n; b++)
      if (ev[b].pid == ev[k].pid && ev[b].tid == 0 && strncmp(ev[b].name, "bwd ", 4) == 0 && ev[b].ts > ev[k].issued &&
          ev[b].ts < ev[k].ts + ev[k].dur)
        running++;
  cr_assert_gt(steps, 0, "%s: no \"step\" spans in the trace %s", prog, trace);
  cr_assert_eq(late, 0,
               "%s: correct but not overlapped: in %d of %d rank-steps the first %s is issued only after the "
               "backward of unit 0 starts (%s). %s",
               prog, late, steps, op, first_late, what);
  cr_assert_gt(running, 0,
               "%s: correct but not overlapped: no backward ever starts while a %s is running: each one is "
               "waited for as soon as it is issued. %s",
               prog, op, what);
  free(ev);
  free(t);
  free(out);
}

Test(ch04_zero2_overlap, reduce_scatters_issued_during_backward, .timeout = 90) {
  expect_overlapped("ch04_zero2", "reduce_scatter",
                    "Issue each unit's reduce-scatter (comm_reduce_scatter_async) as its backward ends and wait "
                    "for it only when its buffer is needed again.");
}
