/* gpu_bench_gemm.cu — matmul throughput of the GPU path against cuBLAS on this GPU.
 *   build/tests/gpu_bench_gemm [--size N]...      (make bench-gpu runs it)
 * For each square size N (M = N = K): the raw cuBLAS GEMMs (bf16 tensor cores with fp32
 * accumulation; fp32 without TF32) and our op_linear_fwd in its two modes (fp32, the default that
 * matches the CPU path; bf16 tensor cores, ZL_CUDA_MATMUL=bf16), which add the operand casts and
 * the bias. Times: CUDA events around `iters` back-to-back calls after warm-up, median of 5.
 * Prints a markdown table: size, variant, ms, TFLOP/s, % of the raw bf16 cuBLAS GEMM. */
#include "cuda_common.cuh" // CHECK_CUDA, CHECK_CUBLAS
#include "device_cuda.h"   // devcu_select, devcu_compute_stream, devcu_cublas, devcu_malloc
extern "C" {
#include "ops.h"           // op_linear_fwd
}
#include "ops_cuda.h"      // opcu_set_matmul_bf16, opcu_cast
#include <stdio.h>         // printf
#include <stdlib.h>        // atoi, qsort
#include <string.h>        // strcmp

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median over 5 timed batches of `iters` calls of fn(arg): ms per call. */
template <typename F> static float time_ms(F fn, int iters) {
  cudaStream_t s = (cudaStream_t)devcu_compute_stream();
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) fn(); /* warm-up: cuBLAS heuristics, clocks */
  float ms[5];
  for (int r = 0; r < 5; r++) {
    CHECK_CUDA(cudaEventRecord(a, s));
    for (int i = 0; i < iters; i++) fn();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&ms[r], a, b));
    ms[r] /= (float)iters;
  }
  qsort(ms, 5, sizeof ms[0], cmp_f);
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return ms[2];
}

int main(int argc, char **argv) {
  int sizes[8], nsizes = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--size") == 0 && i + 1 < argc && nsizes < 8) sizes[nsizes++] = atoi(argv[++i]);
    else { fprintf(stderr, "error: %s: usage: gpu_bench_gemm [--size N]...\n", argv[i]); return 2; }
  }
  if (nsizes == 0) sizes[nsizes++] = 4096, sizes[nsizes++] = 8192;
  ledger_init(0, 0);
  if (devcu_count() <= 0) { fprintf(stderr, "gpu_bench_gemm: no GPU visible\n"); return 1; }
  devcu_select(0);
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, devcu_current()));
  printf("GPU: %s, %d SMs, %.0f GiB\n\n", prop.name, prop.multiProcessorCount,
         prop.totalGlobalMem / 1073741824.0);
  printf("| M=N=K | variant | ms | TFLOP/s | vs cuBLAS bf16 |\n|---|---|---|---|---|\n");
  cublasHandle_t h = (cublasHandle_t)devcu_cublas();
  for (int si = 0; si < nsizes; si++) {
    int n = sizes[si];
    size_t nn = (size_t)n * n;
    float *x = (float *)devcu_malloc(nn * 4), *W = (float *)devcu_malloc(nn * 4),
          *y = (float *)devcu_malloc(nn * 4);
    float *b = (float *)devcu_malloc((size_t)n * 4);
    void *x16 = devcu_malloc(nn * 2), *W16 = devcu_malloc(nn * 2);
    if (!x || !W || !y || !b || !x16 || !W16) {
      fprintf(stderr, "gpu_bench_gemm: out of GPU memory at %d\n", n);
      return 1;
    }
    op_fill(DEV_CUDA, x, DT_F32, 0.01f, (int64_t)nn);
    op_fill(DEV_CUDA, W, DT_F32, 0.02f, (int64_t)nn);
    opcu_cast(x16, DT_BF16, x, DT_F32, (int64_t)nn);
    opcu_cast(W16, DT_BF16, W, DT_F32, (int64_t)nn);
    const float one = 1.0f, zero = 0.0f;
    double flop = 2.0 * n * (double)n * n;
    int iters = n >= 8192 ? 10 : 30;
    float ms_bf16 = time_ms(
        [&] {
          CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, W16, CUDA_R_16BF, n, x16,
                                    CUDA_R_16BF, n, &zero, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        },
        iters);
    float ms_f32 = time_ms(
        [&] {
          CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, W, CUDA_R_32F, n, x,
                                    CUDA_R_32F, n, &zero, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        },
        iters);
    opcu_set_matmul_bf16(0);
    float ms_op32 = time_ms([&] { op_linear_fwd(DEV_CUDA, y, x, W, b, DT_F32, n, n, n); }, iters);
    opcu_set_matmul_bf16(1);
    float ms_op16 = time_ms([&] { op_linear_fwd(DEV_CUDA, y, x, W16, b, DT_BF16, n, n, n); }, iters);
    opcu_set_matmul_bf16(0);
    struct { const char *name; float ms; } rows[] = {
        {"cuBLAS bf16 tensor cores (fp32 accumulate)", ms_bf16},
        {"cuBLAS fp32 (no TF32)", ms_f32},
        {"op_linear_fwd fp32 (default: the CPU path's math)", ms_op32},
        {"op_linear_fwd bf16 weights, ZL_CUDA_MATMUL=bf16", ms_op16}};
    for (int r = 0; r < 4; r++)
      printf("| %d | %s | %.3f | %.1f | %.0f%% |\n", n, rows[r].name, rows[r].ms,
             flop / (rows[r].ms * 1e-3) / 1e12, 100.0 * ms_bf16 / rows[r].ms);
    devcu_free(x), devcu_free(W), devcu_free(y), devcu_free(b), devcu_free(x16), devcu_free(W16);
    CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)devcu_compute_stream()));
  }
  return 0;
}
