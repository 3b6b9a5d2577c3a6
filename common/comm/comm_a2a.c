/* comm_a2a.c — the all-to-all: rank r's block j goes to rank j, where it becomes block r (the
 * transpose of an N×N matrix of blocks; comm.h, "all-to-all"): its blocks, counters, staging, the
 * vendor call or the pairwise exchange of solutions/alltoall.c, and its issue with the checks of
 * the equal and the v form. The split check itself is in comm_checks.c.
 * Notes: notes/01-collectives.md, "All-to-all". */
#include "comm_internal.h" // struct comm, comm_task_t, comm_submit, comm_stage_buf, comm_run_coll ...
#include "check.h"         // die_on_rank, xmalloc, xcalloc
#include "device.h"        // dev_memcpy
#include "alltoall.h"      // pairwise_all_to_all
#include <stdlib.h>        // free

/* Block j of a task's send side (side 0) or recv side (side 1): its elements and its offset. */
int64_t comm_a2a_n(const comm_t *c, const comm_task_t *t, int side, int j) {
  return t->a2a ? t->a2a[(2 * side) * c->world + j] : t->numel / c->world;
}
static int64_t a2a_lo(const comm_t *c, const comm_task_t *t, int side, int j) {
  return t->a2a ? t->a2a[(2 * side + 1) * c->world + j] : j * (t->numel / c->world);
}
/* Elements from the start of that side's buffer to the end of its last block. */
static int64_t a2a_extent(const comm_t *c, const comm_task_t *t, int side) {
  int64_t x = 0;
  for (int j = 0; j < c->world; j++)
    if (comm_a2a_n(c, t, side, j) > 0 && a2a_lo(c, t, side, j) + comm_a2a_n(c, t, side, j) > x)
      x = a2a_lo(c, t, side, j) + comm_a2a_n(c, t, side, j);
  return x;
}

/* Under c->mu: every block but this rank's own, each way, and the share that crosses nodes. */
void comm_a2a_count(comm_t *c, const comm_task_t *t) {
  int N = c->world;
  int64_t esz = (int64_t)dtype_size(t->dt), *b = xcalloc(2 * (size_t)N, sizeof *b, "all_to_all counts");
  for (int j = 0; j < N; j++) {
    if (j == c->rank) continue;
    b[j] = comm_a2a_n(c, t, 0, j) * esz;
    b[N + j] = comm_a2a_n(c, t, 1, j) * esz;
    c->ctr.sent[CO_ALL_TO_ALL] += b[j];
    c->ctr.recvd[CO_ALL_TO_ALL] += b[N + j];
  }
  comm_topo_count_peers(c, CO_ALL_TO_ALL, b, b + N);
  free(b);
}

/* The vendor call, or the pairwise exchange of solutions/alltoall.c (COLL_RING); the equal form
 * reaches the pairwise code as counts and displacements. */
void comm_a2a_run(comm_t *c, const comm_task_t *t) {
  int N = c->world;
  if (t->kind == TASK_ALL_TO_ALL && t->impl != COLL_RING) {
    c->be->all_to_all(c, t->send, t->recv, t->numel, t->dt);
    return;
  }
  int64_t *v = t->a2a, *eq = NULL;
  if (!v) {
    v = eq = xmalloc(4 * (size_t)N * sizeof *eq, "all_to_all blocks");
    for (int j = 0; j < N; j++) {
      eq[j] = eq[2 * N + j] = t->numel / N;
      eq[N + j] = eq[3 * N + j] = j * (t->numel / N);
    }
  }
  if (t->impl == COLL_RING) pairwise_all_to_all(c, t->send, v, v + N, t->recv, v + 2 * N, v + 3 * N, t->dt);
  else c->be->all_to_allv(c, t->send, v, v + N, t->recv, v + 2 * N, v + 3 * N, t->dt);
  free(eq);
}

/* CUDA buffers on a host-only backend: the send side to the host, the call there, each received
 * block back into place (what lies between the blocks of recv stays untouched). */
void comm_a2a_staged(comm_t *c, const comm_task_t *t) {
  size_t esz = dtype_size(t->dt);
  int64_t sx = a2a_extent(c, t, 0), rx = a2a_extent(c, t, 1);
  comm_task_t h = *t;
  h.send = comm_stage_buf(c, 0, sx * (int64_t)esz);
  h.recv = comm_stage_buf(c, 1, rx * (int64_t)esz);
  if (sx > 0) dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)sx * esz);
  comm_run_coll(c, &h);
  for (int j = 0; j < c->world; j++) {
    int64_t lo = a2a_lo(c, t, 1, j), n = comm_a2a_n(c, t, 1, j);
    if (n > 0)
      dev_memcpy(DEV_CUDA, (char *)t->recv + lo * (int64_t)esz, DEV_CPU, (char *)h.recv + lo * (int64_t)esz,
                 (size_t)n * esz);
  }
}

/* Issue one all-to-all task: send and recv must not overlap; in exercise mode the bytes it reads
 * (send, to its last block) and writes (recv, likewise) are checked and tracked as the other
 * collectives' are (comm_track_check, comm_track_open). */
static comm_handle_t a2a_submit(comm_t *c, const char *fn, comm_task_t *t, const char *tag) {
  int64_t esz = (int64_t)dtype_size(t->dt), sn = a2a_extent(c, t, 0) * esz, rn = a2a_extent(c, t, 1) * esz;
  const char *s = t->send, *r = t->recv;
  if (s && r && sn > 0 && rn > 0 && s < r + rn && r < s + sn)
    die_on_rank("%s: send and recv overlap; the all-to-all has no in-place form (use two buffers)", fn);
  comm_track_check(c, fn, tag, s, sn, r, rn);
  comm_handle_t h = comm_submit(c, t, tag);
  comm_track_open(c, h, fn, tag, 0, s, sn, r, rn);
  return h;
}

static comm_handle_t all_to_all_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                      const char *tag, const char *fn) {
  comm_check_args(c, fn, numel, dt, 0, 0);
  if (numel % c->world != 0)
    die_on_rank("%s: numel %lld is not divisible by the %d ranks: equal blocks need numel = N·block (uneven "
                "splits: comm_all_to_allv)", fn, (long long)numel, c->world);
  comm_task_t t = comm_task_make(TASK_ALL_TO_ALL, CO_ALL_TO_ALL, c, send, recv, numel, dt, REDOP_SUM, 0);
  t.recv_numel = numel;
  return a2a_submit(c, fn, &t, tag);
}

static comm_handle_t all_to_allv_async(comm_t *c, const void *send, const int64_t *send_counts,
                                       const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                                       const int64_t *recv_displs, dtype_t dt, const char *tag,
                                       const char *fn) {
  comm_check_args(c, fn, 0, dt, 0, 0);
  if (!send_counts || !recv_counts)
    die_on_rank("%s: send_counts and recv_counts are required (displs may be NULL: packed)", fn);
  int N = c->world;
  int64_t *v = xmalloc(4 * (size_t)N * sizeof *v, "all_to_allv counts"), ns = 0, nr = 0;
  const int64_t *src[4] = {send_counts, send_displs, recv_counts, recv_displs};
  static const char *const what[4] = {"send_counts", "send_displs", "recv_counts", "recv_displs"};
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < N; j++) {
      int64_t x = src[k] ? src[k][j] : (k == 1 ? ns : nr); /* displs NULL: packed, the prefix sums */
      if (x < 0) die_on_rank("%s: %s[%d] = %lld is negative", fn, what[k], j, (long long)x);
      v[k * N + j] = x;
      if (k == 0 || k == 2) continue;
      if (k == 1) ns += v[j];
      else nr += v[2 * N + j];
    }
  comm_task_t t = comm_task_make(TASK_ALL_TO_ALLV, CO_ALL_TO_ALL, c, send, recv, ns, dt, REDOP_SUM, 0);
  t.recv_numel = nr;
  t.a2a = v;
  /* the count exchange of comm_a2a_check_splits: an all-gather of 2N int64s per rank (control traffic) */
  int64_t cn = 2 * (int64_t)N * N;
  if (comm_checks_splits(c))
    comm_count_control(c, comm_model_sent(CO_ALL_GATHER, cn, DT_F64, N, c->rank, 0),
                       comm_model_recvd(CO_ALL_GATHER, cn, DT_F64, N, c->rank, 0), 0, NULL);
  return a2a_submit(c, fn, &t, tag);
}

comm_handle_t comm_all_to_all_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                    const char *tag) {
  return all_to_all_async(c, send, recv, numel, dt, tag, "comm_all_to_all_async");
}

comm_handle_t comm_all_to_allv_async(comm_t *c, const void *send, const int64_t *send_counts,
                                     const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                                     const int64_t *recv_displs, dtype_t dt, const char *tag) {
  return all_to_allv_async(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt, tag,
                           "comm_all_to_allv_async");
}

void comm_all_to_all(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  comm_wait(c, all_to_all_async(c, send, recv, numel, dt, "blocking", "comm_all_to_all"));
}

void comm_all_to_allv(comm_t *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                      void *recv, const int64_t *recv_counts, const int64_t *recv_displs, dtype_t dt) {
  comm_wait(c, all_to_allv_async(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt,
                                 "blocking", "comm_all_to_allv"));
}
