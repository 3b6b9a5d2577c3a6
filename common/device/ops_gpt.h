/* ops_gpt.h — the kernels a GPT-2 block needs beyond ops.h: LayerNorm, causal multi-head
 * self-attention, token + position embedding. CPU in ops_gpt_cpu.c (OpenBLAS for the attention
 * matmuls), CUDA in ops_gpt_cuda.cu (cuBLAS strided-batched GEMMs, own kernels for the rest).
 * The rest of the block is ops.h: op_linear_fwd/bwd (B·T rows; b == NULL: no bias, the LM head),
 * op_gelu_fwd/bwd, op_add (residual, DT_F32), op_softmax_xent (rows B·T, classes V).
 *
 * Conventions are ops.h's: device first, raw pointers (on that device), activations always fp32,
 * weights and weight-gradients in the working dtype wdt (DT_F32 or DT_BF16: math in fp32 on the
 * widened values, one rounding when storing), weight-gradients with `beta` (0 overwrite,
 * 1 accumulate: dW = beta·dW + Σ, the sum complete in fp32 before it meets dW), deterministic
 * (no atomics, fixed reduction order: same inputs, same bits on the same device).
 * Scratch comes from ops_workspace, slots OPS_GPT_WS_A/B below (5, 6: above those the ops of
 * ops.h use on either device); contents are not kept between calls.
 *
 * Saved for backward (what the activation-memory formula counts), per call:
 *   layernorm  mean, rstd: rows floats each (the input x is the caller's, kept anyway)
 *   attention  att: B·NH·T·T floats, the softmax probabilities (pre-softmax scores are not kept:
 *              they are computed into att and normalized in place); qkv is the caller's
 *   embedding  nothing (tokens are the caller's)
 * Workspaces are counted by the ledger as activations too (ops_workspace); each slot grows to the
 * largest request any op made of it and stays (slot A is shared by several ops). Bytes requested:
 *   CPU   layernorm_fwd  A: 4·C and B: 4·C, bf16 weights only (the widened w and b)
 *         layernorm_bwd  A: 4·C (bf16 only: widened w); B: 8·C (the fp32 dw|db sums)
 *         attention_bwd  A: 4·T·T (dS of one head)
 *         embedding_bwd  A: 4·(V + B·T) (token buckets); B: 4·C (one row's sum)
 *   CUDA  layernorm_bwd  A: 8·min(max(rows,1), 128)·C (per-chunk partial sums)
 *         attention_bwd  A: 4·NH·T·T (dS of one batch row, all heads)
 *         embedding_bwd  B: 4·(V + 1 + B·T) (token buckets)
 *   the other ops take none. */
#ifndef ZL_OPS_GPT_H
#define ZL_OPS_GPT_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t
#ifdef __cplusplus
extern "C" {
#endif

/* ops_workspace slots taken by these ops (ops_cpu.c uses 0..2, ops_cuda.cu 0..4). */
enum { OPS_GPT_WS_A = 5, OPS_GPT_WS_B = 6 };

#define OPS_LN_EPS 1e-5f /* GPT-2's LayerNorm epsilon */

/* LayerNorm over the last dimension, per row r of x (rows, C):
 *   mean[r] = Σ_c x/C,  rstd[r] = 1/sqrt(Σ_c (x−mean)²/C + 1e-5)
 *   y[r,c]  = (x[r,c] − mean[r])·rstd[r]·w[c] + b[c]
 * y (rows,C), mean (rows), rstd (rows) fp32 written; x (rows,C) fp32; w, b (C) in wdt.
 * y must not alias x. mean and rstd are what the backward needs besides x. */
void op_layernorm_fwd(device_t dev, float *y, float *mean, float *rstd, const float *x, const void *w,
                      const void *b, dtype_t wdt, int rows, int C);
/* Backward of op_layernorm_fwd given dy (rows,C), with n = (x − mean)·rstd, g = w·dy:
 *   dx[r,c] += (g − mean_c(g) − n·mean_c(g·n))·rstd   ACCUMULATED (the residual's gradient adds in)
 *   dw[c]    = beta·dw[c] + Σ_r n·dy                   (wdt; fp32 sum over rows, one rounding)
 *   db[c]    = beta·db[c] + Σ_r dy
 * x, mean, rstd as the forward saved them; w (C) in wdt. dx must not alias dy. */
void op_layernorm_bwd(device_t dev, float *dx, void *dw, void *db, const float *dy, const float *x,
                      const float *mean, const float *rstd, const void *w, dtype_t wdt, int rows, int C,
                      float beta);
/* Its two halves (chapter 07's zero-bubble schedules: B now, W later): _input the dx line (needs w),
 * _weight the dw, db lines (needs no w). The fused op is _input then _weight, bit for bit. */
void op_layernorm_bwd_input(device_t dev, float *dx, const float *dy, const float *x, const float *mean,
                            const float *rstd, const void *w, dtype_t wdt, int rows, int C);
void op_layernorm_bwd_weight(device_t dev, void *dw, void *db, const float *dy, const float *x,
                             const float *mean, const float *rstd, dtype_t wdt, int rows, int C, float beta);

/* Causal multi-head self-attention (GPT-2), hs = C/NH, scale = 1/sqrt(hs):
 *   qkv (B,T,3C) = [q | k | v] per position, head h in columns h·hs..(h+1)·hs−1 of each third;
 *   att[b,h,t,j] = softmax_j≤t(scale·q[b,t,h]·k[b,j,h])   (B,NH,T,T), exactly 0 for j > t
 *   out[b,t,h·hs+d] = Σ_j att[b,h,t,j]·v[b,j,h·hs+d]       (B,T,C)
 * att is written in full (the saved activation: B·NH·T·T floats); out must not alias qkv.
 * C must be a multiple of NH. Output at t depends only on positions <= t, bit for bit. */
void op_attention_fwd(device_t dev, float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* Backward of op_attention_fwd given dout (B,T,C): dqkv (B,T,3C) OVERWRITTEN with [dq | dk | dv].
 * qkv and att as the forward left them. Scratch: one T·T (CPU) or NH·T·T (CUDA) fp32 block. */
void op_attention_bwd(device_t dev, float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                      int T, int C, int NH);

/* Token + learned position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
 * out (B,T,C) fp32; tokens (B,T) int in [0,V); wte (V,C), wpe (>=T,C) in wdt.
 * A token outside [0,V) dies with its index on the CPU; on CUDA it makes that row NaN. */
void op_embedding_fwd(device_t dev, float *out, const int *tokens, const void *wte, const void *wpe,
                      dtype_t wdt, int B, int T, int C, int V);
/* Backward of op_embedding_fwd given dout (B,T,C):
 *   dwte[v,:] = beta·dwte[v,:] + Σ_{(b,t): tokens[b,t]=v} dout[b,t,:]   (V,C) every row written
 *   dwpe[t,:] = beta·dwpe[t,:] + Σ_b dout[b,t,:]                        (T,C)
 * Sums in fp32, positions in increasing b·T+t order (the same order on CPU and CUDA, so the two
 * agree bit for bit), one rounding into wdt. No atomics: positions are bucketed by token first
 * (on CUDA that copies the B·T tokens to the host: one stream synchronization). */
void op_embedding_bwd(device_t dev, void *dwte, void *dwpe, const float *dout, const int *tokens, dtype_t wdt,
                      int B, int T, int C, int V, float beta);
/* ---- chapter 12's Mixture of Experts: rows moved between tokens and experts (solutions/moe.h) ------
 * Index arrays are int, on the op's device; a negative index is "no row" (a dropped token, a
 * capacity slot nobody filled). Deterministic: every output row is one thread's (or loop's) fixed-
 * order sum, no atomics. No workspace. */
/* dst[i,:] = src_row[i] >= 0 ? s_i·src[src_row[i],:] : 0 for i < n, s_i = scale ? scale[i] : 1.
 * dst (n,C), src (rows,C): the dispatch (token rows into the experts' buffer) and, scaled by the
 * gates, the combine's backward (d y rows into the experts' output gradient). */
void op_rows_gather(device_t dev, float *dst, const float *src, const int *src_row, const float *scale,
                    int64_t n, int C);
/* y[t,:] = beta·y[t,:] + Σ_{j<k, slot[t,j] >= 0} w_tj·src[slot[t,j],:], the j in order, w_tj = w ?
 * w[t·k+j] :
 * 1:
 * the combine (w the gates), and the dispatch's backward (w NULL). y (T,C) must not alias src. */
void op_rows_combine(device_t dev, float *y, const float *src, const int *slot, const float *w, int64_t T,
                     int k, int C, float beta);
/* dw[t·k+j] = slot[t,j] >= 0 ? Σ_c dy[t,c]·src[slot[t,j],c] : 0 (c in order): the gates' gradient. */
void op_rows_dot(device_t dev, float *dw, const float *dy, const float *src, const int *slot, int64_t T,
                 int k, int C);

/* ---- the CUDA implementations (ops_gpt_cuda.cu), called by ops_gpt_cpu.c for DEV_CUDA ---------
 * Same contracts, all on the compute stream. Not for direct use. */
void opcu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const void *w, const void *b,
                        dtype_t wdt, int rows, int C);
void opcu_layernorm_bwd(float *dx, void *dw, void *db, const float *dy, const float *x, const float *mean,
                        const float *rstd, const void *w, dtype_t wdt, int rows, int C, float beta);
void opcu_layernorm_bwd_input(float *dx, const float *dy, const float *x, const float *mean,
                              const float *rstd, const void *w, dtype_t wdt, int rows, int C);
void opcu_layernorm_bwd_weight(void *dw, void *db, const float *dy, const float *x, const float *mean,
                               const float *rstd, dtype_t wdt, int rows, int C, float beta);
void opcu_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void opcu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                        int C, int NH);
void opcu_embedding_fwd(float *out, const int *tokens, const void *wte, const void *wpe, dtype_t wdt, int B,
                        int T, int C, int V);
void opcu_embedding_bwd(void *dwte, void *dwpe, const float *dout, const int *tokens, dtype_t wdt, int B,
                        int T, int C, int V, float beta);
void opcu_rows_gather(float *dst, const float *src, const int *src_row, const float *scale, int64_t n, int C);
void opcu_rows_combine(float *y, const float *src, const int *slot, const float *w, int64_t T, int k, int C,
                       float beta);
void opcu_rows_dot(float *dw, const float *dy, const float *src, const int *slot, int64_t T, int k, int C);
#ifdef __cplusplus
}
#endif
#endif
