/* zero2.c — ZeRO stage 2 (P_os+g): optimizer states AND gradients sharded, params full.
 * Notes: notes/04-zero2.md.
 *
 * Backward hands each unit's gradient to the strategy the moment it exists (post_backward):
 * it is reduce-scattered at once, asynchronously, while backward goes on with the next unit —
 * chapter 02's overlap, with a reduce-scatter instead of an all-reduce. A rank keeps only its
 * piece of each unit's gradient (t->grads is (P/N)); the full gradient of a unit lives in one of
 * two reused staging buffers until its reduce-scatter is done (zero_rs_* below, which ZeRO-3
 * reuses).
 * The step ends by issuing the per-unit all-gathers of the params; the next forward waits for
 * each unit just before using it (zero_wait_params), so the gathers overlap the forward.
 * With --accum K each micro-batch is reduce-scattered and summed into the shard: K times the
 * reduce-scatter traffic, but full gradients never stay resident (DeepSpeed's choice). */
#include "zero.h"              // zero2_strategy, zero_rs_t, shard_plan, zero_* helpers
#include <stdio.h>             // printf, snprintf
#include <stdlib.h>            // free
#include "check.h"    // xcalloc
#include "comm.h"     // comm_reduce_scatter_async, comm_wait, comm_wait_all
#include "exercise.h" // zl_exercise_todo (in the generated stubs)
#include "ops.h"      // op_add, op_fill
#include "tensor.h"   // tensor_alloc, tensor_free, tensor_at
#include "trace.h"    // trace_begin, trace_end

/* ---- the reduce-scatter during backward (zero_rs_*, declared in zero.h; ZeRO-3 uses it) ---- */
void zero_rs_init(zero_rs_t *r, trainer_t *t, comm_t *shard) {
  const model_t *m = &t->model;
  /* two groups (12): t->dense_comm, opened only for a strategy that runs them (ZeRO-2's, not ZeRO-3's) */
  *r = (zero_rs_t){.comm = shard, .dense = t->dense_comm, .next = 0};
  if (t->no_sync) { /* the full gradient, each step (zero_rs_begin_unit); no staging */
    r->nslots = 2;
    for (int s = 0; s < 2; s++) r->unit[s] = -1;
    return;
  }
  int64_t max_piece = 0;
  for (int u = 0; u < m->n_units; u++)
    if (m->units[u].piece > max_piece) max_piece = m->units[u].piece; /* two groups: pieces differ */
  /* --buffer-mb B: one staging slot when two would pass B (the next unit's backward then waits
   * for the previous reduce-scatter: less overlap, same sums); one unit is the floor */
  int64_t buf = comm_piece_bytes(shard);
  r->nslots = buf > 0 && 2 * m->max_unit_padded * (int64_t)dtype_size(t->wdt) > buf ? 1 : 2;
  for (int s = 0; s < 2; s++) {
    int64_t n = s < r->nslots ? m->max_unit_padded : 0;
    r->staging[s] = tensor_alloc("grad staging (unit)", LEDGER_COMM, t->wdt, t->dev, n);
    /* only --accum > 1 needs a landing buffer for the later micro-batches */
    r->acc[s] = tensor_alloc("grad reduce-scatter landing", LEDGER_COMM, t->wdt, t->dev,
                             t->cfg->accum > 1 && n ? max_piece : 0);
    r->h[s] = 0;
    r->unit[s] = -1;
    r->add[s] = 0;
  }
  r->next = 0;
}

/* Wait for slot s's reduce-scatter and, for micro-batches > 0, add its piece into the shard. */
static void rs_retire(zero_rs_t *r, trainer_t *t, int s) {
  if (!r->h[s] && !r->hd[s]) return;
  if (r->hd[s]) comm_wait(r->dense, r->hd[s]);
  if (r->h[s]) comm_wait(r->comm, r->h[s]);
  if (r->add[s]) {
    const unit_t *un = &t->model.units[r->unit[s]];
    op_add(t->dev, tensor_at(&t->grads, un->shard_off), r->acc[s].data, t->wdt, un->piece);
  }
  r->h[s] = r->hd[s] = 0;
  r->unit[s] = -1;
  r->add[s] = 0;
}

void zero_rs_begin_unit(zero_rs_t *r, trainer_t *t, int u) {
  const unit_t *un = &t->model.units[u];
  /* the step's full gradient (zero-filled: its pad slots stay 0), accumulated over micro-batches */
  if (t->no_sync) {
    if (!r->full.data)
      r->full = tensor_alloc("grads (full, this step)", LEDGER_GRADS, t->wdt, t->dev, t->model.padded_numel);
    t->unit_grads[u] = tensor_at(&r->full, un->off);
    t->grad_beta = t->micro > 0 ? 1.0f : 0.0f;
    return;
  }
  if (r->nslots == 1) r->next = 0; /* zero_rs_end_unit alternates; with one slot it is always 0 */
  int s = r->next;
  if (r->h[s] || r->hd[s]) TRAINER_PHASE("wait staging", rs_retire(r, t, s));
  /* backward writes only the unit's numel grads: the pad tail must read 0 (a larger unit may
   * have used this buffer before), or the pad slots of the shard would pick up garbage */
  if (un->padded > un->numel)
    op_fill(t->dev, tensor_at(&r->staging[s], un->numel), t->wdt, 0.0f, un->padded - un->numel);
  t->unit_grads[u] = r->staging[s].data;
  t->grad_beta = 0; /* fresh grads each micro-batch: accumulation happens in the shard */
}

void zero_rs_end_unit(zero_rs_t *r, trainer_t *t, int u) {
  if (r->dense) { /* 12's two groups: the dense half over every rank, the experts over D */
    const unit_t *f = &t->model.units[u];
    comm_handle_t h[2];
    if (t->no_sync) { /* once per step, from the step's full gradient (waited in zero_rs_finish) */
      if (t->last_micro)
        zero_two_reduce_scatter(t, u, tensor_at(&r->full, f->off), tensor_at(&t->grads, f->shard_off), h,
                                "reduce-scatter grads");
      return;
    }
    int s = r->next;
    void *dst = t->micro == 0 ? tensor_at(&t->grads, f->shard_off) : r->acc[s].data;
    zero_two_reduce_scatter(t, u, r->staging[s].data, dst, h, "reduce-scatter grads");
    r->hd[s] = h[0], r->h[s] = h[1], r->unit[s] = u, r->add[s] = t->micro != 0, r->next = 1 - s;
    return;
  }
  if (t->no_sync) { /* once per step: the unit's gradient is final after its last micro-batch */
    const unit_t *f = &t->model.units[u];
    if (t->last_micro)
      comm_reduce_scatter_async(r->comm, tensor_at(&r->full, f->off), tensor_at(&t->grads, f->shard_off),
                                f->padded, t->wdt, REDOP_SUM, "reduce-scatter grads");
    return;
  }
  // BEGIN EXERCISE zero_rs_end_unit notes/04-zero2.md
  // HINT: as soon as a unit's gradient is final, start its reduce-scatter so it overlaps the rest of the
  // HINT: backward; never wait here.
  // HINT2: the staging slot r->next holds the unit's padded grads; micro-batch 0 lands straight in your piece
  // HINT2: of t->grads (at shard_off), later micro-batches in r->acc[slot] with r->add[slot] = 1 (rs_retire
  // HINT2: adds them); record the handle and the unit, advance r->next.
  // HINT3: s = r->next; r->h[s] = comm_reduce_scatter_async(r->comm, r->staging[s].data, t->micro == 0 ? your
  // HINT3: piece of t->grads : r->acc[s].data, padded, t->wdt, REDOP_SUM, tag); r->unit[s] = u; r->add[s] =
  // HINT3: t->micro != 0; r->next = 1 − s.
  const unit_t *un = &t->model.units[u];
  int s = r->next;
  int direct = t->micro == 0;
  void *dst = direct ? tensor_at(&t->grads, un->shard_off) : r->acc[s].data;
  r->h[s] = comm_reduce_scatter_async(r->comm, r->staging[s].data, dst, un->padded, t->wdt, REDOP_SUM,
                                      "reduce-scatter grads");
  r->unit[s] = u;
  r->add[s] = !direct;
  r->next = 1 - s;
  // END EXERCISE
}

void zero_rs_finish(zero_rs_t *r, trainer_t *t) {
  trace_begin("wait reduce-scatter");
  if (r->dense) comm_wait_all(r->dense);
  comm_wait_all(r->comm);
  for (int k = 0; k < 2; k++) rs_retire(r, t, (r->next + k) % 2); /* oldest first */
  if (r->full.data) { /* no_sync: the full gradient goes until the next step's first backward */
    tensor_free(&r->full);
    for (int u = 0; u < t->model.n_units; u++) t->unit_grads[u] = NULL;
  }
  trace_end(NULL);
}

void zero_rs_free(zero_rs_t *r) {
  for (int s = 0; s < 2; s++) {
    tensor_free(&r->staging[s]);
    tensor_free(&r->acc[s]);
  }
  tensor_free(&r->full);
}

/* ---- the strategy ------------------------------------------------------------------------ */

typedef struct zero2 {
  zero_rs_t rs;      /* staging buffers and pending reduce-scatters */
  comm_handle_t *ag; /* [2·n_units] pending all-gathers of each unit's params (0: none; zero.h) */
} zero2_t;

static void zero2_setup(trainer_t *t) {
  model_t *m = &t->model;
  if (t->dense_comm) zero_two_plan(t); /* 12's two groups: the dense prefixes over every rank */
  else shard_plan(m, t->world);
  zero2_t *z = xcalloc(1, sizeof *z, "zero2 state");
  t->priv = z;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->padded_numel);     // (P) full
  t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, m->shard_numel);         // (P/N) own shard
  if (t->wdt != DT_F32)
    t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, m->shard_numel);   // (P/N)
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);       // (P/N)
  if (t->cfg->optimizer == OPT_ADAMW)
    t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);     // (P/N)
  zero_rs_init(&z->rs, t, t->comm);
  if (t->no_sync && trainer_prints(t))
    printf("  zero2 under a pipeline: the grads are reduce-scattered once per step, after the last "
           "micro-batch; every\n"
           "  micro-batch's backward adds into the stage's full gradient, so it lives through all M = %d "
           "micro-batches and\n"
           "  ZeRO-2 saves only between steps (the full buffer is freed after the reduce-scatter): see the "
           "grads lines\n",
           t->n_micro);
  z->ag = xcalloc(2 * (size_t)m->n_units, sizeof *z->ag, "zero2 gather handles");
  for (int u = 0; u < m->n_units; u++) {
    t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
    t->unit_grads[u] = NULL; /* set per unit in pre_backward: a staging buffer */
  }
  zero_init_params(t, t->comm, 1);
}

/* Each unit waits for its all-gather of the previous step just before its forward. */
static void zero2_pre_forward(trainer_t *t, int unit) {
  zero2_t *z = t->priv;
  zero_wait_params(t, z->ag, unit);
}

static void zero2_pre_backward(trainer_t *t, int unit) {
  zero2_t *z = t->priv;
  zero_rs_begin_unit(&z->rs, t, unit);
}

static void zero2_post_backward(trainer_t *t, int unit) {
  zero2_t *z = t->priv;
  zero_rs_end_unit(&z->rs, t, unit);
}

/* A split backward (07's zero-bubble schedules, always no_sync): the W of the unit's last
 * micro-batch made its gradient final — its reduce-scatter starts here (zero_rs_end_unit). */
static void zero2_grad_ready(trainer_t *t, int unit) {
  zero2_t *z = t->priv;
  zero_rs_end_unit(&z->rs, t, unit);
}

static void zero2_step(trainer_t *t) {
  zero2_t *z = t->priv;
  zero_rs_finish(&z->rs, t);
  int updated;
  TRAINER_PHASE("update own shard + cast", updated = zero_optimizer_step(t, t->comm, t->grads.data, 1));
  /* (--nonfinite skip: params unchanged everywhere, nothing to gather) */
  if (updated) TRAINER_PHASE("issue all-gather params", zero_all_gather_params(t, z->ag));
}

/* Rank r owns piece r of every unit and holds the full working params (strategy_t.layout). */
static void zero2_layout(trainer_t *t, int u, unit_layout_t *out) { zero_unit_layout(t, t->comm, u, 1, out); }

/* Frees the stage's own buffers; the model states are the trainer's to free (train.h). */
static void zero2_teardown(trainer_t *t) {
  zero2_t *z = t->priv;
  comm_wait_all(t->comm);
  if (t->dense_comm) comm_wait_all(t->dense_comm);
  if (z) {
    zero_rs_free(&z->rs);
    free(z->ag);
  }
  free(z);
  t->priv = NULL;
}

/* ZeRO-2's formulas: bΨ + (b + K)Ψ/N; per step a reduce-scatter and an all-gather, 2(N−1)/N·Ψ·b.
 * no_sync (a pipeline's): the full gradient lives through the step, + bΨ at its peak. */
static void zero2_formula(const trainer_t *t, formula_t *f) {
  if (t->dense_comm) { /* 12's two groups */
    zero_two_formula(t, 2, f);
    return;
  }
  double psi = (double)t->model.numel;
  formula_stage(f, 2, psi, t->world, t->wdt, train_opt_states(t->cfg));
  zero_accum_traffic(t, 2, f); /* --accum K: a reduce-scatter per micro-batch */
  if (t->no_sync) {
    f->grads += psi * (double)dtype_size(t->wdt);
    snprintf(f->mem_text, sizeof f->mem_text, "%s, + bΨ of full grads through the step",
             formula_text(2, t->wdt, train_opt_states(t->cfg)));
  }
}

static const strategy_t zero2_s = {
    .name = "zero2",
    .stage = 2,
    .two_groups = 1,
    .setup = zero2_setup,
    .pre_forward = zero2_pre_forward,
    .pre_backward = zero2_pre_backward,
    .post_backward = zero2_post_backward,
    .grad_ready = zero2_grad_ready,
    .step = zero2_step,
    .teardown = zero2_teardown,
    .layout = zero2_layout,
    .formula = zero2_formula,
};

const strategy_t *zero2_strategy(void) { return &zero2_s; }
