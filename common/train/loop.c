/* loop.c — the training loop of chapters 02+ and its launcher (see train.h; notes/design.md,
 * "The loop and the strategy interface"; notes/02-ddp.md).
 *
 * The loop (train_loop): each step runs its list of operations (loop_ops.c: the forward or the
 * backward of a micro-batch over a chunk of units, the strategy's hooks around every unit, a
 * schedule's messages around every operation), then the strategy's step. The launcher
 * (train_main): communicator and process grid, model and data, the transform's split, the
 * schedule's part, the strategy's setup, resume; after the loop the results and the teardown.
 * Here too the helpers strategies call (states, init, optimizer, the gradient norm). The flags
 * are parsed in loop_flags.c, the evaluation and --sample are loop_eval.c's. */
#include "loop_internal.h" // struct train_internal, train_run_ops, train_alloc_acts; train.h
#include "args.h"   // args_env_rank
#include "check.h"  // die, xmalloc, xcalloc
#include "comm.h"   // comm_init, comm_broadcast, comm_ctl_all_reduce_f64, counters
// data_init, data_batch, data_teacher_entropy, data_init_text, data_val_batch, rng_uniform
#include "data.h"
#include "grid.h"   // grid_init, grid_print, grid_free (--tp)
#include "gpt.h"    // gpt_init (--model gpt)
#include "device.h" // dev_memcpy, dev_sync
#include "ledger.h" // ledger_init, ledger_trace_open
#include "model.h"  // model_init
#include "ops.h"    // op_adamw, op_sgd, op_cast
#include "muon.h"   // muon_update_replica, muon_adamw_numel, muon_print_split (--optimizer muon)
#include "outfile.h" // outfile_write
#include "report.h" // report_finish, report_write_trace, report_step_t
#include "tensor.h" // tensor_alloc, tensor_free
#include "trace.h"  // trace_init, trace_begin, trace_end, trace_now_us
#include "ckpt.h"   // ckpt_open_resume, ckpt_restore, ckpt_due, ckpt_save, ckpt_export_weights
#include "export.h" // export_safetensors (--save-params PATH.safetensors beside PATH)
#include "fault.h"  // fault_arm, fault_at_step, fault_overflow (--fault, a testing aid)
#include "scaler.h" // scaler_t, scaler_make, scaler_update (--precision fp16)
#include <math.h>   // isfinite, sqrt, NAN
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // getenv, free
#include <string.h> // strcmp, memcpy
#include <errno.h>  // errno, EEXIST
#include <sys/stat.h> // mkdir, stat

/* ---- helpers for strategies -------------------------------------------------------------- */

void trainer_alloc_full_states(trainer_t *t, int with_grads) {
  int64_t P = t->model.padded_numel;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, P);         /* (P) working */
  if (with_grads) t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, P); /* (P) */
  /* (P) fp32 */
  if (dtype_is_half(t->wdt)) t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, P);
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, P);
  if (t->cfg->optimizer == OPT_ADAMW) t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, P);
  if (t->cfg->optimizer == OPT_MUON) /* v of the AdamW part only, its segments one after another */
    t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, muon_adamw_numel(&t->model));
}

void trainer_init_values(const trainer_t *t, int64_t lo, int64_t hi, float *dst) {
  const model_t *m = &t->model;
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    int64_t a = un->off > lo ? un->off : lo, b = un->off + un->padded < hi ? un->off + un->padded : hi;
    if (a >= b) continue;
    if (a == un->off && b == un->off + un->padded) { /* the whole unit: write in place */
      model_init_unit(m, t->cfg->seed, u, dst + (a - lo));
      continue;
    }
    float *tmp = xmalloc((size_t)un->padded * sizeof(float), "init scratch");
    model_init_unit(m, t->cfg->seed, u, tmp);
    memcpy(dst + (a - lo), tmp + (a - un->off), (size_t)(b - a) * sizeof(float));
    free(tmp);
  }
}

void trainer_init_full_params(trainer_t *t) {
  int64_t P = t->model.padded_numel;
  /* The fp32 copy every rank must agree on: master in bf16 mode, the params in fp32 mode. */
  tensor_t *w = dtype_is_half(t->wdt) ? &t->master : &t->params;
  if (t->rank == 0) {
    float *h = xmalloc((size_t)P * sizeof(float), "init params (host)");
    trainer_init_values(t, 0, P, h);
    dev_memcpy(t->dev, w->data, DEV_CPU, h, (size_t)P * sizeof(float));
    free(h);
  }
  /* As DDP's constructor does: rank 0's weights are broadcast, so every replica starts equal. */
  comm_broadcast(t->comm, w->data, P, DT_F32, 0);
  if (dtype_is_half(t->wdt)) op_cast(t->dev, t->params.data, t->wdt, t->master.data, DT_F32, P);
}

void trainer_optimizer_update(trainer_t *t, float *w, const void *grad, float *m, float *v, int64_t n,
                              float gscale) {
  if (t->skipped || n == 0) return;
  const train_cfg_t *c = t->cfg;
  if (c->optimizer == OPT_ADAMW) op_adamw(t->dev, w, grad, t->wdt, m, v, n, &t->hp, t->opt_t, gscale);
  else if (c->optimizer == OPT_MUON) muon_update_replica(t, w, grad, m, v, n, gscale);
  else
    op_sgd(t->dev, w, grad, t->wdt, m, n, (float)c->lr, (float)c->momentum, (float)c->weight_decay, gscale);
}

/* The norm of a finite step (t->grad_norm) and the scale its update takes: the clip, and 1/S in fp16. */
static float finish_scale(trainer_t *t, double sumsq) {
  /* the gradients are S times the true ones: unscale the norm, and the update (gscale) */
  if (t->wdt == DT_F16) {
    double S = t->in->scaler.scale, clip = 1.0;
    t->grad_norm = sqrt(sumsq) / S;
    if (t->cfg->clip > 0) clip = fmin(1.0, t->cfg->clip / (t->grad_norm + 1e-6));
    return (float)(clip / S);
  }
  t->grad_norm = sqrt(sumsq);
  if (t->cfg->clip > 0) {
    double s = t->cfg->clip / (t->grad_norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
  }
  return 1.0f;
}

/* Where a bad step's non-finite gradients appeared: the world ranks whose OWN gradients were
 * non-finite before any reduction (trainer_check_grads; an injected --fault nan), not everyone the
 * reductions spread them to. A control all-reduce over the job: every rank calls it in a bad step. */
static void nonfinite_where(trainer_t *t, char *where, size_t n) {
  int W = comm_world(t->world_comm), nbad = 0;
  double *flags = xcalloc((size_t)W, sizeof(double), "nonfinite ranks");
  flags[comm_rank(t->world_comm)] = t->in->local_nonfinite;
  comm_ctl_all_reduce_f64(t->world_comm, flags, W, REDOP_SUM);
  char ranks[256] = "";
  for (int r = 0; r < W; r++)
    if (flags[r] != 0) {
      size_t len = strlen(ranks);
      if (len < sizeof ranks - 16) snprintf(ranks + len, sizeof ranks - len, "%s%d", nbad ? "," : "", r);
      nbad++;
    }
  free(flags);
  if (nbad > 0)
    snprintf(where, n, "on rank%s %s (local gradients, before the reduction)", nbad > 1 ? "s" : "", ranks);
  else snprintf(where, n, "in the reduced gradients (no rank's local gradients were flagged)");
}

float trainer_finish_grads(trainer_t *t, double local_sumsq, comm_t *pieces) {
  /* the group the flags and Σg² go over: the one whose pieces tile the model once (ZeRO's t->comm,
   * HSDP's node), or t->comm when every rank holds every gradient (only the flags, on a non-finite) */
  /* two data-parallel groups (t->dense_comm) with shards: every rank's pieces, the dense prefixes over all
   * ranks and the experts over the D that share them, tile the whole model once: Σ over every rank */
  int tiled = pieces && t->dense_comm;
  if (tiled) pieces = t->dense_comm;
  comm_t *c = pieces ? pieces : t->comm;
  int N = comm_world(c), rank = comm_rank(c), sharded = pieces != NULL;
  /* --fault R:S:overflow: rank R's own gradients (its shard under ZeRO; its stage's in a pipeline) */
  if (fault_overflow(t->fault, comm_rank(t->world_comm), !sharded && !t->cfg->sched, t->step))
    local_sumsq = INFINITY;
  double sumsq = local_sumsq;
  /* bad[0]: Σg² over ranks (sharded); bad[1]: the reduced gradients hold a NaN/Inf somewhere;
   * bad[2+r]: rank r's OWN gradients were non-finite before any reduction (micro_batch checks
   * them), so the message names where it appeared, not everyone the reduction spread it to. */
  double *bad = xcalloc((size_t)N + 2, sizeof(double), "nonfinite flags");
  int reduced_bad = !isfinite(local_sumsq);
  if (sharded) {
    bad[0] = reduced_bad ? 0.0 : local_sumsq;
    bad[1] = reduced_bad;
    bad[2 + rank] = t->in->local_nonfinite;
    comm_ctl_all_reduce_f64(c, bad, N + 2, REDOP_SUM);
    sumsq = bad[0];
    reduced_bad = bad[1] != 0;
  } else if (reduced_bad) { /* every rank holds the same reduced grads: all see it, all join */
    bad[2 + rank] = t->in->local_nonfinite;
    comm_ctl_all_reduce_f64(c, bad, N + 2, REDOP_SUM);
  }
  int fp16 = t->wdt == DT_F16;
  if (fp16 && (sharded || reduced_bad)) /* the flags of the overflow check ride this all-reduce */
    t->in->overflow_ctl_bytes += comm_model_sent(CO_ALL_REDUCE, N + 2, DT_F64, N, rank, 0);
  /* a rank's own non-finite gradient makes the step bad wherever its values are counted: the sums
   * below then carry it to every rank of the job, which all decide alike */
  for (int r = 0; r < N; r++) reduced_bad |= bad[2 + r] != 0;
  /* The transform's group: each rank's Σg² counted its values once (trainer_grad_sumsq's ranges), so
   * the whole model's is the sum over the group. A NaN/Inf (fp16: an overflow) in one rank's part
   * turns the sum non-finite: every rank of the group sees it and skips (or stops) alike. */
  if (t->group_comm && !tiled) {
    if (reduced_bad) sumsq = INFINITY;
    comm_ctl_all_reduce_f64(t->group_comm, &sumsq, 1, REDOP_SUM);
    reduced_bad = !isfinite(sumsq);
  }
  free(bad);
  const schedule_t *sc = t->cfg->sched;
  if (sc && sc->grad_sumsq && t->in->pv.on && !t->in->pv.redo) {
    /* --post-validate: no waiting for the other stages here. The update runs now with no clip
     * (an overflow of this stage's own included: the copy puts it back); pv_validate sums the
     * stages' parts after it and rolls the step back if they say so. */
    t->in->pv.pending = 1;
    t->in->pv.stage_sumsq = reduced_bad ? INFINITY : sumsq;
    t->in->pv.gscale = fp16 ? (float)(1.0 / t->in->scaler.scale) : 1.0f;
    t->skipped = 0;
    t->grad_norm = NAN; /* known after the validation */
    return t->in->pv.gscale;
  }
  /* a pipeline: every stage's part summed; a NaN or an overflow anywhere skips all */
  if (sc && sc->grad_sumsq) {
    sumsq = sc->grad_sumsq(t, reduced_bad ? INFINITY : sumsq);
    reduced_bad = !isfinite(sumsq);
  }
  t->skipped = 0;
  if (!reduced_bad) return finish_scale(t, sumsq);
  /* A bad step, on every rank of the job alike: one line, by world rank 0. */
  int first = comm_rank(t->world_comm) == 0;
  t->grad_norm = NAN;
  t->skipped = 1;
  if (fp16) { /* the loss scaler's overflow: skip, back off (train_loop) */
    if (first && !t->cfg->quiet)
      printf("step %d: gradient overflow (inf/NaN) at loss scale %g: step skipped on every rank\n", t->step,
             (double)t->in->scaler.scale);
    return 0.0f;
  }
  char where[320];
  nonfinite_where(t, where, sizeof where);
  if (t->cfg->nonfinite == NONFINITE_ABORT) {
    if (first)
      die("error: step %d: non-finite gradient %s; stopping (--nonfinite skip drops such steps)", t->step,
          where);
    comm_barrier(t->world_comm); /* world rank 0 takes the job down */
    die_on_rank("step %d: non-finite gradient", t->step);
  }
  if (first)
    fprintf(stderr,
            "warning: step %d: non-finite gradient %s; step skipped on every rank (--nonfinite skip)\n",
            t->step, where);
  return 0.0f;
}

void trainer_report_extra(trainer_t *t, const char *key, double value) {
  struct train_internal *in = t->in;
  for (int i = 0; i < in->nextras; i++)
    if (strcmp(in->extras[i].key, key) == 0) {
      in->extras[i].value = value;
      return;
    }
  if (in->nextras == in->cap_extras) { /* one growable list, no cap to outgrow */
    in->cap_extras = in->cap_extras ? 2 * in->cap_extras : 16;
    in->extras = xrealloc(in->extras, (size_t)in->cap_extras * sizeof *in->extras, "report extras");
  }
  report_extra_t *e = &in->extras[in->nextras++];
  snprintf(e->key, sizeof e->key, "%s", key);
  e->value = value;
}

/* ZL_CHECK_MASTER=1 (tests): in bf16/fp16 mode, the working params must be wdt(master) bit for bit. */
static void check_master_bits(trainer_t *t) {
  int64_t n = t->params.numel;
  if (!dtype_is_half(t->wdt) || n == 0 || t->master.numel != n) return;
  uint16_t *p = xmalloc((size_t)n * 2, "check params"), *want = xmalloc((size_t)n * 2, "check master");
  float *m = xmalloc((size_t)n * 4, "check master f32");
  dev_memcpy(DEV_CPU, p, t->dev, t->params.data, (size_t)n * 2);
  dev_memcpy(DEV_CPU, m, t->dev, t->master.data, (size_t)n * 4);
  op_cast(DEV_CPU, want, t->wdt, m, DT_F32, n);
  for (int64_t i = 0; i < n; i++)
    if (p[i] != want[i])
      die_on_rank("step %d: 16-bit params[%lld] = 0x%04x but bf16(master[%lld] = %.9g) = 0x%04x", t->step,
          (long long)i, p[i], (long long)i, m[i], want[i]);
  free(p);
  free(want);
  free(m);
  t->in->checked_steps++;
}

/* The model and data source of cfg (--model mlp|gpt): model_init + data_init, or the GPT and
 * its text. */
static void model_from_cfg(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  if (strcmp(cfg->model_kind, "gpt") == 0) {
    gpt_init(&t->model, cfg->gpt);
    data_init_text(&t->data, cfg->data, cfg->gpt.seq_len, cfg->seed);
    return;
  }
  model_init(&t->model, cfg->input, cfg->hidden, cfg->classes, cfg->layers);
  data_init(&t->data, cfg->input, cfg->classes, cfg->seed);
}

static int log_step(const train_cfg_t *c, int step) {
  if (c->quiet) return 0;
  if (step == 0 || step == c->steps - 1) return 1;
  return c->log_every > 0 && step % c->log_every == 0;
}

/* ---- --post-validate (07): step at once, validate after, roll back bitwise ----------------------
 * Qi et al. 2023, §4 ("optimizer post-validation"): the gradient-norm clip and fp16's overflow check
 * need every stage's gradients, an all-reduce across the pipeline that makes each stage wait for
 * the last one before it may update. With --post-validate the strategy's step updates at once
 * (trainer_finish_grads returns the unclipped scale), then pv_validate sums the stages' parts: a
 * step the sum says to skip (an overflow or a NaN on any stage) gets the states back from the host
 * copy taken before it, bit for bit; a step it says to clip gets them back too and runs again,
 * clipped (pv.redo: the strategy's step on the ordinary, waiting path). Either way the weights are
 * those of the run without --post-validate, bit for bit; the price is the copy (the stage's params,
 * master and optimizer states, in host memory: the report's host columns), copied each step, and
 * on a clipped step the update twice. */
static void pv_copy(trainer_t *t, int back) {
  tensor_t *src[4] = {&t->params, &t->master, &t->opt_m, &t->opt_v};
  static const char *names[4] = {"params (post-validate copy)", "master (post-validate copy)",
                                 "optim m (post-validate copy)", "optim v (post-validate copy)"};
  static const ledger_cat_t cats[4] = {LEDGER_PARAMS, LEDGER_MASTER, LEDGER_OPTIM, LEDGER_OPTIM};
  for (int i = 0; i < 4; i++) {
    tensor_t *c = &t->in->pv.copy[i];
    if (!src[i]->data || src[i]->numel == 0) continue;
    if (!c->data || c->numel != src[i]->numel || c->dtype != src[i]->dtype) {
      if (back) die_on_rank("--post-validate: %s changed size within the step", names[i]);
      tensor_free(c);
      *c = tensor_alloc_host(names[i], cats[i], src[i]->dtype, t->dev, src[i]->numel);
    }
    size_t n = tensor_nbytes(src[i]);
    if (back) dev_memcpy(t->dev, src[i]->data, DEV_CPU, c->data, n);
    else dev_memcpy(DEV_CPU, c->data, t->dev, src[i]->data, n);
  }
}

static void pv_validate(trainer_t *t) {
  struct train_internal *in = t->in;
  if (!in->pv.pending) return;
  in->pv.pending = 0;
  comm_wait_all(t->comm); /* what the step sent (ZeRO's all-gather of the params) has landed */
  double sumsq;
  TRAINER_PHASE("post-validate: the stages' norm", sumsq = t->cfg->sched->grad_sumsq(t, in->pv.stage_sumsq));
  if (!isfinite(sumsq)) { /* an overflow or a NaN on some stage: the step must not have happened */
    TRAINER_PHASE("post-validate: roll back", pv_copy(t, 1));
    in->pv.rollbacks++;
    t->skipped = 1;
    t->grad_norm = NAN;
    if (t->wdt == DT_F16) {
      if (trainer_prints(t))
        printf("step %d: gradient overflow (inf/NaN) at loss scale %g: step skipped on every rank "
               "(post-validation: "
               "the update rolled back)\n",
               t->step, (double)in->scaler.scale);
      return;
    }
    if (t->cfg->nonfinite == NONFINITE_ABORT) {
      if (t->model_rank == 0)
        die("error: step %d: non-finite gradient on a stage (found by the post-validation, after the update, "
            "which "
            "was rolled back); stopping (--nonfinite skip drops such steps)",
            t->step);
      comm_barrier(t->model_comm); /* rank 0 takes the job down */
      die_on_rank("step %d: non-finite gradient", t->step);
    }
    if (t->model_rank == 0)
      fprintf(stderr,
              "warning: step %d: non-finite gradient on a stage; the update rolled back on every rank "
              "(--nonfinite skip, post-validation)\n",
              t->step);
    return;
  }
  float want = finish_scale(t, sumsq);
  if (want == in->pv.gscale) return; /* the update that ran was the right one */
  TRAINER_PHASE("post-validate: roll back", pv_copy(t, 1)); /* to be clipped: undo, then redo with the clip */
  in->pv.redos++;
  in->pv.redo = 1;
  t->strategy->step(t);
  in->pv.redo = 0;
}

/* ---- the loop: what train.h's diagram shows, and nothing else ------------------------------ */

/* The optimizer step after the step's operations: the strategy's (with --post-validate: the copy
 * before it, the check and a rollback after it), then the transform's step_end (chapter 12: the
 * loads and the router bias) and fp16's loss scale. Sets t->skipped; counts the step in *taken or
 * *skipped. */
static void train_step(trainer_t *t, int *taken, int *skipped) {
  struct train_internal *in = t->in;
  const model_transform_t *tf = t->cfg->transform;
  t->opt_t = *taken + 1;
  t->skipped = 0;
  in->steps_run++; /* this step counts for the rates a strategy's step() reports */
  if (in->pv.on) TRAINER_PHASE("post-validate: copy the states", pv_copy(t, 0));
  t->strategy->step(t);
  /* after the update: the stages' norm and flags, and a rollback if they say so */
  if (in->pv.on) pv_validate(t);
  if (tf && tf->step_end) tf->step_end(t);
  if (t->wdt == DT_F16) scaler_update(&in->scaler, t->skipped); /* same flag on every rank */
  in->overflows_run += t->wdt == DT_F16 && t->skipped;
  if (!t->skipped) (*taken)++;
  else (*skipped)++;
}

/* The step's loss over the global batch from this rank's sum over its samples. Every rank of the
 * model's group (a pipeline's stages) adds its part; a transform's group that splits the batch
 * (chapter 12's EP group) read different samples, so they add theirs too — but the ranks of it that
 * read the same samples (--tp inside the group: trainer_batch_share of them) count them once. TP's
 * group (chapter 06) read the same samples and computed the same loss: nothing to add there. */
static double step_global_loss(trainer_t *t, double loss_sum) {
  comm_ctl_all_reduce_f64(t->model_comm, &loss_sum, 1, REDOP_SUM); /* control traffic */
  if (t->group_comm && t->cfg->transform->splits_batch) {
    if (comm_rank(t->group_comm) % trainer_batch_share(t)) loss_sum = 0;
    comm_ctl_all_reduce_f64(t->group_comm, &loss_sum, 1, REDOP_SUM);
  }
  return loss_sum / ((double)t->cfg->batch * t->model.rows);
}

static void log_loss(const trainer_t *t, const report_step_t *r) {
  if (t->wdt == DT_F16)
    printf("step %5d  loss %.6f  %8.2f ms  scale %g%s\n", t->step, r->loss, r->ms, r->loss_scale,
           t->skipped ? "  (skipped)" : "");
  else printf("step %5d  loss %.6f  %8.2f ms%s\n", t->step, r->loss, r->ms, t->skipped ? "  (skipped)" : "");
  fflush(stdout);
}

/* Steps [start, cfg->steps), as llm.c's loop reads: the step's operations (forwards, losses,
 * backwards with the hooks), the optimizer step, the log line, the evaluation and the checkpoint
 * when due. *taken counts applied optimizer steps (AdamW's t), *skipped the steps --nonfinite skip
 * dropped. */
static void train_loop(trainer_t *t, int start, int *taken, int *skipped) {
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  int log = trainer_prints(t);
  for (int step = start; step < cfg->steps; step++) {
    char name[32];
    snprintf(name, sizeof name, "step %d", step);
    double t0 = trace_now_us();
    trace_begin(name);
    t->step = step;
    ckpt_mem_progress(&in->mem, t, step); /* --ckpt-mem-every: how far a relaunch must redo */
    ckpt_mem_lose_node(&in->mem, t, step); /* --fault R:S:node: R's node's snapshots are gone */
    /* --fault R:S:exit|abort|kill|hang (a testing aid) */
    fault_at_step(t->fault, comm_rank(t->world_comm), step);
    in->local_nonfinite = 0;
    double loss_sum = train_run_ops(t);
    double scale_used = in->scaler.scale; /* fp16: the scale this step's loss was multiplied by */
    train_step(t, taken, skipped);
    dev_sync(t->dev);
    trace_end(NULL);
    in->steps[step] = (report_step_t){.loss = step_global_loss(t, loss_sum),
                                      .ms = (trace_now_us() - t0) / 1000.0,
                                      .loss_scale = t->wdt == DT_F16 ? scale_used : 0};
    if (in->check_master) check_master_bits(t);
    if (log && log_step(cfg, step)) log_loss(t, &in->steps[step]);
    if (cfg->eval_every > 0 && ((step + 1) % cfg->eval_every == 0 || step == cfg->steps - 1))
      train_eval_record(t, step + 1);
    ckpt_async_poll(&in->ckpt, t); /* --ckpt-async: commit a finished background write */
    if (ckpt_due(cfg, step))
      ckpt_async_save(&in->ckpt, t, cfg->ckpt, step + 1, *taken, *skipped, in->steps,
                      t->wdt == DT_F16 ? &in->scaler : NULL);
    if (in->mem.every && (step + 1) % in->mem.every == 0 && step + 1 < cfg->steps)
      ckpt_mem_save(&in->mem, t, step + 1, *taken, *skipped, in->steps,
                    t->wdt == DT_F16 ? &in->scaler : NULL);
  }
  ckpt_async_finish(&in->ckpt, t);
  comm_wait_all(t->comm);
}

/* ---- the launcher: communicator, model, states, resume; then results and teardown --------- */

static void print_header(const trainer_t *t, const char *chapter) {
  const train_cfg_t *cfg = t->cfg;
  const model_t *m = &t->model;
  char ranks[64]; /* the strategy's ranks; with expert parallelism (12) every rank of the job: EP × D */
  if (t->group_comm && cfg->transform->splits_batch)
    snprintf(ranks, sizeof ranks,
             cfg->tp > 1 ? "%d ranks (EP %d, TP %d inside, x D %d)" : "%d ranks (EP %d x D %d)",
             comm_world(t->world_comm), comm_world(t->group_comm), cfg->tp > 1 ? cfg->tp : t->world,
             t->world);
  else snprintf(ranks, sizeof ranks, "%d rank%s", t->world, t->world > 1 ? "s" : "");
  printf("ch%s: %s on %s (%s, %s backend, %s collectives), %s, %s\n", chapter, t->name, ranks,
         device_name(t->dev), comm_backend_name(t->comm),
         cfg->collectives == COLL_RING ? "ring" : "vendor", dtype_precision(cfg->wdt),
         train_opt_name(cfg));
  if (cfg->optimizer == OPT_MUON) muon_print_split(t);
  /* A schedule (a pipeline) cuts the batch itself, in its setup after this line: its own line gives
   * the micro-batch, so the loop's per-rank view is not printed for it. */
  char per_rank[96];
  if (cfg->sched) snprintf(per_rank, sizeof per_rank, "micro-batches: the pipeline line below");
  else
    snprintf(per_rank, sizeof per_rank, "%lld per rank per micro-batch, accum %d", (long long)t->local_batch,
             cfg->accum);
  if (m->in_is_tokens) /* the GPT and its forms (tp, cp, moe), as the report tells them (report_is_gpt) */
    printf("model: gpt, %d layers, %d heads, n_embd %d, seq_len %d, vocab %d: %d units, psi = %lld params; "
           "text %s; "
           "global batch %lld sequences = %lld tokens per step (%s), %d steps\n",
           m->gpt.n_layer, m->gpt.n_head, m->gpt.n_embd, m->gpt.seq_len, m->gpt.vocab, m->n_units,
           (long long)m->numel, cfg->data, (long long)cfg->batch, (long long)cfg->batch * m->rows, per_rank,
           cfg->steps);
  else
    printf("model: D=%d, %d hidden layers of %d, C=%d: %d units, psi = %lld params; global batch %lld (%s), "
           "%d steps\n",
           m->D, m->L, m->H, m->C, m->n_units, (long long)m->numel, (long long)cfg->batch, per_rank,
           cfg->steps);
  fflush(stdout);
}

/* Results (the full fp32 weights on rank 0: fingerprint, --save-params; the report, the trace),
 * then every buffer freed. Returns the run's exit code: 0, or 1 when a static fp16 loss scale
 * skipped every step (nothing trained). The model states belong to the strategy (train.h); the trainer
 * frees what it allocated itself: activations, its tables, the model and the data. */
static int train_finish(trainer_t *t, const char *chapter, int skipped) {
  int rc = 0;
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  const strategy_t *s = t->strategy;
  int rank = t->model_rank; /* where the export lands: rank 0 of the model's ranks */
  if (in->steps_run > 0) { /* the schedule's and the transform's own lines (collective) */
    if (cfg->sched && cfg->sched->report) cfg->sched->report(t);
    if (cfg->transform && cfg->transform->report) cfg->transform->report(t);
  }
  float *full = rank == 0 ? xmalloc((size_t)t->whole->numel * sizeof(float), "exported params") : NULL;
  ckpt_export_weights(t, full); /* through the strategy's layout hook */
  int64_t full_numel = t->whole->numel;
  if (t->group_comm) { /* --tp: this TP rank's part -> the whole model on world rank 0 (the transform's) */
    float *whole = cfg->transform->unsplit(t->whole, full, rank == 0, &full_numel);
    free(full);
    full = whole;
  }
  if (full && cfg->save_params) {
    outfile_write("--save-params", cfg->save_params, (const char *)full, full_numel * (int64_t)sizeof(float));
    struct stat sb; /* beside it, PATH.safetensors with GPT-2's names (export.h); not beside /dev/null */
    /* GPT-2's names: dense only */
    if (strcmp(cfg->model_kind, "gpt") == 0 && !(cfg->chapter_flags & TRAIN_FLAG_MOE)
        && stat(cfg->save_params, &sb) == 0 && S_ISREG(sb.st_mode)) {
      char st[1200];
      snprintf(st, sizeof st, "%s.safetensors", cfg->save_params);
      export_model_t em = {.gpt = 1, .g = cfg->gpt};
      if (export_numel(&em) != full_numel)
        die("rank 0: --save-params: %lld weights, the GPT's shape has %lld", (long long)full_numel,
            (long long)export_numel(&em));
      char shape[96];
      snprintf(shape, sizeof shape, "%d %d %d %d %d", cfg->gpt.n_layer, cfg->gpt.n_head, cfg->gpt.n_embd,
               cfg->gpt.seq_len, cfg->gpt.vocab);
      const char *meta[] = {"zerolab_model", "gpt", "zerolab_shape", shape, "zerolab_strategy",
                            t->name,         NULL};
      export_safetensors("--save-params", st, &em, full, meta);
    }
  }
  if (in->check_master && rank == 0 && dtype_is_half(cfg->wdt)) /* also with --quiet: tests read it */
    printf("check: %s params == %s(master) bit for bit after each of %d steps (rank 0)\n",
           dtype_precision(cfg->wdt), dtype_precision(cfg->wdt), in->checked_steps);
  ckpt_async_report(&in->ckpt, t);
  ckpt_mem_finish(&in->mem, t);
  if (in->pv.on) { /* the same decisions on every rank: rank 0's counts are everyone's */
    trainer_report_extra(t, "post_validate_rollbacks", in->pv.rollbacks);
    trainer_report_extra(t, "post_validate_redos", in->pv.redos);
  }
  if (cfg->wdt == DT_F16) { /* the scaler's numbers; the flushed count summed over every rank of the job */
    double flushed = (double)op_fp16_flushed();
    comm_ctl_all_reduce_f64(t->world_comm, &flushed, 1, REDOP_SUM);
    trainer_report_extra(t, "overflow_steps", in->scaler.overflows);
    trainer_report_extra(t, "overflow_check_bytes", (double)in->overflow_ctl_bytes);
    trainer_report_extra(t, "loss_scale_final", in->scaler.scale);
    if (t->dev == DEV_CPU) trainer_report_extra(t, "fp16_flushed_to_zero", flushed);
    else if (rank == 0) /* the CUDA casts do not count them: say so rather than print a 0 nobody counted */
      printf("fp16_flushed_to_zero: not counted on the GPU (the CPU path counts them: --device cpu)\n");
    int ran = in->steps_run; /* this run's steps (a resumed run starts at its checkpoint's step) */
    /* A static scale never moves: every later step would overflow too, so the run trained nothing and
     * says so with its exit code (1, every rank alike); the dynamic one halves and goes on. */
    int all = ran > 0 && in->overflows_run == ran;
    rc = all && cfg->loss_scale > 0;
    if (rank == 0 && all)
      fprintf(rc ? stderr : stdout,
              "%s: every one of the %d steps of this run overflowed in fp16 and was skipped: no weight "
              "changed. %s\n",
              rc ? "error" : "warning", ran,
              rc ? "The static --loss-scale is too large for these gradients: lower it, or use the dynamic "
                   "scale (--loss-scale 0)"
                 : "The dynamic scale halves on each overflow: more steps, or a smaller --init-scale");
  }
  double entropy = rank == 0 ? data_teacher_entropy(&t->data, 4096) : 0;
  report_run_t run = {.chapter = chapter,
                      .steps = in->steps,
                      .nsteps = cfg->steps,
                      .full_params = full,
                      .full_numel = full_numel,
                      .teacher_entropy = entropy,
                      .extras = in->extras,
                      .nextras = in->nextras,
                      .skipped_steps = skipped,
                      .evals = in->evals,
                      .nevals = in->nevals};
  report_finish(t, &run);
  report_write_trace(t->model_comm);

  if (s->teardown) s->teardown(t);
  /* the model states: the strategy allocated them, the trainer frees them (train.h) */
  tensor_free(&t->params);
  tensor_free(&t->grads);
  tensor_free(&t->master);
  tensor_free(&t->opt_m);
  tensor_free(&t->opt_v);
  train_free_acts(t);
  for (int i = 0; i < 4; i++) tensor_free(&in->pv.copy[i]);
  if (cfg->sched && cfg->sched->teardown) cfg->sched->teardown(t); /* after the strategy: its comms */
  free(t->transform_priv); /* the transform's own state (train.h: its setup's, the trainer's to free) */
  ops_release_workspace();
  free(full);
  free(in->steps);
  free(in->extras);
  free(in->evals);
  free(in->own_ops);
  free(in->step_uses);
  free(in->fwd_uses);
  train_fb_free(t); /* --fb-overlap: the backward's coroutine stack (loop_fb.c) */
  free(in->whole.units); /* a schedule's copy (the units only: the ctx is the model's) */
  free(t->unit_params);
  free(t->unit_grads);
  model_free(&t->model);
  data_free(&t->data);
  return rc;
}

static int is_dir_path(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* --tp T with --ckpt DIR / --resume DIR: TP rank r of T saves and resumes its own slices as an
 * ordinary checkpoint of its part of the model, in DIR/tp-R-of-T (resharding over the data
 * dimension works inside it as without TP). A --resume DIR without tp-R-of-T directories is
 * read as it is: a checkpoint of full units (grid-free from zl_ckpt convert, or saved without
 * --tp) that every TP rank maps to its slices (ckpt.c, the transform's to_local); one of another T
 * is refused by ckpt_resolve, which names the T and the conversion. Returns 0, or 2 after one
 * error line (collective over the world: every rank returns the same). */
static int tp_ckpt_dirs(train_cfg_t *c, const grid_t *g, char *ck, char *rs, size_t n) {
  int T = g->size[GRID_TP], r = g->coord[GRID_TP];
  double bad = 0;
  if (c->ckpt) {
    snprintf(ck, n, "%s/tp-%d-of-%d", c->ckpt, r, T);
    if (g->rank == 0 && mkdir(c->ckpt, 0755) != 0 && errno != EEXIST) bad = 1;
    comm_barrier(g->world);
    c->ckpt = ck;
  }
  if (c->resume && !bad) {
    snprintf(rs, n, "%s/tp-%d-of-%d", c->resume, r, T);
    if (is_dir_path(rs)) c->resume = rs;
  }
  comm_ctl_all_reduce_f64(g->world, &bad, 1, REDOP_MAX);
  return bad ? 2 : 0;
}

int train_main(const train_cfg_t *cfg, const strategy_t *s, const char *chapter) {
  if (!s) die("error: no strategy for this run");
  int env_rank = args_env_rank();
  if (cfg->optimizer == OPT_MUON && !s->whole_matrices) { /* before MPI, as a bad flag (notes/03-zero1.md) */
    if (env_rank == 0)
      fprintf(stderr, "error: --optimizer muon: %s updates flat slices (each rank a piece of every unit, cut "
              "through the matrices), and Newton-Schulz needs each matrix whole%s\n", s->name,
              s->stage == 1   ? ": ch03_zero1 --shard owner gives each matrix one rank"
              : s->stage == 2 ? ": ch04_zero2 --shard owner gives each matrix one rank"
                              : "; whole-matrix owners are built for ZeRO-1 and ZeRO-2 (--shard owner)");
    return 2;
  }
  if (env_rank == 0 && !cfg->quiet && cfg->device_note[0]) printf("%s\n", cfg->device_note);

  /* The ledger starts before anything is allocated (the communicator's scratch included). */
  ledger_init(env_rank, (int64_t)(cfg->mem_limit_mb * 1048576.0));
  if (env_rank == 0) ledger_trace_open(cfg->alloc_trace);
  int argc0 = 0;
  char **argv0 = NULL;
  comm_t *comm = comm_init(&argc0, &argv0, cfg->comm_backend, cfg->dev);
  comm_set_impl(comm, cfg->collectives);
  comm_set_timeout(comm, cfg->timeout_s);
  comm_set_piece_bytes(comm, (int64_t)(cfg->buffer_mb * 1048576.0)); /* --buffer-mb: 0 = whole collectives */
  /* a relaunch by zlrun --restarts ($ZL_RESTART >= 1) runs without the injected fault: it would fail again */
  const char *relaunch = getenv("ZL_RESTART");
  fault_t fault = fault_arm(relaunch && atoi(relaunch) > 0 ? NULL : cfg->fault, comm_world(comm), cfg->steps);
  int wrank = comm_rank(comm);
  trace_init(wrank, cfg->trace);
  /* The transform's group (--tp T, --ep P_E): groups of consecutive ranks; the strategy works on the
   * data-parallel group of the ranks with this group rank. */
  const model_transform_t *tf = cfg->transform;
  grid_t *grid = tf && cfg->group > 1 ? grid_init(comm, cfg->group, 1) : NULL;
  comm_t *dpc = grid ? grid->comm[GRID_DP] : comm;
  int quiet = cfg->quiet; /* the same on every rank (below, TP ranks other than 0 turn quiet) */
  train_cfg_t tpcfg;
  char tp_ckpt[1200], tp_resume[1200];
  if (grid) { /* each TP rank: its own checkpoint directory; only TP rank 0 prints */
    tpcfg = *cfg;
    if (tp_ckpt_dirs(&tpcfg, grid, tp_ckpt, tp_resume, sizeof tp_ckpt)) {
      grid_free(grid);
      comm_finalize(comm);
      return 2;
    }
    if (grid->coord[GRID_TP] != 0) tpcfg.quiet = 1;
    cfg = &tpcfg;
  }
  if (grid && !quiet) grid_print(grid); /* collective: every rank prints its line in rank order */
  int rank = comm_rank(dpc), world = comm_world(dpc);
  /* the slices of each micro-batch: one per data-parallel rank; EP's group reads P_E/T of them (D·P_E/T) */
  int slices = grid && tf->splits_batch ? comm_world(comm) / cfg->tp : world;
  /* when launched without the env variables */
  if (!cfg->sched && cfg->batch % ((int64_t)slices * cfg->accum) != 0)
    die("error: --batch %lld: must be divisible by ranks x accum = %d x %d", (long long)cfg->batch, slices,
        cfg->accum);

  struct train_internal in = {0};
  ckpt_mem_init(&in.mem, cfg);
  trainer_t t = {.cfg = cfg,
                 .strategy = s,
                 .comm = dpc,
                 .rank = rank,
                 .world = world,
                 .world_comm = comm,
                 .group_comm = grid ? grid->comm[GRID_TP] : NULL,
                 .grid = grid,
                 .dev = cfg->dev,
                 .wdt = cfg->wdt,
                 .in = &in,
                 .model_comm = dpc,
                 .model_rank = rank,
                 .model_world = world,
                 .whole = &t.model,
                 .fault = &fault};
  char name[96]; /* the run's name: the strategy's, after the schedule's when there is one */
  if (cfg->sched) snprintf(name, sizeof name, "%s+%s", cfg->sched->name, s->name);
  else snprintf(name, sizeof name, "%s", s->name);
  t.name = name;
  t.hp = (adamw_hp_t){.lr = (float)cfg->lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2,
                      .eps = (float)cfg->eps, .weight_decay = (float)cfg->weight_decay};
  t.local_batch = cfg->batch / ((int64_t)slices * cfg->accum);
  ckpt_manifest_t resume = {0}; /* --resume: verified before anything is allocated or written */
  if (cfg->resume && ckpt_open_resume(&t, cfg->resume, &resume)) {
    if (grid) grid_free(grid);
    comm_finalize(comm);
    return 2;
  }
  /* Two data-parallel groups (train.h's strategy_t.two_groups): the transform's dense prefixes over
   * every rank, in a communicator of their own (its counters are the strategy's) */
  if (grid && tf->dense_numel && s->two_groups && !cfg->sched && cfg->tp <= 1)
    t.dense_comm = comm_split(comm, 0, wrank);
  model_from_cfg(&t);
  if (grid && tf->split) tf->split(&t.model, t.group_comm); /* this group rank's part of every split unit */
  if (tf && tf->setup) tf->setup(&t); /* the sequence's chunks (10), the experts (12): train.h */
  t.unit_params = xcalloc((size_t)t.model.n_units, sizeof(void *), "unit params");
  t.unit_grads = xcalloc((size_t)t.model.n_units, sizeof(void *), "unit grads");
  in.steps = xcalloc((size_t)cfg->steps, sizeof(report_step_t), "steps");
  in.scaler =
      scaler_make((float)(cfg->loss_scale > 0 ? cfg->loss_scale : cfg->init_scale), (float)cfg->growth_factor,
                  (float)cfg->backoff_factor, cfg->growth_interval, cfg->loss_scale == 0);
  const char *cm = getenv("ZL_CHECK_MASTER");
  in.check_master = cm && strcmp(cm, "1") == 0;
  in.pv.on = cfg->post_validate && cfg->sched;
  if (wrank == 0 && !cfg->quiet) print_header(&t, chapter);
  /* The step's list: a schedule's (this rank's part of the model, narrowed to its replicas), or
   * the loop's own. */
  if (cfg->sched) cfg->sched->setup(&t);
  else train_own_schedule(&t);
  train_build_uses(&t);

  fault_check_host_memory(&t); /* CPU: refuse clearly what the host cannot hold, before allocating */
  trace_begin("setup");
  train_alloc_acts(&t);
  if (!cfg->sched) train_report_acts(&t);
  s->setup(&t); /* states, shards, buckets; params broadcast from rank 0 */
  comm_wait_all(t.comm);
  if (t.dense_comm) comm_wait_all(t.dense_comm);
  comm_wait_all(comm);
  trace_end(NULL);
  comm_counters_reset(comm); /* per-step traffic starts here: the init broadcast is not a step */
  if (t.comm != comm) comm_counters_reset(t.comm);
  if (t.dense_comm) comm_counters_reset(t.dense_comm);

  int taken = 0, skipped = 0, start = 0; /* optimizer steps applied; steps dropped by --nonfinite skip */
  if (cfg->resume) { /* the states, the losses so far and the position of the checkpoint */
    ckpt_restore(&t, &resume, in.steps);
    start = resume.step;
    taken = resume.opt_t;
    skipped = resume.skipped;
    /* the dynamic scaler goes on where it was */
    if (resume.has_scaler && t.wdt == DT_F16 && cfg->loss_scale == 0) {
      in.scaler.scale = resume.loss_scale;
      in.scaler.growth_tracker = resume.growth_tracker;
      in.scaler.overflows = resume.overflows;
    }
    ckpt_manifest_free(&resume);
  }
  in.ckpt.on = cfg->ckpt_async;
  int from_ram = ckpt_mem_restore(&in.mem, &t, in.steps, &start, &taken, &skipped, &in.scaler);
  if (from_ram && cfg->resume && wrank == 0)
    printf("(the in-memory snapshot is newer than --resume %s: it was used)\n", cfg->resume);
  train_loop(&t, start, &taken, &skipped);
  if (cfg->sample > 0) train_sample_text(&t);
  int rc = train_finish(&t, chapter, skipped);
  if (t.dense_comm) comm_finalize(t.dense_comm);
  if (grid) grid_free(grid);
  comm_finalize(comm);
  return rc;
}
