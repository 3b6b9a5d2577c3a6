/* shard.c — the shard plan shared by ZeRO-1, -2 and -3, and the pieces of the step they share.
 * Notes: notes/03-zero1.md ("The shard plan", "The sharded optimizer step").
 *
 * Layout (solutions/zero.h): each unit padded to a multiple of N; rank r owns piece r of every
 * unit; a rank's shard is its pieces, unit after unit. The stages differ only in what stays
 * resident, so the optimizer step, the init and the export below serve all three. */
#include "zero.h"            // shard_plan, zero_* declarations
#include <math.h>            // isfinite
#include <stdio.h>           // printf
#include <stdlib.h>          // free, getenv
#include <string.h>          // memcpy
#include "../common/check.h"  // die, xmalloc
#include "../common/comm.h"   // comm_ctl_gather, comm_all_gather_async
#include "../common/device.h" // dev_memcpy
#include "../common/exercise.h" // zl_exercise_todo (in the generated stubs)
#include "../common/ops.h"    // op_cast, op_sumsq
#include "../common/tensor.h" // tensor_alloc, tensor_free
#include "../common/trace.h"  // trace_begin, trace_end

void shard_plan(model_t *m, int world) {
  // BEGIN EXERCISE shard_plan notes/03-zero1.md
  // HINT: for each unit: padded = numel rounded up to a multiple of world; piece = padded / world;
  // HINT: off = running sum of padded, shard_off = running sum of piece. Then the model totals.
  if (world < 1) die("rank %d: shard_plan: world %d must be >= 1", check_rank(), world);
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
      if (n > 0) memcpy(dst + out + lo, shards + (int64_t)r * m->shard_numel + un->shard_off, (size_t)n * sizeof(float));
    }
    out += un->numel;
  }
}

void shard_gather_to_root(comm_t *c, const model_t *m, const float *shard, float *dst) {
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(c, shard, m->shard_numel * (int64_t)sizeof(float), &all, &sizes);
  if (comm_rank(c) == 0) {
    for (int r = 0; r < comm_world(c); r++)
      if (sizes[r] != m->shard_numel * (int64_t)sizeof(float))
        die("rank 0: shard_gather_to_root: rank %d sent %lld bytes, expected %lld", r, (long long)sizes[r],
            (long long)(m->shard_numel * (int64_t)sizeof(float)));
    shard_assemble(m, comm_world(c), (const float *)all, dst);
  }
  free(all);
  free(sizes);
}

void zero_own_shard_f32(trainer_t *t, int src_full, float *dst) {
  const model_t *m = &t->model;
  if (t->wdt != DT_F32) { /* bf16 mode: the fp32 master shard is the truth */
    dev_memcpy(DEV_CPU, dst, t->dev, t->master.data, (size_t)m->shard_numel * sizeof(float));
    return;
  }
  if (!src_full) {
    dev_memcpy(DEV_CPU, dst, t->dev, t->params.data, (size_t)m->shard_numel * sizeof(float));
    return;
  }
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    dev_memcpy(DEV_CPU, dst + un->shard_off, t->dev, tensor_at(&t->params, shard_piece_off(un, t->rank)),
               (size_t)un->piece * sizeof(float));
  }
}

/* The smallest global gradient norm of the run, in the report and --json ("grad_norm_min"):
 * tells whether --clip X acted on every step (norm > X). */
static double g_norm_min = -1;
void zero_note_grad_norm(trainer_t *t) {
  if (!isfinite(t->grad_norm)) return;
  if (g_norm_min < 0 || t->grad_norm < g_norm_min) g_norm_min = t->grad_norm;
  trainer_report_extra(t, "grad_norm_min", g_norm_min);
}

/* Where the working params of this rank's piece of unit u live. */
__attribute__((unused)) static void *own_params(trainer_t *t, const unit_t *un, int params_full) {
  return tensor_at(&t->params, params_full ? shard_piece_off(un, t->rank) : un->shard_off);
}

int zero_optimizer_step(trainer_t *t, const void *grad_shard, int params_full) {
  // BEGIN EXERCISE zero_optimizer_step notes/03-zero1.md
  // HINT: norm: trainer_finish_grads(t, op_sumsq(your grad shard), 1) — ranks own disjoint pieces.
  // HINT: per unit: w = master + shard_off (bf16) or your params piece (fp32); grad, m, v at shard_off;
  // HINT: trainer_optimizer_update(...); in bf16 mode then op_cast the master piece into your params piece.
  const model_t *m = &t->model;
  size_t gb = dtype_size(t->wdt);
  double sumsq = 0;
  TRAINER_PHASE("grad norm", sumsq = op_sumsq(t->dev, grad_shard, t->wdt, m->shard_numel));
  float gscale = trainer_finish_grads(t, sumsq, 1); /* sums Σg² over ranks: pieces are disjoint */
  if (t->skipped) return 0;
  trace_begin("optimizer (own shard)");
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    const void *g = (const char *)grad_shard + un->shard_off * (int64_t)gb;
    float *mom = t->opt_m.data ? (float *)t->opt_m.data + un->shard_off : NULL;
    float *var = t->opt_v.data ? (float *)t->opt_v.data + un->shard_off : NULL;
    float *w = t->wdt == DT_F32 ? (float *)own_params(t, un, params_full) : (float *)t->master.data + un->shard_off;
    trainer_optimizer_update(t, w, g, mom, var, un->piece, gscale);
  }
  trace_end(NULL);
  if (t->wdt != DT_F32) { /* step 4 of ZeRO-1: cast the updated master pieces to the working dtype */
    trace_begin("cast master -> params");
    for (int u = 0; u < m->n_units; u++) {
      const unit_t *un = &m->units[u];
      op_cast(t->dev, own_params(t, un, params_full), t->wdt, (float *)t->master.data + un->shard_off, DT_F32, un->piece);
    }
    trace_end(NULL);
  }
  return 1;
  // END EXERCISE
}

void zero_all_gather_params(trainer_t *t, comm_handle_t *handles) {
  // BEGIN EXERCISE zero_all_gather_params notes/03-zero1.md
  // HINT: one comm_all_gather_async per unit, in place: send = your piece, recv = the whole unit;
  // HINT: keep each handle in handles[u] when handles is not NULL.
  const model_t *m = &t->model;
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    comm_handle_t h = comm_all_gather_async(t->comm, tensor_at(&t->params, shard_piece_off(un, t->rank)),
                                            tensor_at(&t->params, un->off), un->padded, t->wdt, "all-gather params");
    if (handles) handles[u] = h;
  }
  // END EXERCISE
}

void zero_wait_params(trainer_t *t, comm_handle_t *handles, int u) {
  if (!handles[u]) return;
  TRAINER_PHASE("wait all-gather", comm_wait(t->comm, handles[u]));
  handles[u] = 0;
}

/* Cast n host fp32 values into dst (dt, on t->dev). On a GPU the cast runs on the host and one
 * copy uploads the result: no device staging, so the ledger's comm peak stays the steps' own. */
static void upload_cast(trainer_t *t, void *dst, dtype_t dt, const float *host, int64_t n) {
  if (t->dev == DEV_CPU) {
    op_cast(t->dev, dst, dt, host, DT_F32, n);
    return;
  }
  void *tmp = xmalloc((size_t)n * dtype_size(dt) + 1, "init upload");
  op_cast(DEV_CPU, tmp, dt, host, DT_F32, n);
  dev_memcpy(t->dev, dst, DEV_CPU, tmp, (size_t)n * dtype_size(dt));
  free(tmp);
}

void zero_init_params(trainer_t *t, int params_full) {
  const model_t *m = &t->model;
  float *vals = xmalloc((size_t)m->max_unit_padded * sizeof(float), "init values");
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    int64_t lo = shard_piece_off(un, t->rank);
    if (params_full) { /* the full working params: every rank computes them, no broadcast */
      trainer_init_values(t, un->off, un->off + un->padded, vals);
      upload_cast(t, tensor_at(&t->params, un->off), t->wdt, vals, un->padded);
    } else {
      trainer_init_values(t, lo, lo + un->piece, vals);
      upload_cast(t, tensor_at(&t->params, un->shard_off), t->wdt, vals, un->piece);
    }
    if (t->wdt != DT_F32) {
      const float *mine = params_full ? vals + (int64_t)t->rank * un->piece : vals;
      upload_cast(t, (float *)t->master.data + un->shard_off, DT_F32, mine, un->piece);
    }
  }
  free(vals);
}

/* ---- per-unit gradient reduce-scatter (ZeRO-2 and -3) ------------------------------------- */
void zero_rs_init(zero_rs_t *r, trainer_t *t) {
  const model_t *m = &t->model;
  int64_t max_piece = m->max_unit_padded / t->world;
  for (int s = 0; s < 2; s++) {
    r->staging[s] = tensor_alloc("grad staging (unit)", LEDGER_COMM, t->wdt, t->dev, m->max_unit_padded);
    /* only --accum > 1 needs a landing buffer for the later micro-batches */
    r->acc[s] = tensor_alloc("grad reduce-scatter landing", LEDGER_COMM, t->wdt, t->dev, t->cfg->accum > 1 ? max_piece : 0);
    r->h[s] = 0;
    r->unit[s] = -1;
    r->add[s] = 0;
  }
  r->next = 0;
}

/* Wait for slot s's reduce-scatter and, for micro-batches > 0, add its piece into the shard. */
static void rs_retire(zero_rs_t *r, trainer_t *t, int s) {
  if (!r->h[s]) return;
  comm_wait(t->comm, r->h[s]);
  if (r->add[s]) {
    const unit_t *un = &t->model.units[r->unit[s]];
    op_add(t->dev, tensor_at(&t->grads, un->shard_off), r->acc[s].data, t->wdt, un->piece);
  }
  r->h[s] = 0;
  r->unit[s] = -1;
  r->add[s] = 0;
}

void zero_rs_begin_unit(zero_rs_t *r, trainer_t *t, int u) {
  const unit_t *un = &t->model.units[u];
  int s = r->next;
  if (r->h[s]) TRAINER_PHASE("wait staging", rs_retire(r, t, s));
  /* backward writes only the unit's numel grads: the pad tail must read 0 (a larger unit may
   * have used this buffer before), or the pad slots of the shard would pick up garbage */
  if (un->padded > un->numel) op_fill(t->dev, tensor_at(&r->staging[s], un->numel), t->wdt, 0.0f, un->padded - un->numel);
  t->unit_grads[u] = r->staging[s].data;
  t->grad_beta = 0; /* fresh grads each micro-batch: accumulation happens in the shard */
}

void zero_rs_end_unit(zero_rs_t *r, trainer_t *t, int u) {
  // BEGIN EXERCISE zero_rs_end_unit notes/04-zero2.md
  // HINT: one comm_reduce_scatter_async of the unit's padded grads (the staging slot r->next):
  // HINT: micro-batch 0 lands straight in your piece of t->grads (at shard_off); later ones in
  // HINT: r->acc[slot], with r->add[slot] = 1 so rs_retire adds them. Record handle and unit, advance r->next.
  const unit_t *un = &t->model.units[u];
  int s = r->next;
  int direct = t->micro == 0;
  void *dst = direct ? tensor_at(&t->grads, un->shard_off) : r->acc[s].data;
  r->h[s] = comm_reduce_scatter_async(t->comm, r->staging[s].data, dst, un->padded, t->wdt, REDOP_SUM, "reduce-scatter grads");
  r->unit[s] = u;
  r->add[s] = !direct;
  r->next = 1 - s;
  // END EXERCISE
}

void zero_rs_finish(zero_rs_t *r, trainer_t *t) {
  trace_begin("wait reduce-scatter");
  comm_wait_all(t->comm);
  for (int k = 0; k < 2; k++) rs_retire(r, t, (r->next + k) % 2); /* oldest first */
  trace_end(NULL);
}

void zero_rs_free(zero_rs_t *r) {
  for (int s = 0; s < 2; s++) {
    tensor_free(&r->staging[s]);
    tensor_free(&r->acc[s]);
  }
}

static int g_own_arrays; /* 1: zero_bind_arrays allocated t->unit_params / unit_grads */

void zero_bind_arrays(trainer_t *t) {
  if (t->unit_params && t->unit_grads) return;
  t->unit_params = xcalloc((size_t)t->model.n_units, sizeof(void *), "unit_params");
  t->unit_grads = xcalloc((size_t)t->model.n_units, sizeof(void *), "unit_grads");
  g_own_arrays = 1;
}

void zero_unbind_arrays(trainer_t *t) {
  if (!g_own_arrays) return;
  free(t->unit_params);
  free(t->unit_grads);
  t->unit_params = t->unit_grads = NULL;
  g_own_arrays = 0;
}

void zero_free_states(trainer_t *t) {
  tensor_free(&t->params);
  tensor_free(&t->grads);
  tensor_free(&t->master);
  tensor_free(&t->opt_m);
  tensor_free(&t->opt_v);
  zero_unbind_arrays(t);
}

void zero_export_params(trainer_t *t, float *dst) {
  float *shard = xmalloc((size_t)t->model.shard_numel * sizeof(float) + 1, "export shard");
  zero_own_shard_f32(t, t->strategy->stage < 3, shard); /* params are full below ZeRO-3 */
  shard_gather_to_root(t->comm, &t->model, shard, dst);
  free(shard);
}

/* ---- pad invariant (testing aid) --------------------------------------------------------- */
static int64_t g_pads_checked = -1; /* −1: ZL_CHECK_PADS not set */

static void check_pad_range(trainer_t *t, const tensor_t *x, int u, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    float v;
    char raw[4] = {0};
    dev_memcpy(DEV_CPU, raw, x->dev, tensor_at(x, i), dtype_size(x->dtype));
    v = x->dtype == DT_F32 ? *(float *)raw : bf16_to_f32(*(bf16_t *)raw);
    if (v != 0.0f) die("rank %d: pad slot not zero after step %d: %s[%lld] (unit %d) = %g, expected 0", t->rank, t->step,
                       x->name, (long long)i, u, v);
    g_pads_checked++;
  }
}

/* Pad slots of a full padded buffer ([off+numel, off+padded) of each unit) or of this rank's
 * shard (the part of its piece that lies past the unit's numel). */
static void check_pads_of(trainer_t *t, const tensor_t *x, int full) {
  if (!x->data) return;
  for (int u = 0; u < t->model.n_units; u++) {
    const unit_t *un = &t->model.units[u];
    if (full) {
      check_pad_range(t, x, u, un->off + un->numel, un->off + un->padded);
    } else {
      int64_t lo = (int64_t)t->rank * un->piece, hi = lo + un->piece; /* my piece, unit-local */
      int64_t pad_lo = un->numel > lo ? un->numel : lo;
      if (pad_lo < hi) check_pad_range(t, x, u, un->shard_off + (pad_lo - lo), un->shard_off + un->piece);
    }
  }
}

void zero_check_pads(trainer_t *t, int params_full, int grads_full) {
  if (g_pads_checked < 0) {
    const char *e = getenv("ZL_CHECK_PADS");
    if (!e || strcmp(e, "1") != 0) return;
    g_pads_checked = 0;
  }
  dev_sync(t->dev);
  check_pads_of(t, &t->params, params_full);
  check_pads_of(t, &t->grads, grads_full);
  check_pads_of(t, &t->master, 0);
  check_pads_of(t, &t->opt_m, 0);
  check_pads_of(t, &t->opt_v, 0);
}

void zero_pad_report(trainer_t *t) {
  if (g_pads_checked < 0) return; /* the same environment on every rank: all skip or all join */
  double n = (double)g_pads_checked;
  comm_ctl_all_reduce_f64(t->comm, &n, 1, REDOP_SUM);
  if (t->rank == 0) printf("zero pad check: %.0f pad values checked on all ranks after the steps, all exactly 0\n", n);
}
