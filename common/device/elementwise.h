/* elementwise.h — every element-wise update, written once for the CPU (ops_cpu.c) and the GPU
 * (ops_cuda.cu): AdamW, SGD with momentum, scale, add, max, accumulate (beta·old + new) and GELU;
 * the bf16 casts are dtype.h's (bf16_from_f32, bf16_to_f32), also ZL_HD.
 *
 * One function per element, `ZL_HD` (dtype.h): a plain `static inline` function in C, and
 * `__host__ __device__` under nvcc. ops_cpu.c calls them in its loops, ops_cuda.cu in its
 * grid-stride kernels, so both do the same IEEE operations in the same order. With no fused
 * multiply-add on either side (nvcc -fmad=false in the Makefile; ops_cpu.c turns contraction
 * off) and IEEE division and square root (nvcc's defaults), the GPU gives the CPU's bits:
 * tests/gpu/test_gpu_ops.c compares them bitwise. Scalars that depend on the step (AdamW's bias
 * corrections) are computed once on the host, in double, by ew_adamw_scalars, and passed to
 * both. Clipping is the `gscale` factor of the updates: the clip coefficient itself is one
 * scalar per step, computed on the host (loop.c: trainer_finish_grads).
 * notes/design.md ("One source of the bits") says which ops are bitwise and which are not. */
#ifndef ZL_ELEMENTWISE_H
#define ZL_ELEMENTWISE_H
#include <math.h>   // sqrtf, fabsf, copysignf (host and device), pow, sqrt (host)
#include <stdint.h> // int32_t, uint32_t
#include "dtype.h"  // ZL_HD, bf16_t, fp16_t and their casts

/* ---- optimizers ------------------------------------------------------------------------- */
/* AdamW's per-step scalars: the bias corrections in double, as PyTorch computes them on the
 * host, then rounded once to float. Host only (pow): the GPU receives the struct by value. */
typedef struct ew_adamw {
  float b1, b2, eps;
  float decay;     /* 1 − lr·wd            (decoupled weight decay) */
  float step_size; /* lr / (1 − b1^t)      (bias correction of m) */
  float bc2_sqrt;  /* sqrt(1 − b2^t)       (bias correction of v) */
} ew_adamw_t;
static inline ew_adamw_t ew_adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay,
                                          int t) {
  double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
  ew_adamw_t k;
  k.b1 = beta1;
  k.b2 = beta2;
  k.eps = eps;
  k.decay = (float)(1.0 - (double)lr * weight_decay);
  k.step_size = (float)(lr / bc1);
  k.bc2_sqrt = (float)sqrt(bc2);
  return k;
}
/* One element of AdamW, in torch.optim.AdamW's single-tensor order: g = gscale·grad; decay w;
 * m = b1 m + (1−b1) g; v = b2 v + (1−b2) g²; w −= step_size · m / (sqrt(v)/sqrt(bc2) + eps).
 * (= ops.h's w −= lr·(m̂/(sqrt(v̂)+eps) + wd·w), rearranged as PyTorch does.) */
ZL_HD void ew_adamw(float *w, float *m, float *v, float grad, float gscale, ew_adamw_t k) {
  float g = gscale * grad;
  float mi = k.b1 * *m + (1.0f - k.b1) * g;
  float vi = k.b2 * *v + (1.0f - k.b2) * g * g;
  *m = mi;
  *v = vi;
  *w = *w * k.decay - k.step_size * (mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
}
/* One element of SGD with momentum (torch.optim.SGD, dampening 0, L2 weight decay):
 * g = gscale·grad + wd·w;  buf = mu·buf + g;  w −= lr·buf. */
ZL_HD void ew_sgd(float *w, float *buf, float grad, float gscale, float lr, float mu, float wd) {
  float g = gscale * grad + wd * *w;
  float b = mu * *buf + g;
  *buf = b;
  *w = *w - lr * b;
}

/* ---- scale, add, max, accumulate -------------------------------------------------------- */
/* bf16 operands are widened, combined in fp32 and rounded once. */
ZL_HD float ew_scale_f32(float x, float s) { return x * s; }
ZL_HD bf16_t ew_scale_bf16(bf16_t x, float s) { return bf16_from_f32(bf16_to_f32(x) * s); }
ZL_HD double ew_scale_f64(double x, float s) { return x * s; }
ZL_HD bf16_t ew_add_bf16(bf16_t a, bf16_t b) { return bf16_from_f32(bf16_to_f32(a) + bf16_to_f32(b)); }
/* fp16 the same way: widened (exactly), combined in fp32, rounded once (fp16_from_f32). */
ZL_HD fp16_t ew_scale_fp16(fp16_t x, float s) { return fp16_from_f32(fp16_to_f32(x) * s); }
ZL_HD fp16_t ew_add_fp16(fp16_t a, fp16_t b) { return fp16_from_f32(fp16_to_f32(a) + fp16_to_f32(b)); }
/* max picks an operand, never rounds: 1 when src replaces dst. NaN in either operand gives
 * NaN (a max must not hide a non-finite value): a NaN src is taken, a NaN dst is kept. */
ZL_HD int ew_max_takes_src(float dst, float src) { return src > dst || src != src; }
ZL_HD int ew_max_takes_src_f64(double dst, double src) { return src > dst || src != src; }
/* Gradient accumulation: beta·old + add (beta 0 overwrites: an old NaN does not leak in). */
ZL_HD float ew_acc(float old, float add, float beta) { return beta == 0.0f ? add : beta * old + add; }

/* ---- GELU, tanh approximation (GPT-2; llm.c gelu_forward / gelu_backward) ----------------- */
#define EW_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define EW_GELU_C 0.044715f
ZL_HD float ew_bits_to_f32(uint32_t u) {
  union { uint32_t u; float f; } c;
  c.u = u;
  return c.f;
}
ZL_HD int32_t ew_f32_to_bits(float f) {
  union { float f; int32_t i; } c;
  c.f = f;
  return c.i;
}
/* exp(x) for −86 <= x <= 0 in plain float arithmetic (no libm call: the same bits on CPU and
 * GPU, and the CPU loops vectorize). Cephes expf: x = n·ln2 + r, |r| <= ln2/2, a degree-7
 * polynomial in r, about 1 ulp. */
ZL_HD float ew_exp_nonpos(float x) {
  float fn = x * 1.44269504088896341f;   /* x / ln2 */
  fn = (fn + 12582912.0f) - 12582912.0f; /* round to nearest integer (1.5·2^23 trick) */
  float r = x - fn * 0.693359375f;       /* ln2 in two parts (Cody-Waite) */
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  return p * ew_bits_to_f32((uint32_t)((int32_t)fn + 127) << 23); /* × 2^n, n >= −125: a normal float */
}
/* tanh(u) = sign(u)·(1 − e)/(1 + e), e = exp(−2|u|): absolute error ~1e-7, what GELU needs.
 * |u| is clamped to 43 (tanh is 1 in float long before) by comparing its bits as integers:
 * no float compare, so the loop stays branch-free. NaN becomes ±1 here; GELU keeps it NaN
 * through its factor x. */
ZL_HD float ew_tanh(float u) {
  int32_t ab = ew_f32_to_bits(fabsf(u));
  ab = ab < 0x422c0000 ? ab : 0x422c0000; /* 43.0f */
  float e = ew_exp_nonpos(-2.0f * ew_bits_to_f32((uint32_t)ab));
  return copysignf((1.0f - e) / (1.0f + e), u);
}
ZL_HD float ew_gelu(float x) {
  float cube = EW_GELU_C * x * x * x;
  return 0.5f * x * (1.0f + ew_tanh(EW_GELU_K * (x + cube)));
}
/* dGELU/dx · dy. */
ZL_HD float ew_gelu_bwd(float x, float dy) {
  float t = ew_tanh(EW_GELU_K * (x + EW_GELU_C * x * x * x));
  float sech2 = 1.0f - t * t; /* = 1/cosh², without cosh overflowing for large |x| */
  float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * EW_GELU_K * (1.0f + 3.0f * EW_GELU_C * x * x);
  return local * dy;
}
#endif
