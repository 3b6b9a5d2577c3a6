/* model.h — the MLP: input D, L hidden layers of width H with GELU, C classes.
 * Linear layers ("units") u = 0..L: unit 0 is D→H, units 1..L−1 are H→H, unit L is H→C.
 * All parameters live in ONE flat buffer; unit u occupies [off, off+padded): W (out×in,
 * row-major) then b (out), then padded−numel pad slots that stay exactly 0. DDP uses pad 1
 * (no padding); ZeRO pads each unit to a multiple of N so every rank owns the same-numbered
 * 1/N piece of every unit (FSDP's flat-parameter layout). See notes/02-ddp.md. */
#ifndef ZL_MODEL_H
#define ZL_MODEL_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t

typedef struct unit {
  int in, out;
  int64_t numel;     /* out·in + out real parameters */
  int64_t off;       /* offset of the unit in the padded flat buffer */
  int64_t padded;    /* numel rounded up to a multiple of the pad */
  int64_t piece;     /* padded / N: the slice each rank owns (ZeRO); = padded when pad is 1 */
  int64_t shard_off; /* offset of this rank's piece inside its shard buffer: Σ_{v<u} piece_v */
} unit_t;

typedef struct model {
  int D, H, C, L;      /* input, hidden width, classes, hidden layers */
  int n_units;         /* L + 1 */
  unit_t *units;       /* [n_units] */
  int64_t numel;       /* Ψ: real parameters */
  int64_t padded_numel;/* Σ padded */
  int64_t shard_numel; /* Σ piece: one rank's shard */
  int64_t max_unit_padded;
} model_t;

/* Shapes and the unpadded layout (pad 1, piece = padded, shard_off = off). */
void model_init(model_t *m, int D, int H, int C, int L);
void model_free(model_t *m);
/* Parameter count of a shape, without building it (for validation and ch00). */
int64_t model_count_params(int D, int H, int C, int L);

/* Deterministic init of unit u, a pure function of (seed, u, index): W ~ N(0, 1/in), b = 0.
 * Writes the unit's numel values then padded−numel zeros into dst (fp32, host). */
void model_init_unit(const model_t *m, uint64_t seed, int u, float *dst);

/* Views into one unit's parameters (or gradients) laid out W then b. */
static inline void *unit_W(void *unit_base, dtype_t dt) { return unit_base; }
static inline void *unit_b(const unit_t *u, void *unit_base, dtype_t dt) {
  return (char *)unit_base + (int64_t)u->out * u->in * (int64_t)dtype_size(dt);
}

/* Layer-wise forward of unit u for B rows: z = x·Wᵀ + b, and a = GELU(z) unless u is the last
 * unit (a == NULL then, z are the logits). params: the unit's parameters (wdt). */
void model_unit_forward(const model_t *m, int u, device_t dev, const void *params, dtype_t wdt,
                        const float *x, float *z, float *a, int B);
/* Layer-wise backward of unit u. dz (B,out): gradient w.r.t. z (already through GELU').
 * Writes grads (wdt, unit layout) with beta (0 overwrite, 1 accumulate), and if dx_prev != NULL
 * the gradient w.r.t. the unit's input, multiplied by GELU'(z_prev) so it is the previous
 * unit's dz. z_prev: the previous unit's pre-activation (NULL for u == 0). */
void model_unit_backward(const model_t *m, int u, device_t dev, const void *params, void *grads,
                         dtype_t wdt, const float *x, const float *dz, const float *z_prev,
                         float *dz_prev, int B, float beta);
#endif
