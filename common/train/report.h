/* report.h — what a training run prints at the end, and its --json results (notes/02-ddp.md).
 * Rank 0 prints: loss at start and end beside the teacher's entropy, the median step time and
 * samples/s, every rank's memory ledger by category beside the formula (common/base/formula.h,
 * notes/design.md), the bytes communicated per step per rank beside the formula, and a
 * per-op breakdown. Per-rank numbers are gathered with comm_ctl_gather. The --json schema is
 * in notes/design.md ("The results JSON"). */
#ifndef ZL_REPORT_H
#define ZL_REPORT_H
#include <stdint.h> // int64_t
#include <stdio.h>  // FILE
#include "train.h"  // trainer_t, train_cfg_t

typedef struct report_step {
  double loss; /* mean loss over the global batch of the step (before its update) */
  double ms;   /* wall time of the step on rank 0 (forward, backward, communication, optimizer) */
  double loss_scale; /* --precision fp16: the loss scale S this step's backward used (0 otherwise) */
} report_step_t;

typedef struct report_extra {
  char key[32];
  double value;
} report_extra_t;

/* One validation loss (--model gpt, --eval-every): after `step` steps. */
typedef struct report_eval {
  int step;
  double val_loss;
} report_eval_t;

/* Everything the report needs besides the trainer. full_params: rank 0 only, the Ψ fp32 weights
 * (unpadded) after the last step; NULL elsewhere. */
typedef struct report_run {
  const char *chapter;            /* "02_ddp" */
  const report_step_t *steps;     /* [nsteps] */
  int nsteps;
  const float *full_params;       /* rank 0: Ψ floats */
  int64_t full_numel;             /* Ψ of full_params (0: t->model.numel); --tp: the unsplit model's */
  double teacher_entropy;         /* best achievable loss (nats) */
  const report_extra_t *extras;   /* strategy numbers (n_buckets, ...) */
  int nextras;
  int skipped_steps;              /* steps dropped by --nonfinite skip */
  const report_eval_t *evals;     /* [nevals] validation losses in step order (--eval-every) */
  int nevals;
} report_run_t;

/* Median of the step times, leaving out step 0 (warm-up) when there are more than 2 steps. */
double report_median_ms(const report_step_t *steps, int nsteps);
/* "sum sumsq" of x (%.17g each) into dst: the params fingerprint the tests and the tour compare. */
void report_fingerprint(const float *x, int64_t n, char *dst, int dst_nbytes);
/* Fraction of this rank's communication time (comm row of the trace, from the first step on,
 * control traffic left out) that overlapped a backward event ("bwd ...") on its compute row.
 * A collective's busy window starts when the LAST rank joined it: joined_us[seq − 1] is that
 * time for operation seq of communicator `comm` (report_finish gathers it); the time before,
 * spent waiting for a late peer, goes to *wait_us and is neither communication nor hidden.
 * joined_us NULL: every collective counts from this rank's own start. *comm_us / *hidden_us
 * receive the totals. Returns -1 when the trace is off or holds no communication. */
double report_overlap_joined(const void *comm, const double *joined_us, int64_t njoined, double *comm_us,
                             double *hidden_us, double *wait_us);
/* report_overlap_joined with no arrival times (this rank's trace alone). */
double report_overlap(double *comm_us, double *hidden_us);

/* Collective: gathers every rank's ledger, counters and overlap to rank 0, which prints the
 * tables (unless --quiet: one summary line) and writes --json (atomically: temp file + rename). */
void report_finish(trainer_t *t, const report_run_t *run);
/* Before step 0 (train_parse_args): every output path of cfg (--json, --trace, --save-params,
 * --alloc-trace, --ckpt) can be written — a file in an existing writable directory (or a writable
 * device such as /dev/null), --ckpt a writable directory or one that can be created. Returns 0, or 2
 * after one line (rank 0) `error: --json PATH: must be ...`: the caller exits with it. */
int report_check_outputs(const train_cfg_t *cfg);
/* Collective: gather every rank's trace events (trace.h) to rank 0 and write --trace as one JSON
 * file (atomic, outfile.h). A failed write stops the job naming the file: `error: --trace PATH:
 * ...` (exit code 1). No-op when the trace is off. */
void report_write_trace(struct comm *c);
#endif
