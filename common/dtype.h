/* dtype.h — element types and devices shared by every module.
 * bf16 conversion is round-to-nearest-even (see notes/00-memory.md for why bf16). */
#ifndef ZL_DTYPE_H
#define ZL_DTYPE_H
#include <stdint.h> // uint16_t, uint32_t, int64_t
#include <stddef.h> // size_t
#include <string.h> // memcpy

typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F64 = 2 } dtype_t; /* F64 only for control scalars */
typedef enum { DEV_CPU = 0, DEV_CUDA = 1 } device_t;
typedef uint16_t bf16_t;

static inline size_t dtype_size(dtype_t dt) { return dt == DT_F32 ? 4 : dt == DT_BF16 ? 2 : 8; }
static inline const char *dtype_name(dtype_t dt) { return dt == DT_F32 ? "float" : dt == DT_BF16 ? "bfloat16" : "double"; }
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
/* Element i of a buffer of dtype dt, as float (F32 or BF16 only). */
ZL_HD float dt_load(const void *p, dtype_t dt, int64_t i) {
  return dt == DT_F32 ? ((const float *)p)[i] : bf16_to_f32(((const bf16_t *)p)[i]);
}
ZL_HD void dt_store(void *p, dtype_t dt, int64_t i, float v) {
  if (dt == DT_F32) ((float *)p)[i] = v;
  else ((bf16_t *)p)[i] = bf16_from_f32(v);
}
#endif
