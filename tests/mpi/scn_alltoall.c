/* scn_alltoall — chapter 01's all-to-all, checked nccl-tests style (notes/01-collectives.md,
 * "All-to-all"): every rank checks every element of every block it received, and that nothing
 * outside the blocks was written. Inputs are small integers that name their origin, element k of
 * the block rank i sends to rank j is ((i + 6j + 36k) mod 251) + 1: exact in f32 and bf16, and a
 * block from the wrong rank, for the wrong rank or at the wrong offset shows up as a wrong value.
 *   scn_alltoall            comm_all_to_all (blocks of 0, 1, 5 and 100003 elements) and
 *                           comm_all_to_allv (uneven splits with zeros, a rank that sends nothing
 *                           and one that receives nothing, all zero, one big block per rank, only
 *                           the own block; packed and gapped displacements), f32 and bf16, vendor
 *                           and pairwise (COLL_RING: solutions/alltoall.c); per case the counters
 *                           (CO_ALL_TO_ALL = comm_model_sent / comm_model_all_to_allv, the count
 *                           exchange under CO_CONTROL) and, for the pairwise code, its real p2p
 *                           bytes: exactly every block but its own (one hop each); then the async
 *                           calls queued back to back: all-to-all then the inverse all-to-all-v
 *                           (dispatch, then combine) returns the input.
 *   scn_alltoall sweep      (suite ch01_alltoall_long) the above plus 40 random split matrices,
 *                           f16, a sub-communicator (ranks of one parity), and the
 *                           inter-node counters on the node map of ZL_NODE_OF_RANK when set.
 *   scn_alltoall mismatch   rank 1 expects one element fewer from rank 0 than rank 0 sends it (and
 *                           with 3 ranks or more, rank 2 one more from rank 1): every rank must
 *                           stop with exit code 2 and the message naming the pairs, never hang.
 * Prints one line per failure (FAIL rank R: op case=... dtype impl: from/to rank, index, got,
 * expected), then `scn_alltoall: ok (K cases on N ranks)`; exit 1 if any rank failed. Driven by
 * tests/mpi/test_collectives.c (suites ch01_alltoall, ch01_alltoall_long). ZL_EXERCISE_TIMEOUT_S
 * (set by `make exercise`) shortens the collective deadline from 60 s: a deadlock is named fast. */
#include "comm.h"   // comm_t, comm_all_to_all, comm_all_to_allv, comm_model_*, comm_counters
#include "check.h"  // xmalloc, xcalloc
#include "dtype.h"  // dt_load, dt_store, dtype_name
#include <stdio.h>  // printf
#include <stdlib.h> // free, getenv, atof
#include <string.h> // strcmp

#define SENTINEL (-7.0f) /* what recv holds before the op: "got -7" = never written */
#define MAX_LINES 20      /* failure lines per rank */

static int g_fails, g_lines, g_cases;

/* One failure line; note (may be "") explains it further. */
static void fail(int rank, const char *op, const char *cs, dtype_t dt, const char *impl, const char *where,
                 double got, double exp, const char *note) {
  g_fails++;
  if (g_lines++ >= MAX_LINES) return;
  printf("FAIL rank %d: %s case=%s dtype=%s impl=%s: %s got %.9g expected %.9g%s\n", rank, op, cs,
         dtype_name(dt), impl, where, got, exp, note);
  fflush(stdout);
}

/* What a wrong element says: the sentinel never written; this rank's block from itself. */
static const char *note_for(float got, int own) {
  if (got == SENTINEL && own)
    return " (-7 is the sentinel recv holds beforehand: this rank's own block was never copied — it needs "
           "no "
           "message, a local copy)";
  if (got == SENTINEL) return " (-7 is the sentinel recv holds beforehand: never written)";
  return own ? " (this rank's own block: a local copy)" : "";
}

/* Element k of the block rank i sends to rank j. */
static float value(int i, int j, int64_t k) { return (float)(((i + 6 * j + 36 * k) % 251) + 1); }

/* ---- split matrices: counts(i -> j) for a world of N, by case -------------------------------- */
typedef int64_t (*split_fn)(int i, int j, int N, unsigned seed);
static int64_t s_uneven(int i, int j, int N, unsigned seed) { return (3 * i + 5 * j + 1) % 7; }
static int64_t s_edges(int i, int j, int N, unsigned seed) {
  return i == 0 || j == N - 1 ? 0 : i + 2 * j + 1;
}
static int64_t s_zero(int i, int j, int N, unsigned seed) { return 0; }
static int64_t s_big(int i, int j, int N, unsigned seed) { return j == (i + 1) % N ? 150001 : (i + j) % 3; }
static int64_t s_self(int i, int j, int N, unsigned seed) { return i == j ? 4 : 0; }
/* a hash of (seed, i, j): 0..40, a fifth of them 0 */
static int64_t s_random(int i, int j, int N, unsigned seed) {
  unsigned h = seed * 2654435761u ^ (unsigned)(i * 40503 + j * 9973 + 17);
  h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
  return h % 5 == 0 ? 0 : (int64_t)(h % 41);
}

typedef struct ctx {
  comm_t *c;
  int rank, world;
} ctx_t;

static const char *impl_name(coll_impl_t impl) { return impl == COLL_RING ? "ring (pairwise)" : "vendor"; }

/* The counters of one call against the model; for the pairwise code its real bytes too. */
static void check_counters(const ctx_t *x, const char *op, const char *cs, dtype_t dt, coll_impl_t impl,
                           int64_t want_s, int64_t want_r, int64_t want_ctl) {
  comm_counters_t k = comm_counters(x->c);
  const char *in = impl_name(impl);
  if (k.calls[CO_ALL_TO_ALL] != 1)
    fail(x->rank, op, cs, dt, in, "counter calls[all_to_all]", (double)k.calls[CO_ALL_TO_ALL], 1, "");
  if (k.sent[CO_ALL_TO_ALL] != want_s)
    fail(x->rank, op, cs, dt, in, "counter sent[all_to_all]", (double)k.sent[CO_ALL_TO_ALL], (double)want_s,
         " (every block but this rank's own, in bytes)");
  if (k.recvd[CO_ALL_TO_ALL] != want_r)
    fail(x->rank, op, cs, dt, in, "counter recvd[all_to_all]", (double)k.recvd[CO_ALL_TO_ALL], (double)want_r,
         "");
  if (k.sent[CO_CONTROL] != want_ctl)
    fail(x->rank, op, cs, dt, in, "counter sent[control]", (double)k.sent[CO_CONTROL], (double)want_ctl,
         " (the count exchange: an all-gather of 2N int64s per rank)");
  if (impl == COLL_RING) {
    if (k.p2p_sent != want_s || k.p2p_recvd != want_r)
      fail(x->rank, op, cs, dt, in, "values right, but the p2p bytes sent", (double)k.p2p_sent,
           (double)want_s,
           k.p2p_sent > want_s
               ? " (more than every block but your own, once: the pairwise exchange sends each block "
                 "straight to its owner, one hop — a block sent twice, or relayed?)"
               : " (less than every block but your own: a block never sent?)");
  } else if (k.p2p_sent != 0) {
    fail(x->rank, op, cs, dt, in, "vendor p2p_sent", (double)k.p2p_sent, 0, "");
  }
}

/* One comm_all_to_all of N blocks of `block` elements. */
static void run_equal(const ctx_t *x, dtype_t dt, int64_t block, coll_impl_t impl) {
  int N = x->world, r = x->rank;
  int64_t numel = N * block;
  char cs[48];
  snprintf(cs, sizeof cs, "block=%lld", (long long)block);
  comm_set_impl(x->c, impl);
  comm_counters_reset(x->c);
  g_cases++;
  void *s = xmalloc((size_t)(numel ? numel : 1) * dtype_size(dt), "send"),
       *q = xmalloc((size_t)(numel ? numel : 1) * dtype_size(dt), "recv");
  for (int j = 0; j < N; j++)
    for (int64_t k = 0; k < block; k++) dt_store(s, dt, j * block + k, value(r, j, k));
  for (int64_t i = 0; i < numel; i++) dt_store(q, dt, i, SENTINEL);
  comm_all_to_all(x->c, s, q, numel, dt);
  for (int i = 0; i < N; i++) /* block i came from rank i: its block r */
    for (int64_t k = 0; k < block; k++) {
      float got = dt_load(q, dt, i * block + k), exp = value(i, r, k);
      if (got != exp) {
        char where[96];
        snprintf(where, sizeof where, "block from rank %d, index %lld", i, (long long)k);
        fail(r, "all_to_all", cs, dt, impl_name(impl), where, got, exp, note_for(got, i == r));
        break;
      }
    }
  int64_t want = comm_model_sent(CO_ALL_TO_ALL, numel, dt, N, r, 0);
  if (want != (N - 1) * block * (int64_t)dtype_size(dt))
    fail(r, "all_to_all", cs, dt, impl_name(impl), "comm_model_sent", (double)want,
         (double)((N - 1) * block * (int64_t)dtype_size(dt)), " ((N−1)/N of the buffer)");
  check_counters(x, "all_to_all", cs, dt, impl, want, comm_model_recvd(CO_ALL_TO_ALL, numel, dt, N, r, 0), 0);
  free(s);
  free(q);
}

/* One comm_all_to_allv with counts f(i, j); gapped: blocks stored in reverse rank order with 2
 * elements between them (both sides), else packed (displs NULL). */
static void run_v(const ctx_t *x, dtype_t dt, const char *cs, split_fn f, unsigned seed, int gapped,
                  coll_impl_t impl) {
  int N = x->world, r = x->rank;
  int64_t *sc = xcalloc((size_t)N, sizeof *sc, "counts"), *sd = xcalloc((size_t)N, sizeof *sd, "counts");
  int64_t *rc = xcalloc((size_t)N, sizeof *rc, "counts"), *rd = xcalloc((size_t)N, sizeof *rd, "counts");
  int64_t sx = 0, rx = 0;
  for (int k = 0; k < N; k++) {
    int j = gapped ? N - 1 - k : k;
    sc[j] = f(r, j, N, seed), rc[j] = f(j, r, N, seed);
    sd[j] = sx, rd[j] = rx;
    sx += sc[j] + (gapped ? 2 : 0), rx += rc[j] + (gapped ? 2 : 0);
  }
  char name[64];
  snprintf(name, sizeof name, "%s%s", cs, gapped ? ",gapped" : "");
  comm_set_impl(x->c, impl);
  comm_counters_reset(x->c);
  g_cases++;
  void *s = xmalloc((size_t)(sx ? sx : 1) * dtype_size(dt), "send"),
       *q = xmalloc((size_t)(rx ? rx : 1) * dtype_size(dt), "recv");
  for (int64_t i = 0; i < sx; i++) dt_store(s, dt, i, SENTINEL);
  for (int j = 0; j < N; j++)
    for (int64_t k = 0; k < sc[j]; k++) dt_store(s, dt, sd[j] + k, value(r, j, k));
  for (int64_t i = 0; i < rx; i++) dt_store(q, dt, i, SENTINEL);
  comm_all_to_allv(x->c, s, sc, gapped ? sd : NULL, q, rc, gapped ? rd : NULL, dt);
  int64_t next = 0; /* recv in address order: a gap (sentinel), then the block */
  for (int k = 0; k < N; k++) {
    int i = gapped ? N - 1 - k : k;
    for (int64_t g = next; g < rd[i]; g++)
      if (dt_load(q, dt, g) != SENTINEL) {
        char where[96];
        snprintf(where, sizeof where, "recv index %lld, between the blocks (must stay untouched)",
                 (long long)g);
        fail(r, "all_to_allv", name, dt, impl_name(impl), where, dt_load(q, dt, g), SENTINEL, "");
        break;
      }
    for (int64_t e = 0; e < rc[i]; e++) {
      float got = dt_load(q, dt, rd[i] + e), exp = value(i, r, e);
      if (got != exp) {
        char where[128];
        snprintf(where, sizeof where, "block from rank %d (%lld elements at %lld), index %lld", i,
                 (long long)rc[i], (long long)rd[i], (long long)e);
        fail(r, "all_to_allv", name, dt, impl_name(impl), where, got, exp, note_for(got, i == r));
        break;
      }
    }
    next = rd[i] + rc[i];
  }
  int64_t cn = 2 * (int64_t)N * N;
  check_counters(x, "all_to_allv", name, dt, impl, comm_model_all_to_allv(sc, dt, N, r),
                 comm_model_all_to_allv(rc, dt, N, r), comm_model_sent(CO_ALL_GATHER, cn, DT_F64, N, r, 0));
  free(s), free(q), free(sc), free(sd), free(rc), free(rd);
}

/* Dispatch then combine, queued back to back with one wait: an all-to-all, then the all-to-all-v
 * with the counts transposed (what each rank received goes back where it came from), returns the
 * input; a third op (an all-to-all of the result) is queued behind and must see it. */
static void run_async(const ctx_t *x, dtype_t dt, coll_impl_t impl) {
  int N = x->world, r = x->rank;
  int64_t block = 1001, numel = N * block;
  comm_set_impl(x->c, impl);
  g_cases++;
  size_t nb = (size_t)numel * dtype_size(dt);
  void *a = xmalloc(nb, "a"), *b = xmalloc(nb, "b"), *z = xmalloc(nb, "z"), *w = xmalloc(nb, "w");
  int64_t *cnt = xcalloc((size_t)N, sizeof *cnt, "counts");
  for (int j = 0; j < N; j++) {
    cnt[j] = block;
    for (int64_t k = 0; k < block; k++) dt_store(a, dt, j * block + k, value(r, j, k));
  }
  for (int64_t i = 0; i < numel; i++) dt_store(z, dt, i, SENTINEL), dt_store(w, dt, i, SENTINEL);
  comm_handle_t h1 = comm_all_to_all_async(x->c, a, b, numel, dt, "dispatch");
  comm_handle_t h2 = comm_all_to_allv_async(x->c, b, cnt, NULL, z, cnt, NULL, dt, "combine");
  for (int j = 0; j < N; j++) cnt[j] = -1; /* the call copied them */
  comm_handle_t h3 = comm_all_to_all_async(x->c, z, w, numel, dt, "again");
  comm_wait(x->c, h3);
  if (!(h1 < h2 && h2 < h3))
    fail(r, "all_to_all async", "handles", dt, impl_name(impl), "handle order", (double)h3, (double)h1, "");
  for (int64_t i = 0; i < numel; i++)
    if (dt_load(z, dt, i) != dt_load(a, dt, i)) {
      char where[96];
      snprintf(where, sizeof where, "dispatch then combine, index %lld", (long long)i);
      fail(r, "all_to_allv async", "inverse", dt, impl_name(impl), where, dt_load(z, dt, i),
           dt_load(a, dt, i), "");
      break;
    }
  for (int i = 0; i < N; i++)
    for (int64_t k = 0; k < block; k++)
      if (dt_load(w, dt, i * block + k) != value(i, r, k)) {
        char where[96];
        snprintf(where, sizeof where, "third op, block from rank %d, index %lld", i, (long long)k);
        fail(r, "all_to_all async", "queued", dt, impl_name(impl), where, dt_load(w, dt, i * block + k),
             value(i, r, k), "");
        i = N;
        break;
      }
  free(a), free(b), free(z), free(w), free(cnt);
}

/* Every case on one communicator; sweep: the longer list. */
static void run_all(const ctx_t *x, int sweep) {
  const dtype_t dts_short[] = {DT_F32, DT_BF16}, dts_long[] = {DT_F32, DT_BF16, DT_F16};
  const dtype_t *dts = sweep ? dts_long : dts_short;
  int ndt = sweep ? 3 : 2;
  const int64_t blocks[] = {0, 1, 5, 100003};
  for (int impl = 0; impl < 2; impl++)
    for (int d = 0; d < ndt; d++) {
      coll_impl_t in = impl ? COLL_RING : COLL_VENDOR;
      for (int b = 0; b < 4; b++) run_equal(x, dts[d], blocks[b], in);
      static const struct { const char *name; split_fn f; } cases[] = {
          {"uneven", s_uneven}, {"rank0_sends_nothing,last_receives_nothing", s_edges}, {"all_zero", s_zero},
          {"one_big_block", s_big}, {"own_block_only", s_self}};
      for (int k = 0; k < 5; k++) run_v(x, dts[d], cases[k].name, cases[k].f, 0, (k + d) % 2, in);
      if (sweep)
        for (unsigned seed = 1; seed <= 40; seed++) {
          char cs[32];
          snprintf(cs, sizeof cs, "random_seed=%u", seed);
          run_v(x, dts[d], cs, s_random, seed, seed % 2, in);
        }
      run_async(x, dts[d], in);
    }
}

/* The inter-node share of the counters on the node map (ZL_NODE_OF_RANK): the blocks whose peer
 * is on another node. */
static void run_nodes(const ctx_t *x) {
  int N = x->world, r = x->rank;
  if (comm_nodes(x->c) < 2) return;
  int *node_of = xcalloc((size_t)N, sizeof *node_of, "nodes");
  for (int j = 0; j < N; j++) node_of[j] = comm_node_of(x->c, j);
  for (int impl = 0; impl < 2; impl++) {
    coll_impl_t in = impl ? COLL_RING : COLL_VENDOR;
    run_equal(x, DT_F32, 7, in);
    comm_counters_t k = comm_counters(x->c);
    int64_t mine = 0;
    for (int j = 0; j < N; j++) mine += node_of[j] != node_of[r] ? 7 * 4 : 0;
    if (k.inter_sent[CO_ALL_TO_ALL] != mine)
      fail(r, "all_to_all", "nodes", DT_F32, impl_name(in), "inter-node bytes sent",
           (double)k.inter_sent[CO_ALL_TO_ALL], (double)mine, " (the blocks for ranks on other nodes)");
    if (in == COLL_RING && k.p2p_inter_sent != mine)
      fail(r, "all_to_all", "nodes", DT_F32, impl_name(in), "p2p inter-node bytes sent",
           (double)k.p2p_inter_sent, (double)mine, "");
  }
  free(node_of);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  ctx_t x = {c, comm_rank(c), comm_world(c)};
  const char *ex = getenv("ZL_EXERCISE_TIMEOUT_S");
  comm_set_timeout(c, ex && atof(ex) > 0 ? atof(ex) : 60);
  if (strcmp(mode, "mismatch") == 0) { /* must not return: exit 2 from the split check */
    int N = x.world, r = x.rank;
    if (argc > 2 && strcmp(argv[2], "ring") == 0) comm_set_impl(c, COLL_RING);
    int64_t *sc = xcalloc((size_t)N, sizeof *sc, "counts"), *rc = xcalloc((size_t)N, sizeof *rc, "counts");
    for (int j = 0; j < N; j++) sc[j] = rc[j] = 3;
    if (r == 1) rc[0] = 2;                            /* rank 0 sends 3 to rank 1, which expects 2 */
    if (r == 2) rc[1] = 4;                            /* rank 1 sends 3 to rank 2, which expects 4 */
    float s[64] = {0}, q[64] = {0};
    comm_all_to_allv(c, s, sc, NULL, q, rc, NULL, DT_F32);
    printf("rank %d: the mismatched all_to_allv returned instead of stopping the job\n", r);
    comm_finalize(c);
    return 1;
  }
  int sweep = strcmp(mode, "sweep") == 0;
  run_all(&x, sweep);
  if (sweep) {
    run_nodes(&x);
    if (x.world >= 2) { /* a sub-communicator: the ranks of one parity, renumbered */
      comm_t *sub = comm_split(c, x.rank % 2, x.rank);
      ctx_t y = {sub, comm_rank(sub), comm_world(sub)};
      for (int impl = 0; impl < 2; impl++) {
        run_equal(&y, DT_F32, 33, impl ? COLL_RING : COLL_VENDOR);
        run_v(&y, DT_BF16, "sub_uneven", s_uneven, 0, 1, impl ? COLL_RING : COLL_VENDOR);
      }
      comm_finalize(sub);
    }
  }
  double fails = g_fails;
  comm_ctl_all_reduce_f64(c, &fails, 1, REDOP_SUM);
  if (x.rank == 0) {
    if (fails == 0) printf("scn_alltoall: ok (%d cases on %d ranks)\n", g_cases, x.world);
    else printf("scn_alltoall: %.0f failures on %d ranks\n", fails, x.world);
  }
  fflush(stdout);
  comm_finalize(c);
  return fails == 0 ? 0 : 1;
}
