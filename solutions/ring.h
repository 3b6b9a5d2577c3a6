/* ring.h — chapter 01's adapter: the collectives built from send/recv (notes/01-collectives.md).
 * Same semantics and chunking as comm.h. These run on the communicator's stream: call them
 * through comm_* with comm_set_impl(c, COLL_RING), never directly from the training loop. */
#ifndef ZL_RING_H
#define ZL_RING_H
#include "comm.h" // comm_t, comm_p2p_sendrecv, comm_local_reduce, comm_scratch

/* Ring reduce-scatter: N−1 steps; at step s rank r sends chunk (r−s−1) mod N to r+1 and adds
 * chunk (r−s−2) mod N received from r−1. Rank r ends with chunk r reduced over all ranks. */
void ring_reduce_scatter(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op);
/* Ring all-gather: N−1 steps; at step s rank r passes chunk (r−s) mod N to r+1. */
void ring_all_gather(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt);
/* Ring all-reduce = ring reduce-scatter then ring all-gather, in place. */
void ring_all_reduce(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op);
/* Chain broadcast from root: root → root+1 → ... → root−1, pipelined in segments. */
void ring_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root);
/* Chain reduce to root: root+1 → ... → root−1 → root, each hop adds its own. */
void ring_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op, int root);
#endif
