/* ops_cpu.c — the kernels of ops.h on the CPU: OpenBLAS sgemm for the matmuls, plain loops
 * (which the compiler vectorizes) for everything else. dev == DEV_CUDA forwards to the
 * opcu_* kernels of ops_cuda.cu in a CUDA build and stops with a clear message otherwise.
 * See notes/02-ddp.md (the model and its ops) and notes/00-memory.md (bf16).
 *
 * Determinism: every op is a fixed sequence of fp32/double operations (sgemm runs with one
 * thread, reductions walk a fixed order), so the same inputs give the same bits.
 * bf16: weights are widened to an fp32 workspace before sgemm; gradients are summed in fp32
 * and rounded to bf16 once, when stored. */
#include "ops.h"      // the contracts implemented here
#include <math.h>     // expf, log
#include <string.h>   // memcpy, memmove, memset
#include <cblas.h>    // cblas_sgemm (OpenBLAS), openblas_set_num_threads
#include "check.h"    // die, check_rank
#include "device.h"   // dev_malloc, dev_free
#include "ledger.h"   // ledger_add, ledger_sub, LEDGER_ACTS
#ifdef ZL_CUDA
#include "ops_cuda.h" // opcu_*: the same ops on the GPU
#endif

/* The build uses -O2, where GCC vectorizes almost no loop of unknown length; these loops are
 * the elementwise half of the training step, so let it. Vector and scalar SSE arithmetic round
 * identically: still deterministic. No contraction into fused multiply-adds (which -march=native
 * would allow): the element-wise functions of elementwise.h must round every step as the GPU does
 * (nvcc -fmad=false), so that CPU and GPU give the same bits. */
#if defined(__GNUC__) && !defined(__clang__) /* clang vectorizes at -O2 already */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
/* after the pragma, so that its functions are compiled under it */
#include "elementwise.h" // ew_adamw, ew_sgd, ew_scale_*, ew_add_bf16, ew_max_takes_src, ew_acc, ew_gelu

/* ---- DEV_CUDA: forward, or say this binary cannot ---------------------------------------- */
static _Noreturn __attribute__((unused)) void ops_no_cuda(const char *op) {
  die_on_rank("%s on --device cuda, but this binary was built without CUDA (rebuild with make GPU=1, "
      "or run with --device cpu)", op);
}
#ifdef ZL_CUDA
#define OPS_ON_CUDA(call) do { call; return; } while (0)
#define OPS_ON_CUDA_RET(call) return (call)
#else
#define OPS_ON_CUDA(call) ops_no_cuda(__func__)
#define OPS_ON_CUDA_RET(call) ops_no_cuda(__func__)
#endif

static _Noreturn void ops_bad_dtype(const char *op, dtype_t dt) {
  die_on_rank("%s: unsupported dtype %s", op, dtype_name(dt));
}

/* ---- workspace: grow-only scratch per (device, slot), accounted to LEDGER_ACTS ------------- */
/* Slots the CPU ops use themselves; callers of ops_workspace take OPS_WS_FREE and up. */
enum { OPS_WS_W = 0, OPS_WS_DW = 1, OPS_WS_B = 2, OPS_WS_FREE = 3, OPS_WS_NSLOTS = 8 };

typedef struct ops_ws { void *p; int64_t nbytes, ledger_id; } ops_ws_t;
static ops_ws_t g_ws[2][OPS_WS_NSLOTS]; /* [device][slot] */

/* Contents are NOT kept when a slot grows: a workspace is scratch for one op at a time.
 * Not thread-safe: the ops that use it (linear) run on the compute thread only. */
void *ops_workspace(device_t dev, int slot, int64_t nbytes) {
  if (slot < 0 || slot >= OPS_WS_NSLOTS || (dev != DEV_CPU && dev != DEV_CUDA))
    die_on_rank("ops_workspace: slot %d on device %d out of range (slots 0..%d)", slot, (int)dev,
        OPS_WS_NSLOTS - 1);
  ops_ws_t *w = &g_ws[dev][slot];
  if (nbytes > w->nbytes) {
    if (w->p) {
      dev_free(dev, w->p);
      ledger_sub(LEDGER_ACTS, w->nbytes, w->ledger_id);
    }
    w->ledger_id = ledger_add(LEDGER_ACTS, nbytes, "ops workspace");
    w->p = dev_malloc(dev, (size_t)nbytes, "ops workspace");
    w->nbytes = nbytes;
  }
  return w->p;
}

void ops_release_workspace(void) {
#ifdef ZL_CUDA
  opcu_release_workspace(); /* the CUDA kernels keep their own scratch */
#endif
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < OPS_WS_NSLOTS; s++) {
      ops_ws_t *w = &g_ws[d][s];
      if (!w->p) continue;
      dev_free((device_t)d, w->p);
      ledger_sub(LEDGER_ACTS, w->nbytes, w->ledger_id);
      w->p = NULL;
      w->nbytes = 0;
    }
}

/* Done here too, not only by our launcher's OPENBLAS_NUM_THREADS, so programs started without
 * the wrapper behave. */
void ops_blas_init(void) {
  static int done = 0;
  if (done) return;
  done = 1;
#ifdef OPENBLAS_CONFIG_H
  openblas_set_num_threads(1);
#endif
}

static int64_t g_fp16_flushed; /* written by the compute thread only (the backward) */
int64_t op_fp16_flushed(void) { return g_fp16_flushed; }
void ops_fp16_count_flushed(int64_t k) { g_fp16_flushed += k; }

/* A float view of n elements of p (dtype dt): p itself for F32, else widened into a slot. */
static const float *ops_as_f32(const void *p, dtype_t dt, int64_t n, int slot, const char *op) {
  if (dt == DT_F32) return (const float *)p;
  if (dt != DT_BF16 && dt != DT_F16) ops_bad_dtype(op, dt);
  float *w = ops_workspace(DEV_CPU, slot, n * (int64_t)sizeof(float));
  const uint16_t *h = (const uint16_t *)p;
  if (dt == DT_BF16)
    for (int64_t i = 0; i < n; i++) w[i] = bf16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) w[i] = fp16_to_f32(h[i]);
  return w;
}

/* dst[i] = beta·dst[i] + add[i] stored in dt (beta 0 overwrites: old NaNs do not leak in). */
static void ops_store_acc(void *dst, dtype_t dt, const float *add, int64_t n, float beta) {
  if (dt == DT_F32) {
    float *d = (float *)dst;
    if (beta == 0.0f) memcpy(d, add, (size_t)n * sizeof(float));
    else
      for (int64_t i = 0; i < n; i++) d[i] = ew_acc(d[i], add[i], beta);
  } else if (dt == DT_BF16) {
    bf16_t *d = (bf16_t *)dst;
    if (beta == 0.0f)
      for (int64_t i = 0; i < n; i++) d[i] = bf16_from_f32(add[i]);
    else
      for (int64_t i = 0; i < n; i++) d[i] = bf16_from_f32(ew_acc(bf16_to_f32(d[i]), add[i], beta));
  } else {
    fp16_t *d = (fp16_t *)dst;
    int64_t flushed = 0;
    for (int64_t i = 0; i < n; i++) {
      float v = beta == 0.0f ? add[i] : ew_acc(fp16_to_f32(d[i]), add[i], beta);
      d[i] = fp16_from_f32(v);
      flushed += v != 0.0f && (d[i] & 0x7fffu) == 0;
    }
    ops_fp16_count_flushed(flushed);
  }
}

/* ---- linear ----------------------------------------------------------------------------- */
void op_linear_fwd(device_t dev, float *y, const float *x, const void *W, const void *b, dtype_t wdt, int B,
                   int in, int out) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_linear_fwd(y, x, W, b, wdt, B, in, out));
  ops_blas_init();
  if (B <= 0 || out <= 0) return;
  const float *Wf = ops_as_f32(W, wdt, (int64_t)out * in, OPS_WS_W, __func__); // (out,in)
  const float *bf = b ? ops_as_f32(b, wdt, out, OPS_WS_B, __func__) : NULL;   // (out), NULL: no bias
  if (in > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, x, in, Wf, in, 0.0f, y, out);
  else
    memset(y, 0, (size_t)B * out * sizeof(float));
  if (!bf) return;
  for (int r = 0; r < B; r++) {
    float *yr = y + (int64_t)r * out;
    for (int o = 0; o < out; o++) yr[o] += bf[o];
  }
}

/* op_linear_bwd in its two halves (ops.h): B, the input's gradient, and W, the weights'. Each
 * half is the fused op's own code, so B then W is op_linear_bwd bit for bit. */
void op_linear_bwd_input(device_t dev, float *dx, const float *dy, const void *W, dtype_t wdt, int B, int in,
                         int out) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_linear_bwd_input(dx, dy, W, wdt, B, in, out));
  ops_blas_init();
  if (wdt != DT_F32 && wdt != DT_BF16 && wdt != DT_F16) ops_bad_dtype(__func__, wdt);
  if (B <= 0 || !dx || in <= 0) return;
  // dx(B,in) = dy(B,out) · W(out,in)
  if (out > 0) {
    const float *Wf = ops_as_f32(W, wdt, (int64_t)out * in, OPS_WS_W, __func__);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, dy, out, Wf, in, 0.0f, dx, in);
  } else {
    memset(dx, 0, (size_t)B * in * sizeof(float));
  }
}

void op_linear_bwd_weight(device_t dev, void *dW, void *db, const float *dy, const float *x, dtype_t wdt,
                          int B, int in, int out, float beta) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_linear_bwd_weight(dW, db, dy, x, wdt, B, in, out, beta));
  ops_blas_init();
  if (wdt != DT_F32 && wdt != DT_BF16 && wdt != DT_F16) ops_bad_dtype(__func__, wdt);
  int64_t wn = (int64_t)out * in;
  if (B <= 0) { /* no rows: nothing new, dW = beta·dW and db = beta·db */
    if (beta == 0.0f) {
      op_fill(DEV_CPU, dW, wdt, 0.0f, wn);
      if (db) op_fill(DEV_CPU, db, wdt, 0.0f, out);
    } else {
      op_scale(DEV_CPU, dW, wdt, beta, wn);
      if (db) op_scale(DEV_CPU, db, wdt, beta, out);
    }
    return;
  }
  if (out <= 0) return;
  // dW(out,in) = beta·dW + dyᵀ(out,B) · x(B,in); the new sum is complete before it meets dW
  if (in > 0) {
    if (wdt == DT_F32 && beta == 0.0f) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, dy, out, x, in, 0.0f,
                  (float *)dW, in);
    } else {
      float *g = ops_workspace(DEV_CPU, OPS_WS_DW, wn * (int64_t)sizeof(float)); // (out,in) fp32 sum
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, dy, out, x, in, 0.0f, g, in);
      ops_store_acc(dW, wdt, g, wn, beta);
    }
  }
  // db(out) = beta·db + Σ_rows dy, rows in order 0..B−1 (db == NULL: no bias)
  if (!db) return;
  float *s = ops_workspace(DEV_CPU, OPS_WS_B, (int64_t)out * (int64_t)sizeof(float));
  memcpy(s, dy, (size_t)out * sizeof(float));
  for (int r = 1; r < B; r++) {
    const float *dyr = dy + (int64_t)r * out;
    for (int o = 0; o < out; o++) s[o] += dyr[o];
  }
  ops_store_acc(db, wdt, s, out, beta);
}

void op_linear_bwd(device_t dev, float *dx, void *dW, void *db, const float *dy, const float *x,
                   const void *W, dtype_t wdt, int B, int in, int out, float beta) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_linear_bwd(dx, dW, db, dy, x, W, wdt, B, in, out, beta));
  op_linear_bwd_input(dev, dx, dy, W, wdt, B, in, out);
  op_linear_bwd_weight(dev, dW, db, dy, x, wdt, B, in, out, beta);
}

/* ---- vector clones ---------------------------------------------------------------------- */
/* GELU is ~12% of a GPT step on the CPU (notes/benchmarks.md, GPT): one clone per vector width,
 * picked at load time. Same bits in every clone: lanes are independent and nothing contracts. Not
 * under ThreadSanitizer (make test-sanitize): the loader runs the clones' resolver before TSan is
 * set up, and the instrumented resolver crashes the program before main. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define OPS_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OPS_VEC_CLONES
#endif

/* ---- the gradient check ----------------------------------------------------------------- */
/* Exponent bits all ones = NaN or Inf. OR-ing the test over the whole vector (no early exit)
 * lets the compiler vectorize it: one pass over memory, no float arithmetic. */
#define NONFINITE_LOOP(T, MASK)                                                      \
  do {                                                                               \
    const T *p = (const T *)x;                                                       \
    T any = 0;                                                                       \
    for (int64_t i = 0; i < n; i++) any |= (T)((p[i] & (MASK)) == (MASK));           \
    return any != 0;                                                                 \
  } while (0)
static OPS_VEC_CLONES int nonfinite_f32(const void *x, int64_t n) { NONFINITE_LOOP(uint32_t, 0x7f800000u); }
static OPS_VEC_CLONES int nonfinite_h16(const void *x, int64_t n, uint16_t mask) {
  NONFINITE_LOOP(uint16_t, mask);
}
int op_has_nonfinite(device_t dev, const void *x, dtype_t dt, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA_RET(!isfinite(opcu_sumsq(x, dt, n)));
  if (dt == DT_F32) return nonfinite_f32(x, n);
  if (dt == DT_BF16) return nonfinite_h16(x, n, 0x7f80u);
  if (dt == DT_F16) return nonfinite_h16(x, n, 0x7c00u);
  return !isfinite(op_sumsq(dev, x, dt, n)); /* f64 */
}

/* ---- GELU, tanh approximation (elementwise.h: ew_gelu, ew_gelu_bwd) ----------------------- */
OPS_VEC_CLONES void op_gelu_fwd(device_t dev, float *y, const float *x, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_gelu_fwd(y, x, n));
  for (int64_t i = 0; i < n; i++) y[i] = ew_gelu(x[i]);
}

OPS_VEC_CLONES void op_gelu_bwd(device_t dev, float *dx, const float *dy, const float *x, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_gelu_bwd(dx, dy, x, n));
  for (int64_t i = 0; i < n; i++) dx[i] = ew_gelu_bwd(x[i], dy[i]); /* reads dy[i] before writing dx[i] */
}

/* ---- softmax cross-entropy --------------------------------------------------------------- */
double op_softmax_xent(device_t dev, float *dlogits, const float *logits, const int *y, int B, int C,
                       float scale) {
  if (dev == DEV_CUDA) OPS_ON_CUDA_RET(opcu_softmax_xent(dlogits, logits, y, B, C, scale));
  double loss = 0.0;
  for (int r = 0; r < B; r++) {
    const float *l = logits + (int64_t)r * C;
    float *d = dlogits + (int64_t)r * C;
    int yr = y[r];
    if (yr < 0 || yr >= C) die_on_rank("op_softmax_xent: label y[%d] = %d outside [0, %d)", r, yr, C);
    float mx = l[0];
    for (int c = 1; c < C; c++) mx = l[c] > mx ? l[c] : mx;
    double sum = 0.0;
    for (int c = 0; c < C; c++) {
      d[c] = expf(l[c] - mx);
      sum += d[c];
    }
    loss += log(sum) - ((double)l[yr] - mx);
    float inv = (float)(1.0 / sum);
    for (int c = 0; c < C; c++) d[c] = d[c] * inv * scale;
    d[yr] -= scale;
  }
  return loss;
}

/* ---- optimizers: one pass over a flat range (elementwise.h: ew_adamw, ew_sgd) ------------- */
/* Inlined per gradient dtype, so that each loop is branch-free and vectorizes. */
static inline __attribute__((always_inline)) void adamw_loop(float *w, const void *grad, dtype_t gdt,
                                                             float *m, float *v, int64_t n, float gscale,
                                                             ew_adamw_t k) {
  for (int64_t i = 0; i < n; i++) ew_adamw(&w[i], &m[i], &v[i], dt_load(grad, gdt, i), gscale, k);
}

void op_adamw(device_t dev, float *w, const void *grad, dtype_t gdt, float *m, float *v, int64_t n,
              const adamw_hp_t *hp, int t, float gscale) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_adamw(w, grad, gdt, m, v, n, hp, t, gscale));
  if (t < 1) die_on_rank("op_adamw: step t = %d, must be >= 1 (bias correction)", t);
  ew_adamw_t k = ew_adamw_scalars(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, t);
  if (gdt == DT_F32) adamw_loop(w, grad, DT_F32, m, v, n, gscale, k);
  else if (gdt == DT_BF16) adamw_loop(w, grad, DT_BF16, m, v, n, gscale, k);
  else if (gdt == DT_F16) adamw_loop(w, grad, DT_F16, m, v, n, gscale, k);
  else ops_bad_dtype(__func__, gdt);
}

static inline __attribute__((always_inline)) void sgd_loop(float *w, const void *grad, dtype_t gdt,
                                                           float *buf, int64_t n, float lr, float mu,
                                                           float wd, float gscale) {
  for (int64_t i = 0; i < n; i++) ew_sgd(&w[i], &buf[i], dt_load(grad, gdt, i), gscale, lr, mu, wd);
}

void op_sgd(device_t dev, float *w, const void *grad, dtype_t gdt, float *buf, int64_t n, float lr,
            float momentum, float weight_decay, float gscale) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_sgd(w, grad, gdt, buf, n, lr, momentum, weight_decay, gscale));
  if (gdt == DT_F32) sgd_loop(w, grad, DT_F32, buf, n, lr, momentum, weight_decay, gscale);
  else if (gdt == DT_BF16) sgd_loop(w, grad, DT_BF16, buf, n, lr, momentum, weight_decay, gscale);
  else if (gdt == DT_F16) sgd_loop(w, grad, DT_F16, buf, n, lr, momentum, weight_decay, gscale);
  else ops_bad_dtype(__func__, gdt);
}

/* ---- elementwise ------------------------------------------------------------------------ */
/* F64 is accepted too (control scalars reduced by the ring collectives). */
void op_cast(device_t dev, void *dst, dtype_t ddt, const void *src, dtype_t sdt, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_cast(dst, ddt, src, sdt, n));
  if (ddt == sdt) {
    if (dst != src) memmove(dst, src, (size_t)n * dtype_size(ddt));
  } else if (ddt == DT_BF16 && sdt == DT_F32) {
    bf16_t *d = dst;
    const float *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = bf16_from_f32(s[i]);
  } else if (ddt == DT_F32 && sdt == DT_BF16) {
    float *d = dst;
    const bf16_t *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = bf16_to_f32(s[i]);
  } else if (ddt == DT_F16 && sdt == DT_F32) {
    fp16_t *d = dst;
    const float *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = fp16_from_f32(s[i]);
  } else if (ddt == DT_F32 && sdt == DT_F16) {
    float *d = dst;
    const fp16_t *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = fp16_to_f32(s[i]);
  } else if (ddt == DT_F64 && (sdt == DT_F32 || sdt == DT_BF16 || sdt == DT_F16)) {
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = dt_load(src, sdt, i);
  } else if (sdt == DT_F64 && ddt == DT_F32) {
    float *d = dst;
    const double *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
  } else {
    die_on_rank("op_cast: %s -> %s not supported", dtype_name(sdt), dtype_name(ddt));
  }
}

void op_add(device_t dev, void *dst, const void *src, dtype_t dt, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_add(dst, src, dt, n));
  if (dt == DT_F32) {
    float *d = dst;
    const float *s = src;
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
  } else if (dt == DT_BF16) {
    bf16_t *d = dst;
    const bf16_t *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = ew_add_bf16(d[i], s[i]);
  } else if (dt == DT_F16) {
    fp16_t *d = dst;
    const fp16_t *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = ew_add_fp16(d[i], s[i]);
  } else if (dt == DT_F64) {
    double *d = dst;
    const double *s = src;
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
  } else {
    ops_bad_dtype(__func__, dt);
  }
}

/* elementwise.h: ew_max_takes_src (NaN in either operand gives NaN; picks, never rounds). */
void op_max(device_t dev, void *dst, const void *src, dtype_t dt, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_max(dst, src, dt, n));
  if (dt == DT_F32) {
    float *d = dst;
    const float *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = ew_max_takes_src(d[i], s[i]) ? s[i] : d[i];
  } else if (dt == DT_BF16) {
    bf16_t *d = dst;
    const bf16_t *s = src;
    for (int64_t i = 0; i < n; i++)
      d[i] = ew_max_takes_src(bf16_to_f32(d[i]), bf16_to_f32(s[i])) ? s[i] : d[i];
  } else if (dt == DT_F16) {
    fp16_t *d = dst;
    const fp16_t *s = src;
    for (int64_t i = 0; i < n; i++)
      d[i] = ew_max_takes_src(fp16_to_f32(d[i]), fp16_to_f32(s[i])) ? s[i] : d[i];
  } else if (dt == DT_F64) {
    double *d = dst;
    const double *s = src;
    for (int64_t i = 0; i < n; i++) d[i] = ew_max_takes_src_f64(d[i], s[i]) ? s[i] : d[i];
  } else {
    ops_bad_dtype(__func__, dt);
  }
}

void op_scale(device_t dev, void *x, dtype_t dt, float s, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_scale(x, dt, s, n));
  if (dt == DT_F32) {
    float *p = x;
    for (int64_t i = 0; i < n; i++) p[i] = ew_scale_f32(p[i], s);
  } else if (dt == DT_BF16) {
    bf16_t *p = x;
    for (int64_t i = 0; i < n; i++) p[i] = ew_scale_bf16(p[i], s);
  } else if (dt == DT_F16) {
    fp16_t *p = x;
    for (int64_t i = 0; i < n; i++) p[i] = ew_scale_fp16(p[i], s);
  } else if (dt == DT_F64) {
    double *p = x;
    for (int64_t i = 0; i < n; i++) p[i] = ew_scale_f64(p[i], s);
  } else {
    ops_bad_dtype(__func__, dt);
  }
}

void op_fill(device_t dev, void *x, dtype_t dt, float value, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA(opcu_fill(x, dt, value, n));
  if (dt == DT_F32) {
    float *p = x;
    for (int64_t i = 0; i < n; i++) p[i] = value;
  } else if (dt == DT_BF16) {
    bf16_t *p = x, h = bf16_from_f32(value);
    for (int64_t i = 0; i < n; i++) p[i] = h;
  } else if (dt == DT_F16) {
    fp16_t *p = x, h = fp16_from_f32(value);
    for (int64_t i = 0; i < n; i++) p[i] = h;
  } else if (dt == DT_F64) {
    double *p = x;
    for (int64_t i = 0; i < n; i++) p[i] = value;
  } else {
    ops_bad_dtype(__func__, dt);
  }
}

/* Eight running sums (element i goes to sum i mod 8), combined pairwise at the end: a fixed
 * order that does not depend on anything but n, and that the compiler can vectorize. */
#define SUMSQ_LOOP(T, LOAD)                                                           \
  do {                                                                                \
    const T *p = x;                                                                   \
    int64_t i = 0;                                                                    \
    for (; i + 8 <= n; i += 8)                                                        \
      for (int j = 0; j < 8; j++) { double v = LOAD(p[i + j]); acc[j] += v * v; }     \
    for (int j = 0; i < n; i++, j++) { double v = LOAD(p[i]); acc[j] += v * v; }      \
  } while (0)
#define SUMSQ_ID(v) ((double)(v))
#define SUMSQ_BF(v) ((double)bf16_to_f32(v))
#define SUMSQ_H(v) ((double)fp16_to_f32(v))
double op_sumsq(device_t dev, const void *x, dtype_t dt, int64_t n) {
  if (dev == DEV_CUDA) OPS_ON_CUDA_RET(opcu_sumsq(x, dt, n));
  double acc[8] = {0};
  if (dt == DT_F32) SUMSQ_LOOP(float, SUMSQ_ID);
  else if (dt == DT_BF16) SUMSQ_LOOP(bf16_t, SUMSQ_BF);
  else if (dt == DT_F16) SUMSQ_LOOP(fp16_t, SUMSQ_H);
  else if (dt == DT_F64) SUMSQ_LOOP(double, SUMSQ_ID);
  else ops_bad_dtype(__func__, dt);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
