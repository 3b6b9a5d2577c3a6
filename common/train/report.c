/* report.c — the end of a run (see report.h; notes/02-ddp.md, notes/design.md for the JSON
 * schema): every rank's numbers — its ledger, its communicator's counters, its strategy's formulas
 * (strategy_t.formula), the overlap from its trace — gathered to rank 0 with comm_ctl_gather, which
 * prints the tables (report_tables.c) and writes --json (report_json.c). The output files are
 * report_files.c's, the trace's analysis report_analysis.c's. */
#include "report_internal.h" // rank_numbers_t, report_print_tables, report_json_text
#include "comm.h"            // comm_counters, comm_ctl_gather
#include "device.h"          // dev_used_delta
#include "cpuuse.h"          // cpuuse_now: threads and their CPU time
#include "ledger.h"          // ledger_peak, ledger_total_peak, ledger_peak_in (host arena)
#include "outfile.h"         // outfile_write (--json)
#include <math.h>            // log
#include <stdio.h>           // printf, snprintf
#include <stdlib.h>          // free

void report_fmt_bytes(char *dst, size_t n, double x) {
  if (x == (double)(int64_t)x) snprintf(dst, n, "%lld", (long long)x);
  else snprintf(dst, n, "%.1f", x);
}

int64_t report_row_states(const rank_numbers_t *q, char *fb, char *pb, size_t n, const char *none) {
  int64_t ms = q->params + q->grads + q->master + q->optim;
  report_fmt_bytes(fb, n, report_states_formula(q));
  report_fmt_bytes(pb, n, (double)ms - report_states_formula(q));
  if (!q->has_formula) snprintf(fb, n, "%s", none), snprintf(pb, n, "%s", none);
  return ms;
}

/* the GPT and its splits (tp, cp, moe): token inputs */
int report_is_gpt(const trainer_t *t) { return t->model.in_is_tokens; }

int report_uniform(const rank_numbers_t *all, int nr) {
  for (int r = 1; r < nr; r++)
    if (all[r].f_params != all[0].f_params || all[r].f_grads != all[0].f_grads ||
        all[r].f_master != all[0].f_master || all[r].f_optim != all[0].f_optim ||
        all[r].f_host != all[0].f_host || all[r].f_comm != all[0].f_comm)
      return 0;
  return 1;
}

int report_tp_groups(const trainer_t *t, comm_t **out, int max) {
  if (!t->group_comm || max < 1) return 0;
  out[0] = t->group_comm;
  int n = 1 + (t->cfg->transform->groups ? t->cfg->transform->groups(t, out + 1, max - 1) : 0);
  for (int i = 0; i < n; i++) comm_wait_all(out[i]);
  return n;
}

int report_strategy_groups(const trainer_t *t, comm_t **out) {
  int n = 0;
  for (int i = 0; i < t->n_sub_comms; i++) out[n++] = t->sub_comms[i];
  if (t->dense_comm) out[n++] = t->dense_comm;
  return n;
}

void report_finish(trainer_t *t, const report_run_t *run) {
  comm_t *rc = t->world_comm; /* every rank of the job appears (--tp, a pipeline's stages) */
  rank_numbers_t mine = {.rank = comm_rank(rc)};
  formula_t f = {.mem_text = "no formula (the strategy has no formula hook)", .comm_text = "none"};
  /* what this rank's strategy says it holds and sends */
  if (t->strategy->formula) t->strategy->formula(t, &f);
  mine.has_formula = t->strategy->formula != NULL;
  mine.f_params = f.params, mine.f_grads = f.grads, mine.f_master = f.master, mine.f_optim = f.optim;
  mine.f_host = f.host, mine.f_comm = f.comm_bytes;
  if (t->group_comm) {
    comm_t *g[5];
    int ng = report_tp_groups(t, g, 5);
    comm_counters_t tc = comm_counters(g[0]);
    /* the transform's other groups (chapter 12's TP inside EP): its bytes too */
    for (int i = 1; i < ng; i++) {
      comm_counters_t sc = comm_counters(g[i]);
      for (int op = 0; op < CO_NOPS; op++) tc.calls[op] += sc.calls[op], tc.sent[op] += sc.sent[op];
    }
    mine.tp_rank = comm_rank(t->group_comm);
    /* the group's collectives: all-reduces; --sp's all-gathers and reduce-scatters along the sequence
     * (--pa's all-gathers, which --sp excludes, are counted apart below) */
    mine.tp_calls =
        tc.calls[CO_ALL_REDUCE] + tc.calls[CO_REDUCE_SCATTER] + (t->cfg->pa ? 0 : tc.calls[CO_ALL_GATHER]);
    mine.tp_sent =
        tc.sent[CO_ALL_REDUCE] + tc.sent[CO_REDUCE_SCATTER] + (t->cfg->pa ? 0 : tc.sent[CO_ALL_GATHER]);
    /* the transform's formula */
    t->cfg->transform->traffic(t, &mine.tp_formula_calls, &mine.tp_formula_bytes);
    /* --pa's gathers: the TP group's only all-gathers */
    mine.pa_calls = t->cfg->pa ? tc.calls[CO_ALL_GATHER] : 0;
    mine.pa_sent = t->cfg->pa ? tc.sent[CO_ALL_GATHER] : 0;
    if (t->cfg->transform->pa_traffic)
      t->cfg->transform->pa_traffic(t, &mine.pa_formula_calls, &mine.pa_formula_bytes);
  }
  mine.params = ledger_peak(LEDGER_PARAMS);
  mine.grads = ledger_peak(LEDGER_GRADS);
  mine.master = ledger_peak(LEDGER_MASTER);
  mine.optim = ledger_peak(LEDGER_OPTIM);
  mine.acts_peak = ledger_peak(LEDGER_ACTS);
  mine.comm_peak = ledger_peak(LEDGER_COMM);
  mine.peak = ledger_total_peak();
  mine.device_used = (int64_t)dev_used_delta(t->dev);
  for (int c = 0; c < LEDGER_NCAT; c++) mine.host[c] = ledger_peak_in(LEDGER_HOST, (ledger_cat_t)c);
  mine.host_peak = ledger_total_peak_in(LEDGER_HOST);
  comm_wait_all(t->comm);
  comm_counters_t cc = comm_counters(t->comm);
  for (int op = 0; op < CO_NOPS; op++) {
    mine.sent[op] = cc.sent[op];
    mine.calls[op] = cc.calls[op];
    mine.busy_us[op] = cc.busy_us[op];
  }
  mine.p2p_sent = cc.p2p_sent;
  /* the strategy's own groups (HSDP's) and its dense group (two groups, chapter 12): its bytes */
  comm_t *own[TRAIN_SUB_COMMS_MAX + 1];
  int n_own = report_strategy_groups(t, own);
  for (int i = 0; i < n_own; i++) {
    comm_wait_all(own[i]);
    comm_counters_t sc = comm_counters(own[i]);
    for (int op = 0; op < CO_NOPS; op++) {
      mine.sent[op] += sc.sent[op];
      mine.calls[op] += sc.calls[op];
      mine.busy_us[op] += sc.busy_us[op];
    }
    mine.p2p_sent += sc.p2p_sent;
  }
  report_nodes_mine(t, &f, &mine);
  int64_t njoined = 0;
  double *joined = report_last_joins(t->comm, &njoined); /* collective: every rank, trace on or off */
  report_overlap_joined(t->comm, joined, njoined, &mine.comm_us, &mine.hidden_us, &mine.wait_us);
  free(joined);

  mine.cpu = cpuuse_now();
  mine.engine = comm_engine_stats();
  char *blob = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(rc, &mine, (int64_t)sizeof mine, &blob, &sizes);
  if (comm_rank(rc) != 0) return;
  const rank_numbers_t *all = (const rank_numbers_t *)blob;
  const train_cfg_t *cfg = t->cfg;
  if (!cfg->quiet) report_print_tables(t, run, all, &f);
  else {
    double med = report_median_ms(run->steps, run->nsteps);
    if (report_is_gpt(t)) {
      char val[64] = "no validation run"; /* --eval-every 0: no number to print */
      if (run->nevals) snprintf(val, sizeof val, "validation %.6f", run->evals[run->nevals - 1].val_loss);
      printf("%s: final loss %.6f (uniform %.4f), %s, median step %.3f ms, %.0f tokens/s\n", t->name,
             run->steps[run->nsteps - 1].loss, log((double)t->model.classes), val, med,
             med > 0 ? (double)cfg->batch * t->model.rows / (med / 1000.0) : 0.0);
    } else
      printf("%s: final loss %.6f (teacher %.6f), median step %.3f ms, %.0f samples/s\n", t->name,
             run->steps[run->nsteps - 1].loss, run->teacher_entropy, med,
             med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0);
  }
  if (cfg->json) {
    int64_t len = 0;
    char *text = report_json_text(t, run, all, &f, &len);
    outfile_write("--json", cfg->json, text, len);
    free(text);
    if (!cfg->quiet) printf("results: %s\n", cfg->json);
  }
  fflush(stdout);
  free(blob);
  free(sizes);
}
