/* pipeline_v.c — DualPipeV's V as the loop runs it: two chunks per rank, one on the way down and one
 * on the way back up, each with its own two streams, and a local copy where the V turns
 * (notes/07d-dualpipev.md; the lists: pipeline_sched.c, dualpipev_order; the state: pipeline_state.h).
 *
 * N = P ranks hold the 2P model chunks in a V: rank r runs chunk 0 = model chunk r and chunk 1 =
 * model chunk 2P−1−r. So rank 0 holds the model's first chunk (the data) AND its last (the loss);
 * the activations go down the ranks through chunk 0 and come back up through chunk 1:
 *
 *   rank 0:   c0 ---------------------------------- c7 -> loss      (P = 4: 8 chunks)
 *   rank 1:      c1 ------------------------- c6
 *   rank 2:         c2 --------------- c5
 *   rank 3:            c3 -- copy -- c4                    the V's tip: no message
 *
 * Messages: chunk 0's activations (to r+1, from r−1) on fwd, its gradients (to r−1, from r+1) on
 * bwd; chunk 1's activations (to r−1, from r+1) on fwdw, its gradients (to r+1, from r−1) on bwdw.
 * Each message alone (no pairs, no receives posted ahead, no groups): the run that the checker
 * proves deadlock-free under synchronous sends for N <= 8, M <= 32 (pp_check_schedule with
 * PP_DUALPIPEV: every message alone on its chunk's streams, pipeline_check_stage.c), on either
 * backend. At the tip (rank P−1) chunk 0's output of micro-batch k is chunk 1's input: F k of
 * chunk 1 copies it out of chunk 0's slot (alive until chunk 0's W k, which the list puts after
 * chunk 1's B k, after its F k); and chunk 1's input gradient is chunk 0's output gradient: B k of
 * chunk 0 copies it out of chunk 1's gsend[k % 2] (double-buffered as a send would be). */
#include "pipeline_state.h" // pp_state_t, pp_chunk_t, pp_recv_forward, pp_send_forward, ...
#include "check.h"          // die_on_rank
#include "comm.h"           // comm_wait
#include "device.h"         // dev_memcpy
#include "train.h"          // trainer_t

void pp_v_links(pp_state_t *st, pp_chunk_t *ch) {
  int s = st->stage, up = s > 0, down = s < st->P - 1;
  if (ch->c == s) { /* chunk 0, down the V */
    if (up) ch->rx_act = (pp_link_t){st->fwd, s - 1}, ch->tx_grad = (pp_link_t){st->bwd, s - 1};
    if (down) ch->tx_act = (pp_link_t){st->fwd, s + 1}, ch->rx_grad = (pp_link_t){st->bwd, s + 1};
  } else { /* chunk 1, back up */
    if (down) ch->rx_act = (pp_link_t){st->fwdw, s + 1}, ch->tx_grad = (pp_link_t){st->bwdw, s + 1};
    if (up) ch->tx_act = (pp_link_t){st->fwdw, s - 1}, ch->rx_grad = (pp_link_t){st->bwdw, s - 1};
  }
}

/* F k of chunk j: its input from the previous rank, or at the tip (chunk 1, no link) from chunk 0. */
void pp_v_recv_forward(trainer_t *t, int j, int k, float *x) {
  pp_state_t *st = t->sched_priv;
  const pp_chunk_t *ch = &st->chunks[j];
  if (ch->rx_act.comm) {
    pp_recv_forward(t, j, k, x);
    return;
  }
  if (!st->tip_y[k])
    die_on_rank("dualpipev: F %d of chunk 1 at the V's tip before chunk 0's (a schedule's bug)", k);
  dev_memcpy(t->dev, x, t->dev, st->tip_y[k], (size_t)st->b * (size_t)ch->in_numel * 4);
  st->tip_y[k] = NULL;
}

void pp_v_send_forward(trainer_t *t, int j, int k, const float *y) {
  pp_state_t *st = t->sched_priv;
  if (st->chunks[j].tx_act.comm) pp_send_forward(t, j, k, y);
  else st->tip_y[k] = y; /* the tip: chunk 1's F k reads it from chunk 0's slot */
}

/* B k of chunk j: its output's gradient from the next rank, or at the tip (chunk 0) from chunk 1. */
void pp_v_recv_backward(trainer_t *t, int j, int k, float *dy) {
  pp_state_t *st = t->sched_priv;
  const pp_chunk_t *ch = &st->chunks[j], *c1 = &st->chunks[1];
  if (ch->rx_grad.comm && st->fb_dy) { /* posted at its F&B's start (--fb-overlap) */
    if (st->fb_j != j || st->fb_k != k || st->fb_dy != dy)
      die_on_rank("dualpipev: B %d of chunk %d is not the F&B's whose gradient was posted (a loop's bug)", k,
                  j);
    comm_wait(ch->rx_grad.comm, st->fb_h);
    st->fb_dy = NULL;
    return;
  }
  if (ch->rx_grad.comm) {
    pp_recv_backward(t, j, k, dy);
    return;
  }
  if (st->tip_dx[k % 2] != k)
    die_on_rank("dualpipev: B %d of chunk 0 at the V's tip before chunk 1's (a schedule's bug)", k);
  dev_memcpy(t->dev, dy, t->dev, c1->gsend[k % 2].data, (size_t)st->b * (size_t)c1->in_numel * 4);
  st->tip_dx[k % 2] = -1;
}

/* An F&B (--fb-overlap): B k's gradient posted now, before the F waits for its input, so that it
 * travels while F computes; the tip's comes from this rank (nothing to post). */
void pp_v_post_backward(trainer_t *t, int j, int k, float *dy) {
  pp_state_t *st = t->sched_priv;
  if (!st->chunks[j].rx_grad.comm) return;
  st->fb_h = pp_post_recv_backward(t, j, k, dy);
  st->fb_j = j, st->fb_k = k, st->fb_dy = dy;
}

void pp_v_send_backward(trainer_t *t, int j, int k, const float *dx) {
  pp_state_t *st = t->sched_priv;
  if (st->chunks[j].tx_grad.comm) pp_send_backward(t, j, k, dx);
  else st->tip_dx[k % 2] = k; /* the tip: in chunk 1's gsend[k % 2] until chunk 0's B k */
}

/* Chunk 1's input-gradient buffer at the tip is free once chunk 0's B read it. */
float *pp_v_dx_buffer(trainer_t *t, int j, int k) {
  pp_state_t *st = t->sched_priv;
  if (st->chunks[j].tx_grad.comm) return pp_dx_buffer(t, j, k); /* its previous send waited */
  if (st->tip_dx[k % 2] >= 0)
    die_on_rank("dualpipev: B %d of chunk 1 at the V's tip would overwrite micro-batch %d's gradient, which "
                "chunk 0's B has not read (a schedule's bug)",
                k, st->tip_dx[k % 2]);
  return st->chunks[j].gsend[k % 2].data;
}

/* Chunk 0's slot of k at the tip holds chunk 1's input until chunk 1's F k read it. */
void pp_v_release(trainer_t *t, int j, int k) {
  pp_state_t *st = t->sched_priv;
  if (st->tip_y && st->tip_y[k] && !st->chunks[j].tx_act.comm && st->chunks[j].c < st->V - 1)
    die_on_rank("dualpipev: chunk 0's slot of micro-batch %d given back before chunk 1's F %d read it", k, k);
  pp_release(t, j, k);
}

void pp_v_step_end(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  if (!st->vs) return;
  for (int k = 0; k < st->M; k++)
    if (st->tip_y[k]) die_on_rank("dualpipev: chunk 0's output %d at the V's tip was never read", k);
  if (st->tip_dx[0] >= 0 || st->tip_dx[1] >= 0)
    die_on_rank("dualpipev: an input gradient at the V's tip was never read");
}
