/* dtype.h — element types and devices shared by every module.
 * bf16 and fp16 conversions are round-to-nearest-even (notes/00-memory.md: why bf16;
 * notes/fp16.md: fp16's range and loss scaling). */
#ifndef ZL_DTYPE_H
#define ZL_DTYPE_H
#include <stdint.h> // uint16_t, uint32_t, int64_t
#include <stddef.h> // size_t
#include <string.h> // memcpy

/* F64 only for control scalars; F16 is IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits). */
typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F64 = 2, DT_F16 = 3 } dtype_t;
typedef enum { DEV_CPU = 0, DEV_CUDA = 1 } device_t;
typedef uint16_t bf16_t;
typedef uint16_t fp16_t; /* IEEE binary16 bits */

static inline size_t dtype_size(dtype_t dt) { return dt == DT_F32 ? 4 : dt == DT_F64 ? 8 : 2; }
static inline const char *dtype_name(dtype_t dt) {
  return dt == DT_F32 ? "float" : dt == DT_BF16 ? "bfloat16" : dt == DT_F16 ? "float16" : "double";
}
/* The --precision word of a working dtype: fp32, bf16, fp16. */
static inline const char *dtype_precision(dtype_t dt) {
  return dt == DT_BF16 ? "bf16" : dt == DT_F16 ? "fp16" : "fp32";
}
static inline const char *device_name(device_t d) { return d == DEV_CPU ? "cpu" : "cuda"; }

/* ZL_HD: a function of this header or of elementwise.h, compiled for the CPU and, under nvcc,
 * for the GPU too: one source of the bits on both (notes/design.md, "One source of the bits"). */
#ifdef __CUDACC__
#define ZL_HD static __host__ __device__ __forceinline__
#else
#define ZL_HD static inline __attribute__((always_inline))
#endif

/* fp32 -> bf16, round to nearest, ties to even; NaN stays a (quiet) NaN, inf stays inf.
 * Written with a union, not memcpy, so that GCC vectorizes the loops that call it. */
ZL_HD bf16_t bf16_from_f32(float f) {
  union { float f; uint32_t u; } c;
  c.f = f;
  uint32_t u = c.u;
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x0040u); /* NaN: keep sign, force quiet */
  u += 0x7fffu + ((u >> 16) & 1u);                                          /* RNE; overflow rounds to inf */
  return (bf16_t)(u >> 16);
}
ZL_HD float bf16_to_f32(bf16_t h) {
  union { uint32_t u; float f; } c;
  c.u = (uint32_t)h << 16;
  return c.f;
}
/* fp32 -> fp16 (IEEE binary16), round to nearest, ties to even, in integer arithmetic only
 * (no float rounding mode, no flush-to-zero: the same bits on CPU and GPU). |f| >= 65520
 * (half an ulp above the largest finite fp16, 65504) rounds to inf; below 2^-14 the result is
 * subnormal (k·2^-24), and |f| <= 2^-25 flushes to a signed zero. NaN stays a quiet NaN. */
ZL_HD fp16_t fp16_from_f32(float f) {
  union { float f; uint32_t u; } c;
  c.f = f;
  uint32_t sign = (c.u >> 16) & 0x8000u, a = c.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (fp16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN: quiet */
  if (a >= 0x477ff000u) return (fp16_t)(sign | 0x7c00u);                      /* inf, or rounds to it */
  if (a >= 0x38800000u) {                                                      /* normal: rebias 127 -> 15 */
    a += 0xfffu + ((a >> 13) & 1u);
    return (fp16_t)(sign | ((a - 0x38000000u) >> 13));
  }
  uint32_t e = a >> 23;
  if (e < 102u) return (fp16_t)sign;                 /* < 2^-25: rounds to zero */
  uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126u - e; /* value = m·2^(e-150) = (m >> s)·2^-24 */
  uint32_t k = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  k += rem > half || (rem == half && (k & 1u));      /* may carry into the smallest normal: right */
  return (fp16_t)(sign | k);
}
ZL_HD float fp16_to_f32(fp16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16, e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
  union { uint32_t u; float f; } c;
  if (e == 0u) {                               /* zero or subnormal: m·2^-24, exact in fp32 */
    c.f = (float)m * 5.9604644775390625e-8f;
    c.u |= sign;
  } else if (e == 31u) {
    c.u = sign | 0x7f800000u | (m << 13);      /* inf, NaN (payload kept) */
  } else {
    c.u = sign | ((e + 112u) << 23) | (m << 13);
  }
  return c.f;
}
/* Element i of a buffer of dtype dt, as float (F32, BF16 or F16). */
ZL_HD float dt_load(const void *p, dtype_t dt, int64_t i) {
  return dt == DT_F32    ? ((const float *)p)[i]
         : dt == DT_BF16 ? bf16_to_f32(((const bf16_t *)p)[i])
                         : fp16_to_f32(((const fp16_t *)p)[i]);
}
ZL_HD void dt_store(void *p, dtype_t dt, int64_t i, float v) {
  if (dt == DT_F32) ((float *)p)[i] = v;
  else if (dt == DT_BF16) ((bf16_t *)p)[i] = bf16_from_f32(v);
  else ((fp16_t *)p)[i] = fp16_from_f32(v);
}
/* 1 when dt is a 16-bit working dtype (bf16 or fp16): an fp32 master copy is kept. */
static inline int dtype_is_half(dtype_t dt) { return dt == DT_BF16 || dt == DT_F16; }
#endif
