/* gpt.h — GPT-2 behind the model table (model.h): bytes as tokens, learned positions, pre-LN
 * blocks, final LayerNorm and an untied LM head (notes/design.md, "Models").
 *
 * Units, for the strategies each one flat range of parameters (C = n_embd, T = seq_len,
 * V = vocab, L = n_layer, NH = n_head):
 *   unit 0        embedding        wte (V,C) | wpe (T,C)                        V·C + T·C
 *   units 1..L    block l = u−1    ln1 w,b | qkv W (3C,C), b | proj W (C,C), b |
 *                                  ln2 w,b | fc W (4C,C), b | fcproj W (C,4C), b  12C² + 13C
 *   unit L+1      head             lnf w,b | head W (V,C) (no bias)             V·C + 2C
 * so Ψ = 2VC + TC + L(12C² + 13C) + 2C. The input of unit 0 is int32 tokens (B,T); every unit
 * after it reads the previous unit's output (B,T,C); the head's output is the logits (B,T,V).
 *
 * What each unit keeps for its backward (saved_numel, fp32 elements per SAMPLE; the loop keeps
 * every unit's output besides, which is the next unit's input):
 *   embedding  nothing                                                       0
 *   block      ln1 out TC, ln1 mean T, rstd T, qkv 3TC, att probs NH·T²,
 *              attention out TC, x2 = x + attn (ln2's input) TC, ln2 out TC,
 *              ln2 mean T, rstd T, fc pre-GELU 4TC, fc post-GELU 4TC      15TC + 4T + NH·T²
 *   head       lnf out TC, lnf mean T, rstd T                               TC + 2T
 * gpt_acts_bytes below turns this into the activation-memory formula the report prints. */
#ifndef ZL_GPT_H
#define ZL_GPT_H
#include <stdint.h> // int64_t
#include "model.h"  // model_t, model_fns_t, gpt_shape_t

extern const model_fns_t model_gpt_fns;

/* Build the GPT of this shape (unpadded layout, as model_init does for the MLP). Dies on a
 * shape gpt_shape_error rejects. */
void gpt_init(model_t *m, gpt_shape_t shape);
/* NULL when the shape is valid; else why not (static text): every field >= 1, n_embd a
 * multiple of n_head, vocab <= 65536. */
const char *gpt_shape_error(gpt_shape_t s);
/* Presets: "tiny" (L2 NH2 C32 T16: tests), "small" (L4 NH4 C128 T64: a CPU demo),
 * "124m-shape" (L12 NH12 C768 T1024: GPT-2 small's shape with V = 256). Returns 0, or −1 for
 * an unknown name. vocab is 256 (bytes) in all three. */
int gpt_preset(const char *name, gpt_shape_t *out);
/* Ψ of a shape, without building it. */
int64_t gpt_count_params(gpt_shape_t s);
/* Unit u's sizes as gpt_init sets them, without building the model (u = 0: the embedding, 1..L the
 * blocks, L+1 the head; the table above): its parameters, its output and its saved activations, fp32
 * elements per sample. A pipeline stage's slot (chapter 07) and ch00_memory --pp are sums of these. */
void gpt_unit_sizes(gpt_shape_t s, int u, int64_t *numel, int64_t *y_numel, int64_t *saved_numel);

/* A Mixture-of-Experts GPT's experts (chapter 12, solutions/moe.h): every m-th block (blocks m−1,
 * 2m−1, ...) has E routed expert MLPs of hidden width F (0: the dense MLP's 4C), k of them per token,
 * S shared experts of the same width that every token goes through (DeepSeekMoE's), and a router (E·C,
 * no bias) in place of its MLP. E = 0: the dense GPT. */
typedef struct gpt_moe { int experts, topk, every, ffn, shared; } gpt_moe_t;
/* One expert MLP's parameters: fc W (F, C), b (F), fcproj W (C, F), b (C) = 2FC + F + C (8C² + 5C at F =
 * 4C: the dense block's MLP). */
static inline int64_t gpt_moe_expert_numel(int64_t C, int ffn) {
  int64_t F = ffn > 0 ? ffn : 4 * C;
  return 2 * F * C + F + C;
}
/* Ψ of that GPT: total (every expert), active per token (k routed experts of each MoE block, the shared
 * ones and the rest), expert (every routed expert's), dense (the rest: routers and shared experts
 * included). */
typedef struct gpt_moe_params { int64_t total, active, expert, dense; } gpt_moe_params_t;
gpt_moe_params_t gpt_moe_count_params(gpt_shape_t s, gpt_moe_t moe);
/* The dense parameters one rank of a T-way tensor-parallel split of that GPT keeps (Megatron's split,
 * solutions/tp_gpt.c; chapter 12's --tp inside the EP group): the replicated ones (LayerNorms, wpe,
 * the row-parallel biases, the routers, the shared experts) whole, 1/T of every block's qkv and proj
 * (4C² + 3C) and of a dense block's MLP (8C² + 4C more), and Vr of the V rows of wte and of the head.
 * T = 1: dense. */
int64_t gpt_moe_dense_rank(gpt_shape_t s, gpt_moe_t moe, int T, int64_t Vr);

/* Offsets (elements) of one block's tensors inside its unit. */
typedef struct gpt_block_layout {
  int64_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, numel;
} gpt_block_layout_t;
gpt_block_layout_t gpt_block_layout(int C);

/* ---- one block, forward and backward: the unsplit GPT's units 1..L and Megatron's split of them
 * (solutions/tp_gpt.c) run this same sequence. What differs is in gpt_block_t: the widths of this
 * rank's part of attention and of the MLP (Cr = C and NHr = NH unsplit; C/T and NH/T heads with
 * T-way tensor parallelism), where each tensor sits in the unit (layout l), and, when split, the
 * column-parallel (qkv, fc) and row-parallel (proj, fcproj) linears that carry Megatron's f and g:
 * chapter 06's exercises tp_column_* / tp_row_* (solutions/tp.h). With the hooks NULL each matmul
 * is the plain op_linear_fwd / op_linear_bwd with its bias. */
typedef struct gpt_block {
  int S, C;            /* seq_len and n_embd: attention and the MLP see the whole sequence (B·S rows) */
  int Ss;              /* rows per sample of the LayerNorm/residual region here: S, or S/T with sequence
                        * parallelism (solutions/tp_sp.c): x, y, ln1, x2, ln2 are then (B·Ss, C) and
                        * the column hooks gather them to B·S rows, the row hooks scatter back */
  int Cr, NHr;         /* attention on NHr heads, Cr features (qkv 3Cr, atty Cr); the MLP 4Cr wide */
  gpt_block_layout_t l; /* offsets (elements) of the block's tensors in its unit */
  void *hook_ctx;      /* the hooks' first argument (solutions/tp_gpt.c: its split) */
  /* The arguments of op_linear_fwd / op_linear_bwd (common/device/ops.h), rows = B·S, b in wdt; the
   * LayerNorm side (a column hook's x and dx, a row hook's y and dy) has B·Ss rows:
   * column-parallel: x whole on every rank, y this rank's output features (f around it) */
  void (*col_fwd)(void *ctx, float *y, const float *x, const void *W, const void *b, dtype_t wdt, int rows,
                  int in, int out);
  void (*col_bwd)(void *ctx, float *dx, void *dW, void *db, const float *dy, const float *x, const void *W,
                  dtype_t wdt, int rows, int in, int out, float beta);
  /* row-parallel: x this rank's input features, y (rows, C) summed over the group (g), + b once */
  void (*row_fwd)(void *ctx, float *y, const float *x, const void *W, const void *b, dtype_t wdt, int rows,
                  int in, int out);
  void (*row_bwd)(void *ctx, float *dx, void *dW, void *db, const float *dy, const float *x, const void *W,
                  dtype_t wdt, int rows, int in, int out, float beta);
  /* Attention on qkv (B·S, 3Cr) → atty (B·S, Cr), saving att_saved fp32 per token in att (NULL:
   * op_attention_fwd/bwd on B whole sequences of S, att_saved = NHr·S: the probabilities). Context
   * parallelism (solutions/cp.h) puts its ring here: its B·S tokens are chunks of longer sequences,
   * and it saves NHr per token (the log-sum-exp), not the S² probabilities. */
  void (*att_fwd)(void *ctx, float *atty, float *att, const float *qkv, int B, int S, int Cr, int NHr);
  void (*att_bwd)(void *ctx, float *dqkv, const float *datty, const float *qkv, const float *atty,
                  const float *att, int B, int S, int Cr, int NHr);
  int64_t att_saved;   /* with att_fwd: fp32 elements att keeps per token */
  /* op_layernorm_bwd's arguments (common/device/ops_gpt.h), rows = B·Ss; NULL: the plain op. With Ss < S
   * each rank's dw, db are a partial sum over its rows: sequence parallelism sums them here. */
  void (*ln_bwd)(void *ctx, float *dx, void *dw, void *db, const float *dy, const float *x, const float *mean,
                 const float *rstd, const void *w, dtype_t wdt, int rows, int C, float beta);
} gpt_block_t;
/* The unsplit block of shape s: Ss = S, Cr = C, NHr = NH, gpt_block_layout, no hooks. */
gpt_block_t gpt_block_whole(gpt_shape_t s);
/* fp32 elements a block saves per sample (its saved_numel): 3Ss·C + 4Ss + 12S·Cr + NHr·S²
 * (= 15SC + 4S + NH·S² unsplit; gpt.h's table at the top); with att_fwd, S·att_saved for NHr·S². */
int64_t gpt_block_saved(const gpt_block_t *k);
/* fp32 scratch a block's backward needs for B samples: B·S·(4Cr + C). */
int64_t gpt_block_scratch_numel(const gpt_block_t *k, int B);
/* One block's forward on io (model.h's unit contract): y (B·Ss, C) from x, its activations into
 * io->saved in the order of the table above. */
void gpt_block_forward(const gpt_block_t *k, const unit_io_t *io);
/* Its backward: parameter gradients (io->beta accumulation), io->dx when not NULL; io->dy is
 * overwritten (it carries the gradient of x2 midway). work: gpt_block_scratch_numel fp32 on
 * io->dev (the caller's; contents irrelevant). */
void gpt_block_backward(const gpt_block_t *k, const unit_io_t *io, float *work);

/* The attention half of a block, for a block whose MLP is another's (chapter 12's experts,
 * solutions/moe.h): ln1, qkv, attention, proj, the residual x2 = x + attn and ln2's output, saved
 * in the first gpt_block_attn_saved(k) floats per sample of io->saved (the table's order, without
 * fch and fchg: gpt_block_saved − 8·S·Cr). *x2 and *ln2 point at them (B·Ss rows of C).
 * gpt_block_forward is this, then the MLP; gpt_block_backward the MLP's backward (d ln2), then
 * gpt_block_attn_backward: io->dy holds d y on entry (the residual's share of d x2), d x2 after;
 * dln2 the gradient of ln2's output (may be in work: read before work is reused); work as
 * gpt_block_backward's. */
int64_t gpt_block_attn_saved(const gpt_block_t *k);
void gpt_block_attn_forward(const gpt_block_t *k, const unit_io_t *io, float **x2, float **ln2);
void gpt_block_attn_backward(const gpt_block_t *k, const unit_io_t *io, const float *dln2, float *work);
/* ln2's output as the forward saved it in io->saved (B·Ss rows of C): what a block's MLP read. */
const float *gpt_block_saved_ln2(const gpt_block_t *k, const unit_io_t *io);

/* Activation bytes the loop keeps for a micro-batch of b samples: every unit's output plus
 * every unit's saved activations (recompute = 0), or every output plus ONE shared saved buffer
 * of the largest unit (recompute = 1). With s = T, h = C, a = NH, fp32:
 *   per block   4·s·b·h·(16 + 4/h + a·s/h)      = output sbh + saved (15sbh + 4sb + a·s²·b), ×4 B
 *   total       4b·[ s·h (embedding out) + L·(16sh + 4s + a·s²) + (s·h + 2s) + s·V (head) ]
 *   recompute   4b·[ s·h·(L+1) + s·V + max(15sh + 4s + a·s², sh + 2s) ]
 * Korthikanti et al. 2022 count s·b·h·(34 + 5as/h) BYTES per layer in 16 bit; see gpt.c. */
int64_t gpt_acts_bytes(gpt_shape_t s, int64_t b, int recompute);
/* The same per rank of t-way tensor parallelism (solutions/tp_gpt.c; t dividing n_head, n_embd and
 * vocab): the block's qkv, attention, fc tensors and the logits at 1/t; with sp (sequence
 * parallelism, t dividing seq_len) the LayerNorm/residual tensors and every unit output too, so
 * that everything is 1/t: gpt_acts_bytes_tp(s, b, r, t, 1) = gpt_acts_bytes(s, b, r) / t. t = 1:
 * gpt_acts_bytes. */
int64_t gpt_acts_bytes_tp(gpt_shape_t s, int64_t b, int recompute, int t, int sp);
/* Context parallelism's (solutions/cp_gpt.c, chapter 10): activation bytes a rank keeps for b loop
 * samples, b·S tokens that are S/C positions of C·b sequences, when each block's attention saves
 * att_saved fp32 per token (the ring's log-sum-exp: n_head; Ulysses', the hybrid's: ulysses.h):
 *   4b·[S·E·(L+1) + S·V + L·(15SE + 4S + S·att_saved) + S·E + 2S]
 * linear in S (no S² term); --recompute: the L blocks' and the head's saved activations one buffer of
 * the largest. att_saved = n_head·S gives gpt_acts_bytes. ch00_memory --cp C is this over C. */
int64_t gpt_cp_acts_bytes(gpt_shape_t s, int64_t b, int recompute, int64_t att_saved);
#endif
