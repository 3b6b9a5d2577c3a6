/* test_gpu_ops_gpt.c — every CUDA op of common/device/ops_gpt.h (ops_gpt_cuda.cu) against the CPU op
 * (ops_gpt_cpu.c) on the same random inputs, plus linear without bias on CUDA. Needs a GPU: part
 * of `make test-gpu`, never of `make test`. Notes: notes/gpu.md.
 *
 * Rules (as test_gpu_ops.c): outputs are poisoned (all bits set: NaN) before each run, so an
 * element the kernel forgot to write fails; NaN never passes. Tolerances:
 *   embedding fwd/bwd   bitwise: the same fp32 additions in the same order (-fmad=false).
 *   layernorm           y, dx: 1e-5 relative (floor 1e-2·max|expected|: y and dx cancel to ~0 in
 *                       places); mean, rstd 1e-5 relative — the row sums of C terms are added in
 *                       another order (32 lanes, then a butterfly), each within C·u of exact.
 *                       dw, db: sums over all rows in another order (chunks): 1e-5 normwise;
 *                       bf16 results 1e-2 (one bf16 rounding that may fall differently).
 *   attention           att 1e-5 relative (floor 1e-3·max: fp32 exps, CUDA's expf within 2 ulp),
 *                       exactly 0 above the diagonal; out 1e-5 normwise (a GEMM over T terms);
 *                       dqkv 1e-4 normwise: three GEMMs over T terms after dS = P·(dP − Σ P·dP),
 *                       whose difference cancels, so relative errors grow ~T·u·|dP|/|dS|.
 * A layout bug (wrong leading dimension, head stride, transpose) is off by O(1). */
#define ZL_GPU_SEED 0x2545f4914f6cdd1dull /* this file's random stream */
#include "zl_gpu_test.h" // zl_gpu_init, rand_f32, up, down, poisoned, expect_close, expect_bits, tol_of
#include "ops.h"      // op_linear_fwd/bwd
#include "ops_gpt.h"  // op_layernorm_*, op_attention_*, op_embedding_*

TestSuite(common_gpu_ops_gpt, .init = zl_gpu_init, .timeout = 120);

/* ---- helpers: zl_gpu_test.h, plus ---------------------------------------------------------- */
/* n floats as dtype dt (a new buffer: bf16 rounded, or an fp32 copy). */
static void *as_dt(const float *x, dtype_t dt, int64_t n) {
  void *h = malloc((size_t)(n ? n : 1) * dtype_size(dt));
  for (int64_t i = 0; i < n; i++) dt_store(h, dt, i, x[i]);
  return h;
}

/* ---- LayerNorm ------------------------------------------------------------------------------ */
static void check_layernorm(dtype_t wdt, int rows, int C, float beta) {
  int64_t n = (int64_t)rows * C;
  size_t es = dtype_size(wdt);
  float *x = rand_f32(n, 2.0f, 0.5f), *wf = rand_f32(C, 0.3f, 1.0f), *bf = rand_f32(C, 0.3f, 0.0f);
  float *dy = rand_f32(n, 1.0f, 0.0f), *dx0 = rand_f32(n, 1.0f, 0.0f), *g0 = rand_f32(2 * C, 0.5f, 0.0f);
  void *w = as_dt(wf, wdt, C), *b = as_dt(bf, wdt, C), *gold = as_dt(g0, wdt, 2 * C);
  /* CPU */
  float *y_c = malloc(n * 4), *m_c = malloc(rows * 4), *r_c = malloc(rows * 4), *dx_c = malloc(n * 4);
  void *g_c = malloc(2 * C * es);
  memcpy(dx_c, dx0, n * 4);
  memcpy(g_c, gold, 2 * C * es);
  op_layernorm_fwd(DEV_CPU, y_c, m_c, r_c, x, w, b, wdt, rows, C);
  op_layernorm_bwd(DEV_CPU, dx_c, g_c, (char *)g_c + C * es, dy, x, m_c, r_c, w, wdt, rows, C, beta);
  /* GPU: the backward reads the GPU's own mean and rstd */
  void *d_x = up(x, n * 4), *d_w = up(w, C * es), *d_b = up(b, C * es), *d_dy = up(dy, n * 4),
       *d_dx = up(dx0, n * 4);
  void *d_y = poisoned(n * 4), *d_m = poisoned(rows * 4), *d_r = poisoned(rows * 4);
  void *d_g = beta != 0 ? up(gold, 2 * C * es) : poisoned(2 * C * es);
  op_layernorm_fwd(DEV_CUDA, d_y, d_m, d_r, d_x, d_w, d_b, wdt, rows, C);
  op_layernorm_bwd(DEV_CUDA, d_dx, d_g, (char *)d_g + C * es, d_dy, d_x, d_m, d_r, d_w, wdt, rows, C, beta);
  float *y = down(d_y, n * 4), *m = down(d_m, rows * 4), *r = down(d_r, rows * 4), *dx = down(d_dx, n * 4);
  void *g = down(d_g, 2 * C * es);
  float *gw = widen(g, wdt, 2 * C), *ew = widen(g_c, wdt, 2 * C);
  char what[96];
  snprintf(what, sizeof what, "layernorm y (%s, %dx%d)", dtype_name(wdt), rows, C);
  expect_close(what, y, y_c, n, 1e-5, 1e-2);
  expect_close("layernorm mean", m, m_c, rows, 1e-5, 1e-3);
  expect_close("layernorm rstd", r, r_c, rows, 1e-5, 0);
  snprintf(what, sizeof what, "layernorm dx (accumulated, %s, %dx%d)", dtype_name(wdt), rows, C);
  expect_close(what, dx, dx_c, n, 1e-5, 1e-2);
  snprintf(what, sizeof what, "layernorm dw (%s, %dx%d, beta %g)", dtype_name(wdt), rows, C, beta);
  expect_close(what, gw, ew, C, tol_of(wdt), 1.0);
  snprintf(what, sizeof what, "layernorm db (%s, %dx%d, beta %g)", dtype_name(wdt), rows, C, beta);
  expect_close(what, gw + C, ew + C, C, tol_of(wdt), 1.0);
  void *ptrs[] = {d_x, d_w, d_b, d_dy, d_dx, d_y, d_m, d_r, d_g};
  for (int i = 0; i < 9; i++) dev_free(DEV_CUDA, ptrs[i]);
  free(x), free(wf), free(bf), free(dy), free(dx0), free(g0), free(w), free(b), free(gold);
  free(y_c), free(m_c), free(r_c), free(dx_c), free(g_c), free(y), free(m), free(r), free(dx), free(g),
      free(gw), free(ew);
}
Test(common_gpu_ops_gpt, layernorm_f32) {
  check_layernorm(DT_F32, 37, 33, 0.0f);
  check_layernorm(DT_F32, 1030, 768, 0.0f); /* more rows than the 128 chunks of the dw/db reduction */
  check_layernorm(DT_F32, 64, 256, 1.0f);
}
Test(common_gpu_ops_gpt, layernorm_bf16) {
  check_layernorm(DT_BF16, 37, 33, 0.0f);
  check_layernorm(DT_BF16, 300, 512, 1.0f);
}

/* ---- attention -------------------------------------------------------------------------------- */
static void check_attention(int B, int T, int C, int NH) {
  int64_t nq = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, na = (int64_t)B * NH * T * T;
  float *qkv = rand_f32(nq, 1.5f, 0.0f), *dout = rand_f32(no, 1.0f, 0.0f);
  float *out_c = malloc(no * 4), *att_c = malloc(na * 4), *dqkv_c = malloc(nq * 4);
  op_attention_fwd(DEV_CPU, out_c, att_c, qkv, B, T, C, NH);
  op_attention_bwd(DEV_CPU, dqkv_c, dout, qkv, att_c, B, T, C, NH);
  void *d_qkv = up(qkv, nq * 4), *d_dout = up(dout, no * 4);
  void *d_out = poisoned(no * 4), *d_att = poisoned(na * 4), *d_dqkv = poisoned(nq * 4);
  op_attention_fwd(DEV_CUDA, d_out, d_att, d_qkv, B, T, C, NH);
  op_attention_bwd(DEV_CUDA, d_dqkv, d_dout, d_qkv, d_att, B, T, C, NH);
  float *out = down(d_out, no * 4), *att = down(d_att, na * 4), *dqkv = down(d_dqkv, nq * 4);
  char what[96];
  snprintf(what, sizeof what, "attention att (B %d, T %d, C %d, NH %d)", B, T, C, NH);
  expect_close(what, att, att_c, na, 1e-5, 1e-3);
  for (int64_t i = 0; i < na; i++)
    if (i % T > i / T % T)
      cr_assert(att[i] == 0.0f,
                "attention att[%lld] (row t %lld, col %lld) above the diagonal: got %g, expected 0",
                (long long)i, (long long)(i / T % T), (long long)(i % T), att[i]);
  snprintf(what, sizeof what, "attention out (B %d, T %d, C %d, NH %d)", B, T, C, NH);
  expect_close(what, out, out_c, no, 1e-5, 1.0);
  snprintf(what, sizeof what, "attention dqkv (B %d, T %d, C %d, NH %d)", B, T, C, NH);
  expect_close(what, dqkv, dqkv_c, nq, 1e-4, 1.0);
  /* deterministic: the same call again gives the same bits */
  op_attention_bwd(DEV_CUDA, d_dqkv, d_dout, d_qkv, d_att, B, T, C, NH);
  float *again = down(d_dqkv, nq * 4);
  expect_bits("attention dqkv (second call on cuda)", again, dqkv, nq, 4, 0);
  void *ptrs[] = {d_qkv, d_dout, d_out, d_att, d_dqkv};
  for (int i = 0; i < 5; i++) dev_free(DEV_CUDA, ptrs[i]);
  free(qkv), free(dout), free(out_c), free(att_c), free(dqkv_c), free(out), free(att), free(dqkv),
      free(again);
}
Test(common_gpu_ops_gpt, attention) {
  check_attention(2, 5, 8, 2);
  check_attention(2, 64, 128, 4);
  check_attention(1, 200, 96, 2); /* T crosses the CPU path's 64-row blocks */
  check_attention(2, 256, 768, 12); /* GPT-2 124M's head size (64) */
}

/* ---- embedding: bitwise ----------------------------------------------------------------------- */
static void check_embedding(dtype_t wdt, int B, int T, int C, int V, float beta) {
  int64_t BT = (int64_t)B * T, n = BT * C;
  size_t es = dtype_size(wdt);
  int *tok = malloc(BT * sizeof(int));
  /* repeats */
  for (int64_t p = 0; p < BT; p++) tok[p] = p % 3 == 0 ? 7 % V : (int)((urand() + 1.0f) * 0.5f * V) % V;
  float *tef = rand_f32((int64_t)V * C, 1.0f, 0.0f), *pef = rand_f32((int64_t)T * C, 1.0f, 0.0f);
  float *dout = rand_f32(n, 1.0f, 0.0f), *oldf = rand_f32(((int64_t)V + T) * C, 0.5f, 0.0f);
  void *wte = as_dt(tef, wdt, (int64_t)V * C), *wpe = as_dt(pef, wdt, (int64_t)T * C);
  void *old = as_dt(oldf, wdt, ((int64_t)V + T) * C);
  size_t ng = ((size_t)V + T) * C * es;
  float *out_c = malloc(n * 4);
  void *g_c = malloc(ng);
  memcpy(g_c, old, ng);
  op_embedding_fwd(DEV_CPU, out_c, tok, wte, wpe, wdt, B, T, C, V);
  op_embedding_bwd(DEV_CPU, g_c, (char *)g_c + (size_t)V * C * es, dout, tok, wdt, B, T, C, V, beta);
  void *d_tok = up(tok, BT * sizeof(int)), *d_te = up(wte, (size_t)V * C * es),
       *d_pe = up(wpe, (size_t)T * C * es);
  void *d_dout = up(dout, n * 4), *d_out = poisoned(n * 4), *d_g = beta != 0 ? up(old, ng) : poisoned(ng);
  op_embedding_fwd(DEV_CUDA, d_out, d_tok, d_te, d_pe, wdt, B, T, C, V);
  op_embedding_bwd(DEV_CUDA, d_g, (char *)d_g + (size_t)V * C * es, d_dout, d_tok, wdt, B, T, C, V, beta);
  float *out = down(d_out, n * 4);
  void *g = down(d_g, ng);
  char what[96];
  snprintf(what, sizeof what, "embedding out (%s, B %d, T %d, C %d, V %d)", dtype_name(wdt), B, T, C, V);
  expect_bits(what, out, out_c, n, 4, 0);
  snprintf(what, sizeof what, "embedding dwte,dwpe (%s, beta %g)", dtype_name(wdt), beta);
  expect_bits(what, g, g_c, ((int64_t)V + T) * C, es, 0);
  void *ptrs[] = {d_tok, d_te, d_pe, d_dout, d_out, d_g};
  for (int i = 0; i < 6; i++) dev_free(DEV_CUDA, ptrs[i]);
  free(tok), free(tef), free(pef), free(dout), free(oldf), free(wte), free(wpe), free(old), free(out_c),
      free(g_c);
  free(out), free(g);
}
Test(common_gpu_ops_gpt, embedding_bitwise) {
  check_embedding(DT_F32, 3, 17, 24, 11, 0.0f);
  check_embedding(DT_F32, 4, 256, 768, 256, 1.0f);
  check_embedding(DT_BF16, 4, 256, 768, 256, 0.0f);
  check_embedding(DT_BF16, 2, 64, 64, 50257, 1.0f); /* GPT-2's vocabulary: mostly empty buckets */
}

/* ---- linear without bias on CUDA (the LM head) -------------------------------------------------- */
Test(common_gpu_ops_gpt, linear_without_bias) {
  const int B = 37, in = 64, out = 256;
  float *x = rand_f32(B * in, 1, 0), *W = rand_f32(out * in, 0.2f, 0), *dy = rand_f32(B * out, 1, 0);
  float *y_c = malloc(B * out * 4), *dx_c = malloc(B * in * 4), *dW_c = malloc(out * in * 4);
  op_linear_fwd(DEV_CPU, y_c, x, W, NULL, DT_F32, B, in, out);
  op_linear_bwd(DEV_CPU, dx_c, dW_c, NULL, dy, x, W, DT_F32, B, in, out, 0.0f);
  void *d_x = up(x, B * in * 4), *d_W = up(W, out * in * 4), *d_dy = up(dy, B * out * 4);
  void *d_y = poisoned(B * out * 4), *d_dx = poisoned(B * in * 4), *d_dW = poisoned(out * in * 4);
  op_linear_fwd(DEV_CUDA, d_y, d_x, d_W, NULL, DT_F32, B, in, out);
  op_linear_bwd(DEV_CUDA, d_dx, d_dW, NULL, d_dy, d_x, d_W, DT_F32, B, in, out, 0.0f);
  op_linear_bwd(DEV_CUDA, d_dx, d_dW, NULL, d_dy, d_x, d_W, DT_F32, 0, in, out, 1.0f); /* no rows: dW kept */
  float *y = down(d_y, B * out * 4), *dx = down(d_dx, B * in * 4), *dW = down(d_dW, out * in * 4);
  expect_close("linear y (no bias)", y, y_c, B * out, 1e-5, 1.0);
  expect_close("linear dx (no bias)", dx, dx_c, B * in, 1e-5, 1.0);
  expect_close("linear dW (db NULL)", dW, dW_c, out * in, 1e-5, 1.0);
  void *ptrs[] = {d_x, d_W, d_dy, d_y, d_dx, d_dW};
  for (int i = 0; i < 6; i++) dev_free(DEV_CUDA, ptrs[i]);
  free(x), free(W), free(dy), free(y_c), free(dx_c), free(dW_c), free(y), free(dx), free(dW);
}

/* ---- chapter 12's rows: gather, combine, dot — bitwise (one thread per output, the CPU's order) -- */
Test(common_gpu_ops_gpt, moe_rows_bitwise) {
  const int64_t T = 53, R = 97;
  const int k = 2, C = 40;
  float *src = rand_f32(R * C, 1, 0), *tok = rand_f32(T * C, 1, 0), *w = rand_f32(T * k, 1, 0),
        *sc = rand_f32(R, 1, 0);
  int *rows = malloc(R * sizeof(int)), *slot = malloc(T * k * sizeof(int));
  for (int64_t r = 0; r < R; r++) rows[r] = r % 7 == 3 ? -1 : (int)((r * 31) % T); /* padding rows: -1 */
  /* dropped choices: -1 */
  for (int64_t i = 0; i < T * k; i++) slot[i] = i % 11 == 5 ? -1 : (int)((i * 17) % R);
  float *g_c = malloc(R * C * 4), *y_c = malloc(T * C * 4), *d_c = malloc(T * k * 4);
  op_rows_gather(DEV_CPU, g_c, tok, rows, sc, R, C);
  memcpy(y_c, tok, T * C * 4);
  op_rows_combine(DEV_CPU, y_c, src, slot, w, T, k, C, 1.0f);
  op_rows_dot(DEV_CPU, d_c, tok, src, slot, T, k, C);
  void *d_src = up(src, R * C * 4), *d_tok = up(tok, T * C * 4), *d_w = up(w, T * k * 4),
       *d_sc = up(sc, R * 4);
  void *d_rows = up(rows, R * sizeof(int)), *d_slot = up(slot, T * k * sizeof(int));
  void *d_g = poisoned(R * C * 4), *d_y = up(tok, T * C * 4), *d_d = poisoned(T * k * 4);
  op_rows_gather(DEV_CUDA, d_g, d_tok, d_rows, d_sc, R, C);
  op_rows_combine(DEV_CUDA, d_y, d_src, d_slot, d_w, T, k, C, 1.0f);
  op_rows_dot(DEV_CUDA, d_d, d_tok, d_src, d_slot, T, k, C);
  float *g = down(d_g, R * C * 4), *y = down(d_y, T * C * 4), *d = down(d_d, T * k * 4);
  expect_bits("op_rows_gather (scaled, padding rows 0)", g, g_c, R * C, 4, 0);
  expect_bits("op_rows_combine (gates, beta 1, dropped choices)", y, y_c, T * C, 4, 0);
  expect_bits("op_rows_dot", d, d_c, T * k, 4, 0);
  void *ptrs[] = {d_src, d_tok, d_w, d_sc, d_rows, d_slot, d_g, d_y, d_d};
  for (int i = 0; i < 9; i++) dev_free(DEV_CUDA, ptrs[i]);
  free(src), free(tok), free(w), free(sc), free(rows), free(slot), free(g_c), free(y_c), free(d_c), free(g),
      free(y), free(d);
}
