/* moe_exchange.c — chapter 12's bookkeeping of the rows' exchange over the EP group (moe_state.h;
 * notes/12-experts.md): after the plan, how many rows go to each rank and come from each, the maps
 * between the received (source-major) and the experts' (expert-major) layouts, where each local
 * expert's rows sit, and the bytes the formula counts. Integers on the host; moe.c moves the rows,
 * through moe_exchange_rows: waited for at once, or inside an F&B (--fb-overlap, notes/07d-dualpipev.md)
 * with the other half run while they travel. */
#include "moe_state.h" // moe_gpt_t, moe_route_t, moe_exchange_plan, moe_a2a_bytes, moe_expert_rows
#include "ep.h"        // ep_exchange_counts
#include "check.h"     // xmalloc
#include "comm.h"      // comm_wait
#include "trace.h"     // trace_now_us
#include "train.h"     // trainer_fb_open, trainer_fb_fill, trainer_fb_role
#include <stdlib.h>    // free
#include <string.h>    // memcpy

/* After the plan: how many rows go to each rank and come from each (capacity: El·cap each way; dropless:
 * the counts exchanged), and the maps between the received (source-major) and expert-major layouts. */
void moe_exchange_plan(moe_gpt_t *c, moe_route_t *r, int64_t cap, int64_t *send_rows, int64_t *recv_src) {
  int P = c->ep, El = c->e_local;
  int64_t *sc = xmalloc((size_t)(2 * c->E) * sizeof(int64_t), "moe counts"), *rc = sc + c->E;
  for (int e = 0; e < c->E; e++) sc[e] = cap > 0 ? cap : r->counts[e];
  if (P > 1 && cap == 0) ep_exchange_counts(c->ep_comm, sc, rc, El); /* dropless: how many rows will come */
  else memcpy(rc, sc, (size_t)c->E * sizeof(int64_t));
  for (int q = 0; q < P; q++) {
    send_rows[q] = recv_src[q] = 0;
    for (int i = 0; i < El; i++) {
      send_rows[q] += sc[q * El + i];
      r->recv_rows[q * El + i] = rc[q * El + i]; /* rank q's rows for my expert i */
      recv_src[q] += r->recv_rows[q * El + i];
    }
  }
  free(sc);
  /* expert-major: expert i's rows from rank 0, then rank 1, ...: the token order of the whole group */
  int64_t rx = 0;
  for (int i = 0; i < El; i++)
    for (int q = 0; q < P; q++) {
      int64_t from = 0; /* where rank q's rows for expert i sit in the received buffer */
      for (int q2 = 0; q2 < q; q2++) from += recv_src[q2];
      for (int i2 = 0; i2 < i; i2++) from += r->recv_rows[q * El + i2];
      for (int64_t j = 0; j < r->recv_rows[q * El + i]; j++, rx++) {
        r->perm_x[rx] = (int)(from + j);
        r->perm_b[from + j] = (int)rx;
      }
    }
  r->Rx = rx;
}

/* The bytes one pass (a forward, or a backward) sends over the group by the formula: the rows for
 * other ranks' experts out (dispatch; the combine's backward) and the rows of other ranks' tokens
 * back (combine; the dispatch's backward), C fp32 each. */
double moe_a2a_bytes(const moe_gpt_t *c, const int64_t *send_rows, const int64_t *recv_src) {
  double rows = 0;
  for (int q = 0; q < c->ep; q++)
    if (q != c->ep_rank) rows += (double)(send_rows[q] + recv_src[q]);
  return rows * (double)c->C * 4.0;
}

/* Rows of expert i in the expert layout: [first, first + n). */
int64_t moe_expert_rows(const moe_gpt_t *c, const moe_route_t *r, int i, int64_t *first) {
  int64_t at = 0, n = 0;
  for (int i2 = 0; i2 <= i; i2++) {
    n = 0;
    for (int q = 0; q < c->ep; q++) n += r->recv_rows[q * c->e_local + i2];
    if (i2 < i) at += n;
  }
  *first = at;
  return n;
}

static void swap_aside(void *c) { moe_swap_scratch(c); }

void moe_exchange_rows(moe_gpt_t *c, const float *send, const int64_t *send_rows, float *recv,
                       const int64_t *recv_rows, int Cn, const char *tag) {
  double t0 = trace_now_us();
  if (!trainer_fb_open(c->t)) ep_exchange_rows(c->ep_comm, send, send_rows, recv, recv_rows, Cn, tag);
  else { /* an F&B: the other half runs while the rows travel, in its own scratch (swapped at each switch) */
    comm_handle_t h = ep_exchange_rows_post(c->ep_comm, send, send_rows, recv, recv_rows, Cn, tag);
    trainer_fb_fill(c->t, swap_aside, c);
    t0 = trace_now_us();
    comm_wait(c->ep_comm, h);
  }
  c->a2a_wait_us += trace_now_us() - t0;
  c->a2a_wait_role[trainer_fb_role(c->t)] += trace_now_us() - t0;
}

void moe_swap_scratch(moe_gpt_t *c) {
  tensor_t *s[MOE_SCRATCH] = {&c->logits, &c->xs,   &c->recv, &c->eo_x, &c->dsend, &c->dx_x, &c->dpost,
                              &c->dln2,   &c->dln2r, &c->dg,   &c->work, &c->idx,   &c->ys,   &c->sh_out,
                              &c->sh_d};
  for (int i = 0; i < MOE_SCRATCH; i++) {
    tensor_t keep = *s[i];
    *s[i] = c->spare.t[i], c->spare.t[i] = keep;
  }
  for (int i = 0; i < 6; i++) {
    int64_t keep = c->ix_off[i];
    c->ix_off[i] = c->spare.ix_off[i], c->spare.ix_off[i] = keep;
  }
}
