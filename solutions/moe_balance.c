/* moe_balance.c — chapter 12's load balance (moe.h; notes/12-experts.md, "Load balance"): the
 * router's gradient with Switch's auxiliary loss, the loads each step counts, and DeepSeek-V3's
 * auxiliary-loss-free bias, updated after each step from the loads of the whole batch. */
#include "moe_state.h" // moe_gpt_t, moe_unit_t, moe_stats_t, MOE_STATS_STEPS
#include "moe.h"      // moe_step_end
#include "check.h"    // die_on_rank, xcalloc, xmalloc
#include "comm.h"     // comm_ctl_all_reduce_f64, comm_counters
#include "train.h"    // trainer_t, trainer_loss_scale
#include <stdlib.h>   // free
#include <string.h>   // memcpy

/* ---- the router's backward, with Switch's auxiliary loss -------------------------------------- */
void moe_router_backward(moe_gpt_t *c, moe_unit_t *mu, int64_t routed, const float *dg, float *dl) {
  int E = c->E, k = c->k;
  /* aux = α·E·Σ_e f_e·P_e per micro-batch, weighted routed/(B·S) into the mean over the global batch:
   * ∂/∂p_te = α·E·f_e / (B·S), × the loss scale (fp16) */
  double as = c->aux * E * trainer_loss_scale(c->t) / ((double)c->t->cfg->batch * c->S);
  float *d = xmalloc((size_t)E * sizeof(float), "moe router backward (a token's dp)");
  /* dp = the gates' gradient + the aux term; dl = softmax's backward */
  for (int64_t t = 0; t < routed; t++) {
    float *pr = mu->probs + t * E, *o = dl + t * E, dot = 0;
    for (int e = 0; e < E; e++) d[e] = (float)(as * mu->f[e]);
    if (c->gate_topk) { /* g_j = p_j / z over the chosen: ∂L/∂p_i = (dg_i − Σ_j dg_j g_j) / z */
      float z = 0, gd = 0;
      for (int j = 0; j < k; j++) z += pr[mu->ids[t * k + j]], gd += dg[t * k + j] * mu->gates[t * k + j];
      for (int j = 0; j < k; j++) d[mu->ids[t * k + j]] += (dg[t * k + j] - gd) / z;
    } else
      for (int j = 0; j < k; j++) d[mu->ids[t * k + j]] += dg[t * k + j];
    for (int e = 0; e < E; e++) dot += pr[e] * d[e];
    for (int e = 0; e < E; e++) o[e] = pr[e] * (d[e] - dot);
  }
  free(d);
  /* the step's statistics, here (once per micro-batch: a --recompute forward runs twice): the loads
   * before capacity, the drops, and the aux loss α·E·Σ_e f_e·P_e */
  double aux = 0;
  for (int e = 0; e < E; e++) {
    double P = 0;
    for (int64_t t = 0; t < routed; t++) P += mu->probs[t * E + e];
    mu->load_step[e] += mu->load_now[e];
    aux += mu->f[e] * P / (double)routed;
  }
  for (int64_t i = 0; i < routed * k; i++) mu->dropped_step += mu->slot[i] < 0;
  mu->chosen_step += (double)(routed * k);
  c->aux_sum += c->aux * E * aux, c->aux_n += 1;
}

/* ---- after each step: the loads over every rank, the bias, the statistics ------------------------- */
static uint64_t bias_hash(const moe_gpt_t *c, int n_units) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the bias bits of every MoE block */
  for (int u = 0; u < n_units; u++)
    if (c->u[u].bias)
      for (int e = 0; e < c->E; e++) {
        uint32_t b;
        memcpy(&b, &c->u[u].bias[e], sizeof b);
        for (int i = 0; i < 4; i++) h = (h ^ ((b >> (8 * i)) & 0xff)) * 1099511628211ull;
      }
  return h & 0xffffffffu; /* exact in a double */
}

void moe_step_end(trainer_t *t) {
  moe_gpt_t *c = moe_ctx(&t->model);
  moe_stats_t *st = t->transform_priv;
  int E = c->E, U = t->model.n_units, nm = 0;
  for (int u = 0; u < U; u++) nm += c->u[u].on;
  /* per MoE block: E loads, dropped, chosen; then Σ aux, n aux: summed over every rank of the job
   * (integers and small sums: the same bits everywhere) */
  int n = nm * (E + 2) + 2;
  double *v = xcalloc((size_t)n, sizeof(double), "moe step sums"), *p = v;
  for (int u = 0; u < U; u++) {
    moe_unit_t *mu = &c->u[u];
    if (!mu->on) continue;
    for (int e = 0; e < E; e++) *p++ = mu->load_step[e];
    *p++ = mu->dropped_step, *p++ = mu->chosen_step;
  }
  *p++ = c->aux_sum, *p++ = c->aux_n;
  comm_ctl_all_reduce_f64(t->world_comm, v, n, REDOP_SUM);
  double ratio = 0, drop = 0, chosen = 0;
  p = v;
  for (int u = 0; u < U; u++) {
    moe_unit_t *mu = &c->u[u];
    if (!mu->on) continue;
    double mx = 0, sum = 0;
    for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx, sum += p[e];
    ratio += sum > 0 ? mx / (sum / E) : 0;
    if (mu->bias) /* DeepSeek-V3: b_e += rate · sign(mean − load_e), from the loads of the whole batch */
      for (int e = 0; e < E; e++) {
        double d = sum / E - p[e];
        mu->bias[e] += (float)(c->rate * (d > 0 ? 1 : d < 0 ? -1 : 0));
      }
    drop += p[E], chosen += p[E + 1];
    p += E + 2;
    for (int e = 0; e < E; e++) mu->load_step[e] = 0;
    mu->dropped_step = mu->chosen_step = 0;
  }
  st->last_ratio = nm ? ratio / nm : 0, st->last_drop = chosen > 0 ? drop / chosen : 0;
  st->drop_total += drop, st->chosen_total += chosen;
  double aux = p[1] > 0 ? p[0] / p[1] * nm : 0; /* the step's aux loss: mean per block × the blocks */
  c->aux_sum = c->aux_n = 0;
  int s = t->step;
  if (s < MOE_STATS_STEPS) st->load_ratio[s] = st->last_ratio, st->drop_rate[s] = st->last_drop;
  st->last_aux = aux;
  /* the all-to-all bytes of the training passes so far (an evaluation after this step adds its own) */
  if (c->ep_comm) st->a2a_sent = (double)comm_counters(c->ep_comm).sent[CO_ALL_TO_ALL];
  free(v);
  if (c->rate > 0) { /* the bias must be the same bits on every rank: checked, not assumed */
    double h[2] = {(double)bias_hash(c, U), -(double)bias_hash(c, U)};
    comm_ctl_all_reduce_f64(t->world_comm, h, 2, REDOP_MAX);
    if (h[0] != -h[1])
      die_on_rank("moe: step %d: the router bias differs between ranks (hash %.0f vs %.0f)", s, h[0], -h[1]);
    st->bias_hash = (uint64_t)h[0];
  }
}

