/* tp_sp.h — Megatron-LM's sequence parallelism (Korthikanti et al. 2022, "Reducing Activation
 * Recomputation in Large Transformer Models", §4.2.2) on chapter 06's tensor parallelism: --sp
 * (notes/10-long-sequences.md, "Part 1 — sequence parallelism").
 *
 * With plain TP the attention and the MLP are split by heads / features, but the LayerNorms and the
 * residual adds between them run on the WHOLE (B, S, C) stream on every rank of the group: T copies
 * of the same work and of the same activations. Those regions act on each token alone, so they can
 * be split along the sequence instead: rank r of T holds positions [r·S/T, (r+1)·S/T) of every
 * sample, a (B, S/T, C) slice. The two conjugate operators of tp.h change where the regions meet:
 *   g   (into a column-parallel linear)  forward: all-gather along the sequence (B, S/T, C) → (B, S, C)
 *                                       backward: reduce-scatter along the sequence
 *   ḡ   (out of a row-parallel linear)   forward: reduce-scatter along the sequence (B, S, C) → (B, S/T,
 * C)
 *                                       backward: all-gather along the sequence
 * An all-reduce is a reduce-scatter followed by an all-gather, so g + ḡ move the bytes of the two
 * all-reduces they replace; what changes is that nothing between them is held whole. The
 * LayerNorm weights are the same on every rank but each rank's gradient covers its own positions:
 * their gradients are summed over the group (one all-reduce of 2C per LayerNorm and micro-batch).
 * Like Megatron, a column-parallel linear keeps only its (B, S/T, C) input for the backward and
 * gathers it again there for the weight gradient (one more all-gather: the memory is 1/T).
 *
 * Layout: activations are (B, S, C), sample-major, so this rank's slice is B blocks of S/T rows,
 * not one contiguous range; comm's all-gather and reduce-scatter deal in contiguous chunks (chunk q
 * from / to rank q), so the two exercises below permute through a staging buffer.
 * Files: tp_sp.c (the exercises, the split linears and LayerNorm backward with the sequence
 * collectives), tp_gpt.c (the GPT's units with --sp), tp_split.c (tp_sp_transform). */
#ifndef ZL_TP_SP_H
#define ZL_TP_SP_H
#include <stdint.h> // int64_t
#include "comm.h"   // comm_t
#include "dtype.h"  // dtype_t
#include "tensor.h" // tensor_t

/* ---- the sequence collectives (the exercises tp_sp_all_gather, tp_sp_reduce_scatter) -------
 * full (B, S, C) and part (B, S/T, C), fp32 on comm_device(tp), T = comm_world(tp) dividing S;
 * stage: B·S·C fp32 of scratch on the same device (contents irrelevant). */
/* full = this rank's part and every other rank's, each at its positions: full[b, q·S/T + s, :] =
 * part of rank q [b, s, :]. One all-gather of B·S·C elements over tp. */
void tp_sp_all_gather(comm_t *tp, float *full, const float *part, float *stage, int B, int S, int C);
/* part[b, s, :] = Σ over the group of full[b, r·S/T + s, :] (r = this rank): every rank's full is a
 * partial sum, this rank keeps the total at its own positions. One reduce-scatter of B·S·C. */
void tp_sp_reduce_scatter(comm_t *tp, float *part, const float *full, float *stage, int B, int S, int C);

/* ---- what a split GPT keeps for --sp ---------------------------------------------------------- */
typedef struct tp_sp {
  comm_t *tp;          /* the TP group (not owned) */
  int T, S, Sl;        /* group size, sequence, this rank's part Sl = S/T */
  /* working buffers, LEDGER_ACTS, grown on first use (B·S·C fp32): */
  tensor_t full[2];    /* gathered inputs, partial outputs */
  tensor_t stage;      /* the permutation's staging */
  tensor_t ln;         /* (4C) fp32: a LayerNorm's dw | db partials, its fp32 weight, a cast */
} tp_sp_t;

/* The sequence split of S positions over tp: dies (naming T and S) when T does not divide S. */
tp_sp_t *tp_sp_new(comm_t *tp, int S);
void tp_sp_free(tp_sp_t *sp);
/* Working buffer k (0 or 1) of at least numel fp32 on comm_device(sp->tp). */
float *tp_sp_buffer(tp_sp_t *sp, int k, int64_t numel);
/* tp_sp_all_gather / tp_sp_reduce_scatter with sp's own staging buffer. */
void tp_sp_gather(tp_sp_t *sp, float *full, const float *part, int B, int C);
void tp_sp_scatter(tp_sp_t *sp, float *part, const float *full, int B, int C);

/* ---- the split linears with the sequence collectives -----------------------------------------
 * tp.h's four with x / dx (column) or y / dy (row) on the LayerNorm side as (B·S/T, C) parts; the
 * other side is (B·S, features_r) as in plain TP. B is the samples (rows = B·S on the whole side). */
/* g, then the local linear: y (B·S, out_r) from x_part gathered. */
void tp_sp_column_forward(tp_sp_t *sp, float *y, const float *x_part, const void *W_r, const void *b_r,
                          dtype_t wdt, int B, int in, int out_r);
/* x_part gathered again (the weight gradient needs every position), the local backward, then g's
 * backward: dx (B·S, in) partial sums → reduce-scatter into dx_part (NULL: no input gradient). */
void tp_sp_column_backward(tp_sp_t *sp, float *dx_part, void *dW_r, void *db_r, const float *dy,
                           const float *x_part, const void *W_r, dtype_t wdt, int B, int in, int out_r,
                           float beta);
/* The local linear (no bias), ḡ (reduce-scatter) into y_part (B·S/T, out), then + b (fp32) once. */
void tp_sp_row_forward(tp_sp_t *sp, float *y_part, const float *x_r, const void *W_r, const float *b,
                       dtype_t wdt, int B, int in_r, int out);
/* ḡ's backward (all-gather dy_part), then the local backward: dx_r, dW_r, and db (the whole dy: the
 * same on every rank). */
void tp_sp_row_backward(tp_sp_t *sp, float *dx_r, void *dW_r, void *db, const float *dy_part,
                        const float *x_r, const void *W_r, dtype_t wdt, int B, int in_r, int out, float beta);
/* op_layernorm_bwd on this rank's rows, with dw and db summed over the group (one all-reduce of 2C
 * fp32) before they are stored with beta: the weights are replicated, the positions split. */
void tp_sp_layernorm_backward(tp_sp_t *sp, float *dx, void *dw, void *db, const float *dy, const float *x,
                              const float *mean, const float *rstd, const void *w, dtype_t wdt, int rows,
                              int C, float beta);
#endif
