/* qgz.h — ZeRO++'s qgZ: ZeRO-3's gradient reduce-scatter replaced by two all-to-alls of int4 blocks,
 * one inside the node and one across the nodes (notes/13-compression.md).
 *
 * Wang et al., ZeRO++ (arXiv 2306.10209), "quantized gradient communication". A ring
 * reduce-scatter would quantise and dequantise at every one of its N−1 hops; qgZ quantises twice on
 * any element's path. The N ranks sit on K nodes of g ranks each; (j, l) is local rank l of node j.
 *   hop 1, inside the node: rank (j, l) cuts its unit's gradient (N pieces, piece r owned by shard
 *     rank r) into g chunks, chunk l' = the K pieces owned by the ranks (0..K−1, l'), and sends
 *     chunk l' to (j, l') as int4 blocks; each receiver dequantises the g chunks and sums them: the
 *     node's sum of the K pieces owned by ranks (·, l);
 *   hop 2, across the nodes: that sum is quantised again, piece by piece, and piece j' goes to
 *     rank (j', l) (the ranks of local index l, one per node); the K arrivals, dequantised and
 *     summed, are this rank's piece of the unit, summed over all N ranks: a reduce-scatter's result.
 * An int4 block of B elements (the last one may be shorter) sends s = max|x|/7 as fp32 and
 * q = round(x/s) in [−7, 7], two to a byte; x^ = q·s, so |x − x^| <= s/2 = max|block|/14. Per element
 * of the result: |error| <= Σ_{w} s1_w/2 + Σ_{j} s2_j/2, s1_w the hop-1 scale of rank w's block
 * holding it (N of them), s2_j that of node j's partial sum in hop 2 (K): N + K quantisations.
 * Bytes a rank sends per unit of P (padded) elements, p = P/N: hop 1 (g−1)·W(K·p), inside the node;
 * hop 2 (K−1)·W(p), all across; W(n) = 4·(ceil(n/8) + ceil(n/B)) bytes. DeepSpeed:
 * "zero_quantized_gradients": true. */
#ifndef ZL_QGZ_H
#define ZL_QGZ_H
#include <stdint.h>        // int64_t, uint32_t
#include "comm.h"          // comm_t
#include "zero3_state.h"   // zero3_t, trainer_t, formula_t

/* 32-bit words of n elements in int4 blocks of B: ceil(n/8) of nibbles, then ceil(n/B) scales. */
int64_t qgz_words(int64_t n, int B);
/* x[0..n) into words (qgz_words(n, B)): the nibbles, then the fp32 scales. */
void qgz_quantise(const float *x, int64_t n, int B, uint32_t *words);
/* acc[0..n) += q·s, block by block, from qgz_quantise's words. */
void qgz_dequantise_add(const uint32_t *words, int64_t n, int B, float *acc);

/* The two groups of a shard group over K nodes of g ranks (equal sizes, or it dies naming them). */
typedef struct qgz {
  comm_t *node;   /* this node's g ranks, in rank order: rank = local index l */
  comm_t *across; /* the K ranks of local index l, one per node: rank = the node's index j */
  int K, g, B;
  int *rank_of;   /* [K·g]: the shard rank of (j, l) at j·g + l */
} qgz_t;
/* The groups over `shard` (collective over its ranks), blocks of B; qgz_free ends them. */
qgz_t *qgz_new(comm_t *shard, int B);
void qgz_free(qgz_t *q);
/* The reduce of one unit: grad[0..N·p) of this rank in, out[0..p) = this rank's piece of the sum
 * over all ranks, through the two hops (blocking; the trace names them "all-to-all int4 grads"). */
void qgz_reduce(qgz_t *q, const float *grad, int64_t p, float *out);

/* --qgz's flags against the rest, before MPI: 0, or −1 with the flag and why (one line, exit 2). */
int qgz_check_cfg(const train_cfg_t *cfg, const char **flag, char *why, int nwhy);
/* ZeRO-3's hooks with --qgz (zero3.c): the groups in zero3_init, the reduce where ZeRO-3 would
 * start a unit's reduce-scatter (its staging slot in, this rank's piece of t->grads out), the end. */
void qgz_setup(trainer_t *t, zero3_t *z);
void qgz_end_unit(trainer_t *t, zero3_t *z, int u);
void qgz_release(trainer_t *t, zero3_t *z);
/* Bytes a rank sends per step with the codes qwz, hpz, qgz on or off (0, 0, 0: ZeRO-3's on the padded
 * units), N ranks on nodes of g, blocks of B, b bytes an element: the forward gather, the backward
 * gather, the reduce (qgZ: hop 1 in the node, red_x hop 2 all across), all of them, and what crosses
 * nodes for a rank whose ring neighbour r + 1 is on another node (crosses = 1) or not. The units as
 * shard_plan pads them for N (the explorer's table of chapter 13 calls it too). */
typedef struct zeropp_bytes {
  double fwd, bwd, red, red_x, all, inter;
} zeropp_bytes_t;
zeropp_bytes_t zeropp_bytes(const model_t *m, int N, int g, int B, double b, int qwz, int hpz, int qgz,
                            int crosses);
/* ZeRO-3's bytes with any of ZeRO++'s --qwz, --hpz, --qgz (ZeRO-3's, hpZ's or qwZ's memory kept):
 * the forward gather, the backward gather, the gradient reduce, and what of them crosses nodes. */
void zeropp_formula(const trainer_t *t, formula_t *f);
/* Rank 0 prints, and the report's extras hold (zeropp_inter_bytes, zero3_inter_bytes), the mean bytes
 * across nodes per step per rank by that formula beside ZeRO-3's (ZeRO++'s "4x less"); called by
 * zero3_init when a code is on. */
void zeropp_print(trainer_t *t);
#endif
