/* zero.h — chapters 03–05's adapter: the ZeRO-1/2/3 strategies and the shard plan they share.
 * Notes: notes/03-zero1.md (shard plan, ZeRO-1), notes/04-zero2.md, notes/05-zero3.md.
 *
 * One sharding layout for all three stages (FSDP's flat parameters): every unit (linear layer)
 * is padded to a multiple of N and cut into N equal pieces; rank r owns piece r of every unit.
 *
 *   full padded buffer   | unit 0: piece0 piece1 .. pieceN−1 | unit 1: piece0 .. | ...
 *   rank r's shard       | unit 0 piece r | unit 1 piece r | ...        (shard_numel = Σ piece)
 *
 * So one reduce-scatter per unit hands rank r exactly its gradient piece (comm.h's chunk r of
 * a buffer of `padded` elements IS piece r, since N divides padded), one all-gather per unit
 * rebuilds the unit, and the optimizer state of a rank is the union of its pieces.
 * The stages differ only in what stays resident:
 *   ZeRO-1  params (P) full, grads (P) full,  master/m/v (P/N)
 *   ZeRO-2  params (P) full, grads (P/N),     master/m/v (P/N)
 *   ZeRO-3  params (P/N),    grads (P/N),     master/m/v (P/N)
 * Pad slots stay exactly 0 in params, grads, master, m and v. Model states are allocated by each
 * stage's setup and freed by the trainer (train.h); a stage's teardown frees only its t->priv. */
#ifndef ZL_ZERO_H
#define ZL_ZERO_H
#include <stdint.h>            // int64_t
#include "comm.h"    // comm_handle_t
#include "model.h"   // model_t, unit_t
#include "tensor.h"  // tensor_t
#include "train.h"   // strategy_t, trainer_t, unit_layout_t

/* ---- the shard plan (solutions/shard.c) ------------------------------------------------- */
/* Re-lay out an initialized model (model_init) for `world` ranks: each unit's padded =
 * numel rounded up to a multiple of world, piece = padded/world, off = Σ_{v<u} padded_v,
 * shard_off = Σ_{v<u} piece_v; and padded_numel = Σ padded, shard_numel = Σ piece,
 * max_unit_padded = max padded. world 1 gives the unpadded layout. Dies on world < 1. */
void shard_plan(model_t *m, int world);
/* Offset, in the full padded buffer, of rank r's piece of unit u. */
static inline int64_t shard_piece_off(const unit_t *u, int rank) { return u->off + (int64_t)rank * u->piece; }
/* Rebuild the unpadded Ψ weights from every rank's shard: shards holds world blobs of
 * shard_numel floats each, in rank order (what comm_ctl_gather returns). dst: Ψ floats. */
void shard_assemble(const model_t *m, int world, const float *shards, float *dst);

/* ---- shared by the three stages (solutions/shard.c) ------------------------------------- */
/* `shard` below is the group the stage shards over — its N ranks own pieces 0..N−1 of every unit,
 * this rank piece comm_rank(shard): t->comm for ZeRO-1/2, ZeRO-3's own (all of t->comm, or one
 * node's ranks under HSDP, whose nodes each hold every piece: solutions/hsdp.c). */
/* The sharded optimizer step shared by all stages: the global norm from this rank's grad shard
 * (grad_shard: shard_numel elements in wdt, unit order) summed over the shard group (its pieces
 * tile the model once), then the update of the rank's pieces — master pieces then cast into the
 * working params (bf16), or the fp32 params pieces in place. params_full = 1: t->params is the
 * full padded buffer (ZeRO-1/2), 0: it is the shard (ZeRO-3). Returns 0 if --nonfinite skip
 * dropped the step. */
int zero_optimizer_step(trainer_t *t, comm_t *shard, const void *grad_shard, int params_full);
/* All-gather every unit's working params in place in the full buffer (ZeRO-1/2, over t->comm), async on the
 * stream, one call per unit; handles[u] (n_units, may be NULL) receives unit u's handle so the
 * next forward waits for each unit just before using it (the gather overlaps the forward). */
void zero_all_gather_params(trainer_t *t, comm_handle_t *handles);
/* pre_forward of ZeRO-1/2: wait for unit u's all-gather of the previous step, if any. */
void zero_wait_params(trainer_t *t, comm_handle_t *handles, int u);
/* Fill this rank's master / params shard with the deterministic init (no broadcast needed:
 * trainer_init_values is a pure function of the seed). params_full as above. */
void zero_init_params(trainer_t *t, comm_t *shard, int params_full);

/* strategy_t.layout of the three stages: rank r of the shard group owns piece r of unit u — its
 * fp32 weights (the master piece, or its piece of the fp32 params) and optimizer states at
 * shard_off — and holds the working params of the whole unit (params_full = 1: ZeRO-1/2) or of
 * the piece (ZeRO-3). */
void zero_unit_layout(trainer_t *t, comm_t *shard, int u, int params_full, unit_layout_t *out);

/* --accum K without no_sync: ZeRO-2 reduce-scatters every micro-batch's gradient ((K+1)(N−1)/N·Ψ·b per
 * step with the one all-gather), ZeRO-3 also gathers every unit twice per micro-batch (3K(N−1)/N·Ψ·b):
 * f->comm_bytes of one micro-batch's formula scaled to that (stage 1, K = 1 or no_sync: unchanged). */
void zero_accum_traffic(const trainer_t *t, int stage, formula_t *f);

/* ---- two data-parallel groups (chapter 12's --ep; solutions/zero_groups.c) ---------------------
 * With t->dense_comm (strategy_t.two_groups) each unit's dense prefix is sharded over every rank and its
 * experts over t->comm's D: rank r owns comm.h's chunk r of N of the prefix and chunk dp of D of the
 * experts, back to back in its shard (un->piece = their sum, this rank's; no pad: padded = numel). The
 * helpers above (zero_optimizer_step, zero_all_gather_params, zero_wait_params, zero_init_params,
 * zero_unit_layout) hand over to these when t->dense_comm is set; handles then has 2·n_units slots
 * (the dense gathers at n_units + u). */
/* The two pieces of unit u this rank owns, unit-local: [lo[0], +n[0]) dense, [lo[1], +n[1]) experts. */
void zero_two_pieces(const trainer_t *t, int u, int64_t lo[2], int64_t n[2]);
/* shard_plan for two groups: off, padded = numel, piece, shard_off; the model's sums. */
void zero_two_plan(trainer_t *t);
/* Unit u's full gradient `full` (numel, wdt) reduce-scattered into `piece` (this rank's n[0] + n[1]):
 * h[0] the dense half's handle (over t->dense_comm), h[1] the experts' (over t->comm). */
void zero_two_reduce_scatter(trainer_t *t, int u, const void *full, void *piece, comm_handle_t h[2],
                             const char *tag);
/* ZeRO-3: unit u's two pieces of working params (at shard_off) gathered into full (numel, wdt): h[0] the
 * dense half's handle (over t->dense_comm), h[1] the experts' (over t->comm). */
void zero_two_gather(trainer_t *t, int u, void *full, comm_handle_t h[2], const char *tag);
/* params_full as above: 1 ZeRO-1/2 (the pieces inside the full params), 0 ZeRO-3 (the pieces only). */
int zero_two_optimizer_step(trainer_t *t, const void *grad_shard, int params_full);
void zero_two_all_gather(trainer_t *t, comm_handle_t *handles);
void zero_two_init_params(trainer_t *t, int params_full);
void zero_two_layout(trainer_t *t, int u, int params_full, unit_layout_t *out);
/* ZeRO-`stage`'s formulas over the two groups: the dense Ψ_d over N, the experts' Ψ − Ψ_d over D. */
void zero_two_formula(const trainer_t *t, int stage, formula_t *f);

/* ---- ZeRO-2's reduce-scatter during backward (solutions/zero2.c; ZeRO-3 uses it too) ------
 * Backward writes a unit's full gradient into one of two staging buffers (LEDGER_COMM, the
 * largest unit each); post_backward reduce-scatters it, async, into this rank's piece of the
 * grad shard, so the full gradient of a unit lives only until its reduce-scatter is done and
 * the next-but-one unit reuses the buffer. With --accum K every micro-batch is reduce-scattered:
 * micro-batch 0 writes the shard, later ones land in a piece-sized buffer that is added in.
 * With t->no_sync (train.h) the micro-batches accumulate in a full gradient instead and each unit
 * is reduce-scattered once, after its last micro-batch: the sums of DDP with --accum, bit for bit.
 * Every reduce-scatter goes over r->comm, the shard group zero_rs_init was given. */
typedef struct zero_rs {
  comm_t *comm;        /* the shard group: t->comm (ZeRO-2, offload), ZeRO-3's z->shard */
  comm_t *dense;       /* two groups (12): t->dense_comm, the dense halves' group (hd: their handles) */
  comm_handle_t hd[2];
  tensor_t staging[2]; /* (max unit padded) full grads of the unit in flight, wdt */
  tensor_t acc[2];     /* (max piece) reduce-scatter output to add in (micro-batches > 0) */
  comm_handle_t h[2];  /* pending reduce-scatter per staging slot (0: none) */
  int unit[2];         /* its unit, or −1 */
  int add[2];          /* 1: acc[slot] must be added into the shard when it completes */
  int next;            /* the slot the next unit uses */
  int nslots;          /* 2, or 1 when two units' staging would pass --buffer-mb (the floor: one unit) */
  /* t->no_sync (a pipeline's, 07): no staging; the full gradient of the units (padded_numel, LEDGER_GRADS)
   * lives from the step's first backward to its reduce-scatters, each unit's issued after its last
   * micro-batch's backward, from the sum the micro-batches accumulated in it (FSDP's no_sync) */
  tensor_t full;
} zero_rs_t;
void zero_rs_init(zero_rs_t *r, trainer_t *t, comm_t *shard);
/* pre_backward(u): pick a staging slot (wait for its previous reduce-scatter), zero its pad tail,
 * point t->unit_grads[u] at it with t->grad_beta = 0. */
void zero_rs_begin_unit(zero_rs_t *r, trainer_t *t, int u);
/* post_backward(u): reduce-scatter the unit's staging buffer into the grad shard (async). */
void zero_rs_end_unit(zero_rs_t *r, trainer_t *t, int u);
/* step: wait for every reduce-scatter and add the pending micro-batch pieces. */
void zero_rs_finish(zero_rs_t *r, trainer_t *t);
void zero_rs_free(zero_rs_t *r);

/* ---- the strategies (solutions/zero1.c, zero2.c, zero3.c) ------------------------------- */
const strategy_t *zero1_strategy(void); /* "zero1": P_os */
const strategy_t *zero2_strategy(void); /* "zero2": P_os+g, reduce-scatter per unit during backward */
const strategy_t *zero3_strategy(void); /* "zero3": P_os+g+p, gather per unit, --prefetch K|auto */
/* The strategy --zero S names on the data dimension (chapters 06, 07, 10, 12): 0 DDP with ddp_variant
 * (ddp.h: "naive", "overlap", "bucketed"), 1/2/3 ZeRO-1/2/3 (shard.c). */
const strategy_t *zero_strategy_for(int zero, const char *ddp_variant);
/* "hsdp" (--shard-group node; solutions/hsdp.c, notes/09-nodes.md): ZeRO-3 over the g ranks of each
 * node, the grad shards all-reduced across the K nodes before the update (FSDP's HYBRID_SHARD).
 * Every node must hold the same number of ranks (dies naming the nodes' sizes otherwise). */
const strategy_t *hsdp_strategy(void);
#endif
