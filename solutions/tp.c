/* tp.c — Megatron-LM's tensor parallelism: f and g, the column- and row-parallel linears, and the
 * MLP block built from them (see tp.h; explained in notes/06-tensor-parallel.md). These are the
 * exercises, and what training runs: the split MLP (tp_mlp.c) and the split GPT's blocks and head
 * (tp_gpt.c) call the four linears below for every split matmul.
 *
 * Every collective here is an all-reduce on the TP group, blocking: its result is needed by the
 * very next op (the critical path — unlike DDP's gradient all-reduce, nothing overlaps it).
 * The local math is the ordinary ops of common/device/ops.h on this rank's slices. */
#include "tp.h"       // tp_*, comm_t, tensor_t
#include "check.h"    // die, xmalloc
#include "device.h"   // dev_memcpy
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include "ops.h"      // op_linear_fwd, op_linear_bwd, op_gelu_fwd, op_gelu_bwd, op_add
#include <stdlib.h>   // free
#include <string.h>   // memcpy

/* ---- f and g ------------------------------------------------------------------------------ */
void tp_f_forward(comm_t *tp, const float *x, int64_t numel) {
  /* identity: every rank of the group already holds the whole x (Megatron's
   * copy_to_tensor_model_parallel_region does nothing in its forward either) */
}

void tp_f_backward(comm_t *tp, float *dx, int64_t numel) {
  // BEGIN EXERCISE tp_f_backward notes/06-tensor-parallel.md
  // HINT: x fed every rank's slice of the layer, so x's gradient must be the sum of what each slice sends
  // HINT: back, on every rank.
  // HINT2: dx holds this rank's share, numel elements; after the call every rank holds the same sum. One
  // HINT2: collective over tp, in place.
  // HINT3: comm_all_reduce on (tp, dx, numel, DT_F32) with the sum as the op.
  comm_all_reduce(tp, dx, numel, DT_F32, REDOP_SUM);
  // END EXERCISE
}

void tp_g_forward(comm_t *tp, float *y, int64_t numel) {
  // BEGIN EXERCISE tp_g_forward notes/06-tensor-parallel.md
  // HINT: each rank holds a partial sum of the same y; the layer's output must be the whole sum, the same on
  // HINT: every rank.
  // HINT2: y: numel elements, this rank's partial in, the total out, in place; the collective f's backward
  // HINT2: uses too.
  // HINT3: comm_all_reduce on (tp, y, numel, DT_F32) summing.
  comm_all_reduce(tp, y, numel, DT_F32, REDOP_SUM);
  // END EXERCISE
}

void tp_g_backward(comm_t *tp, const float *dy, int64_t numel) {
  /* identity: y was summed, and d(Σ partials)/d(partial) = 1, so each partial's gradient is the
   * whole dy, which every rank already holds */
}

/* ---- slices -------------------------------------------------------------------------------- */
void tp_column_slice(float *W_r, float *b_r, const float *W, const float *b, int in, int out, int T, int r) {
  int lo = tp_part_lo(out, T, r), n = tp_part_numel(out, T, r);
  memcpy(W_r, W + (int64_t)lo * in, (size_t)n * in * sizeof(float)); /* rows lo.. are contiguous */
  if (b && b_r) memcpy(b_r, b + lo, (size_t)n * sizeof(float));
}

void tp_row_slice(float *W_r, const float *W, int in, int out, int T, int r) {
  int lo = tp_part_lo(in, T, r), n = tp_part_numel(in, T, r);
  for (int o = 0; o < out; o++)
    memcpy(W_r + (int64_t)o * n, W + (int64_t)o * in + lo, (size_t)n * sizeof(float));
}

void tp_cols_of(float *x_r, const float *x, int B, int n, int T, int r) { tp_row_slice(x_r, x, n, B, T, r); }

/* ---- the split linears -------------------------------------------------------------------- */
void tp_column_forward(comm_t *tp, float *y_r, const float *x, const void *W_r, const void *b_r, dtype_t wdt,
                       int B, int in, int out_r) {
  // BEGIN EXERCISE tp_column_forward notes/06-tensor-parallel.md
  // HINT: x is whole on every rank, so each rank can compute its own output features alone: no sum is needed
  // HINT: in the forward.
  // HINT2: x (B, in), W_r (out_r, in), b_r (out_r), weights in wdt -> y_r (B, out_r); f's forward (the
  // HINT2: identity) comes first, then the local linear.
  // HINT3: tp_f_forward(tp, x, B·in), then op_linear_fwd(comm_device(tp), y_r, x, W_r, b_r, wdt, B, in,
  // HINT3: out_r).
  tp_f_forward(tp, x, (int64_t)B * in);
  op_linear_fwd(comm_device(tp), y_r, x, W_r, b_r, wdt, B, in, out_r);
  // END EXERCISE
}

void tp_column_backward(comm_t *tp, float *dx, void *dW_r, void *db_r, const float *dy_r, const float *x,
                        const void *W_r, dtype_t wdt, int B, int in, int out_r, float beta) {
  // BEGIN EXERCISE tp_column_backward notes/06-tensor-parallel.md
  // HINT: this rank's weights and bias get whole gradients locally; x's gradient is only this slice's share
  // HINT: until the shares are summed.
  // HINT2: the local backward of (B, in, out_r), gradients accumulated with beta; then f's backward on B·in
  // HINT2: elements — only when dx is wanted (NULL: none).
  // HINT3: op_linear_bwd(comm_device(tp), dx, dW_r, db_r, dy_r, x, W_r, wdt, B, in, out_r, beta); if (dx)
  // HINT3: tp_f_backward(tp, dx, B·in).
  op_linear_bwd(comm_device(tp), dx, dW_r, db_r, dy_r, x, W_r, wdt, B, in, out_r, beta);
  if (dx) tp_f_backward(tp, dx, (int64_t)B * in);
  // END EXERCISE
}

void tp_row_forward(comm_t *tp, float *y, const float *x_r, const void *W_r, const float *b, dtype_t wdt,
                    int B, int in_r, int out) {
  // BEGIN EXERCISE tp_row_forward notes/06-tensor-parallel.md
  // HINT: each rank's slice of x gives a partial y; y is their sum — and the bias belongs to y, so it must
  // HINT: count once, not once per rank.
  // HINT2: order: the local linear with NO bias (B, in_r, out), then g on B·out elements, then the bias onto
  // HINT2: each of the B rows.
  // HINT3: op_linear_fwd(dev, y, x_r, W_r, NULL, wdt, B, in_r, out) (NULL: no bias); tp_g_forward(tp, y,
  // HINT3: B·out); op_add of b (fp32) onto each row.
  device_t dev = comm_device(tp);
  op_linear_fwd(dev, y, x_r, W_r, NULL, wdt, B, in_r, out);
  tp_g_forward(tp, y, (int64_t)B * out);
  for (int i = 0; i < B; i++) op_add(dev, y + (int64_t)i * out, b, DT_F32, out);
  // END EXERCISE
}

void tp_row_backward(comm_t *tp, float *dx_r, void *dW_r, void *db, const float *dy, const float *x_r,
                     const void *W_r, dtype_t wdt, int B, int in_r, int out, float beta) {
  // BEGIN EXERCISE tp_row_backward notes/06-tensor-parallel.md
  // HINT: the sum's gradient reaches every partial whole: dy is already complete on every rank, so this
  // HINT: layer's gradients need no communication.
  // HINT2: g's backward (the identity) on B·out elements, then one local backward on (B, in_r, out),
  // HINT2: gradients accumulated with beta; db is the same on every rank.
  // HINT3: tp_g_backward(tp, dy, B·out); op_linear_bwd(comm_device(tp), dx_r, dW_r, db, dy, x_r, W_r, wdt,
  // HINT3: B,
  // HINT3: in_r, out, beta).
  tp_g_backward(tp, dy, (int64_t)B * out);
  op_linear_bwd(comm_device(tp), dx_r, dW_r, db, dy, x_r, W_r, wdt, B, in_r, out, beta);
  // END EXERCISE
}

/* ---- the MLP block ------------------------------------------------------------------------- */
tp_mlp_t *tp_mlp_new(comm_t *tp, int B, int h, int ffn, const float *W1, const float *b1, const float *W2,
                     const float *b2) {
  int T = comm_world(tp), r = comm_rank(tp);
  if (B < 1 || h < 1 || ffn < T)
    die("rank %d: tp_mlp_new: B %d, h %d, ffn %d: need B, h >= 1 and ffn >= T = %d", r, B, h, ffn, T);
  device_t dev = comm_device(tp);
  tp_mlp_t *m = xcalloc(1, sizeof *m, "tp mlp");
  m->tp = tp;
  m->T = T;
  m->r = r;
  m->B = B;
  m->h = h;
  m->ffn = ffn;
  m->ffn_r = tp_part_numel(ffn, T, r);
  int64_t fr = m->ffn_r, n1 = fr * h, n2 = (int64_t)h * fr;
  int64_t numel = n1 + fr + n2 + h;
  m->params = tensor_alloc("tp mlp params", LEDGER_PARAMS, DT_F32, dev, numel);
  m->grads = tensor_alloc("tp mlp grads", LEDGER_GRADS, DT_F32, dev, numel);
  m->acts = tensor_alloc("tp mlp activations", LEDGER_ACTS, DT_F32, dev, 3 * B * fr);
  float *p = m->params.data, *g = m->grads.data, *a = m->acts.data;
  m->W1 = p, m->b1 = p + n1, m->W2 = p + n1 + fr, m->b2 = p + n1 + fr + n2;
  m->dW1 = g, m->db1 = g + n1, m->dW2 = g + n1 + fr, m->db2 = g + n1 + fr + n2;
  m->a = a, m->u = a + B * fr, m->d = a + 2 * B * fr;
  /* this rank's slices, built on the host, then copied to the device in one go */
  float *host = xmalloc((size_t)numel * sizeof(float), "tp mlp slices");
  tp_column_slice(host, host + n1, W1, b1, h, ffn, T, r);
  tp_row_slice(host + n1 + fr, W2, ffn, h, T, r);
  memcpy(host + n1 + fr + n2, b2, (size_t)h * sizeof(float));
  dev_memcpy(dev, p, DEV_CPU, host, (size_t)numel * sizeof(float));
  free(host);
  return m;
}

void tp_mlp_free(tp_mlp_t *m) {
  if (!m) return;
  tensor_free(&m->params);
  tensor_free(&m->grads);
  tensor_free(&m->acts);
  free(m);
}

void tp_mlp_reference(int B, int h, int ffn, const float *x, const float *W1, const float *b1,
                      const float *W2, const float *b2, const float *dy, float *y, float *dx, float *dW1,
                      float *db1, float *dW2, float *db2) {
  float *a = xcalloc((size_t)B * ffn, sizeof(float), "reference a");   /* (B, ffn) pre-GELU */
  float *u = xcalloc((size_t)B * ffn, sizeof(float), "reference u");   /* (B, ffn) GELU(a) */
  float *du = xcalloc((size_t)B * ffn, sizeof(float), "reference du"); /* (B, ffn) */
  op_linear_fwd(DEV_CPU, a, x, W1, b1, DT_F32, B, h, ffn);
  op_gelu_fwd(DEV_CPU, u, a, (int64_t)B * ffn);
  op_linear_fwd(DEV_CPU, y, u, W2, b2, DT_F32, B, ffn, h);
  op_linear_bwd(DEV_CPU, du, dW2, db2, dy, u, W2, DT_F32, B, ffn, h, 0.0f);
  op_gelu_bwd(DEV_CPU, du, du, a, (int64_t)B * ffn);
  op_linear_bwd(DEV_CPU, dx, dW1, db1, du, x, W1, DT_F32, B, h, ffn, 0.0f);
  free(a);
  free(u);
  free(du);
}

void tp_mlp_forward(tp_mlp_t *m, float *y, const float *x) {
  // BEGIN EXERCISE tp_mlp_forward notes/06-tensor-parallel.md
  // HINT: split so that the activation needs no communication: each rank applies GELU to the hidden features
  // HINT: it owns.
  // HINT2: x (B, h) -> column-parallel -> a (B, ffn_r) -> GELU -> u (B·ffn_r) -> row-parallel -> y (B, h); a
  // HINT2: and u stay in m for the backward.
  // HINT3: tp_column_forward(m->tp, m->a, x, m->W1, m->b1, DT_F32, B, h, ffn_r); op_gelu_fwd(dev, m->u, m->a,
  // HINT3: B·ffn_r); tp_row_forward(m->tp, y, m->u, m->W2, m->b2, DT_F32, B, ffn_r, h).
  device_t dev = comm_device(m->tp);
  tp_column_forward(m->tp, m->a, x, m->W1, m->b1, DT_F32, m->B, m->h, m->ffn_r);
  op_gelu_fwd(dev, m->u, m->a, (int64_t)m->B * m->ffn_r);
  tp_row_forward(m->tp, y, m->u, m->W2, m->b2, DT_F32, m->B, m->ffn_r, m->h);
  // END EXERCISE
}

void tp_mlp_backward(tp_mlp_t *m, float *dx, const float *dy, const float *x) {
  // BEGIN EXERCISE tp_mlp_backward notes/06-tensor-parallel.md
  // HINT: the forward in reverse; the GELU's gradient, like the GELU, stays on this rank's own hidden
  // HINT: features.
  // HINT2: dy (B, h) -> row-parallel backward -> du (B, ffn_r) into m->d -> GELU backward in place at the
  // HINT2: saved a -> column-parallel backward -> dx (B, h).
  // HINT3: tp_row_backward(..., m->d, m->dW2, m->db2, dy, m->u, m->W2, DT_F32, ..., 0.0f); op_gelu_bwd(dev,
  // HINT3: m->d, m->d, m->a, B·ffn_r); tp_column_backward(..., dx, m->dW1, m->db1, m->d, x, m->W1, DT_F32,
  // HINT3: ..., 0.0f).
  device_t dev = comm_device(m->tp);
  tp_row_backward(m->tp, m->d, m->dW2, m->db2, dy, m->u, m->W2, DT_F32, m->B, m->ffn_r, m->h, 0.0f);
  op_gelu_bwd(dev, m->d, m->d, m->a, (int64_t)m->B * m->ffn_r);
  tp_column_backward(m->tp, dx, m->dW1, m->db1, m->d, x, m->W1, DT_F32, m->B, m->h, m->ffn_r, 0.0f);
  // END EXERCISE
}
