/* ops_cuda.h — the CUDA kernels behind ops.h (ops_cuda.cu). ops_cpu.c forwards to these when
 * dev == DEV_CUDA in a ZL_CUDA build; same contracts as ops.h, all on the compute stream. */
#ifndef ZL_OPS_CUDA_H
#define ZL_OPS_CUDA_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t
#include "ops.h"    // adamw_hp_t
#ifdef __cplusplus
extern "C" {
#endif
void opcu_linear_fwd(float *y, const float *x, const void *W, const void *b, dtype_t wdt, int B, int in,
                     int out);
void opcu_linear_bwd(float *dx, void *dW, void *db, const float *dy, const float *x, const void *W,
                     dtype_t wdt, int B, int in, int out, float beta);
void opcu_linear_bwd_input(float *dx, const float *dy, const void *W, dtype_t wdt, int B, int in, int out);
void opcu_linear_bwd_weight(void *dW, void *db, const float *dy, const float *x, dtype_t wdt, int B, int in,
                            int out, float beta);
void opcu_gelu_fwd(float *y, const float *x, int64_t n);
void opcu_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n);
double opcu_softmax_xent(float *dlogits, const float *logits, const int *y, int B, int C, float scale);
void opcu_adamw(float *w, const void *grad, dtype_t gdt, float *m, float *v, int64_t n, const adamw_hp_t *hp,
                int t, float gscale);
void opcu_sgd(float *w, const void *grad, dtype_t gdt, float *buf, int64_t n, float lr, float momentum,
              float weight_decay, float gscale);
void opcu_cast(void *dst, dtype_t ddt, const void *src, dtype_t sdt, int64_t n);
void opcu_add(void *dst, const void *src, dtype_t dt, int64_t n);
void opcu_max(void *dst, const void *src, dtype_t dt, int64_t n);
void opcu_scale(void *x, dtype_t dt, float s, int64_t n);
void opcu_fill(void *x, dtype_t dt, float value, int64_t n);
double opcu_sumsq(const void *x, dtype_t dt, int64_t n);
/* Same as opcu_add/opcu_max but on an explicit stream (the communication stream, for ring
 * collectives on NCCL). stream: cudaStream_t as void*. */
void opcu_add_on(void *stream, void *dst, const void *src, dtype_t dt, int64_t n);
void opcu_max_on(void *stream, void *dst, const void *src, dtype_t dt, int64_t n);
/* Kept for ops_release_workspace: the CUDA ops' scratch now lives in ops_workspace(DEV_CUDA, ...),
 * which ops_release_workspace frees itself, so this has nothing left to free. */
void opcu_release_workspace(void);
/* Matmul precision: 0 (default) fp32 GEMMs on fp32/widened operands, the CPU path's math;
 * 1 bf16 tensor cores with fp32 accumulation. The default comes from ZL_CUDA_MATMUL=bf16. */
void opcu_set_matmul_bf16(int on);
int opcu_matmul_bf16(void);
#ifdef __cplusplus
}
#endif
#endif
