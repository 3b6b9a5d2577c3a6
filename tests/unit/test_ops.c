/* test_ops.c — the CPU kernels of common/device/ops.h (suite common_ops): finite-difference
 * gradient checks, bf16 rounding, the optimizers against double-precision references,
 * determinism. See notes/02-ddp.md. */
#include "zl_test.h" // Criterion, zl_expect_floats, zl_expect_close_abs, zl_expect_bits_bf16, zl_to_bf16
#include <float.h>   // FLT_MAX
#include "data.h"    // rng_normal, rng_uniform: reproducible test inputs
#include "device.h"  // dev_malloc, dev_memcpy, device_cuda_count: the CUDA comparison
#include "dtype.h"   // bf16_from_f32, bf16_to_f32
#include "ledger.h"  // ledger_live: workspace accounting
#include "ops.h"     // the ops under test

/* ---- helpers --------------------------------------------------------------------------- */
static float *randn(int64_t n, uint64_t seed, float scale) {
  float *p = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = scale * rng_normal(seed, 77, (uint64_t)i);
  return p;
}

/* y = x·Wᵀ + b in double. */
static void ref_linear(double *y, const float *x, const float *W, const float *b, int B, int in, int out) {
  for (int r = 0; r < B; r++)
    for (int o = 0; o < out; o++) {
      double s = b[o];
      for (int k = 0; k < in; k++) s += (double)x[r * in + k] * W[o * in + k];
      y[r * out + o] = s;
    }
}
/* L = Σ G·y for the fp32 op: the loss whose gradient w.r.t. y is G. Summed in double. */
static double linear_loss(const float *x, const float *W, const float *b, const float *G, int B, int in,
                          int out, float *ybuf) {
  op_linear_fwd(DEV_CPU, ybuf, x, W, b, DT_F32, B, in, out);
  double L = 0;
  for (int i = 0; i < B * out; i++) L += (double)G[i] * ybuf[i];
  return L;
}

/* ---- linear ------------------------------------------------------------------------------ */
/* Forward against a double reference, on a shape big enough to cross sgemm's blocking.
 * Any fp32 summation order of K = in + 1 terms is within K·u·Σ|terms| of the exact sum
 * (u = 2^-24, K·u = 1.8e-5 here): that bound, per element, is the tolerance. A layout bug
 * (wrong transpose or leading dimension) is off by O(Σ|terms|). */
Test(common_ops, linear_fwd_matches_double_reference) {
  int B = 37, in = 300, out = 211;
  float *x = randn((int64_t)B * in, 1, 1), *W = randn((int64_t)out * in, 2, 1), *b = randn(out, 3, 1);
  float *y = malloc(sizeof(float) * B * out);
  double *yd = malloc(sizeof(double) * B * out);
  op_linear_fwd(DEV_CPU, y, x, W, b, DT_F32, B, in, out);
  ref_linear(yd, x, W, b, B, in, out);
  for (int r = 0; r < B; r++)
    for (int o = 0; o < out; o++) {
      double mag = fabs(b[o]);
      for (int k = 0; k < in; k++) mag += fabs((double)x[r * in + k] * W[o * in + k]);
      double tol = (in + 1) * 0x1p-24 * mag;
      int i = r * out + o;
      cr_assert(fabs(y[i] - yd[i]) <= tol,
                "linear y[%d] (row %d, col %d): got %.9g, expected %.9g (tol %.3g)", i, r, o, y[i], yd[i],
                tol);
    }
  free(x); free(W); free(b); free(y); free(yd);
}

/* dx, dW, db against central differences of L = Σ G·y computed through the fp32 op.
 * y is linear in every input, so the difference quotient has no truncation error; what is left
 * is fp32 rounding of y: ≈ 6e-8·Σ|G·y| / (2h) ≈ 6e-8·40/0.1 ≈ 2.4e-5 with h = 0.05. Gradients
 * are O(1): absolute tolerance 5e-4. */
Test(common_ops, linear_bwd_finite_difference) {
  int B = 4, in = 6, out = 5;
  float h = 0.05f;
  float *x = randn(B * in, 10, 1), *W = randn(out * in, 11, 1), *b = randn(out, 12, 1),
        *G = randn(B * out, 13, 1);
  float dx[4 * 6], dW[5 * 6], db[5], ybuf[4 * 5];
  op_linear_bwd(DEV_CPU, dx, dW, db, G, x, W, DT_F32, B, in, out, 0.0f);
  struct { const char *name; float *p, *grad; int n; } cases[] = {
      {"dx", x, dx, B * in}, {"dW", W, dW, out * in}, {"db", b, db, out}};
  for (int c = 0; c < 3; c++) {
    double *num = malloc(sizeof(double) * cases[c].n);
    for (int i = 0; i < cases[c].n; i++) {
      float keep = cases[c].p[i];
      cases[c].p[i] = keep + h;
      double lp = linear_loss(x, W, b, G, B, in, out, ybuf);
      cases[c].p[i] = keep - h;
      double lm = linear_loss(x, W, b, G, B, in, out, ybuf);
      cases[c].p[i] = keep;
      num[i] = (lp - lm) / ((double)(keep + h) - (double)(keep - h)); /* the step fp32 really took */
    }
    zl_expect_close_abs(cases[c].name, cases[c].grad, num, cases[c].n, 5e-4);
    free(num);
  }
  free(x); free(W); free(b); free(G);
}

/* dx == NULL skips dx and leaves the rest the same. */
Test(common_ops, linear_bwd_without_dx) {
  int B = 3, in = 4, out = 2;
  float *x = randn(B * in, 20, 1), *W = randn(out * in, 21, 1), *G = randn(B * out, 22, 1);
  float dx[12], dW1[8], db1[2], dW2[8], db2[2];
  op_linear_bwd(DEV_CPU, dx, dW1, db1, G, x, W, DT_F32, B, in, out, 0.0f);
  op_linear_bwd(DEV_CPU, NULL, dW2, db2, G, x, W, DT_F32, B, in, out, 0.0f);
  zl_expect_floats("dW (dx NULL vs given)", dW2, dW1, 8, 0);
  zl_expect_floats("db (dx NULL vs given)", db2, db1, 2, 0);
  free(x); free(W); free(G);
}

/* beta: 0 overwrites (even NaN), 1 adds the complete new sum once (so it equals op_add of the
 * beta-0 result, bitwise), 0.5 scales the old value first. */
Test(common_ops, linear_bwd_beta_accumulates) {
  int B = 9, in = 7, out = 5, nw = 35;
  float *x = randn(B * in, 30, 1), *W = randn(nw, 31, 1), *G = randn(B * out, 32, 1),
        *old = randn(nw + out, 33, 1);
  float fresh[40], acc[40], expect[40];
  op_linear_bwd(DEV_CPU, NULL, fresh, fresh + nw, G, x, W, DT_F32, B, in, out, 0.0f);
  /* beta 0 over NaN */
  for (int i = 0; i < nw + out; i++) acc[i] = NAN;
  op_linear_bwd(DEV_CPU, NULL, acc, acc + nw, G, x, W, DT_F32, B, in, out, 0.0f);
  zl_expect_floats("dW,db beta=0 over NaN", acc, fresh, nw + out, 0);
  /* beta 1 == old + fresh (one rounding) == op_add */
  memcpy(acc, old, sizeof(float) * (nw + out));
  op_linear_bwd(DEV_CPU, NULL, acc, acc + nw, G, x, W, DT_F32, B, in, out, 1.0f);
  memcpy(expect, old, sizeof(float) * (nw + out));
  op_add(DEV_CPU, expect, fresh, DT_F32, nw + out);
  zl_expect_floats("dW,db beta=1", acc, expect, nw + out, 0);
  /* beta 0.5 */
  memcpy(acc, old, sizeof(float) * (nw + out));
  op_linear_bwd(DEV_CPU, NULL, acc, acc + nw, G, x, W, DT_F32, B, in, out, 0.5f);
  for (int i = 0; i < nw + out; i++) expect[i] = 0.5f * old[i] + fresh[i];
  zl_expect_floats("dW,db beta=0.5", acc, expect, nw + out, 0);
  free(x); free(W); free(G); free(old);
}

/* bf16 weights give exactly what fp32 weights holding the same values give (forward and dx);
 * bf16 dW/db are the fp32 sums rounded ONCE (beta 0 and beta 1). */
Test(common_ops, linear_bf16_matches_fp32_with_same_values) {
  int B = 6, in = 33, out = 17, nw = 33 * 17;
  float *x = randn(B * in, 40, 1), *W = randn(nw, 41, 0.3f), *b = randn(out, 42, 1),
        *G = randn(B * out, 43, 1);
  zl_round_bf16(W, nw);
  zl_round_bf16(b, out);
  bf16_t *Wh = zl_to_bf16(W, nw), *bh = zl_to_bf16(b, out);
  float y32[6 * 17], y16[6 * 17], dx32[6 * 33], dx16[6 * 33];
  op_linear_fwd(DEV_CPU, y32, x, W, b, DT_F32, B, in, out);
  op_linear_fwd(DEV_CPU, y16, x, Wh, bh, DT_BF16, B, in, out);
  zl_expect_floats("y (bf16 W vs fp32 W)", y16, y32, B * out, 0);

  float *g32 = malloc(sizeof(float) * (nw + out));
  bf16_t *g16 = malloc(sizeof(bf16_t) * (nw + out)), *exp16 = malloc(sizeof(bf16_t) * (nw + out));
  op_linear_bwd(DEV_CPU, dx32, g32, g32 + nw, G, x, W, DT_F32, B, in, out, 0.0f);
  op_linear_bwd(DEV_CPU, dx16, g16, g16 + nw, G, x, Wh, DT_BF16, B, in, out, 0.0f);
  zl_expect_floats("dx (bf16 W vs fp32 W)", dx16, dx32, B * in, 0);
  for (int i = 0; i < nw + out; i++) exp16[i] = bf16_from_f32(g32[i]);
  zl_expect_bits_bf16("dW,db bf16 beta=0", g16, exp16, nw + out);

  /* beta 1 on a bf16 accumulator: bf16(old + fp32 sum), not bf16(old + bf16(sum)) */
  float *old = randn(nw + out, 44, 0.01f);
  int differs_from_double_rounding = 0;
  for (int i = 0; i < nw + out; i++) {
    g16[i] = bf16_from_f32(old[i]);
    exp16[i] = bf16_from_f32(bf16_to_f32(g16[i]) + g32[i]);
    differs_from_double_rounding |=
        exp16[i] != bf16_from_f32(bf16_to_f32(g16[i]) + bf16_to_f32(bf16_from_f32(g32[i])));
  }
  op_linear_bwd(DEV_CPU, NULL, g16, g16 + nw, G, x, Wh, DT_BF16, B, in, out, 1.0f);
  zl_expect_bits_bf16("dW,db bf16 beta=1", g16, exp16, nw + out);
  cr_expect(differs_from_double_rounding, "test inputs cannot tell one rounding from two; pick others");
  free(x); free(W); free(b); free(G); free(Wh); free(bh); free(g32); free(g16); free(exp16); free(old);
}

/* ---- GELU ----------------------------------------------------------------------------- */
static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Forward against the double formula; backward against central differences of the double
 * formula (h = 1e-4: truncation ~h²·|f'''| ≈ 1e-8, rounding ~1e-12). The fp32 kernel (its own
 * exp-based tanh) measures ≤ 5e-7 off on y over [−20, 20] (≈ one ulp of |y| ≤ 20) and ≤ 1e-6 on
 * GELU': tolerances 2e-6·max(1,|x|) on y and 4e-6 on dx (|dy| ≤ 2.5) — tight enough that a
 * 1e-4 slip in one coefficient of the exp polynomial fails. Covers |x| up to 10, where cosh
 * would overflow a naive sech². */
Test(common_ops, gelu_forward_and_finite_difference) {
  enum { N = 201 };
  float x[N], y[N], dy[N], dx[N];
  double yref[N], dxref[N];
  for (int i = 0; i < N; i++) {
    x[i] = -10.0f + 0.1f * i + 0.003f; /* avoid exact 0 */
    dy[i] = 0.5f + 0.01f * i;
  }
  op_gelu_fwd(DEV_CPU, y, x, N);
  op_gelu_bwd(DEV_CPU, dx, dy, x, N);
  for (int i = 0; i < N; i++) {
    double h = 1e-4;
    yref[i] = gelu_d(x[i]);
    dxref[i] = dy[i] * (gelu_d(x[i] + h) - gelu_d(x[i] - h)) / (2 * h);
    cr_assert(fabs(y[i] - yref[i]) <= 2e-6 * fmax(1.0, fabs(x[i])),
              "gelu y[%d] (x=%g): got %.9g, expected %.9g", i, x[i], y[i], yref[i]);
    cr_assert(isfinite(dx[i]), "gelu dx[%d] (x=%g): got %g, expected finite", i, x[i], dx[i]);
  }
  zl_expect_close_abs("gelu dx", dx, dxref, N, 4e-6 /* |dy| <= 2.5 */);
  /* dx may alias dy */
  float d2[N];
  memcpy(d2, dy, sizeof d2);
  op_gelu_bwd(DEV_CPU, d2, d2, x, N);
  zl_expect_floats("gelu dx (in place)", d2, dx, N, 0);
}

/* ---- softmax cross-entropy ------------------------------------------------------------ */
static double xent_ref(const float *logits, const int *y, int B, int C) {
  double loss = 0;
  for (int r = 0; r < B; r++) {
    double mx = -INFINITY, s = 0;
    for (int c = 0; c < C; c++) mx = fmax(mx, logits[r * C + c]);
    for (int c = 0; c < C; c++) s += exp(logits[r * C + c] - mx);
    loss += log(s) + mx - logits[r * C + y[r]];
  }
  return loss;
}

/* -log softmax(l)[y] of one row, in double. */
static double xent_row_d(const double *l, int C, int y) {
  double mx = -INFINITY, s = 0;
  for (int c = 0; c < C; c++) mx = fmax(mx, l[c]);
  for (int c = 0; c < C; c++) s += exp(l[c] - mx);
  return log(s) + mx - l[y];
}

/* The loss against the double reference: rel 1e-6 (the fp32 exps carry ~1e-7 relative error).
 * dlogits against scale x central differences of the double loss: with h = 1e-4 on logits of
 * size ~3 the truncation error is ~h^2·|f'''|/6 ~ 1e-10 and rounding ~1e-12, so the reference is
 * exact to fp32 eyes; the kernel's p·scale carries a few ulp (<= 1e-7 absolute for scale 0.25):
 * absolute tolerance 1e-6. A missing scale, a wrong sign or a missing one-hot is >= 0.01 off. */
Test(common_ops, softmax_xent_finite_difference) {
  enum { B = 5, C = 7 };
  float *lg = randn(B * C, 50, 3);
  int y[B] = {0, 6, 3, 3, 1};
  float scale = 0.25f, dl[B * C];
  double num[B * C], h = 1e-4;
  double loss = op_softmax_xent(DEV_CPU, dl, lg, y, B, C, scale);
  double lref = xent_ref(lg, y, B, C);
  cr_assert(zl_rel(loss, lref) < 1e-6, "xent loss: got %.12g, expected %.12g", loss, lref);
  for (int i = 0; i < B * C; i++) {
    int r = i / C;
    double l[C];
    for (int c = 0; c < C; c++) l[c] = lg[r * C + c];
    l[i % C] += h;
    double lp = xent_row_d(l, C, y[r]);
    l[i % C] -= 2 * h;
    double lm = xent_row_d(l, C, y[r]);
    num[i] = scale * (lp - lm) / (2 * h);
  }
  zl_expect_close_abs("xent dlogits", dl, num, B * C, 1e-6);
  free(lg);
}

/* Subtracting the max keeps huge logits finite; the result equals the shifted problem's. */
Test(common_ops, softmax_xent_stable_for_large_logits) {
  enum { B = 2, C = 4 };
  float big[B * C] = {1000, 1001, 999, 1000.5f, -1000, -1001, -999, -1000.5f};
  float small[B * C] = {0, 1, -1, 0.5f, 0, -1, 1, -0.5f};
  int y[B] = {2, 1};
  float d1[B * C], d2[B * C];
  double l1 = op_softmax_xent(DEV_CPU, d1, big, y, B, C, 1.0f);
  double l2 = op_softmax_xent(DEV_CPU, d2, small, y, B, C, 1.0f);
  cr_assert(isfinite(l1), "xent loss for logits ~1000: got %g, expected finite", l1);
  cr_assert(zl_rel(l1, l2) < 1e-6, "xent loss shifted by 1000: got %.9g, expected %.9g", l1, l2);
  zl_expect_floats("xent dlogits (shifted)", d1, d2, B * C, 1e-6);
  /* rows of dlogits sum to 0 (softmax sums to 1) */
  for (int r = 0; r < B; r++) {
    double s = 0;
    for (int c = 0; c < C; c++) s += d1[r * C + c];
    cr_assert(fabs(s) < 1e-6, "xent dlogits row %d sums to %g, expected 0", r, s);
  }
}

/* ---- optimizers --------------------------------------------------------------------------- */
/* PyTorch's AdamW in double (torch.optim.AdamW, foreach=False): decay first, then the step. */
static void adamw_ref(double *w, const double *g, double *m, double *v, int n, const adamw_hp_t *hp, int t) {
  double bc1 = 1 - pow(hp->beta1, t), bc2 = 1 - pow(hp->beta2, t);
  for (int i = 0; i < n; i++) {
    w[i] *= 1 - (double)hp->lr * hp->weight_decay;
    m[i] = hp->beta1 * m[i] + (1 - (double)hp->beta1) * g[i];
    v[i] = hp->beta2 * v[i] + (1 - (double)hp->beta2) * g[i] * g[i];
    double denom = sqrt(v[i]) / sqrt(bc2) + hp->eps;
    w[i] -= hp->lr / bc1 * m[i] / denom;
  }
}

/* Six AdamW steps (fp32 and bf16 gradients) against the double reference. Per step the fp32
 * kernel rounds a handful of times (~1e-7 relative); gradients are bounded away from 0 so
 * m̂/sqrt(v̂) is well conditioned: 2e-6 relative on w, m, v after 6 steps. */
static void adamw_case(dtype_t gdt) {
  enum { N = 41, STEPS = 6 };
  adamw_hp_t hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  float gscale = 0.5f;
  float w[N], m[N] = {0}, v[N] = {0}, g32[N], fw[N], fm[N], fv[N];
  bf16_t g16[N];
  double dw[N], dm[N] = {0}, dv[N] = {0}, dg[N];
  for (int i = 0; i < N; i++) dw[i] = w[i] = rng_normal(5, 1, i);
  for (int t = 1; t <= STEPS; t++) {
    for (int i = 0; i < N; i++) {
      float gi = rng_normal(5, 100 + t, i);
      gi = gi >= 0 ? gi + 0.1f : gi - 0.1f;
      g32[i] = gi;
      g16[i] = bf16_from_f32(gi);
      dg[i] = gscale * (double)(gdt == DT_F32 ? g32[i] : bf16_to_f32(g16[i]));
    }
    op_adamw(DEV_CPU, w, gdt == DT_F32 ? (void *)g32 : (void *)g16, gdt, m, v, N, &hp, t, gscale);
    adamw_ref(dw, dg, dm, dv, N, &hp, t);
  }
  for (int i = 0; i < N; i++) { fw[i] = (float)dw[i]; fm[i] = (float)dm[i]; fv[i] = (float)dv[i]; }
  zl_expect_floats(gdt == DT_F32 ? "adamw w (fp32 grads)" : "adamw w (bf16 grads)", w, fw, N, 2e-6);
  zl_expect_floats("adamw m", m, fm, N, 2e-6);
  zl_expect_floats("adamw v", v, fv, N, 2e-6);
}
Test(common_ops, adamw_matches_pytorch_reference_fp32_grads) { adamw_case(DT_F32); }
Test(common_ops, adamw_matches_pytorch_reference_bf16_grads) { adamw_case(DT_BF16); }

/* SGD with momentum (PyTorch semantics, dampening 0): 8 steps against double. Each step rounds
 * a few times at the scale of the largest term, so errors are ~1e-7 of max|value| per step,
 * not of each element (momentum sums of mixed-sign gradients can cancel to near 0): absolute
 * tolerance 2e-6·max|expected| for w and for the buffer. */
Test(common_ops, sgd_momentum_matches_reference) {
  enum { N = 29, STEPS = 8 };
  float lr = 0.05f, mu = 0.9f, wd = 0.01f, gscale = 0.25f;
  float w[N], buf[N] = {0}, g[N];
  double dw[N], db[N] = {0};
  for (int i = 0; i < N; i++) dw[i] = w[i] = rng_normal(6, 1, i);
  for (int t = 1; t <= STEPS; t++) {
    for (int i = 0; i < N; i++) g[i] = rng_normal(6, 100 + t, i);
    op_sgd(DEV_CPU, w, g, DT_F32, buf, N, lr, mu, wd, gscale);
    for (int i = 0; i < N; i++) {
      double gi = gscale * (double)g[i] + wd * dw[i];
      db[i] = mu * db[i] + gi;
      dw[i] -= lr * db[i];
    }
  }
  double wmax = 0, bmax = 0;
  for (int i = 0; i < N; i++) { wmax = fmax(wmax, fabs(dw[i])); bmax = fmax(bmax, fabs(db[i])); }
  zl_expect_close_abs("sgd w", w, dw, N, 2e-6 * wmax);
  zl_expect_close_abs("sgd momentum buffer", buf, db, N, 2e-6 * bmax);
}

/* ---- casts and elementwise ops ------------------------------------------------------------ */
Test(common_ops, cast_round_to_nearest_even) {
  /* 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: ties go to 1.
   * 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: ties go to 1 + 2^-6. */
  float src[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -0.0f, INFINITY, -INFINITY,
                 FLT_MAX, 3.0f, -1.0f - 0x1p-8f};
  bf16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x8000, 0x7f80, 0xff80, 0x7f80, 0x4040, 0xbf80};
  enum { N = sizeof src / sizeof src[0] };
  bf16_t got[N];
  op_cast(DEV_CPU, got, DT_BF16, src, DT_F32, N);
  zl_expect_bits_bf16("cast f32->bf16", got, want, N);
  float nan_in = NAN;
  bf16_t nan_out;
  op_cast(DEV_CPU, &nan_out, DT_BF16, &nan_in, DT_F32, 1);
  cr_assert(isnan(bf16_to_f32(nan_out)), "cast NaN: got 0x%04x, expected a NaN", nan_out);
  /* every non-NaN bf16 survives bf16 -> f32 -> bf16 */
  static bf16_t all[65536], back[65536];
  static float wide[65536];
  for (int i = 0; i < 65536; i++) all[i] = (bf16_t)i;
  op_cast(DEV_CPU, wide, DT_F32, all, DT_BF16, 65536);
  op_cast(DEV_CPU, back, DT_BF16, wide, DT_F32, 65536);
  for (int i = 0; i < 65536; i++)
    if (!isnan(wide[i]) && back[i] != all[i])
      cr_assert_fail("cast round trip [0x%04x]: got 0x%04x, expected 0x%04x", i, back[i], all[i]);
  /* same dtype: a copy */
  float c[3] = {0}, s[3] = {1, 2, 3};
  op_cast(DEV_CPU, c, DT_F32, s, DT_F32, 3);
  zl_expect_floats("cast f32->f32", c, s, 3, 0);
}

Test(common_ops, add_max_scale_fill) {
  float a[5] = {1, -2, 3.5f, 0, 7}, b[5] = {0.5f, 4, -3.5f, -1, NAN};
  op_add(DEV_CPU, a, b, DT_F32, 4);
  float want_add[4] = {1.5f, 2, 0, -1};
  zl_expect_floats("add f32", a, want_add, 4, 0);

  float mx[5] = {1, -2, 3, NAN, 0}, ms[5] = {0, 5, 3, 1, NAN};
  op_max(DEV_CPU, mx, ms, DT_F32, 5);
  float want_max[3] = {1, 5, 3};
  zl_expect_floats("max f32", mx, want_max, 3, 0);
  cr_assert(isnan(mx[3]) && isnan(mx[4]), "max with NaN: got %g %g, expected NaN NaN", mx[3], mx[4]);

  /* bf16 add: the sum is formed in fp32 and rounded once (256 + 1.5 = 257.5 -> 258; ulp is 2) */
  float fa[3] = {1.0f, 256.0f, -3.0f}, fb[3] = {0x1p-8f, 1.5f, 0.0078125f};
  bf16_t ha[3], hb[3], want_h[3];
  for (int i = 0; i < 3; i++) {
    ha[i] = bf16_from_f32(fa[i]);
    hb[i] = bf16_from_f32(fb[i]);
    want_h[i] = bf16_from_f32(bf16_to_f32(ha[i]) + bf16_to_f32(hb[i]));
  }
  op_add(DEV_CPU, ha, hb, DT_BF16, 3);
  zl_expect_bits_bf16("add bf16", ha, want_h, 3);
  cr_assert(ha[1] == 0x4381, "add bf16 256+1.5: got 0x%04x (%g), expected 0x4381 (258)", ha[1],
            bf16_to_f32(ha[1]));

  bf16_t hm[2] = {bf16_from_f32(-1), bf16_from_f32(2)}, hs[2] = {bf16_from_f32(3), bf16_from_f32(-4)};
  op_max(DEV_CPU, hm, hs, DT_BF16, 2);
  cr_assert(bf16_to_f32(hm[0]) == 3 && bf16_to_f32(hm[1]) == 2, "max bf16: got %g %g, expected 3 2",
            bf16_to_f32(hm[0]), bf16_to_f32(hm[1]));

  float sc[3] = {1, -2, 0.5f};
  op_scale(DEV_CPU, sc, DT_F32, -4.0f, 3);
  float want_sc[3] = {-4, 8, -2};
  zl_expect_floats("scale f32", sc, want_sc, 3, 0);
  bf16_t hsc[1] = {bf16_from_f32(3)};
  op_scale(DEV_CPU, hsc, DT_BF16, 1.0f / 3.0f, 1);
  cr_assert(hsc[0] == bf16_from_f32(3.0f * (1.0f / 3.0f)), "scale bf16: got %g, expected %g",
            bf16_to_f32(hsc[0]), bf16_to_f32(bf16_from_f32(3.0f * (1.0f / 3.0f))));

  float fl[6] = {0};
  op_fill(DEV_CPU, fl + 1, DT_F32, 2.5f, 4);
  float want_fl[6] = {0, 2.5f, 2.5f, 2.5f, 2.5f, 0};
  zl_expect_floats("fill f32 (neighbours untouched)", fl, want_fl, 6, 0);
  bf16_t hf[3] = {0};
  op_fill(DEV_CPU, hf, DT_BF16, 1.0f + 0x1p-8f, 3);
  for (int i = 0; i < 3; i++)
    cr_assert(hf[i] == 0x3f80, "fill bf16 [%d]: got 0x%04x, expected 0x3f80", i, hf[i]);
  double d[2] = {1, 2}, ds[2] = {0.5, -1};
  op_add(DEV_CPU, d, ds, DT_F64, 2);
  cr_assert(d[0] == 1.5 && d[1] == 1, "add f64: got %g %g, expected 1.5 1", d[0], d[1]);
}

Test(common_ops, sumsq_exact_and_nonfinite) {
  enum { N = 1003 }; /* not a multiple of 8: the tail counts too */
  float x[N];
  bf16_t h[N];
  for (int i = 0; i < N; i++) { x[i] = (float)(i + 1); h[i] = bf16_from_f32((float)(i % 200 + 1)); }
  double want = (double)N * (N + 1) * (2.0 * N + 1) / 6.0; /* exact in double */
  double got = op_sumsq(DEV_CPU, x, DT_F32, N);
  cr_assert(got == want, "sumsq f32: got %.17g, expected %.17g", got, want);
  double want_h = 0;
  for (int i = 0; i < N; i++) want_h += (double)bf16_to_f32(h[i]) * bf16_to_f32(h[i]);
  double got_h = op_sumsq(DEV_CPU, h, DT_BF16, N);
  cr_assert(got_h == want_h, "sumsq bf16: got %.17g, expected %.17g", got_h, want_h);
  cr_assert(op_sumsq(DEV_CPU, x, DT_F32, 0) == 0, "sumsq of 0 elements: expected 0");
  x[N - 1] = NAN;
  cr_assert(!isfinite(op_sumsq(DEV_CPU, x, DT_F32, N)), "sumsq with NaN in the tail: expected non-finite");
  x[N - 1] = 1;
  x[3] = INFINITY;
  cr_assert(!isfinite(op_sumsq(DEV_CPU, x, DT_F32, N)), "sumsq with Inf: expected non-finite");
}

/* The loop's gradient check: 1 exactly where op_sumsq is non-finite, for each 16- and 32-bit
 * dtype, a NaN or Inf (either sign) at every position of a length that is no multiple of a vector
 * (the tail counts), and finite extremes (the largest, subnormals, −0) never flagged. */
Test(common_ops, has_nonfinite_is_sumsq_nonfinite) {
  enum { N = 77 };
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  const dtype_t dts[3] = {DT_F32, DT_BF16, DT_F16};
  const float big[3] = {FLT_MAX, 3.3895313892515355e38f /* bf16 0x7f7f */, 65504.0f /* fp16's largest */};
  for (int d = 0; d < 3; d++) {
    float x[N];
    uint16_t h[N];
    /* finite: the dtype's extremes, a subnormal (f32), -0 */
    const float edge[4] = {big[d], -big[d], 1e-40f, -0.0f};
    for (int i = 0; i < N; i++) x[i] = (float)((i % 13) - 6) * 0.25f;
    for (int e = 0; e < 4; e++) x[(e * 19) % N] = edge[e];
    void *p = x;
    if (dts[d] == DT_BF16) for (int i = 0; i < N; i++) h[i] = bf16_from_f32(x[i]);
    if (dts[d] == DT_F16) for (int i = 0; i < N; i++) h[i] = fp16_from_f32(x[i]);
    if (dts[d] != DT_F32) p = h;
    cr_assert_eq(op_has_nonfinite(DEV_CPU, p, dts[d], N), 0,
                 "%s: finite values (extremes, subnormal, -0) flagged", dtype_name(dts[d]));
    cr_assert_eq(op_has_nonfinite(DEV_CPU, p, dts[d], 0), 0, "%s: 0 elements flagged", dtype_name(dts[d]));
    for (int b = 0; b < 3; b++)
      for (int i = 0; i < N; i++) {
        float keep = x[i];
        uint16_t keep_h = h[i];
        if (dts[d] == DT_F32) x[i] = bad[b];
        else h[i] = dts[d] == DT_BF16 ? bf16_from_f32(bad[b]) : fp16_from_f32(bad[b]);
        int got = op_has_nonfinite(DEV_CPU, p, dts[d], N), want = !isfinite(op_sumsq(DEV_CPU, p, dts[d], N));
        cr_assert(got == 1 && want == 1,
                  "%s: %g at index %d of %d: has_nonfinite %d, sumsq non-finite %d (expected 1, 1)",
                  dtype_name(dts[d]), (double)bad[b], i, N, got, want);
        cr_assert_eq(op_has_nonfinite(DEV_CPU, p, dts[d], i), 0,
                     "%s: %g just past the first %d elements flagged", dtype_name(dts[d]), (double)bad[b], i);
        x[i] = keep;
        h[i] = keep_h;
      }
  }
}

/* ---- determinism and the workspace -------------------------------------------------------- */
Test(common_ops, same_inputs_same_bits) {
  int B = 16, in = 40, out = 24, nw = 40 * 24;
  float *x = randn(B * in, 60, 1), *W = randn(nw, 61, 0.2f), *b = randn(out, 62, 1);
  bf16_t *Wh = zl_to_bf16(W, nw), *bh = zl_to_bf16(b, out);
  int y[16];
  for (int i = 0; i < B; i++) y[i] = i % out;
  float *res[2];
  double loss[2];
  for (int run = 0; run < 2; run++) {
    /* a different workspace history on the second run */
    if (run == 1) { ops_workspace(DEV_CPU, 0, 1 << 20); ops_workspace(DEV_CPU, 1, 3 << 20); }
    float *r = res[run] = calloc(6000, sizeof(float));
    float *z = r, *a = r + 400, *dl = r + 800, *dx = r + 1200;
    bf16_t *g = (bf16_t *)(r + 2000);
    op_linear_fwd(DEV_CPU, z, x, Wh, bh, DT_BF16, B, in, out);
    op_gelu_fwd(DEV_CPU, a, z, B * out);
    loss[run] = op_softmax_xent(DEV_CPU, dl, a, y, B, out, 1.0f / B);
    op_gelu_bwd(DEV_CPU, dl, dl, z, B * out);
    op_linear_bwd(DEV_CPU, dx, g, g + nw, dl, x, Wh, DT_BF16, B, in, out, 0.0f);
  }
  cr_assert(memcmp(&loss[0], &loss[1], sizeof(double)) == 0, "loss: got %.17g then %.17g (bitwise)", loss[0],
            loss[1]);
  zl_expect_floats("fwd+bwd outputs, second run", res[1], res[0], 6000, 0);
  free(res[0]); free(res[1]); free(x); free(W); free(b); free(Wh); free(bh);
}

Test(common_ops, workspace_grows_only_and_is_accounted) {
  int64_t base = ledger_live(LEDGER_ACTS);
  void *p = ops_workspace(DEV_CPU, 5, 1000);
  cr_assert(ledger_live(LEDGER_ACTS) - base == 1000,
            "acts after 1000-byte workspace: got %lld, expected 1000",
            (long long)(ledger_live(LEDGER_ACTS) - base));
  void *q = ops_workspace(DEV_CPU, 5, 10);
  cr_assert(p == q, "workspace slot 5 moved on a smaller request");
  ops_workspace(DEV_CPU, 5, 4000);
  ops_workspace(DEV_CPU, 6, 24);
  cr_assert(ledger_live(LEDGER_ACTS) - base == 4024, "acts after growing: got %lld, expected 4024",
            (long long)(ledger_live(LEDGER_ACTS) - base));
  ops_release_workspace();
  cr_assert(ledger_live(LEDGER_ACTS) == 0, "acts after ops_release_workspace: got %lld, expected 0",
            (long long)ledger_live(LEDGER_ACTS));
}

/* ---- errors: one clear line, exit code 1 ------------------------------------------------------ */
static void gelu_on_cuda(void) {
  float x[4] = {0}, y[4];
  op_gelu_fwd(DEV_CUDA, y, x, 4);
}
static void bad_label(void) {
  float l[6] = {0}, d[6];
  int y[2] = {1, 3}; /* C = 3: label 3 is out of range */
  op_softmax_xent(DEV_CPU, d, l, y, 2, 3, 1.0f);
}

Test(common_ops, cuda_op_in_cpu_build_dies_clearly) {
  if (device_cuda_built()) cr_skip_test("built with CUDA");
  char out[1024];
  int rc = zl_run_child(gelu_on_cuda, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect(strstr(out, "op_gelu_fwd on --device cuda, but this binary was built without CUDA"),
            "message: got '%s', expected it to name op_gelu_fwd and the missing CUDA build", out);
}

Test(common_ops, label_out_of_range_dies_clearly) {
  char out[1024];
  int rc = zl_run_child(bad_label, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect(strstr(out, "label y[1] = 3 outside [0, 3)"), "message: got '%s', expected it to name y[1] = 3",
            out);
}

/* ---- the CUDA path against this CPU path (runs only with a GPU) ---------------------------- */
static void *to_dev(const void *host, size_t nbytes) {
  void *d = dev_malloc(DEV_CUDA, nbytes, "test buffer");
  dev_memcpy(DEV_CUDA, d, DEV_CPU, host, nbytes);
  return d;
}
static void *from_dev(const void *d, size_t nbytes) {
  void *h = malloc(nbytes);
  dev_sync(DEV_CUDA);
  dev_memcpy(DEV_CPU, h, DEV_CUDA, d, nbytes);
  return h;
}
/* |gpu − cpu| <= tol_i for every element, where tol_i = k·Σ|terms_i| (both paths are within
 * K·u·Σ|terms| of the exact sum, whatever their summation order) plus extra·(|cpu_i| + |also_i|)
 * for results stored in bf16 (one ulp per rounding that may fall differently; `also`: the old
 * value an accumulation started from, or NULL). */
static void expect_within_sum_bound(const char *what, const float *gpu, const float *cpu, const double *mag,
                                    int64_t n, double k, double extra, const float *also) {
  for (int64_t i = 0; i < n; i++) {
    double tol = k * mag[i] + extra * (fabs(cpu[i]) + (also ? fabs(also[i]) : 0)) + 1e-30;
    if (!(fabs((double)gpu[i] - cpu[i]) <= tol))
      cr_assert_fail("%s[%lld]: got %.9g on cuda, expected %.9g (cpu), tol %.3g", what, (long long)i, gpu[i],
                     cpu[i], tol);
  }
}

/* |got − expected| <= tol·max|expected|: for elementwise updates whose rounding errors sit at
 * the scale of the largest terms, while single elements may cancel to near 0. */
static void expect_close_maxrel(const char *what, const float *got, const float *exp, int64_t n, double tol) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(exp[i]));
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - exp[i]) <= tol * mx))
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (abs tol %.3g = %g of max|expected|)", what,
                     (long long)i, got[i], exp[i], tol * mx, tol);
}

/* The pointer check the NCCL backend runs on every buffer of a collective (comm_nccl.cu: a host
 * buffer is refused naming the call and its tag): plain CUDA runtime, no NCCL, so it runs on one GPU. */
Test(common_ops, device_pointers_told_from_host_ones) {
  if (!device_cuda_built()) cr_skip_test("built without CUDA (make GPU=1 on a machine with nvcc)");
  if (device_cuda_count() == 0) cr_skip_test("no GPU visible");
  device_cuda_select(0);
  float *h = malloc(64 * sizeof(float)), *d = dev_malloc(DEV_CUDA, 64 * sizeof(float), "pointer check");
  void *pinned = dev_host_malloc(DEV_CUDA, 64 * sizeof(float), "pointer check (pinned)");
  cr_expect_eq(dev_is_device_pointer(d), 1, "cudaMalloc'd buffer: expected device memory");
  cr_expect_eq(dev_is_device_pointer(d + 7), 1, "inside a cudaMalloc'd buffer: expected device memory");
  cr_expect_eq(dev_is_device_pointer(h), 0, "malloc'd buffer: expected host memory");
  cr_expect_eq(dev_is_device_pointer(pinned), 0, "pinned host buffer: expected host memory (NCCL refuses "
                                                 "it)");
  dev_host_free(DEV_CUDA, pinned);
  dev_free(DEV_CUDA, d);
  free(h);
}

/* Every op on DEV_CUDA (dispatched by ops_cpu.c to ops_cuda.cu) against DEV_CPU on the same
 * inputs. Matmuls: within the summation-order bound 2·K·u·Σ|terms| (+ one bf16 ulp, 2^-8
 * relative, where the result is stored in bf16); GELU within 1e-5·max(1,|x|) (two tanh
 * approximations, each ~1e-7 absolute); softmax within 1e-6; casts, add, max, scale, fill
 * bitwise (one RNE rounding of the same fp32 value); Σx² within 1e-12 relative (double sums in
 * another order). Optimizer states
 * within 2e-6 of their largest magnitude (a few roundings at that scale per step; the GPU may
 * fuse multiply-adds, and single elements can cancel to near 0). */
Test(common_ops, cuda_matches_cpu) {
  if (!device_cuda_built()) cr_skip_test("built without CUDA (make GPU=1 on a machine with nvcc)");
  if (device_cuda_count() == 0) cr_skip_test("no GPU visible");
  device_cuda_select(0);
  enum { B = 33, IN = 65, OUT = 47, NW = IN * OUT };
  const double u = 0x1p-24;
  float *x = randn(B * IN, 70, 1), *W = randn(NW, 71, 0.2f), *b = randn(OUT, 72, 1),
        *dy = randn(B * OUT, 73, 1);
  zl_round_bf16(W, NW); /* the same weight values in both passes (fp32 and bf16) */
  zl_round_bf16(b, OUT);
  double *mag_y = calloc(B * OUT, sizeof(double)), *mag_dx = calloc(B * IN, sizeof(double)),
         *mag_dw = calloc(NW + OUT, sizeof(double));
  for (int r = 0; r < B; r++)
    for (int o = 0; o < OUT; o++) {
      mag_y[r * OUT + o] += fabs(b[o]);
      mag_dw[NW + o] += fabs(dy[r * OUT + o]);
      for (int k = 0; k < IN; k++) {
        mag_y[r * OUT + o] += fabs((double)x[r * IN + k] * W[o * IN + k]);
        mag_dx[r * IN + k] += fabs((double)dy[r * OUT + o] * W[o * IN + k]);
        mag_dw[o * IN + k] += fabs((double)dy[r * OUT + o] * x[r * IN + k]);
      }
    }
  for (int pass = 0; pass < 2; pass++) { /* fp32 weights, then bf16 weights */
    dtype_t wdt = pass == 0 ? DT_F32 : DT_BF16;
    size_t es = dtype_size(wdt);
    void *Wh = malloc(NW * es), *bh = malloc(OUT * es), *gh = malloc((NW + OUT) * es);
    op_cast(DEV_CPU, Wh, wdt, W, DT_F32, NW);
    op_cast(DEV_CPU, bh, wdt, b, DT_F32, OUT);
    float y[B * OUT], dx[B * IN];
    op_linear_fwd(DEV_CPU, y, x, Wh, bh, wdt, B, IN, OUT);
    void *W_d = to_dev(Wh, NW * es), *b_d = to_dev(bh, OUT * es), *x_d = to_dev(x, sizeof(float) * B * IN);
    void *y_d = dev_malloc(DEV_CUDA, sizeof(float) * B * OUT, "test y");
    op_linear_fwd(DEV_CUDA, y_d, x_d, W_d, b_d, wdt, B, IN, OUT);
    float *yg = from_dev(y_d, sizeof y);
    expect_within_sum_bound(pass ? "linear y (bf16 W)" : "linear y", yg, y, mag_y, B * OUT, 2 * (IN + 1) * u,
                            0, NULL);
    /* backward, beta 0 then beta 1 (accumulating onto the first result) */
    void *g_d = dev_malloc(DEV_CUDA, (NW + OUT) * es, "test grads"),
         *dx_d = dev_malloc(DEV_CUDA, sizeof dx, "test dx");
    void *dy_d = to_dev(dy, sizeof(float) * B * OUT);
    float *first = malloc(sizeof(float) * (NW + OUT)); /* the beta-0 grads (cpu) */
    for (int acc = 0; acc < 2; acc++) {
      op_linear_bwd(DEV_CPU, dx, gh, (char *)gh + NW * es, dy, x, Wh, wdt, B, IN, OUT, (float)acc);
      op_linear_bwd(DEV_CUDA, dx_d, g_d, (char *)g_d + NW * es, dy_d, x_d, W_d, wdt, B, IN, OUT, (float)acc);
      float *dxg = from_dev(dx_d, sizeof dx);
      expect_within_sum_bound("linear dx", dxg, dx, mag_dx, B * IN, 2 * OUT * u, 0, NULL);
      void *ggh = from_dev(g_d, (NW + OUT) * es);
      float *g32 = malloc(sizeof(float) * (NW + OUT)), *gg32 = malloc(sizeof(float) * (NW + OUT));
      op_cast(DEV_CPU, g32, DT_F32, gh, wdt, NW + OUT);
      op_cast(DEV_CPU, gg32, DT_F32, ggh, wdt, NW + OUT);
      double *mag = malloc(sizeof(double) * (NW + OUT));
      for (int i = 0; i < NW + OUT; i++) mag[i] = (acc + 1) * mag_dw[i];
      expect_within_sum_bound(acc ? "linear dW,db (beta 1)" : "linear dW,db (beta 0)", gg32, g32, mag,
                              NW + OUT, 2 * (B + 1) * u, wdt == DT_BF16 ? 0x1p-7 : 0, acc ? first : NULL);
      if (acc == 0) memcpy(first, g32, sizeof(float) * (NW + OUT));
      free(dxg); free(ggh); free(g32); free(gg32); free(mag);
    }
    dev_free(DEV_CUDA, W_d); dev_free(DEV_CUDA, b_d); dev_free(DEV_CUDA, x_d); dev_free(DEV_CUDA, y_d);
    dev_free(DEV_CUDA, g_d); dev_free(DEV_CUDA, dx_d); dev_free(DEV_CUDA, dy_d);
    free(yg); free(Wh); free(bh); free(gh); free(first);
  }
  /* GELU */
  {
    enum { N = 4001 };
    float gx[N], gy[N], gdx[N], gd[N];
    for (int i = 0; i < N; i++) { gx[i] = -20.0f + 0.01f * i; gd[i] = 1.0f + 0.001f * i; }
    op_gelu_fwd(DEV_CPU, gy, gx, N);
    op_gelu_bwd(DEV_CPU, gdx, gd, gx, N);
    float *ax = to_dev(gx, sizeof gx), *ay = dev_malloc(DEV_CUDA, sizeof gy, "t"),
          *ad = to_dev(gd, sizeof gd);
    op_gelu_fwd(DEV_CUDA, ay, ax, N);
    op_gelu_bwd(DEV_CUDA, ad, ad, ax, N); /* in place, as the model does */
    float *hy = from_dev(ay, sizeof gy), *hd = from_dev(ad, sizeof gd);
    for (int i = 0; i < N; i++) {
      double tol = 1e-5 * fmax(1.0, fabs(gx[i]));
      cr_assert(fabs(hy[i] - gy[i]) <= tol, "gelu y[%d] (x=%g): got %.9g on cuda, expected %.9g (cpu)", i,
                gx[i], hy[i], gy[i]);
      cr_assert(fabs(hd[i] - gdx[i]) <= tol * 5, "gelu dx[%d] (x=%g): got %.9g on cuda, expected %.9g (cpu)",
                i, gx[i], hd[i], gdx[i]);
    }
    dev_free(DEV_CUDA, ax); dev_free(DEV_CUDA, ay); dev_free(DEV_CUDA, ad); free(hy); free(hd);
  }
  /* softmax cross-entropy */
  {
    enum { R = 19, C = 300 };
    float *lg = randn(R * C, 74, 4), dl[R * C];
    int yl[R];
    for (int r = 0; r < R; r++) yl[r] = (r * 37) % C;
    double loss = op_softmax_xent(DEV_CPU, dl, lg, yl, R, C, 1.0f / R);
    float *alg = to_dev(lg, sizeof(float) * R * C), *adl = dev_malloc(DEV_CUDA, sizeof dl, "t");
    int *ay = to_dev(yl, sizeof yl);
    double lossg = op_softmax_xent(DEV_CUDA, adl, alg, ay, R, C, 1.0f / R);
    cr_assert(zl_rel(lossg, loss) < 1e-6, "xent loss: got %.12g on cuda, expected %.12g (cpu)", lossg, loss);
    float *hdl = from_dev(adl, sizeof dl);
    double ref[R * C];
    for (int i = 0; i < R * C; i++) ref[i] = dl[i];
    zl_expect_close_abs("xent dlogits (cuda vs cpu)", hdl, ref, R * C, 1e-6 / R);
    dev_free(DEV_CUDA, alg); dev_free(DEV_CUDA, adl); dev_free(DEV_CUDA, ay); free(hdl); free(lg);
  }
  /* optimizers: 3 steps each, bf16 gradients for AdamW, fp32 for SGD */
  {
    enum { N = 1000 };
    adamw_hp_t hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
    float *w = randn(N, 75, 1), *m = calloc(N, 4), *v = calloc(N, 4), *g = randn(N, 76, 1);
    bf16_t *gh = zl_to_bf16(g, N);
    float *aw = to_dev(w, N * 4), *am = to_dev(m, N * 4), *av = to_dev(v, N * 4);
    bf16_t *ag = to_dev(gh, N * 2);
    for (int t = 1; t <= 3; t++) {
      op_adamw(DEV_CPU, w, gh, DT_BF16, m, v, N, &hp, t, 0.7f);
      op_adamw(DEV_CUDA, aw, ag, DT_BF16, am, av, N, &hp, t, 0.7f);
    }
    float *hw = from_dev(aw, N * 4), *hm = from_dev(am, N * 4), *hv = from_dev(av, N * 4);
    expect_close_maxrel("adamw w (cuda vs cpu)", hw, w, N, 2e-6);
    expect_close_maxrel("adamw m (cuda vs cpu)", hm, m, N, 2e-6);
    expect_close_maxrel("adamw v (cuda vs cpu)", hv, v, N, 2e-6);
    float *buf = calloc(N, 4), *abuf = to_dev(buf, N * 4), *ag32 = to_dev(g, N * 4);
    for (int t = 1; t <= 3; t++) {
      op_sgd(DEV_CPU, w, g, DT_F32, buf, N, 0.05f, 0.9f, 0.01f, 0.5f);
      op_sgd(DEV_CUDA, aw, ag32, DT_F32, abuf, N, 0.05f, 0.9f, 0.01f, 0.5f);
    }
    free(hw); free(hm);
    hw = from_dev(aw, N * 4);
    hm = from_dev(abuf, N * 4);
    expect_close_maxrel("sgd w (cuda vs cpu)", hw, w, N, 2e-6);
    expect_close_maxrel("sgd buffer (cuda vs cpu)", hm, buf, N, 2e-6);
    dev_free(DEV_CUDA, aw); dev_free(DEV_CUDA, am); dev_free(DEV_CUDA, av); dev_free(DEV_CUDA, ag);
    dev_free(DEV_CUDA, abuf); dev_free(DEV_CUDA, ag32);
    free(w); free(m); free(v); free(g); free(gh); free(hw); free(hm); free(hv); free(buf);
  }
  /* elementwise: bitwise */
  {
    enum { N = 5003 };
    float *a = randn(N, 77, 3), *s = randn(N, 78, 3), *ca = malloc(N * 4);
    bf16_t *ha = zl_to_bf16(a, N), *hs = zl_to_bf16(s, N), *c16 = malloc(N * 2);
    void *da = to_dev(a, N * 4), *d16 = dev_malloc(DEV_CUDA, N * 2, "t"), *ds16 = to_dev(hs, N * 2);
    op_cast(DEV_CPU, c16, DT_BF16, a, DT_F32, N);
    op_cast(DEV_CUDA, d16, DT_BF16, da, DT_F32, N);
    bf16_t *g16 = from_dev(d16, N * 2);
    zl_expect_bits_bf16("cast f32->bf16 (cuda vs cpu)", g16, c16, N);
    free(g16);
    op_add(DEV_CPU, c16, hs, DT_BF16, N);
    op_add(DEV_CUDA, d16, ds16, DT_BF16, N);
    op_max(DEV_CPU, c16, ha, DT_BF16, N);
    dev_memcpy(DEV_CUDA, ds16, DEV_CPU, ha, N * 2);
    op_max(DEV_CUDA, d16, ds16, DT_BF16, N);
    op_scale(DEV_CPU, c16, DT_BF16, 0.3f, N);
    op_scale(DEV_CUDA, d16, DT_BF16, 0.3f, N);
    g16 = from_dev(d16, N * 2);
    zl_expect_bits_bf16("add, max, scale bf16 (cuda vs cpu)", g16, c16, N);
    double sc = op_sumsq(DEV_CPU, c16, DT_BF16, N), sg = op_sumsq(DEV_CUDA, d16, DT_BF16, N);
    cr_assert(zl_rel(sg, sc) < 1e-12, "sumsq bf16: got %.17g on cuda, expected %.17g (cpu)", sg, sc);
    double sc32 = op_sumsq(DEV_CPU, a, DT_F32, N), sg32 = op_sumsq(DEV_CUDA, da, DT_F32, N);
    cr_assert(zl_rel(sg32, sc32) < 1e-12, "sumsq f32: got %.17g on cuda, expected %.17g (cpu)", sg32, sc32);
    op_fill(DEV_CPU, ca, DT_F32, -2.75f, N);
    op_fill(DEV_CUDA, da, DT_F32, -2.75f, N);
    float *gf = from_dev(da, N * 4);
    zl_expect_floats("fill f32 (cuda vs cpu)", gf, ca, N, 0);
    dev_free(DEV_CUDA, da); dev_free(DEV_CUDA, d16); dev_free(DEV_CUDA, ds16);
    free(a); free(s); free(ca); free(ha); free(hs); free(c16); free(g16); free(gf);
  }
  free(x); free(W); free(b); free(dy); free(mag_y); free(mag_dx); free(mag_dw);
}
