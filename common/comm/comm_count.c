/* comm_count.c — what each call adds to the byte counters: the ring model of every collective
 * (comm_model_*), the counts at issue, the ring code's real bytes, and control traffic counted
 * apart under CO_CONTROL (comm_ctl_*); comm.h, "Counters". Notes: notes/01-collectives.md. */
#include "comm_internal.h" // struct comm, comm_task_t, comm_submit, comm_task_make, comm_topo_count*
#include "check.h"         // die_on_rank
#include <stdio.h>         // fwrite, fputc, fflush
#include <stdlib.h>        // free
#include <string.h>        // memset, strlen

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

int64_t comm_model_all_to_allv(const int64_t *counts, dtype_t dt, int world, int rank) {
  int64_t n = 0;
  for (int j = 0; j < world; j++)
    if (j != rank) n += counts[j];
  return n * (int64_t)dtype_size(dt);
}

/* ---- at issue (comm_submit, under c->mu) ---------------------------------------------------- */
void comm_count_issue(comm_t *c, const comm_task_t *t) {
  if (t->op == CO_ALL_TO_ALL) comm_a2a_count(c, t); /* every block but its own (comm_a2a.c) */
  else if (t->op != CO_CONTROL) {
    int64_t sent = comm_model_sent(t->op, t->numel, t->dt, c->world, c->rank, t->peer);
    int64_t recvd = comm_model_recvd(t->op, t->numel, t->dt, c->world, c->rank, t->peer);
    c->ctr.sent[t->op] += sent;
    c->ctr.recvd[t->op] += recvd;
    comm_topo_count(c, t->op, t->peer, sent, recvd);
  }
  if (t->kind != TASK_STOP) c->ctr.calls[t->op]++;
}

/* ---- the ring code's real bytes (comm_p2p_*, on the stream) --------------------------------- */
void comm_count_p2p(comm_t *c, int dst, int64_t sent, int src, int64_t recvd) {
  pthread_mutex_lock(&c->mu);
  c->ctr.p2p_sent += sent;
  c->ctr.p2p_recvd += recvd;
  comm_topo_count_p2p(c, dst, sent, src, recvd);
  pthread_mutex_unlock(&c->mu);
}

/* ---- control traffic (host memory; counted under CO_CONTROL with the ring model) ----------- */
/* gather: the bytes went to rank 0 (comm_ctl_gather; on rank 0, sizes[world] of what came in);
 * otherwise the ring model's neighbours */
void comm_count_control(comm_t *c, int64_t sent, int64_t recvd, int gather, const int64_t *sizes) {
  pthread_mutex_lock(&c->mu);
  c->ctr.sent[CO_CONTROL] += sent;
  c->ctr.recvd[CO_CONTROL] += recvd;
  if (gather) comm_topo_count_gather(c, sent, sizes);
  else comm_topo_count(c, CO_CONTROL, 0, sent, recvd);
  pthread_mutex_unlock(&c->mu);
}

void comm_ctl_all_reduce_f64(comm_t *c, double *vals, int n, redop_t op) {
  if (n < 0) die_on_rank("comm_ctl_all_reduce_f64: n %d is negative", n);
  comm_count_control(c, comm_model_sent(CO_ALL_REDUCE, n, DT_F64, c->world, c->rank, 0),
                     comm_model_recvd(CO_ALL_REDUCE, n, DT_F64, c->world, c->rank, 0), 0, NULL);
  comm_task_t t = comm_task_make(TASK_CTL_ALL_REDUCE_F64, CO_CONTROL, c, vals, vals, n, DT_F64, op, 0);
  comm_wait(c, comm_submit(c, &t, "ctl_all_reduce"));
}

void comm_ctl_all_to_all_i64(comm_t *c, const int64_t *send, int64_t *recv, int n) {
  if (n < 0) die_on_rank("comm_ctl_all_to_all_i64: n %d is negative", n);
  int64_t others = (int64_t)(c->world - 1) * n * (int64_t)sizeof(int64_t); /* the own block stays */
  comm_count_control(c, others, others, 0, NULL);
  comm_task_t t = comm_task_make(TASK_CTL_ALL_TO_ALL_I64, CO_CONTROL, c, send, recv, n, DT_F32, REDOP_SUM, 0);
  comm_wait(c, comm_submit(c, &t, "ctl_all_to_all"));
}

void comm_ctl_broadcast(comm_t *c, void *bytes, int64_t nbytes, int root) {
  comm_check_args(c, "comm_ctl_broadcast", nbytes, DT_F32, root, 1);
  /* counted as the chain broadcast of nbytes one-byte elements */
  comm_count_control(c, model_elems(CO_BROADCAST, 1, nbytes, c->world, c->rank, root),
                     model_elems(CO_BROADCAST, 0, nbytes, c->world, c->rank, root), 0, NULL);
  comm_task_t t = comm_task_make(TASK_CTL_BROADCAST, CO_CONTROL, c, bytes, bytes, nbytes, DT_F32, REDOP_SUM,
                                 root);
  comm_wait(c, comm_submit(c, &t, "ctl_broadcast"));
}

void comm_ctl_gather(comm_t *c, const void *blob, int64_t nbytes, char **all, int64_t **sizes) {
  comm_check_args(c, "comm_ctl_gather", nbytes, DT_F32, 0, 0);
  comm_task_t t = comm_task_make(TASK_CTL_GATHER, CO_CONTROL, c, blob, NULL, nbytes, DT_F32, REDOP_SUM, 0);
  t.gather_all = all;
  t.gather_sizes = sizes;
  comm_wait(c, comm_submit(c, &t, "ctl_gather"));
  int64_t got = 0;
  if (c->rank == 0)
    for (int r = 1; r < c->world; r++) got += (*sizes)[r];
  comm_count_control(c, c->rank == 0 ? 0 : nbytes, got, 1, c->rank == 0 ? *sizes : NULL);
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
