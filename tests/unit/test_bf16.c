/* test_bf16.c — fp32 -> bf16 round-to-nearest-even and dt_load/dt_store (common/base/dtype.h).
 * Notes: notes/00-memory.md (why bf16). Suite common_bf16. */
#include "zl_test.h" // Criterion, zl helpers
#include "dtype.h"   // bf16_from_f32, bf16_to_f32, dt_load, dt_store
#include <float.h>   // FLT_MAX


/* fp32 bits in -> expected bf16 bits out */
typedef struct { uint32_t in; uint16_t out; const char *what; } bf16_case_t;

static const bf16_case_t g_cases[] = {
    {0x3f800000u, 0x3f80, "1.0 exact"},
    {0x3f808000u, 0x3f80, "tie between 1.0 (even) and next: down to even"},
    {0x3f818000u, 0x3f82, "tie between odd 0x3f81 and 0x3f82: up to even"},
    {0xbf808000u, 0xbf80, "negative tie: down (in magnitude) to even"},
    {0xbf818000u, 0xbf82, "negative tie: up (in magnitude) to even"},
    {0x3f807fffu, 0x3f80, "just below half: down"},
    {0x3f808001u, 0x3f81, "just above half: up"},
    {0x3f80ffffu, 0x3f81, "just below next: up"},
    {0x3fffffffu, 0x4000, "carry into the exponent"},
    {0x00000000u, 0x0000, "+0"},
    {0x80000000u, 0x8000, "-0 keeps its sign"},
    {0x7f800000u, 0x7f80, "+inf"},
    {0xff800000u, 0xff80, "-inf"},
    {0x7f7f0000u, 0x7f7f, "max finite bf16 is exact"},
    {0x7f7f7fffu, 0x7f7f, "below half an ulp above max: stays max"},
    {0x7f7f8000u, 0x7f80, "tie above max (odd mantissa): overflows to inf"},
    {0x7f7fffffu, 0x7f80, "FLT_MAX overflows to inf"},
    {0xff7fffffu, 0xff80, "-FLT_MAX overflows to -inf"},
    {0x00000001u, 0x0000, "smallest fp32 subnormal rounds to +0"},
    {0x00008000u, 0x0000, "subnormal tie: down to even 0"},
    {0x00018000u, 0x0002, "subnormal tie: up to even 2"},
    {0x00010000u, 0x0001, "smallest bf16 subnormal is exact"},
    {0x0001ffffu, 0x0002, "subnormal just below next: up"},
    {0x007fffffu, 0x0080, "largest fp32 subnormal rounds to smallest normal"},
    {0x80008000u, 0x8000, "negative subnormal tie: -0"},
};

Test(common_bf16, rne_edge_cases) {
  for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
    uint16_t got = bf16_from_f32(zl_f32_of_bits(g_cases[i].in));
    cr_expect_eq(got, g_cases[i].out, "bf16_from_f32(0x%08x) [%s]: got 0x%04x, expected 0x%04x",
                 g_cases[i].in, g_cases[i].what, got, g_cases[i].out);
  }
}

/* A NaN in bf16: exponent all ones, mantissa non-zero, quiet bit (0x40) set. */
static int is_quiet_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0 && (h & 0x0040); }

Test(common_bf16, nan_stays_quiet_nan) {
  /* quiet, signalling with payload only in the low 16 bits (truncation would make it inf), both signs */
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fbfffffu,
                           0xffc00000u, 0xff800001u, 0x7fffffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t h = bf16_from_f32(zl_f32_of_bits(nans[i]));
    cr_expect(is_quiet_nan(h), "bf16_from_f32(0x%08x): got 0x%04x, expected a quiet NaN", nans[i], h);
    cr_expect_eq(h >> 15, nans[i] >> 31, "bf16_from_f32(0x%08x): sign of NaN lost (got 0x%04x)", nans[i], h);
    cr_expect(isnan(bf16_to_f32(h)), "bf16_to_f32(0x%04x) is not NaN", h);
  }
}

Test(common_bf16, every_bf16_round_trips) {
  /* bf16 -> fp32 is exact, so fp32 -> bf16 must give back the same bits (NaNs: a quiet NaN) */
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float f = bf16_to_f32((uint16_t)h);
    cr_assert_eq(zl_bits_of_f32(f), h << 16, "bf16_to_f32(0x%04x): got 0x%08x, expected 0x%08x", h,
                 zl_bits_of_f32(f), h << 16);
    uint16_t back = bf16_from_f32(f);
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
      cr_assert(is_quiet_nan(back), "NaN 0x%04x came back as 0x%04x", h, back);
      cr_assert_eq(back, (uint16_t)(h | 0x40), "NaN 0x%04x: payload or sign changed: 0x%04x", h, back);
    } else {
      cr_assert_eq(back, h, "round trip of 0x%04x gave 0x%04x", h, back);
    }
  }
}

/* Reference rounding by distances in double: the nearer of the two bf16 neighbours of |x|,
 * ties to the even mantissa; beyond the max finite value the upper neighbour is inf (2^128). */
static uint16_t ref_round(uint32_t u) {
  uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  uint32_t lo = mag & 0xffff0000u;
  double x = (double)zl_f32_of_bits(mag), dlo = (double)zl_f32_of_bits(lo);
  double dhi = (lo >> 16) + 1 == 0x7f80 ? ldexp(1.0, 128) : (double)zl_f32_of_bits(lo + 0x10000u);
  uint32_t r;
  if (x - dlo < dhi - x) r = lo >> 16;
  else if (x - dlo > dhi - x) r = (lo >> 16) + 1;
  else r = ((lo >> 16) & 1) ? (lo >> 16) + 1 : lo >> 16;
  return (uint16_t)((sign >> 16) | r);
}

Test(common_bf16, matches_reference_on_random_floats) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 1000000; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
    uint32_t u = (uint32_t)(s >> 16);
    if ((u & 0x7f800000u) == 0x7f800000u) continue; /* inf/NaN: covered above */
    uint16_t got = bf16_from_f32(zl_f32_of_bits(u)), exp = ref_round(u);
    cr_assert_eq(got, exp, "bf16_from_f32(0x%08x = %.9g): got 0x%04x, expected 0x%04x", u, zl_f32_of_bits(u),
                 got, exp);
  }
}

Test(common_bf16, dt_load_store) {
  float f32[4] = {0};
  bf16_t b16[4] = {0};
  const float vals[4] = {1.5f, -2.25f, 1.00390625f /* tie: 1 + 2^-8 */, 3.0e38f};
  const float want_bf16[4] = {1.5f, -2.25f, 1.0f, bf16_to_f32(bf16_from_f32(3.0e38f))};
  for (int i = 0; i < 4; i++) {
    dt_store(f32, DT_F32, i, vals[i]);
    dt_store(b16, DT_BF16, i, vals[i]);
  }
  for (int i = 0; i < 4; i++) {
    float g32 = dt_load(f32, DT_F32, i), g16 = dt_load(b16, DT_BF16, i);
    cr_expect_eq(zl_bits_of_f32(g32), zl_bits_of_f32(vals[i]), "f32[%d]: got %.9g, expected %.9g", i, g32,
                 vals[i]);
    cr_expect_eq(zl_bits_of_f32(g16), zl_bits_of_f32(want_bf16[i]), "bf16[%d]: got %.9g, expected %.9g", i,
                 g16, want_bf16[i]);
  }
  cr_expect_eq(b16[2], 0x3f80, "bf16 store of the tie 1+2^-8: got 0x%04x, expected 0x3f80", b16[2]);
  cr_expect(fabsf(want_bf16[3] - 3.0e38f) / 3.0e38f < 1.0f / 256,
            "bf16 of 3e38 off by more than half an ulp");
  cr_expect_eq(dtype_size(DT_F32), 4u);
  cr_expect_eq(dtype_size(DT_BF16), 2u);
  cr_expect_eq(dtype_size(DT_F64), 8u);
}
