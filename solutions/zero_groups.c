/* zero_groups.c — ZeRO-1/2/3 on two data-parallel groups, as DeepSpeed and Megatron lay out experts.
 * Notes: notes/12b-expert-parallel.md ("Two data-parallel groups").
 *
 * With --ep P_E every rank holds the same dense weights (attention, norms, embeddings, routers, shared
 * experts) and the D = N/P_E ranks of its expert-data-parallel group (t->comm) hold the same experts.
 * So each unit's dense prefix (trainer_dense_numel) is reduce-scattered, updated and all-gathered over
 * ALL N ranks (t->dense_comm, DeepSpeed's data_parallel_group), and only its experts over the D ranks
 * (expert_data_parallel_group). A rank owns two pieces of a unit, comm.h's chunks (no pad):
 *
 *   unit u, unit-local      | dense prefix d: chunk 0 .. chunk N−1 | experts x: chunk 0 .. chunk D−1 |
 *   rank (dp, e), world r   |          chunk r of N                 |       chunk dp of D             |
 *   its shard at shard_off  | [dense piece n0 | expert piece n1]   (piece = n0 + n1, this rank's)
 *
 * The unit's working params keep the model's own layout (d then x, no pad: padded = numel), so the
 * forward reads them as before; only the collectives, the update and the layout answer change. ZeRO-1/2
 * hold the whole unit's working params (params_full 1: the pieces sit at off + lo), ZeRO-3 only the two
 * pieces, back to back at shard_off like the states (params_full 0). */
#include "check.h"  // xmalloc
#include "comm.h"   // comm_chunk_lo, comm_*_async
#include "device.h" // dev_upload
#include "ops.h"    // op_cast
#include "tensor.h" // tensor_at
#include "trace.h"  // trace_begin, trace_end
#include "zero.h"   // zero_two_* declarations
#include <stdio.h>  // snprintf
#include <stdlib.h> // free

void zero_two_pieces(const trainer_t *t, int u, int64_t lo[2], int64_t n[2]) {
  int64_t d = trainer_dense_numel(t, u), x = t->model.units[u].numel - d;
  int N = comm_world(t->dense_comm), r = comm_rank(t->dense_comm);
  lo[0] = comm_chunk_lo(d, N, r), n[0] = comm_chunk_numel(d, N, r);
  lo[1] = d + comm_chunk_lo(x, t->world, t->rank), n[1] = comm_chunk_numel(x, t->world, t->rank);
}

void zero_two_plan(trainer_t *t) {
  model_t *m = &t->model;
  int64_t off = 0, shard_off = 0, most = 0;
  for (int u = 0; u < m->n_units; u++) {
    unit_t *un = &m->units[u];
    int64_t lo[2], n[2];
    zero_two_pieces(t, u, lo, n);
    un->padded = un->numel; /* no pad: the chunks are uneven where they must be */
    un->piece = n[0] + n[1];
    un->off = off, un->shard_off = shard_off;
    off += un->padded, shard_off += un->piece;
    if (un->padded > most) most = un->padded;
  }
  m->padded_numel = off, m->shard_numel = shard_off, m->max_unit_padded = most;
}

/* The working params of piece k of unit u (lo: its unit-local start, at: its place in the shard's unit). */
static void *piece_params(trainer_t *t, const unit_t *un, int64_t lo, int64_t at, int params_full) {
  return tensor_at(&t->params, params_full ? un->off + lo : un->shard_off + at);
}

void zero_two_reduce_scatter(trainer_t *t, int u, const void *full, void *piece, comm_handle_t h[2],
                             const char *tag) {
  int64_t d = trainer_dense_numel(t, u), lo[2], n[2];
  zero_two_pieces(t, u, lo, n);
  int64_t b = (int64_t)dtype_size(t->wdt);
  h[0] = comm_reduce_scatter_async(t->dense_comm, full, piece, d, t->wdt, REDOP_SUM, tag);
  h[1] = comm_reduce_scatter_async(t->comm, (const char *)full + d * b, (char *)piece + n[0] * b,
                                   t->model.units[u].numel - d, t->wdt, REDOP_SUM, tag);
}

void zero_two_gather(trainer_t *t, int u, void *full, comm_handle_t h[2], const char *tag) {
  const unit_t *un = &t->model.units[u];
  int64_t d = trainer_dense_numel(t, u), lo[2], n[2];
  zero_two_pieces(t, u, lo, n);
  int64_t b = (int64_t)dtype_size(t->wdt);
  h[0] = comm_all_gather_async(t->dense_comm, tensor_at(&t->params, un->shard_off), full, d, t->wdt, tag);
  h[1] = comm_all_gather_async(t->comm, tensor_at(&t->params, un->shard_off + n[0]), (char *)full + d * b,
                               un->numel - d, t->wdt, tag);
}

int zero_two_optimizer_step(trainer_t *t, const void *grad_shard, int params_full) {
  const model_t *m = &t->model;
  int64_t gb = (int64_t)dtype_size(t->wdt);
  double sumsq = 0;
  TRAINER_PHASE("grad norm", sumsq = trainer_grad_sumsq(t, grad_shard, t->rank));
  float gscale = trainer_finish_grads(t, sumsq, t->dense_comm); /* the pieces tile the model over all */
  if (t->skipped) return 0;
  trace_begin("optimizer (own pieces)");
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    int64_t lo[2], n[2];
    zero_two_pieces(t, u, lo, n);
    for (int k = 0, at = 0; k < 2; at += (int)n[k], k++) { /* at: the piece's place in the shard's unit */
      int64_t s = un->shard_off + at;
      void *p = piece_params(t, un, lo[k], at, params_full);
      float *w = t->wdt == DT_F32 ? (float *)p : (float *)t->master.data + s;
      trainer_optimizer_update(t, w, (const char *)grad_shard + s * gb,
                               t->opt_m.data ? (float *)t->opt_m.data + s : NULL,
                               t->opt_v.data ? (float *)t->opt_v.data + s : NULL, n[k], gscale);
      if (t->wdt != DT_F32) op_cast(t->dev, p, t->wdt, (float *)t->master.data + s, DT_F32, n[k]); /* cast */
    }
  }
  trace_end(NULL);
  return 1;
}

void zero_two_all_gather(trainer_t *t, comm_handle_t *handles) {
  const model_t *m = &t->model;
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    if (un->padded == 0) continue;
    int64_t lo[2], n[2], d = trainer_dense_numel(t, u);
    zero_two_pieces(t, u, lo, n);
    /* in place: each rank's pieces already sit at their places of the unit */
    handles[m->n_units + u] = comm_all_gather_async(t->dense_comm, tensor_at(&t->params, un->off + lo[0]),
                                                    tensor_at(&t->params, un->off), d, t->wdt,
                                                    "all-gather params");
    handles[u] = comm_all_gather_async(t->comm, tensor_at(&t->params, un->off + lo[1]),
                                       tensor_at(&t->params, un->off + d), un->numel - d, t->wdt,
                                       "all-gather params");
  }
}

void zero_two_init_params(trainer_t *t, int params_full) {
  const model_t *m = &t->model;
  float *vals = xmalloc((size_t)m->max_unit_padded * sizeof(float) + 4, "init values");
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    int64_t lo[2], n[2];
    zero_two_pieces(t, u, lo, n);
    trainer_init_values(t, un->off, un->off + un->padded, vals); /* the unit's values (a pure function) */
    if (params_full) dev_upload(t->dev, tensor_at(&t->params, un->off), t->wdt, vals, un->padded);
    for (int k = 0, at = 0; k < 2; at += (int)n[k], k++) {
      if (!params_full) dev_upload(t->dev, piece_params(t, un, lo[k], at, 0), t->wdt, vals + lo[k], n[k]);
      if (t->wdt != DT_F32)
        dev_upload(t->dev, (float *)t->master.data + un->shard_off + at, DT_F32, vals + lo[k], n[k]);
    }
  }
  free(vals);
}

void zero_two_layout(trainer_t *t, int u, int params_full, unit_layout_t *out) {
  const unit_t *un = &t->model.units[u];
  int64_t lo[2], n[2];
  zero_two_pieces(t, u, lo, n);
  void *p[2];
  float *w[2], *mm[2] = {NULL, NULL}, *v[2] = {NULL, NULL};
  for (int k = 0, at = 0; k < 2; at += (int)n[k], k++) {
    int64_t s = un->shard_off + at;
    p[k] = piece_params(t, un, lo[k], at, params_full);
    w[k] = t->wdt == DT_F32 ? (float *)p[k] : (float *)t->master.data + s;
    if (t->opt_m.data) mm[k] = (float *)t->opt_m.data + s;
    if (t->opt_v.data) v[k] = (float *)t->opt_v.data + s;
  }
  *out = (unit_layout_t){.own_off = lo[0], .own_numel = n[0], .w = w[0], .m = mm[0], .v = v[0],
                         .own2_off = lo[1], .own2_numel = n[1], .w2 = w[1], .m2 = mm[1], .v2 = v[1]};
  if (params_full) /* ZeRO-1/2: the whole unit */
    out->held_off = 0, out->held_numel = un->padded, out->params = tensor_at(&t->params, un->off);
  else /* ZeRO-3: its two pieces */
    out->held_off = lo[0], out->held_numel = n[0], out->params = p[0], out->held2_off = lo[1],
    out->held2_numel = n[1], out->params2 = p[1];
}

void zero_two_formula(const trainer_t *t, int stage, formula_t *f) {
  double dense = 0;
  for (int u = 0; u < t->model.n_units; u++) dense += (double)trainer_dense_numel(t, u);
  int N = comm_world(t->dense_comm), K = train_opt_states(t->cfg);
  formula_t x;
  formula_stage(f, stage, dense, N, t->wdt, K);
  formula_stage(&x, stage, (double)t->model.numel - dense, t->world, t->wdt, K);
  f->params += x.params, f->grads += x.grads, f->master += x.master, f->optim += x.optim;
  f->comm_bytes += x.comm_bytes;
  snprintf(f->mem_text, sizeof f->mem_text, "%s, psi_dense/N + psi_exp/D", formula_text(stage, t->wdt, K));
  int c = stage == 3 ? 3 : 2; /* ZeRO-3 gathers twice and reduce-scatters once */
  if (t->no_sync && stage >= 2) { /* --accum with --ep (moe_model.c): the full gradient through the step */
    f->grads += (double)t->model.numel * (double)dtype_size(t->wdt);
    if (stage == 3) c = 2 * t->n_micro + 1, f->comm_bytes *= c / 3.0; /* 2M gathers, one reduce-scatter */
  }
  snprintf(f->comm_text, sizeof f->comm_text, "%d(N-1)/N x psi_dense + %d(D-1)/D x psi_exp, x %d B", c % 100,
           c % 100, (int)dtype_size(t->wdt) % 10);
}
