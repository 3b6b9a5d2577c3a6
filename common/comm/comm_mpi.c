/* comm_mpi.c — the MPI backend (host buffers), MPI start-up, and control traffic for every backend.
 * Notes: notes/01-collectives.md. Every function here except comm_mpi_boot/comm_mpi_shutdown/
 * comm_mpi_split runs on the rank's engine thread (comm_engine.c), in the communicator's fiber.
 * bf16 and fp16 have no MPI type: they travel as a 2-byte contiguous type, and their sum/max are
 * user MPI_Ops that add in fp32 and round once per element (the same arithmetic as the ring). */
#include "comm_internal.h" // struct comm, comm_backend_t, comm_task_t
#include "check.h"         // CHECK_MPI, die, xmalloc, check_set_rank
#include <limits.h>        // INT_MAX
#include <stdio.h>         // fprintf: comm_mpi_fail_all
#include <stdlib.h>        // free, exit
#include <string.h>        // memcpy
#include <time.h>          // nanosleep: the backing-off wait

enum { TAG_RING = 0, TAG_USER = 1 }; /* the ring's p2p vs comm_send/comm_recv */
#define MPI_PIECE ((int64_t)1 << 30)     /* MPI counts are int: long buffers go in pieces */

typedef struct mpi_state {
  MPI_Datatype bf16;      /* 2 contiguous bytes */
  MPI_Op bf16_sum, bf16_max;
  MPI_Op fp16_sum, fp16_max; /* fp16 travels as the same 2 bytes */
  int *counts, *displs;   /* [world] chunk sizes and offsets for reduce-scatter / all-gather */
} mpi_state_t;

static mpi_state_t *st(const comm_t *c) { return (mpi_state_t *)c->be_state; }

/* ---- waiting that does not steal the core ----------------------------------------------------
 * A blocking MPI call makes Open MPI poll at full speed for as long as the peer is busy, and on
 * the rank's one engine thread (comm_engine.h) it would also hold up every other communicator.
 * So every MPI call here is nonblocking (MPI_Isend/MPI_Irecv, MPI_Iallreduce, MPI_Ibarrier ...)
 * and completed by mpi_wait_backoff: MPI_Testall, and while it is not done, yield the fiber
 * (the engine runs the other communicators' streams and backs off, 1 us doubling to 200 us, when
 * a whole round made no progress). Called outside the engine (control traffic of a non-threaded
 * backend, on the caller's thread) it backs off itself: a few tests, then sleeps doubling from
 * 1 us up to MPI_BACKOFF_MAX_NS. */
enum { MPI_SPIN_TESTS = 64 };
#define MPI_BACKOFF_MAX_NS 200000L

/* Returns MPI_SUCCESS once every request is done, else the error MPI_Testall gave (stat, when not
 * NULL, holds each request's status: which one failed, and why). */
static int mpi_wait_backoff(int n, MPI_Request *req, MPI_Status *stat) {
  long ns = 1000;
  int fiber = comm_engine_in_fiber();
  for (int i = 0;; i++) {
    int done = 0;
    int e = MPI_Testall(n, req, &done, stat ? stat : MPI_STATUSES_IGNORE);
    if (e != MPI_SUCCESS) return e;
    comm_engine_count_test();
    if (done) {
      comm_engine_progress();
      return MPI_SUCCESS;
    }
    if (fiber) {
      comm_engine_block();
      continue;
    }
    if (i < MPI_SPIN_TESTS) continue;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    if (ns < MPI_BACKOFF_MAX_NS) ns = ns * 2 < MPI_BACKOFF_MAX_NS ? ns * 2 : MPI_BACKOFF_MAX_NS;
  }
}

/* The call of the operation on c's stream, as the caller wrote it (comm.h's names), for a failure's
 * line: its caller's tag names which one. */
static const char *mpi_call_name(const comm_t *c) {
  static const char *const names[] = {
      [TASK_BROADCAST] = "comm_broadcast", [TASK_REDUCE] = "comm_reduce",
      [TASK_ALL_REDUCE] = "comm_all_reduce",
      [TASK_REDUCE_SCATTER] = "comm_reduce_scatter", [TASK_ALL_GATHER] = "comm_all_gather",
      [TASK_SEND] = "comm_send", [TASK_RECV] = "comm_recv", [TASK_SENDRECV] = "comm_sendrecv_async",
      [TASK_GROUP] = "comm_group_async", [TASK_ALL_TO_ALL] = "comm_all_to_all",
      [TASK_ALL_TO_ALLV] = "comm_all_to_allv", [TASK_BARRIER] = "comm_barrier"};
  comm_task_kind_t k = c->running.kind;
  return k >= 0 && k < (int)(sizeof names / sizeof names[0]) && names[k] ? names[k] : "a control exchange";
}

/* One request of a collective (or control traffic) on c, waited for as above; an error ends the job
 * naming the call, the MPI function and MPI's reason — a collective that fails is almost always one
 * whose ranks disagree (another size, another operation, another order). */
static _Noreturn void mpi_call_failed(comm_t *c, const char *mpi_fn, int e) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(e, s, &n);
  die_on_rank("%s (%s): %s failed: %s — do the ranks of this communicator (%d) all make the same calls, "
              "with the same sizes, in the same order?",
              mpi_call_name(c), c->running.tag[0] ? c->running.tag : "-", mpi_fn, s, c->world);
}
static void mpi_wait_call(comm_t *c, MPI_Request *r, const char *mpi_fn) {
  int e = mpi_wait_backoff(1, r, NULL);
  if (e != MPI_SUCCESS) mpi_call_failed(c, mpi_fn, e);
}

/* ---- point-to-point errors in the caller's terms ---------------------------------------------
 * What each request of a point-to-point wait was posted for, so that a failure names the call (its
 * tag), the peer, the MPI tag and the counts posted and sent — not MPI's bare "MPI_ERR_IN_STATUS".
 * The usual one: a receive posted for fewer elements than its message holds (MPI_ERR_TRUNCATE; the
 * status then carries the count that was sent). */
typedef struct mpi_posted {
  int recv;  /* 1: a receive (peer = its source), 0: a send (peer = its destination) */
  int peer, tag, count;
  MPI_Datatype ty;
} mpi_posted_t;

static const char *mpi_tag_name(int tag) {
  return tag == TAG_RING ? "the ring's" : "comm_send/comm_recv's";
}

static void mpi_wait_p2p(comm_t *c, int n, MPI_Request *req, MPI_Status *stat, const mpi_posted_t *what) {
  int e = mpi_wait_backoff(n, req, stat);
  if (e == MPI_SUCCESS) return;
  const comm_task_t *t = &c->running; /* the operation on this stream: its name and the caller's tag */
  const char *op = mpi_call_name(c), *tag = t->tag[0] ? t->tag : "-";
  for (int i = 0; e == MPI_ERR_IN_STATUS && i < n; i++) {
    int ei = stat[i].MPI_ERROR;
    if (ei == MPI_SUCCESS || ei == MPI_ERR_PENDING) continue;
    int eclass = ei;
    MPI_Error_class(ei, &eclass);
    if (eclass == MPI_ERR_TRUNCATE && what[i].recv) {
      int sent = -1;
      MPI_Get_count(&stat[i], what[i].ty, &sent);
      die_on_rank("%s (%s): the receive from rank %d (%s tag %d) was posted for %d element(s), but rank %d "
                  "sent %d (MPI_ERR_TRUNCATE): a receive must be posted for as many elements as its send "
                  "holds — compare the counts of this receive and of rank %d's matching send",
                  op, tag, what[i].peer, mpi_tag_name(what[i].tag), what[i].tag, what[i].count,
                  what[i].peer, sent, what[i].peer);
    }
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(ei, s, &len);
    die_on_rank("%s (%s): the %s %s rank %d (%s tag %d, %d element(s) posted) failed: %s", op, tag,
                what[i].recv ? "receive" : "send", what[i].recv ? "from" : "to", what[i].peer,
                mpi_tag_name(what[i].tag), what[i].tag, what[i].count, s);
  }
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(e, s, &len);
  die_on_rank("%s (%s): a wait on %d point-to-point request(s) failed: %s", op, tag, n, s);
}

/* ZL_SYNC_SENDS=1: every send is synchronous (MPI_Issend: completes only once the receiver has
 * matched it), the rendezvous semantics of ncclSend. Small CPU messages otherwise go eagerly, so a
 * send/recv ordering that would deadlock on a GPU passes here; this mode makes it hang (and the
 * --timeout-s deadline name the rank) on the laptop too. Read once. */
static int mpi_sync_sends(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("ZL_SYNC_SENDS");
    v = e && e[0] == '1' && e[1] == 0;
  }
  return v;
}

static int mpi_isend(const void *buf, int n, MPI_Datatype ty, int dst, int tag, MPI_Comm comm,
                     MPI_Request *r) {
  return mpi_sync_sends() ? MPI_Issend(buf, n, ty, dst, tag, comm, r)
                          : MPI_Isend(buf, n, ty, dst, tag, comm, r);
}

/* ---- element-wise reductions on the host (the ring's local reduce and the bf16 MPI_Ops) ---- */
__attribute__((optimize("O3"))) static void host_reduce(void *dst, const void *src, int64_t n, dtype_t dt,
                                                        redop_t op) {
  if (dt == DT_F32) {
    float *restrict d = dst;
    const float *restrict s = src;
    if (op == REDOP_SUM)
      for (int64_t i = 0; i < n; i++) d[i] += s[i];
    else
      for (int64_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i];
  } else if (dt == DT_BF16) {
    bf16_t *restrict d = dst;
    const bf16_t *restrict s = src;
    if (op == REDOP_SUM)
      for (int64_t i = 0; i < n; i++) d[i] = bf16_from_f32(bf16_to_f32(d[i]) + bf16_to_f32(s[i]));
    else
      for (int64_t i = 0; i < n; i++) d[i] = bf16_to_f32(s[i]) > bf16_to_f32(d[i]) ? s[i] : d[i];
  } else if (dt == DT_F16) {
    fp16_t *restrict d = dst;
    const fp16_t *restrict s = src;
    if (op == REDOP_SUM)
      for (int64_t i = 0; i < n; i++) d[i] = fp16_from_f32(fp16_to_f32(d[i]) + fp16_to_f32(s[i]));
    else
      for (int64_t i = 0; i < n; i++) d[i] = fp16_to_f32(s[i]) > fp16_to_f32(d[i]) ? s[i] : d[i];
  } else {
    double *restrict d = dst;
    const double *restrict s = src;
    if (op == REDOP_SUM)
      for (int64_t i = 0; i < n; i++) d[i] += s[i];
    else
      for (int64_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i];
  }
}

/* MPI_User_function: inout = in op inout. */
static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  host_reduce(inout, in, *len, DT_BF16, REDOP_SUM);
}
static void bf16_max_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  host_reduce(inout, in, *len, DT_BF16, REDOP_MAX);
}

static void fp16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  host_reduce(inout, in, *len, DT_F16, REDOP_SUM);
}
static void fp16_max_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  host_reduce(inout, in, *len, DT_F16, REDOP_MAX);
}

static MPI_Datatype mpi_type(const comm_t *c, dtype_t dt) {
  return dt == DT_F32 ? MPI_FLOAT : dt == DT_F64 ? MPI_DOUBLE : st(c)->bf16;
}
static MPI_Op mpi_op(const comm_t *c, dtype_t dt, redop_t op) {
  if (dt == DT_BF16) return op == REDOP_SUM ? st(c)->bf16_sum : st(c)->bf16_max;
  if (dt == DT_F16) return op == REDOP_SUM ? st(c)->fp16_sum : st(c)->fp16_max;
  return op == REDOP_SUM ? MPI_SUM : MPI_MAX;
}
static const char *at(const void *p, int64_t i, dtype_t dt) {
  return (const char *)p + i * (int64_t)dtype_size(dt);
}
static char *atw(void *p, int64_t i, dtype_t dt) { return (char *)p + i * (int64_t)dtype_size(dt); }
static int piece(int64_t numel, int64_t off) {
  return (int)(numel - off < MPI_PIECE ? numel - off : MPI_PIECE);
}

/* Fill counts/displs with the chunks of comm.h; they are int for MPI. */
static void chunk_layout(comm_t *c, int64_t numel, const char *fn) {
  if (numel > INT_MAX)
    die_on_rank("%s of %lld elements: the MPI backend takes at most %d per call", fn, (long long)numel,
        INT_MAX);
  for (int r = 0; r < c->world; r++) {
    st(c)->counts[r] = (int)comm_chunk_numel(numel, c->world, r);
    st(c)->displs[r] = (int)comm_chunk_lo(numel, c->world, r);
  }
}

/* ---- reductions: the blocking call, on the communicator's helper thread ----------------------
 * Open MPI's nonblocking reductions add in another order than its blocking ones once the group
 * has 3 or more ranks; the blocking call (on the communicator's helper thread, comm_engine.h)
 * keeps every result bitwise what it was. At 2 ranks each element is a+b either way, but the
 * nonblocking one is slower: MPI_Iallreduce progressed by the engine's tests moved 4.0 / 3.2 /
 * 2.5 / 1.1 GB/s at 1 / 4 / 16 / 64 MiB where the blocking call on the helper moves 5.7 / 5.0 /
 * 4.1 / 1.6 (ch01_collbench, 2 ranks, 2026-11-25), so every group size takes the helper. Without
 * MPI_THREAD_MULTIPLE (a helper may not call MPI beside the engine) the nonblocking call runs. */
typedef enum { RED_ALL_REDUCE, RED_REDUCE, RED_REDUCE_SCATTER } mpi_red_kind_t;
typedef struct mpi_red {
  mpi_red_kind_t kind;
  const void *send;
  void *recv;
  int count;          /* all-reduce, reduce */
  const int *counts;  /* reduce-scatter */
  MPI_Datatype ty;
  MPI_Op op;
  int root;
  MPI_Comm comm;
  int rc;
} mpi_red_t;

static void mpi_red_blocking(void *arg) {
  mpi_red_t *a = arg;
  switch (a->kind) {
  case RED_ALL_REDUCE: a->rc = MPI_Allreduce(a->send, a->recv, a->count, a->ty, a->op, a->comm); break;
  case RED_REDUCE: a->rc = MPI_Reduce(a->send, a->recv, a->count, a->ty, a->op, a->root, a->comm); break;
  case RED_REDUCE_SCATTER:
    a->rc = MPI_Reduce_scatter(a->send, a->recv, a->counts, a->ty, a->op, a->comm);
    break;
  }
}

static void mpi_reduction(comm_t *c, mpi_red_t *a) {
  static int multiple = -1; /* the helper calls MPI beside the engine thread: MULTIPLE only */
  if (multiple < 0) {
    int provided = 0;
    CHECK_MPI(MPI_Query_thread(&provided));
    multiple = provided >= MPI_THREAD_MULTIPLE;
  }
  a->comm = c->mpi;
  if (multiple && c->world >= 2) {
    comm_engine_run_blocking(c, mpi_red_blocking, a);
    const char *fn = a->kind == RED_ALL_REDUCE ? "MPI_Allreduce"
                     : a->kind == RED_REDUCE   ? "MPI_Reduce"
                                               : "MPI_Reduce_scatter";
    if (a->rc != MPI_SUCCESS) mpi_call_failed(c, fn, a->rc);
    return;
  }
  MPI_Request r;
  switch (a->kind) {
  case RED_ALL_REDUCE:
    CHECK_MPI(MPI_Iallreduce(a->send, a->recv, a->count, a->ty, a->op, a->comm, &r));
    break;
  case RED_REDUCE:
    CHECK_MPI(MPI_Ireduce(a->send, a->recv, a->count, a->ty, a->op, a->root, a->comm, &r));
    break;
  case RED_REDUCE_SCATTER:
    CHECK_MPI(MPI_Ireduce_scatter(a->send, a->recv, a->counts, a->ty, a->op, a->comm, &r));
    break;
  }
  mpi_wait_call(c, &r, a->kind == RED_ALL_REDUCE ? "MPI_Iallreduce" : a->kind == RED_REDUCE ? "MPI_Ireduce"
                                                                                : "MPI_Ireduce_scatter");
}

/* ---- the vendor collectives ------------------------------------------------------------------ */
static void mpi_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root) {
  for (int64_t off = 0; off < numel; off += MPI_PIECE) {
    MPI_Request r;
    CHECK_MPI(MPI_Ibcast(atw(buf, off, dt), piece(numel, off), mpi_type(c, dt), root, c->mpi, &r));
    mpi_wait_call(c, &r, "MPI_Ibcast");
  }
}

static void mpi_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op,
                       int root) {
  int in_place = c->rank == root && send == recv;
  for (int64_t off = 0; off < numel; off += MPI_PIECE) {
    mpi_red_t a = {.kind = RED_REDUCE, .send = in_place ? MPI_IN_PLACE : at(send, off, dt),
                   .recv = c->rank == root ? atw(recv, off, dt) : NULL, .count = piece(numel, off),
                   .ty = mpi_type(c, dt), .op = mpi_op(c, dt, op), .root = root};
    mpi_reduction(c, &a);
  }
}

static void mpi_all_reduce(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op) {
  for (int64_t off = 0; off < numel; off += MPI_PIECE) {
    mpi_red_t a = {.kind = RED_ALL_REDUCE, .send = MPI_IN_PLACE, .recv = atw(buf, off, dt),
                   .count = piece(numel, off), .ty = mpi_type(c, dt), .op = mpi_op(c, dt, op)};
    mpi_reduction(c, &a);
  }
}

static void mpi_reduce_scatter(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                               redop_t op) {
  if (numel == 0) return;
  chunk_layout(c, numel, "reduce_scatter");
  /* MPI forbids aliased buffers; recv inside send (own chunk, in place) goes through scratch */
  int64_t own = st(c)->counts[c->rank] * (int64_t)dtype_size(dt);
  const char *s0 = send, *r0 = recv;
  int overlap = r0 < s0 + numel * (int64_t)dtype_size(dt) && s0 < r0 + own;
  void *out = overlap ? comm_scratch(c, 0, own) : recv;
  mpi_red_t a = {.kind = RED_REDUCE_SCATTER, .send = send, .recv = out, .counts = st(c)->counts,
                 .ty = mpi_type(c, dt), .op = mpi_op(c, dt, op)};
  mpi_reduction(c, &a);
  if (overlap) memcpy(recv, out, (size_t)own);
}

static void mpi_all_gather(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  if (numel == 0) return;
  chunk_layout(c, numel, "all_gather");
  const void *own = at(recv, st(c)->displs[c->rank], dt);
  MPI_Request r;
  CHECK_MPI(MPI_Iallgatherv(send == own ? MPI_IN_PLACE : send, st(c)->counts[c->rank], mpi_type(c, dt), recv,
                            st(c)->counts, st(c)->displs, mpi_type(c, dt), c->mpi, &r));
  mpi_wait_call(c, &r, "MPI_Iallgatherv");
}

static void mpi_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst) {
  for (int64_t off = 0; off < numel; off += MPI_PIECE) {
    MPI_Request r;
    MPI_Status stat;
    mpi_posted_t w = {0, dst, TAG_USER, piece(numel, off), mpi_type(c, dt)};
    CHECK_MPI(mpi_isend(at(buf, off, dt), w.count, w.ty, dst, TAG_USER, c->mpi, &r));
    mpi_wait_p2p(c, 1, &r, &stat, &w);
  }
}

static void mpi_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src) {
  for (int64_t off = 0; off < numel; off += MPI_PIECE) {
    MPI_Request r;
    MPI_Status stat;
    mpi_posted_t w = {1, src, TAG_USER, piece(numel, off), mpi_type(c, dt)};
    CHECK_MPI(MPI_Irecv(atw(buf, off, dt), w.count, w.ty, src, TAG_USER, c->mpi, &r));
    mpi_wait_p2p(c, 1, &r, &stat, &w);
  }
}

/* ---- all-to-all (comm.h): blocks straight to their owners; no arithmetic, so no order to keep ---- */
static int int_count(int64_t n, const char *fn) {
  if (n > INT_MAX)
    die_on_rank("%s: %lld elements in one block; the MPI backend takes at most %d", fn, (long long)n,
                INT_MAX);
  return (int)n;
}

static void mpi_all_to_all(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  if (numel == 0) return;
  int b = int_count(numel / c->world, "all_to_all");
  MPI_Request r;
  CHECK_MPI(MPI_Ialltoall(send, b, mpi_type(c, dt), recv, b, mpi_type(c, dt), c->mpi, &r));
  mpi_wait_call(c, &r, "MPI_Ialltoall");
}

static void mpi_all_to_allv(comm_t *c, const void *send, const int64_t *send_counts,
                            const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                            const int64_t *recv_displs, dtype_t dt) {
  int N = c->world;
  int *v = xmalloc(4 * (size_t)N * sizeof *v, "all_to_allv counts"); /* MPI wants int */
  for (int j = 0; j < N; j++) {
    v[j] = int_count(send_counts[j], "all_to_allv");
    v[N + j] = int_count(send_displs[j], "all_to_allv");
    v[2 * N + j] = int_count(recv_counts[j], "all_to_allv");
    v[3 * N + j] = int_count(recv_displs[j], "all_to_allv");
  }
  MPI_Request r;
  MPI_Datatype ty = mpi_type(c, dt);
  CHECK_MPI(MPI_Ialltoallv(send, v, v + N, ty, recv, v + 2 * N, v + 3 * N, ty, c->mpi, &r));
  mpi_wait_call(c, &r, "MPI_Ialltoallv");
  free(v);
}

/* ---- what the ring is built from ----------------------------------------------------------- */
/* Send to dst and receive from src at once, in pieces of MPI_PIECE, with MPI tag `tag`; a side of
 * 0 elements is skipped. */
static void mpi_pair(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                     int64_t recv_numel, int src, dtype_t dt, int tag) {
  MPI_Datatype ty = mpi_type(c, dt);
  for (int64_t off = 0; off < send_numel || off < recv_numel; off += MPI_PIECE) {
    int ns = off < send_numel ? piece(send_numel, off) : 0;
    int nr = off < recv_numel ? piece(recv_numel, off) : 0;
    MPI_Request r[2];
    MPI_Status stat[2];
    mpi_posted_t w[2];
    int n = 0;
    if (nr > 0) {
      w[n] = (mpi_posted_t){1, src, tag, nr, ty};
      CHECK_MPI(MPI_Irecv(atw(recvbuf, off, dt), nr, ty, src, tag, c->mpi, &r[n++]));
    }
    if (ns > 0) {
      w[n] = (mpi_posted_t){0, dst, tag, ns, ty};
      CHECK_MPI(mpi_isend(at(sendbuf, off, dt), ns, ty, dst, tag, c->mpi, &r[n++]));
    }
    mpi_wait_p2p(c, n, r, stat, w);
  }
}

static void mpi_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                         int64_t recv_numel, int src, dtype_t dt) {
  mpi_pair(c, sendbuf, send_numel, dst, recvbuf, recv_numel, src, dt, TAG_RING);
}

/* comm_sendrecv_async: both messages with the user's tag, so they match comm_send/comm_recv. */
static void mpi_sendrecv_user(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                              int64_t recv_numel, int src, dtype_t dt) {
  mpi_pair(c, sendbuf, send_numel, dst, recvbuf, recv_numel, src, dt, TAG_USER);
}

/* comm_group_async: every receive posted, then every send, each in pieces of MPI_PIECE, all completed
 * together (a group is one operation: no piece waits for another's, as in an NCCL group). The
 * user's tag; messages to one peer in the order of ops. */
static void mpi_group(comm_t *c, int n, const comm_p2p_t *ops, dtype_t dt) {
  MPI_Datatype ty = mpi_type(c, dt);
  int nreq = 0;
  for (int i = 0; i < n; i++) nreq += (int)((ops[i].numel + MPI_PIECE - 1) / MPI_PIECE);
  /* one request per op (a piece each below 1 GiB): on the stack; the heap only for larger groups */
  enum { GROUP_STACK = 2 * COMM_GROUP_MAX };
  MPI_Request r_st[GROUP_STACK];
  MPI_Status stat_st[GROUP_STACK];
  mpi_posted_t w_st[GROUP_STACK];
  int heap = nreq > GROUP_STACK;
  MPI_Request *r = heap ? xmalloc((size_t)nreq * sizeof *r, "comm group requests") : r_st;
  MPI_Status *stat = heap ? xmalloc((size_t)nreq * sizeof *stat, "comm group statuses") : stat_st;
  mpi_posted_t *w = heap ? xmalloc((size_t)nreq * sizeof *w, "comm group requests' counts") : w_st;
  nreq = 0;
  for (int pass = 0; pass < 2; pass++) /* receives first */
    for (int i = 0; i < n; i++)
      for (int64_t off = 0; off < ops[i].numel; off += MPI_PIECE) {
        int k = piece(ops[i].numel, off);
        if (pass == 0 && ops[i].recv) {
          w[nreq] = (mpi_posted_t){1, ops[i].peer, TAG_USER, k, ty};
          CHECK_MPI(MPI_Irecv(atw(ops[i].recv, off, dt), k, ty, ops[i].peer, TAG_USER, c->mpi, &r[nreq++]));
        }
        if (pass == 1 && ops[i].send) {
          w[nreq] = (mpi_posted_t){0, ops[i].peer, TAG_USER, k, ty};
          CHECK_MPI(mpi_isend(at(ops[i].send, off, dt), k, ty, ops[i].peer, TAG_USER, c->mpi, &r[nreq++]));
        }
      }
  mpi_wait_p2p(c, nreq, r, stat, w);
  if (heap) free(w), free(stat), free(r);
}

static void mpi_local_reduce(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op) {
  host_reduce(dst, src, numel, dt, op);
}

static void mpi_local_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt) {
  memcpy(dst, src, (size_t)numel * dtype_size(dt));
}

static void *mpi_scratch_alloc(comm_t *c, int64_t nbytes) { return xmalloc((size_t)nbytes, "comm scratch"); }
static void mpi_scratch_free(comm_t *c, void *p) { free(p); }

static void mpi_finalize_backend(comm_t *c) {
  mpi_state_t *s = st(c);
  CHECK_MPI(MPI_Op_free(&s->bf16_sum));
  CHECK_MPI(MPI_Op_free(&s->bf16_max));
  CHECK_MPI(MPI_Op_free(&s->fp16_sum));
  CHECK_MPI(MPI_Op_free(&s->fp16_max));
  CHECK_MPI(MPI_Type_free(&s->bf16));
  free(s->counts);
  free(s->displs);
  free(s);
  c->be_state = NULL;
}

const comm_backend_t comm_mpi_backend = {
    .name = "mpi",
    .threaded = 1,
    .host_only = 1,
    .broadcast = mpi_broadcast,
    .reduce = mpi_reduce,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .send = mpi_send,
    .recv = mpi_recv,
    .sendrecv = mpi_sendrecv,
    .local_reduce = mpi_local_reduce,
    .local_copy = mpi_local_copy,
    .scratch_alloc = mpi_scratch_alloc,
    .scratch_free = mpi_scratch_free,
    .finalize = mpi_finalize_backend,
    .sendrecv_user = mpi_sendrecv_user,
    .all_to_all = mpi_all_to_all,
    .all_to_allv = mpi_all_to_allv,
    .group = mpi_group,
};

void comm_mpi_attach(comm_t *c) {
  mpi_state_t *s = xcalloc(1, sizeof *s, "MPI backend");
  CHECK_MPI(MPI_Type_contiguous(2, MPI_BYTE, &s->bf16));
  CHECK_MPI(MPI_Type_commit(&s->bf16));
  CHECK_MPI(MPI_Op_create(bf16_sum_fn, 1, &s->bf16_sum));
  CHECK_MPI(MPI_Op_create(bf16_max_fn, 1, &s->bf16_max));
  CHECK_MPI(MPI_Op_create(fp16_sum_fn, 1, &s->fp16_sum));
  CHECK_MPI(MPI_Op_create(fp16_max_fn, 1, &s->fp16_max));
  s->counts = xcalloc((size_t)c->world, sizeof(int), "MPI chunk counts");
  s->displs = xcalloc((size_t)c->world, sizeof(int), "MPI chunk offsets");
  c->be_state = s;
  c->be = &comm_mpi_backend;
}

/* ---- start-up and shutdown (main thread) ---------------------------------------------------- */
void comm_mpi_boot(comm_t *c, int *argc, char ***argv) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  else CHECK_MPI(MPI_Query_thread(&provided));
  CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
  check_set_rank(c->rank);
  /* The comm thread makes the MPI calls while the main thread may abort the job on a timeout. */
  if (provided < MPI_THREAD_SERIALIZED)
    die_on_rank("this MPI gives thread level %d; zerolab needs MPI_THREAD_SERIALIZED or better "
        "(its collectives run on a communication thread)", provided);
  CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi)); /* inherits MPI_ERRORS_RETURN */
  MPI_Comm node;
  CHECK_MPI(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
  CHECK_MPI(MPI_Comm_rank(node, &c->local_rank));
  CHECK_MPI(MPI_Comm_free(&node));
}

void comm_mpi_shutdown(comm_t *c) {
  CHECK_MPI(MPI_Comm_free(&c->mpi));
  if (!c->parent) CHECK_MPI(MPI_Finalize());
}

/* Called on the main thread; the parent's stream is drained, and other communicators' threads
 * may be inside MPI at the same time, which MPI_THREAD_MULTIPLE allows. */
void comm_mpi_split(comm_t *parent, comm_t *sub, int color, int key, int threaded) {
  int provided = 0;
  CHECK_MPI(MPI_Query_thread(&provided));
  if (threaded && provided < MPI_THREAD_MULTIPLE)
    die_on_rank("comm_split: this MPI gives thread level %d, and a sub-communicator's stream makes MPI calls "
                "on the engine thread while this thread splits (and a helper's blocking reductions), which "
                "needs MPI_THREAD_MULTIPLE (%d)", provided, MPI_THREAD_MULTIPLE);
  CHECK_MPI(MPI_Comm_split(parent->mpi, color, key, &sub->mpi)); /* inherits MPI_ERRORS_RETURN */
  CHECK_MPI(MPI_Comm_rank(sub->mpi, &sub->rank));
  CHECK_MPI(MPI_Comm_size(sub->mpi, &sub->world));
  MPI_Comm node;
  CHECK_MPI(MPI_Comm_split_type(sub->mpi, MPI_COMM_TYPE_SHARED, sub->rank, MPI_INFO_NULL, &node));
  CHECK_MPI(MPI_Comm_rank(node, &sub->local_rank));
  CHECK_MPI(MPI_Comm_free(&node));
}

void comm_mpi_split_none(comm_t *parent, int key) {
  MPI_Comm none = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split(parent->mpi, MPI_UNDEFINED, key, &none)); /* the parent's collective */
  if (none != MPI_COMM_NULL) die_on_rank("comm_split: MPI_UNDEFINED gave this rank a communicator");
}

/* ---- the count exchange of comm_all_to_allv, and a verdict every rank reaches (comm_internal.h) ---- */
void comm_mpi_all_gather_i64(comm_t *c, const int64_t *mine, int n, int64_t *all) {
  MPI_Request r;
  CHECK_MPI(MPI_Iallgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, c->mpi, &r));
  mpi_wait_call(c, &r, "MPI_Iallgather");
}

void comm_mpi_fail_all(comm_t *c, const char *text, int code) {
  if (c->rank == 0) fprintf(stderr, "%s\n", text);
  fflush(stdout);
  fflush(stderr);
  MPI_Request r; /* rank 0's line is out before any rank aborts the job */
  if (MPI_Ibarrier(c->mpi, &r) == MPI_SUCCESS) mpi_wait_call(c, &r, "MPI_Ibarrier");
  MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

/* ---- control traffic: host memory, for every backend ----------------------------------------- */
void comm_mpi_control(comm_t *c, comm_task_t *t) {
  MPI_Request r;
  switch (t->kind) {
  case TASK_BARRIER: CHECK_MPI(MPI_Ibarrier(c->mpi, &r)); mpi_wait_call(c, &r, "MPI_Ibarrier"); break;
  case TASK_CTL_ALL_REDUCE_F64: {
    mpi_red_t a = {.kind = RED_ALL_REDUCE, .send = MPI_IN_PLACE, .recv = t->recv, .count = (int)t->numel,
                   .ty = MPI_DOUBLE, .op = t->redop == REDOP_SUM ? MPI_SUM : MPI_MAX};
    mpi_reduction(c, &a);
    break;
  }
  case TASK_CTL_BROADCAST:
    for (int64_t off = 0; off < t->numel; off += MPI_PIECE) {
      CHECK_MPI(MPI_Ibcast((char *)t->recv + off, piece(t->numel, off), MPI_BYTE, t->peer, c->mpi, &r));
      mpi_wait_call(c, &r, "MPI_Ibcast");
    }
    break;
  case TASK_CTL_GATHER: {
    int64_t mine = t->numel, *sizes = NULL;
    if (c->rank == 0) sizes = xcalloc((size_t)c->world, sizeof *sizes, "gather sizes");
    CHECK_MPI(MPI_Igather(&mine, 1, MPI_INT64_T, sizes, 1, MPI_INT64_T, 0, c->mpi, &r));
    mpi_wait_call(c, &r, "MPI_Igather");
    int *counts = NULL, *displs = NULL;
    char *all = NULL;
    if (c->rank == 0) {
      int64_t total = 0;
      counts = xcalloc((size_t)c->world, sizeof *counts, "gather counts");
      displs = xcalloc((size_t)c->world, sizeof *displs, "gather offsets");
      for (int r = 0; r < c->world; r++) {
        if (total + sizes[r] > INT_MAX) die("rank 0: comm_ctl_gather: more than %d bytes in all", INT_MAX);
        counts[r] = (int)sizes[r];
        displs[r] = (int)total;
        total += sizes[r];
      }
      all = xmalloc((size_t)total + 1, "gathered blobs");
      all[total] = 0; /* text stays a C string */
    }
    if (mine > INT_MAX) die_on_rank("comm_ctl_gather: blob of %lld bytes is too large", (long long)mine);
    CHECK_MPI(MPI_Igatherv(t->send, (int)mine, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, c->mpi, &r));
    mpi_wait_call(c, &r, "MPI_Igatherv");
    free(counts);
    free(displs);
    *t->gather_all = all;
    *t->gather_sizes = sizes;
    break;
  }
  case TASK_CTL_ALL_TO_ALL_I64: /* numel int64 per peer, each way */
    if (t->numel > INT_MAX) die_on_rank("comm_ctl_all_to_all_i64: %lld per peer is too "
                                        "many", (long long)t->numel);
    CHECK_MPI(
        MPI_Ialltoall(t->send, (int)t->numel, MPI_INT64_T, t->recv, (int)t->numel, MPI_INT64_T, c->mpi, &r));
    mpi_wait_call(c, &r, "MPI_Ialltoall");
    break;
  default: die_on_rank("comm_mpi_control: task kind %d is not a control op", (int)t->kind);
  }
}
