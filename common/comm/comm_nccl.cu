/* comm_nccl.cu — the NCCL backend of the communicator (comm_internal.h). Notes: notes/gpu.md.
 *
 * One MPI rank per GPU. MPI launches the job and carries one message: the NCCL unique id, made
 * by rank 0 and broadcast (ncclCommInitRank). Every collective is ENQUEUED on the dedicated comm
 * stream and returns at once; ordering with the compute stream is done with CUDA events, never
 * with host waits:
 *
 *   task_begin   compute stream --event--> comm stream   (the collective reads what compute wrote)
 *   NCCL call    on the comm stream                      (runs while compute goes on: overlap)
 *   task_end     record the task's event on the comm stream
 *   comm_wait(h) compute stream waits for h's event      (cudaStreamWaitEvent: no host block)
 *
 * The host only waits in comm_wait_all, in control ops (MPI on the host: the comm stream is
 * drained first), at finalize, and in dev_sync (the compute stream, which may wait on a
 * collective's event); there a watchdog polls ncclCommGetAsyncError and the deadline of
 * comm_set_timeout, and on error or timeout aborts the NCCL communicator, names the rank, the
 * collective and its tag, and takes the job down (MPI_Abort). dev_sync's watchdog
 * (nccl_watchdog) checks every NCCL communicator of the rank.
 *
 * Uneven chunks: ncclReduceScatter / ncclAllGather need numel divisible by N. Otherwise the
 * vendor path runs one grouped ncclReduce (reduce-scatter) or ncclBroadcast (all-gather) per
 * chunk, rooted at the chunk's owner: same result and chunking as comm.h, one NCCL launch. */
#include "cuda_common.cuh"   // CHECK_CUDA, CHECK_NCCL, die, check_rank
extern "C" {
#include "comm.h"            // comm_op_name, comm_chunk_lo (a C header: C linkage)
}
#include "comm_internal.h"   // struct comm, comm_backend_t, comm_task_t, comm_timeout_fail
#include "device_cuda.h"     // devcu_compute_stream, devcu_comm_stream, devcu_current, devcu_wait_stream ...
#include "ops_cuda.h"        // opcu_add_on, opcu_max_on
#include <stdio.h>           // snprintf
#include <string.h>          // memcmp, memcpy
#include <unistd.h>          // usleep, gethostname

/* Task seq's events live in slot seq mod n_ev. A communicator starts with NCCL_EVENTS_FIRST slots
 * and doubles them when a task's slot still holds one in flight, up to NCCL_EVENTS_MAX; there the
 * host waits for the slot's old task first (nccl_task_begin). */
enum { NCCL_EVENTS_FIRST = 16, NCCL_EVENTS_MAX = 1024 };

typedef struct nccl_event {
  cudaEvent_t end;    /* end of task seq on the comm stream */
  cudaEvent_t start;  /* its start, once the comm stream reached it (collectives) */
  int timed;          /* 1: start was recorded (busy time is counted) */
  comm_handle_t seq;  /* which task's completion `end` marks (0: none yet, or a finished one's) */
  comm_op_t op;
  char tag[48];
} nccl_event_t;

typedef struct nccl_state {
  ncclComm_t comm;
  cudaStream_t stream;   /* the comm stream (devcu_comm_stream) */
  cudaStream_t compute;  /* the compute stream */
  cudaEvent_t ev_compute;/* recorded on compute before each collective, waited on by the comm stream */
  nccl_event_t *ev;      /* [n_ev] slots: task seq in slot seq % n_ev */
  int n_ev;
  comm_handle_t last_seq;   /* last task with a recorded event */
  comm_handle_t done_seq;   /* every task <= done_seq is known complete on the GPU */
  int own_stream;           /* 1: a sub-communicator's stream, created (and destroyed) here */
  comm_t *c;                /* its communicator (the watchdog's list) */
  struct nccl_state *next;  /* every live NCCL communicator of the rank (nccl_watchdog) */
} nccl_state_t;

/* The rank's NCCL communicators (world and sub-communicators), for dev_sync's watchdog. Touched
 * at attach, split and finalize (the caller's thread) and read by the watchdog (the same thread:
 * the NCCL backend has no comm thread). */
static nccl_state_t *g_nccl_all = NULL;

static nccl_state_t *st(const comm_t *c) { return (nccl_state_t *)c->be_state; }
static nccl_event_t *slot_of(nccl_state_t *s, comm_handle_t seq) { return &s->ev[seq % s->n_ev]; }

static ncclDataType_t nccl_type(dtype_t dt) {
  switch (dt) {
  case DT_F32: return ncclFloat32;
  case DT_BF16: return ncclBfloat16;
  case DT_F16: return ncclFloat16;
  case DT_F64: return ncclFloat64;
  }
  die_on_rank("NCCL: unknown dtype %d", (int)dt);
}
static ncclRedOp_t nccl_op(redop_t op) { return op == REDOP_MAX ? ncclMax : ncclSum; }
static const char *elem(const void *p, int64_t i, dtype_t dt) {
  return (const char *)p + i * (int64_t)dtype_size(dt);
}

/* ---- the events of the handles ---------------------------------------------------------------- */
static void nccl_event_create(nccl_event_t *e) { /* timed: they measure the collectives' GPU time */
  CHECK_CUDA(cudaEventCreate(&e->end));
  CHECK_CUDA(cudaEventCreate(&e->start));
}

/* Twice the slots: each task in flight, (done_seq, last_seq], moves to its slot under the new
 * count (distinct mod n_ev, so distinct mod 2·n_ev: the invariant of nccl_host_wait holds); the
 * finished tasks' events go to the other slots, and the rest are created. */
static void nccl_events_grow(nccl_state_t *s) {
  int n = 2 * s->n_ev;
  nccl_event_t *ev = (nccl_event_t *)xcalloc((size_t)n, sizeof *ev, "NCCL events");
  for (int i = 0; i < s->n_ev; i++)
    if (s->ev[i].seq > s->done_seq) {
      ev[s->ev[i].seq % n] = s->ev[i];
      s->ev[i].end = NULL; /* moved */
    }
  for (int j = 0, k = 0; j < n; j++) {
    if (ev[j].end) continue;
    while (k < s->n_ev && !s->ev[k].end) k++;
    if (k < s->n_ev) { /* a finished task's events: reused, nothing else kept */
      ev[j].end = s->ev[k].end;
      ev[j].start = s->ev[k].start;
      s->ev[k++].end = NULL;
    } else {
      nccl_event_create(&ev[j]);
    }
  }
  free(s->ev);
  s->ev = ev;
  s->n_ev = n;
}

/* ---- the watchdog: host waits for the comm stream -------------------------------------------- */
static int g_abort_done; /* set (atomically) when ncclCommAbort has returned */
static void *nccl_abort_thread(void *comm) {
  (void)ncclCommAbort((ncclComm_t)comm);
  __atomic_store_n(&g_abort_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Abort the NCCL communicator (so no kernel spins forever), then take the job down. The abort
 * runs on its own thread and gets 10 s: the message must come out even if it blocks. */
[[noreturn]] static void nccl_fail(comm_t *c, comm_handle_t seq, const char *why) {
  nccl_state_t *s = st(c);
  const nccl_event_t *e = slot_of(s, seq);
  const char *op = e->seq == seq ? comm_op_name(e->op) : "collective";
  const char *tag = e->seq == seq ? e->tag : "-";
  pthread_t th;
  if (pthread_create(&th, NULL, nccl_abort_thread, (void *)s->comm) == 0) {
    pthread_detach(th);
    for (int i = 0; i < 1000 && !__atomic_load_n(&g_abort_done, __ATOMIC_ACQUIRE); i++) usleep(10000);
  }
  if (!why) comm_timeout_fail(c, op, tag); /* "rank R: <op> (<tag>) did not complete within S s" */
  die_on_rank("NCCL %s (%s) failed: %s — aborting the job", op, tag, why);
}

/* A finished task's GPU time (start to end event on the comm stream) goes to the op's busy
 * counter: the front only sees the enqueue, which on NCCL takes microseconds. */
static void nccl_count_busy(comm_t *c, nccl_event_t *e) {
  if (!e->timed) return;
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e->start, e->end));
  e->timed = 0;
  pthread_mutex_lock(&c->mu);
  c->ctr.busy_us[e->op] += 1000.0 * ms;
  pthread_mutex_unlock(&c->mu);
}

/* Wait on the host until task `upto` is complete, polling NCCL's asynchronous error state and the
 * deadline. The oldest unfinished task is the one named on failure. Invariant (nccl_task_end):
 * every task in (done_seq, last_seq] still owns its event slot. */
static void nccl_host_wait(comm_t *c, comm_handle_t upto) {
  nccl_state_t *s = st(c);
  if (upto > s->last_seq) upto = s->last_seq;
  double deadline = c->timeout_s > 0 ? comm_now_s() + c->timeout_s : 0;
  int sleep_us = 20;
  while (s->done_seq < upto) {
    comm_handle_t next = s->done_seq + 1;
    nccl_event_t *e = slot_of(s, next);
    if (e->seq != next) die_on_rank("NCCL backend: no event for task %lld", (long long)next);
    cudaError_t q = cudaEventQuery(e->end);
    if (q == cudaSuccess) {
      nccl_count_busy(c, e);
      s->done_seq = next;
      sleep_us = 20;
      continue;
    }
    if (q != cudaErrorNotReady) CHECK_CUDA(q);
    ncclResult_t ae = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(s->comm, &ae));
    if (ae != ncclSuccess && ae != ncclInProgress) nccl_fail(c, next, ncclGetErrorString(ae));
    if (deadline > 0 && comm_now_s() > deadline) nccl_fail(c, next, NULL);
    usleep((useconds_t)sleep_us);
    if (sleep_us < 1000) sleep_us *= 2;
  }
}

/* dev_sync's watchdog (devcu_set_sync_watchdog): the compute stream may wait on any NCCL
 * communicator's event, so each is checked: a NCCL asynchronous error ends the job at once;
 * past the deadline (the longest comm_set_timeout among them), the oldest task still running on
 * any of them is named ("rank R: <op> (<tag>) did not complete within S s"), or the compute
 * stream itself when every collective is done. */
static void nccl_watchdog(double waited_s) {
  double limit = 0;
  for (nccl_state_t *s = g_nccl_all; s; s = s->next) {
    ncclResult_t ae = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(s->comm, &ae));
    if (ae != ncclSuccess && ae != ncclInProgress)
      nccl_fail(s->c, s->done_seq + 1, ncclGetErrorString(ae));
    if (s->c->timeout_s > limit) limit = s->c->timeout_s;
  }
  if (limit <= 0 || waited_s <= limit) return;
  for (nccl_state_t *s = g_nccl_all; s; s = s->next) {
    while (s->done_seq < s->last_seq) { /* past what has finished: the first unfinished names the hang */
      nccl_event_t *e = slot_of(s, s->done_seq + 1);
      if (e->seq != s->done_seq + 1 || cudaEventQuery(e->end) != cudaSuccess) break;
      nccl_count_busy(s->c, e);
      s->done_seq++;
    }
    if (s->done_seq < s->last_seq) nccl_fail(s->c, s->done_seq + 1, NULL);
  }
  die_on_rank("dev_sync: the compute stream did not finish within %g s (every collective has)", limit);
}

/* ---- the buffers: device memory only ------------------------------------------------------- */
/* NCCL moves device memory; a host buffer would be read or written behind the host's back (comm_wait
 * does not block the host on NCCL). Every buffer of a data task is checked: one line naming the call,
 * its tag and which buffer, at the first run (control data goes by comm_ctl_*, on the host). */
static void nccl_check_buffer(const comm_task_t *t, const void *p, int64_t numel, const char *which) {
  if (!p || numel == 0 || devcu_pointer_is_device(p)) return;
  die_on_rank("%s (%s): the %s buffer is host memory, and the NCCL backend moves device memory only "
              "(stage it through a device buffer; control data goes by comm_ctl_*)",
              comm_op_name(t->op), t->tag, which);
}

static void nccl_check_buffers(const comm_task_t *t) {
  if (t->kind == TASK_GROUP) {
    for (int i = 0; i < t->n_group; i++) {
      nccl_check_buffer(t, t->group[i].send, t->group[i].numel, "group's send");
      nccl_check_buffer(t, t->group[i].recv, t->group[i].numel, "group's receive");
    }
    return;
  }
  nccl_check_buffer(t, t->send, t->numel, "send");
  int64_t recv_numel = t->kind == TASK_SENDRECV || t->kind == TASK_ALL_TO_ALLV ? t->recv_numel : t->numel;
  nccl_check_buffer(t, t->recv, recv_numel, "receive");
}

/* ---- ordering hooks ----------------------------------------------------------------------- */
static void nccl_task_begin(comm_t *c, const comm_task_t *t) {
  nccl_state_t *s = st(c);
  if (t->kind >= TASK_BARRIER) { /* control op: MPI on the host; drain the GPU side first (watchdog) */
    nccl_host_wait(c, s->last_seq);
    return;
  }
  nccl_check_buffers(t);
  /* the collective must see everything compute has queued so far (it may read those buffers) */
  CHECK_CUDA(cudaEventRecord(s->ev_compute, s->compute));
  CHECK_CUDA(cudaStreamWaitEvent(s->stream, s->ev_compute, 0));
  nccl_event_t *e = slot_of(s, t->seq);
  while (e->seq > s->done_seq && s->n_ev < NCCL_EVENTS_MAX) { /* the slot holds a task in flight: grow */
    nccl_events_grow(s);
    e = slot_of(s, t->seq);
  }
  if (e->seq > s->done_seq) nccl_host_wait(c, e->seq); /* at NCCL_EVENTS_MAX: the slot's old task may run */
  CHECK_CUDA(cudaEventRecord(e->start, s->stream)); /* GPU time starts once compute is done */
  e->timed = 1;
}

static void nccl_task_end(comm_t *c, const comm_task_t *t) {
  nccl_state_t *s = st(c);
  nccl_event_t *e = slot_of(s, t->seq);
  if (e->seq > s->done_seq) nccl_host_wait(c, e->seq); /* slot's old task may still run */
  CHECK_CUDA(cudaEventRecord(e->end, s->stream));
  e->seq = t->seq;
  e->op = t->op;
  snprintf(e->tag, sizeof e->tag, "%s", t->tag);
  s->last_seq = t->seq;
}

static void nccl_wait(comm_t *c, comm_handle_t h) {
  nccl_state_t *s = st(c);
  if (h <= s->done_seq) return;
  if (h > s->last_seq) die_on_rank("comm_wait: handle %lld was never issued", (long long)h);
  /* h's slot holds h: a task in flight keeps its slot (nccl_task_begin) */
  CHECK_CUDA(cudaStreamWaitEvent(s->compute, slot_of(s, h)->end, 0));
}

static void nccl_wait_all(comm_t *c) { nccl_host_wait(c, st(c)->last_seq); }

/* ---- vendor collectives (enqueued on the comm stream) ------------------------------------- */
static void nccl_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root) {
  if (numel == 0) return;
  CHECK_NCCL(ncclBroadcast(buf, buf, (size_t)numel, nccl_type(dt), root, st(c)->comm, st(c)->stream));
}

static void nccl_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op,
                        int root) {
  if (numel == 0) return;
  void *r = recv ? recv : (void *)send; /* recv is only written on root */
  CHECK_NCCL(ncclReduce(send, r, (size_t)numel, nccl_type(dt), nccl_op(op), root, st(c)->comm,
                        st(c)->stream));
}

static void nccl_all_reduce(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op) {
  if (numel == 0) return;
  CHECK_NCCL(ncclAllReduce(buf, buf, (size_t)numel, nccl_type(dt), nccl_op(op), st(c)->comm, st(c)->stream));
}

static void nccl_reduce_scatter(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                redop_t op) {
  nccl_state_t *s = st(c);
  int N = c->world;
  if (numel == 0) return;
  if (numel % N == 0) {
    CHECK_NCCL(ncclReduceScatter(send, recv, (size_t)(numel / N), nccl_type(dt), nccl_op(op), s->comm,
                                 s->stream));
    return;
  }
  /* uneven chunks: chunk r is reduced onto rank r, all in one group */
  CHECK_NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    int64_t lo = comm_chunk_lo(numel, N, r), n = comm_chunk_numel(numel, N, r);
    if (n == 0) continue;
    void *dst = r == c->rank ? recv : (void *)elem(send, lo, dt);
    CHECK_NCCL(ncclReduce(elem(send, lo, dt), dst, (size_t)n, nccl_type(dt), nccl_op(op), r, s->comm,
                          s->stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

static void nccl_all_gather(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  nccl_state_t *s = st(c);
  int N = c->world;
  if (numel == 0) return;
  if (numel % N == 0) { /* send may be recv's own chunk: NCCL's in-place form */
    CHECK_NCCL(ncclAllGather(send, recv, (size_t)(numel / N), nccl_type(dt), s->comm, s->stream));
    return;
  }
  /* uneven chunks: rank r broadcasts its chunk into place, all in one group */
  CHECK_NCCL(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    int64_t lo = comm_chunk_lo(numel, N, r), n = comm_chunk_numel(numel, N, r);
    if (n == 0) continue;
    void *dst = (void *)elem(recv, lo, dt);
    const void *src = r == c->rank ? send : dst;
    CHECK_NCCL(ncclBroadcast(src, dst, (size_t)n, nccl_type(dt), r, s->comm, s->stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

static void nccl_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst) {
  if (numel == 0) return;
  CHECK_NCCL(ncclSend(buf, (size_t)numel, nccl_type(dt), dst, st(c)->comm, st(c)->stream));
}

static void nccl_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src) {
  if (numel == 0) return;
  CHECK_NCCL(ncclRecv(buf, (size_t)numel, nccl_type(dt), src, st(c)->comm, st(c)->stream));
}

/* ---- all-to-all: one group of ncclSend/ncclRecv, every peer and this rank itself (as nccl-tests'
 * alltoall.cu does without NCCL 2.28's ncclAlltoAll, which has no v form); NCCL runs the group's
 * transfers at once, so no order can deadlock ------------------------------------------------- */
static void nccl_all_to_allv(comm_t *c, const void *send, const int64_t *send_counts,
                             const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                             const int64_t *recv_displs, dtype_t dt) {
  nccl_state_t *s = st(c);
  CHECK_NCCL(ncclGroupStart());
  for (int j = 0; j < c->world; j++) {
    if (send_counts[j] > 0)
      CHECK_NCCL(ncclSend(elem(send, send_displs[j], dt), (size_t)send_counts[j], nccl_type(dt), j, s->comm,
                          s->stream));
    if (recv_counts[j] > 0)
      CHECK_NCCL(ncclRecv((void *)elem(recv, recv_displs[j], dt), (size_t)recv_counts[j], nccl_type(dt), j,
                          s->comm, s->stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

static void nccl_all_to_all(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  nccl_state_t *s = st(c);
  int64_t b = numel / c->world; /* the front checked numel % world == 0 */
  if (b == 0) return;
  CHECK_NCCL(ncclGroupStart());
  for (int j = 0; j < c->world; j++) {
    CHECK_NCCL(ncclSend(elem(send, j * b, dt), (size_t)b, nccl_type(dt), j, s->comm, s->stream));
    CHECK_NCCL(ncclRecv((void *)elem(recv, j * b, dt), (size_t)b, nccl_type(dt), j, s->comm, s->stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

/* ---- what the ring (solutions/ring.c) is built from ---------------------------------------- */
/* Send and receive at once: one NCCL group, so neighbours in the ring never deadlock. */
static void nccl_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                          int64_t recv_numel, int src, dtype_t dt) {
  nccl_state_t *s = st(c);
  if (send_numel == 0 && recv_numel == 0) return;
  if (c->world == 1) { /* only to itself: a copy */
    int64_t n = send_numel < recv_numel ? send_numel : recv_numel;
    if (n > 0 && recvbuf != sendbuf)
      CHECK_CUDA(cudaMemcpyAsync(recvbuf, sendbuf, (size_t)n * dtype_size(dt), cudaMemcpyDeviceToDevice,
                                 s->stream));
    return;
  }
  CHECK_NCCL(ncclGroupStart());
  if (send_numel > 0)
    CHECK_NCCL(ncclSend(sendbuf, (size_t)send_numel, nccl_type(dt), dst, s->comm, s->stream));
  if (recv_numel > 0)
    CHECK_NCCL(ncclRecv(recvbuf, (size_t)recv_numel, nccl_type(dt), src, s->comm, s->stream));
  CHECK_NCCL(ncclGroupEnd());
}

/* comm_group_async: every send and receive in one group (Megatron's batched p2p). */
static void nccl_group(comm_t *c, int n, const comm_p2p_t *ops, dtype_t dt) {
  nccl_state_t *s = st(c);
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    if (ops[i].numel <= 0) continue;
    if (ops[i].send)
      CHECK_NCCL(ncclSend(ops[i].send, (size_t)ops[i].numel, nccl_type(dt), ops[i].peer, s->comm, s->stream));
    else
      CHECK_NCCL(ncclRecv(ops[i].recv, (size_t)ops[i].numel, nccl_type(dt), ops[i].peer, s->comm, s->stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

static void nccl_local_reduce(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op) {
  if (op == REDOP_MAX) opcu_max_on((void *)st(c)->stream, dst, src, dt, numel);
  else opcu_add_on((void *)st(c)->stream, dst, src, dt, numel);
}

static void nccl_local_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt) {
  CHECK_CUDA(cudaMemcpyAsync(dst, src, (size_t)numel * dtype_size(dt), cudaMemcpyDeviceToDevice,
                             st(c)->stream));
}

/* Scratch is stream-ordered on the comm stream: a buffer freed while ring kernels still use it
 * is released only after them. */
static void *nccl_scratch_alloc(comm_t *c, int64_t nbytes) {
  void *p = NULL;
  cudaError_t e = cudaMallocAsync(&p, (size_t)(nbytes > 0 ? nbytes : 1), st(c)->stream);
  if (e == cudaErrorMemoryAllocation)
    die("out of memory on rank %d: comm scratch needs %.1f MiB (GPU)", c->rank, nbytes / 1048576.0);
  CHECK_CUDA(e);
  return p;
}

static void nccl_scratch_free(comm_t *c, void *p) {
  if (p) CHECK_CUDA(cudaFreeAsync(p, st(c)->stream));
}

static void nccl_finalize(comm_t *c) {
  nccl_state_t *s = st(c);
  if (!s) return;
  nccl_host_wait(c, s->last_seq);
  devcu_wait_stream(s->stream);
  CHECK_NCCL(ncclCommDestroy(s->comm));
  for (nccl_state_t **p = &g_nccl_all; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  if (!g_nccl_all) devcu_set_sync_watchdog(NULL);
  if (s->own_stream) CHECK_CUDA(cudaStreamDestroy(s->stream));
  CHECK_CUDA(cudaEventDestroy(s->ev_compute));
  for (int i = 0; i < s->n_ev; i++) {
    CHECK_CUDA(cudaEventDestroy(s->ev[i].end));
    CHECK_CUDA(cudaEventDestroy(s->ev[i].start));
  }
  free(s->ev);
  free(s);
  c->be_state = NULL;
}

/* Designated initializers, in comm_backend_t's member order (C++ wants that order). */
static const comm_backend_t comm_nccl_backend = {
    .name = "nccl",
    .threaded = 0,
    .host_only = 0,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .send = nccl_send,
    .recv = nccl_recv,
    .sendrecv = nccl_sendrecv,
    .local_reduce = nccl_local_reduce,
    .local_copy = nccl_local_copy,
    .scratch_alloc = nccl_scratch_alloc,
    .scratch_free = nccl_scratch_free,
    .task_begin = nccl_task_begin,
    .task_end = nccl_task_end,
    .wait = nccl_wait,
    .wait_all = nccl_wait_all,
    .finalize = nccl_finalize,
    .sendrecv_user = nccl_sendrecv, /* the same grouped pair (NCCL matches p2p by order, not by tag) */
    .all_to_all = nccl_all_to_all,
    .all_to_allv = nccl_all_to_allv,
    .group = nccl_group,
};

/* ---- set-up ----------------------------------------------------------------------------- */
/* NCCL refuses two ranks on one GPU (it would hang or fail deep inside init): compare the GPUs'
 * UUIDs across ranks first and stop with advice. */
static void nccl_check_one_rank_per_gpu(comm_t *c) {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, devcu_current()));
  unsigned char mine[16];
  memcpy(mine, &prop.uuid, 16);
  unsigned char *all = (unsigned char *)xmalloc((size_t)c->world * 16, "GPU ids");
  CHECK_MPI(MPI_Allgather(mine, 16, MPI_BYTE, all, 16, MPI_BYTE, c->mpi));
  for (int r = 0; r < c->world; r++) {
    if (r == c->rank || memcmp(all + 16 * r, mine, 16) != 0) continue;
    if (r < c->rank) { /* the higher rank of the pair speaks; every rank aborts through MPI */
      char host[64] = "?";
      gethostname(host, sizeof host - 1);
      die_on_rank("--backend nccl needs one rank per GPU, but ranks %d and %d share GPU %d (%s) on %s.\n"
                  "  NCCL cannot put two ranks on one device. "
                  "Run at most one rank per GPU (mpirun -np <number of GPUs>),\n"
                  "  or use --backend mpi: collectives staged through host memory, "
                  "so several ranks can share one GPU.", r, c->rank, devcu_current(), prop.name, host);
    }
  }
  free(all);
  /* every rank reaches this point or is aborted by the one that found the clash */
  CHECK_MPI(MPI_Barrier(c->mpi));
}

/* State with its streams and events; the NCCL communicator is made by the caller. */
static nccl_state_t *nccl_state_new(comm_t *c, cudaStream_t stream, int own_stream) {
  nccl_state_t *s = (nccl_state_t *)xcalloc(1, sizeof *s, "NCCL state");
  s->c = c;
  s->next = g_nccl_all;
  g_nccl_all = s;
  devcu_set_sync_watchdog(nccl_watchdog);
  s->stream = stream;
  s->own_stream = own_stream;
  s->compute = (cudaStream_t)devcu_compute_stream();
  CHECK_CUDA(cudaEventCreateWithFlags(&s->ev_compute, cudaEventDisableTiming));
  s->n_ev = NCCL_EVENTS_FIRST; /* more when more tasks are in flight at once (nccl_task_begin) */
  s->ev = (nccl_event_t *)xcalloc((size_t)s->n_ev, sizeof *s->ev, "NCCL events");
  for (int i = 0; i < s->n_ev; i++) nccl_event_create(&s->ev[i]);
  return s;
}

/* A new NCCL communicator over c->mpi: rank 0 makes the id, MPI broadcasts it. */
static void nccl_init_from_id(comm_t *c, nccl_state_t *s) {
  ncclUniqueId id;
  if (c->rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  CHECK_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->mpi)); /* the only thing MPI carries for NCCL */
  CHECK_NCCL(ncclCommInitRank(&s->comm, c->world, id, c->rank));
}

void comm_nccl_attach(comm_t *c) {
  if (devcu_current() < 0) die_on_rank("comm_nccl_attach: no GPU selected");
  nccl_check_one_rank_per_gpu(c);
  nccl_state_t *s = nccl_state_new(c, (cudaStream_t)devcu_comm_stream(), 0);
  nccl_init_from_id(c, s);
  c->be_state = s;
  c->be = &comm_nccl_backend;
}

/* A group's collectives go on a stream of its own: ordered after compute and before its waiters by
 * events as for the world communicator, and never queued behind another group's collectives. */
void comm_nccl_split(comm_t *parent, comm_t *c, int color, int key) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  nccl_state_t *s = nccl_state_new(c, stream, 1);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  /* NULL config: the parent's; ranks ordered by key then parent rank, as MPI_Comm_split */
  CHECK_NCCL(ncclCommSplit(st(parent)->comm, color, key, &s->comm, NULL));
#else
  nccl_init_from_id(c, s);
#endif
  int nrank = -1, nworld = -1;
  CHECK_NCCL(ncclCommUserRank(s->comm, &nrank));
  CHECK_NCCL(ncclCommCount(s->comm, &nworld));
  if (nrank != c->rank || nworld != c->world)
    die_on_rank("comm_split: NCCL made rank %d of %d where MPI made rank %d of %d", nrank, nworld,
        c->rank, c->world);
  c->be_state = s;
  c->be = &comm_nccl_backend;
}

void comm_nccl_split_none(comm_t *parent, int key) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  ncclComm_t none = NULL; /* the parent's collective: every rank of it calls ncclCommSplit */
  CHECK_NCCL(ncclCommSplit(st(parent)->comm, NCCL_SPLIT_NOCOLOR, key, &none, NULL));
  if (none) die_on_rank("comm_split: NCCL_SPLIT_NOCOLOR gave this rank a communicator");
#else
  (void)parent, (void)key; /* each group's id goes over its own MPI communicator: nothing to join */
#endif
}

void comm_cuda_thread_attach(void) { devcu_thread_attach_comm(); }
