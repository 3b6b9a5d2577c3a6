/* scn_layout — a toy strategy written only against the public hook set of common/train/train.h, to
 * show that a new strategy gets checkpoints, resume, resharding, the export of the weights and
 * zl_ckpt by answering strategy_t.layout and nothing else (no code in common/ knows it).
 *
 * "unit owners": every rank holds the full working params and gradients, as in DDP, but the
 * fp32 truth and the optimizer states of unit u belong to rank u mod N alone. A step all-reduces
 * every gradient (one call, as ddp-naive), the owner of each unit updates it, and the owner
 * broadcasts the unit's new params. Element for element the same arithmetic as ddp-naive, so
 * the two train bit for bit alike — and its checkpoints hold whole units spread round-robin over
 * the files, a layout no stage has.
 *   scn_layout [training flags of ch02_ddp, without --variant]
 * Driven by tests/mpi/test_layout_hook.c. */
#include "train.h"  // train_parse_args, train_main, trainer_t, strategy_t, unit_layout_t, trainer_*
#include "check.h"  // xcalloc
#include "comm.h"   // comm_all_reduce, comm_broadcast
#include "ops.h"    // op_cast
#include "tensor.h" // tensor_at

static int owner(const trainer_t *t, int u) { return u % t->world; }

static void toy_setup(trainer_t *t) {
  trainer_alloc_full_states(t, 1); /* (P) params, grads, [master], optimizer states: simple, not lean */
  trainer_init_full_params(t);
  for (int u = 0; u < t->model.n_units; u++) {
    t->unit_params[u] = tensor_at(&t->params, t->model.units[u].off);
    t->unit_grads[u] = tensor_at(&t->grads, t->model.units[u].off);
  }
}

static void toy_step(trainer_t *t) {
  int64_t P = t->model.padded_numel;
  comm_all_reduce(t->comm, t->grads.data, P, t->wdt, REDOP_SUM);
  float gscale = trainer_finish_grads(t, trainer_grad_sumsq(t, t->grads.data, -1), NULL);
  if (t->skipped) return;
  for (int u = 0; u < t->model.n_units; u++) {
    const unit_t *un = &t->model.units[u];
    if (owner(t, u) == t->rank) {
      float *w = (float *)(t->wdt == DT_BF16 ? t->master.data : t->params.data) + un->off;
      float *v = t->opt_v.data ? (float *)t->opt_v.data + un->off : NULL;
      trainer_optimizer_update(t, w, tensor_at(&t->grads, un->off), (float *)t->opt_m.data + un->off, v,
                               un->numel, gscale);
      if (t->wdt == DT_BF16) op_cast(t->dev, tensor_at(&t->params, un->off), DT_BF16, w, DT_F32, un->numel);
    }
    comm_broadcast(t->comm, tensor_at(&t->params, un->off), un->numel, t->wdt, owner(t, u));
  }
}

/* The one hook a checkpoint needs: unit u's fp32 weights and optimizer states live on its owner
 * only; every rank holds the unit's working params. */
static void toy_layout(trainer_t *t, int u, unit_layout_t *out) {
  const unit_t *un = &t->model.units[u];
  int mine = owner(t, u) == t->rank;
  *out = (unit_layout_t){
      .own_off = 0,
      .own_numel = mine ? un->numel : 0,
      .w = (float *)(t->wdt == DT_BF16 ? t->master.data : t->params.data) + un->off,
      .m = (float *)t->opt_m.data + un->off,
      .v = t->opt_v.data ? (float *)t->opt_v.data + un->off : NULL,
      .held_off = 0,
      .held_numel = un->numel,
      .params = tensor_at(&t->params, un->off),
  };
}

static const strategy_t g_toy = {.name = "unit-owners", .stage = 0, .setup = toy_setup, .step = toy_step,
                                 .layout = toy_layout};

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "scn_layout",
                   "A toy strategy: each unit owned by one rank, round-robin.", 0);
  return train_main(&cfg, &g_toy, "toy");
}
