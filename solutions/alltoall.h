/* alltoall.h — chapter 01's all-to-all built from send/recv: the pairwise exchange
 * (notes/01-collectives.md, "All-to-all"). Same semantics as comm_all_to_allv in comm.h. It runs
 * on the communicator's stream: call it through comm_all_to_all / comm_all_to_allv with
 * comm_set_impl(c, COLL_RING), never directly from the training loop. */
#ifndef ZL_ALLTOALL_H
#define ZL_ALLTOALL_H
#include "comm.h" // comm_t, comm_p2p_sendrecv, comm_local_copy

/* Pairwise all-to-all: rank r's block j (send_counts[j] elements at send + send_displs[j]) goes to
 * rank j, and the block from rank i (recv_counts[i] elements) lands at recv + recv_displs[i].
 * Its own block is a local copy; then N−1 steps, at step s one exchange: send the block of rank
 * (r+s) mod N to it while the block of rank (r−s) mod N arrives. Every block travels one hop,
 * straight to its owner: the rank sends every block but its own, the least any all-to-all can.
 * Counts of 0 are skipped (the peer's matching count is 0 too: the front checked the splits). */
void pairwise_all_to_all(comm_t *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                         void *recv, const int64_t *recv_counts, const int64_t *recv_displs, dtype_t dt);
#endif
