/* pipeline.c — pipeline parallelism as a schedule of the loop (train.h's schedule_t): the split of
 * the units into stages, the naive / GPipe / 1F1B / interleaved 1F1B orders, the messages between
 * stages (notes/07-pipeline.md; the contract is in pipeline.h, the report in pipeline_report.c).
 *
 * The loop (loop.c) runs this rank's list of operations (pp_schedule_ops), each the forward or
 * the backward of one micro-batch over one CHUNK of units, and asks the schedule for the messages:
 *
 *   F k:  input  ← chunk c−1 (chunk 0: the data)    forward units    output → chunk c+1 (async)
 *   B k:  dy     ← chunk c+1 (last chunk: the loss)  backward units   dx     → chunk c−1 (async)
 *
 * Chunk c lives on stage c mod P: one chunk per rank without virtual stages, v of them (s, s+P,
 * ...) with interleaved 1F1B, where chunk P−1 (the last rank) feeds chunk P (rank 0): a ring.
 * The data dimension is not here: a stage's D replicas are the strategy's ranks (t->comm), and
 * DDP or ZeRO-1/2/3 (solutions/ddp.c, zero*.c) run on the stage's units as on a whole model, the
 * loop calling their hooks on every unit of every operation; the schedule asks them only for
 * no_sync (train.h), so that a step is bitwise 1-rank training with --accum M. */
#include "pipeline_state.h" // pp_state_t, pp_chunk_t, pp_report; pipeline.h: pp_split, pp_schedule_ops
#include "check.h"    // die, xcalloc, xmalloc
#include "comm.h"     // comm_split, comm_send_async, comm_recv_async, comm_wait, comm_ctl_all_reduce_f64
#include "exercise.h" // zl_exercise_todo (the generated stubs call it)
#include "grid.h"     // grid_coords: the one source of the rank layout
#include "ledger.h"   // ledger_peak, ledger_live, LEDGER_*
#include "tensor.h"   // tensor_alloc, tensor_free
#include "trace.h"    // trace_now_us
#include "train.h"    // trainer_t, schedule_t, trainer_* helpers
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // free, getenv
#include <string.h>   // strcmp

/* ---- the messages of a chunk ---------------------------------------------------------------- */

/* Forward: POST the receive of micro-batch k's input activation of chunk j (not chunk 0: its input
 * is the data, which the loop loads) into buf, and return its handle WITHOUT waiting: the receive is
 * posted ahead of the forward that reads it (pipeline_post.c), so the previous stage's send finds it
 * posted and the message moves while this stage still computes; pp_recv_forward waits for it. */
comm_handle_t pp_post_recv_forward(trainer_t *t, int j, int k, float *buf) {
  // BEGIN EXERCISE pp_stage_recv notes/07-pipeline.md
  // HINT: a stage's forward needs the output of the chunk before, on the previous stage; post the receive
  // HINT: now, wait only when the forward needs it.
  // HINT2: b × in_numel floats from ch->rx_act (its communicator and the peer's rank in it), into buf;
  // HINT2: return
  // HINT2: the handle without waiting (pp_recv_forward waits); name it with a tag ("recv act k") so a timeout
  // HINT2: says which.
  // HINT3: ch = &st->chunks[j]; snprintf(st->tag, ..., "recv act %d", k); return
  // HINT3: comm_recv_async(ch->rx_act.comm, buf, (int64_t)st->b * ch->in_numel, DT_F32, ch->rx_act.peer,
  // HINT3: st->tag).
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  snprintf(st->tag, sizeof st->tag, "recv act %d", k);
  return comm_recv_async(ch->rx_act.comm, buf, (int64_t)st->b * ch->in_numel, DT_F32, ch->rx_act.peer,
                         st->tag);
  // END EXERCISE
}

/* Forward: micro-batch k's input activation of chunk j into x, complete before returning: from its
 * pre-posted receive (copied), or, without pre-posting, received now. */
void pp_recv_forward(trainer_t *t, int j, int k, float *x) {
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  if (st->prepost) pp_post_take(t, &st->rxa, j, k, x, "activation");
  else comm_wait(ch->rx_act.comm, pp_post_recv_forward(t, j, k, x));
}

/* Forward: send micro-batch k's output y of chunk j (not the last chunk: its output is the
 * logits) on to the next chunk, without waiting: the handle is kept in ch->sent[k] and waited for
 * in pp_release, before the loop reuses the slot y lives in. */
void pp_send_forward(trainer_t *t, int j, int k, const float *y) {
  // BEGIN EXERCISE pp_stage_send notes/07-pipeline.md
  // HINT: the next stage needs this chunk's output; the stage should go on computing while it travels — but
  // HINT: the buffer must not be reused before it has left.
  // HINT2: y holds b × y_numel floats of the chunk's last unit (u1 − 1); send them over ch->tx_act without
  // HINT2: waiting, and keep the handle in ch->sent[k] (pp_release waits for it).
  // HINT3: ch->sent[k] = comm_send_async(ch->tx_act.comm, y, (int64_t)st->b * un->y_numel, DT_F32,
  // HINT3: ch->tx_act.peer, st->tag) with un = &t->model.units[ch->u1 - 1] and the tag "send act k".
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  const unit_t *un = &t->model.units[ch->u1 - 1];
  snprintf(st->tag, sizeof st->tag, "send act %d", k);
  ch->sent[k] =
      comm_send_async(ch->tx_act.comm, y, (int64_t)st->b * un->y_numel, DT_F32, ch->tx_act.peer, st->tag);
  // END EXERCISE
}

/* Backward: the gradient of micro-batch k's output of chunk j (not the last) from the next chunk:
 * posted into buf (handle returned, no wait), and waited for into dy (as the forward's). */
comm_handle_t pp_post_recv_backward(trainer_t *t, int j, int k, float *buf) {
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  snprintf(st->tag, sizeof st->tag, "recv grad %d", k);
  return comm_recv_async(ch->rx_grad.comm, buf, (int64_t)st->b * t->model.units[ch->u1 - 1].y_numel, DT_F32,
                         ch->rx_grad.peer, st->tag);
}

void pp_recv_backward(trainer_t *t, int j, int k, float *dy) {
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  if (st->prepost) pp_post_take(t, &st->rxg, j, k, dy, "gradient");
  else comm_wait(ch->rx_grad.comm, pp_post_recv_backward(t, j, k, dy));
}

/* Backward: where chunk j writes the gradient of its input, once that buffer's previous send left. */
float *pp_dx_buffer(trainer_t *t, int j, int k) {
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  for (int h = 0; h < st->nheld; h++) /* interleaved grouped: a send held is not issued yet */
    if (st->held[h].kind == 'B' && st->held[h].j == j && st->held[h].k % 2 == k % 2)
      die_on_rank(
          "pipeline: chunk %d's input-gradient buffer %d is still held for a group (a schedule's bug)", j,
          k % 2);
  comm_wait(ch->tx_grad.comm, ch->gsent[k % 2]);
  ch->gsent[k % 2] = 0;
  return ch->gsend[k % 2].data;
}

void pp_send_backward(trainer_t *t, int j, int k, const float *dx) {
  pp_state_t *st = t->sched_priv;
  pp_chunk_t *ch = &st->chunks[j];
  snprintf(st->tag, sizeof st->tag, "send grad %d", k);
  ch->gsent[k % 2] =
      comm_send_async(ch->tx_grad.comm, dx, (int64_t)st->b * ch->in_numel, DT_F32, ch->tx_grad.peer, st->tag);
}

/* Micro-batch k's slot of chunk j is about to be reused: its output must have left. */
void pp_release(trainer_t *t, int j, int k) {
  pp_chunk_t *ch = &((pp_state_t *)t->sched_priv)->chunks[j];
  if (ch->sent[k]) comm_wait(ch->tx_act.comm, ch->sent[k]);
  ch->sent[k] = 0;
}

/* After the step's operations: every handle waited by name (exercise mode names a dropped one),
 * then a barrier, when the last stage of the last pipeline is done; busy and window measured. */
static void pp_step_end(trainer_t *t, double busy_us, double t0_us) {
  pp_state_t *st = t->sched_priv;
  if (st->pend.kind) die_on_rank("pipeline: the %s of micro-batch %d was held for a pair that never came",
                                 st->pend.kind == 'F' ? "output" : "input gradient", st->pend.k);
  pp_post_step_end(t); /* every receive posted ahead was read */
  pp_v_step_end(t);    /* the V's tip: every local copy made */
  pp_seg_step_end(t);  /* nothing held, nothing received ahead left */
  comm_t *cs[8] = {st->fwd,     st->bwd,     st->fwdw,     st->bwdw,
                   st->acts[0], st->acts[1], st->grads[0], st->grads[1]};
  for (int j = 0; j < st->v; j++)
    for (int i = 0; i < 2; i++) {
      if (st->chunks[j].gsent[i]) comm_wait(st->chunks[j].tx_grad.comm, st->chunks[j].gsent[i]);
      st->chunks[j].gsent[i] = 0;
    }
  for (int i = 0; i < 8; i++)
    if (cs[i]) comm_wait_all(cs[i]);
  comm_barrier(t->model_comm);
  st->steps_run++;
  if (t->step > 0 || t->cfg->steps == 1) { /* the first step warms up caches and the pool */
    st->busy_us += busy_us;
    for (int i = 0; i < 3; i++) st->kind_us[i] += t->busy_us[i];
    st->span_us += trace_now_us() - t0_us;
    st->measured++;
  }
}

/* The whole model's Σg²: every stage's (its replicas' sum), over this pipeline's P stages. */
static double pp_grad_sumsq(trainer_t *t, double part) {
  comm_ctl_all_reduce_f64(((pp_state_t *)t->sched_priv)->pipe, &part, 1, REDOP_SUM);
  return part;
}

/* ---- the setup: the ranks, the split, this rank's chunks and list ---------------------------- */

/* The links of chunk c on stage s: activations come from c−1 (stage s−1, or the last stage over
 * the wrap link when s = 0) and go to c+1; gradients the other way. With pre-posted receives the
 * unpaired messages to stage r go on acts[r % 2] / grads[r % 2] (the pairs stay on fwd); grouped
 * (NCCL), every message on fwd, the wrap's too (stage P−1 and stage 0 are ranks of it). */
static void chunk_links(pp_state_t *st, pp_chunk_t *ch) {
  int s = st->stage, P = st->P;
  comm_t *a_in = st->prepost ? st->acts[s % 2] : st->fwd,
         *a_out = st->prepost ? st->acts[(s + 1) % 2] : st->fwd;
  comm_t *g_in = st->prepost ? st->grads[s % 2] : st->grouped ? st->fwd : st->bwd;
  comm_t *g_out = st->prepost ? st->grads[(s + 1) % 2] : st->grouped ? st->fwd : st->bwd;
  /* the wrap (v > 1): its own two-rank links, where P−1 is rank 1; grouped, on fwd (P−1 and 0) */
  pp_link_t wrap_in = st->grouped ? (pp_link_t){st->fwd, P - 1} : (pp_link_t){st->fwdw, 1};
  pp_link_t wrap_gout = st->grouped ? (pp_link_t){st->fwd, P - 1} : (pp_link_t){st->bwdw, 1};
  pp_link_t wrap_out = st->grouped ? (pp_link_t){st->fwd, 0} : (pp_link_t){st->fwdw, 0};
  pp_link_t wrap_gin = st->grouped ? (pp_link_t){st->fwd, 0} : (pp_link_t){st->bwdw, 0};
  if (ch->c > 0) {
    ch->rx_act = s > 0 ? (pp_link_t){a_in, s - 1} : wrap_in;
    ch->tx_grad = s > 0 ? (pp_link_t){g_out, s - 1} : wrap_gout;
  }
  if (ch->c < st->V - 1) {
    ch->tx_act = s < P - 1 ? (pp_link_t){a_out, s + 1} : wrap_out;
    ch->rx_grad = s < P - 1 ? (pp_link_t){g_in, s + 1} : wrap_gin;
  }
}

/* The split into V chunks, by parameter count (--tp: by the WHOLE units' sizes, so every TP rank
 * cuts in the same place). */
static void pp_cut(trainer_t *t, pp_state_t *st) {
  const model_t *m = &t->model;
  int U = m->n_units;
  int64_t *numel = xcalloc((size_t)U, sizeof *numel, "unit numel");
  double *d = xcalloc((size_t)U, sizeof *d, "unit numel (f64)");
  for (int u = 0; u < U; u++) d[u] = (double)m->units[u].numel;
  if (t->group_comm) comm_ctl_all_reduce_f64(t->group_comm, d, U, REDOP_SUM);
  for (int u = 0; u < U; u++) numel[u] = (int64_t)d[u];
  st->first = xcalloc((size_t)st->V + 1, sizeof *st->first, "pipeline split");
  if (pp_split(numel, U, st->V, st->first))
    die("rank %d: cannot cut %d units into %d chunks", t->rank, U, st->V);
  free(d);
  free(numel);
}

/* schedule_t.setup: rank = dp·P + stage over t->comm (every rank of the model); communicators,
 * the split, this rank's chunks and list; then t narrowed to the stage: its units, its replicas. */
static void pp_setup(trainer_t *t) {
  pp_state_t *st = xcalloc(1, sizeof *st, "pipeline state");
  t->sched_priv = st;
  const train_cfg_t *c = t->cfg;
  int U = t->model.n_units, N = t->world;
  st->sched = (pp_schedule_t)pp_schedule_parse(c->schedule);
  st->P = c->pp > 0 ? c->pp : N;
  st->v = pp_schedule_chunks(st->sched, c->virtual_stages); /* dualpipev: 2, in a V */
  st->vs = st->sched == PP_DUALPIPEV;
  st->V = st->v * st->P;
  st->M = c->micro_batches;
  if (st->V > U || N % st->P || (st->vs && st->M < 2 * st->P))
    die("rank %d: --pp %d: needs P x chunks per stage (%d) <= units (%d), P dividing the ranks (%d)%s",
        t->rank, st->P, st->v, U, N, st->vs ? " and M >= 2P (dualpipev)" : "");
  st->D = N / st->P;
  int coord[GRID_NDIMS]; /* the grid's one rule (grid.h: rank = dp·P + stage once TP is split off) */
  grid_coords(t->rank, 1, st->P, coord);
  st->stage = coord[GRID_PP];
  st->dp = coord[GRID_DP];
  /* the slices of a micro-batch: one per replica, times the transform's ranks that read their own
   * samples (chapter 12's EP group: trainer_data_slice's count over the t->world = N ranks here) */
  int slice, nslices;
  trainer_data_slice(t, &slice, &nslices);
  st->b = (int)(c->batch / ((int64_t)st->M * st->D * (nslices / N)));
  /* Communicators: two copies of this pipeline (one per direction; on MPI, with pre-posted
   * receives, the pairs' one and four for the unpaired messages: acts, grads; on NCCL one for
   * every message, the wrap's included, in groups: pipeline_pairs.c) and one for control sums;
   * with virtual stages and not grouped, the ring's wrap link (last stage and stage 0) once per
   * direction; the stage's replicas. Collective: every rank makes the same calls in the same order. */
  /* The messages: on NCCL in groups on one communicator; on MPI with receives posted ahead.
   * ZL_PP_GROUPED=1 runs the NCCL way on MPI too (the tests: its logic and bits on a CPU). The same on
   * every rank. */
  const char *ge = getenv("ZL_PP_GROUPED");
  /* a V: every message alone on its chunk's two streams (pipeline_v.c), on either backend */
  st->grouped = (comm_backend(t->comm) == BACKEND_NCCL || (ge && !strcmp(ge, "1"))) && st->P > 1 && !st->vs;
  st->prepost = comm_backend(t->comm) == BACKEND_MPI && !st->grouped && st->P > 1 && !st->vs;
  st->fwd = comm_split(t->comm, st->dp, st->stage);
  if (!st->prepost && !st->grouped) st->bwd = comm_split(t->comm, st->dp, st->stage);
  st->pipe = comm_split(t->comm, st->dp, st->stage);
  for (int i = 0; i < 2 && st->prepost; i++) { /* the unpaired messages' four streams (pipeline_state.h) */
    st->acts[i] = comm_split(t->comm, st->dp, st->stage);
    st->grads[i] = comm_split(t->comm, st->dp, st->stage);
  }
  if (st->v > 1 && !st->grouped) { /* color: this pipeline's {P−1, 0} pair; key: 0 for stage 0 (P−1: 1) */
    int ends = st->stage == 0 || st->stage == st->P - 1, key = st->vs ? st->stage : st->stage != 0;
    int color = ends || st->vs ? st->dp : -1; /* a V: the whole pipeline; else the others join none */
    st->fwdw = comm_split(t->comm, color, key);
    st->bwdw = comm_split(t->comm, color, key);
  }
  st->dpc = comm_split(t->comm, st->stage, st->dp);
  pp_cut(t, st);
  if (trainer_prints(t)) pp_print(t, st);

  /* This rank's chunks, stage, stage+P, ...: the loop's t->chunks, and the units it keeps. */
  char *here = xcalloc((size_t)U, 1, "units here");
  st->chunks = xcalloc((size_t)st->v, sizeof *st->chunks, "pipeline chunks");
  t->chunks = xcalloc((size_t)st->v, sizeof *t->chunks, "loop chunks");
  for (int j = 0; j < st->v; j++) {
    pp_chunk_t *ch = &st->chunks[j];
    ch->c = pp_chunk_model(st->P, st->vs, st->stage, j);
    ch->u0 = st->first[ch->c];
    ch->u1 = st->first[ch->c + 1];
    ch->in_numel = ch->u0 == 0 ? t->model.in_numel : t->model.units[ch->u0 - 1].y_numel;
    ch->sent = xcalloc((size_t)st->M, sizeof *ch->sent, "pipeline send handles");
    for (int u = ch->u0; u < ch->u1; u++) here[u] = 1;
    if (st->vs) pp_v_links(st, ch);
    else chunk_links(st, ch);
    t->chunks[j] =
        (train_chunk_t){.u0 = ch->u0, .u1 = ch->u1, .first = ch->c == 0, .last = ch->c == st->V - 1};
    if (ch->c > 0) { /* the gradient of the input, to the previous chunk: double-buffered */
      for (int i = 0; i < 2; i++)
        ch->gsend[i] =
            tensor_alloc("grad to send", LEDGER_ACTS, DT_F32, t->dev, (int64_t)st->b * ch->in_numel);
      st->ws_bytes += 2 * 4 * (int64_t)st->b * ch->in_numel;
    }
  }
  t->n_chunks = st->v;
  if (st->vs) st->tip_y = xcalloc((size_t)st->M, sizeof *st->tip_y, "the V's tip");
  st->tip_dx[0] = st->tip_dx[1] = -1;
  int nops = pp_schedule_nops(st->sched, st->M, st->v);
  pp_op_t *ops = xcalloc((size_t)nops, sizeof *ops, "pipeline schedule");
  t->ops = xcalloc((size_t)nops, sizeof *t->ops, "pipeline schedule");
  t->n_ops = pp_schedule_ops(st->sched, st->P, st->stage, st->M, st->v, ops);
  char *fb = xcalloc((size_t)nops, 1, "F&B marks"); /* dualpipev's F&B's: run as one with --fb-overlap */
  pp_schedule_fb(st->sched, st->P, st->stage, st->M, st->v, fb);
  for (int i = 0; i < t->n_ops; i++) t->ops[i] = (train_op_t){ops[i].kind, ops[i].micro, ops[i].chunk, fb[i]};
  free(fb);
  free(ops);
  pp_pairs_setup(st);
  pp_seg_setup(t);  /* interleaved grouped: its boundaries (pipeline_pairs.c) */
  pp_post_setup(t); /* after the pairs: the receives that do not go in one */
  t->n_micro = st->M;
  t->local_batch = st->b;
  t->no_sync = 1; /* one reduction per unit and step: 1-rank --accum M's bits */
  /* The strategy's world from here on: this stage's units over its D replicas. */
  trainer_keep_units(t, here);
  free(here);
  t->model_comm = t->comm, t->model_rank = t->rank, t->model_world = t->world;
  t->comm = st->dpc, t->rank = st->dp, t->world = st->D;
}

/* schedule_t.teardown: after the strategy's (it uses the replicas' communicator). */
static void pp_teardown(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  if (!st) return;
  pp_post_teardown(t);
  pp_seg_teardown(t);
  for (int j = 0; j < st->v; j++) {
    tensor_free(&st->chunks[j].gsend[0]);
    tensor_free(&st->chunks[j].gsend[1]);
    free(st->chunks[j].sent);
  }
  comm_t *cs[10] = {st->dpc,      st->bwdw,    st->fwdw, st->grads[1], st->acts[1],
                    st->grads[0], st->acts[0], st->pipe, st->bwd,      st->fwd};
  for (int i = 0; i < 10; i++)
    if (cs[i]) comm_finalize(cs[i]);
  t->comm = t->model_comm; /* the communicator the launcher made */
  free(t->chunks);
  free(t->ops);
  free(st->chunks);
  free(st->first);
  free(st->pair_fwd);
  free(st->pair_bwd);
  free(st->tip_y);
  free(st);
  t->sched_priv = NULL;
}

#define PP_SCHEDULE(var, nm)                                               \
  static const schedule_t var = {.name = nm,                               \
                                 .setup = pp_setup,                        \
                                 .recv_forward = pp_recv_forward_paired,   \
                                 .send_forward = pp_send_forward_paired,   \
                                 .recv_backward = pp_recv_backward_paired, \
                                 .dx_buffer = pp_dx_buffer,                \
                                 .send_backward = pp_send_backward_paired, \
                                 .release = pp_release,                    \
                                 .step_end = pp_step_end,                  \
                                 .grad_sumsq = pp_grad_sumsq,              \
                                 .report = pp_report,                      \
                                 .teardown = pp_teardown}
PP_SCHEDULE(g_naive, "pipeline-naive");
PP_SCHEDULE(g_gpipe, "pipeline-gpipe");
PP_SCHEDULE(g_1f1b, "pipeline-1f1b");
PP_SCHEDULE(g_interleaved, "pipeline-interleaved");
PP_SCHEDULE(g_zbh1, "pipeline-zb-h1");
PP_SCHEDULE(g_zbh2, "pipeline-zb-h2");
/* DualPipeV: each message alone, and the V's tip (pipeline_v.c) */
static const schedule_t g_dualpipev = {.name = "pipeline-dualpipev",
                                       .setup = pp_setup,
                                       .recv_forward = pp_v_recv_forward,
                                       .send_forward = pp_v_send_forward,
                                       .recv_backward = pp_v_recv_backward,
                                       .post_backward = pp_v_post_backward,
                                       .dx_buffer = pp_v_dx_buffer,
                                       .send_backward = pp_v_send_backward,
                                       .release = pp_v_release,
                                       .step_end = pp_step_end,
                                       .grad_sumsq = pp_grad_sumsq,
                                       .report = pp_report,
                                       .teardown = pp_teardown};

const schedule_t *pipeline_schedule(const char *schedule) {
  switch (pp_schedule_parse(schedule)) {
  case PP_NAIVE: return &g_naive;
  case PP_GPIPE: return &g_gpipe;
  case PP_1F1B: return &g_1f1b;
  case PP_INTERLEAVED: return &g_interleaved;
  case PP_ZB_H1: return &g_zbh1;
  case PP_ZB_H2: return &g_zbh2;
  case PP_DUALPIPEV: return &g_dualpipev;
  default: return NULL;
  }
}
