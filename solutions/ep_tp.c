/* ep_tp.c — chapter 12: tensor parallelism on the attention inside the expert-parallel group
 * (ep.h; notes/12-experts.md, "TP inside the EP group"). `ch12_experts --ep P_E --tp T`.
 *
 * The EP group of P_E consecutive ranks (the transform's group, t->group_comm) holds every expert
 * once, E/P_E per rank, as without TP. Inside it, T consecutive ranks form a TP group: they split
 * the attention's heads, the embedding's and the head's vocabulary (chapter 06's split GPT,
 * tp_gpt.c) and read the same samples, so the group reads P_E/T slices of the batch. At a MoE block
 * the T ranks hold the same ln2 output; each takes 1/T of its rows (tokens), routes them and sends
 * them to the experts over the whole EP group, and the T parts of the block's output are
 * all-gathered back (the backward all-gathers d ln2 likewise). That is Megatron's "MoE parallel
 * folding" with expert-tensor-parallel size 1: the attention's TP ranks fold into the experts' EP.
 * With --sp (Megatron's way, tp_sp.h) the T ranks hold different positions of every sample from the
 * LayerNorm on: each routes its own, and nothing is gathered at the block.
 *
 * Gradients, per step (on the last micro-batch, before the strategy reduces over D):
 *   the dense part of a unit (everything but the experts) summed over the P_E/T ranks of the group
 *     with this TP index (xg: they read different samples, hold the same slices);
 *   a router's, also summed over the TP group: its T ranks routed different tokens;
 *   the experts': nothing here (every token of the group reached its expert by the all-to-all).
 * The norm counts each value once: of each set of alike copies one rank counts it (norm_ranges),
 * and the sum over the group adds the ranks' sums. */
#include "ep.h"       // ep_tp_transform
#include "moe.h"      // moe_setup, moe_step_end, moe_report, moe_unit_*, moe_*_group, moe_base, ...
#include "tp.h"       // tp_map_unit, tp_unit_local_numel, tp_gpt_attn_*
#include "tp_split.h" // tp_split_t, tp_unit_t, tp_unit_traffic
#include "check.h"    // xmalloc, xcalloc
#include "comm.h"     // comm_all_reduce, comm_ctl_gather, comm_model_sent
#include "train.h"    // trainer_t, model_transform_t
#include <stdlib.h>   // free
#include <string.h>   // memcpy

/* No split: the transform's setup (moe_setup) splits the GPT over the TP groups it makes inside the EP
 * group, then keeps this rank's experts. */

/* Unit u's TP-replicated parameters: a prefix (tp_gpt.c's layouts: the LayerNorms, the row-parallel
 * biases, wpe) and a MoE block's router (after the TP all-reduce, the same on the TP group). */
static int64_t rep_prefix(const model_t *m, int u) {
  model_t b = moe_base(m);
  if (moe_unit_router(m, u) >= 0) return tp_gpt_attn_rep_numel(&b);
  return ((const tp_split_t *)b.ctx)->units[u].rep_numel;
}
static int64_t router_numel(const model_t *m, int u) {
  int64_t ro = moe_unit_router(m, u);
  return ro < 0 ? 0 : moe_unit_dense(m, u) - ro;
}

/* On the step's last micro-batch (no_sync: the step's sum, moe_setup), before the strategy reduces
 * unit u over D: the dense part over the ranks with this TP index (they read different samples, hold
 * the same slices), a router's also over the TP group (its T ranks routed different tokens). */
static void ep_tp_after_backward(trainer_t *t, int u) {
  if (t->micro != t->n_micro - 1) return;
  model_t *m = &t->model;
  comm_t *xg = moe_xg_group(m), *tp = moe_tp_group(m);
  int64_t n = moe_unit_dense(m, u), ro = moe_unit_router(m, u), R = router_numel(m, u);
  if (n == 0) return;
  if (comm_world(xg) > 1) comm_all_reduce(xg, t->unit_grads[u], n, t->wdt, REDOP_SUM);
  if (R > 0)
    comm_all_reduce(tp, (char *)t->unit_grads[u] + ro * (int64_t)dtype_size(t->wdt), R, t->wdt, REDOP_SUM);
}

/* Appends [lo, hi) to the ranges r[0..n) (joined to the last when they touch); returns the count. */
static int add_range(int64_t r[][2], int n, int64_t lo, int64_t hi) {
  if (hi <= lo) return n;
  if (n > 0 && r[n - 1][1] == lo) r[n - 1][1] = hi;
  else r[n][0] = lo, r[n][1] = hi, n++;
  return n;
}

/* The norm's ranges (train.h's norm_ranges), unit u's local layout in order: the TP-replicated prefix
 * (alike on the whole EP group: group rank 0 counts it), the TP slices (alike on the ranks with this
 * TP index: the first of them, xg rank 0, counts them), a MoE block's router (alike on the whole
 * group after the two all-reduces: group rank 0) and its experts (this rank's own: always). */
static int ep_tp_norm_ranges(const trainer_t *t, int u, int64_t r[][2]) {
  const model_t *m = &t->model;
  int first = comm_rank(t->group_comm) == 0, first_xg = comm_rank(moe_xg_group(m)) == 0;
  int64_t rp = rep_prefix(m, u), ro = moe_unit_router(m, u), d = moe_unit_dense(m, u);
  int64_t slices_end = ro >= 0 ? ro : d; /* a dense unit: TP slices to its end */
  int n = add_range(r, 0, 0, first ? rp : 0);
  n = add_range(r, n, rp, first_xg ? slices_end : rp);
  n = add_range(r, n, slices_end, first ? d : slices_end);
  return add_range(r, (int)n, d, m->units[u].numel);
}

/* Per step: the split GPT's collectives over TP (tp_split.c's formula, unit by unit; a MoE block's
 * attention: proj's g forward, qkv's f backward, and the all-gathers of the block's output and of
 * d ln2, each of b·S·C), then the gradients: each unit's dense part over xg, a router over TP. */
static void ep_tp_traffic(const trainer_t *t, int64_t *calls, int64_t *bytes) {
  const model_t *m = &t->model;
  comm_t *xg = moe_xg_group(m), *tp = moe_tp_group(m);
  model_t b = moe_base(m);
  const tp_split_t *s = b.ctx;
  /* the groups' sizes */
  int ntp = comm_world(tp), r = comm_rank(tp), nxg = comm_world(xg), xr = comm_rank(xg);
  *calls = *bytes = 0;
  for (int u = 0; u < m->n_units; u++) {
    tp_unit_t moe_k = {.ar_calls = 2, .ar_fwd_calls = 1, .ag_calls = 2, .ag_fwd_calls = 1,
                       .ar_numel = (int64_t)m->gpt.seq_len * m->gpt.n_embd};
    if (t->cfg->sp) /* --sp: the attention half's g and ḡ along the sequence (tp_gpt.c's block: 3 of its 6
                     * all-gathers, 2 of its 4 reduce-scatters, both LayerNorms' weight gradients); nothing at
                     * the MoE half */
      moe_k = (tp_unit_t){.ag_calls = 3, .ag_fwd_calls = 1, .rs_calls = 2, .rs_fwd_calls = 1, .ln_calls = 2,
                          .ln_numel = 2 * (int64_t)m->gpt.n_embd, .ar_numel = moe_k.ar_numel};
    tp_unit_traffic(moe_unit_router(m, u) >= 0 ? &moe_k : &s->units[u], t, u, ntp, r, calls, bytes);
    if (nxg > 1)
      *calls += 1, *bytes += comm_model_sent(CO_ALL_REDUCE, moe_unit_dense(m, u), t->wdt, nxg, xr, 0);
    if (router_numel(m, u) > 0)
      *calls += 1, *bytes += comm_model_sent(CO_ALL_REDUCE, router_numel(m, u), t->wdt, ntp, r, 0);
  }
}

static int ep_tp_groups(const trainer_t *t, comm_t **out, int max) {
  if (max < 2) return 0;
  out[0] = moe_tp_group(&t->model), out[1] = moe_xg_group(&t->model);
  return 2;
}

/* The whole model on the group's rank 0: a unit's TP parts from ranks 0..T−1 (the first TP group;
 * rank 0 last, so its replicated values are kept), a router from rank 0, each rank's experts where
 * the full unit has them. */
static float *ep_tp_unsplit(const model_t *m, const float *local, int has_local, int64_t *full_numel) {
  comm_t *g = moe_group(m);
  int P = comm_world(g), ntp = comm_world(moe_tp_group(m)); /* P_E, the TP group's ranks */
  *full_numel = moe_full_numel(m);
  if (!has_local) return NULL;
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(g, local, m->numel * (int64_t)sizeof(float), &all, &sizes);
  if (comm_rank(g) != 0) {
    free(all);
    free(sizes);
    return NULL;
  }
  float *w = xmalloc((size_t)*full_numel * sizeof(float), "ep tp unsplit weights");
  float **at = xcalloc((size_t)P, sizeof(float *), "ep tp unsplit blobs");
  for (int64_t q = 0, boff = 0; q < P; boff += sizes[q] / 4, q++) at[q] = (float *)all + boff;
  model_t b = moe_base(m);
  float *o = w;
  for (int u = 0; u < m->n_units; u++) {
    int64_t ro = moe_unit_router(m, u);
    if (ro >= 0) {
      gpt_block_layout_t l = gpt_block_layout(m->gpt.n_embd);
      /* x: a rank's experts */
      int64_t R = router_numel(m, u), n = moe_unit_dense(m, u), x = m->units[u].numel - n;
      for (int q = ntp - 1; q >= 0; q--) tp_gpt_attn_map(&b, q, o, at[q], 0);
      memcpy(o + l.fcw, at[0] + ro, (size_t)R * sizeof(float));
      for (int q = 0; q < P; q++) memcpy(o + l.fcw + R + q * x, at[q] + n, (size_t)x * sizeof(float));
      for (int q = 0; q < P; q++) at[q] += m->units[u].numel;
    } else {
      for (int q = ntp - 1; q >= 0; q--) tp_map_unit(&b, u, q, o, at[q], 0);
      for (int q = 0; q < P; q++) at[q] += tp_unit_local_numel(&b, u, q % ntp);
    }
    o += moe_full_unit_numel(m, u);
  }
  free(at);
  free(all);
  free(sizes);
  return w;
}

static void ep_tp_to_local(const model_t *m, int u, const float *full, float *local) {
  if (moe_unit_router(m, u) >= 0) {
    moe_unit_to_local(m, u, full, local);
    return;
  }
  model_t b = moe_base(m);
  tp_map_unit(&b, u, comm_rank(moe_tp_group(m)), (float *)full, local, 1); /* full → local: only read */
}

const model_transform_t ep_tp_transform = {
    .name = "ep",
    .setup = moe_setup,
    .after_backward = ep_tp_after_backward,
    .norm_ranges = ep_tp_norm_ranges,
    .step_end = moe_step_end,
    .report = moe_report,
    .traffic = ep_tp_traffic,
    .traffic_text =
        "over the TP group (T ranks inside each EP group): the split GPT's all-reduces as chapter 06's (a "
        "MoE "
        "block's attention: 2), a MoE block's 2 all-gathers of b x s x h fp32 (its output, d ln2; with --sp "
        "the split "
        "GPT's sequence collectives instead, a MoE block's attention 3 all-gathers + 2 reduce-scatters + "
        "its 2 LayerNorms' 2h, nothing at its MoE half); per unit "
        "and step one all-reduce of its dense elements over the P_E/T ranks with the same TP index, and of a "
        "router's over the TP group; the all-to-alls of the tokens are counted apart (the moe lines)",
    .groups = ep_tp_groups,
    .unsplit = ep_tp_unsplit,
    .to_local = ep_tp_to_local,
    .splits_batch = 1,
};
