/* tp_sp.c — sequence parallelism (tp_sp.h; notes/10-long-sequences.md, "Part 1 — sequence
 * parallelism"): the all-gather and the reduce-scatter along the sequence (the exercises), the
 * column- and row-parallel linears of tp.c with them in place of f's and g's all-reduces, and
 * LayerNorm's backward with its weight gradients summed over the group. tp_gpt.c runs the GPT's
 * blocks, embedding and head through these with --sp. */
#include "tp_sp.h"    // tp_sp_t, the contracts implemented here
#include "check.h"    // die, xcalloc
#include "device.h"   // dev_memcpy
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include "ledger.h"   // LEDGER_ACTS
#include "ops.h"      // op_linear_fwd, op_linear_bwd, op_add, op_cast
#include "ops_gpt.h"  // op_layernorm_bwd
#include <stdlib.h>   // free

/* ---- the sequence collectives ----------------------------------------------------------------- */
void tp_sp_all_gather(comm_t *tp, float *full, const float *part, float *stage, int B, int S, int C) {
  // BEGIN EXERCISE tp_sp_all_gather notes/10-long-sequences.md
  // HINT: every rank holds S/T positions of every sample; the column-parallel linear after g needs all S. The
  // HINT: collective concatenates whole chunks by rank, but in (B, S, C) one rank's positions are B separate
  // HINT: blocks.
  // HINT2: all-gather the B·S·C elements into stage (rank q's (B, S/T, C) part is chunk q, at
  // HINT2: q·B·(S/T)·C),
  // HINT2: then copy each of the T·B blocks of (S/T)·C floats to full at sample b, positions q·S/T.. .
  // HINT3: comm_all_gather(tp, part, stage, (int64_t)B·S·C, DT_F32); for q < T, b < B: dev_memcpy(dev, full
  // HINT3: +
  // HINT3: (b·S + q·Sl)·C, dev, stage + (q·B + b)·Sl·C, Sl·C·4), Sl = S/T, dev = comm_device(tp).
  int T = comm_world(tp), Sl = S / T;
  int64_t blk = (int64_t)Sl * C;
  device_t dev = comm_device(tp);
  comm_all_gather(tp, part, stage, (int64_t)B * S * C, DT_F32);
  for (int q = 0; q < T; q++)
    for (int b = 0; b < B; b++)
      dev_memcpy(dev, full + ((int64_t)b * S + (int64_t)q * Sl) * C, dev, stage + ((int64_t)q * B + b) * blk,
                 (size_t)blk * sizeof(float));
  // END EXERCISE
}

void tp_sp_reduce_scatter(comm_t *tp, float *part, const float *full, float *stage, int B, int S, int C) {
  // BEGIN EXERCISE tp_sp_reduce_scatter notes/10-long-sequences.md
  // HINT: each rank's full (B, S, C) is a partial sum over its slice of the features (a row-parallel output);
  // HINT: this rank needs the total only at its own S/T positions of every sample — the all-reduce's first
  // HINT: half.
  // HINT2: the reduce-scatter gives rank q the contiguous chunk q: first copy, for every rank q and sample b,
  // HINT2: positions q·S/T.. of sample b into chunk q of stage (at (q·B + b)·(S/T)·C), then
  // HINT2: reduce-scatter
  // HINT2: stage (B·S·C elements, summing) into part.
  // HINT3: for q < T, b < B: dev_memcpy(dev, stage + (q·B + b)·Sl·C, dev, full + (b·S + q·Sl)·C,
  // HINT3: Sl·C·4);
  // HINT3: then comm_reduce_scatter(tp, stage, part, (int64_t)B·S·C, DT_F32, REDOP_SUM).
  int T = comm_world(tp), Sl = S / T;
  int64_t blk = (int64_t)Sl * C;
  device_t dev = comm_device(tp);
  for (int q = 0; q < T; q++)
    for (int b = 0; b < B; b++)
      dev_memcpy(dev, stage + ((int64_t)q * B + b) * blk, dev, full + ((int64_t)b * S + (int64_t)q * Sl) * C,
                 (size_t)blk * sizeof(float));
  comm_reduce_scatter(tp, stage, part, (int64_t)B * S * C, DT_F32, REDOP_SUM);
  // END EXERCISE
}

/* ---- the context ------------------------------------------------------------------------------ */
tp_sp_t *tp_sp_new(comm_t *tp, int S) {
  int T = comm_world(tp);
  if (S % T)
    die("error: --sp: seq_len %d does not split over the %d ranks of the TP group (T must divide it)", S, T);
  tp_sp_t *sp = xcalloc(1, sizeof *sp, "tp sp");
  sp->tp = tp, sp->T = T, sp->S = S, sp->Sl = S / T;
  return sp;
}

void tp_sp_free(tp_sp_t *sp) {
  if (!sp) return;
  tensor_free(&sp->full[0]);
  tensor_free(&sp->full[1]);
  tensor_free(&sp->stage);
  tensor_free(&sp->ln);
  free(sp);
}

static float *grow(tensor_t *t, const char *name, device_t dev, int64_t numel) {
  return tensor_grow(t, name, LEDGER_ACTS, DT_F32, dev, numel);
}

float *tp_sp_buffer(tp_sp_t *sp, int k, int64_t numel) {
  return grow(&sp->full[k], k ? "sp working (partial sums)" : "sp working (gathered)", comm_device(sp->tp),
              numel);
}

void tp_sp_gather(tp_sp_t *sp, float *full, const float *part, int B, int C) {
  float *stage = grow(&sp->stage, "sp staging", comm_device(sp->tp), (int64_t)B * sp->S * C);
  tp_sp_all_gather(sp->tp, full, part, stage, B, sp->S, C);
}

void tp_sp_scatter(tp_sp_t *sp, float *part, const float *full, int B, int C) {
  float *stage = grow(&sp->stage, "sp staging", comm_device(sp->tp), (int64_t)B * sp->S * C);
  tp_sp_reduce_scatter(sp->tp, part, full, stage, B, sp->S, C);
}

/* ---- the split linears with the sequence collectives -------------------------------------------- */
void tp_sp_column_forward(tp_sp_t *sp, float *y, const float *x_part, const void *W_r, const void *b_r,
                          dtype_t wdt, int B, int in, int out_r) {
  int rows = B * sp->S;
  float *x = tp_sp_buffer(sp, 0, (int64_t)rows * in); // (B·S, in) gathered
  tp_sp_gather(sp, x, x_part, B, in);                 // g forward
  op_linear_fwd(comm_device(sp->tp), y, x, W_r, b_r, wdt, rows, in, out_r);
}

void tp_sp_column_backward(tp_sp_t *sp, float *dx_part, void *dW_r, void *db_r, const float *dy,
                           const float *x_part, const void *W_r, dtype_t wdt, int B, int in, int out_r,
                           float beta) {
  int rows = B * sp->S;
  float *x = tp_sp_buffer(sp, 0, (int64_t)rows * in);                 // (B·S, in): the input again
  float *dx = dx_part ? tp_sp_buffer(sp, 1, (int64_t)rows * in) : NULL; // (B·S, in) this rank's partial sums
  tp_sp_gather(sp, x, x_part, B, in);
  op_linear_bwd(comm_device(sp->tp), dx, dW_r, db_r, dy, x, W_r, wdt, rows, in, out_r, beta);
  if (dx_part) tp_sp_scatter(sp, dx_part, dx, B, in); // g backward
}

void tp_sp_row_forward(tp_sp_t *sp, float *y_part, const float *x_r, const void *W_r, const float *b,
                       dtype_t wdt, int B, int in_r, int out) {
  device_t dev = comm_device(sp->tp);
  int rows = B * sp->S, rows_l = B * sp->Sl;
  float *y = tp_sp_buffer(sp, 1, (int64_t)rows * out); // (B·S, out) partial sums
  op_linear_fwd(dev, y, x_r, W_r, NULL, wdt, rows, in_r, out);
  tp_sp_scatter(sp, y_part, y, B, out); // ḡ forward
  for (int i = 0; i < rows_l; i++) op_add(dev, y_part + (int64_t)i * out, b, DT_F32, out);
}

void tp_sp_row_backward(tp_sp_t *sp, float *dx_r, void *dW_r, void *db, const float *dy_part,
                        const float *x_r, const void *W_r, dtype_t wdt, int B, int in_r, int out,
                        float beta) {
  int rows = B * sp->S;
  float *dy = tp_sp_buffer(sp, 0, (int64_t)rows * out); // (B·S, out) whole
  tp_sp_gather(sp, dy, dy_part, B, out);                // ḡ backward
  op_linear_bwd(comm_device(sp->tp), dx_r, dW_r, db, dy, x_r, W_r, wdt, rows, in_r, out, beta);
}

/* dst (wdt, n) = beta·dst + src (fp32): src is rounded once, as the ops store their gradients. */
static void store_acc(device_t dev, void *dst, dtype_t wdt, float *src, float *tmp, int n, float beta) {
  if (beta != 0.0f) {
    if (wdt == DT_F32) op_add(dev, src, dst, DT_F32, n);
    else {
      op_cast(dev, tmp, DT_F32, dst, wdt, n);
      op_add(dev, src, tmp, DT_F32, n);
    }
  }
  op_cast(dev, dst, wdt, src, DT_F32, n); /* fp32: a copy */
}

void tp_sp_layernorm_backward(tp_sp_t *sp, float *dx, void *dw, void *db, const float *dy, const float *x,
                              const float *mean, const float *rstd, const void *w, dtype_t wdt, int rows,
                              int C, float beta) {
  device_t dev = comm_device(sp->tp);
  float *g = grow(&sp->ln, "sp layernorm grads", dev, 4 * (int64_t)C); // dw | db | w (fp32) | cast scratch
  const float *w32 = w;
  if (wdt != DT_F32) {
    op_cast(dev, g + 2 * C, DT_F32, w, wdt, C);
    w32 = g + 2 * C;
  }
  op_layernorm_bwd(dev, dx, g, g + C, dy, x, mean, rstd, w32, DT_F32, rows, C, 0.0f); // this rank's positions
  comm_all_reduce(sp->tp, g, 2 * (int64_t)C, DT_F32, REDOP_SUM);                       // every position
  store_acc(dev, dw, wdt, g, g + 3 * C, C, beta);
  store_acc(dev, db, wdt, g + C, g + 3 * C, C, beta);
}
