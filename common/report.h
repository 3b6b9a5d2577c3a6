/* report.h — what a training run prints at the end, and its --json results (notes/02-ddp.md).
 * Rank 0 prints: loss at start and end beside the teacher's entropy, the median step time and
 * samples/s, every rank's memory ledger by category beside the formula of ARCHITECTURE.md
 * (common/formula.h), the bytes communicated per step per rank beside the formula, and a
 * per-op breakdown. Per-rank numbers are gathered with comm_ctl_gather. */
#ifndef ZL_REPORT_H
#define ZL_REPORT_H
#include <stdint.h> // int64_t
#include "train.h"  // trainer_t

typedef struct report_step {
  double loss; /* mean loss over the global batch of the step (before its update) */
  double ms;   /* wall time of the step on rank 0 (forward, backward, communication, optimizer) */
} report_step_t;

typedef struct report_extra {
  char key[32];
  double value;
} report_extra_t;

/* Everything the report needs besides the trainer. full_params: rank 0 only, the Ψ fp32 weights
 * (unpadded) after the last step; NULL elsewhere. */
typedef struct report_run {
  const char *chapter;            /* "02_ddp" */
  const report_step_t *steps;     /* [nsteps] */
  int nsteps;
  const float *full_params;       /* rank 0: Ψ floats */
  double teacher_entropy;         /* best achievable loss (nats) */
  const report_extra_t *extras;   /* strategy numbers (n_buckets, ...) */
  int nextras;
  int skipped_steps;              /* steps dropped by --nonfinite skip */
} report_run_t;

/* Median of the step times, leaving out step 0 (warm-up) when there are more than 2 steps. */
double report_median_ms(const report_step_t *steps, int nsteps);
/* "sum sumsq" of x (%.17g each) into dst: the params fingerprint the tests and the tour compare. */
void report_fingerprint(const float *x, int64_t n, char *dst, int dst_nbytes);
/* Fraction of this rank's communication time (comm row of the trace) that overlapped a
 * backward event ("bwd ...") on its compute row; *comm_us / *hidden_us receive the totals.
 * Returns -1 when the trace is off or holds no communication. */
double report_overlap(double *comm_us, double *hidden_us);

/* Collective: gathers every rank's ledger, counters and overlap to rank 0, which prints the
 * tables (unless --quiet: one summary line) and writes --json (atomically: temp file + rename). */
void report_finish(trainer_t *t, const report_run_t *run);
/* Write text to path atomically (path.tmp.PID, then rename); dies with the path on failure. */
void report_write_atomic(const char *path, const char *text, int64_t nbytes);
#endif
