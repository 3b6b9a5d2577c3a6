/* alltoall.c — the all-to-all built from send/recv: the pairwise exchange (see alltoall.h;
 * explained in notes/01-collectives.md, "All-to-all").
 *
 * Like solutions/ring.c it runs on the communicator's stream (comm_all_to_all(v) with COLL_RING
 * calls it) and uses only comm_p2p_sendrecv and comm_local_copy, so the same code runs on MPI
 * (host) and NCCL (GPU) and its real traffic lands in the p2p counters. Offsets are in elements
 * of dt. There is no ring here: on a ring the block for rank r+k would travel k hops, so a rank
 * would send (N−1)N/2 blocks' worth instead of N−1. */
#include "alltoall.h" // pairwise_all_to_all, comm_p2p_sendrecv, comm_local_copy
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include <stdint.h>   // int64_t

/* Element i of buffer p (a byte address: dtype-generic). */
__attribute__((unused)) static char *elem(const void *p, int64_t i, dtype_t dt) {
  return (char *)p + i * (int64_t)dtype_size(dt);
}
/* x mod N in [0, N), also for negative x. */
__attribute__((unused)) static int mod(int x, int N) { return ((x % N) + N) % N; }

void pairwise_all_to_all(comm_t *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                         void *recv, const int64_t *recv_counts, const int64_t *recv_displs, dtype_t dt) {
  // BEGIN EXERCISE pairwise_all_to_all notes/01-collectives.md
  // HINT: every block goes straight to its owner, one hop, no ring: your own block is a local copy,
  // HINT: then N−1 steps of one exchange each. At each step send one block to one rank while you
  // HINT: receive one block from another, chosen so that every pair of ranks meets exactly once and
  // HINT: the rank you receive from is, at that same step, sending to you.
  // HINT2: at step s (1..N−1) send your block for rank (r+s) mod N to it, and receive the block of
  // HINT2: rank (r−s) mod N from it: rank r−s is sending to (r−s)+s = r at that very step. Send and
  // HINT2: receive together (one comm_p2p_sendrecv), or two ranks that both send first can wait on
  // HINT2: each other forever. Offsets and sizes come from the counts and displs arrays, per peer.
  // HINT3: comm_local_copy(c, recv + recv_displs[r], send + send_displs[r], send_counts[r], dt); then for s
  // HINT3: in
  // HINT3: 1..N−1: dst = mod(r+s), src = mod(r−s); comm_p2p_sendrecv(c, send + send_displs[dst],
  // HINT3: send_counts[dst],
  // HINT3: dst, recv + recv_displs[src], recv_counts[src], src, dt) — offsets in elements: use elem(p, i,
  // HINT3: dt).
  int N = comm_world(c), r = comm_rank(c);
  comm_local_copy(c, elem(recv, recv_displs[r], dt), elem(send, send_displs[r], dt), send_counts[r], dt);
  for (int s = 1; s < N; s++) {
    int dst = mod(r + s, N), src = mod(r - s, N);
    comm_p2p_sendrecv(c, elem(send, send_displs[dst], dt), send_counts[dst], dst,
                      elem(recv, recv_displs[src], dt), recv_counts[src], src, dt);
  }
  // END EXERCISE
}
