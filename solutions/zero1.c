/* zero1.c — ZeRO stage 1 (P_os): optimizer states sharded, params and grads full.
 * Notes: notes/03-zero1.md.
 *
 * The classic five steps, each named on the trace (compute row: phases; comm row: tags):
 *   1. forward + backward with the full working params (the trainer's loop)
 *   2. reduce-scatter the gradients, one per unit: rank r receives piece r, summed over ranks.
 *      Issued (async) as soon as backward has finished the unit, so it overlaps the rest of the
 *      backward as DDP's buckets do; the step waits for the last ones.
 *   3. update the rank's own shard: fp32 master (bf16 mode) or the params' own pieces (fp32),
 *      with Adam m, v (or SGD momentum) of the shard only
 *   4. cast the updated master pieces into the working params (bf16 mode)
 *   5. all-gather every unit's params so all ranks hold the full updated model again. Issued
 *      (async) at the end of the step; the next forward waits for each unit just before using it.
 * With --accum K the full grads accumulate locally (like DDP's no_sync) and are reduce-scattered
 * once, during the backward of the last micro-batch. */
#include "zero.h"              // zero1_strategy, shard_plan, zero_* helpers
#include <stdlib.h>            // free
#include "check.h"    // xmalloc, xcalloc
#include "comm.h"     // comm_reduce_scatter_async, comm_wait_all
#include "exercise.h" // zl_exercise_todo (in the generated stubs)
#include "tensor.h"   // tensor_alloc, tensor_free
#include "trace.h"    // trace_begin, trace_end

typedef struct zero1 {
  tensor_t grad_shard; /* (P/N) reduce-scatter output, wdt: transient, LEDGER_COMM */
  comm_handle_t *ag;   /* [2·n_units] pending all-gather of each unit's params (0: none; the second half:
                        * the dense halves' with two groups, zero.h) */
} zero1_t;

static void zero1_setup(trainer_t *t) {
  model_t *m = &t->model;
  if (t->dense_comm) zero_two_plan(t); /* 12's two groups: the dense prefixes over every rank */
  else shard_plan(m, t->world);
  zero1_t *z = xcalloc(1, sizeof *z, "zero1 state");
  t->priv = z;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->padded_numel);     // (P) full
  t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, m->padded_numel);        // (P) full
  if (t->wdt != DT_F32)
    t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, m->shard_numel);   // (P/N) own shard
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);       // (P/N)
  if (t->cfg->optimizer == OPT_ADAMW)
    t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);     // (P/N)
  z->grad_shard =
      tensor_alloc("grad shard (reduce-scatter out)", LEDGER_COMM, t->wdt, t->dev, m->shard_numel);
  z->ag = xcalloc(2 * (size_t)m->n_units, sizeof *z->ag, "zero1 gather handles");
  for (int u = 0; u < m->n_units; u++) {
    t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
    t->unit_grads[u] = tensor_at(&t->grads, m->units[u].off);
  }
  zero_init_params(t, t->comm, 1);
}

/* Step 1 on the trace: forward + backward of a micro-batch, with the full params; each unit
 * first waits for its all-gather of the previous step (step 5). */
static void zero1_pre_forward(trainer_t *t, int unit) {
  zero1_t *z = t->priv;
  if (unit == 0) trace_begin("1 forward + backward");
  zero_wait_params(t, z->ag, unit);
}

static void zero1_pre_backward(trainer_t *t, int unit) {
  t->grad_beta = t->micro > 0 ? 1.0f : 0.0f; /* full grads accumulate locally over micro-batches */
}

/* Step 2 for one unit: rank r receives piece r of the unit's gradient, summed over the ranks. */
static void zero1_reduce_scatter_unit(trainer_t *t, zero1_t *z, int u) {
  if (t->dense_comm) { /* 12's two groups: the dense half over every rank, the experts over D */
    const unit_t *f = &t->model.units[u];
    comm_handle_t h[2];
    zero_two_reduce_scatter(t, u, tensor_at(&t->grads, f->off), tensor_at(&z->grad_shard, f->shard_off), h,
                            "2 reduce-scatter grads");
    return;
  }
  // BEGIN EXERCISE zero1_reduce_scatter notes/03-zero1.md
  // HINT: each rank needs the sum over ranks of only the gradient piece it owns — not the whole summed
  // HINT: gradient.
  // HINT2: per unit: the unit's padded grads (at its off in t->grads) in, your piece out into z->grad_shard
  // HINT2: at the unit's shard_off, summed.
  // HINT3: comm_reduce_scatter_async(t->comm, t->grads at un->off, z->grad_shard at un->shard_off,
  // HINT3: un->padded, t->wdt, REDOP_SUM, tag).
  const unit_t *un = &t->model.units[u];
  comm_reduce_scatter_async(t->comm, tensor_at(&t->grads, un->off), tensor_at(&z->grad_shard, un->shard_off),
                            un->padded, t->wdt, REDOP_SUM, "2 reduce-scatter grads");
  // END EXERCISE
}

static void zero1_post_backward(trainer_t *t, int unit) {
  zero1_t *z = t->priv;
  if (t->last_micro) zero1_reduce_scatter_unit(t, z, unit); /* the unit's full grad is final */
  if (unit == 0) trace_end(NULL);
}

/* A split backward (07's zero-bubble schedules): the W of the unit's last micro-batch made its
 * gradient final — step 2 for it now (its B's post_backward ran with t->last_micro 0). */
static void zero1_grad_ready(trainer_t *t, int unit) {
  if (t->last_micro) zero1_reduce_scatter_unit(t, t->priv, unit);
}

static void zero1_step(trainer_t *t) {
  zero1_t *z = t->priv;
  TRAINER_PHASE("2 wait reduce-scatter", comm_wait_all(t->comm));
  if (t->dense_comm) TRAINER_PHASE("2 wait reduce-scatter", comm_wait_all(t->dense_comm));
  int updated;
  TRAINER_PHASE("3-4 update own shard + cast",
                updated = zero_optimizer_step(t, t->comm, z->grad_shard.data, 1));
  /* (--nonfinite skip: params unchanged everywhere, nothing to gather) */
  if (updated) TRAINER_PHASE("5 issue all-gather params", zero_all_gather_params(t, z->ag));
}

/* Rank r owns piece r of every unit and holds the full working params (strategy_t.layout). */
static void zero1_layout(trainer_t *t, int u, unit_layout_t *out) { zero_unit_layout(t, t->comm, u, 1, out); }

/* Frees the stage's own buffers; the model states are the trainer's to free (train.h). */
static void zero1_teardown(trainer_t *t) {
  zero1_t *z = t->priv;
  comm_wait_all(t->comm);
  if (t->dense_comm) comm_wait_all(t->dense_comm);
  if (z) {
    tensor_free(&z->grad_shard);
    free(z->ag);
  }
  free(z);
  t->priv = NULL;
}

/* ZeRO-1's formulas: (b + b)Ψ + KΨ/N; a reduce-scatter and an all-gather, 2(N−1)/N·Ψ·b. */
static void zero1_formula(const trainer_t *t, formula_t *f) {
  if (t->dense_comm) { /* 12's two groups */
    zero_two_formula(t, 1, f);
    return;
  }
  formula_stage(f, 1, (double)t->model.numel, t->world, t->wdt, train_opt_states(t->cfg));
}

static const strategy_t zero1_s = {
    .name = "zero1",
    .stage = 1,
    .two_groups = 1,
    .setup = zero1_setup,
    .pre_forward = zero1_pre_forward,
    .pre_backward = zero1_pre_backward,
    .post_backward = zero1_post_backward,
    .grad_ready = zero1_grad_ready,
    .step = zero1_step,
    .teardown = zero1_teardown,
    .layout = zero1_layout,
    .formula = zero1_formula,
};

const strategy_t *zero1_strategy(void) { return &zero1_s; }
