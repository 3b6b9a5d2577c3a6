/* scn_collectives — one mpirun launch checks every collective (notes/01-collectives.md):
 *   every op × {F32, BF16} × numel {0, 1, N−1, N+1, 1000003} × {vendor, ring}: exact results
 *   (inputs are small integers, so every sum is exact in bf16 too, whatever the order — and so
 *   ring equals vendor bit for bit), the ring-model counters of comm.h, and the ring's real
 *   p2p bytes: optimal in total (all ranks together move exactly what comm_model_sent adds up
 *   to) and per rank within the bound of an optimal ring (the most any rank sends or receives
 *   in comm.h's model) — so a ring running either way (to r+1 or to r−1) passes; then several
 *   async ops queued back to back and one wait;
 *   the ring's scratch counted in the memory ledger (LEDGER_COMM) and given back at finalize.
 * Prints one line per failure (rank, op, dtype, numel, impl, in_place, index, got, expected), then
 * `scn_collectives: ok (K cases)` on success; exit 1 if any rank failed.
 *   scn_collectives            the checks above
 *   scn_collectives timeout    rank 0 skips an all-reduce; the others must time out after 1 s
 * Driven by tests/mpi/test_collectives.c (one launch per world size 1..5). ZL_EXERCISE_TIMEOUT_S
 * (set by `make exercise`) shortens the collective deadline from 60 s, so a deadlock is named fast. */
#include "comm.h"   // comm_t, comm_*, comm_model_sent, comm_counters
#include "check.h"  // xmalloc
#include "dtype.h"  // dt_load, dt_store, dtype_name
#include "ledger.h" // ledger_live, LEDGER_COMM
#include <stdio.h>  // printf
#include <stdlib.h> // free, getenv, atof
#include <string.h> // strcmp
#include <unistd.h> // sleep

#define SENTINEL (-7.0f) /* what output buffers hold before the op: "got -7" = never written */
#define MAX_LINES 20      /* failure lines per rank */

static int g_rank, g_world, g_fails, g_lines, g_cases;
static int g_in_place; /* the case being run uses the in-place form (recv inside send) */

/* One failure line; note (may be "") explains it further. */
static void fail_note(const char *what, const char *op, dtype_t dt, int64_t numel, const char *impl, int root,
                      int64_t index, double got, double exp, const char *note) {
  g_fails++;
  if (g_lines++ >= MAX_LINES) return;
  printf("FAIL rank %d: %s %s dtype=%s numel=%lld impl=%s root=%d in_place=%d: index %lld got %.9g expected "
         "%.9g%s\n",
         g_rank, what, op, dtype_name(dt), (long long)numel, impl, root, g_in_place, (long long)index, got,
         exp, note);
  fflush(stdout);
}
static void fail_line(const char *what, const char *op, dtype_t dt, int64_t numel, const char *impl, int root,
                      int64_t index, double got, double exp) {
  const char *note = got == SENTINEL && exp != SENTINEL
      ? " (-7 is the sentinel the test fills the output with beforehand: this element was never written)"
      : "";
  fail_note(what, op, dt, numel, impl, root, index, got, exp, note);
}

/* Rank r's input element i: a small integer, so sums over 5 ranks (<= 60) are exact in bf16. */
static float input(int r, int64_t i) { return (float)(((i * 7 + r * 3) % 11) + 1); }
static float reduced(int64_t i, redop_t op) {
  float acc = input(0, i);
  for (int r = 1; r < g_world; r++)
    acc = op == REDOP_SUM ? acc + input(r, i) : (input(r, i) > acc ? input(r, i) : acc);
  return acc;
}

static void *buf_new(int64_t numel, dtype_t dt, float fill) {
  void *p = xmalloc((size_t)(numel ? numel : 1) * dtype_size(dt), "test buffer");
  for (int64_t i = 0; i < numel; i++) dt_store(p, dt, i, fill);
  return p;
}

/* Compare buf[0..n) with expected(off + i); reports the first mismatch only. */
typedef float (*expect_fn)(int64_t i, const void *ctx);
static void expect(const char *op, dtype_t dt, int64_t numel, const char *impl, int root, const void *buf,
                   int64_t n, int64_t off, expect_fn f, const void *ctx) {
  for (int64_t i = 0; i < n; i++) {
    float got = dt_load(buf, dt, i), exp = f(off + i, ctx);
    if (got != exp) {
      fail_line("result", op, dt, numel, impl, root, off + i, got, exp);
      return;
    }
  }
}
static float f_sum(int64_t i, const void *ctx) { return reduced(i, *(const redop_t *)ctx); }
static float f_input_of(int64_t i, const void *ctx) { return input(*(const int *)ctx, i); }
static float f_sentinel(int64_t i, const void *ctx) { return SENTINEL; }
/* all-gather: element i comes from the rank owning its chunk */
static float f_owner(int64_t i, const void *ctx) {
  int64_t numel = *(const int64_t *)ctx;
  int r = 0;
  while (comm_chunk_lo(numel, g_world, r + 1) <= i) r++;
  return input(r, i);
}

/* The ring's real p2p bytes of one call against an optimal ring: all ranks together move exactly
 * the model's total (Σ comm_model_sent), and no rank moves more than the most any rank does in the
 * model. Any optimal schedule passes: to r+1 (comm.h's model) or to r−1 (its mirror). */
static void check_ring_bytes(comm_t *c, comm_op_t op, dtype_t dt, int64_t numel, int root) {
  comm_counters_t k = comm_counters(c);
  const char *name = comm_op_name(op);
  int64_t tot_s = 0, tot_r = 0, max_s = 0, max_r = 0;
  for (int q = 0; q < g_world; q++) {
    int64_t s = comm_model_sent(op, numel, dt, g_world, q, root),
            r = comm_model_recvd(op, numel, dt, g_world, q, root);
    tot_s += s;
    tot_r += r;
    if (s > max_s) max_s = s;
    if (r > max_r) max_r = r;
  }
  if (k.p2p_sent > max_s)
    fail_note("ring p2p bytes sent by this rank", name, dt, numel, "ring", root, -1, (double)k.p2p_sent,
              (double)max_s,
              " (expected: at most this, the most any rank sends in an optimal ring; see comm_model_sent)");
  if (k.p2p_recvd > max_r)
    fail_note("ring p2p bytes received by this rank", name, dt, numel, "ring", root, -1, (double)k.p2p_recvd,
              (double)max_r, " (expected: at most this, the most any rank receives in an optimal ring)");
  double tot[2] = {(double)k.p2p_sent, (double)k.p2p_recvd}; /* every rank calls this for every ring case */
  comm_ctl_all_reduce_f64(c, tot, 2, REDOP_SUM);
  if (g_rank == 0 && (tot[0] != (double)tot_s || tot[1] != (double)tot_r))
    fail_note("ring p2p bytes of all ranks together", name, dt, numel, "ring", root, -1, tot[0],
              (double)tot_s,
              tot[0] > (double)tot_s
                  ? " (more than an optimal ring moves: a chunk sent twice, or one a rank did not need?)"
                  : " (less than every rank needs: a chunk never sent?)");
}

/* Counters of one call: the model (whatever impl ran) and, for the ring, its real p2p bytes. */
static void check_counters(comm_t *c, comm_op_t op, dtype_t dt, int64_t numel, coll_impl_t impl, int root,
                           int ncalls, int64_t exp_sent, int64_t exp_recvd) {
  comm_counters_t k = comm_counters(c);
  const char *in = impl == COLL_RING ? "ring" : "vendor", *name = comm_op_name(op);
  if (k.sent[op] != exp_sent)
    fail_line("counter sent", name, dt, numel, in, root, -1, (double)k.sent[op], (double)exp_sent);
  if (k.recvd[op] != exp_recvd)
    fail_line("counter recvd", name, dt, numel, in, root, -1, (double)k.recvd[op], (double)exp_recvd);
  if (k.calls[op] != ncalls)
    fail_line("counter calls", name, dt, numel, in, root, -1, (double)k.calls[op], ncalls);
  if (impl == COLL_RING) {
    check_ring_bytes(c, op, dt, numel, root);
  } else if (k.p2p_sent != 0) {
    fail_line("vendor p2p_sent", name, dt, numel, in, root, -1, (double)k.p2p_sent, 0);
  }
}

static void run_case(comm_t *c, comm_op_t op, dtype_t dt, int64_t numel, coll_impl_t impl, redop_t rop,
                     int root) {
  int N = g_world, r = g_rank;
  const char *in = impl == COLL_RING ? "ring" : "vendor", *name = comm_op_name(op);
  int64_t lo = comm_chunk_lo(numel, N, r), own = comm_chunk_numel(numel, N, r);
  /* bf16 cases use the in-place forms (reduce, reduce-scatter, all-gather), f32 the others */
  int in_place = dt == DT_BF16;
  g_in_place = in_place && (op == CO_REDUCE || op == CO_REDUCE_SCATTER || op == CO_ALL_GATHER);
  if (op == CO_ALL_REDUCE || op == CO_BROADCAST) g_in_place = 1; /* always in place */
  int64_t ms = comm_model_sent(op, numel, dt, N, r, root), mr = comm_model_recvd(op, numel, dt, N, r, root);
  comm_set_impl(c, impl);
  comm_counters_reset(c);
  g_cases++;
  void *x = buf_new(numel, dt, 0), *y = NULL;
  for (int64_t i = 0; i < numel; i++) dt_store(x, dt, i, input(r, i));
  switch (op) {
  case CO_BROADCAST:
    if (r != root)
      for (int64_t i = 0; i < numel; i++) dt_store(x, dt, i, SENTINEL);
    comm_broadcast(c, x, numel, dt, root);
    expect(name, dt, numel, in, root, x, numel, 0, f_input_of, &root);
    check_counters(c, op, dt, numel, impl, root, 1, ms, mr);
    break;
  case CO_REDUCE:
    y = in_place ? x : buf_new(numel, dt, SENTINEL);
    comm_reduce(c, x, y, numel, dt, rop, root);
    if (r == root) expect(name, dt, numel, in, root, y, numel, 0, f_sum, &rop);
    else if (!in_place) expect("untouched recv of", dt, numel, in, root, y, numel, 0, f_sentinel, NULL);
    check_counters(c, op, dt, numel, impl, root, 1, ms, mr);
    break;
  case CO_ALL_REDUCE:
    comm_all_reduce(c, x, numel, dt, rop);
    expect(name, dt, numel, in, -1, x, numel, 0, f_sum, &rop);
    check_counters(c, op, dt, numel, impl, 0, 1, ms, mr);
    break;
  case CO_REDUCE_SCATTER: { /* in place: recv is this rank's chunk of send */
    y = in_place ? NULL : buf_new(own, dt, SENTINEL);
    void *out = in_place ? (char *)x + lo * (int64_t)dtype_size(dt) : y;
    comm_reduce_scatter(c, x, out, numel, dt, rop);
    expect(name, dt, numel, in, -1, out, own, lo, f_sum, &rop);
    check_counters(c, op, dt, numel, impl, 0, 1, ms, mr);
    break;
  }
  case CO_ALL_GATHER: {
    y = buf_new(numel, dt, SENTINEL);
    const void *send = (char *)x + lo * (int64_t)dtype_size(dt); /* own chunk of the input */
    if (in_place) {
      for (int64_t i = 0; i < own; i++) dt_store(y, dt, lo + i, input(r, lo + i));
      send = (char *)y + lo * (int64_t)dtype_size(dt);
    }
    comm_all_gather(c, send, y, numel, dt);
    expect(name, dt, numel, in, -1, y, numel, 0, f_owner, &numel);
    check_counters(c, op, dt, numel, impl, 0, 1, ms, mr);
    break;
  }
  case CO_SEND: { /* rank 0 sends its input to every other rank in turn */
    if (N < 2) break;
    if (r == 0)
      for (int d = 1; d < N; d++) comm_send(c, x, numel, dt, d);
    else {
      y = buf_new(numel, dt, SENTINEL);
      comm_recv(c, y, numel, dt, 0);
      int zero = 0;
      expect("send/recv", dt, numel, in, 0, y, numel, 0, f_input_of, &zero);
    }
    comm_counters_t k = comm_counters(c);
    int64_t nb = numel * (int64_t)dtype_size(dt);
    int64_t want_s = r == 0 ? (N - 1) * nb : 0, want_r = r == 0 ? 0 : nb;
    if (k.sent[CO_SEND] != want_s)
      fail_line("counter sent", "send", dt, numel, in, 0, -1, (double)k.sent[CO_SEND], (double)want_s);
    if (k.recvd[CO_RECV] != want_r)
      fail_line("counter recvd", "recv", dt, numel, in, 0, -1, (double)k.recvd[CO_RECV], (double)want_r);
    if (impl == COLL_RING && (k.p2p_sent != want_s || k.p2p_recvd != want_r))
      fail_line("ring p2p_sent vs model", "send", dt, numel, in, 0, -1, (double)k.p2p_sent, (double)want_s);
    break;
  }
  default: break;
  }
  if (y != x) free(y);
  free(x);
}

/* Four dependent ops queued back to back, compute in between, one wait for the last: the
 * stream runs them in issue order, so each sees the previous one's result. */
static void run_async(comm_t *c, coll_impl_t impl, dtype_t dt) {
  int N = g_world, r = g_rank;
  const char *in = impl == COLL_RING ? "ring" : "vendor";
  g_in_place = 0;
  int64_t numel = 100003, lo = comm_chunk_lo(numel, N, r), own = comm_chunk_numel(numel, N, r);
  redop_t sum = REDOP_SUM;
  comm_set_impl(c, impl);
  g_cases++;
  void *a = buf_new(numel, dt, 0), *b = buf_new(own, dt, SENTINEL), *g = buf_new(numel, dt, SENTINEL);
  void *z = buf_new(numel, dt, 0);
  for (int64_t i = 0; i < numel; i++) dt_store(a, dt, i, input(r, i));
  int root = N - 1;
  if (r == root)
    for (int64_t i = 0; i < numel; i++) dt_store(z, dt, i, input(root, i));
  comm_handle_t h1 = comm_all_reduce_async(c, a, numel, dt, REDOP_SUM, "async.a");  /* a = Σ inputs */
  comm_handle_t h2 = comm_all_gather_async(c, (char *)a + lo * (int64_t)dtype_size(dt), g, numel, dt,
                                           "async.g"); /* g = a, once h1 is done */
  comm_handle_t h3 = comm_broadcast_async(c, z, numel, dt, root, "async.z");
  /* b = max over ranks of g */
  comm_handle_t h4 = comm_reduce_scatter_async(c, g, b, numel, dt, REDOP_MAX, "async.b");
  volatile double busy = 0; /* compute meanwhile (the overlap the stream allows) */
  for (int i = 0; i < 200000; i++) busy += (double)i * 1e-9;
  comm_wait(c, h4);
  comm_wait(c, h2); /* already complete: returns at once */
  if (!(h1 < h2 && h2 < h3 && h3 < h4))
    fail_line("handles in issue order", "async", dt, numel, in, -1, -1, (double)h4, (double)h1);
  expect("async all_reduce", dt, numel, in, -1, a, numel, 0, f_sum, &sum);
  expect("async all_gather", dt, numel, in, -1, g, numel, 0, f_sum, &sum);
  expect("async broadcast", dt, numel, in, root, z, numel, 0, f_input_of, &root);
  expect("async reduce_scatter", dt, own, in, -1, b, own, lo, f_sum, &sum); /* max of equal copies */
  free(a);
  free(b);
  free(g);
  free(z);
}

int main(int argc, char **argv) {
  int timeout_mode = argc > 1 && strcmp(argv[1], "timeout") == 0;
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  g_rank = comm_rank(c);
  g_world = comm_world(c);
  if (timeout_mode) { /* rank 0 never joins: the others must name the op and abort the job */
    comm_set_timeout(c, 1.0);
    float v = 1;
    if (g_rank != 0) comm_wait(c, comm_all_reduce_async(c, &v, 1, DT_F32, REDOP_SUM, "stuck_on_purpose"));
    else sleep(30);
    printf("rank %d: timeout scenario ended without a timeout\n", g_rank);
    comm_finalize(c);
    return 1;
  }
  const char *ex = getenv("ZL_EXERCISE_TIMEOUT_S");
  comm_set_timeout(c, ex && atof(ex) > 0 ? atof(ex) : 60);
  int N = g_world;
  int64_t sizes[] = {0, 1, N - 1, N + 1, 1000003};
  const comm_op_t ops[] = {CO_BROADCAST, CO_REDUCE, CO_ALL_REDUCE, CO_REDUCE_SCATTER, CO_ALL_GATHER, CO_SEND};
  const dtype_t dts[] = {DT_F32, DT_BF16};
  for (int o = 0; o < 6; o++)
    for (int d = 0; d < 2; d++)
      for (int s = 0; s < 5; s++)
        for (int impl = 0; impl < 2; impl++) {
          if (s == 2 && N == 1) continue; /* N−1 = 0 is already covered */
          int64_t numel = sizes[s];
          int root = (int)((numel + o) % N);                /* roots move around */
          redop_t rop = (s + d) % 3 == 2 ? REDOP_MAX : REDOP_SUM; /* max on a third of the cases */
          run_case(c, ops[o], dts[d], numel, impl ? COLL_RING : COLL_VENDOR, rop, root);
        }
  for (int impl = 0; impl < 2; impl++)
    for (int d = 0; d < 2; d++) run_async(c, impl ? COLL_RING : COLL_VENDOR, dts[d]);
  /* the ring's scratch is in the memory ledger (LEDGER_COMM): at least one chunk of the largest
   * f32 all-reduce while the communicator lives, nothing after comm_finalize */
  g_in_place = 0;
  int64_t want_comm = N > 1 ? (1000003 + N - 1) / N * 4 : 0;
  if (ledger_live(LEDGER_COMM) < want_comm)
    fail_note("ledger comm bytes", "scratch", DT_F32, 1000003, "ring", -1, -1,
              (double)ledger_live(LEDGER_COMM), (double)want_comm,
              " (at least: the ring's scratch must come from comm_scratch, which the ledger counts)");
  double fails = g_fails;
  comm_ctl_all_reduce_f64(c, &fails, 1, REDOP_SUM);
  if (g_rank == 0) {
    if (fails == 0) printf("scn_collectives: ok (%d cases on %d ranks)\n", g_cases, N);
    else printf("scn_collectives: %.0f failures on %d ranks\n", fails, N);
  }
  fflush(stdout);
  comm_finalize(c);
  if (ledger_live(LEDGER_COMM) != 0) {
    printf("FAIL rank %d: ledger comm bytes after comm_finalize: got %lld expected 0\n", g_rank,
           (long long)ledger_live(LEDGER_COMM));
    return 1;
  }
  return fails == 0 ? 0 : 1;
}
