/* zero2.c — ZeRO stage 2 (P_os+g): optimizer states AND gradients sharded, params full.
 * Notes: notes/04-zero2.md.
 *
 * Backward hands each unit's gradient to the strategy the moment it exists (post_backward):
 * it is reduce-scattered at once, asynchronously, while backward goes on with the next unit —
 * chapter 02's overlap, with a reduce-scatter instead of an all-reduce. A rank keeps only its
 * piece of each unit's gradient (t->grads is (P/N)); the full gradient of a unit lives in one of
 * two reused staging buffers until its reduce-scatter is done (zero_rs_* in shard.c).
 * The step ends by issuing the per-unit all-gathers of the params; the next forward waits for
 * each unit just before using it (zero_wait_params), so the gathers overlap the forward.
 * With --accum K each micro-batch is reduce-scattered and summed into the shard: K times the
 * reduce-scatter traffic, but full gradients never stay resident (DeepSpeed's choice). */
#include "zero.h"              // zero2_strategy, shard_plan, zero_rs_*, zero_* helpers
#include <stdlib.h>            // free
#include "../common/check.h"    // xmalloc, xcalloc
#include "../common/comm.h"     // comm_wait_all
#include "../common/tensor.h"   // tensor_alloc, tensor_free
#include "../common/trace.h"    // trace_begin, trace_end

typedef struct zero2 {
  zero_rs_t rs;      /* staging buffers and pending reduce-scatters */
  comm_handle_t *ag; /* [n_units] pending all-gather of each unit's params (0: none) */
} zero2_t;

static void zero2_setup(trainer_t *t) {
  model_t *m = &t->model;
  shard_plan(m, t->world);
  zero2_t *z = xcalloc(1, sizeof *z, "zero2 state");
  t->priv = z;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->padded_numel);     // (P) full
  t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, m->shard_numel);         // (P/N) own shard
  if (t->wdt != DT_F32)
    t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, m->shard_numel);   // (P/N)
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);       // (P/N)
  if (t->cfg->optimizer == OPT_ADAMW)
    t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);     // (P/N)
  zero_rs_init(&z->rs, t);
  z->ag = xcalloc((size_t)m->n_units, sizeof *z->ag, "zero2 gather handles");
  zero_bind_arrays(t);
  for (int u = 0; u < m->n_units; u++) {
    t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
    t->unit_grads[u] = NULL; /* set per unit in pre_backward: a staging buffer */
  }
  zero_init_params(t, 1);
}

static void zero2_no_hook(trainer_t *t, int unit) {}

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

static void zero2_step(trainer_t *t) {
  zero2_t *z = t->priv;
  zero_rs_finish(&z->rs, t);
  int updated;
  TRAINER_PHASE("update own shard + cast", updated = zero_optimizer_step(t, t->grads.data, 1));
  zero_note_grad_norm(t);
  /* (--nonfinite skip: params unchanged everywhere, nothing to gather) */
  if (updated) TRAINER_PHASE("issue all-gather params", zero_all_gather_params(t, z->ag));
  zero_check_pads(t, 1, 0);
}

static void zero2_teardown(trainer_t *t) {
  zero2_t *z = t->priv;
  comm_wait_all(t->comm);
  zero_pad_report(t);
  if (z) {
    zero_rs_free(&z->rs);
    free(z->ag);
  }
  free(z);
  t->priv = NULL;
  zero_free_states(t);
}

static const strategy_t zero2_s = {
    .name = "zero2",
    .stage = 2,
    .setup = zero2_setup,
    .pre_forward = zero2_pre_forward,
    .post_forward = zero2_no_hook,
    .pre_backward = zero2_pre_backward,
    .post_backward = zero2_post_backward,
    .step = zero2_step,
    .teardown = zero2_teardown,
    .export_params = zero_export_params,
};

const strategy_t *zero2_strategy(void) { return &zero2_s; }
