/* scn_zero_checks — chapter 03/04/05's program (the same strategy, flags and report) with the
 * testing aids tests/mpi/test_zero.c needs wrapped around the strategy, so that solutions/ (the
 * students' tree) carries none of them:
 *   - the pad invariant (notes/03-zero1.md): after every step every pad slot of params, grads,
 *     master, m and v reads exactly 0, else the job dies naming rank, tensor, unit and index;
 *     at the end rank 0 prints `zero pad check: N pad values checked on all ranks after the
 *     steps, all exactly 0`;
 *   - the run's smallest global gradient norm, reported as "grad_norm_min" (text and --json):
 *     it tells whether --clip X acted on every step (norm > X).
 *   scn_zero_checks STAGE [training flags]      STAGE: 1, 2 or 3 (ch03_zero1, ch04_zero2, ch05_zero3)
 * A tensor's layout is read from its size alone: padded_numel elements = the full padded buffer
 * (pads at [off+numel, off+padded) of each unit), shard_numel = this rank's shard (pads: the part
 * of its piece past numel). */
#include "train.h"  // train_parse_args, train_main, trainer_t, strategy_t, trainer_report_extra
#include "zero.h"   // zero1_strategy, zero2_strategy, zero3_strategy
#include "check.h"  // die
#include "comm.h"   // comm_ctl_all_reduce_f64, comm_wait_all
#include "device.h" // dev_memcpy, dev_sync
#include <math.h>   // isfinite
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // atoi

static const strategy_t *g_inner; /* the chapter's strategy */
static strategy_t g_checked;      /* g_inner with step and teardown wrapped */
static double g_pads_checked;
static double g_norm_min = -1;

static void check_range(trainer_t *t, const tensor_t *x, int u, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    char raw[4] = {0};
    dev_memcpy(DEV_CPU, raw, x->dev, tensor_at(x, i), dtype_size(x->dtype));
    float v = x->dtype == DT_F32 ? *(float *)raw : bf16_to_f32(*(bf16_t *)raw);
    if (v != 0.0f)
      die_on_rank("pad slot not zero after step %d: %s[%lld] (unit %d) = %g, expected 0", t->step, x->name,
          (long long)i, u, v);
    g_pads_checked++;
  }
}

static void check_pads_of(trainer_t *t, const tensor_t *x) {
  const model_t *m = &t->model;
  if (!x->data || m->padded_numel == m->numel) return; /* one rank: no pad slots */
  int full = x->numel == m->padded_numel;
  if (!full && x->numel != m->shard_numel)
    die_on_rank("pad check: %s has %lld elements, neither the padded model (%lld) nor a shard (%lld)",
                x->name, (long long)x->numel, (long long)m->padded_numel, (long long)m->shard_numel);
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    if (full) {
      check_range(t, x, u, un->off + un->numel, un->off + un->padded);
    } else {
      int64_t lo = (int64_t)t->rank * un->piece, hi = lo + un->piece; /* my piece, unit-local */
      int64_t pad_lo = un->numel > lo ? un->numel : lo;
      if (pad_lo < hi) check_range(t, x, u, un->shard_off + (pad_lo - lo), un->shard_off + un->piece);
    }
  }
}

static void checked_step(trainer_t *t) {
  g_inner->step(t);
  if (isfinite(t->grad_norm) && !t->skipped && (g_norm_min < 0 || t->grad_norm < g_norm_min)) {
    g_norm_min = t->grad_norm;
    trainer_report_extra(t, "grad_norm_min", g_norm_min);
  }
  comm_wait_all(t->comm); /* the params' all-gathers of this step (ZeRO-1/2) write pad slots too */
  dev_sync(t->dev);
  const tensor_t *states[5] = {&t->params, &t->grads, &t->master, &t->opt_m, &t->opt_v};
  for (int k = 0; k < 5; k++) check_pads_of(t, states[k]);
}

static void checked_teardown(trainer_t *t) {
  double n = g_pads_checked;
  comm_ctl_all_reduce_f64(t->comm, &n, 1, REDOP_SUM);
  if (t->rank == 0)
    printf("zero pad check: %.0f pad values checked on all ranks after the steps, all exactly 0\n", n);
  g_inner->teardown(t);
}

int main(int argc, char **argv) {
  int stage = argc > 1 ? atoi(argv[1]) : 0;
  if (stage < 1 || stage > 3) {
    fprintf(stderr, "usage: scn_zero_checks 1|2|3 [training flags of ch03_zero1, ch04_zero2, ch05_zero3]\n");
    return 2;
  }
  train_cfg_t cfg;
  train_parse_args(argc - 1, argv + 1, &cfg, "scn_zero_checks",
                   "ZeRO-1/2/3 with the pad and grad-norm checks.", stage == 3 ? TRAIN_FLAG_PREFETCH : 0);
  g_inner = stage == 1 ? zero1_strategy() : stage == 2 ? zero2_strategy() : zero3_strategy();
  g_checked = *g_inner;
  g_checked.step = checked_step;
  g_checked.teardown = checked_teardown;
  return train_main(&cfg, &g_checked, stage == 1 ? "03_zero1" : stage == 2 ? "04_zero2" : "05_zero3");
}
