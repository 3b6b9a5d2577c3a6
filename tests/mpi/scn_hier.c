/* scn_hier — chapter 09's two-level all-reduce (solutions/hier.h: the exercise hier_all_reduce)
 * called directly, on the node map of ZL_NODE_OF_RANK (K nodes of g ranks), vendor and ring, fp32
 * and bf16, on sizes g and N do not divide as well as sizes they do (numel = 0, 1, g−1, g+1,
 * 2N+1, 1000+N−1, 4N, 256N): rank i of its node owns chunk i of comm.h's chunking, comm_chunk_lo(numel,
 * g, i), never i·(numel/g).
 *   values   every element of every rank = the exact sum over the N ranks of (r+1)·(k mod 7 + 1);
 *   bytes    the bytes each rank's operations sent across nodes (the world's, the node group's and
 *            the cross group's counters together, comm.h "topology") = the two-level formula: its
 *            all-reduce across the K nodes of its own piece, comm_chunk_numel(numel, g, i)
 *            elements — 2(K−1)/K of the piece when K divides it; checked only when every value of
 *            the case was right, and then named "values right, but ...": another pattern;
 *   waits    every handle hier_all_reduce issued is waited for when it returns (exercise mode,
 *            comm_expect_waited; the comm layer names a dropped one).
 * One line per failing case and rank: the case (sizes, dtype, implementation), the rank, the first
 * wrong index, got and expected, how many are wrong; `scn_hier: ok (K cases)` on success. Driven by
 * tests/mpi/test_nodes.c. */
#include "comm.h"   // comm_t, comm_*, comm_model_sent
#include "check.h"  // xmalloc, xcalloc
#include "dtype.h"  // dt_load, dt_store, dtype_size, dtype_name
#include "hier.h"   // hier_t, hier_init, hier_all_reduce, hier_free (solutions/ or exercises/)
#include "zl_scn.h" // fail, g_rank, g_fails
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // free

static int g_cases;

/* Rank r's input element k: (r+1)·(k mod 7 + 1): every sum exact in fp32 and bf16 (at most 8·9/2·7). */
static float input(int r, int64_t k) { return (float)((r + 1) * (int)(k % 7 + 1)); }

/* Bytes this rank's operations on c sent across nodes since the reset (the ring model; control
 * traffic apart). */
static int64_t inter_sent(comm_t *c) {
  comm_wait_all(c);
  comm_counters_t k = comm_counters(c);
  int64_t s = 0;
  for (int op = 0; op < CO_NOPS; op++)
    if (op != CO_CONTROL) s += k.inter_sent[op];
  return s;
}

/* One case's outcome on this rank. */
typedef struct outcome {
  char what[200];
  int64_t numel, wrong, first; /* wrong elements, the first one's index */
  double got, want;            /* at the first wrong one */
  int64_t sent, formula;       /* bytes across nodes: measured, the two-level formula */
  int chunk;                   /* the node's chunk the first wrong element sits in */
} outcome_t;

static outcome_t run_case(comm_t *c, hier_t *h, int64_t numel, dtype_t dt, const char *impl) {
  int N = comm_world(c), r = comm_rank(c), K = comm_nodes(c), g = comm_world(h->node), i = comm_rank(h->node);
  outcome_t o = {.numel = numel, .first = -1};
  size_t esz = dtype_size(dt);
  void *buf = xmalloc((size_t)(numel + 1) * esz, "scn_hier buffer");
  for (int64_t k = 0; k < numel; k++) dt_store(buf, dt, k, input(r, k));
  snprintf(o.what, sizeof o.what, "hier_all_reduce numel=%lld (%s, %s collectives; %d nodes of g=%d ranks)",
           (long long)numel, dtype_name(dt), impl, K, g);
  comm_counters_reset(c);
  comm_counters_reset(h->node);
  comm_counters_reset(h->cross);
  comm_handle_t s0 = comm_issued(c), s1 = comm_issued(h->node), s2 = comm_issued(h->cross);
  hier_all_reduce(h, buf, numel, dt, REDOP_SUM);
  comm_expect_waited(h->node, s1, "hier_all_reduce");
  comm_expect_waited(h->cross, s2, "hier_all_reduce");
  comm_expect_waited(c, s0, "hier_all_reduce");
  for (int64_t k = 0; k < numel; k++) {
    double want = (double)(N * (N + 1) / 2) * (double)(k % 7 + 1), got = (double)dt_load(buf, dt, k);
    if (got != want && !o.wrong++) o.first = k, o.got = got, o.want = want;
  }
  while (o.first >= 0 && o.chunk + 1 < g && comm_chunk_lo(numel, g, o.chunk + 1) <= o.first) o.chunk++;
  o.sent = inter_sent(c) + inter_sent(h->node) + inter_sent(h->cross);
  int64_t piece = comm_chunk_numel(numel, g, i);
  o.formula = K > 1 ? comm_model_sent(CO_ALL_REDUCE, piece, dt, K, comm_rank(h->cross), 0) : 0;
  free(buf);
  return o;
}

int main(int argc, char **argv) {
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60);
  g_rank = comm_rank(c);
  hier_t h = hier_init(c);
  int N = comm_world(c), g = comm_world(h.node), K = comm_nodes(c);
  const int64_t sizes[] = {0, 1, g - 1, g + 1, 2 * N + 1, 1000 + N - 1, 4 * N, 256 * N};
  enum { NSIZES = sizeof sizes / sizeof sizes[0], NCASES = 2 * NSIZES * 2 };
  outcome_t *o = xmalloc(NCASES * sizeof *o, "scn_hier outcomes");
  double bad[NCASES], off[NCASES]; /* per case, over the ranks: wrong elements; ranks whose bytes are off */
  int n = 0;
  for (int impl = 0; impl < 2; impl++) {
    comm_set_impl(c, (coll_impl_t)impl);
    comm_set_impl(h.node, (coll_impl_t)impl);
    comm_set_impl(h.cross, (coll_impl_t)impl);
    for (int k = 0; k < NSIZES; k++)
      for (int d = 0; d < 2; d++, n++) {
        o[n] = run_case(c, &h, sizes[k], d ? DT_BF16 : DT_F32, impl ? "ring" : "vendor");
        bad[n] = (double)o[n].wrong;
        off[n] = o[n].sent != o[n].formula;
      }
  }
  comm_ctl_all_reduce_f64(c, bad, NCASES, REDOP_SUM);
  comm_ctl_all_reduce_f64(c, off, NCASES, REDOP_SUM);
  int first_bad = -1, first_off = -1, even_bad = 0, odd_bad = 0;
  for (int k = 0; k < NCASES; k++) {
    int even = o[k].numel % g == 0 && o[k].numel % N == 0;
    if (bad[k] > 0) {
      if (first_bad < 0) first_bad = k;
      even_bad += even, odd_bad += !even;
    } else if (off[k] > 0 && (first_off < 0 || (o[k].numel > o[first_off].numel && k < 2 * NSIZES))) {
      first_off = k; /* the largest size, fp32 vendor first: the clearest numbers */
    }
  }
  /* every rank's outcome of the case that matters, printed by rank 0 in rank order (the first line
   * is the reason): the first case with a wrong value, else the first with bytes off the formula */
  int pick = first_bad >= 0 ? first_bad : first_off;
  double *all = xcalloc((size_t)(5 * N), sizeof *all, "scn_hier outcomes of every rank");
  if (pick >= 0) {
    const outcome_t *m = &o[pick];
    double mine[5] = {(double)m->wrong, (double)m->first, m->got, m->want, (double)m->chunk};
    if (first_bad < 0) mine[0] = 0, mine[1] = (double)m->sent, mine[2] = (double)m->formula;
    for (int j = 0; j < 5; j++) all[5 * g_rank + j] = mine[j];
    comm_ctl_all_reduce_f64(c, all, 5 * N, REDOP_SUM);
  }
  if (g_rank == 0 && first_bad >= 0 && even_bad == 0)
    fail("hier_all_reduce: the sums are right for every size g = %d and N = %d divide and wrong for %d of "
         "the others: "
         "rank i's piece of a size g does not divide starts at comm_chunk_lo(numel, g, i) = numel*i/g "
         "(comm.h's "
         "chunking, the one comm_reduce_scatter uses), not at i*(numel/g)",
         g, N, odd_bad);
  for (int r = 0; g_rank == 0 && pick >= 0 && r < N; r++) {
    const double *a = &all[5 * r];
    if (first_bad >= 0 && a[0] > 0)
      fail("%s: rank %d: buf[%.0f] = %g, expected %g (the sum over the %d ranks; %.0f of %lld elements wrong "
           "on that "
           "rank, the first in chunk %.0f)",
           o[pick].what, r, a[1], a[2], a[3], N, a[0], (long long)o[pick].numel, a[4]);
    else if (first_bad < 0 && a[1] != a[2])
      fail("%s: values right, but rank %d sent %.0f bytes across nodes where the two-level all-reduce sends "
           "%.0f (its "
           "all-reduce across the %d nodes of its own piece: 2(K-1)/K of the piece's bytes): reduce-scatter "
           "inside the "
           "node, all-reduce across on the piece, all-gather inside (notes/09-nodes.md)",
           o[pick].what, r, a[1], a[2], K);
  }
  free(all);
  for (int k = 0; k < NCASES; k++) g_cases++;
  double fails = g_fails;
  comm_ctl_all_reduce_f64(c, &fails, 1, REDOP_SUM);
  if (g_rank == 0) {
    if (fails == 0) printf("scn_hier: ok (%d cases)\n", g_cases);
    else printf("scn_hier: %g failures\n", fails);
  }
  free(o);
  hier_free(&h);
  comm_finalize(c);
  return fails == 0 ? 0 : 1;
}
