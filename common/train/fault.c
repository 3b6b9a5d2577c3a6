/* fault.c — --fault RANK:STEP:KIND, a testing aid (see fault.h; notes/reliability.md). */
#include "fault.h"  // fault_t, fault_kind_t
#include "check.h"  // die
#include "formula.h" // formula_t
#include "train.h"  // trainer_t
#include <errno.h>  // errno
#include <signal.h> // raise, SIGKILL
#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // abort, strtol
#include <string.h> // strcmp, strchr
#include <unistd.h> // _exit, sleep

static const char *const g_names[] = {"none", "exit", "abort", "kill", "hang",
                                      "nan",  "ckpt", "overflow", "node"};

const char *fault_kind_name(fault_kind_t k) {
  return k >= FAULT_NONE && k <= FAULT_NODE ? g_names[k] : "?";
}

/* A whole non-negative decimal number ending at `end` (':' or NUL); -1 when it is not one. */
static long whole(const char *s, char stop, const char **next) {
  if (*s < '0' || *s > '9') return -1;
  char *e;
  errno = 0;
  long v = strtol(s, &e, 10);
  if (errno || *e != stop || v > 1000000000L) return -1;
  *next = stop ? e + 1 : e;
  return v;
}

int fault_parse(const char *spec, int world, int steps, fault_t *f, char *why, size_t nwhy) {
  const char *p = spec ? spec : "", *q;
  long r = whole(p, ':', &q);
  long s = r >= 0 ? whole(q, ':', &p) : -1;
  int kind = FAULT_NONE;
  if (s >= 0)
    for (int k = FAULT_EXIT; k <= FAULT_NODE; k++)
      if (strcmp(p, g_names[k]) == 0) kind = k;
  if (r < 0 || s < 0 || kind == FAULT_NONE || r >= world || s >= steps) {
    snprintf(why, nwhy, "must be RANK:STEP:KIND with RANK in [0, %d], STEP in [0, %d], KIND one of "
             "exit|abort|kill|hang|nan|ckpt|overflow|node (a testing aid)", world - 1, steps - 1);
    return 1;
  }
  *f = (fault_t){.rank = (int)r, .step = (int)s, .kind = (fault_kind_t)kind};
  return 0;
}

fault_t fault_arm(const char *spec, int world, int steps) {
  fault_t f = {.kind = FAULT_NONE};
  if (!spec || !*spec) return f;
  char why[256];
  if (fault_parse(spec, world, steps, &f, why, sizeof why)) die("error: --fault %s: %s", spec, why);
  return f;
}

static int armed(const fault_t *f, fault_kind_t kind, int rank, int step) {
  return f && f->kind == kind && f->rank == rank && f->step == step; /* NULL: no fault armed */
}

static void announce(const fault_t *f, int rank, int step) {
  fprintf(stderr, "rank %d: injected fault %s at step %d (--fault, a testing aid)\n", rank,
          fault_kind_name(f->kind), step);
  fflush(stderr);
  fflush(stdout);
}

void fault_at_step(const fault_t *f, int rank, int step) {
  if (!f || f->rank != rank || f->step != step) return;
  switch (f->kind) {
  case FAULT_EXIT: announce(f, rank, step); _exit(1); /* no MPI_Finalize, no atexit: a crash */
  case FAULT_ABORT: announce(f, rank, step); abort();
  case FAULT_KILL:
  case FAULT_NODE: announce(f, rank, step); raise(SIGKILL); _exit(137);
  case FAULT_HANG:
    announce(f, rank, step);
    for (;;) sleep(3600); /* the others' collective deadline takes the job down */
  default: return;
  }
}

int fault_nan(const fault_t *f, int rank, int step) {
  if (!armed(f, FAULT_NAN, rank, step)) return 0;
  announce(f, rank, step);
  return 1;
}

int fault_overflow(const fault_t *f, int rank, int shared, int step) {
  if (!f || f->kind != FAULT_OVERFLOW || f->step != step || (!shared && f->rank != rank)) return 0;
  if (f->rank == rank) announce(f, rank, step);
  return 1;
}

void fault_in_save(const fault_t *f, int rank, int step) {
  if (!armed(f, FAULT_CKPT, rank, step)) return;
  announce(f, rank, step);
  _exit(1);
}

/* MemAvailable of /proc/meminfo in bytes (free + reclaimable), or -1 when unknown. */
static double host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  double kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  fclose(f);
  return kib < 0 ? -1 : kib * 1024.0;
}

void fault_check_host_memory(const trainer_t *t) {
  if (t->dev != DEV_CPU) return; /* on a GPU, cudaMalloc itself says no, cleanly */
  const model_t *m = &t->model;
  formula_t f; /* what the strategy says this rank holds: its units only (a pipeline stage's) */
  if (t->strategy->formula) t->strategy->formula(t, &f);
  /* none: a replica's, the most */
  else formula_stage(&f, 0, (double)m->numel, t->world, t->wdt, train_opt_states(t->cfg));
  /* on a CPU run both arenas are this host's */
  double states = f.params + f.grads + f.master + f.optim + f.host;
  double acts = (double)m->in_numel + m->rows + 2.0 * (double)model_max_y_numel(m); /* batch, dy ping-pong */
  for (int c = 0; c < t->n_chunks; c++) /* one micro-batch of this rank's units */
    for (int u = t->chunks[c].u0; u < t->chunks[c].u1; u++)
      acts += (double)m->units[u].y_numel + (double)m->units[u].saved_numel;
  acts *= 4.0 * (double)t->local_batch;
  const char *e = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int local = e && atoi(e) > 0 ? atoi(e) : 1;
  double avail = host_available_bytes();
  if (avail > 0 && (states + acts) * local > avail)
    die("out of memory on rank %d: model states + activations need %.1f MiB per rank (%.1f + %.1f), x %d "
        "rank%s on this "
        "host = %.1f MiB, but only %.1f MiB are available (smaller --hidden/--layers/--batch, a higher ZeRO "
        "stage, or more hosts)",
        t->rank, (states + acts) / 1048576.0, states / 1048576.0, acts / 1048576.0, local,
        local > 1 ? "s" : "", (states + acts) * local / 1048576.0, avail / 1048576.0);
}
