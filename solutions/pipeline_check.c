/* pipeline_check.c — a schedule is checked before it runs: its lists obey the rules of one rank's
 * training, and the stages' lists, run against each other with the program's own messages under
 * synchronous sends, end without a deadlock (the contract: pipeline_check.h; notes/07-pipeline.md,
 * 07c). Holds the rules of one list (pp_check_lists, which the simulator runs too), the matching
 * of the message model's streams (mx_match), the run of the P stages (mx_run) and the entry points
 * (pp_check_*); each stage's messages are issued by pipeline_check_stage.c (the model's types:
 * pipeline_check_mx.h). Test tooling in plain C11 and libc, as pipeline_sched.c. */
#include "pipeline_check.h"    // the contracts implemented here
#include "pipeline_check_mx.h" // mx_t, mx_main_t, mx_step, mx_step_seg
#include "pipeline_groups.h"   // pp_pairs, pp_group_cuts, pp_group_flush, pp_groups_of_list, ...
#include <stdarg.h>            // va_list (why messages)
#include <stdio.h>             // snprintf, vsnprintf
#include <stdlib.h>            // calloc, malloc, free
#include <string.h>            // memset

/* ---- each stage's list alone ---------------------------------------------------------------- */

int mx_say(char *why, size_t n, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return 1;
}

int pp_check_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why,
                   size_t nwhy) {
  if (P < 1 || M < 1 || v < 1) return mx_say(why, nwhy, "P %d, M %d, v %d: each must be at least 1", P, M, v);
  /* per chunk: the next micro-batch due of each kind; done[kind][chunk·M + k] */
  char *done = calloc(3 * (size_t)v * (size_t)M, 1);
  int *next = calloc(3 * (size_t)v, sizeof *next);
  if (!done || !next) {
    free(done), free(next);
    return mx_say(why, nwhy, "out of memory");
  }
  int bad = 0;
  for (int s = 0; s < P && !bad; s++) {
    memset(done, 0, 3 * (size_t)v * (size_t)M);
    memset(next, 0, 3 * (size_t)v * sizeof *next);
    for (int i = 0; i < n[s] && !bad; i++) {
      pp_op_t o = ops[s][i];
      int kind = o.kind == 'F' ? 0 : o.kind == 'B' ? 1 : o.kind == 'W' ? 2 : -1, k = o.micro, j = o.chunk;
      if (kind < 0 || j < 0 || j >= v || k < 0 || k >= M) {
        bad = mx_say(why, nwhy, "stage %d, operation %d: '%c' %d on chunk %d is not an operation of this "
                     "step (kinds F, B, W; micro-batches 0..%d; chunks 0..%d)", s, i, o.kind ? o.kind : '?',
                     k, j, M - 1, v - 1);
        break;
      }
      char *d = done + (size_t)j * M;
      if (kind == 2 && !split)
        bad = mx_say(why, nwhy, "stage %d, operation %d: W %d, but this schedule does not split its "
                     "backwards (B is the whole backward)", s, i, k);
      else if (d[(size_t)kind * v * M + k])
        bad = mx_say(why, nwhy, "stage %d, operation %d: %c %d of chunk %d runs twice", s, i, o.kind, k, j);
      else if (kind == 1 && !d[k])
        bad = mx_say(why, nwhy, "stage %d, operation %d: a B before its F (B %d of chunk %d: F %d has not "
                     "run)", s, i, k, j, k);
      else if (kind == 2 && !d[(size_t)v * M + k])
        bad = mx_say(why, nwhy, "stage %d, operation %d: a W before its B (W %d: B %d has not run; the "
                     "weights' gradient needs the gradient of their output, which B computes)", s, i, k, k);
      else if (k != next[3 * j + kind])
        bad = kind == 2 ? mx_say(why, nwhy, "stage %d, operation %d: a W out of order (W %d, but W %d is "
                                 "due: each weight's gradient adds its micro-batches in order 0..M-1, as "
                                 "1F1B and 1-rank --accum M do)", s, i, k, next[3 * j + kind])
                        : mx_say(why, nwhy, "stage %d, operation %d: %s out of order on chunk %d (%c %d, but "
                                 "%c %d is due)", s, i, kind ? "backwards" : "forwards", j, o.kind, k,
                                 o.kind, next[3 * j + kind]);
      if (bad) break;
      d[(size_t)kind * v * M + k] = 1;
      next[3 * j + kind]++;
    }
    for (int j = 0; j < v && !bad; j++)
      for (int kind = 0; kind < (split ? 3 : 2) && !bad; kind++)
        if (next[3 * j + kind] != M)
          bad = mx_say(why, nwhy, "stage %d, chunk %d: %d of the %d micro-batches have their %c (every "
                       "one needs one)", s, j, next[3 * j + kind], M, "FBW"[kind]);
  }
  free(done);
  free(next);
  return bad;
}

/* ---- the stages' lists together, with the program's messages ---------------------------------
 * The model (its streams, operations and halves) is pipeline_check_mx.h's; here its streams are
 * matched, and the stages' main threads (pipeline_check_stage.c) run until none moves. */

static void mx_name(int msg, char *buf, size_t n) {
  snprintf(buf, n, "%s of micro-batch %d from chunk %d", msg >> 24 ? "gradient" : "activation", msg & 4095,
           (msg >> 12) & 4095);
}

/* Match the heads of every stream once; returns the matches made, or −1 (why written) when two
 * heads meet with different messages. */
static int mx_match(mx_t *x, char *why, size_t nwhy) {
  int made = 0;
  for (int c = 0; c < MX_NCOMM; c++)
    for (int a = 0; a < x->P; a++) {
      mx_stream_t *qa = &x->st[a][c];
      if (qa->head == qa->tail) continue;
      mx_op_t *h = &x->op[qa->q[qa->head]];
      for (int i = 0; i < h->nh; i++) {
        mx_half_t *hs = &h->h[i];
        int first = 1; /* the op's first unmatched send to that peer */
        for (int i2 = 0; i2 < i; i2++)
          if (h->h[i2].dir == MX_SEND && h->h[i2].peer == hs->peer) first = 0;
        if (hs->dir != MX_SEND || !first) continue;
        mx_stream_t *qb = &x->st[hs->peer][c];
        if (qb->head == qb->tail) continue;
        mx_op_t *g = &x->op[qb->q[qb->head]];
        mx_half_t *gr = NULL; /* its first unmatched receive from a */
        for (int i2 = 0; i2 < g->nh && !gr; i2++)
          if (g->h[i2].dir == MX_RECV && g->h[i2].peer == a) gr = &g->h[i2];
        if (!gr) continue;
        if (gr->msg != hs->msg) {
          char s1[96], s2[96];
          mx_name(hs->msg, s1, sizeof s1), mx_name(gr->msg, s2, sizeof s2);
          mx_say(why, nwhy, "the messages cross: stage %d sends the %s while stage %d receives, in that "
                 "place of the link's order, the %s", a, s1, hs->peer, s2);
          return -1;
        }
        hs->dir = gr->dir = 0; /* matched: the halves leave their operations */
        h->left--, g->left--;
        made++;
      }
    }
  for (int s = 0; s < x->P; s++) /* completed heads leave their streams */
    for (int c = 0; c < MX_NCOMM; c++) {
      mx_stream_t *q = &x->st[s][c];
      while (q->head < q->tail && x->op[q->q[q->head]].left == 0) q->head++, made++;
    }
  return made;
}

/* The stages' lists ops/n run against each other; pairs as pp_pairs decides for `sched` (−1: no
 * pairs, every message alone); ahead > 0: the unpaired receives posted that far ahead, on the
 * receiver's parity's streams when parity (pipeline_post.c), else on fwd / bwd. */
static int mx_run(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, int sched, int ahead,
                  int parity, int grouped, char *const *bounds, char *const *fb, int fb_early, char *why,
                  size_t nwhy) {
  if (P < 1 || P > 8 || M < 1 || M > 4095 || v < 1 || v > 8 || ahead < 0 || ahead > MX_AHEAD)
    return mx_say(why, nwhy, "P %d, M %d, v %d, ahead %d: the checker takes P <= 8, M < 4096, v <= 8, "
                  "ahead <= %d", P, M, v, ahead, MX_AHEAD);
  int bad = pp_check_lists(P, M, v, split, ops, n, why, nwhy);
  if (bad) return bad;
  mx_t x = {.P = P, .M = M, .v = v, .V = v * P, .split = split, .ahead = ahead, .parity = parity,
           .grouped = grouped, .seg = grouped && v > 1, .vs = (split & PP_LIST_V) != 0, .fb = fb,
           .fb_early = fb && fb_early};
  if (x.vs && (v != 2 || ahead || grouped || sched >= 0 || bounds))
    return mx_say(why, nwhy, "a V (dualpipev) is checked with every message alone and v = 2 (v %d)", v);
  for (int s = 0; s < P; s++) x.cap += 3 * n[s] + 8;
  x.op = calloc((size_t)x.cap, sizeof *x.op);
  mx_main_t *mm = calloc((size_t)P, sizeof *mm);
  for (int s = 0; s < P; s++) {
    for (int c = 0; c < MX_NCOMM; c++) x.st[s][c].q = calloc((size_t)x.cap, sizeof(int));
    mm[s].sent = malloc((size_t)v * M * sizeof(int));
    for (int i = 0; i < v * M; i++) mm[s].sent[i] = -1;
    for (int j = 0; j < 8; j++) mm[s].gsent[j][0] = mm[s].gsent[j][1] = -1;
    mm[s].wait = -1, mm[s].repost = -1, mm[s].fbh = -1;
    mm[s].cut = calloc((size_t)n[s] + 1, 1);
    if (x.seg && bounds) { /* given boundaries (pp_check_bounds), the flushes as pp_group_cuts's */
      for (int i = 0; i < n[s]; i++) mm[s].cut[i] = (char)(bounds[s][i] & 1);
      pp_group_flush(P, s, v, ops[s], n[s], mm[s].cut);
    } else if (x.seg) pp_group_cuts((pp_schedule_t)sched, P, s, M, v, ops[s], n[s], mm[s].cut);
    if (grouped) pp_groups_of_list(P, s, v, ops[s], n[s], mm[s].pf, mm[s].pb);
    else if (sched >= 0) pp_pairs((pp_schedule_t)sched, P, s, M, v, mm[s].pf, mm[s].pb);
    for (int a = 0; a < 2; a++) {
      mm[s].qk[a] = calloc((size_t)n[s] + 1, sizeof(int));
      mm[s].qj[a] = calloc((size_t)n[s] + 1, sizeof(int));
    }
    for (int a = 0; a < 2 && ahead; a++) { /* the unpaired receives, as pp_posted_recvs lists them */
      pp_op_t *q = calloc((size_t)n[s] + 1, sizeof *q);
      mm[s].qn[a] = pp_unpaired_recvs(P, s, v, ops[s], n[s], mm[s].pf, mm[s].pb, a ? 'B' : 'F', q);
      for (int i = 0; i < mm[s].qn[a]; i++) mm[s].qk[a][i] = q[i].micro, mm[s].qj[a][i] = q[i].chunk;
      free(q);
    }
  }
  int progress = 1;
  while (!bad && progress) {
    progress = 0;
    for (int s = 0; s < P && !bad; s++)
      progress |= x.seg ? mx_step_seg(&x, &mm[s], s, ops, n, why, nwhy, &bad)
                        : mx_step(&x, &mm[s], s, ops, n, why, nwhy, &bad);
    if (bad) break;
    int m = mx_match(&x, why, nwhy);
    if (m < 0) bad = 1;
    else if (m > 0) progress = 1;
  }
  if (!bad) { /* all done? a stage short of its end, or a stream with an operation left, is stuck */
    char buf[512] = "";
    size_t len = 0;
    for (int s = 0; s < P; s++) {
      int open = 0;
      for (int c = 0; c < MX_NCOMM; c++) open += x.st[s][c].tail - x.st[s][c].head;
      if (mm[s].pc < n[s] || open) {
        bad = 1;
        if (mm[s].pc < n[s] && len < sizeof buf - 96)
          len += (size_t)snprintf(buf + len, sizeof buf - len, "%sstage %d at operation %d (%c %d)",
                                  len ? ", " : "", s, mm[s].pc, ops[s][mm[s].pc].kind,
                                  ops[s][mm[s].pc].micro);
        else if (len < sizeof buf - 96)
          len += (size_t)snprintf(buf + len, sizeof buf - len, "%sstage %d with %d sends or receives not "
                                  "matched", len ? ", " : "", s, open);
      }
    }
    if (bad) mx_say(why, nwhy, "P %d, M %d: the stages deadlock (synchronous sends): %s", P, M, buf);
  }
  for (int s = 0; s < P; s++) {
    free(mm[s].sent);
    free(mm[s].cut);
    for (int a = 0; a < 2; a++) free(mm[s].qk[a]), free(mm[s].qj[a]);
    for (int c = 0; c < MX_NCOMM; c++) free(x.st[s][c].q);
  }
  free(mm);
  free(x.op);
  return bad;
}

/* ---- the entry points ------------------------------------------------------------------------ */

/* sched's own lists through mx_run, the schedule named in why. */
static int pp_check_messages_ahead(pp_schedule_t sched, int P, int M, int v, int ahead, int parity,
                                   int grouped, char *why, size_t nwhy) {
  if (P < 1 || P > 8 || M < 1 || M > 4095 || v < 1 || v > 8 || sched < 0 || sched >= PP_NSCHED)
    return mx_say(why, nwhy, "P %d, M %d, v %d: the checker takes P <= 8, M < 4096, v <= 8", P, M, v);
  if (sched == PP_DUALPIPEV) { /* its lists' messages each alone (sched −1: no pairs), its two chunks */
    if (ahead || grouped)
      return mx_say(why, nwhy, "dualpipev: its messages are checked each alone (no posting ahead, no "
                    "groups)");
    if (M < 2 * P) return mx_say(why, nwhy, "dualpipev, P %d, M %d: needs M >= 2P", P, M);
    v = 2;
  }
  int cap = pp_schedule_nops(sched, M, v), n[8];
  pp_op_t *ops[8];
  for (int s = 0; s < P; s++) {
    ops[s] = calloc((size_t)cap, sizeof(pp_op_t));
    n[s] = pp_schedule_ops(sched, P, s, M, v, ops[s]);
  }
  int bad = mx_run(P, M, v, pp_list_flags(sched), ops, n, sched == PP_DUALPIPEV ? -1 : (int)sched, ahead,
                   parity, grouped, NULL, NULL, 0, why, nwhy);
  if (bad && why && nwhy) { /* name the schedule */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", why);
    if (v > 1) snprintf(why, nwhy, "%s (v %d), P %d, M %d: %s", pp_schedule_name(sched), v, P, M, tmp);
    else snprintf(why, nwhy, "%s, P %d, M %d: %s", pp_schedule_name(sched), P, M, tmp);
  }
  for (int s = 0; s < P; s++) free(ops[s]);
  return bad;
}

int pp_check_run(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why, size_t nwhy) {
  return mx_run(P, M, v, split, ops, n, -1, 0, 0, 0, NULL, NULL, 0, why, nwhy);
}

int pp_check_bounds(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *const *bounds,
                    char *why, size_t nwhy) {
  if (v < 2) return mx_say(why, nwhy, "v %d: the boundaries' groups are interleaved's (v >= 2)", v);
  return mx_run(P, M, v, split, ops, n, -1, 0, 0, 1, bounds, NULL, 0, why, nwhy);
}

int pp_check_posted(pp_schedule_t sched, int P, int M, int v, int ahead, int parity, char *why, size_t nwhy) {
  return pp_check_messages_ahead(sched, P, M, v, ahead, parity, 0, why, nwhy);
}

int pp_check_grouped(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy) {
  return pp_check_messages_ahead(sched, P, M, v, 0, 0, 1, why, nwhy);
}

int pp_check_messages(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy) {
  return pp_check_messages_ahead(sched, P, M, v, 0, 0, 0, why, nwhy);
}

int pp_check_schedule(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy) {
  return pp_check_messages(sched, P, M, v, why, nwhy); /* it checks the lists first */
}

int pp_check_fb(int P, int M, int early, char *why, size_t nwhy) {
  if (P < 1 || P > 8 || M < 2 * P || M > 4095)
    return mx_say(why, nwhy, "dualpipev F&B, P %d, M %d: the checker takes P <= 8, 2P <= M < 4096", P, M);
  int cap = pp_schedule_nops(PP_DUALPIPEV, M, 2), n[8];
  pp_op_t *ops[8];
  char *fb[8];
  for (int s = 0; s < P; s++) {
    ops[s] = calloc((size_t)cap, sizeof(pp_op_t));
    fb[s] = calloc((size_t)cap, 1);
    n[s] = pp_schedule_ops(PP_DUALPIPEV, P, s, M, 2, ops[s]);
    pp_schedule_fb(PP_DUALPIPEV, P, s, M, 2, fb[s]);
  }
  int bad = mx_run(P, M, 2, pp_list_flags(PP_DUALPIPEV), ops, n, -1, 0, 0, 0, NULL, fb, early, why, nwhy);
  if (bad && why && nwhy) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", why);
    snprintf(why, nwhy, "dualpipev F&B (B's gradient waited %s F's send), P %d, M %d: %s",
             early ? "before" : "after", P, M, tmp);
  }
  for (int s = 0; s < P; s++) free(ops[s]), free(fb[s]);
  return bad;
}
