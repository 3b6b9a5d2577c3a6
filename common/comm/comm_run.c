/* comm_run.c — how a task runs on the stream: the vendor collective or the ring code of
 * solutions/ring.c (comm_run_coll), CUDA buffers staged through host memory for a host-only backend
 * (run_staged), a reduce-scatter or all-gather in constant-size pieces (run_piece), its trace and
 * busy time (comm_run_task); and what the ring code builds on there (comm_p2p_*, comm_local_*,
 * comm_scratch). Runs on the comm thread (MPI) or inline on the caller's (NCCL): comm_internal.h.
 * Notes: notes/01-collectives.md, notes/gpu.md. */
#include "comm_internal.h" // struct comm, comm_backend_t, comm_task_t, comm_a2a_*, comm_count_p2p
#include "check.h"         // die_on_rank, xmalloc
#include "device.h"        // dev_memcpy
#include "ledger.h"        // ledger_add, ledger_sub, LEDGER_COMM
#include "ring.h"          // ring_broadcast, ring_reduce, ring_all_reduce, ...
#include "trace.h"         // trace_comm_event, trace_now_us, trace_enabled
#include <stdio.h>         // snprintf
#include <stdlib.h>        // free

/* ---- staging: CUDA buffers on a host-only backend ------------------------------------------ */
int comm_needs_staging(const comm_t *c) { return c->be->host_only && c->dev == DEV_CUDA; }

void *comm_stage_buf(comm_t *c, int slot, int64_t nbytes) {
  if (slot < 0 || slot > 1) die_on_rank("comm_stage_buf: slot %d is not 0 or 1 (c->stage[2])", slot);
  if (nbytes > c->stage_nbytes[slot]) {
    if (c->stage[slot]) {
      free(c->stage[slot]);
      ledger_sub(LEDGER_COMM, c->stage_nbytes[slot], c->stage_ledger_id[slot]);
    }
    c->stage_ledger_id[slot] = ledger_add(LEDGER_COMM, nbytes, "comm host staging");
    c->stage[slot] = xmalloc((size_t)nbytes, "comm host staging");
    c->stage_nbytes[slot] = nbytes;
  }
  return c->stage[slot];
}

/* ---- a task ---------------------------------------------------------------------------------- */
void comm_run_coll(comm_t *c, const comm_task_t *t) {
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
      if (t->group[i].send) comm_count_p2p(c, t->group[i].peer, nb, t->group[i].peer, 0);
      else comm_count_p2p(c, t->group[i].peer, 0, t->group[i].peer, nb);
    }
    be->group(c, t->n_group, t->group, t->dt);
    break;
  case TASK_ALL_TO_ALL:
  case TASK_ALL_TO_ALLV: comm_a2a_run(c, t); break;
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
    h.recv = comm_stage_buf(c, 0, nb);
    h.send = h.recv;
    if (t->kind == TASK_ALL_REDUCE || c->rank == t->peer)
      dev_memcpy(DEV_CPU, h.recv, DEV_CUDA, t->recv, (size_t)nb);
    comm_run_coll(c, &h);
    if (t->kind == TASK_ALL_REDUCE || c->rank != t->peer)
      dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_REDUCE:
    h.send = comm_stage_buf(c, 0, nb);
    h.recv = (t->send == t->recv) ? (void *)h.send : (c->rank == t->peer ? comm_stage_buf(c, 1, nb) : NULL);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    comm_run_coll(c, &h);
    if (c->rank == t->peer) dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_REDUCE_SCATTER:
    h.send = comm_stage_buf(c, 0, nb);
    h.recv = comm_stage_buf(c, 1, own);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    comm_run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)own);
    break;
  case TASK_ALL_GATHER:
    h.recv = comm_stage_buf(c, 0, nb);
    /* in place (send is this rank's chunk of recv) stays in place on the host */
    h.send = (t->send == (const char *)t->recv + lo) ? (char *)h.recv + lo : comm_stage_buf(c, 1, own);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)own);
    comm_run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_SEND:
    h.send = comm_stage_buf(c, 0, nb);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    comm_run_coll(c, &h);
    break;
  case TASK_RECV:
    h.recv = comm_stage_buf(c, 0, nb);
    comm_run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)nb);
    break;
  case TASK_SENDRECV: {
    int64_t rb = t->recv_numel * (int64_t)esz;
    h.send = comm_stage_buf(c, 0, nb);
    h.recv = comm_stage_buf(c, 1, rb);
    dev_memcpy(DEV_CPU, (void *)h.send, DEV_CUDA, t->send, (size_t)nb);
    comm_run_coll(c, &h);
    dev_memcpy(DEV_CUDA, t->recv, DEV_CPU, h.recv, (size_t)rb);
    break;
  }
  case TASK_GROUP: { /* the sends packed in staging slot 0, the receives in slot 1 */
    int64_t off[2] = {0, 0};
    for (int i = 0; i < t->n_group; i++) off[t->group[i].recv != NULL] += t->group[i].numel * (int64_t)esz;
    char *buf[2] = {comm_stage_buf(c, 0, off[0]), comm_stage_buf(c, 1, off[1])};
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
    comm_run_coll(c, &h);
    for (int i = 0; i < t->n_group; i++)
      if (t->group[i].recv)
        dev_memcpy(DEV_CUDA, t->group[i].recv, DEV_CPU, h.group[i].recv,
                   (size_t)(t->group[i].numel * (int64_t)esz));
    break;
  }
  case TASK_ALL_TO_ALL:
  case TASK_ALL_TO_ALLV: comm_a2a_staged(c, t); break;
  default: comm_run_coll(c, t);
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
      piece_copy(c, (char *)c->piece + (size_t)(r * s) * esz,
                 (const char *)t->send + (size_t)(r * t->piece_stride) * esz, s, t->dt);
    p.send = c->piece;
  } else { /* all-gather: send: this rank's s; recv: slice 0 of the caller's buffer */
    p.recv = c->piece;
  }
  if (comm_needs_staging(c)) run_staged(c, &p);
  else comm_run_coll(c, &p);
  if (t->kind == TASK_ALL_GATHER)
    for (int r = 0; r < c->world; r++)
      piece_copy(c, (char *)t->recv + (size_t)(r * t->piece_stride) * esz,
                 (const char *)c->piece + (size_t)(r * s) * esz, s, t->dt);
}

void comm_run_task(comm_t *c, comm_task_t *t) {
  double t0 = trace_now_us();
  if (t->kind == TASK_GROUP && (t->n_group < 1 || t->n_group > COMM_GROUP_MAX))
    die_on_rank("comm: a group task of %d operations; comm_task_t.group holds 1..%d", t->n_group,
                COMM_GROUP_MAX);
  if (c->be->threaded)
    comm_engine_task_bytes(c, (t->numel + t->recv_numel) * (int64_t)dtype_size(t->dt));
  if (t->kind == TASK_ALL_TO_ALLV && comm_checks_splits(c)) /* the ranks agree on splits, or all stop */
    comm_a2a_check_splits(c, t);
  if (c->be->task_begin) c->be->task_begin(c, t);
  if (t->kind >= TASK_BARRIER) comm_mpi_control(c, t); /* barrier and control ops: host, MPI */
  else if (t->piece_stride > 0) run_piece(c, t);
  else if (comm_needs_staging(c)) run_staged(c, t);
  else comm_run_coll(c, t);
  if (c->be->task_end) c->be->task_end(c, t);
  free(t->a2a); /* the all-to-all-v's copy of the counts (c->running keeps the pointer, never reads it) */
  t->a2a = NULL;
  double t1 = trace_now_us();
  pthread_mutex_lock(&c->mu);
  c->ctr.busy_us[t->op] += t1 - t0;
  pthread_mutex_unlock(&c->mu);
  if (trace_enabled()) {
    char args[96]; /* queued: µs between the caller's issue and the start (issued = ts − queued) */
    snprintf(args, sizeof args, "\"op\":\"%s\",\"bytes\":%lld,\"impl\":\"%s\",\"queued\":%.1f",
             comm_op_name(t->op), (long long)(t->numel * (int64_t)dtype_size(t->dt)),
             t->impl == COLL_RING ? "ring" : "vendor", t0 - t->issued_us);
    /* (c, seq): report.c finds the last arrival */
    trace_comm_event(c, t->seq, t->tag[0] ? t->tag : comm_op_name(t->op), t0, t1, args);
  }
}

/* ---- what the ring code builds on (called on the stream) ----------------------------------- */
static void check_peer(const comm_t *c, const char *fn, int peer) {
  if (peer < 0 || peer >= c->world || peer == c->rank)
    die_on_rank("%s: peer %d must be another rank in [0, %d)", fn, peer, c->world);
}

void comm_p2p_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                       int64_t recv_numel, int src, dtype_t dt) {
  if (send_numel > 0) check_peer(c, "comm_p2p_sendrecv", dst);
  if (recv_numel > 0) check_peer(c, "comm_p2p_sendrecv", src);
  int64_t esz = (int64_t)dtype_size(dt);
  comm_count_p2p(c, dst, send_numel * esz, src, recv_numel * esz);
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
      ledger_sub(LEDGER_COMM, c->scratch_nbytes[slot], c->scratch_ledger_id[slot]);
      c->scratch[slot] = NULL;
      c->scratch_nbytes[slot] = 0;
    }
    /* dies first if over the --mem-limit-mb budget */
    c->scratch_ledger_id[slot] = ledger_add(LEDGER_COMM, nbytes, "comm scratch");
    c->scratch[slot] = c->be->scratch_alloc(c, nbytes);
    c->scratch_nbytes[slot] = nbytes;
  }
  return c->scratch[slot];
}
