/* owners.c — ZeRO-1 with whole-matrix owners: each matrix updated whole on one rank, so Muon's
 * Newton–Schulz sees what it needs (owners.h; notes/03-zero1.md, "Muon: whole matrices, not slices").
 *
 * Why it equals one rank with --accum 2, bit for bit, at N = 2: each rank's micro-batch gradient is
 * the one-rank run's micro-batch gradient (same GEMMs, same shapes), a reduce of two is a + b in
 * either order, and the owner then runs the same op_muon / op_adamw calls on the same numbers as the
 * one-rank run (AdamW is element-wise: a piece of a segment gives the bits of the whole). */
#include "owners.h"   // owners_t, owners_strategy, owners_plan, owners_rest_*, owners_check_ranks
#include <stdio.h>    // snprintf
#include <stdlib.h>   // free, getenv
#include <string.h>   // strcmp
#include "check.h"    // xcalloc
#include "comm.h"     // comm_reduce, comm_broadcast, comm_reduce_scatter, comm_all_gather
#include "exercise.h" // zl_exercise_todo (in the generated stub)
#include "muon.h"     // trainer_muon_hp, op_muon
#include "ops.h"      // op_adamw, op_sumsq
#include "trace.h"    // trace_begin, trace_end (TRAINER_PHASE)

/* This rank's rest piece: AdamW on each segment's part inside it, the gradient, m and v in piece order
 * (m after the matrices' momentum, v after their AdamW v if any). */
static void rest_update(trainer_t *t, owners_t *o, float gscale) {
  int64_t lo = (int64_t)t->rank * o->rest_piece, vbase = t->cfg->optimizer == OPT_MUON ? 0 : o->mine;
  owners_rest_adamw(t, o, 0, o->n_seg, lo, lo + o->rest_piece, o->grest.data,
                    (float *)t->opt_m.data + o->mine, (float *)t->opt_v.data + vbase, gscale);
}

void owners_update_matrix(trainer_t *t, owners_t *o, int i, float gscale) {
  // BEGIN EXERCISE owners_update_matrix notes/03-zero1.md
  // HINT: Newton-Schulz needs the whole matrix: only its owner holds the whole summed gradient (o->gmat),
  // HINT: so only the owner can update it — and then every rank must hold the same updated matrix.
  // HINT2: x = &o->mat[i]; on x->owner: the update of the whole x->rows x x->cols matrix at x->off in the
  // HINT2: fp32 params, gradient and state at x->state_off; then one collective from x->owner to all.
  // HINT3: if (rank == x->owner) op_muon(t->dev, params + x->off, gmat at x->state_off, t->wdt, opt_m +
  // HINT3: x->state_off, x->rows, x->cols, &hp, gscale) (hp = trainer_muon_hp(t); --optimizer adamw:
  // HINT3: op_adamw with opt_v + x->state_off); comm_broadcast(t->comm, params + x->off, numel, wdt, owner).
  const owned_matrix_t *x = &o->mat[i];
  float *w = (float *)t->params.data + x->off;
  if (comm_rank(t->comm) == x->owner) {
    const void *g = tensor_at(&o->gmat, x->state_off);
    float *m = (float *)t->opt_m.data + x->state_off;
    muon_hp_t hp = trainer_muon_hp(t);
    if (t->cfg->optimizer == OPT_MUON) op_muon(t->dev, w, g, t->wdt, m, x->rows, x->cols, &hp, gscale);
    else
      op_adamw(t->dev, w, g, t->wdt, m, (float *)t->opt_v.data + x->state_off, x->numel, &t->hp, t->opt_t,
               gscale);
  }
  comm_broadcast(t->comm, w, x->numel, t->wdt, x->owner);
  // END EXERCISE
}

void owners_step_with(trainer_t *t, owners_update_fn update) {
  owners_t *o = t->priv;
  size_t b = dtype_size(t->wdt);
  trace_begin("2 reduce grads to owners, reduce-scatter the rest");
  for (int i = 0; i < o->n_mat; i++) { /* the same order on every rank */
    const owned_matrix_t *x = &o->mat[i];
    comm_reduce(t->comm, (const char *)t->grads.data + x->off * (int64_t)b,
                x->owner == t->rank ? tensor_at(&o->gmat, x->state_off) : NULL, x->numel, t->wdt, REDOP_SUM,
                x->owner);
  }
  owners_rest_copy(t, o, 0, o->n_seg, t->grads.data, 0, o->pack.data, 0, o->rest_numel, 1);
  comm_reduce_scatter(t->comm, o->pack.data, o->grest.data, o->rest_padded, t->wdt, REDOP_SUM);
  trace_end(NULL);
  /* the norm: this rank's matrices and rest piece, disjoint over the ranks */
  double sumsq = op_sumsq(t->dev, o->gmat.data, t->wdt, o->mine) +
                 op_sumsq(t->dev, o->grest.data, t->wdt, o->rest_piece);
  float gscale = trainer_finish_grads(t, sumsq, t->comm);
  if (t->skipped) return;
  trace_begin("3 owners update matrices, broadcast");
  for (int i = 0; i < o->n_mat; i++) update(t, o, i, gscale);
  trace_end(NULL);
  TRAINER_PHASE("3 update own rest piece", rest_update(t, o, gscale));
  int64_t lo = (int64_t)t->rank * o->rest_piece;
  owners_rest_copy(t, o, 0, o->n_seg, t->params.data, 0, o->pack.data, lo, lo + o->rest_piece, 1);
  TRAINER_PHASE("5 all-gather the rest",
                comm_all_gather(t->comm, tensor_at(&o->pack, lo), o->pack.data, o->rest_padded, t->wdt));
  owners_rest_copy(t, o, 0, o->n_seg, t->params.data, 0, o->pack.data, 0, o->rest_numel, 0);
  if (o->check_ranks) owners_check_ranks(t, o);
}

static void owners_step(trainer_t *t) { owners_step_with(t, owners_update_matrix); }

static void owners_setup(trainer_t *t) {
  const model_t *m = &t->model;
  owners_t *o = xcalloc(1, sizeof *o, "owners");
  owners_plan(m, t->world, t->rank, o);
  t->priv = o;
  const char *cr = getenv("ZL_CHECK_RANKS");
  o->check_ranks = cr && strcmp(cr, "1") == 0;
  int64_t states = o->mine + o->rest_piece, v = t->cfg->optimizer == OPT_MUON ? o->rest_piece : states;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->padded_numel); // (P) full
  t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, m->padded_numel);    // (P) full
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, states); // my matrices + rest piece
  t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, v);      // Muon: the rest piece's only
  o->gmat = tensor_alloc("owned grads (reduce out)", LEDGER_COMM, t->wdt, t->dev, o->mine);
  o->pack = tensor_alloc("packed rest", LEDGER_COMM, t->wdt, t->dev, o->rest_padded);
  o->grest = tensor_alloc("rest grad piece", LEDGER_COMM, t->wdt, t->dev, o->rest_piece);
  for (int u = 0; u < m->n_units; u++) {
    t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
    t->unit_grads[u] = tensor_at(&t->grads, m->units[u].off);
  }
  trainer_init_full_params(t); /* rank 0's init, broadcast: every rank holds the whole fp32 params */
  char rest[64];
  snprintf(rest, sizeof rest, "in %d pieces of %lld", t->world, (long long)o->rest_piece);
  owners_print(t, o, rest);
}

static void owners_pre_backward(trainer_t *t, int u) { t->grad_beta = t->micro > 0 ? 1.0f : 0.0f; }

/* After a step every rank holds the whole fp32 params (the broadcasts and the all-gather): rank 0's
 * copy is exported. The optimizer states are not in the answer (owners_check refuses checkpoints). */
static void owners_layout(trainer_t *t, int u, unit_layout_t *out) {
  const unit_t *un = &t->model.units[u];
  *out = (unit_layout_t){.own_numel = un->padded, .w = (float *)t->params.data + un->off, .replicated = 1,
                         .held_numel = un->padded, .params = tensor_at(&t->params, un->off)};
}

static void owners_teardown(trainer_t *t) {
  owners_t *o = t->priv;
  if (!o) return;
  if (o->check_ranks && t->rank == 0)
    printf("check: parameters identical on every rank after each of %d steps\n", o->checked);
  owners_free(o);
  free(o);
  t->priv = NULL;
}

/* fp32: params Ψ·4 and grads Ψ·4 full; optim 4(mine + piece) + 4·piece (Muon) or 8(mine + piece);
 * sent: a reduce and a broadcast per matrix, a reduce-scatter and an all-gather of the packed rest. */
static void owners_formula(const trainer_t *t, formula_t *f) {
  owners_t o;
  owners_plan(&t->model, t->world, t->rank, &o);
  double b = (double)dtype_size(t->wdt), states = (double)(o.mine + o.rest_piece);
  int N = t->world, r = t->rank;
  *f = (formula_t){.params = b * t->model.padded_numel, .grads = b * t->model.padded_numel,
                   .optim = 4.0 * states + 4.0 * (t->cfg->optimizer == OPT_MUON ? o.rest_piece : states)};
  double sent = comm_model_sent(CO_REDUCE_SCATTER, o.rest_padded, t->wdt, N, r, 0) +
                comm_model_sent(CO_ALL_GATHER, o.rest_padded, t->wdt, N, r, 0);
  for (int i = 0; i < o.n_mat; i++)
    sent += comm_model_sent(CO_REDUCE, o.mat[i].numel, t->wdt, N, r, o.mat[i].owner) +
            comm_model_sent(CO_BROADCAST, o.mat[i].numel, t->wdt, N, r, o.mat[i].owner);
  f->comm_bytes = sent;
  snprintf(f->mem_text, sizeof f->mem_text, "8Psi + 4(own matrices + rest/N)%s",
           t->cfg->optimizer == OPT_MUON ? " + 4 rest/N" : " x 2");
  snprintf(f->comm_text, sizeof f->comm_text, "reduce + bcast per matrix, RS + AG of the rest");
  owners_free(&o);
}

static const strategy_t owners_s = {
    .name = "zero1-owners",
    .stage = 1,
    .whole_matrices = 1,
    .setup = owners_setup,
    .pre_backward = owners_pre_backward,
    .step = owners_step,
    .teardown = owners_teardown,
    .layout = owners_layout,
    .formula = owners_formula,
};

const strategy_t *owners_strategy(void) { return &owners_s; }
