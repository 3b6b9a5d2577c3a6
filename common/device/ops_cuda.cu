/* ops_cuda.cu — the CUDA kernels behind ops.h (contracts in ops.h / ops_cuda.h). Notes: notes/gpu.md.
 *
 * Matmul: cuBLAS. By default every GEMM runs in fp32 (CUBLAS_COMPUTE_32F, no TF32) on fp32
 * activations and fp32 weights — bf16 weights are first widened to fp32 in a workspace — which
 * is exactly what the CPU path computes (ops_cpu.c: fp32 math on bf16 weights), so CPU and GPU
 * runs agree to ~1e-6 relative and the parity tests can compare them. ZL_CUDA_MATMUL=bf16 (or
 * opcu_set_matmul_bf16(1)) switches the GEMMs to bf16 tensor cores: x and W rounded to bf16,
 * fp32 accumulation (CUBLAS_COMPUTE_32F with CUDA_R_16BF inputs) — faster, ~1e-2 relative
 * from the CPU path; used for the TFLOP/s benchmark (notes/benchmarks.md).
 *
 * Element-wise ops (AdamW, SGD, casts, add, max, scale, GELU): the functions of elementwise.h
 * and dtype.h, the very source ops_cpu.c calls, compiled with -fmad=false: the CPU's bits
 * (tests/gpu/test_gpu_ops.c compares them bitwise; notes/design.md, "One source of the bits").
 *
 * Determinism: no atomics anywhere. Reductions (bias gradient, softmax rows, Σx²) use a fixed
 * grid and fixed-order trees, and the last sum of per-row / per-block partials happens on the
 * host in index order, so a run repeats bit for bit on the same GPU. */
#include "cuda_common.cuh" // CHECK_CUDA, CHECK_CUBLAS, CHECK_LAUNCH, die, ledger_add
#include "device_cuda.h"   // devcu_compute_stream, devcu_cublas, devcu_malloc
extern "C" {
#include "ops.h"           // adamw_hp_t (C linkage for the C declarations)
}
#include "ops_cuda.h"      // opcu_*
#include "elementwise.h"   // ew_*: the element-wise math, the same source as ops_cpu.c
#include <stdlib.h>        // getenv
#include <string.h>        // strcmp

#define ZL_THREADS 256
#define ZL_MAX_BLOCKS 4096  /* grid-stride loops: enough blocks to fill any GPU */
#define ZL_SUMSQ_BLOCKS 256 /* fixed, so the Σx² summation order never depends on the GPU */

/* ---- loads and stores: dtype.h's dt_load / dt_store / bf16 casts (ZL_HD: the host's bits) ---- */
__device__ __forceinline__ float d_load(const void *p, int dt, int64_t i) {
  return dt_load(p, (dtype_t)dt, i);
}
__device__ __forceinline__ void d_store(void *p, int dt, int64_t i, float v) {
  dt_store(p, (dtype_t)dt, i, v);
}
/* The elementwise ops also take F64 (control scalars the ring may reduce), as ops_cpu.c does. */
__device__ __forceinline__ double d_load64(const void *p, int dt, int64_t i) {
  return dt == DT_F64 ? ((const double *)p)[i] : (double)d_load(p, dt, i);
}
__device__ __forceinline__ void d_store64(void *p, int dt, int64_t i, double v) {
  if (dt == DT_F64) ((double *)p)[i] = v;
  else d_store(p, dt, i, (float)v);
}

static cudaStream_t compute_stream(void) { return (cudaStream_t)devcu_compute_stream(); }
static cublasHandle_t cublas(void) {
  cublasHandle_t h = (cublasHandle_t)devcu_cublas();
  if (!h) die_on_rank("CUDA op called before the GPU was selected (device_cuda_select)");
  return h;
}
static int blocks_for(int64_t n) {
  int64_t b = (n + ZL_THREADS - 1) / ZL_THREADS;
  return (int)(b < 1 ? 1 : b > ZL_MAX_BLOCKS ? ZL_MAX_BLOCKS : b);
}
static void check_dt(dtype_t dt, const char *fn) {
  if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16)
    die_on_rank("%s: dtype %s is not supported on CUDA", fn, dtype_name(dt));
}
static void check_dt64(dtype_t dt, const char *fn) {
  if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16 && dt != DT_F64)
    die_on_rank("%s: dtype %d is not supported on CUDA", fn, (int)dt);
}

/* ---- workspace: ops.h's ops_workspace on DEV_CUDA (grown on demand, counted as activations,
 * released by ops_release_workspace); these slots are the CUDA ops' own. The allocator is
 * stream-ordered, so a slot that grows never frees memory a queued kernel still reads. */
enum { WS_W = 0, WS_GRAD, WS_X16, WS_W16, WS_RED };
static void *workspace(int slot, int64_t nbytes) { return ops_workspace(DEV_CUDA, slot, nbytes); }
void opcu_release_workspace(void) {} /* ops_release_workspace frees the DEV_CUDA slots itself */

/* ---- matmul mode ------------------------------------------------------------------------ */
static int g_mm_bf16 = -1; /* -1: not decided yet (read ZL_CUDA_MATMUL once) */
void opcu_set_matmul_bf16(int on) { g_mm_bf16 = on ? 1 : 0; }
int opcu_matmul_bf16(void) {
  if (g_mm_bf16 < 0) {
    const char *e = getenv("ZL_CUDA_MATMUL");
    g_mm_bf16 = (e && strcmp(e, "bf16") == 0) ? 1 : 0;
  }
  return g_mm_bf16;
}

/* ---- elementwise kernels ----------------------------------------------------------------- */
__global__ void k_cast(void *dst, int ddt, const void *src, int sdt, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    d_store64(dst, ddt, i, d_load64(src, sdt, i));
}
/* bf16, fp16: add in fp32, round once (ew_add_bf16, ew_add_fp16); f32 in f32; f64 in f64 (the CPU
 * path's arithmetic). */
__global__ void k_add(void *dst, const void *src, int dt, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (dt == DT_F64) ((double *)dst)[i] += ((const double *)src)[i];
    else if (dt == DT_F32) ((float *)dst)[i] += ((const float *)src)[i];
    else if (dt == DT_F16)
      ((fp16_t *)dst)[i] = ew_add_fp16(((const fp16_t *)dst)[i], ((const fp16_t *)src)[i]);
    else ((bf16_t *)dst)[i] = ew_add_bf16(((const bf16_t *)dst)[i], ((const bf16_t *)src)[i]);
  }
}
/* ew_max_takes_src: NaN in either operand gives NaN; picks, never rounds. */
__global__ void k_max(void *dst, const void *src, int dt, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (dt == DT_F64) {
      double *d = (double *)dst;
      const double *s = (const double *)src;
      if (ew_max_takes_src_f64(d[i], s[i])) d[i] = s[i];
    } else if (dt == DT_F32) {
      float *d = (float *)dst;
      const float *s = (const float *)src;
      if (ew_max_takes_src(d[i], s[i])) d[i] = s[i];
    } else { /* bf16, fp16: compared as fp32 (exact), the picked element copied */
      uint16_t *d = (uint16_t *)dst;
      const uint16_t *s = (const uint16_t *)src;
      if (ew_max_takes_src(d_load(d, dt, i), d_load(s, dt, i))) d[i] = s[i];
    }
  }
}
__global__ void k_scale(void *x, int dt, float s, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (dt == DT_F64) ((double *)x)[i] = ew_scale_f64(((double *)x)[i], s);
    else if (dt == DT_F32) ((float *)x)[i] = ew_scale_f32(((float *)x)[i], s);
    else if (dt == DT_F16) ((fp16_t *)x)[i] = ew_scale_fp16(((fp16_t *)x)[i], s);
    else ((bf16_t *)x)[i] = ew_scale_bf16(((bf16_t *)x)[i], s);
  }
}
__global__ void k_fill(void *x, int dt, float v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    d_store64(x, dt, i, v);
}

void opcu_cast(void *dst, dtype_t ddt, const void *src, dtype_t sdt, int64_t n) {
  if (n <= 0) return;
  check_dt64(ddt, "opcu_cast");
  check_dt64(sdt, "opcu_cast");
  if (ddt == sdt) {
    if (dst != src)
      CHECK_CUDA(
          cudaMemcpyAsync(dst, src, (size_t)n * dtype_size(ddt), cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  k_cast<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(dst, ddt, src, sdt, n);
  CHECK_LAUNCH();
}

static void add_on(cudaStream_t s, void *dst, const void *src, dtype_t dt, int64_t n) {
  if (n <= 0) return;
  check_dt64(dt, "opcu_add");
  k_add<<<blocks_for(n), ZL_THREADS, 0, s>>>(dst, src, dt, n);
  CHECK_LAUNCH();
}
static void max_on(cudaStream_t s, void *dst, const void *src, dtype_t dt, int64_t n) {
  if (n <= 0) return;
  check_dt64(dt, "opcu_max");
  k_max<<<blocks_for(n), ZL_THREADS, 0, s>>>(dst, src, dt, n);
  CHECK_LAUNCH();
}
void opcu_add(void *dst, const void *src, dtype_t dt, int64_t n) {
  add_on(compute_stream(), dst, src, dt, n);
}
void opcu_max(void *dst, const void *src, dtype_t dt, int64_t n) {
  max_on(compute_stream(), dst, src, dt, n);
}
void opcu_add_on(void *stream, void *dst, const void *src, dtype_t dt, int64_t n) {
  add_on((cudaStream_t)stream, dst, src, dt, n);
}
void opcu_max_on(void *stream, void *dst, const void *src, dtype_t dt, int64_t n) {
  max_on((cudaStream_t)stream, dst, src, dt, n);
}

void opcu_scale(void *x, dtype_t dt, float s, int64_t n) {
  if (n <= 0) return;
  check_dt64(dt, "opcu_scale");
  k_scale<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(x, dt, s, n);
  CHECK_LAUNCH();
}
void opcu_fill(void *x, dtype_t dt, float value, int64_t n) {
  if (n <= 0) return;
  check_dt64(dt, "opcu_fill");
  k_fill<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(x, dt, value, n);
  CHECK_LAUNCH();
}

/* ---- Σ x²: fixed grid, per-thread strided sums in double, fixed tree, host sums blocks ------ */
__global__ void k_sumsq(double *partial, const void *x, int dt, int64_t n) {
  __shared__ double sh[ZL_THREADS];
  double acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    double v = d_load64(x, dt, i);
    acc += v * v;
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

double opcu_sumsq(const void *x, dtype_t dt, int64_t n) {
  if (n <= 0) return 0.0;
  check_dt64(dt, "opcu_sumsq");
  double *partial = (double *)workspace(WS_RED, ZL_SUMSQ_BLOCKS * sizeof(double));
  cudaStream_t s = compute_stream();
  k_sumsq<<<ZL_SUMSQ_BLOCKS, ZL_THREADS, 0, s>>>(partial, x, dt, n);
  CHECK_LAUNCH();
  double host[ZL_SUMSQ_BLOCKS];
  CHECK_CUDA(cudaMemcpyAsync(host, partial, sizeof host, cudaMemcpyDeviceToHost, s));
  devcu_wait_stream(s); /* bounded by the watchdog: the stream may wait on a collective */
  double sum = 0;
  for (int b = 0; b < ZL_SUMSQ_BLOCKS; b++) sum += host[b]; /* fixed order */
  return sum;
}

/* ---- GELU (tanh approximation, as GPT-2 / llm.c): elementwise.h's ew_gelu, ew_gelu_bwd -------- */
__global__ void k_gelu_fwd(float *y, const float *x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = ew_gelu(x[i]);
}
__global__ void k_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = ew_gelu_bwd(x[i], dy[i]); /* dx may alias dy: each element reads dy[i] before writing dx[i] */
}
void opcu_gelu_fwd(float *y, const float *x, int64_t n) {
  if (n <= 0) return;
  k_gelu_fwd<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(y, x, n);
  CHECK_LAUNCH();
}
void opcu_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n) {
  if (n <= 0) return;
  k_gelu_bwd<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(dx, dy, x, n);
  CHECK_LAUNCH();
}

/* ---- linear layers through cuBLAS ---------------------------------------------------------
 * Row-major y(B,out) is column-major y^T (out x B); row-major W(out,in) is column-major
 * W^T (in x out). So, column-major:
 *   y^T  (out x B)  = (W^T)^T · x^T          gemm(T, N, m=out, n=B,   k=in)
 *   dx^T (in x B)   = W^T · dy^T             gemm(N, N, m=in,  n=B,   k=out)
 *   dW^T (in x out) = x^T · (dy^T)^T         gemm(N, T, m=in,  n=out, k=B)                 */
static void gemm_f32(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
  const float alpha = 1.0f;
  CHECK_CUBLAS(cublasGemmEx(cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta,
                            C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
/* bf16 tensor cores: A and B bf16, C fp32, fp32 accumulation. */
static void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                      const void *B, int ldb, float beta, float *C, int ldc) {
  const float alpha = 1.0f;
  CHECK_CUBLAS(cublasGemmEx(cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb,
                            &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* W as fp32 (widened into a workspace slot when wdt is bf16 or fp16: exact). */
static const float *weights_f32(const void *W, dtype_t wdt, int64_t n) {
  if (wdt == DT_F32) return (const float *)W;
  float *w = (float *)workspace(WS_W, n * (int64_t)sizeof(float));
  opcu_cast(w, DT_F32, W, wdt, n);
  return w;
}
/* p as bf16 (rounded into a workspace slot when it is fp32). */
static const void *as_bf16(const void *p, dtype_t dt, int64_t n, int slot) {
  if (dt == DT_BF16) return p;
  void *w = workspace(slot, n * (int64_t)sizeof(uint16_t));
  opcu_cast(w, DT_BF16, p, DT_F32, n);
  return w;
}

__global__ void k_bias_add(float *y, const void *b, int dt, int B, int out) {
  int64_t n = (int64_t)B * out;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] += d_load(b, dt, i % out);
}

void opcu_linear_fwd(float *y, const float *x, const void *W, const void *b, dtype_t wdt, int B, int in,
                     int out) {
  check_dt(wdt, "opcu_linear_fwd");
  if (B <= 0 || out <= 0) return;
  int64_t wn = (int64_t)out * in;
  if (opcu_matmul_bf16()) {
    const void *w16 = as_bf16(W, wdt, wn, WS_W16);
    const void *x16 = as_bf16(x, DT_F32, (int64_t)B * in, WS_X16);
    gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, w16, in, x16, in, 0.0f, y, out);
  } else {
    gemm_f32(CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, weights_f32(W, wdt, wn), in, x, in, 0.0f, y, out);
  }
  if (b) {
    k_bias_add<<<blocks_for((int64_t)B * out), ZL_THREADS, 0, compute_stream()>>>(y, b, wdt, B, out);
    CHECK_LAUNCH();
  }
}

/* db[j] = beta·db[j] + Σ_i dy[i,j]: one thread per column, rows summed in order (fp32). */
__global__ void k_bias_grad(void *db, int dt, const float *dy, int B, int out, float beta) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= out) return;
  float s = 0.0f;
  for (int i = 0; i < B; i++) s += dy[(int64_t)i * out + j];
  d_store(db, dt, j, ew_acc(d_load(db, dt, j), s, beta)); /* beta 0 ignores old (even NaN) */
}
/* dW = beta·dW + g (bf16 or fp16 dW, fp32 g): one rounding per element (ops_cpu.c's
 * ops_store_acc; the CPU also counts fp16 gradients that flushed to zero, the GPU does not). */
__global__ void k_accum_grad(void *dW, int dt, const float *g, float beta, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    d_store(dW, dt, i, beta == 0.0f ? g[i] : ew_acc(d_load(dW, dt, i), g[i], beta));
}

/* op_linear_bwd's two halves (ops.h): each is the fused op's own code, so B then W is the fused
 * op bit for bit (the bf16 copies of the operands are made again by each half). */
void opcu_linear_bwd_input(float *dx, const float *dy, const void *W, dtype_t wdt, int B, int in, int out) {
  check_dt(wdt, "opcu_linear_bwd_input");
  if (out <= 0 || in <= 0 || B <= 0 || !dx) return;
  int64_t wn = (int64_t)out * in;
  /* dx(B,in) = dy · W */
  if (opcu_matmul_bf16()) {
    const void *w16 = as_bf16(W, wdt, wn, WS_W16);
    const void *dy16 = as_bf16(dy, DT_F32, (int64_t)B * out, WS_X16);
    gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, w16, in, dy16, out, 0.0f, dx, in);
  } else {
    gemm_f32(CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, weights_f32(W, wdt, wn), in, dy, out, 0.0f, dx, in);
  }
}

void opcu_linear_bwd_weight(void *dW, void *db, const float *dy, const float *x, dtype_t wdt, int B, int in,
                            int out, float beta) {
  check_dt(wdt, "opcu_linear_bwd_weight");
  if (out <= 0 || in <= 0) return;
  int64_t wn = (int64_t)out * in;
  int bf16mm = opcu_matmul_bf16();
  cudaStream_t s = compute_stream();
  if (B <= 0) { /* no rows: nothing new, dW = beta·dW and db = beta·db (as ops_cpu.c) */
    if (beta == 0.0f) {
      opcu_fill(dW, wdt, 0.0f, wn);
      if (db) opcu_fill(db, wdt, 0.0f, out);
    } else {
      opcu_scale(dW, wdt, beta, wn);
      if (db) opcu_scale(db, wdt, beta, out);
    }
    return;
  }
  /* dW(out,in) = beta·dW + dyᵀ·x  (fp32 sum; bf16 dW rounded once) */
  if (dW) {
    float *g = wdt == DT_F32 ? (float *)dW : (float *)workspace(WS_GRAD, wn * (int64_t)sizeof(float));
    float gbeta = wdt == DT_F32 ? beta : 0.0f;
    if (bf16mm) {
      /* both operands are activations: round a copy of each (x in WS_X16, dy in WS_W16) */
      const void *x16 = as_bf16(x, DT_F32, (int64_t)B * in, WS_X16);
      const void *dy16 = as_bf16(dy, DT_F32, (int64_t)B * out, WS_W16);
      gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, x16, in, dy16, out, gbeta, g, in);
    } else {
      gemm_f32(CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, x, in, dy, out, gbeta, g, in);
    }
    if (wdt != DT_F32) {
      k_accum_grad<<<blocks_for(wn), ZL_THREADS, 0, s>>>(dW, wdt, g, beta, wn);
      CHECK_LAUNCH();
    }
  }
  if (db) {
    k_bias_grad<<<(out + ZL_THREADS - 1) / ZL_THREADS, ZL_THREADS, 0, s>>>(db, wdt, dy, B, out, beta);
    CHECK_LAUNCH();
  }
}

void opcu_linear_bwd(float *dx, void *dW, void *db, const float *dy, const float *x, const void *W,
                     dtype_t wdt, int B, int in, int out, float beta) {
  check_dt(wdt, "opcu_linear_bwd");
  if (out <= 0 || in <= 0) return;
  opcu_linear_bwd_input(dx, dy, W, wdt, B, in, out);
  opcu_linear_bwd_weight(dW, db, dy, x, wdt, B, in, out, beta);
}

/* ---- softmax cross-entropy: one block per row, fixed-order trees ----------------------------- */
__global__ void k_softmax_xent(double *row_loss, int *bad_label, float *dlogits, const float *logits,
                               const int *y, int C, float scale) {
  __shared__ float sh[ZL_THREADS];
  __shared__ double shd[ZL_THREADS];
  const int64_t row = blockIdx.x;
  const float *l = logits + row * C;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < C; j += blockDim.x) mx = fmaxf(mx, l[j]);
  sh[threadIdx.x] = mx;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  mx = sh[0];
  __syncthreads();
  /* Σ exp(l − max) of fp32 exps, summed in double (ops_cpu.c's arithmetic, another order) */
  double se = 0.0;
  for (int j = threadIdx.x; j < C; j += blockDim.x) se += (double)expf(l[j] - mx);
  shd[threadIdx.x] = se;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) shd[threadIdx.x] += shd[threadIdx.x + w];
    __syncthreads();
  }
  se = shd[0];
  int label = y[row];
  int ok = label >= 0 && label < C;
  float inv = (float)(1.0 / se);
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    float d = expf(l[j] - mx) * inv * scale;
    dlogits[row * C + j] = j == label ? d - scale : d;
  }
  if (threadIdx.x == 0) {
    if (!ok) *bad_label = 1;
    /* −log p[y] = log Σ exp(l − max) − (l[y] − max) */
    row_loss[row] = ok ? log(se) - ((double)l[label] - mx) : (double)NAN;
  }
}

double opcu_softmax_xent(float *dlogits, const float *logits, const int *y, int B, int C, float scale) {
  if (B <= 0) return 0.0;
  cudaStream_t s = compute_stream();
  /* one slot: B row losses (double), then the bad-label flag (int) */
  char *ws = (char *)workspace(WS_RED, (int64_t)B * sizeof(double) + sizeof(int));
  double *row_loss = (double *)ws;
  int *bad = (int *)(ws + (size_t)B * sizeof(double));
  CHECK_CUDA(cudaMemsetAsync(bad, 0, sizeof(int), s));
  k_softmax_xent<<<B, ZL_THREADS, 0, s>>>(row_loss, bad, dlogits, logits, y, C, scale);
  CHECK_LAUNCH();
  double *host = (double *)malloc((size_t)B * sizeof(double) + sizeof(int));
  if (!host) die("out of memory on rank %d: softmax row losses", check_rank());
  CHECK_CUDA(cudaMemcpyAsync(host, ws, (size_t)B * sizeof(double) + sizeof(int), cudaMemcpyDeviceToHost, s));
  devcu_wait_stream(s);
  int bad_label = 0;
  memcpy(&bad_label, (char *)host + (size_t)B * sizeof(double), sizeof(int));
  if (bad_label) die_on_rank("softmax cross-entropy: a label is outside [0, %d)", C);
  double sum = 0;
  for (int i = 0; i < B; i++) sum += host[i]; /* rows in order, as the CPU path */
  free(host);
  return sum;
}

/* ---- optimizers: elementwise.h's ew_adamw / ew_sgd, the CPU's bits ------------------------- */
__global__ void k_adamw(float *w, const void *grad, int gdt, float *m, float *v, int64_t n, float gscale,
                        ew_adamw_t k) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    ew_adamw(&w[i], &m[i], &v[i], d_load(grad, gdt, i), gscale, k);
}
void opcu_adamw(float *w, const void *grad, dtype_t gdt, float *m, float *v, int64_t n, const adamw_hp_t *hp,
                int t, float gscale) {
  if (n <= 0) return;
  check_dt(gdt, "opcu_adamw");
  if (t < 1) die_on_rank("opcu_adamw: step %d must be >= 1", t);
  /* the per-step scalars on the host, by the function ops_cpu.c calls: the same floats */
  ew_adamw_t k = ew_adamw_scalars(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, t);
  k_adamw<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(w, grad, gdt, m, v, n, gscale, k);
  CHECK_LAUNCH();
}

__global__ void k_sgd(float *w, const void *grad, int gdt, float *buf, int64_t n, float lr, float mu,
                      float wd, float gscale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    ew_sgd(&w[i], &buf[i], d_load(grad, gdt, i), gscale, lr, mu, wd);
}
void opcu_sgd(float *w, const void *grad, dtype_t gdt, float *buf, int64_t n, float lr, float momentum,
              float weight_decay, float gscale) {
  if (n <= 0) return;
  check_dt(gdt, "opcu_sgd");
  k_sgd<<<blocks_for(n), ZL_THREADS, 0, compute_stream()>>>(w, grad, gdt, buf, n, lr, momentum, weight_decay,
                                                            gscale);
  CHECK_LAUNCH();
}
