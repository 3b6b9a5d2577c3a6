/* pipeline_pairs.c — 1F1B's steady state as paired messages: a stage's send and the next receive
 * from the same neighbour go as ONE operation (comm_sendrecv_async), so two sends issued apart
 * cannot wait on each other when sends wait for their receiver (NCCL; ZL_SYNC_SENDS=1 on MPI).
 * The messages themselves are pipeline.c's; this file decides which pair and holds a send back
 * for its partner. Shared state: pipeline_state.h. Notes: notes/07-pipeline.md. */
#include "pipeline_state.h" // pp_state_t, pp_chunk_t, the messages (pp_send_forward, ...)
#include "check.h"          // die_on_rank, xcalloc
#include "comm.h"           // comm_sendrecv_async, comm_wait
#include "device.h"         // dev_memcpy
#include "ledger.h"         // LEDGER_ACTS
#include "tensor.h"         // tensor_alloc, tensor_free
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
 * facts: pp_pairs in pipeline_groups.c, which the checker runs too). Warm-up and cool-down
 * messages, and every message with virtual stages, go alone; so do the zero-bubble schedules'
 * where a W sits between the two (holding the input gradient back through a W would delay the
 * previous stage: B is their critical path).
 *
 * GROUPED (the NCCL backend; v = 1 here, v > 1 below): Megatron's batched p2p — every message of the
 * pipeline
 * on ONE
 * communicator (st->fwd, one NCCL stream), and at each operation boundary the send just made and
 * the next receive in one ncclGroupStart/End: a send is held back whenever the next operation
 * that is not a W receives (pp_groups; the pair may be F's output with the next F's input, from
 * the other neighbour), and goes alone when it receives nothing. The checker runs these groups
 * (pp_check_grouped: no deadlock for every schedule, P <= 8, M <= 32). Interleaved (v > 1) groups
 * as Megatron's forward_backward_pipelining_with_interleaving does: the segments below. Not run
 * here (no GPU): compiled, and run on MPI with ZL_PP_GROUPED=1. */
void pp_pairs_setup(pp_state_t *st) {
  st->pair_fwd = xcalloc((size_t)st->M, 1, "pipeline pairs");
  st->pair_bwd = xcalloc((size_t)st->M, 1, "pipeline pairs");
  /* which sends are held for the next receive: pp_groups / pp_pairs (pipeline_groups.c) */
  if (st->grouped) pp_groups(st->sched, st->P, st->stage, st->M, st->v, st->pair_fwd, st->pair_bwd);
  else pp_pairs(st->sched, st->P, st->stage, st->M, st->v, st->pair_fwd, st->pair_bwd);
}

/* ---- interleaved grouped: Megatron's boundaries ------------------------------------------------
 * Each send held back for the next one as above deadlocks with virtual stages (pp_check_grouped
 * finds it at P = 2, M = 4). Megatron-LM's interleaved schedule instead runs its steady state in
 * pairs (F, B) and exchanges, after each pair, the two sends and the two receives of the next pair
 * in ONE batch_isend_irecv: send_forward_backward_recv_forward_backward. So here (pp_group_cuts): a
 * boundary before every operation but the B of a steady-state pair; at each boundary one group
 * (comm_group_async on fwd: up to two sends and two receives) of the sends held since the last one
 * and the receives of the operations up to the next one — the pair's B receives its gradient
 * before its F runs (into gstage, copied into the loop's dy when B starts). Where the next segment
 * receives nothing, its last send sends what is held at once (a group of sends). The group is
 * issued at the segment's first receive hook and waited there. The checker runs exactly this
 * (mx_step_seg, pipeline_check_stage.c): no deadlock for v = 2, 3, P <= 8, M <= 32. */

static int seg_start(const pp_state_t *st, int i) {
  while (i > 0 && !(st->cut[i] & 1)) i--;
  return i;
}

void pp_seg_setup(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  st->seg = st->grouped && st->v > 1;
  st->seg_done = st->gstage_j = st->gstage_k = -1;
  if (!st->seg) return;
  int n = t->n_ops, V = st->v * st->M;
  pp_op_t *ops = xcalloc((size_t)n + 1, sizeof *ops, "pipeline groups");
  for (int i = 0; i < n; i++) ops[i] = (pp_op_t){t->ops[i].kind, t->ops[i].micro, t->ops[i].chunk};
  st->cut = xcalloc((size_t)n + 1, 1, "pipeline groups");
  pp_group_cuts(st->sched, st->P, st->stage, st->M, st->v, ops, n, st->cut); /* pipeline_groups.c */
  free(ops);
  st->op_at = xcalloc(2 * (size_t)V, sizeof *st->op_at, "pipeline groups");
  int64_t widest = 0;
  for (int i = 0; i < n; i++)
    st->op_at[(t->ops[i].kind == 'B' ? V : 0) + t->ops[i].chunk * st->M + t->ops[i].micro] = i;
  for (int j = 0; j < st->v; j++) {
    int64_t w = (int64_t)st->b * t->model.units[st->chunks[j].u1 - 1].y_numel;
    if (st->chunks[j].c < st->V - 1 && w > widest) widest = w;
  }
  st->gstage = tensor_alloc("grad received at the boundary", LEDGER_ACTS, DT_F32, t->dev, widest);
  st->ws_bytes += 4 * widest;
}

/* A group that would not fit g[COMM_GROUP_MAX]: seg_send holds at most 2 sends and a segment receives
 * at most twice (seg_group), so only a schedule's bug gets here. */
_Noreturn static void group_full(int i0) {
  die_on_rank("pipeline: the group before op %d would hold more than COMM_GROUP_MAX = %d sends and receives "
              "(a schedule's bug)", i0, COMM_GROUP_MAX);
}

/* The segment of op i: its group, issued now (at its first receive, op i, into `into`): the held
 * sends, then every receive of the segment's operations in order (a later one into gstage); waited. */
static void seg_group(trainer_t *t, int i, float *into) {
  pp_state_t *st = t->sched_priv;
  int i0 = seg_start(st, i);
  if (st->seg_done == i0) return;
  comm_p2p_t g[COMM_GROUP_MAX];
  int n = 0;
  for (int h = 0; h < st->nheld; h++) {
    if (n == COMM_GROUP_MAX) group_full(i0);
    g[n++] = (comm_p2p_t){.send = st->held[h].buf, .numel = st->held[h].numel, .peer = st->held[h].peer};
  }
  for (int i2 = i0; i2 < t->n_ops && (i2 == i0 || !(st->cut[i2] & 1)); i2++) {
    const train_op_t *o = &t->ops[i2];
    const pp_chunk_t *ch = &st->chunks[o->chunk];
    int recv = o->kind == 'F' ? ch->c > 0 : o->kind == 'B' ? ch->c < st->V - 1 : 0;
    if (!recv || i2 < i) continue; /* before op i: receives nothing (op i is the segment's first receive) */
    float *buf = into;
    if (i2 > i) { /* a later B's gradient: into gstage */
      if (o->kind != 'B' || st->gstage_j >= 0)
        die_on_rank("pipeline: a segment receives twice before op %d (a schedule's bug)", i2);
      buf = st->gstage.data, st->gstage_j = o->chunk, st->gstage_k = o->micro;
    }
    int64_t numel = (int64_t)st->b * (o->kind == 'F' ? ch->in_numel : t->model.units[ch->u1 - 1].y_numel);
    if (n == COMM_GROUP_MAX) group_full(i0);
    int peer = o->kind == 'F' ? ch->rx_act.peer : ch->rx_grad.peer;
    g[n++] = (comm_p2p_t){.recv = buf, .numel = numel, .peer = peer};
  }
  snprintf(st->tag, sizeof st->tag, "group before op %d (%d sends, %d recvs)", i0, st->nheld, n - st->nheld);
  comm_wait(st->fwd, comm_group_async(st->fwd, n, g, DT_F32, st->tag));
  for (int h = 0; h < st->nheld; h++) { /* complete: their handle slots cleared */
    if (st->held[h].kind == 'F') st->chunks[st->held[h].j].sent[st->held[h].k] = 0;
    else st->chunks[st->held[h].j].gsent[st->held[h].k % 2] = 0;
  }
  st->nheld = 0;
  st->seg_done = i0;
}

/* Op i's send: held for the next boundary; where pp_group_cuts says (bit 1), the held go now. */
static void seg_send(trainer_t *t, int i, char kind, int j, int k, const float *buf, int64_t numel,
                     int peer) {
  pp_state_t *st = t->sched_priv;
  if (st->nheld == 2) die_on_rank("pipeline: a third send held before a boundary (a schedule's bug)");
  for (int h = 0; h < st->nheld; h++)
    if (st->held[h].kind == 'B' && kind == 'B' && st->held[h].j == j && st->held[h].k % 2 == k % 2)
      die_on_rank("pipeline: the input gradient's buffer %d of chunk %d is held twice", k % 2, j);
  int h0 = st->nheld++;
  st->held[h0].kind = kind, st->held[h0].j = j, st->held[h0].k = k;
  st->held[h0].buf = buf, st->held[h0].numel = numel, st->held[h0].peer = peer;
  if (!(st->cut[i] & 2)) return;
  comm_p2p_t g[2];
  for (int h = 0; h < st->nheld; h++)
    g[h] = (comm_p2p_t){.send = st->held[h].buf, .numel = st->held[h].numel, .peer = st->held[h].peer};
  snprintf(st->tag, sizeof st->tag, "group after op %d (%d sends)", i, st->nheld);
  comm_handle_t hd = comm_group_async(st->fwd, st->nheld, g, DT_F32, st->tag);
  for (int h = 0; h < st->nheld; h++) /* waited where a lone send would be: pp_release, pp_dx_buffer */
    if (st->held[h].kind == 'F') st->chunks[st->held[h].j].sent[st->held[h].k] = hd;
    else st->chunks[st->held[h].j].gsent[st->held[h].k % 2] = hd;
  st->nheld = 0;
}

void pp_seg_step_end(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  if (!st->seg) return;
  if (st->nheld || st->gstage_j >= 0)
    die_on_rank("pipeline: %d sends held and %s gradient received ahead at the step's end (a schedule's bug)",
                st->nheld, st->gstage_j >= 0 ? "a" : "no");
  st->seg_done = -1;
}

void pp_seg_teardown(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  tensor_free(&st->gstage);
  free(st->cut);
  free(st->op_at);
}

/* ---- the loop's hooks with pairs ---------------------------------------------------------- */

/* The loop's send_forward: held back when it pairs with the next receive (else sent now). */
void pp_send_forward_paired(trainer_t *t, int j, int k, const float *y) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t); /* the step's first receives posted ahead, if not yet (pipeline_post.c) */
  if (st->seg) {
    const pp_chunk_t *ch = &st->chunks[j];
    seg_send(t, st->op_at[j * st->M + k], 'F', j, k, y, (int64_t)st->b * t->model.units[ch->u1 - 1].y_numel,
             ch->tx_act.peer);
    return;
  }
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
  if (st->seg) {
    seg_send(t, st->op_at[st->v * st->M + j * st->M + k], 'B', j, k, dx,
             (int64_t)st->b * st->chunks[j].in_numel, st->chunks[j].tx_grad.peer);
    return;
  }
  if (!st->pair_bwd[k]) {
    pp_send_backward(t, j, k, dx);
    return;
  }
  st->pend.kind = 'B', st->pend.k = k, st->pend.buf = dx;
  st->pend.numel = (int64_t)st->b * st->chunks[j].in_numel;
}

/* The held-back send and this receive as one operation on the forward communicator; the send
 * is then complete, so its handle slot is cleared. */
static void pp_pair_exchange(pp_state_t *st, int tx_peer, float *rbuf, int64_t rnumel, int rx_peer,
                             const char *what, int k, comm_handle_t *sent) {
  snprintf(st->tag, sizeof st->tag, "send %s %d + recv %s %d", st->pend.kind == 'F' ? "act" : "grad",
           st->pend.k, what, k);
  comm_wait(st->fwd,
            comm_sendrecv_async(st->fwd, st->pend.buf, st->pend.numel, tx_peer, rbuf, rnumel, rx_peer, DT_F32,
                                st->tag));
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
  if (st->seg) { /* received at the boundary before its F (gstage), or now: its segment's first receive */
    if (st->gstage_j == j && st->gstage_k == k) {
      dev_memcpy(t->dev, dy, t->dev, st->gstage.data,
                 (size_t)st->b * (size_t)t->model.units[ch->u1 - 1].y_numel * 4);
      st->gstage_j = st->gstage_k = -1;
    } else seg_group(t, st->op_at[st->v * st->M + j * st->M + k], dy);
    return;
  }
  if (!st->pend.kind) pp_recv_backward(t, j, k, dy);
  else
    pp_pair_exchange(st, pend_peer(st), dy, (int64_t)st->b * t->model.units[ch->u1 - 1].y_numel,
                     ch->rx_grad.peer, "grad", k, pend_slot(st));
}

void pp_recv_forward_paired(trainer_t *t, int j, int k, float *x) {
  pp_state_t *st = t->sched_priv;
  pp_post_open(t);
  pp_chunk_t *ch = &st->chunks[j];
  if (st->seg) {
    seg_group(t, st->op_at[j * st->M + k], x);
    return;
  }
  if (!st->pend.kind) pp_recv_forward(t, j, k, x);
  else
    pp_pair_exchange(st, pend_peer(st), x, (int64_t)st->b * ch->in_numel, ch->rx_act.peer, "act", k,
                     pend_slot(st));
}
