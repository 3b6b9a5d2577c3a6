/* pipeline_report.c — what chapter 07 measures, beside its formulas (notes/07-pipeline.md): the
 * bubble of every rank (idle over the step's window, from the loop's F/B blocks), the activations
 * in flight (the loop's slot pool against pp_inflight_formula), and the bytes of each stage's data
 * dimension (its strategy's collectives and ledger against the strategy's formula). Every rank's
 * lines are printed in rank order; the numbers of pipeline 0's stages go into --json. */
#include "pipeline_state.h" // pp_state_t, pp_report, pp_inflight_formula, pp_bubble_formula
#include "check.h"          // xcalloc
#include "comm.h"           // comm_counters, comm_ctl_all_reduce_f64, comm_print_ordered
#include "ledger.h"         // ledger_peak, ledger_live
#include <stdio.h>          // printf, snprintf
#include <stdlib.h>         // free

/* The run's first lines (rank 0): the pipeline's shape and the split into chunks. */
void pp_print(const trainer_t *t, const pp_state_t *st) {
  const train_cfg_t *c = t->cfg;
  const model_t *m = t->whole;
  printf("pipeline: %d stage%s x %d data-parallel, schedule %s", st->P, st->P > 1 ? "s" : "", st->D,
         c->schedule);
  if (st->vs) printf(" (%d chunks in a V: stage s holds chunks s and %d-s)", st->V, st->V - 1);
  else if (st->v > 1)
    printf(" (%d virtual stages per rank: %d chunks, chunk c on stage c mod %d)", st->v, st->V, st->P);
  printf(", %d micro-batches of %d sample%s per step (bubble formula %.4f)\n", st->M, st->b,
         st->b > 1 ? "s" : "", pp_bubble_formula(st->sched, st->P, st->M, st->v));
  if (st->D > 1) /* the strategy says the rest in its own setup */
    printf("data dimension: %d replicas of each stage, --zero %d: %s on the stage's units, each reduced once "
           "per step\n",
           st->D, c->zero, t->strategy->name);
  printf("split by parameter count:\n");
  for (int k = 0; k < st->V; k++) {
    int64_t n = 0;
    for (int u = st->first[k]; u < st->first[k + 1]; u++) n += m->units[u].numel;
    if (st->v > 1)
      printf("  chunk %d (stage %d): units %d..%d, %lld params (%.1f%%)\n", k,
             pp_chunk_stage(st->P, st->vs, k), st->first[k],
             st->first[k + 1] - 1, (long long)n, 100.0 * (double)n / (double)m->numel);
    else
      printf("  stage %d: units %d..%d, %lld params (%.1f%%)\n", k, st->first[k], st->first[k + 1] - 1,
             (long long)n, 100.0 * (double)n / (double)m->numel);
  }
  fflush(stdout);
}

/* ---- the report: per-rank numbers to rank 0 (control traffic), printed in rank order ---------- */

/* The stage's line of bytes (they never vary), after its line of times (they do). */
static int pp_bytes_line(const trainer_t *t, const pp_state_t *st, char *line, int n, const double *mine,
                         int formula_k) {
  int peak = trainer_peak_in_flight(t), r = t->model_rank;
  int64_t slot = trainer_slot_bytes(t, 0), pool = 0, ws = st->ws_bytes + trainer_acts_workspace(t),
          esz = (int64_t)dtype_size(t->wdt);
  for (int j = 0; j < st->v; j++) pool += (int64_t)trainer_slots(t, j) * trainer_slot_bytes(t, j);
  formula_t f;
  t->strategy->formula(t, &f);
  int64_t states = ledger_peak(LEDGER_PARAMS) + ledger_peak(LEDGER_GRADS) + ledger_peak(LEDGER_MASTER) +
      ledger_peak(LEDGER_OPTIM);
  double fs = f.params + f.grads + f.master + f.optim;
  const model_t *m = &t->model; /* this stage's units: padded_numel, shard_numel = its replicas' pieces */
  int64_t full = m->padded_numel * esz, piece = m->shard_numel * esz;
  int k = 0;
  if (st->v > 1)
    k += snprintf(line + k, n - k,
                  "rank %d stage %d: %d chunks, model states %lld B (formula %.0f for its %lld params); "
                  "activations in flight: peak %d micro-batch-chunks (formula %d), %lld B allocated, +%lld B "
                  "workspace\n",
                  r, st->stage, st->v, (long long)states, fs, (long long)m->numel, peak, formula_k,
                  (long long)pool, (long long)ws);
  else
    k += snprintf(line + k, n - k,
                  "rank %d stage %d: units %d..%d, model states %lld B (formula %.0f for its %lld params); "
                  "activations in flight: peak %d micro-batch%s x %lld B = %lld B (formula %d x %lld B), "
                  "+%lld B workspace\n",
                  r, st->stage, st->chunks[0].u0, st->chunks[0].u1 - 1, (long long)states, fs,
                  (long long)m->numel, peak, peak > 1 ? "es" : "", (long long)slot, (long long)pool,
                  formula_k, (long long)slot, (long long)ws);
  if (st->vs) { /* DeepSeek's table per device: 2 stages' parameters, PP + 1 stages' activations (stage 0) */
    const pp_chunk_t *c0 = &st->chunks[0], *c1 = &st->chunks[1];
    k += snprintf(line + k, n - k,
                  "rank %d stage %d: a V, chunks %d and %d (units %d..%d, %d..%d): params %lld B = 2 of "
                  "the %d stages (the table's 2x); slots chunk 0 %d, chunk 1 %d (the table: PP + 1 = %d on "
                  "stage 0)\n",
                  r, st->stage, c0->c, c1->c, c0->u0, c0->u1 - 1, c1->u0, c1->u1 - 1,
                  (long long)ledger_peak(LEDGER_PARAMS), st->V, trainer_slots(t, 0), trainer_slots(t, 1),
                  st->V + 1);
  }
  if (st->D == 1) return k;
  k += snprintf(line + k, n - k, "rank %d stage %d: data dimension %.0f B sent per step (formula %.0f)\n", r,
                st->stage, mine[5], mine[9]);
  if (t->cfg->zero == 3)
    k += snprintf(line + k, n - k,
                  "rank %d stage %d: params %.0f B between steps (own pieces %lld; --zero 0/1/2 hold %lld), "
                  "+ one unit gathered (%lld B at most) per forward / backward\n",
                  r, st->stage, mine[8], (long long)piece, (long long)full,
                  (long long)(m->max_unit_padded * esz));
  if (t->cfg->zero >= 2)
    k += snprintf(line + k, n - k,
                  "rank %d stage %d: grads %.0f B at the peak of the step (full %lld + own pieces %lld), "
                  "%.0f B between steps; --zero 1 holds %lld B throughout\n",
                  r, st->stage, mine[6], (long long)full, (long long)piece, mine[7], (long long)full);
  return k;
}

/* schedule_t.report: bubble, activations in flight, the data dimension's bytes; every rank's line,
 * and extras for --json (pipeline 0's stages; the data dimension's of rank 0). */
void pp_report(trainer_t *t) {
  pp_state_t *st = t->sched_priv;
  enum { COLS = 14 };
  int N = t->model_world, formula_k = pp_inflight_formula(st->sched, st->P, st->stage, st->M, st->v);
  double *vals = xcalloc((size_t)N * COLS, sizeof *vals, "pipeline report"),
         *mine = vals + (size_t)t->model_rank * COLS;
  double steps = st->measured > 0 ? st->measured : 1, bf = pp_bubble_formula(st->sched, st->P, st->M, st->v);
  int64_t pool = 0;
  for (int j = 0; j < st->v; j++) pool += (int64_t)trainer_slots(t, j) * trainer_slot_bytes(t, j);
  mine[0] = st->busy_us / steps;
  mine[1] = st->span_us / steps;
  /* measured: slots (v > 1) or bytes */
  mine[2] = st->v > 1 ? trainer_peak_in_flight(t) : (double)pool;
  /* the formula, alike */
  mine[3] = st->v > 1 ? formula_k : (double)formula_k * (double)trainer_slot_bytes(t, 0);
  comm_t *cs[8] = {st->fwd,     st->bwd,     st->fwdw,     st->bwdw,
                   st->acts[0], st->acts[1], st->grads[0], st->grads[1]};
  for (int i = 0; i < 8; i++)
    /* after --resume: fewer */
    if (cs[i]) mine[4] += (double)comm_counters(cs[i]).sent[CO_SEND] / st->steps_run;
  comm_wait_all(t->comm);
  comm_counters_t k = comm_counters(t->comm); /* the data dimension: the strategy's collectives */
  mine[5] =
      (double)(k.sent[CO_ALL_REDUCE] + k.sent[CO_REDUCE_SCATTER] + k.sent[CO_ALL_GATHER]) / st->steps_run;
  mine[6] = (double)ledger_peak(LEDGER_GRADS);  /* --zero 2/3: full + shard, at the reduce-scatter */
  mine[7] = (double)ledger_live(LEDGER_GRADS);  /* after the step: what stays between steps */
  /* --zero 3: the own pieces (the gathered unit is LEDGER_COMM) */
  mine[8] = (double)ledger_live(LEDGER_PARAMS);
  /* the strategy's traffic at the padded sizes the collectives move */
  formula_t fp;
  trainer_t padded = *t;
  padded.model.numel = t->model.padded_numel;
  t->strategy->formula(&padded, &fp);
  mine[9] = fp.comm_bytes;
  mine[10] = st->stage;
  /* F, B, W per micro-batch (all chunks), µs */
  for (int i = 0; i < 3; i++) mine[11 + i] = st->kind_us[i] / steps / st->M;
  char line[1536];
  int n = snprintf(line, sizeof line,
                   "rank %d stage %d: busy %.3f ms, idle %.3f ms per step: bubble %.4f (formula %.4f)\n",
                   t->model_rank, st->stage, mine[0] / 1000, (mine[1] - mine[0]) / 1000,
                   mine[1] > 0 ? 1 - mine[0] / mine[1] : 0, bf);
  pp_bytes_line(t, st, line + n, (int)sizeof line - n, mine, formula_k);
  comm_ctl_all_reduce_f64(t->model_comm, vals, N * COLS, REDOP_SUM);
  if (!t->cfg->quiet) comm_print_ordered(t->model_comm, line);
  double bubble = 0, sent = 0;
  int match = 1;
  for (int r = 0; r < N; r++) {
    const double *q = vals + (size_t)r * COLS;
    bubble += q[1] > 0 ? 1 - q[0] / q[1] : 0;
    sent += q[4];
    match &= q[2] == q[3];
  }
  double *busy = xcalloc((size_t)st->P * 2, sizeof *busy, "pipeline report (stages)");
  pp_cost_t *cost = xcalloc((size_t)st->P, sizeof *cost, "pipeline report (costs)");
  /* each stage's busy time per step, and per operation, averaged over its replicas */
  for (int r = 0; r < N; r++) {
    const double *q = vals + (size_t)r * COLS;
    int s = (int)q[10];
    busy[s] += q[0], busy[st->P + s] += 1;
    cost[s].f += q[11] / st->D, cost[s].b += q[12] / st->D, cost[s].w += q[13] / st->D;
  }
  for (int s = 0; s < st->P; s++) busy[s] /= busy[st->P + s];
  double bf_stages = pp_bubble_stages(st->sched, st->P, st->M, st->v, busy);
  /* The simulator fed with this run's own F, B, W (pipeline_sim.h; no message cost): the bubble one
   * step of this loop would show (its window: makespan), and ZB-H2's from the stage's first operation
   * (the paper's, when post-validation lets the next step's forwards start in this one's drain). */
  pp_sim_t sim = {0};
  int sim_ok = pp_simulate(st->sched, st->P, st->M, st->v, cost, 0, &sim) == 0;
  double fbw[3] = {0};
  for (int s = 0; s < st->P; s++)
    fbw[0] += cost[s].f / st->P, fbw[1] += cost[s].b / st->P, fbw[2] += cost[s].w / st->P;
  double fbs[5];
  trainer_fb_stats(t, fbs);
  struct { const char *key; double v; int on;
  } ex[] = {{"pp", st->P, 1},
            {"micro_batches", st->M, 1},
            {"virtual_stages", st->v, st->v > 1 && !st->vs},
            {"bubble_fraction", bubble / N, 1},
            {"bubble_formula", bf, 1},
            {"bubble_formula_stages", bf_stages, 1},
            {"bubble_sim", sim.bubble_makespan, sim_ok},
            {"bubble_sim_span", sim.bubble, sim_ok && st->sched == PP_ZB_H2},
            {"fb_pieces_per_step", fbs[1], t->cfg->fb_overlap}, /* rank 0's (loop_fb.c) */
            {"op_f_ms", fbw[0] / 1000, 1},
            {"op_b_ms", fbw[1] / 1000, 1},
            {"op_w_ms", fbw[2] / 1000, pp_splits_backward(st->sched)},
            {"acts_inflight_match_formula", match, 1},
            {"acts_inflight_table_formula", st->V + 1, st->vs}, /* DualPipeV's PP + 1 (stage 0's peak) */
            {"p2p_bytes_per_step_per_rank", sent / N, 1},
            {"dp_bytes_per_step", vals[5], st->D > 1},
            {"dp_bytes_formula", vals[9], st->D > 1},
            {"params_between_steps_bytes", vals[8], st->D > 1 && t->cfg->zero == 3},
            {"grads_peak_bytes", vals[6], st->D > 1 && t->cfg->zero >= 2},
            {"grads_between_steps_bytes", vals[7], st->D > 1 && t->cfg->zero >= 2}};
  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
    if (ex[i].on) trainer_report_extra(t, ex[i].key, ex[i].v);
  /* pipeline 0's stages (ranks 0..P−1), every one: bytes, or slots (v > 1) */
  for (int s = 0; s < st->P; s++) {
    char key[48]; /* trainer_report_extra keeps 31 characters: these are at most 29 */
    snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
    trainer_report_extra(t, key, vals[(size_t)s * COLS + 2]);
    snprintf(key, sizeof key, "acts_inflight_formula_s%d", s);
    trainer_report_extra(t, key, vals[(size_t)s * COLS + 3]);
  }
  if (trainer_prints(t)) {
    static const char *closed[PP_NSCHED] = {"(P-1)/P",
                                            "(P-1)/(M+P-1)",
                                            "(P-1)/(M+P-1)",
                                            "(P-1)/(v*M+P-1)",
                                            "F = B = W: (P-1)/(3M+P-1) for M >= P",
                                            "F = B = W: 0 for M >= 2P-1",
                                            "(P-1)(F&B+B-3W) over its 2P stages"};
    printf("bubble: %.4f measured (mean over ranks: idle / step window, from the F/B%s blocks of the trace), "
           "formula %.4f "
           "(%s, equal stages; simulated)\n",
           bubble / N, pp_splits_backward(st->sched) ? "/W" : "", bf, closed[st->sched]);
    printf("bubble for the stages as they are: %.4f (busy per micro-batch", bf_stages);
    for (int s = 0; s < st->P; s++) printf("%s %.2f", s ? " /" : "", busy[s] / st->M / 1000);
    printf(" ms, stage 0..%d; simulated, the backward 2/3 of each)\n", st->P - 1);
    if (sim_ok) {
      printf("bubble simulated with this run's operations: %.4f (per micro-batch, stage 0..%d: F",
             sim.bubble_makespan, st->P - 1);
      for (int s = 0; s < st->P; s++) printf("%s %.3f", s ? " /" : "", cost[s].f / 1000);
      printf(", B");
      for (int s = 0; s < st->P; s++) printf("%s %.3f", s ? " /" : "", cost[s].b / 1000);
      if (pp_splits_backward(st->sched)) {
        printf(", W");
        for (int s = 0; s < st->P; s++) printf("%s %.3f", s ? " /" : "", cost[s].w / 1000);
      }
      printf(" ms; messages free)\n");
      if (st->sched == PP_ZB_H2)
        printf("  zb-h2 from each stage's first operation (the paper's measure: steps overlapping, as "
               "post-validation "
               "allows): %.4f\n",
               sim.bubble);
    }
  }
  free(busy);
  free(cost);
  fflush(stdout);
  free(vals);
}

