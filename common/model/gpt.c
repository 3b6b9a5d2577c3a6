/* gpt.c — GPT-2 behind the model table (gpt.h for the units and what each saves; model.h for
 * the table). Like model.c it knows shapes and offsets and runs one unit forward or backward;
 * which buffer a unit's parameters live in is the strategy's business.
 *
 * Activation memory, this implementation against Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models"), per layer, s = seq, b = micro-batch, h = hidden,
 * a = heads. They count s·b·h·(34 + 5·a·s/h) bytes in 16 bit with dropout:
 *   LN1 input 2, QKV input 2, Q and K 4, V 2, softmax out 2as/h, dropout mask as/h, dropout out
 *   2as/h, proj input 2, its dropout mask 1, LN2 input 2, fc input 2, GELU input 8, fc2 input 8,
 *   MLP dropout mask 1  (in units of sbh).
 * Here (gpt.h) everything is fp32 and there is no dropout: the block input (the previous unit's
 * output) 4, ln1 out 4, qkv 12, att probs 4as/h, attention out 4, x2 4, ln2 out 4, fc pre-GELU 16,
 * fc post-GELU 16, and the LayerNorm statistics (mean, rstd: 2·2·4 = 16 bytes per token, which
 * they leave out): sbh·(64 + 16/h + 4·a·s/h). Halved to 16 bit, 64 → 32 = their 34 minus the two
 * sbh dropout masks; the attention term 4as/h (fp32 probabilities) against their 5as/h (16-bit
 * probabilities 2 + mask 1 + dropout output 2); and 16/h for the statistics. */
#include "gpt.h"    // gpt_init, model_gpt_fns, the contracts implemented here
#include <math.h>   // sqrt
#include <string.h> // strcmp
#include "check.h"  // die, xcalloc
#include "data.h"   // rng_normal
#include "device.h" // dev_memcpy
#include "ledger.h" // LEDGER_ACTS
#include "ops.h"    // op_linear_fwd/bwd, op_gelu_fwd/bwd, op_add, op_fill
#include "ops_gpt.h" // op_layernorm_*, op_attention_*, op_embedding_*
#include "tensor.h" // tensor_alloc, tensor_free

/* rng stream of unit u's init: GPT_STREAM + u (model.c's MLP uses 0x1000 + u, data.c 1..4). */
#define GPT_STREAM 0x2000u
#define GPT_INIT_STD 0.02

const char *gpt_shape_error(gpt_shape_t s) {
  if (s.n_layer < 1 || s.n_head < 1 || s.n_embd < 1 || s.seq_len < 1 || s.vocab < 1)
    return "every dimension must be >= 1";
  if (s.n_embd % s.n_head != 0) return "n_embd must be divisible by n_head";
  if (s.vocab > 65536) return "vocab must be <= 65536";
  return NULL;
}

int gpt_preset(const char *name, gpt_shape_t *out) {
  if (strcmp(name, "tiny") == 0)
    *out = (gpt_shape_t){.n_layer = 2, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab = 256};
  else if (strcmp(name, "small") == 0)
    *out = (gpt_shape_t){.n_layer = 4, .n_head = 4, .n_embd = 128, .seq_len = 64, .vocab = 256};
  else if (strcmp(name, "124m-shape") == 0)
    *out = (gpt_shape_t){.n_layer = 12, .n_head = 12, .n_embd = 768, .seq_len = 1024, .vocab = 256};
  else return -1;
  return 0;
}

gpt_block_layout_t gpt_block_layout(int C) {
  gpt_block_layout_t l;
  int64_t c = C, at = 0;
  l.ln1w = at, at += c;
  l.ln1b = at, at += c;
  l.qkvw = at, at += 3 * c * c;
  l.qkvb = at, at += 3 * c;
  l.projw = at, at += c * c;
  l.projb = at, at += c;
  l.ln2w = at, at += c;
  l.ln2b = at, at += c;
  l.fcw = at, at += 4 * c * c;
  l.fcb = at, at += 4 * c;
  l.fcprojw = at, at += 4 * c * c;
  l.fcprojb = at, at += c;
  l.numel = at; /* 12C² + 13C */
  return l;
}

gpt_block_t gpt_block_whole(gpt_shape_t s) {
  return (gpt_block_t){.S = s.seq_len, .Ss = s.seq_len, .C = s.n_embd, .Cr = s.n_embd, .NHr = s.n_head,
                       .l = gpt_block_layout(s.n_embd)};
}

int64_t gpt_block_saved(const gpt_block_t *k) {
  int64_t S = k->S, Ss = k->Ss, C = k->C, Cr = k->Cr;
  return 3 * Ss * C + 4 * Ss + 12 * S * Cr + S * (k->att_fwd ? k->att_saved : (int64_t)k->NHr * S);
}

int64_t gpt_block_scratch_numel(const gpt_block_t *k, int B) {
  return (int64_t)B * k->S * (4 * (int64_t)k->Cr + k->C);
}

static int64_t emb_numel(gpt_shape_t s) { return ((int64_t)s.vocab + s.seq_len) * s.n_embd; }
static int64_t head_numel(gpt_shape_t s) { return (int64_t)s.vocab * s.n_embd + 2 * (int64_t)s.n_embd; }
/* saved fp32 elements per sample (gpt.h) */
static int64_t block_saved(gpt_shape_t s) {
  gpt_block_t k = gpt_block_whole(s);
  return gpt_block_saved(&k);
}
static int64_t head_saved(gpt_shape_t s) { return (int64_t)s.seq_len * s.n_embd + 2 * (int64_t)s.seq_len; }

void gpt_unit_sizes(gpt_shape_t s, int u, int64_t *numel, int64_t *y_numel, int64_t *saved_numel) {
  int64_t TC = (int64_t)s.seq_len * s.n_embd;
  if (u == 0) { /* the embedding: wte | wpe, keeps nothing */
    *numel = emb_numel(s), *y_numel = TC, *saved_numel = 0;
  } else if (u == s.n_layer + 1) { /* the head: its output is the logits */
    *numel = head_numel(s), *y_numel = (int64_t)s.seq_len * s.vocab, *saved_numel = head_saved(s);
  } else {
    *numel = gpt_block_layout(s.n_embd).numel, *y_numel = TC, *saved_numel = block_saved(s);
  }
}

int64_t gpt_count_params(gpt_shape_t s) {
  return emb_numel(s) + (int64_t)s.n_layer * gpt_block_layout(s.n_embd).numel + head_numel(s);
}

gpt_moe_params_t gpt_moe_count_params(gpt_shape_t s, gpt_moe_t moe) {
  int64_t C = s.n_embd, mlp = 8 * C * C + 5 * C, X = gpt_moe_expert_numel(C, moe.ffn), nm = 0;
  int E = moe.experts, every = moe.every;
  for (int l = 0; E > 0 && every > 0 && l < s.n_layer; l++) nm += l % every == every - 1;
  gpt_moe_params_t p;
  /* the MoE blocks' MLPs out, their routers and shared experts in */
  p.dense = gpt_count_params(s) - nm * mlp + nm * ((int64_t)E * C + (int64_t)moe.shared * X);
  p.expert = nm * (int64_t)E * X;
  p.total = p.dense + p.expert;
  p.active = p.dense + nm * (int64_t)moe.topk * X;
  return p;
}

int64_t gpt_moe_dense_rank(gpt_shape_t s, gpt_moe_t moe, int T, int64_t Vr) {
  int64_t C = s.n_embd, dense = gpt_moe_count_params(s, moe).dense;
  if (T <= 1) return dense;
  int64_t split = 2 * (int64_t)s.vocab * C, mine = 2 * Vr * C;
  for (int l = 0; l < s.n_layer; l++) {
    int is_moe = moe.experts > 0 && moe.every > 0 && l % moe.every == moe.every - 1;
    /* divisible by T: T divides the heads, so C */
    int64_t sb = is_moe ? 4 * C * C + 3 * C : 12 * C * C + 7 * C;
    split += sb, mine += sb / T;
  }
  return dense - split + mine;
}

static int64_t gpt_wsaved_numel(const model_t *m, int u); /* the split backward's (below) */

void gpt_init(model_t *m, gpt_shape_t s) {
  const char *why = gpt_shape_error(s);
  if (why)
    die("gpt shape n_layer %d n_head %d n_embd %d seq_len %d vocab %d: %s", s.n_layer, s.n_head, s.n_embd,
        s.seq_len, s.vocab, why);
  int U = s.n_layer + 2;
  *m = (model_t){.fns = &model_gpt_fns, .gpt = s, .in_numel = s.seq_len, .in_is_tokens = 1, .rows = s.seq_len,
                 .classes = s.vocab, .n_units = U};
  m->units = xcalloc((size_t)U, sizeof(unit_t), "gpt units");
  for (int u = 0; u < U; u++) {
    unit_t *un = &m->units[u];
    gpt_unit_sizes(s, u, &un->numel, &un->y_numel, &un->saved_numel);
  }
  for (int u = 0; u < U; u++) m->units[u].wsaved_numel = gpt_wsaved_numel(m, u);
  model_layout(m);
}

int64_t gpt_acts_bytes(gpt_shape_t s, int64_t b, int recompute) {
  return gpt_acts_bytes_tp(s, b, recompute, 1, 0);
}

int64_t gpt_cp_acts_bytes(gpt_shape_t s, int64_t b, int recompute, int64_t att_saved) {
  int64_t S = s.seq_len, E = s.n_embd, L = s.n_layer, V = s.vocab;
  int64_t block = 15 * S * E + 4 * S + S * att_saved, head = S * E + 2 * S;
  return 4 * b * (S * E * (L + 1) + S * V + (recompute ? (block > head ? block : head) : L * block + head));
}

int64_t gpt_acts_bytes_tp(gpt_shape_t s, int64_t b, int recompute, int t, int sp) {
  /* Ts: the residual's positions */
  int64_t T = s.seq_len, C = s.n_embd, L = s.n_layer, V = s.vocab, Ts = sp ? T / t : T;
  gpt_block_t k = {.S = s.seq_len, .Ss = (int)Ts, .C = s.n_embd, .Cr = s.n_embd / t, .NHr = s.n_head / t};
  int64_t blk = gpt_block_saved(&k), head = Ts * C + 2 * Ts;
  int64_t outs = Ts * C * (L + 1) + T * V / t; /* embedding and block outputs, logits */
  int64_t saved = recompute ? (blk > head ? blk : head) : L * blk + head;
  return 4 * b * (outs + saved);
}

/* ---- init: GPT-2's. N(0, 0.02) for every matrix (wte, wpe and the head too), the two residual
 * projections of a block scaled by 1/sqrt(2L), biases 0, LayerNorm w = 1 and b = 0. Value k of
 * unit u is rng_normal(seed, GPT_STREAM + u, k): a pure function of (seed, u, k). */
static void fill_normal(float *dst, int64_t lo, int64_t n, double std, uint64_t seed, int u) {
  for (int64_t k = lo; k < lo + n; k++)
    dst[k] = (float)std * rng_normal(seed, GPT_STREAM + (uint64_t)u, (uint64_t)k);
}
static void fill_const(float *dst, int64_t lo, int64_t n, float v) {
  for (int64_t k = lo; k < lo + n; k++) dst[k] = v;
}

static void gpt_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  if (u < 0 || u >= m->n_units) die("gpt init_unit: unit %d of %d", u, m->n_units);
  gpt_shape_t s = m->gpt;
  int64_t C = s.n_embd, V = s.vocab;
  const unit_t *un = &m->units[u];
  if (u == 0) fill_normal(dst, 0, un->numel, GPT_INIT_STD, seed, u); /* wte | wpe */
  else if (u == m->n_units - 1) {
    fill_const(dst, 0, C, 1.0f);                                    /* lnf w */
    fill_const(dst, C, C, 0.0f);                                    /* lnf b */
    fill_normal(dst, 2 * C, V * C, GPT_INIT_STD, seed, u);          /* head W (V,C) */
  } else {
    gpt_block_layout_t l = gpt_block_layout((int)C);
    double rstd = GPT_INIT_STD / sqrt(2.0 * s.n_layer);
    fill_const(dst, 0, l.numel, 0.0f);                              /* biases and LN b */
    fill_const(dst, l.ln1w, C, 1.0f);
    fill_const(dst, l.ln2w, C, 1.0f);
    fill_normal(dst, l.qkvw, 3 * C * C, GPT_INIT_STD, seed, u);
    fill_normal(dst, l.projw, C * C, rstd, seed, u);
    fill_normal(dst, l.fcw, 4 * C * C, GPT_INIT_STD, seed, u);
    fill_normal(dst, l.fcprojw, 4 * C * C, rstd, seed, u);
  }
  fill_const(dst, un->numel, un->padded - un->numel, 0.0f); /* pad slots */
}

/* ---- views (param_at, grad_at: model.h) ------------------------------------------------------ */
/* A block's saved activations, carved from io->saved in the order of gpt.h: each (B, ...) */
typedef struct block_acts {
  float *ln1, *mean1, *rstd1, *qkv, *att, *atty, *x2, *ln2, *mean2, *rstd2, *fch, *fchg;
} block_acts_t;
static block_acts_t block_acts(const gpt_block_t *k, int B, float *saved) {
  int64_t BT = (int64_t)B * k->S, BTs = (int64_t)B * k->Ss, BTC = BTs * k->C, BTCr = BT * k->Cr;
  block_acts_t a;
  float *p = saved;
  a.ln1 = p, p += BTC; /* the LayerNorm/residual region: B·Ss rows */
  a.mean1 = p, p += BTs;
  a.rstd1 = p, p += BTs;
  a.qkv = p, p += 3 * BTCr; /* attention and the MLP: B·S rows */
  a.att = p, p += BT * (k->att_fwd ? k->att_saved : (int64_t)k->NHr * k->S);
  a.atty = p, p += BTCr;
  a.x2 = p, p += BTC;
  a.ln2 = p, p += BTC;
  a.mean2 = p, p += BTs;
  a.rstd2 = p, p += BTs;
  a.fch = p, p += 4 * BTCr;
  a.fchg = p;
  return a;
}

/* The backward's scratch: (B, 5TC) fp32 on the device, LEDGER_ACTS; grown by the first unit of
 * a backward that needs it and freed by the last (the embedding's), so it lives only through
 * backward passes. */
static tensor_t g_scratch;
static float *scratch(device_t dev, int64_t numel) {
  if (g_scratch.data && (g_scratch.dev != dev || g_scratch.numel < numel)) tensor_free(&g_scratch);
  if (!g_scratch.data) g_scratch = tensor_alloc("gpt backward scratch", LEDGER_ACTS, DT_F32, dev, numel);
  return g_scratch.data;
}

/* ---- forward ---------------------------------------------------------------------------------- */
static void gpt_forward(const model_t *m, int u, const unit_io_t *io) {
  gpt_shape_t s = m->gpt;
  int B = io->B, T = s.seq_len, C = s.n_embd, V = s.vocab, BT = B * T;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  if (u == 0) { /* y = wte[tokens] + wpe */
    op_embedding_fwd(dev, io->y, io->x, param_at(io, 0), param_at(io, (int64_t)V * C), wdt, B, T, C, V);
    return;
  }
  const float *x = io->x;
  if (u == m->n_units - 1) { /* lnf, then logits = lnf · Wᵀ (no bias) */
    float *lnf = io->saved, *mean = lnf + (int64_t)BT * C, *rstd = mean + BT;
    op_layernorm_fwd(dev, lnf, mean, rstd, x, param_at(io, 0), param_at(io, C), wdt, BT, C);
    op_linear_fwd(dev, io->y, lnf, param_at(io, 2 * (int64_t)C), NULL, wdt, BT, C, V);
    return;
  }
  gpt_block_t k = gpt_block_whole(s);
  gpt_block_forward(&k, io);
}

/* The block's four matmuls through gpt_block_t's hooks (the split linears), or the plain ops. */
static void col_fwd(const gpt_block_t *k, const unit_io_t *io, float *y, const float *x, int64_t w, int64_t b,
                    int in, int out) {
  int rows = io->B * k->S;
  if (k->col_fwd) k->col_fwd(k->hook_ctx, y, x, param_at(io, w), param_at(io, b), io->wdt, rows, in, out);
  else op_linear_fwd(io->dev, y, x, param_at(io, w), param_at(io, b), io->wdt, rows, in, out);
}
static void row_fwd(const gpt_block_t *k, const unit_io_t *io, float *y, const float *x, int64_t w, int64_t b,
                    int in, int out) {
  int rows = io->B * k->S;
  if (k->row_fwd) k->row_fwd(k->hook_ctx, y, x, param_at(io, w), param_at(io, b), io->wdt, rows, in, out);
  else op_linear_fwd(io->dev, y, x, param_at(io, w), param_at(io, b), io->wdt, rows, in, out);
}
static void col_bwd(const gpt_block_t *k, const unit_io_t *io, float *dx, int64_t w, int64_t b,
                    const float *dy, const float *x, int in, int out) {
  int rows = io->B * k->S;
  if (k->col_bwd)
    k->col_bwd(k->hook_ctx, dx, grad_at(io, w), grad_at(io, b), dy, x, param_at(io, w), io->wdt, rows, in,
               out, io->beta);
  else
    op_linear_bwd(io->dev, dx, grad_at(io, w), grad_at(io, b), dy, x, param_at(io, w), io->wdt, rows, in, out,
                  io->beta);
}
static void row_bwd(const gpt_block_t *k, const unit_io_t *io, float *dx, int64_t w, int64_t b,
                    const float *dy, const float *x, int in, int out) {
  int rows = io->B * k->S;
  if (k->row_bwd)
    k->row_bwd(k->hook_ctx, dx, grad_at(io, w), grad_at(io, b), dy, x, param_at(io, w), io->wdt, rows, in,
               out, io->beta);
  else
    op_linear_bwd(io->dev, dx, grad_at(io, w), grad_at(io, b), dy, x, param_at(io, w), io->wdt, rows, in, out,
                  io->beta);
}

int64_t gpt_block_attn_saved(const gpt_block_t *k) { return gpt_block_saved(k) - 8 * (int64_t)k->S * k->Cr; }

void gpt_block_attn_forward(const gpt_block_t *k, const unit_io_t *io, float **x2, float **ln2) {
  int B = io->B, S = k->S, C = k->C, Cr = k->Cr, BTs = B * k->Ss;
  int64_t n = (int64_t)BTs * C;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  gpt_block_layout_t l = k->l;
  block_acts_t a = block_acts(k, B, io->saved);
  const float *x = io->x;
  (void)S;
  // (BTs,C)
  op_layernorm_fwd(dev, a.ln1, a.mean1, a.rstd1, x, param_at(io, l.ln1w), param_at(io, l.ln1b), wdt, BTs, C);
  col_fwd(k, io, a.qkv, a.ln1, l.qkvw, l.qkvb, C, 3 * Cr);                                      // (BT,3Cr)
  if (k->att_fwd) k->att_fwd(k->hook_ctx, a.atty, a.att, a.qkv, B, S, Cr, k->NHr);               // (BT,Cr)
  else op_attention_fwd(dev, a.atty, a.att, a.qkv, B, S, Cr, k->NHr);                           // (BT,Cr)
  row_fwd(k, io, a.x2, a.atty, l.projw, l.projb, Cr, C);                                        // (BTs,C)
  // x2 = x + attn
  op_add(dev, a.x2, x, DT_F32, n);
  op_layernorm_fwd(dev, a.ln2, a.mean2, a.rstd2, a.x2, param_at(io, l.ln2w), param_at(io, l.ln2b), wdt, BTs,
                   C);
  *x2 = a.x2, *ln2 = a.ln2;
}

const float *gpt_block_saved_ln2(const gpt_block_t *k, const unit_io_t *io) {
  return block_acts(k, io->B, io->saved).ln2;
}

void gpt_block_forward(const gpt_block_t *k, const unit_io_t *io) {
  int B = io->B, S = k->S, C = k->C, Cr = k->Cr, BT = B * S, BTs = B * k->Ss;
  int64_t n = (int64_t)BTs * C;
  device_t dev = io->dev;
  gpt_block_layout_t l = k->l;
  block_acts_t a = block_acts(k, B, io->saved);
  float *x2, *ln2;
  gpt_block_attn_forward(k, io, &x2, &ln2);
  col_fwd(k, io, a.fch, ln2, l.fcw, l.fcb, C, 4 * Cr);                                          // (BT,4Cr)
  op_gelu_fwd(dev, a.fchg, a.fch, (int64_t)BT * 4 * Cr);
  row_fwd(k, io, io->y, a.fchg, l.fcprojw, l.fcprojb, 4 * Cr, C);
  // y = x2 + mlp
  op_add(dev, io->y, x2, DT_F32, n);
}

/* ---- backward --------------------------------------------------------------------------------- */
static void gpt_backward(const model_t *m, int u, const unit_io_t *io) {
  gpt_shape_t s = m->gpt;
  int B = io->B, T = s.seq_len, C = s.n_embd, V = s.vocab, BT = B * T;
  int64_t n = (int64_t)BT * C;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  float beta = io->beta;
  if (u == 0) { /* dwte, dwpe; the input is tokens: no dx */
    op_embedding_bwd(dev, grad_at(io, 0), grad_at(io, (int64_t)V * C), io->dy, io->x, wdt, B, T, C, V, beta);
    tensor_free(&g_scratch); /* the last unit of the backward */
    return;
  }
  const float *x = io->x;
  float *dy = io->dy;
  if (u == m->n_units - 1) {
    const float *lnf = io->saved, *mean = lnf + n, *rstd = mean + BT;
    float *dlnf = scratch(dev, n);                                                              // (BT,C)
    op_linear_bwd(dev, dlnf, grad_at(io, 2 * (int64_t)C), NULL, dy, lnf, param_at(io, 2 * (int64_t)C), wdt,
                  BT, C, V, beta);
    if (io->dx) {
      op_fill(dev, io->dx, DT_F32, 0.0f, n); /* the LayerNorm backward accumulates into dx */
      op_layernorm_bwd(dev, io->dx, grad_at(io, 0), grad_at(io, C), dlnf, x, mean, rstd, param_at(io, 0), wdt,
                       BT, C, beta);
    }
    return;
  }
  gpt_block_t k = gpt_block_whole(s);
  gpt_block_backward(&k, io, scratch(dev, gpt_block_scratch_numel(&k, B)));
}

/* LayerNorm's backward through gpt_block_t's hook (sequence parallelism sums dw, db), or the plain op. */
static void ln_bwd(const gpt_block_t *k, const unit_io_t *io, float *dx, int64_t w, int64_t b,
                   const float *dy, const float *x, const float *mean, const float *rstd) {
  int rows = io->B * k->Ss;
  if (k->ln_bwd)
    k->ln_bwd(k->hook_ctx, dx, grad_at(io, w), grad_at(io, b), dy, x, mean, rstd, param_at(io, w), io->wdt,
              rows, k->C, io->beta);
  else
    op_layernorm_bwd(io->dev, dx, grad_at(io, w), grad_at(io, b), dy, x, mean, rstd, param_at(io, w), io->wdt,
                     rows, k->C, io->beta);
}

void gpt_block_attn_backward(const gpt_block_t *k, const unit_io_t *io, const float *dln2, float *work) {
  int B = io->B, S = k->S, Cr = k->Cr, BT = B * S, C = k->C;
  int64_t n = (int64_t)B * k->Ss * C;
  device_t dev = io->dev;
  gpt_block_layout_t l = k->l;
  block_acts_t a = block_acts(k, B, io->saved);
  const float *x = io->x;
  float *dy = io->dy;
  float *s4 = work, *s1 = s4 + 4 * (int64_t)BT * Cr, *s3 = s4; /* s1 (BT,C) or (BTs,C); s3 (BT,3Cr) */
  ln_bwd(k, io, dy, l.ln2w, l.ln2b, dln2, a.x2, a.mean2, a.rstd2);                             // dy := d x2
  // attention: x2 = x + proj(attn(qkv(ln1(x))))
  row_bwd(k, io, s1, l.projw, l.projb, dy, a.atty, Cr, C);                                      // d atty
  // d qkv (BT,3Cr)
  if (k->att_bwd) k->att_bwd(k->hook_ctx, s3, s1, a.qkv, a.atty, a.att, B, S, Cr, k->NHr);
  // d qkv (BT,3Cr)
  else op_attention_bwd(dev, s3, s1, a.qkv, a.att, B, S, Cr, k->NHr);
  // d ln1 (split: Σ partials)
  col_bwd(k, io, s1, l.qkvw, l.qkvb, s3, a.ln1, C, 3 * Cr);
  if (io->dx) {
    dev_memcpy(dev, io->dx, dev, dy, (size_t)n * sizeof(float)); /* the residual's gradient, then += LN's */
    ln_bwd(k, io, io->dx, l.ln1w, l.ln1b, s1, x, a.mean1, a.rstd1);
  }
}

void gpt_block_backward(const gpt_block_t *k, const unit_io_t *io, float *work) {
  int B = io->B, S = k->S, C = k->C, Cr = k->Cr, BT = B * S;
  device_t dev = io->dev;
  gpt_block_layout_t l = k->l;
  block_acts_t a = block_acts(k, B, io->saved);
  float *dy = io->dy;
  float *s4 = work, *s1 = s4 + 4 * (int64_t)BT * Cr; /* s4 (BT,4Cr), s1 (BT,C) or (BTs,C) */
  // MLP: dy is the gradient of y = x2 + fcproj(GELU(fc(ln2(x2)))); (split) g's backward is the identity: dy
  // is whole
  row_bwd(k, io, s4, l.fcprojw, l.fcprojb, dy, a.fchg, 4 * Cr, C);                             // d fchg
  op_gelu_bwd(dev, s4, s4, a.fch, (int64_t)BT * 4 * Cr);                                       // d fch
  // d ln2 (split: Σ partials)
  col_bwd(k, io, s1, l.fcw, l.fcb, s4, a.ln2, C, 4 * Cr);
  // dy := d x2, then attention
  gpt_block_attn_backward(k, io, s1, work);
}

/* ---- the backward in two halves (model.h: backward_input B, backward_weight W) ----------------
 * B runs backward's input-gradient chain and leaves, for W, the gradient of every weight GEMM's
 * output: over an activation only B reads where one has the shape (a block's qkv → d qkv, its
 * pre-GELU fch → d fch, the head's logits → d logits), the rest in wsaved (fp32 per token):
 *   embedding  d out                            C    (its output is the next unit's input: kept)
 *   block      d y | d ln2 | d x2 | d ln1      4C
 *   head       d lnf                           C
 * W then runs backward's weight-gradient ops on those, in any order (each writes its own tensor).
 * Each op is backward's own on the same operands: B then W is backward, bit for bit. The unsplit
 * block only (no gpt_block_t hooks: chapter 06's splits keep the fused backward). */
static int64_t gpt_wsaved_numel(const model_t *m, int u) {
  int64_t TC = (int64_t)m->gpt.seq_len * m->gpt.n_embd;
  return u == 0 || u == m->n_units - 1 ? TC : 4 * TC;
}

static void block_backward_input(const gpt_block_t *k, const unit_io_t *io, float *work) {
  int B = io->B, S = k->S, C = k->C, Cr = k->Cr, BT = B * S;
  int64_t n = (int64_t)B * k->Ss * C;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  gpt_block_layout_t l = k->l;
  block_acts_t a = block_acts(k, B, io->saved);
  float *dy = io->dy, *s4 = work, *s1 = s4 + 4 * (int64_t)BT * Cr, *s3 = s4;
  float *w_dy = io->wsaved, *w_dln2 = w_dy + n, *w_dx2 = w_dln2 + n, *w_dln1 = w_dx2 + n;
  // d y, for fcproj's W
  dev_memcpy(dev, w_dy, dev, dy, (size_t)n * sizeof(float));
  // d fchg
  op_linear_bwd_input(dev, s4, dy, param_at(io, l.fcprojw), wdt, BT, 4 * Cr, C);
  op_gelu_bwd(dev, s4, s4, a.fch, (int64_t)BT * 4 * Cr);                                        // d fch
  // over fch, for fc's W
  dev_memcpy(dev, a.fch, dev, s4, (size_t)BT * 4 * Cr * sizeof(float));
  // d ln2
  op_linear_bwd_input(dev, s1, s4, param_at(io, l.fcw), wdt, BT, C, 4 * Cr);
  dev_memcpy(dev, w_dln2, dev, s1, (size_t)n * sizeof(float));
  // dy := d x2
  op_layernorm_bwd_input(dev, dy, s1, a.x2, a.mean2, a.rstd2, param_at(io, l.ln2w), wdt, BT, C);
  // for proj's W
  dev_memcpy(dev, w_dx2, dev, dy, (size_t)n * sizeof(float));
  // d atty
  op_linear_bwd_input(dev, s1, dy, param_at(io, l.projw), wdt, BT, Cr, C);
  op_attention_bwd(dev, s3, s1, a.qkv, a.att, B, S, Cr, k->NHr);                                // d qkv
  // over qkv, for qkv's W
  dev_memcpy(dev, a.qkv, dev, s3, (size_t)BT * 3 * Cr * sizeof(float));
  // d ln1
  op_linear_bwd_input(dev, s1, s3, param_at(io, l.qkvw), wdt, BT, C, 3 * Cr);
  dev_memcpy(dev, w_dln1, dev, s1, (size_t)n * sizeof(float));
  if (io->dx) {
    dev_memcpy(dev, io->dx, dev, dy, (size_t)n * sizeof(float)); /* the residual's gradient, then += LN's */
    op_layernorm_bwd_input(dev, io->dx, s1, io->x, a.mean1, a.rstd1, param_at(io, l.ln1w), wdt, BT, C);
  }
}

static void block_backward_weight(const gpt_block_t *k, const unit_io_t *io) {
  int B = io->B, S = k->S, C = k->C, Cr = k->Cr, BT = B * S;
  int64_t n = (int64_t)B * k->Ss * C;
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  float beta = io->beta;
  gpt_block_layout_t l = k->l;
  block_acts_t a = block_acts(k, B, io->saved);
  const float *w_dy = io->wsaved, *w_dln2 = w_dy + n, *w_dx2 = w_dln2 + n, *w_dln1 = w_dx2 + n;
  op_linear_bwd_weight(dev, grad_at(io, l.fcprojw), grad_at(io, l.fcprojb), w_dy, a.fchg, wdt, BT, 4 * Cr, C,
                       beta);
  op_linear_bwd_weight(dev, grad_at(io, l.fcw), grad_at(io, l.fcb), a.fch, a.ln2, wdt, BT, C, 4 * Cr, beta);
  op_layernorm_bwd_weight(dev, grad_at(io, l.ln2w), grad_at(io, l.ln2b), w_dln2, a.x2, a.mean2, a.rstd2, wdt,
                          BT, C, beta);
  op_linear_bwd_weight(dev, grad_at(io, l.projw), grad_at(io, l.projb), w_dx2, a.atty, wdt, BT, Cr, C, beta);
  op_linear_bwd_weight(dev, grad_at(io, l.qkvw), grad_at(io, l.qkvb), a.qkv, a.ln1, wdt, BT, C, 3 * Cr, beta);
  /* (backward skips LN1's gradients without a dx, which a block never lacks: unit 0 is the embedding;
   * W takes no dx, so it does not ask) */
  op_layernorm_bwd_weight(dev, grad_at(io, l.ln1w), grad_at(io, l.ln1b), w_dln1, io->x, a.mean1, a.rstd1, wdt,
                          BT, C, beta);
}

static void gpt_backward_input(const model_t *m, int u, const unit_io_t *io) {
  gpt_shape_t s = m->gpt;
  int B = io->B, T = s.seq_len, C = s.n_embd, V = s.vocab, BT = B * T;
  int64_t n = (int64_t)BT * C;
  device_t dev = io->dev;
  if (u == 0) { /* the embedding has no input gradient: keep d out for its W */
    dev_memcpy(dev, io->wsaved, dev, io->dy, (size_t)n * sizeof(float));
    tensor_free(&g_scratch); /* the last unit of the backward, as in gpt_backward */
    return;
  }
  if (u == m->n_units - 1) {
    const float *lnf = io->saved, *mean = lnf + n, *rstd = mean + BT;
    /* d logits over the logits, for the head's W */
    dev_memcpy(dev, io->y, dev, io->dy, (size_t)BT * V * sizeof(float));
    op_linear_bwd_input(dev, io->wsaved, io->dy, param_at(io, 2 * (int64_t)C), io->wdt, BT, C, V); /* d lnf */
    if (io->dx) {
      op_fill(dev, io->dx, DT_F32, 0.0f, n);
      op_layernorm_bwd_input(dev, io->dx, io->wsaved, io->x, mean, rstd, param_at(io, 0), io->wdt, BT, C);
    }
    return;
  }
  gpt_block_t k = gpt_block_whole(s);
  block_backward_input(&k, io, scratch(dev, gpt_block_scratch_numel(&k, B)));
}

static void gpt_backward_weight(const model_t *m, int u, const unit_io_t *io) {
  gpt_shape_t s = m->gpt;
  int B = io->B, T = s.seq_len, C = s.n_embd, V = s.vocab, BT = B * T;
  int64_t n = (int64_t)BT * C;
  device_t dev = io->dev;
  if (u == 0) {
    op_embedding_bwd(dev, grad_at(io, 0), grad_at(io, (int64_t)V * C), io->wsaved, io->x, io->wdt, B, T, C, V,
                     io->beta);
    return;
  }
  if (u == m->n_units - 1) {
    const float *lnf = io->saved, *mean = lnf + n, *rstd = mean + BT;
    op_linear_bwd_weight(dev, grad_at(io, 2 * (int64_t)C), NULL, io->y, lnf, io->wdt, BT, C, V, io->beta);
    op_layernorm_bwd_weight(dev, grad_at(io, 0), grad_at(io, C), io->wsaved, io->x, mean, rstd, io->wdt, BT,
                            C, io->beta);
    return;
  }
  gpt_block_t k = gpt_block_whole(s);
  block_backward_weight(&k, io);
}

/* Forward FLOPs per sample, 2 per multiply-add: the matmuls of every token,
 *   T·(L·24C² + 2CV)      (qkv 3C², proj C², fc 4C², fcproj 4C² per layer; the head VC)
 * plus attention's two T×T products per layer counted in full (as PaLM's 6N + 12·L·C·T per
 * token for training counts them; the causal half the kernels skip is not subtracted):
 *   L·4·T²·C
 * Embedding lookups, LayerNorm, GELU, softmax and residual adds are not counted. */
static double gpt_flops_per_sample(const model_t *m) {
  gpt_shape_t s = m->gpt;
  double T = s.seq_len, C = s.n_embd, L = s.n_layer, V = s.vocab;
  return T * (L * 24.0 * C * C + 2.0 * C * V) + L * 4.0 * T * T * C;
}

const model_fns_t model_gpt_fns = {.name = "gpt",
                                   .init_unit = gpt_init_unit,
                                   .forward = gpt_forward,
                                   .backward = gpt_backward,
                                   .backward_input = gpt_backward_input,
                                   .backward_weight = gpt_backward_weight,
                                   .flops_per_sample = gpt_flops_per_sample};
