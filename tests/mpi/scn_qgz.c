/* scn_qgz — qgZ's per-element error bound, checked on a known gradient (notes/13-compression.md,
 * solutions/qgz.h): every rank w reduces the same unit of N pieces of P elements through the two
 * int4 hops (qgz_reduce) and compares its piece with the exact sum over the ranks.
 * Gradient: element i of rank w is sin(0.37·(w + 1)·i + w)·(1 + (i / B) mod 5)·(w + 1) — blocks of
 * different sizes per rank, so the scales differ. P is a multiple of B, so each block of either
 * hop is a block [kB, (k + 1)B) of the unit. The bound per element, from what the test knows:
 *   a_w = max|block of rank w| (hop 1 quantises it: error <= a_w/14), and, per node j, the hop-2 scale
 *   from the dequantised node sum, at most (A_j + Σ_{w in j} a_w/14)/7 with A_j = max|exact node sum
 *   over the block|: error <= Σ_w a_w/14 + Σ_j (A_j + Σ_{w in j} a_w/14)/14, + 1e-5·Σ_w a_w for the
 *   float rounding. Also: some element off (the code quantises), and the bytes of the across group
 *   = (K − 1)·W(P), W(n) = 4·(ceil(n/8) + ceil(n/B)).
 * Needs 2 nodes or more: ZL_NODE_OF_RANK. Prints FAIL lines, then `scn_qgz: ok (worst error/bound R,
 * N ranks, K nodes)`; exit 1 if any rank failed. Driven by tests/mpi/test_zeropp.c. */
#include "qgz.h"    // qgz_new, qgz_reduce, qgz_words, qgz_free
#include "comm.h"   // comm_init, comm_counters, comm_node_of, comm_all_reduce
#include "check.h"  // xmalloc
#include <math.h>   // sinf, fabs, fmax
#include <stdio.h>  // printf
#include <stdlib.h> // free

#define B 32
#define P 96 /* elements per piece: three blocks */

static float grad(int w, int64_t i) {
  return sinf(0.37f * (float)(w + 1) * (float)i + (float)w) * (float)(1 + (i / B) % 5) * (float)(w + 1);
}

int main(int argc, char **argv) {
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  int N = comm_world(c), me = comm_rank(c), fails = 0;
  qgz_t *q = qgz_new(c, B);
  float *g = xmalloc((size_t)N * P * sizeof *g, "grad"), out[P];
  for (int64_t i = 0; i < (int64_t)N * P; i++) g[i] = grad(me, i);
  comm_counters_t before = comm_counters(q->across);
  qgz_reduce(q, g, P, out);
  comm_counters_t after = comm_counters(q->across);
  double worst = 0, off = 0;
  for (int k = 0; k < P; k++) {
    int64_t i = (int64_t)me * P + k, lo = i / B * B;
    double exact = 0, bound = 0, slack = 0;
    for (int j = 0; j < q->K; j++) {
      double a_node = 0, big = 0; /* Σ_{w in j} a_w/14, and A_j */
      for (int l = 0; l < q->g; l++) {
        int w = q->rank_of[j * q->g + l];
        double a = 0;
        for (int64_t e = lo; e < lo + B; e++) a = fmax(a, fabs(grad(w, e)));
        a_node += a / 14, slack += 1e-5 * a;
        exact += grad(w, i);
      }
      for (int64_t e = lo; e < lo + B; e++) {
        double s = 0;
        for (int l = 0; l < q->g; l++) s += grad(q->rank_of[j * q->g + l], e);
        big = fmax(big, fabs(s));
      }
      bound += a_node + (big + a_node) / 14;
    }
    double err = fabs(out[k] - exact);
    off = fmax(off, err);
    worst = fmax(worst, err / (bound + slack));
    if (err > bound + slack && fails++ < 10)
      printf("FAIL rank %d: element %lld: got %.9g, exact %.9g: error %.3g > bound %.3g\n", me,
             (long long)i, out[k], exact, err, bound + slack);
  }
  if (off == 0 && fails++ < 10) printf("FAIL rank %d: every element exact: nothing was quantised\n", me);
  int64_t sent = 0, want = (int64_t)(q->K - 1) * qgz_words(P, B) * 4;
  for (int op = 0; op < CO_NOPS; op++)
    if (op != CO_CONTROL) sent += after.inter_sent[op] - before.inter_sent[op];
  if (sent != want && fails++ < 10)
    printf("FAIL rank %d: %lld bytes across nodes, formula (K-1) W(P) = %lld\n", me, (long long)sent,
           (long long)want);
  float all[2] = {(float)fails, (float)worst}; /* the largest over the ranks */
  comm_all_reduce(c, all, 2, DT_F32, REDOP_MAX);
  int K = q->K;
  qgz_free(q);
  free(g);
  if (me == 0 && all[0] == 0)
    printf("scn_qgz: ok (worst error/bound %.3f, %d ranks, %d nodes)\n", all[1], N, K);
  comm_finalize(c);
  return fails ? 1 : 0;
}
