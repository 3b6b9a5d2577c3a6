/* test_ops_gpt.c — the CPU kernels of common/device/ops_gpt.h (suite common_ops_gpt): every forward
 * against a plain double-precision reference written here, every backward against central
 * finite differences of that reference (the reference itself is checked against the fp32
 * forward first, so the two checks hold each other up), plus the contracts: causal mask bit for
 * bit, att rows summing to 1, bf16 weights, beta accumulation, dx accumulation, determinism,
 * repeated tokens, and linear without bias. Whole suite well under a second. */
// Criterion, zl_expect_floats, zl_run_child, zl_expect_close_abs, zl_expect_bits_bf16, zl_to_bf16
#include "zl_test.h"
#include "data.h"    // rng_normal: reproducible test inputs
#include "dtype.h"   // bf16_from_f32, bf16_to_f32
#include "ops.h"     // op_add, op_linear_fwd/bwd (NULL bias)
#include "ops_gpt.h" // the ops under test

/* ---- helpers --------------------------------------------------------------------------- */
static float *randn(int64_t n, uint64_t seed, float scale, float offset) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = offset + scale * rng_normal(seed, 91, (uint64_t)i);
  return p;
}
static double *widen_d(const float *p, int64_t n) {
  double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
  for (int64_t i = 0; i < n; i++) d[i] = p[i];
  return d;
}
static float *nan_filled(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = NAN;
  return p;
}
static void expect_same_bits(const char *what, const void *a, const void *b, size_t nbytes) {
  if (memcmp(a, b, nbytes) == 0) return;
  const unsigned char *x = a, *y = b;
  size_t i = 0;
  while (x[i] == y[i]) i++;
  cr_assert_fail("%s: two calls on the same inputs differ at byte %zu (float index %zu)", what, i, i / 4);
}

/* Central differences of a double-precision loss f(in) over the listed indices of `in` (all of
 * them when idx is NULL): num[k] = (f(in + h·e_i) − f(in − h·e_i)) / 2h, i = idx[k]. */
typedef double (*loss_fn)(const double *in, const void *ctx);
static void fd_grad(double *num, double *in, const int64_t *idx, int64_t n, double h, loss_fn f,
                    const void *ctx) {
  for (int64_t k = 0; k < n; k++) {
    int64_t i = idx ? idx[k] : k;
    double keep = in[i];
    in[i] = keep + h;
    double lp = f(in, ctx);
    in[i] = keep - h;
    double lm = f(in, ctx);
    in[i] = keep;
    num[k] = (lp - lm) / (2 * h);
  }
}

/* ---- LayerNorm: reference --------------------------------------------------------------- */
static void ref_layernorm(double *y, double *mean, double *rstd, const double *x, const double *w,
                          const double *b, int rows, int C) {
  for (int r = 0; r < rows; r++) {
    const double *xr = x + (int64_t)r * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    double s = 1.0 / sqrt(v / C + 1e-5);
    for (int c = 0; c < C; c++) y[(int64_t)r * C + c] = (xr[c] - m) * s * w[c] + b[c];
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = s;
  }
}
/* L = Σ G·y, the loss whose gradient w.r.t. y is G. `in` is one of x, w, b (which) in double. */
typedef struct ln_ctx { const double *x, *w, *b, *G; int rows, C, which; } ln_ctx_t;
static double ln_loss(const double *in, const void *vctx) {
  const ln_ctx_t *c = vctx;
  int64_t n = (int64_t)c->rows * c->C;
  double *y = malloc(sizeof(double) * n), L = 0;
  ref_layernorm(y, NULL, NULL, c->which == 0 ? in : c->x, c->which == 1 ? in : c->w,
                c->which == 2 ? in : c->b, c->rows, c->C);
  for (int64_t i = 0; i < n; i++) L += c->G[i] * y[i];
  free(y);
  return L;
}

enum { LN_ROWS = 7, LN_C = 33 };
/* Inputs with a row mean far from 0 (x ~ 3 + 2·N(0,1)), weights near 1. */
static void ln_inputs(float **x, float **w, float **b, float **G, uint64_t seed) {
  *x = randn(LN_ROWS * LN_C, seed, 2.0f, 3.0f);
  *w = randn(LN_C, seed + 1, 0.3f, 1.0f);
  *b = randn(LN_C, seed + 2, 0.3f, 0.0f);
  *G = randn(LN_ROWS * LN_C, seed + 3, 1.0f, 0.0f);
}

/* y, mean, rstd against the double reference. The fp32 kernel sums C = 33 terms for the mean
 * and the variance (relative error ~C·u ≈ 2e-6 at worst), then y = n·w + b with |n| <= ~3:
 * observed max error 5.5e-7 on y (|y| up to ~4); tolerance 5e-6 absolute, 2e-6 relative on mean
 * and rstd. A dropped eps or a biased variance (÷(C−1)) is off by > 1e-2. */
Test(common_ops_gpt, layernorm_fwd_matches_double_reference) {
  float *x, *w, *b, *G;
  ln_inputs(&x, &w, &b, &G, 100);
  float y[LN_ROWS * LN_C], mean[LN_ROWS], rstd[LN_ROWS];
  op_layernorm_fwd(DEV_CPU, y, mean, rstd, x, w, b, DT_F32, LN_ROWS, LN_C);
  double *xd = widen_d(x, LN_ROWS * LN_C), *wd = widen_d(w, LN_C), *bd = widen_d(b, LN_C);
  double yd[LN_ROWS * LN_C], md[LN_ROWS], rd[LN_ROWS];
  ref_layernorm(yd, md, rd, xd, wd, bd, LN_ROWS, LN_C);
  zl_expect_close_abs("layernorm y", y, yd, LN_ROWS * LN_C, 5e-6);
  for (int r = 0; r < LN_ROWS; r++) {
    cr_assert(zl_rel(mean[r], md[r]) < 2e-6, "layernorm mean[%d]: got %.9g, expected %.9g", r, mean[r],
              md[r]);
    cr_assert(zl_rel(rstd[r], rd[r]) < 2e-6, "layernorm rstd[%d]: got %.9g, expected %.9g", r, rstd[r],
              rd[r]);
  }
  free(x); free(w); free(b); free(G); free(xd); free(wd); free(bd);
}

/* dx (onto a zero dx), dw, db against central differences of the double reference
 * (h = 1e-4: truncation ~h²·|f'''| ≈ 1e-8, rounding ~1e-16·|L|/h ≈ 1e-10). The fp32 kernel's own
 * error is a few ulp of the sums it forms (gradients up to ~5): observed max 2.4e-7 (dw);
 * tolerance 5e-6. A missing mean(g·n) term is off by ~0.1. */
Test(common_ops_gpt, layernorm_bwd_finite_difference) {
  float *x, *w, *b, *G;
  ln_inputs(&x, &w, &b, &G, 110);
  int n = LN_ROWS * LN_C;
  float y[LN_ROWS * LN_C], mean[LN_ROWS], rstd[LN_ROWS], dw[LN_C], db[LN_C];
  float *dx = calloc(n, sizeof(float));
  op_layernorm_fwd(DEV_CPU, y, mean, rstd, x, w, b, DT_F32, LN_ROWS, LN_C);
  op_layernorm_bwd(DEV_CPU, dx, dw, db, G, x, mean, rstd, w, DT_F32, LN_ROWS, LN_C, 0.0f);
  double *xd = widen_d(x, n), *wd = widen_d(w, LN_C), *bd = widen_d(b, LN_C), *Gd = widen_d(G, n);
  double *num = malloc(sizeof(double) * n);
  struct { const char *name; double *in; const float *grad; int n; } cases[] = {
      {"layernorm dx", xd, dx, n}, {"layernorm dw", wd, dw, LN_C}, {"layernorm db", bd, db, LN_C}};
  for (int k = 0; k < 3; k++) {
    ln_ctx_t ctx = {xd, wd, bd, Gd, LN_ROWS, LN_C, k};
    fd_grad(num, cases[k].in, NULL, cases[k].n, 1e-4, ln_loss, &ctx);
    zl_expect_close_abs(cases[k].name, cases[k].grad, num, cases[k].n, 5e-6);
  }
  free(x); free(w); free(b); free(G); free(dx); free(xd); free(wd); free(bd); free(Gd); free(num);
}

/* dx is accumulated (dx0 + fresh, bitwise what op_add gives); dw/db: beta 0 overwrites even a
 * NaN, beta 1 adds the complete sum once (bitwise old + fresh). */
Test(common_ops_gpt, layernorm_bwd_accumulates) {
  float *x, *w, *b, *G;
  ln_inputs(&x, &w, &b, &G, 120);
  int n = LN_ROWS * LN_C;
  float y[LN_ROWS * LN_C], mean[LN_ROWS], rstd[LN_ROWS];
  op_layernorm_fwd(DEV_CPU, y, mean, rstd, x, w, b, DT_F32, LN_ROWS, LN_C);
  float *fresh = calloc(n, sizeof(float)), *dx = randn(n, 121, 1.0f, 0.0f),
        *expect = malloc(sizeof(float) * n);
  float g0[2 * LN_C], g1[2 * LN_C], gexp[2 * LN_C];
  memcpy(expect, dx, sizeof(float) * n);
  op_layernorm_bwd(DEV_CPU, fresh, g0, g0 + LN_C, G, x, mean, rstd, w, DT_F32, LN_ROWS, LN_C, 0.0f);
  op_layernorm_bwd(DEV_CPU, dx, g1, g1 + LN_C, G, x, mean, rstd, w, DT_F32, LN_ROWS, LN_C, 0.0f);
  op_add(DEV_CPU, expect, fresh, DT_F32, n);
  zl_expect_floats("layernorm dx (accumulated onto dx0)", dx, expect, n, 0);
  for (int i = 0; i < 2 * LN_C; i++) g1[i] = NAN;
  op_layernorm_bwd(DEV_CPU, dx, g1, g1 + LN_C, G, x, mean, rstd, w, DT_F32, LN_ROWS, LN_C, 0.0f);
  zl_expect_floats("layernorm dw,db (beta 0 over NaN)", g1, g0, 2 * LN_C, 0);
  float *old = randn(2 * LN_C, 122, 1.0f, 0.0f);
  memcpy(g1, old, sizeof g1);
  memcpy(gexp, old, sizeof gexp);
  op_layernorm_bwd(DEV_CPU, dx, g1, g1 + LN_C, G, x, mean, rstd, w, DT_F32, LN_ROWS, LN_C, 1.0f);
  op_add(DEV_CPU, gexp, g0, DT_F32, 2 * LN_C);
  zl_expect_floats("layernorm dw,db (beta 1)", g1, gexp, 2 * LN_C, 0);
  free(x); free(w); free(b); free(G); free(fresh); free(dx); free(expect); free(old);
}

/* bf16 w, b give bit for bit what fp32 w, b holding the same values give (y, dx); bf16 dw/db are
 * the fp32 sums rounded ONCE (beta 0), and bf16(old + fp32 sum) for beta 1. */
Test(common_ops_gpt, layernorm_bf16_weights) {
  float *x, *w, *b, *G;
  ln_inputs(&x, &w, &b, &G, 130);
  zl_round_bf16(w, LN_C);
  zl_round_bf16(b, LN_C);
  bf16_t *wh = zl_to_bf16(w, LN_C), *bh = zl_to_bf16(b, LN_C);
  int n = LN_ROWS * LN_C;
  float y32[LN_ROWS * LN_C], y16[LN_ROWS * LN_C], m32[LN_ROWS], m16[LN_ROWS], r32[LN_ROWS], r16[LN_ROWS];
  op_layernorm_fwd(DEV_CPU, y32, m32, r32, x, w, b, DT_F32, LN_ROWS, LN_C);
  op_layernorm_fwd(DEV_CPU, y16, m16, r16, x, wh, bh, DT_BF16, LN_ROWS, LN_C);
  zl_expect_floats("layernorm y (bf16 w vs fp32 w)", y16, y32, n, 0);
  float *dx32 = calloc(n, sizeof(float)), *dx16 = calloc(n, sizeof(float)), g32[2 * LN_C];
  bf16_t g16[2 * LN_C], e16[2 * LN_C];
  op_layernorm_bwd(DEV_CPU, dx32, g32, g32 + LN_C, G, x, m32, r32, w, DT_F32, LN_ROWS, LN_C, 0.0f);
  op_layernorm_bwd(DEV_CPU, dx16, g16, g16 + LN_C, G, x, m16, r16, wh, DT_BF16, LN_ROWS, LN_C, 0.0f);
  zl_expect_floats("layernorm dx (bf16 w vs fp32 w)", dx16, dx32, n, 0);
  for (int i = 0; i < 2 * LN_C; i++) e16[i] = bf16_from_f32(g32[i]);
  zl_expect_bits_bf16("layernorm dw,db bf16 (beta 0)", g16, e16, 2 * LN_C);
  float *old = randn(2 * LN_C, 131, 0.05f, 0.0f);
  for (int i = 0; i < 2 * LN_C; i++) {
    g16[i] = bf16_from_f32(old[i]);
    e16[i] = bf16_from_f32(bf16_to_f32(g16[i]) + g32[i]);
  }
  op_layernorm_bwd(DEV_CPU, dx16, g16, g16 + LN_C, G, x, m16, r16, wh, DT_BF16, LN_ROWS, LN_C, 1.0f);
  zl_expect_bits_bf16("layernorm dw,db bf16 (beta 1)", g16, e16, 2 * LN_C);
  free(x); free(w); free(b); free(G); free(wh); free(bh); free(dx32); free(dx16); free(old);
}

/* ---- attention: reference ---------------------------------------------------------------- */
static void ref_attention(double *out, double *att, const double *qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  double *row = malloc(sizeof(double) * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + ((int64_t)b * T + t) * 3 * C + h * hs;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const double *k = qkv + ((int64_t)b * T + j) * 3 * C + C + h * hs;
          double s = 0;
          for (int d = 0; d < hs; d++) s += q[d] * k[d];
          row[j] = s * scale;
          mx = fmax(mx, row[j]);
        }
        for (int j = 0; j <= t; j++) sum += (row[j] = exp(row[j] - mx));
        double *o = out + ((int64_t)b * T + t) * C + h * hs;
        for (int d = 0; d < hs; d++) o[d] = 0;
        for (int j = 0; j <= t; j++) {
          const double *v = qkv + ((int64_t)b * T + j) * 3 * C + 2 * C + h * hs;
          double p = row[j] / sum;
          if (att) att[(((int64_t)b * NH + h) * T + t) * T + j] = p;
          for (int d = 0; d < hs; d++) o[d] += p * v[d];
        }
        if (att)
          for (int j = t + 1; j < T; j++) att[(((int64_t)b * NH + h) * T + t) * T + j] = 0;
      }
  free(row);
}
typedef struct att_ctx { const double *G; int B, T, C, NH; } att_ctx_t;
static double att_loss(const double *qkv, const void *vctx) {
  const att_ctx_t *c = vctx;
  int64_t n = (int64_t)c->B * c->T * c->C;
  double *out = malloc(sizeof(double) * n), L = 0;
  ref_attention(out, NULL, qkv, c->B, c->T, c->C, c->NH);
  for (int64_t i = 0; i < n; i++) L += c->G[i] * out[i];
  free(out);
  return L;
}

/* Shapes: a small one (B 2, T 5, C 8, NH 2) and one crossing ops_gpt_cpu.c's 64-row blocks
 * (B 1, T 70, C 16, NH 2). */
typedef struct att_shape { int B, T, C, NH; } att_shape_t;
static const att_shape_t ATT_SHAPES[] = {{2, 5, 8, 2}, {1, 70, 16, 2}};

/* out and att against the double reference; rows of att sum to 1; above the diagonal exactly 0.
 * Scores ~O(1) (q, k ~ N(0,1), scale 1/sqrt(hs)): fp32 exps and the fp32 row sum give ~1e-7
 * relative per probability; observed below 2e-7 on att and 5e-7 on out: tolerances 1e-6 (att)
 * and 2e-6 (out, |v| ~ 1). A missing scale or a mask off by one is off by > 1e-2. */
Test(common_ops_gpt, attention_fwd_matches_double_reference) {
  for (int s = 0; s < 2; s++) {
    att_shape_t sh = ATT_SHAPES[s];
    int64_t nq = (int64_t)sh.B * sh.T * 3 * sh.C, no = (int64_t)sh.B * sh.T * sh.C,
            na = (int64_t)sh.B * sh.NH * sh.T * sh.T;
    float *qkv = randn(nq, 200 + s, 1.0f, 0.0f), *out = malloc(sizeof(float) * no), *att = nan_filled(na);
    op_attention_fwd(DEV_CPU, out, att, qkv, sh.B, sh.T, sh.C, sh.NH);
    double *qd = widen_d(qkv, nq), *od = malloc(sizeof(double) * no), *ad = malloc(sizeof(double) * na);
    ref_attention(od, ad, qd, sh.B, sh.T, sh.C, sh.NH);
    zl_expect_close_abs(s ? "attention att (T 70)" : "attention att", att, ad, na, 1e-6);
    zl_expect_close_abs(s ? "attention out (T 70)" : "attention out", out, od, no, 2e-6);
    for (int64_t r = 0; r < (int64_t)sh.B * sh.NH * sh.T; r++) {
      int t = (int)(r % sh.T);
      double sum = 0;
      for (int j = 0; j < sh.T; j++) {
        float p = att[r * sh.T + j];
        if (j > t)
          cr_assert(p == 0.0f && !signbit(p),
                    "attention att row %lld (t %d) col %d above the diagonal: got %g, "
                    "expected exactly 0",
                    (long long)r, t, j, p);
        sum += p;
      }
      cr_assert(fabs(sum - 1.0) <= 1e-6 * (1 + t / 8),
                "attention att row %lld (t %d) sums to %.9g, expected 1", (long long)r, t, sum);
    }
    free(qkv); free(out); free(att); free(qd); free(od); free(ad);
  }
}

/* Changing every q, k, v of a later position leaves all earlier outputs and att rows bit-identical
 * (T 70 crosses the 64-row blocks; the changed position 66 sits inside the second block). */
Test(common_ops_gpt, attention_causal_mask_bitwise) {
  const int B = 2, T = 70, C = 16, NH = 4, tc = 66;
  int64_t nq = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, na = (int64_t)B * NH * T * T;
  float *qkv = randn(nq, 210, 1.0f, 0.0f), *o1 = malloc(sizeof(float) * no), *o2 = malloc(sizeof(float) * no);
  float *a1 = malloc(sizeof(float) * na), *a2 = malloc(sizeof(float) * na);
  op_attention_fwd(DEV_CPU, o1, a1, qkv, B, T, C, NH);
  for (int b = 0; b < B; b++)
    for (int t = tc; t < T; t++)
      for (int i = 0; i < 3 * C; i++) qkv[((int64_t)b * T + t) * 3 * C + i] += 5.0f + (float)i;
  op_attention_fwd(DEV_CPU, o2, a2, qkv, B, T, C, NH);
  for (int b = 0; b < B; b++) {
    for (int64_t i = (int64_t)b * T * C; i < ((int64_t)b * T + tc) * C; i++)
      cr_assert(memcmp(&o1[i], &o2[i], 4) == 0,
                "attention out[%lld] (b %d, t %lld < %d): got %.9g after changing "
                "positions >= %d, expected %.9g (bitwise)",
                (long long)i, b, (long long)(i / C % T), tc, o2[i], tc, o1[i]);
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < tc; t++) {
        int64_t r = (((int64_t)b * NH + h) * T + t) * T;
        cr_assert(memcmp(a1 + r, a2 + r, sizeof(float) * T) == 0,
                  "attention att row (b %d, h %d, t %d < %d) changed after changing later positions", b, h, t,
                  tc);
      }
  }
  int changed = 0; /* and the change did reach the later outputs */
  for (int64_t i = (int64_t)tc * C; i < (int64_t)T * C; i++) changed |= o1[i] != o2[i];
  cr_assert(changed, "attention out: changing positions >= %d changed nothing at all: the test is void", tc);
  free(qkv); free(o1); free(o2); free(a1); free(a2);
}

/* dqkv against central differences of the double reference (h = 1e-4: truncation ~1e-9). All
 * elements for the small shape; for T 70 every 11th element plus every element of positions 62..66
 * (around the block edge). dqkv starts as NaN: it must be overwritten. The fp32 kernel: dP, dS and
 * three GEMMs of <= T terms of O(1): observed max error below 1e-6; tolerance 5e-6. Gradients O(1). */
Test(common_ops_gpt, attention_bwd_finite_difference) {
  for (int s = 0; s < 2; s++) {
    att_shape_t sh = ATT_SHAPES[s];
    int64_t nq = (int64_t)sh.B * sh.T * 3 * sh.C, no = (int64_t)sh.B * sh.T * sh.C,
            na = (int64_t)sh.B * sh.NH * sh.T * sh.T;
    float *qkv = randn(nq, 220 + s, 1.0f, 0.0f), *G = randn(no, 230 + s, 1.0f, 0.0f);
    float *out = malloc(sizeof(float) * no), *att = malloc(sizeof(float) * na), *dqkv = nan_filled(nq);
    op_attention_fwd(DEV_CPU, out, att, qkv, sh.B, sh.T, sh.C, sh.NH);
    op_attention_bwd(DEV_CPU, dqkv, G, qkv, att, sh.B, sh.T, sh.C, sh.NH);
    int64_t *idx = malloc(sizeof(int64_t) * nq), n = 0;
    for (int64_t i = 0; i < nq; i++) {
      int64_t t = i / (3 * sh.C) % sh.T;
      if (s == 0 || i % 11 == 0 || (t >= 62 && t <= 66)) idx[n++] = i;
    }
    double *qd = widen_d(qkv, nq), *Gd = widen_d(G, no), *num = malloc(sizeof(double) * n);
    att_ctx_t ctx = {Gd, sh.B, sh.T, sh.C, sh.NH};
    fd_grad(num, qd, idx, n, 1e-4, att_loss, &ctx);
    for (int64_t k = 0; k < n; k++) {
      int64_t i = idx[k];
      int64_t row = i / (3 * sh.C);
      int col = (int)(i % (3 * sh.C));
      cr_assert(fabs(dqkv[i] - num[k]) <= 5e-6,
                "attention dqkv[%lld] (b %lld, t %lld, %s %d): got %.9g, expected %.9g "
                "(abs tol 5e-6, T %d)",
                (long long)i, (long long)(row / sh.T), (long long)(row % sh.T),
                col < sh.C           ? "q"
                    : col < 2 * sh.C ? "k"
                                     : "v",
                col % sh.C, dqkv[i], num[k], sh.T);
    }
    free(qkv); free(G); free(out); free(att); free(dqkv); free(idx); free(qd); free(Gd); free(num);
  }
}

/* ---- embedding ----------------------------------------------------------------------------- */
enum { EB = 3, ET = 4, EC = 5, EV = 7 };
/* Repeated tokens (3 appears four times, across batch rows), two unused ids (0, 6). */
static const int E_TOK[EB * ET] = {3, 1, 3, 2, 5, 3, 4, 1, 2, 3, 5, 5};

/* out = wte[tok] + wpe[t]: one fp32 addition, so exactly the correctly rounded double sum —
 * bitwise, fp32 and bf16 tables. */
Test(common_ops_gpt, embedding_fwd_exact) {
  for (int pass = 0; pass < 2; pass++) {
    dtype_t wdt = pass ? DT_BF16 : DT_F32;
    float *wte = randn(EV * EC, 300, 1.0f, 0.0f), *wpe = randn(ET * EC, 301, 1.0f, 0.0f), out[EB * ET * EC];
    if (wdt == DT_BF16) zl_round_bf16(wte, EV * EC), zl_round_bf16(wpe, ET * EC);
    void *te = wdt == DT_BF16 ? (void *)zl_to_bf16(wte, EV * EC) : (void *)wte;
    void *pe = wdt == DT_BF16 ? (void *)zl_to_bf16(wpe, ET * EC) : (void *)wpe;
    op_embedding_fwd(DEV_CPU, out, E_TOK, te, pe, wdt, EB, ET, EC, EV);
    float exp[EB * ET * EC];
    for (int p = 0; p < EB * ET; p++)
      for (int c = 0; c < EC; c++)
        exp[p * EC + c] = (float)((double)wte[E_TOK[p] * EC + c] + wpe[(p % ET) * EC + c]);
    zl_expect_floats(pass ? "embedding out (bf16 tables)" : "embedding out", out, exp, EB * ET * EC, 0);
    if (wdt == DT_BF16) free(te), free(pe);
    free(wte); free(wpe);
  }
}

/* L = Σ G·out in double, `in` being wte (which 0) or wpe (which 1). */
typedef struct emb_ctx { const double *wte, *wpe, *G; int which; } emb_ctx_t;
static double emb_loss(const double *in, const void *vctx) {
  const emb_ctx_t *c = vctx;
  const double *wte = c->which == 0 ? in : c->wte, *wpe = c->which == 1 ? in : c->wpe;
  double L = 0;
  for (int p = 0; p < EB * ET; p++)
    for (int k = 0; k < EC; k++) L += c->G[p * EC + k] * (wte[E_TOK[p] * EC + k] + wpe[(p % ET) * EC + k]);
  return L;
}
/* dwte, dwpe against central differences of the double reference (linear: exact up to
 * rounding, ~1e-12); unused rows 0 (they started as NaN: beta 0 must overwrite them). The fp32
 * sums have <= 4 terms of O(1): tolerance 1e-6. */
Test(common_ops_gpt, embedding_bwd_repeated_tokens_finite_difference) {
  float *G = randn(EB * ET * EC, 310, 1.0f, 0.0f), *wte = randn(EV * EC, 311, 1.0f, 0.0f),
        *wpe = randn(ET * EC, 312, 1.0f, 0.0f);
  float *dwte = nan_filled(EV * EC), *dwpe = nan_filled(ET * EC);
  op_embedding_bwd(DEV_CPU, dwte, dwpe, G, E_TOK, DT_F32, EB, ET, EC, EV, 0.0f);
  double *Gd = widen_d(G, EB * ET * EC), *ted = widen_d(wte, EV * EC), *ped = widen_d(wpe, ET * EC);
  double num[EV * EC];
  emb_ctx_t c0 = {ted, ped, Gd, 0}, c1 = {ted, ped, Gd, 1};
  fd_grad(num, ted, NULL, EV * EC, 0.5, emb_loss, &c0);
  zl_expect_close_abs("embedding dwte", dwte, num, EV * EC, 1e-6);
  fd_grad(num, ped, NULL, ET * EC, 0.5, emb_loss, &c1);
  zl_expect_close_abs("embedding dwpe", dwpe, num, ET * EC, 1e-6);
  for (int c = 0; c < EC; c++)
    cr_assert(dwte[c] == 0.0f && dwte[6 * EC + c] == 0.0f,
              "embedding dwte of unused tokens 0, 6 (col %d): got %g, %g, "
              "expected 0",
              c, dwte[c], dwte[6 * EC + c]);
  free(G); free(wte); free(wpe); free(dwte); free(dwpe); free(Gd); free(ted); free(ped);
}

/* beta 1: old + fresh, bitwise (fp32); bf16 gradients: the fp32 sums rounded once (beta 0) and
 * bf16(old + fp32 sum) (beta 1). */
Test(common_ops_gpt, embedding_bwd_beta_and_bf16) {
  const int nte = EV * EC, npe = ET * EC;
  float *G = randn(EB * ET * EC, 320, 1.0f, 0.0f), *old = randn(nte + npe, 321, 1.0f, 0.0f);
  float fresh[EV * EC + ET * EC], acc[EV * EC + ET * EC], exp[EV * EC + ET * EC];
  op_embedding_bwd(DEV_CPU, fresh, fresh + nte, G, E_TOK, DT_F32, EB, ET, EC, EV, 0.0f);
  memcpy(acc, old, sizeof acc);
  memcpy(exp, old, sizeof exp);
  op_embedding_bwd(DEV_CPU, acc, acc + nte, G, E_TOK, DT_F32, EB, ET, EC, EV, 1.0f);
  op_add(DEV_CPU, exp, fresh, DT_F32, nte + npe);
  zl_expect_floats("embedding dwte,dwpe (beta 1)", acc, exp, nte + npe, 0);
  bf16_t g16[EV * EC + ET * EC], e16[EV * EC + ET * EC];
  op_embedding_bwd(DEV_CPU, g16, g16 + nte, G, E_TOK, DT_BF16, EB, ET, EC, EV, 0.0f);
  for (int i = 0; i < nte + npe; i++) e16[i] = bf16_from_f32(fresh[i]);
  zl_expect_bits_bf16("embedding dwte,dwpe bf16 (beta 0)", g16, e16, nte + npe);
  for (int i = 0; i < nte + npe; i++) {
    g16[i] = bf16_from_f32(old[i]);
    e16[i] = bf16_from_f32(bf16_to_f32(g16[i]) + fresh[i]);
  }
  op_embedding_bwd(DEV_CPU, g16, g16 + nte, G, E_TOK, DT_BF16, EB, ET, EC, EV, 1.0f);
  zl_expect_bits_bf16("embedding dwte,dwpe bf16 (beta 1)", g16, e16, nte + npe);
  free(G); free(old);
}

static void bad_token(void) {
  int tok[2] = {1, 9};
  float wte[8 * 2] = {0}, wpe[2 * 2] = {0}, out[4];
  op_embedding_fwd(DEV_CPU, out, tok, wte, wpe, DT_F32, 1, 2, 2, 8);
}
Test(common_ops_gpt, embedding_bad_token_dies_clearly) {
  char out[1024];
  int rc = zl_run_child(bad_token, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect(strstr(out, "token[1] = 9 outside [0, 8)"), "message: got '%s', expected it to name token[1] = 9",
            out);
}

/* ---- determinism: every op twice on the same inputs, same bits (other ops run in between and
 * reuse the workspaces) ------------------------------------------------------------------------ */
Test(common_ops_gpt, every_op_is_deterministic) {
  const int B = 2, T = 67, C = 24, NH = 3, V = 11, rows = B * T;
  int64_t nx = (int64_t)rows * C, nq = 3 * nx, na = (int64_t)B * NH * T * T;
  float *x = randn(nx, 400, 1.0f, 0.5f), *w = randn(C, 401, 0.2f, 1.0f), *b = randn(C, 402, 0.2f, 0.0f);
  float *dy = randn(nx, 403, 1.0f, 0.0f), *qkv = randn(nq, 404, 1.0f, 0.0f),
        *wte = randn((int64_t)V * C, 405, 1, 0);
  int *tok = malloc(sizeof(int) * rows);
  for (int i = 0; i < rows; i++) tok[i] = (i * 7 + i / 5) % V;
  float *r[2][12];
  for (int k = 0; k < 2; k++) {
    float **o = r[k];
    o[0] = malloc(sizeof(float) * nx), o[1] = malloc(sizeof(float) * rows),
    o[2] = malloc(sizeof(float) * rows);
    op_layernorm_fwd(DEV_CPU, o[0], o[1], o[2], x, w, b, DT_F32, rows, C);
    o[3] = calloc(nx, sizeof(float)), o[4] = malloc(sizeof(float) * 2 * C);
    op_layernorm_bwd(DEV_CPU, o[3], o[4], o[4] + C, dy, x, o[1], o[2], w, DT_F32, rows, C, 0.0f);
    o[5] = malloc(sizeof(float) * nx), o[6] = malloc(sizeof(float) * na), o[7] = nan_filled(nq);
    op_attention_fwd(DEV_CPU, o[5], o[6], qkv, B, T, C, NH);
    op_attention_bwd(DEV_CPU, o[7], dy, qkv, o[6], B, T, C, NH);
    o[8] = malloc(sizeof(float) * nx), o[9] = nan_filled((int64_t)V * C), o[10] = nan_filled((int64_t)T * C);
    op_embedding_fwd(DEV_CPU, o[8], tok, wte, x, DT_F32, B, T, C, V);
    op_embedding_bwd(DEV_CPU, o[9], o[10], dy, tok, DT_F32, B, T, C, V, 0.0f);
  }
  struct { const char *name; int64_t n;
  } t[11] = {{"layernorm y", nx},
             {"layernorm mean", rows},
             {"layernorm rstd", rows},
             {"layernorm dx", nx},
             {"layernorm dw,db", 2 * C},
             {"attention out", nx},
             {"attention att", na},
             {"attention dqkv", nq},
             {"embedding out", nx},
             {"embedding dwte", (int64_t)V * C},
             {"embedding dwpe", (int64_t)T * C}};
  for (int i = 0; i < 11; i++) {
    expect_same_bits(t[i].name, r[0][i], r[1][i], sizeof(float) * t[i].n);
    for (int64_t j = 0; j < t[i].n; j++)
      cr_assert(isfinite(r[0][i][j]), "%s[%lld]: got %g, expected finite (written)", t[i].name, (long long)j,
                r[0][i][j]);
  }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 11; i++) free(r[k][i]);
  free(x); free(w); free(b); free(dy); free(qkv); free(wte); free(tok);
}

/* ---- linear without bias (the LM head): b == NULL is a zero bias, db == NULL skips db ------- */
Test(common_ops_gpt, linear_without_bias) {
  const int B = 5, in = 6, out = 4;
  float *x = randn(B * in, 500, 1, 0), *W = randn(out * in, 501, 1, 0), *G = randn(B * out, 502, 1, 0);
  float zero[4] = {0}, y0[20], y1[20], dx0[30], dx1[30], dW0[24], dW1[24], db0[4];
  op_linear_fwd(DEV_CPU, y0, x, W, zero, DT_F32, B, in, out);
  op_linear_fwd(DEV_CPU, y1, x, W, NULL, DT_F32, B, in, out);
  zl_expect_floats("linear y (b NULL vs zero bias)", y1, y0, B * out, 0);
  op_linear_bwd(DEV_CPU, dx0, dW0, db0, G, x, W, DT_F32, B, in, out, 0.0f);
  op_linear_bwd(DEV_CPU, dx1, dW1, NULL, G, x, W, DT_F32, B, in, out, 0.0f);
  zl_expect_floats("linear dx (db NULL vs given)", dx1, dx0, B * in, 0);
  zl_expect_floats("linear dW (db NULL vs given)", dW1, dW0, out * in, 0);
  /* no rows: dW = beta·dW, db untouched */
  op_linear_bwd(DEV_CPU, dx1, dW1, NULL, G, x, W, DT_F32, 0, in, out, 1.0f);
  zl_expect_floats("linear dW (no rows, beta 1, db NULL)", dW1, dW0, out * in, 0);
  free(x); free(W); free(G);
}
