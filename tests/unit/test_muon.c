/* test_muon.c — Muon's pieces without ranks: Newton–Schulz leaves every singular value in the
 * quintic's band (about 0.7 to 1.2), tall matrices go through the transpose, and the split gives
 * Muon the hidden matrices and AdamW the rest (common/device/ops_muon.h, common/train/muon.h;
 * notes/03-zero1.md, "Muon: whole matrices, not slices"). */
#include "zl_test.h"  // Criterion
#include "gpt.h"      // gpt_init, gpt_preset, gpt_count_params
#include "model.h"    // model_init, model_free
#include "muon.h"     // muon_adamw_numel, muon_matrix_numel, muon_unit_segments
#include "ops_muon.h" // op_newton_schulz
#include <math.h>     // sqrt, fabs
#include <stdint.h>   // uint64_t
#include <string.h>   // memcmp

static float det_value(uint64_t *s) { /* a fixed pseudo-random value in [-1, 1) */
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The eigenvalues of the symmetric n x n matrix a (destroyed), by cyclic Jacobi, into ev. */
static void jacobi_eigen(double *a, int n, double *ev) {
  for (int sweep = 0; sweep < 100; sweep++) {
    double off = 0;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
    if (off < 1e-24) break;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) {
        if (fabs(a[p * n + q]) < 1e-300) continue;
        double th = 0.5 * atan2(2 * a[p * n + q], a[q * n + q] - a[p * n + p]), c = cos(th), s = sin(th);
        for (int k = 0; k < n; k++) { /* columns p, q */
          double x = a[k * n + p], y = a[k * n + q];
          a[k * n + p] = c * x - s * y, a[k * n + q] = s * x + c * y;
        }
        for (int k = 0; k < n; k++) { /* rows p, q */
          double x = a[p * n + k], y = a[q * n + k];
          a[p * n + k] = c * x - s * y, a[q * n + k] = s * x + c * y;
        }
      }
  }
  for (int i = 0; i < n; i++) ev[i] = a[i * n + i];
}

/* Singular values of X (rows x cols) after Newton–Schulz: sqrt of the eigenvalues of the smaller Gram. */
static void check_band(int rows, int cols) {
  uint64_t seed = 7 + rows * 131 + cols;
  float *X = malloc(sizeof(float) * rows * cols);
  for (int i = 0; i < rows * cols; i++) X[i] = det_value(&seed);
  op_newton_schulz(X, rows, cols, MUON_NS_STEPS);
  int s = rows < cols ? rows : cols;
  double *g = calloc((size_t)s * s, sizeof(double)), *ev = calloc((size_t)s, sizeof(double));
  for (int i = 0; i < s; i++)
    for (int j = 0; j < s; j++)
      for (int k = 0; k < (rows < cols ? cols : rows); k++)
        g[i * s + j] += rows <= cols ? (double)X[i * cols + k] * X[j * cols + k]
                                     : (double)X[k * cols + i] * X[k * cols + j];
  jacobi_eigen(g, s, ev);
  for (int i = 0; i < s; i++) {
    double sv = sqrt(ev[i] > 0 ? ev[i] : 0);
    cr_expect(sv > 0.65 && sv < 1.25,
              "%dx%d: singular value %d = %.4f, outside the quintic's band 0.65..1.25", rows, cols, i, sv);
  }
  free(X), free(g), free(ev);
}

Test(ch03_muon, newton_schulz_singular_values_near_one) {
  check_band(16, 16);
  check_band(8, 24);
  check_band(24, 8); /* tall: through the transpose */
  check_band(32, 128);
}

Test(ch03_muon, tall_is_the_transpose_of_wide) {
  enum { R = 12, C = 5 };
  float X[R * C], T[C * R];
  uint64_t seed = 3;
  for (int i = 0; i < R * C; i++) X[i] = det_value(&seed);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) T[c * R + r] = X[r * C + c];
  op_newton_schulz(X, R, C, MUON_NS_STEPS);
  op_newton_schulz(T, C, R, MUON_NS_STEPS);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++)
      cr_assert(memcmp(&X[r * C + c], &T[c * R + r], 4) == 0, "NS(X) != NS(X^T)^T at (%d, %d)", r, c);
}

Test(ch03_muon, split_mlp_and_gpt) {
  model_t m;
  model_init(&m, 6, 13, 11, 2); /* units 6->13, 13->13, 13->11 */
  cr_assert_eq(muon_matrix_numel(&m), 13 * 6 + 13 * 13, "the MLP: every W but the head's");
  cr_assert_eq(muon_adamw_numel(&m), m.numel - (13 * 6 + 13 * 13), "the MLP: biases and the head");
  muon_seg_t seg[MUON_MAX_SEGS];
  cr_assert_eq(muon_unit_segments(&m, 0, seg), 2, "unit 0: W then b");
  cr_assert(seg[0].rows == 13 && seg[0].cols == 6 && seg[1].rows == 0 && seg[1].numel == 13);
  model_free(&m);
  gpt_shape_t s;
  cr_assert_eq(gpt_preset("tiny", &s), 0);
  gpt_init(&m, s);
  int64_t C = s.n_embd, want = (int64_t)s.n_layer * 12 * C * C;
  cr_assert_eq(muon_matrix_numel(&m), want, "the GPT: qkv, proj, fc, fcproj of every block (12C^2 each)");
  cr_assert_eq(muon_adamw_numel(&m), gpt_count_params(s) - want, "the GPT: embeddings, head, norms, biases");
  cr_assert_eq(muon_unit_segments(&m, 0, seg), 1, "the embedding: AdamW's whole");
  cr_assert_eq(seg[0].rows, 0);
  model_free(&m);
}
