/* zero3.c — ZeRO stage 3 (P_os+g+p), PyTorch FSDP's FULL_SHARD: params sharded too.
 * Notes: notes/05-zero3.md.
 *
 * A rank holds only its piece of every unit (t->params is (P/N)). Before a unit's forward, and
 * again before its backward, the unit is all-gathered into a transient buffer (LEDGER_COMM),
 * used, and freed right after (post hooks) — so at most K+1 gathered units are alive, with
 * --prefetch K gathers issued ahead of use so they overlap the compute of the units before.
 * Gradients are reduce-scattered per unit during backward as in ZeRO-2 (zero_rs_* in zero2.c).
 * The optimizer updates the shard in place; nothing is gathered at the end of the step: the
 * next forward gathers what it needs. Traffic: two all-gathers + one reduce-scatter = 3(N−1)/N·Ψ.
 *
 * The gathers of a step form a sequence of events, one per use of a unit, in the order the loop
 * runs them (train.h's t->uses, event e = t->use): per micro-batch the forward of units 0..U−1,
 * then the backward of units U−1..0; under a pipeline schedule (07), the order of its operations.
 * Prefetch walks that sequence, so the last forward unit already prefetches the first backward
 * one, and the last backward of a micro-batch the next one's first forward.
 *
 * Every collective of ZeRO-3 goes over its own shard group z->shard, and its pieces are laid out
 * over that group's ranks (zero3_state.h): here all of the trainer's t->comm. HSDP is this same
 * code given one node's ranks, plus one all-reduce across the nodes (solutions/hsdp.c); ZeRO++'s
 * hpZ changes only where the backward's gathers read from (solutions/hpz.c).
 *
 * --prefetch auto (the default) prefetches one unit where communication does not take compute's
 * core: on NCCL (its own CUDA stream and SMs), or with MPI when this host has a spare core per
 * rank for its communication thread (online cores >= 2 x ranks on the host); else 0 — on a
 * 2-core box with 2 ranks the prefetching thread and the compute spin against each other and
 * the step gets slower (notes/benchmarks.md). */
#include "zero.h"              // zero3_strategy, shard_plan, zero_rs_*, zero_* helpers
#include "zero3_state.h"       // zero3_t, gather_slot_t, hpz_* (--hpz)
#include "qwz.h"               // qwz_gather_issue, qwz_gather_finish (--qwz)
#include "qgz.h"               // qgz_setup, qgz_end_unit, qgz_release, zeropp_formula (--qgz, --qwz)
#include <stdio.h>             // printf, snprintf
#include <stdlib.h>            // free, getenv, atoi
#include <string.h>            // strcmp
#include <unistd.h>            // sysconf
#include "check.h"    // die, xcalloc
#include "comm.h"     // comm_all_gather_async, comm_wait, comm_piece_bytes
#include "exercise.h" // zl_exercise_todo (in the generated stubs)
#include "tensor.h"   // tensor_alloc, tensor_free
#include "trace.h"    // trace_begin, trace_end

__attribute__((unused)) static int n_events(const trainer_t *t) { return t->n_uses; }
static int event_unit(const trainer_t *t, int e) { return t->uses[e].unit; }
static int find_slot(const zero3_t *z, int e) {
  for (int s = 0; s < z->nslots; s++)
    if (z->slots[s].event == e) return s;
  return -1;
}

/* Issue the all-gather of event e's unit into a free slot (allocated now, freed after use). */
__attribute__((unused)) static void gather_issue(trainer_t *t, zero3_t *z, int e) {
  int s = find_slot(z, -1);
  if (s < 0) die_on_rank("zero3: no free gather slot for event %d (prefetch %d)", e, z->prefetch);
  const unit_t *un = &t->model.units[event_unit(t, e)];
  gather_slot_t *g = &z->slots[s];
  g->buf = tensor_alloc("gathered unit params", LEDGER_COMM, t->wdt, t->dev, un->padded);
  g->event = e;
  if (z->hpz && t->uses[e].kind == 'B') /* --hpz: from the node's secondary copy (hpz.c) */
    g->h = hpz_gather_backward(t, z, event_unit(t, e), g->buf.data);
  else if (t->dense_comm) { /* 12's two groups: the dense half over every rank, the experts over D */
    comm_handle_t h[2];
    zero_two_gather(t, event_unit(t, e), g->buf.data, h,
                    t->uses[e].kind == 'F' ? "all-gather params (fwd)" : "all-gather params (bwd)");
    g->hd = h[0], g->h = h[1];
  } else if (z->qwz_block) /* --qwz: int8 blocks on the wire, decoded by qwz_gather_finish */
    g->h = qwz_gather_issue(t, z, event_unit(t, e), g,
                            t->uses[e].kind == 'F' ? "all-gather int8 (fwd)" : "all-gather int8 (bwd)");
  else
    g->h =
        comm_all_gather_async(z->shard, tensor_at(&t->params, un->shard_off), g->buf.data, un->padded, t->wdt,
                              t->uses[e].kind == 'F' ? "all-gather params (fwd)" : "all-gather params (bwd)");
  int64_t live = 0; /* the transient window: what all slots hold right now */
  for (int k = 0; k < z->nslots; k++) live += tensor_nbytes(&z->slots[k].buf);
  if (live > z->gathered_peak) z->gathered_peak = live;
}

/* Before event e: its unit gathered (issue it if prefetch did not), the next K issued, then wait. */
static void gather_acquire(trainer_t *t, zero3_t *z, int e) {
  // BEGIN EXERCISE zero3_gather_acquire notes/05-zero3.md
  // HINT: before a unit's forward or backward its whole parameters must be on this rank; gathering the next
  // HINT: ones ahead of time (the prefetch) hides the all-gather behind compute.
  // HINT2: if no slot holds event e, issue its gather; then issue events e+1..e+K not yet issued (<
  // HINT2: n_events(t)); wait for e's handle; point t->unit_params[event_unit(t, e)] at e's slot buffer.
  // HINT3: if (find_slot(z, e) < 0) gather_issue(t, z, e); the same for e + 1..e + z->prefetch (<
  // HINT3: n_events(t)); comm_wait(z->shard, z->slots[find_slot(z, e)].h); t->unit_params[event_unit(t, e)] =
  // HINT3: that slot's buf.data.
  if (find_slot(z, e) < 0) gather_issue(t, z, e);
  for (int k = 1; k <= z->prefetch && e + k < n_events(t); k++)
    if (find_slot(z, e + k) < 0) gather_issue(t, z, e + k);
  gather_slot_t *g = &z->slots[find_slot(z, e)];
  TRAINER_PHASE("wait all-gather", comm_wait(z->shard, g->h));
  t->unit_params[event_unit(t, e)] = g->buf.data;
  // END EXERCISE
}

/* After event e: free its gathered unit, so only the shard stays resident. */
static void gather_release(trainer_t *t, zero3_t *z, int e) {
  // BEGIN EXERCISE zero3_gather_release notes/05-zero3.md
  // HINT: once a unit is used, its gathered full parameters must go: that is all of ZeRO-3's memory saving,
  // HINT: and nothing may read them afterwards.
  // HINT2: find e's slot; free its buffer (the ledger's peak counts it otherwise); mark the slot free (event
  // HINT2: −1, handle 0); clear t->unit_params of the unit.
  // HINT3: s = find_slot(z, e); tensor_free(&z->slots[s].buf); z->slots[s].event = −1; z->slots[s].h = 0;
  // HINT3: t->unit_params[event_unit(t, e)] = NULL.
  int s = find_slot(z, e);
  if (s < 0) die_on_rank("zero3: event %d released but not gathered", e);
  tensor_free(&z->slots[s].buf);
  z->slots[s].event = -1;
  z->slots[s].h = 0;
  t->unit_params[event_unit(t, e)] = NULL;
  // END EXERCISE
}

/* --prefetch auto: 1 where communication has an engine of its own, else 0; rank 0 says why. */
static int auto_prefetch(const trainer_t *t) {
  char why[160];
  int k;
  if (strcmp(comm_backend_name(t->comm), "nccl") == 0) {
    k = 1;
    snprintf(why, sizeof why, "NCCL runs the gathers on its own CUDA stream");
  } else { /* MPI: a communication thread per rank, on this host's cores */
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = ls && atoi(ls) > 0 ? atoi(ls) : 1;
    k = cores >= 2L * local;
    snprintf(why, sizeof why, "%ld cores online for %d rank%s on this host: %s", cores, local,
             local > 1 ? "s" : "",
             k ? "a spare core per rank for the communication thread"
               : "no spare core for the communication thread, which would slow the compute down");
  }
  if (trainer_prints(t)) printf("prefetch: auto -> %d (%s)\n", k, why);
  return k < t->model.n_units ? k : t->model.n_units;
}

void zero3_init(trainer_t *t, zero3_t *z, comm_t *shard) {
  model_t *m = &t->model;
  z->shard = shard, z->rank = comm_rank(shard), z->world = comm_world(shard);
  if (t->dense_comm) zero_two_plan(t); /* 12's two groups: the dense prefixes over every rank */
  else shard_plan(m, z->world);
  z->prefetch = t->cfg->prefetch >= 0 ? t->cfg->prefetch : auto_prefetch(t); /* range: checked by the flags */
  /* --buffer-mb B: the gathered window in bytes (DeepSpeed's stage3_max_live_parameters): at most
   * B / largest unit slots; one whole unit is the floor (the forward needs it all at once) */
  int64_t buf = comm_piece_bytes(shard), unit_bytes = m->max_unit_padded * (int64_t)dtype_size(t->wdt);
  if (buf > 0) {
    int64_t fit = buf / (unit_bytes > 0 ? unit_bytes : 1);
    if (fit < z->prefetch + 1) z->prefetch = fit > 1 ? (int)fit - 1 : 0;
    if (unit_bytes > buf) trainer_report_extra(t, "buffer_floor_bytes", (double)unit_bytes);
    if (unit_bytes > buf && trainer_prints(t))
      printf("zero3: --buffer-mb %g is below the largest unit (%.4g MiB): one whole unit gathered is the "
             "floor\n",
             (double)buf / 1048576.0, (double)unit_bytes / 1048576.0);
  }
  /* the depth used: --json "prefetch" says -1 for auto */
  trainer_report_extra(t, "prefetch_depth", z->prefetch);
  z->nslots = z->prefetch + 1;
  z->slots = xcalloc((size_t)z->nslots, sizeof *z->slots, "zero3 gather slots");
  for (int s = 0; s < z->nslots; s++) z->slots[s].event = -1;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->shard_numel);      // (P/N) own shard
  t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, m->shard_numel);         // (P/N)
  if (t->wdt != DT_F32)
    t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, m->shard_numel);   // (P/N)
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);       // (P/N)
  if (t->cfg->optimizer == OPT_ADAMW)
    t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);     // (P/N)
  zero_rs_init(&z->rs, t, shard);
  if (t->cfg->hpz) hpz_setup(t, z); /* ZeRO++'s secondary copy inside the node (hpz.c) */
  z->qwz_block = t->cfg->qwz && z->shard == t->comm ? t->cfg->quant_block : 0; /* ZeRO-3's own only */
  if (t->cfg->qgz && z->shard == t->comm) qgz_setup(t, z); /* ZeRO++'s int4 gradients in two hops */
  if ((t->cfg->qgz || t->cfg->qwz) && z->shard == t->comm) zeropp_print(t); /* its bytes against ZeRO-3's */
  if (t->no_sync && trainer_prints(t))
    printf("  zero3 under a pipeline: the grads are reduce-scattered once per step, after the last "
           "micro-batch: the full\n"
           "  gradient lives through all M = %d micro-batches (freed only between steps), and every unit's "
           "params are\n"
           "  gathered 2M = %d times per step (M times ZeRO-3's usual 2): (2M+1)(D-1)/D x params bytes per "
           "step.\n"
           "  This is why DeepSpeed's pipeline engine refuses ZeRO-2/3 and Megatron pairs PP with ZeRO-1\n",
           t->n_micro, 2 * t->n_micro);
  for (int u = 0; u < m->n_units; u++) t->unit_params[u] = t->unit_grads[u] = NULL; /* set per hook */
  zero_init_params(t, shard, 0);
}

static void zero3_setup(trainer_t *t) {
  zero3_t *z = xcalloc(1, sizeof *z, "zero3 state");
  t->priv = z;
  zero3_init(t, z, t->comm); /* ZeRO-3 shards over every rank of the strategy's communicator */
}

/* A forward with no backward (validation, sampling: loop.c) leaves the first backward units
 * it prefetched in their slots; the next sequence starts with every slot free again. In training
 * nothing is held at its first event (the last backward released everything), so this changes
 * nothing there. */
static void drop_stale_gathers(trainer_t *t, zero3_t *z) {
  for (int s = 0; s < z->nslots; s++)
    if (z->slots[s].event >= 0) {
      comm_wait(z->shard, z->slots[s].h); /* every rank issued it: complete it before freeing */
      if (z->slots[s].hd) comm_wait(t->dense_comm, z->slots[s].hd);
      z->slots[s].hd = 0;
      tensor_free(&z->slots[s].buf);
      tensor_free(&z->slots[s].wire);
      z->slots[s].event = -1;
      z->slots[s].h = 0;
    }
}

/* The hooks: event t->use of the sequence is unit `unit`'s forward or backward (train.h). */
/* Two groups: the dense half of event e's gather too (gather_acquire waits the experts' half). */
static void wait_dense_half(trainer_t *t, zero3_t *z, int e) {
  gather_slot_t *g = &z->slots[find_slot(z, e)];
  if (g->hd) TRAINER_PHASE("wait all-gather", comm_wait(t->dense_comm, g->hd));
  g->hd = 0;
}

void zero3_pre_forward(trainer_t *t, int unit) {
  zero3_t *z = t->priv;
  if (t->use == 0) drop_stale_gathers(t, z);
  gather_acquire(t, z, t->use);
  wait_dense_half(t, z, t->use);
  if (z->qwz_block) qwz_gather_finish(t, z, unit, &z->slots[find_slot(z, t->use)]);
}
void zero3_post_forward(trainer_t *t, int unit) {
  zero3_t *z = t->priv;
  if (z->hpz) hpz_keep_forward(t, z, t->use); /* --hpz: keep this rank's 1/g of the unit for the backward */
  TRAINER_PHASE("free unit params", gather_release(t, z, t->use)); /* visible in the trace */
}

void zero3_pre_backward(trainer_t *t, int unit) {
  zero3_t *z = t->priv;
  gather_acquire(t, z, t->use);
  wait_dense_half(t, z, t->use);
  if (z->qwz_block) qwz_gather_finish(t, z, unit, &z->slots[find_slot(z, t->use)]);
  zero_rs_begin_unit(&z->rs, t, unit);
}

void zero3_post_backward(trainer_t *t, int unit) {
  zero3_t *z = t->priv;
  if (z->qgz) qgz_end_unit(t, z, unit); /* --qgz: two all-to-alls of int4 blocks, waited here */
  else zero_rs_end_unit(&z->rs, t, unit); /* queued behind the prefetch gathers already issued */
  TRAINER_PHASE("free unit params", gather_release(t, z, t->use));
}

/* A split backward (07's zero-bubble schedules, always no_sync): the W of the unit's last
 * micro-batch made its gradient final — its reduce-scatter starts here; the gathered params went
 * back after its B (post_backward: a W needs no parameters). */
void zero3_grad_ready(trainer_t *t, int unit) {
  zero3_t *z = t->priv;
  zero_rs_end_unit(&z->rs, t, unit);
}

void zero3_update(trainer_t *t, zero3_t *z) {
  TRAINER_PHASE("update own shard + cast", zero_optimizer_step(t, z->shard, t->grads.data, 0));
  /* the gathered window, apart from the resident shards: peak vs its bound (K+1)·largest unit */
  trainer_report_extra(t, "gathered_peak_bytes", (double)z->gathered_peak);
  trainer_report_extra(t, "gather_bound_bytes",
                       (double)((int64_t)z->nslots * t->model.max_unit_padded * (int64_t)dtype_size(t->wdt)));
}

static void zero3_step(trainer_t *t) {
  zero3_t *z = t->priv;
  zero_rs_finish(&z->rs, t); /* every unit's reduce-scatter: this rank's piece, summed over the shard group */
  zero3_update(t, z);
  /* no all-gather here: the next forward gathers each unit when it needs it */
}

/* Rank r owns piece r of every unit and holds only that piece of the params (strategy_t.layout). */
static void zero3_layout(trainer_t *t, int u, unit_layout_t *out) {
  zero3_t *z = t->priv;
  zero_unit_layout(t, z->shard, u, 0, out);
}

void zero3_release(trainer_t *t, zero3_t *z) {
  comm_wait_all(z->shard);
  if (t->dense_comm) comm_wait_all(t->dense_comm);
  for (int s = 0; s < z->nslots; s++) tensor_free(&z->slots[s].buf), tensor_free(&z->slots[s].wire);
  zero_rs_free(&z->rs);
  free(z->slots);
  if (z->hpz) hpz_release(t, z);
  if (z->qgz) qgz_release(t, z);
}

/* Frees the stage's own buffers; the model states are the trainer's to free (train.h). */
static void zero3_teardown(trainer_t *t) {
  zero3_t *z = t->priv;
  if (z) zero3_release(t, z);
  free(z);
  t->priv = NULL;
}

/* ZeRO-3's formulas: (b + b + K)Ψ/N; two all-gathers and a reduce-scatter per step, 3(N−1)/N·Ψ·b.
 * no_sync (a pipeline's, M micro-batches): + bΨ of full gradients through the step, and 2M
 * all-gathers: (2M + 1)(N−1)/N·Ψ·b. */
static void zero3_formula(const trainer_t *t, formula_t *f) {
  if (t->dense_comm) { /* 12's two groups (no schedule, no hpZ/qwZ/qgZ there) */
    zero_two_formula(t, 3, f);
    return;
  }
  double psi = (double)t->model.numel, b = (double)dtype_size(t->wdt);
  formula_stage(f, 3, psi, t->world, t->wdt, train_opt_states(t->cfg));
  if (t->cfg->hpz) hpz_formula(t, f); /* + the secondary copy; the backward's gather inside the node */
  if (t->cfg->qwz || t->cfg->qgz) zeropp_formula(t, f); /* int8 gathers, int4 grads (qwz.c, qgz.c) */
  zero_accum_traffic(t, 3, f); /* --accum K: every micro-batch gathers and reduce-scatters */
  if (t->no_sync) {
    f->grads += psi * b;
    f->comm_bytes = (2.0 * t->n_micro + 1) * (t->world - 1) / (double)t->world * psi * b;
    snprintf(f->mem_text, sizeof f->mem_text, "%s, + bΨ of full grads through the step",
             formula_text(3, t->wdt, train_opt_states(t->cfg)));
    snprintf(f->comm_text, sizeof f->comm_text, "(2M+1)(N-1)/N x psi x %d B, M = %d", (int)b, t->n_micro);
  }
}

static const strategy_t zero3_s = {
    .name = "zero3",
    .stage = 3,
    .two_groups = 1,
    .setup = zero3_setup,
    .pre_forward = zero3_pre_forward,
    .post_forward = zero3_post_forward,
    .pre_backward = zero3_pre_backward,
    .post_backward = zero3_post_backward,
    .grad_ready = zero3_grad_ready,
    .step = zero3_step,
    .teardown = zero3_teardown,
    .layout = zero3_layout,
    .formula = zero3_formula,
};

const strategy_t *zero3_strategy(void) { return &zero3_s; }
