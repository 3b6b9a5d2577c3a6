/* shard.c — the shard plan shared by ZeRO-1, -2 and -3, and the parts of the step they share.
 * Notes: notes/03-zero1.md ("The shard plan", "The five steps").
 *
 * Layout (solutions/zero.h): each unit padded to a multiple of N; rank r owns piece r of every
 * unit; a rank's shard is its pieces, unit after unit. The stages differ only in what stays
 * resident, so the optimizer step, the init and the layout answer below serve all three. They take
 * the shard group (N ranks, r its rank) explicitly: ZeRO-1/2 pass t->comm, ZeRO-3 its own z->shard
 * (all of t->comm, or HSDP's node: solutions/hsdp.c). */
#include "zero.h"            // shard_plan, zero_* declarations
#include "ddp.h"             // ddp_strategy (zero_strategy_for --zero 0)
#include <stdlib.h>          // free
#include <stdio.h>           // snprintf
#include <string.h>          // memcpy
#include "check.h"  // die, xmalloc
#include "comm.h"   // comm_all_gather_async, comm_wait
#include "device.h" // dev_upload
#include "exercise.h" // zl_exercise_todo (in the generated stubs)
#include "ops.h"    // op_cast
#include "tensor.h" // tensor_at
#include "trace.h"  // trace_begin, trace_end

void shard_plan(model_t *m, int world) {
  // BEGIN EXERCISE shard_plan notes/03-zero1.md
  // HINT: every unit must split into world equal pieces, one per rank, so each unit is padded up to a
  // HINT: multiple of world; the pieces tile each rank's shard.
  // HINT2: per unit, in unit order: padded, piece = padded / world, off (running sum of padded), shard_off
  // HINT2: (running sum of piece); then the model's padded_numel, shard_numel and max_unit_padded.
  // HINT3: padded = (numel + world − 1) / world · world; off += padded; shard_off += piece;
  // HINT3: max_unit_padded =
  // HINT3: the largest padded (ZeRO-2/3 size their staging buffers by it).
  if (world < 1) die_on_rank("shard_plan: world %d must be >= 1", world);
  int64_t off = 0, shard_off = 0, max_padded = 0;
  for (int u = 0; u < m->n_units; u++) {
    unit_t *un = &m->units[u];
    un->padded = (un->numel + world - 1) / world * world; /* pad < world slots, all at the tail */
    un->piece = un->padded / world;
    un->off = off;
    un->shard_off = shard_off;
    off += un->padded;
    shard_off += un->piece;
    if (un->padded > max_padded) max_padded = un->padded;
  }
  m->padded_numel = off;
  m->shard_numel = shard_off;
  m->max_unit_padded = max_padded;
  // END EXERCISE
}

void shard_assemble(const model_t *m, int world, const float *shards, float *dst) {
  int64_t out = 0; /* offset of the unit in the unpadded Ψ layout */
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    for (int r = 0; r < world; r++) {
      int64_t lo = (int64_t)r * un->piece; /* piece r covers [lo, lo+piece) of the unit */
      int64_t n = un->numel - lo < un->piece ? un->numel - lo : un->piece; /* drop the pad */
      if (n > 0)
        memcpy(dst + out + lo, shards + (int64_t)r * m->shard_numel + un->shard_off,
               (size_t)n * sizeof(float));
    }
    out += un->numel;
  }
}

/* Where the working params of this rank's piece of unit u live (rank: its place in the shard group). */
static void *own_params(trainer_t *t, const unit_t *un, int rank, int params_full) {
  return tensor_at(&t->params, params_full ? shard_piece_off(un, rank) : un->shard_off);
}

int zero_optimizer_step(trainer_t *t, comm_t *shard, const void *grad_shard, int params_full) {
  if (t->dense_comm) return zero_two_optimizer_step(t, grad_shard, params_full); /* 12: zero_groups.c */
  // BEGIN EXERCISE zero_optimizer_step notes/03-zero1.md
  // HINT: each rank updates only the piece it owns, but the gradient norm (clipping) must be that of the
  // HINT: whole model: the ranks' pieces are disjoint, so their squared sums add.
  // HINT2: first the norm, once, before any update: trainer_finish_grads(t, the sum of squares of your grad
  // HINT2: shard (trainer_grad_sumsq), the shard group) — return 0 if it set t->skipped; then per unit at
  // HINT2: shard_off: w, grad, m, v; bf16: the master is updated, then cast into your params piece.
  // HINT3: gscale = trainer_finish_grads(t, trainer_grad_sumsq(t, grad_shard, comm_rank(shard)), shard); per
  // HINT3: unit trainer_optimizer_update(t, w, g, m, v, piece, gscale), w = own_params(t, un,
  // HINT3: comm_rank(shard), params_full) (fp32) or master + shard_off (bf16); bf16: op_cast master piece ->
  // HINT3: own_params; return 1.
  const model_t *m = &t->model;
  size_t gb = dtype_size(t->wdt);
  int rank = comm_rank(shard);
  double sumsq = 0;
  TRAINER_PHASE("grad norm", sumsq = trainer_grad_sumsq(t, grad_shard, rank));
  /* sums Σg² over the shard group: its pieces are disjoint */
  float gscale = trainer_finish_grads(t, sumsq, shard);
  if (t->skipped) return 0;
  trace_begin("optimizer (own shard)");
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    const void *g = (const char *)grad_shard + un->shard_off * (int64_t)gb;
    float *mom = t->opt_m.data ? (float *)t->opt_m.data + un->shard_off : NULL;
    float *var = t->opt_v.data ? (float *)t->opt_v.data + un->shard_off : NULL;
    float *w = t->wdt == DT_F32 ? (float *)own_params(t, un, rank, params_full)
                                : (float *)t->master.data + un->shard_off;
    trainer_optimizer_update(t, w, g, mom, var, un->piece, gscale);
  }
  trace_end(NULL);
  if (t->wdt != DT_F32) { /* step 4 of ZeRO-1: cast the updated master pieces to the working dtype */
    trace_begin("cast master -> params");
    for (int u = 0; u < m->n_units; u++) {
      const unit_t *un = &m->units[u];
      op_cast(t->dev, own_params(t, un, rank, params_full), t->wdt, (float *)t->master.data + un->shard_off,
              DT_F32, un->piece);
    }
    trace_end(NULL);
  }
  return 1;
  // END EXERCISE
}

void zero_all_gather_params(trainer_t *t, comm_handle_t *handles) {
  if (t->dense_comm) { /* 12's two groups: zero_groups.c */
    zero_two_all_gather(t, handles);
    return;
  }
  // BEGIN EXERCISE zero_all_gather_params notes/03-zero1.md
  // HINT: after the step each rank holds only its own updated piece; every rank needs the whole updated unit
  // HINT: back, without waiting here.
  // HINT2: per unit: your piece (inside the unit, at your rank's place) in, the whole unit (padded elements
  // HINT2: at its off) out, in place; the handles go to the caller (handles[u], when not NULL).
  // HINT3: h = comm_all_gather_async(t->comm, tensor_at(&t->params, shard_piece_off(un, t->rank)),
  // HINT3: tensor_at(&t->params, un->off), un->padded, t->wdt, tag); if (handles) handles[u] = h.
  const model_t *m = &t->model;
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    if (un->padded == 0) continue; /* a unit this rank does not hold (a pipeline's other stage) */
    comm_handle_t h =
        comm_all_gather_async(t->comm, tensor_at(&t->params, shard_piece_off(un, t->rank)),
                              tensor_at(&t->params, un->off), un->padded, t->wdt, "all-gather params");
    if (handles) handles[u] = h;
  }
  // END EXERCISE
}

void zero_wait_params(trainer_t *t, comm_handle_t *handles, int u) {
  comm_handle_t *dense = t->dense_comm ? &handles[t->model.n_units + u] : NULL; /* two groups */
  if (dense && *dense) TRAINER_PHASE("wait all-gather", comm_wait(t->dense_comm, *dense));
  if (dense) *dense = 0;
  if (!handles[u]) return;
  TRAINER_PHASE("wait all-gather", comm_wait(t->comm, handles[u]));
  handles[u] = 0;
}

void zero_init_params(trainer_t *t, comm_t *shard, int params_full) {
  if (t->dense_comm) { /* 12's two groups: zero_groups.c */
    zero_two_init_params(t, params_full);
    return;
  }
  const model_t *m = &t->model;
  int rank = comm_rank(shard);
  float *vals = xmalloc((size_t)m->max_unit_padded * sizeof(float), "init values");
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    int64_t lo = shard_piece_off(un, rank);
    if (params_full) { /* the full working params: every rank computes them, no broadcast */
      trainer_init_values(t, un->off, un->off + un->padded, vals);
      dev_upload(t->dev, tensor_at(&t->params, un->off), t->wdt, vals, un->padded);
    } else {
      trainer_init_values(t, lo, lo + un->piece, vals);
      dev_upload(t->dev, tensor_at(&t->params, un->shard_off), t->wdt, vals, un->piece);
    }
    if (t->wdt != DT_F32) {
      const float *mine = params_full ? vals + (int64_t)rank * un->piece : vals;
      dev_upload(t->dev, (float *)t->master.data + un->shard_off, DT_F32, mine, un->piece);
    }
  }
  free(vals);
}

void zero_unit_layout(trainer_t *t, comm_t *shard, int u, int params_full, unit_layout_t *out) {
  if (t->dense_comm) { /* 12's two groups: zero_groups.c */
    zero_two_layout(t, u, params_full, out);
    return;
  }
  const unit_t *un = &t->model.units[u];
  int rank = comm_rank(shard);
  int64_t mine = (int64_t)rank * un->piece; /* piece r: unit-local [r·piece, (r+1)·piece) */
  *out = (unit_layout_t){
      .own_off = mine,
      .own_numel = un->piece,
      .w = t->wdt == DT_F32 ? own_params(t, un, rank, params_full) : (float *)t->master.data + un->shard_off,
      .m = t->opt_m.data ? (float *)t->opt_m.data + un->shard_off : NULL,
      .v = t->opt_v.data ? (float *)t->opt_v.data + un->shard_off : NULL,
      .held_off = params_full ? 0 : mine, /* ZeRO-1/2 hold the whole unit, ZeRO-3 the piece */
      .held_numel = params_full ? un->padded : un->piece,
      .params = tensor_at(&t->params, params_full ? un->off : un->shard_off),
  };
}

void zero_accum_traffic(const trainer_t *t, int stage, formula_t *f) {
  int K = t->n_micro;
  if (t->no_sync || K <= 1 || stage < 2) return;
  /* ZeRO-2: K reduce-scatters, one all-gather; ZeRO-3: per micro-batch two gathers and a reduce-scatter */
  f->comm_bytes *= stage == 2 ? (K + 1) / 2.0 : (double)K;
  if (stage == 2) {
    snprintf(f->comm_text, sizeof f->comm_text, "(K+1)(N-1)/N x psi x %d B, K = %d", (int)dtype_size(t->wdt),
             K % 10000);
    return;
  }
  f->comm_inter_bytes *= K; /* hpZ's, stated: its collectives repeat per micro-batch too */
  char one[sizeof f->comm_text];
  snprintf(one, sizeof one, "%s", f->comm_text); /* the micro-batch's (ZeRO-3's, hpZ's, ZeRO++'s) */
  snprintf(f->comm_text, sizeof f->comm_text, "K=%d x %.55s", K % 100, one);
}

const strategy_t *zero_strategy_for(int zero, const char *ddp_variant) {
  return zero == 0 ? ddp_strategy(ddp_variant) : zero == 1 ? zero1_strategy()
       : zero == 2 ? zero2_strategy() : zero3_strategy();
}
