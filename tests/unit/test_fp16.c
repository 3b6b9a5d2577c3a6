/* test_fp16.c — fp32 <-> fp16 (IEEE binary16) casts of common/base/dtype.h: round to nearest even,
 * overflow to inf, subnormals, NaN, and dt_load/dt_store. The reference is the compiler's own
 * _Float16 conversion (GCC on x86-64: IEEE, round to nearest even) and, independently, the
 * nearest of the two neighbouring fp16 values computed in double. Suite common_fp16. */
#include "zl_test.h" // Criterion, zl helpers
#include "dtype.h"   // fp16_from_f32, fp16_to_f32, dt_load, dt_store
#include <math.h>    // isnan, fabs


typedef struct { uint32_t in; uint16_t out; const char *what; } fp16_case_t;
static const fp16_case_t g_cases[] = {
    {0x3f800000u, 0x3c00, "1.0 exact"},
    {0x3f801000u, 0x3c00, "tie between 1.0 (even) and 1+2^-10: down to even"},
    {0x3f803000u, 0x3c02, "tie between odd 0x3c01 and 0x3c02: up to even"},
    {0xbf801000u, 0xbc00, "negative tie: down (in magnitude) to even"},
    {0x3f800fffu, 0x3c00, "just below half: down"},
    {0x3f801001u, 0x3c01, "just above half: up"},
    {0x477fe000u, 0x7bff, "65504, the largest finite fp16, exact"},
    {0x477fefffu, 0x7bff, "just below 65520: stays 65504"},
    {0x477ff000u, 0x7c00, "65520 (tie above max, odd mantissa): overflows to inf"},
    {0x47800000u, 0x7c00, "65536 overflows to inf"},
    {0xc7800000u, 0xfc00, "-65536 overflows to -inf"},
    {0x7f7fffffu, 0x7c00, "FLT_MAX overflows to inf"},
    {0x7f800000u, 0x7c00, "+inf"},
    {0xff800000u, 0xfc00, "-inf"},
    {0x00000000u, 0x0000, "+0"},
    {0x80000000u, 0x8000, "-0 keeps its sign"},
    {0x38800000u, 0x0400, "2^-14, the smallest normal"},
    {0x387fc000u, 0x03ff, "largest subnormal 1023·2^-24"},
    {0x387fe000u, 0x0400, "tie between largest subnormal (odd) and smallest normal: up"},
    {0x33800000u, 0x0001, "2^-24, the smallest subnormal"},
    {0x33000000u, 0x0000, "2^-25, tie between 0 (even) and 2^-24: to zero"},
    {0x33000001u, 0x0001, "just above 2^-25: up to 2^-24"},
    {0x33c00000u, 0x0002, "1.5·2^-24, tie between 1 (odd) and 2: up to 2"},
    {0x34200000u, 0x0002, "2.5·2^-24, tie between 2 (even) and 3: down to 2"},
    {0x32ffffffu, 0x0000, "just below 2^-25: zero"},
    {0x00000001u, 0x0000, "smallest fp32 subnormal flushes to zero"},
    {0x80000001u, 0x8000, "negative tiny: -0"},
};

Test(common_fp16, hand_cases) {
  for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
    uint16_t got = fp16_from_f32(zl_f32_of_bits(g_cases[i].in));
    cr_expect_eq(got, g_cases[i].out, "fp16_from_f32(0x%08x) [%s]: got 0x%04x, expected 0x%04x",
                 g_cases[i].in, g_cases[i].what, got, g_cases[i].out);
  }
}

Test(common_fp16, nan_stays_quiet_nan) {
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu};
  for (int i = 0; i < 4; i++) {
    uint16_t h = fp16_from_f32(zl_f32_of_bits(nans[i]));
    cr_expect((h & 0x7c00) == 0x7c00 && (h & 0x0200),
              "fp16_from_f32(NaN 0x%08x): got 0x%04x, expected a quiet NaN", nans[i], h);
    cr_expect((h & 0x8000) == ((nans[i] >> 16) & 0x8000), "NaN 0x%08x: sign lost (0x%04x)", nans[i], h);
    cr_expect(isnan(fp16_to_f32(h)), "fp16_to_f32(0x%04x) is not NaN", h);
  }
}

/* Every fp16 value widens exactly (the compiler's _Float16 agrees) and narrows back to itself. */
Test(common_fp16, every_fp16_round_trips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = fp16_to_f32((uint16_t)h);
    _Float16 ref;
    uint16_t hh = (uint16_t)h;
    memcpy(&ref, &hh, 2);
    if (isnan((float)ref)) {
      cr_assert(isnan(f), "fp16_to_f32(0x%04x): got %g, expected NaN", h, f);
      continue;
    }
    cr_assert_eq(zl_bits_of_f32(f), zl_bits_of_f32((float)ref),
                 "fp16_to_f32(0x%04x): got 0x%08x, expected 0x%08x", h, zl_bits_of_f32(f),
                 zl_bits_of_f32((float)ref));
    uint16_t back = fp16_from_f32(f);
    cr_assert_eq(back, h, "fp16_from_f32(fp16_to_f32(0x%04x)): got 0x%04x", h, back);
  }
}

/* A stride over all 2^32 fp32 bit patterns (every 97th, 44 million): the compiler's _Float16
 * conversion gives the same bits, and the result is the nearest fp16 (ties to even) by a
 * check in double that does not use either conversion. */
Test(common_fp16, matches_compiler_and_nearest_over_fp32) {
  for (uint64_t u = 0; u < 0x100000000ull; u += 97) {
    float f = zl_f32_of_bits((uint32_t)u);
    uint16_t got = fp16_from_f32(f);
    if (isnan(f)) continue; /* NaNs checked above (payload bits are the implementation's) */
    _Float16 ref = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &ref, 2);
    cr_assert_eq(got, rb, "fp16_from_f32(0x%08x = %g): got 0x%04x, expected 0x%04x (_Float16)", (uint32_t)u,
                 f, got, rb);
    if ((got & 0x7c00) == 0x7c00) continue; /* inf: the threshold is a hand case */
    double x = fabs((double)f), g = fabs((double)fp16_to_f32(got));
    uint16_t mag = got & 0x7fff;
    double up = (double)fp16_to_f32((uint16_t)(mag + 1)),
           dn = mag ? (double)fp16_to_f32((uint16_t)(mag - 1)) : -1.0;
    double d = fabs(x - g), du = fabs(up - x), dd = dn < 0 ? 1e300 : fabs(x - dn);
    int ok = d < du && d < dd;
    if (d == du || d == dd) ok = (mag & 1) == 0; /* tie: the even one */
    cr_assert(ok, "fp16_from_f32(0x%08x = %.9g) = 0x%04x is not the nearest fp16 (ties to even)", (uint32_t)u,
              f, got);
  }
}

Test(common_fp16, dt_load_store_and_sizes) {
  const float vals[4] = {1.5f, -2.25f, 1.0e-6f, 70000.0f};
  const float want[4] = {1.5f, -2.25f, fp16_to_f32(fp16_from_f32(1.0e-6f)), INFINITY};
  uint16_t h[4];
  for (int i = 0; i < 4; i++) dt_store(h, DT_F16, i, vals[i]);
  for (int i = 0; i < 4; i++) {
    float g = dt_load(h, DT_F16, i);
    cr_expect(g == want[i], "dt_load(F16)[%d]: got %g, expected %g", i, g, want[i]);
  }
  cr_expect(want[2] != 0.0f && want[2] != 1.0e-6f, "1e-6 is an fp16 subnormal, rounded: %g", want[2]);
  cr_expect_eq(dtype_size(DT_F16), 2u);
  cr_expect_eq(dtype_size(DT_BF16), 2u);
  cr_expect_eq(dtype_size(DT_F64), 8u);
  cr_expect_str_eq(dtype_name(DT_F16), "float16");
  cr_expect(dtype_is_half(DT_F16) && dtype_is_half(DT_BF16) && !dtype_is_half(DT_F32));
}
