/* trace.c — a Chrome-trace timeline: pid = rank, tid 0 compute, tid 1 communication
 * (see trace.h; notes/02-ddp.md shows how to read one in Perfetto).
 * Events are kept in memory under a mutex (the comm thread records the comm row while the
 * compute thread records its own), gathered to rank 0 at the end and written as one file. */
#include "trace.h"   // trace_event, trace_begin, trace_end, trace_ev_t
#include "check.h"   // die, xmalloc
#include "comm.h"    // comm_ctl_gather, comm_rank, comm_world
#include "report.h"  // report_out_open, report_out_close
#include <pthread.h> // pthread_mutex_t
#include <stdio.h>   // snprintf, fopen
#include <stdlib.h>  // realloc, free
#include <string.h>  // strncpy, strlen
#include <time.h>    // clock_gettime, CLOCK_MONOTONIC

#define TRACE_DEPTH 32

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_enabled, g_rank;
static char *g_path;
static trace_ev_t *g_ev; /* [g_cap] */
static int g_n, g_cap;

/* The begin/end stack of the calling thread. */
static _Thread_local struct { char name[48]; double t0; } g_stack[TRACE_DEPTH];
static _Thread_local int g_depth;

double trace_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

void trace_init(int rank, const char *path) {
  pthread_mutex_lock(&g_mu);
  free(g_path);
  g_path = NULL;
  g_rank = rank;
  g_n = 0;
  g_enabled = path != NULL;
  if (path) {
    size_t n = strlen(path) + 1;
    g_path = xmalloc(n, "trace path");
    memcpy(g_path, path, n);
  }
  pthread_mutex_unlock(&g_mu);
}

int trace_enabled(void) { return g_enabled; }

static void record(trace_row_t row, const char *name, double t0_us, double t1_us, const char *args_json,
                   const void *comm, int64_t seq) {
  pthread_mutex_lock(&g_mu);
  if (g_n == g_cap) {
    int cap = g_cap ? 2 * g_cap : 4096;
    trace_ev_t *p = realloc(g_ev, (size_t)cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&g_mu);
      die("out of memory on rank %d: trace needs %.1f MiB", g_rank, cap * (double)sizeof *p / 1048576.0);
    }
    g_ev = p;
    g_cap = cap;
  }
  trace_ev_t *e = &g_ev[g_n++];
  e->t0 = t0_us;
  e->t1 = t1_us;
  e->row = (int)row;
  snprintf(e->name, sizeof e->name, "%s", name ? name : "?");
  snprintf(e->args, sizeof e->args, "%s", args_json ? args_json : "");
  e->comm = comm;
  e->seq = seq;
  pthread_mutex_unlock(&g_mu);
}

void trace_event(trace_row_t row, const char *name, double t0_us, double t1_us, const char *args_json) {
  if (g_enabled) record(row, name, t0_us, t1_us, args_json, NULL, 0);
}

void trace_comm_event(const struct comm *c, int64_t seq, const char *name, double t0_us, double t1_us,
                      const char *args_json) {
  if (g_enabled) record(TRACE_COMM, name, t0_us, t1_us, args_json, c, seq);
}

void trace_begin(const char *name) {
  if (!g_enabled) return;
  if (g_depth < TRACE_DEPTH) {
    snprintf(g_stack[g_depth].name, sizeof g_stack[0].name, "%s", name);
    g_stack[g_depth].t0 = trace_now_us();
  }
  g_depth++;
}

void trace_end(const char *args_json) {
  if (!g_enabled) return;
  if (g_depth <= 0) die_on_rank("trace_end without trace_begin");
  g_depth--;
  if (g_depth < TRACE_DEPTH) trace_event(TRACE_COMPUTE, g_stack[g_depth].name, g_stack[g_depth].t0, trace_now_us(), args_json);
}

const trace_ev_t *trace_events(int *n) {
  pthread_mutex_lock(&g_mu);
  *n = g_n;
  const trace_ev_t *p = g_ev;
  pthread_mutex_unlock(&g_mu);
  return p;
}

void trace_clear(void) {
  pthread_mutex_lock(&g_mu);
  g_n = 0;
  pthread_mutex_unlock(&g_mu);
}

/* JSON string body of s (quotes, backslashes and control characters escaped). */
static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
}

void trace_write(struct comm *c) {
  if (!g_enabled) return;
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
  FILE *f = report_out_open("--trace", g_path, tmp, sizeof tmp);
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  for (int r = 0; r < N; r++)
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"compute\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": \"comm\"}},\n",
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
  report_out_close(f, "--trace", g_path, tmp); /* dies naming the file when any write failed */
  free(all);
  free(sizes);
}
