/* moe_plan.c — the dispatch permutation of a Mixture-of-Experts layer (moe.h; notes/12-experts.md,
 * "Dispatch"): which row of the experts' buffer each (token, choice) goes to.
 *
 * The router gave every token t its k experts ids[t·k + j]. The experts want their rows together
 * (one GEMM per expert), so the layer permutes: all of expert 0's rows, then expert 1's, ... and
 * inside an expert in token order — the order one rank would see them, so expert parallelism, which
 * concatenates the ranks' rows in rank order, gives each expert the same rows in the same order.
 * Capacity (cap > 0) fixes the buffer at E·cap rows: an expert's first cap choices get a row, the
 * rest are dropped; dropless (cap = 0) gives each expert exactly its choices. The combine reads the
 * same map backwards (slot: choice → row), the backward of the dispatch too. */
#include "moe.h"      // moe_plan, moe_capacity
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include <math.h>     // ceil

int64_t moe_capacity(double cf, int64_t T, int k, int E) {
  if (!(cf > 0)) return 0;
  return (int64_t)ceil(cf * (double)T * k / E);
}

int64_t moe_plan(const int *ids, int64_t T, int k, int E, int64_t cap, int64_t *counts, int *slot,
                 int *row_tok) {
  // BEGIN EXERCISE moe_dispatch_plan notes/12-experts.md
  // HINT: two passes over the choices in (token, choice) order. First count what each expert is
  // HINT: sent (with a capacity, at most cap of them keep a row). Then each expert's rows start where
  // HINT: the experts before it end, and every kept choice takes the next free row of its expert, in
  // HINT: token order; a choice past the capacity gets no row (slot −1) and rows nobody fills are padding.
  // HINT2: start[e] = e·cap with a capacity (the buffer is E·cap rows, padding included), else the prefix
  // HINT2: sum of counts over e' < e (the buffer is T·k rows). Fill row_tok with −1 first (padding), then
  // HINT2: for
  // HINT2: t in 0..T−1, j in 0..k−1: e = ids[t·k+j]; if cap > 0 and e already has cap rows: slot = −1;
  // HINT2: else
  // HINT2: r = start[e] + (rows e has so far), slot[t·k+j] = r, row_tok[r] = t.
  // HINT3: two loops over t·k + j; a second counter array (or reuse counts as the fill level after computing
  // HINT3: the
  // HINT3: starts into a local array of E int64s: E is small, a VLA int64_t start[E] is fine). Return E·cap
  // HINT3: or T·k.
  int64_t rows = cap > 0 ? (int64_t)E * cap : T * k;
  for (int e = 0; e < E; e++) counts[e] = 0;
  for (int64_t i = 0; i < T * k; i++) {
    int e = ids[i];
    if (cap == 0 || counts[e] < cap) counts[e]++;
  }
  int64_t start[E > 0 ? E : 1], fill[E > 0 ? E : 1];
  int64_t at = 0;
  for (int e = 0; e < E; e++) {
    start[e] = cap > 0 ? (int64_t)e * cap : at;
    fill[e] = 0;
    at += counts[e];
  }
  for (int64_t r = 0; r < rows; r++) row_tok[r] = -1;
  for (int64_t t = 0; t < T; t++)
    for (int j = 0; j < k; j++) {
      int e = ids[t * k + j];
      if (cap > 0 && fill[e] == cap) {
        slot[t * k + j] = -1; /* dropped: the token keeps its residual for this choice */
        continue;
      }
      int64_t r = start[e] + fill[e]++;
      slot[t * k + j] = (int)r;
      row_tok[r] = (int)t;
    }
  return rows;
  // END EXERCISE
}
