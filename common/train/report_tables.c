/* report_tables.c — the end-of-run tables rank 0 prints (report.h): loss and time, the
 * strategy's numbers, every rank's memory ledger by category beside its strategy's formula
 * (strategy_t.formula: a pipeline stage's are its units'), the host arena of an offloading
 * strategy, the bytes communicated per step beside the formula, the TP group's traffic, and a
 * per-op breakdown with the overlap measured from the trace. */
#include "report_internal.h" // rank_numbers_t, report_print_tables, report_fmt_bytes
#include "comm.h"            // comm_op_name, CO_*
#include "formula.h"         // formula_t
#include <math.h>            // log
#include <stdio.h>           // printf, snprintf
#include <stdlib.h>          // getenv, atoi
#include <string.h>          // strcmp

/* --tp: the TP group's traffic beside its formula, per rank (printed after the DP traffic). */
static void print_tp(const trainer_t *t, const rank_numbers_t *all, int steps) {
  if (!t->group_comm) return;
  int NR = report_rows(t), T = comm_world(t->group_comm);
  /* chapter 12's expert parallelism sits in TP's place */
  int ep = strcmp(t->cfg->transform->name, "ep") == 0;
  /* chapter 12's TP inside EP: the TP and data groups' counters too */
  int sub = t->cfg->transform->groups != NULL;
  printf("\n%s traffic per step (%s groups of %d%s, their own counters; not in the line above):\n",
         ep ? "expert-parallel" : "tensor-parallel", ep ? "EP" : "TP", T,
         sub ? " and the groups inside them" : "");
  printf("%-6s %8s %12s %14s %14s %16s\n", "rank", "tp rank",
         t->cfg->sp || sub ? "collectives" : "all-reduces", "formula", "bytes sent", "formula");
  for (int r = 0; r < NR; r++)
    printf("%-6d %8lld %12.2f %14lld %14.1f %16lld\n", r, (long long)all[r].tp_rank,
           (double)all[r].tp_calls / steps, (long long)all[r].tp_formula_calls,
           (double)all[r].tp_sent / steps, (long long)all[r].tp_formula_bytes);
  printf("formula: %s\n", t->cfg->transform->traffic_text);
  if (!t->cfg->pa) return;
  printf("%-6s %8s %12s %14s %14s %16s   (--pa: partitioned checkpoints)\n", "rank", "tp rank", "all-gathers",
         "formula", "bytes sent", "formula");
  for (int r = 0; r < NR; r++)
    printf("%-6d %8lld %12.2f %14lld %14.1f %16lld\n", r, (long long)all[r].tp_rank,
           (double)all[r].pa_calls / steps, (long long)all[r].pa_formula_calls,
           (double)all[r].pa_sent / steps, (long long)all[r].pa_formula_bytes);
  printf("formula: per micro-batch, one all-gather of each partitioned unit output (T slices of ceil(b x "
         "y_numel / T) "
         "fp32) before the backward that reads it, (T-1)/T of its bytes from each rank\n");
}

static const char *opt_name(const train_cfg_t *c) { return train_opt_name(c); }

/* The host arena per rank, beside each rank's host formula (what an offloading strategy moves
 * there: master and optimizer states); the table above is then the device arena alone. */
static void print_host_table(const trainer_t *t, const rank_numbers_t *all, const formula_t *f) {
  int NR = report_rows(t);
  char fd[32];
  report_fmt_bytes(fd, sizeof fd, f->params + f->grads + f->master + f->optim);
  char fh0[32];
  report_fmt_bytes(fh0, sizeof fh0, f->host);
  printf(
      "\nhost memory per rank, bytes (offloaded: the table above is the device; its master + optim formula\n"
      "moved here: device model states %s, host %s; fp32 keeps a host copy of its own fp32 piece as "
      "master)\n",
      fd, fh0);
  printf("%-6s %12s %12s %12s %12s %14s %14s %12s %12s\n", "rank", "params", "grads", "master", "optim",
         "states", "formula", "comm peak", "host peak");
  for (int r = 0; r < NR; r++) {
    const int64_t *h = all[r].host;
    char fh[32];
    report_fmt_bytes(fh, sizeof fh, all[r].f_host);
    printf("%-6d %12lld %12lld %12lld %12lld %14lld %14s %12lld %12lld\n", r, (long long)h[LEDGER_PARAMS],
           (long long)h[LEDGER_GRADS], (long long)h[LEDGER_MASTER], (long long)h[LEDGER_OPTIM],
           (long long)(h[LEDGER_MASTER] + h[LEDGER_OPTIM]), fh, (long long)h[LEDGER_COMM],
           (long long)all[r].host_peak);
  }
}

void report_print_tables(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all,
                         const formula_t *f) {
  const train_cfg_t *cfg = t->cfg;
  int NR = report_rows(t), steps = run->nsteps, same = report_uniform(all, NR);
  double med = report_median_ms(run->steps, steps);
  if (report_is_gpt(t)) { /* --model gpt: no teacher; a uniform guess over the vocabulary scores ln V */
    printf("\nloss: %.6f at the start -> %.6f at the end (uniform over %d bytes: %.6f)\n", run->steps[0].loss,
           run->steps[steps - 1].loss, t->model.classes, log((double)t->model.classes));
    for (int i = 0; i < run->nevals; i++)
      printf("validation loss after step %d: %.6f\n", run->evals[i].step, run->evals[i].val_loss);
    printf("time: median step %.3f ms, %.0f tokens/s (global batch %lld x %d tokens)\n", med,
           med > 0 ? (double)cfg->batch * t->model.rows / (med / 1000.0) : 0.0, (long long)cfg->batch,
           t->model.rows);
  } else {
    printf("\nloss: %.6f at the start -> %.6f at the end (teacher's entropy %.6f: the best achievable)\n",
           run->steps[0].loss, run->steps[steps - 1].loss, run->teacher_entropy);
    printf("time: median step %.3f ms, %.0f samples/s (global batch %lld)\n", med,
           med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0, (long long)cfg->batch);
  }
  for (int i = 0; i < run->nextras; i++) /* %.15g: byte counts print exact */
    printf("%s: %.15g\n", run->extras[i].key, run->extras[i].value);

  /* Each rank's row beside its own strategy's formula; one formula row when they all agree (a
   * pipeline's stages hold different units: then every row has its own). */
  printf("\nmemory per rank, bytes (stage %d, %s, %s: model states = %s; measured includes padding)\n",
         t->strategy->stage, dtype_precision(cfg->wdt), opt_name(cfg),
         same ? f->mem_text : "each rank's formula for its own units");
  printf("%-6s %12s %12s %12s %12s %14s %14s %10s %12s %12s %12s\n", "rank", "params", "grads", "master",
         "optim", "model states", "formula", "padding", "acts peak", "comm peak", "peak");
  for (int r = 0; r < NR; r++) {
    const rank_numbers_t *q = &all[r];
    char fb[32], pb[32];
    int64_t ms = report_row_states(q, fb, pb, sizeof fb, "-");
    printf("%-6d %12lld %12lld %12lld %12lld %14lld %14s %10s %12lld %12lld %12lld\n", r,
           (long long)q->params, (long long)q->grads, (long long)q->master, (long long)q->optim,
           (long long)ms, fb, pb, (long long)q->acts_peak, (long long)q->comm_peak, (long long)q->peak);
  }
  char fp[32], fg[32], fm[32], fo[32];
  report_fmt_bytes(fp, sizeof fp, f->params);
  report_fmt_bytes(fg, sizeof fg, f->grads);
  report_fmt_bytes(fm, sizeof fm, f->master);
  report_fmt_bytes(fo, sizeof fo, f->optim);
  /* offloaded: below */
  if (f->host > 0) snprintf(fm, sizeof fm, "(host)"), snprintf(fo, sizeof fo, "(host)");
  if (same && all[0].has_formula) printf("%-6s %12s %12s %12s %12s\n", "formula", fp, fg, fm, fo);
  if (t->dev == DEV_CUDA)
    for (int r = 0; r < NR; r++)
      printf("rank %d on the GPU: ledger peak %lld bytes, driver-reported used-bytes delta %lld (cuBLAS/NCCL "
             "workspaces and the allocator's rounding are outside the ledger)\n",
             r, (long long)all[r].peak, (long long)all[r].device_used);
  if (f->host > 0) print_host_table(t, all, f);

  double total = 0, fc = 0;
  for (int r = 0; r < NR; r++) {
    fc += all[r].f_comm;
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) total += (double)all[r].sent[op];
  }
  if (same)
    printf("\ncommunication per step per rank: %.1f bytes sent (mean over ranks); formula %.1f (%s)\n",
           total / NR / steps, f->comm_bytes, f->comm_text);
  else
    printf("\ncommunication per step per rank: %.1f bytes sent (mean over ranks); formula %.1f (the mean of "
           "each rank's, "
           "rank 0's: %s)\n",
           total / NR / steps, fc / NR, f->comm_text);
  report_nodes_print(t, all, f, steps);
  print_tp(t, all, steps);
  int multinode = comm_nodes(t->world_comm) > 1; /* and each op's bytes across nodes, mean over ranks */
  printf("%-16s %12s %16s %14s%s\n", "op (rank 0)", "calls/step", "bytes/step", "busy ms/step",
         multinode ? "   across nodes/step (mean of ranks)" : "");
  for (int op = 0; op < CO_NOPS; op++) {
    if (all[0].calls[op] == 0) continue;
    printf("%-16s %12.2f %16.1f %14.3f", comm_op_name((comm_op_t)op), (double)all[0].calls[op] / steps,
           (double)all[0].sent[op] / steps, all[0].busy_us[op] / 1000.0 / steps);
    if (multinode) {
      double x = 0;
      for (int r = 0; r < NR; r++) x += (double)all[r].inter_sent[op];
      printf(" %35.1f", x / NR / steps);
    }
    printf("\n");
  }
  const comm_engine_stats_t *e = &all[0].engine; /* where rank 0's waiting went (comm_engine.h) */
  char poll[64] = "no polling: more ranks than cores";
  if (e->poll_when_waited)
    snprintf(poll, sizeof poll, "polled %.2f s for the waiting main", e->engine_poll_s);
  printf("threads (rank 0): %d in all: main (CPU %.2f s, %.2f s blocked in comm_wait), %d comm engine (busy "
         "%.2f s, "
         "asleep %.2f s, %s, CPU %.2f s, %d streams), %d helper(s) (CPU %.2f s: Open MPI's blocking "
         "reductions %s "
         "while they wait), the rest MPI's own\n",
         all[0].cpu.nthreads, all[0].cpu.main_cpu_s, e->main_wait_s, e->engine_threads, e->engine_busy_s,
         e->engine_sleep_s, poll, e->engine_cpu_s, e->fibers_peak, e->helper_threads, e->helper_cpu_s,
         getenv("OMPI_MCA_mpi_yield_when_idle") && atoi(getenv("OMPI_MCA_mpi_yield_when_idle")) ? "yield"
                                                                                                : "may spin");
  double cu = 0, hu = 0, wu = 0;
  report_overlap_sums(all, NR, &cu, &hu, &wu);
  if (cu > 0 || wu > 0)
    printf("overlap: %.1f%% of communication time ran under a backward (from the trace; %.3f ms per step per "
           "rank, "
           "counted from the last rank's arrival; %.3f ms more waiting for late ranks). Whether overlap paid "
           "off is the step time against the variant without it: notes/benchmarks.md\n",
           cu > 0 ? 100.0 * hu / cu : 0.0, cu / NR / steps / 1000.0, wu / NR / steps / 1000.0);
}
