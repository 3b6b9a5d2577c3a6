/* zero3_state.h — what solutions/zero3.c (ZeRO-3), hsdp.c (HSDP: ZeRO-3 inside each node) and
 * hpz.c (ZeRO++ hpZ: ZeRO-3 whose backward gathers stay in the node) share: ZeRO-3's state in
 * t->priv and the entry points its two variants build on. Not part of the chapters' contract
 * (zero.h). Notes: notes/05-zero3.md, notes/09-nodes.md.
 *
 * ZeRO-3 runs every collective of its own — the gathers, the reduce-scatters, the norm of the
 * step — on ONE group, z->shard, and lays its pieces out over that group's ranks: for ZeRO-3 it
 * is the trainer's t->comm; HSDP gives it the node's ranks and adds one all-reduce across the
 * nodes (hsdp.c). Nothing else changes, so the hooks below are both strategies' hooks. */
#ifndef ZL_ZERO3_STATE_H
#define ZL_ZERO3_STATE_H
#include <stdint.h> // int64_t
#include "comm.h"    // comm_t, comm_handle_t
#include "formula.h" // formula_t
#include "tensor.h"  // tensor_t
#include "train.h"   // trainer_t
#include "zero.h"    // zero_rs_t

typedef struct gather_slot {
  tensor_t buf;    /* (unit padded) gathered working params, LEDGER_COMM; empty when free */
  int event;       /* which event of the sequence it holds, −1 when free */
  comm_handle_t h; /* its all-gather (on z->shard; 0 once hpZ waited it) */
  comm_handle_t hd; /* two groups (12): the dense half's all-gather, on t->dense_comm (zero_groups.c) */
  tensor_t wire;   /* --qwz: every rank's int8 blocks and scales, until decoded into buf (qwz.c) */
} gather_slot_t;

typedef struct zero3 {
  comm_t *shard;        /* the ranks ZeRO-3 shards over: every all-gather and reduce-scatter, the pieces'
                         * layout (N = world, piece r = rank) and the norm's sum go over it */
  int rank, world;      /* this rank in shard, and shard's size */
  zero_rs_t rs;         /* gradient staging and pending reduce-scatters (over shard) */
  int prefetch;         /* K: gathers issued ahead of use */
  int nslots;           /* K + 1 */
  gather_slot_t *slots; /* [K+1] */
  int64_t gathered_peak; /* bytes: most gathered units alive at once (reported apart from shards) */
  struct hpz *hpz;      /* --hpz: ZeRO++'s secondary copy in the node (hpz.c); NULL: off */
  int qwz_block;        /* --qwz: B elements per int8 block of the gathers (qwz.c); 0: off */
  struct qgz *qgz;      /* --qgz: the gradients reduced in int4 in two hops (qgz.c); NULL: off */
} zero3_t;

/* ---- ZeRO-3 (zero3.c) ----------------------------------------------------------------------- */
/* ZeRO-3's setup over the ranks of `shard` into z (zeroed, owned by the caller, who points t->priv
 * at it — or at a struct whose first member it is: hsdp.c): the shard plan over shard's ranks,
 * the model states (P/N), the gather slots, the staging of the reduce-scatters, hpZ if asked. */
void zero3_init(trainer_t *t, zero3_t *z, comm_t *shard);
/* Frees what zero3_init allocated in z (not z; the model states are the trainer's), after waiting
 * for every collective on z->shard. */
void zero3_release(trainer_t *t, zero3_t *z);
/* The hooks (strategy_t), on the zero3_t at t->priv. */
void zero3_pre_forward(trainer_t *t, int unit);
void zero3_post_forward(trainer_t *t, int unit);
void zero3_pre_backward(trainer_t *t, int unit);
void zero3_post_backward(trainer_t *t, int unit);
void zero3_grad_ready(trainer_t *t, int unit);
/* The second half of ZeRO-3's step, once t->grads holds this rank's summed piece of every unit:
 * the norm over z->shard, the update of the shard, the gathered window's extras. */
void zero3_update(trainer_t *t, zero3_t *z);

/* ---- the node groups (hsdp.c) --------------------------------------------------------------- */
/* Dies, naming `flag` and the nodes' sizes, unless every node holds the same number of c's ranks
 * (HSDP's and hpZ's groups pair place i of every node). */
void node_sizes_equal_or_die(comm_t *c, const char *flag);

/* ---- ZeRO++ hpZ (hpz.c), called by ZeRO-3 where --hpz changes it ---------------------------- */
void hpz_setup(trainer_t *t, zero3_t *z);        /* in zero3_init: the node's group and the copy */
void hpz_keep_forward(trainer_t *t, zero3_t *z, int e); /* post_forward: keep 1/g of event e's unit */
/* The gather of unit u's backward into dst, from the node's secondary pieces (waited: returns 0). */
comm_handle_t hpz_gather_backward(trainer_t *t, zero3_t *z, int u, void *dst);
void hpz_release(trainer_t *t, zero3_t *z);      /* in zero3_release */
void hpz_formula(const trainer_t *t, formula_t *f); /* zero3's formula with --hpz */
#endif
