/* cp_gpt.c — the GPT with context parallelism (cp.h; notes/10-long-sequences.md, Part 2): every
 * rank of a CP group holds n = S/C positions of each sequence, the weights whole (replicated: the
 * strategy sums their gradients over the CP group with the data-parallel ranks), and runs every
 * per-token layer (embedding, LayerNorms, qkv, proj, MLP, head, loss) on its own positions; the
 * attention is cp.c's ring, or with --cp-comm a2a ulysses.c's all-to-alls around the ordinary attention,
 * or with --cp-a2a A the 2-D hybrid (ulysses.h's cp_usp_*: all-to-alls inside groups of A, the ring
 * across the C/A groups).
 *
 * The loop is the data-parallel one over all C·D ranks: it hands each rank b = batch/(C·D·accum)
 * whole sequences ("loop samples" of S tokens). The CP group trades them: an all-gather of the
 * token ids (and, at the loss, of the targets) gives every rank its positions of all C·b
 * sequences, so a rank's activations are R = C·b rows of n positions — b·S tokens, the buffers the
 * loop sized — and its loss covers batch/D·S/C tokens, scaled as the loop's 1/(batch·S).
 * What a block saves per loop sample: gpt.h's 15SC + 4S, and the attention's log-sum-exp NH·S
 * instead of the NH·S² probabilities (the ring recomputes scores block by block). */
#include "cp.h"
#include <stdio.h>          // printf, snprintf
#include <stdlib.h>         // free
#include <string.h>         // strcmp, memcpy
#include "args.h"   // args_error, args_env_world
#include "check.h"  // die, xcalloc
#include "gpt.h"    // model_gpt_fns, gpt_block_*, gpt_cp_acts_bytes
#include "ops.h"    // op_linear_bwd, op_fill, op_softmax_xent
#include "ops_gpt.h" // op_embedding_*, op_layernorm_bwd
#include "train.h"  // trainer_t, train_cfg_t, strategy_t, trainer_report_extra
#include "ulysses.h" // cp_ulysses_* (--cp-comm a2a)

typedef struct cp_gpt {
  cp_ring_t g;          /* the ring over this rank's CP group (g.c: owned here); with a2a its layout only */
  cp_ulysses_t *u;      /* --cp-comm a2a or --cp-a2a A > 1: the all-to-all attention (NULL: the ring) */
  cp_ring_t *ring;      /* --cp-a2a A > 1: the hybrid's ring of G = C/A across the groups (its comm owned) */
  comm_t *ga;           /* --cp-a2a A > 1: the group of A this rank's all-to-alls run in (owned) */
  int A;                /* --cp-a2a: the all-to-all group (1: none) */
  const trainer_t *t;
  int S, E, V, NH, C;
  tensor_t tok_all;     /* (C·b, S) int32: the group's sequences (tokens, then targets) */
  tensor_t tok_loc;     /* (R, n) int32: this rank's positions of them, kept for the embedding's backward */
  tensor_t tgt_loc;     /* (R, n) int32: the targets at those positions */
  tensor_t wpe_loc;     /* (n, E) wdt: wpe's rows at this rank's positions; dwpe_loc its gradient */
  tensor_t dwpe_loc;
  tensor_t scratch;     /* the blocks' backward scratch */
} cp_gpt_t;

static const model_fns_t cp_gpt_fns;

static void *grow(tensor_t *t, const char *name, dtype_t dt, int64_t numel) {
  return tensor_grow(t, name, LEDGER_ACTS, dt, DEV_CPU, numel);
}

/* The group's C·b sequences (b·S int32 from this rank) → dst (R, n): this rank's positions. */
static void cp_exchange(cp_gpt_t *c, const int *mine, int b, int *dst) {
  int64_t bs = (int64_t)b * c->S, R = (int64_t)b * c->C;
  int *all = grow(&c->tok_all, "cp sequences (ids)", DT_F32, c->C * bs); /* int32 in 4-byte elements */
  comm_all_gather(c->g.c, mine, all, c->C * bs, DT_F32);                 /* bits moved, nothing added */
  const int *pos = c->g.pos + (int64_t)c->g.r * c->g.n;
  for (int64_t rho = 0; rho < R; rho++)
    for (int i = 0; i < c->g.n; i++) dst[rho * c->g.n + i] = all[rho * c->S + pos[i]];
}

/* wpe's rows at this rank's positions ↔ the local (n, E) table, in wdt. */
static void cp_rows(cp_gpt_t *c, void *full, void *loc, dtype_t wdt, int to_loc) {
  size_t row = (size_t)c->E * dtype_size(wdt);
  const int *pos = c->g.pos + (int64_t)c->g.r * c->g.n;
  for (int i = 0; i < c->g.n; i++) {
    char *f = (char *)full + (size_t)pos[i] * row, *l = (char *)loc + (size_t)i * row;
    memcpy(to_loc ? l : f, to_loc ? f : l, row);
  }
}

static void cp_att_fwd(void *ctx, float *atty, float *att, const float *qkv, int B, int S, int Cr, int NHr) {
  cp_gpt_t *c = ctx;
  if (c->u) cp_ulysses_forward(c->u, atty, att, qkv, B * c->C); /* att: probabilities and q k v of its heads */
  else cp_ring_forward(&c->g, atty, att, qkv, B * c->C); /* att: the log-sum-exp (R, NH, n) */
}
static void cp_att_bwd(void *ctx, float *dqkv, const float *datty, const float *qkv, const float *atty, const float *att,
                       int B, int S, int Cr, int NHr) {
  cp_gpt_t *c = ctx;
  if (c->u) cp_ulysses_backward(c->u, dqkv, datty, att, B * c->C);
  else cp_ring_backward(&c->g, dqkv, datty, qkv, atty, att, B * c->C);
}

/* The attention's mode: the ring, Ulysses (--cp-comm a2a), the hybrid (--cp-a2a A > 1). */
enum { CP_RING, CP_A2A, CP_USP };
/* fp32 the attention keeps per local token: the ring's log-sum-exp NH, Ulysses' NH·S + 3E, the
 * hybrid's NH + 4E (the ring's lse, q k v and the output in the heads' layout). */
static int64_t cp_att_saved(gpt_shape_t s, int mode) {
  return mode == CP_A2A ? cp_ulysses_saved_per_token(s.seq_len, s.n_embd, s.n_head)
       : mode == CP_USP ? cp_usp_saved_per_token(s.n_embd, s.n_head) : s.n_head;
}
static int cp_is_a2a(const train_cfg_t *cfg) { return cfg->cp_comm && strcmp(cfg->cp_comm, "a2a") == 0; }
static int cp_group_a2a(const train_cfg_t *cfg) { return cfg->cp_a2a > 1 ? cfg->cp_a2a : 1; }
static int cp_mode(const train_cfg_t *cfg) { return cp_is_a2a(cfg) ? CP_A2A : cp_group_a2a(cfg) > 1 ? CP_USP : CP_RING; }

/* A block: gpt.h's whole block on b·S tokens (R rows of n positions), the ring (or the
 * all-to-alls) for its attention. */
static gpt_block_t cp_block(cp_gpt_t *c, gpt_shape_t s) {
  gpt_block_t k = gpt_block_whole(s);
  k.hook_ctx = c, k.att_fwd = cp_att_fwd, k.att_bwd = cp_att_bwd;
  k.att_saved = cp_att_saved(s, !c->u ? CP_RING : c->ring ? CP_USP : CP_A2A);
  return k;
}

static void cp_forward(const model_t *m, int u, const unit_io_t *io) {
  cp_gpt_t *c = m->ctx;
  int R = io->B * c->C, n = c->g.n;
  if (u == 0) { /* y (R, n, E) = wte[this rank's tokens] + wpe[its positions] */
    int *tok = grow(&c->tok_loc, "cp local tokens", DT_F32, (int64_t)R * n);
    cp_exchange(c, io->x, io->B, tok);
    void *wl = grow(&c->wpe_loc, "cp wpe rows", io->wdt, (int64_t)n * c->E);
    cp_rows(c, (void *)param_at(io, (int64_t)c->V * c->E), wl, io->wdt, 1);
    op_embedding_fwd(io->dev, io->y, tok, param_at(io, 0), wl, io->wdt, R, n, c->E, c->V);
    return;
  }
  if (u == m->n_units - 1) { /* lnf and the logits: per token, gpt.c's own */
    model_gpt_fns.forward(m, u, io);
    return;
  }
  gpt_block_t k = cp_block(c, m->gpt);
  gpt_block_forward(&k, io);
}

static void cp_backward(const model_t *m, int u, const unit_io_t *io) {
  cp_gpt_t *c = m->ctx;
  int R = io->B * c->C, n = c->g.n, E = c->E, BT = io->B * c->S;
  dtype_t wdt = io->wdt;
  if (u == 0) { /* dwte; dwpe at this rank's rows (the others: 0, or left as they were when accumulating) */
    void *dwpe = grad_at(io, (int64_t)c->V * E), *dl = grow(&c->dwpe_loc, "cp dwpe rows", wdt, (int64_t)n * E);
    if (io->beta != 0.0f) cp_rows(c, dwpe, dl, wdt, 1);
    op_embedding_bwd(io->dev, grad_at(io, 0), dl, io->dy, c->tok_loc.data, wdt, R, n, E, c->V, io->beta);
    if (io->beta == 0.0f) op_fill(io->dev, dwpe, wdt, 0.0f, (int64_t)c->S * E);
    cp_rows(c, dwpe, dl, wdt, 0);
    tensor_free(&c->scratch); /* the last unit of the backward */
    return;
  }
  gpt_block_t k = cp_block(c, m->gpt);
  float *work = grow(&c->scratch, "cp gpt backward scratch", DT_F32, gpt_block_scratch_numel(&k, io->B));
  if (u == m->n_units - 1) { /* gpt.c's head backward, with this file's scratch */
    int64_t nn = (int64_t)BT * E;
    const float *lnf = io->saved, *mean = lnf + nn, *rstd = mean + BT;
    op_linear_bwd(io->dev, work, grad_at(io, 2 * (int64_t)E), NULL, io->dy, lnf, param_at(io, 2 * (int64_t)E), wdt, BT, E, c->V, io->beta);
    if (io->dx) {
      op_fill(io->dev, io->dx, DT_F32, 0.0f, nn);
      op_layernorm_bwd(io->dev, io->dx, grad_at(io, 0), grad_at(io, E), work, io->x, mean, rstd, param_at(io, 0), wdt, BT, E, io->beta);
    }
    return;
  }
  gpt_block_backward(&k, io, work);
}

/* The loss at this rank's positions: the targets trade like the tokens. Scale: the loop's. */
static double cp_loss(const model_t *m, int b, const float *logits, const int *targets, float *dlogits, float scale) {
  cp_gpt_t *c = m->ctx;
  int64_t N = (int64_t)b * c->S; /* = R·n */
  int *tg = grow(&c->tgt_loc, "cp local targets", DT_F32, N);
  cp_exchange(c, targets, b, tg);
  return op_softmax_xent(DEV_CPU, dlogits, logits, tg, (int)N, c->V, scale);
}

static void cp_free_ctx(model_t *m) {
  cp_gpt_t *c = m->ctx;
  if (!c) return;
  tensor_free(&c->tok_all);
  tensor_free(&c->tok_loc);
  tensor_free(&c->tgt_loc);
  tensor_free(&c->wpe_loc);
  tensor_free(&c->dwpe_loc);
  tensor_free(&c->scratch);
  comm_t *g = c->g.c;
  if (c->u) cp_ulysses_free(c->u), free(c->u);
  if (c->ring) { /* the hybrid's two sub-communicators go before the CP group's */
    comm_t *gr = c->ring->c;
    cp_ring_free(c->ring), free(c->ring);
    comm_finalize(gr);
    comm_finalize(c->ga);
  }
  cp_ring_free(&c->g);
  comm_finalize(g);
  free(c);
  m->ctx = NULL;
}

static void cp_init_unit(const model_t *m, uint64_t seed, int u, float *dst) { model_gpt_fns.init_unit(m, seed, u, dst); }
static double cp_flops(const model_t *m) { return model_gpt_fns.flops_per_sample(m); } /* C·n·S = S² per loop sample */

static const model_fns_t cp_gpt_fns = {.name = "gpt", .init_unit = cp_init_unit, .forward = cp_forward,
                                       .backward = cp_backward, .free_ctx = cp_free_ctx, .flops_per_sample = cp_flops,
                                       .loss = cp_loss};

/* ---- the checks, the split, the formulas ---------------------------------------------------- */
int cp_check_args(const train_cfg_t *cfg) {
  char v[32], va[32], why[160];
  int A = cp_group_a2a(cfg);
  snprintf(va, sizeof va, "%d", A);
  if (cfg->cp <= 1 && A > 1) return args_error("--cp-a2a", va, "needs --cp C > 1 (groups of A of the C context-parallel ranks)");
  if (cfg->cp <= 1) return 0;
  snprintf(v, sizeof v, "%d", cfg->cp);
  int world = args_env_world();
  if (strcmp(cfg->model_kind, "gpt") != 0) return args_error("--cp", v, "needs --model gpt (it splits a sequence)");
  if (world % cfg->cp)
    return args_error("--cp", v, "must divide the ranks (%d): D = ranks / C data-parallel groups of C", world);
  if (A > 1 && cp_is_a2a(cfg))
    return args_error("--cp-a2a", va, "is the hybrid of the ring (--cp-comm ring): --cp-comm a2a is the all-to-all over all C");
  if (A > 1 && cp_usp_check(cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp, A, cfg->cp_balance, why, sizeof why)) {
    char ok[96] = ""; /* the A that work with this C, heads and seq_len */
    for (int d = 1, k = 0; d <= cfg->cp && k < 90; d++)
      if (!cp_usp_check(cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp, d, cfg->cp_balance, NULL, 0))
        k += snprintf(ok + k, sizeof ok - k, "%s%d", k ? ", " : "", d);
    return args_error("--cp-a2a", va, "with --cp %d: %s (--seq-len %d, %d heads, --cp-balance %d): allowed %s", cfg->cp, why,
                      cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp_balance, *ok ? ok : "none");
  }
  if (cp_is_a2a(cfg) && cp_ulysses_check(cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp, why, sizeof why)) {
    char ok[96] = "";
    for (int d = 1, k = 0; d <= cfg->gpt.n_head && k < 90; d++)
      if (cfg->gpt.n_head % d == 0 && cfg->gpt.seq_len % d == 0) k += snprintf(ok + k, sizeof ok - k, "%s%d", k ? ", " : "", d);
    return args_error("--cp", v, "with --cp-comm a2a: %s (--seq-len %d, %d heads): allowed %s", why, cfg->gpt.seq_len,
                      cfg->gpt.n_head, ok);
  }
  if (A == 1 && !cp_is_a2a(cfg) && cp_layout_check(cfg->gpt.seq_len, cfg->cp, cfg->cp_balance, why, sizeof why))
    return args_error("--cp", v, "%s (--seq-len %d, --cp-balance %d)", why, cfg->gpt.seq_len, cfg->cp_balance);
  if (cfg->dev == DEV_CUDA)
    return cp_is_a2a(cfg) || A > 1 ? args_error("--cp", v, "the all-to-all attention runs on the CPU only (--device cpu)")
                          : args_error("--cp", v, "the ring attention runs on the CPU only (--device cpu)");
  if (cfg->sample || cfg->eval_every)
    return args_error("--cp", v, "--sample and --eval-every need whole sequences on one rank; use 1 rank for them");
  return 0;
}

/* Activation bytes the loop keeps per rank for b loop samples (gpt.h's table with the ring's
 * attention): 4b·[S·E·(L+1) + S·V + L·(15SE + 4S + NH·S) + S·E + 2S] = per sequence that the rank
 * shares, S/C of its tokens: ∝ S/C, and linear in S (no S² term). With --recompute the L blocks'
 * and the head's saved activations become one buffer of the largest: 15SE + 4S + NH·S.
 * Ulysses (a2a) keeps its heads' probabilities and q k v instead of NH·S: 15SE + 4S + NH·S² + 3SE —
 * ∝ S/C for every term but NH·S² (the ordinary attention's, R·NH/C·S² on each rank: b·NH·S²).
 * The hybrid (--cp-a2a A) keeps the ring's lse and q k v and out in the heads' layout: 15SE + 4S + NH·S + 4SE. */
static int64_t cp_acts_formula(gpt_shape_t s, int64_t b, int recompute, int mode) {
  return gpt_cp_acts_bytes(s, b, recompute, cp_att_saved(s, mode)); /* gpt.c's: ch00_memory --cp uses it too */
}

/* fp32 elements one rank sends per layer and micro-batch of R rows (n positions each), forward
 * (bwd = 0) or backward (bwd = 1), by the ring (part 0: the ring of C, or the hybrid's ring of G = C/A
 * on blocks of A·n positions and E/A features) or by the all-to-alls (part 1: Ulysses' of C, or the
 * hybrid's of A). */
static int64_t cp_layer_numel(const train_cfg_t *cfg, int part, int bwd, int64_t R, int n, int E) {
  int C = cfg->cp, A = cp_group_a2a(cfg), G = C / A, mode = cp_mode(cfg);
  if (part == 0) {
    if (mode == CP_A2A) return 0;
    return bwd ? cp_ring_bwd_numel(G, R, A * n, E / A) : cp_ring_fwd_numel(G, R, A * n, E / A);
  }
  if (mode == CP_RING) return 0;
  int Ca = mode == CP_A2A ? C : A;
  return bwd ? cp_ulysses_bwd_numel(Ca, R, n, E) : cp_ulysses_fwd_numel(Ca, R, n, E);
}
/* Bytes one rank sends per step by the ring (part 0: K/V) or the all-to-alls (part 1): per layer and
 * micro-batch the backward's and the forward's, the forward's twice with --recompute (the loop reruns
 * each block's forward before its backward). */
static double cp_part_formula(const train_cfg_t *cfg, int part, int64_t R, int n, int E) {
  return 4.0 * cfg->gpt.n_layer * cfg->accum *
         ((1 + (cfg->recompute != 0)) * cp_layer_numel(cfg, part, 0, R, n, E) + cp_layer_numel(cfg, part, 1, R, n, E));
}

void cp_split_trainer(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  model_t *m = &t->model;
  int C = cfg->cp, wr = comm_rank(t->world_comm);
  if (m->fns != &model_gpt_fns) die("error: --cp %d: context parallelism splits the GPT only", C);
  cp_gpt_t *c = xcalloc(1, sizeof *c, "cp gpt");
  comm_t *g = comm_split(t->world_comm, wr / C, wr % C); /* C consecutive ranks */
  gpt_shape_t s = m->gpt;
  int mode = cp_mode(cfg), a2a = mode == CP_A2A, A = cp_group_a2a(cfg), q = wr % C;
  cp_ring_init(&c->g, g, s.seq_len, mode == CP_RING ? cfg->cp_balance : 0, s.n_embd, s.n_head); /* a2a: contiguous */
  c->t = t, c->S = s.seq_len, c->E = s.n_embd, c->V = s.vocab, c->NH = s.n_head, c->C = C, c->A = A;
  if (a2a) {
    c->u = xcalloc(1, sizeof *c->u, "cp ulysses");
    cp_ulysses_init(c->u, g, s.seq_len, s.n_embd, s.n_head, c->g.pos);
  }
  if (mode == CP_USP) { /* CP rank q = g·A + a: the group of A consecutive ranks, the ring of the ranks with this a */
    c->ga = comm_split(g, q / A, q % A);
    comm_t *gr = comm_split(g, q % A, q / A);
    c->ring = xcalloc(1, sizeof *c->ring, "cp hybrid ring");
    cp_ring_init(c->ring, gr, s.seq_len, cfg->cp_balance, s.n_embd / A, s.n_head / A); /* G groups of A·n positions */
    memcpy(c->g.pos, c->ring->pos, (size_t)s.seq_len * sizeof(int)); /* rank q's n positions: the flat array at q·n */
    c->u = xcalloc(1, sizeof *c->u, "cp hybrid");
    cp_usp_init(c->u, c->ga, c->ring, s.n_embd, s.n_head);
  }
  gpt_block_t k = cp_block(c, s);
  for (int u = 1; u < m->n_units - 1; u++) m->units[u].saved_numel = gpt_block_saved(&k);
  m->fns = &cp_gpt_fns;
  m->ctx = c;
  int64_t b = t->local_batch, R = b * C;
  trainer_report_extra(t, "cp", C);
  trainer_report_extra(t, "cp_a2a", a2a);
  trainer_report_extra(t, "cp_a2a_group", mode == CP_USP ? A : 0);
  trainer_report_extra(t, "cp_acts_formula_bytes", (double)cp_acts_formula(s, b, cfg->recompute, mode));
  if (mode != CP_A2A) trainer_report_extra(t, "cp_kv_bytes_formula", cp_part_formula(cfg, 0, R, c->g.n, c->E));
  if (mode != CP_RING) trainer_report_extra(t, "cp_a2a_bytes_formula", cp_part_formula(cfg, 1, R, c->g.n, c->E));
  /* one layer's forward on one micro-batch, per rank: what notes/10's table derives side by side; and
   * forward + backward (the ring's part and the all-to-alls' part together) */
  double f0 = cp_layer_numel(cfg, 0, 0, R, c->g.n, c->E), f1 = cp_layer_numel(cfg, 1, 0, R, c->g.n, c->E);
  double b0 = cp_layer_numel(cfg, 0, 1, R, c->g.n, c->E), b1 = cp_layer_numel(cfg, 1, 1, R, c->g.n, c->E);
  trainer_report_extra(t, "cp_layer_fwd_bytes_formula", 4.0 * (f0 + f1));
  trainer_report_extra(t, "cp_layer_bytes_formula", 4.0 * (f0 + f1 + b0 + b1));
}

/* ---- the end-of-run lines (the transform's report) -------------------------------------------- */
static void cp_report(trainer_t *t) {
  const cp_gpt_t *c = t->model.ctx;
  const train_cfg_t *cfg = t->cfg;
  comm_wait_all(c->g.c);
  comm_counters_t k = comm_counters(c->g.c);
  int steps = trainer_steps_run(t), C = c->C; /* after --resume: the steps this run made, not --steps */
  int64_t b = t->local_batch, R = b * C, L = t->model.gpt.n_layer;
  double kv = (double)k.sent[CO_SEND] / steps, tok = (double)k.sent[CO_ALL_GATHER] / steps;
  double kv_f = cp_part_formula(cfg, c->u && !c->ring ? 1 : 0, R, c->g.n, c->E);
  /* the time the communication stream spent in the ring's hops and in the all-to-alls, per step: the
   * hops run under the fold's compute (hidden but for what sticks out), the all-to-alls block the
   * attention (exposed) — make bench-long's emulated nodes put the two side by side */
  comm_counters_t kr = c->ring ? (comm_wait_all(c->ring->c), comm_counters(c->ring->c)) : k;
  comm_counters_t ka = c->ring ? (comm_wait_all(c->ga), comm_counters(c->ga)) : k;
  trainer_report_extra(t, "cp_kv_busy_ms_per_step", (kr.busy_us[CO_SEND] + kr.busy_us[CO_RECV]) / steps / 1000.0);
  trainer_report_extra(t, "cp_a2a_busy_ms_per_step", ka.busy_us[CO_ALL_TO_ALL] / steps / 1000.0);
  /* and the time this rank's compute waited for them: exposed (busy − exposed: hidden under the fold) */
  const cp_ring_t *rw = c->ring ? c->ring : c->u ? NULL : &c->g;
  trainer_report_extra(t, "cp_kv_wait_ms_per_step", rw ? rw->wait_us / steps / 1000.0 : 0.0);
  trainer_report_extra(t, "cp_a2a_wait_ms_per_step", c->u ? c->u->wait_us / steps / 1000.0 : 0.0);
  double tok_f = 2.0 * cfg->accum * comm_model_sent(CO_ALL_GATHER, C * b * c->S, DT_F32, C, c->g.r, 0);
  if (c->u && !c->ring) { /* Ulysses: the all-to-alls' bytes; every rank attends all S positions of NH/C heads */
    double a2a = (double)k.sent[CO_ALL_TO_ALL] / steps, a2a_f = kv_f;
    trainer_report_extra(t, "cp_a2a_bytes_per_step", a2a);
    trainer_report_extra(t, "cp_tok_bytes_per_step", tok);
    trainer_report_extra(t, "cp_work_max", (double)R * (c->NH / C) * c->S * (c->S + 1.0) / 2);
    if (!trainer_prints(t)) return;
    printf("cp: C=%d, --cp-comm a2a (Ulysses): each rank %d of the %d positions of every sequence (contiguous); "
           "attention on %d of the %d heads over all %d\n", C, c->g.n, c->S, c->NH / C, c->NH, c->S);
    printf("cp: all-to-all bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd 4*(C-1)*R*n*E/C + "
           "bwd 4*(C-1)*R*n*E/C], R = %lld rows, n = %d, E = %d: %.0f; the ring would send %.0f)\n",
           a2a, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", (long long)R, c->g.n, c->E, a2a_f,
           4.0 * L * cfg->accum * ((1 + (cfg->recompute != 0)) * cp_ring_fwd_numel(C, R, c->g.n, c->E) +
                                   cp_ring_bwd_numel(C, R, c->g.n, c->E)));
    printf("cp: token and target all-gathers per rank per step %.0f bytes (formula %.0f)\n", tok, tok_f);
    fflush(stdout);
    return;
  }
  /* the hybrid: the ring's hops on the ring's communicator, the all-to-alls on the group's */
  double a2a = 0, a2a_f = 0;
  int A = c->A, G = C / A; /* the ring's size (G = C without the hybrid) and each rank's heads in it */
  const cp_ring_t *rg = c->ring ? c->ring : &c->g;
  if (c->ring) {
    kv = (double)kr.sent[CO_SEND] / steps;
    a2a = (double)ka.sent[CO_ALL_TO_ALL] / steps;
    a2a_f = cp_part_formula(cfg, 1, R, c->g.n, c->E);
  }
  /* the attention work of one layer's forward on one micro-batch: max and sum over the group (the
   * hybrid: the ring of G on NH/A heads, the A ranks of a group alike) */
  double w[2] = {(double)rg->work_fwd, (double)rg->work_fwd}, wmax = 0, wsum = 0;
  comm_ctl_all_reduce_f64(c->g.c, &w[0], 1, REDOP_MAX);
  comm_ctl_all_reduce_f64(c->g.c, &w[1], 1, REDOP_SUM);
  for (int q = 0; q < G; q++) {
    double f = (double)cp_work_formula(c->S, G, cfg->cp_balance, q) * R * (c->NH / A);
    wmax = f > wmax ? f : wmax;
    wsum += A * f;
  }
  double other = 0, osum = 0; /* the other layout's formula, for the line */
  for (int q = 0; q < G; q++) {
    double f = (double)cp_work_formula(c->S, G, !cfg->cp_balance, q);
    other = f > other ? f : other;
    osum += f;
  }
  double imb = w[0] / (w[1] / C), imb_other = other / (osum / G);
  trainer_report_extra(t, "cp_kv_bytes_per_step", kv);
  trainer_report_extra(t, "cp_tok_bytes_per_step", tok);
  trainer_report_extra(t, "cp_work_max", w[0]);
  trainer_report_extra(t, "cp_work_formula_max", wmax);
  trainer_report_extra(t, "cp_imbalance", imb);
  if (c->ring) trainer_report_extra(t, "cp_a2a_bytes_per_step", a2a);
  if (!trainer_prints(t)) return;
  if (c->ring) {
    printf("cp: C=%d, --cp-a2a %d (the 2-D hybrid): all-to-alls inside %d groups of %d consecutive ranks, the ring across "
           "the %d groups on %d of the %d heads; group g holds %s of the %d positions (%d per rank)\n", C, A, G, A, G,
           c->NH / A, c->NH, cfg->cp_balance ? "chunks g and 2G-1-g of 2G" : "chunk g of G", c->S, c->g.n);
    printf("cp: all-to-all bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd 4*(A-1)*R*n*E/A + "
           "bwd 4*(A-1)*R*n*E/A], R = %lld rows, n = %d, E = %d: %.0f)\n",
           a2a, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", (long long)R, c->g.n, c->E, a2a_f);
    printf("cp: K/V ring bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd (G-1)*2*R*n*E + bwd "
           "((G-1)*4 + 2)*R*n*E], G = %d: %.0f)\n",
           kv, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", G, kv_f);
  } else {
    printf("cp: C=%d, %s: each rank %d of the %d positions of every sequence\n", C,
           cfg->cp_balance ? "balanced (chunks q and 2C-1-q of 2C)" : "contiguous (chunk q of C)", c->g.n, c->S);
    printf("cp: K/V ring bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd (C-1)*2*R*n*E + bwd "
           "((C-1)*4 + 2)*R*n*E], R = %lld rows, n = %d, E = %d: %.0f)\n",
           kv, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", (long long)R, c->g.n, c->E, kv_f);
  }
  printf("cp: token and target all-gathers per rank per step %.0f bytes (formula %.0f)\n", tok, tok_f);
  printf("cp: attention work per rank (score pairs, one layer's forward of one micro-batch): max %.0f mean %.0f "
         "(formula max %.0f mean %.0f); imbalance max/mean %.3f (--cp-balance %d would give %.3f)\n",
         w[0], w[1] / C, wmax, wsum / C, imb, !cfg->cp_balance, imb_other);
  fflush(stdout);
}

/* Chapter 10's model transform: the sequence split at setup, the cp: lines at the end. */
const model_transform_t cp_transform = {
    .name = "cp",
    .setup = cp_split_trainer,
    .report = cp_report,
};
