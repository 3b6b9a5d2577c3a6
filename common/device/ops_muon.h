/* ops_muon.h — Muon's update of one weight matrix: momentum, Newton–Schulz orthogonalisation of
 * the whole matrix, the shape scaling (notes/03-zero1.md, "Muon: whole matrices, not slices").
 *
 * Keller Jordan's reference (github.com/KellerJordan/Muon, modded-nanogpt), written again here in
 * fp32 (the reference runs Newton–Schulz in bf16):
 *   m = β m + (1 − β) g                 the momentum (one fp32 state per element)
 *   u = (1 − β) g + β m                 Nesterov's look-ahead
 *   O = NS5(u)                          ≈ U V^T of u = U S V^T: every singular value pushed near 1
 *   w = (1 − lr·wd) w − lr · sqrt(max(1, rows/cols)) · O
 * NS5 works on the wide orientation (the transpose when rows > cols), scales X to Frobenius
 * norm ≤ 1, then five times X = a X + (b A + c A A) X with A = X X^T, (a, b, c) = (3.4445,
 * −4.7750, 2.0315): a quintic whose slope at 0 is large, so small singular values grow fast; it
 * stops near 1 (about 0.7 to 1.2), not at 1 — the reference's choice, kept. Deterministic: one
 * BLAS thread, fixed loops, so the same matrix gives the same bits on any rank. */
#ifndef ZL_OPS_MUON_H
#define ZL_OPS_MUON_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t

typedef struct muon_hp { float lr, momentum, weight_decay; int ns_steps; } muon_hp_t;
enum { MUON_NS_STEPS = 5 };
#define MUON_MOMENTUM 0.95f /* the reference's β */

/* X (rows, cols) fp32 on the host, row-major, replaced by NS_steps(X) (the orthogonalised matrix, same
 * shape). */
void op_newton_schulz(float *X, int rows, int cols, int steps);
/* FLOPs of op_newton_schulz on (rows, cols), multiply-add = 2: with s = min, l = max of the two,
 * each step is X X^T (2 s² l), A A (2 s³) and B X (2 s² l), so steps · (4 s² l + 2 s³). */
double op_newton_schulz_flops(int rows, int cols, int steps);
/* Muon on one whole matrix: w (rows·cols, fp32: master or fp32 params), grad (gdt) times gscale (the
 * clip and fp16's 1/S), mom (rows·cols fp32 momentum). w and mom on dev; a CUDA run copies the matrix
 * to the host for Newton–Schulz and back (notes/03-zero1.md says what that costs). */
void op_muon(device_t dev, float *w, const void *grad, dtype_t gdt, float *mom, int rows, int cols,
             const muon_hp_t *hp, float gscale);
#endif
