/* ops_gpt_cpu.c — the GPT-2 kernels of ops_gpt.h on the CPU: OpenBLAS sgemm for the attention
 * matmuls (one call per head and row block, straight on the (B,T,3C) layout: head h's Q is a
 * T×hs matrix with leading dimension 3C, so nothing is permuted), plain loops for the rest.
 * dev == DEV_CUDA forwards to ops_gpt_cuda.cu in a CUDA build and stops with a clear message
 * otherwise. Contracts and what each op saves: ops_gpt.h.
 *
 * Determinism: fixed loops in fp32 (sgemm runs with one thread: ops_cpu.c sets it), so the same
 * inputs give the same bits. bf16 weights are widened to fp32 first; weight-gradients are summed
 * in fp32 and rounded once when stored. */
#include "ops_gpt.h"  // the contracts implemented here
#include <math.h>     // sqrtf
#include <string.h>   // memset, memcpy
#include <cblas.h>    // cblas_sgemm (OpenBLAS)
#include "check.h"    // die, check_rank
#include "ops.h"      // ops_workspace, ops_blas_init

/* As ops_cpu.c: let GCC vectorize the elementwise loops (vector and scalar SSE round alike), and
 * never contract a·b + c into a fused multiply-add: nvcc runs with -fmad=false, so the loops that
 * ops_gpt_cuda.cu repeats in the same order (embedding) give the same bits on both devices. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
/* after the pragma, so that its functions are compiled under it */
#include "elementwise.h" // ew_exp_nonpos

#ifdef ZL_CUDA
#define GPT_ON_CUDA(call) do { call; return; } while (0)
#else
#define GPT_ON_CUDA(call) \
  die_on_rank("%s on --device cuda, but this binary was built without CUDA (rebuild with make GPU=1, " \
              "or run with --device cpu)", __func__)
#endif

/* Attention row block: S = Q·Kᵀ for rows r0..r1−1 only needs keys 0..r1−1, so the masked half of
 * the T×T scores is (mostly) never computed; 64 rows keep each sgemm large enough to be fast. */
#define ATT_BLOCK 64

static void gpt_check_dt(dtype_t dt, const char *op) {
  if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16)
    die_on_rank("%s: unsupported dtype %s", op, dtype_name(dt));
}
/* n elements of p (dtype dt) as fp32: p itself for F32, else widened into a workspace slot. */
static const float *gpt_as_f32(const void *p, dtype_t dt, int64_t n, int slot) {
  if (dt == DT_F32) return (const float *)p;
  float *w = ops_workspace(DEV_CPU, slot, n * (int64_t)sizeof(float));
  if (dt == DT_BF16)
    for (int64_t i = 0; i < n; i++) w[i] = bf16_to_f32(((const bf16_t *)p)[i]);
  else
    for (int64_t i = 0; i < n; i++) w[i] = fp16_to_f32(((const fp16_t *)p)[i]);
  return w;
}
/* dst[i] = beta·dst[i] + s[i] in dt (beta 0 overwrites: an old NaN does not leak in). */
static void gpt_store_acc(void *dst, dtype_t dt, const float *s, int64_t n, float beta) {
  for (int64_t i = 0; i < n; i++) {
    float v = beta == 0.0f ? s[i] : beta * dt_load(dst, dt, i) + s[i];
    dt_store(dst, dt, i, v);
    if (dt == DT_F16 && v != 0.0f && (((const fp16_t *)dst)[i] & 0x7fffu) == 0) ops_fp16_count_flushed(1);
  }
}

/* ---- LayerNorm -------------------------------------------------------------------------- */
void op_layernorm_fwd(device_t dev, float *y, float *mean, float *rstd, const float *x, const void *w,
                      const void *b, dtype_t wdt, int rows, int C) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_layernorm_fwd(y, mean, rstd, x, w, b, wdt, rows, C));
  gpt_check_dt(wdt, __func__);
  if (rows <= 0 || C <= 0) return;
  const float *wf = gpt_as_f32(w, wdt, C, OPS_GPT_WS_A), *bf = gpt_as_f32(b, wdt, C, OPS_GPT_WS_B);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (int64_t)r * C;
    float *yr = y + (int64_t)r * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= (float)C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
      float d = xr[c] - m;
      v += d * d;
    }
    v /= (float)C;
    float s = 1.0f / sqrtf(v + OPS_LN_EPS);
    for (int c = 0; c < C; c++) yr[c] = ((xr[c] - m) * s) * wf[c] + bf[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

void op_layernorm_bwd(device_t dev, float *dx, void *dw, void *db, const float *dy, const float *x,
                      const float *mean, const float *rstd, const void *w, dtype_t wdt, int rows, int C,
                      float beta) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_layernorm_bwd(dx, dw, db, dy, x, mean, rstd, w, wdt, rows, C, beta));
  /* its two halves, one after the other: each element's arithmetic is the fused loop's, in the same
   * order (the rows in turn), so the bits are the same (dx is never dy: the halves read dy after
   * the input half wrote dx) */
  op_layernorm_bwd_input(DEV_CPU, dx, dy, x, mean, rstd, w, wdt, rows, C);
  op_layernorm_bwd_weight(DEV_CPU, dw, db, dy, x, mean, rstd, wdt, rows, C, beta);
}

/* op_layernorm_bwd in two halves (ops_gpt.h): the fused op's two loops, apart; the same
 * expressions in the same order, so B then W is the fused op bit for bit. */
void op_layernorm_bwd_input(device_t dev, float *dx, const float *dy, const float *x, const float *mean,
                            const float *rstd, const void *w, dtype_t wdt, int rows, int C) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_layernorm_bwd_input(dx, dy, x, mean, rstd, w, wdt, rows, C));
  gpt_check_dt(wdt, __func__);
  if (C <= 0) return;
  const float *wf = gpt_as_f32(w, wdt, C, OPS_GPT_WS_A);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (int64_t)r * C, *dyr = dy + (int64_t)r * C;
    float *dxr = dx + (int64_t)r * C;
    float m = mean[r], s = rstd[r];
    float gm = 0.0f, gnm = 0.0f; /* mean_c(g), mean_c(g·n) */
    for (int c = 0; c < C; c++) {
      float n = (xr[c] - m) * s, g = wf[c] * dyr[c];
      gm += g;
      gnm += g * n;
    }
    gm /= (float)C;
    gnm /= (float)C;
    for (int c = 0; c < C; c++) {
      float n = (xr[c] - m) * s, g = wf[c] * dyr[c];
      dxr[c] += ((g - gm) - n * gnm) * s;
    }
  }
}

void op_layernorm_bwd_weight(device_t dev, void *dw, void *db, const float *dy, const float *x,
                             const float *mean, const float *rstd, dtype_t wdt, int rows, int C, float beta) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_layernorm_bwd_weight(dw, db, dy, x, mean, rstd, wdt, rows, C, beta));
  gpt_check_dt(wdt, __func__);
  if (C <= 0) return;
  // Σ n·dy | Σ dy
  float *dws = ops_workspace(DEV_CPU, OPS_GPT_WS_B, 2 * (int64_t)C * (int64_t)sizeof(float));
  float *dbs = dws + C;
  memset(dws, 0, 2 * (size_t)C * sizeof(float));
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (int64_t)r * C, *dyr = dy + (int64_t)r * C;
    float m = mean[r], s = rstd[r];
    for (int c = 0; c < C; c++) {
      float n = (xr[c] - m) * s;
      dbs[c] += dyr[c];
      dws[c] += n * dyr[c];
    }
  }
  gpt_store_acc(dw, wdt, dws, C, beta);
  gpt_store_acc(db, wdt, dbs, C, beta);
}

/* ---- causal self-attention ------------------------------------------------------------- */
/* exp(x) for x <= 0 in plain float arithmetic so that the softmax loop vectorizes (libm's expf is
 * a call, and the T²/2 exps per head were most of the forward's time): elementwise.h's
 * ew_exp_nonpos (Cephes, about 1 ulp), with x clamped to −87 first, so 2^n stays a normal float
 * (exp(−87) ≈ 1.6e-38 stands in for anything smaller). */
static inline float gpt_exp_nonpos(float x) {
  uint32_t ax; /* x = −min(|x|, 87), clamped on the bits as integers: a float compare would branch */
  memcpy(&ax, &x, sizeof ax);
  ax &= 0x7fffffffu;
  ax = ax < 0x42ae0000u ? ax : 0x42ae0000u; /* 87.0f */
  memcpy(&x, &ax, sizeof x);
  return ew_exp_nonpos(-x);
}

/* Row t of a T×T block holding scale·q·k for j <= t: softmax over j <= t in place, 0 above. */
static void att_softmax_row(float *row, int t, int T) {
  float mx = row[0];
  for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
  for (int j = 0; j <= t; j++) row[j] = gpt_exp_nonpos(row[j] - mx); /* vectorized */
  float sum = 0.0f;
  for (int j = 0; j <= t; j++) sum += row[j]; /* in order */
  float inv = 1.0f / sum;
  for (int j = 0; j <= t; j++) row[j] *= inv;
  for (int j = t + 1; j < T; j++) row[j] = 0.0f;
}

void op_attention_fwd(device_t dev, float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_attention_fwd(out, att, qkv, B, T, C, NH));
  if (NH <= 0 || C % NH != 0) die_on_rank("%s: C = %d is not a multiple of NH = %d", __func__, C, NH);
  ops_blas_init();
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *Q = qkv + (int64_t)b * T * C3 + h * hs, *K = Q + C, *V = Q + 2 * C; // (T,hs), ld 3C
      float *A = att + ((int64_t)b * NH + h) * T * T;                                  // (T,T)
      float *O = out + (int64_t)b * T * C + h * hs;                                    // (T,hs), ld C
      // scores: rows r0..r1−1 against keys 0..r1−1
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale, Q + (int64_t)r0 * C3, C3,
                    K, C3, 0.0f, A + (int64_t)r0 * T, T);
      }
      for (int t = 0; t < T; t++) att_softmax_row(A + (int64_t)t * T, t, T);
      // out = att · V, rows r0..r1−1 against values 0..r1−1 (att is 0 beyond)
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f, A + (int64_t)r0 * T, T,
                    V, C3, 0.0f, O + (int64_t)r0 * C, C);
      }
    }
}

/* Per (b,h), with P = att, dO = dout's head slice:
 *   dP = dO·Vᵀ;  dS = P ⊙ (dP − rowsum(P ⊙ dP));  dQ = scale·dS·K;  dK = scale·dSᵀ·Q;  dV =
 * Pᵀ·dO.
 * dS lives in one T×T workspace; lower-triangular blocks only (dS and P are 0 above the diagonal). */
void op_attention_bwd(device_t dev, float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                      int T, int C, int NH) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_attention_bwd(dqkv, dout, qkv, att, B, T, C, NH));
  if (NH <= 0 || C % NH != 0) die_on_rank("%s: C = %d is not a multiple of NH = %d", __func__, C, NH);
  ops_blas_init();
  if (B <= 0 || T <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  float *dS = ops_workspace(DEV_CPU, OPS_GPT_WS_A, (int64_t)T * T * (int64_t)sizeof(float)); // (T,T)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *Q = qkv + (int64_t)b * T * C3 + h * hs, *K = Q + C, *V = Q + 2 * C; // (T,hs), ld 3C
      const float *P = att + ((int64_t)b * NH + h) * T * T;                            // (T,T)
      const float *dO = dout + (int64_t)b * T * C + h * hs;                            // (T,hs), ld C
      float *dQ = dqkv + (int64_t)b * T * C3 + h * hs, *dK = dQ + C, *dV = dQ + 2 * C; // (T,hs), ld 3C
      // dP = dO·Vᵀ, rows r0..r1−1 against keys 0..r1−1
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f, dO + (int64_t)r0 * C, C,
                    V, C3, 0.0f, dS + (int64_t)r0 * T, T);
      }
      // dS = P ⊙ (dP − Σ_j P·dP), row by row; exactly 0 above the diagonal
      for (int t = 0; t < T; t++) {
        const float *p = P + (int64_t)t * T;
        float *d = dS + (int64_t)t * T;
        float dot = 0.0f;
        for (int j = 0; j <= t; j++) dot += p[j] * d[j];
        for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot);
        for (int j = t + 1; j < T; j++) d[j] = 0.0f;
      }
      // dQ = scale·dS·K, rows r0..r1−1 against keys 0..r1−1
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, scale, dS + (int64_t)r0 * T,
                    T, K, C3, 0.0f, dQ + (int64_t)r0 * C3, C3);
      }
      // dK = scale·dSᵀ·Q and dV = Pᵀ·dO, key rows c0..c1−1 against query rows c0..T−1
      for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
        int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, scale,
                    dS + (int64_t)c0 * T + c0, T, Q + (int64_t)c0 * C3, C3, 0.0f, dK + (int64_t)c0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f,
                    P + (int64_t)c0 * T + c0, T, dO + (int64_t)c0 * C, C, 0.0f, dV + (int64_t)c0 * C3, C3);
      }
    }
}

/* ---- token + position embedding ------------------------------------------------------------ */
void op_embedding_fwd(device_t dev, float *out, const int *tokens, const void *wte, const void *wpe,
                      dtype_t wdt, int B, int T, int C, int V) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_embedding_fwd(out, tokens, wte, wpe, wdt, B, T, C, V));
  gpt_check_dt(wdt, __func__);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int64_t p = (int64_t)b * T + t;
      int tok = tokens[p];
      if (tok < 0 || tok >= V)
        die_on_rank("%s: token[%lld] = %d outside [0, %d)", __func__, (long long)p, tok, V);
      float *o = out + p * C;
      int64_t we = (int64_t)tok * C, pe = (int64_t)t * C;
      if (wdt == DT_F32) {
        const float *a = (const float *)wte + we, *e = (const float *)wpe + pe;
        for (int c = 0; c < C; c++) o[c] = a[c] + e[c];
      } else if (wdt == DT_BF16) {
        const bf16_t *a = (const bf16_t *)wte + we, *e = (const bf16_t *)wpe + pe;
        for (int c = 0; c < C; c++) o[c] = bf16_to_f32(a[c]) + bf16_to_f32(e[c]);
      } else {
        const fp16_t *a = (const fp16_t *)wte + we, *e = (const fp16_t *)wpe + pe;
        for (int c = 0; c < C; c++) o[c] = fp16_to_f32(a[c]) + fp16_to_f32(e[c]);
      }
    }
}

/* Positions bucketed by token (a stable counting sort: within a bucket, increasing b·T+t), then
 * one fp32 sum per (v, c) in that order — the order ops_gpt_cuda.cu uses too. */
void op_embedding_bwd(device_t dev, void *dwte, void *dwpe, const float *dout, const int *tokens, dtype_t wdt,
                      int B, int T, int C, int V, float beta) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_embedding_bwd(dwte, dwpe, dout, tokens, wdt, B, T, C, V, beta));
  gpt_check_dt(wdt, __func__);
  if (C <= 0) return;
  const int64_t BT = (int64_t)(B > 0 ? B : 0) * (T > 0 ? T : 0);
  int *end = ops_workspace(DEV_CPU, OPS_GPT_WS_A, ((int64_t)V + BT) * (int64_t)sizeof(int)); // (V) | (BT)
  int *pos = end + V;
  float *s = ops_workspace(DEV_CPU, OPS_GPT_WS_B, (int64_t)C * (int64_t)sizeof(float)); // (C)
  memset(end, 0, (size_t)V * sizeof(int));
  for (int64_t p = 0; p < BT; p++) {
    int tok = tokens[p];
    if (tok < 0 || tok >= V)
      die_on_rank("%s: token[%lld] = %d outside [0, %d)", __func__, (long long)p, tok, V);
    end[tok]++;
  }
  for (int v = 1; v < V; v++) end[v] += end[v - 1]; /* end[v]: one past bucket v */
  for (int64_t p = BT - 1; p >= 0; p--) pos[--end[tokens[p]]] = (int)p; /* now end[v] = start of v */
  for (int v = 0; v < V; v++) {
    int k0 = end[v], k1 = v + 1 < V ? end[v + 1] : (int)BT;
    for (int c = 0; c < C; c++) s[c] = 0.0f;
    for (int k = k0; k < k1; k++) {
      const float *d = dout + (int64_t)pos[k] * C;
      for (int c = 0; c < C; c++) s[c] += d[c];
    }
    gpt_store_acc((char *)dwte + (int64_t)v * C * (int64_t)dtype_size(wdt), wdt, s, C, beta);
  }
  for (int t = 0; t < T; t++) {
    for (int c = 0; c < C; c++) s[c] = 0.0f;
    for (int b = 0; b < B; b++) {
      const float *d = dout + ((int64_t)b * T + t) * C;
      for (int c = 0; c < C; c++) s[c] += d[c];
    }
    gpt_store_acc((char *)dwpe + (int64_t)t * C * (int64_t)dtype_size(wdt), wdt, s, C, beta);
  }
}

/* ---- chapter 12's rows (ops_gpt.h) ------------------------------------------------------------- */
void op_rows_gather(device_t dev, float *dst, const float *src, const int *src_row, const float *scale,
                    int64_t n, int C) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_rows_gather(dst, src, src_row, scale, n, C));
  for (int64_t i = 0; i < n; i++) {
    float *d = dst + i * C;
    int r = src_row[i];
    if (r < 0) {
      for (int c = 0; c < C; c++) d[c] = 0.0f;
      continue;
    }
    const float *s = src + (int64_t)r * C, w = scale ? scale[i] : 1.0f;
    if (scale)
      for (int c = 0; c < C; c++) d[c] = w * s[c];
    else memcpy(d, s, (size_t)C * sizeof(float));
  }
}

void op_rows_combine(device_t dev, float *y, const float *src, const int *slot, const float *w, int64_t T,
                     int k, int C, float beta) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_rows_combine(y, src, slot, w, T, k, C, beta));
  for (int64_t t = 0; t < T; t++) {
    float *d = y + t * C;
    for (int c = 0; c < C; c++) {
      float acc = beta == 0.0f ? 0.0f : d[c];
      for (int j = 0; j < k; j++) {
        int r = slot[t * k + j];
        if (r >= 0) acc += (w ? w[t * k + j] : 1.0f) * src[(int64_t)r * C + c];
      }
      d[c] = acc;
    }
  }
}

void op_rows_dot(device_t dev, float *dw, const float *dy, const float *src, const int *slot, int64_t T,
                 int k, int C) {
  if (dev == DEV_CUDA) GPT_ON_CUDA(opcu_rows_dot(dw, dy, src, slot, T, k, C));
  for (int64_t t = 0; t < T; t++)
    for (int j = 0; j < k; j++) {
      int r = slot[t * k + j];
      float acc = 0.0f;
      if (r >= 0)
        for (int c = 0; c < C; c++) acc += dy[t * C + c] * src[(int64_t)r * C + c];
      dw[t * k + j] = acc;
    }
}
