/* scn_engine.c — the progress engine's contract, one scenario per argument (driven by
 * tests/mpi/test_engine.c; common/comm/comm_engine.h):
 *   threads  the rank's thread count after comm_init and after splitting seven sub-communicators
 *            (six 2-rank groups: TP-, DP-like pairs, a pipeline-like link, a split of a split;
 *            one 4-rank group), each used twice — the link for a paired send/receive, the others
 *            for reductions: one engine thread, eight fibers, and one helper thread per group that
 *            reduced (six: the blocking reductions, comm_engine.h), none for the link, none more
 *            in the second round. Prints "threads: rank R: init T0, after splits T1, ..."; exit 1
 *            if T1 != T0 + helpers, or the engine count is not 1, or the helpers not 6. It also prints
 *            whether the engine polls while the main thread waits (test_engine.c checks it against
 *            the cores: only with a core per rank, or as ZL_ENGINE_POLL says).
 *   order    two communicators between ranks 0 and 1: 64 sends on each, interleaved, arrive in
 *            issue order with their values; then a dependency across them: rank 1 queues a
 *            receive on A and a send on B, rank 0 sends on A only after receiving on B — so a
 *            stream blocked on A's receive must not hold up B (one blocking engine thread
 *            would deadlock here). "order: ok"; FAIL lines name rank, index, got, expected.
 *   sendrecv comm_sendrecv_async crossing (both ranks send first) completes, also with
 *            ZL_SYNC_SENDS=1, vendor and ring; and matches the peer's plain send/recv.
 *   timeout  rank 0 waits (deadline 1 s) for a receive on a sub-communicator that rank 1 never
 *            sends; the job must end with "rank 0: recv (never-sent) did not complete within 1 s".
 *   none     comm_split with a negative color (MPI_UNDEFINED): rank 0 joins no group and gets NULL,
 *            the other three reduce on theirs; a split where nobody joins gives NULL everywhere; a
 *            later split of the world still lines up (the NULL ranks took part in the collective
 *            split), no fiber is made for a NULL, and comm_finalize(NULL) does nothing.
 *            "none: rank R ok" on every rank. */
#include "comm.h"        // comm_init, comm_split, comm_*_async, comm_wait, comm_set_timeout
#include "comm_engine.h" // comm_engine_stats
#include "cpuuse.h"      // cpuuse_now: the process's thread count
#include <stdio.h>       // printf
#include <string.h>      // strcmp
#include <unistd.h>      // sleep

static int threads_case(comm_t *w) {
  int r = comm_rank(w), n = comm_world(w);
  int t0 = cpuuse_now().nthreads;
  enum { NSUB = 7 };
  comm_t *sub[NSUB];
  sub[0] = comm_split(w, r % 2, r);             /* "TP" pairs */
  sub[1] = comm_split(w, r / 2, r);             /* "DP" pairs */
  sub[2] = comm_split(w, r == 0 || r == 3, r);  /* another pairing */
  sub[3] = comm_split(w, r / 2, n - r);         /* a pipeline-like link: sends and receives only */
  sub[4] = comm_split(w, r / 2, r);
  sub[5] = comm_split(sub[0], 0, r);            /* a split of a split */
  sub[6] = comm_split(w, 0, r);                 /* the one group of 4 */
  enum { LINK = 3 };
  for (int rep = 0; rep < 2; rep++)             /* a second round adds nothing */
    for (int i = 0; i < NSUB; i++) {
      if (i == LINK) { /* the link's two ranks swap a value: a link never reduces, so it gets no helper */
        int me = comm_rank(sub[i]), peer = 1 - me;
        float out = (float)(10 * r + rep), in = -1;
        comm_wait(sub[i], comm_sendrecv_async(sub[i], &out, 1, peer, &in, 1, peer, DT_F32, "link"));
        float want = (float)(10 * (r % 2 ? r - 1 : r + 1) + rep);
        if (in != want) {
          printf("FAIL rank %d: the link's exchange: got %g, expected %g\n", r, in, want);
          return 1;
        }
        continue;
      }
      double v = 1;
      comm_ctl_all_reduce_f64(sub[i], &v, 1, REDOP_SUM);
      float x[3] = {1, 2, 3};
      comm_wait(sub[i], comm_all_reduce_async(sub[i], x, 3, DT_F32, REDOP_SUM, "threads"));
      if (v != comm_world(sub[i]) || x[2] != 3.0f * (float)comm_world(sub[i])) {
        printf("FAIL rank %d: sub-communicator %d: sum %g (expected %d), x[2] %g\n", r, i, v,
               comm_world(sub[i]), x[2]);
        return 1;
      }
    }
  int t1 = cpuuse_now().nthreads;
  comm_engine_stats_t s = comm_engine_stats();
  char line[200];
  snprintf(line, sizeof line,
           "threads: rank %d: init %d, after splits %d, engine threads %d, helpers %d, fibers %d, "
           "polls when waited %d\n",
           r, t0, t1, s.engine_threads, s.helper_threads, s.fibers, s.poll_when_waited);
  comm_print_ordered(w, line);
  int bad = t1 != t0 + s.helper_threads || s.engine_threads != 1 || s.helper_threads != NSUB - 1 ||
      s.fibers != NSUB + 1;
  if (bad)
    printf(
        "FAIL rank %d: %d threads after init, %d after %d splits (engine threads %d, helpers %d: expected 1 "
        "and %d, one per group that reduced, none for the link; fibers %d)\n",
        r, t0, t1, NSUB, s.engine_threads, s.helper_threads, NSUB - 1, s.fibers);
  for (int i = NSUB - 1; i >= 0; i--) comm_finalize(sub[i]);
  return bad;
}

static int order_case(comm_t *w) {
  int r = comm_rank(w);
  comm_t *a = comm_split(w, r < 2 ? 0 : 1, r), *b = comm_split(w, r < 2 ? 0 : 1, r);
  if (r >= 2) { comm_finalize(b), comm_finalize(a); return 0; }
  enum { K = 64 };
  float va[K], vb[K];
  comm_handle_t ha[K], hb[K];
  for (int i = 0; i < K; i++) {
    if (r == 0) {
      va[i] = (float)i, vb[i] = 1000.0f + (float)i;
      ha[i] = comm_send_async(a, &va[i], 1, DT_F32, 1, "order a");
      hb[i] = comm_send_async(b, &vb[i], 1, DT_F32, 1, "order b");
    } else {
      va[i] = vb[i] = -1;
      hb[i] = comm_recv_async(b, &vb[i], 1, DT_F32, 0, "order b");
      ha[i] = comm_recv_async(a, &va[i], 1, DT_F32, 0, "order a");
    }
  }
  int bad = 0;
  for (int i = 0; i < K; i++) comm_wait(a, ha[i]), comm_wait(b, hb[i]);
  for (int i = 0; i < K && !bad; i++)
    if (va[i] != (float)i || vb[i] != 1000.0f + (float)i) {
      printf("FAIL rank %d: message %d: got a %g b %g, expected a %d b %d\n", r, i, va[i], vb[i], i,
             1000 + i);
      bad = 1;
    }
  /* the dependency across streams */
  float x = 0, y = 7;
  if (r == 1) {
    comm_handle_t hr = comm_recv_async(a, &x, 1, DT_F32, 0, "dep a");
    comm_handle_t hs = comm_send_async(b, &y, 1, DT_F32, 0, "dep b");
    comm_wait(a, hr);
    comm_wait(b, hs);
    if (x != 8.0f) printf("FAIL rank 1: dependent message got %g, expected 8\n", x), bad = 1;
  } else {
    comm_handle_t hr = comm_recv_async(b, &y, 1, DT_F32, 1, "dep b");
    comm_wait(b, hr);
    x = y + 1;
    comm_handle_t hs = comm_send_async(a, &x, 1, DT_F32, 1, "dep a");
    comm_wait(a, hs);
  }
  if (!bad && r == 0) printf("order: ok\n");
  fflush(stdout);
  comm_finalize(b);
  comm_finalize(a);
  return bad;
}

/* comm_sendrecv_async between ranks 0 and 1, both sending first (the crossing that deadlocks with
 * plain sends under ZL_SYNC_SENDS=1, tests/mpi/scn_sync_sends.c): each pair is one operation, so
 * it completes; then a pair against the peer's plain comm_recv_async + comm_send_async (the
 * messages match across the two forms). Vendor and ring implementations. */
static int sendrecv_case(comm_t *w) {
  int r = comm_rank(w), bad = 0;
  comm_t *c = comm_split(w, r < 2 ? 0 : 1, r);
  if (r < 2) {
    int peer = 1 - r;
    for (int impl = 0; impl < 2; impl++) {
      comm_set_impl(c, impl ? COLL_RING : COLL_VENDOR);
      for (int k = 0; k < 8; k++) {
        float mine[5], theirs[5] = {0};
        for (int i = 0; i < 5; i++) mine[i] = (float)(100 * r + 10 * k + i);
        comm_wait(c, comm_sendrecv_async(c, mine, 5, peer, theirs, 5, peer, DT_F32, "pair"));
        for (int i = 0; i < 5 && !bad; i++)
          if (theirs[i] != (float)(100 * peer + 10 * k + i)) {
            printf("FAIL rank %d: %s pair %d, element %d: got %g, expected %d\n", r, impl ? "ring" : "vendor",
                   k, i, theirs[i], 100 * peer + 10 * k + i);
            bad = 1;
          }
      }
      float a = (float)(r + 1), b = 0;
      if (r == 0) comm_wait(c, comm_sendrecv_async(c, &a, 1, 1, &b, 1, 1, DT_F32, "pair vs plain"));
      else {
        comm_handle_t hr = comm_recv_async(c, &b, 1, DT_F32, 0, "plain");
        comm_handle_t hs = comm_send_async(c, &a, 1, DT_F32, 0, "plain");
        comm_wait(c, hr), comm_wait(c, hs);
      }
      if (b != (float)(2 - r))
        printf("FAIL rank %d: pair vs plain got %g, expected %d\n", r, b, 2 - r), bad = 1;
    }
    comm_counters_t k = comm_counters(c);
    if (!bad && r == 0)
      printf("sendrecv: ok (send calls %lld, recv calls %lld)\n", (long long)k.calls[CO_SEND],
             (long long)k.calls[CO_RECV]);
  }
  fflush(stdout);
  comm_finalize(c);
  return bad;
}

static int timeout_case(comm_t *w) {
  int r = comm_rank(w);
  comm_t *s = comm_split(w, 0, r);
  comm_set_timeout(s, 1.0);
  float x = 0;
  if (r == 0) comm_wait(s, comm_recv_async(s, &x, 1, DT_F32, 1, "never-sent"));
  sleep(20); /* rank 1 (and the others) idle: rank 0's deadline must end the job */
  printf("FAIL rank %d: still running after rank 0's deadline\n", r);
  return 1;
}

static int none_case(comm_t *w) {
  int r = comm_rank(w), bad = 0;
  int fibers = comm_engine_stats().fibers;
  comm_t *g = comm_split(w, r == 0 ? -1 : 0, r); /* ranks 1..3 */
  comm_t *nobody = comm_split(w, -1, r);
  comm_t *pair = comm_split(w, r / 2, r);         /* {0, 1}, {2, 3}: after the NULL splits */
  if ((g == NULL) != (r == 0) || nobody)
    printf("FAIL rank %d: comm_split with color < 0 gave %s, and with every color < 0 %s\n", r,
           g ? "a communicator" : "NULL", nobody ? "a communicator" : "NULL"), bad = 1;
  if (g) {
    float x = (float)r;
    comm_all_reduce(g, &x, 1, DT_F32, REDOP_SUM);
    if (comm_world(g) != 3 || x != 6.0f)
      printf("FAIL rank %d: the group without rank 0: world %d, sum %g (expected 3, 6)\n", r, comm_world(g),
             x),
          bad = 1;
  }
  double v = (double)r;
  comm_ctl_all_reduce_f64(pair, &v, 1, REDOP_SUM);
  if (v != (r < 2 ? 1.0 : 5.0))
    printf("FAIL rank %d: the pair's sum %g after the NULL splits\n", r, v), bad = 1;
  int want = fibers + 1 + (g != NULL);
  if (comm_engine_stats().fibers != want)
    printf("FAIL rank %d: %d fibers, expected %d (none for a NULL)\n", r, comm_engine_stats().fibers, want),
        bad = 1;
  comm_finalize(pair);
  comm_finalize(nobody);
  comm_finalize(g);
  if (!bad) printf("none: rank %d ok\n", r);
  fflush(stdout);
  return bad;
}

int main(int argc, char **argv) {
  comm_t *w = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  const char *what = argc > 1 ? argv[1] : "";
  int rc = !strcmp(what, "threads") ? threads_case(w)
         : !strcmp(what, "order")   ? order_case(w)
         : !strcmp(what, "timeout") ? timeout_case(w)
         : !strcmp(what, "sendrecv") ? sendrecv_case(w)
         : !strcmp(what, "none")    ? none_case(w)
                                    : (printf("usage: scn_engine threads|order|timeout|sendrecv|none\n"), 2);
  fflush(stdout);
  if (rc) return rc; /* mpirun takes the others down */
  comm_finalize(w);
  return 0;
}
