/* onebit.h — chapter 13's adapter: 1-bit Adam sends the momentum as one sign bit per element
 * (notes/13-compression.md).
 *
 * Tang et al., ICML'21 (DeepSpeed's OnebitAdam): Adam's variance v settles early, so after K warm-up
 * steps of plain AdamW (chapter 02's bucketed DDP: the gradients all-reduced, bit for bit ch02's
 * run) v is frozen and used as a fixed preconditioner; what the ranks then exchange is the
 * momentum, compressed to signs with one scale, and what the compression leaves out is fed back.
 * Per bucket of n elements, each step after the warm-up, on every rank w of N:
 *   m_w = b1·m + (1−b1)·N·g_w             the rank's own momentum (N·g_w: its own mean gradient)
 *   x = m_w + e_w;  s_w = mean|x|;  e_w = x − s_w·sign(x)        worker side, error feedback
 *   all-to-all: block j (chunk j's signs, packed 32 to a word, and s_w) goes to rank j
 *   on rank j: y = (1/N) Σ_w s_w·sign_w;  z = y + e_j;  S_j = mean|z|;  e_j = z − S_j·sign(z)
 *   all-gather of (S_j, signs of z): every rank decodes m = S_j·sign, the same bits everywhere
 *   w = w·(1 − lr·wd) − lr/(1−b1^t) · m / (sqrt(v)/sqrt(1−b2^K) + eps)      v frozen at step K
 * sign(0) = +1. A chunk is c = ceil(n / 32N)·32 elements (the last ones may be past n: padding).
 * Bytes per rank per step: Σ_buckets 2(N−1)·(1 + c/32)·4 (about 2(N−1)/N · n/8: 32x fewer than
 * the all-reduce's 2(N−1)/N · 4n), the warm-up steps the all-reduce's. */
#ifndef ZL_ONEBIT_H
#define ZL_ONEBIT_H
#include <stdint.h> // int64_t, uint32_t
#include "train.h"  // strategy_t, train_cfg_t

/* Elements per rank's chunk of a bucket of n elements over N ranks: ceil(n / 32N)·32. */
int64_t onebit_chunk(int64_t n, int N);
/* mean|x| over x[0..n), summed in double (0 when n = 0): the scale that minimises |x − s·sign(x)|. */
float onebit_scale(const float *x, int64_t n);
/* Signs of x[0..n) into words (ceil(n/32) of them; bit i%32 of word i/32 set where x[i] >= 0) and
 * err[i] = x[i] − s·sign(x[i]), what the signs leave out (x and err may be the same array). */
void onebit_pack(const float *x, int64_t n, float s, uint32_t *words, float *err);
/* out[i] = s·(bit i ? +1 : −1) for i in [0, n). */
void onebit_decode(const uint32_t *words, float s, int64_t n, float *out);

/* The flags 1-bit Adam does not compose with, checked before MPI starts: 0, or −1 with the flag
 * and why (the chapter's main prints them as one line and exits 2). */
int onebit_check_cfg(const train_cfg_t *cfg, const char **flag, const char **value, char *why, int nwhy);
/* Bytes a rank sends per step on N ranks, the buckets of bucket_mb (ddp_assign_buckets), as the mean
 * of a run of S steps whose first K (clipped to S) are all-reduces: (K·Σ 2(N−1)/N·4n + (S − K)·Σ
 * 2(N−1)(1 + c/32)·4) / S, c = onebit_chunk(n, N); *chunks (NULL: not wanted) = Σ c (the report's
 * formula; the explorer's table of chapter 13). */
double onebit_run_bytes(const model_t *m, double bucket_mb, int N, int K, int S, double *chunks);
/* The strategy: chapter 02's bucketed DDP for the warm-up, then the compressed momentum. */
const strategy_t *onebit_strategy(void);
#endif
