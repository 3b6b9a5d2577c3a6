/* report_internal.h — what the report's files share (report.c gathers, report_tables.c prints,
 * report_json.c writes --json, report_analysis.c measures the trace); not for the rest of the
 * program, which includes report.h. */
#ifndef ZL_REPORT_INTERNAL_H
#define ZL_REPORT_INTERNAL_H
#include <stdint.h> // int64_t
#include <stddef.h> // size_t
#include "comm.h"   // comm_t, CO_NOPS
#include "cpuuse.h" // cpuuse_t
#include "comm_engine.h" // comm_engine_stats_t
#include "ledger.h" // LEDGER_NCAT
#include "report.h" // report_run_t, trainer_t

/* One rank's numbers, gathered to rank 0 as a fixed-size blob. */
typedef struct rank_numbers {
  int64_t rank;
  int64_t params, grads, master, optim; /* bytes held (peak of each category: states are resident) */
  int64_t acts_peak, comm_peak, peak;
  int64_t device_used; /* cudaMemGetInfo used-bytes delta since device selection (GPU only; 0 on CPU) */
  int64_t host[LEDGER_NCAT], host_peak; /* the host arena (chapter 08's offloaded states): peaks */
  int64_t sent[CO_NOPS], calls[CO_NOPS]; /* since the end of setup, all steps */
  int64_t p2p_sent;
  double busy_us[CO_NOPS];
  /* topology (report_nodes.c): this rank's node, the part of sent[] that crossed nodes, and the
   * formula of that part (the strategy's, or the ring rule) */
  int64_t node, inter_sent[CO_NOPS];
  int64_t tp_inter_sent; /* --tp: the part of the TP group's bytes that crossed nodes */
  double f_inter;
  double comm_us, hidden_us, wait_us; /* from the trace (report_overlap_joined); 0 when the trace is off */
  int64_t tp_rank, tp_calls, tp_sent;  /* --tp: position in the TP group, its all-reduces (own counters) */
  int64_t tp_formula_calls, tp_formula_bytes; /* ... and the model transform's formula (its traffic hook) */
  /* --pa: the TP group's all-gathers, and formula */
  int64_t pa_calls, pa_sent, pa_formula_calls, pa_formula_bytes;
  /* The rank's strategy's formulas (strategy_t.formula): a pipeline stage's differ from the next's. */
  double f_params, f_grads, f_master, f_optim, f_host, f_comm;
  int64_t has_formula; /* 0: the strategy has no formula hook (a toy: tests/mpi/scn_layout.c) */
  cpuuse_t cpu; /* threads and their CPU seconds at the end of the run (--json "cpu") */
  comm_engine_stats_t engine; /* the progress engine's busy / sleep / waits (--json "cpu", report) */
} rank_numbers_t;

/* Rows of the per-rank tables: every rank of the job. */
static inline int report_rows(const trainer_t *t) { return comm_world(t->world_comm); }
/* Device model states of a rank's formula. */
static inline double report_states_formula(const rank_numbers_t *q) {
  return q->f_params + q->f_grads + q->f_master + q->f_optim;
}
/* A row's measured model states (returned), its formula and the padding (measured − formula) as
 * text into fb and pb (n bytes each); `none` for both when the strategy gives no formula. */
int64_t report_row_states(const rank_numbers_t *q, char *fb, char *pb, size_t n, const char *none);
/* 1 when every row has rank 0's formulas (one formula row, one text), 0 when they differ (stages). */
int report_uniform(const rank_numbers_t *all, int nr);
/* Bytes as an integer when whole, else with one decimal (formulas of Ψ/N may not be). */
void report_fmt_bytes(char *dst, size_t n, double x);
int report_is_gpt(const trainer_t *t);
/* Communication time, the part under a backward and the wait for late peers, summed over ranks. */
void report_overlap_sums(const rank_numbers_t *all, int N, double *comm_us, double *hidden_us,
                         double *wait_us);
/* Collective over c: when the last rank of c started each of its operations (report_analysis.c). */
double *report_last_joins(comm_t *c, int64_t *n);
/* The groups whose counters are the transform's traffic: t->group_comm, then those of its groups hook
 * (chapter 12's TP inside EP), each waited for; up to max into out, their number (0 without --tp). */
int report_tp_groups(const trainer_t *t, comm_t **out, int max);
/* The groups whose counters are the strategy's besides t->comm: its sub_comms, then t->dense_comm
 * (two data-parallel groups); into out (room for TRAIN_SUB_COMMS_MAX + 1), their number. */
int report_strategy_groups(const trainer_t *t, comm_t **out);
/* This rank's topology numbers into *mine (report_nodes.c): its node, the inter-node part of
 * what t->comm and the strategy's sub_comms sent, and f's inter-node formula. */
void report_nodes_mine(const trainer_t *t, const formula_t *f, rank_numbers_t *mine);
/* Rank 0: the lines of the bytes that crossed nodes beside the formula (nothing on one node). */
void report_nodes_print(const trainer_t *t, const rank_numbers_t *all, const formula_t *f, int steps);
/* Rank 0: the tables (report_tables.c); the --json text, malloc'd, *len bytes (report_json.c).
 * f: rank 0's formulas (their texts). */
void report_print_tables(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all,
                         const formula_t *f);
char *report_json_text(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all,
                       const formula_t *f, int64_t *len);
#endif
