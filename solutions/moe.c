/* moe.c — chapter 12's Mixture-of-Experts GPT (moe.h): the router, dispatch, the experts, combine,
 * the auxiliary loss and the router bias, forward and backward; the exchange of rows between the
 * ranks of an expert-parallel group is ep.c's. notes/12-experts.md explains each step.
 *
 * The model is the GPT (gpt.h) with its own table: a dense unit runs gpt.c's code unchanged, a MoE
 * block runs gpt.c's attention half (gpt_block_attn_forward/backward) and then this file's MLP.
 * The routing is decided on the host (the router's T×E probabilities are copied there: the top-k,
 * the plan and the loads are integer bookkeeping, and the all-to-all-v needs its counts on the host
 * anyway); every row of activations moves on the device (ops_gpt.h's op_rows_*). */
#include "moe.h"      // moe_setup, moe_strategy, moe_plan
#include "ep.h"       // ep_exchange_counts, ep_exchange_rows, ep_transform
#include "tp.h"       // tp_split_model, tp_gpt_attn_* (--tp inside the EP group)
#include "args.h"     // args_error, args_env_world
#include "check.h"    // die, die_on_rank, xcalloc, xmalloc
#include "comm.h"     // comm_ctl_all_reduce_f64
#include "data.h"     // rng_normal
#include "device.h"   // dev_memcpy
#include "gpt.h"      // model_gpt_fns, gpt_block_*
#include "ledger.h"   // LEDGER_ACTS
#include "ops.h"      // op_linear_fwd/bwd, op_gelu_*, op_add, op_fill
#include "ops_gpt.h"  // op_rows_gather, op_rows_combine, op_rows_dot
#include "tensor.h"   // tensor_alloc, tensor_free
#include "trace.h"    // trace_begin, trace_end (--trace: dispatch, experts, combine)
#include "train.h"    // trainer_t, train_cfg_t, strategy_t, trainer_report_extra
#include <math.h>     // expf, sqrt
#include <stdio.h>    // printf
#include <stdlib.h>   // free, realloc
#include <string.h>   // memcpy, memset

#define GPT_STREAM 0x2000u     /* gpt.c's init stream of unit u: GPT_STREAM + u (expert 0 = the dense MLP) */
#define MOE_EXPERT_STREAM 20   /* expert e > 0 of unit u: GPT_STREAM + u + (e << 20) */
#define MOE_ROUTER_STREAM 0x7000u
#define MOE_STATS_STEPS 16     /* loads per step kept for the report: the first 16 steps */

/* One MoE block's host state: the routing of the micro-batch in flight (forward → backward) and
 * the step's loads. */
typedef struct moe_unit {
  int on;                      /* 1: a MoE block */
  int64_t T;                   /* tokens of the routing below */
  float *probs;                /* (T, E) router softmax */
  int *ids, *slot;             /* (T, k) chosen experts; their rows (−1 dropped) */
  float *gates;                /* (T, k) */
  int *row_tok;                /* (Rs) the token of each send row */
  float *row_gate;             /* (Rs) its gate (0 for padding) */
  int64_t *counts;             /* (E) rows kept per expert (the plan's) */
  double *f;                   /* (E) the micro-batch's share of choices per expert (the aux loss's f_e) */
  double *load_now;            /* (E) this rank's choices per expert in the micro-batch */
  int64_t Rs, Rx;              /* rows: this rank's send layout (the plan's), and its experts' (received) */
  int64_t *recv_rows;          /* (ep·El) rows from source q for local expert i: [q·El + i] */
  int *perm_x, *perm_b;        /* (Rx) expert row → received row; (Rx) received row → expert row (ep > 1) */
  double *load_step;           /* (E) choices per expert this step (before capacity), summed over micro-batches */
  double dropped_step, chosen_step;
  float *bias;                 /* (E) DeepSeek-V3's selection bias (same bits on every rank) */
} moe_unit_t;

typedef struct moe_gpt {
  trainer_t *t;
  int E, k, every, ep, er, El;   /* experts, top-k, every m-th block, group size, this rank's index, E/ep */
  double cf, aux, rate;
  int aux_global;                /* --aux-loss-scope global */
  int64_t C, S, D, R, X;         /* n_embd, seq_len, dense prefix (this rank's), router E·C, one expert 8C² + 5C */
  comm_t *g;                     /* the EP group (t->group_comm), NULL with --ep 1 */
  /* --tp T inside the EP group (solutions/ep_tp.c): the T consecutive ranks that split the attention
   * (tp) and the P_E/T ranks of the group with the same TP index (xg: data-parallel for the attention);
   * at a MoE block TP rank tr routes rows [tr·BT/T, (tr+1)·BT/T) of the micro-batch's BT = B·S tokens
   * (with --sp: its own B·S/T positions) */
  comm_t *tp, *xg;
  int T, tr;
  int gather;                    /* --tp without --sp: the T ranks hold the same rows, each routes its 1/T and the
                                  * output is all-gathered; with --sp (Megatron's way) each already holds 1/T of
                                  * the positions of every sample: it routes those, nothing to gather */
  model_t base;                  /* the model before the experts: gpt.c's, or tp_gpt.c's split (its fns, ctx) */
  model_fns_t fns;               /* this model's table (the base's loss when it has one) */
  gpt_block_t kb;                /* a MoE block's attention half: gpt.h's whole block, or TP's split one */
  int64_t Df;                    /* the full unit's dense prefix (ln1 .. ln2): D is this rank's part of it */
  moe_unit_t *u;                 /* [n_units] */
  /* device scratch, grown on demand (LEDGER_ACTS) */
  tensor_t logits, xs, recv, eo_x, dsend, dx_x, dpost, dln2, dln2r, dg, work;
  tensor_t idx, gd;              /* device copies of the index arrays a pass needs; of the gates */
  tensor_t ys;                   /* --tp: this rank's rows of the MoE output (forward), of d ln2 (backward) */
  int64_t ix_off[4];
  /* the run's statistics (rank-local until moe_step_end sums them) */
  double aux_sum, aux_n;         /* Σ aux loss values and their count (layers × micro-batches), last step */
  double load_ratio[MOE_STATS_STEPS], drop_rate[MOE_STATS_STEPS];
  double last_ratio, last_drop, last_aux, drop_total, chosen_total;
  double a2a_formula;            /* Σ over the run's training passes: the bytes the four exchanges send by the formula */
  uint64_t bias_hash;
} moe_gpt_t;

static moe_gpt_t *ctx_of(const model_t *m) { return (moe_gpt_t *)m->ctx; }

static float *grow(tensor_t *b, const char *name, device_t dev, int64_t numel) {
  return tensor_grow(b, name, LEDGER_ACTS, DT_F32, dev, numel > 0 ? numel : 1); /* an empty pass still gets a pointer */
}

/* The index arrays a pass needs on the device, each at its own offset of one buffer (grown first
 * by idx_room): row_tok at 0, slot, perm_x, perm_b after it. On the CPU the host arrays themselves. */
enum { IX_ROWS, IX_SLOT, IX_PERM_X, IX_PERM_B };
static void idx_room(moe_gpt_t *c, device_t dev, const moe_unit_t *mu, int64_t BT) {
  c->ix_off[IX_ROWS] = 0, c->ix_off[IX_SLOT] = mu->Rs, c->ix_off[IX_PERM_X] = mu->Rs + BT * c->k;
  c->ix_off[IX_PERM_B] = c->ix_off[IX_PERM_X] + mu->Rx;
  if (dev != DEV_CPU) grow(&c->idx, "moe indices", dev, c->ix_off[IX_PERM_B] + mu->Rx);
}
static const int *dev_ints(moe_gpt_t *c, device_t dev, const int *h, int64_t n, int which) {
  if (dev == DEV_CPU) return h;
  int *d = (int *)c->idx.data + c->ix_off[which];
  dev_memcpy(dev, d, DEV_CPU, h, (size_t)n * sizeof(int));
  return d;
}

/* ---- offsets inside a MoE unit ---------------------------------------------------------------- */
static int64_t expert_off(const moe_gpt_t *c, int i) { return c->D + c->R + (int64_t)i * c->X; }

/* ---- the router (host) -------------------------------------------------------------------------- */
/* probs = softmax(logits) per token (fp32, max subtracted); ids, gates = the top-k of probs + bias
 * (ties: the lower expert), gates from probs (the bias only selects: DeepSeek-V3). */
static void route(const moe_gpt_t *c, moe_unit_t *mu, const float *logits, int64_t T) {
  int E = c->E, k = c->k;
  for (int64_t t = 0; t < T; t++) {
    const float *l = logits + t * E;
    float *p = mu->probs + t * E, mx = l[0], sum = 0;
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= sum;
    for (int j = 0; j < k; j++) {
      int best = -1;
      float bs = 0;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int q = 0; q < j; q++) taken |= mu->ids[t * k + q] == e;
        float s = p[e] + (mu->bias ? mu->bias[e] : 0.0f);
        if (!taken && (best < 0 || s > bs)) best = e, bs = s;
      }
      mu->ids[t * k + j] = best;
      mu->gates[t * k + j] = p[best];
    }
  }
}

/* The host arrays of unit u for T tokens and rows send rows. */
static void unit_host(moe_gpt_t *c, moe_unit_t *mu, int64_t T, int64_t Rs, int64_t Rx) {
  int E = c->E, k = c->k;
  if (T > mu->T) {
    free(mu->probs), free(mu->ids), free(mu->slot), free(mu->gates);
    mu->probs = xmalloc((size_t)(T * E) * sizeof(float), "moe probs");
    mu->ids = xmalloc((size_t)(T * k) * sizeof(int), "moe ids");
    mu->slot = xmalloc((size_t)(T * k) * sizeof(int), "moe slots");
    mu->gates = xmalloc((size_t)(T * k) * sizeof(float), "moe gates");
    mu->T = T;
  }
  mu->row_tok = realloc(mu->row_tok, (size_t)(Rs > 0 ? Rs : 1) * sizeof(int));
  mu->row_gate = realloc(mu->row_gate, (size_t)(Rs > 0 ? Rs : 1) * sizeof(float));
  mu->perm_x = realloc(mu->perm_x, (size_t)(Rx > 0 ? Rx : 1) * sizeof(int));
  mu->perm_b = realloc(mu->perm_b, (size_t)(Rx > 0 ? Rx : 1) * sizeof(int));
  if (!mu->row_tok || !mu->row_gate || !mu->perm_x || !mu->perm_b) die_on_rank("out of host memory (moe rows)");
}

/* ---- dispatch over the group: send layout (grouped by destination) ↔ expert layout ------------- */
/* After the plan: how many rows go to each rank and come from each (capacity: El·cap each way; dropless:
 * the counts exchanged), and the maps between the received (source-major) and expert-major layouts. */
static void exchange_plan(moe_gpt_t *c, moe_unit_t *mu, int64_t cap, int64_t *send_rows, int64_t *recv_src) {
  int P = c->ep, El = c->El;
  float *sc = xmalloc((size_t)(2 * c->E) * sizeof(float), "moe counts"), *rc = sc + c->E;
  for (int e = 0; e < c->E; e++) sc[e] = (float)(cap > 0 ? cap : mu->counts[e]);
  if (P > 1 && cap == 0) ep_exchange_counts(c->g, sc, rc, El); /* dropless: how many rows will come */
  else memcpy(rc, sc, (size_t)c->E * sizeof(float));
  for (int q = 0; q < P; q++) {
    send_rows[q] = recv_src[q] = 0;
    for (int i = 0; i < El; i++) {
      send_rows[q] += (int64_t)sc[q * El + i];
      mu->recv_rows[q * El + i] = (int64_t)rc[q * El + i]; /* rank q's rows for my expert i */
      recv_src[q] += mu->recv_rows[q * El + i];
    }
  }
  free(sc);
  /* expert-major: expert i's rows from rank 0, then rank 1, ...: the token order of the whole group */
  int64_t rx = 0;
  for (int i = 0; i < El; i++)
    for (int q = 0; q < P; q++) {
      int64_t from = 0; /* where rank q's rows for expert i sit in the received buffer */
      for (int q2 = 0; q2 < q; q2++) from += recv_src[q2];
      for (int i2 = 0; i2 < i; i2++) from += mu->recv_rows[q * El + i2];
      for (int64_t r = 0; r < mu->recv_rows[q * El + i]; r++, rx++) {
        mu->perm_x[rx] = (int)(from + r);
        mu->perm_b[from + r] = (int)rx;
      }
    }
  mu->Rx = rx;
}

/* The bytes one pass (a forward, or a backward) sends over the group by the formula: the rows for
 * other ranks' experts out (dispatch; the combine's backward) and the rows of other ranks' tokens
 * back (combine; the dispatch's backward), C fp32 each. */
static double a2a_bytes(const moe_gpt_t *c, const int64_t *send_rows, const int64_t *recv_src) {
  double rows = 0;
  for (int q = 0; q < c->ep; q++)
    if (q != c->er) rows += (double)(send_rows[q] + recv_src[q]);
  return rows * (double)c->C * 4.0;
}

/* --ep: rows from the send layout (grouped by destination rank) to this rank's experts' layout — the
 * all-to-all, then each expert's rows gathered in source order. (Alone, the two layouts are one: the
 * callers use the same buffer and do not call these.) */
static void to_experts(moe_gpt_t *c, const moe_unit_t *mu, device_t dev, float *dst_x, const float *send,
                       const int64_t *send_rows, const int64_t *recv_src, const char *tag) {
  int Cn = (int)c->C;
  float *recv = grow(&c->recv, "moe received rows", dev, mu->Rx * c->C);
  ep_exchange_rows(c->g, send, send_rows, recv, recv_src, Cn, tag);
  op_rows_gather(dev, dst_x, recv, dev_ints(c, dev, mu->perm_x, mu->Rx, IX_PERM_X), NULL, mu->Rx, Cn);
}
/* And back: the experts' rows to their tokens' ranks, in the send layout. */
static void to_tokens(moe_gpt_t *c, const moe_unit_t *mu, device_t dev, float *dst_send, const float *src_x,
                      const int64_t *send_rows, const int64_t *recv_src, const char *tag) {
  int Cn = (int)c->C;
  float *back = grow(&c->recv, "moe received rows", dev, mu->Rx * c->C);
  op_rows_gather(dev, back, src_x, dev_ints(c, dev, mu->perm_b, mu->Rx, IX_PERM_B), NULL, mu->Rx, Cn);
  ep_exchange_rows(c->g, back, recv_src, dst_send, send_rows, Cn, tag);
}

/* Rows of expert i in the expert layout: [first, first + n). */
static int64_t expert_rows(const moe_gpt_t *c, const moe_unit_t *mu, int i, int64_t *first) {
  int64_t at = 0, n = 0;
  for (int i2 = 0; i2 <= i; i2++) {
    n = 0;
    for (int q = 0; q < c->ep; q++) n += mu->recv_rows[q * c->El + i2];
    if (i2 < i) at += n;
  }
  *first = at;
  return n;
}

/* ---- forward -------------------------------------------------------------------------------- */
static void moe_block_forward(const model_t *m, int u, const unit_io_t *io) {
  moe_gpt_t *c = ctx_of(m);
  moe_unit_t *mu = &c->u[u];
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  int E = c->E, k = c->k, Cn = (int)c->C;
  int64_t BTall = (int64_t)io->B * c->S, C = c->C, BT = BTall / c->T; /* BT: the tokens this rank routes */
  gpt_block_t kb = c->kb;
  float *x2, *ln2;
  gpt_block_attn_forward(&kb, io, &x2, &ln2);
  int64_t here = c->gather ? BTall : BT; /* the rows of x2, ln2 and y on this rank */
  ln2 += c->gather ? (int64_t)c->tr * BT * C : 0; /* --tp: this rank's rows of the group's (the same on its T ranks) */
  /* the router, in fp32 on the device; the softmax and the choice on the host */
  float *logits = grow(&c->logits, "moe router logits", dev, BT * E);
  op_linear_fwd(dev, logits, ln2, param_at(io, c->D), NULL, wdt, (int)BT, Cn, E);
  int64_t cap = moe_capacity(c->cf, BT, k, E), Rs = cap > 0 ? E * cap : BT * k;
  unit_host(c, mu, BT, Rs, Rs * c->ep);
  float *lh = dev == DEV_CPU ? logits : xmalloc((size_t)(BT * E) * sizeof(float), "moe logits (host)");
  if (lh != logits) dev_memcpy(DEV_CPU, lh, dev, logits, (size_t)(BT * E) * sizeof(float));
  route(c, mu, lh, BT);
  if (lh != logits) free(lh);
  mu->Rs = moe_plan(mu->ids, BT, k, E, cap, mu->counts, mu->slot, mu->row_tok);
  for (int64_t r = 0; r < mu->Rs; r++) mu->row_gate[r] = 0.0f;
  for (int64_t i = 0; i < BT * k; i++)
    if (mu->slot[i] >= 0) mu->row_gate[mu->slot[i]] = mu->gates[i];
  /* f_e: the share of the micro-batch's choices that picked e (Switch's aux loss; before capacity): of
   * this rank's tokens, or (--aux-loss-scope global) of every rank's (counts summed: exact integers) */
  for (int e = 0; e < E; e++) mu->f[e] = 0, mu->load_now[e] = 0;
  for (int64_t i = 0; i < BT * k; i++) mu->f[mu->ids[i]] += 1, mu->load_now[mu->ids[i]] += 1;
  double chosen = (double)(BT * k);
  if (c->aux_global) {
    comm_ctl_all_reduce_f64(c->t->world_comm, mu->f, E, REDOP_SUM);
    chosen *= comm_world(c->t->world_comm); /* every rank routes as many tokens */
  }
  for (int e = 0; e < E; e++) mu->f[e] /= chosen;
  /* dispatch: the send layout, then (--ep) the all-to-all into the experts' layout */
  trace_begin("moe dispatch");
  int64_t send_rows[256], recv_src[256];
  exchange_plan(c, mu, cap, send_rows, recv_src);
  int64_t Rx = mu->Rx;
  /* saved: X (Rx, C), pre (Rx, 4C), post (Rx, 4C) of the experts; eo (Rs, C) the outputs back home.
   * Alone the send layout is the experts' (Rs = Rx): the rows are gathered straight into X */
  float *X = io->saved + gpt_block_attn_saved(&kb) * io->B, *pre = X + Rx * C, *post = pre + Rx * 4 * C;
  float *eo = post + Rx * 4 * C, *eox = c->ep > 1 ? grow(&c->eo_x, "moe expert outputs", dev, Rx * C) : eo;
  float *xs = c->ep > 1 ? grow(&c->xs, "moe dispatch rows", dev, mu->Rs * C) : X;
  idx_room(c, dev, mu, BT);
  op_rows_gather(dev, xs, ln2, dev_ints(c, dev, mu->row_tok, mu->Rs, IX_ROWS), NULL, mu->Rs, Cn);
  if (c->ep > 1) to_experts(c, mu, dev, X, xs, send_rows, recv_src, "moe dispatch");
  trace_end(NULL);
  trace_begin("moe experts");
  for (int i = 0; i < c->El; i++) { /* each expert: one GEMM pair on its rows */
    int64_t r0, n = expert_rows(c, mu, i, &r0), w = expert_off(c, i);
    if (n == 0) continue;
    op_linear_fwd(dev, pre + r0 * 4 * C, X + r0 * C, param_at(io, w), param_at(io, w + 4 * C * C), wdt, (int)n, Cn, 4 * Cn);
    op_gelu_fwd(dev, post + r0 * 4 * C, pre + r0 * 4 * C, n * 4 * C);
    op_linear_fwd(dev, eox + r0 * C, post + r0 * 4 * C, param_at(io, w + 4 * C * C + 4 * C), param_at(io, w + 8 * C * C + 4 * C),
                  wdt, (int)n, 4 * Cn, Cn);
  }
  trace_end(NULL);
  trace_begin("moe combine");
  if (c->ep > 1) to_tokens(c, mu, dev, eo, eox, send_rows, recv_src, "moe combine"); /* back to their tokens' ranks */
  if (c->ep > 1) c->a2a_formula += a2a_bytes(c, send_rows, recv_src) + (c->cf > 0 ? 0 : 4.0 * (c->ep - 1) * c->El);
  /* combine: y = x2 + Σ_j g_tj · eo[slot_tj] */
  float *gd = dev == DEV_CPU ? mu->gates : grow(&c->gd, "moe gates", dev, BT * k);
  if (gd != mu->gates) dev_memcpy(dev, gd, DEV_CPU, mu->gates, (size_t)(BT * k) * sizeof(float));
  float *y = c->gather ? grow(&c->ys, "moe rows (tp)", dev, BT * C) : io->y;
  op_rows_combine(dev, y, eo, dev_ints(c, dev, mu->slot, BT * k, IX_SLOT), gd, BT, k, Cn, 0.0f);
  if (c->gather) comm_all_gather(c->tp, y, io->y, BTall * C, DT_F32); /* --tp: every rank's rows, in row order */
  op_add(dev, io->y, x2, DT_F32, here * C);
  trace_end(NULL);
}

/* ---- backward ------------------------------------------------------------------------------- */
static void moe_block_backward(const model_t *m, int u, const unit_io_t *io) {
  moe_gpt_t *c = ctx_of(m);
  moe_unit_t *mu = &c->u[u];
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  int E = c->E, k = c->k, Cn = (int)c->C;
  int64_t BTall = (int64_t)io->B * c->S, C = c->C, BT = BTall / c->T, Rs = mu->Rs, Rx = mu->Rx;
  float beta = io->beta;
  gpt_block_t kb = c->kb;
  /* the router's and the experts' input, kept by the forward (--tp: this rank's rows), and d y's rows */
  int64_t row0 = c->gather ? (int64_t)c->tr * BT * C : 0;
  const float *ln2 = gpt_block_saved_ln2(&kb, io) + row0, *dy = io->dy + row0;
  float *X = io->saved + gpt_block_attn_saved(&kb) * io->B, *pre = X + Rx * C, *post = pre + Rx * 4 * C;
  float *eo = post + Rx * 4 * C;
  int64_t send_rows[256], recv_src[256];
  for (int q = 0; q < c->ep; q++) {
    send_rows[q] = recv_src[q] = 0;
    for (int i = 0; i < c->El; i++) recv_src[q] += mu->recv_rows[q * c->El + i];
  }
  int64_t cap = moe_capacity(c->cf, BT, k, E);
  for (int e = 0; e < E; e++) send_rows[e / c->El] += cap > 0 ? cap : mu->counts[e];
  /* combine's backward: d eo (send layout) = g · dy of the row's token; then to the experts */
  trace_begin("moe combine backward");
  idx_room(c, dev, mu, BT);
  float *rg = dev == DEV_CPU ? mu->row_gate : grow(&c->gd, "moe gates", dev, Rs);
  if (rg != mu->row_gate) dev_memcpy(dev, rg, DEV_CPU, mu->row_gate, (size_t)Rs * sizeof(float));
  float *dsend = grow(&c->dsend, "moe d rows (send)", dev, Rs * C);
  op_rows_gather(dev, dsend, dy, dev_ints(c, dev, mu->row_tok, Rs, IX_ROWS), rg, Rs, Cn);
  /* the experts' input and output gradients (alone: the output's is dsend itself) */
  float *dx_x = grow(&c->dx_x, "moe d expert rows", dev, (c->ep > 1 ? 2 : 1) * Rx * C);
  float *deo_x = c->ep > 1 ? dx_x + Rx * C : dsend;
  if (c->ep > 1) to_experts(c, mu, dev, deo_x, dsend, send_rows, recv_src, "moe combine backward");
  trace_end(NULL);
  trace_begin("moe experts backward");
  float *dpost = grow(&c->dpost, "moe d hidden", dev, Rx * 4 * C);
  for (int i = 0; i < c->El; i++) {
    int64_t r0, n = expert_rows(c, mu, i, &r0), w = expert_off(c, i);
    if (n == 0) { /* no rows: its gradient is 0 (overwritten with beta 0, kept with beta 1) */
      if (beta == 0.0f) op_fill(dev, grad_at(io, w), wdt, 0.0f, c->X);
      continue;
    }
    op_linear_bwd(dev, dpost + r0 * 4 * C, grad_at(io, w + 4 * C * C + 4 * C), grad_at(io, w + 8 * C * C + 4 * C), deo_x + r0 * C,
                  post + r0 * 4 * C, param_at(io, w + 4 * C * C + 4 * C), wdt, (int)n, 4 * Cn, Cn, beta);
    op_gelu_bwd(dev, dpost + r0 * 4 * C, dpost + r0 * 4 * C, pre + r0 * 4 * C, n * 4 * C);
    op_linear_bwd(dev, dx_x + r0 * C, grad_at(io, w), grad_at(io, w + 4 * C * C), dpost + r0 * 4 * C, X + r0 * C, param_at(io, w), wdt,
                  (int)n, Cn, 4 * Cn, beta);
  }
  trace_end(NULL);
  trace_begin("moe dispatch backward");
  /* the dispatch's backward: d rows home (--ep: the all-to-all back), then summed per token */
  float *dtok = dx_x; /* the input gradients in the send layout: alone, the experts' rows are */
  if (c->ep > 1) {
    to_tokens(c, mu, dev, dsend, dx_x, send_rows, recv_src, "moe dispatch backward");
    dtok = dsend;
    c->a2a_formula += a2a_bytes(c, send_rows, recv_src);
  }
  float *dln2 = grow(&c->dln2, "moe d ln2", dev, 2 * BT * C), *dln2r = dln2 + BT * C;
  const int *slot = dev_ints(c, dev, mu->slot, BT * k, IX_SLOT);
  op_rows_combine(dev, dln2, dtok, slot, NULL, BT, k, Cn, 0.0f);
  trace_end(NULL);
  /* the gates' gradient, then the router's: softmax backward with Switch's aux term on the host */
  float *dg = grow(&c->dg, "moe d gates", dev, BT * k);
  op_rows_dot(dev, dg, dy, eo, slot, BT, k, Cn);
  float *dgh = xmalloc((size_t)(BT * k + 2 * BT * E) * sizeof(float), "moe router backward (host)");
  float *dp = dgh + BT * k, *dl = dp + BT * E;
  dev_memcpy(DEV_CPU, dgh, dev, dg, (size_t)(BT * k) * sizeof(float));
  /* aux = α·E·Σ_e f_e·P_e per micro-batch, weighted T/(B·S) into the mean over the global batch:
   * ∂/∂p_te = α·E·f_e / (B·S), × the loss scale (fp16) */
  double as = c->aux * E * trainer_loss_scale(c->t) / ((double)c->t->cfg->batch * c->S);
  for (int64_t t = 0; t < BT; t++) {
    float *d = dp + t * E, *pr = mu->probs + t * E, *o = dl + t * E, dot = 0;
    for (int e = 0; e < E; e++) d[e] = (float)(as * mu->f[e]);
    for (int j = 0; j < k; j++) d[mu->ids[t * k + j]] += dgh[t * k + j];
    for (int e = 0; e < E; e++) dot += pr[e] * d[e];
    for (int e = 0; e < E; e++) o[e] = pr[e] * (d[e] - dot);
  }
  /* the step's statistics, here (once per micro-batch: a --recompute forward runs twice): the loads
   * before capacity, the drops, and the aux loss α·E·Σ_e f_e·P_e */
  double aux = 0;
  for (int e = 0; e < E; e++) {
    double P = 0;
    for (int64_t t = 0; t < BT; t++) P += mu->probs[t * E + e];
    mu->load_step[e] += mu->load_now[e];
    aux += mu->f[e] * P / (double)BT;
  }
  for (int64_t i = 0; i < BT * k; i++) mu->dropped_step += mu->slot[i] < 0;
  mu->chosen_step += (double)(BT * k);
  c->aux_sum += c->aux * E * aux, c->aux_n += 1;
  float *dlog = grow(&c->logits, "moe router logits", dev, BT * E);
  dev_memcpy(dev, dlog, DEV_CPU, dl, (size_t)(BT * E) * sizeof(float));
  free(dgh);
  op_linear_bwd(dev, dln2r, grad_at(io, c->D), NULL, dlog, ln2, param_at(io, c->D), wdt, (int)BT, Cn, E, beta);
  op_add(dev, dln2, dln2r, DT_F32, BT * C);
  if (c->gather) { /* --tp: d ln2 of every rank's rows (the router's weight gradient stays a partial sum: ep_tp.c) */
    float *whole = grow(&c->ys, "moe rows (tp)", dev, BTall * C);
    comm_all_gather(c->tp, dln2, whole, BTall * C, DT_F32);
    dln2 = whole;
  }
  float *work = grow(&c->work, "moe attention scratch", dev, gpt_block_scratch_numel(&kb, io->B));
  gpt_block_attn_backward(&kb, io, dln2, work);
}

/* ---- the model's table: dense units are gpt.c's ---------------------------------------------- */
/* The base model's view of m (gpt.c's, or tp_gpt.c's split: its own ctx) for a dense unit. */
static model_t base_of(const model_t *m) {
  model_t b = *m;
  b.fns = ctx_of(m)->base.fns, b.ctx = ctx_of(m)->base.ctx;
  return b;
}
static void moe_forward(const model_t *m, int u, const unit_io_t *io) {
  if (ctx_of(m)->u[u].on) moe_block_forward(m, u, io);
  else {
    model_t b = base_of(m);
    b.fns->forward(&b, u, io);
  }
}
static void moe_backward(const model_t *m, int u, const unit_io_t *io) {
  if (ctx_of(m)->u[u].on) moe_block_backward(m, u, io);
  else {
    model_t b = base_of(m);
    b.fns->backward(&b, u, io);
  }
}
static double moe_loss(const model_t *m, int b, const float *logits, const int *targets, float *dlogits, float scale) {
  model_t bm = base_of(m); /* --tp: the vocab-parallel cross-entropy (tp_gpt.c) */
  return bm.fns->loss(&bm, b, logits, targets, dlogits, scale);
}
static void moe_free_ctx(model_t *m) {
  moe_gpt_t *c = m->ctx;
  if (!c) return;
  if (c->base.ctx) {
    model_t b = base_of(m);
    if (b.fns->free_ctx) b.fns->free_ctx(&b);
    c->base.ctx = NULL;
  }
  if (c->xg) comm_finalize(c->xg), c->xg = NULL; /* --tp's groups, before the EP group they were split from */
  if (c->tp) comm_finalize(c->tp), c->tp = NULL;
}

/* Initial values of the FULL unit u (every expert), as moe.h says: pure in (seed, u, index). */
static void moe_init_full(const moe_gpt_t *c, const model_t *m, uint64_t seed, int u, float *dst) {
  int64_t C = c->C;
  gpt_block_layout_t l = gpt_block_layout((int)C);
  model_t dense = *m; /* gpt_init_unit reads units[u]: the dense block's layout, unpadded */
  dense.fns = &model_gpt_fns;
  dense.units = xcalloc((size_t)m->n_units, sizeof(unit_t), "moe init (dense units)");
  dense.units[u] = (unit_t){.numel = l.numel, .padded = l.numel};
  float *blk = xmalloc((size_t)l.numel * sizeof(float), "moe init (dense block)");
  model_gpt_fns.init_unit(&dense, seed, u, blk);
  free(dense.units);
  memcpy(dst, blk, (size_t)c->Df * sizeof(float)); /* ln1 .. ln2: the dense block's */
  for (int64_t i = 0; i < c->R; i++) dst[c->Df + i] = 0.02f * rng_normal(seed, MOE_ROUTER_STREAM + (uint64_t)u, (uint64_t)i);
  double rstd = 0.02 / sqrt(2.0 * m->gpt.n_layer);
  for (int e = 0; e < c->E; e++) {
    float *x = dst + c->Df + c->R + (int64_t)e * c->X;
    if (e == 0) { /* expert 0: the dense MLP's values */
      memcpy(x, blk + l.fcw, (size_t)c->X * sizeof(float));
      continue;
    }
    uint64_t st = GPT_STREAM + (uint64_t)u + ((uint64_t)e << MOE_EXPERT_STREAM);
    for (int64_t i = 0; i < c->X; i++) x[i] = 0.0f;
    for (int64_t i = 0; i < 4 * C * C; i++) x[i] = 0.02f * rng_normal(seed, st, (uint64_t)(l.fcw + i));
    for (int64_t i = 0; i < 4 * C * C; i++)
      x[4 * C * C + 4 * C + i] = (float)rstd * rng_normal(seed, st, (uint64_t)(l.fcprojw + i));
  }
  free(blk);
}

static void moe_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  const moe_gpt_t *c = ctx_of(m);
  if (!c->u[u].on) {
    model_t b = base_of(m);
    b.fns->init_unit(&b, seed, u, dst);
    return;
  }
  float *full = xmalloc((size_t)(c->Df + c->R + (int64_t)c->E * c->X) * sizeof(float), "moe init (full unit)");
  moe_init_full(c, m, seed, u, full);
  moe_unit_to_local(m, u, full, dst);
  for (int64_t i = m->units[u].numel; i < m->units[u].padded; i++) dst[i] = 0.0f;
  free(full);
}

/* FLOPs per sample: the GPT's, with each MoE block's MLP k times (k experts per token) + the router. */
static double moe_flops(const model_t *m) {
  const moe_gpt_t *c = ctx_of(m);
  model_t b = base_of(m); /* --tp: the split model's share; a MoE block's experts then run 1/T of the tokens here */
  double T = m->gpt.seq_len, C = c->C, f = b.fns->flops_per_sample(&b);
  for (int u = 1; u < m->n_units - 1; u++)
    if (c->u[u].on) f += T * ((c->k - 1) * 16.0 * C * C + 2.0 * C * c->E) / c->T;
  return f;
}

static const model_fns_t moe_gpt_fns = {.name = "gpt-moe", .init_unit = moe_init_unit, .forward = moe_forward,
                                        .backward = moe_backward, .flops_per_sample = moe_flops};

/* ---- setup --------------------------------------------------------------------------------------- */
void moe_setup(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  model_t *m = &t->model;
  if (m->fns != &model_gpt_fns) die("error: --moe: the experts replace the GPT's MLPs (--model gpt)");
  moe_gpt_t *c = xcalloc(1, sizeof *c, "moe");
  c->t = t, c->E = cfg->moe, c->k = cfg->topk, c->every = cfg->moe_every, c->cf = cfg->capacity_factor;
  c->aux = cfg->aux_loss_coeff, c->rate = cfg->router_bias_rate;
  c->aux_global = cfg->aux_loss_scope && strcmp(cfg->aux_loss_scope, "global") == 0;
  c->g = cfg->ep > 1 ? t->group_comm : NULL;
  c->ep = c->g ? comm_world(c->g) : 1, c->er = c->g ? comm_rank(c->g) : 0, c->El = c->E / c->ep;
  gpt_block_layout_t l = gpt_block_layout(m->gpt.n_embd);
  c->C = m->gpt.n_embd, c->S = m->gpt.seq_len, c->Df = l.fcw, c->R = (int64_t)c->E * c->C, c->X = l.numel - l.fcw;
  c->T = 1, c->D = c->Df, c->kb = gpt_block_whole(m->gpt);
  if (c->g && cfg->tp > 1) { /* --tp T inside the EP group: the GPT split over its T consecutive ranks first */
    int T = cfg->tp, gr = comm_rank(c->g);
    c->tp = comm_split(c->g, gr / T, gr % T);  /* the attention's TP group */
    c->xg = comm_split(c->g, gr % T, gr / T);  /* the group's ranks with my TP index: data-parallel for it */
    c->T = T, c->tr = gr % T, c->gather = !cfg->sp;
    if (cfg->sp) tp_sp_transform.split(m, c->tp); /* --sp: the LayerNorm/residual regions along the sequence */
    else tp_split_model(m, c->tp);
    c->kb = tp_gpt_attn_block(m), c->D = tp_gpt_attn_numel(m);
  }
  c->base = *m; /* its fns and ctx: the dense units' code (ctx owned by the base: moe_free_ctx) */
  c->u = xcalloc((size_t)m->n_units, sizeof(moe_unit_t), "moe units");
  gpt_block_t kb = c->kb;
  /* rows per sample the saved buffer holds: the send layout's (capacity: ≤ cf·S·k + E; dropless S·k; with
   * --tp each rank routes 1/T of the tokens) and the experts' (capacity: the same; dropless: in the worst
   * case every token of the group here) */
  int64_t Sk = (c->S * c->k + c->T - 1) / c->T, rs = c->cf > 0 ? (int64_t)ceil(c->cf * c->S * c->k / c->T) + c->E : Sk;
  int64_t rx = c->cf > 0 ? rs : Sk * c->ep;
  for (int u = 1; u < m->n_units - 1; u++) {
    int blk = u - 1;
    if (blk % c->every != c->every - 1) continue;
    moe_unit_t *mu = &c->u[u];
    mu->on = 1;
    mu->counts = xcalloc((size_t)c->E, sizeof(int64_t), "moe counts");
    mu->f = xcalloc((size_t)c->E, sizeof(double), "moe f");
    mu->load_now = xcalloc((size_t)c->E, sizeof(double), "moe loads (micro-batch)");
    mu->load_step = xcalloc((size_t)c->E, sizeof(double), "moe loads");
    mu->recv_rows = xcalloc((size_t)(c->ep * c->El), sizeof(int64_t), "moe recv rows");
    if (c->rate > 0) mu->bias = xcalloc((size_t)c->E, sizeof(float), "moe bias");
    m->units[u].numel = c->D + c->R + (int64_t)c->El * c->X;
    m->units[u].saved_numel = gpt_block_attn_saved(&kb) + rx * 9 * c->C + rs * c->C;
  }
  c->fns = moe_gpt_fns;
  c->fns.free_ctx = moe_free_ctx;
  if (c->base.fns->loss) c->fns.loss = moe_loss;
  m->fns = &c->fns;
  m->ctx = c;
  model_layout(m);
  /* --ep with --accum > 1: the dense gradients are summed over the group once per step, from the step's
   * sum (ep.c): every strategy then reduces once per step too (no_sync: ZeRO-2/3 keep the full gradient
   * through the step, + one Ψ of gradients; their formula says so) */
  if (c->ep > 1 && cfg->accum > 1) t->no_sync = 1;
  gpt_moe_params_t p = gpt_moe_count_params(m->gpt, c->E, c->k, c->every);
  if (c->g && trainer_prints(t)) {
    printf("ep: expert-parallel groups of %d consecutive ranks (the grid's tp column above), %d of the %d experts of each "
           "MoE block per rank; the strategy on the D = %d ranks that hold the same experts\n", c->ep, c->El, c->E, t->world);
    if (c->tp)
      printf("ep: --tp %d inside each EP group: %d consecutive ranks split the attention's heads, the embedding and the "
             "head and read the same samples (%d slices of the batch per group); at a MoE block each routes 1/%d of "
             "their tokens%s\n", c->T, c->T, c->ep / c->T, c->T,
             c->gather ? "" : " (--sp: its own positions of every sample, nothing gathered)");
    fflush(stdout);
  }
  trainer_report_extra(t, "moe_experts", c->E);
  trainer_report_extra(t, "moe_topk", c->k);
  trainer_report_extra(t, "moe_params_total", (double)p.total);
  trainer_report_extra(t, "moe_params_active", (double)p.active);
  trainer_report_extra(t, "moe_params_expert", (double)p.expert);
}

/* ---- what ep.c asks ------------------------------------------------------------------------- */
int64_t moe_unit_dense(const model_t *m, int u) {
  const moe_gpt_t *c = ctx_of(m);
  return c->u[u].on ? c->D + c->R : m->units[u].numel;
}
int64_t moe_unit_router(const model_t *m, int u) {
  const moe_gpt_t *c = ctx_of(m);
  return c->u[u].on ? c->D : -1;
}
comm_t *moe_group(const model_t *m) { return ctx_of(m)->g; }
comm_t *moe_tp_group(const model_t *m) { return ctx_of(m)->tp; }
comm_t *moe_xg_group(const model_t *m) { return ctx_of(m)->xg; }
model_t moe_base(const model_t *m) { return base_of(m); }
int64_t moe_full_unit_numel(const model_t *m, int u) {
  const moe_gpt_t *c = ctx_of(m);
  if (c->u[u].on) return c->Df + c->R + (int64_t)c->E * c->X;
  if (!c->tp) return m->units[u].numel;
  model_t b = base_of(m);
  return tp_full_unit_numel(&b, u);
}
int64_t moe_full_numel(const model_t *m) {
  int64_t n = 0;
  for (int u = 0; u < m->n_units; u++) n += moe_full_unit_numel(m, u);
  return n;
}
void moe_unit_to_local(const model_t *m, int u, const float *full, float *local) {
  const moe_gpt_t *c = ctx_of(m);
  if (c->tp) {
    model_t b = base_of(m);
    tp_gpt_attn_map(&b, c->tr, (float *)full, local, 1); /* full → local: full is only read */
  } else memcpy(local, full, (size_t)c->Df * sizeof(float));
  memcpy(local + c->D, full + c->Df, (size_t)c->R * sizeof(float));
  memcpy(local + c->D + c->R, full + c->Df + c->R + (int64_t)c->er * c->El * c->X, (size_t)(c->El * c->X) * sizeof(float));
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
  moe_gpt_t *c = t->model.ctx;
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
  c->last_ratio = nm ? ratio / nm : 0, c->last_drop = chosen > 0 ? drop / chosen : 0;
  c->drop_total += drop, c->chosen_total += chosen;
  double aux = p[1] > 0 ? p[0] / p[1] * nm : 0; /* the step's aux loss: mean per block × the blocks */
  c->aux_sum = c->aux_n = 0;
  int s = t->step;
  if (s < MOE_STATS_STEPS) c->load_ratio[s] = c->last_ratio, c->drop_rate[s] = c->last_drop;
  c->last_aux = aux;
  free(v);
  if (c->rate > 0) { /* the bias must be the same bits on every rank: checked, not assumed */
    double h[2] = {(double)bias_hash(c, U), -(double)bias_hash(c, U)};
    comm_ctl_all_reduce_f64(t->world_comm, h, 2, REDOP_MAX);
    if (h[0] != -h[1]) die_on_rank("moe: step %d: the router bias differs between ranks (hash %.0f vs %.0f)", s, h[0], -h[1]);
    c->bias_hash = (uint64_t)h[0];
  }
}

/* ---- the end-of-run lines ---------------------------------------------------------------------- */

/* This rank's expert and dense elements of what it keeps (the strategy's layout: the own pieces'
 * fp32 states, the held working params) beside the formula. */
void moe_report(trainer_t *t) {
  moe_gpt_t *c = t->model.ctx;
  const model_t *m = &t->model;
  int steps = trainer_steps_run(t), U = m->n_units, nm = 0;
  for (int u = 0; u < U; u++) nm += c->u[u].on;
  double own[2] = {0, 0}, held[2] = {0, 0}; /* [dense, expert] */
  int copies = 1; /* DDP: every rank of the expert group keeps a whole copy (its layout says replicated) */
  for (int u = 0; u < U; u++) {
    unit_layout_t lay = {0};
    t->strategy->layout(t, u, &lay);
    if (lay.replicated) copies = t->world;
    int64_t d = moe_unit_dense(m, u);
    int64_t o0 = lay.own_off, o1 = lay.own_off + lay.own_numel, h0 = lay.held_off, h1 = lay.held_off + lay.held_numel;
    own[0] += (double)((o1 < d ? o1 : d) - (o0 < d ? o0 : d)), own[1] += (double)((o1 > d ? o1 : d) - (o0 > d ? o0 : d));
    held[0] += (double)((h1 < d ? h1 : d) - (h0 < d ? h0 : d)), held[1] += (double)((h1 > d ? h1 : d) - (h0 > d ? h0 : d));
  }
  gpt_moe_params_t p = gpt_moe_count_params(m->gpt, c->E, c->k, c->every);
  double exp_rank = (double)p.expert / c->ep; /* this rank's experts: E/P_E of every MoE block */
  double dense_rank = (double)gpt_moe_dense_rank(m->gpt, c->E, c->every, c->T, tp_part_numel(m->gpt.vocab, c->T, c->tr));
  comm_counters_t k = {0};
  if (c->g) comm_wait_all(c->g), k = comm_counters(c->g);
  double a2a = (double)k.sent[CO_ALL_TO_ALL] / steps;
  trainer_report_extra(t, "moe_drop_rate", c->chosen_total > 0 ? c->drop_total / c->chosen_total : 0);
  trainer_report_extra(t, "moe_load_max_over_mean_last", c->last_ratio);
  trainer_report_extra(t, "moe_aux_loss_last", c->last_aux);
  for (int s = 0; s < MOE_STATS_STEPS && s < steps; s++) {
    char key[32];
    snprintf(key, sizeof key, "moe_load_ratio_%d", s);
    trainer_report_extra(t, key, c->load_ratio[s]);
  }
  trainer_report_extra(t, "moe_expert_params_rank", exp_rank);
  trainer_report_extra(t, "moe_expert_own_rank", own[1]);
  trainer_report_extra(t, "moe_dense_own_rank", own[0]);
  trainer_report_extra(t, "moe_a2a_bytes_per_step", a2a);
  trainer_report_extra(t, "moe_a2a_bytes_formula", c->a2a_formula / steps);
  if (c->rate > 0) trainer_report_extra(t, "moe_bias_hash", (double)c->bias_hash);
  /* bytes of fp32 state per owned parameter: the weight (or bf16's master) and the optimizer's states.
   * ZeRO cuts each unit's flat range into D pieces, so one rank's piece of a MoE block may be mostly
   * dense or mostly experts: the D ranks of an expert group together hold each once (+ padding) */
  double per = 4.0 * (1 + (t->cfg->optimizer == OPT_ADAMW ? 2 : 1)), grp[2] = {own[0], own[1]};
  comm_ctl_all_reduce_f64(t->comm, grp, 2, REDOP_SUM);
  trainer_report_extra(t, "moe_expert_state_bytes_group", grp[1] * per);
  trainer_report_extra(t, "moe_expert_state_bytes_formula", copies * exp_rank * per);
  trainer_report_extra(t, "moe_dense_state_bytes_group", grp[0] * per);
  trainer_report_extra(t, "moe_dense_state_bytes_formula", copies * dense_rank * per);
  if (!trainer_prints(t)) return;
  printf("moe: %d of %d blocks MoE, E=%d experts (4C MLPs), top-%d, %s; Ψ total %lld, active per token %lld (experts "
         "%lld)\n", nm, m->gpt.n_layer, c->E, c->k,
         c->cf > 0 ? "capacity" : "dropless", (long long)p.total, (long long)p.active, (long long)p.expert);
  if (c->cf > 0)
    printf("moe: capacity factor %.2f: %.0f rows per expert and micro-batch; choices dropped %.4f of %.0f (they keep "
           "their residual)\n", c->cf, (double)moe_capacity(c->cf, t->local_batch * c->S, c->k, c->E),
           c->chosen_total > 0 ? c->drop_total / c->chosen_total : 0, c->chosen_total);
  printf("moe: load max/mean over the experts (mean over the MoE blocks): step 0 %.3f, last %.3f; aux loss last step "
         "%.6f (alpha %g)%s\n", c->load_ratio[0], c->last_ratio, c->last_aux, c->aux,
         c->rate > 0 ? "; router bias: the same bits on every rank (checked each step)" : "");

  printf("moe: fp32 states (weights + optimizer, %.0f B per parameter): the %d rank%s holding the same experts keep%s experts "
         "%.0f B, dense %.0f B (formula: %sE/P_E = %d/%d of the %lld expert parameters = %.0f B, the %lld dense%s = %.0f B; "
         "measured includes ZeRO's padding); this rank experts %.0f B, dense %.0f B\n", per, t->world,
         t->world > 1 ? "s" : "", t->world > 1 ? "" : "s", grp[1] * per, grp[0] * per, copies > 1 ? "D whole copies (DDP) of " : "", c->El, c->E,
         (long long)p.expert, copies * exp_rank * per, (long long)p.dense, c->tp ? " (this TP rank's part of them)" : "",
         copies * dense_rank * per, own[1] * per,
         own[0] * per);
  printf("moe: working params held between steps: experts %.0f, dense %.0f parameters\n", held[1], held[0]);
  if (c->g)
    printf("moe: all-to-all bytes sent per rank per step %.0f  (formula %.0f: 4 exchanges (dispatch, combine and their "
           "backwards) x rows for other ranks' experts x C x 4 B%s)\n", a2a, c->a2a_formula / steps,
           c->cf > 0 ? ", rows = (P_E-1) x E/P_E x capacity" : ", rows from this run's routing; + the counts, E x 4 B");
  fflush(stdout);
}

/* --ep 1: the experts on every rank, no group (ep.h's transforms with --ep P_E > 1). */
const model_transform_t moe_transform = {
    .name = "moe",
    .setup = moe_setup,
    .step_end = moe_step_end,
    .report = moe_report,
};

/* ---- the flags ------------------------------------------------------------------------------- */
int moe_check_args(const train_cfg_t *cfg) {
  char v[64];
  if (strcmp(cfg->model_kind, "gpt") != 0) return args_error("--model", cfg->model_kind, "must be gpt: the experts replace the GPT's MLPs");
  if (cfg->topk > cfg->moe) {
    snprintf(v, sizeof v, "%d", cfg->topk);
    return args_error("--topk", v, "must be between 1 and --moe (%d): k distinct experts per token", cfg->moe);
  }
  if (cfg->moe_every > cfg->gpt.n_layer) {
    snprintf(v, sizeof v, "%d", cfg->moe_every);
    return args_error("--moe-every", v, "must be between 1 and the blocks (--n-layer %d): no block would be MoE",
                      cfg->gpt.n_layer);
  }
  int world = args_env_world();
  if (cfg->ep > 1 && (world % cfg->ep != 0 || cfg->moe % cfg->ep != 0)) {
    snprintf(v, sizeof v, "%d", cfg->ep);
    return args_error("--ep", v, "must divide the ranks (%d) and the experts (--moe %d): P_E consecutive ranks hold E/P_E "
                      "experts each", world, cfg->moe);
  }
  if (cfg->tp > 1) { /* TP on the attention inside each EP group (ep_tp.c) */
    snprintf(v, sizeof v, "%d", cfg->tp);
    if (cfg->ep % cfg->tp != 0)
      return args_error("--tp", v, "must divide --ep (%d): T consecutive ranks of each EP group split the attention (for "
                        "--tp alone: chapter 06)", cfg->ep);
    if (cfg->gpt.n_head % cfg->tp != 0)
      return args_error("--tp", v, "must divide the heads (--n-head %d): each rank a whole number of heads", cfg->gpt.n_head);
    if (cfg->gpt.vocab < cfg->tp)
      return args_error("--tp", v, "must be at most the vocabulary (%d rows: every rank some)", cfg->gpt.vocab);
    int64_t b = cfg->batch / ((int64_t)(world / cfg->tp) * cfg->accum); /* samples per micro-batch of a TP group */
    if (b * cfg->gpt.seq_len % cfg->tp != 0)
      return args_error("--tp", v, "must divide the tokens of a micro-batch (%lld x %d): each TP rank routes 1/T of them",
                        (long long)b, cfg->gpt.seq_len);
    if (cfg->eval_every)
      return args_error("--eval-every", NULL, "not with --tp (the vocab-parallel head keeps V/T of each row: validation needs "
                        "whole logits, as in chapter 06)");
  }
  if (cfg->ep > 1 && cfg->sample > 0) {
    snprintf(v, sizeof v, "%d", cfg->sample);
    return args_error("--sample", v, "must be 0 with --ep > 1 (generation runs on one rank's copy of the model)");
  }
  if (cfg->router_bias_rate > 0 && cfg->resume) {
    snprintf(v, sizeof v, "%g", cfg->router_bias_rate);
    return args_error("--router-bias-rate", v, "must be 0 with --resume: the router bias is not in the checkpoint (not built)");
  }
  return 0;
}
