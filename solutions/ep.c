/* ep.c — expert parallelism as a model transform (ep.h; notes/12-experts.md): the exchanges of
 * rows over the EP group, the dense gradients summed over it, the gradient norm that counts them
 * once, the group's traffic formula, and the whole model back from the ranks' experts (--save-params).
 * The model itself (the experts, the router) is moe_model.c's: the transform's setup (moe_setup),
 * step_end (moe_balance.c) and report (moe_report.c). */
#include "ep.h"       // ep_transform, ep_exchange_rows, ep_exchange_counts
#include "moe.h"      // moe_setup, moe_step_end, moe_report, moe_unit_dense, moe_unit_router, moe_group, ...
#include "check.h"    // die, xmalloc, xcalloc
#include "comm.h"     // comm_all_to_all, comm_all_to_allv, comm_all_reduce, comm_ctl_*
#include "train.h"    // trainer_t, model_transform_t
#include <stdlib.h>   // free
#include <string.h>   // memcpy

void ep_exchange_rows(comm_t *g, const float *send, const int64_t *send_rows, float *recv,
                      const int64_t *recv_rows, int C, const char *tag) {
  int P = comm_world(g);
  int64_t sc[TRAIN_EP_MAX], rc[TRAIN_EP_MAX]; /* --ep <= TRAIN_EP_MAX (the flag's range) */
  for (int q = 0; q < P; q++) sc[q] = send_rows[q] * C, rc[q] = recv_rows[q] * C;
  comm_handle_t h = comm_all_to_allv_async(g, send, sc, NULL, recv, rc, NULL, DT_F32, tag);
  comm_wait(g, h);
}

comm_handle_t ep_exchange_rows_post(comm_t *g, const float *send, const int64_t *send_rows, float *recv,
                                    const int64_t *recv_rows, int C, const char *tag) {
  int64_t sc[TRAIN_EP_MAX], rc[TRAIN_EP_MAX];
  for (int q = 0; q < comm_world(g); q++) sc[q] = send_rows[q] * C, rc[q] = recv_rows[q] * C;
  return comm_all_to_allv_async(g, send, sc, NULL, recv, rc, NULL, DT_F32, tag);
}

void ep_exchange_counts(comm_t *g, const int64_t *send, int64_t *recv, int El) {
  comm_ctl_all_to_all_i64(g, send, recv, El); /* control data, on the host: the rows' sizes come first */
}

/* ---- the transform ----------------------------------------------------------------------------
 * No split: the model stays whole until the transform's setup (moe_setup) keeps this rank's experts
 * of every MoE block. */

/* The dense elements of unit u (the first n of it: a MoE block's prefix, every other unit whole). */
static int64_t dense_numel(const trainer_t *t, int u) { return moe_unit_dense(&t->model, u); }

/* The prefix a strategy with two data-parallel groups reduces over every rank (train.h). */
static int64_t ep_dense_numel(const trainer_t *t, int u) { return dense_numel(t, u); }

/* On the step's last micro-batch (no_sync: the gradient is the step's sum), before the strategy
 * reduces unit u over D: its dense part summed over the EP group — the group's ranks read different
 * samples and hold the same dense weights. A strategy with two groups (t->dense_comm) sums it over
 * every rank itself, in one reduction: nothing here. */
static void ep_after_backward(trainer_t *t, int u) {
  if (t->micro != t->n_micro - 1 || t->dense_comm) return;
  int64_t n = dense_numel(t, u);
  if (n > 0) comm_all_reduce(t->group_comm, t->unit_grads[u], n, t->wdt, REDOP_SUM);
}

/* The norm's ranges (train.h's norm_ranges): after ep_after_backward the dense part is the same on
 * the whole group, so the group's rank 0 counts it; every rank counts its own experts. */
static int ep_norm_ranges(const trainer_t *t, int u, int64_t r[][2]) {
  int64_t lo = comm_rank(t->group_comm) == 0 ? 0 : dense_numel(t, u), hi = t->model.units[u].numel;
  r[0][0] = lo, r[0][1] = hi;
  return hi > lo;
}

/* The EP group's all-reduces per step (fp32 ring model): one per unit, of its dense elements; none
 * with two groups (the strategy's, over every rank). The all-to-alls are counted apart
 * (moe_report.c's lines, under CO_ALL_TO_ALL). */
static void ep_traffic(const trainer_t *t, int64_t *calls, int64_t *bytes) {
  int P = comm_world(t->group_comm), r = comm_rank(t->group_comm);
  *calls = *bytes = 0;
  for (int u = 0; u < t->model.n_units && !t->dense_comm; u++) {
    int64_t n = dense_numel(t, u);
    if (n == 0) continue;
    *calls += 1;
    *bytes += comm_model_sent(CO_ALL_REDUCE, n, t->wdt, P, r, 0);
  }
}

/* The whole model on the group's rank 0: the dense part from rank 0, each rank's experts where the
 * full unit has them. local: this rank's units, unpadded, in order. */
static float *ep_unsplit(const model_t *m, const float *local, int has_local, int64_t *full_numel) {
  comm_t *g = moe_group(m);
  int P = comm_world(g), r = comm_rank(g);
  *full_numel = moe_full_numel(m);
  if (!has_local) return NULL;
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(g, local, m->numel * (int64_t)sizeof(float), &all, &sizes);
  if (r != 0) {
    free(all);
    free(sizes);
    return NULL;
  }
  float *w = xmalloc((size_t)*full_numel * sizeof(float), "ep unsplit weights");
  const float **at = xcalloc((size_t)P, sizeof(float *), "ep unsplit blobs");
  for (int64_t q = 0, boff = 0; q < P; boff += sizes[q] / 4, q++) at[q] = (const float *)all + boff;
  float *o = w;
  for (int u = 0; u < m->n_units; u++) {
    /* x: this rank's experts (the same on every rank) */
    int64_t d = moe_unit_dense(m, u), x = m->units[u].numel - d;
    memcpy(o, at[0], (size_t)d * sizeof(float)), o += d;
    for (int q = 0; q < P; q++) {
      memcpy(o, at[q] + d, (size_t)x * sizeof(float)), o += x;
      at[q] += d + x;
    }
  }
  free(at);
  free(all);
  free(sizes);
  return w;
}

/* Full unit u → this rank's: a MoE block's dense part, then its experts (moe_model.c); any other unit
 * whole. */
static void ep_to_local(const model_t *m, int u, const float *full, float *local) {
  if (moe_unit_router(m, u) >= 0) moe_unit_to_local(m, u, full, local);
  else memcpy(local, full, (size_t)m->units[u].numel * sizeof(float));
}

const model_transform_t ep_transform = {
    .name = "ep",
    .setup = moe_setup,
    .after_backward = ep_after_backward,
    .dense_numel = ep_dense_numel,
    .norm_ranges = ep_norm_ranges,
    .step_end = moe_step_end,
    .report = moe_report,
    .traffic = ep_traffic,
    .traffic_text =
        "per unit and step, one all-reduce over the EP group of its dense elements (every parameter but "
        "the experts: the group's ranks read different samples), 2(P_E-1)/P_E of its bytes, unless the "
        "strategy reduces them over all the ranks (two groups: none here); the all-to-alls of the tokens "
        "are counted apart (the moe lines)",
    .unsplit = ep_unsplit,
    .to_local = ep_to_local,
    .splits_batch = 1,
};
