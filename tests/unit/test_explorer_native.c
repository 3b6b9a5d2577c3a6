/* test_explorer_native.c — the explorer page's C built natively (make build: build/tests/explorer_native,
 * common/explorer/explorer.c with the page's own files) and run: solutions/ring.c on the page's small
 * communicator of N simulated ranks gives the exact sums, and its scratch refuses what does not fit
 * in one line. Notes: common/explorer/README.md. Suite common_explorer. */
#include "zl_test.h" // Criterion, zl_run, ZL_TESTBIN

#define XN_MAX 8  /* the page's ranks (ZX_NMAX) */
#define XE_MAX 64 /* its elements per rank (ZX_EMAX) */

/* explorer_native ring OP N PER into out[r][i] (count[r] values each) and sent[r] (bytes sent in all, the
 * ring model's beside: model[r]); returns the steps it printed (-1: refused). */
typedef struct ring_res {
  double out[XN_MAX][XE_MAX], model[XN_MAX];
  int count[XN_MAX], sent[XN_MAX];
} ring_res_t;
static int ring_run(int op, int N, int per, ring_res_t *o) {
  char *txt = NULL;
  int rc = zl_run(0, 30, &txt, ZL_TESTBIN "/explorer_native ring %d %d %d", op, N, per);
  cr_assert_eq(rc, 0, "explorer_native ring %d %d %d exited %d:\n%s", op, N, per, rc, txt);
  int steps = -2, at = 0, k = 0;
  cr_assert_eq(sscanf(txt, "steps %d%n", &steps, &at), 1, "no `steps` line:\n%s", txt);
  const char *p = txt + at;
  for (int r = 0; steps >= 0 && r < N; r++) {
    int rr = -1;
    cr_assert(sscanf(p, " rank %d:%n", &rr, &k) == 1 && rr == r, "no line for rank %d:\n%s", r, txt);
    p += k;
    for (o->count[r] = 0; o->count[r] < XE_MAX && sscanf(p, "%lf%n", &o->out[r][o->count[r]], &k) == 1;
         o->count[r]++)
      p += k;
  }
  for (int r = 0; steps >= 0 && r < N; r++, p += k) {
    int rr = -1;
    cr_assert(sscanf(p, " sent %d: %d %lf%n", &rr, &o->sent[r], &o->model[r], &k) == 3 && rr == r,
              "no `sent` line for rank %d:\n%s", r, txt);
  }
  free(txt);
  return steps;
}

/* The page's inputs (explorer.c, zx_ring), chapter 01's: reduce-scatter's and the all-reduce's chunk j on
 * rank q = [((q+1)(e+1))^(j+1)], so chunk r sums to sum_q ((q+1)(e+1))^(r+1) (small integers: exact in
 * any order); all-gather's rank q brings [10q + e + 1]; broadcast from rank 0 of [1, 2, 3, 4]; reduce to
 * rank 0 of (q+1)·[1, 2, 3, 4]; all-to-all's block j on rank q = [10(q+1) + j + 100e]. Every rank's bytes
 * sent in all equal the ring model's; the all-reduce takes 2(N−1) steps, the others N−1. */
Test(common_explorer, ring_on_the_pages_communicator_is_exact) {
  static const int shapes[][2] = {{3, 2}, {4, 3}, {2, 5}, {8, 1}}; /* N, per: notes/01's three ranks, more */
  static ring_res_t o;
  for (int t = 0; t < 4; t++) {
    int N = shapes[t][0], per = shapes[t][1];
    for (int op = 0; op < 6; op++) {
      cr_assert_eq(ring_run(op, N, per, &o), op == 2 ? 2 * (N - 1) : N - 1, "op %d N=%d: steps", op, N);
      for (int r = 0; r < N; r++) {
        int n = op == 0 ? per : op == 3 || op == 4 ? (op == 4 && r > 0 ? 0 : 4) : N * per;
        cr_assert_eq(o.count[r], n, "op %d N=%d per=%d rank %d: %d values, expected %d", op, N, per, r,
                     o.count[r], n);
        cr_expect_eq(o.sent[r], o.model[r], "op %d N=%d rank %d: sent %d bytes, the model %g", op, N, r,
                     o.sent[r], o.model[r]);
        for (int i = 0; i < n; i++) {
          int j = i / per, e = i % per; /* chunk (block) and element */
          double want = 0;
          if (op == 0 || op == 2)
            for (int q = 0; q < N; q++) want += pow((q + 1) * (e + 1), (op == 0 ? r : j) + 1);
          if (op == 1) want = 10 * j + e + 1;
          if (op == 3) want = i + 1;
          if (op == 4) want = N * (N + 1) / 2 * (i + 1);
          if (op == 5) want = 10 * (j + 1) + r + 100 * e;
          cr_expect_eq(o.out[r][i], want, "op %d N=%d per=%d rank %d element %d: got %.17g, expected %.17g",
                       op, N, per, r, i, o.out[r][i], want);
        }
      }
    }
  }
  cr_expect_eq(ring_run(0, 8, 9, &o), -1, "72 elements per rank (past ZX_EMAX) must be refused");
}

/* Past a slot of ZX_EMAX floats, comm_scratch stops with one line (ring.c would write past it). */
Test(common_explorer, scratch_past_its_slot_dies_in_one_line) {
  char *txt = NULL;
  int rc = zl_run(0, 30, &txt, ZL_TESTBIN "/explorer_native scratch %d", (XE_MAX + 1) * 4);
  cr_expect_eq(rc, 1, "exit code %d, expected 1:\n%s", rc, txt);
  cr_expect(strstr(txt, "explorer: comm_scratch of 260 bytes, past a slot's 64 floats (ZX_EMAX)\n") == txt,
            "message:\n%s", txt);
  free(txt);
}

/* The schedules panel's closed forms hold inside their stated ranges (zx_bubble_closed_range): on a grid of
 * P <= 6, M <= 14, F, B, W in {0, 0.5, 1, 2, 3} each equals the simulator's bubble to 1e-12 wherever the
 * page shows it (outside, the page says "outside its range" instead of a number). */
Test(common_explorer, closed_forms_equal_the_simulator_inside_their_range) {
  char *txt = NULL;
  int rc = zl_run(0, 60, &txt, ZL_TESTBIN "/explorer_native closed");
  cr_assert_eq(rc, 0, "explorer_native closed exited %d:\n%s", rc, txt);
  cr_expect(strstr(txt, "outside") == NULL, "a closed form differs inside its range:\n%s", txt);
  for (int sc = 0; sc < 6; sc++) {
    char key[32];
    int in = 0, eq = -1;
    snprintf(key, sizeof key, "closed %d in ", sc);
    const char *p = strstr(txt, key);
    cr_assert(p && sscanf(p + strlen(key), "%d equal %d", &in, &eq) == 2, "no line for %d:\n%s", sc, txt);
    cr_expect(in > 1000 && eq == in, "schedule %d: %d cases in range, %d equal", sc, in, eq);
  }
  free(txt);
}

/* One clock: at P = 4, M = 8, F = B = W = 1 the steps the page draws on its shared axis are 1F1B's 33,
 * ZB-H1's 27 (shorter), ZB-H2's 27 with its own window 24 (bubble 0), DualPipeV's (chapter 07d) 27;
 * activations in flight per stage (micro-batch-chunks) 1F1B P - s, ZB-H1 P, ZB-H2 2P - 1, DualPipeV
 * 2P + 1 (half a stage each); every drawn operation after the one before it, the last end the step. */
Test(common_explorer, schedules_on_one_clock) {
  static const struct {
    int sched;
    double step, span, bubble;
    const char *inflight;
  } want[] = {{2, 33, 33, 9.0 / 33, " 4 3 2 1"},
              {4, 27, 27, 3.0 / 27, " 4 4 4 4"},
              {5, 27, 24, 0, " 7 7 7 7"},
              {6, 27, 27, 3.0 / 27, " 9 9 9 9"}};
  for (int t = 0; t < 4; t++) {
    char *txt = NULL, inflight[64] = "";
    double step = 0, span = 0, busy = 0, bubble = -1;
    int rc = zl_run(0, 30, &txt, ZL_TESTBIN "/explorer_native sched %d 4 8 1 1 1 1 0", want[t].sched);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, txt);
    cr_assert(sscanf(txt, "rc 0 step %lf %lf %lf %lf inflight%63[ 0-9]", &step, &span, &busy, &bubble,
                     inflight) == 5,
              "schedule %d:\n%s", want[t].sched, txt);
    cr_expect(step == want[t].step && span == want[t].span && busy == 24, "schedule %d:\n%s", want[t].sched,
              txt);
    cr_expect(fabs(bubble - want[t].bubble) < 1e-12, "schedule %d: bubble %.17g", want[t].sched, bubble);
    cr_expect_str_eq(inflight, want[t].inflight, "schedule %d: in flight", want[t].sched);
    cr_expect(strstr(txt, "order ok"), "schedule %d: the drawn order:\n%s", want[t].sched, txt);
    free(txt);
  }
}
