/* train.c — the training loop of chapters 02+ and its launcher (see train.h; notes/design.md,
 * "The loop and the strategy interface"; notes/02-ddp.md).
 *
 * The loop (train_loop, micro_batch): for each micro-batch, forward unit by unit (strategy hooks
 * around each unit), the loss over the GLOBAL batch, backward in reverse handing each unit's
 * gradients to the strategy the moment they exist; then the strategy's step. Unit outputs and
 * saved activations live in LEDGER_ACTS (alloc_acts). The launcher (train_main): communicator
 * and process grid, model and data, the strategy's setup, resume; after the loop the results
 * and the teardown. The flags are parsed in train_flags.c. */
#include "train.h"  // trainer_t, strategy_t, train_cfg_t
#include "args.h"   // args_env_rank
#include "check.h"  // die, xmalloc, xcalloc
#include "comm.h"   // comm_init, comm_broadcast, comm_ctl_all_reduce_f64, counters
#include "data.h"   // data_init, data_batch, data_teacher_entropy, data_init_text, data_val_batch, rng_uniform
#include "grid.h"   // grid_init, grid_print, grid_free (--tp)
#include "gpt.h"    // gpt_init, gpt_acts_bytes (--model gpt)
#include "device.h" // dev_memcpy, dev_sync
#include "ledger.h" // ledger_init, ledger_live
#include "model.h"  // model_init, model_unit_forward, model_unit_backward
#include "ops.h"    // op_softmax_xent, op_adamw, op_sgd, op_cast, op_sumsq
#include "report.h" // report_finish, report_write_output, report_step_t
#include "tensor.h" // tensor_alloc, tensor_free
#include "trace.h"  // trace_init, trace_begin, trace_end, trace_write, trace_now_us
#include "ckpt.h"   // ckpt_open_resume, ckpt_restore, ckpt_due, ckpt_save, ckpt_export_weights
#include "export.h" // export_safetensors (--save-params PATH.safetensors beside PATH)
#include "fault.h"  // fault_arm, fault_at_step, fault_poison (--fault, a testing aid)
#include "scaler.h" // scaler_t, scaler_make, scaler_update (--precision fp16)
#include <math.h>   // isfinite, sqrt, NAN
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // getenv, free
#include <string.h> // strcmp, memcpy, memcmp
#include <dirent.h> // opendir, readdir (--tp checkpoints)
#include <errno.h>  // errno, EEXIST
#include <sys/stat.h> // mkdir, stat

#define TRAIN_MAX_EXTRAS 24
/* --model gpt's default text: the largest file of Debian's fortunes package (common/scripts/deps.sh). */

/* What only the loop sees. Activations live in SLOTS, one per micro-batch in flight on a chunk
 * (B = local micro-batch, in samples; u the chunk's units):
 *   in        (B, in_numel_c)     the chunk's input: the batch, or a previous stage's output
 *   out[u]    (B, y_numel_u)      the unit's output = the next unit's input (kept to the backward)
 *   saved[u]  (B, saved_numel_u)  what the unit's backward needs; with --recompute ONE buffer
 *                                 (the largest unit's) shared by all, refilled in the backward
 * Without a schedule there is one chunk and one slot, allocated at the start; a schedule's pool
 * grows a slot at a time, when more micro-batches are in flight than ever before, so its size is
 * the peak the schedule needs (07). Beside the pool: the targets (on the last chunk) and the
 * gradient ping-pong dy[2] (B, max y_numel).
 * With --pa (--recompute --tp T, ZeRO-R's Pa; notes/06-tensor-parallel.md): out[u] of a unit whose
 * output the TP group replicates is this rank's 1/T slice, ceil(B·y_numel_u / T) (the model
 * transform's pa_slice); the whole output lives in work[u % 2] while the forward or the backward
 * needs it (pa_keep, pa_gather: the transform's). */
typedef struct act_slot {
  tensor_t in;       /* (b, in_numel_c) 4-byte inputs: fp32 features, int32 tokens or a stage's activation */
  tensor_t *out;     /* [n] (b, y_numel_u) unit outputs (the last chunk's last: the logits)              */
  tensor_t *saved;   /* [n] (b, saved_numel_u); none with --recompute                                   */
  int micro;         /* the micro-batch it holds, −1: free                                              */
} act_slot_t;

typedef struct act_pool {
  act_slot_t *slots; /* [n_micro] room; n_slots allocated */
  int n_slots;
  int64_t in_numel;  /* 4-byte input elements per sample */
  int64_t slot_bytes;
} act_pool_t;

struct train_internal {
  act_pool_t *pools; /* [n_chunks] */
  int in_flight, peak_in_flight; /* slots in use, over all chunks */
  tensor_t y;        /* (b, rows) int32 targets (allocated as 4-byte elements), on the last chunk          */
  tensor_t saved_rc; /* --recompute: (b, max saved_numel) shared by every unit                             */
  tensor_t dy[2];    /* (b, max y_numel) ping-pong: gradient w.r.t. a unit's output                    */
  int64_t ws_bytes;  /* y, saved_rc and dy: the buffers beside the pool                                 */
  int pa;            /* --pa: the replicated outputs are kept as 1/T slices in out[u]                  */
  tensor_t work[2];  /* --pa: (T · max slice) whole outputs, ping-pong: the one read, the one written   */
  int64_t acts_kept; /* the ledger's LEDGER_ACTS growth for out, saved and work (alloc_acts)           */
  void *xh;          /* (b, in_numel) host staging of the evaluation batches when the device is a GPU   */
  int *yh;           /* (b, rows) host staging (evaluation)                                             */
  train_chunk_t whole_chunk; /* without a schedule: the one chunk, every unit                          */
  train_op_t *own_ops;       /* without a schedule: F k, B k for k < accum                             */
  train_use_t *step_uses, *fwd_uses; /* the pre hooks' order in a step, and in a forward-only pass     */
  int n_step_uses;
  model_t whole;             /* a schedule's copy of the model before trainer_keep_units                 */
  report_step_t *steps;
  report_extra_t extras[TRAIN_MAX_EXTRAS];
  int nextras;
  int check_master;  /* ZL_CHECK_MASTER=1: bf16 params == bf16(master) after every step */
  int local_nonfinite; /* this rank's OWN gradients of this step held NaN/Inf (before any reduction) */
  int checked_steps;
  report_eval_t *evals; /* --eval-every: [nevals] validation losses (--model gpt) */
  int nevals;
  scaler_t scaler;             /* --precision fp16: the loss scale S and its state (scaler.h) */
  int64_t overflow_ctl_bytes;  /* fp16: bytes this rank sent in the overflow check (its flags ride the norm's
                                * control all-reduce, trainer_finish_grads), summed over the steps */
};

/* ---- helpers for strategies -------------------------------------------------------------- */

void trainer_alloc_full_states(trainer_t *t, int with_grads) {
  int64_t P = t->model.padded_numel;
  t->params = tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, P);         /* (P) working */
  if (with_grads) t->grads = tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, P); /* (P) */
  if (dtype_is_half(t->wdt)) t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, P); /* (P) fp32 */
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, P);
  if (t->cfg->optimizer == OPT_ADAMW) t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, P);
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

void trainer_optimizer_update(trainer_t *t, float *w, const void *grad, float *m, float *v, int64_t n, float gscale) {
  if (t->skipped || n == 0) return;
  const train_cfg_t *c = t->cfg;
  if (c->optimizer == OPT_ADAMW) op_adamw(t->dev, w, grad, t->wdt, m, v, n, &t->hp, t->opt_t, gscale);
  else op_sgd(t->dev, w, grad, t->wdt, m, n, (float)c->lr, (float)c->momentum, (float)c->weight_decay, gscale);
}

float trainer_finish_grads(trainer_t *t, double local_sumsq, int sharded) {
  int N = t->world;
  if (fault_overflow(sharded ? comm_rank(t->world_comm) : -1, t->step)) local_sumsq = INFINITY; /* --fault R:S:overflow */
  double sumsq = local_sumsq;
  /* bad[0]: Σg² over ranks (sharded); bad[1]: the reduced gradients hold a NaN/Inf somewhere;
   * bad[2+r]: rank r's OWN gradients were non-finite before any reduction (micro_batch checks
   * them), so the message names where it appeared, not everyone the reduction spread it to. */
  double *bad = xcalloc((size_t)N + 2, sizeof(double), "nonfinite flags");
  int reduced_bad = !isfinite(local_sumsq);
  if (sharded) {
    bad[0] = reduced_bad ? 0.0 : local_sumsq;
    bad[1] = reduced_bad;
    bad[2 + t->rank] = t->in->local_nonfinite;
    comm_ctl_all_reduce_f64(t->comm, bad, N + 2, REDOP_SUM);
    sumsq = bad[0];
    reduced_bad = bad[1] != 0;
  } else if (reduced_bad) { /* every rank holds the same reduced grads: all see it, all join */
    bad[2 + t->rank] = t->in->local_nonfinite;
    comm_ctl_all_reduce_f64(t->comm, bad, N + 2, REDOP_SUM);
  }
  int fp16 = t->wdt == DT_F16;
  if (fp16 && (sharded || reduced_bad)) /* the flags of the overflow check ride this all-reduce */
    t->in->overflow_ctl_bytes += comm_model_sent(CO_ALL_REDUCE, N + 2, DT_F64, N, t->rank, 0);
  if (t->tp_comm && fp16) { /* fp16: an overflow in one TP rank's slices must skip the step on all of them */
    sumsq = t->cfg->transform->grad_sumsq(t, reduced_bad ? INFINITY : sumsq);
    reduced_bad = !isfinite(sumsq);
  } else if (t->tp_comm && !reduced_bad) sumsq = t->cfg->transform->grad_sumsq(t, sumsq); /* --tp: the whole model's */
  const schedule_t *sc = t->cfg->sched;
  if (sc && sc->grad_sumsq) { /* a pipeline: every stage's part summed; a NaN or an overflow anywhere skips all */
    sumsq = sc->grad_sumsq(t, reduced_bad ? INFINITY : sumsq);
    reduced_bad = !isfinite(sumsq);
  }
  int nbad = 0;
  char ranks[256] = "";
  for (int r = 0; r < N; r++)
    if (bad[2 + r] != 0) {
      size_t len = strlen(ranks);
      if (len < sizeof ranks - 16) snprintf(ranks + len, sizeof ranks - len, "%s%d", nbad ? "," : "", r);
      nbad++;
    }
  free(bad);
  t->skipped = 0;
  if ((reduced_bad || nbad > 0) && fp16) { /* the loss scaler's overflow: skip, back off (train_loop) */
    t->grad_norm = NAN;
    if (t->rank == 0 && !t->cfg->quiet)
      printf("step %d: gradient overflow (inf/NaN) at loss scale %g: step skipped on every rank\n", t->step,
             (double)t->in->scaler.scale);
    t->skipped = 1;
    return 0.0f;
  }
  if (reduced_bad || nbad > 0) {
    t->grad_norm = NAN;
    char where[320];
    if (nbad > 0)
      snprintf(where, sizeof where, "on rank%s %s (local gradients, before the reduction)", nbad > 1 ? "s" : "", ranks);
    else
      snprintf(where, sizeof where, "in the reduced gradients (no rank's local gradients were flagged)");
    if (t->cfg->nonfinite == NONFINITE_ABORT) {
      if (t->rank == 0)
        die("error: step %d: non-finite gradient %s; stopping (--nonfinite skip drops such steps)", t->step, where);
      comm_barrier(t->comm); /* rank 0 takes the job down */
      die_on_rank("step %d: non-finite gradient", t->step);
    }
    if (t->rank == 0)
      fprintf(stderr, "warning: step %d: non-finite gradient %s; step skipped on every rank (--nonfinite skip)\n",
              t->step, where);
    t->skipped = 1;
    return 0.0f;
  }
  if (fp16) { /* the gradients are S times the true ones: unscale the norm, and the update (gscale) */
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

void trainer_report_extra(trainer_t *t, const char *key, double value) {
  struct train_internal *in = t->in;
  for (int i = 0; i < in->nextras; i++)
    if (strcmp(in->extras[i].key, key) == 0) {
      in->extras[i].value = value;
      return;
    }
  if (in->nextras >= TRAIN_MAX_EXTRAS) die_on_rank("trainer_report_extra: more than %d extras", TRAIN_MAX_EXTRAS);
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

/* ---- the activations ----------------------------------------------------------------------- */

int64_t trainer_pa_slice_numel(const trainer_t *t, int u) {
  const model_transform_t *xf = t->cfg->transform;
  if (!t->cfg->pa || !t->tp_comm || t->cfg->sched || u >= t->model.n_units - 1 || !xf->pa_slice) return 0;
  return xf->pa_slice(t, u);
}

/* --pa: what alloc_acts keeps for the checkpoints (outputs, working buffers, the shared saved
 * buffer), in bytes, from the shapes alone (fp32; s_u = ceil(b·y_numel_u / T) for a partitioned u):
 *   Σ_u (s_u if partitioned, else b·y_numel_u)  +  2 · T · max_u s_u  +  b · max_u saved_numel_u */
static int64_t pa_acts_formula(const trainer_t *t) {
  const model_t *m = &t->model;
  int64_t b = t->local_batch, outs = 0, smax = 0;
  for (int u = 0; u < m->n_units; u++) {
    int64_t su = trainer_pa_slice_numel(t, u);
    outs += su ? su : b * m->units[u].y_numel;
    if (su > smax) smax = su;
  }
  return 4 * (outs + 2 * comm_world(t->tp_comm) * smax + b * model_max_saved_numel(m));
}

/* A new slot of chunk c: its input, and its units' outputs and saved activations (LEDGER_ACTS). */
static void slot_alloc(trainer_t *t, int c, act_slot_t *sl) {
  const model_t *m = &t->model;
  const train_chunk_t *ch = &t->chunks[c];
  int64_t b = t->local_batch;
  int n = ch->u1 - ch->u0, U = m->n_units;
  sl->in = tensor_alloc(ch->first ? "input" : "stage input", LEDGER_ACTS, DT_F32, t->dev, b * t->in->pools[c].in_numel);
  sl->out = xcalloc((size_t)n, sizeof(tensor_t), "unit outputs");
  sl->saved = xcalloc((size_t)n, sizeof(tensor_t), "unit saved activations");
  for (int i = 0; i < n; i++) {
    int u = ch->u0 + i;
    int64_t slice = trainer_pa_slice_numel(t, u); /* --pa: 1/T of a replicated output, else 0: all of it */
    if (slice) sl->out[i] = tensor_alloc("unit output (1/T slice, Pa)", LEDGER_ACTS, DT_F32, t->dev, slice);
    else sl->out[i] = tensor_alloc(u == U - 1 ? "logits" : "unit output", LEDGER_ACTS, DT_F32, t->dev, b * m->units[u].y_numel);
    if (!t->cfg->recompute) sl->saved[i] = tensor_alloc("saved", LEDGER_ACTS, DT_F32, t->dev, b * m->units[u].saved_numel);
  }
  sl->micro = -1;
}

static void slot_free(trainer_t *t, int c, act_slot_t *sl) {
  int n = t->chunks[c].u1 - t->chunks[c].u0;
  tensor_free(&sl->in);
  for (int i = 0; i < n; i++) {
    tensor_free(&sl->out[i]);
    tensor_free(&sl->saved[i]);
  }
  free(sl->out);
  free(sl->saved);
}

/* The pools (without a schedule: its one slot now) and the buffers beside them. */
static void alloc_acts(trainer_t *t) {
  struct train_internal *in = t->in;
  const model_t *m = &t->model;
  int64_t b = t->local_batch, work = 0, maxy = 0, maxs = 0;
  int last = 0, T = t->tp_comm ? comm_world(t->tp_comm) : 1;
  in->pa = t->cfg->pa && t->tp_comm && !t->cfg->sched;
  in->pools = xcalloc((size_t)t->n_chunks, sizeof *in->pools, "activation pools");
  for (int c = 0; c < t->n_chunks; c++) {
    const train_chunk_t *ch = &t->chunks[c];
    act_pool_t *p = &in->pools[c];
    p->in_numel = ch->first ? m->in_numel : m->units[ch->u0 - 1].y_numel;
    int64_t per = p->in_numel;
    for (int u = ch->u0; u < ch->u1; u++) {
      const unit_t *un = &m->units[u];
      if (un->y_numel > maxy) maxy = un->y_numel;
      if (un->saved_numel > maxs) maxs = un->saved_numel;
      per += un->y_numel + (t->cfg->recompute ? 0 : un->saved_numel);
      int64_t slice = trainer_pa_slice_numel(t, u);
      if (T * slice > work) work = T * slice;
    }
    p->slot_bytes = 4 * b * per;
    p->slots = xcalloc((size_t)t->n_micro, sizeof *p->slots, "activation slots");
    last |= ch->last;
  }
  int64_t before = ledger_live(LEDGER_ACTS);
  if (!t->cfg->sched) { /* the loop's own list: one micro-batch in flight, its slot now */
    slot_alloc(t, 0, &in->pools[0].slots[0]);
    in->pools[0].n_slots = 1;
  }
  if (t->cfg->recompute) in->saved_rc = tensor_alloc("saved (recompute)", LEDGER_ACTS, DT_F32, t->dev, b * maxs);
  if (in->pa) /* the whole outputs: unit u writes work[u % 2] while it reads work[(u − 1) % 2] */
    for (int k = 0; k < 2; k++) in->work[k] = tensor_alloc("unit output (Pa working)", LEDGER_ACTS, DT_F32, t->dev, work);
  in->acts_kept = ledger_live(LEDGER_ACTS) - before; /* outputs, saved, working buffers: not the input */
  if (!t->cfg->sched) in->acts_kept -= tensor_nbytes(&in->pools[0].slots[0].in);
  if (last) in->y = tensor_alloc("targets", LEDGER_ACTS, DT_F32, t->dev, b * m->rows); /* 4-byte ints */
  in->dy[0] = tensor_alloc("dy", LEDGER_ACTS, DT_F32, t->dev, b * maxy);
  in->dy[1] = tensor_alloc("dy", LEDGER_ACTS, DT_F32, t->dev, b * maxy);
  in->ws_bytes = tensor_nbytes(&in->y) + tensor_nbytes(&in->saved_rc) + 2 * tensor_nbytes(&in->dy[0]);
  if (t->dev != DEV_CPU && !t->cfg->sched) {
    in->xh = xmalloc((size_t)(b * m->in_numel) * 4, "input staging");
    in->yh = xmalloc((size_t)(b * m->rows) * sizeof(int), "target staging");
  }
}

static void free_acts(trainer_t *t) {
  struct train_internal *in = t->in;
  if (!in->pools) return;
  for (int c = 0; c < t->n_chunks; c++) {
    for (int i = 0; i < in->pools[c].n_slots; i++) slot_free(t, c, &in->pools[c].slots[i]);
    free(in->pools[c].slots);
  }
  free(in->pools);
  tensor_free(&in->saved_rc);
  tensor_free(&in->work[0]);
  tensor_free(&in->work[1]);
  tensor_free(&in->y);
  tensor_free(&in->dy[0]);
  tensor_free(&in->dy[1]);
  free(in->xh);
  free(in->yh);
}

/* A free slot of chunk c for micro-batch k: the pool grows by one when every slot is in use. */
static act_slot_t *slot_take(trainer_t *t, int c, int k) {
  struct train_internal *in = t->in;
  act_pool_t *p = &in->pools[c];
  act_slot_t *sl = NULL;
  for (int i = 0; i < p->n_slots && !sl; i++)
    if (p->slots[i].micro < 0) sl = &p->slots[i];
  if (!sl) { /* more in flight than ever before (the ledger sees it) */
    if (p->n_slots >= t->n_micro) die_on_rank("more than %d micro-batches in flight on chunk %d", t->n_micro, c);
    sl = &p->slots[p->n_slots++];
    slot_alloc(t, c, sl);
  }
  sl->micro = k;
  if (++in->in_flight > in->peak_in_flight) in->peak_in_flight = in->in_flight;
  return sl;
}

static act_slot_t *slot_of(trainer_t *t, int c, int k) {
  act_pool_t *p = &t->in->pools[c];
  for (int i = 0; i < p->n_slots; i++)
    if (p->slots[i].micro == k) return &p->slots[i];
  die_on_rank("backward of micro-batch %d on chunk %d before its forward (a schedule's bug)", k, c);
}

/* After micro-batch k's backward: its slot is free again, once the schedule's sends out of it left. */
static void slot_give_back(trainer_t *t, int c, act_slot_t *sl) {
  const schedule_t *sc = t->cfg->sched;
  if (sc && sc->release) sc->release(t, c, sl->micro);
  sl->micro = -1;
  t->in->in_flight--;
}

int trainer_slots(const trainer_t *t, int c) { return t->in->pools[c].n_slots; }
int64_t trainer_slot_bytes(const trainer_t *t, int c) { return t->in->pools[c].slot_bytes; }
int trainer_peak_in_flight(const trainer_t *t) { return t->in->peak_in_flight; }
int64_t trainer_acts_workspace(const trainer_t *t) { return t->in->ws_bytes; }

void trainer_load_micro(trainer_t *t, int k, int m, int slice, int nslices, void *x, int *y) {
  int64_t B = t->cfg->batch, mb = B / m, b = mb / nslices;
  int64_t first = (int64_t)t->step * B + (int64_t)k * mb + (int64_t)slice * b;
  int poison = k == 0 && x && !t->model.in_is_tokens; /* --fault R:S:nan poisons a feature of micro-batch 0 */
  int64_t xn = b * t->model.in_numel, yn = b * t->model.rows;
  /* data_batch writes both: host buffers for what is not a CPU destination */
  void *xh = x && t->dev == DEV_CPU ? x : xmalloc((size_t)xn * 4 + 4, "input staging");
  int *yh = y && t->dev == DEV_CPU ? y : xmalloc((size_t)yn * sizeof(int) + 4, "target staging");
  data_batch(&t->data, first, (int)b, xh, yh);
  if (poison) fault_poison(comm_rank(t->world_comm), t->step, xh);
  if (x && t->dev != DEV_CPU) dev_memcpy(t->dev, x, DEV_CPU, xh, (size_t)xn * 4);
  if (y && t->dev != DEV_CPU) dev_memcpy(t->dev, y, DEV_CPU, yh, (size_t)yn * sizeof(int));
  if (xh != x) free(xh);
  if (yh != y) free(yh);
}

double trainer_loss(trainer_t *t, int b, const float *logits, const int *targets, float *dlogits) {
  const model_t *m = &t->model;
  /* fp16: the loss is multiplied by the loss scale S before the backward (its gradient is) */
  double S = t->wdt == DT_F16 ? (double)t->in->scaler.scale : 1.0;
  float scale = (float)(S / ((double)t->cfg->batch * m->rows));
  double loss = m->fns->loss ? m->fns->loss(m, b, logits, targets, dlogits, scale) /* the model's own (vocab-parallel) */
                             : op_softmax_xent(t->dev, dlogits, logits, targets, b * m->rows, m->classes, scale);
  if (!isfinite(loss)) t->in->local_nonfinite = 1;
  return loss;
}

void trainer_check_grads(trainer_t *t, int u) {
  /* CPU only: on a GPU the host read would stall the stream; there the loss stands in. */
  if (t->dev == DEV_CPU && !t->in->local_nonfinite)
    t->in->local_nonfinite = !isfinite(op_sumsq(t->dev, t->unit_grads[u], t->wdt, t->model.units[u].numel));
  if (t->tp_comm && t->cfg->transform->after_backward) t->cfg->transform->after_backward(t, u); /* --tp: for the norm */
}

/* Where unit u's whole output is during the micro-batch: the slot's out, or with --pa for a
 * partitioned output its working buffer (out holds only this rank's slice). */
static float *unit_y(trainer_t *t, const act_slot_t *sl, int c, int u) {
  struct train_internal *in = t->in;
  return (in->pa && trainer_pa_slice_numel(t, u) ? in->work[u % 2] : sl->out[u - t->chunks[c].u0]).data;
}

/* Unit u's buffers in slot sl of chunk c (dy, dx and grads are set by the backward). */
static unit_io_t unit_io(trainer_t *t, const act_slot_t *sl, int c, int u) {
  return (unit_io_t){.dev = t->dev, .wdt = t->wdt, .B = (int)t->local_batch, .params = t->unit_params[u],
                     .x = u == t->chunks[c].u0 ? sl->in.data : unit_y(t, sl, c, u - 1), .y = unit_y(t, sl, c, u),
                     .saved = t->cfg->recompute ? t->in->saved_rc.data : sl->saved[u - t->chunks[c].u0].data};
}

/* --pa, after unit u's forward: the transform keeps this rank's slice of its whole output. */
static void pa_keep(trainer_t *t, const act_slot_t *sl, int u) {
  if (trainer_pa_slice_numel(t, u)) t->cfg->transform->pa_keep(t, u, unit_y(t, sl, 0, u), sl->out[u].data);
}

/* --pa, before the backward of unit u+1 (its recompute and its backward read x = unit u's output):
 * the whole output back from the slices (the transform's all-gather over the TP group): it moves
 * bytes and adds nothing, so the backward sees the bits the forward produced. */
static void pa_gather(trainer_t *t, const act_slot_t *sl, int u) {
  if (!trainer_pa_slice_numel(t, u)) return;
  char name[32];
  snprintf(name, sizeof name, "pa gather %d", u);
  trace_begin(name);
  t->cfg->transform->pa_gather(t, u, sl->out[u].data, unit_y(t, sl, 0, u));
  trace_end(NULL);
}

/* ---- one operation: the forward or the backward of a micro-batch over a chunk -------------- */

/* A schedule's F/B block on the trace (plot_pipeline.py draws them): "F k", or "F k.c" with
 * several chunks per rank; the units' own events lie inside. */
static void op_event(const trainer_t *t, const train_op_t *op, double t0) {
  char name[32];
  if (t->n_chunks > 1) snprintf(name, sizeof name, "%c %d.%d", op->kind, op->micro, op->chunk);
  else snprintf(name, sizeof name, "%c %d", op->kind, op->micro);
  trace_event(TRACE_COMPUTE, name, t0, trace_now_us(), NULL);
}

/* F k over chunk c: the input (the data, or the previous stage's output), the units forward
 * with the strategy's hooks, the output on to the next stage. Returns the compute time (µs, with
 * a schedule; the wait for the input is idle, not busy). */
static double op_forward(trainer_t *t, const train_op_t *op) {
  struct train_internal *in = t->in;
  const schedule_t *sc = t->cfg->sched;
  const strategy_t *s = t->strategy;
  const train_chunk_t *ch = &t->chunks[op->chunk];
  int k = op->micro;
  char name[32];
  act_slot_t *sl = slot_take(t, op->chunk, k);
  if (!ch->first) sc->recv_forward(t, op->chunk, k, sl->in.data);
  else /* the loop's own chunk scores here too: its targets come with the inputs */
    trainer_load_micro(t, k, t->n_micro, t->rank, t->world, sl->in.data, ch->last && !sc ? (int *)in->y.data : NULL);
  double t0 = trace_now_us();
  for (int u = ch->u0; u < ch->u1; u++, t->use++) {
    if (s->pre_forward) s->pre_forward(t, u);
    snprintf(name, sizeof name, "fwd %d", u);
    trace_begin(name);
    unit_io_t io = unit_io(t, sl, op->chunk, u);
    model_forward(&t->model, u, &io);
    if (in->pa) pa_keep(t, sl, u); /* --pa: this rank's 1/T of a replicated output */
    trace_end(NULL);
    if (s->post_forward) s->post_forward(t, u);
  }
  if (!sc) return 0;
  dev_sync(t->dev);
  double busy = trace_now_us() - t0;
  op_event(t, op, t0);
  if (!ch->last) sc->send_forward(t, op->chunk, k, sl->out[ch->u1 - 1 - ch->u0].data);
  return busy;
}

/* B k over chunk c: the gradient of the output (the loss on the last chunk, added to *loss; else
 * from the next stage), the units backward in reverse with the strategy's hooks, the gradient of
 * the input back to the previous stage. Gradients are written with beta: micro-batch 0
 * overwrites, later ones accumulate (the strategy's pre_backward may choose otherwise). */
static double op_backward(trainer_t *t, const train_op_t *op, double *loss) {
  struct train_internal *in = t->in;
  const schedule_t *sc = t->cfg->sched;
  const strategy_t *s = t->strategy;
  const model_t *m = &t->model;
  const train_chunk_t *ch = &t->chunks[op->chunk];
  int k = op->micro;
  char name[32];
  act_slot_t *sl = slot_of(t, op->chunk, k);
  float *dy = in->dy[0].data, *dyp = in->dy[1].data;
  double t0 = trace_now_us();
  if (ch->last) { /* mean over the GLOBAL batch's loss rows (scale 1/(B·rows)): summing the ranks'
                   * gradients is then the mean gradient. A schedule's loss is its stage's work. */
    if (sc) trainer_load_micro(t, k, t->n_micro, t->rank, t->world, NULL, (int *)in->y.data);
    TRAINER_PHASE("loss", *loss += trainer_loss(t, (int)t->local_batch, sl->out[ch->u1 - 1 - ch->u0].data,
                                                (const int *)in->y.data, dy));
  } else {
    sc->recv_backward(t, op->chunk, k, dy);
    t0 = trace_now_us();
  }
  float *dx_out = ch->first ? NULL : sc->dx_buffer(t, op->chunk, k); /* the model's unit 0 has no dx */
  for (int u = ch->u1 - 1; u >= ch->u0; u--, t->use++) {
    t->grad_beta = k == 0 ? 0.0f : 1.0f; /* the strategy's pre_backward may change it */
    if (s->pre_backward) s->pre_backward(t, u);
    if (in->pa && u > 0) pa_gather(t, sl, u - 1); /* --pa: the input, whole again (into its working buffer) */
    unit_io_t io = unit_io(t, sl, op->chunk, u);
    if (t->cfg->recompute && m->units[u].saved_numel > 0) { /* rerun the forward: same inputs, same bits */
      snprintf(name, sizeof name, "recompute %d", u);
      trace_begin(name);
      model_forward(m, u, &io);
      trace_end(NULL);
    }
    snprintf(name, sizeof name, "bwd %d", u);
    trace_begin(name);
    io.grads = t->unit_grads[u];
    io.beta = t->grad_beta;
    io.dy = dy;
    io.dx = u > ch->u0 ? dyp : dx_out;
    model_backward(m, u, &io);
    trace_end(NULL);
    trainer_check_grads(t, u); /* this rank's own gradients, before any reduction: a NaN/Inf of ours? */
    if (s->post_backward) s->post_backward(t, u);
    float *tmp = dy;
    dy = dyp;
    dyp = tmp;
  }
  double busy = 0;
  if (sc) {
    dev_sync(t->dev);
    busy = trace_now_us() - t0;
    op_event(t, op, t0);
    if (!ch->first) sc->send_backward(t, op->chunk, k, dx_out);
  }
  slot_give_back(t, op->chunk, sl);
  return busy;
}

/* One step's operations in order; returns this rank's local loss sum (0 without the last chunk). */
static double run_ops(trainer_t *t) {
  const schedule_t *sc = t->cfg->sched;
  double loss = 0, busy = 0, t0 = trace_now_us();
  t->uses = t->in->step_uses;
  t->n_uses = t->in->n_step_uses;
  t->use = 0;
  for (int i = 0; i < t->n_ops; i++) {
    const train_op_t *op = &t->ops[i];
    t->micro = op->micro;
    t->last_micro = op->micro == t->n_micro - 1; /* DDP all-reduces only now (no_sync before) */
    busy += op->kind == 'F' ? op_forward(t, op) : op_backward(t, op, &loss);
  }
  if (sc) sc->step_end(t, busy, t0);
  return loss;
}

/* The pre hooks' order of a step (the operations' units: forwards in order, backwards in
 * reverse) and of a forward-only pass (every unit once), for train_use_t. */
static void build_uses(trainer_t *t) {
  struct train_internal *in = t->in;
  int n = 0, U = t->model.n_units;
  for (int i = 0; i < t->n_ops; i++) n += t->chunks[t->ops[i].chunk].u1 - t->chunks[t->ops[i].chunk].u0;
  in->step_uses = xcalloc((size_t)n + 1, sizeof *in->step_uses, "unit uses");
  t->n_uses = 0;
  for (int i = 0; i < t->n_ops; i++) {
    const train_chunk_t *ch = &t->chunks[t->ops[i].chunk];
    for (int j = 0; j < ch->u1 - ch->u0; j++)
      in->step_uses[t->n_uses++] = (train_use_t){t->ops[i].kind == 'F' ? ch->u0 + j : ch->u1 - 1 - j, t->ops[i].kind};
  }
  in->n_step_uses = t->n_uses;
  in->fwd_uses = xcalloc((size_t)U, sizeof *in->fwd_uses, "forward uses");
  for (int u = 0; u < U; u++) in->fwd_uses[u] = (train_use_t){u, 'F'};
  t->uses = in->step_uses;
}

/* Without a schedule: one chunk of every unit, F k B k for each of the --accum micro-batches. */
static void own_schedule(trainer_t *t) {
  struct train_internal *in = t->in;
  int A = t->cfg->accum;
  t->n_micro = A;
  in->whole_chunk = (train_chunk_t){.u0 = 0, .u1 = t->model.n_units, .first = 1, .last = 1};
  t->chunks = &in->whole_chunk;
  t->n_chunks = 1;
  in->own_ops = xcalloc(2 * (size_t)A, sizeof *in->own_ops, "the loop's operations");
  for (int k = 0; k < A; k++) {
    in->own_ops[2 * k] = (train_op_t){'F', k, 0};
    in->own_ops[2 * k + 1] = (train_op_t){'B', k, 0};
  }
  t->ops = in->own_ops;
  t->n_ops = 2 * A;
}

void trainer_keep_units(trainer_t *t, const char *here) {
  struct train_internal *in = t->in;
  model_t *m = &t->model;
  in->whole = *m;
  in->whole.units = xmalloc((size_t)m->n_units * sizeof(unit_t), "whole model units");
  memcpy(in->whole.units, m->units, (size_t)m->n_units * sizeof(unit_t));
  for (int u = 0; u < m->n_units; u++)
    if (!here[u]) m->units[u].numel = 0;
  model_layout(m);
  t->whole = &in->whole;
}

int trainer_prints(const trainer_t *t) { return t->model_rank == 0 && !t->cfg->quiet; }

/* ---- --model gpt: validation loss and sampling (forward only, through the strategy's hooks, so
 * ZeRO-3 gathers each unit as in training; every rank runs them, in step) ------------------ */

/* Validation loss: --eval-batches global batches of the validation split, each split over the
 * ranks and micro-batches exactly as load_batch splits a training batch; the mean over all
 * their tokens. Collective. */
/* The forward of B samples through every unit with the strategy's forward hooks (so ZeRO-3
 * gathers), no backward: the evaluation and --sample. */
static void forward_only(trainer_t *t, int B) {
  const strategy_t *s = t->strategy;
  const act_slot_t *sl = &t->in->pools[0].slots[0]; /* the loop's own chunk (no schedule: train_flags.c) */
  t->uses = t->in->fwd_uses;
  t->n_uses = t->model.n_units;
  t->use = 0;
  for (int u = 0; u < t->model.n_units; u++, t->use++) {
    if (s->pre_forward) s->pre_forward(t, u);
    unit_io_t io = unit_io(t, sl, 0, u);
    io.B = B;
    model_forward(&t->model, u, &io);
    if (s->post_forward) s->post_forward(t, u);
  }
  t->uses = t->in->step_uses; /* the next step's */
  t->n_uses = t->in->n_step_uses;
}

static double evaluate(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  const model_t *m = &t->model;
  int64_t B = cfg->batch, b = t->local_batch, mb = B / cfg->accum;
  int U = m->n_units;
  const act_slot_t *sl = &in->pools[0].slots[0];
  double sum = 0;
  trace_begin("eval");
  for (int e = 0; e < cfg->eval_batches; e++)
    for (int k = 0; k < cfg->accum; k++) {
      int64_t first = (int64_t)e * B + (int64_t)k * mb + (int64_t)t->rank * b;
      int *x = t->dev == DEV_CPU ? sl->in.data : in->xh, *y = t->dev == DEV_CPU ? in->y.data : in->yh;
      data_val_batch(&t->data, first, (int)b, x, y);
      if (t->dev != DEV_CPU) {
        dev_memcpy(t->dev, sl->in.data, DEV_CPU, x, (size_t)(b * m->in_numel) * 4);
        dev_memcpy(t->dev, in->y.data, DEV_CPU, y, (size_t)(b * m->rows) * sizeof(int));
      }
      forward_only(t, (int)b);
      sum += op_softmax_xent(t->dev, in->dy[0].data, sl->out[U - 1].data, (const int *)in->y.data,
                             (int)(b * m->rows), m->classes, 1.0f);
    }
  comm_ctl_all_reduce_f64(t->comm, &sum, 1, REDOP_SUM); /* control traffic */
  trace_end(NULL);
  return sum / ((double)cfg->eval_batches * (double)B * m->rows);
}

static void eval_record(trainer_t *t, int step) {
  struct train_internal *in = t->in;
  double v = evaluate(t);
  in->evals = realloc(in->evals, sizeof(report_eval_t) * (size_t)(in->nevals + 1));
  if (!in->evals) die_on_rank("out of host memory for the evaluations");
  in->evals[in->nevals++] = (report_eval_t){.step = step, .val_loss = v};
  if (t->rank == 0 && !t->cfg->quiet) {
    printf("step %5d  val loss %.6f  (%d validation batches; uniform over 256 bytes: %.4f)\n", step, v,
           t->cfg->eval_batches, log(256.0));
    fflush(stdout);
  }
}

/* --sample N: N bytes generated from a newline, one forward of ONE sequence per byte (the last
 * seq_len bytes as context), each byte drawn from softmax(logits / temperature) with
 * rng_uniform(seed, stream 0x3000, k) (greedy at temperature 0). Every rank computes the same
 * bytes (ZeRO-3 gathers are collective); rank 0 prints them. */
static void sample_text(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  const model_t *m = &t->model;
  int T = m->rows, V = m->classes, U = m->n_units, N = cfg->sample, len = 1;
  const act_slot_t *sl = &in->pools[0].slots[0];
  int *ctx = xcalloc((size_t)T, sizeof(int), "sample context");
  float *row = xmalloc((size_t)V * sizeof(float), "sample logits");
  char *text = xcalloc((size_t)N + 1, 1, "sample text");
  ctx[0] = '\n';
  trace_begin("sample");
  for (int k = 0; k < N; k++) {
    dev_memcpy(t->dev, sl->in.data, DEV_CPU, ctx, (size_t)T * sizeof(int));
    forward_only(t, 1); /* one sequence: positions >= len are padding the causal mask keeps out */
    dev_memcpy(DEV_CPU, row, t->dev, (float *)sl->out[U - 1].data + (int64_t)(len - 1) * V, (size_t)V * sizeof(float));
    int next = 0;
    for (int v = 1; v < V; v++)
      if (row[v] > row[next]) next = v;
    if (cfg->temperature > 0) { /* inverse CDF of softmax(row / temperature), in double */
      double mx = row[next], z = 0, cdf = 0, r = rng_uniform(cfg->seed, 0x3000, (uint64_t)k);
      for (int v = 0; v < V; v++) z += exp((row[v] - mx) / cfg->temperature);
      for (int v = 0; v < V; v++) {
        cdf += exp((row[v] - mx) / cfg->temperature) / z;
        if (r < cdf) { next = v; break; }
      }
    }
    text[k] = (char)((next >= 32 && next < 127) || next == '\n' || next == '\t' ? next : '?');
    if (len < T) ctx[len++] = next;
    else {
      memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int));
      ctx[T - 1] = next;
    }
  }
  trace_end(NULL);
  if (t->rank == 0) {
    printf("sample (%d bytes, temperature %g, seed %llu; bytes outside printable ASCII shown as ?):\n%s\n", N,
           cfg->temperature, (unsigned long long)cfg->seed, text);
    fflush(stdout);
  }
  free(ctx);
  free(row);
  free(text);
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

/* Activation bytes the loop keeps (every unit's output and saved buffers, and --pa's working
 * buffers, as the ledger counted them in alloc_acts) beside gpt.h's formula: "acts_saved_bytes",
 * "acts_formula_bytes"; with --pa the ledger's growth beside pa_acts_formula: "pa_acts_bytes",
 * "pa_acts_formula_bytes". */
static void report_acts(trainer_t *t) {
  struct train_internal *in = t->in;
  const act_slot_t *sl = &in->pools[0].slots[0]; /* the loop's own chunk: every unit */
  int64_t kept = tensor_nbytes(&in->work[0]) + tensor_nbytes(&in->work[1]) + tensor_nbytes(&in->saved_rc);
  for (int u = 0; u < t->model.n_units; u++) kept += tensor_nbytes(&sl->out[u]) + tensor_nbytes(&sl->saved[u]);
  trainer_report_extra(t, "acts_saved_bytes", (double)kept);
  if (in->pa) { /* the ledger's count beside the formula from the shapes (pa_acts_formula) */
    trainer_report_extra(t, "pa_acts_bytes", (double)in->acts_kept);
    trainer_report_extra(t, "pa_acts_formula_bytes", (double)pa_acts_formula(t));
  }
  if (t->model.fns == &model_gpt_fns)
    trainer_report_extra(t, "acts_formula_bytes", (double)gpt_acts_bytes(t->model.gpt, t->local_batch, t->cfg->recompute));
}

static int log_step(const train_cfg_t *c, int step) {
  if (c->quiet) return 0;
  if (step == 0 || step == c->steps - 1) return 1;
  return c->log_every > 0 && step % c->log_every == 0;
}

/* ---- the loop: what train.h's diagram shows, and nothing else ------------------------------ */

/* Steps [start, cfg->steps): the step's operations (forwards, losses, backwards with the hooks),
 * then the strategy's step; the loss of each step into in->steps, a checkpoint when one is due.
 * *taken counts applied optimizer steps (AdamW's t), *skipped the steps --nonfinite skip dropped. */
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
    fault_at_step(comm_rank(t->world_comm), step); /* --fault R:S:exit|abort|kill|hang (a testing aid) */
    in->local_nonfinite = 0;
    double loss_sum = run_ops(t);
    t->opt_t = *taken + 1;
    t->skipped = 0;
    double scale_used = in->scaler.scale;
    t->strategy->step(t);
    if (cfg->sched && cfg->sched->report && step == cfg->steps - 1) cfg->sched->report(t); /* its lines */
    if (t->wdt == DT_F16) scaler_update(&in->scaler, t->skipped); /* same flag on every rank */
    dev_sync(t->dev);
    trace_end(NULL);
    double ms = (trace_now_us() - t0) / 1000.0;
    if (!t->skipped) (*taken)++;
    else (*skipped)++;
    comm_ctl_all_reduce_f64(t->model_comm, &loss_sum, 1, REDOP_SUM); /* every stage's: control traffic */
    in->steps[step] = (report_step_t){.loss = loss_sum / ((double)cfg->batch * t->model.rows), .ms = ms,
                                      .loss_scale = t->wdt == DT_F16 ? scale_used : 0};
    if (in->check_master) check_master_bits(t);
    if (log && log_step(cfg, step)) {
      if (t->wdt == DT_F16)
        printf("step %5d  loss %.6f  %8.2f ms  scale %g%s\n", step, in->steps[step].loss, ms, scale_used,
               t->skipped ? "  (skipped)" : "");
      else
        printf("step %5d  loss %.6f  %8.2f ms%s\n", step, in->steps[step].loss, ms, t->skipped ? "  (skipped)" : "");
      fflush(stdout);
    }
    if (cfg->eval_every > 0 && ((step + 1) % cfg->eval_every == 0 || step == cfg->steps - 1)) eval_record(t, step + 1);
    if (ckpt_due(cfg, step))
      ckpt_save(t, cfg->ckpt, step + 1, *taken, *skipped, in->steps, t->wdt == DT_F16 ? &in->scaler : NULL);
  }
  comm_wait_all(t->comm);
}

/* ---- the launcher: communicator, model, states, resume; then results and teardown --------- */

static void print_header(const trainer_t *t, const char *chapter) {
  const train_cfg_t *cfg = t->cfg;
  const model_t *m = &t->model;
  printf("ch%s: %s on %d rank%s (%s, %s backend, %s collectives), %s, %s\n", chapter, t->name, t->world,
         t->world > 1 ? "s" : "", device_name(t->dev), comm_backend_name(t->comm),
         cfg->collectives == COLL_RING ? "ring" : "vendor", dtype_precision(cfg->wdt),
         cfg->optimizer == OPT_ADAMW ? "adamw" : "sgd");
  /* A schedule (a pipeline) cuts the batch itself, in its setup after this line: its own line gives
   * the micro-batch, so the loop's per-rank view is not printed for it. */
  char per_rank[96];
  if (cfg->sched) snprintf(per_rank, sizeof per_rank, "micro-batches: the pipeline line below");
  else snprintf(per_rank, sizeof per_rank, "%lld per rank per micro-batch, accum %d", (long long)t->local_batch, cfg->accum);
  if (strcmp(m->fns->name, "gpt") == 0) /* --tp: the split GPT has its own table */
    printf("model: gpt, %d layers, %d heads, n_embd %d, seq_len %d, vocab %d: %d units, psi = %lld params; text %s; "
           "global batch %lld sequences = %lld tokens per step (%s), %d steps\n",
           m->gpt.n_layer, m->gpt.n_head, m->gpt.n_embd, m->gpt.seq_len, m->gpt.vocab, m->n_units, (long long)m->numel,
           cfg->data, (long long)cfg->batch, (long long)cfg->batch * m->rows, per_rank, cfg->steps);
  else
    printf("model: D=%d, %d hidden layers of %d, C=%d: %d units, psi = %lld params; global batch %lld (%s), %d steps\n",
           m->D, m->L, m->H, m->C, m->n_units, (long long)m->numel, (long long)cfg->batch, per_rank, cfg->steps);
  fflush(stdout);
}

/* Results (the full fp32 weights on rank 0: fingerprint, --save-params; the report, the trace),
 * then every buffer freed. The model states belong to the strategy (train.h); the trainer
 * frees what it allocated itself: activations, its tables, the model and the data. */
static void train_finish(trainer_t *t, const char *chapter, int skipped) {
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  const strategy_t *s = t->strategy;
  int rank = t->model_rank; /* where the export lands: rank 0 of the model's ranks */
  float *full = rank == 0 ? xmalloc((size_t)t->whole->numel * sizeof(float), "exported params") : NULL;
  ckpt_export_weights(t, full); /* through the strategy's layout hook */
  int64_t full_numel = t->whole->numel;
  if (t->tp_comm) { /* --tp: this TP rank's part -> the whole model on world rank 0 (the transform's) */
    float *whole = cfg->transform->unsplit(t->whole, full, rank == 0, &full_numel);
    free(full);
    full = whole;
  }
  if (full && cfg->save_params) {
    report_write_output("--save-params", cfg->save_params, (const char *)full, full_numel * (int64_t)sizeof(float));
    struct stat sb; /* beside it, PATH.safetensors with GPT-2's names (export.h); not beside /dev/null */
    if (strcmp(cfg->model_kind, "gpt") == 0 && stat(cfg->save_params, &sb) == 0 && S_ISREG(sb.st_mode)) {
      char st[1200];
      snprintf(st, sizeof st, "%s.safetensors", cfg->save_params);
      export_model_t em = {.gpt = 1, .g = cfg->gpt};
      if (export_numel(&em) != full_numel) die("rank 0: --save-params: %lld weights, the GPT's shape has %lld",
                                               (long long)full_numel, (long long)export_numel(&em));
      char shape[96];
      snprintf(shape, sizeof shape, "%d %d %d %d %d", cfg->gpt.n_layer, cfg->gpt.n_head, cfg->gpt.n_embd,
               cfg->gpt.seq_len, cfg->gpt.vocab);
      const char *meta[] = {"zerolab_model", "gpt", "zerolab_shape", shape, "zerolab_strategy", t->name, NULL};
      export_safetensors("--save-params", st, &em, full, meta);
    }
  }
  if (in->check_master && rank == 0 && dtype_is_half(cfg->wdt)) /* also with --quiet: tests read it */
    printf("check: %s params == %s(master) bit for bit after each of %d steps (rank 0)\n", dtype_precision(cfg->wdt),
           dtype_precision(cfg->wdt), in->checked_steps);
  if (cfg->wdt == DT_F16) { /* the scaler's numbers; the flushed count summed over every rank of the job */
    double flushed = (double)op_fp16_flushed();
    comm_ctl_all_reduce_f64(t->world_comm, &flushed, 1, REDOP_SUM);
    trainer_report_extra(t, "overflow_steps", in->scaler.overflows);
    trainer_report_extra(t, "overflow_check_bytes", (double)in->overflow_ctl_bytes);
    trainer_report_extra(t, "loss_scale_final", in->scaler.scale);
    trainer_report_extra(t, "fp16_flushed_to_zero", flushed);
  }
  double entropy = rank == 0 ? data_teacher_entropy(&t->data, 4096) : 0;
  report_run_t run = {.chapter = chapter, .steps = in->steps, .nsteps = cfg->steps, .full_params = full, .full_numel = full_numel,
                      .teacher_entropy = entropy, .extras = in->extras, .nextras = in->nextras,
                      .skipped_steps = skipped, .evals = in->evals, .nevals = in->nevals};
  report_finish(t, &run);
  trace_write(t->model_comm);

  if (s->teardown) s->teardown(t);
  tensor_free(&t->params); /* the model states: the strategy allocated them, the trainer frees them (train.h) */
  tensor_free(&t->grads);
  tensor_free(&t->master);
  tensor_free(&t->opt_m);
  tensor_free(&t->opt_v);
  free_acts(t);
  if (cfg->sched && cfg->sched->teardown) cfg->sched->teardown(t); /* after the strategy: its comms */
  ops_release_workspace();
  free(full);
  free(in->steps);
  free(in->evals);
  free(in->own_ops);
  free(in->step_uses);
  free(in->fwd_uses);
  free(in->whole.units); /* a schedule's copy (the units only: the ctx is the model's) */
  free(t->unit_params);
  free(t->unit_grads);
  model_free(&t->model);
  data_free(&t->data);
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
  fault_arm(cfg->fault, comm_world(comm), cfg->steps);
  int wrank = comm_rank(comm);
  trace_init(wrank, cfg->trace);
  /* --tp T: TP groups of T consecutive ranks; the strategy works on the data-parallel group. */
  grid_t *grid = cfg->tp > 1 ? grid_init(comm, cfg->tp, 1) : NULL;
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
  if (grid && !cfg->transform) die("error: --tp %d: this program has no tensor-parallel model transform", cfg->tp);
  if (grid && !quiet) grid_print(grid); /* collective: every rank prints its line in rank order */
  int rank = comm_rank(dpc), world = comm_world(dpc);
  if (!cfg->sched && cfg->batch % ((int64_t)world * cfg->accum) != 0) /* when launched without the env variables */
    die("error: --batch %lld: must be divisible by ranks x accum = %d x %d", (long long)cfg->batch, world, cfg->accum);

  struct train_internal in = {0};
  trainer_t t = {.cfg = cfg, .strategy = s, .comm = dpc, .rank = rank, .world = world, .world_comm = comm,
                 .tp_comm = grid ? grid->comm[GRID_TP] : NULL, .grid = grid, .dev = cfg->dev, .wdt = cfg->wdt, .in = &in,
                 .model_comm = dpc, .model_rank = rank, .model_world = world, .whole = &t.model};
  char name[96]; /* the run's name: the strategy's, after the schedule's when there is one */
  if (cfg->sched) snprintf(name, sizeof name, "%s+%s", cfg->sched->name, s->name);
  else snprintf(name, sizeof name, "%s", s->name);
  t.name = name;
  t.hp = (adamw_hp_t){.lr = (float)cfg->lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2,
                      .eps = (float)cfg->eps, .weight_decay = (float)cfg->weight_decay};
  t.local_batch = cfg->batch / ((int64_t)world * cfg->accum);
  ckpt_manifest_t resume = {0}; /* --resume: verified before anything is allocated or written */
  if (cfg->resume && ckpt_open_resume(&t, cfg->resume, &resume)) {
    if (grid) grid_free(grid);
    comm_finalize(comm);
    return 2;
  }
  model_from_cfg(&t);
  if (grid) cfg->transform->split(&t.model, t.tp_comm); /* this TP rank's part of every split unit */
  t.unit_params = xcalloc((size_t)t.model.n_units, sizeof(void *), "unit params");
  t.unit_grads = xcalloc((size_t)t.model.n_units, sizeof(void *), "unit grads");
  in.steps = xcalloc((size_t)cfg->steps, sizeof(report_step_t), "steps");
  in.scaler = scaler_make((float)(cfg->loss_scale > 0 ? cfg->loss_scale : cfg->init_scale), (float)cfg->growth_factor,
                          (float)cfg->backoff_factor, cfg->growth_interval, cfg->loss_scale == 0);
  const char *cm = getenv("ZL_CHECK_MASTER");
  in.check_master = cm && strcmp(cm, "1") == 0;
  if (wrank == 0 && !cfg->quiet) print_header(&t, chapter);
  /* The step's list: a schedule's (this rank's part of the model, narrowed to its replicas), or
   * the loop's own. */
  if (cfg->sched) cfg->sched->setup(&t);
  else own_schedule(&t);
  build_uses(&t);

  fault_check_host_memory(&t); /* CPU: refuse clearly what the host cannot hold, before allocating */
  trace_begin("setup");
  alloc_acts(&t);
  if (!cfg->sched) report_acts(&t);
  s->setup(&t); /* states, shards, buckets; params broadcast from rank 0 */
  comm_wait_all(t.comm);
  comm_wait_all(comm);
  trace_end(NULL);
  comm_counters_reset(comm); /* per-step traffic starts here: the init broadcast is not a step */
  if (t.comm != comm) comm_counters_reset(t.comm);

  int taken = 0, skipped = 0, start = 0; /* optimizer steps applied; steps dropped by --nonfinite skip */
  if (cfg->resume) { /* the states, the losses so far and the position of the checkpoint */
    ckpt_restore(&t, &resume, in.steps);
    start = resume.step;
    taken = resume.opt_t;
    skipped = resume.skipped;
    if (resume.has_scaler && t.wdt == DT_F16 && cfg->loss_scale == 0) { /* the dynamic scaler goes on where it was */
      in.scaler.scale = resume.loss_scale;
      in.scaler.growth_tracker = resume.growth_tracker;
      in.scaler.overflows = resume.overflows;
    }
    ckpt_manifest_free(&resume);
  }
  train_loop(&t, start, &taken, &skipped);
  if (cfg->sample > 0) sample_text(&t);
  train_finish(&t, chapter, skipped);
  if (grid) grid_free(grid);
  comm_finalize(comm);
  return 0;
}
