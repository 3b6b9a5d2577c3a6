/* test_cp.c — chapter 10's ring attention on one process (solutions/cp.h): the layout of a
 * sequence over C ranks, and the ring simulated rank by rank — every rank's queries folding the
 * K/V blocks in ring order (its own, then rank r−1's, ...) with the online softmax, and the
 * backward's dK/dV accumulated block by block — against the plain attention of the whole sequence
 * (op_attention_fwd / op_attention_bwd) within 1e-5 absolute, for C = 1, 2, 4 and 3, contiguous and
 * balanced: first the forward's statistics (each query's log-sum-exp, which the backward reads), then
 * its output, then the backward. A mismatch names C, the layout, the tensor, the index, got and
 * expected. */
#include "zl_test.h" // cr_assert, zl_expect_floats
#include "cp.h"      // cp_positions, cp_attend_*, cp_layout_check, cp_work_formula
#include "ops_gpt.h" // op_attention_fwd, op_attention_bwd
#include "data.h"    // rng_normal

#define CP_TOL 1e-5

/* |got − expected| <= CP_TOL on every element (the values are O(1): inputs N(0,1)); names the first
 * mismatch. Relative tolerance would fail on outputs near 0, where the two sums cancel differently. */
static void expect_close(const char *what, const float *got, const float *exp, int64_t n) {
  double *e = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) e[i] = exp[i];
  zl_expect_close_abs(what, got, e, n, CP_TOL);
  free(e);
}

/* The forward's statistics: every query's log-sum-exp over the keys it sees (causal), per head, from
 * qkv (R, S, 3E) in double — what cp_attend_finish leaves in m: lse[(rho·NH + h)·S + p]. */
static double *plain_lse(const float *qkv, int R, int S, int E, int NH) {
  int hs = E / NH;
  double scale = 1.0 / sqrt((double)hs), *lse = malloc((size_t)R * NH * S * sizeof(double));
  for (int rho = 0; rho < R; rho++)
    for (int h = 0; h < NH; h++)
      for (int p = 0; p < S; p++) {
        const float *q = qkv + ((int64_t)rho * S + p) * 3 * E + (int64_t)h * hs;
        double mx = -INFINITY, *s = malloc((size_t)(p + 1) * sizeof(double)), sum = 0;
        for (int j = 0; j <= p; j++) {
          const float *k = qkv + ((int64_t)rho * S + j) * 3 * E + E + (int64_t)h * hs;
          double d = 0;
          for (int c = 0; c < hs; c++) d += (double)q[c] * k[c];
          s[j] = d * scale;
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j <= p; j++) sum += exp(s[j] - mx);
        lse[((int64_t)rho * NH + h) * S + p] = mx + log(sum);
        free(s);
      }
  return lse;
}

/* Rank q's rows of a (R, S, w) tensor at its positions → (R, n, w), or back (to_full). */
static void take(float *loc, float *full, int R, int S, int n, int w, const int *pos, int to_full) {
  for (int r = 0; r < R; r++)
    for (int i = 0; i < n; i++) {
      float *l = loc + ((int64_t)r * n + i) * w, *f = full + ((int64_t)r * S + pos[i]) * w;
      for (int c = 0; c < w; c++) {
        if (to_full) f[c] += l[c];
        else l[c] = f[c];
      }
    }
}

/* One (C, balance) case: R sequences of S positions, E features, NH heads. */
static void ring_vs_plain(int C, int balance, int R, int S, int E, int NH) {
  int64_t N = (int64_t)R * S, n = S / C;
  float *qkv = malloc(N * 3 * E * sizeof(float)), *out = malloc(N * E * sizeof(float));
  float *att = malloc((int64_t)R * NH * S * S * sizeof(float)), *dout = malloc(N * E * sizeof(float));
  float *dqkv = malloc(N * 3 * E * sizeof(float)), *got_out = calloc(N * E, sizeof(float));
  float *got_dqkv = calloc(N * 3 * E, sizeof(float));
  for (int64_t k = 0; k < N * 3 * E; k++) qkv[k] = (float)rng_normal(7, 1, (uint64_t)k);
  for (int64_t k = 0; k < N * E; k++) dout[k] = (float)rng_normal(7, 2, (uint64_t)k);
  op_attention_fwd(DEV_CPU, out, att, qkv, R, S, E, NH);
  op_attention_bwd(DEV_CPU, dqkv, dout, qkv, att, R, S, E, NH);

  int *pos = malloc((size_t)C * n * sizeof(int));
  for (int q = 0; q < C; q++) cp_positions(S, C, balance, q, pos + q * n);
  /* every rank's local tensors (what the ring would hold) */
  float **lq = malloc(C * sizeof(float *)), **lkv = malloc(C * sizeof(float *)),
        **lout = malloc(C * sizeof(float *));
  float **llse = malloc(C * sizeof(float *)), **ldo = malloc(C * sizeof(float *)),
        **ldkv = malloc(C * sizeof(float *));
  for (int q = 0; q < C; q++) {
    lq[q] = malloc(R * n * 3 * E * sizeof(float));
    take(lq[q], qkv, R, S, n, 3 * E, pos + q * n, 0);
    lkv[q] = malloc(R * n * 2 * E * sizeof(float));
    for (int64_t t = 0; t < R * n; t++)
      memcpy(lkv[q] + t * 2 * E, lq[q] + t * 3 * E + E, 2 * E * sizeof(float));
    lout[q] = calloc(R * n * E, sizeof(float));
    llse[q] = malloc(R * NH * n * sizeof(float));
    ldo[q] = malloc(R * n * E * sizeof(float));
    take(ldo[q], dout, R, S, n, E, pos + q * n, 0);
    ldkv[q] = calloc(R * n * 2 * E, sizeof(float));
  }
  char what[96];
  for (int q = 0; q < C; q++) { /* forward: the blocks in ring order */
    float *l = calloc(R * NH * n, sizeof(float));
    for (int64_t k = 0; k < R * NH * n; k++) llse[q][k] = -INFINITY;
    int64_t work = 0;
    for (int j = 0; j < C; j++) {
      int src = (q - j + C) % C;
      work +=
          cp_attend_block(R, (int)n, E, NH, lq[q], pos + q * n, lkv[src], pos + src * n, llse[q], l, lout[q]);
    }
    cp_attend_finish(R, (int)n, E, NH, lout[q], llse[q], l);
    cr_assert_eq(work, cp_work_formula(S, C, balance, q) * R * NH,
                 "C=%d balance %d rank %d: %lld score pairs, formula %lld", C, balance, q, (long long)work,
                 (long long)(cp_work_formula(S, C, balance, q) * R * NH));
    take(lout[q], got_out, R, S, (int)n, E, pos + q * n, 1);
    free(l);
  }
  /* the forward's statistics first (the backward reads them: a wrong one shows there only as NaN) */
  double *lse = plain_lse(qkv, R, S, E, NH);
  for (int q = 0; q < C; q++)
    for (int rho = 0; rho < R; rho++)
      for (int h = 0; h < NH; h++)
        for (int i = 0; i < n; i++) {
          double want = lse[((int64_t)rho * NH + h) * S + pos[q * n + i]];
          float got = llse[q][((int64_t)rho * NH + h) * n + i];
          cr_assert(fabs(got - want) <= CP_TOL * fmax(1.0, fabs(want)),
                    "C=%d balance=%d forward statistics, rank %d, sequence %d, head %d, position %d: m after "
                    "cp_attend_finish (m + log l, the log-sum-exp of the query's scores) got %.9g, expected "
                    "%.9g: m must "
                    "hold the running max of the scores seen so far, l the sum of e^(s - m) (both updated "
                    "every block)",
                    C, balance, q, rho, h, pos[q * n + i], got, want);
        }
  free(lse);
  snprintf(what, sizeof what, "C=%d balance=%d forward out (R,S,E)", C, balance);
  expect_close(what, got_out, out, N * E);
  for (int q = 0; q < C; q++) { /* backward: dq at home, dK/dV accumulated into the block's owner */
    float *dsum = malloc(R * NH * n * sizeof(float)), *dq = calloc(R * n * E, sizeof(float));
    cp_attend_dsum(R, (int)n, E, NH, ldo[q], lout[q], dsum);
    for (int j = 0; j < C; j++) {
      int src = (q - j + C) % C;
      cp_attend_block_bwd(R, (int)n, E, NH, lq[q], pos + q * n, ldo[q], llse[q], dsum, lkv[src],
                          pos + src * n, dq, ldkv[src]);
    }
    float *full = calloc(R * n * 3 * E, sizeof(float));
    for (int64_t t = 0; t < R * n; t++) memcpy(full + t * 3 * E, dq + t * E, E * sizeof(float));
    take(full, got_dqkv, R, S, (int)n, 3 * E, pos + q * n, 1);
    free(full), free(dsum), free(dq);
  }
  for (int q = 0; q < C; q++) {
    float *full = calloc(R * n * 3 * E, sizeof(float));
    for (int64_t t = 0; t < R * n; t++)
      memcpy(full + t * 3 * E + E, ldkv[q] + t * 2 * E, 2 * E * sizeof(float));
    take(full, got_dqkv, R, S, (int)n, 3 * E, pos + q * n, 1);
    free(full);
  }
  snprintf(what, sizeof what, "C=%d balance=%d backward dqkv (R,S,3E)", C, balance);
  expect_close(what, got_dqkv, dqkv, N * 3 * E);
  for (int q = 0; q < C; q++)
    free(lq[q]), free(lkv[q]), free(lout[q]), free(llse[q]), free(ldo[q]), free(ldkv[q]);
  free(lq), free(lkv), free(lout), free(llse), free(ldo), free(ldkv), free(pos);
  free(qkv), free(out), free(att), free(dout), free(dqkv), free(got_out), free(got_dqkv);
}

Test(ch10_cp, ring_equals_plain_attention) {
  for (int balance = 0; balance <= 1; balance++) {
    ring_vs_plain(1, balance, 2, 16, 16, 2);
    ring_vs_plain(2, balance, 2, 16, 16, 2);
    ring_vs_plain(4, balance, 2, 16, 16, 2);
    ring_vs_plain(3, balance, 1, 24, 8, 2);
  }
}

/* The layouts: contiguous chunk q; balanced chunks q and 2C−1−q of 2C; refusals named. */
Test(ch10_cp, layout) {
  int pos[8];
  cp_positions(16, 2, 1, 0, pos);
  int want0[8] = {0, 1, 2, 3, 12, 13, 14, 15};
  for (int i = 0; i < 8; i++)
    cr_assert_eq(pos[i], want0[i], "balanced C=2 rank 0 pos[%d] = %d, expected %d", i, pos[i], want0[i]);
  cp_positions(16, 2, 0, 1, pos);
  for (int i = 0; i < 8; i++)
    cr_assert_eq(pos[i], 8 + i, "contiguous C=2 rank 1 pos[%d] = %d, expected %d", i, pos[i], 8 + i);
  /* causal work: contiguous rank q of C=4, n=4: Σ (p+1) = 16q + 10; balanced: equal on every rank */
  for (int q = 0; q < 4; q++) {
    cr_assert_eq(cp_work_formula(16, 4, 0, q), 16 * q + 10, "contiguous rank %d", q);
    cr_assert_eq(cp_work_formula(16, 4, 1, q), cp_work_formula(16, 4, 1, 0), "balanced rank %d", q);
  }
  char why[160];
  cr_assert(cp_layout_check(16, 4, 1, why, sizeof why) == 0, "16 over 2·4 chunks");
  cr_assert(cp_layout_check(18, 2, 1, why, sizeof why) == 1 && strstr(why, "2C"), "18 over 4 chunks: %s",
            why);
  cr_assert(cp_layout_check(18, 4, 0, why, sizeof why) == 1 && strstr(why, "divisible by C"), "18 over 4: %s",
            why);
}
