/* report_analysis.c — what the report measures beyond the counters (report.h): the median step,
 * the params fingerprint, and from the trace the communication time that ran under a backward,
 * counted from the moment the last rank joined each collective. */
#include "report_internal.h" // report_overlap_sums, report_last_joins, rank_numbers_t
#include "check.h"           // xmalloc
#include "comm.h"            // comm_ctl_all_reduce_f64, comm_ctl_gather, comm_ctl_broadcast
#include "trace.h"           // trace_events, trace_enabled
#include <stdio.h>           // snprintf
#include <stdlib.h>          // qsort, free
#include <string.h>          // strncmp, strstr, strcmp
#include <unistd.h>          // gethostname

void report_overlap_sums(const rank_numbers_t *all, int N, double *comm_us, double *hidden_us,
                         double *wait_us) {
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
    if (ev[i].row == TRACE_COMPUTE && strncmp(ev[i].name, "step ", 5) == 0 &&
        (t_first < 0 || ev[i].t0 < t_first))
      t_first = ev[i].t0;
  /* Backward events: one compute thread records them in time order and they never overlap each
   * other, so the hidden time of a communication event is the sum of its intersections with the
   * backward intervals that start before it ends (found by binary search). */
  int nb = 0;
  double *b0 = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double), "overlap"),
         *b1 = xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double), "overlap");
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
    if (joined_us && ev[i].comm == comm && ev[i].seq >= 1 && ev[i].seq <= njoined &&
        joined_us[ev[i].seq - 1] > a)
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
double *report_last_joins(comm_t *c, int64_t *n) {
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

