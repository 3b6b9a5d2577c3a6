/* test_gpt.c — the GPT behind the model table (suite common_gpt): layout and Ψ, GPT-2's init,
 * a whole-model gradient check against finite differences of a double-precision reference,
 * causality, the activation formula against the units' sizes, and the text data source.
 * See common/model/gpt.h. */
#include "zl_test.h" // Criterion, zl_expect_floats, zl_rel, zl_fwd_bwd
#include "data.h"    // rng_normal, data_init_text, data_batch, data_val_batch
#include "gpt.h"     // gpt_init, gpt_count_params, gpt_block_layout, gpt_acts_bytes
#include "model.h"   // model_t, model_forward, model_backward

/* ---- layout ------------------------------------------------------------------------------ */
Test(common_gpt, layout_and_psi) {
  const char *names[3] = {"tiny", "small", "124m-shape"};
  for (int p = 0; p < 3; p++) {
    gpt_shape_t s;
    cr_assert(gpt_preset(names[p], &s) == 0, "preset %s unknown", names[p]);
    model_t m;
    gpt_init(&m, s);
    int64_t C = s.n_embd, V = s.vocab, T = s.seq_len, L = s.n_layer;
    int64_t want = 2 * V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    cr_assert(m.n_units == L + 2, "%s: %d units, expected L+2 = %lld", names[p], m.n_units, (long long)L + 2);
    cr_assert(m.numel == want && gpt_count_params(s) == want, "%s: Ψ got %lld (count %lld), expected %lld",
              names[p], (long long)m.numel, (long long)gpt_count_params(s), (long long)want);
    cr_assert(m.units[0].numel == (V + T) * C && m.units[L + 1].numel == V * C + 2 * C,
              "%s: embedding / head numel %lld / %lld", names[p], (long long)m.units[0].numel,
              (long long)m.units[L + 1].numel);
    cr_assert(m.in_is_tokens && m.in_numel == T && m.rows == T && m.classes == V, "%s: loop shape", names[p]);
    model_free(&m);
  }
  gpt_shape_t s;
  gpt_preset("124m-shape", &s);
  cr_assert(gpt_count_params(s) == 86235648, "124m-shape Ψ: got %lld, expected 86235648 (V = 256)",
            (long long)gpt_count_params(s));
  cr_assert(gpt_preset("huge", &s) == -1, "an unknown preset must be refused");
  cr_assert(gpt_shape_error((gpt_shape_t){2, 3, 32, 16, 256}) != NULL,
            "n_embd 32 with 3 heads must be refused");
}

/* ---- init: GPT-2's -------------------------------------------------------------------------- */
static double std_of(const float *a, int64_t n) {
  double s2 = 0;
  for (int64_t k = 0; k < n; k++) s2 += (double)a[k] * a[k];
  return sqrt(s2 / n);
}
Test(common_gpt, init_is_gpt2_and_deterministic) {
  gpt_shape_t s = {.n_layer = 4, .n_head = 4, .n_embd = 64, .seq_len = 32, .vocab = 256};
  model_t m;
  gpt_init(&m, s);
  gpt_block_layout_t l = gpt_block_layout(64);
  const unit_t *un = &m.units[2];
  float *a = malloc(sizeof(float) * un->padded), *b = malloc(sizeof(float) * un->padded);
  model_init_unit(&m, 5, 2, a);
  model_init_unit(&m, 5, 2, b);
  zl_expect_floats("block init (same seed twice)", b, a, un->padded, 0);
  for (int c = 0; c < 64; c++)
    cr_assert(a[l.ln1w + c] == 1 && a[l.ln2w + c] == 1 && a[l.ln1b + c] == 0 && a[l.ln2b + c] == 0 &&
                  a[l.projb + c] == 0 && a[l.fcprojb + c] == 0, "LayerNorm w = 1, b = 0, biases 0 at %d", c);
  /* 12288 and 16384 draws: the std estimate is within 3% */
  double sq = std_of(a + l.qkvw, 3 * 64 * 64), sp = std_of(a + l.fcprojw, 4 * 64 * 64),
         want_p = 0.02 / sqrt(8.0);
  cr_assert(fabs(sq / 0.02 - 1) < 0.03, "qkv W std %.5g, expected 0.02", sq);
  cr_assert(fabs(sp / want_p - 1) < 0.03, "fcproj W std %.5g, expected 0.02/sqrt(2L) = %.5g", sp, want_p);
  model_init_unit(&m, 5, 3, b);
  cr_assert(memcmp(a + l.qkvw, b + l.qkvw, 64 * sizeof(float)) != 0, "blocks 1 and 2 got the same weights");
  model_init_unit(&m, 6, 2, b);
  cr_assert(memcmp(a + l.qkvw, b + l.qkvw, 64 * sizeof(float)) != 0, "seeds 5 and 6 gave the same weights");
  /* padded (as ZeRO lays it out): same values, then +0 pads, nothing written past them */
  m.units[2].padded = un->numel + 3;
  float *c = malloc(sizeof(float) * (un->numel + 5));
  for (int64_t k = 0; k < un->numel + 5; k++) c[k] = NAN;
  model_init_unit(&m, 5, 2, c);
  zl_expect_floats("block init (padded layout)", c, a, un->numel, 0);
  for (int64_t k = un->numel; k < un->numel + 3; k++)
    cr_assert(c[k] == 0 && !signbit(c[k]), "pad slot %lld", (long long)k);
  for (int64_t k = un->numel + 3; k < un->numel + 5; k++)
    cr_assert(isnan(c[k]), "init wrote past its padded size");
  m.units[2].padded = un->numel;
  model_init_unit(&m, 5, 0, b); /* wte | wpe ~ N(0, 0.02) */
  double se = std_of(b, m.units[0].numel);
  cr_assert(fabs(se / 0.02 - 1) < 0.03, "embedding std %.5g, expected 0.02", se);
  free(a); free(b); free(c);
  model_free(&m);
}

/* ---- a double-precision GPT-2 ------------------------------------------------------------- */
typedef struct ref { const model_t *m; const float *p; int64_t pert; double h; } ref_t;
static double rp(const ref_t *r, int64_t i) { return r->p[i] + (i == r->pert ? r->h : 0); }
static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static void ref_ln(const ref_t *r, int64_t w, int64_t b, const double *x, double *y, int T, int C) {
  for (int t = 0; t < T; t++) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += x[t * C + c] / C;
    for (int c = 0; c < C; c++) var += (x[t * C + c] - mu) * (x[t * C + c] - mu) / C;
    double rs = 1 / sqrt(var + 1e-5);
    for (int c = 0; c < C; c++) y[t * C + c] = (x[t * C + c] - mu) * rs * rp(r, w + c) + rp(r, b + c);
  }
}
/* y (T,out) = x (T,in) · Wᵀ + b; b < 0: no bias */
static void ref_lin(const ref_t *r, int64_t W, int64_t b, const double *x, double *y, int T, int in,
                    int out) {
  for (int t = 0; t < T; t++)
    for (int o = 0; o < out; o++) {
      double acc = b >= 0 ? rp(r, b + o) : 0;
      for (int k = 0; k < in; k++) acc += x[t * in + k] * rp(r, W + (int64_t)o * in + k);
      y[t * out + o] = acc;
    }
}
/* Mean cross-entropy over B·T rows. */
static double ref_loss(const model_t *m, const float *params, int64_t pert, double h, const int *tok,
                       const int *tgt, int B) {
  ref_t r = {m, params, pert, h};
  gpt_shape_t s = m->gpt;
  int T = s.seq_len, C = s.n_embd, V = s.vocab, NH = s.n_head, hs = C / NH;
  gpt_block_layout_t l = gpt_block_layout(C);
  double *x = malloc(sizeof(double) * T * C), *ln = malloc(sizeof(double) * T * C),
         *qkv = malloc(sizeof(double) * T * 3 * C), *att = malloc(sizeof(double) * T * C),
         *tmp = malloc(sizeof(double) * T * C), *fc = malloc(sizeof(double) * T * 4 * C),
         *lg = malloc(sizeof(double) * T * V);
  double loss = 0;
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        x[t * C + c] = rp(&r, (int64_t)tok[b * T + t] * C + c) + rp(&r, (int64_t)V * C + t * C + c);
    for (int layer = 0; layer < s.n_layer; layer++) {
      int64_t o = m->units[1 + layer].off;
      ref_ln(&r, o + l.ln1w, o + l.ln1b, x, ln, T, C);
      ref_lin(&r, o + l.qkvw, o + l.qkvb, ln, qkv, T, C, 3 * C);
      for (int hh = 0; hh < NH; hh++)
        for (int t = 0; t < T; t++) {
          double sc[64], mx = -INFINITY, z = 0;
          for (int j = 0; j <= t; j++) {
            double d = 0;
            for (int k = 0; k < hs; k++) d += qkv[t * 3 * C + hh * hs + k] * qkv[j * 3 * C + C + hh * hs + k];
            sc[j] = d / sqrt((double)hs);
            mx = fmax(mx, sc[j]);
          }
          for (int j = 0; j <= t; j++) z += (sc[j] = exp(sc[j] - mx));
          for (int k = 0; k < hs; k++) {
            double acc = 0;
            for (int j = 0; j <= t; j++) acc += sc[j] / z * qkv[j * 3 * C + 2 * C + hh * hs + k];
            att[t * C + hh * hs + k] = acc;
          }
        }
      ref_lin(&r, o + l.projw, o + l.projb, att, tmp, T, C, C);
      for (int i = 0; i < T * C; i++) x[i] += tmp[i];
      ref_ln(&r, o + l.ln2w, o + l.ln2b, x, ln, T, C);
      ref_lin(&r, o + l.fcw, o + l.fcb, ln, fc, T, C, 4 * C);
      for (int i = 0; i < T * 4 * C; i++) fc[i] = gelu_d(fc[i]);
      ref_lin(&r, o + l.fcprojw, o + l.fcprojb, fc, tmp, T, 4 * C, C);
      for (int i = 0; i < T * C; i++) x[i] += tmp[i];
    }
    int64_t o = m->units[s.n_layer + 1].off;
    ref_ln(&r, o, o + C, x, ln, T, C);
    ref_lin(&r, o + 2 * C, -1, ln, lg, T, C, V);
    for (int t = 0; t < T; t++) {
      double mx = -INFINITY, se = 0;
      for (int v = 0; v < V; v++) mx = fmax(mx, lg[t * V + v]);
      for (int v = 0; v < V; v++) se += exp(lg[t * V + v] - mx);
      loss += log(se) + mx - lg[t * V + tgt[b * T + t]];
    }
  }
  free(x); free(ln); free(qkv); free(att); free(tmp); free(fc); free(lg);
  return loss / ((double)B * T);
}

/* GPT-2's init plus N(0, 0.1) everywhere, so biases and LayerNorm parameters are not at their
 * special values (1, 0) and every path carries signal. */
static float *make_params(const model_t *m, uint64_t seed) {
  float *p = malloc(sizeof(float) * m->padded_numel);
  for (int u = 0; u < m->n_units; u++) {
    model_init_unit(m, seed, u, p + m->units[u].off);
    for (int64_t k = 0; k < m->units[u].numel; k++)
      p[m->units[u].off + k] += 0.1f * rng_normal(seed, 900 + u, k);
  }
  return p;
}

/* Whole-model gradient against central differences of the double-precision loss: every one of
 * the Ψ = 1976 parameters of L2 NH2 C8 T5 V11. h = 1e-5 in double (truncation ~1e-10, rounding
 * ~1e-11). The fp32 forward/backward rounds ~6e-8 per operation over a few hundred operations
 * at the scale of the largest terms: |got − expected| <= 1e-4·|expected| + 1e-5·max|expected|.
 * A wrong LayerNorm term, a missing mask or a transposed head is off by O(|expected|). */
Test(common_gpt, whole_model_gradient_matches_finite_differences) {
  gpt_shape_t s = {.n_layer = 2, .n_head = 2, .n_embd = 8, .seq_len = 5, .vocab = 11};
  model_t m;
  gpt_init(&m, s);
  cr_assert(m.numel == 1976, "Ψ %lld", (long long)m.numel);
  enum { B = 2 };
  int tok[B * 5], tgt[B * 5];
  for (int i = 0; i < B * 5; i++) tok[i] = (i * 7 + 3) % 11, tgt[i] = (i * 5 + 1) % 11;
  float *params = make_params(&m, 11), *grads = calloc(m.padded_numel, sizeof(float));
  double loss = zl_fwd_bwd(&m, params, grads, DT_F32, tok, tgt, B, 0.0f, NULL);
  double lref = ref_loss(&m, params, -1, 0, tok, tgt, B);
  cr_assert(zl_rel(loss, lref) < 1e-5, "loss: got %.9g, expected %.9g", loss, lref);
  double *num = malloc(sizeof(double) * m.numel), gmax = 0, h = 1e-5;
  for (int64_t i = 0; i < m.numel; i++) {
    num[i] = (ref_loss(&m, params, i, h, tok, tgt, B) - ref_loss(&m, params, i, -h, tok, tgt, B)) / (2 * h);
    gmax = fmax(gmax, fabs(num[i]));
  }
  cr_assert(gmax > 1e-3, "the gradient is ~0 everywhere (max %g): the check would be empty", gmax);
  int nonzero = 0;
  for (int64_t i = 0; i < m.numel; i++) {
    nonzero += fabs(num[i]) > 1e-6;
    double tol = 1e-4 * fabs(num[i]) + 1e-5 * gmax;
    if (!(fabs(grads[i] - num[i]) <= tol)) {
      int u = 0;
      while (u + 1 < m.n_units && m.units[u + 1].off <= i) u++;
      cr_assert_fail("grad unit %d [%lld]: got %.9g, expected %.9g (tol %.3g)", u,
                     (long long)(i - m.units[u].off), grads[i], num[i], tol);
    }
  }
  /* rows of wte for tokens the batch never uses have zero gradient; everything else moves */
  cr_assert(nonzero > m.numel * 3 / 4, "only %d of %lld gradients are nonzero", nonzero, (long long)m.numel);
  free(num); free(params); free(grads);
  model_free(&m);
}

/* beta 1 adds the new gradient once: the same batch twice doubles every gradient, exactly. */
Test(common_gpt, backward_beta_accumulates) {
  gpt_shape_t s;
  gpt_preset("tiny", &s);
  model_t m;
  gpt_init(&m, s);
  enum { B = 2 };
  int tok[B * 16], tgt[B * 16];
  for (int i = 0; i < B * 16; i++) tok[i] = (i * 37) % 256, tgt[i] = (i * 11 + 5) % 256;
  float *p = make_params(&m, 3), *g1 = calloc(m.padded_numel, sizeof(float)),
        *g2 = malloc(sizeof(float) * m.padded_numel);
  zl_fwd_bwd(&m, p, g1, DT_F32, tok, tgt, B, 0.0f, NULL);
  for (int64_t i = 0; i < m.padded_numel; i++) g2[i] = NAN; /* beta 0 must not read this */
  zl_fwd_bwd(&m, p, g2, DT_F32, tok, tgt, B, 0.0f, NULL);
  zl_expect_floats("grads (beta 0 over NaN)", g2, g1, m.padded_numel, 0);
  zl_fwd_bwd(&m, p, g2, DT_F32, tok, tgt, B, 1.0f, NULL);
  for (int64_t i = 0; i < m.padded_numel; i++) g1[i] *= 2;
  zl_expect_floats("grads (beta 1, same batch twice)", g2, g1, m.padded_numel, 0);
  free(p); free(g1); free(g2);
  model_free(&m);
}

/* Causal: changing the token at position 9 leaves the logits of positions 0..8 bit for bit. */
Test(common_gpt, logits_are_causal) {
  gpt_shape_t s;
  gpt_preset("tiny", &s);
  model_t m;
  gpt_init(&m, s);
  int tok[16], tgt[16] = {0};
  for (int i = 0; i < 16; i++) tok[i] = (i * 29 + 1) % 256;
  float *p = make_params(&m, 4), *a = malloc(sizeof(float) * 16 * 256), *b = malloc(sizeof(float) * 16 * 256);
  zl_fwd_bwd(&m, p, NULL, DT_F32, tok, tgt, 1, 0, a);
  tok[9] = (tok[9] + 100) % 256;
  zl_fwd_bwd(&m, p, NULL, DT_F32, tok, tgt, 1, 0, b);
  zl_expect_floats("logits of positions 0..8", b, a, 9 * 256, 0);
  cr_assert(memcmp(a + 9 * 256, b + 9 * 256, 256 * sizeof(float)) != 0, "position 9's logits did not change");
  free(p); free(a); free(b);
  model_free(&m);
}

/* The activation formula of gpt.h equals the units' own sizes: outputs + saved (or outputs +
 * the largest saved with recompute), 4 bytes each, times b; and by hand for tiny. */
Test(common_gpt, activation_formula_matches_units) {
  const char *names[3] = {"tiny", "small", "124m-shape"};
  for (int p = 0; p < 3; p++) {
    gpt_shape_t s;
    gpt_preset(names[p], &s);
    model_t m;
    gpt_init(&m, s);
    int64_t outs = 0, saved = 0;
    for (int u = 0; u < m.n_units; u++) outs += m.units[u].y_numel, saved += m.units[u].saved_numel;
    for (int64_t b = 1; b <= 4; b *= 2) {
      cr_assert(gpt_acts_bytes(s, b, 0) == 4 * b * (outs + saved), "%s b %lld: formula %lld, units %lld",
                names[p], (long long)b, (long long)gpt_acts_bytes(s, b, 0),
                (long long)(4 * b * (outs + saved)));
      cr_assert(gpt_acts_bytes(s, b, 1) == 4 * b * (outs + model_max_saved_numel(&m)), "%s b %lld recompute",
                names[p], (long long)b);
    }
    model_free(&m);
  }
  /* tiny by hand, b = 1: s 16, h 32, a 2, V 256, L 2: block saved 15·16·32 + 4·16 + 2·16² = 8256;
   * outputs 16·32·3 + 16·256 = 5632; head saved 16·32 + 2·16 = 544: 4·(5632 + 2·8256 + 544) = 90752;
   * recompute: 4·(5632 + 8256) = 55552 */
  gpt_shape_t t;
  gpt_preset("tiny", &t);
  cr_assert(gpt_acts_bytes(t, 1, 0) == 90752, "tiny: %lld", (long long)gpt_acts_bytes(t, 1, 0));
  cr_assert(gpt_acts_bytes(t, 1, 1) == 55552, "tiny recompute: %lld", (long long)gpt_acts_bytes(t, 1, 1));
}

/* Per rank of t-way TP (gpt_acts_bytes_tp, solutions/tp_gpt.c's split): by hand for tiny with 4 heads
 * at t = 2, b = 1: block saved 3·16·32 + 4·16 + 12·16·16 + 2·16² = 5184, outputs 16·32·3 + 16·128 =
 * 3584, head 544: 4·(3584 + 2·5184 + 544) = 57984; with SP every term at 1/t: exactly 1 rank's / t,
 * for every preset, t in {1, 2, 4}, with and without recompute. */
Test(common_gpt, activation_formula_tp_and_sp) {
  gpt_shape_t t;
  gpt_preset("tiny", &t);
  t.n_head = 4;
  cr_assert(gpt_acts_bytes_tp(t, 1, 0, 2, 0) == 57984, "tiny tp 2: %lld",
            (long long)gpt_acts_bytes_tp(t, 1, 0, 2, 0));
  cr_assert(gpt_acts_bytes_tp(t, 1, 0, 1, 0) == gpt_acts_bytes(t, 1, 0), "t = 1 is gpt_acts_bytes");
  const char *names[3] = {"tiny", "small", "124m-shape"};
  for (int p = 0; p < 3; p++) {
    gpt_shape_t s;
    gpt_preset(names[p], &s);
    s.n_head = 4;
    for (int k = 1; k <= 4; k *= 2)
      for (int rc = 0; rc < 2; rc++)
        cr_assert(gpt_acts_bytes_tp(s, 3, rc, k, 1) * k == gpt_acts_bytes(s, 3, rc),
                  "%s t %d recompute %d: %lld x t != %lld", names[p], k, rc,
                  (long long)gpt_acts_bytes_tp(s, 3, rc, k, 1), (long long)gpt_acts_bytes(s, 3, rc));
  }
}

/* ---- text data ------------------------------------------------------------------------------- */
static const char *write_text(char *path, size_t n, int64_t len) {
  snprintf(path, n, "/tmp/zl_gpt_text_%d.txt", (int)getpid());
  FILE *f = fopen(path, "wb");
  for (int64_t i = 0; i < len; i++) fputc((int)(i * 7 % 251), f);
  fclose(f);
  return path;
}
Test(common_gpt, text_windows_are_pure_and_split) {
  char path[128];
  write_text(path, sizeof path, 1000);
  data_t d;
  data_init_text(&d, path, 16, 9);
  cr_assert(d.train_bytes == 900 && d.file_bytes == 1000, "split %lld / %lld", (long long)d.train_bytes,
            (long long)d.file_bytes);
  int x[8 * 16], y[8 * 16], x2[16], y2[16];
  data_batch(&d, 100, 8, x, y);
  for (int r = 0; r < 8; r++) {
    int64_t pos = data_text_train_pos(&d, 100 + r);
    cr_assert(pos >= 0 && pos + 17 <= 900, "train window %lld outside the train split", (long long)pos);
    for (int t = 0; t < 16; t++)
      cr_assert(x[r * 16 + t] == (int)((pos + t) * 7 % 251) &&
                    y[r * 16 + t] == (int)((pos + t + 1) * 7 % 251),
                "sample %d token %d: not the file's bytes at %lld", 100 + r, t, (long long)pos);
    data_batch(&d, 100 + r, 1, x2, y2); /* one sample alone = the same sample in a batch */
    cr_assert(memcmp(x2, x + r * 16, sizeof x2) == 0 && memcmp(y2, y + r * 16, sizeof y2) == 0, "sample %d",
              100 + r);
  }
  for (int64_t j = 0; j < 40; j++) {
    int64_t pos = data_text_val_pos(&d, j);
    cr_assert(pos >= 900 && pos + 17 <= 1000, "validation window %lld outside [900, 1000)", (long long)pos);
  }
  data_val_batch(&d, 3, 1, x2, y2);
  cr_assert(x2[0] == (int)(data_text_val_pos(&d, 3) * 7 % 251), "validation sample 3");
  data_free(&d);
  char why[256];
  cr_assert(data_text_check(path, 100, why, sizeof why) != 0 && strstr(why, "too short"),
            "1000 bytes for seq 100 (needs 1010): %s", why);
  cr_assert(data_text_check("/nonexistent/zl.txt", 16, why, sizeof why) != 0,
            "a missing file must be refused");
  cr_assert(data_text_check("/tmp", 16, why, sizeof why) != 0, "a directory must be refused");
  unlink(path);
}
