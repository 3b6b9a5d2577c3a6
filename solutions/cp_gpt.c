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
 * instead of the NH·S² probabilities (the ring recomputes scores block by block). The checks, the
 * formulas and the end-of-run lines are cp_report.c's. */
#include "cp_state.h" // cp_gpt_t, cp_mode, cp_att_saved, cp_report_formulas, cp_report
#include "cp.h"       // cp_transform, cp_split_trainer, cp_ring_*
#include "check.h"    // die, xcalloc
#include "gpt.h"      // model_gpt_fns, gpt_block_*, gpt_matrices
#include "ops.h"      // op_linear_bwd, op_fill, op_softmax_xent
#include "ops_gpt.h"  // op_embedding_*, op_layernorm_bwd
#include "train.h"    // trainer_t, train_cfg_t, model_transform_t
#include "ulysses.h"  // cp_ulysses_* (--cp-comm a2a), cp_usp_* (--cp-a2a)
#include <stdlib.h>   // free
#include <string.h>   // memcpy

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
  /* att: probabilities and q k v of its heads */
  if (c->u) cp_ulysses_forward(c->u, atty, att, qkv, B * c->C);
  else cp_ring_forward(&c->g, atty, att, qkv, B * c->C); /* att: the log-sum-exp (R, NH, n) */
}
static void cp_att_bwd(void *ctx, float *dqkv, const float *datty, const float *qkv, const float *atty,
                       const float *att, int B, int S, int Cr, int NHr) {
  cp_gpt_t *c = ctx;
  if (c->u) cp_ulysses_backward(c->u, dqkv, datty, att, B * c->C);
  else cp_ring_backward(&c->g, dqkv, datty, qkv, atty, att, B * c->C);
}

/* fp32 the attention keeps per local token: the ring's log-sum-exp NH, Ulysses' NH·S + 3E, the
 * hybrid's NH + 4E (the ring's lse, q k v and the output in the heads' layout). */
int64_t cp_att_saved(gpt_shape_t s, int mode) {
  return mode == CP_A2A ? cp_ulysses_saved_per_token(s.seq_len, s.n_embd, s.n_head)
       : mode == CP_USP ? cp_usp_saved_per_token(s.n_embd, s.n_head) : s.n_head;
}
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
    void *dwpe = grad_at(io, (int64_t)c->V * E),
         *dl = grow(&c->dwpe_loc, "cp dwpe rows", wdt, (int64_t)n * E);
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
    op_linear_bwd(io->dev, work, grad_at(io, 2 * (int64_t)E), NULL, io->dy, lnf, param_at(io, 2 * (int64_t)E),
                  wdt, BT, E, c->V, io->beta);
    if (io->dx) {
      op_fill(io->dev, io->dx, DT_F32, 0.0f, nn);
      op_layernorm_bwd(io->dev, io->dx, grad_at(io, 0), grad_at(io, E), work, io->x, mean, rstd,
                       param_at(io, 0), wdt, BT, E, io->beta);
    }
    return;
  }
  gpt_block_backward(&k, io, work);
}

/* The loss at this rank's positions: the targets trade like the tokens. Scale: the loop's. */
static double cp_loss(const model_t *m, int b, const float *logits, const int *targets, float *dlogits,
                      float scale) {
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

static void cp_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  model_gpt_fns.init_unit(m, seed, u, dst);
}
/* C·n·S = S² per loop sample */
static double cp_flops(const model_t *m) { return model_gpt_fns.flops_per_sample(m); }

static const model_fns_t cp_gpt_fns = {.name = "gpt",
                                       .init_unit = cp_init_unit,
                                       .forward = cp_forward,
                                       .backward = cp_backward,
                                       .matrices = gpt_matrices, /* the GPT's, unsplit (--optimizer muon) */
                                       .free_ctx = cp_free_ctx,
                                       .flops_per_sample = cp_flops,
                                       .loss = cp_loss};

/* ---- the split: the transform's setup ------------------------------------------------------- */
void cp_split_trainer(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  model_t *m = &t->model;
  int C = cfg->cp, wr = comm_rank(t->world_comm);
  if (m->fns != &model_gpt_fns) die("error: --cp %d: context parallelism splits the GPT only", C);
  cp_gpt_t *c = xcalloc(1, sizeof *c, "cp gpt");
  comm_t *g = comm_split(t->world_comm, wr / C, wr % C); /* C consecutive ranks */
  gpt_shape_t s = m->gpt;
  int mode = cp_mode(cfg), a2a = mode == CP_A2A, A = cp_group_a2a(cfg), q = wr % C;
  /* a2a: contiguous */
  cp_ring_init(&c->g, g, s.seq_len, mode == CP_RING ? cfg->cp_balance : 0, s.n_embd, s.n_head);
  c->t = t, c->S = s.seq_len, c->E = s.n_embd, c->V = s.vocab, c->NH = s.n_head, c->C = C, c->A = A;
  if (a2a) {
    c->u = xcalloc(1, sizeof *c->u, "cp ulysses");
    cp_ulysses_init(c->u, g, s.seq_len, s.n_embd, s.n_head, c->g.pos);
  }
  /* CP rank q = g·A + a: the group of A consecutive ranks, the ring of the ranks with this a */
  if (mode == CP_USP) {
    c->ga = comm_split(g, q / A, q % A);
    comm_t *gr = comm_split(g, q % A, q / A);
    c->ring = xcalloc(1, sizeof *c->ring, "cp hybrid ring");
    /* G groups of A·n positions */
    cp_ring_init(c->ring, gr, s.seq_len, cfg->cp_balance, s.n_embd / A, s.n_head / A);
    /* rank q's n positions: the flat array at q·n */
    memcpy(c->g.pos, c->ring->pos, (size_t)s.seq_len * sizeof(int));
    c->u = xcalloc(1, sizeof *c->u, "cp hybrid");
    cp_usp_init(c->u, c->ga, c->ring, s.n_embd, s.n_head);
  }
  gpt_block_t k = cp_block(c, s);
  for (int u = 1; u < m->n_units - 1; u++) m->units[u].saved_numel = gpt_block_saved(&k);
  m->fns = &cp_gpt_fns;
  m->ctx = c;
  cp_report_formulas(t, c); /* cp_report.c: the byte and activation formulas into the report */
}

/* Chapter 10's model transform: the sequence split at setup, the cp: lines at the end. */
const model_transform_t cp_transform = {
    .name = "cp",
    .setup = cp_split_trainer,
    .report = cp_report,
};
