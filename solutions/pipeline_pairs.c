/* pipeline_pairs.c — 1F1B's steady state as paired messages: a stage's send and the next receive
 * from the same neighbour go as ONE operation (comm_sendrecv_async), so two sends issued apart
 * cannot wait on each other when sends wait for their receiver (NCCL; ZL_SYNC_SENDS=1 on MPI).
 * The messages themselves are pipeline.c's; this file decides which pair and holds a send back
 * for its partner. Shared state: pipeline_state.h. Notes: notes/07-pipeline.md. */
#include "pipeline_state.h" // pp_state_t, pp_chunk_t, the messages (pp_send_forward, ...)
#include "check.h"          // xcalloc
#include "comm.h"           // comm_sendrecv_async, comm_wait
#include "train.h"          // trainer_t
#include <stdio.h>          // snprintf
#include <stdlib.h>         // free

/* ---- which messages pair ---------------------------------------------------------------------
 * In 1F1B's steady state stage s ends F k by sending its output to s+1 and starts the B that
 * follows by receiving a gradient from s+1, while s+1 ends that B's partner by sending the
 * gradient and starts the F that receives the output. With NCCL (ncclSend waits for its
 * receiver) two such sends issued apart can deadlock; NCCL's guide, Megatron's
 * send_forward_recv_backward and picotron pair them in one grouped call. Here the send is held
 * back until the next receive and both go as one comm_sendrecv_async on the forward
 * communicator (both directions of the pair on one communicator: a single NCCL p2p stream).
 * Which messages pair is decided from the two stages' operation lists (pp_schedule_ops), so
 * the two sides always agree: stage s pairs F k -> B j when its own list has F k right before
 * B j AND the neighbour's list has B j right before F k (the neighbour checks the same two
 * facts: pp_pairs in pipeline_sched.c, which the checker runs too). Warm-up and cool-down
 * messages, and every message with virtual stages, go alone; so do the zero-bubble schedules'
 * where a W sits between the two (holding the input gradient back through a W would delay the
 * previous stage: B is their critical path).
 *
 * GROUPED (the NCCL backend, v = 1): Megatron's batched p2p — every message of the pipeline on ONE
 * communicator (st->fwd, one NCCL stream), and at each operation boundary the send just made and
 * the next receive in one ncclGroupStart/End: a send is held back whenever the next operation
 * that is not a W receives (pp_groups; the pair may be F's output with the next F's input, from
 * the other neighbour), and goes alone when it receives nothing. The checker runs these groups
 * (pp_check_grouped: no deadlock for every schedule but interleaved, P <= 8, M <= 32); interleaved
 * keeps the two communicators per direction and its wrap links. Not run here (no GPU): compiled. */
void pp_pairs_setup(pp_state_t *st) {
  st->pair_fwd = xcalloc((size_t)st->M, 1, "pipeline pairs");
  st->pair_bwd = xcalloc((size_t)st->M, 1, "pipeline pairs");
  if (st->grouped) pp_groups(st->sched, st->P, st->stage, st->M, st->v, st->pair_fwd, st->pair_bwd);
  else pp_pairs(st->sched, st->P, st->stage, st->M, st->v, st->pair_fwd, st->pair_bwd); /* pipeline_sched.c */
}

/* ---- the loop's hooks with pairs ---------------------------------------------------------- */

/* The loop's send_forward: held back when it pairs with the next receive (else sent now). */
void pp_send_forward_paired(trainer_t *t, int j, int k, const float *y) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t); /* the step's first receives posted ahead, if not yet (pipeline_post.c) */
  if (!st->pair_fwd[k]) {
    pp_send_forward(t, j, k, y);
    return;
  }
  st->pend.kind = 'F', st->pend.k = k, st->pend.buf = y;
  st->pend.numel = (int64_t)st->b * t->model.units[st->chunks[j].u1 - 1].y_numel;
}

void pp_send_backward_paired(trainer_t *t, int j, int k, const float *dx) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t);
  if (!st->pair_bwd[k]) {
    pp_send_backward(t, j, k, dx);
    return;
  }
  st->pend.kind = 'B', st->pend.k = k, st->pend.buf = dx;
  st->pend.numel = (int64_t)st->b * st->chunks[j].in_numel;
}

/* The held-back send and this receive as one operation on the forward communicator; the send
 * is then complete, so its handle slot is cleared. */
static void pp_pair_exchange(pp_state_t *st, int tx_peer, float *rbuf, int64_t rnumel, int rx_peer, const char *what,
                             int k, comm_handle_t *sent) {
  snprintf(st->tag, sizeof st->tag, "send %s %d + recv %s %d", st->pend.kind == 'F' ? "act" : "grad", st->pend.k,
           what, k);
  comm_wait(st->fwd, comm_sendrecv_async(st->fwd, st->pend.buf, st->pend.numel, tx_peer, rbuf, rnumel, rx_peer,
                                         DT_F32, st->tag));
  *sent = 0;
  st->pend.kind = 0;
}

/* The held send's peer and handle slot (v = 1 when a send is held: chunk 0). */
static int pend_peer(pp_state_t *st) {
  return st->pend.kind == 'F' ? st->chunks[0].tx_act.peer : st->chunks[0].tx_grad.peer;
}
static comm_handle_t *pend_slot(pp_state_t *st) {
  return st->pend.kind == 'F' ? &st->chunks[0].sent[st->pend.k] : &st->chunks[0].gsent[st->pend.k % 2];
}

/* The loop's recv_backward: with a send held back (pairs: the forward's; grouped: either), the two
 * as one operation. */
void pp_recv_backward_paired(trainer_t *t, int j, int k, float *dy) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t);
  pp_chunk_t *ch = &st->chunks[j];
  if (!st->pend.kind) pp_recv_backward(t, j, k, dy);
  else pp_pair_exchange(st, pend_peer(st), dy, (int64_t)st->b * t->model.units[ch->u1 - 1].y_numel, ch->rx_grad.peer,
                        "grad", k, pend_slot(st));
}

void pp_recv_forward_paired(trainer_t *t, int j, int k, float *x) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t);
  pp_chunk_t *ch = &st->chunks[j];
  if (!st->pend.kind) pp_recv_forward(t, j, k, x);
  else pp_pair_exchange(st, pend_peer(st), x, (int64_t)st->b * ch->in_numel, ch->rx_act.peer, "act", k, pend_slot(st));
}
