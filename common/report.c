/* report.c — the end-of-run tables and the --json results (see report.h; notes/02-ddp.md,
 * notes/design.md for the JSON schema). Every number is measured on its rank (ledger,
 * communicator counters, trace) and printed beside the formula of common/formula.h; rank 0
 * gathers them with comm_ctl_gather. Also the run's output files: checked before step 0
 * (report_check_outputs), written atomically, a failed write an error naming the file. */
#include "report.h"  // report_run_t, report_step_t, report_finish
#include "args.h"    // args_error
#include "check.h"   // die, xmalloc
#include "comm.h"    // comm_counters, comm_ctl_gather, comm_op_name
#include "cpuuse.h"  // cpuuse_now: threads and their CPU time
#include "formula.h" // formula_model_states, formula_comm_bytes, formula_text
#include "device.h"  // dev_used_delta
#include "ledger.h"  // ledger_peak, ledger_total_peak, ledger_peak_in (host arena)
#include "trace.h"   // trace_events, trace_enabled
#include <errno.h>   // errno, ENOENT
#include <math.h>    // isfinite
#include <stdarg.h>  // va_list
#include <stdio.h>   // printf, fopen, rename
#include <stdlib.h>  // qsort, free
#include <string.h>  // strncmp, memcpy, strerror
#include <sys/stat.h> // stat, S_ISDIR, S_ISREG
#include <unistd.h>  // getpid, access

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
  double comm_us, hidden_us, wait_us; /* from the trace (report_overlap_joined); 0 when the trace is off */
  int64_t tp_rank, tp_calls, tp_sent;  /* --tp: position in the TP group, its all-reduces (own counters) */
  int64_t tp_formula_calls, tp_formula_bytes; /* ... and the model transform's formula (its traffic hook) */
  int64_t pa_calls, pa_sent, pa_formula_calls, pa_formula_bytes; /* --pa: the TP group's all-gathers, and formula */
  cpuuse_t cpu; /* threads and their CPU seconds at the end of the run (--json "cpu") */
} rank_numbers_t;

/* Rows of the per-rank tables: every rank of the job (with --tp the report gathers over the
 * world, so the T ranks of each data-parallel position all appear), else the strategy's ranks. */
static int nrows(const trainer_t *t) { return t->tp_comm ? comm_world(t->world_comm) : t->world; }

/* --tp: the TP group's traffic beside its formula, per rank (printed after the DP traffic). */
static void print_tp(const trainer_t *t, const rank_numbers_t *all, int steps) {
  if (!t->tp_comm) return;
  int NR = nrows(t), T = comm_world(t->tp_comm);
  printf("\ntensor-parallel traffic per step (TP groups of %d, their own counters; not in the line above):\n", T);
  printf("%-6s %8s %12s %14s %14s %16s\n", "rank", "tp rank", "all-reduces", "formula", "bytes sent", "formula");
  for (int r = 0; r < NR; r++)
    printf("%-6d %8lld %12.2f %14lld %14.1f %16lld\n", r, (long long)all[r].tp_rank, (double)all[r].tp_calls / steps,
           (long long)all[r].tp_formula_calls, (double)all[r].tp_sent / steps, (long long)all[r].tp_formula_bytes);
  printf("formula: %s\n", t->cfg->transform->traffic_text);
  if (!t->cfg->pa) return;
  printf("%-6s %8s %12s %14s %14s %16s   (--pa: partitioned checkpoints)\n", "rank", "tp rank", "all-gathers", "formula",
         "bytes sent", "formula");
  for (int r = 0; r < NR; r++)
    printf("%-6d %8lld %12.2f %14lld %14.1f %16lld\n", r, (long long)all[r].tp_rank, (double)all[r].pa_calls / steps,
           (long long)all[r].pa_formula_calls, (double)all[r].pa_sent / steps, (long long)all[r].pa_formula_bytes);
  printf("formula: per micro-batch, one all-gather of each partitioned unit output (T slices of ceil(b x y_numel / T) "
         "fp32) before the backward that reads it, (T-1)/T of its bytes from each rank\n");
}

/* ---- small helpers ----------------------------------------------------------------------- */

/* Communication time (from the last rank's arrival), the part of it under a backward, and the
 * time spent waiting for late peers, summed over the ranks that traced. */
static void overlap_sums(const rank_numbers_t *all, int N, double *comm_us, double *hidden_us, double *wait_us) {
  for (int r = 0; r < N; r++)
    if (all[r].comm_us > 0 || all[r].wait_us > 0) {
      *comm_us += all[r].comm_us;
      *hidden_us += all[r].hidden_us;
      *wait_us += all[r].wait_us;
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

double report_overlap_joined(const void *comm, const double *joined_us, int64_t njoined, double *comm_us,
                             double *hidden_us, double *wait_us) {
  *comm_us = *hidden_us = *wait_us = 0;
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
    /* The collective is busy from the moment its last rank joined: before that this rank only
     * waits for a late peer, which no backward "hides". */
    double a = ev[i].t0, b = ev[i].t1;
    if (joined_us && ev[i].comm == comm && ev[i].seq >= 1 && ev[i].seq <= njoined && joined_us[ev[i].seq - 1] > a)
      a = joined_us[ev[i].seq - 1] < b ? joined_us[ev[i].seq - 1] : b;
    *wait_us += a - ev[i].t0;
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

double report_overlap(double *comm_us, double *hidden_us) {
  double wait_us;
  return report_overlap_joined(NULL, NULL, 0, comm_us, hidden_us, &wait_us);
}

/* Collective over c (every rank, trace on or off alike): the time the last rank of c started
 * each of c's operations, indexed by sequence number − 1 (*n entries; malloc'd, NULL when the
 * trace is off). Ranks share CLOCK_MONOTONIC on one host; across hosts the clocks are not
 * aligned and the wait is not measured (each collective counts from this rank's own start). */
static double *last_joins(comm_t *c, int64_t *n) {
  *n = 0;
  if (!trace_enabled()) return NULL;
  int nev = 0;
  const trace_ev_t *ev = trace_events(&nev);
  double mx = 0;
  for (int i = 0; i < nev; i++)
    if (ev[i].comm == c && (double)ev[i].seq > mx) mx = (double)ev[i].seq;
  comm_ctl_all_reduce_f64(c, &mx, 1, REDOP_MAX);
  int64_t len = (int64_t)mx;
  if (len <= 0 || len > 0x7fffffff) return NULL;
  double *j = xmalloc((size_t)len * sizeof(double), "overlap: arrival times");
  for (int64_t k = 0; k < len; k++) j[k] = -1e300; /* this rank ran no such operation */
  for (int i = 0; i < nev; i++)
    if (ev[i].comm == c && ev[i].seq >= 1 && ev[i].seq <= len) j[ev[i].seq - 1] = ev[i].t0;
  comm_ctl_all_reduce_f64(c, j, (int)len, REDOP_MAX);
  char host[256] = "", *all = NULL;
  int64_t *sizes = NULL;
  gethostname(host, sizeof host - 1);
  comm_ctl_gather(c, host, (int64_t)sizeof host, &all, &sizes);
  int one_host = 1;
  if (all)
    for (int r = 1; r < comm_world(c); r++) one_host &= strcmp(all, all + r * (int64_t)sizeof host) == 0;
  free(all);
  free(sizes);
  comm_ctl_broadcast(c, &one_host, (int64_t)sizeof one_host, 0);
  if (!one_host) {
    free(j);
    return NULL;
  }
  *n = len;
  return j;
}

/* ---- output files -------------------------------------------------------------------------- */

/* "dir of path" into dst ("." when path has no slash, "/" for a file at the root). */
static void dir_of(const char *path, char *dst, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dst, n, ".");
  else if (slash == path) snprintf(dst, n, "/");
  else snprintf(dst, n, "%.*s", (int)(slash - path), path);
}

/* Why path cannot be written (0 when it can): is_dir 1 for a directory we create or fill (--ckpt),
 * 0 for a file written as a temp file beside it and renamed, or in place when it is not a regular
 * file (/dev/null). */
static int out_problem(const char *path, int is_dir, char *why, size_t n) {
  struct stat st;
  char dir[4096];
  if (stat(path, &st) == 0) {
    if (is_dir) {
      if (!S_ISDIR(st.st_mode)) return snprintf(why, n, "must be a directory (it is a file)"), 1;
      if (access(path, W_OK | X_OK) != 0) return snprintf(why, n, "must be a writable directory (%s)", strerror(errno)), 1;
      return 0;
    }
    if (S_ISDIR(st.st_mode)) return snprintf(why, n, "must be a file path (it is a directory)"), 1;
    if (!S_ISREG(st.st_mode)) { /* a device or a pipe: written in place */
      if (access(path, W_OK) != 0) return snprintf(why, n, "must be writable (%s)", strerror(errno)), 1;
      return 0;
    }
  } else if (errno != ENOENT) {
    return snprintf(why, n, "must be a writable path (%s)", strerror(errno)), 1;
  }
  dir_of(path, dir, sizeof dir); /* a new file, or a regular file replaced by a rename: its directory */
  if (stat(dir, &st) != 0)
    return snprintf(why, n, "must be in an existing directory (%s: %s)", dir, strerror(errno)), 1;
  if (!S_ISDIR(st.st_mode)) return snprintf(why, n, "must be in a directory (%s is not one)", dir), 1;
  if (access(dir, W_OK | X_OK) != 0)
    return snprintf(why, n, "must be in a writable directory (%s: %s)", dir, strerror(errno)), 1;
  return 0;
}

int report_check_outputs(const train_cfg_t *cfg) {
  const struct { const char *flag, *path; int is_dir; } outs[] = {
      {"--json", cfg->json, 0}, {"--trace", cfg->trace, 0}, {"--save-params", cfg->save_params, 0}, {"--ckpt", cfg->ckpt, 1}};
  char why[4200];
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
    if (outs[i].path && out_problem(outs[i].path, outs[i].is_dir, why, sizeof why))
      return args_error(outs[i].flag, outs[i].path, "%s", why);
  return 0;
}

FILE *report_out_open(const char *what, const char *path, char *tmp, size_t ntmp) {
  struct stat st;
  tmp[0] = 0;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    FILE *f = fopen(path, "wb"); /* /dev/null, a pipe: in place (a rename would replace the node) */
    if (!f) die("error: %s %s: cannot open it for writing: %s", what, path, strerror(errno));
    return f;
  }
  snprintf(tmp, ntmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) die("error: %s %s: cannot write it: %s (check the directory exists and is writable)", what, path, strerror(errno));
  return f;
}

void report_out_close(FILE *f, const char *what, const char *path, const char *tmp) {
  int bad = ferror(f), err = 0;
  if (fflush(f) != 0) bad = 1;
  if (bad) err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (!bad && tmp[0] && rename(tmp, path) != 0) bad = 1, err = errno;
  if (bad) {
    if (tmp[0]) remove(tmp);
    die("error: %s %s: writing it failed: %s", what, path, err ? strerror(err) : "I/O error");
  }
}

void report_write_output(const char *what, const char *path, const char *text, int64_t nbytes) {
  char tmp[4200];
  FILE *f = report_out_open(what, path, tmp, sizeof tmp);
  if (nbytes > 0) fwrite(text, 1, (size_t)nbytes, f); /* a short write sets the error flag */
  report_out_close(f, what, path, tmp);
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
static const char *prec_name(const train_cfg_t *c) { return dtype_precision(c->wdt); }

/* ---- the report ---------------------------------------------------------------------------- */

static int is_gpt(const trainer_t *t) { return strcmp(t->model.fns->name, "gpt") == 0; }

/* 1 when some rank holds bytes in the host arena (an offloading strategy, notes/08-offload.md). */
static int any_host(const rank_numbers_t *all, int N) {
  for (int r = 0; r < N; r++)
    if (all[r].host_peak > 0) return 1;
  return 0;
}

/* The model states the device arena should hold: the stage's formula, less master and optimizer
 * states when they were offloaded to the host (then the host table shows them). */
static double device_states_formula(const rank_numbers_t *all, int N, const mem_formula_t *f) {
  return any_host(all, N) ? f->params + f->grads : f->total;
}

/* The host arena per rank, beside the stage formula's master + optimizer states (what an
 * offloading strategy moves there); the table above is then the device arena alone. */
static void print_host_table(const trainer_t *t, const rank_numbers_t *all, const mem_formula_t *f) {
  int N = t->world;
  if (!any_host(all, N)) return;
  char fh[32], fd[32];
  fmt_bytes(fh, sizeof fh, f->master + f->optim);
  fmt_bytes(fd, sizeof fd, f->params + f->grads);
  printf("\nhost memory per rank, bytes (offloaded: the table above is the device; its master + optim formula\n"
         "moved here: device model states %s, host %s; fp32 keeps a host copy of its own fp32 piece as master)\n",
         fd, fh);
  printf("%-6s %12s %12s %12s %12s %14s %14s %12s %12s\n", "rank", "params", "grads", "master", "optim",
         "states", "formula", "comm peak", "host peak");
  for (int r = 0; r < N; r++) {
    const int64_t *h = all[r].host;
    printf("%-6d %12lld %12lld %12lld %12lld %14lld %14s %12lld %12lld\n", r, (long long)h[LEDGER_PARAMS],
           (long long)h[LEDGER_GRADS], (long long)h[LEDGER_MASTER], (long long)h[LEDGER_OPTIM],
           (long long)(h[LEDGER_MASTER] + h[LEDGER_OPTIM]), fh, (long long)h[LEDGER_COMM], (long long)all[r].host_peak);
  }
}

static void print_tables(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all) {
  const train_cfg_t *cfg = t->cfg;
  int N = t->world, NR = nrows(t), stage = t->strategy->stage, steps = run->nsteps;
  double psi = (double)t->model.numel;
  mem_formula_t f = formula_model_states(stage, psi, N, t->wdt, opt_states(cfg));
  double med = report_median_ms(run->steps, steps);
  if (is_gpt(t)) { /* --model gpt: no teacher; a uniform guess over the vocabulary scores ln V */
    printf("\nloss: %.6f at the start -> %.6f at the end (uniform over %d bytes: %.6f)\n", run->steps[0].loss,
           run->steps[steps - 1].loss, t->model.classes, log((double)t->model.classes));
    for (int i = 0; i < run->nevals; i++)
      printf("validation loss after step %d: %.6f\n", run->evals[i].step, run->evals[i].val_loss);
    printf("time: median step %.3f ms, %.0f tokens/s (global batch %lld x %d tokens)\n", med,
           med > 0 ? (double)cfg->batch * t->model.rows / (med / 1000.0) : 0.0, (long long)cfg->batch, t->model.rows);
  } else {
    printf("\nloss: %.6f at the start -> %.6f at the end (teacher's entropy %.6f: the best achievable)\n",
           run->steps[0].loss, run->steps[steps - 1].loss, run->teacher_entropy);
    printf("time: median step %.3f ms, %.0f samples/s (global batch %lld)\n", med,
           med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0, (long long)cfg->batch);
  }
  for (int i = 0; i < run->nextras; i++) /* %.15g: byte counts print exact */
    printf("%s: %.15g\n", run->extras[i].key, run->extras[i].value);

  int own = t->strategy->own_formulas; /* per-stage formulas, printed by the strategy above */
  char devtext[64]; /* offloaded: the device keeps params and grads only (k = 0 bytes of optimizer per param) */
  double wb = (double)dtype_size(t->wdt);
  const char *mtext = own ? "per rank, the strategy's formula above"
                      : any_host(all, N) ? strcat(formula_text_k(devtext, 40, stage, wb, wb, 0), " on the device")
                                         : formula_text(stage, t->wdt, opt_states(cfg));
  printf("\nmemory per rank, bytes (stage %d, %s, %s: model states = %s; measured includes padding)\n", stage,
         prec_name(cfg), opt_name(cfg), mtext);
  printf("%-6s %12s %12s %12s %12s %14s %14s %10s %12s %12s %12s\n", "rank", "params", "grads", "master", "optim",
         "model states", "formula", "padding", "acts peak", "comm peak", "peak");
  for (int r = 0; r < NR; r++) {
    const rank_numbers_t *q = &all[r];
    int64_t ms = q->params + q->grads + q->master + q->optim;
    char fb[32], pb[32];
    fmt_bytes(fb, sizeof fb, device_states_formula(all, N, &f));
    fmt_bytes(pb, sizeof pb, (double)ms - device_states_formula(all, N, &f));
    if (own) snprintf(fb, sizeof fb, "(above)"), snprintf(pb, sizeof pb, "-");
    printf("%-6d %12lld %12lld %12lld %12lld %14lld %14s %10s %12lld %12lld %12lld\n", r, (long long)q->params,
           (long long)q->grads, (long long)q->master, (long long)q->optim, (long long)ms, fb, pb,
           (long long)q->acts_peak, (long long)q->comm_peak, (long long)q->peak);
  }
  char fp[32], fg[32], fm[32], fo[32];
  fmt_bytes(fp, sizeof fp, f.params);
  fmt_bytes(fg, sizeof fg, f.grads);
  fmt_bytes(fm, sizeof fm, f.master);
  fmt_bytes(fo, sizeof fo, f.optim);
  if (any_host(all, N)) snprintf(fm, sizeof fm, "(host)"), snprintf(fo, sizeof fo, "(host)"); /* offloaded: below */
  if (!own) printf("%-6s %12s %12s %12s %12s\n", "formula", fp, fg, fm, fo);
  if (t->dev == DEV_CUDA)
    for (int r = 0; r < NR; r++)
      printf("rank %d on the GPU: ledger peak %lld bytes, driver-reported used-bytes delta %lld (cuBLAS/NCCL "
             "workspaces and the allocator's rounding are outside the ledger)\n",
             r, (long long)all[r].peak, (long long)all[r].device_used);
  print_host_table(t, all, &f);

  double fc = formula_comm_bytes(stage, psi, N, t->wdt), total = 0;
  for (int r = 0; r < NR; r++)
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) total += (double)all[r].sent[op];
  if (own)
    printf("\ncommunication per step per rank: %.1f bytes sent (mean over ranks); formula: per rank, the strategy's above\n",
           total / NR / steps);
  else
    printf("\ncommunication per step per rank: %.1f bytes sent (mean over ranks); formula %.1f (stage %d: %s(N-1)/N x psi x %d B)\n",
           total / NR / steps, fc, stage, stage >= 3 ? "3" : "2", (int)dtype_size(t->wdt));
  print_tp(t, all, steps);
  printf("%-16s %12s %16s %14s\n", "op (rank 0)", "calls/step", "bytes/step", "busy ms/step");
  for (int op = 0; op < CO_NOPS; op++) {
    if (all[0].calls[op] == 0) continue;
    printf("%-16s %12.2f %16.1f %14.3f\n", comm_op_name((comm_op_t)op), (double)all[0].calls[op] / steps,
           (double)all[0].sent[op] / steps, all[0].busy_us[op] / 1000.0 / steps);
  }
  double cu = 0, hu = 0, wu = 0;
  overlap_sums(all, N, &cu, &hu, &wu);
  if (cu > 0 || wu > 0)
    printf("overlap: %.1f%% of communication time ran under a backward (from the trace; %.3f ms per step per rank, "
           "counted from the last rank's arrival; %.3f ms more waiting for late ranks). Whether overlap paid "
           "off is the step time against the variant without it: notes/benchmarks.md\n",
           cu > 0 ? 100.0 * hu / cu : 0.0, cu / N / steps / 1000.0, wu / N / steps / 1000.0);
}

static char *json_text(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all, int64_t *len) {
  const train_cfg_t *cfg = t->cfg;
  int N = t->world, NR = nrows(t), stage = t->strategy->stage, steps = run->nsteps;
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
  report_fingerprint(run->full_params, run->full_numel ? run->full_numel : t->model.numel, fpr, sizeof fpr);
  sb_printf(&b, "],\n \"final_loss\": %s, \"params_fingerprint\": \"%s\",\n",
            jnum(num, sizeof num, run->steps[steps - 1].loss), fpr);
  char fb[32];
  int own = t->strategy->own_formulas; /* per-stage formulas (the strategy's extras): none here */
  fmt_bytes(fb, sizeof fb, device_states_formula(all, N, &f));
  if (own) snprintf(fb, sizeof fb, "null");
  sb_printf(&b, " \"memory\": {\"per_rank\": [");
  for (int r = 0; r < NR; r++) {
    const rank_numbers_t *q = &all[r];
    int64_t ms = q->params + q->grads + q->master + q->optim;
    char pb[32];
    fmt_bytes(pb, sizeof pb, (double)ms - device_states_formula(all, N, &f));
    if (own) snprintf(pb, sizeof pb, "null");
    sb_printf(&b, "%s{\"rank\": %d, \"params\": %lld, \"grads\": %lld, \"master\": %lld, \"optim\": %lld, "
                  "\"model_states\": %lld, \"formula_model_states\": %s, \"padding_bytes\": %s, "
                  "\"acts_peak\": %lld, \"comm_peak\": %lld, \"peak\": %lld, \"device_used\": %lld",
              r ? ",\n   " : "", r, (long long)q->params, (long long)q->grads, (long long)q->master,
              (long long)q->optim, (long long)ms, fb, pb, (long long)q->acts_peak, (long long)q->comm_peak,
              (long long)q->peak, (long long)q->device_used);
    /* the host arena (offload): every rank, zeros when nothing is offloaded */
    const int64_t *h = q->host;
    sb_printf(&b, ", \"host\": {\"params\": %lld, \"grads\": %lld, \"master\": %lld, \"optim\": %lld, "
                  "\"acts\": %lld, \"comm\": %lld, \"peak\": %lld}}",
              (long long)h[LEDGER_PARAMS], (long long)h[LEDGER_GRADS], (long long)h[LEDGER_MASTER],
              (long long)h[LEDGER_OPTIM], (long long)h[LEDGER_ACTS], (long long)h[LEDGER_COMM], (long long)q->host_peak);
  }
  char fp[32], fg[32], fm[32], fo[32];
  fmt_bytes(fp, sizeof fp, f.params);
  fmt_bytes(fg, sizeof fg, f.grads);
  fmt_bytes(fm, sizeof fm, f.master);
  fmt_bytes(fo, sizeof fo, f.optim);
  if (own)
    sb_printf(&b, "],\n   \"formula\": null},\n");
  else
    sb_printf(&b, "],\n   \"formula\": {\"params\": %s, \"grads\": %s, \"master\": %s, \"optim\": %s, \"total\": %s, \"text\": \"%s\"}},\n",
              fp, fg, fm, fo, fb, formula_text(stage, t->wdt, opt_states(cfg)));
  /* Traffic: mean over ranks (exactly the formula for ring all-reduces of Ψ elements; single
   * ranks differ by a chunk when N does not divide a buffer), and every rank's own number. */
  double total = 0, by_op[CO_NOPS] = {0};
  for (int r = 0; r < NR; r++)
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) {
        total += (double)all[r].sent[op];
        by_op[op] += (double)all[r].sent[op];
      }
  if (own)
    sb_printf(&b, " \"comm\": {\"bytes_per_step_per_rank\": %.6f, \"formula_bytes_per_step_per_rank\": null,\n", total / NR / steps);
  else
    sb_printf(&b, " \"comm\": {\"bytes_per_step_per_rank\": %.6f, \"formula_bytes_per_step_per_rank\": %.6f,\n",
              total / NR / steps, formula_comm_bytes(stage, psi, N, t->wdt));
  sb_printf(&b, "   \"by_op\": {\"all_reduce\": %.6f, \"reduce_scatter\": %.6f, \"all_gather\": %.6f, \"broadcast\": %.6f, "
                "\"reduce\": %.6f, \"send\": %.6f},\n",
            by_op[CO_ALL_REDUCE] / NR / steps, by_op[CO_REDUCE_SCATTER] / NR / steps, by_op[CO_ALL_GATHER] / NR / steps,
            by_op[CO_BROADCAST] / NR / steps, by_op[CO_REDUCE] / NR / steps, by_op[CO_SEND] / NR / steps);
  sb_printf(&b, "   \"per_rank\": [");
  for (int r = 0; r < NR; r++) {
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
  if (t->tp_comm) { /* --tp: the TP groups' all-reduces, apart from the DP traffic above */
    sb_printf(&b, " \"tp\": {\"T\": %d, \"dp\": %d, \"params_full\": %lld, \"per_rank\": [", comm_world(t->tp_comm), N,
              (long long)(run->full_numel ? run->full_numel : t->model.numel));
    for (int r = 0; r < NR; r++)
      sb_printf(&b, "%s{\"rank\": %d, \"tp_rank\": %lld, \"calls_per_step\": %.6f, \"formula_calls_per_step\": %lld, "
                    "\"bytes_per_step\": %.6f, \"formula_bytes_per_step\": %lld, \"pa_gathers_per_step\": %.6f, "
                    "\"formula_pa_gathers_per_step\": %lld, \"pa_bytes_per_step\": %.6f, \"formula_pa_bytes_per_step\": %lld}",
                r ? ",\n   " : "", r, (long long)all[r].tp_rank, (double)all[r].tp_calls / steps,
                (long long)all[r].tp_formula_calls, (double)all[r].tp_sent / steps, (long long)all[r].tp_formula_bytes,
                (double)all[r].pa_calls / steps, (long long)all[r].pa_formula_calls, (double)all[r].pa_sent / steps,
                (long long)all[r].pa_formula_bytes);
    sb_printf(&b, "]},\n");
  }
  /* Extras: timing summary, overlap from the trace, the strategy's numbers. */
  double med = report_median_ms(run->steps, steps);
  if (isnan(run->teacher_entropy)) sb_printf(&b, " \"teacher_entropy\": null,"); /* text: no teacher */
  else sb_printf(&b, " \"teacher_entropy\": %.9g,", run->teacher_entropy);
  sb_printf(&b, " \"skipped_steps\": %d, \"median_step_ms\": %.4f, \"samples_per_s\": %.2f, \"batch\": %lld, "
                "\"accum\": %d, \"seed\": %llu",
            run->skipped_steps, med, med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0, (long long)cfg->batch,
            cfg->accum, (unsigned long long)cfg->seed);
  if (cfg->wdt == DT_F16) { /* the loss scale each step's backward used (notes/fp16.md) */
    sb_printf(&b, ", \"loss_scales\": [");
    for (int i = 0; i < steps; i++) sb_printf(&b, "%s%.17g", i ? ", " : "", run->steps[i].loss_scale);
    sb_printf(&b, "]");
  }
  if (is_gpt(t)) {
    const gpt_shape_t *g = &t->model.gpt;
    sb_printf(&b, ", \"model\": {\"kind\": \"gpt\", \"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"seq_len\": %d, "
                  "\"vocab\": %d, \"units\": %d}, \"tokens_per_s\": %.2f",
              g->n_layer, g->n_head, g->n_embd, g->seq_len, g->vocab, t->model.n_units,
              med > 0 ? (double)cfg->batch * t->model.rows / (med / 1000.0) : 0.0);
    sb_printf(&b, ", \"evals\": [");
    for (int i = 0; i < run->nevals; i++)
      sb_printf(&b, "%s{\"step\": %d, \"val_loss\": %.9g}", i ? ", " : "", run->evals[i].step, run->evals[i].val_loss);
    sb_printf(&b, "]");
    if (run->nevals > 0) sb_printf(&b, ", \"final_val_loss\": %.9g", run->evals[run->nevals - 1].val_loss);
  } else
    sb_printf(&b, ", \"model\": {\"kind\": \"mlp\", \"D\": %d, \"H\": %d, \"L\": %d, \"C\": %d, \"units\": %d}", t->model.D,
              t->model.H, t->model.L, t->model.C, t->model.n_units);
  if (cfg->chapter_flags & TRAIN_FLAG_VARIANT) sb_printf(&b, ", \"variant\": \"%s\"", cfg->variant);
  if (cfg->chapter_flags & TRAIN_FLAG_BUCKET) sb_printf(&b, ", \"bucket_mb\": %.9g", cfg->bucket_mb);
  if (cfg->chapter_flags & TRAIN_FLAG_PREFETCH) sb_printf(&b, ", \"prefetch\": %d", cfg->prefetch);
  for (int i = 0; i < run->nextras; i++) sb_printf(&b, ", \"%s\": %.15g", run->extras[i].key, run->extras[i].value);
  double cu = 0, hu = 0, wu = 0;
  overlap_sums(all, N, &cu, &hu, &wu);
  if (cu > 0 || wu > 0)
    sb_printf(&b, ",\n \"overlap\": {\"comm_ms_per_step_per_rank\": %.4f, \"hidden_ms_per_step_per_rank\": %.4f, "
                  "\"hidden_fraction\": %.4f, \"wait_ms_per_step_per_rank\": %.4f, \"measured_from\": \"last_join\"}",
              cu / N / steps / 1000.0, hu / N / steps / 1000.0, cu > 0 ? hu / cu : 0.0, wu / N / steps / 1000.0);
  /* where each rank's CPU went: a thread that polls while it waits shows as CPU beside no work */
  sb_printf(&b, ",\n \"cpu\": {\"per_rank\": [");
  for (int r = 0; r < NR; r++) {
    const cpuuse_t *u = &all[r].cpu;
    sb_printf(&b, "%s{\"rank\": %d, \"threads\": %d, \"wall_s\": %.3f, \"main_cpu_s\": %.3f, "
                  "\"main_idle_s\": %.3f, \"other_threads_cpu_s\": %.3f, \"busiest_other_thread_cpu_s\": %.3f}",
              r ? ",\n   " : "", r, u->nthreads, u->wall_s, u->main_cpu_s, u->wall_s - u->main_cpu_s, u->other_cpu_s,
              u->max_other_cpu_s);
  }
  sb_printf(&b, "], \"source\": \"/proc/self/task/*/stat utime+stime, since process start\"}");
  sb_printf(&b, "}\n");
  *len = b.len;
  return b.p;
}

void report_finish(trainer_t *t, const report_run_t *run) {
  comm_t *rc = t->tp_comm ? t->world_comm : t->comm; /* --tp: every rank of the job appears */
  rank_numbers_t mine = {.rank = comm_rank(rc)};
  if (t->tp_comm) {
    comm_wait_all(t->tp_comm);
    comm_counters_t tc = comm_counters(t->tp_comm);
    mine.tp_rank = comm_rank(t->tp_comm);
    mine.tp_calls = tc.calls[CO_ALL_REDUCE];
    mine.tp_sent = tc.sent[CO_ALL_REDUCE];
    t->cfg->transform->traffic(t, &mine.tp_formula_calls, &mine.tp_formula_bytes); /* the transform's formula */
    mine.pa_calls = tc.calls[CO_ALL_GATHER]; /* --pa's gathers: the TP group's only all-gathers */
    mine.pa_sent = tc.sent[CO_ALL_GATHER];
    if (t->cfg->transform->pa_traffic) t->cfg->transform->pa_traffic(t, &mine.pa_formula_calls, &mine.pa_formula_bytes);
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
  int64_t njoined = 0;
  double *joined = last_joins(t->comm, &njoined); /* collective: every rank, trace on or off */
  report_overlap_joined(t->comm, joined, njoined, &mine.comm_us, &mine.hidden_us, &mine.wait_us);
  free(joined);

  mine.cpu = cpuuse_now();
  char *blob = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(rc, &mine, (int64_t)sizeof mine, &blob, &sizes);
  if (comm_rank(rc) != 0) return;
  const rank_numbers_t *all = (const rank_numbers_t *)blob;
  const train_cfg_t *cfg = t->cfg;
  if (!cfg->quiet) print_tables(t, run, all);
  else {
    double med = report_median_ms(run->steps, run->nsteps);
    if (is_gpt(t)) {
      char val[64] = "no validation run"; /* --eval-every 0: no number to print */
      if (run->nevals) snprintf(val, sizeof val, "validation %.6f", run->evals[run->nevals - 1].val_loss);
      printf("%s: final loss %.6f (uniform %.4f), %s, median step %.3f ms, %.0f tokens/s\n", t->strategy->name,
             run->steps[run->nsteps - 1].loss, log((double)t->model.classes), val, med,
             med > 0 ? (double)cfg->batch * t->model.rows / (med / 1000.0) : 0.0);
    } else
      printf("%s: final loss %.6f (teacher %.6f), median step %.3f ms, %.0f samples/s\n", t->strategy->name,
             run->steps[run->nsteps - 1].loss, run->teacher_entropy, med,
             med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0);
  }
  if (cfg->json) {
    int64_t len = 0;
    char *text = json_text(t, run, all, &len);
    report_write_output("--json", cfg->json, text, len);
    free(text);
    if (!cfg->quiet) printf("results: %s\n", cfg->json);
  }
  fflush(stdout);
  free(blob);
  free(sizes);
}
