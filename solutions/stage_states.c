/* stage_states.c — a stage's model states from its strategy's own formula hook (stage_states.h). */
#include "stage_states.h" // strategy_stage_states
#include "ddp.h"          // ddp_strategy
#include "formula.h"      // formula_t
#include "offload.h"      // offload_strategy (MEMCALC_OFFLOAD)
#include "train.h"        // trainer_t, strategy_t, train_cfg_t
#include "zero.h"         // zero1_strategy, zero2_strategy, zero3_strategy

mem_formula_t strategy_stage_states(int s, double psi, int world, dtype_t wdt) {
  int no_sync = (s & MEMCALC_NO_SYNC) != 0; /* a pipeline's data dimension (chapter 07) */
  s &= ~MEMCALC_NO_SYNC;
  const strategy_t *st = s == 0 ? ddp_strategy("naive")
      : s == 1                  ? zero1_strategy()
      : s == 2                  ? zero2_strategy()
      : s == MEMCALC_OFFLOAD    ? offload_strategy(OFFLOAD_OPTIMIZER)
                                : zero3_strategy();
  train_cfg_t cfg = {.optimizer = OPT_ADAMW, .wdt = wdt, .accum = 1};
  trainer_t t = {.cfg = &cfg, .strategy = st, .world = world, .wdt = wdt, .n_micro = 1, .no_sync = no_sync};
  t.model.numel = (int64_t)psi;
  formula_t f;
  st->formula(&t, &f);
  mem_formula_t m = {.params = f.params, .grads = f.grads, .master = 0, .optim = f.master + f.optim + f.host};
  m.total = m.params + m.grads + m.optim;
  return m;
}
