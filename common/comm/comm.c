/* comm.c — the communicator's front: a call becomes a task on the stream, and a handle to wait for
 * (init / split / finalize, the stream, submit, the waits, the collectives' calls); the same for
 * every backend (see comm.h, comm_internal.h). Notes: notes/01-collectives.md.
 *
 * A call such as comm_all_reduce_async():
 *   1. checks its arguments (comm_checks.c) and adds the ring-model bytes to the counters
 *      (comm_count.c: comm_model_sent),
 *   2. becomes a task with the next sequence number (its handle),
 *   3. runs on the stream (comm_run.c): the comm thread (MPI) pops tasks in order and runs each
 *      with the vendor collective or the ring code of solutions/ring.c; non-threaded backends
 *      (NCCL) run it inline, enqueueing on their CUDA stream,
 *   4. comm_wait(h) returns when done_seq >= h (or the deadline of comm_set_timeout passes).
 * The all-to-all has a file of its own (comm_a2a.c). */
#include "comm_internal.h" // struct comm, comm_backend_t, comm_task_t, comm_submit, comm_check_args ...
#include "check.h"         // die_on_rank, xmalloc, xcalloc
#include "device.h"        // dev_sync, dev_malloc, dev_free, device_cuda_select
#include "ledger.h"        // ledger_add, ledger_sub, LEDGER_COMM
#include "trace.h"         // trace_now_us
#include <errno.h>         // ETIMEDOUT
#include <stdio.h>         // snprintf
#include <stdlib.h>        // free, getenv
#include <string.h>        // memset
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

/* ---- init / finalize ---------------------------------------------------------------------- */
static void comm_stream_main(comm_t *c);

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
  if (ex != NULL && ex[0] != '\0') comm_track_register(c);
  comm_jitter_init(c);
  return c;
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

/* Process groups: the same front on a smaller MPI_Comm (and NCCL communicator). A rank with
 * color < 0 takes part in the parent's collective split (MPI_UNDEFINED, NCCL_SPLIT_NOCOLOR) but
 * joins no group: no MPI_Comm, no NCCL communicator, no stream — NULL. */
comm_t *comm_split(comm_t *parent, int color, int key) {
  comm_wait_all(parent); /* the split is a collective on the parent: it follows everything queued there */
  if (color < 0) {
    comm_mpi_split_none(parent, key);
    if (parent->backend == BACKEND_NCCL) {
#ifdef ZL_CUDA
      comm_nccl_split_none(parent, key);
#else
      die_on_rank("comm_split: NCCL backend in a CPU-only build");
#endif
    }
    return NULL;
  }
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
  if (c->piece && nbytes != c->piece_bytes)
    die_on_rank("comm_set_piece_bytes: the cap is set once, before the first pieced operation");
  c->piece_bytes = nbytes > 0 ? nbytes : 0;
}
int64_t comm_piece_bytes(const comm_t *c) { return c->piece_bytes; }

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
    if (t.kind != TASK_STOP) comm_run_task(c, &t);
    pthread_mutex_lock(&c->mu);
    c->done_seq = t.seq;
    pthread_cond_broadcast(&c->cv_done);
    if (t.kind == TASK_STOP) break;
  }
  pthread_mutex_unlock(&c->mu);
  comm_engine_progress();
}

/* Count the ring-model bytes, give the task its handle, and queue it (threaded) or run it (inline). */
comm_handle_t comm_submit(comm_t *c, comm_task_t *t, const char *tag) {
  snprintf(t->tag, sizeof t->tag, "%s", tag ? tag : comm_op_name(t->op));
  t->issued_us = trace_now_us();
  if (t->kind < TASK_BARRIER && comm_needs_staging(c)) dev_sync(DEV_CUDA); /* the copies read final inputs */
  pthread_mutex_lock(&c->mu);
  comm_count_issue(c, t);
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
    comm_run_task(c, t);
    pthread_mutex_lock(&c->mu);
    c->done_seq = t->seq;
    pthread_mutex_unlock(&c->mu);
  }
  return t->seq;
}

void comm_wait(comm_t *c, comm_handle_t h) {
  if (!c) die_on_rank("comm_wait: the communicator is NULL (a link this stage does not have?)");
  if (h <= 0) return;
  comm_jitter(c, 1); /* ZL_JITTER_US: the caller late (off: nothing) */
  comm_track_waited(c, h);
  if (!c->be->threaded) {
    c->be->wait(c, h);
    return;
  }
  pthread_mutex_lock(&c->mu);
  if (h > c->next_seq) {
    comm_handle_t issued = c->next_seq;
    pthread_mutex_unlock(&c->mu);
    comm_track_foreign(c, h, issued);
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
  comm_track_wait_all(c);
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
    die_on_rank("comm_finalize: %d sub-communicator(s) split from this one are still open; finalize them "
                "first", c->n_children);
  comm_wait_all(c);
  comm_measure_note(c); /* ZL_MEASURE_FILE (make exercise): this communicator's totals, one line */
  if (c->thread_started) {
    comm_task_t stop = {.kind = TASK_STOP, .op = CO_CONTROL};
    comm_submit(c, &stop, "stop");
    comm_engine_detach(c); /* returns once the fiber has run the stop */
  }
  for (int s = 0; s < 2; s++) {
    if (c->scratch[s]) {
      c->be->scratch_free(c, c->scratch[s]);
      ledger_sub(LEDGER_COMM, c->scratch_nbytes[s], c->scratch_ledger_id[s]);
    }
    if (c->stage[s]) {
      free(c->stage[s]);
      ledger_sub(LEDGER_COMM, c->stage_nbytes[s], c->stage_ledger_id[s]);
    }
  }
  if (c->piece) {
    if (c->piece_on_cuda) dev_free(DEV_CUDA, c->piece);
    else c->be->scratch_free(c, c->piece);
    ledger_sub(LEDGER_COMM, c->piece_bytes, c->piece_ledger_id);
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
  comm_track_unregister(c);
  free(c);
}

comm_task_t comm_task_make(comm_task_kind_t kind, comm_op_t op, const comm_t *c, const void *send, void *recv,
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
  if (e >= numel) return comm_submit(c, t, tag);
  size_t esz = dtype_size(t->dt);
  comm_handle_t h = 0;
  for (int64_t lo = 0; lo < numel; lo += e) {
    comm_task_t p = *t;
    p.recv = (char *)t->recv + (size_t)lo * esz;
    p.send = p.recv;
    p.numel = lo + e <= numel ? e : numel - lo;
    h = comm_submit(c, &p, tag);
  }
  return h;
}

/* Reduce-scatter or all-gather in pieces: piece j is the slice [lo, lo+s) of every rank's chunk
 * (chunks equal: numel divisible by N), N·s <= the cap; runs whole otherwise. */
static comm_handle_t submit_chunked(comm_t *c, comm_task_t *t, const char *tag) {
  int N = c->world;
  if (piece_elems(c, t->numel, t->dt) >= t->numel || N < 1 || t->numel % N != 0)
    return comm_submit(c, t, tag);
  int64_t chunk = t->numel / N, s = c->piece_bytes / ((int64_t)dtype_size(t->dt) * N);
  if (s < 1) s = 1;
  if (s >= chunk) return comm_submit(c, t, tag);
  if (!c->piece) { /* issue side, before any piece runs; never regrown, so the stream may use it freely */
    /* dies first if over the budget */
    c->piece_ledger_id = ledger_add(LEDGER_COMM, c->piece_bytes, "comm piece buffer");
    c->piece_on_cuda = comm_needs_staging(c);
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
    h = comm_submit(c, &p, tag);
  }
  return h;
}

/* ---- asynchronous collectives -------------------------------------------------------------- */
/* Exercise mode (comm_track_check, comm_track_open): the bytes an operation reads and writes on this rank. */
static int64_t nbytes_of(int64_t numel, dtype_t dt) { return numel * (int64_t)dtype_size(dt); }

/* The _async collectives; fn names the call the caller made (the blocking ones pass their own). */
static comm_handle_t all_reduce_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op,
                                      const char *tag, const char *fn) {
  comm_check_args(c, fn, numel, dt, 0, 0);
  comm_track_check(c, fn, tag, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_ALL_REDUCE, CO_ALL_REDUCE, c, buf, buf, numel, dt, op, 0);
  comm_handle_t h = submit_contiguous(c, &t, tag);
  comm_track_open(c, h, fn, tag, 0, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  return h;
}

static comm_handle_t reduce_scatter_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                          redop_t op, const char *tag, const char *fn) {
  comm_check_args(c, fn, numel, dt, 0, 0);
  int64_t own = nbytes_of(comm_chunk_numel(numel, c->world, c->rank), dt);
  comm_track_check(c, fn, tag, send, nbytes_of(numel, dt), recv, own);
  comm_task_t t = comm_task_make(TASK_REDUCE_SCATTER, CO_REDUCE_SCATTER, c, send, recv, numel, dt, op, 0);
  comm_handle_t h = submit_chunked(c, &t, tag);
  comm_track_open(c, h, fn, tag, 0, send, nbytes_of(numel, dt), recv, own);
  return h;
}

static comm_handle_t all_gather_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                      const char *tag, const char *fn) {
  comm_check_args(c, fn, numel, dt, 0, 0);
  int64_t own = nbytes_of(comm_chunk_numel(numel, c->world, c->rank), dt);
  comm_track_check(c, fn, tag, send, own, recv, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_ALL_GATHER, CO_ALL_GATHER, c, send, recv, numel, dt, REDOP_SUM, 0);
  comm_handle_t h = submit_chunked(c, &t, tag);
  comm_track_open(c, h, fn, tag, 0, send, own, recv, nbytes_of(numel, dt));
  return h;
}

static comm_handle_t broadcast_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root,
                                     const char *tag, const char *fn) {
  comm_check_args(c, fn, numel, dt, root, 1);
  comm_track_check(c, fn, tag, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_BROADCAST, CO_BROADCAST, c, buf, buf, numel, dt, REDOP_SUM, root);
  comm_handle_t h = submit_contiguous(c, &t, tag);
  comm_track_open(c, h, fn, tag, 0, buf, nbytes_of(numel, dt), buf, nbytes_of(numel, dt));
  return h;
}

comm_handle_t comm_all_reduce_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op,
                                    const char *tag) {
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

comm_handle_t comm_broadcast_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root,
                                   const char *tag) {
  return broadcast_async(c, buf, numel, dt, root, tag, "comm_broadcast_async");
}

/* A reduce queued on the stream like the rest (ZeRO-2 with whole-matrix owners: solutions/owners_zero2.c);
 * comm_reduce below is this and a wait. recv is significant on root only. */
comm_handle_t comm_reduce_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                redop_t op, int root, const char *tag) {
  comm_check_args(c, "comm_reduce_async", numel, dt, root, 1);
  void *out = c->rank == root ? recv : NULL;
  comm_track_check(c, "comm_reduce_async", tag, send, nbytes_of(numel, dt), out, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_REDUCE, CO_REDUCE, c, send, recv, numel, dt, op, root);
  comm_handle_t h = comm_submit(c, &t, tag);
  comm_track_open(c, h, "comm_reduce_async", tag, 0, send, nbytes_of(numel, dt), out, nbytes_of(numel, dt));
  return h;
}

/* ---- blocking = async + wait --------------------------------------------------------------- */
void comm_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root) {
  comm_wait(c, broadcast_async(c, buf, numel, dt, root, "blocking", "comm_broadcast"));
}

void comm_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op, int root) {
  comm_check_args(c, "comm_reduce", numel, dt, root, 1);
  void *out = c->rank == root ? recv : NULL; /* significant on root only */
  comm_track_check(c, "comm_reduce", "blocking", send, nbytes_of(numel, dt), out, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_REDUCE, CO_REDUCE, c, send, recv, numel, dt, op, root);
  comm_wait(c, comm_submit(c, &t, "blocking"));
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
  comm_check_args(c, "comm_send", numel, dt, dst, 1);
  if (dst == c->rank) die_on_rank("comm_send: cannot send to itself");
  comm_track_check(c, "comm_send", "blocking", buf, nbytes_of(numel, dt), NULL, 0);
  comm_task_t t = comm_task_make(TASK_SEND, CO_SEND, c, buf, NULL, numel, dt, REDOP_SUM, dst);
  comm_wait(c, comm_submit(c, &t, "blocking"));
}

void comm_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src) {
  comm_check_args(c, "comm_recv", numel, dt, src, 1);
  if (src == c->rank) die_on_rank("comm_recv: cannot receive from itself");
  comm_track_check(c, "comm_recv", "blocking", NULL, 0, buf, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_RECV, CO_RECV, c, NULL, buf, numel, dt, REDOP_SUM, src);
  comm_wait(c, comm_submit(c, &t, "blocking"));
}

comm_handle_t comm_send_async(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst,
                              const char *tag) {
  comm_check_p2p(c, "comm_send_async", tag, dst);
  comm_check_args(c, "comm_send_async", numel, dt, dst, 1);
  if (dst == c->rank) die_on_rank("comm_send_async: cannot send to itself");
  comm_track_check(c, "comm_send_async", tag, buf, nbytes_of(numel, dt), NULL, 0);
  comm_task_t t = comm_task_make(TASK_SEND, CO_SEND, c, buf, NULL, numel, dt, REDOP_SUM, dst);
  comm_handle_t h = comm_submit(c, &t, tag);
  comm_track_open(c, h, "comm_send_async", tag, 1, buf, nbytes_of(numel, dt), NULL, 0);
  return h;
}

comm_handle_t comm_recv_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src, const char *tag) {
  comm_check_p2p(c, "comm_recv_async", tag, src);
  comm_check_args(c, "comm_recv_async", numel, dt, src, 1);
  if (src == c->rank) die_on_rank("comm_recv_async: cannot receive from itself");
  comm_track_check(c, "comm_recv_async", tag, NULL, 0, buf, nbytes_of(numel, dt));
  comm_task_t t = comm_task_make(TASK_RECV, CO_RECV, c, NULL, buf, numel, dt, REDOP_SUM, src);
  comm_handle_t h = comm_submit(c, &t, tag);
  comm_track_open(c, h, "comm_recv_async", tag, 1, NULL, 0, buf, nbytes_of(numel, dt));
  return h;
}

comm_handle_t comm_sendrecv_async(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                                  int64_t recv_numel, int src, dtype_t dt, const char *tag) {
  comm_check_p2p(c, "comm_sendrecv_async", tag, dst);
  comm_check_p2p(c, "comm_sendrecv_async", tag, src);
  comm_check_args(c, "comm_sendrecv_async", send_numel, dt, dst, 1);
  comm_check_args(c, "comm_sendrecv_async", recv_numel, dt, src, 1);
  if (dst == c->rank || src == c->rank)
    die_on_rank("comm_sendrecv_async (%s): cannot exchange with itself", tag ? tag : "-");
  comm_track_check(c, "comm_sendrecv_async", tag, sendbuf, nbytes_of(send_numel, dt), recvbuf,
                   nbytes_of(recv_numel, dt));
  comm_task_t t = comm_task_make(TASK_SENDRECV, CO_SEND, c, sendbuf, recvbuf, send_numel, dt, REDOP_SUM, dst);
  t.recv_numel = recv_numel;
  t.peer2 = src;
  pthread_mutex_lock(&c->mu); /* the receive half's counters (submit counts the send) */
  c->ctr.recvd[CO_RECV] += comm_model_recvd(CO_RECV, recv_numel, dt, c->world, c->rank, src);
  c->ctr.calls[CO_RECV]++;
  pthread_mutex_unlock(&c->mu);
  comm_handle_t h = comm_submit(c, &t, tag);
  comm_track_open(c, h, "comm_sendrecv_async", tag, 1, sendbuf, nbytes_of(send_numel, dt), recvbuf,
             nbytes_of(recv_numel, dt));
  return h;
}

comm_handle_t comm_group_async(comm_t *c, int n, const comm_p2p_t *ops, dtype_t dt, const char *tag) {
  const char *fn = "comm_group_async";
  if (n < 1 || n > COMM_GROUP_MAX)
    die_on_rank("%s (%s): %d operations; a group holds 1..%d", fn, tag ? tag : "-", n, COMM_GROUP_MAX);
  int nsend = 0;
  for (int i = 0; i < n; i++) {
    comm_check_p2p(c, fn, tag, ops[i].peer);
    comm_check_args(c, fn, ops[i].numel, dt, ops[i].peer, 1);
    if (!ops[i].send == !ops[i].recv)
      die_on_rank("%s (%s): entry %d must be a send or a receive (exactly one of send, recv set)", fn,
                  tag ? tag : "-", i);
    if (ops[i].peer == c->rank) die_on_rank("%s (%s): cannot exchange with itself", fn, tag ? tag : "-");
    comm_track_check(c, fn, tag, ops[i].send, ops[i].send ? nbytes_of(ops[i].numel, dt) : 0, ops[i].recv,
                ops[i].recv ? nbytes_of(ops[i].numel, dt) : 0);
    nsend += ops[i].send != NULL;
  }
  /* counted as the separate sends and receives would be: the task itself counts none (numel 0)
   * and one call of its kind, the loop below the rest */
  comm_op_t kind = nsend ? CO_SEND : CO_RECV;
  comm_task_t t = comm_task_make(TASK_GROUP, kind, c, NULL, NULL, 0, dt, REDOP_SUM, ops[0].peer);
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
  comm_handle_t h = comm_submit(c, &t, tag);
  for (int i = 0; i < n; i++)
    comm_track_open(c, h, fn, tag, 1, ops[i].send, ops[i].send ? nbytes_of(ops[i].numel, dt) : 0, ops[i].recv,
               ops[i].recv ? nbytes_of(ops[i].numel, dt) : 0);
  return h;
}

void comm_barrier(comm_t *c) {
  comm_check_args(c, "comm_barrier", 0, DT_F32, 0, 0);
  comm_task_t t = comm_task_make(TASK_BARRIER, CO_CONTROL, c, NULL, NULL, 0, DT_F32, REDOP_SUM, 0);
  comm_wait(c, comm_submit(c, &t, "barrier"));
}
