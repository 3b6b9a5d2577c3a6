/* test_data.c — the counter-based RNG and the teacher-student data (suite common_data):
 * sample i is a pure function of (seed, i), and the labels are learnable but not trivial.
 * See notes/02-ddp.md. */
#include "zl_test.h" // Criterion, zl_expect_floats
#include "data.h"    // data_t, data_batch, data_teacher_entropy, rng_*

Test(common_data, rng_is_a_pure_function_of_its_inputs) {
  cr_assert(rng_hash(1, 2, 3) == rng_hash(1, 2, 3), "rng_hash(1,2,3) differs between calls");
  uint64_t base = rng_hash(1, 2, 3);
  cr_assert(rng_hash(2, 2, 3) != base, "rng_hash ignores the seed");
  cr_assert(rng_hash(1, 3, 3) != base, "rng_hash ignores the stream");
  cr_assert(rng_hash(1, 2, 4) != base, "rng_hash ignores the index");
  cr_assert(rng_hash(1, 3, 2) != rng_hash(1, 2, 3), "rng_hash symmetric in stream and index");
  float a = rng_normal(9, 1, 12345), b = rng_normal(9, 1, 12345);
  cr_assert(memcmp(&a, &b, sizeof a) == 0, "rng_normal(9,1,12345): got %.9g then %.9g (bitwise)", a, b);
}

/* 200k draws: the sample mean of U[0,1) has std 0.29/sqrt(2e5) = 6.5e-4 and of N(0,1)
 * 2.2e-3; the variance estimate of N(0,1) has std sqrt(2/2e5) = 3.2e-3. Tolerances are
 * ~6-7 standard errors (a real bias, e.g. Box-Muller with the wrong constant, is far larger). */
Test(common_data, uniform_and_normal_moments) {
  enum { N = 200000 };
  double su = 0, sn = 0, sn2 = 0, sn4 = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < N; i++) {
    float u = rng_uniform(3, 7, i), z = rng_normal(3, 8, i);
    cr_assert(u >= 0.0f && u < 1.0f, "rng_uniform(3,7,%d): got %.9g, expected in [0,1)", i, u);
    cr_assert(isfinite(z), "rng_normal(3,8,%d): got %g, expected finite", i, z);
    umin = fminf(umin, u);
    umax = fmaxf(umax, u);
    su += u;
    sn += z;
    sn2 += (double)z * z;
    sn4 += (double)z * z * z * z;
  }
  cr_assert(fabs(su / N - 0.5) < 0.004, "uniform mean: got %.5f, expected 0.5 +- 0.004", su / N);
  cr_assert(umin < 1e-4 && umax > 1 - 1e-4, "uniform range: got [%g, %g], expected to cover [0,1)", umin,
            umax);
  cr_assert(fabs(sn / N) < 0.015, "normal mean: got %.5f, expected 0 +- 0.015", sn / N);
  cr_assert(fabs(sn2 / N - 1) < 0.02, "normal variance: got %.5f, expected 1 +- 0.02", sn2 / N);
  cr_assert(fabs(sn4 / N - 3) < 0.15, "normal 4th moment: got %.4f, expected 3 +- 0.15 (Gaussian tails)",
            sn4 / N);
}

/* Sample i is the same in one batch, in pieces, or starting elsewhere (rank slices). */
Test(common_data, samples_are_pure_functions_of_index) {
  enum { D = 11, C = 5, N = 64 };
  data_t d;
  data_init(&d, D, C, 42);
  float x[N * D], xp[N * D];
  int y[N], yp[N];
  data_batch(&d, 100, N, x, y);
  int cuts[] = {0, 17, 40, 41, N};
  for (int p = 0; p + 1 < 5; p++)
    data_batch(&d, 100 + cuts[p], cuts[p + 1] - cuts[p], xp + cuts[p] * D, yp + cuts[p]);
  zl_expect_floats("x (pieces vs one batch)", xp, x, N * D, 0);
  /* ... and different samples differ (no index aliasing) */
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      cr_assert(memcmp(x + i * D, x + j * D, sizeof(float) * D) != 0, "x of samples %d and %d are equal",
                100 + i, 100 + j);
  for (int i = 0; i < N; i++)
    cr_assert(yp[i] == y[i], "y[%d] (pieces vs one batch): got %d, expected %d", i, yp[i], y[i]);
  /* a second data_t with the same seed makes the same samples */
  data_t d2;
  data_init(&d2, D, C, 42);
  data_batch(&d2, 100, N, xp, yp);
  zl_expect_floats("x (second data_t, same seed)", xp, x, N * D, 0);
  for (int i = 0; i < N; i++)
    cr_assert(yp[i] == y[i], "y[%d] (same seed): got %d, expected %d", i, yp[i], y[i]);
  zl_expect_floats("teacher (same seed)", d2.teacher, d.teacher, C * D, 0);
  data_free(&d2);
  /* another seed: other samples */
  data_init(&d2, D, C, 43);
  data_batch(&d2, 100, N, xp, yp);
  int same = 0;
  for (int i = 0; i < N * D; i++) same += xp[i] == x[i];
  cr_assert(same < N * D / 100, "x with seed 43 equals seed 42 in %d of %d entries", same, N * D);
  data_free(&d2);
  data_free(&d);
}

/* Teacher probabilities of sample x (double). */
static void teacher_probs(const data_t *d, const float *x, double *p) {
  double mx = -INFINITY, s = 0;
  for (int c = 0; c < d->C; c++) {
    double z = 0;
    for (int k = 0; k < d->D; k++) z += (double)d->teacher[c * d->D + k] * x[k];
    p[c] = z;
    mx = fmax(mx, z);
  }
  for (int c = 0; c < d->C; c++) s += (p[c] = exp(p[c] - mx));
  for (int c = 0; c < d->C; c++) p[c] /= s;
}

/* The teacher is learnable but not trivial: its mean entropy lies well inside (0, log C), and
 * the labels really are drawn from it: the mean of −log p_teacher(y) over n samples equals the
 * entropy in expectation (std ≈ 1.2/sqrt(n) = 0.019 for n = 4000; tolerance 0.1 = 5 std).
 * Argmax labels would give a clearly lower value, uniform labels a clearly higher one. */
Test(common_data, labels_follow_the_teacher) {
  enum { D = 16, C = 10, N = 4000 };
  data_t d;
  data_init(&d, D, C, 7);
  double H = data_teacher_entropy(&d, N);
  cr_assert(H > 0.1 * log(C) && H < 0.8 * log(C),
            "teacher entropy: got %.4f nats, expected in (%.3f, %.3f) = (0.1, 0.8)·log C", H, 0.1 * log(C),
            0.8 * log(C));
  float *x = malloc(sizeof(float) * N * D);
  int *y = malloc(sizeof(int) * N), hist[C] = {0};
  data_batch(&d, 0, N, x, y);
  double nll = 0, p[C];
  for (int i = 0; i < N; i++) {
    cr_assert(y[i] >= 0 && y[i] < C, "y[%d]: got %d, expected a class in [0, %d)", i, y[i], C);
    teacher_probs(&d, x + i * D, p);
    nll += -log(p[y[i]]);
    hist[y[i]]++;
  }
  nll /= N;
  cr_assert(fabs(nll - H) < 0.1, "mean -log p_teacher(y): got %.4f, expected the teacher entropy %.4f +- 0.1",
            nll, H);
  for (int c = 0; c < C; c++) cr_assert(hist[c] > 0, "class %d never drawn in %d samples", c, N);
  /* the entropy over a prefix is a mean over those samples (pure function of the sample count) */
  double H2 = data_teacher_entropy(&d, N);
  cr_assert(H2 == H, "data_teacher_entropy twice: got %.17g then %.17g", H, H2);
  free(x);
  free(y);
  data_free(&d);
}

/* With 2 classes and wide input the teacher is still neither trivial nor random. */
Test(common_data, teacher_entropy_binary_and_wide) {
  data_t d;
  data_init(&d, 256, 2, 1);
  double H = data_teacher_entropy(&d, 2000);
  cr_assert(H > 0.05 && H < 0.8 * log(2.0),
            "teacher entropy (D=256, C=2): got %.4f, expected in (0.05, %.3f)", H, 0.8 * log(2.0));
  data_free(&d);
}
