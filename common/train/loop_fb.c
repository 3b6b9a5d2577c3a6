/* loop_fb.c — an overlapped forward-backward (F&B, DualPipeV's): two micro-batches' halves as two
 * coroutines that hand over at every exchange either one posts, so each half's all-to-all travels while
 * the other computes (notes/07d-dualpipev.md, "The overlapped F&B").
 *
 * The list marks the pairs (pipeline_sched.c's pp_schedule_fb: the F 1, its B and the B's W 2); with
 * --fb-overlap the loop runs an F and the B after it as one operation. The forward runs on the loop's
 * stack, the backward on its own (a ucontext coroutine, begun at the forward's first exchange):
 *
 *   post B's incoming gradient        (it travels while the forward waits for its input and computes)
 *   F's input; F's units in order     an exchange posted (chapter 12's two all-to-alls of a MoE block:
 *                                     trainer_fb_fill) hands over to B: B begins (its gradient's wait,
 *                                     or the loss) or goes on, until it posts an exchange of its own
 *                                     and hands back: F waits for its exchange, computes to the next
 *   F's output sent                   (on the comm engine); then B's rest, its exchanges waited at once
 *   B's dx sent
 *
 * Each half runs its own kernels in its own order (the same as the halves one after the other: the
 * bits are the same); what changes is when, so what a half leaves in the trainer (the use, the
 * micro-batch, the beta) is kept in fb_half_t while the other runs, a model that keeps scratch between
 * a post and its wait swaps it at every switch (the aside of trainer_fb_fill: moe_exchange.c's
 * moe_swap_scratch), and each half has its own open trace spans. The pipeline's messages: B's gradient
 * is waited for inside F (at F's first exchange) or after F's output is sent; dx always after it —
 * the two orders pp_check_fb proves deadlock-free (pipeline_check.c). The switches fall at posts, not
 * at times: every rank of an EP group (the same stage, the same list) posts its exchanges in the same
 * order. */
#include "loop_internal.h" // struct train_internal, fb_state_t, fb_half_t, op_run_t, op_fwd_*, op_bwd_*
#include "check.h"         // die_on_rank, xmalloc
#include "fiber_san.h"     // san_leave, san_arrived: the switches told to ASan and TSan
#include "trace.h"         // trace_now_us, trace_swap_spans
#include <stdint.h>        // uintptr_t
#include <stdlib.h>        // free
#ifdef __SANITIZE_ADDRESS__ /* make test-sanitize: the switches told to the sanitizers (san_leave) */
#include <sanitizer/common_interface_defs.h> // __sanitizer_start_switch_fiber, ..._finish_...
#endif
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h> // __tsan_create_fiber, __tsan_switch_to_fiber, ...
#endif

#define FB_STACK_BYTES ((size_t)8 << 20) /* the backward's stack: BLAS and MPI below it */

void trainer_fb_stats(const trainer_t *t, double v[5]) {
  const double *a = t->in->fb_total; /* the sums, then a[5] the steps */
  for (int i = 0; i < 5; i++) v[i] = a[5] > 0 ? a[i] / a[5] : 0;
}

int trainer_fb_role(const trainer_t *t) { return t->in->fb.role; }

int trainer_fb_open(const trainer_t *t) {
  const fb_state_t *fb = &t->in->fb;
  return fb->open && !fb->f_done && (fb->run == 1 || fb->b_state < 2);
}

void train_fb_free(trainer_t *t) {
  fb_state_t *fb = &t->in->fb;
#ifdef __SANITIZE_THREAD__
  if (fb->tsan[1]) __tsan_destroy_fiber(fb->tsan[1]);
#endif
  free(fb->stack);
  fb->stack = NULL;
}

/* Hand over to the other half (to: 0 the forward, 1 the backward); returns when it hands back
 * (never when `from` ends: its stack is done). */
static void fb_switch(trainer_t *t, int to, int ends) {
  fb_state_t *fb = &t->in->fb;
  int from = fb->run;
  double span = trace_now_us() - fb->since;
  if (from == 1) {
    fb->b_run_us += span;
    if (!fb->f_done) fb->lent_us += span, fb->b_in_us += span, fb->fills++;
  } else if (fb->b_posted) fb->f_in_us += span, fb->f_fills++;
  fb->half[from] = (fb_half_t){t->use, t->micro, t->last_micro, t->grad_beta};
  const fb_half_t *h = &fb->half[to];
  t->use = h->use, t->micro = h->micro, t->last_micro = h->last, t->grad_beta = h->beta;
  if (fb->aside) fb->aside(fb->aside_arg);
  trace_swap_spans(&fb->spans[from]);
  trace_swap_spans(&fb->spans[to]);
  fb->run = to;
  fb->role = to == 1 ? (fb->f_done ? 2 : 3) : fb->b_posted ? 4 : 1;
  fb->since = trace_now_us();
  san_leave(ends ? NULL : &fb->san_fake[from], to ? fb->stack : fb->main_bottom,
            to ? FB_STACK_BYTES : fb->main_size, fb->tsan[to]);
  swapcontext(&fb->ctx[from], &fb->ctx[to]);
  san_arrived(fb->san_fake[from], NULL, NULL);
}

/* The backward's coroutine: its gradient (or the loss), its units; then back to the forward for good. */
static void fb_backward(int hi, int lo) {
  trainer_t *t = (trainer_t *)(((uintptr_t)(unsigned)hi << 32) | (uintptr_t)(unsigned)lo);
  fb_state_t *fb = &t->in->fb;
  san_arrived(NULL, &fb->main_bottom, &fb->main_size); /* the loop's stack: where B hands back */
  const train_chunk_t *bc = &t->chunks[fb->bop->chunk];
  double s0 = fb->since;
  fb->b_state = 1;
  op_bwd_begin(t, fb->bop, &fb->b, fb->loss);
  if (!fb->f_done) fb->lent_us += fb->b.t0 - s0; /* the gradient's wait: lent by F, not B's compute */
  fb->since = fb->b.t0;
  while (fb->b.u >= bc->u0) op_bwd_unit(t, &fb->b);
  fb->b_state = 2;
  fb_switch(t, 0, 1); /* never resumed */
}

int trainer_fb_fill(trainer_t *t, void (*aside)(void *), void *arg) {
  fb_state_t *fb = &t->in->fb;
  if (!trainer_fb_open(t)) return 0;
  fb->aside = aside, fb->aside_arg = arg;
  if (fb->run == 0) fb_switch(t, 1, 0);
  else { /* B's exchange travels while F runs to its next one (or to its end) */
    fb->b_posted = 1;
    fb_switch(t, 0, 0);
    fb->b_posted = 0;
  }
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
  if (!fb->stack) {
    fb->stack = xmalloc(FB_STACK_BYTES, "the F&B's backward stack");
#ifdef __SANITIZE_THREAD__
    fb->tsan[1] = __tsan_create_fiber(0);
#endif
  }
#ifdef __SANITIZE_THREAD__
  fb->tsan[0] = __tsan_get_current_fiber();
#endif
  fb->bop = b, fb->loss = loss, fb->run = fb->f_done = fb->b_state = fb->b_posted = 0;
  fb->aside = NULL, fb->aside_arg = NULL;
  fb->lent_us = fb->b_in_us = fb->b_run_us = fb->f_in_us = 0, fb->fills = fb->f_fills = 0;
  fb->half[1] = (fb_half_t){t->use + (fc->u1 - fc->u0), b->micro, b->micro == t->n_micro - 1, t->grad_beta};
  fb->spans[1].depth = 0;
  uintptr_t p = (uintptr_t)t;
  getcontext(&fb->ctx[1]);
  fb->ctx[1].uc_stack.ss_sp = fb->stack, fb->ctx[1].uc_stack.ss_size = FB_STACK_BYTES;
  fb->ctx[1].uc_link = NULL;
  makecontext(&fb->ctx[1], (void (*)(void))fb_backward, 2, (int)(unsigned)(p >> 32), (int)(unsigned)p);
  op_run_t r;
  t->micro = f->micro, t->last_micro = f->micro == t->n_micro - 1;
  op_fwd_begin(t, f, &r);
  fb->open = fb->role = 1;
  while (r.u < fc->u1) op_fwd_unit(t, &r);
  fb->f_done = 1, fb->role = 2;
  r.lent = fb->lent_us;
  busy[0] = op_fwd_end(t, &r);
  if (fb->b_state == 1) fb_switch(t, 1, 0); /* B's rest, its exchanges waited at once */
  fb->open = 0;
  if (fb->b_state == 0) { /* F had no exchange: B after it, as without the flag */
    const fb_half_t *h = &fb->half[1];
    t->use = h->use, t->micro = h->micro, t->last_micro = h->last;
    op_bwd_begin(t, b, &fb->b, loss);
    while (fb->b.u >= bc->u0) op_bwd_unit(t, &fb->b);
  } else { /* B's fields as it left them; F's compute between its pieces is not B's */
    const fb_half_t *h = &fb->half[1];
    t->use = h->use, t->micro = h->micro, t->last_micro = h->last, t->grad_beta = h->beta;
    fb->b.lent = trace_now_us() - fb->b.t0 - fb->b_run_us;
  }
  busy[1] = op_bwd_end(t, &fb->b);
  fb->role = 0;
  double add[5] = {fb->b_in_us, fb->fills, busy[1], fb->f_in_us, fb->f_fills};
  for (int i = 0; i < 5; i++) fb->step[i] += add[i];
}
