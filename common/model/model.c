/* model.c — the model table's common part, and the MLP behind it (notes/02-ddp.md).
 * This file knows shapes and offsets, and runs one unit forward or backward; it knows nothing
 * of ranks: which buffer a unit's parameters live in (full, gathered, shard) is the strategy's
 * business. The GPT is in gpt.c, behind the same table (model.h).
 *
 * L = 0 is allowed: one unit D→C, logistic regression (H is then unused). */
#include "model.h"  // model_t, unit_t, unit_io_t, the contracts implemented here
#include <math.h>   // sqrt
#include <stdlib.h> // free
#include "check.h"  // die, xcalloc
#include "data.h"   // rng_normal
#include "device.h" // dev_memcpy
#include "ops.h"    // op_linear_fwd, op_linear_bwd(_input, _weight), op_gelu_fwd, op_gelu_bwd

/* rng stream of unit u's init: MODEL_STREAM + u (data.c uses streams 1..3). */
#define MODEL_STREAM 0x1000u

static inline int model_unit_in(int D, int H, int L, int u) { return u == 0 ? D : H; }
static inline int model_unit_out(int H, int C, int L, int u) { return u == L ? C : H; }

static void model_check_shape(int D, int H, int C, int L) {
  if (D < 1 || C < 1 || L < 0 || (L > 0 && H < 1))
    die("model shape input %d hidden %d classes %d layers %d: need input, classes >= 1, "
        "layers >= 0, hidden >= 1 when layers >= 1", D, H, C, L);
}

int64_t model_count_params(int D, int H, int C, int L) {
  int64_t total = 0;
  for (int u = 0; u <= L; u++) {
    int64_t in = model_unit_in(D, H, L, u), out = model_unit_out(H, C, L, u);
    total += out * in + out;
  }
  return total;
}

void model_layout(model_t *m) {
  int64_t off = 0;
  m->max_unit_padded = 0;
  for (int u = 0; u < m->n_units; u++) {
    unit_t *un = &m->units[u];
    un->off = off;          // unpadded: units back to back
    un->padded = un->numel; // pad 1
    un->piece = un->padded; // one "rank" owns all of it
    un->shard_off = off;
    off += un->padded;
    if (un->padded > m->max_unit_padded) m->max_unit_padded = un->padded;
  }
  m->numel = off;
  m->padded_numel = off;
  m->shard_numel = off;
}

void model_init(model_t *m, int D, int H, int C, int L) {
  model_check_shape(D, H, C, L);
  *m = (model_t){.fns = &model_mlp_fns,
                 .D = D,
                 .H = H,
                 .C = C,
                 .L = L,
                 .in_numel = D,
                 .rows = 1,
                 .classes = C,
                 .n_units = L + 1};
  m->units = xcalloc((size_t)m->n_units, sizeof(unit_t), "model units");
  for (int u = 0; u < m->n_units; u++) {
    unit_t *un = &m->units[u];
    un->in = model_unit_in(D, H, L, u);
    un->out = model_unit_out(H, C, L, u);
    un->numel = (int64_t)un->out * un->in + un->out;
    un->y_numel = un->out;                      // GELU(z), or the logits for the last unit
    un->saved_numel = u < L ? un->out : 0;      // z, for GELU'(z) in backward
  }
  model_layout(m);
}

int64_t model_max_y_numel(const model_t *m) {
  int64_t mx = 0;
  for (int u = 0; u < m->n_units; u++)
    if (m->units[u].y_numel > mx) mx = m->units[u].y_numel;
  return mx;
}

int64_t model_max_saved_numel(const model_t *m) {
  int64_t mx = 0;
  for (int u = 0; u < m->n_units; u++)
    if (m->units[u].saved_numel > mx) mx = m->units[u].saved_numel;
  return mx;
}

void model_free(model_t *m) {
  if (m->fns && m->fns->free_ctx) m->fns->free_ctx(m);
  m->ctx = NULL;
  free(m->units);
  m->units = NULL;
  m->n_units = 0;
}

static void mlp_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  if (u < 0 || u >= m->n_units) die("model_init_unit: unit %d of %d", u, m->n_units);
  const unit_t *un = &m->units[u];
  int64_t nw = (int64_t)un->out * un->in;
  float std = (float)(1.0 / sqrt((double)un->in)); // W ~ N(0, 1/in)
  for (int64_t k = 0; k < nw; k++) dst[k] = std * rng_normal(seed, MODEL_STREAM + (uint64_t)u, (uint64_t)k);
  for (int64_t k = nw; k < un->padded; k++) dst[k] = 0.0f; // b = 0, then the pad slots
}

/* Unit u < L: z = x·Wᵀ + b kept in saved, y = GELU(z). Unit L: y = z (the logits). */
static void mlp_forward(const model_t *m, int u, const unit_io_t *io) {
  const unit_t *un = &m->units[u];
  void *base = (void *)io->params; // unit_W/unit_b take a non-const base; nothing is written through it
  int last = u == m->n_units - 1;
  float *z = last ? io->y : io->saved;                                                       // (B,out)
  op_linear_fwd(io->dev, z, io->x, unit_W(base, io->wdt), unit_b(un, base, io->wdt), io->wdt, io->B, un->in,
                un->out);
  if (!last) op_gelu_fwd(io->dev, io->y, z, (int64_t)io->B * un->out);                        // y (B,out)
}

/* dz = dy·GELU'(z) in place (unit u < L), then the linear backward: dx = dz·W, dW, db. */
static void mlp_backward(const model_t *m, int u, const unit_io_t *io) {
  const unit_t *un = &m->units[u];
  void *base = (void *)io->params;
  if (u != m->n_units - 1) op_gelu_bwd(io->dev, io->dy, io->dy, io->saved, (int64_t)io->B * un->out);
  op_linear_bwd(io->dev, io->dx, unit_W(io->grads, io->wdt), unit_b(un, io->grads, io->wdt), io->dy, io->x,
                unit_W(base, io->wdt), io->wdt, io->B, un->in, un->out, io->beta);
}

/* The backward in two halves (model.h). B: dz as backward computes it, kept where W finds it —
 * over the saved pre-activation z (unit u < L: GELU' has read it) or over the logits (unit L:
 * the loss has read them) — then dx = dz·W. W: dW, db from that dz and the input x. The MLP
 * needs no wsaved. */
static void mlp_backward_input(const model_t *m, int u, const unit_io_t *io) {
  const unit_t *un = &m->units[u];
  int64_t n = (int64_t)io->B * un->out;
  float *dz = u != m->n_units - 1 ? io->saved : io->y;
  if (u != m->n_units - 1) op_gelu_bwd(io->dev, io->dy, io->dy, io->saved, n);
  dev_memcpy(io->dev, dz, io->dev, io->dy, (size_t)n * sizeof(float));
  op_linear_bwd_input(io->dev, io->dx, io->dy, unit_W((void *)io->params, io->wdt), io->wdt, io->B, un->in,
                      un->out);
}

static void mlp_backward_weight(const model_t *m, int u, const unit_io_t *io) {
  const unit_t *un = &m->units[u];
  const float *dz = u != m->n_units - 1 ? io->saved : io->y;
  op_linear_bwd_weight(io->dev, unit_W(io->grads, io->wdt), unit_b(un, io->grads, io->wdt), dz, io->x,
                       io->wdt, io->B, un->in, un->out, io->beta);
}

static double mlp_flops_per_sample(const model_t *m) {
  double f = 0;
  for (int u = 0; u < m->n_units; u++) f += 2.0 * m->units[u].in * m->units[u].out;
  return f;
}

/* Every linear layer's W but the last (the head, which gives the logits): its bias goes to AdamW. */
static int mlp_matrices(const model_t *m, int u, model_matrix_t *out) {
  if (u >= m->n_units - 1) return 0;
  out[0] = (model_matrix_t){.off = 0, .rows = m->units[u].out, .cols = m->units[u].in};
  return 1;
}

const model_fns_t model_mlp_fns = {.name = "mlp",
                                   .init_unit = mlp_init_unit,
                                   .forward = mlp_forward,
                                   .backward = mlp_backward,
                                   .backward_input = mlp_backward_input,
                                   .backward_weight = mlp_backward_weight,
                                   .matrices = mlp_matrices,
                                   .flops_per_sample = mlp_flops_per_sample};
