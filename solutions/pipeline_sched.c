/* pipeline_sched.c — a pipeline schedule is a list: the order in which a stage runs its forwards
 * and backwards, written as a pure function that the loop executes (the contract: pipeline_sched.h;
 * notes/07-pipeline.md, meetings 07a-07c). Holds the schedules' names, the balanced split of the
 * units into stages (pp_split), each schedule's order of a stage's operations (pp_schedule_ops:
 * naive, GPipe, 1F1B, interleaved, and the zero-bubble ZB-H1 and ZB-H2 of zb_order) and the
 * activations in flight (pp_inflight_formula). Plain C11 and libc only: no MPI, nothing of common/,
 * so it compiles alone (the explorer page runs it). Beside it: which messages go together
 * (pipeline_groups.c), the checker (pipeline_check.c), the simulator (pipeline_sim.c). */
#include "pipeline_sched.h" // the contracts implemented here
#include <stdint.h>         // INT64_MAX
#include <stdlib.h>         // calloc, free
#include <string.h>         // strcmp

static const char *g_names[PP_NSCHED] = {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"};

int pp_schedule_parse(const char *name) {
  for (int i = 0; name && i < PP_NSCHED; i++)
    if (strcmp(name, g_names[i]) == 0) return i;
  return -1;
}

const char *pp_schedule_name(pp_schedule_t sched) {
  return sched >= 0 && sched < PP_NSCHED ? g_names[sched] : "?";
}

int pp_splits_backward(pp_schedule_t sched) { return sched == PP_ZB_H1 || sched == PP_ZB_H2; }

int pp_schedule_nops(pp_schedule_t sched, int M, int v) {
  return pp_splits_backward(sched) ? 3 * M : 2 * v * M;
}

/* ---- the split ------------------------------------------------------------------------------ */

int pp_split(const int64_t *numel, int n_units, int P, int *first) {
  if (P < 1 || P > n_units) return -1;
  /* best[s][u]: the smallest possible largest stage when units 0..u−1 make s stages; a linear
   * partition by dynamic programming (U and P are small). */
  int64_t *pre = calloc((size_t)n_units + 1, sizeof *pre);
  int64_t *best = calloc((size_t)(P + 1) * (size_t)(n_units + 1), sizeof *best);
  int *cut = calloc((size_t)(P + 1) * (size_t)(n_units + 1), sizeof *cut);
  if (!pre || !best || !cut) {
    free(pre), free(best), free(cut);
    return -1;
  }
  for (int u = 0; u < n_units; u++) pre[u + 1] = pre[u] + numel[u];
#define BEST(s, u) best[(size_t)(s) * (size_t)(n_units + 1) + (size_t)(u)]
#define CUT(s, u) cut[(size_t)(s) * (size_t)(n_units + 1) + (size_t)(u)]
  for (int u = 1; u <= n_units; u++) BEST(1, u) = pre[u];
  for (int s = 2; s <= P; s++)
    for (int u = s; u <= n_units; u++) {
      BEST(s, u) = INT64_MAX;
      for (int c = s - 1; c < u; c++) { /* the last stage is units c..u−1 */
        int64_t last = pre[u] - pre[c], worst = BEST(s - 1, c) > last ? BEST(s - 1, c) : last;
        if (worst < BEST(s, u)) BEST(s, u) = worst, CUT(s, u) = c;
      }
    }
  first[P] = n_units;
  for (int s = P, u = n_units; s >= 1; s--) {
    first[s - 1] = s == 1 ? 0 : CUT(s, u);
    u = first[s - 1];
  }
#undef BEST
#undef CUT
  free(pre);
  free(best);
  free(cut);
  return 0;
}

/* ---- the orders ------------------------------------------------------------------------------ */

/* Interleaved 1F1B (Megatron-LM's order): virtual micro-batch i = 0..v·M−1 runs micro-batch
 * (i / (P·v))·P + i mod P on chunk (i / P) mod v — P micro-batches through chunk 0, the same P
 * through chunk 1, ..., then the next P; backwards walk the chunks the other way. */
static pp_op_t interleaved_op(char kind, int i, int P, int v) {
  int j = (i / P) % v;
  return (pp_op_t){kind, (i / (P * v)) * P + i % P, kind == 'F' ? j : v - 1 - j};
}

/* The zero-bubble order with k·(P − s − 1) warm-up forwards: ZB-H1 is k = 1, ZB-H2 k = 2 (twice
 * the warm-up, twice the W's held back). Returns the operations written (3M). */
static int zb_order(int k, int P, int s, int M, pp_op_t *ops) {
  int n = 0;
  if (k == 2) { /* ZB-H2: as ZB-H1 below with 2(P − s − 1) warm-up forwards and 2s W's held back */
    int w = 2 * (P - s - 1) < M ? 2 * (P - s - 1) : M, d = 2 * s < M ? 2 * s : M;
    for (int i = 0; i < w; i++) ops[n++] = (pp_op_t){'F', i, 0};
    for (int i = 0; i < M; i++) {
      if (w + i < M) ops[n++] = (pp_op_t){'F', w + i, 0};
      ops[n++] = (pp_op_t){'B', i, 0};
      if (i >= d) ops[n++] = (pp_op_t){'W', i - d, 0};
    }
    for (int i = M - d; i < M; i++) ops[n++] = (pp_op_t){'W', i, 0};
    return n;
  }
  // BEGIN EXERCISE pp_zbh1_schedule notes/07-pipeline.md
  // HINT: ZB-H1 is 1F1B with each backward cut in two: B (the input's gradient, which the stage
  // HINT: before waits for) stays where 1F1B's backward was; W (the weights' gradient, which nobody
  // HINT: waits for) may go later. Every W after its own B, the W's in micro-batch order.
  // HINT: where does 1F1B idle? Stage s waits s turns at the end for the last backwards to come
  // HINT: back: that is where its held-back W's can run.
  // HINT2: 1F1B's warm-up (min(P − s − 1, M) forwards) and its F B pairs stay; stage s holds back its
  // HINT2: first d = min(s, M) W's: in step i of the steady state, F(w + i) (while w + i < M), B(i),
  // HINT2: then W(i − d) once i >= d; the d W's held back close the list. 3M operations in all.
  // HINT3: for (i < w) F(i); for (i < M) { if (w + i < M) F(w + i); B(i); if (i >= d) W(i − d); }
  // HINT3: for (i = M − d; i < M; i++) W(i). Append with ops[n++] = (pp_op_t){'W', i, 0}.
  int w = P - s - 1 < M ? P - s - 1 : M, d = s < M ? s : M;
  for (int i = 0; i < w; i++) ops[n++] = (pp_op_t){'F', i, 0};
  for (int i = 0; i < M; i++) {
    if (w + i < M) ops[n++] = (pp_op_t){'F', w + i, 0};
    ops[n++] = (pp_op_t){'B', i, 0};
    if (i >= d) ops[n++] = (pp_op_t){'W', i - d, 0};
  }
  for (int i = M - d; i < M; i++) ops[n++] = (pp_op_t){'W', i, 0};
  // END EXERCISE
  return n;
}

int pp_schedule_ops(pp_schedule_t sched, int P, int s, int M, int v, pp_op_t *ops) {
  int n = 0;
  if (sched == PP_NAIVE) { /* one micro-batch at a time: its backward before the next forward */
    for (int k = 0; k < M; k++) {
      ops[n++] = (pp_op_t){'F', k, 0};
      ops[n++] = (pp_op_t){'B', k, 0};
    }
  } else if (sched == PP_GPIPE) { /* all forwards, then all backwards (in micro-batch order) */
    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'F', k, 0};
    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};
  } else if (sched == PP_INTERLEAVED) { /* 1F1B over v·M virtual micro-batches */
    int total = v * M, w = (P - s - 1) * 2 + (v - 1) * P;
    if (w > total) w = total;
    for (int i = 0; i < w; i++) ops[n++] = interleaved_op('F', i, P, v);
    for (int i = 0; i < total - w; i++) {
      ops[n++] = interleaved_op('F', w + i, P, v);
      ops[n++] = interleaved_op('B', i, P, v);
    }
    for (int i = total - w; i < total; i++) ops[n++] = interleaved_op('B', i, P, v);
  } else if (sched == PP_ZB_H1 || sched == PP_ZB_H2) {
    n = zb_order(sched == PP_ZB_H1 ? 1 : 2, P, s, M, ops);
  } else {
    // BEGIN EXERCISE pp_1f1b_schedule notes/07-pipeline.md
    // HINT: a stage may start its first backward as soon as the pipeline behind it is full: then
    // HINT: at most P − s micro-batches are alive on stage s, not M.
    // HINT2: three phases: warm-up forwards (how many depends on s: the last stage none), a steady
    // HINT2: state alternating forward and backward, a cool-down of backwards. Forwards and backwards
    // HINT2: each in micro-batch order; 2M ops in all.
    // HINT3: w = min(P − s − 1, M) forwards; then for i < M − w: F(w + i), B(i); then
    // HINT3: B(M − w .. M − 1). Append with ops[n++] = (pp_op_t){'F', k, 0}.
    int w = P - s - 1 < M ? P - s - 1 : M;
    for (int k = 0; k < w; k++) ops[n++] = (pp_op_t){'F', k, 0};
    for (int i = 0; i < M - w; i++) {
      ops[n++] = (pp_op_t){'F', w + i, 0};
      ops[n++] = (pp_op_t){'B', i, 0};
    }
    for (int k = M - w; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};
    // END EXERCISE
  }
  return n;
}

int pp_inflight_formula(pp_schedule_t sched, int P, int s, int M, int v) {
  if (sched == PP_NAIVE) return 1;
  if (sched == PP_GPIPE) return M;
  if (sched == PP_INTERLEAVED) {
    int w = (P - s - 1) * 2 + (v - 1) * P;
    return w + 1 < v * M ? w + 1 : v * M;
  }
  if (sched == PP_ZB_H1) return P < M ? P : M;         /* w + d + 1 = (P − s − 1) + s + 1 */
  if (sched == PP_ZB_H2) return 2 * P - 1 < M ? 2 * P - 1 : M; /* 2(P − s − 1) + 2s + 1 */
  return P - s < M ? P - s : M;
}
