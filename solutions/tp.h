/* tp.h — chapter 06's adapter: Megatron-LM's tensor parallelism (notes/06-tensor-parallel.md).
 *
 * T ranks of one tensor-parallel group (`tp`, a comm_split communicator: common/comm/grid.h) share
 * each split layer. Megatron's two conjugate operators carry all of its communication:
 *   f   forward: identity (every rank already holds the whole input)
 *       backward: all-reduce (each rank's input gradient is a partial sum over its slice)
 *   g   forward: all-reduce (each rank's output is a partial sum over its slice)
 *       backward: identity (every rank needs the whole output gradient, and has it)
 * Column-parallel linear (split by output features): f, then a local matmul; its output is this
 * rank's columns of y. Row-parallel linear (split by input features): a local matmul on this rank's
 * columns of x gives a partial y, then g sums the partials. Column → GELU → row needs nothing in
 * between: GELU acts on whole columns (the worked example shows why the other order fails).
 *
 * Slices are contiguous, shape-annotated (out_r, in) / (out, in_r) buffers on comm_device(tp); a
 * row-parallel weight's columns are copied out of W row by row (tp_row_slice), so the local
 * matmul is the ordinary op_linear_fwd. Parts follow comm.h's chunks: rank r of T holds features
 * [comm_chunk_lo(n, T, r), comm_chunk_lo(n, T, r+1)), i.e. [r·n/T, (r+1)·n/T) when T divides n.
 * Activations are fp32 (as in every chapter); the split linears take the weights in the run's
 * working dtype (fp32 or bf16), the MLP block of chapter 06's check is fp32.
 *
 * Files: tp.c (f, g, the split linears, the block: the exercises), tp_split.c (TP as train.h's
 * model transform, tp_transform), tp_mlp.c and tp_gpt.c (the two models, split). */
#ifndef ZL_TP_H
#define ZL_TP_H
#include <stdint.h>           // int64_t
#include "comm.h"   // comm_t, comm_chunk_lo, comm_chunk_numel
#include "tensor.h" // tensor_t
#include "model.h"  // model_t
#include "dtype.h"  // dtype_t
#include "gpt.h"    // gpt_block_t

/* ---- f and g (the exercises tp_f_backward, tp_g_forward) --------------------------------- */
void tp_f_forward(comm_t *tp, const float *x, int64_t numel);   /* identity: nothing moves */
void tp_f_backward(comm_t *tp, float *dx, int64_t numel);       /* dx = Σ over the group, in place */
void tp_g_forward(comm_t *tp, float *y, int64_t numel);         /* y = Σ over the group, in place */
void tp_g_backward(comm_t *tp, const float *dy, int64_t numel); /* identity: nothing moves */

/* ---- slices (host memory; not exercises) --------------------------------------------------- */
/* First feature and number of features of rank r's part of n features. */
static inline int tp_part_lo(int n, int T, int r) { return (int)comm_chunk_lo(n, T, r); }
static inline int tp_part_numel(int n, int T, int r) { return (int)comm_chunk_numel(n, T, r); }
/* Column split of W (out, in) and b (out): W_r (out_r, in) = rows [lo, lo+out_r) of W (already
 * contiguous), b_r (out_r) = b[lo, lo+out_r). b / b_r may be NULL. */
void tp_column_slice(float *W_r, float *b_r, const float *W, const float *b, int in, int out, int T, int r);
/* Row split of W (out, in): W_r (out, in_r) = columns [lo, lo+in_r) of W, stored contiguously. */
void tp_row_slice(float *W_r, const float *W, int in, int out, int T, int r);
/* Rank r's columns of a (B, n) activation: x_r (B, n_r) = x[:, lo:lo+n_r], contiguous. */
void tp_cols_of(float *x_r, const float *x, int B, int n, int T, int r);

/* ---- the split linears (exercises): what training runs -------------------------------------
 * The arguments follow op_linear_fwd / op_linear_bwd (common/device/ops.h): weights and their gradients
 * in wdt (DT_F32 or DT_BF16), activations fp32, beta 0 to overwrite the gradients or 1 to
 * accumulate them (micro-batches). The split MLP and the split GPT train through these four
 * (tp_split.c, tp_gpt.c), the block below and chapter 06's checks call them too. */
/* Column-parallel forward: f, then y_r(B, out_r) = x(B, in) · W_rᵀ + b_r (b_r NULL: no bias). */
void tp_column_forward(comm_t *tp, float *y_r, const float *x, const void *W_r, const void *b_r, dtype_t wdt,
                       int B, int in, int out_r);
/* Column-parallel backward from dy_r (B, out_r): dW_r = β·dW_r + dy_rᵀ·x, db_r = β·db_r + Σ_rows dy_r
 * (this rank's slices; db_r NULL: no bias), then dx(B, in) = dy_r · W_r — a partial sum — completed
 * by f's backward (all-reduce). dx may be NULL (first layer: no input gradient, no all-reduce). */
void tp_column_backward(comm_t *tp, float *dx, void *dW_r, void *db_r, const float *dy_r, const float *x,
                        const void *W_r, dtype_t wdt, int B, int in, int out_r, float beta);
/* Row-parallel forward: partial y(B, out) = x_r(B, in_r) · W_rᵀ (no bias), g (all-reduce), then + b
 * once, after the sum (b: the whole bias, fp32, the same on every rank). */
void tp_row_forward(comm_t *tp, float *y, const float *x_r, const void *W_r, const float *b, dtype_t wdt,
                    int B, int in_r, int out);
/* Row-parallel backward from dy (B, out), the same on every rank (g's backward is the identity):
 * dx_r(B, in_r) = dy · W_r (local, complete), dW_r = β·dW_r + dyᵀ·x_r, db = β·db + Σ_rows dy (whole
 * bias: every rank computes the same). Nothing moves. dx_r may be NULL. */
void tp_row_backward(comm_t *tp, float *dx_r, void *dW_r, void *db, const float *dy, const float *x_r,
                     const void *W_r, dtype_t wdt, int B, int in_r, int out, float beta);

/* ---- the tensor-parallel MLP block: y = GELU(x·W1ᵀ + b1)·W2ᵀ + b2 ------------------------ */
/* W1 (ffn, h) column-parallel, W2 (h, ffn) row-parallel: one all-reduce forward (g), one backward
 * (f), each of B·h elements. This rank's parameters live in one flat buffer (the layout ZeRO
 * would shard on the DP dimension), its gradients in another with the same layout:
 *   params | W1_r (ffn_r, h) | b1_r (ffn_r) | W2_r (h, ffn_r) | b2 (h) |   (b2 replicated)    */
typedef struct tp_mlp {
  comm_t *tp;                   /* the TP group (not owned) */
  int T, r;                     /* group size, this rank in it */
  int B, h, ffn, ffn_r;         /* rows, model width, full and local hidden width */
  tensor_t params;              /* (ffn_r·h + ffn_r + h·ffn_r + h) LEDGER_PARAMS */
  tensor_t grads;               /* same layout, LEDGER_GRADS */
  float *W1, *b1, *W2, *b2;     /* views into params */
  float *dW1, *db1, *dW2, *db2; /* views into grads */
  tensor_t acts;                /* (3·B·ffn_r) LEDGER_ACTS: a, u, d below */
  float *a, *u, *d;             /* (B, ffn_r) each: pre-GELU, post-GELU, and their gradient */
} tp_mlp_t;

/* Collective-free: keeps rank comm_rank(tp)'s slices of the full host weights W1 (ffn, h), b1
 * (ffn), W2 (h, ffn), b2 (h) (every rank passes the same). ffn >= T. Free with tp_mlp_free. */
tp_mlp_t *tp_mlp_new(comm_t *tp, int B, int h, int ffn, const float *W1, const float *b1, const float *W2,
                     const float *b2);
void tp_mlp_free(tp_mlp_t *m);
/* The same block on one rank with the plain ops, the reference the split block is checked
 * against: a = x·W1ᵀ + b1, u = GELU(a), y = u·W2ᵀ + b2, then from dy (B, h): dx (B, h) and the
 * full gradients dW1 (ffn, h), db1 (ffn), dW2 (h, ffn), db2 (h). Host fp32; scratch freed here. */
void tp_mlp_reference(int B, int h, int ffn, const float *x, const float *W1, const float *b1,
                      const float *W2, const float *b2, const float *dy, float *y, float *dx, float *dW1,
                      float *db1, float *dW2, float *db2);
/* y (B, h) from x (B, h), both whole on every rank; saves a and u for the backward. */
void tp_mlp_forward(tp_mlp_t *m, float *y, const float *x);
/* From dy (B, h), the same on every rank, and the forward's x: this rank's parameter gradients
 * (overwritten) and dx (B, h), whole on every rank. */
void tp_mlp_backward(tp_mlp_t *m, float *dx, const float *dy, const float *x);

/* What one forward + backward of the block sends, per rank (the formula the counters must equal):
 * 2 all-reduces of B·h fp32 elements, each 2(T−1)/T of its bytes (comm.h's ring model, exact per
 * rank when T does not divide B·h). */
static inline int64_t tp_mlp_allreduce_numel(int B, int h) { return (int64_t)B * h; }
static inline int64_t tp_mlp_calls_per_step(void) { return 2; }
static inline int64_t tp_mlp_bytes_per_step(int B, int h, int T, int r) {
  return 2 * comm_model_sent(CO_ALL_REDUCE, tp_mlp_allreduce_numel(B, h), DT_F32, T, r, 0);
}

/* ---- training a whole model with TP: a model transform (train.h) ---------------------------
 * What chapters 06 and 07 set as cfg.transform: --tp T > 1 splits the model with tp_split_model,
 * and the loop, the gradient norm, the report and the export ask it what only TP knows
 * (solutions/tp_split.c). */
struct model_transform;
extern const struct model_transform tp_transform;
/* --sp: tensor parallelism with Megatron's sequence parallelism on the GPT (solutions/tp_sp.h). */
extern const struct model_transform tp_sp_transform;

/* Turns the full model m (as the launcher built it) into this rank's part over the TP group tp,
 * in place: the same units in the same order, each unit's parameters this rank's slice, and the
 * unit's forward/backward the split linears above. MLP (tp_mlp.c): units paired as Megatron does,
 * (0, 1), (2, 3), ...: the first of a pair column-parallel (W, b split by output features; GELU on
 * the local columns), the second row-parallel (W split by input features, then g; its bias whole
 * on every rank, added once after the sum); an odd last unit stays replicated. GPT (tp_gpt.c): the
 * heads and the MLP of every block, the vocabulary of the embedding and the head. A local unit's
 * parameters: the replicated ones first, then the split ones. Its init is the full unit's init,
 * sliced, so T ranks start (and, up to the all-reduce's summation order, train) exactly as 1 rank
 * does. Keeps what it needs in m->ctx (freed by model_free). Dies when a split dimension is smaller
 * than T. Not collective. */
void tp_split_model(model_t *m, comm_t *tp);

/* A split model's map between full-model coordinates and TP rank q's part (m split by
 * tp_split_model; checkpoints and the export use it): full unit u (the unsplit model's layout, its
 * numel floats) ↔ q's local unit u (tp_unit_local_numel floats, unpadded); full → local when
 * to_local, else local → full (a replicated parameter is written by every q: the same values). */
void tp_map_unit(const model_t *m, int u, int q, float *full, float *local, int to_local);
int64_t tp_unit_local_numel(const model_t *m, int u, int q);
int64_t tp_full_unit_numel(const model_t *m, int u); /* the unsplit unit's parameters */

/* ---- chapter 12: TP on the attention of a MoE block (solutions/ep_tp.c, moe_model.c) -------------------
 * m: a GPT split by tp_split_model. A MoE block keeps its attention half split as the dense blocks
 * do, without the MLP's tensors: local layout ln1 w,b | proj b | ln2 w,b (tp_gpt_attn_rep_numel = 5C
 * replicated) | qkv W_r (3Cr,C), b_r (3Cr) | proj W_r (C,Cr): tp_gpt_attn_numel floats. The block for
 * gpt.h's gpt_block_attn_forward/backward (the split linears as hooks, that layout), and the map of
 * TP rank q's part ↔ the full block's first gpt_block_layout(C).fcw floats (ln1 .. ln2, full order). */
gpt_block_t tp_gpt_attn_block(const model_t *m);
int64_t tp_gpt_attn_numel(const model_t *m);
int64_t tp_gpt_attn_rep_numel(const model_t *m);
void tp_gpt_attn_map(const model_t *m, int q, float *full, float *local, int to_local);
#endif
