/* test_split_backward.c — the backward in two halves (chapter 07's zero-bubble schedules; suite
 * ch07_split): op_linear_bwd = op_linear_bwd_input then op_linear_bwd_weight, op_layernorm_bwd =
 * its _input then its _weight, and a model's backward_input then backward_weight = its backward,
 * every unit of the MLP and of the GPT (embedding, block, head), fp32 and bf16, a first micro-batch
 * (beta 0) and an accumulated second (beta 1) — bit for bit: the pipeline's zb-h1 and zb-h2 equal
 * 1F1B's bits only if these do. Notes: notes/07-pipeline.md, meeting 07c. */
#include "zl_test.h" // Criterion, zl_expect_floats
#include "data.h"    // rng_normal
#include "gpt.h"     // gpt_init
#include "model.h"   // model_t, model_forward, model_backward, model_backward_input, model_backward_weight
#include "ops.h"     // op_linear_bwd(_input, _weight), op_cast
#include "ops_gpt.h" // op_layernorm_fwd, op_layernorm_bwd(_input, _weight)

static void fill(float *p, int64_t n, uint64_t stream) {
  for (int64_t i = 0; i < n; i++) p[i] = rng_normal(77, stream, (uint64_t)i);
}

static void expect_bytes(const char *what, const void *got, const void *want, size_t n) {
  if (memcmp(got, want, n) == 0) return;
  const unsigned char *a = got, *b = want;
  size_t i = 0;
  while (a[i] == b[i]) i++;
  cr_assert_fail("%s: the split halves differ from the fused op at byte %zu of %zu (bitwise expected)", what,
                 i, n);
}

Test(ch07_split, linear_and_layernorm_halves_are_the_fused_op_bitwise) {
  enum { B = 7, IN = 19, OUT = 13 };
  float x[B * IN], dy[B * OUT], W[OUT * IN], dx1[B * IN], dx2[B * IN];
  fill(x, B * IN, 1), fill(dy, B * OUT, 2), fill(W, OUT * IN, 3);
  for (int dt = 0; dt < 2; dt++) {
    dtype_t wdt = dt ? DT_BF16 : DT_F32;
    size_t es = dtype_size(wdt);
    unsigned char Wh[OUT * IN * 4], g1[(OUT * IN + OUT) * 4], g2[(OUT * IN + OUT) * 4];
    op_cast(DEV_CPU, Wh, wdt, W, DT_F32, OUT * IN);
    for (int beta = 0; beta <= 1; beta++) {
      /* the same stale gradient in both (beta 1 adds to it) */
      float stale[OUT * IN + OUT];
      fill(stale, OUT * IN + OUT, 4);
      op_cast(DEV_CPU, g1, wdt, stale, DT_F32, OUT * IN + OUT);
      memcpy(g2, g1, (OUT * IN + OUT) * es);
      op_linear_bwd(DEV_CPU, dx1, g1, g1 + OUT * IN * es, dy, x, Wh, wdt, B, IN, OUT, (float)beta);
      op_linear_bwd_input(DEV_CPU, dx2, dy, Wh, wdt, B, IN, OUT);
      op_linear_bwd_weight(DEV_CPU, g2, g2 + OUT * IN * es, dy, x, wdt, B, IN, OUT, (float)beta);
      expect_bytes("linear dx", dx2, dx1, sizeof dx1);
      expect_bytes("linear dW | db", g2, g1, (OUT * IN + OUT) * es);
    }
  }
  /* LayerNorm: dx accumulates (the residual's gradient is already there) */
  enum { R = 9, C = 35 };
  float lx[R * C], ly[R * C], ldy[R * C], mean[R], rstd[R], w[C], b[C], ldx1[R * C], ldx2[R * C];
  fill(lx, R * C, 5), fill(ldy, R * C, 6), fill(w, C, 7), fill(b, C, 8);
  for (int dt = 0; dt < 2; dt++) {
    dtype_t wdt = dt ? DT_BF16 : DT_F32;
    size_t es = dtype_size(wdt);
    unsigned char wh[C * 4], bh[C * 4], g1[2 * C * 4], g2[2 * C * 4];
    op_cast(DEV_CPU, wh, wdt, w, DT_F32, C);
    op_cast(DEV_CPU, bh, wdt, b, DT_F32, C);
    op_layernorm_fwd(DEV_CPU, ly, mean, rstd, lx, wh, bh, wdt, R, C);
    for (int beta = 0; beta <= 1; beta++) {
      fill(ldx1, R * C, 9);
      memcpy(ldx2, ldx1, sizeof ldx1);
      float stale[2 * C];
      fill(stale, 2 * C, 10);
      op_cast(DEV_CPU, g1, wdt, stale, DT_F32, 2 * C);
      memcpy(g2, g1, 2 * C * es);
      op_layernorm_bwd(DEV_CPU, ldx1, g1, g1 + C * es, ldy, lx, mean, rstd, wh, wdt, R, C, (float)beta);
      op_layernorm_bwd_input(DEV_CPU, ldx2, ldy, lx, mean, rstd, wh, wdt, R, C);
      op_layernorm_bwd_weight(DEV_CPU, g2, g2 + C * es, ldy, lx, mean, rstd, wdt, R, C, (float)beta);
      expect_bytes("layernorm dx", ldx2, ldx1, sizeof ldx1);
      expect_bytes("layernorm dw | db", g2, g1, 2 * C * es);
    }
  }
}

/* One model: forward twice (the same bits), then per micro-batch k = 0, 1 (beta 0, then 1, a new
 * gradient of the logits each) the fused backward of units U−1..0 on one copy, and on the other
 * backward_input of U−1..0 (the B op) followed by backward_weight of 0..U−1 (the W op, in another
 * unit order: each writes its own gradients). Every dx and, after each micro-batch, every gradient
 * byte must agree. */
static void split_equals_fused(model_t *m, dtype_t wdt, const char *what) {
  enum { B = 3, MAXU = 8 };
  int U = m->n_units;
  cr_assert(U <= MAXU && m->fns->backward_input && m->fns->backward_weight, "%s: no split backward", what);
  size_t es = dtype_size(wdt);
  int64_t P = m->padded_numel;
  float *w32 = calloc((size_t)P, 4);
  for (int u = 0; u < U; u++) model_init_unit(m, 11, u, w32 + m->units[u].off);
  void *params = malloc((size_t)P * es), *g[2] = {calloc((size_t)P, es), calloc((size_t)P, es)};
  op_cast(DEV_CPU, params, wdt, w32, DT_F32, P);
  int64_t in_n = (int64_t)B * m->in_numel;
  float *xin = malloc((size_t)in_n * 4);
  if (m->in_is_tokens)
    for (int64_t i = 0; i < in_n; i++) ((int *)xin)[i] = (int)(i * 37 % m->classes);
  else fill(xin, in_n, 20);
  float *y[2][MAXU], *saved[2][MAXU], *ws[2][MAXU], *dxs[2][MAXU];
  int64_t maxy = 0;
  for (int u = 0; u < U; u++) {
    const unit_t *un = &m->units[u];
    maxy = un->y_numel > maxy ? un->y_numel : maxy;
    for (int p = 0; p < 2; p++) {
      y[p][u] = malloc((size_t)(B * un->y_numel) * 4);
      saved[p][u] = calloc((size_t)(B * un->saved_numel + 1), 4);
      ws[p][u] = calloc((size_t)(B * un->wsaved_numel + 1), 4);
      dxs[p][u] = malloc((size_t)(B * (u ? m->units[u - 1].y_numel : 1)) * 4);
    }
  }
  float *dy[2] = {malloc((size_t)(B * maxy) * 4), malloc((size_t)(B * maxy) * 4)};
  for (int k = 0; k < 2; k++) {
    unit_io_t io[2][MAXU];
    for (int p = 0; p < 2; p++)
      for (int u = 0; u < U; u++) {
        io[p][u] = (unit_io_t){.dev = DEV_CPU,
                               .wdt = wdt,
                               .B = B,
                               .params = (char *)params + m->units[u].off * es,
                               .grads = (char *)g[p] + m->units[u].off * es,
                               .beta = (float)k,
                               .x = u ? y[p][u - 1] : xin,
                               .y = y[p][u],
                               .saved = saved[p][u],
                               .wsaved = ws[p][u],
                               .dx = u ? dxs[p][u] : NULL};
        model_forward(m, u, &io[p][u]);
      }
    for (int p = 0; p < 2; p++) { /* the gradient of the logits, as the loss leaves it */
      fill(dy[p], B * m->units[U - 1].y_numel, 30 + (uint64_t)k);
      for (int u = U - 1; u >= 0; u--) {
        io[p][u].dy = dy[p];
        if (p == 0) model_backward(m, u, &io[p][u]);
        else model_backward_input(m, u, &io[p][u]);
        if (u) memcpy(dy[p], dxs[p][u], (size_t)(B * m->units[u - 1].y_numel) * 4); /* the next unit's dy */
      }
    }
    for (int u = 0; u < U; u++) { /* W as the loop runs it: no dx (B had it) */
      io[1][u].dx = NULL;
      model_backward_weight(m, u, &io[1][u]);
    }
    char name[160];
    for (int u = 1; u < U; u++) {
      snprintf(name, sizeof name, "%s, micro-batch %d: dx of unit %d", what, k, u);
      expect_bytes(name, dxs[1][u], dxs[0][u], (size_t)(B * m->units[u - 1].y_numel) * 4);
    }
    for (int u = 0; u < U; u++) {
      snprintf(name, sizeof name, "%s, micro-batch %d (beta %d): gradients of unit %d", what, k, k, u);
      expect_bytes(name, (char *)g[1] + m->units[u].off * es, (char *)g[0] + m->units[u].off * es,
                   (size_t)m->units[u].numel * es);
    }
  }
  for (int u = 0; u < U; u++)
    for (int p = 0; p < 2; p++) free(y[p][u]), free(saved[p][u]), free(ws[p][u]), free(dxs[p][u]);
  free(dy[0]), free(dy[1]), free(xin), free(params), free(g[0]), free(g[1]), free(w32);
}

Test(ch07_split, mlp_and_gpt_split_backward_is_the_backward_bitwise) {
  for (int dt = 0; dt < 2; dt++) {
    dtype_t wdt = dt ? DT_BF16 : DT_F32;
    model_t m;
    model_init(&m, 6, 13, 11, 4);
    split_equals_fused(&m, wdt, dt ? "MLP bf16" : "MLP fp32");
    model_free(&m);
    gpt_init(&m, (gpt_shape_t){.n_layer = 2, .n_head = 5, .n_embd = 35, .seq_len = 16, .vocab = 256});
    for (int u = 0; u < m.n_units; u++) /* what the W half keeps per sample: C per token, 4C in a block */
      cr_assert_eq(m.units[u].wsaved_numel, (u == 0 || u == m.n_units - 1 ? 1 : 4) * 16 * 35,
                   "GPT unit %d: wsaved %lld", u, (long long)m.units[u].wsaved_numel);
    split_equals_fused(&m, wdt, dt ? "GPT bf16" : "GPT fp32");
    model_free(&m);
  }
}
