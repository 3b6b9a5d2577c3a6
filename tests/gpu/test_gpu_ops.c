/* test_gpu_ops.c — every CUDA op (common/device/ops_cuda.cu) against the CPU op (common/device/ops_cpu.c)
 * on
 * fresh random inputs. Needs a GPU: part of `make test-gpu`, never of `make test`.
 * Notes: notes/gpu.md.
 *
 * Rules: outputs are poisoned (all bits set: NaN in f32 and bf16) before each run, so an element
 * the kernel forgot to write fails; NaN never passes a comparison.
 * Element-wise ops — AdamW, SGD, casts, add, max, scale, fill, GELU — are compared BITWISE: CPU and
 * GPU call the same functions (common/device/elementwise.h, dtype.h) with no fused multiply-add on either
 * side, so any differing bit is a bug. Sums over many terms (matmuls, bias gradients, softmax rows,
 * Σx²) add in different orders on the two devices; they are compared with relative tolerances:
 * fp32 results 1e-5, bf16 results 1e-2, fp16 results 5e-3, the bf16 tensor-core GEMMs 1e-2; matmuls normwise
 * (|got − expected| <= tol · max|expected|), the others element by element. */
#define ZL_GPU_SEED 0x9e3779b97f4a7c15ull /* this file's random stream */
#include "zl_gpu_test.h" // zl_gpu_init, rand_f32, up, down, poisoned, expect_close, expect_bits, tol_of
#include "ops.h"      // op_*
#include "ops_cuda.h" // opcu_set_matmul_bf16

TestSuite(common_gpu_ops, .init = zl_gpu_init, .timeout = 120);

/* ---- linear ------------------------------------------------------------------------------ */
static void check_linear_fwd(dtype_t wdt, int B, int in, int out, int bf16mm) {
  float *x = rand_f32((int64_t)B * in, 1.0f, 0.0f), *Wf = rand_f32((int64_t)out * in, 0.2f, 0.0f),
        *bf = rand_f32(out, 0.5f, 0.0f);
  void *W = narrow(Wf, wdt, (int64_t)out * in);
  void *b = narrow(bf, wdt, out);
  size_t es = dtype_size(wdt), ny = (size_t)B * out * sizeof(float);
  float *y_cpu = malloc(ny);
  op_linear_fwd(DEV_CPU, y_cpu, x, W, b, wdt, B, in, out);
  void *dx = up(x, (size_t)B * in * 4), *dW = up(W, (size_t)out * in * es), *db = up(b, out * es),
       *dy = poisoned(ny);
  opcu_set_matmul_bf16(bf16mm);
  op_linear_fwd(DEV_CUDA, dy, dx, dW, db, wdt, B, in, out);
  opcu_set_matmul_bf16(0);
  float *y = down(dy, ny);
  char what[96];
  snprintf(what, sizeof what, "linear_fwd y (%s, %dx%dx%d%s)", dtype_name(wdt), B, in, out,
           bf16mm ? ", bf16 GEMM" : "");
  expect_close(what, y, y_cpu, (int64_t)B * out, bf16mm ? 1e-2 : 1e-5, 1.0);
  dev_free(DEV_CUDA, dx), dev_free(DEV_CUDA, dW), dev_free(DEV_CUDA, db), dev_free(DEV_CUDA, dy);
  free(y), free(y_cpu), free(x), free(Wf), free(bf);
  free_dt(W, wdt), free_dt(b, wdt);
}
Test(common_gpu_ops, linear_fwd_f32) {
  check_linear_fwd(DT_F32, 37, 53, 29, 0);
  check_linear_fwd(DT_F32, 128, 256, 512, 0);
}
Test(common_gpu_ops, linear_fwd_bf16) {
  check_linear_fwd(DT_BF16, 37, 53, 29, 0);
  check_linear_fwd(DT_BF16, 128, 256, 512, 0);
}
Test(common_gpu_ops, linear_fwd_fp16) {
  check_linear_fwd(DT_F16, 37, 53, 29, 0);
  check_linear_fwd(DT_F16, 128, 256, 512, 0);
}
Test(common_gpu_ops, linear_fwd_bf16_tensor_cores) {
  check_linear_fwd(DT_F32, 64, 256, 128, 1);
  check_linear_fwd(DT_BF16, 64, 256, 128, 1);
}

static void check_linear_bwd(dtype_t wdt, int B, int in, int out, float beta, int with_dx, int bf16mm) {
  int64_t nx = (int64_t)B * in, nyo = (int64_t)B * out, nw = (int64_t)out * in;
  float *x = rand_f32(nx, 1.0f, 0.0f), *gy = rand_f32(nyo, 1.0f, 0.0f), *Wf = rand_f32(nw, 0.2f, 0.0f);
  /* old grads, read when beta != 0 */
  float *dWf0 = rand_f32(nw, 0.3f, 0.0f), *dbf0 = rand_f32(out, 0.3f, 0.0f);
  size_t es = dtype_size(wdt);
  void *W = narrow(Wf, wdt, nw);
  void *dW0 = narrow(dWf0, wdt, nw);
  void *db0 = narrow(dbf0, wdt, out);
  /* CPU reference */
  float *dx_cpu = malloc((size_t)nx * 4);
  void *dW_cpu = malloc((size_t)nw * es), *db_cpu = malloc((size_t)out * es);
  memcpy(dW_cpu, dW0, (size_t)nw * es);
  memcpy(db_cpu, db0, (size_t)out * es);
  op_linear_bwd(DEV_CPU, with_dx ? dx_cpu : NULL, dW_cpu, db_cpu, gy, x, W, wdt, B, in, out, beta);
  /* GPU: old grads uploaded when accumulating, poison when overwriting (beta 0 must not read them) */
  void *d_x = up(x, (size_t)nx * 4), *d_gy = up(gy, (size_t)nyo * 4), *d_W = up(W, (size_t)nw * es);
  void *d_dx = poisoned((size_t)nx * 4);
  void *d_dW = beta != 0 ? up(dW0, (size_t)nw * es) : poisoned((size_t)nw * es);
  void *d_db = beta != 0 ? up(db0, (size_t)out * es) : poisoned((size_t)out * es);
  opcu_set_matmul_bf16(bf16mm);
  op_linear_bwd(DEV_CUDA, with_dx ? d_dx : NULL, d_dW, d_db, d_gy, d_x, d_W, wdt, B, in, out, beta);
  opcu_set_matmul_bf16(0);
  char what[128];
  const char *mm = bf16mm ? ", bf16 GEMM" : "";
  double tol_mm = bf16mm ? 1e-2 : 1e-5;
  if (with_dx) {
    float *dx = down(d_dx, (size_t)nx * 4);
    snprintf(what, sizeof what, "linear_bwd dx (%s, %dx%dx%d%s)", dtype_name(wdt), B, in, out, mm);
    expect_close(what, dx, dx_cpu, nx, tol_mm, 1.0);
    free(dx);
  } else { /* dx == NULL: the buffer must stay untouched (still poison) */
    uint32_t *raw = down(d_dx, (size_t)nx * 4);
    for (int64_t i = 0; i < nx; i++)
      cr_assert_eq(raw[i], 0xffffffffu, "linear_bwd wrote dx[%lld] with dx == NULL", (long long)i);
    free(raw);
  }
  void *dW = down(d_dW, (size_t)nw * es), *db = down(d_db, (size_t)out * es);
  float *gW = widen(dW, wdt, nw), *eW = widen(dW_cpu, wdt, nw), *gb = widen(db, wdt, out),
        *eb = widen(db_cpu, wdt, out);
  snprintf(what, sizeof what, "linear_bwd dW (%s, %dx%dx%d, beta %g%s)", dtype_name(wdt), B, in, out, beta,
           mm);
  expect_close(what, gW, eW, nw, fmax(tol_of(wdt), tol_mm), 1.0); /* a matmul: normwise */
  snprintf(what, sizeof what, "linear_bwd db (%s, %dx%dx%d, beta %g)", dtype_name(wdt), B, in, out, beta);
  expect_close(what, gb, eb, out, tol_of(wdt), 1e-3);
  void *ptrs[] = {d_x, d_gy, d_W, d_dx, d_dW, d_db};
  for (int i = 0; i < 6; i++) dev_free(DEV_CUDA, ptrs[i]);
  free(x), free(gy), free(Wf), free(dWf0), free(dbf0), free(dx_cpu), free(dW_cpu), free(db_cpu);
  free(dW), free(db), free(gW), free(eW), free(gb), free(eb);
  free_dt(W, wdt), free_dt(dW0, wdt), free_dt(db0, wdt);
}
Test(common_gpu_ops, linear_bwd_f32) {
  check_linear_bwd(DT_F32, 37, 53, 29, 0.0f, 1, 0);
  check_linear_bwd(DT_F32, 37, 53, 29, 1.0f, 1, 0);
  check_linear_bwd(DT_F32, 64, 200, 100, 0.0f, 0, 0);
  check_linear_bwd(DT_F32, 0, 16, 8, 1.0f, 1, 0); /* no rows: dW = beta·dW */
}
Test(common_gpu_ops, linear_bwd_bf16) {
  check_linear_bwd(DT_BF16, 37, 53, 29, 0.0f, 1, 0);
  check_linear_bwd(DT_BF16, 37, 53, 29, 1.0f, 1, 0);
  check_linear_bwd(DT_BF16, 64, 200, 100, 0.0f, 0, 0);
}
Test(common_gpu_ops, linear_bwd_fp16) {
  check_linear_bwd(DT_F16, 37, 53, 29, 0.0f, 1, 0);
  check_linear_bwd(DT_F16, 37, 53, 29, 1.0f, 1, 0);
  check_linear_bwd(DT_F16, 64, 200, 100, 0.0f, 0, 0);
}
Test(common_gpu_ops, linear_bwd_bf16_tensor_cores) { check_linear_bwd(DT_F32, 64, 256, 128, 0.0f, 1, 1); }

/* ---- GELU ---------------------------------------------------------------------------------- */
Test(common_gpu_ops, gelu_fwd_bwd) {
  int64_t n = 100003;
  float *x = rand_f32(n, 6.0f, 0.0f), *gy = rand_f32(n, 1.0f, 0.0f);
  float *y_cpu = malloc((size_t)n * 4), *dx_cpu = malloc((size_t)n * 4);
  op_gelu_fwd(DEV_CPU, y_cpu, x, n);
  op_gelu_bwd(DEV_CPU, dx_cpu, gy, x, n);
  void *d_x = up(x, (size_t)n * 4), *d_y = poisoned((size_t)n * 4), *d_g = up(gy, (size_t)n * 4);
  op_gelu_fwd(DEV_CUDA, d_y, d_x, n);
  float *y = down(d_y, (size_t)n * 4);
  /* elementwise.h's ew_gelu on both sides (its tanh is plain float arithmetic, no libm): bitwise */
  expect_bits("gelu_fwd y", y, y_cpu, n, 4, 1);
  op_gelu_bwd(DEV_CUDA, d_g, d_g, d_x, n); /* in place: dx aliases dy */
  float *dx = down(d_g, (size_t)n * 4);
  expect_bits("gelu_bwd dx (in place)", dx, dx_cpu, n, 4, 1);
  dev_free(DEV_CUDA, d_x), dev_free(DEV_CUDA, d_y), dev_free(DEV_CUDA, d_g);
  free(x), free(gy), free(y_cpu), free(dx_cpu), free(y), free(dx);
}

/* ---- softmax cross-entropy ---------------------------------------------------------------- */
static void check_xent(int B, int C) {
  int64_t n = (int64_t)B * C;
  float *l = rand_f32(n, 4.0f, 0.0f);
  int *y = malloc((size_t)B * sizeof(int));
  for (int i = 0; i < B; i++) y[i] = (int)((urand() + 1.0f) * 0.5f * C) % C;
  float scale = 1.0f / (float)(3 * B);
  float *d_cpu = malloc((size_t)n * 4);
  double loss_cpu = op_softmax_xent(DEV_CPU, d_cpu, l, y, B, C, scale);
  void *d_l = up(l, (size_t)n * 4), *d_y = up(y, (size_t)B * sizeof(int)), *d_d = poisoned((size_t)n * 4);
  double loss = op_softmax_xent(DEV_CUDA, d_d, d_l, d_y, B, C, scale);
  cr_assert(zl_rel(loss, loss_cpu) <= 1e-6, "softmax_xent loss (B %d, C %d): got %.12g, expected %.12g (CPU)",
            B, C, loss, loss_cpu);
  float *d = down(d_d, (size_t)n * 4);
  char what[64];
  snprintf(what, sizeof what, "softmax_xent dlogits (B %d, C %d)", B, C);
  expect_close(what, d, d_cpu, n, 1e-5, 1e-3);
  double again = op_softmax_xent(DEV_CUDA, d_d, d_l, d_y, B, C, scale);
  cr_assert(memcmp(&again, &loss, sizeof loss) == 0,
            "softmax_xent loss not bit-reproducible: %.17g then %.17g", loss, again);
  dev_free(DEV_CUDA, d_l), dev_free(DEV_CUDA, d_y), dev_free(DEV_CUDA, d_d);
  free(l), free(y), free(d_cpu), free(d);
}
Test(common_gpu_ops, softmax_xent) { check_xent(33, 10); check_xent(7, 1000); check_xent(300, 3); }

/* ---- optimizers ----------------------------------------------------------------------------- */
static void check_adamw(dtype_t gdt) {
  int64_t n = 4099;
  adamw_hp_t hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
  float *w = rand_f32(n, 1.0f, 0.0f), *m = rand_f32(n, 0.01f, 0.0f), *v = rand_f32(n, 1e-4f, 0.0f);
  for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]); /* a second moment is >= 0 */
  float *gf = rand_f32(n, 1.0f, 0.0f);
  gf[0] = 0.0f, gf[1] = -0.0f, gf[2] = 1e-30f, gf[3] = 3e5f; /* zero, tiny, large gradients */
  void *g = narrow(gf, gdt, n);
  void *d_w = up(w, (size_t)n * 4), *d_m = up(m, (size_t)n * 4), *d_v = up(v, (size_t)n * 4);
  void *d_g = up(g, (size_t)n * dtype_size(gdt));
  for (int t = 1; t <= 3; t++) { /* three steps: bias correction changes with t */
    op_adamw(DEV_CPU, w, g, gdt, m, v, n, &hp, t, 0.5f);
    op_adamw(DEV_CUDA, d_w, d_g, gdt, d_m, d_v, n, &hp, t, 0.5f);
  }
  float *gw = down(d_w, (size_t)n * 4), *gm = down(d_m, (size_t)n * 4), *gv = down(d_v, (size_t)n * 4);
  /* one source (elementwise.h: ew_adamw, scalars from ew_adamw_scalars): the same bits */
  char aw[48];
  snprintf(aw, sizeof aw, "adamw w (%s grads)", dtype_name(gdt));
  expect_bits(aw, gw, w, n, 4, 1);
  expect_bits("adamw m", gm, m, n, 4, 1);
  expect_bits("adamw v", gv, v, n, 4, 1);
  dev_free(DEV_CUDA, d_w), dev_free(DEV_CUDA, d_m), dev_free(DEV_CUDA, d_v), dev_free(DEV_CUDA, d_g);
  free(w), free(m), free(v), free(gf), free(gw), free(gm), free(gv);
  free_dt(g, gdt);
}
Test(common_gpu_ops, adamw) { check_adamw(DT_F32); check_adamw(DT_BF16); check_adamw(DT_F16); }

Test(common_gpu_ops, sgd) {
  int64_t n = 5000;
  const dtype_t dts[] = {DT_F32, DT_BF16, DT_F16};
  for (int k = 0; k < 3; k++) {
    dtype_t gdt = dts[k];
    float *w = rand_f32(n, 1.0f, 0.0f), *buf = rand_f32(n, 0.1f, 0.0f), *gf = rand_f32(n, 1.0f, 0.0f);
    void *g = narrow(gf, gdt, n);
    void *d_w = up(w, (size_t)n * 4), *d_b = up(buf, (size_t)n * 4),
         *d_g = up(g, (size_t)n * dtype_size(gdt));
    for (int t = 0; t < 3; t++) {
      op_sgd(DEV_CPU, w, g, gdt, buf, n, 0.05f, 0.9f, 1e-3f, 0.7f);
      op_sgd(DEV_CUDA, d_w, d_g, gdt, d_b, n, 0.05f, 0.9f, 1e-3f, 0.7f);
    }
    float *gw = down(d_w, (size_t)n * 4), *gb = down(d_b, (size_t)n * 4);
    char sw[48];
    snprintf(sw, sizeof sw, "sgd w (%s grads)", dtype_name(gdt));
    expect_bits(sw, gw, w, n, 4, 1); /* elementwise.h: ew_sgd */
    expect_bits("sgd momentum", gb, buf, n, 4, 1);
    dev_free(DEV_CUDA, d_w), dev_free(DEV_CUDA, d_b), dev_free(DEV_CUDA, d_g);
    free(w), free(buf), free(gf), free(gw), free(gb);
    free_dt(g, gdt);
  }
}

/* ---- elementwise: same arithmetic as the CPU, so the same bits ------------------------------- */
static float *with_specials(int64_t n) {
  float *x = rand_f32(n, 3.0f, 0.0f);
  const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.00390625f /* bf16 tie */, 3.0e38f, 1e-40f};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0] && (int64_t)i < n; i++) x[i * 7 % n] = sp[i];
  return x;
}
/* x (n floats) cast to the 16-bit dtype dt and back, on the CPU and on the GPU: the same bits
 * both ways (dtype.h's ZL_HD casts on both sides). */
static void check_cast_16(dtype_t dt, float *x, int64_t n) {
  char what[48];
  uint16_t *h_cpu = malloc((size_t)n * 2);
  op_cast(DEV_CPU, h_cpu, dt, x, DT_F32, n);
  void *d_x = up(x, (size_t)n * 4), *d_h = poisoned((size_t)n * 2), *d_f = poisoned((size_t)n * 4);
  op_cast(DEV_CUDA, d_h, dt, d_x, DT_F32, n);
  uint16_t *h = down(d_h, (size_t)n * 2);
  snprintf(what, sizeof what, "cast f32->%s", dtype_precision(dt));
  expect_bits(what, h, h_cpu, n, 2, 1);
  float *f_cpu = malloc((size_t)n * 4);
  op_cast(DEV_CPU, f_cpu, DT_F32, h_cpu, dt, n);
  op_cast(DEV_CUDA, d_f, DT_F32, d_h, dt, n);
  float *f = down(d_f, (size_t)n * 4);
  snprintf(what, sizeof what, "cast %s->f32", dtype_precision(dt));
  expect_bits(what, f, f_cpu, n, 4, 1);
  dev_free(DEV_CUDA, d_x), dev_free(DEV_CUDA, d_h), dev_free(DEV_CUDA, d_f);
  free(h_cpu), free(h), free(f_cpu), free(f);
}
Test(common_gpu_ops, cast) {
  int64_t n = 10007;
  float *x = with_specials(n);
  check_cast_16(DT_BF16, x, n);
  free(x);
}
/* fp16 (dtype.h's fp16_from_f32 / fp16_to_f32, ZL_HD): the same bits on both sides, also for
 * subnormals (2^-24..2^-14), the round-to-inf edge (65504, 65519, 65520) and the flush to zero. */
Test(common_gpu_ops, cast_fp16) {
  int64_t n = 10007;
  float *x = with_specials(n);
  const float edge[] = {65504.0f,
                        65519.0f,
                        65520.0f,
                        -65536.0f,
                        6.103515625e-05f /* 2^-14 */,
                        5.9604645e-08f /* 2^-24 */,
                        2.9802322e-08f /* 2^-25: ties to zero */,
                        4.5e-08f,
                        1.0009765625f /* tie */,
                        3.0e-6f};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[100 + i] = edge[i];
  for (int64_t i = 200; i < 1200; i++) x[i] *= 1e-5f; /* many subnormal results */
  check_cast_16(DT_F16, x, n);
  free(x);
}

/* op(dst, src) on CPU and GPU, compared bitwise. For max the contract is checked directly where
 * an operand is NaN (ops.h: "NaN in either operand gives NaN"), elsewhere against the CPU. */
typedef void (*binop_t)(device_t, void *, const void *, dtype_t, int64_t);
static void check_binop(const char *name, binop_t op, dtype_t dt) {
  int64_t n = 20011;
  size_t es = dtype_size(dt);
  float *af = with_specials(n), *bf = rand_f32(n, 3.0f, 0.0f);
  bf[3] = NAN; /* NaN in src too */
  void *a = malloc((size_t)n * es), *b = malloc((size_t)n * es);
  op_cast(DEV_CPU, a, dt, af, DT_F32, n);
  op_cast(DEV_CPU, b, dt, bf, DT_F32, n);
  void *d_a = up(a, (size_t)n * es), *d_b = up(b, (size_t)n * es);
  char *nan_in = malloc((size_t)n);
  for (int64_t i = 0; i < n; i++) nan_in[i] = isnan(dt_load(a, dt, i)) || isnan(dt_load(b, dt, i));
  op(DEV_CPU, a, b, dt, n);
  op(DEV_CUDA, d_a, d_b, dt, n);
  void *g = down(d_a, (size_t)n * es);
  char what[64];
  snprintf(what, sizeof what, "%s (%s)", name, dtype_name(dt));
  for (int64_t i = 0; i < n; i++)
    if (nan_in[i]) {
      cr_assert(isnan(dt_load(g, dt, i)), "%s[%lld]: an operand is NaN, got %g (NaN must propagate)", what,
                (long long)i, dt_load(g, dt, i));
      dt_store(a, dt, i, NAN); /* checked: let the bitwise pass skip it */
    }
  expect_bits(what, g, a, n, es, 1);
  free(nan_in);
  dev_free(DEV_CUDA, d_a), dev_free(DEV_CUDA, d_b);
  free(af), free(bf), free(a), free(b), free(g);
}
Test(common_gpu_ops, add_max) {
  check_binop("add", op_add, DT_F32);
  check_binop("add", op_add, DT_BF16);
  check_binop("max", op_max, DT_F32);
  check_binop("max", op_max, DT_BF16);
  check_binop("add", op_add, DT_F16);
  check_binop("max", op_max, DT_F16);
}
Test(common_gpu_ops, add_f64) {
  int64_t n = 1001;
  double *a = malloc((size_t)n * 8), *b = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) a[i] = urand() * 1e10, b[i] = urand();
  void *d_a = up(a, (size_t)n * 8), *d_b = up(b, (size_t)n * 8);
  op_add(DEV_CPU, a, b, DT_F64, n);
  op_add(DEV_CUDA, d_a, d_b, DT_F64, n);
  double *g = down(d_a, (size_t)n * 8);
  expect_bits("add (double)", g, a, n, 8, 1);
  dev_free(DEV_CUDA, d_a), dev_free(DEV_CUDA, d_b);
  free(a), free(b), free(g);
}
Test(common_gpu_ops, scale_fill) {
  int64_t n = 30001;
  const dtype_t dts[] = {DT_F32, DT_BF16, DT_F16};
  for (int k = 0; k < 3; k++) {
    dtype_t dt = dts[k];
    char what[48];
    size_t es = dtype_size(dt);
    float *xf = with_specials(n);
    void *x = malloc((size_t)n * es);
    op_cast(DEV_CPU, x, dt, xf, DT_F32, n);
    void *d_x = up(x, (size_t)n * es);
    op_scale(DEV_CPU, x, dt, -0.3f, n);
    op_scale(DEV_CUDA, d_x, dt, -0.3f, n);
    void *g = down(d_x, (size_t)n * es);
    snprintf(what, sizeof what, "scale (%s)", dtype_name(dt));
    expect_bits(what, g, x, n, es, 1);
    void *d_p = poisoned((size_t)n * es);
    op_fill(DEV_CPU, x, dt, 0.1f, n);
    op_fill(DEV_CUDA, d_p, dt, 0.1f, n);
    void *gf = down(d_p, (size_t)n * es);
    snprintf(what, sizeof what, "fill (%s)", dtype_name(dt));
    expect_bits(what, gf, x, n, es, 1);
    dev_free(DEV_CUDA, d_x), dev_free(DEV_CUDA, d_p);
    free(xf), free(x), free(g), free(gf);
  }
}

/* ---- Σx² ------------------------------------------------------------------------------------- */
Test(common_gpu_ops, sumsq) {
  int64_t sizes[] = {1, 255, 65537, 1000003};
  for (int s = 0; s < 4; s++)
    for (int k = 0; k < 3; k++) {
      const dtype_t dts[] = {DT_F32, DT_BF16, DT_F16};
      dtype_t dt = dts[k];
      int64_t n = sizes[s];
      float *xf = rand_f32(n, 2.0f, 0.0f);
      void *x = malloc((size_t)n * dtype_size(dt));
      op_cast(DEV_CPU, x, dt, xf, DT_F32, n);
      void *d_x = up(x, (size_t)n * dtype_size(dt));
      double e = op_sumsq(DEV_CPU, x, dt, n), g = op_sumsq(DEV_CUDA, d_x, dt, n),
             g2 = op_sumsq(DEV_CUDA, d_x, dt, n);
      cr_assert(zl_rel(g, e) <= 1e-10, "sumsq (%s, n %lld): got %.17g, expected %.17g (CPU)", dtype_name(dt),
                (long long)n, g, e);
      cr_assert(memcmp(&g, &g2, sizeof g) == 0, "sumsq not bit-reproducible: %.17g then %.17g", g, g2);
      if (n > 100) { /* one NaN anywhere makes it non-finite */
        float nan = NAN;
        op_cast(DEV_CUDA, (char *)d_x + (n / 2) * dtype_size(dt), dt, up(&nan, 4), DT_F32, 1);
        double bad = op_sumsq(DEV_CUDA, d_x, dt, n);
        cr_assert(!isfinite(bad), "sumsq with a NaN at %lld returned %g (finite)", (long long)(n / 2), bad);
      }
      dev_free(DEV_CUDA, d_x);
      free(xf), free(x);
    }
  cr_assert_eq(op_sumsq(DEV_CUDA, NULL, DT_F32, 0), 0.0, "sumsq of nothing must be 0");
}

/* ---- determinism: the same inputs give the same bits -------------------------------------- */
Test(common_gpu_ops, linear_bwd_bit_reproducible) {
  int B = 96, in = 300, out = 200;
  float *x = rand_f32((int64_t)B * in, 1.0f, 0.0f), *gy = rand_f32((int64_t)B * out, 1.0f, 0.0f),
        *W = rand_f32((int64_t)out * in, 0.2f, 0.0f);
  void *d_x = up(x, (size_t)B * in * 4), *d_gy = up(gy, (size_t)B * out * 4),
       *d_W = up(W, (size_t)out * in * 4);
  void *d_dx = poisoned((size_t)B * in * 4), *d_dW = poisoned((size_t)out * in * 4),
       *d_db = poisoned((size_t)out * 4);
  op_linear_bwd(DEV_CUDA, d_dx, d_dW, d_db, d_gy, d_x, d_W, DT_F32, B, in, out, 0.0f);
  float *a = down(d_dW, (size_t)out * in * 4), *ab = down(d_db, (size_t)out * 4);
  op_linear_bwd(DEV_CUDA, d_dx, d_dW, d_db, d_gy, d_x, d_W, DT_F32, B, in, out, 0.0f);
  float *b = down(d_dW, (size_t)out * in * 4), *bb = down(d_db, (size_t)out * 4);
  expect_bits("linear_bwd dW, second run", b, a, (int64_t)out * in, 4, 1);
  expect_bits("linear_bwd db, second run", bb, ab, out, 4, 1);
  dev_free(DEV_CUDA, d_x), dev_free(DEV_CUDA, d_gy), dev_free(DEV_CUDA, d_W);
  dev_free(DEV_CUDA, d_dx), dev_free(DEV_CUDA, d_dW), dev_free(DEV_CUDA, d_db);
  free(x), free(gy), free(W), free(a), free(ab), free(b), free(bb);
}
