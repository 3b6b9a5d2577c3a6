/* ddp.c — data-parallel training: naive, per-unit overlap, bucketed overlap (notes/02-ddp.md).
 *
 * Every rank holds the full model, computes gradients on its slice of the global batch, and
 * the ranks sum their gradients with an all-reduce (the loss is already divided by the GLOBAL
 * batch, so the sum is the mean gradient: no 1/N anywhere). Then every rank runs the same
 * optimizer step on the same numbers and the replicas stay equal. The three variants differ
 * only in WHEN the all-reduce starts:
 *   naive     in step(), after the whole backward: communication never overlaps compute;
 *   overlap   in post_backward(u): unit u's gradients go out while units u−1..0 compute theirs;
 *   bucketed  in post_backward(u) when u closes a bucket: fewer, larger messages (PyTorch DDP).
 * With --accum K only the last micro-batch communicates (PyTorch's no_sync). */
#include "ddp.h"      // ddp_bucket_t, ddp_assign_buckets, ddp_strategy
#include "check.h"    // die, xcalloc
#include "comm.h"     // comm_all_reduce_async, comm_wait
#include "exercise.h" // zl_exercise_todo (the generated stubs call it)
#include "muon.h"     // muon_adamw_numel (--optimizer muon: the formula's v)
#include "ops.h"      // op_cast
#include "trace.h"    // trace_begin, trace_end (TRAINER_PHASE)
#include "train.h"    // trainer_t, strategy_t, trainer_* helpers
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // free
#include <string.h>   // strcmp

typedef enum { DDP_NAIVE = 0, DDP_OVERLAP, DDP_BUCKETED } ddp_variant_t;

typedef struct ddp_state {
  ddp_variant_t variant;
  int n_buckets;
  ddp_bucket_t *buckets; /* [n_units] room; [n_buckets] used (bucketed) */
  int *unit_bucket;      /* [n_units] bucket of each unit (bucketed) */
  char (*tags)[32];      /* [n_units + 1] names of the messages, alive as long as the strategy */
  comm_handle_t last;    /* the latest all-reduce launched this step (0: none) */
  int launched;          /* all-reduces launched this step */
  comm_handle_t last_dense; /* two groups (t->dense_comm): the latest over the dense group (0: none) */
} ddp_state_t;

int ddp_assign_buckets(const model_t *m, double bucket_mb, int elem_bytes, ddp_bucket_t *out,
                       int *unit_bucket) {
  // BEGIN EXERCISE ddp_assign_buckets notes/02-ddp.md
  // HINT: buckets are filled in the order the backward produces gradients (the last unit first),
  // HINT: each up to bucket_mb; a unit larger than the cap sits alone in its bucket. A unit this
  // HINT: rank does not hold (padded 0: a pipeline keeps it on another stage) is in no bucket.
  // HINT2: walk u = U−1 down to 0 with the open bucket's byte count; skip a unit of padded 0
  // HINT2: (unit_bucket[u] = −1); close the open bucket when it is not empty and adding unit u would
  // HINT2: pass the cap. A bucket's off is its lowest unit's off, its numel the sum of its units'
  // HINT2: padded; unit_bucket[u] says which bucket holds u.
  // HINT3: cap = bucket_mb·2^20; n = 0, open = 0; for u = U−1..0: if padded == 0 { unit_bucket[u] = −1;
  // HINT3: continue; }
  // HINT3: nbytes = padded·elem_bytes; if open > 0 and open + nbytes > cap: n++, open = 0; if open == 0
  // HINT3: start
  // HINT3: out[n] at u; out[n].first_unit = u, .off = units[u].off, .numel += padded, .nbytes += nbytes; open
  // HINT3: +=
  // HINT3: nbytes; unit_bucket[u] = n. Return n+1 (0 when no unit is held).
  double cap = bucket_mb * 1048576.0;
  int n = 0, any = 0;
  int64_t open_bytes = 0;
  for (int u = m->n_units - 1; u >= 0; u--) {
    const unit_t *un = &m->units[u];
    if (un->padded == 0) { /* on another stage: its backward never runs here, it must start no bucket */
      unit_bucket[u] = -1;
      continue;
    }
    any = 1;
    int64_t nbytes = un->padded * (int64_t)elem_bytes;
    if (open_bytes > 0 && (double)(open_bytes + nbytes) > cap) { /* close it: unit u starts the next */
      n++;
      open_bytes = 0;
    }
    ddp_bucket_t *b = &out[n];
    if (open_bytes == 0)
      *b = (ddp_bucket_t){.first_unit = u, .last_unit = u, .off = un->off, .numel = 0, .nbytes = 0};
    b->first_unit = u; /* going down: u is the lowest unit so far, and the lowest offset */
    b->off = un->off;
    b->numel += un->padded;
    b->nbytes += nbytes;
    open_bytes += nbytes;
    unit_bucket[u] = n;
  }
  return any ? n + 1 : 0;
  // END EXERCISE
}

/* One all-reduce of grads[off, off+numel) over c, async; its handle in *last. */
static void ddp_reduce(trainer_t *t, comm_t *c, comm_handle_t *last, int64_t off, int64_t numel,
                       const char *tag) {
  ddp_state_t *st = t->priv;
  *last = comm_all_reduce_async(c, tensor_at(&t->grads, off), numel, t->wdt, REDOP_SUM, tag);
  st->launched++;
}

/* Two groups (t->dense_comm): the whole units in [off, off+numel), each unit's dense prefix summed over
 * every rank and the rest (its experts) over t->comm. Consecutive dense elements (a dense unit, then
 * the next unit's prefix) go out as one all-reduce. */
static void ddp_launch_two_groups(trainer_t *t, int64_t off, int64_t numel, const char *tag) {
  ddp_state_t *st = t->priv;
  const model_t *m = &t->model;
  int64_t lo = 0, hi = 0; /* the dense run not launched yet, [lo, hi) of the flat buffer */
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    if (un->padded == 0 || un->off < off || un->off >= off + numel) continue;
    int64_t d = trainer_dense_numel(t, u), x = un->padded - d;
    if (d > 0 && hi != un->off) {
      if (hi > lo) ddp_reduce(t, t->dense_comm, &st->last_dense, lo, hi - lo, tag);
      lo = un->off;
    }
    if (d > 0) hi = un->off + d;
    if (x > 0) {
      if (hi > lo) ddp_reduce(t, t->dense_comm, &st->last_dense, lo, hi - lo, tag);
      lo = hi = 0;
      ddp_reduce(t, t->comm, &st->last, un->off + d, x, tag);
    }
  }
  if (hi > lo) ddp_reduce(t, t->dense_comm, &st->last_dense, lo, hi - lo, tag);
}

/* Start the sum over ranks of grads[off, off+numel), in place, on the communication stream (with two
 * groups, each unit's parts over their own: ddp_launch_two_groups). */
static void ddp_launch(trainer_t *t, int64_t off, int64_t numel, const char *tag) {
  ddp_state_t *st = t->priv;
  if (t->dense_comm) {
    ddp_launch_two_groups(t, off, numel, tag);
    return;
  }
  ddp_reduce(t, t->comm, &st->last, off, numel, tag);
}

/* The post-backward hook: unit u's gradients are final (on the last micro-batch). */
static void ddp_post_backward(trainer_t *t, int u) {
  // BEGIN EXERCISE ddp_post_backward notes/02-ddp.md
  // HINT: this hook runs as soon as unit u's gradients are final: start their all-reduce now,
  // HINT: without waiting, so it overlaps the backward of the units below (the tests check that
  // HINT: the first all-reduce is issued before unit 0's backward). Only on the last micro-batch.
  // HINT2: overlap: ddp_launch(t, units[u].off, units[u].padded, tag). bucketed: bucket
  // HINT2: b = st->unit_bucket[u] is complete when u == st->buckets[b].first_unit (its lowest
  // HINT2: unit, the last the backward reaches). naive: nothing here, step() launches it all.
  // HINT3: if (!t->last_micro || naive) return; overlap: ddp_launch(t, un->off, un->padded, st->tags[u]);
  // HINT3: bucketed: b = st->unit_bucket[u]; if (u == st->buckets[b].first_unit) ddp_launch(t,
  // HINT3: buckets[b].off,
  // HINT3: buckets[b].numel, st->tags[b]).
  ddp_state_t *st = t->priv;
  if (!t->last_micro || st->variant == DDP_NAIVE) return;
  const unit_t *un = &t->model.units[u];
  if (st->variant == DDP_OVERLAP) {
    ddp_launch(t, un->off, un->padded, st->tags[u]);
    return;
  }
  int b = st->unit_bucket[u];
  if (u == st->buckets[b].first_unit) ddp_launch(t, st->buckets[b].off, st->buckets[b].numel, st->tags[b]);
  // END EXERCISE
}

/* The final wait: every all-reduce of this step must be done before the optimizer reads grads. */
static void ddp_wait_grads(trainer_t *t) {
  // BEGIN EXERCISE ddp_final_wait notes/02-ddp.md
  // HINT: before the optimizer reads the gradients, every all-reduce of this step must be done;
  // HINT: the stream runs them in issue order.
  // HINT2: so one comm_wait on the LAST handle (st->last) waits for all; then reset st->last and
  // HINT2: st->launched so the next step starts clean.
  // HINT3: if (st->last) comm_wait(t->comm, st->last); st->last = 0; st->launched = 0.
  ddp_state_t *st = t->priv;
  if (st->last) comm_wait(t->comm, st->last);
  st->last = 0;
  st->launched = 0;
  // END EXERCISE
}

/* Two groups (t->dense_comm): the dense group's all-reduces, waited for the same way (its last). */
static void ddp_wait_dense(trainer_t *t) {
  ddp_state_t *st = t->priv;
  if (st->last_dense) comm_wait(t->dense_comm, st->last_dense);
  st->last_dense = 0;
}

void ddp_replica_setup(trainer_t *t) {
  const model_t *m = &t->model;
  trainer_alloc_full_states(t, 1); /* (P) params, grads, [master], optimizer states on every rank */
  trainer_init_full_params(t);     /* rank 0's init, broadcast */
  for (int u = 0; u < m->n_units; u++) { /* every unit's views, fixed for the whole run */
    t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
    t->unit_grads[u] = tensor_at(&t->grads, m->units[u].off);
  }
}

static void ddp_setup(trainer_t *t, ddp_variant_t variant) {
  ddp_state_t *st = xcalloc(1, sizeof *st, "ddp state");
  t->priv = st;
  st->variant = variant;
  const model_t *m = &t->model; /* DDP keeps the unpadded layout: pad 1, one full replica per rank */
  int U = m->n_units;
  ddp_replica_setup(t);
  st->tags = xcalloc((size_t)U + 1, sizeof *st->tags, "ddp tags");
  int log = trainer_prints(t);
  if (st->variant == DDP_OVERLAP) {
    for (int u = 0; u < U; u++) snprintf(st->tags[u], sizeof st->tags[u], "all_reduce unit %d", u);
    if (log)
      printf("ddp-overlap: one all-reduce per unit, launched as its backward finishes (%d per step)\n", U);
  } else if (st->variant == DDP_BUCKETED) {
    st->buckets = xcalloc((size_t)U, sizeof *st->buckets, "ddp buckets");
    st->unit_bucket = xcalloc((size_t)U, sizeof *st->unit_bucket, "ddp unit buckets");
    int esz = (int)dtype_size(t->wdt);
    /* --buffer-mb B caps the buckets too (--bucket-mb keeps its meaning below B; a unit larger than
     * B sits alone in its bucket and the comm layer all-reduces it in pieces of B) */
    double cap = t->cfg->bucket_mb, buffer_mb = (double)comm_piece_bytes(t->comm) / 1048576.0;
    if (buffer_mb > 0 && buffer_mb < cap) cap = buffer_mb;
    st->n_buckets = ddp_assign_buckets(m, cap, esz, st->buckets, st->unit_bucket);
    if (log)
      printf("ddp-bucketed: %d bucket%s of at most %g MiB (%s grads), in backward order:\n", st->n_buckets,
             st->n_buckets > 1 ? "s" : "", cap, dtype_name(t->wdt));
    for (int b = 0; b < st->n_buckets; b++) {
      const ddp_bucket_t *k = &st->buckets[b];
      snprintf(st->tags[b], sizeof st->tags[b], "all_reduce bucket %d", b);
      if (log)
        printf("  bucket %d: units %d..%d, %lld elements, %lld bytes\n", b, k->first_unit, k->last_unit,
               (long long)k->numel, (long long)k->nbytes);
    }
    trainer_report_extra(t, "n_buckets", st->n_buckets);
  } else {
    snprintf(st->tags[0], sizeof st->tags[0], "all_reduce all grads");
    if (log)
      printf("ddp-naive: one all-reduce of all %lld gradients after the backward\n",
             (long long)m->padded_numel);
  }
  if (log) fflush(stdout);
}

static void ddp_step(trainer_t *t) {
  ddp_state_t *st = t->priv;
  /* naive: only now, nothing overlaps */
  if (st->variant == DDP_NAIVE) ddp_launch(t, 0, t->model.padded_numel, st->tags[0]);
  TRAINER_PHASE("wait grads", ddp_wait_grads(t); ddp_wait_dense(t));
  ddp_update(t);
}

void ddp_update(trainer_t *t) {
  int64_t P = t->model.padded_numel;
  /* Every rank holds the same summed gradients: the norm needs no communication (no pieces: NULL). */
  double sumsq = trainer_grad_sumsq(t, t->grads.data, -1); /* the whole model, unsharded */
  float gscale = trainer_finish_grads(t, sumsq, NULL);
  float *w = dtype_is_half(t->wdt) ? t->master.data : t->params.data; /* fp32 weights the update acts on */
  TRAINER_PHASE("optimizer",
                trainer_optimizer_update(t, w, t->grads.data, t->opt_m.data, t->opt_v.data, P, gscale));
  if (dtype_is_half(t->wdt) && !t->skipped) /* the working copy is bf16(master), exactly */
    TRAINER_PHASE("cast params", op_cast(t->dev, t->params.data, t->wdt, t->master.data, DT_F32, P));
}

/* Every rank keeps every unit whole, the same values everywhere (strategy_t.layout): rank 0's
 * copy is the one a checkpoint or the export takes. */
void ddp_layout(trainer_t *t, int u, unit_layout_t *out) {
  const unit_t *un = &t->model.units[u];
  float *w = dtype_is_half(t->wdt) ? t->master.data : t->params.data;
  *out = (unit_layout_t){
      .own_off = 0,
      .own_numel = un->padded,
      .w = w + un->off,
      .m = t->opt_m.data ? (float *)t->opt_m.data + un->off : NULL,
      .v = t->opt_v.data ? (float *)t->opt_v.data + un->off : NULL,
      .replicated = 1,
      .held_off = 0,
      .held_numel = un->padded,
      .params = tensor_at(&t->params, un->off),
  };
}

/* Frees the strategy's own state; the model states are the trainer's to free (train.h). */
static void ddp_teardown(trainer_t *t) {
  ddp_state_t *st = t->priv;
  if (!st) return;
  free(st->buckets);
  free(st->unit_bucket);
  free(st->tags);
  free(st);
  t->priv = NULL;
}

static void ddp_setup_naive(trainer_t *t) { ddp_setup(t, DDP_NAIVE); }
static void ddp_setup_overlap(trainer_t *t) { ddp_setup(t, DDP_OVERLAP); }
static void ddp_setup_bucketed(trainer_t *t) { ddp_setup(t, DDP_BUCKETED); }

/* ZeRO stage 0's formulas: every rank holds everything, (b + b + K)Ψ; one all-reduce, 2(N−1)/N·Ψ·b.
 * Two groups: the dense Ψ_d over every rank (N_d) and the experts' Ψ − Ψ_d over D = t->world,
 * 2(N_d−1)/N_d·Ψ_d·b + 2(D−1)/D·(Ψ − Ψ_d)·b; the states are the same (each rank keeps its whole
 * part). */
static void ddp_formula(const trainer_t *t, formula_t *f) {
  formula_stage(f, 0, (double)t->model.numel, t->world, t->wdt, train_opt_states(t->cfg));
  if (t->cfg->optimizer == OPT_MUON) f->optim += 4.0 * (double)muon_adamw_numel(&t->model); /* AdamW's v */
  if (!t->dense_comm) return;
  double dense = 0;
  for (int u = 0; u < t->model.n_units; u++) dense += (double)trainer_dense_numel(t, u);
  int nd = comm_world(t->dense_comm);
  f->comm_bytes = formula_comm_bytes(0, dense, nd, t->wdt) +
                  formula_comm_bytes(0, (double)t->model.numel - dense, t->world, t->wdt);
  snprintf(f->comm_text, sizeof f->comm_text, "2(N-1)/N x psi_dense + 2(D-1)/D x psi_exp, x %d B",
           (int)dtype_size(t->wdt));
}

/* naive needs no hook: it communicates only in step() (so it runs once ddp_final_wait is done). */
static const strategy_t g_naive = {.name = "ddp-naive",
                                   .stage = 0,
                                   .two_groups = 1,
                                   .whole_matrices = 1,
                                   .setup = ddp_setup_naive,
                                   .step = ddp_step,
                                   .teardown = ddp_teardown,
                                   .layout = ddp_layout,
                                   .formula = ddp_formula};
static const strategy_t g_overlap = {.name = "ddp-overlap",
                                     .stage = 0,
                                     .two_groups = 1,
                                     .whole_matrices = 1,
                                     .setup = ddp_setup_overlap,
                                     .post_backward = ddp_post_backward,
                                     .step = ddp_step,
                                     .teardown = ddp_teardown,
                                     .layout = ddp_layout,
                                     .formula = ddp_formula};
static const strategy_t g_bucketed = {.name = "ddp-bucketed",
                                      .stage = 0,
                                      .two_groups = 1,
                                      .whole_matrices = 1,
                                      .setup = ddp_setup_bucketed,
                                      .post_backward = ddp_post_backward,
                                      .step = ddp_step,
                                      .teardown = ddp_teardown,
                                      .layout = ddp_layout,
                                      .formula = ddp_formula};

const strategy_t *ddp_strategy(const char *variant) {
  if (!variant) return NULL;
  if (strcmp(variant, "naive") == 0) return &g_naive;
  if (strcmp(variant, "overlap") == 0) return &g_overlap;
  if (strcmp(variant, "bucketed") == 0) return &g_bucketed;
  return NULL;
}
