/* powersgd.h — chapter 13's adapter: PowerSGD sends each DDP bucket as a rank-R product
 * (notes/13-compression.md).
 *
 * A bucket of n gradient elements is read as a matrix M of rows x cols (cols = ceil(sqrt(n)),
 * rows = ceil(n / cols), row-major, the tail of the last row zero: PyTorch's batched_powerSGD_hook
 * view, which needs no tensor shapes). Per step, on every rank w (Vogels et al., NeurIPS'19):
 *   M_w = g_w + e_w                    error feedback: what the last steps left out comes back
 *   P   = Σ_w M_w Q                    all-reduce 1, (rows x R); Q is last step's (warm start)
 *   P^  = orthonormal columns of P     Gram-Schmidt, the same bits on every rank
 *   Q_w = M_w^T P^;  e_w = M_w − P^ Q_w^T     the residual, before Q is summed
 *   Q   = Σ_w Q_w                      all-reduce 2, (cols x R)
 *   g^  = P^ Q^T                       what the optimizer gets: P^ P^^T Σ_w M_w
 * Bytes per rank per step: Σ_buckets 2(N−1)/N · (rows + cols)·R · 4, against 2(N−1)/N · n · 4. */
#ifndef ZL_POWERSGD_H
#define ZL_POWERSGD_H
#include <stdint.h> // int64_t, uint64_t
#include "train.h"  // strategy_t, train_cfg_t

/* One bucket's matrix: numel real elements as rows x cols, and the rank R used (<= rows <= cols). */
typedef struct psgd_shape {
  int64_t numel;
  int rows, cols, rank;
} psgd_shape_t;

/* The matrix of a bucket of numel elements at a rank of at most rank_max (clipped to rows). */
psgd_shape_t psgd_shape(int64_t numel, int rank_max);
/* P (rows x R, row-major) = M Q, Q (cols x R); M's numel floats, zero past them. Sums in double. */
void psgd_mul_q(const float *M, psgd_shape_t s, const float *Q, float *P);
/* Q (cols x R) = M^T P, P (rows x R). Sums in double. */
void psgd_mul_pt(const float *M, psgd_shape_t s, const float *P, float *Q);
/* The R columns of P (rows x R) made orthonormal in place: modified Gram-Schmidt, run twice (the
 * second pass restores the orthogonality the first loses to rounding); a column that is 0 after the
 * projections stays 0. */
void psgd_orthonormalise(float *P, int rows, int R);
/* Element (i, j) of P Q^T as a float: Σ_k P[i][k]·Q[j][k] summed in double in k order, then rounded. */
float psgd_entry(const float *P, const float *Q, int R, int i, int j);
/* The error-feedback residual, in place: e holds M_w (numel floats) and leaves as M_w − P^ Q_w^T,
 * each element fl(M − psgd_entry(P, Q_w, ...)). The exercise. */
void psgd_residual(float *e, psgd_shape_t s, const float *P, const float *Qw);
/* out (numel floats) = P Q^T, element by element psgd_entry. */
void psgd_decompress(const float *P, const float *Q, psgd_shape_t s, float *out);
/* Q's first values (cols x R): N(0, 1) from the seed, the same on every rank. */
void psgd_init_q(float *Q, psgd_shape_t s, uint64_t seed, int bucket);

/* --compress's value: 0 and *rank set for "powersgd:R" with 1 <= R <= 65536; else −1 and why. */
int powersgd_parse(const char *spec, int *rank, char *why, int nwhy);
/* The flags PowerSGD does not compose with, checked before MPI starts: 0, or −1 with the flag and
 * the reason (the chapter's main prints them as one line and exits 2). */
int powersgd_check_cfg(const train_cfg_t *cfg, const char **flag, char *why, int nwhy);
/* Bytes a rank sends per step at rank R on N ranks, the buckets of bucket_mb (ddp_assign_buckets):
 * Σ_buckets 2(N−1)/N·(rows + cols)·R·4 (the report's formula; the explorer's table of chapter 13). */
double powersgd_bytes(const model_t *m, double bucket_mb, int N, int R);
/* The strategy: chapter 02's bucketed DDP whose buckets travel compressed. */
const strategy_t *powersgd_strategy(void);
#endif
