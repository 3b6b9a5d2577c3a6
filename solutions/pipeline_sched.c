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

static const char *g_names[PP_NSCHED] = {"naive", "gpipe",  "1f1b",     "interleaved",
                                         "zb-h1", "zb-h2", "dualpipev"};

int pp_schedule_parse(const char *name) {
  for (int i = 0; name && i < PP_NSCHED; i++)
    if (strcmp(name, g_names[i]) == 0) return i;
  return -1;
}

const char *pp_schedule_name(pp_schedule_t sched) {
  return sched >= 0 && sched < PP_NSCHED ? g_names[sched] : "?";
}

int pp_splits_backward(pp_schedule_t sched) {
  return sched == PP_ZB_H1 || sched == PP_ZB_H2 || sched == PP_DUALPIPEV;
}

int pp_schedule_chunks(pp_schedule_t sched, int v) {
  return sched == PP_INTERLEAVED ? v : sched == PP_DUALPIPEV ? 2 : 1;
}

int pp_list_flags(pp_schedule_t sched) {
  return (pp_splits_backward(sched) ? PP_LIST_SPLIT : 0) | (sched == PP_DUALPIPEV ? PP_LIST_V : 0);
}

int pp_schedule_nops(pp_schedule_t sched, int M, int v) {
  return (pp_splits_backward(sched) ? 3 : 2) * pp_schedule_chunks(sched, v) * M;
}

int pp_chunk_model(int P, int vshape, int s, int j) { return vshape ? (j ? 2 * P - 1 - s : s) : j * P + s; }
int pp_chunk_stage(int P, int vshape, int c) { return vshape ? (c < P ? c : 2 * P - 1 - c) : c % P; }
int pp_chunk_local(int P, int vshape, int c) { return vshape ? c >= P : c / P; }

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

/* ---- DualPipeV ------------------------------------------------------------------------------- */

void pp_dualpipev_phases(int N, int r, int M, int *count) {
  // BEGIN EXERCISE pp_dualpipev_phases notes/07d-dualpipev.md
  // HINT: rank r holds chunk 0 (model chunk r, on the way down the V) and chunk 1 (model chunk
  // HINT: 2N−1−r, on the way back up). Chunk 0's forward reaches rank N−1 after N−1−r hops; chunk
  // HINT: 1's comes back to rank r after as many more: count how long each rank waits before it can
  // HINT: run something of each kind. Every kind must run M times per chunk.
  // HINT2: the phases: (0) F0 alone, (1) F0 F1, (2) B1 W F1, (3) F0&B1 F1&B0, (4) B1 F1&B0,
  // HINT2: (5) B1 B0, (6) W B0, (7) W. Rank N−1 starts F1 at once; rank 0 waits 2(N−1) forwards.
  // HINT2: the warm-up phases (0, 1, 2) and the cool-down ones (4..7) mirror each other; phase 3 takes
  // HINT2: what is left of the M forwards of chunk 0.
  // HINT3: 2(N−r−1), r+1, N−r−1, M−2N+r+1, N−r−1, r+1, N−r−1, r+1 (DeepSeek's
  // HINT3: dualpipev.py).
  count[0] = 2 * (N - r - 1); /* nF0: chunk 0 only, until chunk 1's first input can come back */
  count[1] = r + 1;           /* nF0F1 */
  count[2] = N - r - 1;       /* nB1W1F1: the first backwards, their W's at once (zero bubble) */
  count[3] = M - 2 * N + r + 1; /* nF0B1F1B0: the steady state, two F&B */
  count[4] = N - r - 1;       /* nB1F1B0 */
  count[5] = r + 1;           /* nB1B0: the second half's W's deferred */
  count[6] = N - r - 1;       /* nWB0 */
  count[7] = r + 1;           /* nW: the W's still queued */
  // END EXERCISE
}

/* DualPipeV's list under construction: the next F and B of each chunk, the W's deferred (a queue in
 * the order of their B's: DeepSeek's WeightGradStore). Writes at most cap operations, counts all. */
typedef struct dpv_list {
  pp_op_t *ops;
  char *fb; /* NULL, or the F&B marks (pp_schedule_fb) */
  int n, cap;
  int f[2], b[2];
  int *wq, head, tail, qcap; /* deferred W's: wq[2i] its chunk, wq[2i + 1] its micro-batch */
} dpv_list_t;

static void dpv_put(dpv_list_t *d, char kind, int k, int j, char fb) {
  if (d->n < d->cap) d->ops[d->n] = (pp_op_t){kind, k, j};
  if (d->n < d->cap && d->fb) d->fb[d->n] = fb;
  d->n++;
}

static void dpv_f(dpv_list_t *d, int j, char fb) { dpv_put(d, 'F', d->f[j]++, j, fb); }

/* A backward of chunk j: B and its W at once (a full backward), or the W queued (zb). */
static void dpv_b(dpv_list_t *d, int j, int zb, char fb) {
  int k = d->b[j]++;
  dpv_put(d, 'B', k, j, fb);
  if (!zb) dpv_put(d, 'W', k, j, fb);
  else if (d->tail < d->qcap) d->wq[2 * d->tail] = j, d->wq[2 * d->tail + 1] = k, d->tail++;
}

static void dpv_w(dpv_list_t *d) { /* the oldest deferred W (none queued: nothing) */
  if (d->head < d->tail) dpv_put(d, 'W', d->wq[2 * d->head + 1], d->wq[2 * d->head], 0), d->head++;
}

/* F of chunk jf and B of chunk jb (a full backward) as one F&B. */
static void dpv_fb(dpv_list_t *d, int jf, int jb) {
  dpv_f(d, jf, 1);
  dpv_b(d, jb, 0, 2);
}

/* Rank r's list of DualPipeV (N ranks) in ops[0..6M): the eight phases of pp_dualpipev_phases in
 * the order of DeepSeek's dualpipev.py step(). Returns the operations written. */
static int dualpipev_order(int N, int r, int M, pp_op_t *ops, char *fb) {
  int c[8];
  pp_dualpipev_phases(N, r, M, c);
  dpv_list_t d = {.ops = ops, .fb = fb, .cap = 6 * M, .wq = calloc(4 * (size_t)M, sizeof(int))};
  d.qcap = d.wq ? 2 * M : 0;
  for (int i = 0; i < c[0]; i++) dpv_f(&d, 0, 0);
  for (int i = 0; i < c[1]; i++) dpv_f(&d, 0, 0), dpv_f(&d, 1, 0);
  for (int i = 0; i < c[2]; i++) dpv_b(&d, 1, 1, 0), dpv_w(&d), dpv_f(&d, 1, 0);
  for (int i = 0; i < c[3]; i++) {
    if (i == 0 && r == N - 1) dpv_f(&d, 0, 0), dpv_b(&d, 1, 0, 0); /* the V's tip: not overlapped */
    else dpv_fb(&d, 0, 1);
    dpv_fb(&d, 1, 0);
  }
  for (int i = 0; i < c[4]; i++) dpv_b(&d, 1, 0, 0), dpv_fb(&d, 1, 0);
  for (int i = 0, zb = 0; i < c[5]; i++) { /* the second half defers its W's (odd ranks from a B1) */
    if (i == c[5] / 2 && r % 2 == 1) zb = 1;
    dpv_b(&d, 1, zb, 0);
    if (i == c[5] / 2 && r % 2 == 0) zb = 1;
    dpv_b(&d, 0, zb, 0);
  }
  for (int i = 0; i < c[6]; i++) dpv_w(&d), dpv_b(&d, 0, 1, 0);
  for (int i = 0; i < c[7]; i++) dpv_w(&d);
  free(d.wq);
  return d.n < d.cap ? d.n : d.cap;
}

int pp_schedule_ops(pp_schedule_t sched, int P, int s, int M, int v, pp_op_t *ops) {
  int n = 0;
  if (sched == PP_DUALPIPEV) return dualpipev_order(P, s, M, ops, NULL);
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

int pp_schedule_fb(pp_schedule_t sched, int P, int s, int M, int v, char *fb) {
  pp_op_t *ops = calloc((size_t)pp_schedule_nops(sched, M, v), sizeof *ops);
  int n = !ops                   ? 0
          : sched == PP_DUALPIPEV ? dualpipev_order(P, s, M, ops, fb)
                                  : pp_schedule_ops(sched, P, s, M, v, ops);
  for (int i = 0; i < n && sched != PP_DUALPIPEV; i++) fb[i] = 0;
  free(ops);
  return n;
}

/* The most micro-batch-chunks whose activations stage s's list holds at once: F takes a slot, the
 * micro-batch's last operation on that chunk (its W) gives it back. −1: no memory. */
static int list_peak(pp_schedule_t sched, int P, int s, int M, int v) {
  pp_op_t *ops = calloc((size_t)pp_schedule_nops(sched, M, v), sizeof *ops);
  if (!ops) return -1;
  int n = pp_schedule_ops(sched, P, s, M, v, ops), live = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    live += ops[i].kind == 'F' ? 1 : ops[i].kind == 'W' ? -1 : 0;
    peak = live > peak ? live : peak;
  }
  free(ops);
  return peak;
}

int pp_inflight_formula(pp_schedule_t sched, int P, int s, int M, int v) {
  if (sched == PP_DUALPIPEV) return list_peak(sched, P, s, M, v);
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
