/* zl_gpu_test.h — helpers shared by the GPU op tests (test_gpu_ops.c, test_gpu_ops_gpt.c):
 * the suite's GPU check, seeded random inputs, host <-> device copies, poisoned outputs, and the
 * comparisons against the CPU op. Define ZL_GPU_SEED (the file's random stream) before including.
 * Notes: notes/gpu.md. */
#ifndef ZL_GPU_TEST_H
#define ZL_GPU_TEST_H
#include "zl_test.h" // Criterion, zl_to_bf16
#include "device.h"  // device_cuda_count, device_cuda_select, dev_malloc, dev_memcpy, dev_sync
#include "dtype.h"   // bf16_t, bf16_to_f32, dt_load
#include "ledger.h"  // ledger_init

#ifndef ZL_GPU_SEED
#error "define ZL_GPU_SEED (the file's random stream) before including zl_gpu_test.h"
#endif

/* The suite's .init: a GPU must be visible (make test-gpu), the first one is used. */
static inline void zl_gpu_init(void) {
  ledger_init(0, 0);
  int n = device_cuda_count();
  cr_assert(n > 0, "no GPU visible: make test-gpu needs one (nvidia-smi; CUDA_VISIBLE_DEVICES)");
  device_cuda_select(0);
}

static uint64_t g_rng = ZL_GPU_SEED;
static inline float urand(void) { /* [-1, 1) */
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
/* n floats offset + scale·U[-1, 1), malloc'd. */
static inline float *rand_f32(int64_t n, float scale, float offset) {
  float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) h[i] = offset + scale * urand();
  return h;
}
/* n elements of dtype dt as fp32, malloc'd. */
static inline float *widen(const void *p, dtype_t dt, int64_t n) {
  float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) h[i] = dt_load(p, dt, i);
  return h;
}
/* n floats stored in dtype dt (dtype.h's rounding): a new malloc'd array, or p itself for F32
 * (free it with free_dt). */
static inline void *narrow(const float *p, dtype_t dt, int64_t n) {
  if (dt == DT_F32) return (void *)p;
  void *h = malloc((size_t)(n ? n : 1) * dtype_size(dt));
  for (int64_t i = 0; i < n; i++) dt_store(h, dt, i, p[i]);
  return h;
}
static inline void free_dt(void *h, dtype_t dt) { if (dt != DT_F32) free(h); }
/* A device copy of nbytes of host memory. */
static inline void *up(const void *h, size_t nbytes) {
  void *d = dev_malloc(DEV_CUDA, nbytes, "test buffer");
  dev_memcpy(DEV_CUDA, d, DEV_CPU, h, nbytes);
  return d;
}
/* A device buffer with every bit set (NaN in f32 and bf16): unwritten elements show. */
static inline void *poisoned(size_t nbytes) {
  unsigned char *h = malloc(nbytes ? nbytes : 1);
  memset(h, 0xff, nbytes);
  void *d = up(h, nbytes);
  free(h);
  return d;
}
/* A host copy of nbytes of device memory, after the device has finished. */
static inline void *down(const void *d, size_t nbytes) {
  void *h = malloc(nbytes ? nbytes : 1);
  dev_sync(DEV_CUDA);
  dev_memcpy(DEV_CPU, h, DEV_CUDA, d, nbytes);
  return h;
}
/* got vs expected: |g − e| <= tol · max(|e|, floor·max|e|). floor 1: normwise; 1e-3: elementwise.
 * NaN never passes. */
static inline void expect_close(const char *what, const float *got, const float *exp, int64_t n, double tol,
                                double floor) {
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(exp[i]));
  for (int64_t i = 0; i < n; i++) {
    double lim = tol * fmax(fabs(exp[i]), floor * scale);
    if (!(fabs((double)got[i] - exp[i]) <= lim)) /* NaN fails here */
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (CPU), |diff| %.3g > %.3g (tol %g)", what,
                     (long long)i, got[i], exp[i], fabs((double)got[i] - exp[i]), lim, tol);
  }
}
/* Element i of a bf16 (esz 2), f32 (4) or f64 (8) array, as a double for messages. */
static inline double elem_at(const void *p, int64_t i, size_t esz) {
  return esz == 2 ? bf16_to_f32(((const bf16_t *)p)[i])
      : esz == 4  ? ((const float *)p)[i]
                  : ((const double *)p)[i];
}
/* Bitwise. nans_match 1: any NaN matches any NaN (the GPU makes canonical NaNs, the CPU keeps
 * payloads); 0: every bit. */
static inline void expect_bits(const char *what, const void *got, const void *exp, int64_t n, size_t esz,
                               int nans_match) {
  for (int64_t i = 0; i < n; i++) {
    double g = elem_at(got, i, esz), e = elem_at(exp, i, esz);
    if (nans_match && isnan(g) && isnan(e)) continue;
    if (memcmp((const char *)got + i * esz, (const char *)exp + i * esz, esz) != 0)
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (CPU), bitwise", what, (long long)i, g, e);
  }
}
/* bf16 keeps 8 significant bits (2^-8 ≈ 4e-3 a rounding), fp16 11 (2^-11 ≈ 5e-4): 1e-2 and 5e-3 are a few
 * roundings of room for sums taken in another order; fp32 1e-5. */
static inline double tol_of(dtype_t dt) { return dt == DT_BF16 ? 1e-2 : dt == DT_F16 ? 5e-3 : 1e-5; }
#endif
