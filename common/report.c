/* report.c — the end-of-run tables and the --json results (see report.h; notes/02-ddp.md).
 * Every number is measured on its rank (ledger, communicator counters, trace) and printed
 * beside the formula of ARCHITECTURE.md; rank 0 gathers them with comm_ctl_gather. */
#include "report.h"  // report_run_t, report_step_t, report_finish
#include "check.h"   // die, xmalloc
#include "comm.h"    // comm_counters, comm_ctl_gather, comm_op_name
#include "formula.h" // formula_model_states, formula_comm_bytes, formula_text
#include "device.h"  // dev_used_delta
#include "ledger.h"  // ledger_peak, ledger_total_peak
#include "trace.h"   // trace_events, trace_enabled
#include <math.h>    // isfinite
#include <stdarg.h>  // va_list
#include <stdio.h>   // printf, fopen, rename
#include <stdlib.h>  // qsort, free
#include <string.h>  // strncmp, memcpy
#include <unistd.h>  // getpid

/* One rank's numbers, gathered to rank 0 as a fixed-size blob. */
typedef struct rank_numbers {
  int64_t rank;
  int64_t params, grads, master, optim; /* bytes held (peak of each category: states are resident) */
  int64_t acts_peak, comm_peak, peak;
  int64_t device_used; /* cudaMemGetInfo used-bytes delta since device selection (GPU only; 0 on CPU) */
  int64_t sent[CO_NOPS], calls[CO_NOPS]; /* since the end of setup, all steps */
  int64_t p2p_sent;
  double busy_us[CO_NOPS];
  double comm_us, hidden_us; /* from the trace; -1 when the trace is off */
} rank_numbers_t;

/* ---- small helpers ----------------------------------------------------------------------- */

/* Communication time and the part of it under a backward, summed over the ranks that traced. */
static void overlap_sums(const rank_numbers_t *all, int N, double *comm_us, double *hidden_us) {
  for (int r = 0; r < N; r++)
    if (all[r].comm_us > 0) {
      *comm_us += all[r].comm_us;
      *hidden_us += all[r].hidden_us;
    }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double report_median_ms(const report_step_t *steps, int nsteps) {
  int first = nsteps > 2 ? 1 : 0, n = nsteps - first;
  if (n <= 0) return 0;
  double *v = xmalloc((size_t)n * sizeof(double), "median");
  for (int i = 0; i < n; i++) v[i] = steps[first + i].ms;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  double m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  free(v);
  return m;
}

void report_fingerprint(const float *x, int64_t n, char *dst, int dst_nbytes) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    s += x[i];
    s2 += (double)x[i] * x[i];
  }
  snprintf(dst, (size_t)dst_nbytes, "%.17g %.17g", s, s2);
}

double report_overlap(double *comm_us, double *hidden_us) {
  *comm_us = *hidden_us = 0;
  if (!trace_enabled()) return -1;
  int n = 0;
  const trace_ev_t *ev = trace_events(&n);
  double t_first = -1; /* start of the first step: setup's broadcast is not a step's traffic */
  for (int i = 0; i < n; i++)
    if (ev[i].row == TRACE_COMPUTE && strncmp(ev[i].name, "step ", 5) == 0 && (t_first < 0 || ev[i].t0 < t_first))
      t_first = ev[i].t0;
  /* Backward events: one compute thread records them in time order and they never overlap each
   * other, so the hidden time of a communication event is the sum of its intersections with the
   * backward intervals that start before it ends (found by binary search). */
  int nb = 0;
  double *b0 = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double), "overlap"), *b1 = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double), "overlap");
  for (int j = 0; j < n; j++)
    if (ev[j].row == TRACE_COMPUTE && strncmp(ev[j].name, "bwd", 3) == 0) {
      b0[nb] = ev[j].t0;
      b1[nb++] = ev[j].t1;
    }
  for (int i = 0; i < n; i++) {
    if (ev[i].t0 < t_first) continue;
    if (ev[i].row != TRACE_COMM || strstr(ev[i].args, "\"op\":\"control\"")) continue; /* loss, norms */
    double a = ev[i].t0, b = ev[i].t1;
    *comm_us += b - a;
    int lo = 0, hi = nb; /* first backward interval that ends after a */
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (b1[mid] <= a) lo = mid + 1;
      else hi = mid;
    }
    for (int j = lo; j < nb && b0[j] < b; j++) {
      double x = b0[j] > a ? b0[j] : a, y = b1[j] < b ? b1[j] : b;
      if (y > x) *hidden_us += y - x;
    }
  }
  free(b0);
  free(b1);
  return *comm_us > 0 ? *hidden_us / *comm_us : -1;
}

void report_write_atomic(const char *path, const char *text, int64_t nbytes) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) die("error: cannot write %s (check the directory exists and is writable)", path);
  size_t put = nbytes > 0 ? fwrite(text, 1, (size_t)nbytes, f) : 0;
  int bad = put != (size_t)(nbytes > 0 ? nbytes : 0);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    remove(tmp);
    die("error: writing %s failed (disk full?)", path);
  }
}

/* A growing string for the JSON object. */
typedef struct sbuf { char *p; int64_t len, cap; } sbuf_t;
static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int64_t room = b->cap - b->len;
    int k = vsnprintf(b->p ? b->p + b->len : NULL, (size_t)(room > 0 ? room : 0), fmt, ap);
    va_end(ap);
    if (k < room) {
      b->len += k;
      return;
    }
    b->cap = (b->cap + k + 1) * 2;
    b->p = realloc(b->p, (size_t)b->cap);
    if (!b->p) die("error: out of memory writing the report");
  }
}

/* Bytes as an integer when whole, else with one decimal (formulas of Ψ/N may not be). */
static void fmt_bytes(char *dst, size_t n, double x) {
  if (x == (double)(int64_t)x) snprintf(dst, n, "%lld", (long long)x);
  else snprintf(dst, n, "%.1f", x);
}

/* A JSON number, or null when not finite (a diverged loss must not make the file unreadable). */
static const char *jnum(char *dst, size_t n, double x) {
  if (isfinite(x)) snprintf(dst, n, "%.9g", x);
  else snprintf(dst, n, "null");
  return dst;
}

static const char *opt_name(const train_cfg_t *c) { return c->optimizer == OPT_ADAMW ? "adamw" : "sgd"; }
static int opt_states(const train_cfg_t *c) { return c->optimizer == OPT_ADAMW ? 2 : 1; }
static const char *prec_name(const train_cfg_t *c) { return c->wdt == DT_BF16 ? "bf16" : "fp32"; }

/* ---- the report ---------------------------------------------------------------------------- */

static void print_tables(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all) {
  const train_cfg_t *cfg = t->cfg;
  int N = t->world, stage = t->strategy->stage, steps = run->nsteps;
  double psi = (double)t->model.numel;
  mem_formula_t f = formula_model_states(stage, psi, N, t->wdt, opt_states(cfg));
  double med = report_median_ms(run->steps, steps);
  printf("\nloss: %.6f at the start -> %.6f at the end (teacher's entropy %.6f: the best achievable)\n",
         run->steps[0].loss, run->steps[steps - 1].loss, run->teacher_entropy);
  printf("time: median step %.3f ms, %.0f samples/s (global batch %lld)\n", med,
         med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0, (long long)cfg->batch);
  for (int i = 0; i < run->nextras; i++) printf("%s: %g\n", run->extras[i].key, run->extras[i].value);

  printf("\nmemory per rank, bytes (stage %d, %s, %s: model states = %s; measured includes padding)\n", stage,
         prec_name(cfg), opt_name(cfg), formula_text(stage, t->wdt, opt_states(cfg)));
  printf("%-6s %12s %12s %12s %12s %14s %14s %10s %12s %12s %12s\n", "rank", "params", "grads", "master", "optim",
         "model states", "formula", "padding", "acts peak", "comm peak", "peak");
  for (int r = 0; r < N; r++) {
    const rank_numbers_t *q = &all[r];
    int64_t ms = q->params + q->grads + q->master + q->optim;
    char fb[32], pb[32];
    fmt_bytes(fb, sizeof fb, f.total);
    fmt_bytes(pb, sizeof pb, (double)ms - f.total);
    printf("%-6d %12lld %12lld %12lld %12lld %14lld %14s %10s %12lld %12lld %12lld\n", r, (long long)q->params,
           (long long)q->grads, (long long)q->master, (long long)q->optim, (long long)ms, fb, pb,
           (long long)q->acts_peak, (long long)q->comm_peak, (long long)q->peak);
  }
  char fp[32], fg[32], fm[32], fo[32];
  fmt_bytes(fp, sizeof fp, f.params);
  fmt_bytes(fg, sizeof fg, f.grads);
  fmt_bytes(fm, sizeof fm, f.master);
  fmt_bytes(fo, sizeof fo, f.optim);
  printf("%-6s %12s %12s %12s %12s\n", "formula", fp, fg, fm, fo);
  if (t->dev == DEV_CUDA)
    for (int r = 0; r < N; r++)
      printf("rank %d on the GPU: ledger peak %lld bytes, driver-reported used-bytes delta %lld (cuBLAS/NCCL "
             "workspaces and the allocator's rounding are outside the ledger)\n",
             r, (long long)all[r].peak, (long long)all[r].device_used);

  double fc = formula_comm_bytes(stage, psi, N, t->wdt), total = 0;
  for (int r = 0; r < N; r++)
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) total += (double)all[r].sent[op];
  printf("\ncommunication per step per rank: %.1f bytes sent (mean over ranks); formula %.1f (stage %d: %s(N-1)/N x psi x %d B)\n",
         total / N / steps, fc, stage, stage >= 3 ? "3" : "2", (int)dtype_size(t->wdt));
  printf("%-16s %12s %16s %14s\n", "op (rank 0)", "calls/step", "bytes/step", "busy ms/step");
  for (int op = 0; op < CO_NOPS; op++) {
    if (all[0].calls[op] == 0) continue;
    printf("%-16s %12.2f %16.1f %14.3f\n", comm_op_name((comm_op_t)op), (double)all[0].calls[op] / steps,
           (double)all[0].sent[op] / steps, all[0].busy_us[op] / 1000.0 / steps);
  }
  double cu = 0, hu = 0;
  overlap_sums(all, N, &cu, &hu);
  if (cu > 0)
    printf("overlap: %.1f%% of communication time ran under a backward (from the trace; %.3f ms per step per rank)\n",
           100.0 * hu / cu, cu / N / steps / 1000.0);
}

static char *json_text(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all, int64_t *len) {
  const train_cfg_t *cfg = t->cfg;
  int N = t->world, stage = t->strategy->stage, steps = run->nsteps;
  double psi = (double)t->model.numel;
  mem_formula_t f = formula_model_states(stage, psi, N, t->wdt, opt_states(cfg));
  sbuf_t b = {0};
  sb_printf(&b, "{\"chapter\": \"%s\", \"strategy\": \"%s\", \"world\": %d, \"device\": \"%s\", \"backend\": \"%s\", "
                "\"collectives\": \"%s\", \"precision\": \"%s\", \"optimizer\": \"%s\",\n",
            run->chapter, t->strategy->name, N, device_name(t->dev), comm_backend_name(t->comm),
            cfg->collectives == COLL_RING ? "ring" : "vendor", prec_name(cfg), opt_name(cfg));
  sb_printf(&b, " \"params\": %lld, \"padded_params\": %lld,\n", (long long)t->model.numel,
            (long long)t->model.padded_numel);
  sb_printf(&b, " \"steps\": [");
  char num[40];
  for (int s = 0; s < steps; s++)
    sb_printf(&b, "%s{\"step\": %d, \"loss\": %s, \"ms\": %.4f}", s ? ",\n   " : "", s,
              jnum(num, sizeof num, run->steps[s].loss), run->steps[s].ms);
  char fpr[96];
  report_fingerprint(run->full_params, t->model.numel, fpr, sizeof fpr);
  sb_printf(&b, "],\n \"final_loss\": %s, \"params_fingerprint\": \"%s\",\n",
            jnum(num, sizeof num, run->steps[steps - 1].loss), fpr);
  char fb[32];
  fmt_bytes(fb, sizeof fb, f.total);
  sb_printf(&b, " \"memory\": {\"per_rank\": [");
  for (int r = 0; r < N; r++) {
    const rank_numbers_t *q = &all[r];
    int64_t ms = q->params + q->grads + q->master + q->optim;
    char pb[32];
    fmt_bytes(pb, sizeof pb, (double)ms - f.total);
    sb_printf(&b, "%s{\"rank\": %d, \"params\": %lld, \"grads\": %lld, \"master\": %lld, \"optim\": %lld, "
                  "\"model_states\": %lld, \"formula_model_states\": %s, \"padding_bytes\": %s, "
                  "\"acts_peak\": %lld, \"comm_peak\": %lld, \"peak\": %lld, \"device_used\": %lld}",
              r ? ",\n   " : "", r, (long long)q->params, (long long)q->grads, (long long)q->master,
              (long long)q->optim, (long long)ms, fb, pb, (long long)q->acts_peak, (long long)q->comm_peak,
              (long long)q->peak, (long long)q->device_used);
  }
  char fp[32], fg[32], fm[32], fo[32];
  fmt_bytes(fp, sizeof fp, f.params);
  fmt_bytes(fg, sizeof fg, f.grads);
  fmt_bytes(fm, sizeof fm, f.master);
  fmt_bytes(fo, sizeof fo, f.optim);
  sb_printf(&b, "],\n   \"formula\": {\"params\": %s, \"grads\": %s, \"master\": %s, \"optim\": %s, \"total\": %s, \"text\": \"%s\"}},\n",
            fp, fg, fm, fo, fb, formula_text(stage, t->wdt, opt_states(cfg)));
  /* Traffic: mean over ranks (exactly the formula for ring all-reduces of Ψ elements; single
   * ranks differ by a chunk when N does not divide a buffer), and every rank's own number. */
  double total = 0, by_op[CO_NOPS] = {0};
  for (int r = 0; r < N; r++)
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) {
        total += (double)all[r].sent[op];
        by_op[op] += (double)all[r].sent[op];
      }
  sb_printf(&b, " \"comm\": {\"bytes_per_step_per_rank\": %.6f, \"formula_bytes_per_step_per_rank\": %.6f,\n",
            total / N / steps, formula_comm_bytes(stage, psi, N, t->wdt));
  sb_printf(&b, "   \"by_op\": {\"all_reduce\": %.6f, \"reduce_scatter\": %.6f, \"all_gather\": %.6f, \"broadcast\": %.6f, "
                "\"reduce\": %.6f, \"send\": %.6f},\n",
            by_op[CO_ALL_REDUCE] / N / steps, by_op[CO_REDUCE_SCATTER] / N / steps, by_op[CO_ALL_GATHER] / N / steps,
            by_op[CO_BROADCAST] / N / steps, by_op[CO_REDUCE] / N / steps, by_op[CO_SEND] / N / steps);
  sb_printf(&b, "   \"per_rank\": [");
  for (int r = 0; r < N; r++) {
    int64_t s = 0, calls = 0;
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) {
        s += all[r].sent[op];
        calls += all[r].calls[op];
      }
    sb_printf(&b, "%s{\"rank\": %d, \"sent_bytes\": %lld, \"p2p_sent_bytes\": %lld, \"calls\": %lld, \"steps\": %d}",
              r ? ", " : "", r, (long long)s, (long long)all[r].p2p_sent, (long long)calls, steps);
  }
  sb_printf(&b, "]},\n");
  /* Extras: timing summary, overlap from the trace, the strategy's numbers. */
  double med = report_median_ms(run->steps, steps);
  sb_printf(&b, " \"teacher_entropy\": %.9g, \"skipped_steps\": %d, \"median_step_ms\": %.4f, \"samples_per_s\": %.2f, \"batch\": %lld, "
                "\"accum\": %d, \"seed\": %llu",
            run->teacher_entropy, run->skipped_steps, med, med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0, (long long)cfg->batch,
            cfg->accum, (unsigned long long)cfg->seed);
  sb_printf(&b, ", \"model\": {\"D\": %d, \"H\": %d, \"L\": %d, \"C\": %d, \"units\": %d}", t->model.D, t->model.H,
            t->model.L, t->model.C, t->model.n_units);
  if (cfg->chapter_flags & TRAIN_FLAG_VARIANT) sb_printf(&b, ", \"variant\": \"%s\"", cfg->variant);
  if (cfg->chapter_flags & TRAIN_FLAG_BUCKET) sb_printf(&b, ", \"bucket_mb\": %.9g", cfg->bucket_mb);
  if (cfg->chapter_flags & TRAIN_FLAG_PREFETCH) sb_printf(&b, ", \"prefetch\": %d", cfg->prefetch);
  for (int i = 0; i < run->nextras; i++) sb_printf(&b, ", \"%s\": %.9g", run->extras[i].key, run->extras[i].value);
  double cu = 0, hu = 0;
  overlap_sums(all, N, &cu, &hu);
  if (cu > 0)
    sb_printf(&b, ",\n \"overlap\": {\"comm_ms_per_step_per_rank\": %.4f, \"hidden_ms_per_step_per_rank\": %.4f, "
                  "\"hidden_fraction\": %.4f}",
              cu / N / steps / 1000.0, hu / N / steps / 1000.0, hu / cu);
  sb_printf(&b, "}\n");
  *len = b.len;
  return b.p;
}

void report_finish(trainer_t *t, const report_run_t *run) {
  rank_numbers_t mine = {.rank = t->rank};
  mine.params = ledger_peak(LEDGER_PARAMS);
  mine.grads = ledger_peak(LEDGER_GRADS);
  mine.master = ledger_peak(LEDGER_MASTER);
  mine.optim = ledger_peak(LEDGER_OPTIM);
  mine.acts_peak = ledger_peak(LEDGER_ACTS);
  mine.comm_peak = ledger_peak(LEDGER_COMM);
  mine.peak = ledger_total_peak();
  mine.device_used = (int64_t)dev_used_delta(t->dev);
  comm_wait_all(t->comm);
  comm_counters_t cc = comm_counters(t->comm);
  for (int op = 0; op < CO_NOPS; op++) {
    mine.sent[op] = cc.sent[op];
    mine.calls[op] = cc.calls[op];
    mine.busy_us[op] = cc.busy_us[op];
  }
  mine.p2p_sent = cc.p2p_sent;
  report_overlap(&mine.comm_us, &mine.hidden_us);

  char *blob = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(t->comm, &mine, (int64_t)sizeof mine, &blob, &sizes);
  if (t->rank != 0) return;
  const rank_numbers_t *all = (const rank_numbers_t *)blob;
  const train_cfg_t *cfg = t->cfg;
  if (!cfg->quiet) print_tables(t, run, all);
  else {
    double med = report_median_ms(run->steps, run->nsteps);
    printf("%s: final loss %.6f (teacher %.6f), median step %.3f ms, %.0f samples/s\n", t->strategy->name,
           run->steps[run->nsteps - 1].loss, run->teacher_entropy, med,
           med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0);
  }
  if (cfg->json) {
    int64_t len = 0;
    char *text = json_text(t, run, all, &len);
    report_write_atomic(cfg->json, text, len);
    free(text);
    if (!cfg->quiet) printf("results: %s\n", cfg->json);
  }
  fflush(stdout);
  free(blob);
  free(sizes);
}
