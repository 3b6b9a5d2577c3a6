/* owners_zero2.c — ZeRO-2 with whole-matrix owners: each matrix's gradient goes to its owner during the
 * backward, so a rank keeps the gradients of its own matrices only (owners.h; notes/04-zero2.md, notes/03).
 *
 * As ZeRO-2 reduce-scatters each unit as soon as the backward has made it (zero2.c), here each unit's
 * matrices are reduced to their owners (comm_reduce_async, one per matrix) and the unit's AdamW rest,
 * packed and padded to N, is reduce-scattered: rank r keeps piece r of every unit's rest. The unit's full
 * gradient lives in one of two staging slots until its operations are done; the non-owners keep nothing
 * of that matrix. With --accum K every micro-batch goes out and is added in (ZeRO-2's choice).
 *   grads resident = b (own matrices + Σ_u rest_u / N)     (ZeRO-1's owners: b Ψ)
 * The step: the norm over both (disjoint over the ranks), each owner updates its matrices whole and
 * broadcasts them (owners_update_matrix), each rank its rest pieces, all-gathered unit by unit.
 * Bitwise = 1 rank --accum 2 at N = 2 for owners.c's reasons: a + b either way, the same op calls. */
#include "owners.h"   // owners_t, owners_zero2_strategy, owners_plan, owners_rest_*, owners_update_matrix
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // free, getenv
#include <string.h>   // strcmp
#include "check.h"    // xcalloc
#include "comm.h"     // comm_reduce_async, comm_reduce_scatter_async, comm_wait, comm_all_gather
#include "ops.h"      // op_add, op_fill, op_sumsq
#include "trace.h"    // trace_begin, trace_end (TRAINER_PHASE)

typedef struct owners2 {
  owners_t o;           /* the plan; o.gmat: the summed gradients of this rank's matrices (LEDGER_GRADS) */
  int64_t *rest_padded; /* [n_units] unit u's rest rounded up to N */
  int64_t *rest_at;     /* [n_units] where piece r of unit u's rest sits in the rest shard (t->grads) */
  int64_t *mine_at;     /* [n_units + 1] unit u's own matrices in o.gmat: [mine_at[u], mine_at[u + 1]) */
  int64_t shard;        /* Σ_u rest_padded[u] / N: the rest shard */
  tensor_t staging[2];  /* (max unit numel) wdt: a unit's full gradient while its operations run */
  tensor_t pack[2];     /* (max rest_padded) wdt: the unit's rest packed (then: the params' all-gather) */
  tensor_t land[2];     /* --accum > 1: micro-batches > 0 land here (own matrices, rest piece), added in */
  comm_handle_t h[2];   /* the slot's last operation (waiting for it waits for those before: one stream) */
  int unit[2], add[2], next;
} owners2_t;

/* Slot s done: wait, and for micro-batches > 0 add what landed into the gradients kept. */
static void retire(trainer_t *t, owners2_t *z, int s) {
  if (!z->h[s]) return;
  comm_wait(t->comm, z->h[s]);
  int u = z->unit[s];
  int64_t mine = z->mine_at[u + 1] - z->mine_at[u], piece = z->rest_padded[u] / t->world;
  if (z->add[s]) {
    op_add(t->dev, tensor_at(&z->o.gmat, z->mine_at[u]), z->land[s].data, t->wdt, mine);
    op_add(t->dev, tensor_at(&t->grads, z->rest_at[u]), tensor_at(&z->land[s], mine), t->wdt, piece);
  }
  z->h[s] = 0, z->unit[s] = -1, z->add[s] = 0;
}

/* The backward of unit u writes its full gradient into a free slot. */
static void owners2_pre_backward(trainer_t *t, int u) {
  owners2_t *z = t->priv;
  int s = z->next;
  if (z->h[s]) TRAINER_PHASE("wait staging", retire(t, z, s));
  t->unit_grads[u] = z->staging[s].data;
  t->grad_beta = 0; /* fresh each micro-batch: the sums accumulate in the kept gradients */
}

/* Unit u's gradient is made: each matrix reduced to its owner, the rest reduce-scattered (async). */
static void owners2_post_backward(trainer_t *t, int u) {
  owners2_t *z = t->priv;
  owners_t *o = &z->o;
  int s = z->next, direct = t->micro == 0, me = t->rank;
  int64_t off = t->model.units[u].off, b = (int64_t)dtype_size(t->wdt),
          mine = z->mine_at[u + 1] - z->mine_at[u];
  for (int i = o->unit_mat[u]; i < o->unit_mat[u + 1]; i++) {
    const owned_matrix_t *x = &o->mat[i];
    void *dst = x->owner != me ? NULL
                : direct       ? tensor_at(&o->gmat, x->state_off)
                               : tensor_at(&z->land[s], x->state_off - z->mine_at[u]);
    z->h[s] = comm_reduce_async(t->comm, (char *)z->staging[s].data + (x->off - off) * b, dst, x->numel,
                                t->wdt, REDOP_SUM, x->owner, "reduce grads to owner");
  }
  int64_t rp = z->rest_padded[u];
  if (o->unit_seg[u + 1] > o->unit_seg[u]) { /* the unit has AdamW parameters */
    owners_rest_copy(t, o, o->unit_seg[u], o->unit_seg[u + 1], z->staging[s].data, off, z->pack[s].data, 0,
                     rp, 1);
    int64_t used = 0; /* the pad tail reads 0 (a larger unit may have left numbers there) */
    for (int k = o->unit_seg[u]; k < o->unit_seg[u + 1]; k++) used += o->seg_numel[k];
    if (rp > used) op_fill(t->dev, tensor_at(&z->pack[s], used), t->wdt, 0.0f, rp - used);
    void *dst = direct ? tensor_at(&t->grads, z->rest_at[u]) : tensor_at(&z->land[s], mine);
    z->h[s] = comm_reduce_scatter_async(t->comm, z->pack[s].data, dst, rp, t->wdt, REDOP_SUM,
                                        "reduce-scatter the rest");
  }
  z->unit[s] = u, z->add[s] = !direct, z->next = 1 - s;
}

static void owners2_step(trainer_t *t) {
  owners2_t *z = t->priv;
  owners_t *o = &z->o;
  trace_begin("wait reduces");
  for (int k = 0; k < 2; k++) retire(t, z, (z->next + k) % 2); /* oldest first */
  trace_end(NULL);
  double sumsq =
      op_sumsq(t->dev, o->gmat.data, t->wdt, o->mine) + op_sumsq(t->dev, t->grads.data, t->wdt, z->shard);
  float gscale = trainer_finish_grads(t, sumsq, t->comm);
  if (t->skipped) return;
  trace_begin("owners update matrices, broadcast");
  for (int i = 0; i < o->n_mat; i++) owners_update_matrix(t, o, i, gscale);
  trace_end(NULL);
  trace_begin("update own rest pieces, all-gather");
  int64_t vbase = t->cfg->optimizer == OPT_MUON ? 0 : o->mine;
  for (int u = 0; u < t->model.n_units; u++) {
    int s0 = o->unit_seg[u], s1 = o->unit_seg[u + 1];
    int64_t rp = z->rest_padded[u], piece = rp / t->world, lo = t->rank * piece, at = z->rest_at[u];
    if (s0 == s1) continue;
    owners_rest_adamw(t, o, s0, s1, lo, lo + piece, tensor_at(&t->grads, at),
                      (float *)t->opt_m.data + o->mine + at, (float *)t->opt_v.data + vbase + at, gscale);
    owners_rest_copy(t, o, s0, s1, t->params.data, 0, z->pack[0].data, lo, lo + piece, 1);
    comm_all_gather(t->comm, tensor_at(&z->pack[0], lo), z->pack[0].data, rp, t->wdt);
    owners_rest_copy(t, o, s0, s1, t->params.data, 0, z->pack[0].data, 0, rp, 0);
  }
  trace_end(NULL);
  if (o->check_ranks) owners_check_ranks(t, o);
}

/* The plan's per-unit numbers: rest_padded, rest_at, mine_at and the shard (setup and the formula). */
static void plan_units(const model_t *m, int world, owners2_t *z) {
  owners_t *o = &z->o;
  z->rest_padded = xcalloc((size_t)m->n_units, sizeof(int64_t), "unit rests");
  z->rest_at = xcalloc((size_t)m->n_units, sizeof(int64_t), "unit rest pieces");
  z->mine_at = xcalloc((size_t)m->n_units + 1, sizeof(int64_t), "unit own matrices");
  int64_t mine = 0;
  for (int u = 0; u < m->n_units; u++) {
    int64_t r = 0;
    for (int k = o->unit_seg[u]; k < o->unit_seg[u + 1]; k++) r += o->seg_numel[k];
    z->mine_at[u] = mine;
    for (int i = o->unit_mat[u]; i < o->unit_mat[u + 1]; i++)
      if (o->mat[i].state_off >= 0) mine += o->mat[i].numel;
    z->rest_padded[u] = (r + world - 1) / world * world;
    z->rest_at[u] = z->shard, z->shard += z->rest_padded[u] / world;
  }
  z->mine_at[m->n_units] = mine;
}

static void plan_free(owners2_t *z) {
  free(z->rest_padded), free(z->rest_at), free(z->mine_at);
  owners_free(&z->o);
}

static void owners2_setup(trainer_t *t) {
  const model_t *m = &t->model;
  owners2_t *z = xcalloc(1, sizeof *z, "zero2 owners");
  owners_t *o = &z->o;
  owners_plan(m, t->world, t->rank, o);
  plan_units(m, t->world, z);
  t->priv = z;
  const char *cr = getenv("ZL_CHECK_RANKS");
  o->check_ranks = cr && strcmp(cr, "1") == 0;
  int64_t states = o->mine + z->shard, v = t->cfg->optimizer == OPT_MUON ? z->shard : states;
  int64_t max_unit = 0, max_rest = 0, max_land = 0;
  for (int u = 0; u < m->n_units; u++) {
    int64_t land = z->mine_at[u + 1] - z->mine_at[u] + z->rest_padded[u] / t->world;
    max_unit = m->units[u].numel > max_unit ? m->units[u].numel : max_unit;
    max_rest = z->rest_padded[u] > max_rest ? z->rest_padded[u] : max_rest;
    max_land = land > max_land ? land : max_land;
  }
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->padded_numel); // (P) full
  t->grads = tensor_alloc("grads (rest pieces)", LEDGER_GRADS, t->wdt, t->dev, z->shard);
  o->gmat = tensor_alloc("grads (own matrices)", LEDGER_GRADS, t->wdt, t->dev, o->mine);
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, states); // my matrices + rest pieces
  t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, v);      // Muon: the rest pieces' only
  for (int s = 0; s < 2; s++) {
    z->staging[s] = tensor_alloc("grad staging (unit)", LEDGER_COMM, t->wdt, t->dev, max_unit);
    z->pack[s] = tensor_alloc("packed rest (unit)", LEDGER_COMM, t->wdt, t->dev, max_rest);
    z->land[s] =
        tensor_alloc("grad landing (accum)", LEDGER_COMM, t->wdt, t->dev, t->cfg->accum > 1 ? max_land : 0);
    z->unit[s] = -1;
  }
  for (int u = 0; u < m->n_units; u++) t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
  trainer_init_full_params(t); /* rank 0's init, broadcast: every rank holds the whole fp32 params */
  char rest[96];
  snprintf(rest, sizeof rest, "cut per unit: %lld params of rest pieces per rank", (long long)z->shard);
  owners_print(t, o, rest);
}

/* Every rank holds the whole fp32 params after a step (owners.c's owners_layout, the same answer). */
static void owners2_layout(trainer_t *t, int u, unit_layout_t *out) {
  const unit_t *un = &t->model.units[u];
  *out = (unit_layout_t){.own_numel = un->padded, .w = (float *)t->params.data + un->off, .replicated = 1,
                         .held_numel = un->padded, .params = tensor_at(&t->params, un->off)};
}

static void owners2_teardown(trainer_t *t) {
  owners2_t *z = t->priv;
  if (!z) return;
  comm_wait_all(t->comm);
  if (z->o.check_ranks && t->rank == 0)
    printf("check: parameters identical on every rank after each of %d steps\n", z->o.checked);
  for (int s = 0; s < 2; s++) tensor_free(&z->staging[s]), tensor_free(&z->pack[s]), tensor_free(&z->land[s]);
  plan_free(z);
  free(z);
  t->priv = NULL;
}

/* fp32: params bΨ; grads b(own matrices + rest shard); optim 4(mine + shard) + 4·shard (Muon) or
 * 8(mine + shard); sent per micro-batch: a reduce per matrix and a reduce-scatter of each unit's rest;
 * per step: a broadcast per matrix and an all-gather of each unit's rest. */
static void owners2_formula(const trainer_t *t, formula_t *f) {
  owners2_t z = {0};
  owners_plan(&t->model, t->world, t->rank, &z.o);
  plan_units(&t->model, t->world, &z);
  double b = (double)dtype_size(t->wdt), states = (double)(z.o.mine + z.shard);
  int N = t->world, r = t->rank, K = t->cfg->accum;
  *f = (formula_t){.params = b * t->model.padded_numel, .grads = b * (double)(z.o.mine + z.shard),
                   .optim = 4.0 * states + 4.0 * (t->cfg->optimizer == OPT_MUON ? (double)z.shard : states)};
  double sent = 0;
  for (int i = 0; i < z.o.n_mat; i++)
    sent += K * comm_model_sent(CO_REDUCE, z.o.mat[i].numel, t->wdt, N, r, z.o.mat[i].owner) +
            comm_model_sent(CO_BROADCAST, z.o.mat[i].numel, t->wdt, N, r, z.o.mat[i].owner);
  for (int u = 0; u < t->model.n_units; u++)
    if (z.o.unit_seg[u + 1] > z.o.unit_seg[u])
      sent += K * comm_model_sent(CO_REDUCE_SCATTER, z.rest_padded[u], t->wdt, N, r, 0) +
              comm_model_sent(CO_ALL_GATHER, z.rest_padded[u], t->wdt, N, r, 0);
  f->comm_bytes = sent;
  snprintf(f->mem_text, sizeof f->mem_text, "4Psi + 4(own matrices + rest/N) + 4(own + rest/N)%s",
           t->cfg->optimizer == OPT_MUON ? " + 4 rest/N" : " x 2");
  snprintf(f->comm_text, sizeof f->comm_text, "K(reduce per matrix + RS per unit) + bcast + AG");
  plan_free(&z);
}

static const strategy_t owners2_s = {
    .name = "zero2-owners",
    .stage = 2,
    .whole_matrices = 1,
    .setup = owners2_setup,
    .pre_backward = owners2_pre_backward,
    .post_backward = owners2_post_backward,
    .step = owners2_step,
    .teardown = owners2_teardown,
    .layout = owners2_layout,
    .formula = owners2_formula,
};

const strategy_t *owners_zero2_strategy(void) { return &owners2_s; }
