/* test_powersgd.c — PowerSGD's math on two simulated ranks, in one process (notes/13-compression.md):
 *   1. the error-feedback residual, bitwise: after every step e_w = fl(M_w − fl(Σ_k P^[i][k]·Q_w[j][k]))
 *      with M_w = fl(g_w + e_w of the last step), the test's own loop against psgd_residual's;
 *      and Σ_w e_w + g^ = Σ_w M_w within 1e-6 · max|M| (P^ P^^T is a projector: nothing is lost);
 *   2. at full rank (R = rows) g^ = P^ P^^T Σ M is the plain sum within 2^-17 · max|Σ M|
 *      (the bound: two Gram-Schmidt passes keep ||P^^T P^ − I|| near rows · 2^-24 = 2e-6 at rows 32;
 *      measured 1.2e-7); at rank 1 (1.1) it is not (the test could not pass by returning the sum);
 *   3. the shapes: cols = ceil(sqrt(n)), rows = ceil(n / cols), R clipped to rows.
 * Two ranks sum a + b: the bits of a 2-rank all-reduce (solutions/powersgd.c runs the same calls). */
#include "zl_test.h"  // Criterion, math
#include "powersgd.h" // psgd_*

#define NUMEL 1000 /* 32 x 32, the last row 8 of 32 */

static float urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0) - 0.5f;
}

/* One simulated step of both ranks: M_w += g_w; P = Σ M_w Q; P^; Q_w; residual; Q = Σ Q_w; g^ = P^ Q^T. */
static void step2(float *M[2], psgd_shape_t s, float *Q, float *P, float *Qw[2], float *ghat) {
  int64_t np = (int64_t)s.rows * s.rank, nq = (int64_t)s.cols * s.rank;
  float *Pw = malloc(np * sizeof *Pw);
  psgd_mul_q(M[0], s, Q, P);
  psgd_mul_q(M[1], s, Q, Pw);
  for (int64_t i = 0; i < np; i++)
    P[i] = P[i] + Pw[i];
  psgd_orthonormalise(P, s.rows, s.rank);
  for (int w = 0; w < 2; w++)
    psgd_mul_pt(M[w], s, P, Qw[w]);
  for (int64_t i = 0; i < nq; i++)
    Q[i] = Qw[0][i] + Qw[1][i];
  psgd_decompress(P, Q, s, ghat);
  free(Pw);
}

Test(ch13_powersgd, residual_identity_bitwise) {
  psgd_shape_t s = psgd_shape(NUMEL, 3);
  float *g[2], *e[2], *eref[2], *Qw[2], *M[2];
  float *Q = malloc(s.cols * s.rank * sizeof *Q), *P = malloc(s.rows * s.rank * sizeof *P);
  float *ghat = malloc(NUMEL * sizeof *ghat);
  for (int w = 0; w < 2; w++) {
    g[w] = malloc(NUMEL * sizeof(float));
    e[w] = calloc(NUMEL, sizeof(float));
    eref[w] = calloc(NUMEL, sizeof(float));
    Qw[w] = malloc(s.cols * s.rank * sizeof(float));
    M[w] = malloc(NUMEL * sizeof(float));
  }
  psgd_init_q(Q, s, 7, 0);
  uint64_t seed = 42;
  for (int step = 0; step < 6; step++) {
    for (int w = 0; w < 2; w++)
      for (int i = 0; i < NUMEL; i++) {
        g[w][i] = urand(&seed);
        e[w][i] = g[w][i] + e[w][i]; /* the strategy's M, in e's buffer */
        M[w][i] = e[w][i];
      }
    step2(e, s, Q, P, Qw, ghat); /* Q_w from M (e holds M until the residual) */
    double big = 0, worst = 0;
    for (int w = 0; w < 2; w++) {
      psgd_residual(e[w], s, P, Qw[w]);
      for (int idx = 0; idx < NUMEL; idx++) {
        int i = idx / s.cols, j = idx % s.cols;
        double sent = 0;
        for (int k = 0; k < s.rank; k++)
          sent += (double)P[i * s.rank + k] * Qw[w][j * s.rank + k];
        eref[w][idx] = (g[w][idx] + eref[w][idx]) - (float)sent;
        cr_assert(
            e[w][idx] == eref[w][idx] || (isnan(e[w][idx]) && isnan(eref[w][idx])),
            "step %d rank %d e[%d] (row %d col %d): got %.9g, expected %.9g = M_w - (P^ Q_w^T)[%d][%d]: the "
            "residual is what this rank's M_w = g_w + e_w left out of its own P^ Q_w^T (Q_w before the sum; "
            "last step's e carried in M)",
            step, w, idx, i, j, e[w][idx], eref[w][idx], i, j);
      }
    }
    for (int idx = 0; idx < NUMEL; idx++) {
      double sum_m = (double)M[0][idx] + M[1][idx], lhs = (double)e[0][idx] + e[1][idx] + ghat[idx];
      big = fmax(big, fabs(sum_m));
      worst = fmax(worst, fabs(lhs - sum_m));
    }
    cr_expect(worst <= 1e-6 * big, "step %d: |e_0 + e_1 + g^ - (M_0 + M_1)| up to %.3g > 1e-6 x max|M| %.3g",
              step, worst, big);
  }
  for (int w = 0; w < 2; w++)
    free(g[w]), free(e[w]), free(eref[w]), free(Qw[w]), free(M[w]);
  free(Q), free(P), free(ghat);
}

/* g^ against M_0 + M_1 at rank R: the worst |diff| over max|sum|. */
static double rank_error(int R) {
  psgd_shape_t s = psgd_shape(NUMEL, R);
  float *M[2], *Qw[2];
  float *Q = malloc(s.cols * s.rank * sizeof *Q), *P = malloc(s.rows * s.rank * sizeof *P);
  float *ghat = malloc(NUMEL * sizeof *ghat);
  uint64_t seed = 9;
  for (int w = 0; w < 2; w++) {
    M[w] = malloc(NUMEL * sizeof(float));
    Qw[w] = malloc(s.cols * s.rank * sizeof(float));
    for (int i = 0; i < NUMEL; i++)
      M[w][i] = urand(&seed);
  }
  psgd_init_q(Q, s, 3, 1);
  step2(M, s, Q, P, Qw, ghat);
  double big = 0, worst = 0;
  for (int i = 0; i < NUMEL; i++) {
    float sum = M[0][i] + M[1][i];
    big = fmax(big, fabs(sum));
    worst = fmax(worst, fabs((double)ghat[i] - sum));
  }
  for (int w = 0; w < 2; w++)
    free(M[w]), free(Qw[w]);
  free(Q), free(P), free(ghat);
  return worst / big;
}

Test(ch13_powersgd, full_rank_is_the_plain_sum) {
  double full = rank_error(1 << 16); /* clipped to rows = 32 */
  cr_expect(full <= 0x1p-17, "rank 32 of 32: |g^ - sum| / max|sum| = %.3g > 2^-17 (%.3g): P^ P^^T must be I",
            full, 0x1p-17);
  double one = rank_error(1);
  cr_expect(one > 0.1,
            "rank 1: |g^ − sum| / max|sum| = %.3g: a rank-1 product of a random 32 x 32 cannot be it", one);
}

Test(ch13_powersgd, shapes) {
  struct {
    int64_t n;
    int R, rows, cols, rank;
  } c[] = {
      {1, 4, 1, 1, 1}, {4810, 2, 69, 70, 2}, {4160, 4, 64, 65, 4}, {2112, 100, 46, 46, 46}, {17, 8, 4, 5, 4}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    psgd_shape_t s = psgd_shape(c[i].n, c[i].R);
    cr_expect(s.rows == c[i].rows && s.cols == c[i].cols && s.rank == c[i].rank,
              "numel %lld rank %d: %d x %d rank %d, expected %d x %d rank %d", (long long)c[i].n, c[i].R,
              s.rows, s.cols, s.rank, c[i].rows, c[i].cols, c[i].rank);
    cr_expect((int64_t)s.rows * s.cols >= c[i].n && (int64_t)(s.rows - 1) * s.cols < c[i].n,
              "numel %lld: %d x %d does not hold it with a partial last row only", (long long)c[i].n, s.rows,
              s.cols);
  }
}
