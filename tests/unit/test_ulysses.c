/* test_ulysses.c — chapter 10's all-to-all context parallelism on one process (solutions/ulysses.h):
 * C ranks simulated one after another, the all-to-all done in memory (rank p's block q becomes rank
 * q's block p). First the transpose alone: pack, exchange, unpack gives every rank its heads of
 * every position, exactly the columns of the whole tensor (a wrong index names rank, row, position,
 * part and feature); the way back is its inverse. Then the attention: every rank runs
 * op_attention_fwd / op_attention_bwd on its NH/C heads over the whole sequence, and the output
 * and [dq | dk | dv] turned back to positions equal 1 rank's op on the whole tensor BIT FOR BIT
 * — each head is computed whole by the same kernel on the same (rows, S, hs) GEMMs; only the
 * leading dimension changes (notes/design.md, "Bits or a tolerance"). C = 2, 4 (and 1), NH = 4,
 * contiguous and balanced positions, S = 80 (two of the kernel's 64-row blocks). */
#include "zl_test.h" // cr_assert
#include "cp.h"      // cp_positions
#include "ulysses.h" // ulysses_pack, ulysses_unpack, ulysses_pack_back, ulysses_unpack_back, cp_ulysses_check
#include "ops_gpt.h" // op_attention_fwd, op_attention_bwd
#include "data.h"    // rng_normal

/* The all-to-all of C simulated ranks: recv[q] block p = send[p] block q, blocks of blk floats. */
static void a2a_sim(float **send, float **recv, int C, int64_t blk) {
  for (int p = 0; p < C; p++)
    for (int q = 0; q < C; q++) memcpy(recv[q] + p * blk, send[p] + q * blk, (size_t)blk * sizeof(float));
}

/* Rows of the whole (R, S, W) tensor at rank q's positions → its local (R, n, W). */
static void local_rows(const float *full, float *loc, int R, int S, int n, int W, const int *qpos) {
  for (int rho = 0; rho < R; rho++)
    for (int i = 0; i < n; i++)
      memcpy(loc + ((int64_t)rho * n + i) * W, full + ((int64_t)rho * S + qpos[i]) * W,
             (size_t)W * sizeof(float));
}

static float **alloc_ranks(int C, int64_t numel) {
  float **a = malloc((size_t)C * sizeof *a);
  for (int q = 0; q < C; q++) a[q] = calloc((size_t)numel, sizeof(float));
  return a;
}
static void free_ranks(float **a, int C) {
  for (int q = 0; q < C; q++) free(a[q]);
  free(a);
}

static void ulysses_vs_plain(int C, int balance, int R, int S, int E, int NH) {
  int n = S / C, Eh = E / C, NHh = NH / C;
  int64_t N = (int64_t)R * S;
  int *pos = malloc((size_t)S * sizeof(int));
  for (int q = 0; q < C; q++) cp_positions(S, C, balance, q, pos + q * n);
  float *qkv = malloc(N * 3 * E * sizeof(float)), *dout = malloc(N * E * sizeof(float));
  for (int64_t k = 0; k < N * 3 * E; k++) qkv[k] = rng_normal(11, 1, (uint64_t)k);
  for (int64_t k = 0; k < N * E; k++) dout[k] = rng_normal(11, 2, (uint64_t)k);
  /* 1 rank: the whole tensor */
  float *out = malloc(N * E * sizeof(float)), *att = malloc(N * NH * S * sizeof(float)),
        *dqkv = malloc(N * 3 * E * sizeof(float));
  op_attention_fwd(DEV_CPU, out, att, qkv, R, S, E, NH);
  op_attention_bwd(DEV_CPU, dqkv, dout, qkv, att, R, S, E, NH);
  /* C ranks: local (R, n, ·) → heads (R, S, ·) by pack, all-to-all, unpack */
  int64_t big = (int64_t)R * n * 3 * E;
  float **x = alloc_ranks(C, big), **snd = alloc_ranks(C, big), **rcv = alloc_ranks(C, big);
  float **qkvh = alloc_ranks(C, N * 3 * Eh), **atth = alloc_ranks(C, N * NHh * S),
        **outh = alloc_ranks(C, N * Eh);
  float **doh = alloc_ranks(C, N * Eh), **dqkvh = alloc_ranks(C, N * 3 * Eh);
  for (int q = 0; q < C; q++)
    local_rows(qkv, x[q], R, S, n, 3 * E, pos + q * n), ulysses_pack(R, n, E, 3, C, x[q], snd[q]);
  a2a_sim(snd, rcv, C, big / C);
  for (int p = 0; p < C; p++) {
    ulysses_unpack(R, n, S, E, 3, C, pos, rcv[p], qkvh[p]);
    for (int rho = 0; rho < R; rho++) /* the transpose alone: rank p's heads of every position, exactly */
      for (int t = 0; t < S; t++)
        for (int f = 0; f < 3; f++)
          for (int e = 0; e < Eh; e++) {
            float got = qkvh[p][((int64_t)rho * S + t) * 3 * Eh + f * Eh + e];
            float want = qkv[((int64_t)rho * S + t) * 3 * E + (int64_t)f * E + (int64_t)p * Eh + e];
            cr_assert(
                got == want,
                "C=%d balance=%d: after the all-to-all rank %d's q|k|v (R, S, 3E/C) at row %d, position %d, "
                "part %d, feature %d is %g, expected %g (the whole tensor's feature %d of that part): "
                "ulysses_unpack "
                "must put block q's position i at pos[q*n + i] of every row",
                C, balance, p, rho, t, f, e, got, want, p * Eh + e);
          }
    op_attention_fwd(DEV_CPU, outh[p], atth[p], qkvh[p], R, S, Eh, NHh);
    ulysses_pack_back(R, n, S, E, 1, C, pos, outh[p], snd[p]);
  }
  a2a_sim(snd, rcv, C, (int64_t)R * n * Eh);
  float *got = malloc(N * 3 * E * sizeof(float)), *loc = malloc(big * sizeof(float));
  for (int q = 0; q < C; q++) {
    ulysses_unpack_back(R, n, E, 1, C, rcv[q], x[q]);
    local_rows(out, loc, R, S, n, E, pos + q * n);
    for (int64_t k = 0; k < (int64_t)R * n * E; k++)
      cr_assert(x[q][k] == loc[k],
                "C=%d balance=%d rank %d: attention output (R, n, E) element %lld = %.9g, 1 rank %.9g: "
                "not bitwise",
                C, balance, q, (long long)k, x[q][k], loc[k]);
  }
  /* backward: dO to the heads, the op's backward, [dq | dk | dv] back */
  for (int q = 0; q < C; q++)
    local_rows(dout, x[q], R, S, n, E, pos + q * n), ulysses_pack(R, n, E, 1, C, x[q], snd[q]);
  a2a_sim(snd, rcv, C, (int64_t)R * n * Eh);
  for (int p = 0; p < C; p++) {
    ulysses_unpack(R, n, S, E, 1, C, pos, rcv[p], doh[p]);
    op_attention_bwd(DEV_CPU, dqkvh[p], doh[p], qkvh[p], atth[p], R, S, Eh, NHh);
    ulysses_pack_back(R, n, S, E, 3, C, pos, dqkvh[p], snd[p]);
  }
  a2a_sim(snd, rcv, C, big / C);
  for (int q = 0; q < C; q++) {
    ulysses_unpack_back(R, n, E, 3, C, rcv[q], x[q]);
    local_rows(dqkv, loc, R, S, n, 3 * E, pos + q * n);
    for (int64_t k = 0; k < big; k++)
      cr_assert(x[q][k] == loc[k],
                "C=%d balance=%d rank %d: d[q|k|v] (R, n, 3E) element %lld = %.9g, 1 rank %.9g: not bitwise",
                C, balance, q, (long long)k, x[q][k], loc[k]);
  }
  free_ranks(x, C), free_ranks(snd, C), free_ranks(rcv, C), free_ranks(qkvh, C), free_ranks(atth, C),
      free_ranks(outh, C);
  free_ranks(doh, C), free_ranks(dqkvh, C);
  free(pos), free(qkv), free(dout), free(out), free(att), free(dqkv), free(got), free(loc);
}

Test(ch10_ulysses, a2a_attention_bitwise) {
  for (int balance = 0; balance <= 1; balance++) {
    ulysses_vs_plain(1, balance, 2, 80, 32, 4);
    ulysses_vs_plain(2, balance, 2, 80, 32, 4);
    ulysses_vs_plain(4, balance, 3, 80, 32, 4);
  }
}

/* The way back is the inverse of the way there (F = 3 parts, C = 4, balanced): pack_back ∘ unpack
 * and unpack_back ∘ pack are the identity; the checks name heads and positions. */
Test(ch10_ulysses, transpose_round_trip) {
  int R = 2, S = 16, E = 8, C = 4, n = S / C, pos[16];
  for (int q = 0; q < C; q++) cp_positions(S, C, 1, q, pos + q * n);
  int64_t numel = (int64_t)R * n * 3 * E;
  float *x = malloc(numel * sizeof(float)), *s = malloc(numel * sizeof(float)),
        *y = malloc(numel * sizeof(float));
  float *s2 = malloc(numel * sizeof(float)), *x2 = malloc(numel * sizeof(float));
  for (int64_t k = 0; k < numel; k++) x[k] = (float)k;
  ulysses_pack(R, n, E, 3, C, x, s);
  ulysses_unpack_back(R, n, E, 3, C, s, x2); /* a block goes where it came from */
  for (int64_t k = 0; k < numel; k++)
    cr_assert(x2[k] == x[k], "unpack_back(pack(x)) [%lld] = %g, expected %g", (long long)k, x2[k], x[k]);
  ulysses_unpack(R, n, S, E, 3, C, pos, s, y); /* numel = R·S·3·E/C: the heads' layout has as many */
  ulysses_pack_back(R, n, S, E, 3, C, pos, y, s2);
  for (int64_t k = 0; k < numel; k++)
    cr_assert(s2[k] == s[k], "pack_back(unpack(b)) [%lld] = %g, expected %g", (long long)k, s2[k], s[k]);
  free(x), free(s), free(y), free(s2), free(x2);
  char why[160];
  cr_assert(cp_ulysses_check(16, 4, 4, why, sizeof why) == 0, "C = 4 divides 4 heads and 16 positions");
  cr_assert(cp_ulysses_check(16, 2, 4, why, sizeof why) == 1 && strstr(why, "heads"),
            "C = 4 over 2 heads: %s", why);
  cr_assert(cp_ulysses_check(18, 4, 4, why, sizeof why) == 1 && strstr(why, "divisible by C"),
            "18 over 4: %s", why);
}
