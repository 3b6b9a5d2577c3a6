/* ops_muon.c — Muon's matrix update on the host: Newton–Schulz with OpenBLAS sgemm, the momentum
 * and the weight step as plain loops (ops_muon.h; notes/03-zero1.md).
 *
 * The whole matrix goes through one function, on whichever rank holds it: that is what makes a
 * sharded Muon equal to one rank's bit for bit — the owner runs these same calls on the same
 * numbers (solutions/owners.c). */
#include "ops_muon.h" // the contracts implemented here
#include <math.h>     // sqrt
#include <string.h>   // memcpy
#include <cblas.h>    // cblas_sgemm
#include "check.h"    // xmalloc (the scratch: a step's, freed)
#include "device.h"   // dev_memcpy
#include "ops.h"      // ops_blas_init
#include <stdlib.h>   // free
#if defined(__GNUC__) && !defined(__clang__) /* round every step: no fused multiply-adds (ops_cpu.c) */
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static const float NS_A = 3.4445f, NS_B = -4.7750f, NS_C = 2.0315f;

double op_newton_schulz_flops(int rows, int cols, int steps) {
  double s = rows < cols ? rows : cols, l = rows < cols ? cols : rows;
  return steps * (4.0 * s * s * l + 2.0 * s * s * s);
}

/* X (s, l) wide, in place: five quintic steps. A, AA, BX: scratch (s,s), (s,s), (s,l). */
static void ns_wide(float *X, int s, int l, int steps, float *A, float *B, float *Y) {
  double sq = 0;
  for (int64_t i = 0; i < (int64_t)s * l; i++) sq += (double)X[i] * X[i];
  float inv = (float)(1.0 / (sqrt(sq) + 1e-7)); /* spectral norm <= Frobenius norm <= 1 */
  for (int64_t i = 0; i < (int64_t)s * l; i++) X[i] *= inv;
  for (int k = 0; k < steps; k++) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, l, 1.0f, X, l, X, l, 0.0f, A, s); /* X X^T */
    for (int64_t i = 0; i < (int64_t)s * s; i++) B[i] = NS_B * A[i];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, NS_C, A, s, A, s, 1.0f, B, s); /* +cAA */
    memcpy(Y, X, (size_t)s * l * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, l, s, 1.0f, B, s, Y, l, NS_A, X, l); /* aX+BX */
  }
}

void op_newton_schulz(float *X, int rows, int cols, int steps) {
  ops_blas_init();
  int tall = rows > cols, s = tall ? cols : rows, l = tall ? rows : cols;
  int64_t n = (int64_t)rows * cols;
  float *A = xmalloc((size_t)(2 * (int64_t)s * s + 2 * n) * sizeof(float), "newton-schulz scratch");
  float *B = A + (int64_t)s * s, *Y = B + (int64_t)s * s, *W = Y + n;
  if (!tall) {
    ns_wide(X, s, l, steps, A, B, Y);
    free(A);
    return;
  }
  for (int r = 0; r < rows; r++) /* the transpose: (cols, rows) */
    for (int c = 0; c < cols; c++) W[(int64_t)c * rows + r] = X[(int64_t)r * cols + c];
  ns_wide(W, s, l, steps, A, B, Y);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) X[(int64_t)r * cols + c] = W[(int64_t)c * rows + r];
  free(A);
}

void op_muon(device_t dev, float *w, const void *grad, dtype_t gdt, float *mom, int rows, int cols,
             const muon_hp_t *hp, float gscale) {
  int64_t n = (int64_t)rows * cols;
  /* host copies: w, mom, the update (a CUDA run only pays the copies; the CPU one works in place) */
  float *hw = w, *hm = mom, *u = xmalloc((size_t)n * sizeof(float), "muon update");
  const void *hg = grad;
  void *gcopy = NULL;
  if (dev != DEV_CPU) {
    hw = xmalloc((size_t)n * 4, "muon w"), hm = xmalloc((size_t)n * 4, "muon m");
    gcopy = xmalloc((size_t)n * dtype_size(gdt), "muon grad");
    dev_memcpy(DEV_CPU, hw, dev, w, (size_t)n * 4);
    dev_memcpy(DEV_CPU, hm, dev, mom, (size_t)n * 4);
    dev_memcpy(DEV_CPU, gcopy, dev, grad, (size_t)n * dtype_size(gdt));
    hg = gcopy;
  }
  float beta = hp->momentum;
  for (int64_t i = 0; i < n; i++) {
    float g = gscale * dt_load(hg, gdt, i);
    hm[i] = beta * hm[i] + (1.0f - beta) * g;
    u[i] = (1.0f - beta) * g + beta * hm[i]; /* Nesterov */
  }
  op_newton_schulz(u, rows, cols, hp->ns_steps);
  float shape = rows > cols ? (float)sqrt((double)rows / cols) : 1.0f; /* max(1, rows/cols)^0.5 */
  float keep = 1.0f - hp->lr * hp->weight_decay;
  float step = hp->lr * shape;
  for (int64_t i = 0; i < n; i++) hw[i] = keep * hw[i] - step * u[i];
  if (dev != DEV_CPU) {
    dev_memcpy(dev, w, DEV_CPU, hw, (size_t)n * 4);
    dev_memcpy(dev, mom, DEV_CPU, hm, (size_t)n * 4);
    free(hw), free(hm), free(gcopy);
  }
  free(u);
}
