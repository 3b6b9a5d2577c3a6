/* comm.c — the communicator's front, the same for every backend (see comm.h, comm_internal.h).
 * Notes: notes/01-collectives.md.
 *
 * A call such as comm_all_reduce_async():
 *   1. checks its arguments and adds the ring-model bytes to the counters (comm_model_sent),
 *   2. becomes a task with the next sequence number (its handle),
 *   3. runs on the stream: the comm thread (MPI) pops tasks in order and runs each with the
 *      vendor collective or the ring code of solutions/ring.c; non-threaded backends (NCCL) run
 *      it inline, enqueueing on their CUDA stream,
 *   4. comm_wait(h) returns when done_seq >= h (or the deadline of comm_set_timeout passes). */
#include "comm_internal.h" // struct comm, comm_backend_t, comm_task_t
#include "check.h"         // CHECK_MPI, die, xmalloc, xcalloc
#include "device.h"        // dev_sync, dev_memcpy, device_cuda_select
#include "ledger.h"        // ledger_add, ledger_sub, LEDGER_COMM
#include "ring.h"          // ring_broadcast, ring_reduce, ring_all_reduce, ...
#include "alltoall.h"      // pairwise_all_to_all
#include "trace.h"         // trace_comm_event, trace_now_us
#include <errno.h>         // ETIMEDOUT
#include <stdio.h>         // snprintf, fputs
#include <stdlib.h>        // free, realloc
#include <string.h>        // memset, strlen
#include <time.h>          // clock_gettime

static const char *const g_op_names[CO_NOPS] = {"broadcast", "reduce", "all_reduce", "reduce_scatter",
                                                "all_gather", "send", "recv", "control", "all_to_all"};

const char *comm_op_name(comm_op_t op) { return (op >= 0 && op < CO_NOPS) ? g_op_names[op] : "unknown"; }

double comm_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void comm_timeout_fail(const comm_t *c, const char *op, const char *tag) {
  die_on_rank("%s (%s) did not complete within %g s", op, tag && tag[0] ? tag : "-", c->timeout_s);
}

/* ---- the ring model of the byte counters ------------------------------------------------- */
/* Elements this rank sends / receives in the ring algorithms of solutions/ring.c:
 *   reduce-scatter  sends every chunk but r,          receives every chunk but r−1
 *   all-gather      sends every chunk but r+1,        receives every chunk but r
 *   all-reduce      the two above added
 *   broadcast       chain root→…→root−1: every rank but the last sends, every rank but root receives
 *   reduce          chain root+1→…→root: every rank but root sends, every rank but root+1 receives
 *   all-to-all      no ring: block j goes straight to rank j; every block but its own, each way
 *                   (the v form counts its blocks at issue: comm_model_all_to_allv) */
static int64_t model_elems(comm_op_t op, int sent, int64_t n, int N, int r, int root) {
  if (op == CO_SEND) return sent ? n : 0;
  if (op == CO_RECV) return sent ? 0 : n;
  if (N <= 1 || op == CO_CONTROL) return 0;
  int prev = (r - 1 + N) % N, next = (r + 1) % N;
  switch (op) {
  case CO_REDUCE_SCATTER: return n - comm_chunk_numel(n, N, sent ? r : prev);
  case CO_ALL_GATHER: return n - comm_chunk_numel(n, N, sent ? next : r);
  case CO_ALL_REDUCE:
    return sent ? 2 * n - comm_chunk_numel(n, N, r) - comm_chunk_numel(n, N, next)
                : 2 * n - comm_chunk_numel(n, N, prev) - comm_chunk_numel(n, N, r);
  case CO_BROADCAST: return sent ? (r == (root - 1 + N) % N ? 0 : n) : (r == root ? 0 : n);
  case CO_REDUCE: return sent ? (r == root ? 0 : n) : (r == (root + 1) % N ? 0 : n);
  case CO_ALL_TO_ALL: return n - comm_chunk_numel(n, N, r);
  default: return 0;
  }
}

int64_t comm_model_sent(comm_op_t op, int64_t numel, dtype_t dt, int world, int rank, int root) {
  return model_elems(op, 1, numel, world, rank, root) * (int64_t)dtype_size(dt);
}
int64_t comm_model_recvd(comm_op_t op, int64_t numel, dtype_t dt, int world, int rank, int root) {
  return model_elems(op, 0, numel, world, rank, root) * (int64_t)dtype_size(dt);
}

/* ---- init / finalize ---------------------------------------------------------------------- */
static void comm_stream_main(comm_t *c);
static void track_register(comm_t *c);

/* A communicator with its lock, condition variables and task queue; no MPI, no backend yet. */
static comm_t *comm_alloc(backend_t backend, device_t dev) {
  comm_t *c = xcalloc(1, sizeof *c, "communicator");
  c->dev = dev;
  c->backend = backend;
  c->impl = COLL_VENDOR;
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t ca; /* deadlines on the monotonic clock, immune to clock changes */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv_done, &ca);
  pthread_condattr_destroy(&ca);
  c->q_cap = 64;
  c->queue = xcalloc((size_t)c->q_cap, sizeof *c->queue, "comm queue");
  const char *ex = getenv("ZL_EXERCISE_TIMEOUT_S"); /* exercise mode: name dropped handles */
  if (ex != NULL && ex[0] != '\0') track_register(c);
  return c;
}

/* ---- exercise mode: handles nobody waited for (see comm_internal.h) ------------------------ */
/* Every tracked communicator, so that an operation of one is checked against what the others
 * have in flight; their lists of open handles are read and written under g_track_mu. */
static pthread_mutex_t g_track_mu = PTHREAD_MUTEX_INITIALIZER;
static comm_t **g_tracked;
static int g_n_tracked, g_cap_tracked;

static void track_register(comm_t *c) {
  pthread_mutex_lock(&g_track_mu);
  if (g_n_tracked == g_cap_tracked) {
    g_cap_tracked = g_cap_tracked ? 2 * g_cap_tracked : 8;
    g_tracked = realloc(g_tracked, (size_t)g_cap_tracked * sizeof *g_tracked);
    if (!g_tracked) die_on_rank("out of memory tracking %d communicators", g_cap_tracked);
  }
  g_tracked[g_n_tracked++] = c;
  c->track = 1;
  pthread_mutex_unlock(&g_track_mu);
}

static void track_unregister(comm_t *c) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  for (int i = 0; i < g_n_tracked; i++)
    if (g_tracked[i] == c) g_tracked[i] = g_tracked[--g_n_tracked];
  free(c->open);
  c->open = NULL;
  c->n_open = c->cap_open = 0;
  pthread_mutex_unlock(&g_track_mu);
}

static int overlaps(const char *a, int64_t an, const char *b, int64_t bn) {
  return a && b && an > 0 && bn > 0 && a < b + bn && b < a + an;
}

/* Before c's operation `fn` reads rd_n bytes at rd and writes wr_n at wr: an operation of another
 * communicator still open (nobody waited for it) that writes what this one touches, or reads what
 * it writes, races it — the two streams do not wait for each other. Dies naming both. */
static void track_check(comm_t *c, const char *fn, const char *tag, const void *rd, int64_t rd_n, const void *wr,
                        int64_t wr_n) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  for (int k = 0; k < g_n_tracked; k++) {
    comm_t *o = g_tracked[k];
    if (o == c) continue;
    for (int i = 0; i < o->n_open; i++) {
      const struct comm_open *e = &o->open[i];
      int writes = overlaps(wr, wr_n, e->wr, e->wr_n) || overlaps(rd, rd_n, e->wr, e->wr_n);
      if (!writes && !overlaps(wr, wr_n, e->rd, e->rd_n)) continue;
      char what[96];
      snprintf(what, sizeof what, "%s (%s)", e->fn, e->tag);
      pthread_mutex_unlock(&g_track_mu);
      die_on_rank("%s (%s) %s a buffer that %s, issued earlier on another communicator and never waited for, %s: the "
                  "two communicators' streams do not wait for each other, so the two race — comm_wait that handle (on "
                  "its own communicator) before %s",
                  fn, tag && tag[0] ? tag : "-", writes ? "uses" : "writes", what, writes ? "writes" : "reads", fn);
    }
  }
  pthread_mutex_unlock(&g_track_mu);
}

/* After submit: handle h of `fn` is open (p2p: until waited by name; a collective: until a wait
 * on it or a later handle of c). */
static void track_open(comm_t *c, comm_handle_t h, const char *fn, const char *tag, int p2p, const void *rd,
                       int64_t rd_n, const void *wr, int64_t wr_n) {
  if (!c->track || h <= 0) return;
  pthread_mutex_lock(&g_track_mu);
  if (c->n_open == c->cap_open) {
    c->cap_open = c->cap_open ? 2 * c->cap_open : 16;
    c->open = realloc(c->open, (size_t)c->cap_open * sizeof *c->open);
    if (!c->open) die_on_rank("out of memory tracking %d communication handles", c->cap_open);
  }
  struct comm_open *o = &c->open[c->n_open++];
  memset(o, 0, sizeof *o);
  o->h = h;
  o->fn = fn;
  snprintf(o->tag, sizeof o->tag, "%s", tag && tag[0] ? tag : "-");
  o->p2p = p2p;
  o->rd = rd, o->rd_n = rd_n;
  o->wr = wr, o->wr_n = wr_n;
  pthread_mutex_unlock(&g_track_mu);
}

/* comm_wait(c, h): a point-to-point h is waited for by name (a later handle's wait completes it
 * too, but does not count: the code that dropped it would break the day the stream reorders or
 * the message is late); the collectives up to h are complete (the stream's order, comm.h). */
static void track_waited(comm_t *c, comm_handle_t h) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  for (int i = 0; i < c->n_open;)
    if (c->open[i].p2p ? c->open[i].h == h : c->open[i].h <= h) c->open[i] = c->open[--c->n_open];
    else i++;
  pthread_mutex_unlock(&g_track_mu);
}

/* The open handle of c with the lowest number above `since`, of point-to-point ones only when
 * p2p_only; NULL if none. Under g_track_mu. */
static const struct comm_open *first_open(const comm_t *c, comm_handle_t since, int p2p_only) {
  const struct comm_open *o = NULL;
  for (int i = 0; i < c->n_open; i++)
    if (c->open[i].h > since && (!p2p_only || c->open[i].p2p) && (!o || c->open[i].h < o->h)) o = &c->open[i];
  return o;
}

/* A step boundary (comm_wait_all, comm_finalize): a point-to-point handle never waited for by
 * name was dropped — its buffer may be reused (a send) or read (a receive) before the message
 * moved. Dies naming the first; then every open handle is complete. */
static void track_wait_all(comm_t *c) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  const struct comm_open *o = first_open(c, 0, 1);
  if (o) {
    int n = 0;
    for (int i = 0; i < c->n_open; i++) n += c->open[i].p2p;
    char what[96];
    snprintf(what, sizeof what, "%s (%s)", o->fn, o->tag);
    pthread_mutex_unlock(&g_track_mu);
    die_on_rank("%s: its handle was never waited — keep the handle and comm_wait it before the buffer is reused "
                "(a send) or read (a receive); %d such handle(s) on this communicator at the end of the step",
                what, n);
  }
  c->n_open = 0;
  pthread_mutex_unlock(&g_track_mu);
}

comm_handle_t comm_issued(comm_t *c) {
  if (!c) die_on_rank("comm_issued: the communicator is NULL");
  pthread_mutex_lock(&c->mu);
  comm_handle_t h = c->next_seq;
  pthread_mutex_unlock(&c->mu);
  return h;
}

void comm_expect_waited(comm_t *c, comm_handle_t since, const char *who) {
  if (!c || !c->track) return;
  pthread_mutex_lock(&g_track_mu);
  const struct comm_open *o = first_open(c, since, 0);
  if (!o) {
    pthread_mutex_unlock(&g_track_mu);
    return;
  }
  char what[96];
  snprintf(what, sizeof what, "%s (%s)", o->fn, o->tag);
  pthread_mutex_unlock(&g_track_mu);
  die_on_rank("%s: its handle was never waited before %s returned — %s is blocking: comm_wait the handle (or a later "
              "one of the same communicator) before returning, or the caller reads the buffer while the stream may "
              "still write it",
              what, who, who);
}

static void comm_start_thread(comm_t *c) {
  if (!c->be->threaded) return;
  comm_engine_attach(c, comm_stream_main); /* a fiber on the rank's one engine thread */
  c->thread_started = 1;
}

comm_t *comm_init(int *argc, char ***argv, backend_t backend, device_t dev) {
  comm_t *c = comm_alloc(backend, dev);
  comm_mpi_boot(c, argc, argv); /* rank, world, local rank, check_set_rank */
  comm_topo_init(c, NULL);      /* node of every rank */
  if (dev == DEV_CUDA) device_cuda_select(c->local_rank); /* dies in a CPU-only build */
  if (backend == BACKEND_NCCL) {
#ifdef ZL_CUDA
    if (dev != DEV_CUDA) die_on_rank("the NCCL backend needs CUDA buffers (--device cuda)");
    comm_nccl_attach(c);
#else
    die_on_rank("NCCL backend needs a CUDA build (make GPU=1)");
#endif
  } else {
    comm_mpi_attach(c);
  }
  comm_start_thread(c);
  return c;
}

/* Process groups: the same front on a smaller MPI_Comm (and NCCL communicator). */
comm_t *comm_split(comm_t *parent, int color, int key) {
  if (color < 0) die_on_rank("comm_split: color %d must be >= 0 (every rank joins a group)", color);
  comm_wait_all(parent); /* the split is a collective on the parent: it follows everything queued there */
  comm_t *c = comm_alloc(parent->backend, parent->dev);
  c->impl = parent->impl;
  c->timeout_s = parent->timeout_s;
  c->piece_bytes = parent->piece_bytes;
  c->parent = parent;
  comm_mpi_split(parent, c, color, key, parent->be->threaded);
  comm_topo_init(c, parent);
  if (parent->backend == BACKEND_NCCL) {
#ifdef ZL_CUDA
    comm_nccl_split(parent, c, color, key);
#else
    die_on_rank("comm_split: NCCL backend in a CPU-only build");
#endif
  } else {
    comm_mpi_attach(c);
  }
  comm_start_thread(c);
  pthread_mutex_lock(&parent->mu);
  parent->n_children++;
  pthread_mutex_unlock(&parent->mu);
  return c;
}


comm_t *comm_shape_only(int world, int rank, device_t dev) {
  comm_t *c = xcalloc(1, sizeof *c, "shape-only communicator");
  c->world = world, c->rank = rank, c->dev = dev;
  return c;
}

int comm_rank(const comm_t *c) {
  if (!c) die_on_rank("comm_rank: the communicator is NULL (a link this stage does not have?)");
  return c->rank;
}
int comm_world(const comm_t *c) {
  if (!c) die_on_rank("comm_world: the communicator is NULL (a link this stage does not have?)");
  return c->world;
}
device_t comm_device(const comm_t *c) { return c->dev; }
backend_t comm_backend(const comm_t *c) { return c->backend; }
const char *comm_backend_name(const comm_t *c) { return c->be->name; }
void comm_set_impl(comm_t *c, coll_impl_t impl) { c->impl = impl; }
coll_impl_t comm_impl(const comm_t *c) { return c->impl; }
void comm_set_timeout(comm_t *c, double seconds) { c->timeout_s = seconds > 0 ? seconds : 0; }
void comm_set_piece_bytes(comm_t *c, int64_t nbytes) {
  if (c->piece && nbytes != c->piece_bytes) die_on_rank("comm_set_piece_bytes: the cap is set once, before the first pieced operation");
  c->piece_bytes = nbytes > 0 ? nbytes : 0;
}
int64_t comm_piece_bytes(const comm_t *c) { return c->piece_bytes; }

/* ---- running a task on the stream --------------------------------------------------------- */
static int needs_staging(const comm_t *c) { return c->be->host_only && c->dev == DEV_CUDA; }

/* Host staging buffer `slot`, at least nbytes (grown on demand, counted as LEDGER_COMM). */
static void *stage_buf(comm_t *c, int slot, int64_t nbytes) {
  if (nbytes > c->stage_nbytes[slot]) {
    if (c->stage[slot]) {
      free(c->stage[slot]);
      ledger_sub(LEDGER_COMM, c->stage_nbytes[slot]);
    }
    ledger_add(LEDGER_COMM, nbytes, "comm host staging");
    c->stage[slot] = xmalloc((size_t)nbytes, "comm host staging");
    c->stage_nbytes[slot] = nbytes;
  }
  return c->stage[slot];
}

/* The all-to-all (defined at the end of this file): its counters (at submit, under c->mu), the
 * check of the split matrix (on the stream, before the data), the call itself, its staging. */
static void a2a_count(comm_t *c, const comm_task_t *t);
static void a2a_check_splits(comm_t *c, const comm_task_t *t);
static void a2a_run(comm_t *c, const comm_task_t *t);
static void a2a_staged(comm_t *c, const comm_task_t *t);
static void count_p2p(comm_t *c, int dst, int64_t sent, int src, int64_t recvd);

/* The collective itself, vendor or ring, on buffers the backend can use. */
static void run_coll(comm_t *c, const comm_task_t *t) {
  const comm_backend_t *be = c->be;
  int ring = t->impl == COLL_RING;
  switch (t->kind) {
  case TASK_BROADCAST:
    if (ring) ring_broadcast(c, t->recv, t->numel, t->dt, t->peer);
    else be->broadcast(c, t->recv, t->numel, t->dt, t->peer);
    break;
  case TASK_REDUCE:
    if (ring) ring_reduce(c, t->send, t->recv, t->numel, t->dt, t->redop, t->peer);
    else be->reduce(c, t->send, t->recv, t->numel, t->dt, t->redop, t->peer);
    break;
  case TASK_ALL_REDUCE:
    if (ring) ring_all_reduce(c, t->recv, t->numel, t->dt, t->redop);
    else be->all_reduce(c, t->recv, t->numel, t->dt, t->redop);
    break;
  case TASK_REDUCE_SCATTER:
    if (ring) ring_reduce_scatter(c, t->send, t->recv, t->numel, t->dt, t->redop);
    else be->reduce_scatter(c, t->send, t->recv, t->numel, t->dt, t->redop);
    break;
  case TASK_ALL_GATHER:
    if (ring) ring_all_gather(c, t->send, t->recv, t->numel, t->dt);
    else be->all_gather(c, t->send, t->recv, t->numel, t->dt);
    break;
  case TASK_SEND: /* with the ring implementation, counted as p2p traffic too */
    if (ring) comm_p2p_send(c, t->send, t->numel, t->dt, t->peer);
    else be->send(c, t->send, t->numel, t->dt, t->peer);
    break;
  case TASK_RECV:
    if (ring) comm_p2p_recv(c, t->recv, t->numel, t->dt, t->peer);
    else be->recv(c, t->recv, t->numel, t->dt, t->peer);
    break;
  case TASK_SENDRECV:
    if (ring) comm_p2p_sendrecv(c, t->send, t->numel, t->peer, t->recv, t->recv_numel, t->peer2, t->dt);
    else be->sendrecv_user(c, t->send, t->numel, t->peer, t->recv, t->recv_numel, t->peer2, t->dt);
    break;
  case TASK_GROUP: /* one group of the vendor's; with the ring's implementation counted as p2p traffic too */
    for (int i = 0; i < t->n_group && ring; i++) {
      int64_t nb = t->group[i].numel * (int64_t)dtype_size(t->dt);
      if (t->group[i].send) count_p2p(c, t->group[i].peer, nb, t->group[i].peer, 0);
      else count_p2p(c, t->group[i].peer, 0, t->group[i].peer, nb);
    }
    be->group(c, t->n_group, t->group, t->dt);
    break;
  case TASK_ALL_TO_ALL:
  case TASK_ALL_TO_ALLV: a2a_run(c, t); break;
  default: die_on_rank("comm: task kind %d is not a collective", (int)t->kind);
  }
}

/* CUDA buffers on a host-only backend: copy the inputs to host, run there, copy the outputs back. */
static void run_staged(comm_t *c, const comm_task_t *t) {
  size_t esz = dtype_size(t->dt);
  int64_t nb = t->numel * (int64_t)esz;
  int64_t lo = comm_chunk_lo(t->numel, c->world, c->rank) * (int64_t)esz;
  int64_t own = comm_chunk_numel(t->numel, c->world, c->rank) * (int64_t)esz;
  comm_task_t h = *t; /* the same task on host copies */
  switch (t->kind) {
  case TASK_BROADCAST:
  case TASK_ALL_REDUCE:
    h.recv = stage_buf(c, 0, nb);
    h.send = h.recv;
    if (t->kind == TASK_ALL_REDUCE || c->rank == t->peer) dev_memcpy(DEV_CPU, h.recv, DEV_CUDA, t->recv, (size_t)nb);
    run_coll(c, &h);
    if (t->kind == TASK_ALL_REDUCE || c->rank != t->peer) dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_REDUCE:
    h.send = stage_buf(c, 0, nb);
    h.recv = (t->send == t->recv) ? (void *)h.send : (c->rank == t->peer ? stage_buf(c, 1, nb) : NULL);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    run_coll(c, &h);
    if (c->rank == t->peer) dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_REDUCE_SCATTER:
    h.send = stage_buf(c, 0, nb);
    h.recv = stage_buf(c, 1, own);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)own);
    break;
  case TASK_ALL_GATHER:
    h.recv = stage_buf(c, 0, nb);
    /* in place (send is this rank's chunk of recv) stays in place on the host */
    h.send = (t->send == (const char *)t->recv + lo) ? (char *)h.recv + lo : stage_buf(c, 1, own);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)own);
    run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_SEND:
    h.send = stage_buf(c, 0, nb);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    run_coll(c, &h);
    break;
  case TASK_RECV:
    h.recv = stage_buf(c, 0, nb);
    run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_SENDRECV: {
    int64_t rb = t->recv_numel * (int64_t)esz;
    h.send = stage_buf(c, 0, nb);
    h.recv = stage_buf(c, 1, rb);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)rb);
    break;
  }
  case TASK_GROUP: { /* the sends packed in staging slot 0, the receives in slot 1 */
    int64_t off[2] = {0, 0};
    for (int i = 0; i < t->n_group; i++) off[t->group[i].recv != NULL] += t->group[i].numel * (int64_t)esz;
    char *buf[2] = {stage_buf(c, 0, off[0]), stage_buf(c, 1, off[1])};
    off[0] = off[1] = 0;
    for (int i = 0; i < t->n_group; i++) {
      int r = t->group[i].recv != NULL;
      int64_t nbi = t->group[i].numel * (int64_t)esz;
      if (r) h.group[i].recv = buf[1] + off[1];
      else {
        h.group[i].send = buf[0] + off[0];
        dev_memcpy(DEV_CPU, buf[0] + off[0], DEV_CUDA, t->group[i].send, (size_t)nbi);
      }
      off[r] += nbi;
    }
    run_coll(c, &h);
    for (int i = 0; i < t->n_group; i++)
      if (t->group[i].recv)
        dev_memcpy(DEV_CUDA, t->group[i].recv, DEV_CPU, h.group[i].recv, (size_t)(t->group[i].numel * (int64_t)esz));
    break;
  }
  case TASK_ALL_TO_ALL:
  case TASK_ALL_TO_ALLV: a2a_staged(c, t); break;
  default: run_coll(c, t);
  }
}

/* Copy numel elements between two buffers of the stream's device, on the stream. */
static void piece_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt) {
  if (numel <= 0 || dst == src) return;
  if (c->piece_on_cuda) dev_memcpy(DEV_CUDA, dst, DEV_CUDA, src, (size_t)numel * dtype_size(dt));
  else c->be->local_copy(c, dst, src, numel, dt);
}

/* One piece of a reduce-scatter or all-gather (comm_set_piece_bytes): the N slices of s elements,
 * piece_stride apart in the caller's buffer, packed side by side in c->piece, where the
 * collective of N·s elements runs; its own chunk (s elements) is the caller's. */
static void run_piece(comm_t *c, const comm_task_t *t) {
  int64_t s = t->numel / c->world;
  size_t esz = dtype_size(t->dt);
  comm_task_t p = *t;
  if (t->kind == TASK_REDUCE_SCATTER) { /* send: slice 0 of the caller's buffer; recv: this rank's s */
    for (int r = 0; r < c->world; r++)
      piece_copy(c, (char *)c->piece + (size_t)(r * s) * esz, (const char *)t->send + (size_t)(r * t->piece_stride) * esz, s, t->dt);
    p.send = c->piece;
  } else { /* all-gather: send: this rank's s; recv: slice 0 of the caller's buffer */
    p.recv = c->piece;
  }
  if (needs_staging(c)) run_staged(c, &p);
  else run_coll(c, &p);
  if (t->kind == TASK_ALL_GATHER)
    for (int r = 0; r < c->world; r++)
      piece_copy(c, (char *)t->recv + (size_t)(r * t->piece_stride) * esz, (const char *)c->piece + (size_t)(r * s) * esz, s, t->dt);
}

static void run_task(comm_t *c, comm_task_t *t) {
  double t0 = trace_now_us();
  if (c->be->threaded) comm_engine_task_bytes(c, (t->numel + t->recv_numel) * (int64_t)dtype_size(t->dt));
  if (t->kind == TASK_ALL_TO_ALLV) a2a_check_splits(c, t); /* every rank agrees on the splits, or all stop */
  if (c->be->task_begin) c->be->task_begin(c, t);
  if (t->kind >= TASK_BARRIER) comm_mpi_control(c, t); /* barrier and control ops: host, MPI */
  else if (t->piece_stride > 0) run_piece(c, t);
  else if (needs_staging(c)) run_staged(c, t);
  else run_coll(c, t);
  if (c->be->task_end) c->be->task_end(c, t);
  free(t->a2a); /* the all-to-all-v's copy of the counts (c->running keeps the pointer, never reads it) */
  t->a2a = NULL;
  double t1 = trace_now_us();
  pthread_mutex_lock(&c->mu);
  c->ctr.busy_us[t->op] += t1 - t0;
  pthread_mutex_unlock(&c->mu);
  if (trace_enabled()) {
    char args[96]; /* queued: µs between the caller's issue and the start (issued = ts − queued) */
    snprintf(args, sizeof args, "\"op\":\"%s\",\"bytes\":%lld,\"impl\":\"%s\",\"queued\":%.1f", comm_op_name(t->op),
             (long long)(t->numel * (int64_t)dtype_size(t->dt)), t->impl == COLL_RING ? "ring" : "vendor",
             t0 - t->issued_us);
    trace_comm_event(c, t->seq, t->tag[0] ? t->tag : comm_op_name(t->op), t0, t1, args); /* (c, seq): report.c finds the last arrival */
  }
}

/* The stream of a threaded backend: a fiber on the engine (comm_engine.c), tasks in order. */
static void comm_stream_main(comm_t *c) {
#ifdef ZL_CUDA
  if (c->dev == DEV_CUDA) comm_cuda_thread_attach(); /* staging copies use the rank's GPU */
#endif
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (c->q_len == 0) comm_engine_idle(c);
    comm_task_t t = c->queue[c->q_head];
    c->q_head = (c->q_head + 1) % c->q_cap;
    c->q_len--;
    c->running = t;
    pthread_mutex_unlock(&c->mu);
    if (t.kind != TASK_STOP) run_task(c, &t);
    pthread_mutex_lock(&c->mu);
    c->done_seq = t.seq;
    pthread_cond_broadcast(&c->cv_done);
    if (t.kind == TASK_STOP) break;
  }
  pthread_mutex_unlock(&c->mu);
  comm_engine_progress();
}

/* Count the ring-model bytes, give the task its handle, and queue it (threaded) or run it (inline). */
static comm_handle_t submit(comm_t *c, comm_task_t *t, const char *tag) {
  snprintf(t->tag, sizeof t->tag, "%s", tag ? tag : comm_op_name(t->op));
  t->issued_us = trace_now_us();
  if (t->kind < TASK_BARRIER && needs_staging(c)) dev_sync(DEV_CUDA); /* inputs final before the thread copies */
  pthread_mutex_lock(&c->mu);
  if (t->op == CO_ALL_TO_ALL) a2a_count(c, t);
  else if (t->op != CO_CONTROL) {
    int64_t sent = comm_model_sent(t->op, t->numel, t->dt, c->world, c->rank, t->peer);
    int64_t recvd = comm_model_recvd(t->op, t->numel, t->dt, c->world, c->rank, t->peer);
    c->ctr.sent[t->op] += sent;
    c->ctr.recvd[t->op] += recvd;
    comm_topo_count(c, t->op, t->peer, sent, recvd);
  }
  if (t->kind != TASK_STOP) c->ctr.calls[t->op]++;
  t->seq = ++c->next_seq;
  if (c->be->threaded) {
    if (c->q_len == c->q_cap) { /* grow, unwrapping the circular buffer */
      comm_task_t *q = xmalloc(2 * (size_t)c->q_cap * sizeof *q, "comm queue");
      for (int i = 0; i < c->q_len; i++) q[i] = c->queue[(c->q_head + i) % c->q_cap];
      free(c->queue);
      c->queue = q;
      c->q_head = 0;
      c->q_cap *= 2;
    }
    c->queue[(c->q_head + c->q_len) % c->q_cap] = *t;
    c->q_len++;
    comm_engine_wake(c);
    pthread_mutex_unlock(&c->mu);
  } else {
    c->running = *t;
    pthread_mutex_unlock(&c->mu);
    run_task(c, t);
    pthread_mutex_lock(&c->mu);
    c->done_seq = t->seq;
    pthread_mutex_unlock(&c->mu);
  }
  return t->seq;
}

void comm_wait(comm_t *c, comm_handle_t h) {
  if (!c) die_on_rank("comm_wait: the communicator is NULL (a link this stage does not have?)");
  if (h <= 0) return;
  track_waited(c, h);
  if (!c->be->threaded) {
    c->be->wait(c, h);
    return;
  }
  pthread_mutex_lock(&c->mu);
  if (h > c->next_seq) {
    pthread_mutex_unlock(&c->mu);
    die_on_rank("comm_wait: handle %lld was never issued", (long long)h);
  }
  struct timespec dl;
  if (c->timeout_s > 0) {
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double s = (double)dl.tv_sec + 1e-9 * (double)dl.tv_nsec + c->timeout_s;
    dl.tv_sec = (time_t)s;
    dl.tv_nsec = (long)((s - (double)dl.tv_sec) * 1e9);
  }
  double w0 = c->done_seq < h ? comm_now_s() : 0;
  if (w0 > 0) comm_engine_main_waits(+1);
  while (c->done_seq < h) {
    if (c->timeout_s <= 0) {
      pthread_cond_wait(&c->cv_done, &c->mu);
    } else if (pthread_cond_timedwait(&c->cv_done, &c->mu, &dl) == ETIMEDOUT && c->done_seq < h) {
      /* Name the operation the stream is stuck in (it may sit inside MPI forever): the one
       * running, or the next queued when the thread has not picked it up yet. */
      comm_task_t stuck = c->running.seq == c->done_seq + 1 ? c->running : c->queue[c->q_head];
      pthread_mutex_unlock(&c->mu);
      comm_timeout_fail(c, comm_op_name(stuck.op), stuck.tag);
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (w0 > 0) comm_engine_main_waits(-1), comm_engine_note_wait(comm_now_s() - w0);
}

void comm_wait_all(comm_t *c) {
  if (!c) die_on_rank("comm_wait_all: the communicator is NULL (a link this stage does not have?)");
  track_wait_all(c);
  if (!c->be->threaded) {
    c->be->wait_all(c);
    return;
  }
  pthread_mutex_lock(&c->mu);
  comm_handle_t last = c->next_seq;
  pthread_mutex_unlock(&c->mu);
  comm_wait(c, last);
}

void comm_finalize(comm_t *c) {
  if (!c) return;
  if (c->n_children > 0)
    die_on_rank("comm_finalize: %d sub-communicator(s) split from this one are still open; finalize them first", c->n_children);
  comm_wait_all(c);
  if (c->thread_started) {
    comm_task_t stop = {.kind = TASK_STOP, .op = CO_CONTROL};
    submit(c, &stop, "stop");
    comm_engine_detach(c); /* returns once the fiber has run the stop */
  }
  for (int s = 0; s < 2; s++) {
    if (c->scratch[s]) {
      c->be->scratch_free(c, c->scratch[s]);
      ledger_sub(LEDGER_COMM, c->scratch_nbytes[s]);
    }
    if (c->stage[s]) {
      free(c->stage[s]);
      ledger_sub(LEDGER_COMM, c->stage_nbytes[s]);
    }
  }
  if (c->piece) {
    if (c->piece_on_cuda) dev_free(DEV_CUDA, c->piece);
    else c->be->scratch_free(c, c->piece);
    ledger_sub(LEDGER_COMM, c->piece_bytes);
  }
  if (c->be->finalize) c->be->finalize(c);
  comm_mpi_shutdown(c); /* a sub-communicator: MPI_Comm_free only */
  if (c->parent) {
    pthread_mutex_lock(&c->parent->mu);
    c->parent->n_children--;
    pthread_mutex_unlock(&c->parent->mu);
  }
  pthread_cond_destroy(&c->cv_done);
  pthread_mutex_destroy(&c->mu);
  free(c->queue);
  comm_topo_free(c);
  track_unregister(c);
  free(c);
}

/* ---- argument checks ---------------------------------------------------------------------- */
static void check_args(const comm_t *c, const char *fn, int64_t numel, dtype_t dt, int peer, int need_peer) {
  if (!c) die_on_rank("%s: the communicator is NULL (a link this stage does not have? the first stage has no "
                      "previous one, the last no next one)", fn);
  if (numel < 0) die_on_rank("%s: numel %lld is negative", fn, (long long)numel);
  if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16 && dt != DT_F64) die_on_rank("%s: unknown dtype %d", fn, (int)dt);
  if (need_peer && (peer < 0 || peer >= c->world))
    die_on_rank("%s: rank %d is outside the group: its ranks are 0..%d (a rank of this communicator, not of the "
                "world)", fn, peer, c->world - 1);
}

/* The _async point-to-point calls: a NULL communicator or a peer outside the group, named with
 * the call's tag (the exercise's own message). */
static void check_p2p(const comm_t *c, const char *fn, const char *tag, int peer) {
  const char *what = tag && tag[0] ? tag : "-";
  if (!c)
    die_on_rank("%s (%s): the communicator is NULL (a link this stage does not have? the first stage has no previous "
                "one, the last no next one)", fn, what);
  if (peer < 0 || peer >= c->world)
    die_on_rank("%s (%s): rank %d is outside the group: its ranks are 0..%d (a rank of this communicator, not of the "
                "world)", fn, what, peer, c->world - 1);
}

static comm_task_t task(comm_task_kind_t kind, comm_op_t op, const comm_t *c, const void *send, void *recv,
                        int64_t numel, dtype_t dt, redop_t redop, int peer) {
  comm_task_t t;
  memset(&t, 0, sizeof t);
  t.kind = kind;
  t.op = op;
  t.impl = c->impl;
  t.send = send;
  t.recv = recv;
  t.numel = numel;
  t.dt = dt;
  t.redop = redop;
  t.peer = peer;
  return t;
}

/* ---- constant-size pieces (comm_set_piece_bytes) ------------------------------------------- */
/* Elements per piece of an in-place op over numel elements: the whole when there is no cap or
 * it fits, else the cap in elements (at least 1). */
static int64_t piece_elems(const comm_t *c, int64_t numel, dtype_t dt) {
  int64_t esz = (int64_t)dtype_size(dt);
  if (c->piece_bytes <= 0 || numel * esz <= c->piece_bytes) return numel;
  int64_t e = c->piece_bytes / esz;
  return e > 0 ? e : 1;
}

/* All-reduce or broadcast of buf in contiguous pieces of at most the cap, in order. */
static comm_handle_t submit_contiguous(comm_t *c, comm_task_t *t, const char *tag) {
  int64_t e = piece_elems(c, t->numel, t->dt), numel = t->numel;
  if (e >= numel) return submit(c, t, tag);
  size_t esz = dtype_size(t->dt);
  comm_handle_t h = 0;
  for (int64_t lo = 0; lo < numel; lo += e) {
    comm_task_t p = *t;
    p.recv = (char *)t->recv + (size_t)lo * esz;
    p.send = p.recv;
    p.numel = lo + e <= numel ? e : numel - lo;
    h = submit(c, &p, tag);
  }
  return h;
}

/* Reduce-scatter or all-gather in pieces: piece j is the slice [lo, lo+s) of every rank's chunk
 * (chunks equal: numel divisible by N), N·s <= the cap; runs whole otherwise. */
static comm_handle_t submit_chunked(comm_t *c, comm_task_t *t, const char *tag) {
  int N = c->world;
  if (piece_elems(c, t->numel, t->dt) >= t->numel || N < 1 || t->numel % N != 0) return submit(c, t, tag);
  int64_t chunk = t->numel / N, s = c->piece_bytes / ((int64_t)dtype_size(t->dt) * N);
  if (s < 1) s = 1;
  if (s >= chunk) return submit(c, t, tag);
  if (!c->piece) { /* issue side, before any piece runs; never regrown, so the stream may use it freely */
    ledger_add(LEDGER_COMM, c->piece_bytes, "comm piece buffer"); /* dies first if over the budget */
    c->piece_on_cuda = needs_staging(c);
    c->piece = c->piece_on_cuda ? dev_malloc(DEV_CUDA, (size_t)c->piece_bytes, "comm piece buffer")
                                : c->be->scratch_alloc(c, c->piece_bytes);
  }
  if ((int64_t)N * (int64_t)dtype_size(t->dt) > c->piece_bytes)
    die_on_rank("comm: the piece buffer (%lld bytes) is smaller than one element per rank (%d ranks)",
                (long long)c->piece_bytes, N);
  size_t esz = dtype_size(t->dt);
  comm_handle_t h = 0;
  for (int64_t lo = 0; lo < chunk; lo += s) {
    comm_task_t p = *t;
    p.numel = (lo + s <= chunk ? s : chunk - lo) * N;
    p.piece_stride = chunk;
    /* reduce-scatter: send = slice lo of chunk 0 (run_piece packs the N slices), recv = this
     * rank's chunk at lo; all-gather: send = this rank's chunk at lo, recv = slice lo of chunk 0 */
    p.send = (const char *)t->send + (size_t)lo * esz;
    p.recv = (char *)t->recv + (size_t)lo * esz;
    h = submit(c, &p, tag);
  }
  return h;
}

/* ---- asynchronous collectives -------------------------------------------------------------- */
/* Exercise mode (track_check, track_open): the bytes an operation reads and writes on this rank. */
static int64_t nbytes_of(int64_t numel, dtype_t dt) { return numel * (int64_t)dtype_size(dt); }

/* The _async collectives; fn names the call the caller made (the blocking ones pass their own). */
static comm_handle_t all_reduce_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op, const char *tag,
                                      const char *fn) {
  check_args(c, fn, numel, dt, 0, 0);
  track_check(c, fn, tag, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  comm_task_t t = task(TASK_ALL_REDUCE, CO_ALL_REDUCE, c, buf, buf, numel, dt, op, 0);
  comm_handle_t h = submit_contiguous(c, &t, tag);
  track_open(c, h, fn, tag, 0, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  return h;
}

static comm_handle_t reduce_scatter_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                          redop_t op, const char *tag, const char *fn) {
  check_args(c, fn, numel, dt, 0, 0);
  int64_t own = nbytes_of(comm_chunk_numel(numel, c->world, c->rank), dt);
  track_check(c, fn, tag, send, nbytes_of(numel, dt), recv, own);
  comm_task_t t = task(TASK_REDUCE_SCATTER, CO_REDUCE_SCATTER, c, send, recv, numel, dt, op, 0);
  comm_handle_t h = submit_chunked(c, &t, tag);
  track_open(c, h, fn, tag, 0, send, nbytes_of(numel, dt), recv, own);
  return h;
}

static comm_handle_t all_gather_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                      const char *tag, const char *fn) {
  check_args(c, fn, numel, dt, 0, 0);
  int64_t own = nbytes_of(comm_chunk_numel(numel, c->world, c->rank), dt);
  track_check(c, fn, tag, send, own, recv, nbytes_of(numel, dt));
  comm_task_t t = task(TASK_ALL_GATHER, CO_ALL_GATHER, c, send, recv, numel, dt, REDOP_SUM, 0);
  comm_handle_t h = submit_chunked(c, &t, tag);
  track_open(c, h, fn, tag, 0, send, own, recv, nbytes_of(numel, dt));
  return h;
}

static comm_handle_t broadcast_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root, const char *tag,
                                     const char *fn) {
  check_args(c, fn, numel, dt, root, 1);
  track_check(c, fn, tag, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  comm_task_t t = task(TASK_BROADCAST, CO_BROADCAST, c, buf, buf, numel, dt, REDOP_SUM, root);
  comm_handle_t h = submit_contiguous(c, &t, tag);
  track_open(c, h, fn, tag, 0, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  return h;
}

comm_handle_t comm_all_reduce_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op, const char *tag) {
  return all_reduce_async(c, buf, numel, dt, op, tag, "comm_all_reduce_async");
}

comm_handle_t comm_reduce_scatter_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                        redop_t op, const char *tag) {
  return reduce_scatter_async(c, send, recv, numel, dt, op, tag, "comm_reduce_scatter_async");
}

comm_handle_t comm_all_gather_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                    const char *tag) {
  return all_gather_async(c, send, recv, numel, dt, tag, "comm_all_gather_async");
}

comm_handle_t comm_broadcast_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root, const char *tag) {
  return broadcast_async(c, buf, numel, dt, root, tag, "comm_broadcast_async");
}

/* ---- blocking = async + wait --------------------------------------------------------------- */
void comm_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root) {
  comm_wait(c, broadcast_async(c, buf, numel, dt, root, "blocking", "comm_broadcast"));
}

void comm_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op, int root) {
  check_args(c, "comm_reduce", numel, dt, root, 1);
  void *out = c->rank == root ? recv : NULL; /* significant on root only */
  track_check(c, "comm_reduce", "blocking", send, nbytes_of(numel, dt), out, nbytes_of(numel, dt));
  comm_task_t t = task(TASK_REDUCE, CO_REDUCE, c, send, recv, numel, dt, op, root);
  comm_wait(c, submit(c, &t, "blocking"));
}

void comm_all_reduce(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op) {
  comm_wait(c, all_reduce_async(c, buf, numel, dt, op, "blocking", "comm_all_reduce"));
}

void comm_reduce_scatter(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op) {
  comm_wait(c, reduce_scatter_async(c, send, recv, numel, dt, op, "blocking", "comm_reduce_scatter"));
}

void comm_all_gather(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  comm_wait(c, all_gather_async(c, send, recv, numel, dt, "blocking", "comm_all_gather"));
}

void comm_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst) {
  check_args(c, "comm_send", numel, dt, dst, 1);
  if (dst == c->rank) die_on_rank("comm_send: cannot send to itself");
  track_check(c, "comm_send", "blocking", buf, nbytes_of(numel, dt), NULL, 0);
  comm_task_t t = task(TASK_SEND, CO_SEND, c, buf, NULL, numel, dt, REDOP_SUM, dst);
  comm_wait(c, submit(c, &t, "blocking"));
}

void comm_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src) {
  check_args(c, "comm_recv", numel, dt, src, 1);
  if (src == c->rank) die_on_rank("comm_recv: cannot receive from itself");
  track_check(c, "comm_recv", "blocking", NULL, 0, buf, nbytes_of(numel, dt));
  comm_task_t t = task(TASK_RECV, CO_RECV, c, NULL, buf, numel, dt, REDOP_SUM, src);
  comm_wait(c, submit(c, &t, "blocking"));
}

comm_handle_t comm_send_async(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst, const char *tag) {
  check_p2p(c, "comm_send_async", tag, dst);
  check_args(c, "comm_send_async", numel, dt, dst, 1);
  if (dst == c->rank) die_on_rank("comm_send_async: cannot send to itself");
  track_check(c, "comm_send_async", tag, buf, nbytes_of(numel, dt), NULL, 0);
  comm_task_t t = task(TASK_SEND, CO_SEND, c, buf, NULL, numel, dt, REDOP_SUM, dst);
  comm_handle_t h = submit(c, &t, tag);
  track_open(c, h, "comm_send_async", tag, 1, buf, nbytes_of(numel, dt), NULL, 0);
  return h;
}

comm_handle_t comm_recv_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src, const char *tag) {
  check_p2p(c, "comm_recv_async", tag, src);
  check_args(c, "comm_recv_async", numel, dt, src, 1);
  if (src == c->rank) die_on_rank("comm_recv_async: cannot receive from itself");
  track_check(c, "comm_recv_async", tag, NULL, 0, buf, nbytes_of(numel, dt));
  comm_task_t t = task(TASK_RECV, CO_RECV, c, NULL, buf, numel, dt, REDOP_SUM, src);
  comm_handle_t h = submit(c, &t, tag);
  track_open(c, h, "comm_recv_async", tag, 1, NULL, 0, buf, nbytes_of(numel, dt));
  return h;
}

comm_handle_t comm_sendrecv_async(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                                  int64_t recv_numel, int src, dtype_t dt, const char *tag) {
  check_p2p(c, "comm_sendrecv_async", tag, dst);
  check_p2p(c, "comm_sendrecv_async", tag, src);
  check_args(c, "comm_sendrecv_async", send_numel, dt, dst, 1);
  check_args(c, "comm_sendrecv_async", recv_numel, dt, src, 1);
  if (dst == c->rank || src == c->rank) die_on_rank("comm_sendrecv_async (%s): cannot exchange with itself", tag ? tag : "-");
  track_check(c, "comm_sendrecv_async", tag, sendbuf, nbytes_of(send_numel, dt), recvbuf, nbytes_of(recv_numel, dt));
  comm_task_t t = task(TASK_SENDRECV, CO_SEND, c, sendbuf, recvbuf, send_numel, dt, REDOP_SUM, dst);
  t.recv_numel = recv_numel;
  t.peer2 = src;
  pthread_mutex_lock(&c->mu); /* the receive half's counters (submit counts the send) */
  c->ctr.recvd[CO_RECV] += comm_model_recvd(CO_RECV, recv_numel, dt, c->world, c->rank, src);
  c->ctr.calls[CO_RECV]++;
  pthread_mutex_unlock(&c->mu);
  comm_handle_t h = submit(c, &t, tag);
  track_open(c, h, "comm_sendrecv_async", tag, 1, sendbuf, nbytes_of(send_numel, dt), recvbuf,
             nbytes_of(recv_numel, dt));
  return h;
}

comm_handle_t comm_group_async(comm_t *c, int n, const comm_p2p_t *ops, dtype_t dt, const char *tag) {
  const char *fn = "comm_group_async";
  if (n < 1 || n > COMM_GROUP_MAX)
    die_on_rank("%s (%s): %d operations; a group holds 1..%d", fn, tag ? tag : "-", n, COMM_GROUP_MAX);
  int nsend = 0;
  for (int i = 0; i < n; i++) {
    check_p2p(c, fn, tag, ops[i].peer);
    check_args(c, fn, ops[i].numel, dt, ops[i].peer, 1);
    if (!ops[i].send == !ops[i].recv)
      die_on_rank("%s (%s): entry %d must be a send or a receive (exactly one of send, recv set)", fn, tag ? tag : "-", i);
    if (ops[i].peer == c->rank) die_on_rank("%s (%s): cannot exchange with itself", fn, tag ? tag : "-");
    track_check(c, fn, tag, ops[i].send, ops[i].send ? nbytes_of(ops[i].numel, dt) : 0, ops[i].recv,
                ops[i].recv ? nbytes_of(ops[i].numel, dt) : 0);
    nsend += ops[i].send != NULL;
  }
  /* counted as the separate sends and receives would be: the task itself counts none (numel 0)
   * and one call of its kind, the loop below the rest */
  comm_op_t kind = nsend ? CO_SEND : CO_RECV;
  comm_task_t t = task(TASK_GROUP, kind, c, NULL, NULL, 0, dt, REDOP_SUM, ops[0].peer);
  t.n_group = n;
  for (int i = 0; i < n; i++) t.group[i] = ops[i];
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < n; i++) {
    comm_op_t op = ops[i].send ? CO_SEND : CO_RECV;
    int64_t sent = comm_model_sent(op, ops[i].numel, dt, c->world, c->rank, ops[i].peer);
    int64_t recvd = comm_model_recvd(op, ops[i].numel, dt, c->world, c->rank, ops[i].peer);
    c->ctr.sent[op] += sent;
    c->ctr.recvd[op] += recvd;
    comm_topo_count(c, op, ops[i].peer, sent, recvd);
    c->ctr.calls[op]++;
  }
  c->ctr.calls[kind]--; /* submit counts the task's one */
  pthread_mutex_unlock(&c->mu);
  comm_handle_t h = submit(c, &t, tag);
  for (int i = 0; i < n; i++)
    track_open(c, h, fn, tag, 1, ops[i].send, ops[i].send ? nbytes_of(ops[i].numel, dt) : 0, ops[i].recv,
               ops[i].recv ? nbytes_of(ops[i].numel, dt) : 0);
  return h;
}

void comm_barrier(comm_t *c) {
  check_args(c, "comm_barrier", 0, DT_F32, 0, 0);
  comm_task_t t = task(TASK_BARRIER, CO_CONTROL, c, NULL, NULL, 0, DT_F32, REDOP_SUM, 0);
  comm_wait(c, submit(c, &t, "barrier"));
}

/* ---- control traffic (host memory; counted under CO_CONTROL with the ring model) ----------- */
/* gather: the bytes went to rank 0 (comm_ctl_gather; on rank 0, sizes[world] of what came in);
 * otherwise the ring model's neighbours */
static void count_control(comm_t *c, int64_t sent, int64_t recvd, int gather, const int64_t *sizes) {
  pthread_mutex_lock(&c->mu);
  c->ctr.sent[CO_CONTROL] += sent;
  c->ctr.recvd[CO_CONTROL] += recvd;
  if (gather) comm_topo_count_gather(c, sent, sizes);
  else comm_topo_count(c, CO_CONTROL, 0, sent, recvd);
  pthread_mutex_unlock(&c->mu);
}

void comm_ctl_all_reduce_f64(comm_t *c, double *vals, int n, redop_t op) {
  if (n < 0) die_on_rank("comm_ctl_all_reduce_f64: n %d is negative", n);
  count_control(c, comm_model_sent(CO_ALL_REDUCE, n, DT_F64, c->world, c->rank, 0),
                comm_model_recvd(CO_ALL_REDUCE, n, DT_F64, c->world, c->rank, 0), 0, NULL);
  comm_task_t t = task(TASK_CTL_ALL_REDUCE_F64, CO_CONTROL, c, vals, vals, n, DT_F64, op, 0);
  comm_wait(c, submit(c, &t, "ctl_all_reduce"));
}

void comm_ctl_broadcast(comm_t *c, void *bytes, int64_t nbytes, int root) {
  check_args(c, "comm_ctl_broadcast", nbytes, DT_F32, root, 1);
  /* counted as the chain broadcast of nbytes one-byte elements */
  count_control(c, model_elems(CO_BROADCAST, 1, nbytes, c->world, c->rank, root),
                model_elems(CO_BROADCAST, 0, nbytes, c->world, c->rank, root), 0, NULL);
  comm_task_t t = task(TASK_CTL_BROADCAST, CO_CONTROL, c, bytes, bytes, nbytes, DT_F32, REDOP_SUM, root);
  comm_wait(c, submit(c, &t, "ctl_broadcast"));
}

void comm_ctl_gather(comm_t *c, const void *blob, int64_t nbytes, char **all, int64_t **sizes) {
  check_args(c, "comm_ctl_gather", nbytes, DT_F32, 0, 0);
  comm_task_t t = task(TASK_CTL_GATHER, CO_CONTROL, c, blob, NULL, nbytes, DT_F32, REDOP_SUM, 0);
  t.gather_all = all;
  t.gather_sizes = sizes;
  comm_wait(c, submit(c, &t, "ctl_gather"));
  int64_t got = 0;
  if (c->rank == 0)
    for (int r = 1; r < c->world; r++) got += (*sizes)[r];
  count_control(c, c->rank == 0 ? 0 : nbytes, got, 1, c->rank == 0 ? *sizes : NULL);
}

void comm_print_ordered(comm_t *c, const char *text) {
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(c, text, (int64_t)strlen(text), &all, &sizes);
  if (c->rank == 0) {
    int64_t off = 0;
    for (int r = 0; r < c->world; r++) {
      fwrite(all + off, 1, (size_t)sizes[r], stdout);
      if (sizes[r] > 0 && all[off + sizes[r] - 1] != '\n') fputc('\n', stdout);
      off += sizes[r];
    }
    fflush(stdout);
  }
  free(all);
  free(sizes);
}

/* ---- counters ------------------------------------------------------------------------------ */
comm_counters_t comm_counters(const comm_t *c) {
  comm_t *m = (comm_t *)c; /* the lock only */
  pthread_mutex_lock(&m->mu);
  comm_counters_t k = c->ctr;
  pthread_mutex_unlock(&m->mu);
  return k;
}

void comm_counters_reset(comm_t *c) {
  pthread_mutex_lock(&c->mu);
  memset(&c->ctr, 0, sizeof c->ctr);
  pthread_mutex_unlock(&c->mu);
}

/* ---- what the ring code builds on (called on the stream) ----------------------------------- */
static void count_p2p(comm_t *c, int dst, int64_t sent, int src, int64_t recvd) {
  pthread_mutex_lock(&c->mu);
  c->ctr.p2p_sent += sent;
  c->ctr.p2p_recvd += recvd;
  comm_topo_count_p2p(c, dst, sent, src, recvd);
  pthread_mutex_unlock(&c->mu);
}

static void check_peer(const comm_t *c, const char *fn, int peer) {
  if (peer < 0 || peer >= c->world || peer == c->rank)
    die_on_rank("%s: peer %d must be another rank in [0, %d)", fn, peer, c->world);
}

void comm_p2p_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                       int64_t recv_numel, int src, dtype_t dt) {
  if (send_numel > 0) check_peer(c, "comm_p2p_sendrecv", dst);
  if (recv_numel > 0) check_peer(c, "comm_p2p_sendrecv", src);
  int64_t esz = (int64_t)dtype_size(dt);
  count_p2p(c, dst, send_numel * esz, src, recv_numel * esz);
  c->be->sendrecv(c, sendbuf, send_numel, dst, recvbuf, recv_numel, src, dt);
}

void comm_p2p_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst) {
  comm_p2p_sendrecv(c, buf, numel, dst, NULL, 0, dst, dt);
}

void comm_p2p_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src) {
  comm_p2p_sendrecv(c, NULL, 0, src, buf, numel, src, dt);
}

void comm_local_reduce(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op) {
  if (numel > 0) c->be->local_reduce(c, dst, src, numel, dt, op);
}

void comm_local_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt) {
  if (numel > 0 && dst != src) c->be->local_copy(c, dst, src, numel, dt);
}

void *comm_scratch(comm_t *c, int slot, int64_t nbytes) {
  if (slot < 0 || slot > 1) die_on_rank("comm_scratch: slot %d is not 0 or 1", slot);
  if (nbytes > c->scratch_nbytes[slot]) {
    if (c->scratch[slot]) {
      c->be->scratch_free(c, c->scratch[slot]);
      ledger_sub(LEDGER_COMM, c->scratch_nbytes[slot]);
      c->scratch[slot] = NULL;
      c->scratch_nbytes[slot] = 0;
    }
    ledger_add(LEDGER_COMM, nbytes, "comm scratch"); /* dies first if over the --mem-limit-mb budget */
    c->scratch[slot] = c->be->scratch_alloc(c, nbytes);
    c->scratch_nbytes[slot] = nbytes;
  }
  return c->scratch[slot];
}

/* ---- all-to-all (comm.h; notes/01-collectives.md, "All-to-all") ------------------------------ */
/* Block j of a task's send side (side 0) or recv side (side 1): its elements and its offset. */
static int64_t a2a_n(const comm_t *c, const comm_task_t *t, int side, int j) {
  return t->a2a ? t->a2a[(2 * side) * c->world + j] : t->numel / c->world;
}
static int64_t a2a_lo(const comm_t *c, const comm_task_t *t, int side, int j) {
  return t->a2a ? t->a2a[(2 * side + 1) * c->world + j] : j * (t->numel / c->world);
}
/* Elements from the start of that side's buffer to the end of its last block. */
static int64_t a2a_extent(const comm_t *c, const comm_task_t *t, int side) {
  int64_t x = 0;
  for (int j = 0; j < c->world; j++)
    if (a2a_n(c, t, side, j) > 0 && a2a_lo(c, t, side, j) + a2a_n(c, t, side, j) > x)
      x = a2a_lo(c, t, side, j) + a2a_n(c, t, side, j);
  return x;
}

/* Under c->mu: every block but this rank's own, each way, and the share that crosses nodes. */
static void a2a_count(comm_t *c, const comm_task_t *t) {
  int N = c->world;
  int64_t esz = (int64_t)dtype_size(t->dt), *b = xcalloc(2 * (size_t)N, sizeof *b, "all_to_all counts");
  for (int j = 0; j < N; j++) {
    if (j == c->rank) continue;
    b[j] = a2a_n(c, t, 0, j) * esz;
    b[N + j] = a2a_n(c, t, 1, j) * esz;
    c->ctr.sent[CO_ALL_TO_ALL] += b[j];
    c->ctr.recvd[CO_ALL_TO_ALL] += b[N + j];
  }
  comm_topo_count_peers(c, CO_ALL_TO_ALL, b, b + N);
  free(b);
}

int64_t comm_model_all_to_allv(const int64_t *counts, dtype_t dt, int world, int rank) {
  int64_t n = 0;
  for (int j = 0; j < world; j++)
    if (j != rank) n += counts[j];
  return n * (int64_t)dtype_size(dt);
}

/* On the stream, before any data moves (Megatron-LM #1877: splits that disagree hang the job or
 * garble it): every rank all-gathers its send and recv counts, so each holds the whole N×N split
 * matrix and reaches the same verdict; on a disagreement every rank stops with exit code 2 and
 * rank 0 names the pairs. */
static void a2a_check_splits(comm_t *c, const comm_task_t *t) {
  int N = c->world;
  int64_t *mine = xmalloc(2 * (size_t)N * sizeof *mine, "all_to_allv split check");
  int64_t *all = xmalloc(2 * (size_t)N * (size_t)N * sizeof *all, "all_to_allv split matrix");
  for (int j = 0; j < N; j++) mine[j] = a2a_n(c, t, 0, j), mine[N + j] = a2a_n(c, t, 1, j);
  comm_mpi_all_gather_i64(c, mine, 2 * N, all); /* all[i·2N + j]: rank i sends to j; [j·2N + N + i]: j expects from i */
  char text[1024];
  int len = 0, bad = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      int64_t sends = all[(size_t)i * 2 * N + j], expects = all[(size_t)j * 2 * N + N + i];
      if (sends == expects) continue;
      if (bad++ == 0)
        len = snprintf(text, sizeof text, "comm_all_to_allv (%s): split sizes disagree between ranks:", t->tag[0] ? t->tag : "-");
      if (bad <= 4 && len < (int)sizeof text)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s rank %d sends %lld element(s) to rank %d, which expects %lld from it",
                        bad > 1 ? ";" : "", i, (long long)sends, j, (long long)expects);
    }
  free(mine);
  free(all);
  if (!bad) return;
  if (len < (int)sizeof text)
    snprintf(text + len, sizeof text - (size_t)len, "%s — rank i's send_counts[j] must equal rank j's recv_counts[i]: "
             "exchange the counts first (an all-to-all of the counts, as a dropless MoE dispatcher does)",
             bad > 4 ? " (and more pairs)" : "");
  comm_mpi_fail_all(c, text, 2);
}

/* The vendor call, or the pairwise exchange of solutions/alltoall.c (COLL_RING); the equal form
 * reaches the pairwise code as counts and displacements. */
static void a2a_run(comm_t *c, const comm_task_t *t) {
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
static void a2a_staged(comm_t *c, const comm_task_t *t) {
  size_t esz = dtype_size(t->dt);
  int64_t sx = a2a_extent(c, t, 0), rx = a2a_extent(c, t, 1);
  comm_task_t h = *t;
  h.send = stage_buf(c, 0, sx * (int64_t)esz);
  h.recv = stage_buf(c, 1, rx * (int64_t)esz);
  if (sx > 0) dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)sx * esz);
  run_coll(c, &h);
  for (int j = 0; j < c->world; j++) {
    int64_t lo = a2a_lo(c, t, 1, j), n = a2a_n(c, t, 1, j);
    if (n > 0) dev_memcpy(DEV_CUDA, (char *)t->recv + lo * (int64_t)esz, DEV_CPU, (char *)h.recv + lo * (int64_t)esz, (size_t)n * esz);
  }
}

/* Issue one all-to-all task: send and recv must not overlap; in exercise mode the bytes it reads
 * (send, to its last block) and writes (recv, likewise) are checked and tracked as the other
 * collectives' are (track_check, track_open). */
static comm_handle_t a2a_submit(comm_t *c, const char *fn, comm_task_t *t, const char *tag) {
  int64_t esz = (int64_t)dtype_size(t->dt), sn = a2a_extent(c, t, 0) * esz, rn = a2a_extent(c, t, 1) * esz;
  const char *s = t->send, *r = t->recv;
  if (s && r && sn > 0 && rn > 0 && s < r + rn && r < s + sn)
    die_on_rank("%s: send and recv overlap; the all-to-all has no in-place form (use two buffers)", fn);
  track_check(c, fn, tag, s, sn, r, rn);
  comm_handle_t h = submit(c, t, tag);
  track_open(c, h, fn, tag, 0, s, sn, r, rn);
  return h;
}

static comm_handle_t all_to_all_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                      const char *tag, const char *fn) {
  check_args(c, fn, numel, dt, 0, 0);
  if (numel % c->world != 0)
    die_on_rank("%s: numel %lld is not divisible by the %d ranks: equal blocks need numel = N·block (uneven "
                "splits: comm_all_to_allv)", fn, (long long)numel, c->world);
  comm_task_t t = task(TASK_ALL_TO_ALL, CO_ALL_TO_ALL, c, send, recv, numel, dt, REDOP_SUM, 0);
  t.recv_numel = numel;
  return a2a_submit(c, fn, &t, tag);
}

static comm_handle_t all_to_allv_async(comm_t *c, const void *send, const int64_t *send_counts,
                                       const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                                       const int64_t *recv_displs, dtype_t dt, const char *tag, const char *fn) {
  check_args(c, fn, 0, dt, 0, 0);
  if (!send_counts || !recv_counts) die_on_rank("%s: send_counts and recv_counts are required (displs may be NULL: packed)", fn);
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
  comm_task_t t = task(TASK_ALL_TO_ALLV, CO_ALL_TO_ALL, c, send, recv, ns, dt, REDOP_SUM, 0);
  t.recv_numel = nr;
  t.a2a = v;
  /* the count exchange of a2a_check_splits: an all-gather of 2N int64s per rank (control traffic) */
  int64_t cn = 2 * (int64_t)N * N;
  count_control(c, comm_model_sent(CO_ALL_GATHER, cn, DT_F64, N, c->rank, 0),
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
  comm_wait(c, all_to_allv_async(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt, "blocking",
                                 "comm_all_to_allv"));
}
