/* ops.h — the few kernels the MLP and the optimizers need, CPU (ops_cpu.c, OpenBLAS) and CUDA
 * (ops_cuda.cu, cuBLAS). Every op takes the device first and raw pointers: activations are
 * always fp32; weights and gradients are in the working dtype `wdt` (DT_F32 or DT_BF16).
 * In bf16 mode the math runs in fp32 on bf16 inputs and rounds once when storing.
 * All ops are deterministic: same inputs, same bits (no atomics, fixed reduction order). */
#ifndef ZL_OPS_H
#define ZL_OPS_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t

/* y(B,out) = x(B,in) · W(out,in)^T + b(out)   (b == NULL: no bias, as the GPT's LM head). */
void op_linear_fwd(device_t dev, float *y, const float *x, const void *W, const void *b, dtype_t wdt,
                   int B, int in, int out);
/* Backward of op_linear_fwd given dy(B,out):
 *   dx(B,in) = dy · W                      (skipped when dx == NULL: the first layer)
 *   dW(out,in) = beta·dW + dyᵀ · x         (beta 0: overwrite, 1: accumulate micro-batches)
 *   db(out)    = beta·db + Σ_rows dy          (skipped when db == NULL: no bias)
 * dW and db are in wdt; the sum is formed in fp32 and rounded once to wdt. */
void op_linear_bwd(device_t dev, float *dx, void *dW, void *db, const float *dy, const float *x,
                   const void *W, dtype_t wdt, int B, int in, int out, float beta);
/* Its two halves, for a backward split in two (chapter 07's zero-bubble schedules): B, the input's
 * gradient dx = dy · W (on the pipeline's critical path: the previous stage waits for it), and
 * W, the weights' gradient dW = beta·dW + dyᵀ·x, db = beta·db + Σ_rows dy (nobody waits for it:
 * it may run later, from the same dy and x). op_linear_bwd is op_linear_bwd_input then
 * op_linear_bwd_weight, bit for bit, on either device. */
void op_linear_bwd_input(device_t dev, float *dx, const float *dy, const void *W, dtype_t wdt, int B, int in,
                         int out);
void op_linear_bwd_weight(device_t dev, void *dW, void *db, const float *dy, const float *x, dtype_t wdt,
                          int B, int in, int out, float beta);
/* y = GELU(x) (tanh approximation, as GPT-2 / llm.c). */
void op_gelu_fwd(device_t dev, float *y, const float *x, int64_t n);
/* dx = dy · GELU'(x)   (dx may alias dy). */
void op_gelu_bwd(device_t dev, float *dx, const float *dy, const float *x, int64_t n);
/* Softmax cross-entropy over C classes for B rows: returns Σ_rows −log p[y] (in double);
 * writes dlogits = (softmax − onehot(y)) · scale, with scale = 1 / (global batch). */
double op_softmax_xent(device_t dev, float *dlogits, const float *logits, const int *y, int B, int C,
                       float scale);

typedef struct adamw_hp { float lr, beta1, beta2, eps, weight_decay; } adamw_hp_t;
/* AdamW on a flat range of n elements, step t >= 1 (bias correction):
 *   g = gscale·grad;  m = b1 m + (1−b1) g;  v = b2 v + (1−b2) g²;
 *   w −= lr·( m̂ / (sqrt(v̂)+eps) + wd·w ).
 * w, m, v fp32; grad in gdt. gscale carries gradient clipping. */
void op_adamw(device_t dev, float *w, const void *grad, dtype_t gdt, float *m, float *v, int64_t n,
              const adamw_hp_t *hp, int t, float gscale);
/* SGD with momentum on a flat range: g = gscale·grad + wd·w; buf = mu·buf + g; w −= lr·buf. */
void op_sgd(device_t dev, float *w, const void *grad, dtype_t gdt, float *buf, int64_t n, float lr,
            float momentum, float weight_decay, float gscale);

/* dst[i] = (ddt) src[i]  (F32 <-> BF16, RNE; same dtype is a copy). */
void op_cast(device_t dev, void *dst, dtype_t ddt, const void *src, dtype_t sdt, int64_t n);
/* dst[i] += src[i] (bf16: add in fp32, round once). */
void op_add(device_t dev, void *dst, const void *src, dtype_t dt, int64_t n);
/* dst[i] = max(dst[i], src[i]). */
void op_max(device_t dev, void *dst, const void *src, dtype_t dt, int64_t n);
void op_scale(device_t dev, void *x, dtype_t dt, float s, int64_t n);
void op_fill(device_t dev, void *x, dtype_t dt, float value, int64_t n);
/* Σ x[i]² in double, fixed order; NaN/Inf anywhere make the result non-finite. */
double op_sumsq(device_t dev, const void *x, dtype_t dt, int64_t n);
/* 1 when x holds a NaN or an Inf (exponent bits all ones), else 0: the gradient check, one read of
 * x with integer tests, ~5x cheaper on the CPU than op_sumsq (whose result it equals in finiteness). */
int op_has_nonfinite(device_t dev, const void *x, dtype_t dt, int64_t n);

/* Scratch memory for ops (fp32 copies of bf16 weights, fp32 gradient sums), accounted to
 * LEDGER_ACTS; grows on demand and is reused. Released by ops_release_workspace. */
void *ops_workspace(device_t dev, int slot, int64_t nbytes);
/* fp16 underflow count: the CPU backward ops (linear, LayerNorm, embedding) add the gradient
 * elements whose fp32 value was nonzero and whose fp16 store is ±0 (flushed). op_fp16_flushed
 * returns this process's total so far; ops_fp16_count_flushed is the ops' own hook. */
int64_t op_fp16_flushed(void);
void ops_fp16_count_flushed(int64_t k);
void ops_release_workspace(void);
/* One BLAS thread per rank (ranks are the parallelism, and a threaded sgemm may split sums
 * differently run to run). Called by every CPU op before its first sgemm; idempotent. */
void ops_blas_init(void);
#endif
