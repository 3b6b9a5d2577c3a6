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

/* fp32 -> bf16, round to nearest, ties to even; NaN stays a (quiet) NaN, inf stays inf. */
static inline bf16_t bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x0040u); /* NaN: keep sign, force quiet */
  u += 0x7fffu + ((u >> 16) & 1u);                                          /* RNE; overflow rounds to inf */
  return (bf16_t)(u >> 16);
}
static inline float bf16_to_f32(bf16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Element i of a buffer of dtype dt, as float (F32 or BF16 only). */
static inline float dt_load(const void *p, dtype_t dt, int64_t i) {
  return dt == DT_F32 ? ((const float *)p)[i] : bf16_to_f32(((const bf16_t *)p)[i]);
}
static inline void dt_store(void *p, dtype_t dt, int64_t i, float v) {
  if (dt == DT_F32) ((float *)p)[i] = v;
  else ((bf16_t *)p)[i] = bf16_from_f32(v);
}
#endif
