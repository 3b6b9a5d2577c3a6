/* test_model.c — the MLP's layout, init and unit-wise forward/backward (suite common_model):
 * a whole-model gradient check against finite differences of a double-precision reference.
 * See notes/02-ddp.md. */
#include "zl_test.h" // Criterion, zl_expect_floats, zl_fwd_bwd
#include "data.h"    // rng_normal: test inputs
#include "model.h"   // model_t, model_init, model_unit_forward, model_unit_backward

/* ---- layout ------------------------------------------------------------------------------ */
Test(common_model, layout_is_unpadded_prefix_sums) {
  struct { int D, H, C, L; } shapes[] = {{5, 6, 4, 2}, {7, 3, 2, 1}, {9, 100, 3, 0}, {32, 64, 10, 4}};
  for (int s = 0; s < 4; s++) {
    int D = shapes[s].D, H = shapes[s].H, C = shapes[s].C, L = shapes[s].L;
    model_t m;
    model_init(&m, D, H, C, L);
    cr_assert(m.n_units == L + 1, "shape %d: n_units got %d, expected %d", s, m.n_units, L + 1);
    int64_t off = 0, maxp = 0;
    for (int u = 0; u <= L; u++) {
      const unit_t *un = &m.units[u];
      int in = u == 0 ? D : H, out = u == L ? C : H;
      cr_assert(un->in == in && un->out == out, "shape %d unit %d: got %d->%d, expected %d->%d", s, u, un->in,
                un->out, in, out);
      cr_assert(un->numel == (int64_t)in * out + out, "shape %d unit %d numel: got %lld, expected %lld", s, u,
                (long long)un->numel, (long long)in * out + out);
      cr_assert(un->off == off && un->shard_off == off,
                "shape %d unit %d off/shard_off: got %lld/%lld, expected %lld", s, u, (long long)un->off,
                (long long)un->shard_off, (long long)off);
      cr_assert(un->padded == un->numel && un->piece == un->padded,
                "shape %d unit %d padded/piece: got %lld/%lld, expected %lld", s, u, (long long)un->padded,
                (long long)un->piece, (long long)un->numel);
      off += un->numel;
      if (un->padded > maxp) maxp = un->padded;
    }
    int64_t want = model_count_params(D, H, C, L);
    cr_assert(m.numel == off && m.numel == want,
              "shape %d numel: got %lld, prefix sum %lld, model_count_params %lld", s, (long long)m.numel,
              (long long)off, (long long)want);
    cr_assert(m.padded_numel == off && m.shard_numel == off && m.max_unit_padded == maxp,
              "shape %d padded/shard/max: got %lld/%lld/%lld, expected %lld/%lld/%lld", s,
              (long long)m.padded_numel, (long long)m.shard_numel, (long long)m.max_unit_padded,
              (long long)off, (long long)off, (long long)maxp);
    model_free(&m);
  }
  /* by hand: 5·6+6 + 6·6+6 + 6·4+4 = 106; L = 0 is one D→C unit */
  cr_assert(model_count_params(5, 6, 4, 2) == 106, "model_count_params(5,6,4,2): got %lld, expected 106",
            (long long)model_count_params(5, 6, 4, 2));
  cr_assert(model_count_params(9, 100, 3, 0) == 30, "model_count_params(9,100,3,0): got %lld, expected 30",
            (long long)model_count_params(9, 100, 3, 0));
}

/* ---- init --------------------------------------------------------------------------------- */
Test(common_model, init_is_deterministic_with_zero_bias_and_pads) {
  model_t m;
  model_init(&m, 64, 128, 10, 3);
  int u = 1; /* 128 -> 128 */
  const unit_t *un = &m.units[u];
  int64_t nw = (int64_t)un->out * un->in;
  float *a = malloc(sizeof(float) * un->padded), *b = malloc(sizeof(float) * un->padded);
  model_init_unit(&m, 5, u, a);
  model_init_unit(&m, 5, u, b);
  zl_expect_floats("unit 1 init (same seed twice)", b, a, un->padded, 0);
  for (int64_t k = nw; k < un->numel; k++)
    cr_assert(a[k] == 0.0f, "unit 1 bias[%lld]: got %g, expected 0", (long long)(k - nw), a[k]);
  /* W ~ N(0, 1/in): 16384 draws, variance estimate within 6% (std of the estimate 1.1%) */
  double s2 = 0, s1 = 0;
  for (int64_t k = 0; k < nw; k++) { s1 += a[k]; s2 += (double)a[k] * a[k]; }
  double var = s2 / nw, want = 1.0 / un->in;
  cr_assert(fabs(var / want - 1) < 0.06, "unit 1 W variance: got %.6g, expected 1/in = %.6g +- 6%%", var,
            want);
  cr_assert(fabs(s1 / nw) < 5 * sqrt(want / nw), "unit 1 W mean: got %.3g, expected 0", s1 / nw);
  /* another seed, another unit of the same shape: different values */
  model_init_unit(&m, 6, u, b);
  cr_assert(memcmp(a, b, sizeof(float) * nw) != 0, "unit 1 init: seed 5 and seed 6 gave the same weights");
  model_init_unit(&m, 5, 2, b);
  cr_assert(memcmp(a, b, sizeof(float) * nw) != 0, "init: units 1 and 2 (same shape) got the same weights");
  /* a padded layout (as ZeRO makes): pad slots are written as 0, nothing past them is touched */
  unit_t saved = m.units[u];
  m.units[u].padded = un->numel + 5;
  float *c = malloc(sizeof(float) * (un->numel + 8));
  for (int64_t k = 0; k < un->numel + 8; k++) c[k] = NAN;
  model_init_unit(&m, 5, u, c);
  zl_expect_floats("unit 1 init (padded layout)", c, a, un->numel, 0);
  for (int64_t k = un->numel; k < un->numel + 5; k++)
    cr_assert(c[k] == 0.0f && !signbit(c[k]), "unit 1 pad slot %lld: got %g, expected +0", (long long)k,
              c[k]);
  for (int64_t k = un->numel + 5; k < un->numel + 8; k++)
    cr_assert(isnan(c[k]), "unit 1 init wrote past its padded size at %lld: got %g", (long long)k, c[k]);
  m.units[u] = saved;
  free(a); free(b); free(c);
  model_free(&m);
}

/* ---- forward / backward ------------------------------------------------------------------- */
static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Mean cross-entropy of the MLP in double, reading fp32 parameters perturbed at one index. */
static double ref_loss(const model_t *m, const float *params, int64_t pert_idx, double pert, const float *x,
                       const int *y, int B) {
  double loss = 0;
  double act[64], nxt[64];
  for (int r = 0; r < B; r++) {
    for (int k = 0; k < m->D; k++) act[k] = x[r * m->D + k];
    for (int u = 0; u < m->n_units; u++) {
      const unit_t *un = &m->units[u];
      for (int o = 0; o < un->out; o++) {
        int64_t bi = un->off + (int64_t)un->out * un->in + o;
        double s = params[bi] + (bi == pert_idx ? pert : 0);
        for (int k = 0; k < un->in; k++) {
          int64_t wi = un->off + (int64_t)o * un->in + k;
          s += (params[wi] + (wi == pert_idx ? pert : 0)) * act[k];
        }
        nxt[o] = u == m->n_units - 1 ? s : gelu_d(s);
      }
      memcpy(act, nxt, sizeof(double) * un->out);
    }
    double mx = -INFINITY, se = 0;
    for (int c = 0; c < m->C; c++) mx = fmax(mx, act[c]);
    for (int c = 0; c < m->C; c++) se += exp(act[c] - mx);
    loss += log(se) + mx - act[y[r]];
  }
  return loss / B;
}


/* Random parameters (init, plus random biases so the forward uses them). */
static float *make_params(const model_t *m, uint64_t seed) {
  float *p = malloc(sizeof(float) * m->padded_numel);
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    model_init_unit(m, seed, u, p + un->off);
    for (int o = 0; o < un->out; o++)
      p[un->off + (int64_t)un->out * un->in + o] = 0.3f * rng_normal(seed, 900 + u, o);
  }
  return p;
}

/* The whole model's gradient against central differences of the double-precision loss.
 * Reference: h = 1e-5 in double: truncation ~h²·|f'''| ≈ 1e-10, rounding ~1e-16/h = 1e-11.
 * The fp32 forward/backward rounds ~6e-8 per operation over a few dozen operations, at the
 * scale of the largest terms, so: |got − expected| ≤ 1e-4·|expected| + 1e-5·max|expected|.
 * A missing GELU', a transposed W or a wrong 1/B scale is off by O(|expected|). */
static void gradient_check(int D, int H, int C, int L, int B) {
  model_t m;
  model_init(&m, D, H, C, L);
  float *params = make_params(&m, 11), *grads = calloc(m.padded_numel, sizeof(float));
  float *x = malloc(sizeof(float) * B * D);
  int y[16];
  for (int i = 0; i < B * D; i++) x[i] = rng_normal(12, 1, i);
  for (int r = 0; r < B; r++) y[r] = (r * 3 + 1) % C;
  double loss = zl_fwd_bwd(&m, params, grads, DT_F32, x, y, B, 0.0f, NULL);
  double lref = ref_loss(&m, params, -1, 0, x, y, B);
  cr_assert(zl_rel(loss, lref) < 1e-5, "model (L=%d) loss: got %.9g, expected %.9g", L, loss, lref);
  double *num = malloc(sizeof(double) * m.numel), gmax = 0, h = 1e-5;
  for (int64_t i = 0; i < m.numel; i++) {
    num[i] = (ref_loss(&m, params, i, h, x, y, B) - ref_loss(&m, params, i, -h, x, y, B)) / (2 * h);
    gmax = fmax(gmax, fabs(num[i]));
  }
  cr_assert(gmax > 1e-3, "model (L=%d): gradient is ~0 everywhere (max %g); the check would be empty", L,
            gmax);
  for (int u = 0; u < m.n_units; u++) {
    const unit_t *un = &m.units[u];
    for (int64_t k = 0; k < un->numel; k++) {
      int64_t i = un->off + k;
      double tol = 1e-4 * fabs(num[i]) + 1e-5 * gmax;
      int is_b = k >= (int64_t)un->out * un->in;
      if (!(fabs(grads[i] - num[i]) <= tol))
        cr_assert_fail("model (L=%d) grad unit %d %s[%lld]: got %.9g, expected %.9g (tol %.3g)", L, u,
                       is_b ? "b" : "W", (long long)(is_b ? k - (int64_t)un->out * un->in : k), grads[i],
                       num[i], tol);
    }
  }
  free(num); free(params); free(grads); free(x);
  model_free(&m);
}
Test(common_model, three_units_gradient_matches_finite_differences) { gradient_check(5, 6, 4, 2, 3); }
Test(common_model, single_unit_L0_gradient_matches_finite_differences) { gradient_check(7, 0, 3, 0, 4); }

/* beta 1 adds the new gradient once: running the same batch twice doubles it, exactly. */
Test(common_model, backward_beta_accumulates) {
  model_t m;
  model_init(&m, 4, 5, 3, 2);
  float *params = make_params(&m, 21), *g1 = calloc(m.padded_numel, sizeof(float)),
        *g2 = calloc(m.padded_numel, sizeof(float)), *x = malloc(sizeof(float) * 6 * 4);
  int y[6] = {0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 24; i++) x[i] = rng_normal(22, 1, i);
  zl_fwd_bwd(&m, params, g1, DT_F32, x, y, 6, 0.0f, NULL);
  for (int64_t i = 0; i < m.padded_numel; i++) g2[i] = NAN; /* beta 0 must not read this */
  zl_fwd_bwd(&m, params, g2, DT_F32, x, y, 6, 0.0f, NULL);
  zl_expect_floats("grads (beta 0 over NaN)", g2, g1, m.padded_numel, 0);
  zl_fwd_bwd(&m, params, g2, DT_F32, x, y, 6, 1.0f, NULL);
  for (int64_t i = 0; i < m.padded_numel; i++) g1[i] *= 2; /* g + g is exact */
  zl_expect_floats("grads (beta 1, same batch twice)", g2, g1, m.padded_numel, 0);
  free(params); free(g1); free(g2); free(x);
  model_free(&m);
}

/* bf16 parameters give the loss of fp32 parameters holding the same values, bitwise, and
 * bf16 gradients are the fp32 gradients rounded once. */
Test(common_model, bf16_params_match_fp32_with_same_values) {
  model_t m;
  model_init(&m, 6, 8, 5, 2);
  float *p32 = make_params(&m, 31), *g32 = calloc(m.padded_numel, sizeof(float)), x[4 * 6];
  bf16_t *p16 = malloc(sizeof(bf16_t) * m.padded_numel), *g16 = calloc(m.padded_numel, sizeof(bf16_t));
  for (int64_t i = 0; i < m.padded_numel; i++) {
    p16[i] = bf16_from_f32(p32[i]);
    p32[i] = bf16_to_f32(p16[i]);
  }
  int y[4] = {4, 0, 2, 1};
  for (int i = 0; i < 24; i++) x[i] = rng_normal(32, 1, i);
  double l32 = zl_fwd_bwd(&m, p32, g32, DT_F32, x, y, 4, 0.0f, NULL);
  double l16 = zl_fwd_bwd(&m, p16, g16, DT_BF16, x, y, 4, 0.0f, NULL);
  cr_assert(memcmp(&l32, &l16, sizeof(double)) == 0, "loss bf16 params: got %.17g, expected %.17g (bitwise)",
            l16, l32);
  for (int64_t i = 0; i < m.numel; i++)
    if (g16[i] != bf16_from_f32(g32[i]))
      cr_assert_fail("grads bf16 [%lld]: got 0x%04x (%g), expected 0x%04x (%g) (bitwise)", (long long)i,
                     g16[i], bf16_to_f32(g16[i]), bf16_from_f32(g32[i]), bf16_to_f32(bf16_from_f32(g32[i])));
  free(p32); free(g32); free(p16); free(g16);
  model_free(&m);
}
