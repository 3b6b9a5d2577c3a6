/* tp.c — Megatron-LM's tensor parallelism: f and g, the column- and row-parallel linears, and the
 * MLP block built from them (see tp.h; explained in notes/06-tensor-parallel.md).
 *
 * Every collective here is an all-reduce on the TP group, blocking: its result is needed by the
 * very next op (the critical path — unlike DDP's gradient all-reduce, nothing overlaps it).
 * The local math is the ordinary ops of common/ops.h on this rank's slices. */
#include "tp.h"       // tp_*, comm_t, tensor_t
#include "check.h"    // die, xmalloc
#include "device.h"   // dev_memcpy
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include "ops.h"      // op_linear_fwd, op_linear_bwd, op_gelu_fwd, op_gelu_bwd, op_add, op_cast
#include <stdlib.h>   // free
#include <string.h>   // memcpy

/* ---- f and g ------------------------------------------------------------------------------ */
void tp_f_forward(comm_t *tp, const float *x, int64_t numel) {
  /* identity: every rank of the group already holds the whole x (Megatron's
   * copy_to_tensor_model_parallel_region does nothing in its forward either) */
}

void tp_f_backward(comm_t *tp, float *dx, int64_t numel) {
  // BEGIN EXERCISE tp_f_backward notes/06-tensor-parallel.md
  // HINT: x fed every rank's slice, so its gradient is the sum of what each slice sends back.
  // HINT: one collective over the TP group, in place on all numel elements of dx, summing.
  comm_all_reduce(tp, dx, numel, DT_F32, REDOP_SUM);
  // END EXERCISE
}

void tp_g_forward(comm_t *tp, float *y, int64_t numel) {
  // BEGIN EXERCISE tp_g_forward notes/06-tensor-parallel.md
  // HINT: each rank holds a partial sum of the same y; the layer's output is their sum, on every rank.
  // HINT: the same collective as f's backward, on all numel elements of y.
  comm_all_reduce(tp, y, numel, DT_F32, REDOP_SUM);
  // END EXERCISE
}

void tp_g_backward(comm_t *tp, const float *dy, int64_t numel) {
  /* identity: y was summed, and d(Σ partials)/d(partial) = 1, so each partial's gradient is the
   * whole dy, which every rank already holds */
}

/* ---- slices -------------------------------------------------------------------------------- */
void tp_column_slice(float *W_r, float *b_r, const float *W, const float *b, int in, int out, int T, int r) {
  int lo = tp_part_lo(out, T, r), n = tp_part_numel(out, T, r);
  memcpy(W_r, W + (int64_t)lo * in, (size_t)n * in * sizeof(float)); /* rows lo.. are contiguous */
  if (b && b_r) memcpy(b_r, b + lo, (size_t)n * sizeof(float));
}

void tp_row_slice(float *W_r, const float *W, int in, int out, int T, int r) {
  int lo = tp_part_lo(in, T, r), n = tp_part_numel(in, T, r);
  for (int o = 0; o < out; o++) memcpy(W_r + (int64_t)o * n, W + (int64_t)o * in + lo, (size_t)n * sizeof(float));
}

void tp_cols_of(float *x_r, const float *x, int B, int n, int T, int r) { tp_row_slice(x_r, x, n, B, T, r); }

/* ---- the split linears -------------------------------------------------------------------- */
void tp_column_forward(comm_t *tp, float *y_r, const float *x, const float *W_r, const float *b_r, int B, int in,
                       int out_r) {
  // BEGIN EXERCISE tp_column_forward notes/06-tensor-parallel.md
  // HINT: f first (x is whole on every rank), then an ordinary linear on this rank's rows of W and b.
  // HINT: shapes: x (B, in), W_r (out_r, in), b_r (out_r) -> y_r (B, out_r); weights are fp32.
  tp_f_forward(tp, x, (int64_t)B * in);
  op_linear_fwd(comm_device(tp), y_r, x, W_r, b_r, DT_F32, B, in, out_r);
  // END EXERCISE
}

void tp_column_backward(comm_t *tp, float *dx, float *dW_r, float *db_r, const float *dy_r, const float *x,
                        const float *W_r, int B, int in, int out_r) {
  // BEGIN EXERCISE tp_column_backward notes/06-tensor-parallel.md
  // HINT: the local backward gives whole dW_r and db_r but only this slice's share of dx; f's backward sums the shares.
  // HINT: op_linear_bwd on (B, in, out_r), beta 0; then f's backward on B·in elements, only when dx is wanted.
  op_linear_bwd(comm_device(tp), dx, dW_r, db_r, dy_r, x, W_r, DT_F32, B, in, out_r, 0.0f);
  if (dx) tp_f_backward(tp, dx, (int64_t)B * in);
  // END EXERCISE
}

/* A bias of zeros for the partial products of tp_row_forward: op_linear_fwd always adds one, and the
 * real bias must be added once, after the sum. Grown on demand, never freed (a few floats). */
__attribute__((unused)) static const float *zeros(device_t dev, int n) {
  static float *z[2];
  static int zn[2];
  int k = dev == DEV_CUDA;
  if (n > zn[k]) {
    if (z[k]) dev_free(dev, z[k]);
    z[k] = dev_malloc(dev, (size_t)n * sizeof(float), "tp zero bias"); /* zero-filled */
    zn[k] = n;
  }
  return z[k];
}

void tp_row_forward(comm_t *tp, float *y, const float *x_r, const float *W_r, const float *b, int B, int in_r,
                    int out) {
  // BEGIN EXERCISE tp_row_forward notes/06-tensor-parallel.md
  // HINT: a local linear WITHOUT bias gives this slice's partial y; g sums the partials; then the bias, once.
  // HINT: op_linear_fwd on (B, in_r, out) with the bias zeros(dev, out); g on B·out elements; b onto each of B rows.
  device_t dev = comm_device(tp);
  op_linear_fwd(dev, y, x_r, W_r, zeros(dev, out), DT_F32, B, in_r, out);
  tp_g_forward(tp, y, (int64_t)B * out);
  for (int i = 0; i < B; i++) op_add(dev, y + (int64_t)i * out, b, DT_F32, out);
  // END EXERCISE
}

void tp_row_backward(comm_t *tp, float *dx_r, float *dW_r, float *db, const float *dy, const float *x_r,
                     const float *W_r, int B, int in_r, int out) {
  // BEGIN EXERCISE tp_row_backward notes/06-tensor-parallel.md
  // HINT: g's backward is the identity: dy is whole on every rank, so all three gradients are local and complete.
  // HINT: one op_linear_bwd on (B, in_r, out) with beta 0; db comes out the same on every rank.
  tp_g_backward(tp, dy, (int64_t)B * out);
  op_linear_bwd(comm_device(tp), dx_r, dW_r, db, dy, x_r, W_r, DT_F32, B, in_r, out, 0.0f);
  // END EXERCISE
}

/* ---- the MLP block ------------------------------------------------------------------------- */
tp_mlp_t *tp_mlp_new(comm_t *tp, int B, int h, int ffn, const float *W1, const float *b1, const float *W2,
                     const float *b2) {
  int T = comm_world(tp), r = comm_rank(tp);
  if (B < 1 || h < 1 || ffn < T)
    die("rank %d: tp_mlp_new: B %d, h %d, ffn %d: need B, h >= 1 and ffn >= T = %d", r, B, h, ffn, T);
  device_t dev = comm_device(tp);
  tp_mlp_t *m = xcalloc(1, sizeof *m, "tp mlp");
  m->tp = tp;
  m->T = T;
  m->r = r;
  m->B = B;
  m->h = h;
  m->ffn = ffn;
  m->ffn_r = tp_part_numel(ffn, T, r);
  int64_t fr = m->ffn_r, n1 = fr * h, n2 = (int64_t)h * fr;
  int64_t numel = n1 + fr + n2 + h;
  m->params = tensor_alloc("tp mlp params", LEDGER_PARAMS, DT_F32, dev, numel);
  m->grads = tensor_alloc("tp mlp grads", LEDGER_GRADS, DT_F32, dev, numel);
  m->acts = tensor_alloc("tp mlp activations", LEDGER_ACTS, DT_F32, dev, 3 * B * fr);
  float *p = m->params.data, *g = m->grads.data, *a = m->acts.data;
  m->W1 = p, m->b1 = p + n1, m->W2 = p + n1 + fr, m->b2 = p + n1 + fr + n2;
  m->dW1 = g, m->db1 = g + n1, m->dW2 = g + n1 + fr, m->db2 = g + n1 + fr + n2;
  m->a = a, m->u = a + B * fr, m->d = a + 2 * B * fr;
  /* this rank's slices, built on the host, then copied to the device in one go */
  float *host = xmalloc((size_t)numel * sizeof(float), "tp mlp slices");
  tp_column_slice(host, host + n1, W1, b1, h, ffn, T, r);
  tp_row_slice(host + n1 + fr, W2, ffn, h, T, r);
  memcpy(host + n1 + fr + n2, b2, (size_t)h * sizeof(float));
  dev_memcpy(dev, p, DEV_CPU, host, (size_t)numel * sizeof(float));
  free(host);
  return m;
}

void tp_mlp_free(tp_mlp_t *m) {
  if (!m) return;
  tensor_free(&m->params);
  tensor_free(&m->grads);
  tensor_free(&m->acts);
  free(m);
}

void tp_mlp_forward(tp_mlp_t *m, float *y, const float *x) {
  // BEGIN EXERCISE tp_mlp_forward notes/06-tensor-parallel.md
  // HINT: column-parallel first layer, GELU on this rank's own columns (no communication), row-parallel second.
  // HINT: x (B, h) -> a (B, ffn_r) -> u = GELU(a) (B·ffn_r elements) -> y (B, h); a and u stay in m for the backward.
  device_t dev = comm_device(m->tp);
  tp_column_forward(m->tp, m->a, x, m->W1, m->b1, m->B, m->h, m->ffn_r);
  op_gelu_fwd(dev, m->u, m->a, (int64_t)m->B * m->ffn_r);
  tp_row_forward(m->tp, y, m->u, m->W2, m->b2, m->B, m->ffn_r, m->h);
  // END EXERCISE
}

void tp_mlp_backward(tp_mlp_t *m, float *dx, const float *dy, const float *x) {
  // BEGIN EXERCISE tp_mlp_backward notes/06-tensor-parallel.md
  // HINT: the forward in reverse: row-parallel backward, GELU backward on this rank's columns, column-parallel.
  // HINT: dy (B, h) -> du (B, ffn_r) into m->d -> da in place (GELU' at the saved a) -> dx (B, h).
  device_t dev = comm_device(m->tp);
  tp_row_backward(m->tp, m->d, m->dW2, m->db2, dy, m->u, m->W2, m->B, m->ffn_r, m->h);
  op_gelu_bwd(dev, m->d, m->d, m->a, (int64_t)m->B * m->ffn_r);
  tp_column_backward(m->tp, dx, m->dW1, m->db1, m->d, x, m->W1, m->B, m->h, m->ffn_r);
  // END EXERCISE
}

/* ---- a whole model, split: train.h's cfg.model_split ------------------------------------- */
/* Every unit of the full model becomes one of three kinds on this rank (local layouts):
 *   TPU_COL  column-parallel, out split:  W_r (out_r, in) | b_r (out_r)          GELU after
 *   TPU_ROW  row-parallel, in split:      b (out) | W_r (out, in_r)      b replicated, first
 *   TPU_REPL not split:                   W (out, in) | b (out)          all replicated
 * The replicated parameters come first in a unit (unit_t.tp_rep_numel) so that the gradient
 * norm and the export each find them in one range. */
typedef enum { TPU_REPL = 0, TPU_COL = 1, TPU_ROW = 2 } tp_unit_kind_t;

typedef struct tp_model {
  comm_t *tp;            /* the TP group (not owned) */
  int T, r;              /* its size, this rank in it */
  model_t full;          /* the unsplit model: full shapes and the init (its own units array) */
  tp_unit_kind_t *kind;  /* [n_units] */
  tensor_t bias32;       /* (max out) fp32 copy of a row-parallel bias in bf16 mode, LEDGER_ACTS */
} tp_model_t;

static const model_fns_t tp_mlp_model_fns;

/* Parameters of a full MLP unit (out, in) on rank r of T, for each kind. */
static int64_t tp_local_numel(tp_unit_kind_t k, int in, int out, int T, int r) {
  if (k == TPU_COL) return (int64_t)tp_part_numel(out, T, r) * (in + 1);
  if (k == TPU_ROW) return (int64_t)out * tp_part_numel(in, T, r) + out;
  return (int64_t)out * in + out;
}

void tp_split_model(model_t *m, comm_t *tp) {
  if (m->fns != &model_mlp_fns)
    die("rank %d: --tp: the %s model has no tensor-parallel split here (the MLP has)", check_rank(), m->fns->name);
  int T = comm_world(tp), r = comm_rank(tp), U = m->n_units;
  tp_model_t *c = xcalloc(1, sizeof *c, "tp model");
  c->tp = tp, c->T = T, c->r = r;
  c->full = *m; /* shapes and scalars; then its own copy of the full units */
  c->full.units = xmalloc((size_t)U * sizeof(unit_t), "tp full units");
  memcpy(c->full.units, m->units, (size_t)U * sizeof(unit_t));
  c->full.ctx = NULL;
  c->kind = xcalloc((size_t)U, sizeof *c->kind, "tp unit kinds");
  int max_out = 1;
  for (int u = 0; u + 1 < U; u += 2) c->kind[u] = TPU_COL, c->kind[u + 1] = TPU_ROW; /* an odd last unit: REPL */
  for (int u = 0; u < U; u++) {
    unit_t *un = &m->units[u];
    int in = un->in, out = un->out, gelu = u < m->L;
    tp_unit_kind_t k = c->kind[u];
    if ((k == TPU_COL && out < T) || (k == TPU_ROW && in < T))
      die("rank %d: --tp %d: unit %d (%d -> %d) splits %d features over %d ranks: every rank needs one "
          "(--hidden >= T)", check_rank(), T, u, in, out, k == TPU_COL ? out : in, T);
    un->numel = tp_local_numel(k, in, out, T, r);
    if (k == TPU_COL) {
      un->out = tp_part_numel(out, T, r);
      un->y_numel = un->saved_numel = un->out; /* GELU(z_r), z_r: this rank's columns */
      un->tp_rep_numel = 0;
      un->tp_ar_calls = u > 0; /* f's backward completes dx; unit 0 has no dx */
      un->tp_ar_numel = in;
    } else if (k == TPU_ROW) {
      un->in = tp_part_numel(in, T, r);
      un->y_numel = out;
      un->saved_numel = gelu ? out : 0;
      un->tp_rep_numel = out; /* b */
      un->tp_ar_calls = 1;    /* g's forward */
      un->tp_ar_numel = out;
      if (out > max_out) max_out = out;
    } else {
      un->tp_rep_numel = un->numel;
      un->tp_ar_calls = 0;
      un->tp_ar_numel = 0;
    }
  }
  model_layout(m); /* unpadded local layout; a ZeRO strategy re-pads it over the DP group */
  c->bias32 = tensor_alloc("tp row bias (fp32)", LEDGER_ACTS, DT_F32, comm_device(tp), max_out);
  m->fns = &tp_mlp_model_fns;
  m->ctx = c;
}

static void tp_model_free_ctx(model_t *m) {
  tp_model_t *c = m->ctx;
  if (!c) return;
  free(c->full.units);
  free(c->kind);
  tensor_free(&c->bias32);
  free(c);
}

/* Unit u on this rank = the full unit's init (a pure function of seed, u, index), sliced. */
static void tp_model_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  const tp_model_t *c = m->ctx;
  const unit_t *fu = &c->full.units[u];
  int in = fu->in, out = fu->out;
  float *w = xmalloc((size_t)fu->numel * sizeof(float), "tp init (full unit)");
  model_mlp_fns.init_unit(&c->full, seed, u, w); /* W (out, in) | b (out) */
  const float *b = w + (int64_t)out * in;
  int64_t n = m->units[u].numel;
  if (c->kind[u] == TPU_COL) {
    int out_r = tp_part_numel(out, c->T, c->r);
    tp_column_slice(dst, dst + (int64_t)out_r * in, w, b, in, out, c->T, c->r);
  } else if (c->kind[u] == TPU_ROW) {
    memcpy(dst, b, (size_t)out * sizeof(float));
    tp_row_slice(dst + out, w, in, out, c->T, c->r);
  } else {
    memcpy(dst, w, (size_t)n * sizeof(float));
  }
  for (int64_t k = n; k < m->units[u].padded; k++) dst[k] = 0.0f; /* pad slots */
  free(w);
}

static const void *wat(const void *base, dtype_t wdt, int64_t k) { return (const char *)base + k * (int64_t)dtype_size(wdt); }

/* z (B, out) += b on every row, once (after g's sum). */
static void tp_bias_add(const tp_model_t *c, const unit_io_t *io, float *z, const void *b, int out) {
  const float *b32 = b;
  if (io->wdt != DT_F32) {
    op_cast(io->dev, c->bias32.data, DT_F32, b, io->wdt, out);
    b32 = c->bias32.data;
  }
  for (int i = 0; i < io->B; i++) op_add(io->dev, z + (int64_t)i * out, b32, DT_F32, out);
}

static void tp_model_forward(const model_t *m, int u, const unit_io_t *io) {
  const tp_model_t *c = m->ctx;
  const unit_t *un = &m->units[u];
  int in = un->in, out = un->out, last = u == m->n_units - 1;
  float *z = last ? io->y : io->saved; /* (B, out) pre-activation */
  if (c->kind[u] == TPU_ROW) {         /* partial z = x_r·W_rᵀ, g sums, then b once */
    op_linear_fwd(io->dev, z, io->x, wat(io->params, io->wdt, out), NULL, io->wdt, io->B, in, out);
    tp_g_forward(c->tp, z, (int64_t)io->B * out);
    tp_bias_add(c, io, z, io->params, out);
  } else { /* column-parallel (f is the identity) or replicated: an ordinary linear */
    if (c->kind[u] == TPU_COL) tp_f_forward(c->tp, io->x, (int64_t)io->B * in);
    op_linear_fwd(io->dev, z, io->x, io->params, wat(io->params, io->wdt, (int64_t)out * in), io->wdt, io->B, in, out);
  }
  if (!last) op_gelu_fwd(io->dev, io->y, z, (int64_t)io->B * out);
}

static void tp_model_backward(const model_t *m, int u, const unit_io_t *io) {
  const tp_model_t *c = m->ctx;
  const unit_t *un = &m->units[u];
  int in = un->in, out = un->out;
  if (u != m->n_units - 1) op_gelu_bwd(io->dev, io->dy, io->dy, io->saved, (int64_t)io->B * out);
  if (c->kind[u] == TPU_ROW) { /* g's backward is the identity: dy is whole here; b's gradient first */
    tp_g_backward(c->tp, io->dy, (int64_t)io->B * out);
    op_linear_bwd(io->dev, io->dx, (void *)wat(io->grads, io->wdt, out), io->grads, io->dy, io->x,
                  wat(io->params, io->wdt, out), io->wdt, io->B, in, out, io->beta);
    return;
  }
  op_linear_bwd(io->dev, io->dx, io->grads, (void *)wat(io->grads, io->wdt, (int64_t)out * in), io->dy, io->x,
                io->params, io->wdt, io->B, in, out, io->beta);
  if (c->kind[u] == TPU_COL && io->dx) tp_f_backward(c->tp, io->dx, (int64_t)io->B * in); /* the partial dx, summed */
}

static double tp_model_flops(const model_t *m) { /* this rank's share */
  double f = 0;
  for (int u = 0; u < m->n_units; u++) f += 2.0 * m->units[u].in * m->units[u].out;
  return f;
}

/* Rank 0 of the TP group gathers every rank's units and puts the slices back where the full
 * unit has them (the inverse of tp_model_init_unit's slicing). */
static float *tp_model_unsplit(const model_t *m, const float *local, int has_local, int64_t *full_numel) {
  const tp_model_t *c = m->ctx;
  *full_numel = c->full.numel;
  if (!has_local) return NULL; /* the same on the whole group (train.c: DP rank 0 holds the export) */
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(c->tp, local, m->numel * (int64_t)sizeof(float), &all, &sizes);
  if (c->r != 0) {
    free(all);
    free(sizes);
    return NULL;
  }
  float *full = xmalloc((size_t)c->full.numel * sizeof(float), "tp unsplit weights");
  int64_t *at = xcalloc((size_t)c->T, sizeof(int64_t), "tp unsplit offsets"); /* rank q's unit u in its blob */
  int64_t fo = 0;
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *fu = &c->full.units[u];
    int in = fu->in, out = fu->out;
    float *W = full + fo, *b = full + fo + (int64_t)out * in;
    for (int q = 0, boff = 0; q < c->T; boff += (int)(sizes[q] / 4), q++) {
      const float *s = (const float *)all + boff + at[q];
      if (c->kind[u] == TPU_COL) {
        int lo = tp_part_lo(out, c->T, q), n = tp_part_numel(out, c->T, q);
        memcpy(W + (int64_t)lo * in, s, (size_t)n * in * sizeof(float));
        memcpy(b + lo, s + (int64_t)n * in, (size_t)n * sizeof(float));
      } else if (c->kind[u] == TPU_ROW) {
        int lo = tp_part_lo(in, c->T, q), n = tp_part_numel(in, c->T, q);
        if (q == 0) memcpy(b, s, (size_t)out * sizeof(float));
        for (int o = 0; o < out; o++) memcpy(W + (int64_t)o * in + lo, s + out + (int64_t)o * n, (size_t)n * sizeof(float));
      } else if (q == 0) {
        memcpy(W, s, (size_t)fu->numel * sizeof(float));
      }
      at[q] += tp_local_numel(c->kind[u], in, out, c->T, q);
    }
    fo += fu->numel;
  }
  free(at);
  free(all);
  free(sizes);
  return full;
}

static const model_fns_t tp_mlp_model_fns = {.name = "mlp", .init_unit = tp_model_init_unit,
                                             .forward = tp_model_forward, .backward = tp_model_backward,
                                             .free_ctx = tp_model_free_ctx, .flops_per_sample = tp_model_flops,
                                             .unsplit = tp_model_unsplit};
