/* ring.c — the collectives built from send/recv: ring reduce-scatter, ring all-gather, ring
 * all-reduce, chain broadcast and chain reduce (see ring.h; explained in notes/01-collectives.md).
 *
 * Everything here runs on the communicator's stream (comm_* with COLL_RING calls it) and uses
 * only comm_p2p_sendrecv/send/recv, comm_local_reduce/copy and comm_scratch, so the same code
 * runs on MPI (host) and NCCL (GPU) and its real traffic lands in the p2p counters.
 * Chunks follow comm.h: chunk k = [comm_chunk_lo(n, N, k), comm_chunk_lo(n, N, k+1)). */
#include "ring.h"     // ring_*, comm_p2p_sendrecv, comm_local_reduce, comm_scratch, comm_chunk_lo
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include <stdint.h>   // int64_t

/* Chains (broadcast, reduce) move the buffer in segments of this many bytes, so every hop
 * works at once: segment i leaves rank p+1 while segment i+1 reaches rank p. */
#define RING_SEGMENT_BYTES ((int64_t)1 << 20)

/* Element i of buffer p (a byte address: dtype-generic). */
__attribute__((unused)) static char *elem(const void *p, int64_t i, dtype_t dt) {
  return (char *)p + i * (int64_t)dtype_size(dt);
}
/* x mod N in [0, N), also for negative x. */
__attribute__((unused)) static int mod(int x, int N) { return ((x % N) + N) % N; }

void ring_reduce_scatter(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op) {
  // BEGIN EXERCISE ring_reduce_scatter notes/01-collectives.md
  // HINT: a partial sum travels round the ring: each step, pass one chunk's running sum to your
  // HINT: neighbour while you receive another into scratch and add your own values to it. After
  // HINT: N−1 steps the chunk you hold is summed over every rank: make it your own chunk, r.
  // HINT: Either direction works (to r+1 or to r−1), as long as every rank uses the same one.
  // HINT2: going to r+1: at step s you send chunk (r−s−1) mod N and receive chunk (r−s−2) mod N,
  // HINT2: so the last one received (s = N−2) is chunk r. Two scratch slots, alternating, keep
  // HINT2: what you forward apart from what arrives. In place (recv inside send): the last chunk
  // HINT2: must land in scratch too, and be added into recv.
  // HINT3: for s in 0..N−2: ks = mod(r−s−1), kr = mod(r−s−2); send buffer = your chunk ks of send
  // HINT3: at s = 0,
  // HINT3: else the slot you just filled; receive into comm_scratch(c, s % 2, max-chunk bytes) (at the last
  // HINT3: step straight into recv unless in place); comm_p2p_sendrecv(c, sb, n(ks), r+1, rb, n(kr), r−1,
  // HINT3: dt);
  // HINT3: then comm_local_reduce(c, rb, your chunk kr of send, n(kr), dt, op) (in place, last step: into
  // HINT3: recv).
  int N = comm_world(c), r = comm_rank(c);
  if (N == 1) {
    comm_local_copy(c, recv, send, numel, dt);
    return;
  }
  int next = mod(r + 1, N), prev = mod(r - 1, N);
  int64_t max_chunk = (numel + N - 1) / N; /* chunks differ by at most one element */
  int64_t nbytes = max_chunk * (int64_t)dtype_size(dt); /* (n/N) one received partial sum */
  /* In-place use (all-reduce: recv is our own chunk of send): the last chunk cannot land on
   * recv before our own values are added, so it goes to scratch too. */
  int in_place = recv == elem(send, comm_chunk_lo(numel, N, r), dt);
  const void *out = NULL; /* the partial sum we forward at the next step */
  for (int s = 0; s < N - 1; s++) {
    int ks = mod(r - s - 1, N), kr = mod(r - s - 2, N), last = s == N - 2;
    const void *sb = s == 0 ? elem(send, comm_chunk_lo(numel, N, ks), dt) : out;
    /* two scratch slots, alternating: what we forward (out) is never what we receive into */
    void *rb = last && !in_place ? recv : comm_scratch(c, s % 2, nbytes);
    comm_p2p_sendrecv(c, sb, comm_chunk_numel(numel, N, ks), next, rb, comm_chunk_numel(numel, N, kr), prev,
                      dt);
    if (last && in_place) comm_local_reduce(c, recv, rb, comm_chunk_numel(numel, N, kr), dt, op);
    else
      comm_local_reduce(c, rb, elem(send, comm_chunk_lo(numel, N, kr), dt), comm_chunk_numel(numel, N, kr),
                        dt, op);
    out = rb;
  }
  // END EXERCISE
}

void ring_all_gather(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt) {
  // BEGIN EXERCISE ring_all_gather notes/01-collectives.md
  // HINT: put your own chunk in place first; then every step, forward to your neighbour the chunk
  // HINT: you received last (your own at the first step) while the next one arrives, straight
  // HINT: into recv. After N−1 steps every chunk has visited every rank. No scratch needed.
  // HINT2: going to r+1: at step s send chunk (r−s) mod N, receive chunk (r−s−1) mod N. In C,
  // HINT2: (r − s) % N can be negative: use ((x % N) + N) % N.
  // HINT3: comm_local_copy(c, recv + lo(r), send, n(r), dt); for s in 0..N−2: ks = mod(r−s), kr =
  // HINT3: mod(r−s−1);
  // HINT3: comm_p2p_sendrecv(c, recv + lo(ks), n(ks), r+1, recv + lo(kr), n(kr), r−1, dt) — lo and n from
  // HINT3: comm_chunk_lo / comm_chunk_numel, offsets in elements of dt.
  int N = comm_world(c), r = comm_rank(c);
  int next = mod(r + 1, N), prev = mod(r - 1, N);
  comm_local_copy(c, elem(recv, comm_chunk_lo(numel, N, r), dt), send, comm_chunk_numel(numel, N, r), dt);
  for (int s = 0; s < N - 1; s++) {
    int ks = mod(r - s, N), kr = mod(r - s - 1, N);
    comm_p2p_sendrecv(c, elem(recv, comm_chunk_lo(numel, N, ks), dt), comm_chunk_numel(numel, N, ks), next,
                      elem(recv, comm_chunk_lo(numel, N, kr), dt), comm_chunk_numel(numel, N, kr), prev, dt);
  }
  // END EXERCISE
}

void ring_all_reduce(comm_t *c, void *buf, int64_t numel, dtype_t dt, redop_t op) {
  // BEGIN EXERCISE ring_all_reduce notes/01-collectives.md
  // HINT: all-reduce = reduce-scatter + all-gather: two calls to your own functions, in place.
  // HINT2: your chunk of buf (at comm_chunk_lo(numel, N, r)) is the output of the first call and
  // HINT2: the input of the second: check what your reduce-scatter does when recv points into send.
  // HINT3: own = buf + comm_chunk_lo(numel, N, r) elements; ring_reduce_scatter(c, buf, own, numel, dt, op);
  // HINT3: ring_all_gather(c, own, buf, numel, dt).
  int N = comm_world(c), r = comm_rank(c);
  void *own = elem(buf, comm_chunk_lo(numel, N, r), dt); /* (n/N) this rank's chunk, inside buf */
  ring_reduce_scatter(c, buf, own, numel, dt, op);
  ring_all_gather(c, own, buf, numel, dt);
  // END EXERCISE
}

void ring_broadcast(comm_t *c, void *buf, int64_t numel, dtype_t dt, int root) {
  // BEGIN EXERCISE ring_broadcast notes/01-collectives.md
  // HINT: a chain from the root through every rank, cut into segments (RING_SEGMENT_BYTES) so all
  // HINT: the hops work at once: a middle rank passes one segment on while the next arrives.
  // HINT2: your position in the chain is p = (r − root) mod N: p = 0 only sends, p = N−1 only
  // HINT2: receives; a middle rank receives segment 0, then for i = 1.. sends i−1 while receiving i
  // HINT2: (one comm_p2p_sendrecv), and last sends segment nseg−1.
  // HINT3: seg = RING_SEGMENT_BYTES / dtype_size(dt) (at most numel), nseg = ceil(numel / seg). p == 0: for
  // HINT3: each
  // HINT3: i comm_p2p_send(segment i, next); p == N−1: for each i comm_p2p_recv(segment i, prev); else recv
  // HINT3: segment 0, then for i = 1..nseg−1 comm_p2p_sendrecv(segment i−1 to next, segment i from prev),
  // HINT3: then
  // HINT3: send segment nseg−1. Return at once when N == 1 or numel == 0.
  int N = comm_world(c), r = comm_rank(c);
  if (N == 1 || numel == 0) return;
  int p = mod(r - root, N), next = mod(r + 1, N), prev = mod(r - 1, N);
  int64_t seg = RING_SEGMENT_BYTES / (int64_t)dtype_size(dt);
  if (seg > numel) seg = numel;
  int64_t nseg = (numel + seg - 1) / seg;
#define SEG_LO(i) ((i) * seg)
#define SEG_N(i) ((i) == nseg - 1 ? numel - (i) * seg : seg)
  if (p == 0) {
    for (int64_t i = 0; i < nseg; i++) comm_p2p_send(c, elem(buf, SEG_LO(i), dt), SEG_N(i), dt, next);
  } else if (p == N - 1) {
    for (int64_t i = 0; i < nseg; i++) comm_p2p_recv(c, elem(buf, SEG_LO(i), dt), SEG_N(i), dt, prev);
  } else {
    comm_p2p_recv(c, buf, SEG_N(0), dt, prev);
    for (int64_t i = 1; i < nseg; i++)
      comm_p2p_sendrecv(c, elem(buf, SEG_LO(i - 1), dt), SEG_N(i - 1), next, elem(buf, SEG_LO(i), dt),
                        SEG_N(i), prev, dt);
    comm_p2p_send(c, elem(buf, SEG_LO(nseg - 1), dt), SEG_N(nseg - 1), dt, next);
  }
#undef SEG_LO
#undef SEG_N
  // END EXERCISE
}

void ring_reduce(comm_t *c, const void *send, void *recv, int64_t numel, dtype_t dt, redop_t op, int root) {
  // BEGIN EXERCISE ring_reduce notes/01-collectives.md
  // HINT: the broadcast chain run the other way, ending at the root: each rank adds its own values
  // HINT: to the partial sum it receives and passes it on; the root keeps the total. N = 1: a copy.
  // HINT2: position p = (r − root − 1) mod N: p = 0 starts the chain (sends its input), p = N−1 is
  // HINT2: the root. Per segment: receive into scratch, comm_local_reduce your values in, send on.
  // HINT2: In place at the root (send == recv), the incoming partial must land in scratch.
  // HINT3: segments as in ring_broadcast. p == 0: send each segment of send. Root (p == N−1): per segment
  // HINT3: receive the partial (into scratch when send == recv, else into recv), comm_local_reduce your own
  // HINT3: values in. Middle: two comm_scratch slots; recv segment 0, add yours, then per i sendrecv (slot
  // HINT3: (i−1)%2 to next, slot i%2 from prev) and add yours to slot i%2; finally send the last slot.
  int N = comm_world(c), r = comm_rank(c);
  if (N == 1) {
    comm_local_copy(c, recv, send, numel, dt);
    return;
  }
  if (numel == 0) return;
  /* p = 0: chain start, N−1: root */
  int p = mod(r - root - 1, N), next = mod(r + 1, N), prev = mod(r - 1, N);
  int64_t seg = RING_SEGMENT_BYTES / (int64_t)dtype_size(dt);
  if (seg > numel) seg = numel;
  int64_t nseg = (numel + seg - 1) / seg;
#define SEG_LO(i) ((i) * seg)
#define SEG_N(i) ((i) == nseg - 1 ? numel - (i) * seg : seg)
  if (p == 0) {
    for (int64_t i = 0; i < nseg; i++) comm_p2p_send(c, elem(send, SEG_LO(i), dt), SEG_N(i), dt, next);
  } else if (p == N - 1) { /* root: incoming partial, then ours */
    void *tmp = send == recv ? comm_scratch(c, 0, seg * (int64_t)dtype_size(dt)) : NULL;
    for (int64_t i = 0; i < nseg; i++) {
      void *dst = elem(recv, SEG_LO(i), dt);
      if (tmp) { /* in place: our values are in recv, so the partial lands in scratch */
        comm_p2p_recv(c, tmp, SEG_N(i), dt, prev);
        comm_local_reduce(c, dst, tmp, SEG_N(i), dt, op);
      } else {
        comm_p2p_recv(c, dst, SEG_N(i), dt, prev);
        comm_local_reduce(c, dst, elem(send, SEG_LO(i), dt), SEG_N(i), dt, op);
      }
    }
  } else { /* middle: two segment buffers, one travelling on while the next arrives */
    int64_t nbytes = seg * (int64_t)dtype_size(dt);
    void *part[2] = {comm_scratch(c, 0, nbytes), comm_scratch(c, 1, nbytes)};
    comm_p2p_recv(c, part[0], SEG_N(0), dt, prev);
    comm_local_reduce(c, part[0], send, SEG_N(0), dt, op);
    for (int64_t i = 1; i < nseg; i++) {
      comm_p2p_sendrecv(c, part[(i - 1) % 2], SEG_N(i - 1), next, part[i % 2], SEG_N(i), prev, dt);
      comm_local_reduce(c, part[i % 2], elem(send, SEG_LO(i), dt), SEG_N(i), dt, op);
    }
    comm_p2p_send(c, part[(nseg - 1) % 2], SEG_N(nseg - 1), dt, next);
  }
#undef SEG_LO
#undef SEG_N
  // END EXERCISE
}
