/* moe_model.c — chapter 12's MoE GPT as a model (moe.h; notes/12-experts.md): every --moe-every m-th
 * block of the GPT becomes a MoE block (moe.c runs it), the others stay gpt.c's (or tp_gpt.c's with
 * --tp inside the EP group); the units' layout and initial values, the setup (the transform's), and
 * what ep.c and ep_tp.c ask of the model. */
#include "moe_state.h" // moe_gpt_t, moe_unit_t, moe_stats_t, moe_block_forward, moe_block_backward
#include "moe.h"      // moe_setup, moe_unit_*, moe_full_*, moe_base
#include "tp.h"       // tp_split_model, tp_sp_transform, tp_gpt_attn_*, tp_full_unit_numel
#include "check.h"    // die, xcalloc, xmalloc
#include "comm.h"     // comm_split, comm_finalize, comm_world, comm_rank
#include "data.h"     // rng_normal
#include "gpt.h"      // model_gpt_fns, gpt_block_*, gpt_moe_count_params
#include "tensor.h"   // tensor_free
#include "train.h"    // trainer_t, train_cfg_t, trainer_report_extra, trainer_prints
#include <math.h>     // ceil, sqrt
#include <stdio.h>    // printf
#include <stdlib.h>   // free
#include <string.h>   // memcpy, strcmp

#define GPT_STREAM 0x2000u     /* gpt.c's init stream of unit u: GPT_STREAM + u (expert 0 = the dense MLP) */
#define MOE_EXPERT_STREAM 20   /* expert e > 0 of unit u: GPT_STREAM + u + (e << 20) */
#define MOE_ROUTER_STREAM 0x7000u

/* ---- the model's table: dense units are gpt.c's ---------------------------------------------- */
/* The base model's view of m (gpt.c's, or tp_gpt.c's split: its own ctx) for a dense unit. */
model_t moe_base(const model_t *m) {
  model_t b = *m;
  b.fns = moe_ctx(m)->base.fns, b.ctx = moe_ctx(m)->base.ctx;
  return b;
}
static void moe_forward(const model_t *m, int u, const unit_io_t *io) {
  if (moe_ctx(m)->u[u].on) moe_block_forward(m, u, io);
  else {
    model_t b = moe_base(m);
    b.fns->forward(&b, u, io);
  }
}
static void moe_backward(const model_t *m, int u, const unit_io_t *io) {
  if (moe_ctx(m)->u[u].on) moe_block_backward(m, u, io);
  else {
    model_t b = moe_base(m);
    b.fns->backward(&b, u, io);
  }
}
/* The backward in two halves (chapter 07's zero-bubble schedules and DualPipeV, model.h): a dense unit
 * the base's; a MoE block keeps its backward whole in B — its weights' gradients too (with the beta its
 * B was given, in micro-batch order as W would add them: the same bits) — and its W has nothing left. */
static void moe_backward_input(const model_t *m, int u, const unit_io_t *io) {
  if (moe_ctx(m)->u[u].on) moe_block_backward(m, u, io);
  else {
    model_t b = moe_base(m);
    b.fns->backward_input(&b, u, io);
  }
}
static void moe_backward_weight(const model_t *m, int u, const unit_io_t *io) {
  if (moe_ctx(m)->u[u].on) return; /* written by its B */
  model_t b = moe_base(m);
  b.fns->backward_weight(&b, u, io);
}
static double moe_loss(const model_t *m, int b, const float *logits, const int *targets, float *dlogits,
                       float scale) {
  model_t bm = moe_base(m); /* --tp: the vocab-parallel cross-entropy (tp_gpt.c) */
  return bm.fns->loss(&bm, b, logits, targets, dlogits, scale);
}
static void moe_free_ctx(model_t *m) {
  moe_gpt_t *c = m->ctx;
  if (!c) return;
  if (c->base.ctx) {
    model_t b = moe_base(m);
    if (b.fns->free_ctx) b.fns->free_ctx(&b);
    c->base.ctx = NULL;
  }
  /* --tp's groups, before the EP group they were split from */
  if (c->xg_comm) comm_finalize(c->xg_comm), c->xg_comm = NULL;
  if (c->tp_comm) comm_finalize(c->tp_comm), c->tp_comm = NULL;
  tensor_t *scratch[] = {&c->logits, &c->xs, &c->recv, &c->eo_x, &c->dsend, &c->dx_x, &c->dpost, &c->dln2,
                         &c->dln2r, &c->dg, &c->work, &c->idx, &c->ys, &c->rows_rc, &c->sh_out, &c->sh_d};
  for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) tensor_free(scratch[i]);
  for (int i = 0; i < MOE_SCRATCH; i++) tensor_free(&c->spare.t[i]); /* --fb-overlap's (moe_swap_scratch) */
  for (int u = 0; u < m->n_units; u++) { /* each MoE block's host state */
    moe_unit_t *mu = &c->u[u];
    for (int i = 0; i < mu->n_routes; i++) { /* the micro-batches' routes (moe.c) */
      moe_route_t *r = &mu->routes[i];
      free(r->probs), free(r->ids), free(r->slot), free(r->gates), free(r->row_tok), free(r->row_gate);
      free(r->counts), free(r->f), free(r->load_now), free(r->recv_rows), free(r->perm_x), free(r->perm_b);
      tensor_free(&r->rows);
    }
    free(mu->routes), free(mu->load_step), free(mu->bias);
  }
  free(c->u);
  free(c);
  m->ctx = NULL;
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
  memcpy(dst, blk, (size_t)c->attn_full * sizeof(float)); /* ln1 .. ln2: the dense block's */
  for (int64_t i = 0; i < c->router_numel; i++)
    dst[c->attn_full + i] = 0.02f * rng_normal(seed, MOE_ROUTER_STREAM + (uint64_t)u, (uint64_t)i);
  double rstd = 0.02 / sqrt(2.0 * m->gpt.n_layer);
  /* the shared experts, then the routed ones: expert e's stream GPT_STREAM + u + (e << 20), shared s's
   * that of expert E + s; each MLP drawn at the dense block's indices (fc W, fcproj W; zero biases) */
  for (int e = 0; e < c->shared + c->E; e++) {
    int id = e < c->shared ? c->E + e : e - c->shared; /* the stream's expert number */
    float *x = dst + c->attn_full + c->router_numel + (int64_t)e * c->expert_numel;
    if (id == 0 && c->F == 4 * C) { /* routed expert 0 of the dense width: the dense MLP's values */
      memcpy(x, blk + l.fcw, (size_t)c->expert_numel * sizeof(float));
      continue;
    }
    uint64_t st = GPT_STREAM + (uint64_t)u + ((uint64_t)id << MOE_EXPERT_STREAM);
    int64_t F = c->F;
    for (int64_t i = 0; i < c->expert_numel; i++) x[i] = 0.0f;
    for (int64_t i = 0; i < F * C; i++) x[i] = 0.02f * rng_normal(seed, st, (uint64_t)(l.fcw + i));
    for (int64_t i = 0; i < C * F; i++)
      x[F * C + F + i] = (float)rstd * rng_normal(seed, st, (uint64_t)(l.fcprojw + i));
  }
  free(blk);
}

static void moe_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  const moe_gpt_t *c = moe_ctx(m);
  if (!c->u[u].on) {
    model_t b = moe_base(m);
    b.fns->init_unit(&b, seed, u, dst);
    return;
  }
  float *full = xmalloc((size_t)moe_full_unit_numel(m, u) * sizeof(float), "moe init (full unit)");
  moe_init_full(c, m, seed, u, full);
  moe_unit_to_local(m, u, full, dst);
  for (int64_t i = m->units[u].numel; i < m->units[u].padded; i++) dst[i] = 0.0f;
  free(full);
}

/* FLOPs per sample: the GPT's, with each MoE block's MLP k times (k experts per token) + the router. */
static double moe_flops(const model_t *m) {
  const moe_gpt_t *c = moe_ctx(m);
  /* --tp: the split model's share; a MoE block's experts run 1/tp of the tokens here */
  model_t b = moe_base(m);
  /* a MoE block: the dense MLP's 16C² per token out; k routed and S shared experts' 4·F·C, the router's
   * 2·C·E in */
  double S = (double)c->S, C = (double)c->C, F = (double)c->F, f = b.fns->flops_per_sample(&b);
  for (int u = 1; u < m->n_units - 1; u++)
    if (c->u[u].on) f += S * ((c->k + c->shared) * 4.0 * F * C - 16.0 * C * C + 2.0 * C * c->E) / c->tp;
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
  c->ep_comm = cfg->ep > 1 ? t->group_comm : NULL;
  c->ep = c->ep_comm ? comm_world(c->ep_comm) : 1, c->ep_rank = c->ep_comm ? comm_rank(c->ep_comm) : 0;
  c->e_local = c->E / c->ep;
  gpt_block_layout_t l = gpt_block_layout(m->gpt.n_embd);
  c->C = m->gpt.n_embd, c->S = m->gpt.seq_len;
  c->F = cfg->moe_ffn > 0 ? cfg->moe_ffn : 4 * c->C, c->shared = cfg->moe_shared;
  c->gate_topk = cfg->gate_norm && strcmp(cfg->gate_norm, "topk") == 0;
  c->attn_full = l.fcw, c->router_numel = (int64_t)c->E * c->C,
  c->expert_numel = gpt_moe_expert_numel(c->C, c->F);
  c->shared_numel = c->shared * c->expert_numel;
  c->tp = 1, c->attn_numel = c->attn_full, c->kb = gpt_block_whole(m->gpt);
  /* --tp T inside the EP group: the GPT split over its T consecutive ranks first */
  if (c->ep_comm && cfg->tp > 1) {
    int T = cfg->tp, gr = comm_rank(c->ep_comm);
    c->tp_comm = comm_split(c->ep_comm, gr / T, gr % T);  /* the attention's TP group */
    /* the group's ranks with my TP index: data-parallel for it */
    c->xg_comm = comm_split(c->ep_comm, gr % T, gr / T);
    c->tp = T, c->tp_rank = gr % T, c->gather = !cfg->sp;
    /* --sp: the LayerNorm/residual regions along the sequence */
    if (cfg->sp) tp_sp_transform.split(m, c->tp_comm);
    else tp_split_model(m, c->tp_comm);
    c->kb = tp_gpt_attn_block(m), c->attn_numel = tp_gpt_attn_numel(m);
  }
  c->base = *m; /* its fns and ctx: the dense units' code (ctx owned by the base: moe_free_ctx) */
  c->u = xcalloc((size_t)m->n_units, sizeof(moe_unit_t), "moe units");
  gpt_block_t kb = c->kb;
  /* with a capacity, rows per sample the saved slot holds for the experts (moe.c's saved_rows): the
   * send layout's ≤ cf·S·k/tp + E, the experts' the same; dropless keeps them in a buffer of its own,
   * sized after routing (a worst case of every token of the group here is never reserved) */
  int64_t rs = c->cf > 0 ? (int64_t)ceil(c->cf * c->S * c->k / c->tp) + c->E : 0, rx = rs;
  c->rows_per_sample = rx * (c->C + 2 * c->F) + rs * c->C;
  /* the shared experts' pre and post of the tokens this rank routes: ⌈S/tp⌉ a sample (moe.c) */
  int64_t shared_saved = (int64_t)c->shared * ((c->S + c->tp - 1) / c->tp) * 2 * c->F;
  for (int u = 1; u < m->n_units - 1; u++) {
    int blk = u - 1;
    if (blk % c->every != c->every - 1) continue;
    moe_unit_t *mu = &c->u[u];
    mu->on = 1;
    mu->load_step = xcalloc((size_t)c->E, sizeof(double), "moe loads");
    if (c->rate > 0) mu->bias = xcalloc((size_t)c->E, sizeof(float), "moe bias");
    m->units[u].numel =
        c->attn_numel + c->router_numel + c->shared_numel + (int64_t)c->e_local * c->expert_numel;
    m->units[u].saved_numel = gpt_block_attn_saved(&kb) + c->rows_per_sample + shared_saved;
    m->units[u].wsaved_numel = 0; /* its B does the whole backward: nothing kept for a W */
  }
  c->fns = moe_gpt_fns;
  c->fns.free_ctx = moe_free_ctx;
  if (c->base.fns->loss) c->fns.loss = moe_loss;
  if (c->base.fns->backward_input && c->base.fns->backward_weight) /* gpt.c's, not TP's split */
    c->fns.backward_input = moe_backward_input, c->fns.backward_weight = moe_backward_weight;
  m->fns = &c->fns;
  m->ctx = c;
  model_layout(m);
  /* --ep with --accum > 1: the dense gradients are summed over the group once per step, from the step's
   * sum (ep.c): every strategy then reduces once per step too (no_sync: ZeRO-2/3 keep the full gradient
   * through the step, + one Ψ of gradients; their formula says so) */
  if (c->ep > 1 && cfg->accum > 1) t->no_sync = 1;
  gpt_moe_params_t p = gpt_moe_count_params(m->gpt, moe_shape_of(c));
  if (c->ep_comm && trainer_prints(t)) {
    printf("ep: expert-parallel groups of %d consecutive ranks (the grid's tp column above), %d of the %d "
           "experts of each "
           "MoE block per rank; the strategy on the D = %d ranks that hold the same experts",
           c->ep, c->e_local, c->E, t->world);
    if (t->dense_comm) printf(", the dense part on all %d ranks (two groups)", comm_world(t->dense_comm));
    printf("\n");
    if (c->tp_comm)
      printf("ep: --tp %d inside each EP group: %d consecutive ranks split the attention's heads, the "
             "embedding and the "
             "head and read the same samples (%d slices of the batch per group); at a MoE block each routes "
             "1/%d of "
             "their tokens%s\n",
             c->tp, c->tp, c->ep / c->tp, c->tp,
             c->gather ? "" : " (--sp: its own positions of every sample, nothing gathered)");
    fflush(stdout);
  }
  trainer_report_extra(t, "moe_experts", c->E);
  trainer_report_extra(t, "moe_topk", c->k);
  trainer_report_extra(t, "moe_params_total", (double)p.total);
  trainer_report_extra(t, "moe_params_active", (double)p.active);
  trainer_report_extra(t, "moe_params_expert", (double)p.expert);
  t->transform_priv = xcalloc(1, sizeof(moe_stats_t), "moe run statistics"); /* the trainer frees it */
}

/* ---- what ep.c asks ------------------------------------------------------------------------- */
int64_t moe_unit_dense(const model_t *m, int u) {
  const moe_gpt_t *c = moe_ctx(m);
  if (m->units[u].numel == 0) return 0; /* a unit of another pipeline stage (trainer_keep_units) */
  return c->u[u].on ? c->attn_numel + c->router_numel + c->shared_numel : m->units[u].numel;
}
int64_t moe_unit_router(const model_t *m, int u) {
  const moe_gpt_t *c = moe_ctx(m);
  return c->u[u].on ? c->attn_numel : -1;
}
comm_t *moe_group(const model_t *m) { return moe_ctx(m)->ep_comm; }
comm_t *moe_tp_group(const model_t *m) { return moe_ctx(m)->tp_comm; }
comm_t *moe_xg_group(const model_t *m) { return moe_ctx(m)->xg_comm; }
int64_t moe_full_unit_numel(const model_t *m, int u) {
  const moe_gpt_t *c = moe_ctx(m);
  if (c->u[u].on) return c->attn_full + c->router_numel + c->shared_numel + (int64_t)c->E * c->expert_numel;
  if (!c->tp_comm) return m->units[u].numel;
  model_t b = moe_base(m);
  return tp_full_unit_numel(&b, u);
}
int64_t moe_full_numel(const model_t *m) {
  int64_t n = 0;
  for (int u = 0; u < m->n_units; u++) n += moe_full_unit_numel(m, u);
  return n;
}
void moe_unit_to_local(const model_t *m, int u, const float *full, float *local) {
  const moe_gpt_t *c = moe_ctx(m);
  if (c->tp_comm) {
    model_t b = moe_base(m);
    tp_gpt_attn_map(&b, c->tp_rank, (float *)full, local, 1); /* full → local: full is only read */
  } else memcpy(local, full, (size_t)c->attn_full * sizeof(float));
  int64_t rs = c->router_numel + c->shared_numel; /* the router and the shared experts: whole */
  memcpy(local + c->attn_numel, full + c->attn_full, (size_t)rs * sizeof(float));
  int64_t mine = (int64_t)c->e_local * c->expert_numel; /* this rank's experts: ep_rank's e_local of them */
  memcpy(local + c->attn_numel + rs, full + c->attn_full + rs + c->ep_rank * mine,
         (size_t)mine * sizeof(float));
}

