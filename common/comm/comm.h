/* comm.h — the communicator: who am I, and the collectives.
 *
 * Backends: "mpi" (Open MPI; CPU buffers, or CUDA buffers staged through the host so several
 * ranks can share one GPU) and "nccl" (one rank per GPU, collectives on a dedicated CUDA
 * stream). Every collective exists twice:
 *   - vendor: MPI_Allreduce / ncclAllReduce ...
 *   - ring:   our own, built only from send/recv in solutions/ring.c (notes/01-collectives.md);
 *             the all-to-all has no ring: COLL_RING runs the pairwise exchange of solutions/alltoall.c
 * chosen per communicator with comm_set_impl.
 *
 * Execution: operations run in issue order on the communicator's "stream" — on the MPI backend a
 * fiber on the rank's one progress engine thread (comm_engine.h; the CPU analogue of a CUDA
 * stream), the NCCL stream on the NCCL backend. The _async calls return at once with a handle; comm_wait(h)
 * returns when that operation (and every earlier one) is complete. The blocking calls are
 * _async + comm_wait. Compute goes on while the stream works: that is the overlap.
 *
 * Chunks: reduce-scatter and all-gather split a buffer of numel elements into `world`
 * contiguous chunks, chunk r = [comm_chunk_lo(numel, N, r), comm_chunk_lo(numel, N, r+1)),
 * so any numel works (0, fewer than N, not divisible by N).
 *
 * Counters: each call adds, per op, the bytes the ring algorithm sends from (and receives
 * into) this rank — (N−1)/N of the buffer for reduce-scatter and all-gather, 2(N−1)/N for
 * all-reduce, the buffer for broadcast/reduce/send, every block but its own for all-to-all (each
 * goes straight to its owner: (N−1)/N of an equal one); exact per-rank values for uneven chunks —
 * whatever implementation ran. The ring code also counts the bytes it really sends (p2p_sent);
 * a test checks the two agree. Control traffic (loss, norms, flags, gathers of text) is counted
 * apart under CO_CONTROL so per-step traffic compares cleanly with the formulas. */
#ifndef ZL_COMM_H
#define ZL_COMM_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t

typedef enum { REDOP_SUM = 0, REDOP_MAX = 1 } redop_t;
typedef enum { COLL_VENDOR = 0, COLL_RING = 1 } coll_impl_t;
typedef enum { BACKEND_MPI = 0, BACKEND_NCCL = 1 } backend_t;
typedef enum {
  CO_BROADCAST = 0, CO_REDUCE, CO_ALL_REDUCE, CO_REDUCE_SCATTER, CO_ALL_GATHER, CO_SEND, CO_RECV,
  CO_CONTROL, CO_ALL_TO_ALL, CO_NOPS
} comm_op_t;

typedef struct comm comm_t;
typedef int64_t comm_handle_t; /* sequence number of an operation on the stream; 0 = none */

typedef struct comm_counters {
  int64_t sent[CO_NOPS];  /* bytes sent from this rank by the ring model of each op */
  int64_t recvd[CO_NOPS]; /* bytes received into this rank by the ring model */
  int64_t calls[CO_NOPS];
  int64_t p2p_sent;       /* bytes actually sent by comm_p2p_* (the ring implementation) */
  int64_t p2p_recvd;
  double busy_us[CO_NOPS]; /* time the stream spent in each op */
  /* the part of sent / recvd / p2p_* that crosses nodes (topology, below) */
  int64_t inter_sent[CO_NOPS];
  int64_t inter_recvd[CO_NOPS];
  int64_t p2p_inter_sent;
  int64_t p2p_inter_recvd;
} comm_counters_t;

static inline int64_t comm_chunk_lo(int64_t numel, int world, int r) { return numel * r / world; }
static inline int64_t comm_chunk_numel(int64_t numel, int world, int r) {
  return comm_chunk_lo(numel, world, r + 1) - comm_chunk_lo(numel, world, r);
}
const char *comm_op_name(comm_op_t op); /* "broadcast", "reduce", "all_reduce", ... */

/* MPI_Init (thread level SERIALIZED or better), MPI_ERRORS_RETURN, rank/world/local rank,
 * the rank for error messages; then the backend on `dev` (BACKEND_NCCL needs DEV_CUDA).
 * Dies with a clear message if the backend cannot work (e.g. NCCL with two ranks on one GPU). */
comm_t *comm_init(int *argc, char ***argv, backend_t backend, device_t dev);
/* Wait for the stream, stop it, MPI_Finalize. On a sub-communicator (comm_split): wait, stop
 * its stream, free its MPI / NCCL communicator, no MPI_Finalize. Every sub-communicator must be
 * finalized before its parent (the parent's comm_finalize dies naming how many are left). */
void comm_finalize(comm_t *c);

/* Process groups (notes/06-tensor-parallel.md). Collective over every rank of `parent`: each
 * calls it, in the same order relative to the parent's other operations. Ranks passing the same
 * color (>= 0) form one sub-communicator, ranked by key (ties: by parent rank), as
 * MPI_Comm_split. A rank passing color < 0 (MPI_UNDEFINED) joins none: it takes part in the call
 * and gets NULL, no communicator at all (no MPI or NCCL one, no stream; comm_finalize(NULL) does
 * nothing). The sub-communicator is a full comm_t: same backend, device, implementation (vendor
 * or ring: solutions/ring.c runs on it unchanged) and timeout as the parent; its own stream (MPI:
 * its own fiber on the rank's engine thread, while the caller's thread makes MPI calls too, so
 * MPI_THREAD_MULTIPLE is required; NCCL: its own CUDA stream, ncclCommSplit from the parent's
 * NCCL communicator, or a fresh id broadcast over the group when the installed NCCL predates
 * it); its own counters, starting at zero — the
 * parent's counters do not see its traffic. The parent's queued work is waited for first.
 * Released with comm_finalize (before the parent). */
comm_t *comm_split(comm_t *parent, int color, int key);
/* A stand-in communicator that answers only comm_rank, comm_world and comm_device: for code that
 * lays out a split without communicating (zl_ckpt convert sizes and maps the parts of a --tp T
 * checkpoint through the TP split, solutions/tp.h). No backend: a collective on it is a bug.
 * Release it with free(), not comm_finalize. */
comm_t *comm_shape_only(int world, int rank, device_t dev);

int comm_rank(const comm_t *c);
int comm_world(const comm_t *c);
device_t comm_device(const comm_t *c);
backend_t comm_backend(const comm_t *c);
const char *comm_backend_name(const comm_t *c); /* "mpi" or "nccl" */
void comm_set_impl(comm_t *c, coll_impl_t impl);  /* vendor (default) or ring */
coll_impl_t comm_impl(const comm_t *c);
/* Deadline for any one wait (comm_wait and the blocking calls), seconds; 0 = none. On expiry:
 * `rank R: <op> (<tag>) did not complete within S s`, then the job is aborted. */
void comm_set_timeout(comm_t *c, double seconds);
/* Constant-size buffers (ZeRO-R CB, --buffer-mb; notes/zero-r.md). nbytes > 0: from now on an
 * all-reduce, broadcast, reduce-scatter or all-gather (_async or blocking) over more than nbytes
 * runs as several operations of at most nbytes each, queued in order on the stream; the handle
 * returned is the last piece's (waiting for it waits for all). All-reduce and broadcast cut the
 * buffer into contiguous pieces. Reduce-scatter and all-gather with numel divisible by N take
 * the same slice [lo, lo+s) of every rank's chunk per piece (N·s elements <= nbytes), packed
 * into one buffer of nbytes (LEDGER_COMM, "comm piece buffer"), so the host staging and ring
 * scratch are bounded by nbytes too; with numel not divisible by N they run whole. A piece is
 * at least one element per rank (the floor when nbytes < N elements). Each piece counts as one
 * call with its own ring-model bytes: the per-step calls grow as nbytes shrinks, the bytes do
 * not. Results: every element is the same reduction over the same ranks (all-gather and, at
 * N = 2, every sum a+b: bitwise); the vendor library may pick another summation order for a
 * smaller message at N > 2. 0 (the default) = whole operations. Sub-communicators split later
 * inherit it. */
void comm_set_piece_bytes(comm_t *c, int64_t nbytes);
int64_t comm_piece_bytes(const comm_t *c);

/* ---- blocking collectives (buffers on comm_device(c)) ----------------------------------
 * Every buffer is on comm_device(c): with --device cuda a GPU buffer, so a scratch buffer of your
 * own for them comes from dev_malloc(comm_device(c), ...) and goes back with dev_free (xmalloc is
 * host memory); most code needs none: the calls below work in place where they say so. */
void comm_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root);
/* recv (significant on root) = op over ranks of send; send == recv allowed. */
void comm_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op, int root);
void comm_all_reduce(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op);
/* send: numel elements on every rank; recv: this rank's chunk (comm_chunk_numel(numel, N, rank)).
 * recv may point into send at this rank's chunk, comm_chunk_lo(numel, N, rank) (in place). */
void comm_reduce_scatter(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op);
/* send: this rank's chunk; recv: all numel elements, chunk r from rank r. send may point into recv
 * at this rank's chunk (in place). */
void comm_all_gather(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt);
void comm_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst);
void comm_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src);
void comm_barrier(comm_t *c);

/* ---- asynchronous: queued in order on the stream; `tag` names it in traces and errors ---- */
comm_handle_t comm_all_reduce_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op,
                                    const char *tag);
comm_handle_t comm_reduce_scatter_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                        redop_t op, const char *tag);
comm_handle_t comm_all_gather_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                    const char *tag);
comm_handle_t comm_broadcast_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root,
                                   const char *tag);
/* Point-to-point, queued on the stream like the rest (a send or recv waits behind what was
 * queued before it; one communicator per direction keeps a pipeline's two flows apart). The
 * buffer stays untouched (send) or unread (recv) until comm_wait on the handle. */
comm_handle_t comm_send_async(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst,
                              const char *tag);
comm_handle_t comm_recv_async(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src, const char *tag);
/* A send and a receive as ONE operation on the stream, so the two cannot wait on each other:
 * NCCL: ncclSend + ncclRecv in one ncclGroupStart/End (NCCL's rule for a pair exchanged with
 * peers that also send first); MPI: MPI_Isend + MPI_Irecv completed together. dst and src may be
 * the same rank (a pipeline stage and its neighbour: activation out, gradient in). Each message
 * matches the peer's comm_send_async / comm_recv_async / comm_sendrecv_async on this communicator
 * in issue order. A side with numel 0 is skipped. Counted as a send (CO_SEND) and a receive
 * (CO_RECV); one handle covers both buffers. */
comm_handle_t comm_sendrecv_async(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                                  int64_t recv_numel, int src, dtype_t dt, const char *tag);
/* Up to COMM_GROUP_MAX sends and receives as ONE operation on the stream (Megatron's batched p2p,
 * torch's batch_isend_irecv): NCCL: every ncclSend / ncclRecv in one ncclGroupStart/End, so they
 * progress together and the group completes when all of them did; MPI: every MPI_Isend / MPI_Irecv
 * posted, then completed together. An entry is a send (send set, recv NULL) or a receive (recv
 * set, send NULL) of numel elements to / from peer (another rank; numel 0: skipped). The messages
 * match the peer's comm_send_async / comm_recv_async / comm_sendrecv_async / comm_group_async on
 * this communicator in issue order: within a group, those with one peer in the order of `ops`.
 * Counted as its sends (CO_SEND) and receives (CO_RECV); one handle covers every buffer. */
enum { COMM_GROUP_MAX = 4 };
typedef struct comm_p2p {
  const void *send;
  void *recv;
  int64_t numel;
  int peer;
} comm_p2p_t;
comm_handle_t comm_group_async(comm_t *c, int n, const comm_p2p_t *ops, dtype_t dt, const char *tag);
/* Block until h (and everything queued before it) is done. On CUDA: the compute stream waits
 * for it instead (no host block), which is what lets NCCL overlap with compute.
 * Exercise mode (ZL_EXERCISE_TIMEOUT_S set, as `make exercise` does): every handle of
 * comm_send_async / comm_recv_async must be passed to comm_wait itself before comm_wait_all
 * (the end of a step) or comm_finalize; one that was not (dropped: a later wait completed it,
 * by luck of the stream's order) ends the job naming the call and its tag. A collective's
 * handle counts as waited once comm_wait had it or a later handle of the same communicator (the
 * stream's order), or comm_wait_all ran; before that, an operation of ANOTHER communicator that
 * touches a buffer it writes (or writes one it reads) ends the job naming both (the two streams
 * do not wait for each other: a race), and so does comm_expect_waited (below) after a blocking
 * function returned with it still open.
 * Every comm_* call on a NULL communicator, and a send/recv to a rank outside the group, ends
 * the job with one line naming the call (and the tag, for the _async ones). */
void comm_wait(comm_t *c, comm_handle_t h);
void comm_wait_all(comm_t *c);
/* A function that is blocking by contract but built from _async calls (an exercise such as
 * hier_all_reduce or tp_sp_all_gather) must return with every operation it issued waited for.
 * Its caller takes since = comm_issued(c) before the call (the last handle issued on c, 0 before
 * any) and calls comm_expect_waited(c, since, "its name") after it: in exercise mode a handle
 * issued on c after `since` and not waited for (see comm_wait) ends the job naming the call, its
 * tag and the function; otherwise nothing. */
comm_handle_t comm_issued(comm_t *c);
void comm_expect_waited(comm_t *c, comm_handle_t since, const char *who);

/* ---- control traffic (host memory, blocking, counted under CO_CONTROL) --------------------- */
void comm_ctl_all_reduce_f64(comm_t *c, double *vals, int n, redop_t op);
void comm_ctl_broadcast(comm_t *c, void *bytes, int64_t nbytes, int root);
/* Rank 0 receives every rank's blob: *all (malloc'd, concatenated in rank order) and sizes[N]
 * (malloc'd); other ranks get *all = NULL. */
void comm_ctl_gather(comm_t *c, const void *blob, int64_t nbytes, char **all, int64_t **sizes);
/* n int64 to each rank and from each: send[q·n ..] goes to rank q, recv[q·n ..] comes from rank q
 * (an MPI_Alltoall on the host, whatever the backend: counts a device collective will need, known on
 * the host before it is issued). */
void comm_ctl_all_to_all_i64(comm_t *c, const int64_t *send, int64_t *recv, int n);
/* Every rank passes its text; rank 0 prints them to stdout in rank order. */
void comm_print_ordered(comm_t *c, const char *text);

/* ---- counters --------------------------------------------------------------------------- */
comm_counters_t comm_counters(const comm_t *c); /* call after comm_wait_all */
void comm_counters_reset(comm_t *c);
/* The ring-model byte counts for one call (what comm_* adds to sent/recvd). */
int64_t comm_model_sent(comm_op_t op, int64_t numel, dtype_t dt, int world, int rank, int root);
int64_t comm_model_recvd(comm_op_t op, int64_t numel, dtype_t dt, int world, int rank, int root);

/* ---- all-to-all (notes/01-collectives.md, "All-to-all") -----------------------------------------
 * Rank r's block j goes to rank j, where it becomes block r: the transpose of an N×N matrix of
 * blocks. No reduction, so every implementation gives the same bits. Not pieced by
 * comm_set_piece_bytes; send and recv must not overlap (no in-place form). Vendor: MPI_Alltoall(v)
 * on the MPI backend, one group of ncclSend/ncclRecv (every peer, this rank included) on NCCL;
 * COLL_RING: the pairwise exchange of solutions/alltoall.c (step s: to r+s, from r−s). Counted
 * under CO_ALL_TO_ALL: the bytes of every block but this rank's own, sent and received (the
 * inter-node share: the blocks whose peer is on another node).
 * comm_all_to_all: send and recv hold numel elements on every rank, numel divisible by N, block
 * j = [j·numel/N, (j+1)·numel/N) (dist.all_to_all_single(out, in) with equal splits).
 * comm_all_to_allv: send_counts[j] elements from send + send_displs[j] go to rank j;
 * recv_counts[i] elements from rank i land at recv + recv_displs[i]; displs NULL = packed (the
 * prefix sums of the counts). Counts of 0 are allowed. The call copies the four arrays, so they
 * may change once it returns. Before any data moves, the ranks all-gather their counts (2N
 * int64s each, counted under CO_CONTROL) and check the N×N split matrix: rank i's
 * send_counts[j] must be rank j's recv_counts[i]; where not, every rank stops with exit code 2
 * and rank 0 names the pairs (`comm_all_to_allv (tag): split sizes disagree between ranks: rank 1
 * sends 5 element(s) to rank 2, which expects 4 from it`) instead of a hang or a truncated message. */
void comm_all_to_all(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt);
comm_handle_t comm_all_to_all_async(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt,
                                    const char *tag);
void comm_all_to_allv(comm_t *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                      void *recv, const int64_t *recv_counts, const int64_t *recv_displs, dtype_t dt);
comm_handle_t comm_all_to_allv_async(comm_t *c, const void *send, const int64_t *send_counts,
                                     const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                                     const int64_t *recv_displs, dtype_t dt, const char *tag);
/* The bytes one all-to-all-v moves out of (counts = send_counts) or into (counts = recv_counts)
 * rank `rank`: every block but its own (what comm_all_to_allv adds to sent / recvd). */
int64_t comm_model_all_to_allv(const int64_t *counts, dtype_t dt, int world, int rank);

/* ---- topology: nodes (notes/09-nodes.md) --------------------------------------------------
 * A node is a set of ranks that share memory: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) at
 * comm_init (one host; on the emulated nodes of common/scripts/cluster.sh, one namespace), or the
 * map in ZL_NODE_OF_RANK="0,0,1,1" (one node number per world rank), which lets the counters be
 * tested on one box. Nodes are numbered 0..K-1 in the order of their lowest world rank; a
 * sub-communicator keeps the job's numbers (comm_nodes counts the distinct ones among its ranks).
 *
 * Inter-node bytes (comm_counters_t.inter_*): the share of sent / recvd that crosses a node
 * boundary, under the same ring model as the totals, whatever implementation ran: a collective
 * sends to rank+1 and receives from rank−1 (mod N) of its communicator, so ALL of its sent bytes
 * are inter-node when node(rank+1) != node(rank), and none otherwise; send/recv count when the
 * peer is on another node; comm_ctl_gather when rank 0 is. p2p_inter_*: the bytes the ring code
 * really sent to / received from another node. So a flat ring over N ranks on K nodes of g
 * consecutive ranks (N = K·g) has K boundary ranks, each sending its whole ring traffic across:
 *     all-reduce of B bytes, inter-node bytes per rank: 2(N−1)/N·B on the last rank of each
 *     node, 0 on the others; mean (K/N)·2(N−1)/N·B; per node link 2(N−1)/N·B each way;
 * and a communicator of one rank per node (the cross-node step of a two-level all-reduce) sends
 * everything across: 2(K−1)/K·B' for its all-reduce of B' bytes. */
int comm_node(const comm_t *c);               /* node of this rank */
int comm_node_of(const comm_t *c, int rank);  /* node of rank `rank` of c */
int comm_nodes(const comm_t *c);              /* distinct nodes among c's ranks */
int comm_node_rank(const comm_t *c);          /* rank among c's ranks on this node (in rank order) */
int comm_node_size(const comm_t *c);          /* c's ranks on this node */

/* ---- what the ring code builds on (comm_impl side) ------------------------------------------
 * These run inside the stream's context (on the comm thread, or enqueued on the NCCL stream),
 * so solutions/ring.c must only be called from the stream (comm_* with COLL_RING does that).
 * Each counts its real bytes in p2p_sent / p2p_recvd. */
void comm_p2p_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                       int64_t recv_numel, int src, dtype_t dt);
void comm_p2p_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst);
void comm_p2p_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src);
/* dst = dst op src, element-wise, on the stream (bf16: in fp32, rounded once per call). */
void comm_local_reduce(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op);
void comm_local_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt);
/* Scratch on the stream's device, at least nbytes, reused (slot 0 or 1); counted as LEDGER_COMM. */
void *comm_scratch(comm_t *c, int slot, int64_t nbytes);
#endif
