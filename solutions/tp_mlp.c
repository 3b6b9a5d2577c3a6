/* tp_mlp.c — the MLP, split over a TP group (tp.h's tp_split_model; notes/06-tensor-parallel.md,
 * "Training with --tp"). Its units train through the exercised split linears of tp.c.
 *
 * Every unit of the full model becomes one of three kinds on this rank (local layouts):
 *   TPU_COL  column-parallel, out split:  W_r (out_r, in) | b_r (out_r)          GELU after
 *   TPU_ROW  row-parallel, in split:      b (out) | W_r (out, in_r)      b replicated, first
 *   TPU_REPL not split:                   W (out, in) | b (out)          all replicated
 * The replicated parameters come first in a unit (tp_unit_t.rep_numel) so that the gradient norm
 * and the export each find them in one range. */
#include "tp_split.h" // tp_split_t, tp_unit_t, tp_split_begin, tp_mv, tp_mv_cols
#include "check.h"    // die, xcalloc, check_rank
#include "ops.h"      // op_linear_fwd, op_linear_bwd, op_gelu_fwd, op_gelu_bwd, op_cast
#include <stdlib.h>   // free

typedef enum { TPU_REPL = 0, TPU_COL = 1, TPU_ROW = 2 } tp_unit_kind_t;

typedef struct tp_model {
  tp_split_t s;          /* the TP group, the full model, per unit what TP knows (first member) */
  tp_unit_kind_t *kind;  /* [n_units] */
  tensor_t bias32;       /* (max out) fp32 copy of a row-parallel bias in bf16 mode, LEDGER_ACTS */
} tp_model_t;

static const model_fns_t tp_mlp_model_fns;

/* Parameters of a full MLP unit (out, in) on rank r of T, for each kind. */
static int64_t tp_kind_numel(tp_unit_kind_t k, int in, int out, int T, int r) {
  if (k == TPU_COL) return (int64_t)tp_part_numel(out, T, r) * (in + 1);
  if (k == TPU_ROW) return (int64_t)out * tp_part_numel(in, T, r) + out;
  return (int64_t)out * in + out;
}

/* Full unit u (W (out, in) | b (out)) ↔ rank q's slice of it (the layouts above). */
static void tp_mlp_map(const tp_split_t *s, int u, int q, float *full, float *local, int to_local) {
  const tp_model_t *c = (const tp_model_t *)s;
  const unit_t *fu = &s->full.units[u];
  int in = fu->in, out = fu->out;
  float *W = full, *b = full + (int64_t)out * in;
  if (c->kind[u] == TPU_COL) { /* rows [lo, lo+n) of W and b */
    int lo = tp_part_lo(out, s->T, q), n = tp_part_numel(out, s->T, q);
    tp_mv(W + (int64_t)lo * in, local, (int64_t)n * in, to_local);
    tp_mv(b + lo, local + (int64_t)n * in, n, to_local);
  } else if (c->kind[u] == TPU_ROW) { /* b whole, then columns [lo, lo+n) of W */
    int lo = tp_part_lo(in, s->T, q), n = tp_part_numel(in, s->T, q);
    tp_mv(b, local, out, to_local);
    tp_mv_cols(W, local + out, out, in, lo, n, to_local);
  } else {
    tp_mv(W, local, fu->numel, to_local);
  }
}

static int64_t tp_mlp_local_numel(const tp_split_t *s, int u, int q) {
  const tp_model_t *c = (const tp_model_t *)s;
  return tp_kind_numel(c->kind[u], s->full.units[u].in, s->full.units[u].out, s->T, q);
}

void tp_split_mlp(model_t *m, comm_t *tp) {
  int T = comm_world(tp), r = comm_rank(tp), U = m->n_units;
  tp_model_t *c = xcalloc(1, sizeof *c, "tp model");
  tp_split_begin(&c->s, m, tp, tp_mlp_map, tp_mlp_local_numel);
  c->kind = xcalloc((size_t)U, sizeof *c->kind, "tp unit kinds");
  int max_out = 1;
  /* an odd last unit: REPL */
  for (int u = 0; u + 1 < U; u += 2) c->kind[u] = TPU_COL, c->kind[u + 1] = TPU_ROW;
  for (int u = 0; u < U; u++) {
    unit_t *un = &m->units[u];
    tp_unit_t *k = &c->s.units[u];
    int in = un->in, out = un->out, gelu = u < m->L;
    tp_unit_kind_t kind = c->kind[u];
    if ((kind == TPU_COL && out < T) || (kind == TPU_ROW && in < T))
      die("rank %d: --tp %d: unit %d (%d -> %d) splits %d features over %d ranks: every rank needs one "
          "(--hidden >= T)", check_rank(), T, u, in, out, kind == TPU_COL ? out : in, T);
    un->numel = tp_kind_numel(kind, in, out, T, r);
    if (kind == TPU_COL) {
      un->out = tp_part_numel(out, T, r);
      un->y_numel = un->saved_numel = un->out; /* GELU(z_r), z_r: this rank's columns */
      k->ar_calls = u > 0; /* f's backward completes dx; unit 0 has no dx */
      k->ar_numel = in;
    } else if (kind == TPU_ROW) {
      un->in = tp_part_numel(in, T, r);
      un->y_numel = out;
      un->saved_numel = gelu ? out : 0;
      k->rep_numel = out; /* b */
      k->ar_calls = 1;    /* g's forward */
      k->ar_fwd_calls = 1;
      k->ar_numel = out;
      k->y_rep = 1;       /* y comes out of g: whole and the same on every rank (Pa keeps 1/T) */
      if (out > max_out) max_out = out;
    } else {
      k->rep_numel = un->numel;
      k->y_rep = 1; /* replicated weights on the row unit's replicated output */
    }
  }
  model_layout(m); /* unpadded local layout; a ZeRO strategy re-pads it over the DP group */
  c->bias32 = tensor_alloc("tp row bias (fp32)", LEDGER_ACTS, DT_F32, comm_device(tp), max_out);
  m->fns = &tp_mlp_model_fns;
  m->ctx = c;
}

static void tp_mlp_free_ctx(model_t *m) {
  tp_model_t *c = m->ctx;
  if (!c) return;
  tp_split_end(&c->s);
  free(c->kind);
  tensor_free(&c->bias32);
  free(c);
}

static const void *wat(const void *base, dtype_t wdt, int64_t k) {
  return (const char *)base + k * (int64_t)dtype_size(wdt);
}

/* A row-parallel unit's bias (wdt, first in the unit) as the fp32 tp_row_forward adds. */
static const float *bias_f32(const tp_model_t *c, const unit_io_t *io, int out) {
  if (io->wdt == DT_F32) return io->params;
  op_cast(io->dev, c->bias32.data, DT_F32, io->params, io->wdt, out);
  return c->bias32.data;
}

static void tp_mlp_unit_forward(const model_t *m, int u, const unit_io_t *io) {
  const tp_model_t *c = m->ctx;
  const unit_t *un = &m->units[u];
  int in = un->in, out = un->out, last = u == m->n_units - 1;
  float *z = last ? io->y : io->saved; /* (B, out) pre-activation */
  if (c->kind[u] == TPU_COL)           /* f, then this rank's output columns */
    tp_column_forward(c->s.tp, z, io->x, io->params, wat(io->params, io->wdt, (int64_t)out * in), io->wdt,
                      io->B, in, out);
  else if (c->kind[u] == TPU_ROW) /* partial z = x_r·W_rᵀ, g sums, then b once */
    tp_row_forward(c->s.tp, z, io->x, wat(io->params, io->wdt, out), bias_f32(c, io, out), io->wdt, io->B, in,
                   out);
  else
    op_linear_fwd(io->dev, z, io->x, io->params, wat(io->params, io->wdt, (int64_t)out * in), io->wdt, io->B,
                  in, out);
  if (!last) op_gelu_fwd(io->dev, io->y, z, (int64_t)io->B * out);
}

static void tp_mlp_unit_backward(const model_t *m, int u, const unit_io_t *io) {
  const tp_model_t *c = m->ctx;
  const unit_t *un = &m->units[u];
  int in = un->in, out = un->out;
  void *dW = io->grads, *db = (char *)io->grads + (int64_t)out * in * dtype_size(io->wdt); /* W | b */
  if (u != m->n_units - 1) op_gelu_bwd(io->dev, io->dy, io->dy, io->saved, (int64_t)io->B * out);
  if (c->kind[u] == TPU_COL) /* the partial dx, summed by f's backward */
    tp_column_backward(c->s.tp, io->dx, dW, db, io->dy, io->x, io->params, io->wdt, io->B, in, out, io->beta);
  else if (c->kind[u] == TPU_ROW) /* b | W: g's backward is the identity, dy is whole here */
    tp_row_backward(c->s.tp, io->dx, (char *)io->grads + (int64_t)out * dtype_size(io->wdt), io->grads,
                    io->dy, io->x, wat(io->params, io->wdt, out), io->wdt, io->B, in, out, io->beta);
  else
    op_linear_bwd(io->dev, io->dx, dW, db, io->dy, io->x, io->params, io->wdt, io->B, in, out, io->beta);
}

static double tp_mlp_flops(const model_t *m) { /* this rank's share */
  double f = 0;
  for (int u = 0; u < m->n_units; u++) f += 2.0 * m->units[u].in * m->units[u].out;
  return f;
}

static const model_fns_t tp_mlp_model_fns = {.name = "mlp", .init_unit = tp_split_init_unit,
                                             .forward = tp_mlp_unit_forward, .backward = tp_mlp_unit_backward,
                                             .free_ctx = tp_mlp_free_ctx, .flops_per_sample = tp_mlp_flops};
