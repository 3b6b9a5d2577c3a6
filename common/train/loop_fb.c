/* loop_fb.c — an overlapped forward-backward (F&B, DualPipeV's): the backward of one micro-batch runs
 * its units while the forward of another waits for its exchanges (notes/07d-dualpipev.md, "F&B").
 *
 * The list marks the pairs (pipeline_sched.c's pp_schedule_fb: the F 1, its B and the B's W 2);
 * with --fb-overlap the loop runs an F and the B after it as one operation:
 *
 *   post B's received gradient        (it travels while the forward waits for its input and computes)
 *   F's input; F's units in order     each exchange of a unit (chapter 12's two all-to-alls of a MoE
 *                                     block) is posted, then trainer_fb_fill runs B's next piece
 *                                     (its gradient's wait, or the loss; then one unit), then waited
 *   F's output sent                   (on the comm engine, while B goes on)
 *   B's remaining units; dx sent
 *
 * Each half runs its own kernels in its own order (the same as the halves one after the other: the
 * bits are the same); what changes is when, so what a half leaves in the trainer between its units
 * (the use, the micro-batch, the beta) is saved and put back around a piece, and a model that keeps
 * scratch between a post and its wait sets it aside (moe_exchange.c's moe_swap_scratch). The order of
 * the messages: B's gradient may be waited for before F's output is sent (when F has an exchange):
 * DeepSeek's F&B order, which pp_check_fb proves deadlock-free (pipeline_check.c). */
#include "loop_internal.h" // struct train_internal, fb_state_t, op_run_t, op_fwd_*, op_bwd_*
#include "check.h"         // die_on_rank
#include "trace.h"         // trace_now_us

void trainer_fb_stats(const trainer_t *t, double v[3]) {
  const double *a = t->in->fb_total; /* the sums, then a[3] the steps */
  for (int i = 0; i < 3; i++) v[i] = a[3] > 0 ? a[i] / a[3] : 0;
}

int trainer_fb_role(const trainer_t *t) { return t->in->fb.role; }

int trainer_fb_open(const trainer_t *t) {
  const fb_state_t *fb = &t->in->fb;
  return fb->open && !fb->depth && (!fb->b_begun || fb->b.u >= t->chunks[fb->bop->chunk].u0);
}

/* B's next piece, inside F's unit u (F's trainer fields saved and put back around it). */
int trainer_fb_fill(trainer_t *t) {
  fb_state_t *fb = &t->in->fb;
  if (!trainer_fb_open(t)) return 0;
  const train_op_t *b = fb->bop;
  int use = t->use, micro = t->micro, last = t->last_micro;
  float beta = t->grad_beta;
  double t0 = trace_now_us(), tb = t0;
  fb->depth = 1, fb->role = 3;
  t->micro = b->micro, t->last_micro = b->micro == t->n_micro - 1;
  if (!fb->b_begun) { /* its gradient (waited: posted at the F&B's start) or the loss */
    t->use = fb->b_use;
    op_bwd_begin(t, b, &fb->b, fb->loss);
    fb->b_begun = 1;
    tb = fb->b.t0; /* the wait is not compute */
  }
  if (fb->b.u >= t->chunks[b->chunk].u0) op_bwd_unit(t, &fb->b);
  double t1 = trace_now_us();
  fb->depth = 0, fb->role = 1;
  t->use = use, t->micro = micro, t->last_micro = last, t->grad_beta = beta;
  fb->lent_us += t1 - t0; /* the forward's span that was not its compute */
  fb->b_in_us += t1 - tb;
  fb->fills++;
  return 1;
}

void train_run_fb(trainer_t *t, const train_op_t *ops, double *loss, double *busy) {
  struct train_internal *in = t->in;
  fb_state_t *fb = &in->fb;
  const schedule_t *sc = t->cfg->sched;
  const train_op_t *f = &ops[0], *b = &ops[1];
  const train_chunk_t *fc = &t->chunks[f->chunk], *bc = &t->chunks[b->chunk];
  if (f->kind != 'F' || b->kind != 'B' || f->chunk == b->chunk)
    die_on_rank("an F&B is an F and a B of the other chunk (%c %d.%d, %c %d.%d: a schedule's bug)", f->kind,
                f->micro, f->chunk, b->kind, b->micro, b->chunk);
  if (!bc->last && sc->post_backward) sc->post_backward(t, b->chunk, b->micro, in->dy[0].data);
  fb->bop = b, fb->loss = loss, fb->b_use = t->use + (fc->u1 - fc->u0), fb->b_begun = 0;
  fb->lent_us = fb->b_in_us = 0, fb->fills = 0;
  op_run_t r;
  t->micro = f->micro, t->last_micro = f->micro == t->n_micro - 1;
  op_fwd_begin(t, f, &r);
  fb->open = fb->role = 1;
  while (r.u < fc->u1) op_fwd_unit(t, &r);
  fb->open = 0, fb->role = 2;
  r.lent = fb->lent_us;
  busy[0] = op_fwd_end(t, &r);
  double resume = trace_now_us();
  t->micro = b->micro, t->last_micro = b->micro == t->n_micro - 1;
  if (!fb->b_begun) {
    t->use = fb->b_use;
    op_bwd_begin(t, b, &fb->b, loss);
  } else fb->b.lent = resume - fb->b.t0 - fb->b_in_us; /* F's compute between B's pieces */
  while (fb->b.u >= bc->u0) op_bwd_unit(t, &fb->b);
  busy[1] = op_bwd_end(t, &fb->b);
  fb->role = 0;
  fb->step_us += fb->b_in_us, fb->step_fills += fb->fills, fb->step_b_us += busy[1];
}
