/* ledger.c — per-rank memory ledger: live and peak bytes by arena and category (see ledger.h).
 * Notes: notes/00-memory.md; the two arenas: notes/08-offload.md. One ledger per process
 * (= per rank). A mutex guards it because the communication thread allocates its scratch while
 * the compute thread allocates acts. */
#include "ledger.h"  // ledger_cat_t, ledger_add, ...
#include "args.h"    // args_env_rank
#include "check.h"   // die
#include <pthread.h> // pthread_mutex_t
#include <stdint.h>  // int64_t
#include <stdio.h>   // snprintf

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_rank = -1; /* set by ledger_init; before it, the launcher's rank */
static int64_t g_limit = 0;                         /* bytes of the device arena; 0 = no budget */
static int64_t g_live[LEDGER_NARENA][LEDGER_NCAT];  /* bytes held now, per arena and category */
static int64_t g_peak[LEDGER_NARENA][LEDGER_NCAT];  /* highest g_live[a][c] since init/reset */
static int64_t g_total_live[LEDGER_NARENA], g_total_peak[LEDGER_NARENA];
static FILE *g_trace; /* --alloc-trace: the alloc/free sequence, or NULL */
static int64_t g_last_id; /* the id ledger_add gave last (never reset: ids stay unique per process) */

static const char *const g_names[LEDGER_NCAT] = {"params", "grads", "master", "optim", "acts", "comm",
                                                  "ckpt"};

const char *ledger_cat_name(ledger_cat_t cat) {
  return (cat >= 0 && cat < LEDGER_NCAT) ? g_names[cat] : "unknown";
}
const char *ledger_arena_name(ledger_arena_t a) { return a == LEDGER_HOST ? "host" : "device"; }

static int msg_rank(void) { return g_rank >= 0 ? g_rank : args_env_rank(); }

void ledger_init(int rank, int64_t limit_bytes) {
  pthread_mutex_lock(&g_mu);
  g_rank = rank;
  g_limit = limit_bytes > 0 ? limit_bytes : 0;
  for (int a = 0; a < LEDGER_NARENA; a++) {
    for (int c = 0; c < LEDGER_NCAT; c++) g_live[a][c] = g_peak[a][c] = 0;
    g_total_live[a] = g_total_peak[a] = 0;
  }
  pthread_mutex_unlock(&g_mu);
}

static void check_cat(ledger_arena_t a, ledger_cat_t cat, const char *fn) {
  if (a < 0 || a >= LEDGER_NARENA) die_on_rank("%s: bad ledger arena %d", fn, (int)a);
  if (cat < 0 || cat >= LEDGER_NCAT) die_on_rank("%s: bad ledger category %d", fn, (int)cat);
}

int64_t ledger_add_in(ledger_arena_t a, ledger_cat_t cat, int64_t nbytes, const char *what) {
  check_cat(a, cat, "ledger_add");
  if (nbytes < 0) die_on_rank("ledger_add: negative size %lld for %s", (long long)nbytes, what ? what : "?");
  pthread_mutex_lock(&g_mu);
  if (a == LEDGER_DEVICE && g_limit > 0 && g_total_live[a] + nbytes > g_limit) {
    /* Copy what the message needs, release the lock, then take the job down. */
    int64_t used = g_total_live[a], limit = g_limit;
    int rank = msg_rank();
    pthread_mutex_unlock(&g_mu);
    char mib[32]; /* the budget as given: whole MiB from --mem-limit-mb print without decimals */
    if (limit % 1048576 == 0) snprintf(mib, sizeof mib, "%lld", (long long)(limit / 1048576));
    else snprintf(mib, sizeof mib, "%.1f", limit / 1048576.0);
    die("out of memory budget on rank %d: %s needs %.1f MiB, %.1f of %s MiB in use", rank,
        what ? what : "allocation", nbytes / 1048576.0, used / 1048576.0, mib);
  }
  g_live[a][cat] += nbytes;
  if (g_live[a][cat] > g_peak[a][cat]) g_peak[a][cat] = g_live[a][cat];
  g_total_live[a] += nbytes;
  if (g_total_live[a] > g_total_peak[a]) g_total_peak[a] = g_total_live[a];
  int64_t id = ++g_last_id;
  if (g_trace)
    fprintf(g_trace, "A %d %d %lld %lld %s\n", (int)a, (int)cat, (long long)nbytes, (long long)id,
            what ? what : "?");
  pthread_mutex_unlock(&g_mu);
  return id;
}

void ledger_sub_in(ledger_arena_t a, ledger_cat_t cat, int64_t nbytes, int64_t id) {
  check_cat(a, cat, "ledger_sub");
  pthread_mutex_lock(&g_mu);
  int bad = nbytes < 0 || nbytes > g_live[a][cat];
  int64_t live = g_live[a][cat], last = g_last_id;
  if (!bad && (id < 1 || id > last)) {
    pthread_mutex_unlock(&g_mu);
    die_on_rank("ledger_sub: %s gives back id %lld, which ledger_add never gave (last %lld)",
        ledger_cat_name(cat), (long long)id, (long long)last);
  }
  if (!bad) {
    g_live[a][cat] -= nbytes;
    g_total_live[a] -= nbytes;
    if (g_trace) fprintf(g_trace, "F %d %d %lld %lld\n", (int)a, (int)cat, (long long)nbytes, (long long)id);
  }
  pthread_mutex_unlock(&g_mu);
  /* Giving back more than is held is a bookkeeping bug (double free, wrong category or arena). */
  if (bad)
    die_on_rank("ledger_sub: %s%s gives back %lld bytes but holds %lld", a == LEDGER_HOST ? "host " : "",
        ledger_cat_name(cat), (long long)nbytes, (long long)live);
}

int64_t ledger_add(ledger_cat_t cat, int64_t nbytes, const char *what) {
  return ledger_add_in(LEDGER_DEVICE, cat, nbytes, what);
}
void ledger_sub(ledger_cat_t cat, int64_t nbytes, int64_t id) {
  ledger_sub_in(LEDGER_DEVICE, cat, nbytes, id);
}

/* Read one counter under the lock. */
static int64_t read_locked(const int64_t *p) {
  pthread_mutex_lock(&g_mu);
  int64_t v = *p;
  pthread_mutex_unlock(&g_mu);
  return v;
}

int64_t ledger_live_in(ledger_arena_t a, ledger_cat_t cat) {
  check_cat(a, cat, "ledger_live");
  return read_locked(&g_live[a][cat]);
}
int64_t ledger_peak_in(ledger_arena_t a, ledger_cat_t cat) {
  check_cat(a, cat, "ledger_peak");
  return read_locked(&g_peak[a][cat]);
}
int64_t ledger_total_live_in(ledger_arena_t a) {
  check_cat(a, 0, "ledger_total_live");
  return read_locked(&g_total_live[a]);
}
int64_t ledger_total_peak_in(ledger_arena_t a) {
  check_cat(a, 0, "ledger_total_peak");
  return read_locked(&g_total_peak[a]);
}
int64_t ledger_live(ledger_cat_t cat) { return ledger_live_in(LEDGER_DEVICE, cat); }
int64_t ledger_peak(ledger_cat_t cat) { return ledger_peak_in(LEDGER_DEVICE, cat); }
int64_t ledger_total_live(void) { return ledger_total_live_in(LEDGER_DEVICE); }
int64_t ledger_total_peak(void) { return ledger_total_peak_in(LEDGER_DEVICE); }
int64_t ledger_limit(void) { return read_locked(&g_limit); }

void ledger_reset_peaks(void) {
  pthread_mutex_lock(&g_mu);
  for (int a = 0; a < LEDGER_NARENA; a++) {
    for (int c = 0; c < LEDGER_NCAT; c++) g_peak[a][c] = g_live[a][c];
    g_total_peak[a] = g_total_live[a];
  }
  pthread_mutex_unlock(&g_mu);
}

void ledger_trace_open(const char *path) {
  pthread_mutex_lock(&g_mu);
  if (g_trace) fclose(g_trace);
  g_trace = NULL;
  if (path && path[0]) {
    g_trace = fopen(path, "w");
    if (g_trace) setvbuf(g_trace, NULL, _IOLBF, 0); /* whole lines even if the job dies */
  }
  int bad = path && path[0] && !g_trace;
  pthread_mutex_unlock(&g_mu);
  if (bad) die_on_rank("--alloc-trace %s: cannot open for writing", path);
}
