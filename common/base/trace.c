/* trace.c — a Chrome-trace timeline: pid = rank, tid 0 compute, tid 1 communication
 * (see trace.h; notes/02-ddp.md shows how to read one in Perfetto).
 * Events are kept in memory under a mutex (the comm thread records the comm row while the
 * compute thread records its own); common/train/report_trace.c gathers them to rank 0 and writes
 * the file. */
#include "trace.h"   // trace_event, trace_begin, trace_end, trace_ev_t, trace_stack_t
#include "check.h"   // die, xmalloc
#include <pthread.h> // pthread_mutex_t
#include <stdio.h>   // snprintf, fopen
#include <stdlib.h>  // realloc, free
#include <string.h>  // strncpy, strlen
#include <time.h>    // clock_gettime, CLOCK_MONOTONIC


static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_enabled, g_rank;
static char *g_path;
static trace_ev_t *g_ev; /* [g_cap] */
static int g_n, g_cap;

/* The begin/end stack of the calling thread. */
static _Thread_local trace_stack_t g_open; /* the spans open on this thread */

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
  if (g_open.depth < TRACE_DEPTH) {
    snprintf(g_open.at[g_open.depth].name, sizeof g_open.at[0].name, "%s", name);
    g_open.at[g_open.depth].t0 = trace_now_us();
  }
  g_open.depth++;
}

void trace_end(const char *args_json) {
  if (!g_enabled) return;
  if (g_open.depth <= 0) die_on_rank("trace_end without trace_begin");
  g_open.depth--;
  if (g_open.depth < TRACE_DEPTH) {
    const char *name = g_open.at[g_open.depth].name;
    trace_event(TRACE_COMPUTE, name, g_open.at[g_open.depth].t0, trace_now_us(), args_json);
  }
}

void trace_swap_spans(trace_stack_t *other) {
  trace_stack_t keep = g_open;
  g_open = *other, *other = keep;
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

const char *trace_path(void) { return g_enabled ? g_path : NULL; }
