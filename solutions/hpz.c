/* hpz.c — ZeRO++ hpZ (--hpz): ZeRO-3 whose backward gathers stay inside the node.
 * Notes: notes/09-nodes.md ("ZeRO++ hpZ").
 *
 * The forward gathers every unit over all N ranks (crossing nodes) as ZeRO-3 does; when a
 * forward's gathered unit is complete, this rank keeps its 1/g of it (its place in the node) in
 * `sec`, and the backward gathers the unit from the node's g secondary pieces only: shared memory,
 * no bytes across. The same bits reach the backward, so the run is ZeRO-3's bit for bit; the
 * price is sec, bΨ/g more per rank. Units are padded to a multiple of N, so of g too: the
 * secondary piece of unit u is at off/g, (padded/g) long.
 *
 * ZeRO-3 (solutions/zero3.c) calls in at four places, each `if (z->hpz)`: its setup (hpz_setup),
 * after a forward (hpz_keep_forward), where it issues a backward's gather (hpz_gather_backward),
 * its teardown (hpz_release); its formula adds hpz_formula's terms. */
#include "zero3_state.h"      // zero3_t, hpz_* declarations, node_sizes_equal_or_die
#include <stdio.h>            // printf, snprintf
#include <stdlib.h>           // free
#include "check.h"   // xcalloc, die_on_rank
#include "comm.h"    // comm_split, comm_all_gather_async, comm_wait, comm_node*
#include "device.h"  // dev_memcpy
#include "tensor.h"  // tensor_alloc, tensor_free, tensor_at
#include "qwz.h"     // qwz_gather_finish (--qwz with --hpz: the forward's int8 gather decoded first)

struct hpz {
  comm_t *node; /* this node's g ranks */
  tensor_t sec; /* (P/g) the secondary copy: this rank's 1/g of every unit's working params (wdt) */
};

void hpz_setup(trainer_t *t, zero3_t *z) {
  node_sizes_equal_or_die(z->shard, "--hpz");
  int g = comm_node_size(z->shard);
  struct hpz *h = xcalloc(1, sizeof *h, "hpz state");
  h->node = comm_split(z->shard, comm_node(z->shard), z->rank);
  if (t->n_sub_comms == TRAIN_SUB_COMMS_MAX)
    die_on_rank("--hpz: the trainer already holds %d sub-communicators (TRAIN_SUB_COMMS_MAX)",
        t->n_sub_comms);
  t->sub_comms[t->n_sub_comms++] = h->node; /* the report counts its bytes */
  // (P/g)
  h->sec = tensor_alloc("params (hpZ secondary)", LEDGER_PARAMS, t->wdt, t->dev, t->model.padded_numel / g);
  z->hpz = h;
  if (trainer_prints(t))
    printf("hpZ: a secondary copy of the params sharded over each node's %d ranks; the backward gathers from "
           "it, "
           "inside the node\n",
           g);
}

/* Slot s holds a forward's gathered unit, complete: copy this rank's 1/g of it into sec. */
static void keep(trainer_t *t, zero3_t *z, int s) {
  struct hpz *h = z->hpz;
  const unit_t *un = &t->model.units[t->uses[z->slots[s].event].unit];
  int g = comm_world(h->node);
  int64_t piece = un->padded / g;
  size_t esz = dtype_size(t->wdt);
  dev_memcpy(t->dev, tensor_at(&h->sec, un->off / g), t->dev,
             (char *)z->slots[s].buf.data + (size_t)(comm_rank(h->node) * piece) * esz, (size_t)piece * esz);
}

void hpz_keep_forward(trainer_t *t, zero3_t *z, int e) {
  for (int s = 0; s < z->nslots; s++)
    if (z->slots[s].event == e) keep(t, z, s);
}

/* A backward gather of unit u: first keep u's piece from its forward gather if that is still in a
 * slot (a prefetch can issue the backward before the forward is released), then gather from the
 * node's secondary pieces. Waited here: its handle belongs to the node's group, and ZeRO-3 waits
 * its slots on z->shard. */
comm_handle_t hpz_gather_backward(trainer_t *t, zero3_t *z, int u, void *dst) {
  struct hpz *h = z->hpz;
  for (int s = 0; s < z->nslots; s++) {
    int ev = z->slots[s].event;
    if (ev >= 0 && t->uses[ev].unit == u && t->uses[ev].kind == 'F') {
      comm_wait(z->shard, z->slots[s].h);
      if (z->qwz_block) qwz_gather_finish(t, z, u, &z->slots[s]); /* --qwz: keep the decoded values */
      keep(t, z, s);
    }
  }
  const unit_t *un = &t->model.units[u];
  comm_wait(h->node,
            comm_all_gather_async(h->node, tensor_at(&h->sec, un->off / comm_world(h->node)), dst, un->padded,
                                  t->wdt, "all-gather params (bwd, hpZ: in the node)"));
  return 0;
}

void hpz_release(trainer_t *t, zero3_t *z) {
  struct hpz *h = z->hpz;
  tensor_free(&h->sec);
  comm_finalize(h->node);
  t->n_sub_comms = 0;
  free(h);
  z->hpz = NULL;
}

/* ZeRO-3's formula (N ranks, g per node) with hpZ: + the secondary copy bΨ/g; the forward gather and
 * the reduce-scatter over all N (2(N−1)/N·Ψ·b, the ring rule across nodes), the backward's gather
 * over the node's g ranks ((g−1)/g·Ψ·b, never across). */
void hpz_formula(const trainer_t *t, formula_t *f) {
  double psi = (double)t->model.numel, b = (double)dtype_size(t->wdt);
  int g = comm_node_size(t->comm), N = t->world, r = t->rank;
  f->params += psi * b / g;
  double across = 2.0 * (N - 1) / N * psi * b; /* the forward gather and the reduce-scatter, over all N */
  f->comm_bytes = across + (g - 1.0) / g * psi * b;
  f->comm_inter_set = 1; /* the ring rule on those two; the node's gather never crosses */
  f->comm_inter_bytes = N > 1 && comm_node_of(t->comm, (r + 1) % N) != comm_node_of(t->comm, r) ? across : 0;
  snprintf(f->mem_text, sizeof f->mem_text, "%s + bΨ/g (hpZ copy), g = %d",
           formula_text(3, t->wdt, train_opt_states(t->cfg)), g);
  snprintf(f->comm_text, sizeof f->comm_text, "2(N-1)/N x psi x %d B + (g-1)/g x psi x %d B", (int)b, (int)b);
  snprintf(f->comm_inter_text, sizeof f->comm_inter_text,
           "the ring rule on 2(N-1)/N x psi x %d B (fwd gather, RS)", (int)b);
}
