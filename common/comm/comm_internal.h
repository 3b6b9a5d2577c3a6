/* comm_internal.h — inside the communicator: struct comm, the backend interface, and what the
 * front's files share. Only common/comm/ includes this: the front (comm.c, comm_checks.c,
 * comm_count.c, comm_run.c, comm_a2a.c), the backends (comm_mpi.c, comm_nccl.cu), the engine
 * (comm_engine.c) and the topology (comm_topo.c). Users and strategies see comm.h only.
 * Notes: notes/01-collectives.md.
 *
 * Split of work:
 *   front           argument checks, the per-op byte counters (ring model), the task queue,
 *                   handles, timeouts, the ring/vendor dispatch, control ops, staging of CUDA
 *                   buffers through host memory for host-only backends, scratch + ledger.
 *   backend         the vendor collectives, the p2p primitives the ring is built from, local
 *                   reduce/copy and scratch memory on its device, and (non-threaded backends)
 *                   ordering on its own stream.
 *
 * Two execution models, chosen by comm_backend_t.threaded:
 *   threaded = 1 (MPI)   the front owns a stream: a fiber on the rank's one progress engine thread
 *                        (comm_engine.h), shared by all its communicators. comm_*_async() appends a
 *                        task to a queue and returns its sequence number; the fiber runs tasks in
 *                        order and every backend function is called there (all MPI calls after
 *                        comm_init happen on the engine thread); a backend wait yields the fiber.
 *                        comm_wait blocks the caller on a condition variable
 *                        (pthread_cond_timedwait: the deadline of comm_set_timeout).
 *   threaded = 0 (NCCL)  no thread. The front runs the task inline on the caller's thread:
 *                        task_begin (e.g. comm stream waits for the compute stream), the vendor or
 *                        ring body (which only ENQUEUES work on the backend's stream), task_end
 *                        (e.g. record a CUDA event for t->seq). comm_wait(h) calls be->wait, which
 *                        makes the compute stream wait for h's event (no host block);
 *                        comm_wait_all calls be->wait_all (host sync, must honour c->timeout_s via
 *                        comm_timeout_fail).
 * Either way the ring code (solutions/ring.c) runs "on the stream": it calls comm_p2p_sendrecv,
 * comm_local_reduce, comm_local_copy and comm_scratch, which the front forwards to the backend.
 *
 * CUDA buffers on a host-only backend (MPI with comm_device == DEV_CUDA): the front stages.
 * At submit it syncs the compute stream (dev_sync) so the inputs are final; on the comm thread it
 * copies device inputs into host staging buffers (dev_memcpy), runs the task (vendor or ring) on
 * the host copies, and copies the outputs back before marking the task done. The comm thread
 * first calls comm_cuda_thread_attach() (below) so its CUDA calls use the rank's GPU. So the MPI
 * backend itself only ever sees host pointers. */
#ifndef ZL_COMM_INTERNAL_H
#define ZL_COMM_INTERNAL_H
#ifdef __cplusplus
#define OMPI_SKIP_MPICXX 1   /* C API only: Open MPI's C++ bindings do not build with -Werror */
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>      // MPI_Comm (launch, control traffic, and the MPI backend)
#include <pthread.h>  // pthread_t, pthread_mutex_t, pthread_cond_t: the comm thread
#include "comm.h"     // comm_t, comm_op_t, comm_counters_t, redop_t, coll_impl_t
#ifdef __cplusplus
extern "C" {
#endif

/* What a queued task does (the counter category is separate: comm_task_t.op). */
typedef enum {
  TASK_BROADCAST = 0, TASK_REDUCE, TASK_ALL_REDUCE, TASK_REDUCE_SCATTER, TASK_ALL_GATHER,
  TASK_SEND, TASK_RECV, TASK_SENDRECV, TASK_GROUP, TASK_ALL_TO_ALL, TASK_ALL_TO_ALLV, TASK_BARRIER,
  TASK_CTL_ALL_REDUCE_F64, TASK_CTL_BROADCAST, TASK_CTL_GATHER, TASK_CTL_ALL_TO_ALL_I64, /* host, MPI */
  TASK_STOP                                                      /* ends the comm thread */
} comm_task_kind_t;

/* One operation on the stream. Pointers are the caller's (or host staging copies, see above). */
typedef struct comm_task {
  comm_task_kind_t kind;
  comm_op_t op;          /* counter category: CO_ALL_REDUCE, ..., CO_CONTROL */
  coll_impl_t impl;      /* COLL_VENDOR or COLL_RING, captured at submit */
  const void *send;      /* input (== recv for in-place ops: broadcast, all-reduce) */
  void *recv;            /* output */
  int64_t numel;         /* full-buffer elements (reduce-scatter/all-gather: the whole buffer) */
  dtype_t dt;
  redop_t redop;
  int peer;              /* root (broadcast/reduce), dst (send, sendrecv), src (recv) */
  int64_t recv_numel;    /* TASK_SENDRECV: elements received into recv, from peer2 */
  int peer2;
  int n_group;           /* TASK_GROUP: its sends and receives (comm_group_async) */
  comm_p2p_t group[COMM_GROUP_MAX];
  char tag[48];          /* names the op in traces and timeout messages */
  comm_handle_t seq;     /* 1, 2, 3 ... in issue order */
  double issued_us;      /* trace clock when the caller issued it (traces: args.queued) */
  char **gather_all;     /* TASK_CTL_GATHER outputs (see comm_ctl_gather) */
  int64_t **gather_sizes;
  int64_t piece_stride;  /* a piece of a reduce-scatter/all-gather (comm_set_piece_bytes): elements
                          * between the ranks' slices in the caller's full buffer; the slices go through
                          * c->piece. 0: whole */
  int64_t *a2a;          /* TASK_ALL_TO_ALLV: [4·world] send_counts, send_displs, recv_counts, recv_displs
                          * (a copy made at issue, freed once the task ran); numel = Σ send_counts,
                          * recv_numel = Σ recv_counts. TASK_ALL_TO_ALL: NULL, numel = the whole buffer
                          * (block = numel/world) */
} comm_task_t;

/* The backend vtable. Every function pointer is called "on the stream": on the comm thread for
 * threaded backends, inline (enqueueing on the backend's stream) for the others. Buffers are on
 * the backend's device (host for MPI). numel may be 0; world may be 1. */
typedef struct comm_backend {
  const char *name; /* "mpi", "nccl" */
  int threaded;     /* 1: the front runs tasks on its comm thread; 0: inline, backend orders them */
  int host_only;    /* 1: needs host pointers (the front stages CUDA buffers); 0: takes comm_device */
  /* vendor collectives, same semantics and chunking as comm.h */
  void (*broadcast)(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root);
  void (*reduce)(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op, int root);
  void (*all_reduce)(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op);
  void (*reduce_scatter)(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op);
  void (*all_gather)(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt);
  void (*send)(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst);
  void (*recv)(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src);
  /* p2p primitive of the ring: send to dst and receive from src at the same time. A side with
   * numel 0 is skipped (no message): the ring only pairs equal sizes, so the peer skips its
   * matching side too. dst/src are never this rank (the ring does not call it when world == 1). */
  void (*sendrecv)(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                   int64_t recv_numel, int src, dtype_t dt);
  void (*local_reduce)(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op);
  void (*local_copy)(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt);
  /* Scratch memory on the backend's device (the front accounts it in the ledger). */
  void *(*scratch_alloc)(comm_t *c, int64_t nbytes);
  void (*scratch_free)(comm_t *c, void *p);
  /* Ordering hooks for non-threaded backends (NULL when unused). */
  void (*task_begin)(comm_t *c, const comm_task_t *t); /* e.g. comm stream waits for compute stream */
  void (*task_end)(comm_t *c, const comm_task_t *t);   /* e.g. record the event of t->seq */
  void (*wait)(comm_t *c, comm_handle_t h);            /* compute stream waits for h */
  void (*wait_all)(comm_t *c);                         /* host waits for everything (honours timeout) */
  /* Release the backend (called after the stream is drained, before MPI_Finalize). */
  void (*finalize)(comm_t *c);
  /* comm_sendrecv_async, vendor path: as sendrecv, but matching the user's send/recv (MPI: their
   * tag; NCCL has no tags: the same grouped ncclSend/ncclRecv as sendrecv). */
  void (*sendrecv_user)(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                        int64_t recv_numel, int src, dtype_t dt);
  /* vendor all-to-all (comm.h): equal blocks of numel/world, and the v form with counts and
   * displacements in elements ([world] each; the front has checked they agree across ranks) */
  void (*all_to_all)(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt);
  void (*all_to_allv)(comm_t *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                      void *recv, const int64_t *recv_counts, const int64_t *recv_displs, dtype_t dt);
  /* comm_group_async: n sends and receives as one operation (NCCL: one group; MPI: all posted,
   * then completed together), matching the user's send/recv */
  void (*group)(comm_t *c, int n, const comm_p2p_t *ops, dtype_t dt);
} comm_backend_t;

struct comm {
  int rank, world, local_rank;
  device_t dev;
  backend_t backend;
  const comm_backend_t *be;
  void *be_state;            /* the backend's own (MPI: bf16 type and ops; NCCL: ncclComm_t, events) */
  MPI_Comm mpi;              /* duplicate of MPI_COMM_WORLD (a sub-communicator: its MPI_Comm_split), errors
                              * returned */
  comm_t *parent;            /* comm_split: the communicator this one was split from; NULL: the world */
  int n_children;            /* sub-communicators split from this one and not yet finalized */
  coll_impl_t impl;
  double timeout_s;          /* 0 = no deadline */

  /* the stream (threaded backends): a fiber on the rank's engine (comm_engine.c); everything
   * below is guarded by mu */
  struct comm_fiber *fiber;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_done;    /* done_seq advanced */
  comm_task_t *queue;        /* circular buffer of q_cap tasks */
  int q_head, q_len, q_cap;
  comm_handle_t next_seq;    /* last handle issued */
  comm_handle_t done_seq;    /* every task with seq <= done_seq is complete */
  comm_task_t running;       /* the task on the stream now (valid when done_seq < next_seq) */
  comm_counters_t ctr;

  /* scratch (ring) and host staging (CUDA buffers on a host-only backend), grown on demand */
  void *scratch[2];
  int64_t scratch_nbytes[2], scratch_ledger_id[2]; /* ledger_add's ids, for ledger_sub */
  void *stage[2];
  int64_t stage_nbytes[2], stage_ledger_id[2];
  /* constant-size buffers (comm_set_piece_bytes): the cap, 0 = none, and the packing buffer of
   * the pieced reduce-scatters / all-gathers (piece_bytes, allocated at the first such piece) */
  int64_t piece_bytes;
  void *piece;
  int64_t piece_ledger_id;
  int piece_on_cuda; /* piece came from dev_malloc (CUDA buffers on a host-only backend) */

  /* exercise mode (ZL_EXERCISE_TIMEOUT_S set): the handles not yet waited for (comm_checks.c,
   * "exercise mode"): a point-to-point one (p2p) until comm_wait on it by name — one still open at
   * comm_wait_all was dropped; a collective one until comm_wait on it or on a later handle of this
   * communicator, or comm_wait_all. With the bytes each reads (rd) and writes (wr), so that an
   * operation of another communicator touching them (a race: two streams do not wait for each
   * other) is named. Guarded by comm_checks.c's g_track_mu. */
  int track;
  struct comm_open {
    comm_handle_t h;
    const char *fn;
    char tag[48];
    int p2p;
    const char *rd, *wr;
    int64_t rd_n, wr_n;
  } *open;
  int n_open, cap_open;

  /* topology (comm_topo.c): the node of each rank of this communicator, the job's numbering */
  int *node_of;              /* [world]; NULL on comm_shape_only */
  int n_nodes;               /* distinct nodes among this communicator's ranks */
};

/* ---- backends --------------------------------------------------------------------------- */
/* MPI is always there: it launches the job and carries control traffic. */
/* MPI_Init_thread (MULTIPLE requested, SERIALIZED at least), MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD, c->rank/world/local_rank (MPI_Comm_split_type SHARED), c->mpi. */
void comm_mpi_boot(comm_t *c, int *argc, char ***argv);
/* Attach the MPI backend: c->be = &comm_mpi_backend, c->be_state. */
void comm_mpi_attach(comm_t *c);
/* Control ops and barrier (host memory, MPI on c->mpi), for every backend. */
void comm_mpi_control(comm_t *c, comm_task_t *t);
/* MPI_Comm_free + MPI_Finalize (after the stream has stopped and the backend is released);
 * a sub-communicator only frees its MPI_Comm. */
void comm_mpi_shutdown(comm_t *c);
/* comm_split, MPI side (every backend): MPI_Comm_split of parent->mpi (errors returned) into
 * sub->mpi; sub->rank, world, local_rank. `threaded`: the sub will run its own communication
 * thread, so MPI_THREAD_MULTIPLE is required (dies saying so otherwise). */
void comm_mpi_split(comm_t *parent, comm_t *sub, int color, int key, int threaded);
/* comm_split with color < 0, MPI side: this rank takes part in MPI_Comm_split of parent->mpi with
 * MPI_UNDEFINED and gets no communicator (MPI_COMM_NULL). */
void comm_mpi_split_none(comm_t *parent, int key);
/* all[world·n] = every rank's n int64s, in rank order (MPI on c->mpi, host memory): the count
 * exchange of comm_all_to_allv, on the stream (or the caller's thread on a non-threaded backend). */
void comm_mpi_all_gather_i64(comm_t *c, const int64_t *mine, int n, int64_t *all);
extern const comm_backend_t comm_mpi_backend;

#ifdef ZL_CUDA
/* common/comm/comm_nccl.cu (CUDA builds only): c->dev == DEV_CUDA and the GPU is already selected
 * (comm_init calls device_cuda_select(local_rank) first). Creates the NCCL communicator from an
 * id broadcast over c->mpi; sets c->be (threaded = 0, host_only = 0) and c->be_state. Dies with a
 * clear message when it cannot work (e.g. two ranks on one GPU). */
void comm_nccl_attach(comm_t *c);
/* comm_split on the NCCL backend: sub->mpi, rank and world are set (comm_mpi_split). The sub's
 * NCCL communicator comes from ncclCommSplit of the parent's (NCCL >= 2.18), else from a new id
 * broadcast over sub->mpi; it gets its own comm stream and events. Sets sub->be, sub->be_state. */
void comm_nccl_split(comm_t *parent, comm_t *sub, int color, int key);
/* comm_split with color < 0 on the NCCL backend: this rank takes part in ncclCommSplit of the
 * parent's communicator with NCCL_SPLIT_NOCOLOR and gets none (NCCL >= 2.18; before, the groups'
 * ids go over their own MPI communicators and there is nothing to take part in). */
void comm_nccl_split_none(comm_t *parent, int key);
/* Makes the calling thread (the comm thread) use the rank's GPU (cudaSetDevice); called by the
 * front at the start of the comm thread when comm_device(c) == DEV_CUDA. */
void comm_cuda_thread_attach(void);
#endif

/* comm_topo.c: the node map of c (collective over c->mpi, main thread, before the stream
 * starts; parent NULL: from MPI_COMM_TYPE_SHARED or ZL_NODE_OF_RANK), its release, and the
 * inter-node share of one count (under c->mu; see comm.h, topology). */
void comm_topo_init(comm_t *c, const comm_t *parent);
void comm_topo_free(comm_t *c);
void comm_topo_count(comm_t *c, comm_op_t op, int peer, int64_t sent, int64_t recvd);
void comm_topo_count_p2p(comm_t *c, int dst, int64_t sent, int src, int64_t recvd);
/* comm_ctl_gather: `sent` went to rank 0; on rank 0, sizes[world] came in from each rank */
void comm_topo_count_gather(comm_t *c, int64_t sent, const int64_t *sizes);
/* an all-to-all: sent_to[j] / recvd_from[j] bytes to / from rank j (this rank's own entry ignored) */
void comm_topo_count_peers(comm_t *c, comm_op_t op, const int64_t *sent_to, const int64_t *recvd_from);
/* ---- the progress engine (common/comm/comm_engine.c; public part: comm_engine.h) ---------------
 * attach: c's stream becomes a fiber running body(c) (the front's task loop); the engine thread
 * starts with the first. detach: after body returned (TASK_STOP ran), frees the fiber; the last
 * one stops the engine thread. idle: in the fiber, c->mu held, queue empty: sleep until
 * comm_engine_wake(c) (called under c->mu after queueing). block: in a fiber, an MPI request
 * tested not done: let the other fibers run (no-op outside a fiber); progress: a test succeeded.
 * note_wait: seconds a caller spent blocked in comm_wait. */
struct comm_fiber;
void comm_engine_attach(comm_t *c, void (*body)(comm_t *));
void comm_engine_detach(comm_t *c);
void comm_engine_idle(comm_t *c);
void comm_engine_wake(comm_t *c);
int comm_engine_in_fiber(void);
void comm_engine_block(void);
void comm_engine_progress(void);
/* The task about to run on c moves about `bytes`: its waits test without sleeping for a time
 * proportional (comm_engine.c: why). */
void comm_engine_task_bytes(comm_t *c, int64_t bytes);
void comm_engine_count_test(void);
void comm_engine_note_wait(double seconds);
/* +1 when the caller's thread starts blocking in comm_wait, −1 when it stops (see comm_engine.c). */
void comm_engine_main_waits(int delta);
/* In c's fiber: run fn(arg), a blocking MPI call, on c's helper thread while the fiber yields
 * (comm_engine.h: why); elsewhere: call it here. */
void comm_engine_run_blocking(comm_t *c, void (*fn)(void *), void *arg);

/* ---- inside the front: what its files share --------------------------------------------------
 *   comm.c         init / split / finalize, the stream, submit, the waits, the collectives' calls
 *   comm_checks.c  argument checks, the all-to-all's split check, exercise-mode handle tracking
 *   comm_count.c   the byte counters: the ring model, the counts at issue, control traffic
 *   comm_run.c     a task on the stream: vendor or ring, staged, pieced; what the ring builds on
 *   comm_a2a.c     the all-to-all */
/* comm.c: a task of the caller's arguments (impl captured now), and its issue: counted, given the
 * next handle, queued (threaded) or run inline. */
comm_task_t comm_task_make(comm_task_kind_t kind, comm_op_t op, const comm_t *c, const void *send, void *recv,
                           int64_t numel, dtype_t dt, redop_t redop, int peer);
comm_handle_t comm_submit(comm_t *c, comm_task_t *t, const char *tag);
/* comm_checks.c: a NULL communicator, a negative numel, an unknown dtype, a peer outside the group
 * (need_peer) end the job naming fn; check_p2p names the tag too. */
void comm_check_args(const comm_t *c, const char *fn, int64_t numel, dtype_t dt, int peer, int need_peer);
void comm_check_p2p(const comm_t *c, const char *fn, const char *tag, int peer);
/* On the stream, before an all-to-all-v moves data: every rank's counts, one verdict on all. */
void comm_a2a_check_splits(comm_t *c, const comm_task_t *t);
/* 1 when the all-to-all-v's split check runs on c: always on MPI (the host path), on NCCL only with
 * ZL_CHECK_SPLITS=1 or in exercise mode (there it would cost a host round trip per exchange). */
int comm_checks_splits(const comm_t *c);
/* Exercise mode (c->track): register at alloc, unregister at finalize; check before an operation
 * reads rd_n bytes at rd and writes wr_n at wr, open its handle after submit, waited / wait_all as
 * comm_wait / comm_wait_all run (comm.h, comm_wait). No-ops on an untracked communicator. */
void comm_track_register(comm_t *c);
void comm_track_unregister(comm_t *c);
void comm_track_check(comm_t *c, const char *fn, const char *tag, const void *rd, int64_t rd_n,
                      const void *wr, int64_t wr_n);
void comm_track_open(comm_t *c, comm_handle_t h, const char *fn, const char *tag, int p2p, const void *rd,
                     int64_t rd_n, const void *wr, int64_t wr_n);
void comm_track_waited(comm_t *c, comm_handle_t h);
void comm_track_wait_all(comm_t *c);
/* comm_count.c: a task's ring-model bytes and its call, at issue (under c->mu); the ring code's
 * real bytes (takes c->mu); control traffic (takes c->mu; gather: comm_ctl_gather's, sizes on
 * rank 0). */
void comm_count_issue(comm_t *c, const comm_task_t *t);
void comm_count_p2p(comm_t *c, int dst, int64_t sent, int src, int64_t recvd);
void comm_count_control(comm_t *c, int64_t sent, int64_t recvd, int gather, const int64_t *sizes);
/* comm_run.c: CUDA buffers on a host-only backend (the front stages them); host staging buffer
 * slot 0 or 1 of at least nbytes (grown on demand, LEDGER_COMM); the collective itself, vendor or
 * ring, on buffers the backend can use; one task with its checks, hooks, busy time and trace. */
int comm_needs_staging(const comm_t *c);
void *comm_stage_buf(comm_t *c, int slot, int64_t nbytes);
void comm_run_coll(comm_t *c, const comm_task_t *t);
void comm_run_task(comm_t *c, comm_task_t *t);
/* comm_a2a.c: block j's elements on side 0 (send) or 1 (recv); the counts at issue (under c->mu);
 * the call (vendor or pairwise); the same through host staging. */
int64_t comm_a2a_n(const comm_t *c, const comm_task_t *t, int side, int j);
void comm_a2a_count(comm_t *c, const comm_task_t *t);
void comm_a2a_run(comm_t *c, const comm_task_t *t);
void comm_a2a_staged(comm_t *c, const comm_task_t *t);

/* ---- front services for backends ---------------------------------------------------------- */
#ifdef __cplusplus
#define COMM_NORETURN [[noreturn]]
#else
#define COMM_NORETURN _Noreturn
#endif
/* Print `rank R: <op> (<tag>) did not complete within S s` and abort the job. */
COMM_NORETURN void comm_timeout_fail(const comm_t *c, const char *op, const char *tag);
/* Seconds on a monotonic clock (for deadlines). */
double comm_now_s(void);
/* comm_mpi.c: every rank of c calls it with the same text: rank 0 prints it to stderr, then the
 * job ends with exit code `code` (the ranks meet first, so the line is out before anyone aborts). */
COMM_NORETURN void comm_mpi_fail_all(comm_t *c, const char *text, int code);
#ifdef __cplusplus
}
#endif
#endif
