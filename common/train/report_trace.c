/* report_trace.c — the --trace file: every rank's trace events (common/base/trace.c records
 * them) gathered to rank 0 and written as one Chrome-trace JSON (report.h: report_write_trace). */
#include "report.h"  // report_write_trace
#include "comm.h"    // comm_ctl_gather, comm_rank, comm_world
#include "outfile.h" // outfile_open, outfile_close
#include "trace.h"   // trace_events, trace_path, trace_ev_t
#include <stdio.h>   // fprintf, fputc
#include <stdlib.h>  // free

/* JSON string body of s (quotes, backslashes and control characters escaped). */
static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
}

void report_write_trace(struct comm *c) {
  const char *path = trace_path();
  if (!path) return;
  int n = 0;
  const trace_ev_t *ev = trace_events(&n);
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(c, ev, (int64_t)n * (int64_t)sizeof(trace_ev_t), &all, &sizes);
  if (comm_rank(c) != 0) return;
  int N = comm_world(c);
  /* Times relative to the earliest event of any rank (all ranks share CLOCK_MONOTONIC). */
  double t_min = 0;
  int64_t total = 0;
  for (int r = 0; r < N; r++) total += sizes[r] / (int64_t)sizeof(trace_ev_t);
  const trace_ev_t *e = (const trace_ev_t *)all;
  for (int64_t i = 0; i < total; i++)
    if (i == 0 || e[i].t0 < t_min) t_min = e[i].t0;
  char tmp[4200];
  FILE *f = outfile_open("--trace", path, tmp, sizeof tmp);
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  for (int r = 0; r < N; r++)
    fprintf(f,
            "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n"
            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": "
            "\"compute\"}},\n"
            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": "
            "\"comm\"}},\n",
            r, r, r, r);
  int64_t at = 0;
  int first = 1;
  for (int r = 0; r < N; r++) {
    int64_t k = sizes[r] / (int64_t)sizeof(trace_ev_t);
    for (int64_t i = at; i < at + k; i++) {
      fprintf(f, "%s{\"name\": \"", first ? "" : ",\n");
      put_escaped(f, e[i].name);
      fprintf(f, "\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {%s", r,
              e[i].row, e[i].t0 - t_min, e[i].t1 - e[i].t0, e[i].args);
      if (e[i].seq > 0) fprintf(f, "%s\"seq\": %lld", e[i].args[0] ? ", " : "", (long long)e[i].seq);
      fprintf(f, "}}");
      first = 0;
    }
    at += k;
  }
  fprintf(f, "\n]}\n");
  outfile_close(f, "--trace", path, tmp); /* dies naming the file when any write failed */
  free(all);
  free(sizes);
}
