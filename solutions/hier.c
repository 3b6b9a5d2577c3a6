/* hier.c — the two-level all-reduce (hier.h; notes/09-nodes.md). The groups come from the
 * communicator's node map (comm.h, topology); the three steps are plain collectives on them,
 * so their traffic lands in the groups' counters: the node group's bytes never cross a node,
 * the cross group's always do. */
#include "hier.h"     // hier_t, comm_node, comm_node_rank, comm_split
#include "check.h"    // die_on_rank
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include <stdint.h>   // int64_t

hier_t hier_init(comm_t *c) {
  int N = comm_world(c), K = comm_nodes(c), g = comm_node_size(c);
  for (int r = 0; r < N; r++) { /* the cross groups pair place i of every node: all nodes need g places */
    int gr = 0;
    for (int q = 0; q < N; q++) gr += comm_node_of(c, q) == comm_node_of(c, r);
    if (gr != g)
      die_on_rank(
          "hier_init: node %d holds %d ranks and node %d holds %d: the two-level all-reduce needs the "
          "same number on every node (%d ranks on %d nodes)",
          comm_node(c), g, comm_node_of(c, r), gr, N, K);
  }
  hier_t h;
  h.node = comm_split(c, comm_node(c), comm_rank(c));
  h.cross = comm_split(c, comm_node_rank(c), comm_rank(c));
  return h;
}

void hier_free(hier_t *h) {
  comm_finalize(h->cross);
  comm_finalize(h->node);
  h->cross = h->node = NULL;
}

void hier_all_reduce(hier_t *h, void *buf, int64_t numel, dtype_t dt, redop_t op) {
  // BEGIN EXERCISE hier_all_reduce notes/09-nodes.md
  // HINT: three collectives, no new algorithm: first make every rank of the node own 1/g of the
  // HINT: node's sum; then only those pieces cross the nodes, each summed with the same piece of
  // HINT: the other nodes; then the node puts its pieces back together on every rank.
  // HINT: buf lives on comm_device(h->node) and the collectives work in place on it (hier.h): no
  // HINT: scratch buffer (xmalloc would be host memory). Any numel, also one g does not divide.
  // HINT2: h->node has g ranks, h->cross has K (one per node, all with the same place i in
  // HINT2: their node). Your piece is chunk i of buf in h->node's chunking: comm_chunk_lo(numel,
  // HINT2: g, i) and comm_chunk_numel(numel, g, i). Reduce-scatter and all-gather work in place
  // HINT2: (recv = your chunk inside buf; all-gather's send = that same chunk).
  // HINT3: own = buf + lo elements of dt; comm_reduce_scatter(h->node, buf, own, numel, dt, op);
  // HINT3: comm_all_reduce(h->cross, own, n, dt, op); comm_all_gather(h->node, own, buf, numel, dt).
  int g = comm_world(h->node), i = comm_rank(h->node);
  int64_t lo = comm_chunk_lo(numel, g, i), n = comm_chunk_numel(numel, g, i);
  void *own = (char *)buf + lo * (int64_t)dtype_size(dt); /* (numel/g) this rank's piece */
  comm_reduce_scatter(h->node, buf, own, numel, dt, op);  /* inside the node: shared memory */
  comm_all_reduce(h->cross, own, n, dt, op);              /* across the nodes: 1/g of the buffer */
  comm_all_gather(h->node, own, buf, numel, dt);          /* inside the node again */
  // END EXERCISE
}
