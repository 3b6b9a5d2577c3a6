/* comm_checks.c — what the front checks so that a mistake ends the job with one line naming the
 * call, not a hang or wrong bytes: the arguments of every call, the all-to-all's N×N split matrix
 * (every rank, before any data moves), and in exercise mode (ZL_EXERCISE_TIMEOUT_S) the handles
 * nobody waited for (comm.h, comm_wait). Notes: notes/01-collectives.md. */
#include "comm_internal.h" // struct comm, comm_task_t, comm_a2a_n, comm_mpi_all_gather_i64, comm_mpi_fail_all
#include "check.h"         // die_on_rank, xmalloc
#include <stdio.h>         // snprintf
#include <stdlib.h>        // free, realloc, getenv
#include <string.h>        // memset, strcmp

/* ---- argument checks ---------------------------------------------------------------------- */
void comm_check_args(const comm_t *c, const char *fn, int64_t numel, dtype_t dt, int peer, int need_peer) {
  if (!c) die_on_rank("%s: the communicator is NULL (a link this stage does not have? the first stage has no "
                      "previous one, the last no next one)", fn);
  if (numel < 0) die_on_rank("%s: numel %lld is negative", fn, (long long)numel);
  if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16 && dt != DT_F64)
    die_on_rank("%s: unknown dtype %d", fn, (int)dt);
  if (need_peer && (peer < 0 || peer >= c->world))
    die_on_rank("%s: rank %d is outside the group: its ranks are 0..%d (a rank of this communicator, not of "
                "the world)", fn, peer, c->world - 1);
}

/* The _async point-to-point calls: a NULL communicator or a peer outside the group, named with
 * the call's tag (the exercise's own message). */
void comm_check_p2p(const comm_t *c, const char *fn, const char *tag, int peer) {
  const char *what = tag && tag[0] ? tag : "-";
  if (!c)
    die_on_rank("%s (%s): the communicator is NULL (a link this stage does not have? the first stage has no "
                "previous one, the last no next one)", fn, what);
  if (peer < 0 || peer >= c->world)
    die_on_rank("%s (%s): rank %d is outside the group: its ranks are 0..%d (a rank of this communicator, "
                "not of the world)", fn, what, peer, c->world - 1);
}

int comm_checks_splits(const comm_t *c) {
  if (c->backend != BACKEND_NCCL) return 1; /* the host path: one small all-gather beside MPI's own */
  const char *on = getenv("ZL_CHECK_SPLITS"), *ex = getenv("ZL_EXERCISE_TIMEOUT_S");
  return (on && strcmp(on, "1") == 0) || (ex && ex[0]);
}

/* On the stream, before any data moves (Megatron-LM #1877: splits that disagree hang the job or
 * garble it): every rank all-gathers its send and recv counts, so each holds the whole N×N split
 * matrix and reaches the same verdict; on a disagreement every rank stops with exit code 2 and
 * rank 0 names the pairs. */
void comm_a2a_check_splits(comm_t *c, const comm_task_t *t) {
  int N = c->world;
  int64_t *mine = xmalloc(2 * (size_t)N * sizeof *mine, "all_to_allv split check");
  int64_t *all = xmalloc(2 * (size_t)N * (size_t)N * sizeof *all, "all_to_allv split matrix");
  for (int j = 0; j < N; j++) mine[j] = comm_a2a_n(c, t, 0, j), mine[N + j] = comm_a2a_n(c, t, 1, j);
  /* all[i·2N + j]: rank i sends to j; all[j·2N + N + i]: j expects from i */
  comm_mpi_all_gather_i64(c, mine, 2 * N, all);
  char text[1024];
  int len = 0, bad = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      int64_t sends = all[(size_t)i * 2 * N + j], expects = all[(size_t)j * 2 * N + N + i];
      if (sends == expects) continue;
      if (bad++ == 0)
        len = snprintf(text, sizeof text, "comm_all_to_allv (%s): split sizes disagree between ranks:",
                       t->tag[0] ? t->tag : "-");
      if (bad <= 4 && len < (int)sizeof text)
        len += snprintf(text + len, sizeof text - (size_t)len,
                        "%s rank %d sends %lld element(s) to rank %d, which expects %lld from it",
                        bad > 1 ? ";" : "", i, (long long)sends, j, (long long)expects);
    }
  free(mine);
  free(all);
  if (!bad) return;
  if (len < (int)sizeof text)
    snprintf(text + len, sizeof text - (size_t)len,
             "%s — rank i's send_counts[j] must equal rank j's recv_counts[i]: exchange the counts first "
             "(an "
             "all-to-all of the counts, as a dropless MoE dispatcher does)",
             bad > 4 ? " (and more pairs)" : "");
  comm_mpi_fail_all(c, text, 2);
}

/* ---- exercise mode: handles nobody waited for (see comm_internal.h) ------------------------ */
/* Every tracked communicator, so that an operation of one is checked against what the others
 * have in flight; their lists of open handles are read and written under g_track_mu. */
static pthread_mutex_t g_track_mu = PTHREAD_MUTEX_INITIALIZER;
static comm_t **g_tracked;
static int g_n_tracked, g_cap_tracked;

void comm_track_register(comm_t *c) {
  pthread_mutex_lock(&g_track_mu);
  if (g_n_tracked == g_cap_tracked) {
    g_cap_tracked = g_cap_tracked ? 2 * g_cap_tracked : 8;
    g_tracked = realloc(g_tracked, (size_t)g_cap_tracked * sizeof *g_tracked);
    if (!g_tracked) die_on_rank("out of memory tracking %d communicators", g_cap_tracked);
  }
  g_tracked[g_n_tracked++] = c;
  c->track = 1;
  pthread_mutex_unlock(&g_track_mu);
}

void comm_track_unregister(comm_t *c) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  for (int i = 0; i < g_n_tracked; i++)
    if (g_tracked[i] == c) g_tracked[i] = g_tracked[--g_n_tracked];
  free(c->open);
  c->open = NULL;
  c->n_open = c->cap_open = 0;
  pthread_mutex_unlock(&g_track_mu);
}

static int overlaps(const char *a, int64_t an, const char *b, int64_t bn) {
  return a && b && an > 0 && bn > 0 && a < b + bn && b < a + an;
}

/* Before c's operation `fn` reads rd_n bytes at rd and writes wr_n at wr: an operation of another
 * communicator still open (nobody waited for it) that writes what this one touches, or reads what
 * it writes, races it — the two streams do not wait for each other. Dies naming both. */
void comm_track_check(comm_t *c, const char *fn, const char *tag, const void *rd, int64_t rd_n,
                      const void *wr, int64_t wr_n) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  for (int k = 0; k < g_n_tracked; k++) {
    comm_t *o = g_tracked[k];
    if (o == c) continue;
    for (int i = 0; i < o->n_open; i++) {
      const struct comm_open *e = &o->open[i];
      int writes = overlaps(wr, wr_n, e->wr, e->wr_n) || overlaps(rd, rd_n, e->wr, e->wr_n);
      if (!writes && !overlaps(wr, wr_n, e->rd, e->rd_n)) continue;
      char what[96];
      snprintf(what, sizeof what, "%s (%s)", e->fn, e->tag);
      pthread_mutex_unlock(&g_track_mu);
      die_on_rank("%s (%s) %s a buffer that %s, issued earlier on another communicator and never waited "
                  "for, %s: the two communicators' streams do not wait for each other, so the two race — "
                  "comm_wait that handle (on its own communicator) before %s",
                  fn, tag && tag[0] ? tag : "-", writes ? "uses" : "writes", what,
                  writes ? "writes" : "reads", fn);
    }
  }
  pthread_mutex_unlock(&g_track_mu);
}

/* After submit: handle h of `fn` is open (p2p: until waited by name; a collective: until a wait
 * on it or a later handle of c). */
void comm_track_open(comm_t *c, comm_handle_t h, const char *fn, const char *tag, int p2p, const void *rd,
                     int64_t rd_n, const void *wr, int64_t wr_n) {
  if (!c->track || h <= 0) return;
  pthread_mutex_lock(&g_track_mu);
  if (c->n_open == c->cap_open) {
    c->cap_open = c->cap_open ? 2 * c->cap_open : 16;
    c->open = realloc(c->open, (size_t)c->cap_open * sizeof *c->open);
    if (!c->open) die_on_rank("out of memory tracking %d communication handles", c->cap_open);
  }
  struct comm_open *o = &c->open[c->n_open++];
  memset(o, 0, sizeof *o);
  o->h = h;
  o->fn = fn;
  snprintf(o->tag, sizeof o->tag, "%s", tag && tag[0] ? tag : "-");
  o->p2p = p2p;
  o->rd = rd, o->rd_n = rd_n;
  o->wr = wr, o->wr_n = wr_n;
  pthread_mutex_unlock(&g_track_mu);
}

/* comm_wait(c, h): a point-to-point h is waited for by name (a later handle's wait completes it
 * too, but does not count: the code that dropped it would break the day the stream reorders or
 * the message is late); the collectives up to h are complete (the stream's order, comm.h). */
void comm_track_waited(comm_t *c, comm_handle_t h) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  for (int i = 0; i < c->n_open;)
    if (c->open[i].p2p ? c->open[i].h == h : c->open[i].h <= h) c->open[i] = c->open[--c->n_open];
    else i++;
  pthread_mutex_unlock(&g_track_mu);
}

/* The open handle of c with the lowest number above `since`, of point-to-point ones only when
 * p2p_only; NULL if none. Under g_track_mu. */
static const struct comm_open *first_open(const comm_t *c, comm_handle_t since, int p2p_only) {
  const struct comm_open *o = NULL;
  for (int i = 0; i < c->n_open; i++)
    if (c->open[i].h > since && (!p2p_only || c->open[i].p2p) && (!o || c->open[i].h < o->h)) o = &c->open[i];
  return o;
}

/* A step boundary (comm_wait_all, comm_finalize): a point-to-point handle never waited for by
 * name was dropped — its buffer may be reused (a send) or read (a receive) before the message
 * moved. Dies naming the first; then every open handle is complete. */
void comm_track_wait_all(comm_t *c) {
  if (!c->track) return;
  pthread_mutex_lock(&g_track_mu);
  const struct comm_open *o = first_open(c, 0, 1);
  if (o) {
    int n = 0;
    for (int i = 0; i < c->n_open; i++) n += c->open[i].p2p;
    char what[96];
    snprintf(what, sizeof what, "%s (%s)", o->fn, o->tag);
    pthread_mutex_unlock(&g_track_mu);
    die_on_rank("%s: its handle was never waited — keep the handle and comm_wait it before the buffer "
                "is reused (a send) or read (a receive); %d such handle(s) on this communicator at the end "
                "of the step",
                what, n);
  }
  c->n_open = 0;
  pthread_mutex_unlock(&g_track_mu);
}

comm_handle_t comm_issued(comm_t *c) {
  if (!c) die_on_rank("comm_issued: the communicator is NULL");
  pthread_mutex_lock(&c->mu);
  comm_handle_t h = c->next_seq;
  pthread_mutex_unlock(&c->mu);
  return h;
}

void comm_expect_waited(comm_t *c, comm_handle_t since, const char *who) {
  if (!c || !c->track) return;
  pthread_mutex_lock(&g_track_mu);
  const struct comm_open *o = first_open(c, since, 0);
  if (!o) {
    pthread_mutex_unlock(&g_track_mu);
    return;
  }
  char what[96];
  snprintf(what, sizeof what, "%s (%s)", o->fn, o->tag);
  pthread_mutex_unlock(&g_track_mu);
  die_on_rank("%s: its handle was never waited before %s returned — %s is blocking: comm_wait the "
              "handle (or a later one of the same communicator) before returning, or the caller reads the "
              "buffer while the stream may still write it",
              what, who, who);
}
