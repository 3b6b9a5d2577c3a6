/* pipeline.c — pipeline parallelism: stages of units, micro-batches, naive / GPipe / 1F1B /
 * interleaved 1F1B schedules, the bubble measured (notes/07-pipeline.md; the contract is in
 * pipeline.h).
 *
 * The strategy takes over the step (strategy_t.run_step): the loop's micro-batch loop is replaced
 * by this rank's list of operations (pp_schedule_ops), each a forward or a backward of one
 * micro-batch over one CHUNK of units, with the messages to the neighbour chunks around it:
 *
 *   F k:  input  ← chunk c−1 (chunk 0: the data)   forward units   output → chunk c+1 (async)
 *   B k:  dy     ← chunk c+1 (last chunk: the loss) backward units  dx     → chunk c−1 (async)
 *
 * Chunk c lives on stage c mod P. Without virtual stages a rank has one chunk (its stage's
 * units) and its neighbours are stages s−1 and s+1; with v virtual stages (interleaved 1F1B) it
 * has v chunks, s, s+P, s+2P, ..., and the activation of chunk P−1 (on the last rank) goes to
 * chunk P (on rank 0): the pipeline is a ring.
 *
 * The optimizer (step) then updates this rank's units only (after an all-reduce over the
 * data-parallel replicas when D > 1). Activations live in SLOTS, one per micro-batch in flight on
 * a chunk, taken at its forward and given back after its backward; a chunk's pool grows only when
 * more are in flight than ever before, so its size is the peak the schedule needs — checked
 * against pp_inflight_formula. Busy time is the sum of the F/B blocks (also on the trace); the
 * window is the whole step's pipeline (until a barrier at its end), so idle / window is the
 * bubble. */
#include "pipeline.h" // pp_split, pp_schedule_ops, pipeline_strategy
#include "check.h"    // die, xcalloc, xmalloc
#include "comm.h"     // comm_split, comm_send_async, comm_recv_async, comm_wait, comm_all_reduce
#include "device.h"   // dev_sync, dev_upload
#include "exercise.h" // zl_exercise_todo (the generated stubs call it)
#include "formula.h"  // formula_model_states
#include "ledger.h"   // LEDGER_*
#include "ops.h"      // op_sumsq, op_cast
#include "tensor.h"   // tensor_alloc, tensor_free, tensor_at
#include "trace.h"    // trace_begin, trace_end, trace_now_us
#include "train.h"    // trainer_t, trainer_* helpers
#include "zero.h"     // shard_plan (--zero 1/2/3: the data dimension's shard layout)
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // free
#include <string.h>   // strcmp

/* ---- the split and the schedules (pure functions, unit-tested) ---------------------------- */

void pp_split(const int64_t *numel, int n_units, int P, int *first) {
  if (P < 1 || P > n_units) die("pp_split: %d stages for %d units", P, n_units);
  /* best[s][u]: the smallest possible largest stage when units 0..u−1 make s stages; a linear
   * partition by dynamic programming (U and P are small). */
  int64_t *pre = xcalloc((size_t)n_units + 1, sizeof *pre, "pp prefix");
  for (int u = 0; u < n_units; u++) pre[u + 1] = pre[u] + numel[u];
  int64_t *best = xcalloc((size_t)(P + 1) * (size_t)(n_units + 1), sizeof *best, "pp best");
  int *cut = xcalloc((size_t)(P + 1) * (size_t)(n_units + 1), sizeof *cut, "pp cut");
#define BEST(s, u) best[(size_t)(s) * (size_t)(n_units + 1) + (size_t)(u)]
#define CUT(s, u) cut[(size_t)(s) * (size_t)(n_units + 1) + (size_t)(u)]
  for (int u = 1; u <= n_units; u++) BEST(1, u) = pre[u];
  for (int s = 2; s <= P; s++)
    for (int u = s; u <= n_units; u++) {
      BEST(s, u) = INT64_MAX;
      for (int c = s - 1; c < u; c++) { /* the last stage is units c..u−1 */
        int64_t last = pre[u] - pre[c], worst = BEST(s - 1, c) > last ? BEST(s - 1, c) : last;
        if (worst < BEST(s, u)) BEST(s, u) = worst, CUT(s, u) = c;
      }
    }
  first[P] = n_units;
  for (int s = P, u = n_units; s >= 1; s--) {
    first[s - 1] = s == 1 ? 0 : CUT(s, u);
    u = first[s - 1];
  }
#undef BEST
#undef CUT
  free(pre);
  free(best);
  free(cut);
}

/* Interleaved 1F1B (Megatron-LM's order): virtual micro-batch i = 0..v·M−1 runs micro-batch
 * (i / (P·v))·P + i mod P on chunk (i / P) mod v — P micro-batches through chunk 0, the same P
 * through chunk 1, ..., then the next P; backwards walk the chunks the other way. */
static pp_op_t interleaved_op(char kind, int i, int P, int v) {
  int j = (i / P) % v;
  return (pp_op_t){kind, (i / (P * v)) * P + i % P, kind == 'F' ? j : v - 1 - j};
}

int pp_schedule_ops(pp_schedule_t sched, int P, int s, int M, int v, pp_op_t *ops) {
  int n = 0;
  if (sched == PP_NAIVE) { /* one micro-batch at a time: its backward before the next forward */
    for (int k = 0; k < M; k++) {
      ops[n++] = (pp_op_t){'F', k, 0};
      ops[n++] = (pp_op_t){'B', k, 0};
    }
  } else if (sched == PP_GPIPE) { /* all forwards, then all backwards (in micro-batch order) */
    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'F', k, 0};
    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};
  } else if (sched == PP_INTERLEAVED) { /* 1F1B over v·M virtual micro-batches */
    int total = v * M, w = (P - s - 1) * 2 + (v - 1) * P;
    if (w > total) w = total;
    for (int i = 0; i < w; i++) ops[n++] = interleaved_op('F', i, P, v);
    for (int i = 0; i < total - w; i++) {
      ops[n++] = interleaved_op('F', w + i, P, v);
      ops[n++] = interleaved_op('B', i, P, v);
    }
    for (int i = total - w; i < total; i++) ops[n++] = interleaved_op('B', i, P, v);
  } else {
    // BEGIN EXERCISE pp_1f1b_schedule notes/07-pipeline.md
    // HINT: a stage may start its first backward as soon as the pipeline behind it is full: then at most P − s micro-batches are alive on stage s, not M.
    // HINT2: three phases: warm-up forwards (how many depends on s: the last stage none), a steady state alternating forward and backward, a cool-down of backwards. Forwards and backwards each in micro-batch order; 2M ops in all.
    // HINT3: w = min(P − s − 1, M) forwards; then for i < M − w: F(w + i), B(i); then B(M − w .. M − 1). Append with ops[n++] = (pp_op_t){'F', k, 0}.
    int w = P - s - 1 < M ? P - s - 1 : M;
    for (int k = 0; k < w; k++) ops[n++] = (pp_op_t){'F', k, 0};
    for (int i = 0; i < M - w; i++) {
      ops[n++] = (pp_op_t){'F', w + i, 0};
      ops[n++] = (pp_op_t){'B', i, 0};
    }
    for (int k = M - w; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};
    // END EXERCISE
  }
  return n;
}

int pp_inflight_formula(pp_schedule_t sched, int P, int s, int M, int v) {
  if (sched == PP_NAIVE) return 1;
  if (sched == PP_GPIPE) return M;
  if (sched == PP_INTERLEAVED) {
    int w = (P - s - 1) * 2 + (v - 1) * P;
    return w + 1 < v * M ? w + 1 : v * M;
  }
  return P - s < M ? P - s : M;
}

double pp_bubble_formula(pp_schedule_t sched, int P, int M, int v) {
  if (sched == PP_NAIVE) return (double)(P - 1) / P;
  if (sched == PP_INTERLEAVED) return (double)(P - 1) / (v * M + P - 1);
  return (double)(P - 1) / (M + P - 1);
}

int pp_schedule_parse(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "naive") == 0) return PP_NAIVE;
  if (strcmp(name, "gpipe") == 0) return PP_GPIPE;
  if (strcmp(name, "1f1b") == 0) return PP_1F1B;
  if (strcmp(name, "interleaved") == 0) return PP_INTERLEAVED;
  return -1;
}

/* ---- the strategy's state ------------------------------------------------------------------ */

/* One micro-batch's activations on one chunk (n = the chunk's units). */
typedef struct pp_slot {
  tensor_t in;         /* (b, in_c) the chunk's input: the batch (chunk 0, 4-byte) or the received activation */
  tensor_t *out;       /* [n] (b, y_numel_u) each unit's output; out[n−1] is sent on (or is the logits) */
  tensor_t *saved;     /* [n] (b, saved_numel_u); none with --recompute */
  comm_handle_t sent;  /* the send of out[n−1] to the next chunk (0: none) */
  int micro;           /* the micro-batch held, −1: free */
} pp_slot_t;

/* Where a chunk's messages go: a communicator and the peer's rank in it (NULL: none, the data or
 * the loss is at that end). */
typedef struct pp_link {
  comm_t *comm;
  int peer;
} pp_link_t;

/* One chunk of units on this rank: global chunk c = j·P + stage. */
typedef struct pp_chunk {
  int c, u0, u1;            /* its units [u0, u1) */
  int64_t in_numel;         /* input elements per sample (in_c) */
  int64_t slot_bytes;       /* activation bytes of one slot (A_c) */
  pp_slot_t *slots;         /* [M] the pool; n_slots allocated so far */
  int n_slots;
  pp_link_t rx_act, tx_act, rx_grad, tx_grad;
  tensor_t gsend[2];        /* (b, in_c) gradients of the input, sent to chunk c−1 (double-buffered) */
  comm_handle_t gsent[2];
} pp_chunk_t;

typedef struct pp_state {
  pp_schedule_t sched;
  int P, D, stage, dp;  /* P stages × D pipelines; this rank's stage and pipeline */
  int v, V;             /* chunks per rank (virtual stages), V = v·P chunks in all */
  int M;                /* micro-batches per step */
  int b;                /* samples per micro-batch on this rank: batch / (M·D) */
  int *first;           /* [V+1] the split: chunk c is units first[c]..first[c+1]−1 */
  pp_chunk_t *chunks;   /* [v] this rank's chunks, j = 0..v−1 */
  int64_t *loc;         /* [U] offset of unit u in this rank's buffers, −1: not here */
  int64_t numel;        /* this rank's parameters (its units' padded sizes, back to back) */
  comm_t *fwd, *bwd;    /* this pipeline's P ranks: activations forward, gradients backward */
  comm_t *fwdw, *bwdw;  /* the ring's wrap links (P−1 → 0 and back) with v > 1; else NULL */
  comm_t *dpc;          /* this stage's D replicas (NULL when D = 1) */
  int zero;             /* --zero S over the D replicas (0 when D = 1: nothing to shard) */
  int64_t *sloc;        /* [U] offset of unit u's piece in this replica's shard, −1: not here */
  int64_t shard_numel;  /* Σ piece over this rank's units (--zero 1/2/3: master, m, v; --zero 2/3: grads too;
                         * --zero 3: params too) */
  tensor_t gshard;      /* (shard_numel) reduce-scatter output, wdt: --zero 1 only (transient, LEDGER_COMM) */
  tensor_t gfull;       /* (numel) --zero 2/3: the full gradient, allocated at the step's start and
                         * freed after its reduce-scatter (t->grads is then the shard) */
  tensor_t gathered;    /* (one unit's padded) --zero 3: its working params, all-gathered for one forward or
                         * one backward of one micro-batch, then freed (LEDGER_COMM) */
  pp_op_t *ops;         /* [2vM] this rank's schedule */
  int n_ops;
  int in_flight, peak_in_flight; /* slots in use, over all chunks */
  int64_t ws_bytes;     /* the fixed activation workspace below */
  tensor_t dy[2];       /* (b, max y_numel of this rank's units) ping-pong of output gradients */
  tensor_t targets;     /* (b, rows) int32, on the rank of the last chunk */
  tensor_t saved_rc;    /* (b, max saved) shared with --recompute */
  double busy_us, span_us; /* summed over the measured steps */
  int measured;            /* steps measured (all but the first when there are several) */
  int steps_run;           /* steps this process ran (after a resume: fewer than --steps) */
  int resync;              /* D > 1 after --resume: replicas take dp 0's states once */
  char tag[64];
} pp_state_t;

static int is_first(const pp_chunk_t *ch) { return ch->c == 0; }
static int is_last(const pp_state_t *st, const pp_chunk_t *ch) { return ch->c == st->V - 1; }

/* ---- slots ---------------------------------------------------------------------------------- */

static pp_slot_t *slot_take(trainer_t *t, pp_chunk_t *ch, int k) {
  pp_state_t *st = t->priv;
  const model_t *m = &t->model;
  int n = ch->u1 - ch->u0;
  pp_slot_t *sl = NULL;
  for (int i = 0; i < ch->n_slots && !sl; i++)
    if (ch->slots[i].micro < 0) sl = &ch->slots[i];
  if (!sl) { /* more in flight than ever before: the pool grows by one (the ledger sees it) */
    if (ch->n_slots >= st->M) die("rank %d: pipeline: more than M = %d micro-batches in flight", t->rank, st->M);
    sl = &ch->slots[ch->n_slots++];
    sl->in = tensor_alloc("stage input", LEDGER_ACTS, DT_F32, t->dev, (int64_t)st->b * ch->in_numel);
    sl->out = xcalloc((size_t)n, sizeof(tensor_t), "slot outputs");
    sl->saved = xcalloc((size_t)n, sizeof(tensor_t), "slot saved");
    for (int i = 0; i < n; i++) {
      const unit_t *un = &m->units[ch->u0 + i];
      sl->out[i] = tensor_alloc("unit output", LEDGER_ACTS, DT_F32, t->dev, (int64_t)st->b * un->y_numel);
      if (!t->cfg->recompute) sl->saved[i] = tensor_alloc("saved", LEDGER_ACTS, DT_F32, t->dev, (int64_t)st->b * un->saved_numel);
    }
  }
  sl->micro = k;
  sl->sent = 0;
  if (++st->in_flight > st->peak_in_flight) st->peak_in_flight = st->in_flight;
  return sl;
}

static pp_slot_t *slot_of(trainer_t *t, pp_chunk_t *ch, int k) {
  for (int i = 0; i < ch->n_slots; i++)
    if (ch->slots[i].micro == k) return &ch->slots[i];
  die("rank %d: pipeline: backward of micro-batch %d on chunk %d before its forward (schedule bug)", t->rank, k, ch->c);
}

static void slot_give_back(trainer_t *t, pp_chunk_t *ch, pp_slot_t *sl) {
  pp_state_t *st = t->priv;
  if (sl->sent) comm_wait(ch->tx_act.comm, sl->sent); /* its output must have left before the slot is reused */
  sl->micro = -1;
  st->in_flight--;
}

/* ---- the messages of a chunk ---------------------------------------------------------------- */

/* Forward: micro-batch k's input activation into sl->in (chunk 0 reads the data instead). */
static void pp_recv_forward(trainer_t *t, pp_chunk_t *ch, pp_slot_t *sl, int k) {
  // BEGIN EXERCISE pp_stage_recv notes/07-pipeline.md
  // HINT: a stage's forward may only read its input once it has arrived; the first stage has no stage before it: its input is the data.
  // HINT2: chunk 0: micro-batch k of this pipeline's data slice; other chunks: b × in_numel floats from ch->rx_act (its comm and peer), received into sl->in, complete before returning.
  // HINT3: is_first(ch): trainer_load_micro(t, k, st->M, st->dp, st->D, sl->in.data, NULL); else comm_wait(c, comm_recv_async(c, sl->in.data, ..., ch->rx_act.peer, tag)).
  pp_state_t *st = t->priv;
  if (is_first(ch)) {
    trainer_load_micro(t, k, st->M, st->dp, st->D, sl->in.data, NULL);
    return;
  }
  snprintf(st->tag, sizeof st->tag, "recv act %d", k);
  comm_t *c = ch->rx_act.comm;
  comm_wait(c, comm_recv_async(c, sl->in.data, (int64_t)st->b * ch->in_numel, DT_F32, ch->rx_act.peer, st->tag));
  // END EXERCISE
}

/* Forward: send micro-batch k's output on to the next chunk, without waiting (the slot keeps the
 * handle: it is waited for before the slot is reused). The last chunk sends nothing. */
static void pp_send_forward(trainer_t *t, pp_chunk_t *ch, pp_slot_t *sl, int k) {
  // BEGIN EXERCISE pp_stage_send notes/07-pipeline.md
  // HINT: the next stage needs this chunk's output; the stage should go on computing while it travels — but the buffer must not be reused before it has left.
  // HINT2: the last chunk sends nothing (its output is the logits). Else: out[u1 − 1 − u0], b × y_numel floats, over ch->tx_act; the handle is kept in the slot (slot_give_back waits for it).
  // HINT3: sl->sent = comm_send_async(ch->tx_act.comm, sl->out[ch->u1 - 1 - ch->u0].data, b × un->y_numel, DT_F32, ch->tx_act.peer, tag) with un the chunk's last unit.
  pp_state_t *st = t->priv;
  if (is_last(st, ch)) return;
  const unit_t *un = &t->model.units[ch->u1 - 1];
  snprintf(st->tag, sizeof st->tag, "send act %d", k);
  sl->sent = comm_send_async(ch->tx_act.comm, sl->out[ch->u1 - 1 - ch->u0].data, (int64_t)st->b * un->y_numel, DT_F32,
                             ch->tx_act.peer, st->tag);
  // END EXERCISE
}

/* Backward: the gradient of micro-batch k's output into dy: from the next chunk, or, on the last
 * chunk, the loss of the logits (returned; 0 elsewhere). */
static double pp_recv_backward(trainer_t *t, pp_chunk_t *ch, pp_slot_t *sl, int k, float *dy) {
  pp_state_t *st = t->priv;
  const unit_t *un = &t->model.units[ch->u1 - 1];
  if (is_last(st, ch)) {
    trainer_load_micro(t, k, st->M, st->dp, st->D, NULL, st->targets.data);
    return trainer_loss(t, st->b, sl->out[ch->u1 - 1 - ch->u0].data, st->targets.data, dy);
  }
  snprintf(st->tag, sizeof st->tag, "recv grad %d", k);
  comm_t *c = ch->rx_grad.comm;
  comm_wait(c, comm_recv_async(c, dy, (int64_t)st->b * un->y_numel, DT_F32, ch->rx_grad.peer, st->tag));
  return 0.0;
}

/* ---- one forward, one backward ---------------------------------------------------------------- */

static unit_io_t chunk_io(trainer_t *t, pp_chunk_t *ch, pp_slot_t *sl, int u) {
  pp_state_t *st = t->priv;
  int i = u - ch->u0;
  return (unit_io_t){.dev = t->dev, .wdt = t->wdt, .B = st->b, .params = t->unit_params[u],
                     .x = i == 0 ? sl->in.data : sl->out[i - 1].data, .y = sl->out[i].data,
                     .saved = (t->cfg->recompute ? st->saved_rc : sl->saved[i]).data};
}

/* --zero 3: unit u's working params for one forward or one backward of one micro-batch, all-gathered
 * from the D replicas' pieces into st->gathered (LEDGER_COMM); pp_params_release frees it. Every
 * replica of the stage runs the same schedule, so they meet in the same gathers in the same order.
 * Nothing with --zero 0/1/2: the stage's params are whole there. */
static void pp_params_gather(trainer_t *t, int u) {
  pp_state_t *st = t->priv;
  if (st->zero != 3) return;
  const unit_t *un = &t->model.units[u];
  st->gathered = tensor_alloc("gathered unit params", LEDGER_COMM, t->wdt, t->dev, un->padded);
  comm_all_gather(st->dpc, tensor_at(&t->params, st->sloc[u]), st->gathered.data, un->padded, t->wdt);
  t->unit_params[u] = st->gathered.data;
}

static void pp_params_release(trainer_t *t, int u) {
  pp_state_t *st = t->priv;
  if (st->zero != 3) return;
  dev_sync(t->dev); /* the unit's kernels have read it */
  tensor_free(&st->gathered);
  t->unit_params[u] = NULL;
}

/* The forward of micro-batch k on chunk ch; returns its busy time (µs). */
static double pp_forward(trainer_t *t, pp_chunk_t *ch, int k) {
  pp_state_t *st = t->priv;
  pp_slot_t *sl = slot_take(t, ch, k);
  pp_recv_forward(t, ch, sl, k); /* waiting for the input is idle time, not busy */
  char name[32];
  if (st->v > 1) snprintf(name, sizeof name, "F %d.%d", k, ch->c);
  else snprintf(name, sizeof name, "F %d", k);
  double t0 = trace_now_us();
  trace_begin(name);
  for (int u = ch->u0; u < ch->u1; u++) {
    pp_params_gather(t, u); /* --zero 3 */
    unit_io_t io = chunk_io(t, ch, sl, u);
    model_forward(&t->model, u, &io);
    pp_params_release(t, u);
  }
  dev_sync(t->dev);
  trace_end(NULL);
  double busy = trace_now_us() - t0;
  pp_send_forward(t, ch, sl, k);
  return busy;
}

/* The backward of micro-batch k on chunk ch: its units in reverse, gradients written with beta
 * (micro-batch 0 overwrites, later ones accumulate: the 1-rank --accum order). Adds the loss
 * (last chunk) to *loss; returns its busy time (µs). */
static double pp_backward(trainer_t *t, pp_chunk_t *ch, int k, double *loss) {
  pp_state_t *st = t->priv;
  const model_t *m = &t->model;
  pp_slot_t *sl = slot_of(t, ch, k);
  float *dy = st->dy[0].data, *dyp = st->dy[1].data;
  double t0 = 0;
  char name[32];
  if (st->v > 1) snprintf(name, sizeof name, "B %d.%d", k, ch->c);
  else snprintf(name, sizeof name, "B %d", k);
  if (is_last(st, ch)) { /* the loss is this stage's work: inside the busy block */
    t0 = trace_now_us();
    trace_begin(name);
    *loss += pp_recv_backward(t, ch, sl, k, dy);
  } else {
    pp_recv_backward(t, ch, sl, k, dy);
    t0 = trace_now_us();
    trace_begin(name);
  }
  float *dx_out = NULL; /* the gradient of the chunk's input, for chunk c−1 */
  if (!is_first(ch)) {
    int j = k % 2;
    comm_wait(ch->tx_grad.comm, ch->gsent[j]); /* its previous send has left */
    dx_out = ch->gsend[j].data;
  }
  t->micro = k;
  for (int u = ch->u1 - 1; u >= ch->u0; u--) {
    pp_params_gather(t, u); /* --zero 3: again, for the backward (and its recompute) */
    unit_io_t io = chunk_io(t, ch, sl, u);
    if (t->cfg->recompute && m->units[u].saved_numel > 0) model_forward(m, u, &io); /* same inputs, same bits */
    io.grads = t->unit_grads[u];
    io.beta = t->grad_beta = k == 0 ? 0.0f : 1.0f;
    io.dy = dy;
    io.dx = u > ch->u0 ? dyp : dx_out; /* unit 0 of the model: NULL, nothing before it */
    model_backward(m, u, &io);
    pp_params_release(t, u);
    trainer_check_grads(t, u);
    float *tmp = dy;
    dy = dyp;
    dyp = tmp;
  }
  dev_sync(t->dev);
  trace_end(NULL);
  double busy = trace_now_us() - t0;
  if (dx_out) {
    snprintf(st->tag, sizeof st->tag, "send grad %d", k);
    ch->gsent[k % 2] = comm_send_async(ch->tx_grad.comm, dx_out, (int64_t)st->b * ch->in_numel, DT_F32, ch->tx_grad.peer,
                                       st->tag);
  }
  slot_give_back(t, ch, sl);
  return busy;
}

/* ---- the strategy ------------------------------------------------------------------------- */

static void pp_resync(trainer_t *t);

/* --zero 2/3: the stage's full gradient for this step (zero-filled: the pad slots stay 0 for the
 * reduce-scatter), and the units' gradient views into it. Freed by pp_step once reduce-scattered. */
static void pp_grads_full(trainer_t *t) {
  pp_state_t *st = t->priv;
  st->gfull = tensor_alloc("grads (full, this step)", LEDGER_GRADS, t->wdt, t->dev, st->numel);
  for (int u = 0; u < t->model.n_units; u++)
    if (st->loc[u] >= 0) t->unit_grads[u] = tensor_at(&st->gfull, st->loc[u]);
}

static void wait_links(pp_state_t *st) {
  comm_t *cs[4] = {st->fwd, st->bwd, st->fwdw, st->bwdw};
  for (int j = 0; j < st->v; j++) /* every handle waited by name (exercise mode names a dropped one) */
    for (int i = 0; i < 2; i++)
      if (st->chunks[j].gsent[i]) comm_wait(st->chunks[j].tx_grad.comm, st->chunks[j].gsent[i]);
  for (int i = 0; i < 4; i++)
    if (cs[i]) comm_wait_all(cs[i]);
  for (int j = 0; j < st->v; j++) st->chunks[j].gsent[0] = st->chunks[j].gsent[1] = 0;
}

/* The whole step's micro-batches in this rank's order (strategy_t.run_step). */
static double pp_run_step(trainer_t *t) {
  pp_state_t *st = t->priv;
  if (st->resync) pp_resync(t);
  if (st->zero >= 2) pp_grads_full(t); /* the full gradient lives from here to the reduce-scatter */
  /* The window starts here: every rank left the loop's loss all-reduce of the last step
   * together (no barrier: a rank that never comes is then found by a p2p wait's deadline). */
  double t0 = trace_now_us(), busy = 0, loss = 0;
  for (int i = 0; i < st->n_ops; i++) {
    const pp_op_t *op = &st->ops[i];
    pp_chunk_t *ch = &st->chunks[op->chunk];
    busy += op->kind == 'F' ? pp_forward(t, ch, op->micro) : pp_backward(t, ch, op->micro, &loss);
  }
  wait_links(st);
  comm_barrier(t->comm); /* ... and ends when the last stage of the last pipeline is done */
  double span = trace_now_us() - t0;
  if (t->step > 0 || t->cfg->steps == 1) { /* the first step warms up caches and the pool */
    st->busy_us += busy;
    st->span_us += span;
    st->measured++;
  }
  t->last_micro = 1;
  return loss;
}

static void pp_report(trainer_t *t); /* at the end of the last step */

/* The optimizer on this rank's units, once the pipeline has drained (the gradients are final only
 * after the last micro-batch's backward: the data-parallel reduction cannot start earlier).
 *   --zero 0: all-reduce the gradients over the D replicas; every replica updates everything.
 *   --zero 1/2: one reduce-scatter per unit (solutions/zero.h's layout: each unit padded to a
 *             multiple of D, replica dp owns piece dp), each replica updates its pieces (its
 *             master and optimizer states are those pieces only), one all-gather per unit.
 *             --zero 2 then frees the full gradient: its shard is all it keeps between steps.
 *   --zero 3: as --zero 2, and the params are the own pieces too: the optimizer casts its update
 *             into them and nothing is gathered here (each forward and backward gathers its unit). */
static void pp_step(trainer_t *t) {
  pp_state_t *st = t->priv;
  const model_t *m = &t->model;
  st->steps_run++;
  size_t esz = dtype_size(t->wdt);
  if (!st->zero) {
    void *g = t->grads.data;
    if (st->dpc) TRAINER_PHASE("all_reduce grads", comm_all_reduce(st->dpc, g, st->numel, t->wdt, REDOP_SUM));
    /* the global norm is the sum over stages of their Σg²: one replica of each stage speaks */
    float gscale = trainer_finish_grads(t, st->dp == 0 ? op_sumsq(t->dev, g, t->wdt, st->numel) : 0.0, 1);
    float *w = dtype_is_half(t->wdt) ? (float *)t->master.data : (float *)t->params.data;
    TRAINER_PHASE("optimizer", trainer_optimizer_update(t, w, g, t->opt_m.data, t->opt_v.data, st->numel, gscale));
    if (dtype_is_half(t->wdt) && !t->skipped)
      TRAINER_PHASE("cast params", op_cast(t->dev, t->params.data, t->wdt, t->master.data, DT_F32, st->numel));
    if (t->step == t->cfg->steps - 1) pp_report(t);
    return;
  }
  tensor_t *full = st->zero >= 2 ? &st->gfull : &t->grads, *shard = st->zero >= 2 ? &t->grads : &st->gshard;
  trace_begin("reduce_scatter grads");
  for (int u = 0; u < m->n_units; u++)
    if (st->loc[u] >= 0)
      comm_reduce_scatter_async(st->dpc, tensor_at(full, st->loc[u]), tensor_at(shard, st->sloc[u]), m->units[u].padded,
                                t->wdt, REDOP_SUM, "reduce-scatter grads");
  comm_wait_all(st->dpc);
  trace_end(NULL);
  if (st->zero >= 2) { /* the saving of ZeRO-2 under pipelining: only from here to the next step's start */
    tensor_free(&st->gfull);
    for (int u = 0; u < m->n_units; u++)
      if (st->loc[u] >= 0) t->unit_grads[u] = NULL;
  }
  /* the global norm: every replica speaks for its pieces (disjoint, pad slots 0) */
  float gscale = trainer_finish_grads(t, op_sumsq(t->dev, shard->data, t->wdt, st->shard_numel), 1);
  if (t->skipped) goto done; /* --nonfinite skip: params unchanged everywhere, nothing to gather */
  trace_begin("optimizer (own pieces) + cast");
  for (int u = 0; u < m->n_units; u++) {
    if (st->loc[u] < 0) continue;
    const unit_t *un = &m->units[u];
    int64_t o = st->sloc[u];
    void *p_own = st->zero == 3 ? tensor_at(&t->params, o) /* working params of the piece */
                                : tensor_at(&t->params, st->loc[u] + (int64_t)st->dp * un->piece);
    float *w = dtype_is_half(t->wdt) ? (float *)t->master.data + o : (float *)p_own;
    trainer_optimizer_update(t, w, (char *)shard->data + o * (int64_t)esz, (float *)t->opt_m.data + o,
                             t->opt_v.data ? (float *)t->opt_v.data + o : NULL, un->piece, gscale);
    if (dtype_is_half(t->wdt)) op_cast(t->dev, p_own, t->wdt, w, DT_F32, un->piece);
  }
  trace_end(NULL);
  if (st->zero == 3) goto done; /* the params stay in pieces: the next step's forwards gather them */
  trace_begin("all_gather params");
  for (int u = 0; u < m->n_units; u++) /* in place: each replica's piece to all */
    if (st->loc[u] >= 0)
      comm_all_gather_async(st->dpc, tensor_at(&t->params, st->loc[u] + (int64_t)st->dp * m->units[u].piece),
                            tensor_at(&t->params, st->loc[u]), m->units[u].padded, t->wdt, "all-gather params");
  comm_wait_all(st->dpc);
  trace_end(NULL);
done:
  if (t->step == t->cfg->steps - 1) pp_report(t);
}

/* After --resume with D > 1: the layout hook names dp 0 as the owner of each stage's states, so
 * only dp 0 got its master and optimizer states back; the replicas take them from it. */
static void pp_resync(trainer_t *t) {
  pp_state_t *st = t->priv;
  st->resync = 0;
  if (!st->dpc || st->zero) return; /* ZeRO-1: every replica owns (and got back) its own chunk */
  comm_broadcast(st->dpc, t->params.data, st->numel, t->wdt, 0);
  if (t->master.data) comm_broadcast(st->dpc, t->master.data, st->numel, DT_F32, 0);
  comm_broadcast(st->dpc, t->opt_m.data, st->numel, DT_F32, 0);
  if (t->opt_v.data) comm_broadcast(st->dpc, t->opt_v.data, st->numel, DT_F32, 0);
}

/* The links of chunk c on stage s: activations come from c−1 (stage s−1, or the last stage over
 * the wrap link when s = 0) and go to c+1; gradients the other way. */
static void chunk_links(pp_state_t *st, pp_chunk_t *ch) {
  int s = st->stage, P = st->P;
  if (ch->c > 0) {
    ch->rx_act = s > 0 ? (pp_link_t){st->fwd, s - 1} : (pp_link_t){st->fwdw, 1}; /* wrap: 2 ranks, P−1 is 1 */
    ch->tx_grad = s > 0 ? (pp_link_t){st->bwd, s - 1} : (pp_link_t){st->bwdw, 1};
  }
  if (ch->c < st->V - 1) {
    ch->tx_act = s < P - 1 ? (pp_link_t){st->fwd, s + 1} : (pp_link_t){st->fwdw, 0};
    ch->rx_grad = s < P - 1 ? (pp_link_t){st->bwd, s + 1} : (pp_link_t){st->bwdw, 0};
  }
}

static void pp_setup(trainer_t *t) {
  pp_state_t *st = xcalloc(1, sizeof *st, "pipeline state");
  t->priv = st;
  const train_cfg_t *c = t->cfg;
  const model_t *m = &t->model;
  int U = m->n_units;
  st->sched = (pp_schedule_t)pp_schedule_parse(c->schedule);
  st->P = c->pp > 0 ? c->pp : t->world;
  st->v = st->sched == PP_INTERLEAVED ? c->virtual_stages : 1;
  st->V = st->v * st->P;
  st->M = c->micro_batches;
  if (st->V > U || t->world % st->P)
    die("rank %d: --pp %d: needs P x virtual stages <= units (%d) and P dividing the ranks (%d)", t->rank, st->P, U, t->world);
  st->D = t->world / st->P;
  st->stage = t->rank % st->P;
  st->dp = t->rank / st->P;
  st->b = (int)(c->batch / ((int64_t)st->M * st->D));
  t->local_batch = st->b;
  /* Communicators: rank = dp·P + stage. Two copies of this pipeline (one per direction); with
   * virtual stages, the ring's wrap link (last stage and stage 0) once per direction; the
   * stage's data-parallel group. Collective: every rank makes the same calls in the same order. */
  st->fwd = comm_split(t->comm, st->dp, st->stage);
  st->bwd = comm_split(t->comm, st->dp, st->stage);
  if (st->v > 1) { /* color: this pipeline's {P−1, 0} pair, key: 0 for stage 0 (so P−1 is rank 1) */
    int in_wrap = st->stage == 0 || st->stage == st->P - 1;
    int color = in_wrap ? st->dp : t->world + t->rank; /* the others: a group of their own */
    comm_t *w1 = comm_split(t->comm, color, st->stage == 0 ? 0 : 1);
    comm_t *w2 = comm_split(t->comm, color, st->stage == 0 ? 0 : 1);
    if (in_wrap) st->fwdw = w1, st->bwdw = w2;
    else comm_finalize(w2), comm_finalize(w1);
  }
  comm_t *dpc = comm_split(t->comm, st->stage, st->dp);
  if (st->D > 1) st->dpc = dpc;
  else comm_finalize(dpc);

  /* The split into V chunks, by parameter count. */
  int64_t *numel = xcalloc((size_t)U, sizeof *numel, "unit numel");
  for (int u = 0; u < U; u++) numel[u] = m->units[u].numel;
  if (t->tp_comm) { /* --tp: split by the WHOLE units' sizes, so every TP rank cuts in the same place */
    double *d = xcalloc((size_t)U, sizeof *d, "unit numel (f64)");
    for (int u = 0; u < U; u++) d[u] = (double)numel[u];
    comm_ctl_all_reduce_f64(t->tp_comm, d, U, REDOP_SUM);
    for (int u = 0; u < U; u++) numel[u] = (int64_t)d[u];
    free(d);
  }
  st->first = xcalloc((size_t)st->V + 1, sizeof *st->first, "pipeline split");
  pp_split(numel, U, st->V, st->first);
  free(numel);

  /* --zero S: the data dimension's shard layout (solutions/zero.h): every unit padded to a
   * multiple of D, replica dp owns piece dp of each of its stage's units. */
  st->zero = st->D > 1 ? c->zero : 0; /* D = 1: nothing to shard */
  if (c->zero > 3) die("rank %d: --zero %d: stages are 0..3 (notes/07-pipeline.md, the data dimension)", t->rank, c->zero);
  if (st->zero) shard_plan(&t->model, st->D);

  /* This rank's units: chunks stage, stage+P, ...; their parameters back to back. */
  st->chunks = xcalloc((size_t)st->v, sizeof *st->chunks, "pipeline chunks");
  st->loc = xmalloc((size_t)U * sizeof *st->loc, "unit offsets");
  st->sloc = xmalloc((size_t)U * sizeof *st->sloc, "unit piece offsets");
  for (int u = 0; u < U; u++) st->loc[u] = st->sloc[u] = -1;
  for (int j = 0; j < st->v; j++) {
    pp_chunk_t *ch = &st->chunks[j];
    ch->c = j * st->P + st->stage;
    ch->u0 = st->first[ch->c];
    ch->u1 = st->first[ch->c + 1];
    for (int u = ch->u0; u < ch->u1; u++) {
      st->loc[u] = st->numel, st->numel += m->units[u].padded;
      st->sloc[u] = st->shard_numel, st->shard_numel += m->units[u].piece;
    }
    chunk_links(st, ch);
  }

  /* Model states for this rank's units only, as zero.h's stages hold them (ZeRO-0: everything):
   *            params          grads                           master, m, v
   *   --zero 0  (Ψs) full       (Ψs) full                       (Ψs)
   *   --zero 1  (Ψs) full       (Ψs) full                       (Ψs/D) own pieces
   *   --zero 2  (Ψs) full       (Ψs/D) own pieces, + (Ψs) full   (Ψs/D) own pieces
   *                             during the step only (pp_grads_full)
   *   --zero 3  (Ψs/D) own      as --zero 2                      (Ψs/D) own pieces
   *             pieces, + one unit gathered per forward / backward (pp_params_gather) */
  int64_t n_own = st->zero ? st->shard_numel : st->numel;
  t->params = st->zero == 3 ? tensor_alloc("params (own pieces)", LEDGER_PARAMS, t->wdt, t->dev, n_own)
                            : tensor_alloc("params", LEDGER_PARAMS, t->wdt, t->dev, st->numel);
  t->grads = st->zero >= 2 ? tensor_alloc("grads (own shard)", LEDGER_GRADS, t->wdt, t->dev, n_own)
                           : tensor_alloc("grads", LEDGER_GRADS, t->wdt, t->dev, st->numel);
  if (dtype_is_half(t->wdt)) t->master = tensor_alloc("master", LEDGER_MASTER, DT_F32, t->dev, n_own);
  t->opt_m = tensor_alloc("optim m", LEDGER_OPTIM, DT_F32, t->dev, n_own);
  if (c->optimizer == OPT_ADAMW) t->opt_v = tensor_alloc("optim v", LEDGER_OPTIM, DT_F32, t->dev, n_own);
  if (st->zero == 1) st->gshard = tensor_alloc("grad shard (reduce-scatter out)", LEDGER_COMM, t->wdt, t->dev, n_own);
  float *h = xmalloc((size_t)st->numel * sizeof(float) + 4, "stage init");
  for (int j = 0; j < st->v; j++) { /* a pure function of the seed: no broadcast */
    const pp_chunk_t *ch = &st->chunks[j];
    const unit_t *a = &m->units[ch->u0], *z = &m->units[ch->u1 - 1];
    trainer_init_values(t, a->off, z->off + z->padded, h + st->loc[ch->u0]);
  }
  if (dtype_is_half(t->wdt)) {
    for (int u = 0; u < U; u++) /* the master: the own pieces (everything with --zero 0) */
      if (st->loc[u] >= 0) {
        int64_t n = st->zero ? m->units[u].piece : m->units[u].padded;
        int64_t from = st->loc[u] + (st->zero ? (int64_t)st->dp * n : 0), to = st->zero ? st->sloc[u] : st->loc[u];
        dev_upload(t->dev, (float *)t->master.data + to, DT_F32, h + from, n);
      }
  }
  if (st->zero == 3) { /* the own pieces of the working params; bf16(init): what the cast of the master gives */
    for (int u = 0; u < U; u++)
      if (st->loc[u] >= 0)
        dev_upload(t->dev, tensor_at(&t->params, st->sloc[u]), t->wdt, h + st->loc[u] + (int64_t)st->dp * m->units[u].piece,
                   m->units[u].piece);
  } else {
    dev_upload(t->dev, t->params.data, t->wdt, h, st->numel);
  }
  free(h);
  for (int u = 0; u < U; u++)
    if (st->loc[u] >= 0) {
      t->unit_params[u] = st->zero == 3 ? NULL : tensor_at(&t->params, st->loc[u]); /* --zero 3: gathered per use */
      if (st->zero < 2) t->unit_grads[u] = tensor_at(&t->grads, st->loc[u]); /* --zero 2: each step's own */
    }

  /* Activations: the pools (empty: they grow as micro-batches go in flight) and the workspace. */
  int64_t b = st->b, maxy = 0, maxs = 0, last = 0;
  for (int j = 0; j < st->v; j++) {
    pp_chunk_t *ch = &st->chunks[j];
    ch->in_numel = ch->u0 == 0 ? m->in_numel : m->units[ch->u0 - 1].y_numel;
    int64_t per = ch->in_numel;
    for (int u = ch->u0; u < ch->u1; u++) {
      const unit_t *un = &m->units[u];
      if (un->y_numel > maxy) maxy = un->y_numel;
      if (un->saved_numel > maxs) maxs = un->saved_numel;
      per += un->y_numel + (c->recompute ? 0 : un->saved_numel);
    }
    ch->slot_bytes = 4 * b * per;
    ch->slots = xcalloc((size_t)st->M, sizeof *ch->slots, "pipeline slots");
    if (!is_first(ch)) {
      ch->gsend[0] = tensor_alloc("grad to send", LEDGER_ACTS, DT_F32, t->dev, b * ch->in_numel);
      ch->gsend[1] = tensor_alloc("grad to send", LEDGER_ACTS, DT_F32, t->dev, b * ch->in_numel);
      st->ws_bytes += 2 * 4 * b * ch->in_numel;
    }
    last |= is_last(st, ch);
  }
  st->dy[0] = tensor_alloc("dy", LEDGER_ACTS, DT_F32, t->dev, b * maxy);
  st->dy[1] = tensor_alloc("dy", LEDGER_ACTS, DT_F32, t->dev, b * maxy);
  st->ws_bytes += 2 * 4 * b * maxy;
  if (last) {
    st->targets = tensor_alloc("targets", LEDGER_ACTS, DT_F32, t->dev, b * m->rows); /* 4-byte ints */
    st->ws_bytes += 4 * b * m->rows;
  }
  if (c->recompute) {
    st->saved_rc = tensor_alloc("saved (recompute)", LEDGER_ACTS, DT_F32, t->dev, b * maxs);
    st->ws_bytes += 4 * b * maxs;
  }
  st->ops = xcalloc(2 * (size_t)st->M * (size_t)st->v, sizeof *st->ops, "pipeline schedule");
  st->n_ops = pp_schedule_ops(st->sched, st->P, st->stage, st->M, st->v, st->ops);
  st->resync = c->resume != NULL;

  if (t->rank == 0 && !c->quiet) {
    printf("pipeline: %d stage%s x %d data-parallel, schedule %s", st->P, st->P > 1 ? "s" : "", st->D, c->schedule);
    if (st->v > 1) printf(" (%d virtual stages per rank: %d chunks, chunk c on stage c mod %d)", st->v, st->V, st->P);
    printf(", %d micro-batches of %d sample%s per step (bubble formula %.4f)\n", st->M, st->b, st->b > 1 ? "s" : "",
           pp_bubble_formula(st->sched, st->P, st->M, st->v));
    if (st->D > 1) {
      static const char *what[4] = {"all-reduce of the grads, every replica updates everything",
                                    "ZeRO-1: one reduce-scatter per unit, master and optimizer states of the own pieces, "
                                    "one all-gather per unit",
                                    "ZeRO-2: as ZeRO-1, and the grads kept between steps are the own pieces",
                                    "ZeRO-3: as ZeRO-2, and the params too: each unit all-gathered before every "
                                    "micro-batch's forward and backward"};
      printf("data dimension: %d replicas of each stage, --zero %d (%s)\n", st->D, st->zero, what[st->zero]);
      if (st->zero == 2)
        printf("  caveat: the grads are reduce-scattered once per step, after the last micro-batch; every micro-batch's\n"
               "  backward adds into the stage's full gradient, so it lives through all M = %d micro-batches and\n"
               "  ZeRO-2 saves only between steps (the full buffer is freed after the reduce-scatter): see the grads lines\n",
               st->M);
      if (st->zero == 3)
        printf("  caveat: the grads are reduce-scattered once per step, after the last micro-batch: the full gradient\n"
               "  lives through all M = %d micro-batches (freed only between steps), and every unit's params are\n"
               "  gathered 2M = %d times per step (M times ZeRO-3's usual 2): (2M+1)(D-1)/D x params bytes per step.\n"
               "  This is why DeepSpeed's pipeline engine refuses ZeRO-2/3 and Megatron pairs PP with ZeRO-1\n",
               st->M, 2 * st->M);
    }
    printf("split by parameter count:\n");
    for (int k = 0; k < st->V; k++) {
      int64_t n = 0;
      for (int u = st->first[k]; u < st->first[k + 1]; u++) n += m->units[u].numel;
      if (st->v > 1) printf("  chunk %d (stage %d): units %d..%d, %lld params (%.1f%%)\n", k, k % st->P, st->first[k],
                            st->first[k + 1] - 1, (long long)n, 100.0 * (double)n / (double)m->numel);
      else printf("  stage %d: units %d..%d, %lld params (%.1f%%)\n", k, st->first[k], st->first[k + 1] - 1, (long long)n,
                  100.0 * (double)n / (double)m->numel);
    }
    fflush(stdout);
  }
}

/* Per-rank numbers to rank 0 (control traffic), printed in rank order and put in --json. */
static void pp_report(trainer_t *t) {
  pp_state_t *st = t->priv;
  int N = t->world, cols = 9;
  double *vals = xcalloc((size_t)N * cols, sizeof *vals, "pipeline report");
  double steps = st->measured > 0 ? st->measured : 1;
  int formula_k = pp_inflight_formula(st->sched, st->P, st->stage, st->M, st->v);
  int64_t slot_bytes = 0, pool_bytes = 0; /* one slot (v = 1), and the pools as allocated */
  for (int j = 0; j < st->v; j++) {
    slot_bytes = st->chunks[j].slot_bytes;
    pool_bytes += (int64_t)st->chunks[j].n_slots * st->chunks[j].slot_bytes;
  }
  double *mine = vals + (size_t)t->rank * cols;
  mine[0] = st->busy_us / steps;
  mine[1] = st->span_us / steps;
  mine[2] = st->v > 1 ? st->peak_in_flight : (double)pool_bytes; /* measured: slots (v > 1) or bytes */
  mine[3] = st->v > 1 ? formula_k : (double)formula_k * (double)slot_bytes; /* the formula, alike */
  comm_t *cs[4] = {st->fwd, st->bwd, st->fwdw, st->bwdw};
  for (int j = 0; j < st->v; j++) /* every handle waited by name (exercise mode names a dropped one) */
    for (int i = 0; i < 2; i++)
      if (st->chunks[j].gsent[i]) comm_wait(st->chunks[j].tx_grad.comm, st->chunks[j].gsent[i]);
  for (int i = 0; i < 4; i++)
    if (cs[i]) mine[4] += (double)comm_counters(cs[i]).sent[CO_SEND] / t->cfg->steps;
  if (st->dpc) { /* the data dimension's traffic per step (not the resync broadcasts of a resume) */
    comm_counters_t k = comm_counters(st->dpc);
    mine[5] = (double)(k.sent[CO_ALL_REDUCE] + k.sent[CO_REDUCE_SCATTER] + k.sent[CO_ALL_GATHER]) / st->steps_run;
  }
  mine[6] = (double)ledger_peak(LEDGER_GRADS); /* --zero 2: full + shard, at the reduce-scatter */
  mine[7] = (double)ledger_live(LEDGER_GRADS); /* after the step: what stays between steps */
  mine[8] = (double)ledger_live(LEDGER_PARAMS); /* --zero 3: the own pieces (the gathered unit is LEDGER_COMM) */
  comm_ctl_all_reduce_f64(t->comm, vals, N * cols, REDOP_SUM);
  int64_t psi_s = 0;
  for (int u = 0; u < t->model.n_units; u++)
    if (st->loc[u] >= 0) psi_s += t->model.units[u].numel;
  int64_t states = tensor_nbytes(&t->params) + tensor_nbytes(&t->grads) + tensor_nbytes(&t->master) +
                   tensor_nbytes(&t->opt_m) + tensor_nbytes(&t->opt_v);
  double bf = pp_bubble_formula(st->sched, st->P, st->M, st->v);
  double fstates = formula_model_states(st->zero, (double)psi_s, st->zero ? st->D : 1, t->wdt,
                                        t->cfg->optimizer == OPT_ADAMW ? 2 : 1).total;
  /* Two lines: the measured times (they vary run to run), then the bytes (they never do). */
  char line[1536];
  int n = snprintf(line, sizeof line, "rank %d stage %d: busy %.3f ms, idle %.3f ms per step: bubble %.4f (formula %.4f)\n",
                   t->rank, st->stage, mine[0] / 1000, (mine[1] - mine[0]) / 1000,
                   mine[1] > 0 ? 1 - mine[0] / mine[1] : 0, bf);
  if (st->v > 1)
    snprintf(line + n, sizeof line - (size_t)n,
             "rank %d stage %d: %d chunks, model states %lld B (formula %.0f for its %lld params); activations in "
             "flight: peak %d micro-batch-chunks (formula %d), %lld B allocated, +%lld B workspace\n",
             t->rank, st->stage, st->v, (long long)states, fstates, (long long)psi_s, st->peak_in_flight, formula_k,
             (long long)pool_bytes, (long long)st->ws_bytes);
  else
    snprintf(line + n, sizeof line - (size_t)n,
             "rank %d stage %d: units %d..%d, model states %lld B (formula %.0f for its %lld params); activations in "
             "flight: peak %d micro-batch%s x %lld B = %lld B (formula %d x %lld B), +%lld B workspace\n",
             t->rank, st->stage, st->chunks[0].u0, st->chunks[0].u1 - 1, (long long)states, fstates, (long long)psi_s,
             st->peak_in_flight, st->peak_in_flight > 1 ? "es" : "", (long long)slot_bytes, (long long)pool_bytes,
             formula_k, (long long)slot_bytes, (long long)st->ws_bytes);
  size_t len = strlen(line);
  size_t esz = dtype_size(t->wdt);
  /* the data dimension, per rank per step: ring all-reduce 2(D−1)/D·Ψs·b; ZeRO-1/2 a reduce-scatter
   * and an all-gather of every padded unit, (D−1)/D·padded·b each = 2(D−1)·(Σ piece)·b; ZeRO-3
   * 2M all-gathers (a forward and a backward per micro-batch) and one reduce-scatter: (2M+1)(D−1)·(Σ piece)·b */
  double gathers = st->zero == 3 ? 2.0 * st->M : 1.0;
  double dp_formula = st->zero ? (gathers + 1) * (st->D - 1) * (double)st->shard_numel * (double)esz
                               : 2.0 * (st->D - 1) / st->D * (double)st->numel * (double)esz;
  int64_t unit_max = 0; /* --zero 3: the largest gathered unit */
  for (int u = 0; u < t->model.n_units; u++)
    if (st->loc[u] >= 0 && t->model.units[u].padded > unit_max) unit_max = t->model.units[u].padded;
  if (st->dpc)
    len += (size_t)snprintf(line + len, sizeof line - len, "rank %d stage %d: data dimension %.0f B sent per step (formula %.0f)\n",
                            t->rank, st->stage, mine[5], dp_formula);
  if (st->zero == 3)
    len += (size_t)snprintf(line + len, sizeof line - len,
                            "rank %d stage %d: params %.0f B between steps (own pieces %lld; --zero 0/1/2 hold %lld), "
                            "+ one unit gathered (%lld B at most) per forward / backward\n",
                            t->rank, st->stage, mine[8], (long long)(st->shard_numel * (int64_t)esz),
                            (long long)(st->numel * (int64_t)esz), (long long)(unit_max * (int64_t)esz));
  if (st->zero >= 2)
    snprintf(line + len, sizeof line - len,
             "rank %d stage %d: grads %.0f B at the peak of the step (full %lld + own pieces %lld), %.0f B between steps; "
             "--zero 1 holds %lld B throughout\n",
             t->rank, st->stage, mine[6], (long long)(st->numel * (int64_t)esz), (long long)(st->shard_numel * (int64_t)esz),
             mine[7], (long long)(st->numel * (int64_t)esz));
  if (!t->cfg->quiet) comm_print_ordered(t->comm, line);
  double bubble = 0, sent = 0;
  int match = 1;
  for (int r = 0; r < N; r++) {
    const double *q = vals + (size_t)r * cols;
    bubble += q[1] > 0 ? 1 - q[0] / q[1] : 0;
    sent += q[4];
    match &= q[2] == q[3];
  }
  trainer_report_extra(t, "pp", st->P);
  trainer_report_extra(t, "micro_batches", st->M);
  if (st->v > 1) trainer_report_extra(t, "virtual_stages", st->v);
  trainer_report_extra(t, "bubble_fraction", bubble / N);
  trainer_report_extra(t, "bubble_formula", bf);
  trainer_report_extra(t, "acts_inflight_match_formula", match);
  trainer_report_extra(t, "p2p_bytes_per_step_per_rank", sent / N);
  int n_extras = 7 + (st->v > 1);
  if (st->dpc) { /* rank 0's (stage 0's) numbers: the report keeps rank 0's values */
    trainer_report_extra(t, "dp_bytes_per_step", vals[5]);
    trainer_report_extra(t, "dp_bytes_formula", dp_formula);
    n_extras += 2;
  }
  if (st->zero == 3) {
    trainer_report_extra(t, "params_between_steps_bytes", vals[8]);
    n_extras += 1;
  }
  if (st->zero >= 2) {
    trainer_report_extra(t, "grads_peak_bytes", vals[6]);
    trainer_report_extra(t, "grads_between_steps_bytes", vals[7]);
    n_extras += 2;
  }
  /* pipeline 0's stages (ranks 0..P−1): bytes, or slots (v > 1); as many as the 16 extras leave room for */
  for (int s = 0; s < st->P && s < 4 && n_extras + 2 <= 16; s++, n_extras += 2) {
    char key[32];
    snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
    trainer_report_extra(t, key, vals[(size_t)s * cols + 2]);
    snprintf(key, sizeof key, "acts_inflight_formula_s%d", s);
    trainer_report_extra(t, key, vals[(size_t)s * cols + 3]);
  }
  if (t->rank == 0 && !t->cfg->quiet) {
    printf("bubble: %.4f measured (mean over ranks: idle / step window, from the F/B blocks of the trace), "
           "formula %.4f (%s)\n", bubble / N, bf,
           st->sched == PP_NAIVE ? "(P-1)/P" : st->sched == PP_INTERLEAVED ? "(P-1)/(v*M+P-1)" : "(P-1)/(M+P-1)");
    fflush(stdout);
  }
  free(vals);
}

/* strategy_t.layout: this rank's units whole (one owner each: dp 0 of the stage); other units
 * are not here. Checkpoints and the export go through it. */
static void pp_layout(trainer_t *t, int u, unit_layout_t *out) {
  pp_state_t *st = t->priv;
  *out = (unit_layout_t){0};
  if (st->loc[u] < 0) return;
  const unit_t *un = &t->model.units[u];
  int64_t o = st->loc[u];
  out->held_off = st->zero == 3 ? (int64_t)st->dp * un->piece : 0; /* --zero 3: the own piece of the params */
  out->held_numel = st->zero == 3 ? un->piece : un->padded;
  out->params = st->zero == 3 ? tensor_at(&t->params, st->sloc[u]) : t->unit_params[u];
  if (!st->zero) { /* every replica holds it all: dp 0 speaks for the stage (pp_resync after a resume) */
    if (st->dp != 0) return;
    out->own_numel = un->numel;
    out->w = dtype_is_half(t->wdt) ? (float *)t->master.data + o : (float *)t->params.data + o;
    out->m = (float *)t->opt_m.data + o;
    out->v = t->opt_v.data ? (float *)t->opt_v.data + o : NULL;
    return;
  }
  /* --zero 1/2/3: piece dp of the unit, [dp·piece, (dp+1)·piece), less the pad slots */
  int64_t a = (int64_t)st->dp * un->piece, z = a + un->piece < un->numel ? a + un->piece : un->numel;
  if (a >= z) return;
  int64_t so = st->sloc[u];
  out->own_off = a;
  out->own_numel = z - a;
  out->w = dtype_is_half(t->wdt) ? (float *)t->master.data + so : (float *)t->params.data + (st->zero == 3 ? so : o + a);
  out->m = (float *)t->opt_m.data + so;
  out->v = t->opt_v.data ? (float *)t->opt_v.data + so : NULL;
}

static void pp_teardown(trainer_t *t) {
  pp_state_t *st = t->priv;
  if (!st) return;
  for (int j = 0; j < st->v; j++) {
    pp_chunk_t *ch = &st->chunks[j];
    int n = ch->u1 - ch->u0;
    for (int i = 0; i < ch->n_slots; i++) {
      pp_slot_t *sl = &ch->slots[i];
      tensor_free(&sl->in);
      for (int k = 0; k < n; k++) {
        tensor_free(&sl->out[k]);
        tensor_free(&sl->saved[k]);
      }
      free(sl->out);
      free(sl->saved);
    }
    free(ch->slots);
    tensor_free(&ch->gsend[0]);
    tensor_free(&ch->gsend[1]);
  }
  tensor_free(&st->dy[0]);
  tensor_free(&st->dy[1]);
  tensor_free(&st->targets);
  tensor_free(&st->saved_rc);
  tensor_free(&st->gshard);
  tensor_free(&st->gfull);
  tensor_free(&st->gathered);
  if (st->dpc) comm_finalize(st->dpc);
  if (st->bwdw) comm_finalize(st->bwdw);
  if (st->fwdw) comm_finalize(st->fwdw);
  comm_finalize(st->bwd);
  comm_finalize(st->fwd);
  free(st->chunks);
  free(st->loc);
  free(st->sloc);
  free(st->ops);
  free(st->first);
  free(st);
  t->priv = NULL;
}

#define PP_STRATEGY(var, nm)                                                                                   \
  static const strategy_t var = {.name = nm, .stage = 0, .own_formulas = 1, .setup = pp_setup, .step = pp_step,    \
                                 .teardown = pp_teardown, .layout = pp_layout, .run_step = pp_run_step}
PP_STRATEGY(g_naive, "pipeline-naive");
PP_STRATEGY(g_gpipe, "pipeline-gpipe");
PP_STRATEGY(g_1f1b, "pipeline-1f1b");
PP_STRATEGY(g_interleaved, "pipeline-interleaved");

const strategy_t *pipeline_strategy(const char *schedule) {
  switch (pp_schedule_parse(schedule)) {
  case PP_NAIVE: return &g_naive;
  case PP_GPIPE: return &g_gpipe;
  case PP_1F1B: return &g_1f1b;
  case PP_INTERLEAVED: return &g_interleaved;
  default: return NULL;
  }
}
