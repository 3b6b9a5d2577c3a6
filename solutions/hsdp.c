/* hsdp.c — HSDP (--shard-group node), PyTorch FSDP's HYBRID_SHARD: ZeRO-3 inside each node, the
 * replicas of a piece all-reduced across the nodes.
 * Notes: notes/09-nodes.md ("HSDP"), notes/05-zero3.md.
 *
 * The job's N ranks sit on K nodes of g ranks each. Two groups, split from the strategy's
 * communicator:
 *
 *   node    the g ranks of this node            ZeRO-3's shard group: every gather, every
 *                                               reduce-scatter, the pieces (piece r = node rank r)
 *   across  the K ranks with this rank's place  one all-reduce per step of the grad shard (Ψ/g)
 *           in every node (one per node)
 *
 * So HSDP is ZeRO-3 (solutions/zero3.c) given the node as its shard group — its hooks unchanged —
 * and a step that adds one collective between the reduce-scatters and the update:
 *
 *   after the backward   rank r of every node holds piece r, summed over its node's g ranks
 *   all-reduce across    ... summed over the K nodes too: every gradient summed over all N ranks
 *   update               ZeRO-3's, on piece r (the norm: Σg² over the node, which holds every
 *                        piece once; every node computes the same)
 *
 * The only bytes that cross a node are that all-reduce's, 2(K−1)/K·Ψ/g·b per rank, against ZeRO-3's
 * 3(N−1)/N·Ψ·b on the ring's boundary ranks; the price is memory: ZeRO-3's with N → g. The data is
 * split over all N ranks (the loop's t->comm), the model states over the g of the node. Every node
 * holds the same pieces, so node 0's are the ones a checkpoint or an export saves (the layout). */
#include "zero.h"             // hsdp_strategy, zero_rs_finish, zero_unit_layout
#include "zero3_state.h"      // zero3_t, zero3_init, the hooks, zero3_update
#include <stdio.h>            // printf, snprintf
#include <stdlib.h>           // free
#include "check.h"   // die_on_rank, xcalloc
#include "comm.h"    // comm_split, comm_all_reduce, comm_node*
#include "trace.h"   // trace_begin, trace_end (TRAINER_PHASE)

/* HSDP's state: ZeRO-3's (first, so ZeRO-3's hooks find it at t->priv) and the group across nodes. */
typedef struct hsdp {
  zero3_t z;      /* ZeRO-3 over z.shard = this node's g ranks */
  comm_t *across; /* the K ranks holding this rank's pieces, one per node */
} hsdp_t;

void node_sizes_equal_or_die(comm_t *c, const char *flag) {
  int g = comm_node_size(c);
  for (int r = 0; r < comm_world(c); r++) {
    int gr = 0;
    for (int q = 0; q < comm_world(c); q++) gr += comm_node_of(c, q) == comm_node_of(c, r);
    if (gr != g)
      die_on_rank("%s: node %d holds %d ranks and node %d holds %d; it needs the same number on every node "
                  "(zlrun --nodes K puts NP/K on each)", flag, comm_node(c), g, comm_node_of(c, r), gr);
  }
}

static void hsdp_setup(trainer_t *t) {
  comm_t *c = t->comm;
  node_sizes_equal_or_die(c, "--shard-group node");
  hsdp_t *h = xcalloc(1, sizeof *h, "hsdp state");
  comm_t *node = comm_split(c, comm_node(c), comm_rank(c)); /* the shard group: this node's ranks */
  h->across = comm_split(c, comm_node_rank(c), comm_rank(c)); /* one rank per node, this rank's place */
  t->sub_comms[0] = node, t->sub_comms[1] = h->across; /* the report counts their bytes as the strategy's */
  t->n_sub_comms = 2;
  t->priv = h;
  zero3_init(t, &h->z, node); /* ZeRO-3, sharded over the node */
  if (trainer_prints(t))
    printf("hsdp: ZeRO-3 inside each of %d nodes of %d ranks (shard group), grad shards all-reduced across "
           "the nodes\n",
           comm_nodes(c), comm_node_size(c));
}

/* ZeRO-3's step with the all-reduce across nodes between its two halves. */
static void hsdp_step(trainer_t *t) {
  hsdp_t *h = t->priv;
  zero_rs_finish(&h->z.rs, t); /* piece r, summed over the node */
  TRAINER_PHASE("all-reduce grad shard across nodes", /* ... and over the nodes: the replicas of the piece */
                comm_all_reduce(h->across, t->grads.data, t->model.shard_numel, t->wdt, REDOP_SUM));
  zero3_update(t, &h->z);
}

/* ZeRO-3's layout over the node's ranks; the nodes hold the same pieces, so node 0's are saved and
 * the others' marked saved_elsewhere — a restore fills every node's (HSDP resumes on HSDP, and its
 * checkpoint on any other grid). */
static void hsdp_layout(trainer_t *t, int u, unit_layout_t *out) {
  hsdp_t *h = t->priv;
  zero_unit_layout(t, h->z.shard, u, 0, out);
  out->saved_elsewhere = comm_rank(h->across) != 0;
}

static void hsdp_teardown(trainer_t *t) {
  hsdp_t *h = t->priv;
  if (h) {
    zero3_release(t, &h->z);
    comm_finalize(h->across);
    comm_finalize(h->z.shard);
  }
  free(h);
  t->priv = NULL;
  t->sub_comms[0] = t->sub_comms[1] = NULL;
  t->n_sub_comms = 0;
}

/* ZeRO-3's memory with N → g (the node's ranks); bytes sent per step: 3(g−1)/g·Ψ·b inside the node,
 * 2(K−1)/K·Ψ/g·b across (all of it inter-node). */
static void hsdp_formula(const trainer_t *t, formula_t *f) {
  double psi = (double)t->model.numel, b = (double)dtype_size(t->wdt);
  int g = comm_node_size(t->comm), K = comm_nodes(t->comm);
  formula_stage(f, 3, psi, g, t->wdt, train_opt_states(t->cfg));
  f->comm_inter_set = 1;
  f->comm_inter_bytes = 2.0 * (K - 1) / K * psi / g * b;
  int M = t->no_sync ? 1 : t->n_micro; /* --accum M: each micro-batch gathers and reduce-scatters (node) */
  f->comm_bytes = 3.0 * M * (g - 1) / g * psi * b + f->comm_inter_bytes;
  snprintf(f->mem_text, sizeof f->mem_text, "%s with N = g = %d ranks per node",
           formula_text(3, t->wdt, train_opt_states(t->cfg)), g);
  snprintf(f->comm_text, sizeof f->comm_text, "%s(g-1)/g x psi x %d B + 2(K-1)/K x psi/g x %d B",
           M > 1 ? "3M" : "3", (int)b, (int)b);
  snprintf(f->comm_inter_text, sizeof f->comm_inter_text, "2(K-1)/K x psi/g x %d B, K = %d nodes", (int)b, K);
}

/* ZeRO-3's hooks as they are: on the node's ranks because z.shard is the node. */
static const strategy_t hsdp_s = {
    .name = "hsdp",
    .stage = 3,
    .setup = hsdp_setup,
    .pre_forward = zero3_pre_forward,
    .post_forward = zero3_post_forward,
    .pre_backward = zero3_pre_backward,
    .post_backward = zero3_post_backward,
    .grad_ready = zero3_grad_ready, /* a split backward (07's zero-bubble schedules): the W made it final */
    .step = hsdp_step,
    .teardown = hsdp_teardown,
    .layout = hsdp_layout,
    .formula = hsdp_formula,
};

const strategy_t *hsdp_strategy(void) { return &hsdp_s; }
