/* report_nodes.c — the report's topology lines (notes/09-nodes.md): of the bytes each rank sent
 * per step, the part that crossed nodes (comm.h, "topology": the counters' ring model on the
 * strategy's communicator and its sub-groups) beside the strategy's formula for it, or the ring
 * rule when the strategy states none: a collective on the ring of t->comm sends all of its bytes
 * across when the ring's next rank is on another node, none otherwise. Nothing is printed when
 * the job runs on one node. */
#include "report_internal.h" // rank_numbers_t, report_nodes_mine, report_nodes_print
#include "comm.h"            // comm_counters, comm_node_of, comm_nodes, CO_*
#include <stdio.h>           // printf

void report_nodes_mine(const trainer_t *t, const formula_t *f, rank_numbers_t *mine) {
  mine->node = comm_node(t->world_comm);
  comm_counters_t cc = comm_counters(t->comm);
  for (int op = 0; op < CO_NOPS; op++) mine->inter_sent[op] = cc.inter_sent[op];
  comm_t *own[TRAIN_SUB_COMMS_MAX + 1];
  for (int i = 0, n = report_strategy_groups(t, own); i < n; i++) {
    comm_counters_t sc = comm_counters(own[i]);
    for (int op = 0; op < CO_NOPS; op++) mine->inter_sent[op] += sc.inter_sent[op];
  }
  comm_t *g[5]; /* the transform's group, and its other groups (chapter 12's TP inside EP) */
  for (int i = 0, ng = report_tp_groups(t, g, 5); i < ng; i++) {
    comm_counters_t tc = comm_counters(g[i]);
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) mine->tp_inter_sent += tc.inter_sent[op];
  }
  int N = comm_world(t->comm), r = comm_rank(t->comm);
  int ring_crosses = N > 1 && comm_node_of(t->comm, (r + 1) % N) != comm_node_of(t->comm, r);
  mine->f_inter = f->comm_inter_set ? f->comm_inter_bytes : ring_crosses ? f->comm_bytes : 0;
}

void report_nodes_print(const trainer_t *t, const rank_numbers_t *all, const formula_t *f, int steps) {
  int K = comm_nodes(t->world_comm), NR = comm_world(t->world_comm);
  if (K < 2) return;
  double sent = 0, inter = 0, fi = 0;
  printf("across nodes (%d nodes; node of each rank:", K);
  for (int r = 0; r < NR; r++) printf(" %lld", (long long)all[r].node);
  printf("), bytes sent per step by the data-parallel collectives (%s):\n%-6s %5s %16s %16s %16s%s\n",
         comm_impl(t->comm) == COLL_RING
             ? "measured: what the ring code sent"
             : "the counters' ring model: the vendor library picks its own algorithm",
         "rank", "node", "inside the node", "across nodes", "formula across",
         t->group_comm ? "   TP group across" : "");
  for (int r = 0; r < NR; r++) {
    double s = 0, x = 0;
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) s += (double)all[r].sent[op], x += (double)all[r].inter_sent[op];
    printf("%-6d %5lld %16.1f %16.1f %16.1f", r, (long long)all[r].node, (s - x) / steps, x / steps,
           all[r].f_inter);
    if (t->group_comm) printf(" %19.1f", (double)all[r].tp_inter_sent / steps);
    printf("\n");
    sent += s, inter += x, fi += all[r].f_inter;
  }
  printf("mean   %5s %16.1f %16.1f %16.1f   formula: %s\n", "", (sent - inter) / NR / steps,
         inter / NR / steps, fi / NR,
         f->comm_inter_set
             ? f->comm_inter_text
             : "the ring rule: all of a rank's bytes when the ring's next rank is on another node");
}
