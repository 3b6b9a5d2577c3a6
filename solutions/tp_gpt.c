/* tp_gpt.c — the GPT, split over a TP group (tp.h's tp_split_model; notes/06-tensor-parallel.md,
 * "The transformer layer, split"): every block's heads and MLP through the exercised split linears
 * of tp.c (gpt.h's block hooks), the vocabulary of the embedding and the head over the group, and
 * the vocab-parallel cross-entropy that never holds a whole row of logits (tp_vocab.c).
 *
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
#include "tp_split.h" // tp_split_t, tp_unit_t, tp_split_begin, tp_mv, tp_mv_cols, tp_split_init_unit
#include "tp_sp.h"    // tp_sp_t, tp_sp_* (--sp: the sequence-parallel linears and collectives)
#include "check.h"    // die, die_on_rank, xcalloc, xmalloc
#include "device.h"   // dev_memcpy
#include "gpt.h"      // model_gpt_fns, gpt_block_*, gpt_block_layout
#include "ops.h"      // op_linear_fwd, op_cast, op_fill
#include "ops_gpt.h"  // op_layernorm_*, op_embedding_*
#include <stdlib.h>   // free

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
  tp_split_t s;      /* the TP group, the unsplit GPT, per unit what TP knows (first member) */
  int S, C, V, NH;   /* the full shape */
  int Cr, NHr, c_lo; /* this rank's heads: NHr of them, features [c_lo, c_lo+Cr) of q, k and v */
  int Vr, v_lo;      /* this rank's vocabulary rows [v_lo, v_lo+Vr) */
  tp_sp_t *sp;       /* --sp: the sequence split of the LayerNorm/residual regions (NULL: plain TP) */
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
  return tensor_grow(t, name, LEDGER_ACTS, dt, dev, numel);
}

/* Parameters of unit u on TP rank q. */
static int64_t tp_gpt_local_numel(const tp_split_t *s, int u, int q) {
  const tp_gpt_t *c = (const tp_gpt_t *)s;
  int64_t C = c->C, vn = tp_part_numel(c->V, c->s.T, q);
  if (u == 0) return (int64_t)c->S * C + vn * C;
  if (u == c->s.full.n_units - 1) return 2 * C + vn * C;
  return tp_block_layout(c->C, c->C / c->s.T).numel;
}

/* A block's attention tensors between the full block (layout f) and TP rank q's (layout l): the
 * replicated LayerNorms and proj bias whole, q's heads of q, k and v, proj's input columns. */
static void map_attention(const tp_gpt_t *c, int q, gpt_block_layout_t f, gpt_block_layout_t l, float *full,
                          float *local, int to_local) {
  int64_t C = c->C;
  int cr = c->C / c->s.T, clo = q * cr;
  tp_mv(full + f.ln1w, local + l.ln1w, C, to_local);
  tp_mv(full + f.ln1b, local + l.ln1b, C, to_local);
  tp_mv(full + f.projb, local + l.projb, C, to_local);
  tp_mv(full + f.ln2w, local + l.ln2w, C, to_local);
  tp_mv(full + f.ln2b, local + l.ln2b, C, to_local);
  for (int p = 0; p < 3; p++) { /* q, k, v: q's heads of each */
    tp_mv(full + f.qkvw + (p * C + clo) * C, local + l.qkvw + (int64_t)p * cr * C, (int64_t)cr * C, to_local);
    tp_mv(full + f.qkvb + p * C + clo, local + l.qkvb + (int64_t)p * cr, cr, to_local);
  }
  tp_mv_cols(full + f.projw, local + l.projw, c->C, c->C, clo, cr, to_local); /* its input columns */
}

static void tp_gpt_map(const tp_split_t *s, int u, int q, float *full, float *local, int to_local) {
  const tp_gpt_t *c = (const tp_gpt_t *)s;
  int64_t S = c->S, C = c->C, V = c->V, vlo = tp_part_lo(c->V, c->s.T, q),
          vn = tp_part_numel(c->V, c->s.T, q);
  if (u == 0) {                                             /* full: wte (V,C) | wpe (S,C) */
    tp_mv(full + V * C, local, S * C, to_local);               /* wpe, replicated */
    tp_mv(full + vlo * C, local + S * C, vn * C, to_local);    /* wte rows of q's vocabulary */
  } else if (u == c->s.full.n_units - 1) {                    /* full: lnf w, b | W (V,C) */
    tp_mv(full, local, 2 * C, to_local);
    tp_mv(full + 2 * C + vlo * C, local + 2 * C, vn * C, to_local);
  } else {
    int cr = c->C / c->s.T, clo = q * cr;
    gpt_block_layout_t f = gpt_block_layout(c->C), l = tp_block_layout(c->C, cr);
    map_attention(c, q, f, l, full, local, to_local);
    tp_mv(full + f.fcprojb, local + l.fcprojb, C, to_local);
    tp_mv(full + f.fcw + 4 * clo * C, local + l.fcw, 4 * (int64_t)cr * C, to_local);
    tp_mv(full + f.fcb + 4 * clo, local + l.fcb, 4 * cr, to_local);
    tp_mv_cols(full + f.fcprojw, local + l.fcprojw, c->C, 4 * c->C, 4 * clo, 4 * cr, to_local);
  }
}

/* The block's four matmuls (gpt.h's hooks) are chapter 06's split linears: qkv and fc column-
 * parallel (f around them: all-reduces 3 and 4, backward), proj and fcproj row-parallel (g: all-
 * reduces 1 and 2, forward; the bias, in wdt in the unit, added once after the sum in fp32). */
static void tp_gpt_col_fwd(void *ctx, float *y, const float *x, const void *W, const void *b, dtype_t wdt,
                           int rows, int in, int out) {
  tp_gpt_t *c = ctx;
  if (c->sp) tp_sp_column_forward(c->sp, y, x, W, b, wdt, rows / c->S, in, out); /* g: all-gather along s */
  else tp_column_forward(c->s.tp, y, x, W, b, wdt, rows, in, out);
}
static void tp_gpt_col_bwd(void *ctx, float *dx, void *dW, void *db, const float *dy, const float *x,
                           const void *W, dtype_t wdt, int rows, int in, int out, float beta) {
  tp_gpt_t *c = ctx;
  if (c->sp) tp_sp_column_backward(c->sp, dx, dW, db, dy, x, W, wdt, rows / c->S, in, out, beta);
  else tp_column_backward(c->s.tp, dx, dW, db, dy, x, W, wdt, rows, in, out, beta);
}
static void tp_gpt_row_fwd(void *ctx, float *y, const float *x, const void *W, const void *b, dtype_t wdt,
                           int rows, int in, int out) {
  tp_gpt_t *c = ctx;
  device_t dev = comm_device(c->s.tp);
  const float *b32 = b;
  if (wdt != DT_F32) {
    b32 = grow(&c->bias32, "tp row bias (fp32)", DT_F32, dev, out);
    op_cast(dev, (void *)b32, DT_F32, b, wdt, out);
  }
  /* ḡ: reduce-scatter along s */
  if (c->sp) tp_sp_row_forward(c->sp, y, x, W, b32, wdt, rows / c->S, in, out);
  else tp_row_forward(c->s.tp, y, x, W, b32, wdt, rows, in, out);
}
static void tp_gpt_row_bwd(void *ctx, float *dx, void *dW, void *db, const float *dy, const float *x,
                           const void *W, dtype_t wdt, int rows, int in, int out, float beta) {
  tp_gpt_t *c = ctx;
  if (c->sp) tp_sp_row_backward(c->sp, dx, dW, db, dy, x, W, wdt, rows / c->S, in, out, beta);
  else tp_row_backward(c->s.tp, dx, dW, db, dy, x, W, wdt, rows, in, out, beta);
}
/* --sp: a LayerNorm's weight gradients summed over the sequence's parts (tp_sp.h). */
static void tp_gpt_ln_bwd(void *ctx, float *dx, void *dw, void *db, const float *dy, const float *x,
                          const float *mean, const float *rstd, const void *w, dtype_t wdt, int rows, int C,
                          float beta) {
  tp_sp_layernorm_backward(((tp_gpt_t *)ctx)->sp, dx, dw, db, dy, x, mean, rstd, w, wdt, rows, C, beta);
}

/* A block on this rank: Cr = C/T features and NHr = NH/T heads, the local layout, the split linears.
 * It saves per sample 3SC + 4S + 12S·Cr + NHr·S² (gpt.h's, the split tensors at 1/T); with --sp the
 * LayerNorm/residual region holds Ss = S/T positions: 3SC/T + 4S/T + 12S·Cr + NHr·S² (all at 1/T). */
static gpt_block_t tp_gpt_block(tp_gpt_t *c) {
  return (gpt_block_t){.S = c->S, .Ss = c->sp ? c->sp->Sl : c->S, .C = c->C, .Cr = c->Cr, .NHr = c->NHr,
                       .l = tp_block_layout(c->C, c->Cr), .hook_ctx = c, .col_fwd = tp_gpt_col_fwd,
                       .col_bwd = tp_gpt_col_bwd, .row_fwd = tp_gpt_row_fwd, .row_bwd = tp_gpt_row_bwd,
                       .ln_bwd = c->sp ? tp_gpt_ln_bwd : NULL};
}

/* ---- chapter 12: a MoE block's attention half, split (tp.h; solutions/ep_tp.c) ---------------------
 * Its local layout: the replicated ln1 w,b | proj b | ln2 w,b (5C), then qkv W_r, b_r | proj W_r — the
 * block's without the MLP's tensors (the MoE block's experts replace them). */
static gpt_block_layout_t tp_attn_layout(int C, int Cr) {
  gpt_block_layout_t l = {0};
  int64_t c = C, cr = Cr, at = 0;
  l.ln1w = at, at += c;
  l.ln1b = at, at += c;
  l.projb = at, at += c;
  l.ln2w = at, at += c;
  l.ln2b = at, at += c;
  l.qkvw = at, at += 3 * cr * c; /* the first split tensor: 5C replicated before it */
  l.qkvb = at, at += 3 * cr;
  l.projw = at, at += c * cr;
  l.fcw = l.fcb = l.fcprojw = l.fcprojb = at; /* none: the experts' */
  l.numel = at;
  return l;
}

gpt_block_t tp_gpt_attn_block(const model_t *m) {
  gpt_block_t k = tp_gpt_block(m->ctx);
  k.l = tp_attn_layout(k.C, k.Cr);
  return k;
}
int64_t tp_gpt_attn_numel(const model_t *m) {
  const tp_gpt_t *c = m->ctx;
  return tp_attn_layout(c->C, c->Cr).numel;
}
int64_t tp_gpt_attn_rep_numel(const model_t *m) {
  return tp_attn_layout(((const tp_gpt_t *)m->ctx)->C, 1).qkvw;
}

void tp_gpt_attn_map(const model_t *m, int q, float *full, float *local, int to_local) {
  const tp_gpt_t *c = m->ctx;
  map_attention(c, q, gpt_block_layout(c->C), tp_attn_layout(c->C, c->C / c->s.T), full, local, to_local);
}

/* The split (tp_split_gpt, tp_split_gpt_sp). --sp, per micro-batch along the sequence (tp_sp.h):
 * the embedding's g becomes a reduce-scatter (forward) and an all-gather (backward, its dy); a block's
 * two g's and two ḡ's 4 all-gathers + 4 reduce-scatters, + 2 all-gathers in the backward (ln1 and ln2
 * out, kept 1/T, again for the weight gradients), + 2 all-reduces of 2C (the LayerNorms' dw, db); the
 * head gathers lnf out forward and backward and reduce-scatters d lnf, + 1 all-reduce of 2C. */
static void split_gpt(model_t *m, comm_t *tp, int sp) {
  int T = comm_world(tp), r = comm_rank(tp), U = m->n_units;
  gpt_shape_t s = m->gpt;
  if (s.n_head % T != 0)
    die("error: --tp %d: the GPT's %d heads do not split over %d ranks (n_head must be divisible by T)", T,
        s.n_head, T);
  if (s.vocab < T) die("error: --tp %d: a vocabulary of %d rows cannot give every rank one", T, s.vocab);
  tp_gpt_t *c = xcalloc(1, sizeof *c, "tp gpt");
  tp_split_begin(&c->s, m, tp, tp_gpt_map, tp_gpt_local_numel);
  c->S = s.seq_len, c->C = s.n_embd, c->V = s.vocab, c->NH = s.n_head;
  c->Cr = s.n_embd / T, c->NHr = s.n_head / T, c->c_lo = r * c->Cr;
  c->Vr = tp_part_numel(s.vocab, T, r), c->v_lo = tp_part_lo(s.vocab, T, r);
  if (sp) c->sp = tp_sp_new(tp, s.seq_len);
  int64_t S = c->S, C = c->C, SC = S * C, Sl = sp ? S / T : S; /* Sl: positions of the residual stream here */
  for (int u = 0; u < U; u++) {
    unit_t *un = &m->units[u];
    tp_unit_t *k = &c->s.units[u];
    un->numel = tp_gpt_local_numel(&c->s, u, r);
    k->ar_numel = SC; /* every all-reduce of a unit carries b·s·h elements */
    k->y_rep = !sp && u < U - 1; /* the embedding's and the blocks' y come out of g; the logits are V/T */
    if (u < U - 1) un->y_numel = Sl * C; /* --sp: (S/T, C) per sample */
    k->ln_numel = 2 * C;
    if (u == 0) {         /* wpe replicated; the lookups summed by g */
      k->rep_numel = SC;
      if (sp) k->rs_calls = k->rs_fwd_calls = k->ag_calls = 1;
      else k->ar_calls = k->ar_fwd_calls = 1;
    } else if (u == U - 1) { /* lnf replicated; f's backward sums dlnf; the loss: 3 of S per sample */
      k->rep_numel = 2 * C;
      un->y_numel = S * c->Vr; /* the logits: V/T per row */
      un->saved_numel = Sl * C + 2 * Sl; /* lnf out, mean, rstd */
      if (sp) k->ag_calls = 2, k->ag_fwd_calls = 1, k->rs_calls = 1, k->ln_calls = 1;
      else k->ar_calls = 1;
      k->ar2_calls = 3;
      k->ar2_numel = S;
    } else { /* 2 g's forward, 2 f's backward */
      k->rep_numel = tp_block_layout(c->C, c->Cr).qkvw; /* 6C: all before the first split tensor */
      gpt_block_t blk = tp_gpt_block(c);
      un->saved_numel = gpt_block_saved(&blk);
      if (sp) k->ag_calls = 6, k->ag_fwd_calls = 2, k->rs_calls = 4, k->rs_fwd_calls = 2, k->ln_calls = 2;
      else k->ar_calls = 4, k->ar_fwd_calls = 2;
    }
  }
  model_layout(m);
  m->fns = &tp_gpt_model_fns;
  m->ctx = c;
}

void tp_split_gpt(model_t *m, comm_t *tp) { split_gpt(m, tp, 0); }
void tp_split_gpt_sp(model_t *m, comm_t *tp) { split_gpt(m, tp, 1); }

static void tp_gpt_free_ctx(model_t *m) {
  tp_gpt_t *c = m->ctx;
  if (!c) return;
  tp_split_end(&c->s);
  tensor_free(&c->scratch);
  tensor_free(&c->wte_ext);
  tensor_free(&c->dwte_ext);
  tensor_free(&c->wpe_zero);
  tensor_free(&c->tok);
  tensor_free(&c->rowstat);
  tensor_free(&c->bias32);
  tp_sp_free(c->sp);
  free(c);
}

/* The tokens as rows of this rank's wte_ext: t − v_lo for its own vocabulary, Vr (the zero row)
 * for the others'. Remapped on the host (a copy each way on CUDA). */
static const int *tp_gpt_tokens(tp_gpt_t *c, device_t dev, const int *x, int64_t n) {
  int *dst = grow(&c->tok, "tp local tokens", DT_F32, dev, n); /* int32 in a 4-byte tensor */
  int *h = dev == DEV_CPU ? dst : xmalloc((size_t)n * sizeof(int), "tp tokens (host)");
  dev_memcpy(DEV_CPU, h, dev, x, (size_t)n * sizeof(int));
  for (int64_t k = 0; k < n; k++) {
    int v = h[k];
    if (v < 0 || v >= c->V)
      die_on_rank("tp embedding: token %lld = %d outside [0, %d)", (long long)k, v, c->V);
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
    dev_memcpy(dev, ext, dev, param_at(io, (int64_t)S * C), (size_t)c->Vr * C * dtype_size(wdt));
    const void *wpe =
        c->s.r == 0 ? param_at(io, 0) : grow(&c->wpe_zero, "tp zero wpe", DT_F32, dev, (int64_t)S * C);
    float *y = c->sp ? tp_sp_buffer(c->sp, 1, n) : io->y; /* --sp: the whole sequence's partial sums */
    op_embedding_fwd(dev, y, tok, ext, wpe, wdt, B, S, C, c->Vr + 1);
    if (c->sp) tp_sp_scatter(c->sp, io->y, y, B, C); /* --sp: ḡ, this rank's positions (B, S/T, C) */
    else tp_g_forward(c->s.tp, io->y, n); /* one nonzero term per element pair: exact, as 1 rank */
    return;
  }
  const float *x = io->x;
  if (u == m->n_units - 1) { /* lnf (replicated), then this rank's logits (B·S, Vr) */
    int BTs = c->sp ? B * c->sp->Sl : BT; /* --sp: lnf on this rank's positions, then g (all-gather) */
    float *lnf = io->saved, *mean = lnf + (int64_t)BTs * C, *rstd = mean + BTs;
    op_layernorm_fwd(dev, lnf, mean, rstd, x, param_at(io, 0), param_at(io, C), wdt, BTs, C);
    if (c->sp) tp_sp_column_forward(c->sp, io->y, lnf, param_at(io, 2 * (int64_t)C), NULL, wdt, B, C, c->Vr);
    /* no bias */
    else tp_column_forward(c->s.tp, io->y, lnf, param_at(io, 2 * (int64_t)C), NULL, wdt, BT, C, c->Vr);
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
    const float *dy = io->dy;
    if (c->sp) { /* --sp: ḡ's backward, every position's dy (all-gather) */
      float *whole = tp_sp_buffer(c->sp, 0, n);
      tp_sp_gather(c->sp, whole, io->dy, B, C);
      dy = whole;
    }
    size_t nb = (size_t)c->Vr * C * dtype_size(wdt);
    void *dext = grow(&c->dwte_ext, "tp dwte (own rows + a zero row)", wdt, dev, (int64_t)(c->Vr + 1) * C);
    if (beta != 0.0f) dev_memcpy(dev, dext, dev, grad_at(io, (int64_t)S * C), nb);
    op_embedding_bwd(dev, dext, grad_at(io, 0), dy, tok, wdt, B, S, C, c->Vr + 1, beta);
    dev_memcpy(dev, grad_at(io, (int64_t)S * C), dev, dext, nb);
    tensor_free(&c->scratch); /* the last unit of the backward */
    return;
  }
  gpt_block_t k = tp_gpt_block(c);
  float *work = grow(&c->scratch, "tp gpt backward scratch", DT_F32, dev, gpt_block_scratch_numel(&k, B));
  if (u == m->n_units - 1) {
    int BTs = c->sp ? B * c->sp->Sl : BT; /* --sp: this rank's positions */
    const float *lnf = io->saved, *mean = lnf + (int64_t)BTs * C, *rstd = mean + BTs;
    float *dlnf = work; // (BTs,C)
    /* dlnf: each rank's share is its vocabulary's, summed by f's backward (--sp: g's, a reduce-scatter) */
    if (c->sp)
      tp_sp_column_backward(c->sp, dlnf, grad_at(io, 2 * (int64_t)C), NULL, io->dy, lnf,
                            param_at(io, 2 * (int64_t)C), wdt, B, C, c->Vr, beta);
    else
      tp_column_backward(c->s.tp, dlnf, grad_at(io, 2 * (int64_t)C), NULL, io->dy, lnf,
                         param_at(io, 2 * (int64_t)C), wdt, BT, C, c->Vr, beta);
    if (io->dx) {
      op_fill(dev, io->dx, DT_F32, 0.0f, (int64_t)BTs * C);
      if (c->sp) /* the LayerNorm's dw, db summed over the sequence's parts */
        tp_sp_layernorm_backward(c->sp, io->dx, grad_at(io, 0), grad_at(io, C), dlnf, io->x, mean, rstd,
                                 param_at(io, 0), wdt, BTs, C, beta);
      else
        op_layernorm_bwd(dev, io->dx, grad_at(io, 0), grad_at(io, C), dlnf, io->x, mean, rstd,
                         param_at(io, 0), wdt, BT, C, beta);
    }
    return;
  }
  gpt_block_backward(&k, io, work); /* 2 f's backward (all-reduces 3, 4); g's backward is the identity */
}

/* model_fns_t.loss: the vocab-parallel cross-entropy of this rank's logits (tp_vocab.c). */
static double tp_gpt_loss(const model_t *m, int b, const float *logits, const int *targets, float *dlogits,
                          float scale) {
  tp_gpt_t *c = m->ctx;
  return tp_vocab_loss(c->s.tp, &c->rowstat, (int64_t)b * c->S, c->V, c->v_lo, c->Vr, logits, targets,
                       dlogits, scale);
}

/* this rank's share (gpt.c's count with C·Cr, C·Vr, S²·Cr) */
static double tp_gpt_flops(const model_t *m) {
  const tp_gpt_t *c = m->ctx;
  double S = c->S, C = c->C, Cr = c->Cr, L = m->n_units - 2, Vr = c->Vr;
  return S * (L * 24.0 * C * Cr + 2.0 * C * Vr) + L * 4.0 * S * S * Cr;
}

static const model_fns_t tp_gpt_model_fns = {.name = "gpt",
                                             .init_unit = tp_split_init_unit,
                                             .forward = tp_gpt_forward,
                                             .backward = tp_gpt_backward,
                                             .free_ctx = tp_gpt_free_ctx,
                                             .flops_per_sample = tp_gpt_flops,
                                             .loss = tp_gpt_loss};
