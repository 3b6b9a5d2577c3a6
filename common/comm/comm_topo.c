/* comm_topo.c — which node each rank is on, and the inter-node share of the byte counters
 * (comm.h, "topology"; notes/09-nodes.md). Called by the front at init and split (comm.c: main
 * thread, before the communicator's stream starts) and under c->mu when it counts bytes
 * (comm_count.c, comm_a2a.c). */
#include "comm_internal.h" // struct comm, MPI_Comm
#include "check.h"         // CHECK_MPI, die_on_rank, xcalloc
#include <stdlib.h>        // getenv, strtol, free

/* ZL_NODE_OF_RANK="0,0,1,1": node of each world rank, for tests on one box. Returns 1 and fills
 * node_of[world] when set; dies naming the variable when it does not fit the job. */
static int node_map_from_env(int world, int *node_of) {
  const char *s = getenv("ZL_NODE_OF_RANK");
  if (!s || !*s) return 0;
  const char *p = s;
  for (int r = 0; r < world; r++) {
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= world)
      die_on_rank("ZL_NODE_OF_RANK=\"%s\": entry %d must be a node number in [0, %d) (one per rank, "
                  "comma-separated)", s, r, world);
    node_of[r] = (int)v;
    p = end;
    if (r + 1 < world) {
      if (*p != ',')
        die_on_rank("ZL_NODE_OF_RANK=\"%s\": %d entries for %d ranks (one per rank)", s, r + 1, world);
      p++;
    }
  }
  if (*p) die_on_rank("ZL_NODE_OF_RANK=\"%s\": more entries than the %d ranks", s, world);
  return 1;
}

/* Number the nodes 0, 1, ... in the order of their lowest rank (node_of[] holds any labels). */
static int renumber(int n, int *node_of) {
  int *label = xcalloc((size_t)n, sizeof *label, "node labels"), k = 0;
  for (int r = 0; r < n; r++) {
    int j = 0;
    while (j < k && label[j] != node_of[r]) j++;
    if (j == k) label[k++] = node_of[r];
    node_of[r] = j;
  }
  free(label);
  return k;
}

void comm_topo_init(comm_t *c, const comm_t *parent) {
  c->node_of = xcalloc((size_t)c->world, sizeof *c->node_of, "node map");
  int mine;
  if (parent) {
    mine = parent->node_of[parent->rank]; /* the job's node numbers, kept in every sub-communicator */
  } else if (node_map_from_env(c->world, c->node_of)) {
    c->n_nodes = renumber(c->world, c->node_of);
    return;
  } else { /* the lowest world rank that shares memory with this one names the node */
    MPI_Comm node;
    CHECK_MPI(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    mine = c->rank;
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MIN, node));
    CHECK_MPI(MPI_Comm_free(&node));
  }
  CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, c->node_of, 1, MPI_INT, c->mpi));
  if (parent) { /* count the distinct nodes, keeping the numbers (the job's: seen[] up to the largest) */
    int top = 0;
    for (int r = 0; r < c->world; r++) top = c->node_of[r] > top ? c->node_of[r] : top;
    int *seen = xcalloc((size_t)top + 1, sizeof *seen, "nodes seen");
    for (int r = 0; r < c->world; r++) c->n_nodes += !seen[c->node_of[r]]++;
    free(seen);
  } else {
    c->n_nodes = renumber(c->world, c->node_of);
  }
}

void comm_topo_free(comm_t *c) {
  free(c->node_of);
  c->node_of = NULL;
}

int comm_node_of(const comm_t *c, int r) {
  if (r < 0 || r >= c->world) die_on_rank("comm_node_of: rank %d is not in [0, %d)", r, c->world);
  return c->node_of ? c->node_of[r] : 0; /* comm_shape_only: one node */
}
int comm_node(const comm_t *c) { return comm_node_of(c, c->rank); }
int comm_nodes(const comm_t *c) { return c->node_of ? c->n_nodes : 1; }

int comm_node_rank(const comm_t *c) {
  int k = 0;
  for (int r = 0; r < c->rank; r++) k += comm_node_of(c, r) == comm_node(c);
  return k;
}

int comm_node_size(const comm_t *c) {
  int k = 0;
  for (int r = 0; r < c->world; r++) k += comm_node_of(c, r) == comm_node(c);
  return k;
}

/* Under c->mu. The ring model sends to rank+1 and receives from rank−1; send/recv go to `peer`;
 * a gather sends to rank 0 (receiving counted by the caller with the sizes). */
void comm_topo_count(comm_t *c, comm_op_t op, int peer, int64_t sent, int64_t recvd) {
  if (!c->node_of || c->world < 2) return;
  int me = c->node_of[c->rank];
  int to = c->node_of[(c->rank + 1) % c->world], from = c->node_of[(c->rank - 1 + c->world) % c->world];
  if (op == CO_SEND || op == CO_RECV) to = from = c->node_of[peer];
  if (to != me) c->ctr.inter_sent[op] += sent;
  if (from != me) c->ctr.inter_recvd[op] += recvd;
}

void comm_topo_count_gather(comm_t *c, int64_t sent, const int64_t *sizes) {
  if (!c->node_of) return;
  int root = c->node_of[0];
  if (c->rank != 0 && c->node_of[c->rank] != root) c->ctr.inter_sent[CO_CONTROL] += sent;
  if (c->rank == 0 && sizes)
    for (int r = 1; r < c->world; r++)
      if (c->node_of[r] != root) c->ctr.inter_recvd[CO_CONTROL] += sizes[r];
}

/* Under c->mu. An all-to-all sends each block straight to its owner: a block crosses when its peer
 * is on another node (whatever implementation ran, as the ring model above). */
void comm_topo_count_peers(comm_t *c, comm_op_t op, const int64_t *sent_to, const int64_t *recvd_from) {
  if (!c->node_of || c->world < 2) return;
  int me = c->node_of[c->rank];
  for (int j = 0; j < c->world; j++)
    if (j != c->rank && c->node_of[j] != me) {
      c->ctr.inter_sent[op] += sent_to[j];
      c->ctr.inter_recvd[op] += recvd_from[j];
    }
}

void comm_topo_count_p2p(comm_t *c, int dst, int64_t sent, int src, int64_t recvd) {
  if (!c->node_of) return;
  int me = c->node_of[c->rank];
  if (sent > 0 && c->node_of[dst] != me) c->ctr.p2p_inter_sent += sent;
  if (recvd > 0 && c->node_of[src] != me) c->ctr.p2p_inter_recvd += recvd;
}
