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
#include "gpt.h"      // model_gpt_fns, gpt_block_layout (--model gpt)
#include "ops_gpt.h"  // op_layernorm_*, op_attention_*, op_embedding_* (--model gpt)
#include <math.h>     // expf, log
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

void tp_mlp_reference(int B, int h, int ffn, const float *x, const float *W1, const float *b1, const float *W2,
                      const float *b2, const float *dy, float *y, float *dx, float *dW1, float *db1, float *dW2,
                      float *db2) {
  float *a = xcalloc((size_t)B * ffn, sizeof(float), "reference a");   /* (B, ffn) pre-GELU */
  float *u = xcalloc((size_t)B * ffn, sizeof(float), "reference u");   /* (B, ffn) GELU(a) */
  float *du = xcalloc((size_t)B * ffn, sizeof(float), "reference du"); /* (B, ffn) */
  op_linear_fwd(DEV_CPU, a, x, W1, b1, DT_F32, B, h, ffn);
  op_gelu_fwd(DEV_CPU, u, a, (int64_t)B * ffn);
  op_linear_fwd(DEV_CPU, y, u, W2, b2, DT_F32, B, ffn, h);
  op_linear_bwd(DEV_CPU, du, dW2, db2, dy, u, W2, DT_F32, B, ffn, h, 0.0f);
  op_gelu_bwd(DEV_CPU, du, du, a, (int64_t)B * ffn);
  op_linear_bwd(DEV_CPU, dx, dW1, db1, du, x, W1, DT_F32, B, h, ffn, 0.0f);
  free(a);
  free(u);
  free(du);
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

/* ---- shared by both splits (the MLP's and the GPT's) -------------------------------------- */
/* Copies n floats between a full unit's parameters and a TP rank's local ones: full → local when
 * to_local, else local → full (the export). mv_cols: columns [lo, lo+n) of a (rows, in) matrix
 * ↔ a contiguous (rows, n). */
static void mv(float *full, float *local, int64_t n, int to_local) {
  if (to_local) memcpy(local, full, (size_t)n * sizeof(float));
  else memcpy(full, local, (size_t)n * sizeof(float));
}
static void mv_cols(float *full, float *local, int rows, int in, int lo, int n, int to_local) {
  for (int o = 0; o < rows; o++) mv(full + (int64_t)o * in + lo, local + (int64_t)o * n, n, to_local);
}
/* A split's map between full unit u and TP rank q's local unit (either way), and q's size of it. */
typedef void (*tp_map_fn)(const void *ctx, int u, int q, float *full, float *local, int to_local);
typedef int64_t (*tp_local_numel_fn)(const void *ctx, int u, int q);

/* full := m as the launcher built it, with its own copy of the units (the init and the export). */
static void tp_keep_full(model_t *full, const model_t *m) {
  *full = *m;
  full->units = xmalloc((size_t)m->n_units * sizeof(unit_t), "tp full units");
  memcpy(full->units, m->units, (size_t)m->n_units * sizeof(unit_t));
  full->ctx = NULL;
}

/* Unit u on TP rank r = the full unit's init (a pure function of seed, u, index), mapped; then
 * zeros in the pad slots of the local unit. */
static void tp_init_mapped(const model_t *full, const model_t *m, uint64_t seed, int u, int r, float *dst, const void *ctx,
                           tp_map_fn map) {
  float *w = xmalloc((size_t)full->units[u].numel * sizeof(float), "tp init (full unit)");
  full->fns->init_unit(full, seed, u, w);
  map(ctx, u, r, w, dst, 1);
  for (int64_t k = m->units[u].numel; k < m->units[u].padded; k++) dst[k] = 0.0f; /* pad slots */
  free(w);
}

/* model_fns_t.unsplit for a split: rank 0 of the TP group gathers every rank's units and maps each
 * slice back where the full unit has it; rank 0 last, so its replicated parameters are the ones kept. */
static float *tp_unsplit(comm_t *tp, const model_t *full, const model_t *m, const float *local, int has_local,
                         int64_t *full_numel, const void *ctx, tp_map_fn map, tp_local_numel_fn local_numel) {
  *full_numel = full->numel;
  if (!has_local) return NULL; /* the same on the whole group (train.c: DP rank 0 holds the export) */
  int T = comm_world(tp);
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(tp, local, m->numel * (int64_t)sizeof(float), &all, &sizes);
  if (comm_rank(tp) != 0) {
    free(all);
    free(sizes);
    return NULL;
  }
  float *w = xmalloc((size_t)full->numel * sizeof(float), "tp unsplit weights");
  float **at = xcalloc((size_t)T, sizeof(float *), "tp unsplit blobs"); /* rank q's next unit */
  for (int64_t q = 0, boff = 0; q < T; boff += sizes[q] / 4, q++) at[q] = (float *)all + boff;
  int64_t fo = 0;
  for (int u = 0; u < m->n_units; u++) {
    for (int q = T - 1; q >= 0; q--) {
      map(ctx, u, q, w + fo, at[q], 0);
      at[q] += local_numel(ctx, u, q);
    }
    fo += full->units[u].numel;
  }
  free(at);
  free(all);
  free(sizes);
  return w;
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

static void tp_split_gpt(model_t *m, comm_t *tp);

/* The MLP's units in pairs: column-parallel, then row-parallel; an odd last unit replicated. */
static tp_unit_kind_t tp_mlp_kind(int U, int u) {
  if (u % 2 == 0) return u + 1 < U ? TPU_COL : TPU_REPL;
  return TPU_ROW;
}

void tp_split_model(model_t *m, comm_t *tp) {
  if (m->fns == &model_gpt_fns) {
    tp_split_gpt(m, tp);
    return;
  }
  if (m->fns != &model_mlp_fns)
    die("rank %d: --tp: the %s model has no tensor-parallel split here (the MLP and the GPT have)", check_rank(),
        m->fns->name);
  int T = comm_world(tp), r = comm_rank(tp), U = m->n_units;
  tp_model_t *c = xcalloc(1, sizeof *c, "tp model");
  c->tp = tp, c->T = T, c->r = r;
  tp_keep_full(&c->full, m);
  c->kind = xcalloc((size_t)U, sizeof *c->kind, "tp unit kinds");
  int max_out = 1;
  for (int u = 0; u < U; u++) c->kind[u] = tp_mlp_kind(U, u);
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
      un->tp_ar_fwd_calls = 1;
      un->tp_ar_numel = out;
      un->tp_y_rep = 1;       /* y comes out of g: whole and the same on every rank (Pa keeps 1/T) */
      if (out > max_out) max_out = out;
    } else {
      un->tp_rep_numel = un->numel;
      un->tp_ar_calls = 0;
      un->tp_ar_numel = 0;
      un->tp_y_rep = 1; /* replicated weights on the row unit's replicated output */
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

/* Full unit u (W (out, in) | b (out)) ↔ rank q's slice of it (the layouts above). */
static void tp_mlp_map(const void *ctx, int u, int q, float *full, float *local, int to_local) {
  const tp_model_t *c = ctx;
  const unit_t *fu = &c->full.units[u];
  int in = fu->in, out = fu->out;
  float *W = full, *b = full + (int64_t)out * in;
  if (c->kind[u] == TPU_COL) { /* rows [lo, lo+n) of W and b */
    int lo = tp_part_lo(out, c->T, q), n = tp_part_numel(out, c->T, q);
    mv(W + (int64_t)lo * in, local, (int64_t)n * in, to_local);
    mv(b + lo, local + (int64_t)n * in, n, to_local);
  } else if (c->kind[u] == TPU_ROW) { /* b whole, then columns [lo, lo+n) of W */
    int lo = tp_part_lo(in, c->T, q), n = tp_part_numel(in, c->T, q);
    mv(b, local, out, to_local);
    mv_cols(W, local + out, out, in, lo, n, to_local);
  } else {
    mv(W, local, fu->numel, to_local);
  }
}
static int64_t tp_mlp_local_numel(const void *ctx, int u, int q) {
  const tp_model_t *c = ctx;
  return tp_local_numel(c->kind[u], c->full.units[u].in, c->full.units[u].out, c->T, q);
}

static void tp_model_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  const tp_model_t *c = m->ctx;
  tp_init_mapped(&c->full, m, seed, u, c->r, dst, c, tp_mlp_map);
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

static float *tp_model_unsplit(const model_t *m, const float *local, int has_local, int64_t *full_numel) {
  const tp_model_t *c = m->ctx;
  return tp_unsplit(c->tp, &c->full, m, local, has_local, full_numel, c, tp_mlp_map, tp_mlp_local_numel);
}

/* model_fns_t.to_local: this rank's slices of full unit u. */
static void tp_model_to_local(const model_t *m, int u, const float *full, float *local) {
  const tp_model_t *c = m->ctx;
  tp_mlp_map(c, u, c->r, (float *)full, local, 1); /* to_local: full is only read */
}

static const model_fns_t tp_mlp_model_fns = {.name = "mlp", .init_unit = tp_model_init_unit,
                                             .forward = tp_model_forward, .backward = tp_model_backward,
                                             .free_ctx = tp_model_free_ctx, .flops_per_sample = tp_model_flops,
                                             .unsplit = tp_model_unsplit, .to_local = tp_model_to_local};

/* ---- the GPT, split (notes/06-tensor-parallel.md, "The transformer layer, split") ----------
 * C = n_embd, S = seq_len, V = vocab, NH heads over T ranks: Cr = C/T features and NHr = NH/T
 * heads here (T must divide NH), Vr = this rank's part of the vocabulary (comm.h's chunks).
 * Local layouts, replicated parameters first (unit_t.tp_rep_numel):
 *   unit 0      embedding  wpe (S,C) | wte_r (Vr,C)                     vocabulary rows [v_lo, v_lo+Vr)
 *   units 1..L  block      ln1 w,b | proj b | ln2 w,b | fcproj b        6C, replicated
 *                          qkv W_r (3Cr,C), b_r (3Cr) | proj W_r (C,Cr) |
 *                          fc W_r (4Cr,C), b_r (4Cr) | fcproj W_r (C,4Cr)  12C·Cr + 7Cr, split
 *   unit L+1    head       lnf w,b (2C) | W_r (Vr,C)                    logits of this rank's Vr only
 * qkv W_r holds this rank's heads of q, k AND v: rows [c_lo, c_lo+Cr) of each third of the full
 * (3C,C) = [q | k | v], so the local qkv (B,S,3Cr) is [q_r | k_r | v_r] and op_attention_* run
 * on it unchanged with C = Cr, NH = NHr (the head size C/NH and the scale are the same).
 * Per block and micro-batch: f (identity) → qkv column-parallel → attention on the local heads →
 * proj row-parallel → g (all-reduce 1) → + b, + x; f → fc column-parallel → GELU → fcproj
 * row-parallel → g (all-reduce 2) → + b, + x2. Backward: the two f's all-reduce the partial
 * input gradients of fc and qkv (all-reduces 3 and 4); the g's are identities. Each of B·S·C. */
static gpt_block_layout_t tp_block_layout(int C, int Cr) { /* gpt.h's offsets, in the local order above */
  gpt_block_layout_t l;
  int64_t c = C, cr = Cr, at = 0;
  l.ln1w = at, at += c;
  l.ln1b = at, at += c;
  l.projb = at, at += c;
  l.ln2w = at, at += c;
  l.ln2b = at, at += c;
  l.fcprojb = at, at += c;
  l.qkvw = at, at += 3 * cr * c; /* the first split tensor: the 6C before it are the replicated ones */
  l.qkvb = at, at += 3 * cr;
  l.projw = at, at += c * cr;
  l.fcw = at, at += 4 * cr * c;
  l.fcb = at, at += 4 * cr;
  l.fcprojw = at, at += c * 4 * cr;
  l.numel = at; /* 6C + 12C·Cr + 7Cr: 12C² + 13C at T = 1 */
  return l;
}

typedef struct tp_gpt {
  comm_t *tp;        /* the TP group (not owned) */
  int T, r;          /* its size, this rank in it */
  model_t full;      /* the unsplit GPT (its own units array): the init and the export */
  int S, C, V, NH;   /* the full shape */
  int Cr, NHr, c_lo; /* this rank's heads: NHr of them, features [c_lo, c_lo+Cr) of q, k and v */
  int Vr, v_lo;      /* this rank's vocabulary rows [v_lo, v_lo+Vr) */
  /* working buffers, LEDGER_ACTS, grown on first use: */
  tensor_t scratch;  /* backward scratch (B·S·(C + 4Cr)) fp32; freed by the embedding's backward */
  tensor_t wte_ext;  /* (Vr+1, C) wdt: wte_r and a zero row, looked up by tokens of other ranks */
  tensor_t dwte_ext; /* (Vr+1, C) wdt: its gradient (the zero row's is dropped) */
  tensor_t wpe_zero; /* (S, C) zeros: ranks other than 0 add no position embedding (added once) */
  tensor_t tok;      /* (B·S) int32: token − v_lo when this rank holds its row, else Vr */
  tensor_t rowstat;  /* (B·S) fp32 on the device: the loss's per-row all-reduces (CUDA) */
  tensor_t bias32;   /* (C) fp32 copy of a replicated bias (bf16 weights) */
} tp_gpt_t;

static const model_fns_t tp_gpt_model_fns;

/* A working buffer of at least numel elements of dt (zero-filled when (re)allocated). */
static void *grow(tensor_t *t, const char *name, dtype_t dt, device_t dev, int64_t numel) {
  if (t->data && (t->numel < numel || t->dtype != dt || t->dev != dev)) tensor_free(t);
  if (!t->data) *t = tensor_alloc(name, LEDGER_ACTS, dt, dev, numel);
  return t->data;
}

static inline const void *gP(const unit_io_t *io, int64_t off) { return (const char *)io->params + off * (int64_t)dtype_size(io->wdt); }
static inline void *gG(const unit_io_t *io, int64_t off) { return (char *)io->grads + off * (int64_t)dtype_size(io->wdt); }

/* Parameters of unit u on TP rank q. */
static int64_t tp_gpt_local_numel(const void *ctx, int u, int q) {
  const tp_gpt_t *c = ctx;
  int64_t C = c->C, vn = tp_part_numel(c->V, c->T, q);
  if (u == 0) return (int64_t)c->S * C + vn * C;
  if (u == c->full.n_units - 1) return 2 * C + vn * C;
  return tp_block_layout(c->C, c->C / c->T).numel;
}

static void tp_gpt_map(const void *ctx, int u, int q, float *full, float *local, int to_local) {
  const tp_gpt_t *c = ctx;
  int64_t S = c->S, C = c->C, V = c->V, vlo = tp_part_lo(c->V, c->T, q), vn = tp_part_numel(c->V, c->T, q);
  if (u == 0) {                                             /* full: wte (V,C) | wpe (S,C) */
    mv(full + V * C, local, S * C, to_local);               /* wpe, replicated */
    mv(full + vlo * C, local + S * C, vn * C, to_local);    /* wte rows of q's vocabulary */
  } else if (u == c->full.n_units - 1) {                    /* full: lnf w, b | W (V,C) */
    mv(full, local, 2 * C, to_local);
    mv(full + 2 * C + vlo * C, local + 2 * C, vn * C, to_local);
  } else {
    int cr = c->C / c->T, clo = q * cr;
    gpt_block_layout_t f = gpt_block_layout(c->C);
    gpt_block_layout_t l = tp_block_layout(c->C, cr);
    mv(full + f.ln1w, local + l.ln1w, C, to_local);
    mv(full + f.ln1b, local + l.ln1b, C, to_local);
    mv(full + f.projb, local + l.projb, C, to_local);
    mv(full + f.ln2w, local + l.ln2w, C, to_local);
    mv(full + f.ln2b, local + l.ln2b, C, to_local);
    mv(full + f.fcprojb, local + l.fcprojb, C, to_local);
    for (int p = 0; p < 3; p++) { /* q, k, v: q's heads of each */
      mv(full + f.qkvw + (p * C + clo) * C, local + l.qkvw + (int64_t)p * cr * C, (int64_t)cr * C, to_local);
      mv(full + f.qkvb + p * C + clo, local + l.qkvb + (int64_t)p * cr, cr, to_local);
    }
    mv_cols(full + f.projw, local + l.projw, c->C, c->C, clo, cr, to_local); /* its input columns */
    mv(full + f.fcw + 4 * clo * C, local + l.fcw, 4 * (int64_t)cr * C, to_local);
    mv(full + f.fcb + 4 * clo, local + l.fcb, 4 * cr, to_local);
    mv_cols(full + f.fcprojw, local + l.fcprojw, c->C, 4 * c->C, 4 * clo, 4 * cr, to_local);
  }
}

/* z (rows, C) += b on every row, once (after g's sum); b in wdt. */
static void tp_gpt_bias_add(tp_gpt_t *c, device_t dev, dtype_t wdt, float *z, const void *b, int rows) {
  const float *b32 = b;
  if (wdt != DT_F32) {
    b32 = grow(&c->bias32, "tp row bias (fp32)", DT_F32, dev, c->C);
    op_cast(dev, (void *)b32, DT_F32, b, wdt, c->C);
  }
  for (int i = 0; i < rows; i++) op_add(dev, z + (int64_t)i * c->C, b32, DT_F32, c->C);
}

/* Megatron's f and g as gpt.h's block hooks: gpt_block_forward / gpt_block_backward run the block
 * (common/gpt.c), on this rank's heads and MLP columns, and call these around the split matmuls. */
static void tp_gpt_f_forward(void *ctx, const float *x, int64_t numel) { tp_f_forward(((tp_gpt_t *)ctx)->tp, x, numel); }
static void tp_gpt_f_backward(void *ctx, float *dx, int64_t numel) { tp_f_backward(((tp_gpt_t *)ctx)->tp, dx, numel); }
static void tp_gpt_g_forward(void *ctx, const unit_io_t *io, float *y, const void *b, int64_t rows) {
  tp_gpt_t *c = ctx;
  tp_g_forward(c->tp, y, rows * c->C);            /* all-reduces 1 (proj) and 2 (fcproj) */
  tp_gpt_bias_add(c, io->dev, io->wdt, y, b, (int)rows);
}

/* A block on this rank: Cr = C/T features and NHr = NH/T heads, the local layout, f and g.
 * It saves per sample 3SC + 4S + 12S·Cr + NHr·S² (gpt.h's, the split tensors at 1/T). */
static gpt_block_t tp_gpt_block(tp_gpt_t *c) {
  return (gpt_block_t){.S = c->S, .C = c->C, .Cr = c->Cr, .NHr = c->NHr, .l = tp_block_layout(c->C, c->Cr),
                       .hook_ctx = c, .f_forward = tp_gpt_f_forward, .f_backward = tp_gpt_f_backward,
                       .g_forward = tp_gpt_g_forward};
}

static void tp_split_gpt(model_t *m, comm_t *tp) {
  int T = comm_world(tp), r = comm_rank(tp), U = m->n_units;
  gpt_shape_t s = m->gpt;
  if (s.n_head % T != 0)
    die("error: --tp %d: the GPT's %d heads do not split over %d ranks (n_head must be divisible by T)", T, s.n_head, T);
  if (s.vocab < T) die("error: --tp %d: a vocabulary of %d rows cannot give every rank one", T, s.vocab);
  tp_gpt_t *c = xcalloc(1, sizeof *c, "tp gpt");
  c->tp = tp, c->T = T, c->r = r;
  tp_keep_full(&c->full, m);
  c->S = s.seq_len, c->C = s.n_embd, c->V = s.vocab, c->NH = s.n_head;
  c->Cr = s.n_embd / T, c->NHr = s.n_head / T, c->c_lo = r * c->Cr;
  c->Vr = tp_part_numel(s.vocab, T, r), c->v_lo = tp_part_lo(s.vocab, T, r);
  int64_t S = c->S, C = c->C, SC = S * C;
  for (int u = 0; u < U; u++) {
    unit_t *un = &m->units[u];
    un->numel = tp_gpt_local_numel(c, u, r);
    un->tp_ar_numel = SC; /* every all-reduce of a unit carries b·s·h elements */
    un->tp_y_rep = u < U - 1; /* the embedding's and the blocks' y come out of g; the logits are V/T */
    if (u == 0) {         /* wpe replicated; the lookups summed by g */
      un->tp_rep_numel = SC;
      un->tp_ar_calls = un->tp_ar_fwd_calls = 1;
    } else if (u == U - 1) { /* lnf replicated; f's backward sums dlnf; the loss: 3 of S per sample */
      un->tp_rep_numel = 2 * C;
      un->y_numel = S * c->Vr; /* the logits: V/T per row */
      un->tp_ar_calls = 1;
      un->tp_ar2_calls = 3;
      un->tp_ar2_numel = S;
    } else { /* 2 g's forward, 2 f's backward */
      un->tp_rep_numel = tp_block_layout(c->C, c->Cr).qkvw; /* 6C: all before the first split tensor */
      gpt_block_t k = tp_gpt_block(c);
      un->saved_numel = gpt_block_saved(&k);
      un->tp_ar_calls = 4;
      un->tp_ar_fwd_calls = 2;
    }
  }
  model_layout(m);
  m->fns = &tp_gpt_model_fns;
  m->ctx = c;
}

static void tp_gpt_free_ctx(model_t *m) {
  tp_gpt_t *c = m->ctx;
  if (!c) return;
  free(c->full.units);
  tensor_free(&c->scratch);
  tensor_free(&c->wte_ext);
  tensor_free(&c->dwte_ext);
  tensor_free(&c->wpe_zero);
  tensor_free(&c->tok);
  tensor_free(&c->rowstat);
  tensor_free(&c->bias32);
  free(c);
}

/* Unit u here = the full unit's init (gpt.c, a pure function of seed, u, index), sliced. */
static void tp_gpt_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  const tp_gpt_t *c = m->ctx;
  tp_init_mapped(&c->full, m, seed, u, c->r, dst, c, tp_gpt_map);
}

/* The tokens as rows of this rank's wte_ext: t − v_lo for its own vocabulary, Vr (the zero row)
 * for the others'. Remapped on the host (a copy each way on CUDA). */
static const int *tp_gpt_tokens(tp_gpt_t *c, device_t dev, const int *x, int64_t n) {
  int *dst = grow(&c->tok, "tp local tokens", DT_F32, dev, n); /* int32 in a 4-byte tensor */
  int *h = dev == DEV_CPU ? dst : xmalloc((size_t)n * sizeof(int), "tp tokens (host)");
  dev_memcpy(DEV_CPU, h, dev, x, (size_t)n * sizeof(int));
  for (int64_t k = 0; k < n; k++) {
    int v = h[k];
    if (v < 0 || v >= c->V) die_on_rank("tp embedding: token %lld = %d outside [0, %d)", (long long)k, v, c->V);
    h[k] = v >= c->v_lo && v < c->v_lo + c->Vr ? v - c->v_lo : c->Vr;
  }
  if (h != dst) {
    dev_memcpy(dev, dst, DEV_CPU, h, (size_t)n * sizeof(int));
    free(h);
  }
  return dst;
}

static void tp_gpt_forward(const model_t *m, int u, const unit_io_t *io) {
  tp_gpt_t *c = m->ctx;
  int B = io->B, S = c->S, C = c->C, BT = B * S;
  int64_t n = (int64_t)BT * C;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  if (u == 0) { /* y = Σ over the group of (this rank's wte rows or 0) + wpe on rank 0: g */
    const int *tok = tp_gpt_tokens(c, dev, io->x, BT);
    void *ext = grow(&c->wte_ext, "tp wte (own rows + a zero row)", wdt, dev, (int64_t)(c->Vr + 1) * C);
    dev_memcpy(dev, ext, dev, gP(io, (int64_t)S * C), (size_t)c->Vr * C * dtype_size(wdt));
    const void *wpe = c->r == 0 ? gP(io, 0) : grow(&c->wpe_zero, "tp zero wpe", DT_F32, dev, (int64_t)S * C);
    op_embedding_fwd(dev, io->y, tok, ext, wpe, wdt, B, S, C, c->Vr + 1);
    tp_g_forward(c->tp, io->y, n); /* one nonzero term per element pair: exact, as 1 rank */
    return;
  }
  const float *x = io->x;
  if (u == m->n_units - 1) { /* lnf (replicated), then this rank's logits (B·S, Vr) */
    float *lnf = io->saved, *mean = lnf + n, *rstd = mean + BT;
    op_layernorm_fwd(dev, lnf, mean, rstd, x, gP(io, 0), gP(io, C), wdt, BT, C);
    tp_f_forward(c->tp, lnf, n);
    op_linear_fwd(dev, io->y, lnf, gP(io, 2 * (int64_t)C), NULL, wdt, BT, C, c->Vr);
    return;
  }
  gpt_block_t k = tp_gpt_block(c); /* 2 g's forward (all-reduces 1, 2) */
  gpt_block_forward(&k, io);
}

static void tp_gpt_backward(const model_t *m, int u, const unit_io_t *io) {
  tp_gpt_t *c = m->ctx;
  int B = io->B, S = c->S, C = c->C, BT = B * S;
  int64_t n = (int64_t)BT * C;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  float beta = io->beta;
  if (u == 0) { /* dwpe (the same on every rank: dy is whole), dwte_r through the extended table */
    const int *tok = tp_gpt_tokens(c, dev, io->x, BT);
    size_t nb = (size_t)c->Vr * C * dtype_size(wdt);
    void *dext = grow(&c->dwte_ext, "tp dwte (own rows + a zero row)", wdt, dev, (int64_t)(c->Vr + 1) * C);
    if (beta != 0.0f) dev_memcpy(dev, dext, dev, gG(io, (int64_t)S * C), nb);
    op_embedding_bwd(dev, dext, gG(io, 0), io->dy, tok, wdt, B, S, C, c->Vr + 1, beta);
    dev_memcpy(dev, gG(io, (int64_t)S * C), dev, dext, nb);
    tensor_free(&c->scratch); /* the last unit of the backward */
    return;
  }
  gpt_block_t k = tp_gpt_block(c);
  float *work = grow(&c->scratch, "tp gpt backward scratch", DT_F32, dev, gpt_block_scratch_numel(&k, B));
  if (u == m->n_units - 1) {
    const float *lnf = io->saved, *mean = lnf + n, *rstd = mean + BT;
    float *dlnf = work; // (BT,C)
    op_linear_bwd(dev, dlnf, gG(io, 2 * (int64_t)C), NULL, io->dy, lnf, gP(io, 2 * (int64_t)C), wdt, BT, C, c->Vr, beta);
    tp_f_backward(c->tp, dlnf, n); /* dlnf: each rank's share is its vocabulary's */
    if (io->dx) {
      op_fill(dev, io->dx, DT_F32, 0.0f, n);
      op_layernorm_bwd(dev, io->dx, gG(io, 0), gG(io, C), dlnf, io->x, mean, rstd, gP(io, 0), wdt, BT, C, beta);
    }
    return;
  }
  gpt_block_backward(&k, io, work); /* 2 f's backward (all-reduces 3, 4); g's backward is the identity */
}

/* One fp32 value per loss row, all-reduced over the TP group (host array; staged on CUDA). */
static void tp_rows_all_reduce(tp_gpt_t *c, float *h, int64_t rows, redop_t op) {
  device_t dev = comm_device(c->tp);
  if (dev == DEV_CPU) {
    comm_all_reduce(c->tp, h, rows, DT_F32, op);
    return;
  }
  float *d = grow(&c->rowstat, "tp loss row stats", DT_F32, dev, rows);
  dev_memcpy(dev, d, DEV_CPU, h, (size_t)rows * sizeof(float));
  comm_all_reduce(c->tp, d, rows, DT_F32, op);
  dev_memcpy(DEV_CPU, h, dev, d, (size_t)rows * sizeof(float));
}

/* The vocab-parallel cross-entropy (model_fns_t.loss): this rank holds logits (rows, Vr) for its
 * vocabulary only. Per row: M = max over the group of the local maxima (all-reduce MAX),
 * Z = Σ over the group of Σ_j exp(l_j − M) (all-reduce SUM), and the target's logit from the one
 * rank that holds it (0 elsewhere, all-reduce SUM): loss = log Z + M − l_target. The gradient is
 * local: scale·(exp(l_j − M)/Z − [j is the target]). Three all-reduces of rows fp32 values, no
 * rank ever holds a whole row of logits. Computed on the host (copied over on CUDA). */
static double tp_gpt_loss(const model_t *m, int b, const float *logits, const int *targets, float *dlogits, float scale) {
  tp_gpt_t *c = m->ctx;
  device_t dev = comm_device(c->tp);
  int64_t rows = (int64_t)b * c->S, Vr = c->Vr;
  size_t nl = (size_t)(rows * Vr) * sizeof(float);
  const float *l = logits;
  const int *tg = targets;
  float *d = dlogits;
  if (dev != DEV_CPU) {
    float *hl = xmalloc(nl, "tp logits (host)");
    int *ht = xmalloc((size_t)rows * sizeof(int), "tp targets (host)");
    dev_memcpy(DEV_CPU, hl, dev, logits, nl);
    dev_memcpy(DEV_CPU, ht, dev, targets, (size_t)rows * sizeof(int));
    l = hl, tg = ht, d = xmalloc(nl, "tp dlogits (host)");
  }
  float *mx = xmalloc((size_t)rows * 3 * sizeof(float), "tp loss rows"), *z = mx + rows, *lt = z + rows;
  for (int64_t i = 0; i < rows; i++) {
    const float *li = l + i * Vr;
    float v = li[0];
    for (int64_t j = 1; j < Vr; j++) v = li[j] > v ? li[j] : v;
    mx[i] = v;
  }
  tp_rows_all_reduce(c, mx, rows, REDOP_MAX); /* 1: each row's max over the whole vocabulary */
  for (int64_t i = 0; i < rows; i++) {
    const float *li = l + i * Vr;
    float *di = d + i * Vr;
    double sum = 0.0;
    for (int64_t j = 0; j < Vr; j++) {
      di[j] = expf(li[j] - mx[i]);
      sum += di[j];
    }
    z[i] = (float)sum;
    int y = tg[i];
    if (y < 0 || y >= c->V) die_on_rank("tp_gpt_loss: label y[%lld] = %d outside [0, %d)", (long long)i, y, c->V);
    lt[i] = y >= c->v_lo && y < c->v_lo + Vr ? li[y - c->v_lo] : 0.0f;
  }
  tp_rows_all_reduce(c, z, rows, REDOP_SUM);  /* 2: Σ exp over the whole vocabulary */
  tp_rows_all_reduce(c, lt, rows, REDOP_SUM); /* 3: the target's logit, from the rank that holds it */
  double loss = 0.0;
  for (int64_t i = 0; i < rows; i++) {
    loss += log((double)z[i]) - ((double)lt[i] - mx[i]);
    float inv = (float)(1.0 / z[i]), *di = d + i * Vr;
    for (int64_t j = 0; j < Vr; j++) di[j] = di[j] * inv * scale;
    int y = tg[i];
    if (y >= c->v_lo && y < c->v_lo + Vr) di[y - c->v_lo] -= scale;
  }
  free(mx);
  if (dev != DEV_CPU) {
    dev_memcpy(dev, dlogits, DEV_CPU, d, nl);
    free((void *)l);
    free((void *)tg);
    free(d);
  }
  return loss;
}

static double tp_gpt_flops(const model_t *m) { /* this rank's share (gpt.c's count with C·Cr, C·Vr, S²·Cr) */
  const tp_gpt_t *c = m->ctx;
  double S = c->S, C = c->C, Cr = c->Cr, L = m->n_units - 2, Vr = c->Vr;
  return S * (L * 24.0 * C * Cr + 2.0 * C * Vr) + L * 4.0 * S * S * Cr;
}

/* Rank 0 of the TP group: the full GPT (tp_gpt_map backwards); the replicated parameters from rank 0. */
static float *tp_gpt_unsplit(const model_t *m, const float *local, int has_local, int64_t *full_numel) {
  const tp_gpt_t *c = m->ctx;
  return tp_unsplit(c->tp, &c->full, m, local, has_local, full_numel, c, tp_gpt_map, tp_gpt_local_numel);
}

/* model_fns_t.to_local: this rank's slices of full unit u. */
static void tp_gpt_to_local(const model_t *m, int u, const float *full, float *local) {
  const tp_gpt_t *c = m->ctx;
  tp_gpt_map(c, u, c->r, (float *)full, local, 1); /* to_local: full is only read */
}

static const model_fns_t tp_gpt_model_fns = {.name = "gpt", .init_unit = tp_gpt_init_unit, .forward = tp_gpt_forward,
                                             .backward = tp_gpt_backward, .free_ctx = tp_gpt_free_ctx,
                                             .flops_per_sample = tp_gpt_flops, .loss = tp_gpt_loss,
                                             .unsplit = tp_gpt_unsplit, .to_local = tp_gpt_to_local};

/* ---- the public mapping (tp.h): a split's map without a communicator ----------------------- */

int64_t tp_unit_local_numel(const model_t *full, int T, int q, int u) {
  if (full->fns == &model_gpt_fns) {
    tp_gpt_t c = {.T = T, .S = full->gpt.seq_len, .C = full->gpt.n_embd, .V = full->gpt.vocab, .NH = full->gpt.n_head};
    c.full.n_units = full->n_units;
    return tp_gpt_local_numel(&c, u, q);
  }
  const unit_t *fu = &full->units[u];
  return tp_local_numel(tp_mlp_kind(full->n_units, u), fu->in, fu->out, T, q);
}

void tp_unit_map(const model_t *full, int T, int q, int u, float *full_unit, float *local, int to_local) {
  if (full->fns == &model_gpt_fns) {
    tp_gpt_t c = {.T = T, .S = full->gpt.seq_len, .C = full->gpt.n_embd, .V = full->gpt.vocab, .NH = full->gpt.n_head};
    c.full.n_units = full->n_units;
    tp_gpt_map(&c, u, q, full_unit, local, to_local);
    return;
  }
  tp_unit_kind_t *kind = xmalloc((size_t)full->n_units * sizeof *kind, "tp unit kinds");
  for (int k = 0; k < full->n_units; k++) kind[k] = tp_mlp_kind(full->n_units, k);
  tp_model_t c = {.T = T, .full = *full, .kind = kind};
  tp_mlp_map(&c, u, q, full_unit, local, to_local);
  free(kind);
}
