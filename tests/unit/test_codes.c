/* test_codes.c — chapter 13's two codes in one process (notes/13-compression.md):
 *   1. qwZ's int8 blocks: every decoded element within max|block|/254 of the original (the half
 *      step of s = max|block|/127), times 1 + 2^-20 for the float roundings of s, x/s and q·s;
 *      blocks of B = 256, 100 and a short last block, one all-zero block (decoded 0), fp32 and
 *      bf16 (bf16: plus the half ulp of the bf16 store); and the words of a piece;
 *   2. 1-bit Adam's signs: s = mean|x|, sign(0) = +1, bit i%32 of word i/32, and the error
 *      feedback identity decode + err = x within one rounding of x − s·sign(x);
 *   3. qgZ's int4 blocks (the exercise qgz_quantise, judged by its contract, not by the reference's
 *      bits): decoded by qgz_dequantise_add, every element within max|block|/14 of the original,
 *      times 1 + 2^-20; an all-zero block decodes 0; nothing written past qgz_words(n, B) words; an
 *      accumulator that held values keeps them (the decode adds). */
#include "zl_test.h" // Criterion, math
#include "onebit.h"  // onebit_scale, onebit_pack, onebit_decode, onebit_chunk
#include "qwz.h"     // qwz_words, qwz_quantise, qwz_dequantise
#include "qgz.h"     // qgz_words, qgz_quantise, qgz_dequantise_add

static float urand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0) - 0.5f;
}

static void qwz_case(int64_t p, int B, dtype_t dt) {
  uint64_t seed = 99 + (uint64_t)p * 7 + (uint64_t)B;
  float *x = malloc(p * sizeof *x), *back = malloc(p * sizeof *back);
  void *xd = malloc(p * 4), *outd = malloc(p * 4);
  for (int64_t i = 0; i < p; i++) { /* block b has magnitudes around 10^(b%5 − 2); block 1 all zero */
    int64_t b = i / B;
    x[i] = b == 1 ? 0.0f : urand(&seed) * powf(10.0f, (float)(b % 5) - 2.0f);
    dt_store(xd, dt, i, x[i]);
    x[i] = dt_load(xd, dt, i); /* what is quantised: the working dtype's value */
  }
  uint32_t *w = calloc((size_t)qwz_words(p, B), sizeof *w);
  qwz_quantise(xd, dt, p, B, w);
  qwz_dequantise(w, p, B, outd, dt);
  for (int64_t lo = 0; lo < p; lo += B) {
    int64_t hi = lo + B < p ? lo + B : p;
    float amax = 0;
    for (int64_t i = lo; i < hi; i++)
      amax = fmaxf(amax, fabsf(x[i]));
    double bound = amax / 254.0 * (1 + 0x1p-20);
    for (int64_t i = lo; i < hi; i++) {
      double got = dt_load(outd, dt, i), d = fabs(got - x[i]);
      double ulp = dt == DT_BF16 ? fabs(got) * 0x1p-8 : 0;
      cr_expect(d <= bound + ulp, "%s p %lld B %d: element %lld: %.9g decoded as %.9g, |delta| %.3g > %.3g",
                dtype_precision(dt), (long long)p, B, (long long)i, x[i], got, d, bound + ulp);
      if (amax == 0) cr_expect(got == 0, "zero block decoded %.3g", got);
    }
  }
  free(x), free(back), free(xd), free(outd), free(w);
}

Test(ch13_codes, qwz_error_within_max_over_254) {
  qwz_case(1024, 256, DT_F32);
  qwz_case(1000, 100, DT_F32);
  qwz_case(1001, 256, DT_F32); /* a short last block */
  qwz_case(1024, 256, DT_BF16);
  cr_expect_eq(qwz_words(1024, 256), 256 + 4, "1024 int8s in 256 words + 4 scales");
  cr_expect_eq(qwz_words(325, 32), 82 + 11, "325 int8s: 82 words (padded) + 11 scales");
}

Test(ch13_codes, onebit_signs_scale_and_feedback) {
  enum { N = 100 };
  float x[N], err[N], dec[N];
  uint64_t seed = 5;
  double abs_sum = 0;
  for (int i = 0; i < N; i++) {
    x[i] = i == 7 ? 0.0f : urand(&seed);
    abs_sum += fabs(x[i]);
  }
  uint32_t words[4];
  float s = onebit_scale(x, N);
  cr_expect_eq(s, (float)(abs_sum / N), "scale %.9g, mean|x| %.9g", s, (float)(abs_sum / N));
  onebit_pack(x, N, s, words, err);
  onebit_decode(words, s, N, dec);
  for (int i = 0; i < N; i++) {
    int bit = (words[i / 32] >> (i % 32)) & 1u;
    cr_expect_eq(bit, x[i] >= 0, "element %d (%.3g): bit %d", i, x[i], bit);
    cr_expect_eq(dec[i], x[i] >= 0 ? s : -s, "element %d decoded %.3g", i, dec[i]);
    cr_expect(fabs((double)dec[i] + err[i] - x[i]) <= 0x1p-24 * (fabs(x[i]) + s),
              "element %d: %.9g + %.9g != %.9g", i, dec[i], err[i], x[i]);
  }
  cr_expect_eq(dec[7], s, "sign(0) is +1");
  cr_expect_eq(onebit_chunk(4810, 2), 2432, "4810 over 2 ranks: chunks of 2432 (76 words)");
  cr_expect_eq(onebit_chunk(64, 2), 32, "64 over 2 ranks: 32");
}

/* n elements in blocks of B: block b's magnitudes around 10^(b%5 − 2), block 1 all zero. */
static void qgz_case(int64_t n, int B) {
  uint64_t seed = 7 + (uint64_t)n * 3 + (uint64_t)B;
  int64_t nw = qgz_words(n, B);
  float *x = malloc(n * sizeof *x), *acc = malloc(n * sizeof *acc);
  uint32_t *w = malloc((size_t)(nw + 4) * sizeof *w);
  for (int64_t i = 0; i < n; i++) {
    int64_t b = i / B;
    x[i] = b == 1 ? 0.0f : urand(&seed) * powf(10.0f, (float)(b % 5) - 2.0f);
    acc[i] = 1.0f; /* the decode adds: x^ = acc − 1 */
  }
  for (int64_t k = 0; k < nw + 4; k++) w[k] = 0xA5A5A5A5u; /* garbage in, a canary past the end */
  qgz_quantise(x, n, B, w);
  for (int64_t k = nw; k < nw + 4; k++)
    cr_expect_eq(w[k], 0xA5A5A5A5u, "n %lld B %d: word %lld written, past qgz_words = %lld", (long long)n, B,
                 (long long)k, (long long)nw);
  qgz_dequantise_add(w, n, B, acc);
  for (int64_t lo = 0; lo < n; lo += B) {
    int64_t hi = lo + B < n ? lo + B : n;
    float amax = 0;
    for (int64_t i = lo; i < hi; i++) amax = fmaxf(amax, fabsf(x[i]));
    double bound = amax / 14.0 * (1 + 0x1p-20) + 0x1p-23; /* + the rounding of 1 + x^ − 1 */
    for (int64_t i = lo; i < hi; i++) {
      double got = (double)acc[i] - 1.0, d = fabs(got - x[i]);
      cr_expect(d <= bound,
                "n %lld B %d: element %lld (block %lld, max|block| %.3g): %.9g decoded as %.9g, "
                "|delta| %.3g > max|block|/14 = %.3g",
                (long long)n, B, (long long)i, (long long)(i / B), amax, x[i], got, d, bound);
      if (amax == 0) cr_expect(acc[i] == 1.0f, "zero block: element %lld decoded %.3g", (long long)i, got);
    }
  }
  free(x), free(acc), free(w);
}

Test(ch13_codes, qgz_int4_error_within_max_over_14) {
  qgz_case(1024, 256);
  qgz_case(1000, 100);
  qgz_case(1001, 32); /* a short last block, an odd count: the last byte half used */
  cr_expect_eq(qgz_words(1024, 256), 128 + 4, "1024 int4s in 128 words + 4 scales");
  cr_expect_eq(qgz_words(325, 32), 41 + 11, "325 int4s: 41 words (padded) + 11 scales");
}
