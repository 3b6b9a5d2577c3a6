/* model.c — the MLP as a list of linear units over one flat parameter buffer
 * (notes/02-ddp.md). This file knows shapes and offsets, and runs one unit forward or
 * backward; it knows nothing of ranks: which buffer a unit's parameters live in (full,
 * gathered, shard) is the strategy's business.
 *
 * L = 0 is allowed: one unit D→C, logistic regression (H is then unused). */
#include "model.h"  // model_t, unit_t, the contracts implemented here
#include <math.h>   // sqrt
#include <stdlib.h> // free
#include "check.h"  // die, xcalloc, check_rank
#include "data.h"   // rng_normal
#include "ops.h"    // op_linear_fwd, op_linear_bwd, op_gelu_fwd, op_gelu_bwd

/* rng stream of unit u's init: MODEL_STREAM + u (data.c uses streams 1..3). */
#define MODEL_STREAM 0x1000u

static inline int model_unit_in(int D, int H, int L, int u) { return u == 0 ? D : H; }
static inline int model_unit_out(int H, int C, int L, int u) { return u == L ? C : H; }

static void model_check_shape(int D, int H, int C, int L) {
  if (D < 1 || C < 1 || L < 0 || (L > 0 && H < 1))
    die("rank %d: model shape input %d hidden %d classes %d layers %d: need input, classes >= 1, "
        "layers >= 0, hidden >= 1 when layers >= 1", check_rank(), D, H, C, L);
}

int64_t model_count_params(int D, int H, int C, int L) {
  int64_t total = 0;
  for (int u = 0; u <= L; u++) {
    int64_t in = model_unit_in(D, H, L, u), out = model_unit_out(H, C, L, u);
    total += out * in + out;
  }
  return total;
}

void model_init(model_t *m, int D, int H, int C, int L) {
  model_check_shape(D, H, C, L);
  m->D = D;
  m->H = H;
  m->C = C;
  m->L = L;
  m->n_units = L + 1;
  m->units = xcalloc((size_t)m->n_units, sizeof(unit_t), "model units");
  int64_t off = 0;
  m->max_unit_padded = 0;
  for (int u = 0; u < m->n_units; u++) {
    unit_t *un = &m->units[u];
    un->in = model_unit_in(D, H, L, u);
    un->out = model_unit_out(H, C, L, u);
    un->numel = (int64_t)un->out * un->in + un->out;
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

void model_free(model_t *m) {
  free(m->units);
  m->units = NULL;
  m->n_units = 0;
}

void model_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  if (u < 0 || u >= m->n_units) die("rank %d: model_init_unit: unit %d of %d", check_rank(), u, m->n_units);
  const unit_t *un = &m->units[u];
  int64_t nw = (int64_t)un->out * un->in;
  float std = (float)(1.0 / sqrt((double)un->in)); // W ~ N(0, 1/in)
  for (int64_t k = 0; k < nw; k++) dst[k] = std * rng_normal(seed, MODEL_STREAM + (uint64_t)u, (uint64_t)k);
  for (int64_t k = nw; k < un->padded; k++) dst[k] = 0.0f; // b = 0, then the pad slots
}

void model_unit_forward(const model_t *m, int u, device_t dev, const void *params, dtype_t wdt, const float *x,
                        float *z, float *a, int B) {
  const unit_t *un = &m->units[u];
  void *base = (void *)params; // unit_W/unit_b take a non-const base; nothing is written through it
  op_linear_fwd(dev, z, x, unit_W(base, wdt), unit_b(un, base, wdt), wdt, B, un->in, un->out); // z (B,out)
  if (u != m->n_units - 1) op_gelu_fwd(dev, a, z, (int64_t)B * un->out);                      // a (B,out)
}

/* dz_prev (B,in): dx = dz·W lands there first, then becomes dz_prev = dx·GELU'(z_prev) in place.
 * With z_prev == NULL (unit 0) it is left as the plain input gradient. */
void model_unit_backward(const model_t *m, int u, device_t dev, const void *params, void *grads, dtype_t wdt,
                         const float *x, const float *dz, const float *z_prev, float *dz_prev, int B, float beta) {
  const unit_t *un = &m->units[u];
  void *base = (void *)params;
  op_linear_bwd(dev, dz_prev, unit_W(grads, wdt), unit_b(un, grads, wdt), dz, x, unit_W(base, wdt), wdt, B, un->in,
                un->out, beta);
  if (dz_prev && z_prev) op_gelu_bwd(dev, dz_prev, dz_prev, z_prev, (int64_t)B * un->in);
}
