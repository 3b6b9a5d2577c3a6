/* pipeline_sim.c — a schedule's bubble follows from its lists and the cost of each operation: run
 * the stages' lists, each operation starting once its stage is free and its input has arrived
 * (the contract: pipeline_sim.h; notes/07-pipeline.md, 07c). Holds the simulator (pp_simulate,
 * pp_simulate_lists, pp_simulate_timeline for the explorer page's drawing) and the bubble's closed
 * forms from it (pp_bubble_formula, pp_bubble_stages). Plain C11 and libc, as pipeline_sched.c;
 * it checks the lists it is given with pp_check_lists (pipeline_check.c). */
#include "pipeline_sim.h"   // the contracts implemented here; pp_schedule_ops, pp_splits_backward
#include "pipeline_check.h" // pp_check_lists
#include <stdlib.h>         // calloc, malloc, free

/* ---- the simulator ---------------------------------------------------------------------------- */

int pp_simulate_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n,
                      const pp_cost_t *cost, double c, pp_sim_t *out) {
  return pp_simulate_fb(P, M, v, split, ops, n, NULL, cost, 0, c, NULL, NULL, out);
}

int pp_simulate_timeline(int P, int M, int v, int split, pp_op_t *const *ops, const int *n,
                         const pp_cost_t *cost, double c, double *const *at, pp_sim_t *out) {
  return pp_simulate_fb(P, M, v, split, ops, n, NULL, cost, 0, c, at, NULL, out);
}

/* Where operation o of rank s runs in the model: its chunk ch (0..V−1) and micro-batch k (0..M−1).
 * PP_LIST_DUAL: ch is the stage along the micro-batch's direction, k its number over both. */
static void sim_place(int P, int M, int split, int s, pp_op_t o, int *ch, int *k) {
  if (!(split & PP_LIST_DUAL)) {
    *ch = pp_chunk_model(P, (split & PP_LIST_V) != 0, s, o.chunk), *k = o.micro;
    return;
  }
  int up = o.chunk ^ (s >= P / 2); /* 0: down ranks 0..P−1, 1: up ranks P−1..0 */
  *ch = up ? P - 1 - s : s, *k = up * (M / 2) + o.micro;
}

/* The rank that runs model chunk ch of micro-batch k. */
static int sim_stage(int P, int M, int split, int ch, int k) {
  if (!(split & PP_LIST_DUAL)) return pp_chunk_stage(P, (split & PP_LIST_V) != 0, ch);
  return k >= M / 2 ? P - 1 - ch : ch;
}

int pp_simulate_fb(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *const *fb,
                   const pp_cost_t *cost, double fb_cost, double c, double *const *at, double *busy_s,
                   pp_sim_t *out) {
  int dual = (split & PP_LIST_DUAL) != 0; /* ranks d and P−1−d hold one list: the first half checked */
  if (dual && (P % 2 || M % 2 || v != 2)) return -1;
  if (dual ? pp_check_lists(P / 2, M / 2, 2, (split & ~PP_LIST_DUAL) | PP_LIST_V, ops, n, NULL, 0)
           : pp_check_lists(P, M, v, split, ops, n, NULL, 0))
    return -1;
  int V = dual ? P : v * P;
  /* end[kind][chunk c][k], < 0 until it ran */
  double *end = malloc(3 * (size_t)V * M * sizeof *end), *free_at = calloc((size_t)P, sizeof *free_at);
  double *first = malloc((size_t)P * sizeof *first), *busy = calloc((size_t)P, sizeof *busy);
  int *pc = calloc((size_t)P, sizeof *pc);
  if (!end || !free_at || !first || !busy || !pc) {
    free(end), free(free_at), free(first), free(busy), free(pc);
    return -1;
  }
#define END(kind, ch, k) end[((size_t)(kind) * V + (size_t)(ch)) * M + (size_t)(k)]
  for (size_t i = 0; i < 3 * (size_t)V * M; i++) end[i] = -1;
  int left = 0, moved = 1;
  for (int s = 0; s < P; s++) left += n[s], first[s] = -1;
  while (left > 0 && moved) {
    moved = 0;
    for (int s = 0; s < P; s++)
      while (pc[s] < n[s]) {
        /* an F&B (fb: 1 then 2s) starts once every input of its operations is here, and ends as one */
        int g = 1;
        while (fb && fb[s][pc[s]] == 1 && pc[s] + g < n[s] && fb[s][pc[s] + g] == 2) g++;
        double ready = 0, t = 0; /* when the inputs are here; the operations' time */
        for (int i = pc[s]; i < pc[s] + g && ready >= 0; i++) {
          pp_op_t o = ops[s][i];
          int ch, k, kind = o.kind == 'F' ? 0 : o.kind == 'B' ? 1 : 2;
          sim_place(P, M, split, s, o, &ch, &k);
          double r;
          int prev = kind == 0 ? ch - 1 : ch + 1; /* the chunk its input comes from */
          double hop = prev >= 0 && prev < V && sim_stage(P, M, split, prev, k) != s ? c : 0;
          if (kind == 0) r = ch == 0 ? 0 : END(0, prev, k) < 0 ? -1 : END(0, prev, k) + hop;
          else if (kind == 1)
            r = ch == V - 1 ? END(0, ch, k) : END(1, prev, k) < 0 ? -1 : END(1, prev, k) + hop;
          else r = i > pc[s] ? 0 : END(1, ch, k); /* in an F&B, its B is in the same operation */
          ready = r < 0 ? -1 : r > ready ? r : ready;
          t += kind == 0 ? cost[s].f : kind == 1 ? (split ? cost[s].b : cost[s].b + cost[s].w) : cost[s].w;
        }
        if (ready < 0) break;
        if (g > 1 && fb_cost > 0) t = fb_cost;
        t /= v;
        double start = ready > free_at[s] ? ready : free_at[s];
        if (first[s] < 0) first[s] = start;
        for (int i = pc[s]; i < pc[s] + g; i++) {
          pp_op_t o = ops[s][i];
          int ch, k, kind = o.kind == 'F' ? 0 : o.kind == 'B' ? 1 : 2;
          sim_place(P, M, split, s, o, &ch, &k);
          if (at) at[s][i] = start;
          END(kind, ch, k) = start + t;
        }
        free_at[s] = start + t;
        busy[s] += t;
        pc[s] += g, left -= g, moved = 1;
      }
  }
#undef END
  int ok = left == 0;
  if (ok && out) {
    double mk = 0, sp = 0, b = 0;
    for (int s = 0; s < P; s++) {
      mk = free_at[s] > mk ? free_at[s] : mk;
      sp = free_at[s] - first[s] > sp ? free_at[s] - first[s] : sp;
      b += busy[s];
    }
    for (int s = 0; s < P && busy_s; s++) busy_s[s] = busy[s];
    b /= P;
    *out = (pp_sim_t){.makespan = mk, .span = sp, .busy = b, .bubble_makespan = mk > 0 ? (mk - b) / mk : 0};
    out->bubble = out->bubble_makespan;
  }
  free(end), free(free_at), free(first), free(busy), free(pc);
  return ok ? 0 : -1;
}

int pp_simulate(pp_schedule_t sched, int P, int M, int v, const pp_cost_t *cost, double c, pp_sim_t *out) {
  return pp_simulate_sched(sched, P, M, v, cost, 0, c, NULL, out);
}

int pp_simulate_sched(pp_schedule_t sched, int P, int M, int v, const pp_cost_t *cost, double fb_cost,
                      double c, double *busy_s, pp_sim_t *out) {
  if (sched == PP_DUALPIPEV && v == 1) v = 2; /* its two chunks, whatever the caller's v */
  if (P < 1 || M < 1 || v < 1 || sched < 0 || sched >= PP_NSCHED || v != pp_schedule_chunks(sched, v) ||
      (sched == PP_INTERLEAVED && M % P) || (sched == PP_DUALPIPEV && M < 2 * P))
    return -1;
  int cap = pp_schedule_nops(sched, M, v), rc = -1;
  pp_op_t **ops = calloc((size_t)P, sizeof *ops);
  char **fb = calloc((size_t)P, sizeof *fb);
  int *n = calloc((size_t)P, sizeof *n);
  if (ops && fb && n) {
    int okalloc = 1;
    for (int s = 0; s < P; s++) {
      ops[s] = calloc((size_t)cap, sizeof(pp_op_t));
      fb[s] = calloc((size_t)cap, 1);
      if (!ops[s] || !fb[s]) okalloc = 0;
      else n[s] = pp_schedule_ops(sched, P, s, M, v, ops[s]), pp_schedule_fb(sched, P, s, M, v, fb[s]);
    }
    if (okalloc)
      rc = pp_simulate_fb(P, M, v, pp_list_flags(sched), ops, n, fb, cost, fb_cost, c, NULL, busy_s, out);
    if (rc == 0 && out && sched == PP_ZB_H2) /* the paper's measure: the stage's own window */
      out->bubble = out->span > 0 ? (out->span - out->busy) / out->span : 0;
    for (int s = 0; s < P; s++) free(ops[s]), free(fb[s]);
  }
  free(ops);
  free(fb);
  free(n);
  return rc;
}

/* ---- the closed forms ------------------------------------------------------------------------- */

/* The first closed form of chapter 07 for stages of busy times t[s] (pp_bubble_stages): the slowest
 * paces the steady state, step = M·t_max + (Σt − t_max)/v per micro-batch (naive: M·Σt). What the
 * simulator gives when the slowest stage is the last; the answer where it cannot run the case
 * (interleaved with M not a multiple of P: no such list). */
static double stages_closed_form(pp_schedule_t sched, int P, int M, int v, const double *t) {
  double sum = 0, max = 0;
  for (int s = 0; s < P; s++) sum += t[s] / M, max = t[s] / M > max ? t[s] / M : max;
  double step = sched == PP_NAIVE ? M * sum : M * max + (sum - max) / (sched == PP_INTERLEAVED ? v : 1);
  return step > 0 ? 1 - M * (sum / P) / step : 0;
}

/* v counts only for interleaved (dualpipev has two chunks, the others one, whatever v says). */
static int sim_v(pp_schedule_t sched, int v) { return pp_schedule_chunks(sched, v); }

double pp_bubble_formula(pp_schedule_t sched, int P, int M, int v) {
  v = sim_v(sched, v);
  if (sched == PP_INTERLEAVED && (P < 2 || M % P)) return (double)(P - 1) / (v * M + P - 1);
  pp_cost_t *cost = calloc((size_t)P, sizeof *cost);
  pp_sim_t r = {0};
  /* backward 2× the forward; B = W when split */
  for (int s = 0; s < P && cost; s++) cost[s] = (pp_cost_t){1, 1, 1};
  int rc = cost ? pp_simulate(sched, P, M, v, cost, 0, &r) : -1;
  free(cost);
  return rc == 0 ? r.bubble : -1;
}

/* The bubble when the stages are not equal: t[s] = stage s's busy time per step (M micro-batches,
 * all its chunks), run through the simulator with a micro-batch's forward t[s]/3M and its backward
 * 2t[s]/3M (split: B = W = t[s]/3M), no message cost. The slowest stage paces the steady state;
 * where it is the last one the step is M·t_max + (Σt − t_max)/v per micro-batch time t = t[s]/M
 * (chapter 07's first closed form, which the notes' measured tables used), where an earlier one
 * is slowest the later ones catch up in the cool-down and the simulated bubble is smaller. Naive
 * runs every micro-batch through all stages in turn: (P−1)/P whatever the split. */
double pp_bubble_stages(pp_schedule_t sched, int P, int M, int v, const double *t) {
  v = sim_v(sched, v);
  if (sched == PP_INTERLEAVED && (P < 2 || M % P)) return stages_closed_form(sched, P, M, v, t);
  pp_cost_t *cost = calloc((size_t)P, sizeof *cost);
  pp_sim_t r = {0};
  int split = pp_splits_backward(sched);
  for (int s = 0; s < P && cost; s++)
    cost[s] = (pp_cost_t){t[s] / (3.0 * M), (split ? 1.0 : 2.0) * t[s] / (3.0 * M),
                          split ? t[s] / (3.0 * M) : 0};
  int rc = cost ? pp_simulate(sched, P, M, v, cost, 0, &r) : -1;
  free(cost);
  return rc == 0 ? r.bubble : -1;
}
