/* offload.c — ZeRO-Offload on top of ZeRO-2: optimizer states and the optimizer step on the host.
 * Notes: notes/08-offload.md.
 *
 * Everything ZeRO-2 does stays (solutions/zero.h, zero2.c): the shard plan, the reduce-scatter
 * of each unit's gradient during backward into this rank's grad shard, the grad norm on that
 * shard, the all-gather of the params that the next forward waits for unit by unit. What moves
 * is the fp32 truth of the rank's pieces — the master (bf16) or an fp32 copy of the own params
 * piece (fp32), and Adam's m and v — into the host arena, so the device keeps 2Ψ + 2Ψ/N
 * (bf16 params, grad shard) instead of 2Ψ + 14Ψ/N. Three copies per step make that work:
 *
 *   backward, unit u   reduce-scatter(u) ... done → grad piece u  device → host   (offload_grad_to_host)
 *   step               norm on the device shard; host AdamW per unit; piece u cast to wdt on the
 *                      host → params piece u  host → device; then the all-gathers
 * (offload_update_and_send)
 *
 * On CUDA the host arena is pinned memory and both copies run on a copy stream (device.h:
 * dev_copy_async), so the gradient copies overlap the rest of the backward; on a CPU run the
 * "device" is the device arena of the ledger and the copies are memcpys, each its own phase on
 * the trace. The host step calls elementwise.h's ew_adamw / ew_sgd — the functions the device's
 * op_adamw / op_sgd run — with contraction off as in ops_cpu.c, so offloaded training gives the
 * same bits as ZeRO-2 without offload (tests/mpi/test_offload.c). */
#if defined(__GNUC__) && !defined(__clang__) /* as ops_cpu.c: vectorize, never fuse into FMAs */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include "offload.h"             // offload_kind_t, offload_strategy, offload_host_adamw
#include <pthread.h>             // pthread_create, pthread_join (host step threads)
#include <stdio.h>               // snprintf
#include <stdlib.h>              // free, strtol
#include <string.h>              // strcmp
#include "zero.h"                // zero2_strategy, shard_plan, zero_rs_*, zero_* helpers
#include "args.h"      // args_error, args_parse_count (offload_take_flags)
#include "check.h"     // die, xcalloc
#include "comm.h"      // comm_wait_all
#include "device.h"    // dev_copy_async, dev_copy_wait
#include "elementwise.h" // ew_adamw, ew_adamw_scalars, ew_sgd (after the pragma)
#include "exercise.h"  // zl_exercise_todo (in the generated stubs)
#include "ops.h"       // op_cast
#include "tensor.h"    // tensor_alloc, tensor_alloc_host, tensor_at, tensor_free
#include "trace.h"     // trace_begin, trace_end

/* ---- the host optimizer: elementwise.h over a range, optionally threaded ----------------- */

typedef struct host_range {
  int adam;                  /* 1 AdamW, 0 SGD */
  float *w, *m, *v;          /* fp32, at the range's start (v NULL for SGD) */
  const void *grad;          /* gdt, at the range's start */
  dtype_t gdt;
  int64_t n;
  ew_adamw_t k;              /* AdamW scalars of the step */
  float gscale, lr, mu, wd;  /* clip factor; SGD's hyper-parameters */
} host_range_t;

/* Inlined per gradient dtype so that each loop is branch-free and vectorizes (as ops_cpu.c). */
static inline __attribute__((always_inline)) void adamw_range(const host_range_t *r, dtype_t gdt) {
  for (int64_t i = 0; i < r->n; i++)
    ew_adamw(&r->w[i], &r->m[i], &r->v[i], dt_load(r->grad, gdt, i), r->gscale, r->k);
}
static inline __attribute__((always_inline)) void sgd_range(const host_range_t *r, dtype_t gdt) {
  for (int64_t i = 0; i < r->n; i++)
    ew_sgd(&r->w[i], &r->m[i], dt_load(r->grad, gdt, i), r->gscale, r->lr, r->mu, r->wd);
}

static void *host_range_run(void *arg) {
  const host_range_t *r = arg;
  if (r->gdt != DT_F32 && r->gdt != DT_BF16 && r->gdt != DT_F16)
    die_on_rank("host optimizer: gradient dtype %s", dtype_name(r->gdt));
  if (r->adam) {
    if (r->gdt == DT_F32) adamw_range(r, DT_F32);
    else if (r->gdt == DT_BF16) adamw_range(r, DT_BF16);
    else adamw_range(r, DT_F16);
  } else {
    if (r->gdt == DT_F32) sgd_range(r, DT_F32);
    else if (r->gdt == DT_BF16) sgd_range(r, DT_BF16);
    else sgd_range(r, DT_F16);
  }
  return NULL;
}

#define HOST_MAX_THREADS 64
/* Split r into `threads` contiguous ranges; the calling thread takes the first. Element-wise:
 * the split changes nothing in the bits. */
static void host_run(const host_range_t *r, int threads) {
  if (threads < 1) threads = 1;
  if (threads > HOST_MAX_THREADS) threads = HOST_MAX_THREADS;
  if (threads == 1 || r->n < 4096 * (int64_t)threads) { /* small ranges: threads cost more than they save */
    host_range_run((void *)r);
    return;
  }
  host_range_t part[HOST_MAX_THREADS];
  pthread_t tid[HOST_MAX_THREADS];
  size_t gb = dtype_size(r->gdt);
  int64_t per = (r->n + threads - 1) / threads;
  for (int k = 0; k < threads; k++) {
    int64_t lo = (int64_t)k * per, hi = lo + per < r->n ? lo + per : r->n;
    part[k] = *r;
    part[k].n = hi > lo ? hi - lo : 0;
    part[k].w = r->w + lo;
    part[k].m = r->m + lo;
    part[k].v = r->v ? r->v + lo : NULL;
    part[k].grad = (const char *)r->grad + lo * (int64_t)gb;
    if (k > 0 && pthread_create(&tid[k], NULL, host_range_run, &part[k]) != 0)
      die_on_rank("host optimizer: cannot start thread %d", k);
  }
  host_range_run(&part[0]);
  for (int k = 1; k < threads; k++) pthread_join(tid[k], NULL);
}

void offload_host_adamw(float *w, const void *grad, dtype_t gdt, float *m, float *v, int64_t n, ew_adamw_t k,
                        float gscale, int threads) {
  host_range_t r = {
      .adam = 1, .w = w, .m = m, .v = v, .grad = grad, .gdt = gdt, .n = n, .k = k, .gscale = gscale};
  host_run(&r, threads);
}

void offload_host_sgd(float *w, const void *grad, dtype_t gdt, float *buf, int64_t n, float lr, float mu,
                      float wd, float gscale, int threads) {
  host_range_t r = {.adam = 0,
                    .w = w,
                    .m = buf,
                    .grad = grad,
                    .gdt = gdt,
                    .n = n,
                    .gscale = gscale,
                    .lr = lr,
                    .mu = mu,
                    .wd = wd};
  host_run(&r, threads);
}

/* ---- the strategy ------------------------------------------------------------------------ */

typedef struct offload {
  zero_rs_t rs;       /* ZeRO-2's staging buffers and pending reduce-scatters (zero2.c) */
  comm_handle_t *ag;  /* [n_units] pending all-gather of each unit's params (0: none) */
  /* (P/N) wdt, HOST: the grad shard arrives here; bf16: the updated params leave from here */
  tensor_t xfer;
  char *on_host;      /* [n_units] 1: unit u's grad piece is on its way to the host this step */
  int final[2];       /* per staging slot: 1 when its reduce-scatter is of the step's last micro-batch */
  int64_t d2h, h2d;   /* bytes copied device -> host and host -> device this step */
} offload_t;

/* Unit u's reduce-scatter is done (its piece of t->grads is final for this step): start the
 * copy of the piece to the host. */
static void offload_grad_to_host(trainer_t *t, offload_t *o, int u) {
  // BEGIN EXERCISE offload_grad_to_host notes/08-offload.md
  // HINT: as soon as a unit's gradient piece is final, start moving it to the host, so the copy overlaps the
  // HINT: rest of the backward; the host step reads it there.
  // HINT2: the piece sits at the same offset (un->shard_off) in t->grads (device) and o->xfer (host): piece
  // HINT2: elements of t->wdt; one async copy; count its bytes in o->d2h, mark o->on_host[u].
  // HINT3: TRAINER_PHASE("copy grads D->H", dev_copy_async(t->dev, tensor_at(&o->xfer, off),
  // HINT3: tensor_at(&t->grads, off), piece × dtype_size(t->wdt))).
  const unit_t *un = &t->model.units[u];
  size_t nbytes = (size_t)un->piece * dtype_size(t->wdt);
  TRAINER_PHASE("copy grads D->H",
                dev_copy_async(t->dev, tensor_at(&o->xfer, un->shard_off),
                               tensor_at(&t->grads, un->shard_off), nbytes));
  o->d2h += (int64_t)nbytes;
  o->on_host[u] = 1;
  // END EXERCISE
}

static void offload_setup(trainer_t *t) {
  model_t *m = &t->model;
  shard_plan(m, t->world);
  offload_t *o = xcalloc(1, sizeof *o, "offload state");
  t->priv = o;
  /* the device arena: what ZeRO-2 keeps there minus the optimizer's fp32 states */
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, m->padded_numel); // (P) full
  t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, m->shard_numel);     // (P/N) own shard
  /* the host arena (pinned on CUDA): the fp32 truth of the own pieces and the optimizer states.
   * fp32 mode keeps its fp32 piece here as "master" too: the update happens here. */
  t->master = tensor_alloc_host("master (host)", LEDGER_MASTER, DT_F32, t->dev, m->shard_numel); // (P/N)
  t->opt_m = tensor_alloc_host("optim m (host)", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel);  // (P/N)
  if (t->cfg->optimizer == OPT_ADAMW)
    t->opt_v = tensor_alloc_host("optim v (host)", LEDGER_OPTIM, DT_F32, t->dev, m->shard_numel); // (P/N)
  // (P/N) wdt
  o->xfer = tensor_alloc_host("grad shard (host)", LEDGER_GRADS, t->wdt, t->dev, m->shard_numel);
  zero_rs_init(&o->rs, t, t->comm);
  o->ag = xcalloc((size_t)m->n_units, sizeof *o->ag, "offload gather handles");
  o->on_host = xcalloc((size_t)m->n_units, 1, "offload copy flags");
  for (int u = 0; u < m->n_units; u++) {
    t->unit_params[u] = tensor_at(&t->params, m->units[u].off);
    t->unit_grads[u] = NULL; /* set per unit in pre_backward: a staging buffer */
  }
  /* The full working params (and, bf16, the master pieces) from the deterministic init, as
   * ZeRO-2 does; then the fp32 piece on the host in fp32 mode, where zero_init_params has none. */
  zero_init_params(t, t->comm, 1);
  if (t->wdt == DT_F32)
    for (int u = 0; u < m->n_units; u++) {
      const unit_t *un = &m->units[u];
      dev_memcpy(DEV_CPU, (float *)t->master.data + un->shard_off, t->dev,
                 tensor_at(&t->params, shard_piece_off(un, t->rank)), (size_t)un->piece * sizeof(float));
    }
}

static void offload_pre_forward(trainer_t *t, int unit) {
  offload_t *o = t->priv;
  zero_wait_params(t, o->ag, unit);
}

/* ZeRO-2's pre_backward reuses a staging slot, retiring (waiting for) the reduce-scatter of the
 * unit two places later: that unit's grad piece is final, so on the last micro-batch it can go. */
static void offload_pre_backward(trainer_t *t, int unit) {
  offload_t *o = t->priv;
  int s = o->rs.next; /* (with --accum, a slot may still hold the previous micro-batch's unit) */
  int retiring = o->rs.h[s] && o->final[s] ? o->rs.unit[s] : -1;
  zero_rs_begin_unit(&o->rs, t, unit);
  if (retiring >= 0) offload_grad_to_host(t, o, retiring);
}

static void offload_post_backward(trainer_t *t, int unit) {
  offload_t *o = t->priv;
  o->final[o->rs.next] = t->last_micro; /* the slot zero_rs_end_unit fills */
  zero_rs_end_unit(&o->rs, t, unit);
}

/* Update every own piece on the host (grads already there, in o->xfer) and send it back to
 * the device's params, cast to the working dtype; the copies are async (dev_copy_wait after). */
static void offload_update_and_send(trainer_t *t, offload_t *o, float gscale) {
  // BEGIN EXERCISE offload_update_and_send notes/08-offload.md
  // HINT: the optimizer runs on the host, on the fp32 master and its moments; the device only ever needs the
  // HINT: updated weights back, in its working dtype.
  // HINT2: per unit, at un->shard_off: update the master piece with the host optimizer (AdamW: its scalars
  // HINT2: once per step from t->opt_t; SGD: lr, momentum, weight decay), then bring the piece to t->params
  // HINT2: at shard_piece_off, counting o->h2d.
  // HINT3: offload_host_adamw(w, grad in o->xfer, t->wdt, m, v, piece, ew_adamw_scalars(..., t->opt_t),
  // HINT3: gscale, t->cfg->host_threads); bf16: op_cast(DEV_CPU, ...) into o->xfer's slot and copy that;
  // HINT3: fp32: copy w; dev_copy_async.
  const model_t *m = &t->model;
  const train_cfg_t *c = t->cfg;
  ew_adamw_t k = {0};
  if (c->optimizer == OPT_ADAMW)
    k = ew_adamw_scalars(t->hp.lr, t->hp.beta1, t->hp.beta2, t->hp.eps, t->hp.weight_decay, t->opt_t);
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    float *w = (float *)t->master.data + un->shard_off;
    float *mom = (float *)t->opt_m.data + un->shard_off;
    void *g = tensor_at(&o->xfer, un->shard_off);
    trace_begin("optimizer (host)");
    if (c->optimizer == OPT_ADAMW)
      offload_host_adamw(w, g, t->wdt, mom, (float *)t->opt_v.data + un->shard_off, un->piece, k, gscale,
                         t->cfg->host_threads);
    else
      offload_host_sgd(w, g, t->wdt, mom, un->piece, (float)c->lr, (float)c->momentum, (float)c->weight_decay,
                       gscale, t->cfg->host_threads);
    const void *src = w; /* fp32: the updated piece is the params piece */
    if (t->wdt != DT_F32) { /* bf16: cast on the host, into the unit's slot of the transfer buffer */
      op_cast(DEV_CPU, g, t->wdt, w, DT_F32, un->piece);
      src = g;
    }
    trace_end(NULL);
    size_t nbytes = (size_t)un->piece * dtype_size(t->wdt);
    TRAINER_PHASE("copy params H->D",
                  dev_copy_async(t->dev, tensor_at(&t->params, shard_piece_off(un, t->rank)), src, nbytes));
    o->h2d += (int64_t)nbytes;
  }
  // END EXERCISE
}

/* The host step: the norm from the device grad shard (as ZeRO-2's zero_optimizer_step), then
 * the update on the host. Returns 0 if --nonfinite skip dropped the step. */
static int offload_host_step(trainer_t *t, offload_t *o) {
  double sumsq = 0;
  TRAINER_PHASE("grad norm", sumsq = trainer_grad_sumsq(t, t->grads.data, comm_rank(t->comm)));
  float gscale = trainer_finish_grads(t, sumsq, t->comm); /* pieces are disjoint: Σg² summed over ranks */
  if (t->skipped) return 0;
  TRAINER_PHASE("wait copies D->H", dev_copy_wait(t->dev)); /* the grad pieces are on the host */
  offload_update_and_send(t, o, gscale);
  TRAINER_PHASE("wait copies H->D", dev_copy_wait(t->dev)); /* before the all-gathers read the pieces */
  return 1;
}

static void offload_step(trainer_t *t) {
  offload_t *o = t->priv;
  const model_t *m = &t->model;
  zero_rs_finish(&o->rs, t);
  for (int u = 0; u < m->n_units; u++) /* the units whose reduce-scatter finished only now */
    if (!o->on_host[u]) offload_grad_to_host(t, o, u);
  int updated = offload_host_step(t, o);
  /* on a skipped step the copies still ran: make sure they are done before the next backward */
  if (!updated) TRAINER_PHASE("wait copies D->H", dev_copy_wait(t->dev));
  for (int u = 0; u < m->n_units; u++) o->on_host[u] = 0;
  /* per step per rank (every step moves the same bytes; a skipped one sends nothing back) */
  trainer_report_extra(t, "offload_d2h_bytes_per_step", (double)o->d2h);
  trainer_report_extra(t, "offload_h2d_bytes_per_step", (double)o->h2d);
  trainer_report_extra(t, "offload_formula_bytes_each_way",
                       (double)m->numel / t->world * (double)dtype_size(t->wdt));
  o->d2h = o->h2d = 0;
  if (updated) TRAINER_PHASE("issue all-gather params", zero_all_gather_params(t, o->ag));
}

/* Rank r owns piece r of every unit (ZeRO-2's answer), whose fp32 weights and optimizer states
 * are in the host arena; fp32 mode: its fp32 truth is the host piece, not the device params. */
static void offload_layout(trainer_t *t, int u, unit_layout_t *out) {
  zero_unit_layout(t, t->comm, u, 1, out);
  out->w = (float *)t->master.data + t->model.units[u].shard_off;
}

static void offload_teardown(trainer_t *t) {
  offload_t *o = t->priv;
  comm_wait_all(t->comm);
  dev_copy_wait(t->dev);
  if (o) {
    zero_rs_free(&o->rs);
    tensor_free(&o->xfer);
    free(o->ag);
    free(o->on_host);
  }
  free(o);
  t->priv = NULL;
}

/* ZeRO-Offload's formulas: ZeRO-2's, its master and optimizer states in the host arena: the device
 * keeps bΨ + bΨ/N (params, grad shard), the host K·Ψ/N; the traffic is ZeRO-2's. */
static void offload_formula(const trainer_t *t, formula_t *f) {
  double wb = (double)dtype_size(t->wdt);
  formula_stage(f, 2, (double)t->model.numel, t->world, t->wdt, train_opt_states(t->cfg));
  zero_accum_traffic(t, 2, f); /* --accum K: a reduce-scatter per micro-batch, as ZeRO-2 */
  f->host = f->master + f->optim;
  f->master = f->optim = 0;
  char dev[40];
  snprintf(f->mem_text, sizeof f->mem_text, "%s on the device",
           formula_text_k(dev, (int)sizeof dev, 2, wb, wb, 0));
}

static const strategy_t offload_s = {
    .name = "zero2-offload",
    .stage = 2,
    .setup = offload_setup,
    .pre_forward = offload_pre_forward,
    .pre_backward = offload_pre_backward,
    .post_backward = offload_post_backward,
    .step = offload_step,
    .teardown = offload_teardown,
    .layout = offload_layout,
    .formula = offload_formula,
};

int offload_parse(const char *word, offload_kind_t *kind) {
  if (!word) return -1;
  if (strcmp(word, "none") == 0) *kind = OFFLOAD_NONE;
  else if (strcmp(word, "optimizer") == 0) *kind = OFFLOAD_OPTIMIZER;
  else return -1;
  return 0;
}

int offload_take_flags(int *argc, char **argv, offload_kind_t *kind, int *threads, double *bench) {
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    const char *a = argv[i];
    int ours =
        !strcmp(a, "--offload") || !strcmp(a, "--host-threads") || (bench && !strcmp(a, "--bench-adam"));
    if (!ours) {
      argv[out++] = argv[i];
      continue;
    }
    if (i + 1 >= *argc) return args_error(a, NULL, "needs a value");
    const char *v = argv[++i];
    if (!strcmp(a, "--offload")) {
      if (offload_parse(v, kind)) return args_error(a, v, "allowed none|optimizer");
    } else if (!strcmp(a, "--host-threads")) {
      char *end;
      long k = strtol(v, &end, 10);
      if (*v == 0 || *end || k < 1 || k > 64) return args_error(a, v, "must be an integer in [1, 64]");
      *threads = (int)k;
    } else if (args_parse_count(v, bench) || *bench < 1 || *bench > 4e9) {
      return args_error(a, v, "must be a count in [1, 4e9] (e.g. 16M)");
    }
  }
  *argc = out;
  argv[out] = NULL;
  return 0;
}

const strategy_t *offload_strategy(offload_kind_t kind) {
  return kind == OFFLOAD_OPTIMIZER ? &offload_s : zero2_strategy();
}
