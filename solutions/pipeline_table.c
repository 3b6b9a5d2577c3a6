/* pipeline_table.c — a table of schedules is only believable when the simulator reproduces it: each
 * row's bubble, activations and parameters per device come from the schedule's own lists run by the
 * simulator, printed beside DeepSeek's closed forms in both notations (the contract:
 * pipeline_table.h; notes/07d-dualpipev.md). Holds the rows (pp_table_row) and ch07_pipeline's
 * --simulate mode (pp_table_main). Plain C11 and libc, as pipeline_sim.c. */
#include "pipeline_table.h" // the contracts implemented here
#include "pipeline_sim.h"   // pp_simulate_sched, pp_cost_t, pp_sim_t
#include <stdio.h>          // printf, fprintf, sscanf
#include <stdlib.h>         // calloc, free, atoi
#include <string.h>         // strcmp

const char *pp_table_form_ds(pp_schedule_t sched) {
  return sched == PP_1F1B        ? "(PP-1)(F+B)"
         : sched == PP_ZB_H1     ? "(PP-1)(F+B-2W)"
         : sched == PP_DUALPIPEV || sched == PP_TABLE_DUALPIPE ? "(PP/2-1)(F&B+B-3W)"
                                                                : "";
}

const char *pp_table_form_sail(pp_schedule_t sched) {
  return sched == PP_1F1B        ? "(p-1)(f+b+w)"
         : sched == PP_ZB_H1     ? "(p-1)(f+b-w)"
         : sched == PP_DUALPIPEV || sched == PP_TABLE_DUALPIPE ? "(p/2-1)(F&B+b-2w)"
                                                                : "";
}

/* The most micro-batch-chunks stage s holds at once, from its list: F takes a slot, the last
 * operation of that micro-batch on that chunk gives it back (B, or W when split). */
static int list_peak(pp_schedule_t sched, int P, int s, int M, int v) {
  pp_op_t *ops = calloc((size_t)pp_schedule_nops(sched, M, v), sizeof *ops);
  if (!ops) return -1;
  int n = pp_schedule_ops(sched, P, s, M, v, ops), live = 0, peak = 0;
  char last = pp_splits_backward(sched) ? 'W' : 'B';
  for (int i = 0; i < n; i++) {
    live += ops[i].kind == 'F' ? 1 : ops[i].kind == last ? -1 : 0;
    peak = live > peak ? live : peak;
  }
  free(ops);
  return peak;
}

/* DualPipe on P ranks (PP_LIST_DUAL): rank d runs dualpipev's list of rank min(d, P−1−d) of P/2 with
 * M/2 micro-batches, its pairs marked alike; simulated with the two directions' dependencies. */
static int dual_simulate(int P, int M, const pp_cost_t *c, double fb_cost, double *busy, pp_sim_t *sim) {
  int cap = pp_schedule_nops(PP_DUALPIPEV, M / 2, 2), rc = -1, ok = 1;
  pp_op_t **ops = calloc((size_t)P, sizeof *ops);
  char **fb = calloc((size_t)P, sizeof *fb);
  int *n = calloc((size_t)P, sizeof *n);
  for (int d = 0; d < P && ops && fb && n; d++) {
    int h = d < P - 1 - d ? d : P - 1 - d;
    ops[d] = calloc((size_t)cap, sizeof(pp_op_t)), fb[d] = calloc((size_t)cap, 1);
    if (!ops[d] || !fb[d]) {
      ok = 0;
      continue;
    }
    n[d] = pp_schedule_ops(PP_DUALPIPEV, P / 2, h, M / 2, 2, ops[d]);
    pp_schedule_fb(PP_DUALPIPEV, P / 2, h, M / 2, 2, fb[d]);
  }
  if (ops && fb && n && ok)
    rc = pp_simulate_fb(P, M, 2, PP_LIST_SPLIT | PP_LIST_DUAL, ops, n, fb, c, fb_cost, 0, NULL, busy, sim);
  for (int d = 0; d < P && ops && fb; d++) free(ops[d]), free(fb[d]);
  free(ops), free(fb), free(n);
  return rc;
}

int pp_table_row(pp_schedule_t sched, int PP, int M, pp_costs_ds_t cost, pp_table_row_t *row) {
  int dual = sched == PP_TABLE_DUALPIPE;
  if ((sched != PP_1F1B && sched != PP_ZB_H1 && sched != PP_DUALPIPEV && !dual) || PP < 1 || M < 1 ||
      (sched == PP_DUALPIPEV && (PP % 2 || M < PP)) || (dual && (PP % 2 || M % 2 || M < 2 * PP)))
    return -1;
  int v = sched == PP_DUALPIPEV || dual ? 2 : 1, P = dual ? PP : PP / v;
  double fb = cost.FB > 0 ? cost.FB : cost.F + cost.B;
  pp_cost_t *c = calloc((size_t)P, sizeof *c);
  double *busy = calloc((size_t)P, sizeof *busy);
  *row = (pp_table_row_t){.devices = P, .stages_per_device = v, .idle = calloc((size_t)P, sizeof(double))};
  pp_sim_t sim;
  /* per rank, as the simulator counts (all its chunks; each chunk operation 1/v of it) */
  for (int s = 0; s < P && c; s++) c[s] = (pp_cost_t){v * cost.F, v * (cost.B - cost.W), v * cost.W};
  int rc = !c || !busy || !row->idle ? -1
           : dual                     ? dual_simulate(P, M, c, v * fb, busy, &sim)
                                      : pp_simulate_sched(sched, P, M, v, c, v * fb, 0, busy, &sim);
  if (rc == 0) {
    row->step = sim.makespan;
    for (int s = 0; s < P; s++) {
      row->idle[s] = sim.makespan - busy[s];
      row->bubble = row->idle[s] > row->bubble ? row->idle[s] : row->bubble;
      int a = dual ? list_peak(PP_DUALPIPEV, P / 2, s < P - 1 - s ? s : P - 1 - s, M / 2, 2)
                   : list_peak(sched, P, s, M, v);
      row->acts = a > row->acts ? a : row->acts;
    }
    row->acts_formula = sched == PP_DUALPIPEV || dual ? PP + 1 : PP;
    row->bubble_formula = sched == PP_1F1B   ? (PP - 1) * (cost.F + cost.B)
                          : sched == PP_ZB_H1 ? (PP - 1) * (cost.F + cost.B - 2 * cost.W)
                                              : (PP / 2 - 1) * (fb + cost.B - 3 * cost.W);
  } else pp_table_free(row);
  free(c);
  free(busy);
  return rc;
}

void pp_table_free(pp_table_row_t *row) {
  free(row->idle);
  row->idle = NULL;
}

/* ---- ch07_pipeline --simulate ---------------------------------------------------------------- */

static int table_usage(const char *why) {
  fprintf(stderr, "ch07_pipeline --simulate: %s\n"
                  "usage: ch07_pipeline --simulate --schedule 1f1b|zb-h1|dualpipev|dualpipe --pp P"
                  " --micro-batches M --costs F,B,W[,FB]\n  (P ranks: dualpipev's V has 2P stages, dualpipe's"
                  " two V's P; costs in DeepSeek's notation: B the full backward)\n",
          why);
  return 2;
}

int pp_table_main(int argc, char **argv) {
  int on = 0, P = 4, M = 0;
  const char *sname = "dualpipev";
  pp_costs_ds_t cost = {1, 2, 1, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--simulate")) on = 1;
    else if (!val) continue;
    else if (!strcmp(a, "--schedule")) sname = val, i++;
    else if (!strcmp(a, "--pp")) P = atoi(val), i++;
    else if (!strcmp(a, "--micro-batches")) M = atoi(val), i++;
    else if (!strcmp(a, "--costs")) {
      if (sscanf(val, "%lf,%lf,%lf,%lf", &cost.F, &cost.B, &cost.W, &cost.FB) < 3)
        return table_usage("--costs takes F,B,W or F,B,W,FB");
      i++;
    }
  }
  if (!on) return -1;
  int sched = strcmp(sname, "dualpipe") == 0 ? (int)PP_TABLE_DUALPIPE : pp_schedule_parse(sname);
  int dual = sched == (int)PP_TABLE_DUALPIPE;
  if (sched != PP_1F1B && sched != PP_ZB_H1 && sched != PP_DUALPIPEV && !dual)
    return table_usage("--schedule: the table holds 1f1b, zb-h1 (ZB1P), dualpipev and dualpipe");
  int PP = sched == PP_DUALPIPEV ? 2 * P : P;
  if (M == 0) M = 2 * PP;
  if (P < 1 || M < PP || cost.W > cost.B) return table_usage("needs P >= 1, M >= the stages, W <= B");
  if (dual && (P % 2 || M % 2 || M < 2 * P)) return table_usage("dualpipe needs P even, M even and >= 2P");
  double fb = cost.FB > 0 ? cost.FB : cost.F + cost.B;
  printf("simulated: %s, %d stages on %d ranks%s, %d micro-batches (no message time)\n", sname, PP, P,
         sched == PP_DUALPIPEV ? " (a V: rank r holds stages r and 2P-1-r)"
         : dual ? " (two V's: rank r holds stage r going down and stage P-1-r coming up, M/2 each way)"
                : "",
         M);
  printf("costs per stage: DeepSeek's F %g, B %g (the full backward), W %g, F&B %g%s = sail-sg's (07c's)"
         " f %g, b %g, w %g\n",
         cost.F, cost.B, cost.W, fb, cost.FB > 0 ? "" : " (F + B: no overlap gained)", cost.F,
         cost.B - cost.W, cost.W);
  pp_table_row_t row;
  if (pp_table_row((pp_schedule_t)sched, PP, M, cost, &row)) return table_usage("the simulator refused it");
  printf("rank  stages   bubble (idle)  parameters (stages)\n");
  for (int s = 0; s < P; s++) {
    if (sched == PP_DUALPIPEV || dual) printf("%4d  %2d, %2d   %13g  %d\n", s, s, PP - 1 - s, row.idle[s], 2);
    else printf("%4d  %6d   %13g  %d\n", s, s, row.idle[s], 1);
  }
  printf("step %g; bubble %g (the largest rank's), formula %s = %g; activations per device %d "
         "micro-batch-stages (the lists' peak), formula %d\n\n",
         row.step, row.bubble, pp_table_form_ds((pp_schedule_t)sched), row.bubble_formula, row.acts,
         row.acts_formula);
  pp_table_free(&row);
  printf("DeepSeek's table at PP = %d stages (DualPipe's README), M = %d, each cell simulated | formula:\n",
         PP, M);
  printf("%-10s %-20s %-18s %17s %6s %14s %7s\n", "method", "bubble (DeepSeek)", "(sail-sg)",
         "simulated|formula", "params", "acts sim|form", "devices");
  pp_schedule_t rows[4] = {PP_1F1B, PP_ZB_H1, PP_TABLE_DUALPIPE, PP_DUALPIPEV};
  const char *label[4] = {"1F1B", "ZB1P", "DualPipe", "DualPipeV"};
  for (int i = 0; i < 4; i++) {
    if (pp_table_row(rows[i], PP, M, cost, &row)) {
      printf("%-10s (not simulated: PP %d, M %d)\n", label[i], PP, M);
      continue;
    }
    printf("%-10s %-20s %-18s %8g | %-6g %5dx %6d | %-5d %7d\n", label[i], pp_table_form_ds(rows[i]),
           pp_table_form_sail(rows[i]), row.bubble, row.bubble_formula, row.stages_per_device, row.acts,
           row.acts_formula, row.devices);
    pp_table_free(&row);
  }
  printf("(DualPipe: two V's on PP devices, M/2 micro-batches each way, simulated here, not trained)\n");
  return 0;
}
