/* hier.h — chapter 09's exercise: the two-level (hierarchical) all-reduce across nodes
 * (notes/09-nodes.md). A flat ring over all N ranks crosses the slow inter-node link with
 * 2(N−1)/N of the buffer per node; the two-level all-reduce keeps all but 2(K−1)/K of it
 * inside the node (K nodes of g ranks, N = K·g):
 *   1. reduce-scatter inside the node      (g ranks, shared memory): rank i of the node holds
 *                                          chunk i of the node's sum, 1/g of the buffer
 *   2. all-reduce across the nodes         (the K ranks with the same place i in their node,
 *                                          one per node): chunk i summed over every rank
 *   3. all-gather inside the node          every rank holds the whole sum
 * Inter-node bytes per rank: 2(K−1)/K · B/g (step 2 only), against 2(N−1)/N · B on the last
 * rank of each node in the flat ring (comm.h, topology). */
#ifndef ZL_HIER_H
#define ZL_HIER_H
#include "comm.h" // comm_t, comm_split, comm_reduce_scatter, comm_all_reduce, comm_all_gather

typedef struct hier {
  comm_t *node;  /* the ranks of this node (rank = place in the node, in world-rank order) */
  comm_t *cross; /* one rank per node: those with this rank's place in their node */
} hier_t;

/* Split c into the two groups (collective over c). Every node must hold the same number of
 * c's ranks; dies naming the nodes' sizes otherwise. Both groups inherit c's implementation
 * (vendor or ring) and timeout. */
hier_t hier_init(comm_t *c);
/* Finalize both groups (before c). */
void hier_free(hier_t *h);
/* The sum (op) over every rank of c of buf (numel elements, in place), in the three steps
 * above; blocking (every operation it issues is waited for before it returns). Same result as
 * comm_all_reduce(c, ...) up to the order of the additions. Any numel: 0, fewer than g, or one g
 * does not divide (rank i's piece is chunk i of comm.h's chunking, comm_chunk_lo(numel, g, i) and
 * comm_chunk_numel(numel, g, i)). buf is on comm_device(h->node) (a GPU buffer with --device cuda).
 * No scratch buffer is needed: comm_reduce_scatter and comm_all_gather work in place (comm.h); one
 * of your own would come from dev_malloc(comm_device(h->node), ...) and go back with dev_free
 * (xmalloc is host memory). */
void hier_all_reduce(hier_t *h, void *buf, int64_t numel, dtype_t dt, redop_t op);
#endif
