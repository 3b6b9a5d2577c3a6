/* test_explorer_native.c — the explorer page's C built natively (make build: build/tests/explorer_native,
 * common/explorer/explorer.c with the page's own files) and run: solutions/ring.c on the page's small
 * communicator of N simulated ranks gives the exact sums, and its scratch refuses what does not fit
 * in one line. Notes: common/explorer/README.md. Suite common_explorer. */
#include "zl_test.h" // Criterion, zl_run, ZL_TESTBIN

#define XN_MAX 8  /* the page's ranks (ZX_NMAX) */
#define XE_MAX 64 /* its elements per rank (ZX_EMAX) */

/* explorer_native ring OP N PER into out[r][i]; returns the steps it printed (-1: refused). */
static int ring_run(int op, int N, int per, double out[XN_MAX][XE_MAX]) {
  char *txt = NULL;
  int rc = zl_run(0, 30, &txt, ZL_TESTBIN "/explorer_native ring %d %d %d", op, N, per);
  cr_assert_eq(rc, 0, "explorer_native ring %d %d %d exited %d:\n%s", op, N, per, rc, txt);
  int steps = -2, at = 0;
  cr_assert_eq(sscanf(txt, "steps %d%n", &steps, &at), 1, "no `steps` line:\n%s", txt);
  const char *p = txt + at;
  for (int r = 0; steps >= 0 && r < N; r++) {
    int rr = -1, k = 0;
    cr_assert(sscanf(p, " rank %d:%n", &rr, &k) == 1 && rr == r, "no line for rank %d:\n%s", r, txt);
    p += k;
    for (int i = 0; i < N * per; i++, p += k)
      cr_assert_eq(sscanf(p, "%lf%n", &out[r][i], &k), 1, "rank %d: value %d missing:\n%s", r, i, txt);
  }
  free(txt);
  return steps;
}

/* The page's inputs (explorer.c, zx_ring): reduce-scatter's chunk j on rank q = [((q+1)(e+1))^(j+1)],
 * so rank r ends with sum_q ((q+1)(e+1))^(r+1) (small integers: exact in any order); all-gather's
 * rank q brings [(q+1)(e+1)], so every rank ends with every chunk k = [(k+1)(e+1)]. */
Test(common_explorer, ring_on_the_pages_communicator_is_exact) {
  static const int shapes[][2] = {{3, 2}, {4, 3}, {2, 5}}; /* N, per: notes/01's three ranks, and two more */
  double out[XN_MAX][XE_MAX];
  for (int t = 0; t < 3; t++) {
    int N = shapes[t][0], per = shapes[t][1];
    cr_assert_eq(ring_run(0, N, per, out), N - 1, "reduce-scatter N=%d: steps", N);
    for (int r = 0; r < N; r++)
      for (int e = 0; e < per; e++) {
        double want = 0;
        for (int q = 0; q < N; q++) want += pow((q + 1) * (e + 1), r + 1);
        cr_expect_eq(out[r][e], want,
                     "reduce-scatter N=%d per=%d rank %d element %d: got %.17g, expected %.17g", N, per, r, e,
                     out[r][e], want);
      }
    cr_assert_eq(ring_run(1, N, per, out), N - 1, "all-gather N=%d: steps", N);
    for (int r = 0; r < N; r++)
      for (int i = 0; i < N * per; i++)
        cr_expect_eq(out[r][i], (double)((i / per + 1) * (i % per + 1)),
                     "all-gather N=%d per=%d rank %d element %d: got %.17g", N, per, r, i, out[r][i]);
  }
  cr_expect_eq(ring_run(0, 8, 9, out), -1, "72 elements per rank (past ZX_EMAX) must be refused");
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
