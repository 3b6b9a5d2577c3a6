/* pipeline_post.c — pre-posted receives (the MPI backend): each stage posts its receives ahead of
 * the operations that read them, so that a neighbour's send finds its receive already posted.
 *
 * Why (notes/07-pipeline.md, 07c): above Open MPI's shared-memory eager limit (4 KiB) a send is a
 * rendezvous — only a header goes out, and the data moves once the receiver has posted the
 * matching receive and both ranks' progress engines test it. A receive posted only when the
 * operation that needs it begins makes every message sent early (the zero-bubble schedules' W
 * between the B that sends and the F that receives) wait for that moment, and the receiver then
 * pays the whole transfer. Posted ahead, the message moves while the receiver still computes.
 *
 * How: the stage's unpaired receives of one kind (activations in, gradients in: the receives that
 * do not go in a pair, pipeline_pairs.c) form a queue in the order its list reads them; every
 * receive gets a buffer of its own, PP_RECV_AHEAD of them per queue, used in turn. At the step's
 * first message the first PP_RECV_AHEAD of each queue are posted; each time the loop reads one
 * (pp_recv_forward / pp_recv_backward: waited, copied into the slot's input or the loop's dy), the
 * queue's next one is posted into the buffer just freed. The copy is the price (a memcpy of the
 * boundary's b × width floats, against an operation's milliseconds); the bits are the messages'.
 *
 * Streams: on the MPI backend a communicator runs its operations in order, and a receive holds
 * its stream until its message came. So a stage's receives must not share a stream with its
 * sends (a receive posted ahead would hold back a send queued after it, which the peer may need
 * first): the unpaired messages to stage r go on acts[r % 2] / grads[r % 2] — a stage receives
 * on its own parity and sends on the other. The pairs stay on fwd, the wrap links (v > 1) on
 * fwdw / bwdw (each of them one-way for every stage). The buffers are activations: LEDGER_ACTS,
 * and counted in the stage's workspace beside the slots (st->ws_bytes; the report's "+ B
 * workspace"): 4 · b · width bytes each, at most PP_RECV_AHEAD per queue. */
#include "pipeline_state.h" // pp_state_t, pp_rxq_t, pp_post_recv_forward/backward; PP_RECV_AHEAD,
                            // pp_posted_recvs (pipeline_groups.h)
#include "check.h"          // die_on_rank, xcalloc
#include "comm.h"           // comm_wait
#include "device.h"         // dev_memcpy
#include "ledger.h"         // LEDGER_ACTS
#include "tensor.h"         // tensor_alloc, tensor_free
#include <stdlib.h>         // free

/* Elements of the queue's i-th receive: the chunk's input (activations) or output (gradients). */
static int64_t rx_numel(const trainer_t *t, const pp_state_t *st, const pp_rxq_t *q, int i) {
  const pp_chunk_t *ch = &st->chunks[q->chunk[i]];
  return (int64_t)st->b * (q == &st->rxa ? ch->in_numel : t->model.units[ch->u1 - 1].y_numel);
}

/* Post the queue's next receive into its buffer. */
static void rx_post(trainer_t *t, pp_rxq_t *q) {
  pp_state_t *st = t->sched_priv;
  int i = q->posted % PP_RECV_AHEAD, j = q->chunk[q->posted], k = q->micro[q->posted];
  q->h[i] = q == &st->rxa ? pp_post_recv_forward(t, j, k, q->buf[i].data)
                          : pp_post_recv_backward(t, j, k, q->buf[i].data);
  q->posted++;
}

/* The queues: this stage's unpaired receives of each kind, in the order its list reads them
 * (pp_posted_recvs, pipeline_groups.c: the checker runs the same lists); min(PP_RECV_AHEAD, n)
 * buffers each, of the kind's largest message. */
void pp_post_setup(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  if (!st->prepost) return;
  pp_rxq_t *qs[2] = {&st->rxa, &st->rxg};
  pp_op_t *ops = xcalloc((size_t)t->n_ops + 1, sizeof *ops, "pre-posted receives");
  for (int a = 0; a < 2; a++) {
    pp_rxq_t *q = qs[a];
    q->n = pp_posted_recvs(st->sched, st->P, st->stage, st->M, st->v, a ? 'B' : 'F', ops);
    q->micro = xcalloc((size_t)q->n + 1, sizeof(int), "pre-posted receives");
    q->chunk = xcalloc((size_t)q->n + 1, sizeof(int), "pre-posted receives");
    for (int i = 0; i < q->n; i++) q->micro[i] = ops[i].micro, q->chunk[i] = ops[i].chunk;
  }
  free(ops);
  for (int a = 0; a < 2; a++) {
    pp_rxq_t *q = qs[a];
    for (int i = 0; i < q->n; i++)
      if (rx_numel(t, st, q, i) > q->numel) q->numel = rx_numel(t, st, q, i);
    for (int i = 0; i < PP_RECV_AHEAD && i < q->n; i++) {
      q->buf[i] = tensor_alloc(a ? "grad received ahead" : "act received ahead", LEDGER_ACTS, DT_F32, t->dev,
                               q->numel);
      st->ws_bytes += 4 * q->numel;
    }
  }
}

/* The step's first receives: at its first message hook (every stage's list begins with F 0, and
 * every hook of a stage comes before any wait for a neighbour). */
void pp_post_open(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  if (!st->prepost || st->window_open) return;
  st->window_open = 1;
  pp_rxq_t *qs[2] = {&st->rxa, &st->rxg};
  for (int a = 0; a < 2; a++) {
    qs[a]->posted = qs[a]->used = 0;
    while (qs[a]->posted < qs[a]->n && qs[a]->posted < PP_RECV_AHEAD) rx_post(t, qs[a]);
  }
}

/* Micro-batch k's receive of chunk j: it must be the queue's next (the order of the list); wait
 * for it, copy it into dst, and post the queue's next receive into the buffer it frees. */
void pp_post_take(trainer_t *t, pp_rxq_t *q, int j, int k, float *dst, const char *what) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t);
  if (q->used >= q->n || q->micro[q->used] != k || q->chunk[q->used] != j)
    die_on_rank("pipeline: the %s of micro-batch %d (chunk %d) is not the next receive posted ahead (a "
                "schedule's bug)",
                what, k, j);
  int i = q->used % PP_RECV_AHEAD;
  const pp_chunk_t *ch = &st->chunks[j];
  comm_wait(q == &st->rxa ? ch->rx_act.comm : ch->rx_grad.comm, q->h[i]);
  q->h[i] = 0;
  dev_memcpy(t->dev, dst, t->dev, q->buf[i].data, (size_t)rx_numel(t, st, q, q->used) * 4);
  q->used++;
  if (q->posted < q->n) rx_post(t, q);
}

/* After the step's operations: every receive posted ahead was read (none left for the next step). */
void pp_post_step_end(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  if (!st->prepost) return;
  pp_rxq_t *qs[2] = {&st->rxa, &st->rxg};
  for (int a = 0; a < 2 && st->window_open; a++)
    if (qs[a]->used != qs[a]->n)
      die_on_rank("pipeline: %d of the step's %d %s receives posted ahead were read", qs[a]->used, qs[a]->n,
                  a ? "gradient" : "activation");
  st->window_open = 0;
}

void pp_post_teardown(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  pp_rxq_t *qs[2] = {&st->rxa, &st->rxg};
  for (int a = 0; a < 2; a++) {
    for (int i = 0; i < PP_RECV_AHEAD; i++) tensor_free(&qs[a]->buf[i]);
    free(qs[a]->micro);
    free(qs[a]->chunk);
  }
}
