/* ops_gpt_cuda.cu — the CUDA kernels behind ops_gpt.h (contracts there; the CPU twins in
 * ops_gpt_cpu.c). Notes: notes/gpu.md.
 *
 * Attention: cuBLAS strided-batched GEMMs in fp32 (CUBLAS_COMPUTE_32F, no TF32), one call per
 * batch row b with the NH heads as the batch: on the (B,T,3C) layout head h's Q is a T×hs matrix
 * with leading dimension 3C, and head h+1 starts hs floats later, so nothing is permuted. The
 * full T×T scores are computed (the causal half is overwritten by the softmax with 0).
 * LayerNorm and softmax: one warp per row, lane-strided sums then an xor-butterfly (every lane
 * ends with the same bits). LayerNorm's dw/db: partial sums over a FIXED number of row chunks,
 * then the chunks summed in order — no atomics, and the order does not depend on the GPU.
 * Embedding backward: positions bucketed by token on the host, then one thread per (v, c) sums
 * its bucket in position order: the CPU's order and arithmetic, so the two agree bit for bit.
 * nvcc runs with -fmad=false (Makefile): no fused multiply-adds. */
#include "cuda_common.cuh" // CHECK_CUDA, CHECK_CUBLAS, CHECK_LAUNCH, die, check_rank
#include "device_cuda.h"   // devcu_compute_stream, devcu_cublas
extern "C" {
#include "ops.h"           // ops_workspace
}
#include "ops_gpt.h"       // opcu_layernorm_*, opcu_attention_*, opcu_embedding_*, OPS_GPT_WS_*
#include <math.h>          // sqrtf
#include <stdlib.h>        // realloc

#define GPT_THREADS 256                 /* 8 warps per block: one row per warp */
#define GPT_ROWS_PER_BLOCK (GPT_THREADS / 32)
#define GPT_MAX_BLOCKS 4096
#define LN_CHUNKS 128                   /* row chunks of the dw/db reduction: fixed, for determinism */

/* ---- 16-bit on the device: dtype.h's dt_load / dt_store (ZL_HD), the host's bits for bf16 and fp16 */
static __device__ __forceinline__ float g_load(const void *p, int dt, int64_t i) {
  return dt_load(p, (dtype_t)dt, i);
}
static __device__ __forceinline__ void g_store(void *p, int dt, int64_t i, float v) {
  dt_store(p, (dtype_t)dt, i, v);
}
/* dst[i] = beta·dst[i] + s in dt, beta 0 overwrites (ops_gpt_cpu.c's gpt_store_acc). */
static __device__ __forceinline__ void g_store_acc(void *dst, int dt, int64_t i, float s, float beta) {
  g_store(dst, dt, i, beta == 0.0f ? s : beta * g_load(dst, dt, i) + s);
}
/* Butterfly sum / max over a warp: lane i adds v_i + v_(i^m) and lane i^m the same two, so
 * every lane ends with the same bits. */
static __device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
static __device__ __forceinline__ float warp_max(float v) {
  for (int m = 16; m > 0; m /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

static cudaStream_t stream(void) { return (cudaStream_t)devcu_compute_stream(); }
static cublasHandle_t cublas(void) {
  cublasHandle_t h = (cublasHandle_t)devcu_cublas();
  if (!h) die_on_rank("CUDA op called before the GPU was selected (device_cuda_select)");
  return h;
}
static int grid_for(int64_t n, int per_block) {
  int64_t b = (n + per_block - 1) / per_block;
  return (int)(b < 1 ? 1 : b > GPT_MAX_BLOCKS ? GPT_MAX_BLOCKS : b);
}
static int warp_rows_grid(int64_t rows) {
  return (int)((rows + GPT_ROWS_PER_BLOCK - 1) / GPT_ROWS_PER_BLOCK);
}
static void gpt_check_dt(dtype_t dt, const char *fn) {
  if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16)
    die_on_rank("%s: dtype %s is not supported on CUDA", fn, dtype_name(dt));
}
static void *ws(int slot, int64_t nbytes) { return ops_workspace(DEV_CUDA, slot, nbytes); }

/* ---- LayerNorm ------------------------------------------------------------------------------- */
__global__ void k_ln_fwd(float *y, float *mean, float *rstd, const float *x, const void *w, const void *b,
                         int dt, int rows, int C) {
  int64_t r = (int64_t)blockIdx.x * GPT_ROWS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (r >= rows) return; /* whole warps leave together: the shuffles below see full warps */
  const float *xr = x + r * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += xr[c];
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = xr[c] - m;
    v += d * d;
  }
  float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + OPS_LN_EPS);
  float *yr = y + r * C;
  for (int c = lane; c < C; c += 32) yr[c] = ((xr[c] - m) * rs) * g_load(w, dt, c) + g_load(b, dt, c);
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

/* dx += (g − mean(g) − n·mean(g·n))·rstd, one warp per row. */
__global__ void k_ln_bwd_dx(float *dx, const float *dy, const float *x, const float *mean, const float *rstd,
                            const void *w, int dt, int rows, int C) {
  int64_t r = (int64_t)blockIdx.x * GPT_ROWS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float *xr = x + r * C, *dyr = dy + r * C;
  float m = mean[r], s = rstd[r];
  float gm = 0.0f, gnm = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float n = (xr[c] - m) * s, g = g_load(w, dt, c) * dyr[c];
    gm += g;
    gnm += g * n;
  }
  gm = warp_sum(gm) / (float)C;
  gnm = warp_sum(gnm) / (float)C;
  float *dxr = dx + r * C;
  for (int c = lane; c < C; c += 32) {
    float n = (xr[c] - m) * s, g = g_load(w, dt, c) * dyr[c];
    dxr[c] += ((g - gm) - n * gnm) * s;
  }
}
/* Partial Σ n·dy and Σ dy over the rows of chunk blockIdx.y, one thread per column, rows in order. */
__global__ void k_ln_bwd_partial(float *pw, float *pb, const float *dy, const float *x, const float *mean,
                                 const float *rstd, int rows, int C, int rows_per_chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float sw = 0.0f, sb = 0.0f;
  for (int r = r0; r < r1; r++) {
    float d = dy[(int64_t)r * C + c];
    sw += ((x[(int64_t)r * C + c] - mean[r]) * rstd[r]) * d;
    sb += d;
  }
  pw[(int64_t)blockIdx.y * C + c] = sw;
  pb[(int64_t)blockIdx.y * C + c] = sb;
}
/* The chunks summed in order, then dw = beta·dw + Σ (one rounding into dt). */
__global__ void k_ln_bwd_finish(void *dw, void *db, int dt, const float *pw, const float *pb, int nchunks,
                                int C, float beta) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < nchunks; k++) {
    sw += pw[(int64_t)k * C + c];
    sb += pb[(int64_t)k * C + c];
  }
  g_store_acc(dw, dt, c, sw, beta);
  g_store_acc(db, dt, c, sb, beta);
}

void opcu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const void *w, const void *b,
                        dtype_t wdt, int rows, int C) {
  gpt_check_dt(wdt, "opcu_layernorm_fwd");
  if (rows <= 0 || C <= 0) return;
  k_ln_fwd<<<warp_rows_grid(rows), GPT_THREADS, 0, stream()>>>(y, mean, rstd, x, w, b, wdt, rows, C);
  CHECK_LAUNCH();
}

void opcu_layernorm_bwd_input(float *dx, const float *dy, const float *x, const float *mean,
                              const float *rstd, const void *w, dtype_t wdt, int rows, int C) {
  gpt_check_dt(wdt, "opcu_layernorm_bwd_input");
  if (C <= 0 || rows <= 0) return;
  k_ln_bwd_dx<<<warp_rows_grid(rows), GPT_THREADS, 0, stream()>>>(dx, dy, x, mean, rstd, w, wdt, rows, C);
  CHECK_LAUNCH();
}

void opcu_layernorm_bwd_weight(void *dw, void *db, const float *dy, const float *x, const float *mean,
                               const float *rstd, dtype_t wdt, int rows, int C, float beta) {
  gpt_check_dt(wdt, "opcu_layernorm_bwd_weight");
  if (C <= 0) return;
  cudaStream_t s = stream();
  int r = rows > 0 ? rows : 0;
  int nchunks = r < LN_CHUNKS ? (r > 0 ? r : 1) : LN_CHUNKS;
  int per = r > 0 ? (r + nchunks - 1) / nchunks : 0;
  float *pw = (float *)ws(OPS_GPT_WS_A, 2 * (int64_t)nchunks * C * (int64_t)sizeof(float)); // (nchunks,C) x2
  float *pb = pw + (int64_t)nchunks * C;
  dim3 grid((C + GPT_THREADS - 1) / GPT_THREADS, nchunks);
  k_ln_bwd_partial<<<grid, GPT_THREADS, 0, s>>>(pw, pb, dy, x, mean, rstd, r, C, per);
  CHECK_LAUNCH();
  k_ln_bwd_finish<<<(C + GPT_THREADS - 1) / GPT_THREADS, GPT_THREADS, 0, s>>>(dw, db, wdt, pw, pb, nchunks, C,
                                                                              beta);
  CHECK_LAUNCH();
}

/* The fused op is its two halves (the dx kernel, then the partial sums and their finish). */
void opcu_layernorm_bwd(float *dx, void *dw, void *db, const float *dy, const float *x, const float *mean,
                        const float *rstd, const void *w, dtype_t wdt, int rows, int C, float beta) {
  gpt_check_dt(wdt, "opcu_layernorm_bwd");
  if (C <= 0) return;
  opcu_layernorm_bwd_input(dx, dy, x, mean, rstd, w, wdt, rows, C);
  opcu_layernorm_bwd_weight(dw, db, dy, x, mean, rstd, wdt, rows, C, beta);
}

/* ---- causal self-attention --------------------------------------------------------------------- */
/* Column-major cuBLAS on row-major data (a row-major M(r,c) with leading dimension ld is the
 * column-major Mᵀ), batched over the NH heads of one batch row, fp32 throughout. */
static void gemm_heads(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const float *A, int lda, long long sA, const float *B, int ldb, long long sB, float *C,
                       int ldc, long long sC, int batch) {
  const float beta = 0.0f;
  CHECK_CUBLAS(cublasGemmStridedBatchedEx(cublas(), ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sA, B,
                                          CUDA_R_32F, ldb, sB, &beta, C, CUDA_R_32F, ldc, sC, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Row R = (b·NH + h)·T + t of att holds scale·q·k: softmax over j <= t in place, 0 above. */
__global__ void k_att_softmax(float *att, int64_t nrows, int T) {
  int64_t R = (int64_t)blockIdx.x * GPT_ROWS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (R >= nrows) return;
  int t = (int)(R % T);
  float *row = att + R * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, row[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) sum += expf(row[j] - mx);
  float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) row[j] = j <= t ? expf(row[j] - mx) * inv : 0.0f;
}
/* dS = P ⊙ (dP − Σ_j P·dP) in place on dP, row by row; 0 above the diagonal. */
__global__ void k_att_softmax_bwd(float *dS, const float *P, int64_t nrows, int T) {
  int64_t R = (int64_t)blockIdx.x * GPT_ROWS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (R >= nrows) return;
  int t = (int)(R % T);
  const float *p = P + R * T;
  float *d = dS + R * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

void opcu_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  if (NH <= 0 || C % NH != 0) die_on_rank("op_attention_fwd: C = %d is not a multiple of NH = %d", C, NH);
  if (B <= 0 || T <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const long long TT = (long long)T * T;
  for (int b = 0; b < B; b++) { /* scores: S[t][j] = scale·q_t·k_j, every head of row b */
    const float *Q = qkv + (int64_t)b * T * C3, *K = Q + C;
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, K, C3, hs, Q, C3, hs, att + (int64_t)b * NH * TT, T,
               TT, NH);
  }
  int64_t nrows = (int64_t)B * NH * T;
  k_att_softmax<<<warp_rows_grid(nrows), GPT_THREADS, 0, stream()>>>(att, nrows, T);
  CHECK_LAUNCH();
  for (int b = 0; b < B; b++) { /* out[t][d] = Σ_j P[t][j]·v_j[d] */
    const float *V = qkv + (int64_t)b * T * C3 + 2 * C;
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, V, C3, hs, att + (int64_t)b * NH * TT, T, TT,
               out + (int64_t)b * T * C, C, hs, NH);
  }
}

void opcu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                        int C, int NH) {
  if (NH <= 0 || C % NH != 0) die_on_rank("op_attention_bwd: C = %d is not a multiple of NH = %d", C, NH);
  if (B <= 0 || T <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const long long TT = (long long)T * T;
  float *dS = (float *)ws(OPS_GPT_WS_A, (int64_t)NH * TT * (int64_t)sizeof(float)); // (NH,T,T), one batch row
  for (int b = 0; b < B; b++) {
    const float *Q = qkv + (int64_t)b * T * C3, *K = Q + C, *V = Q + 2 * C;
    const float *P = att + (int64_t)b * NH * TT, *dO = dout + (int64_t)b * T * C;
    float *dQ = dqkv + (int64_t)b * T * C3, *dK = dQ + C, *dV = dQ + 2 * C;
    /* dP = dO·Vᵀ */
    gemm_heads(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, V, C3, hs, dO, C, hs, dS, T, TT, NH);
    k_att_softmax_bwd<<<warp_rows_grid((int64_t)NH * T), GPT_THREADS, 0, stream()>>>(dS, P, (int64_t)NH * T,
                                                                                     T);
    CHECK_LAUNCH();
    /* dV = Pᵀ·dO */
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dO, C, hs, P, T, TT, dV, C3, hs, NH);
    /* dQ = s·dS·K */
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, K, C3, hs, dS, T, TT, dQ, C3, hs, NH);
    /* dK = s·dSᵀ·Q */
    gemm_heads(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, Q, C3, hs, dS, T, TT, dK, C3, hs, NH);
  }
}

/* ---- token + position embedding ------------------------------------------------------------- */
__global__ void k_emb_fwd(float *out, const int *tokens, const void *wte, const void *wpe, int dt, int T,
                          int C, int V, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t p = i / C;
    int c = (int)(i % C), t = (int)(p % T), tok = tokens[p];
    out[i] = (tok < 0 || tok >= V)
        ? NAN /* ops_gpt.h: a bad token makes its row NaN */
        : g_load(wte, dt, (int64_t)tok * C + c) + g_load(wpe, dt, (int64_t)t * C + c);
  }
}
/* dwte[v,c] = beta·dwte[v,c] + Σ_{k in bucket v} dout[pos[k],c]; start (V+1), pos (BT). */
__global__ void k_emb_bwd_wte(void *dwte, int dt, const float *dout, const int *start, const int *pos, int C,
                              int64_t n, float beta) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t v = i / C;
    int c = (int)(i % C);
    float s = 0.0f;
    for (int k = start[v]; k < start[v + 1]; k++) s += dout[(int64_t)pos[k] * C + c];
    g_store_acc(dwte, dt, i, s, beta);
  }
}
__global__ void k_emb_bwd_wpe(void *dwpe, int dt, const float *dout, int B, int T, int C, float beta) {
  int64_t n = (int64_t)T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += dout[(int64_t)b * n + i];
    g_store_acc(dwpe, dt, i, s, beta);
  }
}

void opcu_embedding_fwd(float *out, const int *tokens, const void *wte, const void *wpe, dtype_t wdt, int B,
                        int T, int C, int V) {
  gpt_check_dt(wdt, "opcu_embedding_fwd");
  int64_t n = (int64_t)B * T * C;
  if (B <= 0 || T <= 0 || C <= 0) return;
  k_emb_fwd<<<grid_for(n, GPT_THREADS), GPT_THREADS, 0, stream()>>>(out, tokens, wte, wpe, wdt, T, C, V, n);
  CHECK_LAUNCH();
}

/* Host-side buckets: start (V+1) then pos (BT), grow-only. The upload below is an async copy from
 * pageable memory, which returns once the bytes are staged, so the next call may reuse it. */
static int *g_emb_host;
static int64_t g_emb_host_n;

void opcu_embedding_bwd(void *dwte, void *dwpe, const float *dout, const int *tokens, dtype_t wdt, int B,
                        int T, int C, int V, float beta) {
  gpt_check_dt(wdt, "opcu_embedding_bwd");
  if (C <= 0 || V <= 0) return;
  cudaStream_t s = stream();
  int64_t BT = (int64_t)(B > 0 ? B : 0) * (T > 0 ? T : 0);
  int64_t nh = (int64_t)V + 1 + 2 * BT; /* start | pos | the tokens themselves */
  if (nh > g_emb_host_n) {
    int *p = (int *)realloc(g_emb_host, (size_t)nh * sizeof(int));
    if (!p) die("out of memory on rank %d: embedding buckets (%lld ints)", check_rank(), (long long)nh);
    g_emb_host = p;
    g_emb_host_n = nh;
  }
  int *start = g_emb_host, *pos = start + V + 1, *tok = pos + BT;
  if (BT > 0) {
    CHECK_CUDA(cudaMemcpyAsync(tok, tokens, (size_t)BT * sizeof(int), cudaMemcpyDeviceToHost, s));
    devcu_wait_stream(s);
  }
  /* stable counting sort, as ops_gpt_cpu.c: within a bucket, positions increase */
  for (int v = 0; v <= V; v++) start[v] = 0;
  for (int64_t p = 0; p < BT; p++) {
    if (tok[p] < 0 || tok[p] >= V)
      die_on_rank("op_embedding_bwd: token[%lld] = %d outside [0, %d)", (long long)p, tok[p], V);
    start[tok[p] + 1]++;
  }
  for (int v = 0; v < V; v++) start[v + 1] += start[v];
  /* start[v+1] is one past bucket v: fill backwards, after which start[v+1] is the start of v */
  for (int64_t p = BT - 1; p >= 0; p--) pos[--start[tok[p] + 1]] = (int)p;
  for (int v = 0; v < V; v++) start[v] = start[v + 1];
  start[V] = (int)BT;
  int *d_buckets = (int *)ws(OPS_GPT_WS_B, ((int64_t)V + 1 + BT) * (int64_t)sizeof(int));
  CHECK_CUDA(
      cudaMemcpyAsync(d_buckets, start, ((size_t)V + 1 + BT) * sizeof(int), cudaMemcpyHostToDevice, s));
  int64_t n = (int64_t)V * C;
  k_emb_bwd_wte<<<grid_for(n, GPT_THREADS), GPT_THREADS, 0, s>>>(dwte, wdt, dout, d_buckets,
                                                                 d_buckets + V + 1, C, n, beta);
  CHECK_LAUNCH();
  if (T > 0) {
    k_emb_bwd_wpe<<<grid_for((int64_t)T * C, GPT_THREADS), GPT_THREADS, 0, s>>>(dwpe, wdt, dout,
                                                                                B > 0 ? B : 0, T, C, beta);
    CHECK_LAUNCH();
  }
}

/* ---- chapter 12's rows (ops_gpt.h): one thread per output element, its sum in a fixed order ----- */
__global__ void k_rows_gather(float *dst, const float *src, const int *src_row, const float *scale, int64_t n,
                              int C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * C) return;
  int64_t row = i / C, c = i % C;
  int r = src_row[row];
  dst[i] = r < 0 ? 0.0f : (scale ? scale[row] * src[(int64_t)r * C + c] : src[(int64_t)r * C + c]);
}
__global__ void k_rows_combine(float *y, const float *src, const int *slot, const float *w, int64_t T, int k,
                               int C, float beta) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  int64_t t = i / C, c = i % C;
  float acc = beta == 0.0f ? 0.0f : y[i];
  for (int j = 0; j < k; j++) {
    int r = slot[t * k + j];
    if (r >= 0) acc += (w ? w[t * k + j] : 1.0f) * src[(int64_t)r * C + c];
  }
  y[i] = acc;
}
__global__ void k_rows_dot(float *dw, const float *dy, const float *src, const int *slot, int64_t T, int k,
                           int C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * k) return;
  int r = slot[i];
  float acc = 0.0f;
  if (r >= 0)
    for (int c = 0; c < C; c++) acc += dy[(i / k) * C + c] * src[(int64_t)r * C + c];
  dw[i] = acc;
}
void opcu_rows_gather(float *dst, const float *src, const int *src_row, const float *scale, int64_t n,
                      int C) {
  if (n * C <= 0) return;
  k_rows_gather<<<grid_for(n * C, GPT_THREADS), GPT_THREADS, 0, stream()>>>(dst, src, src_row, scale, n, C);
  CHECK_LAUNCH();
}
void opcu_rows_combine(float *y, const float *src, const int *slot, const float *w, int64_t T, int k, int C,
                       float beta) {
  if (T * C <= 0) return;
  k_rows_combine<<<grid_for(T * C, GPT_THREADS), GPT_THREADS, 0, stream()>>>(y, src, slot, w, T, k, C, beta);
  CHECK_LAUNCH();
}
void opcu_rows_dot(float *dw, const float *dy, const float *src, const int *slot, int64_t T, int k, int C) {
  if (T * k <= 0) return;
  k_rows_dot<<<grid_for(T * k, GPT_THREADS), GPT_THREADS, 0, stream()>>>(dw, dy, src, slot, T, k, C);
  CHECK_LAUNCH();
}
