/* loop_ops.c — the loop's activations and a step's operations (train.h's train_op_t, the diagram
 * of its header): the slot pool, the forward and the backward of a micro-batch over a chunk with
 * the strategy's hooks on every unit and the schedule's messages around them, the loss, --pa's
 * partitioned outputs (ZeRO-R's Pa: the transform's hooks). notes/design.md, "The loop and the
 * strategy interface". */
#include "loop_internal.h" // struct train_internal, act_slot_t, train_run_ops
#include "check.h"          // die_on_rank, xmalloc, xcalloc
#include "comm.h"           // comm_world
#include "data.h"           // data_batch
#include "device.h"         // dev_memcpy, dev_sync
#include "fault.h"          // fault_nan (--fault R:S:nan)
#include "gpt.h"            // gpt_acts_bytes_tp
#include "ledger.h"         // ledger_live
#include "model.h"          // model_forward, model_backward, model_layout
#include "ops.h"            // op_softmax_xent, op_has_nonfinite, op_cast
#include "trace.h"          // trace_begin, trace_end, trace_event, trace_now_us
#include <math.h>           // isfinite, NAN
#include <stdio.h>          // snprintf
#include <stdlib.h>         // free
#include <string.h>         // memcpy, memset

/* ---- the activations ----------------------------------------------------------------------- */

int64_t trainer_pa_slice_numel(const trainer_t *t, int u) {
  const model_transform_t *xf = t->cfg->transform;
  if (!t->cfg->pa || !t->group_comm || t->cfg->sched || u >= t->model.n_units - 1 || !xf->pa_slice) return 0;
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
  return 4 * (outs + 2 * comm_world(t->group_comm) * smax + b * model_max_saved_numel(m));
}

/* A new slot of chunk c: its input, and its units' outputs and saved activations (LEDGER_ACTS). */
static void slot_alloc(trainer_t *t, int c, act_slot_t *sl) {
  const model_t *m = &t->model;
  const train_chunk_t *ch = &t->chunks[c];
  int64_t b = t->local_batch;
  int n = ch->u1 - ch->u0, U = m->n_units;
  sl->in = tensor_alloc(ch->first ? "input" : "stage input", LEDGER_ACTS, DT_F32, t->dev,
                        b * t->in->pools[c].in_numel);
  sl->out = xcalloc((size_t)n, sizeof(tensor_t), "unit outputs");
  sl->saved = xcalloc((size_t)n, sizeof(tensor_t), "unit saved activations");
  for (int i = 0; i < n; i++) {
    int u = ch->u0 + i;
    int64_t slice = trainer_pa_slice_numel(t, u); /* --pa: 1/T of a replicated output, else 0: all of it */
    if (slice) sl->out[i] = tensor_alloc("unit output (1/T slice, Pa)", LEDGER_ACTS, DT_F32, t->dev, slice);
    else
      sl->out[i] = tensor_alloc(u == U - 1 ? "logits" : "unit output", LEDGER_ACTS, DT_F32, t->dev,
                                b * m->units[u].y_numel);
    if (!t->cfg->recompute)
      sl->saved[i] = tensor_alloc("saved", LEDGER_ACTS, DT_F32, t->dev, b * m->units[u].saved_numel);
  }
  if (t->in->split) { /* a split backward: what B keeps for W (model.h), and where W writes */
    sl->wsaved = xcalloc((size_t)n, sizeof(tensor_t), "unit wsaved");
    for (int i = 0; i < n; i++)
      sl->wsaved[i] =
          tensor_alloc("saved for W", LEDGER_ACTS, DT_F32, t->dev, b * m->units[ch->u0 + i].wsaved_numel);
    sl->wgrads = xcalloc((size_t)n, sizeof(void *), "unit W grads");
    sl->wbeta = xcalloc((size_t)n, sizeof(float), "unit W beta");
  }
  sl->micro = -1;
}

static void slot_free(trainer_t *t, int c, act_slot_t *sl) {
  int n = t->chunks[c].u1 - t->chunks[c].u0;
  tensor_free(&sl->in);
  for (int i = 0; i < n; i++) {
    tensor_free(&sl->out[i]);
    tensor_free(&sl->saved[i]);
    if (sl->wsaved) tensor_free(&sl->wsaved[i]);
  }
  free(sl->out);
  free(sl->saved);
  free(sl->wsaved);
  free(sl->wgrads);
  free(sl->wbeta);
}

/* The pools (without a schedule: its one slot now) and the buffers beside them. */
void train_alloc_acts(trainer_t *t) {
  struct train_internal *in = t->in;
  const model_t *m = &t->model;
  int64_t b = t->local_batch, work = 0, maxy = 0, maxs = 0;
  int last = 0, T = t->group_comm ? comm_world(t->group_comm) : 1;
  in->pa = t->cfg->pa && t->group_comm && !t->cfg->sched;
  in->fb.on = t->cfg->fb_overlap && t->cfg->sched; /* the list's marks say where (loop_fb.c) */
  for (int i = 0; i < t->n_ops; i++) in->split |= t->ops[i].kind == 'W';
  if (in->split) { /* B now, W later: the model's halves, and a strategy that knows where W ends */
    if (!m->fns->backward_input || !m->fns->backward_weight)
      die_on_rank("%s: the %s model here has no backward in two halves (B and W): a split schedule needs one",
                  t->name, m->fns->name);
    if (t->cfg->recompute)
      die_on_rank("%s: --recompute reruns a unit's forward in its backward into one shared buffer, "
                  "which a W run later would no longer find",
                  t->name);
    if (!t->no_sync)
      die_on_rank("%s: a split backward needs no_sync (one reduction per unit and step)", t->name);
    if (t->strategy->post_backward && !t->strategy->grad_ready)
      die_on_rank("%s: strategy %s has no grad_ready hook (train.h): it could not tell when a W made a "
                  "gradient final",
                  t->name, t->strategy->name);
    in->w_due = xcalloc((size_t)t->n_chunks, sizeof *in->w_due, "W due");
  }
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
      per += un->y_numel + (t->cfg->recompute ? 0 : un->saved_numel) + (in->split ? un->wsaved_numel : 0);
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
  if (t->cfg->recompute)
    in->saved_rc = tensor_alloc("saved (recompute)", LEDGER_ACTS, DT_F32, t->dev, b * maxs);
  if (in->pa) /* the whole outputs: unit u writes work[u % 2] while it reads work[(u − 1) % 2] */
    for (int k = 0; k < 2; k++)
      in->work[k] = tensor_alloc("unit output (Pa working)", LEDGER_ACTS, DT_F32, t->dev, work);
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

void train_free_acts(trainer_t *t) {
  struct train_internal *in = t->in;
  if (!in->pools) return;
  for (int c = 0; c < t->n_chunks; c++) {
    for (int i = 0; i < in->pools[c].n_slots; i++) slot_free(t, c, &in->pools[c].slots[i]);
    free(in->pools[c].slots);
  }
  free(in->pools);
  free(in->w_due);
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
    if (p->n_slots >= t->n_micro)
      die_on_rank("more than %d micro-batches in flight on chunk %d", t->n_micro, c);
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
  int64_t xn = b * t->model.in_numel, yn = b * t->model.rows;
  /* data_batch writes both: host buffers for what is not a CPU destination */
  void *xh = x && t->dev == DEV_CPU ? x : xmalloc((size_t)xn * 4 + 4, "input staging");
  int *yh = y && t->dev == DEV_CPU ? y : xmalloc((size_t)yn * sizeof(int) + 4, "target staging");
  data_batch(&t->data, first, (int)b, xh, yh);
  if (x && t->dev != DEV_CPU) dev_memcpy(t->dev, x, DEV_CPU, xh, (size_t)xn * 4);
  if (y && t->dev != DEV_CPU) dev_memcpy(t->dev, y, DEV_CPU, yh, (size_t)yn * sizeof(int));
  if (xh != x) free(xh);
  if (yh != y) free(yh);
}

double trainer_loss_scale(const trainer_t *t) { return t->wdt == DT_F16 ? (double)t->in->scaler.scale : 1.0; }

void trainer_data_slice(const trainer_t *t, int *slice, int *nslices) {
  *slice = t->rank, *nslices = t->world;
  if (t->group_comm && t->cfg->transform->splits_batch) {
    int share = trainer_batch_share(t), T = comm_world(t->group_comm) / share;
    *slice = t->rank * T + comm_rank(t->group_comm) / share, *nslices = t->world * T;
  }
}

int64_t trainer_dense_numel(const trainer_t *t, int u) {
  return t->dense_comm ? t->cfg->transform->dense_numel(t, u) : 0;
}

int trainer_batch_share(const trainer_t *t) {
  return t->group_comm && t->cfg->transform->splits_batch && t->cfg->tp > 1 ? t->cfg->tp : 1;
}

double trainer_loss(trainer_t *t, int b, const float *logits, const int *targets, float *dlogits) {
  const model_t *m = &t->model;
  /* fp16: the loss is multiplied by the loss scale S before the backward (its gradient is) */
  double S = t->wdt == DT_F16 ? (double)t->in->scaler.scale : 1.0;
  float scale = (float)(S / ((double)t->cfg->batch * m->rows));
  /* the model's own (vocab-parallel) */
  double loss = m->fns->loss
      ? m->fns->loss(m, b, logits, targets, dlogits, scale)
      : op_softmax_xent(t->dev, dlogits, logits, targets, b * m->rows, m->classes, scale);
  if (!isfinite(loss)) t->in->local_nonfinite = 1;
  return loss;
}

void trainer_check_grads(trainer_t *t, int u) {
  /* CPU only: on a GPU the host read would stall the stream; there the loss stands in. Gradients
   * the next micro-batch adds to (beta 1) are checked once, on the step's last micro-batch: a NaN
   * or Inf stays in the sum (x + NaN = NaN, x + Inf = Inf or NaN). Fresh ones (beta 0: micro-batch
   * 0, or a strategy that ships every micro-batch's) are checked each time, before they leave. */
  int final = t->grad_beta == 0.0f || t->micro == t->n_micro - 1;
  if (t->dev == DEV_CPU && !t->in->local_nonfinite && final)
    t->in->local_nonfinite = op_has_nonfinite(t->dev, t->unit_grads[u], t->wdt, t->model.units[u].numel);
}

/* What the ops run after a unit's backward, beside post_backward: the transform's collective, when it
 * has a group and one (chapter 12: the dense gradients summed over the EP group, before the strategy
 * reduces them over D). */
static void transform_after_backward(trainer_t *t, int u) {
  if (t->group_comm && t->cfg->transform->after_backward) t->cfg->transform->after_backward(t, u);
}
/* Σg² of elements [lo, hi) of unit u (unit-local) that sit at g (g holds the unit's elements from
 * base on), counting only the transform's ranges of the unit: [lo, hi) ∩ each [r0, r1). */
static double unit_sumsq(const trainer_t *t, int u, const char *g, int64_t base, int64_t lo, int64_t hi) {
  int64_t r[ZL_NORM_RANGES][2];
  int n = t->cfg->transform->norm_ranges(t, u, r);
  if (n > ZL_NORM_RANGES) die_on_rank("norm_ranges: %d ranges for unit %d, at most %d", n, u, ZL_NORM_RANGES);
  double sum = 0;
  size_t ds = dtype_size(t->wdt);
  for (int i = 0; i < n; i++) {
    int64_t a = r[i][0] > lo ? r[i][0] : lo, b = r[i][1] < hi ? r[i][1] : hi;
    if (b > a) sum += op_sumsq(t->dev, g + (a - base) * (int64_t)ds, t->wdt, b - a);
  }
  return sum;
}

double trainer_grad_sumsq(const trainer_t *t, const void *grads, int shard_rank) {
  const model_t *m = &t->model;
  /* two data-parallel groups with shards: the pieces are disjoint over every rank (trainer_finish_grads) */
  int masked = t->group_comm && t->cfg->transform->norm_ranges && !(shard_rank >= 0 && t->dense_comm);
  if (!masked) /* every value this rank holds counts: one sum over the buffer */
    return op_sumsq(t->dev, grads, t->wdt, shard_rank < 0 ? m->padded_numel : m->shard_numel);
  /* Megatron's param_is_not_tensor_parallel_duplicate: a value the group holds alike on several
   * ranks is counted by one of them; the sum over the group (trainer_finish_grads) counts it once */
  const char *g = grads;
  size_t ds = dtype_size(t->wdt);
  double sum = 0;
  for (int u = 0; u < m->n_units; u++) {
    const unit_t *un = &m->units[u];
    if (shard_rank < 0) sum += unit_sumsq(t, u, g + un->off * (int64_t)ds, 0, 0, un->numel);
    else {
      int64_t lo = (int64_t)shard_rank * un->piece;
      sum += unit_sumsq(t, u, g + un->shard_off * (int64_t)ds, lo, lo, lo + un->piece);
    }
  }
  return sum;
}

/* Where unit u's whole output is during the micro-batch: the slot's out, or with --pa for a
 * partitioned output its working buffer (out holds only this rank's slice). */
static float *unit_y(trainer_t *t, const act_slot_t *sl, int c, int u) {
  struct train_internal *in = t->in;
  return (in->pa && trainer_pa_slice_numel(t, u) ? in->work[u % 2] : sl->out[u - t->chunks[c].u0]).data;
}

/* Unit u's buffers in slot sl of chunk c (dy, dx and grads are set by the backward). */
static unit_io_t unit_io(trainer_t *t, const act_slot_t *sl, int c, int u) {
  return (unit_io_t){.dev = t->dev,
                     .wdt = t->wdt,
                     .B = (int)t->local_batch,
                     .params = t->unit_params[u],
                     .x = u == t->chunks[c].u0 ? sl->in.data : unit_y(t, sl, c, u - 1),
                     .y = unit_y(t, sl, c, u),
                     .saved = t->cfg->recompute ? t->in->saved_rc.data : sl->saved[u - t->chunks[c].u0].data,
                     .wsaved = sl->wsaved ? sl->wsaved[u - t->chunks[c].u0].data : NULL};
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

/* F k over chunk c in three pieces (op_forward runs them in a row; an F&B, loop_fb.c, runs another
 * operation's units between its units): the input (the data, or the previous stage's output); one
 * unit forward with the strategy's hooks; the output on to the next stage. */
void op_fwd_begin(trainer_t *t, const train_op_t *op, op_run_t *r) {
  struct train_internal *in = t->in;
  const schedule_t *sc = t->cfg->sched;
  const train_chunk_t *ch = &t->chunks[op->chunk];
  int k = op->micro;
  act_slot_t *sl = slot_take(t, op->chunk, k);
  *r = (op_run_t){.op = op, .sl = sl, .u = ch->u0, .use = t->use};
  if (!ch->first) sc->recv_forward(t, op->chunk, k, sl->in.data);
  r->t0 = trace_now_us(); /* loading the data is work (busy); waiting for the previous stage is not */
  if (ch->first) { /* the loop's own chunk scores here too: its targets come with the inputs */
    int slice, nslices;
    trainer_data_slice(t, &slice, &nslices);
    trainer_load_micro(t, k, t->n_micro, slice, nslices, sl->in.data,
                       ch->last && !sc ? (int *)in->y.data : NULL);
  }
}

void op_fwd_unit(trainer_t *t, op_run_t *r) {
  const strategy_t *s = t->strategy;
  int u = r->u++;
  char name[32];
  t->use = r->use++;
  if (s->pre_forward) s->pre_forward(t, u);
  snprintf(name, sizeof name, "fwd %d", u);
  trace_begin(name);
  unit_io_t io = unit_io(t, r->sl, r->op->chunk, u);
  model_forward(&t->model, u, &io);
  if (t->in->pa) pa_keep(t, r->sl, u); /* --pa: this rank's 1/T of a replicated output */
  trace_end(NULL);
  if (s->post_forward) s->post_forward(t, u);
  t->use++;
}

/* Returns the compute time (µs, with a schedule; the wait for the input is idle, not busy; an
 * F&B's other half run inside it, r->lent, is not this operation's). */
double op_fwd_end(trainer_t *t, op_run_t *r) {
  const schedule_t *sc = t->cfg->sched;
  const train_chunk_t *ch = &t->chunks[r->op->chunk];
  if (!sc) return 0;
  dev_sync(t->dev);
  double busy = trace_now_us() - r->t0 - r->lent;
  op_event(t, r->op, r->t0);
  if (!ch->last) sc->send_forward(t, r->op->chunk, r->op->micro, r->sl->out[ch->u1 - 1 - ch->u0].data);
  return busy;
}

static double op_forward(trainer_t *t, const train_op_t *op) {
  op_run_t r;
  op_fwd_begin(t, op, &r);
  while (r.u < t->chunks[op->chunk].u1) op_fwd_unit(t, &r);
  return op_fwd_end(t, &r);
}

/* --fault R:S:nan on this rank and step: a NaN into dy, the gradient of the output of micro-batch 0
 * on the rank's last chunk (the loss's gradient on the last stage, the received one elsewhere), so
 * every unit's gradients below it are non-finite here: the same fault in any model (the GPT's inputs
 * are tokens, the MLP's floats). Marked non-finite at once: the GPU checks no gradient (the loss
 * stands in there), and the injected NaN is known. */
static void fault_nan_into(trainer_t *t, const train_op_t *op, float *dy) {
  if (op->micro != 0 || op->chunk != t->n_chunks - 1) return;
  if (!fault_nan(t->fault, comm_rank(t->world_comm), t->step)) return;
  float nan = NAN;
  dev_memcpy(t->dev, dy, DEV_CPU, &nan, sizeof nan);
  t->in->local_nonfinite = 1;
}

/* B k over chunk c in three pieces (as F's): the gradient of the output (the loss on the last chunk,
 * added to *loss; else from the next stage); one unit backward with the strategy's hooks (the
 * chunk's units in reverse); the gradient of the input back to the previous stage. Gradients are
 * written with beta: micro-batch 0 overwrites, later ones accumulate (the strategy's pre_backward
 * may choose otherwise). */
void op_bwd_begin(trainer_t *t, const train_op_t *op, op_run_t *r, double *loss) {
  struct train_internal *in = t->in;
  const schedule_t *sc = t->cfg->sched;
  const train_chunk_t *ch = &t->chunks[op->chunk];
  int k = op->micro;
  act_slot_t *sl = slot_of(t, op->chunk, k);
  *r = (op_run_t){.op = op, .sl = sl, .u = ch->u1 - 1, .use = t->use, .dy = in->dy[0].data,
                  .dyp = in->dy[1].data, .t0 = trace_now_us()};
  if (ch->last) { /* mean over the GLOBAL batch's loss rows (scale 1/(B·rows)): summing the ranks'
                   * gradients is then the mean gradient. A schedule's loss is its stage's work. */
    if (sc) {
      int slice, nslices;
      trainer_data_slice(t, &slice, &nslices);
      trainer_load_micro(t, k, t->n_micro, slice, nslices, NULL, (int *)in->y.data);
    }
    TRAINER_PHASE("loss", *loss += trainer_loss(t, (int)t->local_batch, sl->out[ch->u1 - 1 - ch->u0].data,
                                                (const int *)in->y.data, r->dy));
  } else {
    sc->recv_backward(t, op->chunk, k, r->dy);
    r->t0 = trace_now_us();
  }
  fault_nan_into(t, op, r->dy);
  r->dx_out = ch->first ? NULL : sc->dx_buffer(t, op->chunk, k); /* the model's unit 0 has no dx */
}

void op_bwd_unit(trainer_t *t, op_run_t *r) {
  struct train_internal *in = t->in;
  const strategy_t *s = t->strategy;
  const model_t *m = &t->model;
  const train_chunk_t *ch = &t->chunks[r->op->chunk];
  act_slot_t *sl = r->sl;
  int k = r->op->micro, u = r->u--;
  char name[32];
  t->use = r->use++;
  t->grad_beta = k == 0 ? 0.0f : 1.0f; /* the strategy's pre_backward may change it */
  if (s->pre_backward) s->pre_backward(t, u);
  if (in->pa && u > 0) pa_gather(t, sl, u - 1); /* --pa: the input, whole again (into its working buffer) */
  unit_io_t io = unit_io(t, sl, r->op->chunk, u);
  if (t->cfg->recompute && m->units[u].saved_numel > 0) { /* rerun the forward: same inputs, same bits */
    snprintf(name, sizeof name, "recompute %d", u);
    trace_begin(name);
    model_forward(m, u, &io);
    trace_end(NULL);
  }
  io.grads = t->unit_grads[u];
  io.beta = t->grad_beta;
  io.dy = r->dy;
  io.dx = u > ch->u0 ? r->dyp : r->dx_out;
  if (in->split) { /* B: the input's gradient now; the weights' in W k (op_weight), where the
                    * strategy's hooks said now (its pointer, its beta) */
    snprintf(name, sizeof name, "bwd input %d", u);
    TRAINER_PHASE(name, model_backward_input(m, u, &io));
    sl->wgrads[u - ch->u0] = t->unit_grads[u];
    sl->wbeta[u - ch->u0] = t->grad_beta;
    /* the unit's use is over, its gradient is not final: that is W's (grad_ready) */
    int last = t->last_micro;
    t->last_micro = 0;
    if (s->post_backward) s->post_backward(t, u);
    t->last_micro = last;
  } else {
    snprintf(name, sizeof name, "bwd %d", u);
    TRAINER_PHASE(name, model_backward(m, u, &io));
    trainer_check_grads(t, u); /* this rank's own gradients, before any reduction: a NaN/Inf of ours? */
    transform_after_backward(t, u); /* first: EP's dense gradients over the group */
    if (s->post_backward) s->post_backward(t, u);
  }
  float *tmp = r->dy;
  r->dy = r->dyp;
  r->dyp = tmp;
  t->use++;
}

double op_bwd_end(trainer_t *t, op_run_t *r) {
  const schedule_t *sc = t->cfg->sched;
  const train_chunk_t *ch = &t->chunks[r->op->chunk];
  double busy = 0;
  if (sc) {
    dev_sync(t->dev);
    busy = trace_now_us() - r->t0 - r->lent;
    op_event(t, r->op, r->t0);
    if (!ch->first) sc->send_backward(t, r->op->chunk, r->op->micro, r->dx_out);
  }
  if (t->in->split) r->sl->bdone = 1; /* its W runs later, then gives the slot back */
  else slot_give_back(t, r->op->chunk, r->sl);
  return busy;
}

static double op_backward(trainer_t *t, const train_op_t *op, double *loss) {
  op_run_t r;
  op_bwd_begin(t, op, &r, loss);
  while (r.u >= t->chunks[op->chunk].u0) op_bwd_unit(t, &r);
  return op_bwd_end(t, &r);
}

/* W k over chunk c (a split backward): the weights' gradients of micro-batch k, from what its B
 * kept, where its B's strategy hooks said, with their beta; then the slot goes back. The W's of a
 * chunk run in the order of its B's — micro-batch order: so each weight's gradient adds 0..M−1 in
 * order, 1F1B's (and 1-rank --accum M's) additions, bit for bit. THE REDUCTION WAITS FOR ITS LAST W:
 * after the W of micro-batch M−1 a unit's gradient is final, and here the strategy's grad_ready
 * starts its all-reduce or reduce-scatter (train.h) — not after its B, as without a split. */
static double op_weight(trainer_t *t, const train_op_t *op) {
  struct train_internal *in = t->in;
  const strategy_t *s = t->strategy;
  const model_t *m = &t->model;
  const train_chunk_t *ch = &t->chunks[op->chunk];
  int k = op->micro;
  act_slot_t *sl = NULL;
  for (int i = 0; i < in->pools[op->chunk].n_slots && !sl; i++)
    if (in->pools[op->chunk].slots[i].micro == k) sl = &in->pools[op->chunk].slots[i];
  if (!sl || !sl->bdone)
    die_on_rank("a W before its B: W %d on chunk %d runs before B %d (a schedule's bug: the weights' "
                "gradient needs the "
                "gradient of their output)",
                k, op->chunk, k);
  if (k != in->w_due[op->chunk])
    die_on_rank("a W out of order: W %d on chunk %d, but W %d is due (each weight's gradient adds its "
                "micro-batches in "
                "order; a schedule's bug)",
                k, op->chunk, in->w_due[op->chunk]);
  in->w_due[op->chunk]++;
  double t0 = trace_now_us();
  char name[32];
  for (int u = ch->u1 - 1; u >= ch->u0; u--) {
    unit_io_t io = unit_io(t, sl, op->chunk, u);
    io.grads = sl->wgrads[u - ch->u0];
    io.beta = sl->wbeta[u - ch->u0];
    snprintf(name, sizeof name, "bwd weights %d", u);
    TRAINER_PHASE(name, model_backward_weight(m, u, &io));
    t->grad_beta = io.beta, t->unit_grads[u] = io.grads; /* what trainer_check_grads reads */
    trainer_check_grads(t, u);
    transform_after_backward(t, u); /* first: EP's dense gradients over the group */
    if (t->last_micro && s->grad_ready) s->grad_ready(t, u); /* final: the reduction may start */
  }
  dev_sync(t->dev);
  double busy = trace_now_us() - t0;
  op_event(t, op, t0);
  sl->bdone = 0;
  slot_give_back(t, op->chunk, sl);
  return busy;
}

/* One step's operations in order; returns this rank's local loss sum (0 without the last chunk). */
double train_run_ops(trainer_t *t) {
  const schedule_t *sc = t->cfg->sched;
  double loss = 0, busy = 0, t0 = trace_now_us();
  t->uses = t->in->step_uses;
  t->n_uses = t->in->n_step_uses;
  t->use = 0;
  t->busy_us[0] = t->busy_us[1] = t->busy_us[2] = 0;
  if (t->in->w_due) memset(t->in->w_due, 0, (size_t)t->n_chunks * sizeof *t->in->w_due);
  memset(t->in->fb.step, 0, sizeof t->in->fb.step);
  for (int i = 0; i < t->n_ops; i++) {
    const train_op_t *op = &t->ops[i];
    if (t->in->fb.on && op->fb == 1 && i + 1 < t->n_ops && t->ops[i + 1].fb == 2) { /* an F&B (loop_fb.c) */
      double b2[2];
      train_run_fb(t, op, &loss, b2);
      t->busy_us[0] += b2[0], t->busy_us[1] += b2[1], busy += b2[0] + b2[1];
      i++;
      continue;
    }
    t->micro = op->micro;
    t->last_micro = op->micro == t->n_micro - 1; /* DDP all-reduces only now (no_sync before) */
    t->in->fb.role = op->kind == 'F' ? op->fb == 1 : op->kind == 'B' && op->fb == 2 ? 2 : 0; /* marked F&B */
    double b = op->kind == 'F' ? op_forward(t, op)
        : op->kind == 'B'      ? op_backward(t, op, &loss)
                               : op_weight(t, op);
    t->in->fb.role = 0;
    if (op->fb == 2 && op->kind == 'B') t->in->fb.step[2] += b;
    t->busy_us[op->kind == 'F' ? 0 : op->kind == 'B' ? 1 : 2] += b;
    busy += b;
  }
  if (sc) sc->step_end(t, busy, t0);
  double *tot = t->in->fb_total;
  for (int i = 0; i < 5; i++) tot[i] += t->in->fb.step[i];
  tot[5]++;
  return loss;
}

/* The pre hooks' order of a step (the operations' units: forwards in order, backwards in
 * reverse) and of a forward-only pass (every unit once), for train_use_t. */
void train_build_uses(trainer_t *t) {
  struct train_internal *in = t->in;
  int n = 0, U = t->model.n_units;
  for (int i = 0; i < t->n_ops; i++) n += t->chunks[t->ops[i].chunk].u1 - t->chunks[t->ops[i].chunk].u0;
  in->step_uses = xcalloc((size_t)n + 1, sizeof *in->step_uses, "unit uses");
  t->n_uses = 0;
  for (int i = 0; i < t->n_ops; i++) {
    if (t->ops[i].kind == 'W') continue; /* a W runs no strategy hook before its units: no use */
    const train_chunk_t *ch = &t->chunks[t->ops[i].chunk];
    for (int j = 0; j < ch->u1 - ch->u0; j++)
      in->step_uses[t->n_uses++] =
          (train_use_t){t->ops[i].kind == 'F' ? ch->u0 + j : ch->u1 - 1 - j, t->ops[i].kind};
  }
  in->n_step_uses = t->n_uses;
  in->fwd_uses = xcalloc((size_t)U, sizeof *in->fwd_uses, "forward uses");
  for (int u = 0; u < U; u++) in->fwd_uses[u] = (train_use_t){u, 'F'};
  t->uses = in->step_uses;
}

/* Without a schedule: one chunk of every unit, F k B k for each of the --accum micro-batches. */
void train_own_schedule(trainer_t *t) {
  struct train_internal *in = t->in;
  int A = t->cfg->accum;
  t->n_micro = A;
  in->whole_chunk = (train_chunk_t){.u0 = 0, .u1 = t->model.n_units, .first = 1, .last = 1};
  t->chunks = &in->whole_chunk;
  t->n_chunks = 1;
  in->own_ops = xcalloc(2 * (size_t)A, sizeof *in->own_ops, "the loop's operations");
  for (int k = 0; k < A; k++) {
    in->own_ops[2 * k] = (train_op_t){'F', k, 0, 0};
    in->own_ops[2 * k + 1] = (train_op_t){'B', k, 0, 0};
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
int trainer_steps_run(const trainer_t *t) { return t->in->steps_run; }

/* The forward of B samples through every unit with the strategy's forward hooks (so ZeRO-3
 * gathers), no backward: the evaluation and --sample. */
void train_forward_only(trainer_t *t, int B) {
  const strategy_t *s = t->strategy;
  const act_slot_t *sl = &t->in->pools[0].slots[0]; /* the loop's own chunk (no schedule: loop_flags.c) */
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

/* Activation bytes the loop keeps (every unit's output and saved buffers, and --pa's working
 * buffers, as the ledger counted them in alloc_acts) beside gpt.h's formula (this rank's part with
 * --tp, and --sp; gpt_acts_bytes_tp): "acts_saved_bytes",
 * "acts_formula_bytes"; with --pa the ledger's growth beside pa_acts_formula: "pa_acts_bytes",
 * "pa_acts_formula_bytes". */
void train_report_acts(trainer_t *t) {
  struct train_internal *in = t->in;
  const act_slot_t *sl = &in->pools[0].slots[0]; /* the loop's own chunk: every unit */
  int64_t kept = tensor_nbytes(&in->work[0]) + tensor_nbytes(&in->work[1]) + tensor_nbytes(&in->saved_rc);
  for (int u = 0; u < t->model.n_units; u++)
    kept += tensor_nbytes(&sl->out[u]) + tensor_nbytes(&sl->saved[u]);
  trainer_report_extra(t, "acts_saved_bytes", (double)kept);
  if (in->pa) { /* the ledger's count beside the formula from the shapes (pa_acts_formula) */
    trainer_report_extra(t, "pa_acts_bytes", (double)in->acts_kept);
    trainer_report_extra(t, "pa_acts_formula_bytes", (double)pa_acts_formula(t));
  }
  /* --tp: this rank's part (gpt.h: T dividing the vocabulary) */
  int T = t->group_comm ? comm_world(t->group_comm) : 1;
  if (strcmp(t->model.fns->name, "gpt") == 0 && t->model.gpt.vocab % T == 0) /* the GPT, whole or split */
    trainer_report_extra(
        t, "acts_formula_bytes",
        (double)gpt_acts_bytes_tp(t->model.gpt, t->local_batch, t->cfg->recompute, T, t->cfg->sp));
}

