/* moe.c — chapter 12's MoE block (moe.h; notes/12-experts.md): route each token to k experts, dispatch
 * its rows to them (over the EP group: the all-to-all), run the experts' GEMMs, combine the outputs
 * with the gates; and the same backwards. The model around it (the units, the init, the setup) is
 * moe_model.c's, the load balance (the aux loss's gradient, the bias) moe_balance.c's, the plan of
 * the rows' exchange moe_exchange.c's, the exchange itself ep.c's.
 *
 * A MoE block runs gpt.c's attention half (gpt_block_attn_forward/backward) and then this file's MLP.
 * The routing is decided on the host (the router's probabilities are copied there: the top-k, the
 * plan and the loads are integer bookkeeping, and the all-to-all-v needs its counts on the host
 * anyway); every row of activations moves on the device (ops_gpt.h's op_rows_*). Names: routed, the
 * tokens this rank routes in a micro-batch (B·S, or its 1/tp with --tp); Rs, Rx, the rows of its send
 * layout and of its experts' layout (moe_state.h). */
#include "moe_state.h" // moe_gpt_t, moe_unit_t, moe_route_t, moe_router_backward, moe_exchange_rows
#include "moe.h"      // moe_plan, moe_capacity
#include "check.h"    // die_on_rank, xmalloc, xcalloc
#include "comm.h"     // comm_ctl_all_reduce_f64, comm_all_gather
#include "device.h"   // dev_memcpy
#include "gpt.h"      // gpt_block_attn_*, gpt_block_saved_ln2
#include "ledger.h"   // LEDGER_ACTS
#include "ops.h"      // op_linear_fwd/bwd, op_gelu_*, op_add, op_fill
#include "ops_gpt.h"  // op_rows_gather, op_rows_combine, op_rows_dot
#include "tensor.h"   // tensor_grow
#include "trace.h"    // trace_begin, trace_end (--trace: dispatch, experts, combine)
#include "train.h"    // trainer_t, TRAIN_EP_MAX
#include <limits.h>   // INT_MAX
#include <math.h>     // expf
#include <stdlib.h>   // free, realloc
#include <string.h>   // memcpy

/* an empty pass: a pointer too */
static float *grow(tensor_t *b, const char *name, device_t dev, int64_t numel) {
  return tensor_grow(b, name, LEDGER_ACTS, DT_F32, dev, numel > 0 ? numel : 1);
}

/* What a pass needs on the device besides the rows: the index arrays row_tok (Rs), slot (routed·k),
 * perm_x and perm_b (Rx each), and one weight per row — the gates (routed·k) forward, the row gates
 * (Rs) backward — packed on the host and uploaded in ONE copy (the GPU path's cost per pass: the
 * router's probabilities down, this up; notes/12). On the CPU they are the host arrays themselves. */
enum { IX_ROWS, IX_SLOT, IX_PERM_X, IX_PERM_B, IX_WEIGHT, IX_END };
static void upload_pass(moe_gpt_t *c, device_t dev, const moe_route_t *r, int64_t routed, const float *w,
                        int64_t nw) {
  int64_t *o = c->ix_off;
  o[IX_ROWS] = 0, o[IX_SLOT] = r->Rs, o[IX_PERM_X] = r->Rs + routed * c->k,
  o[IX_PERM_B] = o[IX_PERM_X] + r->Rx;
  o[IX_WEIGHT] = o[IX_PERM_B] + r->Rx, o[IX_END] = o[IX_WEIGHT] + nw;
  if (dev == DEV_CPU) return;
  int32_t *h = xmalloc((size_t)(o[IX_END] > 0 ? o[IX_END] : 1) * sizeof(int32_t), "moe indices (host, "
                                                                                  "packed)");
  memcpy(h + o[IX_ROWS], r->row_tok, (size_t)r->Rs * sizeof(int));
  memcpy(h + o[IX_SLOT], r->slot, (size_t)(routed * c->k) * sizeof(int));
  memcpy(h + o[IX_PERM_X], r->perm_x, (size_t)r->Rx * sizeof(int));
  memcpy(h + o[IX_PERM_B], r->perm_b, (size_t)r->Rx * sizeof(int));
  memcpy(h + o[IX_WEIGHT], w, (size_t)nw * sizeof(float)); /* 4 bytes each: the bits as they are */
  dev_memcpy(dev, grow(&c->idx, "moe "
                                "indices", dev, o[IX_END]), DEV_CPU, h, (size_t)o[IX_END] * sizeof(int32_t));
  free(h);
}
/* Where array `which` is for this pass: its device copy (upload_pass), or on the CPU host itself. */
static const int *ix(const moe_gpt_t *c, device_t dev, const int *host, int which) {
  return dev == DEV_CPU ? host : (const int *)c->idx.data + c->ix_off[which];
}
static const float *ix_weight(const moe_gpt_t *c, device_t dev, const float *host) {
  return dev == DEV_CPU ? host : (const float *)c->idx.data + c->ix_off[IX_WEIGHT];
}

/* Where a MoE block keeps what its backward reads of the expert rows: X (Rx, C), pre and post (Rx, F)
 * of its experts and eo (Rs, C), the outputs back home. With a capacity: in the loop's saved slot
 * (E·cap rows, known before routing). Dropless: in a buffer of its own grown to this micro-batch's
 * rows — the worst case, every token of the group on this rank's experts, is never reserved; the
 * ledger's peak is the high-water mark. The backward asks with the same rows: the same buffer. */
static float *saved_rows(moe_gpt_t *c, moe_route_t *r, const unit_io_t *io, int64_t Rx, int64_t Rs) {
  if (c->cf > 0) return io->saved + gpt_block_attn_saved(&c->kb) * io->B;
  int64_t n = Rx * (c->C + 2 * c->F) + Rs * c->C;
  c->rows_peak = n > c->rows_peak ? n : c->rows_peak;
  tensor_t *b = c->t->cfg->recompute ? &c->rows_rc : &r->rows;
  return grow(b, "moe expert rows (saved, dropless)", io->dev, n);
}

/* Where the shared experts keep their hidden activations for the backward: pre and post (routed, F)
 * each, in the loop's saved slot after the expert rows of a capacity (moe_model.c sizes it). */
static float *saved_shared(const moe_gpt_t *c, const unit_io_t *io) {
  int64_t per_sample = gpt_block_attn_saved(&c->kb) + (c->cf > 0 ? c->rows_per_sample : 0);
  return io->saved + per_sample * io->B;
}

/* ---- offsets inside a MoE unit ---------------------------------------------------------------- */
/* Routed expert i of this rank (after the router and the shared experts), shared expert s. */
static int64_t expert_off(const moe_gpt_t *c, int i) {
  return c->attn_numel + c->router_numel + c->shared_numel + (int64_t)i * c->expert_numel;
}
static int64_t shared_off(const moe_gpt_t *c, int s) {
  return c->attn_numel + c->router_numel + (int64_t)s * c->expert_numel;
}

/* One expert MLP on n rows: pre = X·W1ᵀ + b1 (n, F), post = GELU(pre), out = post·W2ᵀ + b2 (n, C); its
 * parameters at w (fc W (F, C), b (F), fcproj W (C, F), b (C)). The backward: d out → dX (overwritten),
 * the parameters' gradients with beta. */
static void mlp_forward(const moe_gpt_t *c, const unit_io_t *io, int64_t w, int64_t n, const float *X,
                        float *pre, float *post, float *out) {
  int64_t C = c->C, F = c->F;
  op_linear_fwd(io->dev, pre, X, param_at(io, w), param_at(io, w + F * C), io->wdt, (int)n, (int)C, (int)F);
  op_gelu_fwd(io->dev, post, pre, n * F);
  op_linear_fwd(io->dev, out, post, param_at(io, w + F * C + F), param_at(io, w + 2 * F * C + F), io->wdt,
                (int)n, (int)F, (int)C);
}
static void mlp_backward(const moe_gpt_t *c, const unit_io_t *io, int64_t w, int64_t n, const float *X,
                         const float *pre, const float *post, const float *dout, float *dpost, float *dX) {
  int64_t C = c->C, F = c->F;
  op_linear_bwd(io->dev, dpost, grad_at(io, w + F * C + F), grad_at(io, w + 2 * F * C + F), dout, post,
                param_at(io, w + F * C + F), io->wdt, (int)n, (int)F, (int)C, io->beta);
  op_gelu_bwd(io->dev, dpost, dpost, pre, n * F);
  op_linear_bwd(io->dev, dX, grad_at(io, w), grad_at(io, w + F * C), dpost, X, param_at(io, w), io->wdt,
                (int)n, (int)C, (int)F, io->beta);
}

/* ---- the router (host) -------------------------------------------------------------------------- */
/* probs = softmax(logits) per token (fp32, max subtracted); ids, gates = the top-k of probs + bias
 * (ties: the lower expert), gates from probs (the bias only selects: DeepSeek-V3), renormalised over
 * the k chosen with --gate-norm topk. */
static void route(const moe_gpt_t *c, const moe_unit_t *mu, moe_route_t *r, const float *logits,
                  int64_t routed) {
  int E = c->E, k = c->k;
  for (int64_t t = 0; t < routed; t++) {
    const float *l = logits + t * E;
    float *p = r->probs + t * E, mx = l[0], sum = 0;
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= sum;
    for (int j = 0; j < k; j++) {
      int best = -1;
      float bs = 0;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int q = 0; q < j; q++) taken |= r->ids[t * k + q] == e;
        float s = p[e] + (mu->bias ? mu->bias[e] : 0.0f);
        if (!taken && (best < 0 || s > bs)) best = e, bs = s;
      }
      r->ids[t * k + j] = best;
      r->gates[t * k + j] = p[best];
    }
    if (c->gate_topk) { /* --gate-norm topk: the k gates sum to 1 (GShard, Mixtral, DeepSeek-V3) */
      float z = 0;
      for (int j = 0; j < k; j++) z += r->gates[t * k + j];
      for (int j = 0; j < k; j++) r->gates[t * k + j] /= z;
    }
  }
}

/* The route of the micro-batch whose activations are in `saved` (its slot's: the same from its forward
 * to its backward; --recompute's one shared buffer: the forward reruns just before the backward), made
 * on its first use. Without a pipeline one micro-batch is in flight: one route per block. */
static moe_route_t *route_of(const moe_gpt_t *c, moe_unit_t *mu, const float *saved) {
  for (int i = 0; i < mu->n_routes; i++)
    if (mu->routes[i].key == saved) return &mu->routes[i];
  mu->routes = realloc(mu->routes, (size_t)(mu->n_routes + 1) * sizeof *mu->routes);
  if (!mu->routes) die_on_rank("out of host memory (moe routes)");
  moe_route_t *r = &mu->routes[mu->n_routes++];
  *r = (moe_route_t){.key = saved};
  r->counts = xcalloc((size_t)c->E, sizeof(int64_t), "moe counts");
  r->f = xcalloc((size_t)c->E, sizeof(double), "moe f");
  r->load_now = xcalloc((size_t)c->E, sizeof(double), "moe loads (micro-batch)");
  r->recv_rows = xcalloc((size_t)(c->ep * c->e_local), sizeof(int64_t), "moe recv rows");
  return r;
}

/* The host arrays of a MoE block for `routed` tokens, Rs send rows and Rx expert rows. */
static void unit_host(moe_gpt_t *c, moe_route_t *r, int64_t routed, int64_t Rs, int64_t Rx) {
  int E = c->E, k = c->k;
  if (routed > r->tokens) {
    free(r->probs), free(r->ids), free(r->slot), free(r->gates);
    r->probs = xmalloc((size_t)(routed * E) * sizeof(float), "moe probs");
    r->ids = xmalloc((size_t)(routed * k) * sizeof(int), "moe ids");
    r->slot = xmalloc((size_t)(routed * k) * sizeof(int), "moe slots");
    r->gates = xmalloc((size_t)(routed * k) * sizeof(float), "moe gates");
    r->tokens = routed;
  }
  r->row_tok = realloc(r->row_tok, (size_t)(Rs > 0 ? Rs : 1) * sizeof(int));
  r->row_gate = realloc(r->row_gate, (size_t)(Rs > 0 ? Rs : 1) * sizeof(float));
  r->perm_x = realloc(r->perm_x, (size_t)(Rx > 0 ? Rx : 1) * sizeof(int));
  r->perm_b = realloc(r->perm_b, (size_t)(Rx > 0 ? Rx : 1) * sizeof(int));
  if (!r->row_tok || !r->row_gate || !r->perm_x || !r->perm_b)
    die_on_rank("out of host memory (moe rows)");
}

/* ---- dispatch over the group: the exchanges (the plan of rows: moe_exchange.c) ------------------ */
/* --ep: rows from the send layout (grouped by destination rank) to this rank's experts' layout — the
 * all-to-all, then each expert's rows gathered in source order. (Alone, the two layouts are one: the
 * callers use the same buffer and do not call these.) */
static void to_experts(moe_gpt_t *c, const moe_route_t *r, device_t dev, float *dst_x, const float *send,
                       const int64_t *send_rows, const int64_t *recv_src, const char *tag) {
  int Cn = (int)c->C;
  float *recv = grow(&c->recv, "moe received rows", dev, r->Rx * c->C);
  moe_exchange_rows(c, send, send_rows, recv, recv_src, Cn, tag);
  op_rows_gather(dev, dst_x, recv, ix(c, dev, r->perm_x, IX_PERM_X), NULL, r->Rx, Cn);
}
/* And back: the experts' rows to their tokens' ranks, in the send layout. */
static void to_tokens(moe_gpt_t *c, const moe_route_t *r, device_t dev, float *dst_send, const float *src_x,
                      const int64_t *send_rows, const int64_t *recv_src, const char *tag) {
  int Cn = (int)c->C;
  float *back = grow(&c->recv, "moe received rows", dev, r->Rx * c->C);
  op_rows_gather(dev, back, src_x, ix(c, dev, r->perm_b, IX_PERM_B), NULL, r->Rx, Cn);
  moe_exchange_rows(c, back, recv_src, dst_send, send_rows, Cn, tag);
}

/* ---- forward -------------------------------------------------------------------------------- */
void moe_block_forward(const model_t *m, int u, const unit_io_t *io) {
  moe_gpt_t *c = moe_ctx(m);
  moe_unit_t *mu = &c->u[u];
  moe_route_t *r = route_of(c, mu, io->saved); /* this micro-batch's (a pipeline has several in flight) */
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  int E = c->E, k = c->k, Cn = (int)c->C;
  /* routed: the tokens this rank routes */
  int64_t tokens = (int64_t)io->B * c->S, C = c->C, routed = tokens / c->tp;
  gpt_block_t kb = c->kb;
  float *x2, *ln2;
  gpt_block_attn_forward(&kb, io, &x2, &ln2);
  int64_t here = c->gather ? tokens : routed; /* the rows of x2, ln2 and y on this rank */
  /* --tp: this rank's rows of the group's (the same on its T ranks) */
  ln2 += c->gather ? (int64_t)c->tp_rank * routed * C : 0;
  /* the router, in fp32 on the device; the softmax and the choice on the host */
  float *logits = grow(&c->logits, "moe router logits", dev, routed * E);
  op_linear_fwd(dev, logits, ln2, param_at(io, c->attn_numel), NULL, wdt, (int)routed, Cn, E);
  int64_t cap = moe_capacity(c->cf, routed, k, E), Rs = cap > 0 ? E * cap : routed * k;
  if (Rs * c->ep > INT_MAX) /* row indices are int (the plan's slot, row_tok, the permutations) */
    die_on_rank("moe: %lld rows per micro-batch at a rank of the EP group exceed %d (row indices are int): "
                "a smaller --batch or more --accum", (long long)(Rs * c->ep), INT_MAX);
  unit_host(c, r, routed, Rs, Rs * c->ep);
  float *lh = dev == DEV_CPU ? logits : xmalloc((size_t)(routed * E) * sizeof(float), "moe logits (host)");
  if (lh != logits) dev_memcpy(DEV_CPU, lh, dev, logits, (size_t)(routed * E) * sizeof(float));
  route(c, mu, r, lh, routed);
  if (lh != logits) free(lh);
  r->Rs = moe_plan(r->ids, routed, k, E, cap, r->counts, r->slot, r->row_tok);
  for (int64_t j = 0; j < r->Rs; j++) r->row_gate[j] = 0.0f;
  for (int64_t i = 0; i < routed * k; i++)
    if (r->slot[i] >= 0) r->row_gate[r->slot[i]] = r->gates[i];
  /* f_e: the share of the micro-batch's choices that picked e (Switch's aux loss; before capacity): of
   * this rank's tokens, or (--aux-loss-scope global) of every rank's (counts summed: exact integers) */
  for (int e = 0; e < E; e++) r->f[e] = 0, r->load_now[e] = 0;
  for (int64_t i = 0; i < routed * k; i++) r->f[r->ids[i]] += 1, r->load_now[r->ids[i]] += 1;
  double chosen = (double)(routed * k);
  if (c->aux_global) {
    comm_ctl_all_reduce_f64(c->t->world_comm, r->f, E, REDOP_SUM);
    chosen *= comm_world(c->t->world_comm); /* every rank routes as many tokens */
  }
  for (int e = 0; e < E; e++) r->f[e] /= chosen;
  /* dispatch: the send layout, then (--ep) the all-to-all into the experts' layout */
  trace_begin("moe dispatch");
  int64_t send_rows[TRAIN_EP_MAX], recv_src[TRAIN_EP_MAX]; /* per rank of the group */
  moe_exchange_plan(c, r, cap, send_rows, recv_src);
  int64_t Rx = r->Rx;
  /* saved: X (Rx, C), pre (Rx, 4C), post (Rx, 4C) of the experts; eo (Rs, C) the outputs back home.
   * Alone the send layout is the experts' (Rs = Rx): the rows are gathered straight into X */
  int64_t F = c->F;
  float *X = saved_rows(c, r, io, Rx, r->Rs), *pre = X + Rx * C, *post = pre + Rx * F;
  float *eo = post + Rx * F, *eox = c->ep > 1 ? grow(&c->eo_x, "moe expert outputs", dev, Rx * C) : eo;
  float *xs = c->ep > 1 ? grow(&c->xs, "moe dispatch rows", dev, r->Rs * C) : X;
  upload_pass(c, dev, r, routed, r->gates, routed * k); /* the indices and the gates: one copy */
  op_rows_gather(dev, xs, ln2, ix(c, dev, r->row_tok, IX_ROWS), NULL, r->Rs, Cn);
  if (c->ep > 1) to_experts(c, r, dev, X, xs, send_rows, recv_src, "moe dispatch");
  trace_end(NULL);
  trace_begin("moe experts");
  for (int i = 0; i < c->e_local; i++) { /* each expert: one GEMM pair on its rows */
    int64_t r0, n = moe_expert_rows(c, r, i, &r0);
    if (n > 0) mlp_forward(c, io, expert_off(c, i), n, X + r0 * C, pre + r0 * F, post + r0 * F, eox + r0 * C);
  }
  trace_end(NULL);
  trace_begin("moe combine");
  /* back to their tokens' ranks */
  if (c->ep > 1) to_tokens(c, r, dev, eo, eox, send_rows, recv_src, "moe combine");
  if (c->ep > 1)
    c->a2a_formula += moe_a2a_bytes(c, send_rows, recv_src); /* dropless: the counts went as control data */
  /* combine: y = x2 + Σ_j g_tj · eo[slot_tj] */
  float *y = c->gather ? grow(&c->ys, "moe rows (tp)", dev, routed * C) : io->y;
  op_rows_combine(dev, y, eo, ix(c, dev, r->slot, IX_SLOT), ix_weight(c, dev, r->gates), routed, k, Cn,
                  0.0f);
  /* + the shared experts (DeepSeekMoE): every routed token through each, gate 1 */
  float *sh = saved_shared(c, io), *sh_out = c->shared ? grow(&c->sh_out, "moe shared "
                                                                          "out", dev, routed * C) : NULL;
  for (int e = 0; e < c->shared; e++) {
    float *pre_s = sh + 2 * e * routed * F, *post_s = pre_s + routed * F;
    mlp_forward(c, io, shared_off(c, e), routed, ln2, pre_s, post_s, sh_out);
    op_add(dev, y, sh_out, DT_F32, routed * C);
  }
  /* --tp: every rank's rows, in row order */
  if (c->gather) comm_all_gather(c->tp_comm, y, io->y, tokens * C, DT_F32);
  op_add(dev, io->y, x2, DT_F32, here * C);
  trace_end(NULL);
}

/* ---- backward ------------------------------------------------------------------------------- */
void moe_block_backward(const model_t *m, int u, const unit_io_t *io) {
  moe_gpt_t *c = moe_ctx(m);
  moe_unit_t *mu = &c->u[u];
  moe_route_t *r = route_of(c, mu, io->saved); /* the one its forward routed */
  device_t dev = io->dev;
  dtype_t wdt = io->wdt;
  int E = c->E, k = c->k, Cn = (int)c->C;
  int64_t tokens = (int64_t)io->B * c->S, C = c->C, routed = tokens / c->tp, Rs = r->Rs, Rx = r->Rx;
  float beta = io->beta;
  gpt_block_t kb = c->kb;
  /* the router's and the experts' input, kept by the forward (--tp: this rank's rows), and d y's rows */
  int64_t row0 = c->gather ? (int64_t)c->tp_rank * routed * C : 0;
  const float *ln2 = gpt_block_saved_ln2(&kb, io) + row0, *dy = io->dy + row0;
  int64_t F = c->F;
  float *X = saved_rows(c, r, io, Rx, Rs), *pre = X + Rx * C, *post = pre + Rx * F;
  float *eo = post + Rx * F;
  int64_t send_rows[TRAIN_EP_MAX], recv_src[TRAIN_EP_MAX]; /* per rank of the group */
  for (int q = 0; q < c->ep; q++) {
    send_rows[q] = recv_src[q] = 0;
    for (int i = 0; i < c->e_local; i++) recv_src[q] += r->recv_rows[q * c->e_local + i];
  }
  int64_t cap = moe_capacity(c->cf, routed, k, E);
  for (int e = 0; e < E; e++) send_rows[e / c->e_local] += cap > 0 ? cap : r->counts[e];
  /* combine's backward: d eo (send layout) = g · dy of the row's token; then to the experts */
  trace_begin("moe combine backward");
  upload_pass(c, dev, r, routed, r->row_gate, Rs); /* the indices and the row gates: one copy */
  float *dsend = grow(&c->dsend, "moe d rows (send)", dev, Rs * C);
  op_rows_gather(dev, dsend, dy, ix(c, dev, r->row_tok, IX_ROWS), ix_weight(c, dev, r->row_gate), Rs, Cn);
  /* the experts' input and output gradients (alone: the output's is dsend itself) */
  float *dx_x = grow(&c->dx_x, "moe d expert rows", dev, (c->ep > 1 ? 2 : 1) * Rx * C);
  float *deo_x = c->ep > 1 ? dx_x + Rx * C : dsend;
  if (c->ep > 1) to_experts(c, r, dev, deo_x, dsend, send_rows, recv_src, "moe combine backward");
  trace_end(NULL);
  trace_begin("moe experts backward");
  float *dpost = grow(&c->dpost, "moe d hidden", dev, Rx * F);
  for (int i = 0; i < c->e_local; i++) {
    int64_t r0, n = moe_expert_rows(c, r, i, &r0), w = expert_off(c, i);
    if (n == 0) { /* no rows: its gradient is 0 (overwritten with beta 0, kept with beta 1) */
      if (beta == 0.0f) op_fill(dev, grad_at(io, w), wdt, 0.0f, c->expert_numel);
      continue;
    }
    mlp_backward(c, io, w, n, X + r0 * C, pre + r0 * F, post + r0 * F, deo_x + r0 * C, dpost + r0 * F,
                 dx_x + r0 * C);
  }
  trace_end(NULL);
  trace_begin("moe dispatch backward");
  /* the dispatch's backward: d rows home (--ep: the all-to-all back), then summed per token */
  float *dtok = dx_x; /* the input gradients in the send layout: alone, the experts' rows are */
  if (c->ep > 1) {
    to_tokens(c, r, dev, dsend, dx_x, send_rows, recv_src, "moe dispatch backward");
    dtok = dsend;
    c->a2a_formula += moe_a2a_bytes(c, send_rows, recv_src);
  }
  float *dln2 = grow(&c->dln2, "moe d ln2", dev, 2 * routed * C), *dln2r = dln2 + routed * C;
  const int *slot = ix(c, dev, r->slot, IX_SLOT);
  op_rows_combine(dev, dln2, dtok, slot, NULL, routed, k, Cn, 0.0f);
  trace_end(NULL);
  /* the gates' gradient, then the router's: softmax backward with Switch's aux term (on the host) */
  float *dg = grow(&c->dg, "moe d gates", dev, routed * k);
  op_rows_dot(dev, dg, dy, eo, slot, routed, k, Cn);
  float *dgh = xmalloc((size_t)(routed * k + routed * E) * sizeof(float), "moe router backward (host)");
  float *dl = dgh + routed * k;
  dev_memcpy(DEV_CPU, dgh, dev, dg, (size_t)(routed * k) * sizeof(float));
  moe_router_backward(c, mu, r, routed, dgh, dl); /* moe_balance.c: and the step's loads */
  float *dlog = grow(&c->logits, "moe router logits", dev, routed * E);
  dev_memcpy(dev, dlog, DEV_CPU, dl, (size_t)(routed * E) * sizeof(float));
  free(dgh);
  op_linear_bwd(dev, dln2r, grad_at(io, c->attn_numel), NULL, dlog, ln2, param_at(io, c->attn_numel), wdt,
                (int)routed, Cn, E, beta);
  op_add(dev, dln2, dln2r, DT_F32, routed * C);
  /* the shared experts' backward: d out = dy of the rows, their d ln2 added */
  float *sh = saved_shared(c, io);
  for (int e = 0; e < c->shared; e++) {
    float *pre_s = sh + 2 * e * routed * F, *post_s = pre_s + routed * F;
    float *dh = grow(&c->sh_d, "moe shared d hidden, d ln2", dev, routed * (F + C)), *dx = dh + routed * F;
    mlp_backward(c, io, shared_off(c, e), routed, ln2, pre_s, post_s, dy, dh, dx);
    op_add(dev, dln2, dx, DT_F32, routed * C);
  }
  /* --tp: d ln2 of every rank's rows (the router's weight gradient stays a partial sum: ep_tp.c) */
  if (c->gather) {
    float *whole = grow(&c->ys, "moe rows (tp)", dev, tokens * C);
    comm_all_gather(c->tp_comm, dln2, whole, tokens * C, DT_F32);
    dln2 = whole;
  }
  float *work = grow(&c->work, "moe attention scratch", dev, gpt_block_scratch_numel(&kb, io->B));
  gpt_block_attn_backward(&kb, io, dln2, work);
}

