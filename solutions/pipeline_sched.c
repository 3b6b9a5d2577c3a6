/* pipeline_sched.c — the schedules of chapter 07 as pure functions (the contract: pipeline_sched.h;
 * notes/07-pipeline.md, meetings 07a-07c): the split, each schedule's order of a stage's operations,
 * the activations in flight, the pairs of messages, the checker and the simulator. Plain C11 and
 * libc only: no MPI, nothing of common/, so it compiles alone (a browser page could run it). */
#include "pipeline_sched.h" // the contracts implemented here
#include <stdarg.h>         // va_list (why messages)
#include <stdint.h>         // INT64_MAX
#include <stdio.h>          // vsnprintf
#include <stdlib.h>         // calloc, free
#include <string.h>         // strcmp, memset

static const char *g_names[PP_NSCHED] = {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"};

int pp_schedule_parse(const char *name) {
  for (int i = 0; name && i < PP_NSCHED; i++)
    if (strcmp(name, g_names[i]) == 0) return i;
  return -1;
}

const char *pp_schedule_name(pp_schedule_t sched) { return sched >= 0 && sched < PP_NSCHED ? g_names[sched] : "?"; }

int pp_splits_backward(pp_schedule_t sched) { return sched == PP_ZB_H1 || sched == PP_ZB_H2; }

int pp_schedule_nops(pp_schedule_t sched, int M, int v) { return pp_splits_backward(sched) ? 3 * M : 2 * v * M; }

/* ---- the split ------------------------------------------------------------------------------ */

int pp_split(const int64_t *numel, int n_units, int P, int *first) {
  if (P < 1 || P > n_units) return -1;
  /* best[s][u]: the smallest possible largest stage when units 0..u−1 make s stages; a linear
   * partition by dynamic programming (U and P are small). */
  int64_t *pre = calloc((size_t)n_units + 1, sizeof *pre);
  int64_t *best = calloc((size_t)(P + 1) * (size_t)(n_units + 1), sizeof *best);
  int *cut = calloc((size_t)(P + 1) * (size_t)(n_units + 1), sizeof *cut);
  if (!pre || !best || !cut) {
    free(pre), free(best), free(cut);
    return -1;
  }
  for (int u = 0; u < n_units; u++) pre[u + 1] = pre[u] + numel[u];
#define BEST(s, u) best[(size_t)(s) * (size_t)(n_units + 1) + (size_t)(u)]
#define CUT(s, u) cut[(size_t)(s) * (size_t)(n_units + 1) + (size_t)(u)]
  for (int u = 1; u <= n_units; u++) BEST(1, u) = pre[u];
  for (int s = 2; s <= P; s++)
    for (int u = s; u <= n_units; u++) {
      BEST(s, u) = INT64_MAX;
      for (int c = s - 1; c < u; c++) { /* the last stage is units c..u−1 */
        int64_t last = pre[u] - pre[c], worst = BEST(s - 1, c) > last ? BEST(s - 1, c) : last;
        if (worst < BEST(s, u)) BEST(s, u) = worst, CUT(s, u) = c;
      }
    }
  first[P] = n_units;
  for (int s = P, u = n_units; s >= 1; s--) {
    first[s - 1] = s == 1 ? 0 : CUT(s, u);
    u = first[s - 1];
  }
#undef BEST
#undef CUT
  free(pre);
  free(best);
  free(cut);
  return 0;
}

/* ---- the orders ------------------------------------------------------------------------------ */

/* Interleaved 1F1B (Megatron-LM's order): virtual micro-batch i = 0..v·M−1 runs micro-batch
 * (i / (P·v))·P + i mod P on chunk (i / P) mod v — P micro-batches through chunk 0, the same P
 * through chunk 1, ..., then the next P; backwards walk the chunks the other way. */
static pp_op_t interleaved_op(char kind, int i, int P, int v) {
  int j = (i / P) % v;
  return (pp_op_t){kind, (i / (P * v)) * P + i % P, kind == 'F' ? j : v - 1 - j};
}

/* The zero-bubble order with k·(P − s − 1) warm-up forwards: ZB-H1 is k = 1, ZB-H2 k = 2 (twice
 * the warm-up, twice the W's held back). Returns the operations written (3M). */
static int zb_order(int k, int P, int s, int M, pp_op_t *ops) {
  int n = 0;
  if (k == 2) { /* ZB-H2: as ZB-H1 below with 2(P − s − 1) warm-up forwards and 2s W's held back */
    int w = 2 * (P - s - 1) < M ? 2 * (P - s - 1) : M, d = 2 * s < M ? 2 * s : M;
    for (int i = 0; i < w; i++) ops[n++] = (pp_op_t){'F', i, 0};
    for (int i = 0; i < M; i++) {
      if (w + i < M) ops[n++] = (pp_op_t){'F', w + i, 0};
      ops[n++] = (pp_op_t){'B', i, 0};
      if (i >= d) ops[n++] = (pp_op_t){'W', i - d, 0};
    }
    for (int i = M - d; i < M; i++) ops[n++] = (pp_op_t){'W', i, 0};
    return n;
  }
  // BEGIN EXERCISE pp_zbh1_schedule notes/07-pipeline.md
  // HINT: ZB-H1 is 1F1B with each backward cut in two: B (the input's gradient, which the stage before waits for) stays where 1F1B's backward was; W (the weights' gradient, which nobody waits for) may go later. Every W after its own B, the W's in micro-batch order.
  // HINT: where does 1F1B idle? Stage s waits s turns at the end for the last backwards to come back: that is where its held-back W's can run.
  // HINT2: 1F1B's warm-up (min(P − s − 1, M) forwards) and its F B pairs stay; stage s holds back its first d = min(s, M) W's: in step i of the steady state, F(w + i) (while w + i < M), B(i), then W(i − d) once i >= d; the d W's held back close the list. 3M operations in all.
  // HINT3: for (i < w) F(i); for (i < M) { if (w + i < M) F(w + i); B(i); if (i >= d) W(i − d); } for (i = M − d; i < M; i++) W(i). Append with ops[n++] = (pp_op_t){'W', i, 0}.
  int w = P - s - 1 < M ? P - s - 1 : M, d = s < M ? s : M;
  for (int i = 0; i < w; i++) ops[n++] = (pp_op_t){'F', i, 0};
  for (int i = 0; i < M; i++) {
    if (w + i < M) ops[n++] = (pp_op_t){'F', w + i, 0};
    ops[n++] = (pp_op_t){'B', i, 0};
    if (i >= d) ops[n++] = (pp_op_t){'W', i - d, 0};
  }
  for (int i = M - d; i < M; i++) ops[n++] = (pp_op_t){'W', i, 0};
  // END EXERCISE
  return n;
}

int pp_schedule_ops(pp_schedule_t sched, int P, int s, int M, int v, pp_op_t *ops) {
  int n = 0;
  if (sched == PP_NAIVE) { /* one micro-batch at a time: its backward before the next forward */
    for (int k = 0; k < M; k++) {
      ops[n++] = (pp_op_t){'F', k, 0};
      ops[n++] = (pp_op_t){'B', k, 0};
    }
  } else if (sched == PP_GPIPE) { /* all forwards, then all backwards (in micro-batch order) */
    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'F', k, 0};
    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};
  } else if (sched == PP_INTERLEAVED) { /* 1F1B over v·M virtual micro-batches */
    int total = v * M, w = (P - s - 1) * 2 + (v - 1) * P;
    if (w > total) w = total;
    for (int i = 0; i < w; i++) ops[n++] = interleaved_op('F', i, P, v);
    for (int i = 0; i < total - w; i++) {
      ops[n++] = interleaved_op('F', w + i, P, v);
      ops[n++] = interleaved_op('B', i, P, v);
    }
    for (int i = total - w; i < total; i++) ops[n++] = interleaved_op('B', i, P, v);
  } else if (sched == PP_ZB_H1 || sched == PP_ZB_H2) {
    n = zb_order(sched == PP_ZB_H1 ? 1 : 2, P, s, M, ops);
  } else {
    // BEGIN EXERCISE pp_1f1b_schedule notes/07-pipeline.md
    // HINT: a stage may start its first backward as soon as the pipeline behind it is full: then at most P − s micro-batches are alive on stage s, not M.
    // HINT2: three phases: warm-up forwards (how many depends on s: the last stage none), a steady state alternating forward and backward, a cool-down of backwards. Forwards and backwards each in micro-batch order; 2M ops in all.
    // HINT3: w = min(P − s − 1, M) forwards; then for i < M − w: F(w + i), B(i); then B(M − w .. M − 1). Append with ops[n++] = (pp_op_t){'F', k, 0}.
    int w = P - s - 1 < M ? P - s - 1 : M;
    for (int k = 0; k < w; k++) ops[n++] = (pp_op_t){'F', k, 0};
    for (int i = 0; i < M - w; i++) {
      ops[n++] = (pp_op_t){'F', w + i, 0};
      ops[n++] = (pp_op_t){'B', i, 0};
    }
    for (int k = M - w; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};
    // END EXERCISE
  }
  return n;
}

int pp_inflight_formula(pp_schedule_t sched, int P, int s, int M, int v) {
  if (sched == PP_NAIVE) return 1;
  if (sched == PP_GPIPE) return M;
  if (sched == PP_INTERLEAVED) {
    int w = (P - s - 1) * 2 + (v - 1) * P;
    return w + 1 < v * M ? w + 1 : v * M;
  }
  if (sched == PP_ZB_H1) return P < M ? P : M;         /* w + d + 1 = (P − s − 1) + s + 1 */
  if (sched == PP_ZB_H2) return 2 * P - 1 < M ? 2 * P - 1 : M; /* 2(P − s − 1) + 2s + 1 */
  return P - s < M ? P - s : M;
}

/* ---- the pairs -------------------------------------------------------------------------------- */

void pp_pairs(pp_schedule_t sched, int P, int s, int M, int v, char *pair_fwd, char *pair_bwd) {
  memset(pair_fwd, 0, (size_t)M);
  memset(pair_bwd, 0, (size_t)M);
  if (v != 1 || P < 2) return;
  int cap = pp_schedule_nops(sched, M, v);
  pp_op_t *me = calloc((size_t)cap, sizeof *me), *nb = calloc((size_t)cap, sizeof *nb);
  if (!me || !nb) {
    free(me), free(nb);
    return;
  }
  int n = pp_schedule_ops(sched, P, s, M, 1, me);
  for (int side = 0; side < 2; side++) { /* 0: with s+1 (F then B here), 1: with s-1 (B then F here) */
    int peer = side == 0 ? s + 1 : s - 1;
    if (peer < 0 || peer >= P) continue;
    int nn = pp_schedule_ops(sched, P, peer, M, 1, nb);
    char a = side == 0 ? 'F' : 'B', b = side == 0 ? 'B' : 'F';
    for (int i = 0; i + 1 < n; i++) {
      if (me[i].kind != a || me[i + 1].kind != b) continue;
      for (int m = 0; m + 1 < nn; m++)
        if (nb[m].kind == b && nb[m].micro == me[i + 1].micro && nb[m + 1].kind == a && nb[m + 1].micro == me[i].micro)
          (side == 0 ? pair_fwd : pair_bwd)[me[i].micro] = 1;
    }
  }
  free(me);
  free(nb);
}

/* ---- the checker: each stage's list alone ---------------------------------------------------- */

static int say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *why, size_t n, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return 1;
}

int pp_check_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why, size_t nwhy) {
  if (P < 1 || M < 1 || v < 1) return say(why, nwhy, "P %d, M %d, v %d: each must be at least 1", P, M, v);
  /* per chunk: the next micro-batch due of each kind; done[kind][chunk·M + k] */
  char *done = calloc(3 * (size_t)v * (size_t)M, 1);
  int *next = calloc(3 * (size_t)v, sizeof *next);
  if (!done || !next) {
    free(done), free(next);
    return say(why, nwhy, "out of memory");
  }
  int bad = 0;
  for (int s = 0; s < P && !bad; s++) {
    memset(done, 0, 3 * (size_t)v * (size_t)M);
    memset(next, 0, 3 * (size_t)v * sizeof *next);
    for (int i = 0; i < n[s] && !bad; i++) {
      pp_op_t o = ops[s][i];
      int kind = o.kind == 'F' ? 0 : o.kind == 'B' ? 1 : o.kind == 'W' ? 2 : -1, k = o.micro, j = o.chunk;
      if (kind < 0 || j < 0 || j >= v || k < 0 || k >= M) {
        bad = say(why, nwhy, "stage %d, operation %d: '%c' %d on chunk %d is not an operation of this step (kinds F, B, W; "
                  "micro-batches 0..%d; chunks 0..%d)", s, i, o.kind ? o.kind : '?', k, j, M - 1, v - 1);
        break;
      }
      char *d = done + (size_t)j * M;
      if (kind == 2 && !split)
        bad = say(why, nwhy, "stage %d, operation %d: W %d, but this schedule does not split its backwards (B is the "
                  "whole backward)", s, i, k);
      else if (d[(size_t)kind * v * M + k])
        bad = say(why, nwhy, "stage %d, operation %d: %c %d of chunk %d runs twice", s, i, o.kind, k, j);
      else if (kind == 1 && !d[k])
        bad = say(why, nwhy, "stage %d, operation %d: a B before its F (B %d of chunk %d: F %d has not run)", s, i, k, j, k);
      else if (kind == 2 && !d[(size_t)v * M + k])
        bad = say(why, nwhy, "stage %d, operation %d: a W before its B (W %d: B %d has not run; the weights' gradient needs "
                  "the gradient of their output, which B computes)", s, i, k, k);
      else if (k != next[3 * j + kind])
        bad = kind == 2 ? say(why, nwhy, "stage %d, operation %d: a W out of order (W %d, but W %d is due: each weight's "
                              "gradient adds its micro-batches in order 0..M-1, as 1F1B and 1-rank --accum M do)",
                              s, i, k, next[3 * j + kind])
                        : say(why, nwhy, "stage %d, operation %d: %s out of order on chunk %d (%c %d, but %c %d is due)", s, i,
                              kind ? "backwards" : "forwards", j, o.kind, k, o.kind, next[3 * j + kind]);
      if (bad) break;
      d[(size_t)kind * v * M + k] = 1;
      next[3 * j + kind]++;
    }
    for (int j = 0; j < v && !bad; j++)
      for (int kind = 0; kind < (split ? 3 : 2) && !bad; kind++)
        if (next[3 * j + kind] != M)
          bad = say(why, nwhy, "stage %d, chunk %d: %d of the %d micro-batches have their %c (every one needs one)", s, j,
                    next[3 * j + kind], M, "FBW"[kind]);
  }
  free(done);
  free(next);
  return bad;
}

/* ---- the checker: the stages' lists together, with the program's messages ----------------------
 * Streams: per stage, one per communicator (0 fwd and 1 bwd: the pipeline's two; 2 fwdw and 3 bwdw:
 * the ring's wrap link, v > 1; with receives posted ahead, 4 + r % 2 and 6 + r % 2: the unpaired
 * activations and gradients sent to stage r, and fwd the pairs only), each running its operations
 * one at a time in issue order. A send
 * completes only when its peer's stream is at the matching receive (synchronous: NCCL's and
 * ZL_SYNC_SENDS=1's rendezvous); a send-receive pair is one operation whose two halves match
 * separately. The main thread of a stage runs its list as pipeline.c and the loop do; with
 * receives posted ahead (pipeline_post.c) it posts each kind's first `ahead` unpaired receives
 * before its first operation, waits for the posted one where the list reads it, and then posts
 * the kind's next. */
enum { MX_SEND = 1, MX_RECV = 2, MX_NCOMM = 8, MX_AHEAD = 8, MX_HALVES = 4 };
/* One send or receive of an operation: dir MX_SEND / MX_RECV (0 once matched), its peer (a stage),
 * its message: kind·2^24 + chunk·2^12 + micro (chunk: the sender's). */
typedef struct mx_half {
  int dir, peer, msg;
} mx_half_t;
/* An operation of a stream: one send, one receive, or a group of them (a pair; NCCL's group of up
 * to two sends and two receives), done when every half matched. Within a group the halves with
 * one peer match in the order they were issued (NCCL's and MPI's order per peer). */
typedef struct mx_op {
  int nh, left;      /* halves, and those not matched yet */
  mx_half_t h[MX_HALVES];
} mx_op_t;

typedef struct mx_stream {
  int *q, head, tail; /* indices into the op table */
} mx_stream_t;

typedef struct mx {
  int P, M, v, V, split;
  int seg;     /* grouped with v > 1: the boundaries of pp_group_cuts (mx_step_seg) */
  int grouped; /* NCCL's batched p2p: every message on fwd (one stream), each operation's send held back
                * and grouped with the next operation's receive when it has one (else sent alone) */
  int ahead, parity; /* receives posted ahead (0: none); their streams by the receiver's parity (else fwd / bwd) */
  mx_op_t *op;
  int nop, cap;
  mx_stream_t st[8][MX_NCOMM]; /* [stage][comm] */
} mx_t;

static int mx_msg(int kind, int chunk, int micro) { return kind * (1 << 24) + chunk * (1 << 12) + micro; }
static void mx_name(int msg, char *buf, size_t n) {
  snprintf(buf, n, "%s of micro-batch %d from chunk %d", msg >> 24 ? "gradient" : "activation", msg & 4095, (msg >> 12) & 4095);
}

/* Queue an operation on stage s's stream of communicator c; returns its index. */
static int mx_issue_halves(mx_t *x, int s, int c, int nh, const mx_half_t *h) {
  mx_op_t *o = &x->op[x->nop];
  o->nh = o->left = nh;
  for (int i = 0; i < nh; i++) o->h[i] = h[i];
  mx_stream_t *q = &x->st[s][c];
  q->q[q->tail++] = x->nop;
  return x->nop++;
}

static int mx_issue(mx_t *x, int s, int c, int parts, int to, int msg_s, int from, int msg_r) {
  mx_half_t h[2];
  int nh = 0;
  if (parts & MX_SEND) h[nh++] = (mx_half_t){MX_SEND, to, msg_s};
  if (parts & MX_RECV) h[nh++] = (mx_half_t){MX_RECV, from, msg_r};
  return mx_issue_halves(x, s, c, nh, h);
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
          say(why, nwhy, "the messages cross: stage %d sends the %s while stage %d receives, in that place of the "
              "link's order, the %s", a, s1, hs->peer, s2);
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

/* One stage's main thread: the links of its chunks, its position, what it waits for. */
typedef struct mx_main {
  int pc, phase, wait; /* wait: an op index that must complete first (−1: none) */
  int pend_kind, pend_k, pend_c; /* a send held back for its pair: 'F' / 'B', micro, chunk index j */
  int pend_to, pend_msg;         /* ... its peer and message */
  int *sent;           /* [v·M] the activation send of (chunk j, micro k), −1: none */
  int gsent[8][2];     /* [chunk j][k % 2] the gradient send, −1: none */
  char pf[4096], pb[4096];
  /* receives posted ahead: per kind (0 activations in, 1 gradients in) the unpaired receives in the
   * order the list reads them (micro-batch, chunk j), how many posted and read, the posted ones'
   * operations (ring), and the kind whose next receive is posted once the wait is over (−1: none) */
  int qn[2], *qk[2], *qj[2], posted[2], used[2], ring[2][MX_AHEAD], opened, repost;
  /* segments (grouped, v > 1: pp_group_cuts): cut[i] = 1 where a group boundary precedes operation i;
   * the sends held for the next boundary's group (their kind 'F' / 'B', chunk j, micro-batch) */
  char *cut;
  int npend, segrecv;
  mx_half_t pend[MX_HALVES];
  int pend_kk[MX_HALVES], pend_jj[MX_HALVES], pend_mm[MX_HALVES];
} mx_main_t;

static int mx_done(const mx_t *x, int id) { return id < 0 || x->op[id].left == 0; }

/* The communicator and peer of a chunk's link: dir 0 the input side (c − 1), 1 the output side (c + 1);
 * data 0 activations, 1 gradients. */
static void mx_link(const mx_t *x, int s, int dir, int data, int *comm, int *peer) {
  int wrap = dir == 0 ? s == 0 : s == x->P - 1;
  *comm = data + (wrap ? 2 : 0);
  *peer = dir == 0 ? (wrap ? x->P - 1 : s - 1) : (wrap ? 0 : s + 1);
  if (x->grouped) *comm = 0; /* one communicator: the wrap link's peers are ranks of it too */
  if (!wrap && x->ahead && x->parity) { /* the stage the message goes to: its parity's stream */
    int to = dir == 0 ? (data == 0 ? s : s - 1) : (data == 0 ? s + 1 : s);
    *comm = 4 + 2 * data + to % 2;
  }
}

/* Is the send of stage s's current operation held back for the next receive? Where pf / pb say
 * (v = 1): pp_pairs's pairs, or grouped, pp_groups's. */
static int mx_hold(const mx_t *x, const mx_main_t *mm, int s, pp_op_t *const *ops) {
  pp_op_t o = ops[s][mm->pc];
  return x->v == 1 && (o.kind == 'F' ? mm->pf[o.micro] : mm->pb[o.micro]);
}

static void mx_hold_send(mx_main_t *mm, int kind, int k, int j, int to, int msg) {
  mm->pend_kind = kind, mm->pend_k = k, mm->pend_c = j, mm->pend_to = to, mm->pend_msg = msg;
}

/* The held send and this receive (from `from`, message msg_r) as one operation on fwd. */
static void mx_group(mx_t *x, mx_main_t *mm, int s, int from, int msg_r) {
  mm->wait = mx_issue(x, s, 0, MX_SEND | MX_RECV, mm->pend_to, mm->pend_msg, from, msg_r);
  if (mm->pend_kind == 'F') mm->sent[mm->pend_c * x->M + mm->pend_k] = -1;
  else mm->gsent[mm->pend_c][mm->pend_k % 2] = -1;
  mm->pend_kind = 0;
}

/* Post kind a's next receive ahead (its link, its message), on stage s's stream. */
static void mx_post(mx_t *x, mx_main_t *mm, int s, int a) {
  int i = mm->posted[a], j = mm->qj[a][i], k = mm->qk[a][i], c = j * x->P + s, comm, peer;
  mx_link(x, s, a, a, &comm, &peer); /* activations in: the input side; gradients in: the output side */
  mm->ring[a][i % x->ahead] = mx_issue(x, s, comm, MX_RECV, -1, 0, peer, a ? mx_msg(1, c + 1, k) : mx_msg(0, c - 1, k));
  mm->posted[a]++;
}

/* Where the list reads kind a's receive of (chunk j, micro-batch k) posted ahead: it must be the
 * kind's next; wait for it, and post the kind's next once it is in. */
static int mx_take(mx_t *x, mx_main_t *mm, int s, int a, int j, int k, char *why, size_t nwhy) {
  int i = mm->used[a];
  if (i >= mm->qn[a] || mm->qk[a][i] != k || mm->qj[a][i] != j)
    return say(why, nwhy, "stage %d: the %s of micro-batch %d (chunk %d) is not the next receive posted ahead", s,
               a ? "gradient" : "activation", k, j);
  mm->wait = mm->ring[a][i % x->ahead];
  mm->used[a]++;
  if (mm->posted[a] < mm->qn[a]) mm->repost = a;
  return 0;
}

/* Advance stage s's main thread as far as it goes; returns 1 when it moved. */
static int mx_step(mx_t *x, mx_main_t *mm, int s, pp_op_t *const *ops, const int *n, char *why, size_t nwhy, int *err) {
  int moved = 0, P = x->P;
  while (mm->pc < n[s]) {
    if (!mx_done(x, mm->wait)) return moved;
    mm->wait = -1;
    if (mm->repost >= 0) mx_post(x, mm, s, mm->repost), mm->repost = -1, moved = 1;
    if (x->ahead && !mm->opened) { /* the step's first receives, before its first operation */
      mm->opened = 1, moved = 1;
      for (int a = 0; a < 2; a++)
        while (mm->posted[a] < mm->qn[a] && mm->posted[a] < x->ahead) mx_post(x, mm, s, a);
    }
    pp_op_t o = ops[s][mm->pc];
    int j = o.chunk, c = j * P + s, k = o.micro, comm, peer;
    if (o.kind == 'F') {
      if (mm->phase == 0) {
        mm->phase = 1;
        if (c > 0) {
          mx_link(x, s, 0, 0, &comm, &peer);
          if (mm->pend_kind) { /* the held send with this receive, one operation on the forward link */
            mx_group(x, mm, s, peer, mx_msg(0, c - 1, k));
          } else if (x->ahead) {
            if (mx_take(x, mm, s, 0, j, k, why, nwhy)) return *err = 1, moved;
          } else mm->wait = mx_issue(x, s, comm, MX_RECV, -1, 0, peer, mx_msg(0, c - 1, k));
          moved = 1;
          continue;
        }
      }
      if (c < x->V - 1) {
        mx_link(x, s, 1, 0, &comm, &peer);
        if (mx_hold(x, mm, s, ops)) mx_hold_send(mm, 'F', k, j, peer, mx_msg(0, c, k));
        else mm->sent[j * x->M + k] = mx_issue(x, s, comm, MX_SEND, peer, mx_msg(0, c, k), -1, 0);
      }
      mm->pc++, mm->phase = 0, moved = 1;
    } else if (o.kind == 'B') {
      if (mm->phase == 0) {
        mm->phase = 1;
        if (c < x->V - 1) {
          mx_link(x, s, 1, 1, &comm, &peer);
          if (mm->pend_kind) {
            mx_group(x, mm, s, peer, mx_msg(1, c + 1, k));
          } else if (x->ahead) {
            if (mx_take(x, mm, s, 1, j, k, why, nwhy)) return *err = 1, moved;
          } else mm->wait = mx_issue(x, s, comm, MX_RECV, -1, 0, peer, mx_msg(1, c + 1, k));
          moved = 1;
          continue;
        }
      }
      if (mm->phase == 1) { /* the input gradient's buffer k % 2: its previous send must have left */
        mm->phase = 2;
        if (c > 0 && mm->gsent[j][k % 2] >= 0) {
          mm->wait = mm->gsent[j][k % 2];
          mm->gsent[j][k % 2] = -1;
          moved = 1;
          continue;
        }
      }
      if (mm->phase == 2) {
        mm->phase = 3;
        if (c > 0) {
          mx_link(x, s, 0, 1, &comm, &peer);
          if (mx_hold(x, mm, s, ops)) mx_hold_send(mm, 'B', k, j, peer, mx_msg(1, c, k));
          else mm->gsent[j][k % 2] = mx_issue(x, s, comm, MX_SEND, peer, mx_msg(1, c, k), -1, 0);
        }
        moved = 1;
        if (!x->split) { /* the slot goes back: its output's send must have left */
          mm->wait = mm->sent[j * x->M + k];
          mm->sent[j * x->M + k] = -1;
        }
        continue;
      }
      mm->pc++, mm->phase = 0, moved = 1;
    } else { /* W: the slot goes back after it */
      if (mm->phase == 0) {
        mm->phase = 1;
        mm->wait = mm->sent[j * x->M + k];
        mm->sent[j * x->M + k] = -1;
        moved = 1;
        continue;
      }
      mm->pc++, mm->phase = 0, moved = 1;
    }
  }
  if (mm->pend_kind && !*err) {
    *err = 1;
    say(why, nwhy, "stage %d: the %s of micro-batch %d was held for a pair that never came", s,
        mm->pend_kind == 'F' ? "activation" : "input gradient", mm->pend_k);
  }
  return moved;
}

/* Does operation o of stage s receive (F: its input from chunk c − 1; B: its output's gradient
 * from chunk c + 1), and does it send? */
static int op_receives(int P, int V, int s, pp_op_t o) {
  int c = o.chunk * P + s;
  return (o.kind == 'F' && c > 0) || (o.kind == 'B' && c < V - 1);
}
static int op_sends(int P, int V, int s, pp_op_t o) {
  int c = o.chunk * P + s;
  return (o.kind == 'F' && c < V - 1) || (o.kind == 'B' && c > 0);
}

/* The segment that starts at operation i (cut[i]): its end (the next cut), and whether it receives. */
static int seg_end(const char *cut, int n, int i) {
  int e = i + 1;
  while (e < n && !(cut[e] & 1)) e++;
  return e;
}

/* Grouped with segments (x->seg: interleaved on NCCL): at each boundary (cut) ONE group of the
 * sends held since the last boundary and the receives of the operations up to the next one; a
 * boundary whose next segment receives nothing sends what is held as one group of sends. The
 * main thread waits for a boundary's group before the segment's first operation. */
static int mx_step_seg(mx_t *x, mx_main_t *mm, int s, pp_op_t *const *ops, const int *n, char *why, size_t nwhy,
                       int *err) {
  int moved = 0, P = x->P, V = x->V;
  while (mm->pc < n[s]) {
    if (!mx_done(x, mm->wait)) return moved;
    mm->wait = -1;
    pp_op_t o = ops[s][mm->pc];
    int j = o.chunk, c = j * P + s, k = o.micro, comm, peer;
    if (mm->phase == 0) { /* the boundary before this operation: its group */
      mm->phase = 1;
      if (mm->cut[mm->pc] & 1) {
        int e = seg_end(mm->cut, n[s], mm->pc), nh = 0;
        mx_half_t h[MX_HALVES];
        for (int i = 0; i < mm->npend; i++) h[nh++] = mm->pend[i];
        for (int i = mm->pc; i < e; i++) {
          pp_op_t r = ops[s][i];
          if (!op_receives(P, V, s, r)) continue;
          int cr = r.chunk * P + s;
          mx_link(x, s, r.kind == 'F' ? 0 : 1, r.kind == 'F' ? 0 : 1, &comm, &peer);
          if (nh == MX_HALVES) return *err = 1, say(why, nwhy, "stage %d: a group of more than %d", s, MX_HALVES), moved;
          h[nh++] = (mx_half_t){MX_RECV, peer, r.kind == 'F' ? mx_msg(0, cr - 1, r.micro) : mx_msg(1, cr + 1, r.micro)};
        }
        if (nh > mm->npend) { /* a group with receives: the held sends go in it */
          mm->wait = mx_issue_halves(x, s, 0, nh, h);
          for (int i = 0; i < mm->npend; i++)
            if (mm->pend_kk[i] == 'F') mm->sent[mm->pend_jj[i] * x->M + mm->pend_mm[i]] = -1;
            else mm->gsent[mm->pend_jj[i]][mm->pend_mm[i] % 2] = -1;
          mm->npend = 0;
        } else if (nh) return *err = 1, say(why, nwhy, "stage %d: sends held for a segment with no receive", s), moved;
        moved = 1;
        continue;
      }
    }
    if (o.kind == 'B' && mm->phase == 1) { /* the input gradient's buffer k % 2: its previous send must have left */
      mm->phase = 2;
      for (int i = 0; i < mm->npend && c > 0; i++)
        if (mm->pend_kk[i] == 'B' && mm->pend_jj[i] == j && mm->pend_mm[i] % 2 == k % 2)
          return *err = 1, say(why, nwhy, "stage %d: B %d of chunk %d needs its input-gradient buffer %d, whose send is "
                               "held", s, k, j, k % 2), moved;
      if (c > 0 && mm->gsent[j][k % 2] >= 0) {
        mm->wait = mm->gsent[j][k % 2];
        mm->gsent[j][k % 2] = -1;
        moved = 1;
        continue;
      }
    }
    if (mm->phase <= 2) { /* the operation ran: its send held for the next boundary, or (flush) the held ones now */
      mm->phase = 3;
      if (op_sends(P, V, s, o)) {
        mx_link(x, s, o.kind == 'F' ? 1 : 0, o.kind == 'F' ? 0 : 1, &comm, &peer);
        int i = mm->npend++;
        mm->pend[i] = (mx_half_t){MX_SEND, peer, o.kind == 'F' ? mx_msg(0, c, k) : mx_msg(1, c, k)};
        mm->pend_kk[i] = o.kind, mm->pend_jj[i] = j, mm->pend_mm[i] = k;
        if (mm->cut[mm->pc] & 2) {
          int id = mx_issue_halves(x, s, 0, mm->npend, mm->pend);
          for (int i2 = 0; i2 < mm->npend; i2++)
            if (mm->pend_kk[i2] == 'F') mm->sent[mm->pend_jj[i2] * x->M + mm->pend_mm[i2]] = id;
            else mm->gsent[mm->pend_jj[i2]][mm->pend_mm[i2] % 2] = id;
          mm->npend = 0;
        }
      }
      if (o.kind == 'B' && !x->split) { /* the slot goes back: its output's send must have left */
        for (int i = 0; i < mm->npend; i++)
          if (mm->pend_kk[i] == 'F' && mm->pend_jj[i] == j && mm->pend_mm[i] == k)
            return *err = 1, say(why, nwhy, "stage %d: B %d of chunk %d gives its slot back while its output's send is "
                                 "held", s, k, j), moved;
        mm->wait = mm->sent[j * x->M + k];
        mm->sent[j * x->M + k] = -1;
      }
      moved = 1;
      continue;
    }
    mm->pc++, mm->phase = 0, moved = 1;
  }
  if (mm->npend && !*err) {
    *err = 1;
    say(why, nwhy, "stage %d: %d sends held at the end of the list", s, mm->npend);
  }
  return moved;
}

/* The held sends go at once (bit 1 of cut[i]) at the last send of each segment whose next segment
 * receives nothing (or that ends the list): no boundary would take them. cut[i] & 1: the boundaries. */
static void group_flush(int P, int s, int v, const pp_op_t *ops, int n, char *cut) {
  int V = v * P;
  for (int i = 0; i < n; i++) cut[i] &= 1;
  for (int i = 0; i < n;) {
    int e = seg_end(cut, n, i), last = -1, recv = 0;
    for (int i2 = i; i2 < e; i2++)
      if (op_sends(P, V, s, ops[i2])) last = i2;
    int e2 = e < n ? seg_end(cut, n, e) : e;
    for (int i2 = e; i2 < e2; i2++) recv |= op_receives(P, V, s, ops[i2]);
    if (last >= 0 && !recv) cut[last] |= 2;
    i = e;
  }
}

/* Interleaved on NCCL (Megatron-LM's forward_backward_pipelining_with_interleaving): a boundary
 * before every operation but the B of a steady-state pair (F, B) — the pair's two sends go together
 * after its B, its two receives together before its F (send_forward_backward_recv_forward_backward). */
void pp_group_cuts(pp_schedule_t sched, int P, int s, int M, int v, const pp_op_t *ops, int n, char *cut) {
  (void)sched;
  int w = (P - s - 1) * 2 + (v - 1) * P; /* the warm-up forwards (pp_schedule_ops), then the pairs */
  if (w > v * M) w = v * M;
  for (int i = 0; i < n; i++) cut[i] = 1;
  for (int i = w; i + 1 < n && i < 2 * v * M - w; i += 2) /* the steady pairs: F at w, w + 2, ..., B after it */
    if (ops[i].kind == 'F' && ops[i + 1].kind == 'B') cut[i + 1] = 0;
  group_flush(P, s, v, ops, n, cut);
}

/* Grouped (pp_groups): hf[k] / hb[k] = 1 when F k's / B k's send is held back for the receive of
 * the next operation that is not a W, that one receiving (v = 1). */
static void groups_from_list(int P, int s, int v, const pp_op_t *ops, int n, char *hf, char *hb) {
  if (v != 1) return;
  for (int i = 0; i < n; i++) {
    pp_op_t o = ops[i];
    if (!((o.kind == 'F' && s < P - 1) || (o.kind == 'B' && s > 0))) continue; /* no send */
    int i2 = i + 1;
    while (i2 < n && ops[i2].kind == 'W') i2++;
    if (i2 < n && ((ops[i2].kind == 'F' && s > 0) || (ops[i2].kind == 'B' && s < P - 1)))
      (o.kind == 'F' ? hf : hb)[o.micro] = 1;
  }
}

void pp_groups(pp_schedule_t sched, int P, int s, int M, int v, char *hold_fwd, char *hold_bwd) {
  memset(hold_fwd, 0, (size_t)M), memset(hold_bwd, 0, (size_t)M);
  if (v != 1 || sched < 0 || sched >= PP_NSCHED || P < 1 || s < 0 || s >= P || M < 1) return;
  pp_op_t *ops = calloc((size_t)pp_schedule_nops(sched, M, v), sizeof *ops);
  int n = pp_schedule_ops(sched, P, s, M, v, ops);
  groups_from_list(P, s, v, ops, n, hold_fwd, hold_bwd);
  free(ops);
}

/* Stage s's receives of one kind ('F': activations in, 'B': gradients in) from its list, in order,
 * but those the previous operation's held send goes with (pairs pf / pb, v = 1). */
static int unpaired_recvs(int P, int s, int v, const pp_op_t *ops, int n, const char *pf, const char *pb, char kind,
                          pp_op_t *out) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    pp_op_t o = ops[i];
    int c = o.chunk * P + s;
    if (o.kind != kind || (kind == 'F' ? c == 0 : c == v * P - 1)) continue;
    if (v == 1 && i > 0 && ops[i - 1].kind == (kind == 'F' ? 'B' : 'F') && (kind == 'F' ? pb : pf)[ops[i - 1].micro])
      continue; /* a pair: the previous operation's send goes with this receive */
    out[m++] = o;
  }
  return m;
}

int pp_posted_recvs(pp_schedule_t sched, int P, int s, int M, int v, char kind, pp_op_t *out) {
  if (sched < 0 || sched >= PP_NSCHED || P < 1 || s < 0 || s >= P || M < 1 || v < 1) return 0;
  int nops = pp_schedule_nops(sched, M, v), m;
  pp_op_t *ops = calloc((size_t)nops, sizeof *ops), *tmp = out ? out : calloc((size_t)nops, sizeof *ops);
  char *pf = calloc((size_t)M, 1), *pb = calloc((size_t)M, 1);
  int n = pp_schedule_ops(sched, P, s, M, v, ops);
  pp_pairs(sched, P, s, M, v, pf, pb);
  m = unpaired_recvs(P, s, v, ops, n, pf, pb, kind, tmp);
  if (!out) free(tmp);
  free(ops), free(pf), free(pb);
  return m;
}

/* The stages' lists ops/n run against each other; pairs as pp_pairs decides for `sched` (−1: no
 * pairs, every message alone); ahead > 0: the unpaired receives posted that far ahead, on the
 * receiver's parity's streams when parity (pipeline_post.c), else on fwd / bwd. */
static int mx_run(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, int sched, int ahead, int parity,
                  int grouped, char *const *bounds, char *why, size_t nwhy) {
  if (P < 1 || P > 8 || M < 1 || M > 4095 || v < 1 || v > 8 || ahead < 0 || ahead > MX_AHEAD)
    return say(why, nwhy, "P %d, M %d, v %d, ahead %d: the checker takes P <= 8, M < 4096, v <= 8, ahead <= %d", P, M,
               v, ahead, MX_AHEAD);
  int bad = pp_check_lists(P, M, v, split, ops, n, why, nwhy);
  if (bad) return bad;
  mx_t x = {.P = P, .M = M, .v = v, .V = v * P, .split = split, .ahead = ahead, .parity = parity, .grouped = grouped,
           .seg = grouped && v > 1};
  for (int s = 0; s < P; s++) x.cap += 3 * n[s] + 8;
  x.op = calloc((size_t)x.cap, sizeof *x.op);
  mx_main_t *mm = calloc((size_t)P, sizeof *mm);
  for (int s = 0; s < P; s++) {
    for (int c = 0; c < MX_NCOMM; c++) x.st[s][c].q = calloc((size_t)x.cap, sizeof(int));
    mm[s].sent = malloc((size_t)v * M * sizeof(int));
    for (int i = 0; i < v * M; i++) mm[s].sent[i] = -1;
    for (int j = 0; j < 8; j++) mm[s].gsent[j][0] = mm[s].gsent[j][1] = -1;
    mm[s].wait = -1, mm[s].repost = -1;
    mm[s].cut = calloc((size_t)n[s] + 1, 1);
    if (x.seg && bounds) { /* given boundaries (pp_check_bounds), the flushes as pp_group_cuts's */
      for (int i = 0; i < n[s]; i++) mm[s].cut[i] = (char)(bounds[s][i] & 1);
      group_flush(P, s, v, ops[s], n[s], mm[s].cut);
    } else if (x.seg) pp_group_cuts((pp_schedule_t)sched, P, s, M, v, ops[s], n[s], mm[s].cut);
    if (grouped) groups_from_list(P, s, v, ops[s], n[s], mm[s].pf, mm[s].pb);
    else if (sched >= 0) pp_pairs((pp_schedule_t)sched, P, s, M, v, mm[s].pf, mm[s].pb);
    for (int a = 0; a < 2; a++) {
      mm[s].qk[a] = calloc((size_t)n[s] + 1, sizeof(int));
      mm[s].qj[a] = calloc((size_t)n[s] + 1, sizeof(int));
    }
    for (int a = 0; a < 2 && ahead; a++) { /* the unpaired receives, as pp_posted_recvs lists them */
      pp_op_t *q = calloc((size_t)n[s] + 1, sizeof *q);
      mm[s].qn[a] = unpaired_recvs(P, s, v, ops[s], n[s], mm[s].pf, mm[s].pb, a ? 'B' : 'F', q);
      for (int i = 0; i < mm[s].qn[a]; i++) mm[s].qk[a][i] = q[i].micro, mm[s].qj[a][i] = q[i].chunk;
      free(q);
    }
  }
  int progress = 1;
  while (!bad && progress) {
    progress = 0;
    for (int s = 0; s < P && !bad; s++)
      progress |= x.seg ? mx_step_seg(&x, &mm[s], s, ops, n, why, nwhy, &bad) : mx_step(&x, &mm[s], s, ops, n, why, nwhy, &bad);
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
          len += (size_t)snprintf(buf + len, sizeof buf - len, "%sstage %d at operation %d (%c %d)", len ? ", " : "", s,
                                  mm[s].pc, ops[s][mm[s].pc].kind, ops[s][mm[s].pc].micro);
        else if (len < sizeof buf - 96)
          len += (size_t)snprintf(buf + len, sizeof buf - len, "%sstage %d with %d sends or receives not matched",
                                  len ? ", " : "", s, open);
      }
    }
    if (bad) say(why, nwhy, "P %d, M %d: the stages deadlock (synchronous sends): %s", P, M, buf);
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

static int pp_check_messages_ahead(pp_schedule_t sched, int P, int M, int v, int ahead, int parity, int grouped,
                                   char *why, size_t nwhy);

int pp_check_run(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why, size_t nwhy) {
  return mx_run(P, M, v, split, ops, n, -1, 0, 0, 0, NULL, why, nwhy);
}

int pp_check_bounds(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *const *bounds, char *why,
                    size_t nwhy) {
  if (v < 2) return say(why, nwhy, "v %d: the boundaries' groups are interleaved's (v >= 2)", v);
  return mx_run(P, M, v, split, ops, n, -1, 0, 0, 1, bounds, why, nwhy);
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

static int pp_check_messages_ahead(pp_schedule_t sched, int P, int M, int v, int ahead, int parity, int grouped,
                                   char *why, size_t nwhy) {
  if (P < 1 || P > 8 || M < 1 || M > 4095 || v < 1 || v > 8 || sched < 0 || sched >= PP_NSCHED)
    return say(why, nwhy, "P %d, M %d, v %d: the checker takes P <= 8, M < 4096, v <= 8", P, M, v);
  int cap = pp_schedule_nops(sched, M, v), n[8];
  pp_op_t *ops[8];
  for (int s = 0; s < P; s++) {
    ops[s] = calloc((size_t)cap, sizeof(pp_op_t));
    n[s] = pp_schedule_ops(sched, P, s, M, v, ops[s]);
  }
  int bad = mx_run(P, M, v, pp_splits_backward(sched), ops, n, sched, ahead, parity, grouped, NULL, why, nwhy);
  if (bad && why && nwhy) { /* name the schedule */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", why);
    if (v > 1) snprintf(why, nwhy, "%s (v %d), P %d, M %d: %s", pp_schedule_name(sched), v, P, M, tmp);
    else snprintf(why, nwhy, "%s, P %d, M %d: %s", pp_schedule_name(sched), P, M, tmp);
  }
  for (int s = 0; s < P; s++) free(ops[s]);
  return bad;
}

int pp_check_schedule(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy) {
  return pp_check_messages(sched, P, M, v, why, nwhy); /* it checks the lists first */
}

/* ---- the simulator ---------------------------------------------------------------------------- */

int pp_simulate_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, const pp_cost_t *cost,
                      double c, pp_sim_t *out) {
  return pp_simulate_timeline(P, M, v, split, ops, n, cost, c, NULL, out);
}

int pp_simulate_timeline(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, const pp_cost_t *cost,
                         double c, double *const *at, pp_sim_t *out) {
  if (pp_check_lists(P, M, v, split, ops, n, NULL, 0)) return -1;
  int V = v * P;
  /* end[kind][chunk c][k], < 0 until it ran */
  double *end = malloc(3 * (size_t)V * M * sizeof *end), *free_at = calloc((size_t)P, sizeof *free_at);
  double *first = malloc((size_t)P * sizeof *first), *busy = calloc((size_t)P, sizeof *busy);
  int *pc = calloc((size_t)P, sizeof *pc);
  if (!end || !free_at || !first || !busy || !pc) {
    free(end), free(free_at), free(first), free(busy), free(pc);
    return -1;
  }
#define END(kind, ch, k) end[((size_t)(kind) * V + (size_t)(ch)) * M + (size_t)(k)]
  for (size_t i = 0; i < 3 * (size_t)V * M; i++) end[i] = -1;
  int left = 0, moved = 1;
  for (int s = 0; s < P; s++) left += n[s], first[s] = -1;
  while (left > 0 && moved) {
    moved = 0;
    for (int s = 0; s < P; s++)
      while (pc[s] < n[s]) {
        pp_op_t o = ops[s][pc[s]];
        int ch = o.chunk * P + s, k = o.micro, kind = o.kind == 'F' ? 0 : o.kind == 'B' ? 1 : 2;
        double ready; /* when its input is here */
        if (kind == 0) ready = ch == 0 ? 0 : END(0, ch - 1, k) < 0 ? -1 : END(0, ch - 1, k) + ((ch - 1) % P != s ? c : 0);
        else if (kind == 1) ready = ch == V - 1 ? END(0, ch, k) : END(1, ch + 1, k) < 0 ? -1 : END(1, ch + 1, k) + ((ch + 1) % P != s ? c : 0);
        else ready = END(1, ch, k);
        if (ready < 0) break;
        double t = kind == 0 ? cost[s].f : kind == 1 ? (split ? cost[s].b : cost[s].b + cost[s].w) : cost[s].w;
        t /= v;
        double start = ready > free_at[s] ? ready : free_at[s];
        if (first[s] < 0) first[s] = start;
        if (at) at[s][pc[s]] = start;
        free_at[s] = start + t;
        END(kind, ch, k) = start + t;
        busy[s] += t;
        pc[s]++, left--, moved = 1;
      }
  }
#undef END
  int ok = left == 0;
  if (ok && out) {
    double mk = 0, sp = 0, b = 0;
    for (int s = 0; s < P; s++) {
      mk = free_at[s] > mk ? free_at[s] : mk;
      sp = free_at[s] - first[s] > sp ? free_at[s] - first[s] : sp;
      b += busy[s];
    }
    b /= P;
    *out = (pp_sim_t){.makespan = mk, .span = sp, .busy = b, .bubble_makespan = mk > 0 ? (mk - b) / mk : 0};
    out->bubble = out->bubble_makespan;
  }
  free(end), free(free_at), free(first), free(busy), free(pc);
  return ok ? 0 : -1;
}

int pp_simulate(pp_schedule_t sched, int P, int M, int v, const pp_cost_t *cost, double c, pp_sim_t *out) {
  if (P < 1 || M < 1 || v < 1 || sched < 0 || sched >= PP_NSCHED || (sched != PP_INTERLEAVED && v != 1) ||
      (sched == PP_INTERLEAVED && M % P))
    return -1;
  int cap = pp_schedule_nops(sched, M, v), rc = -1;
  pp_op_t **ops = calloc((size_t)P, sizeof *ops);
  int *n = calloc((size_t)P, sizeof *n);
  if (ops && n) {
    int okalloc = 1;
    for (int s = 0; s < P; s++) {
      ops[s] = calloc((size_t)cap, sizeof(pp_op_t));
      if (!ops[s]) okalloc = 0;
      else n[s] = pp_schedule_ops(sched, P, s, M, v, ops[s]);
    }
    if (okalloc) rc = pp_simulate_lists(P, M, v, pp_splits_backward(sched), ops, n, cost, c, out);
    if (rc == 0 && out && sched == PP_ZB_H2) /* the paper's measure: the stage's own window */
      out->bubble = out->span > 0 ? (out->span - out->busy) / out->span : 0;
    for (int s = 0; s < P; s++) free(ops[s]);
  }
  free(ops);
  free(n);
  return rc;
}

/* The first closed form of chapter 07 for stages of busy times t[s] (pp_bubble_stages): the slowest
 * paces the steady state, step = M·t_max + (Σt − t_max)/v per micro-batch (naive: M·Σt). What the
 * simulator gives when the slowest stage is the last; the answer where it cannot run the case
 * (interleaved with M not a multiple of P: no such list). */
static double stages_closed_form(pp_schedule_t sched, int P, int M, int v, const double *t) {
  double sum = 0, max = 0;
  for (int s = 0; s < P; s++) sum += t[s] / M, max = t[s] / M > max ? t[s] / M : max;
  double step = sched == PP_NAIVE ? M * sum : M * max + (sum - max) / (sched == PP_INTERLEAVED ? v : 1);
  return step > 0 ? 1 - M * (sum / P) / step : 0;
}

/* v counts only for interleaved (the others have one chunk per stage whatever v says). */
static int sim_v(pp_schedule_t sched, int v) { return sched == PP_INTERLEAVED ? v : 1; }

double pp_bubble_formula(pp_schedule_t sched, int P, int M, int v) {
  v = sim_v(sched, v);
  if (sched == PP_INTERLEAVED && (P < 2 || M % P)) return (double)(P - 1) / (v * M + P - 1);
  pp_cost_t *cost = calloc((size_t)P, sizeof *cost);
  pp_sim_t r = {0};
  for (int s = 0; s < P && cost; s++) cost[s] = (pp_cost_t){1, 1, 1}; /* backward 2× the forward; B = W when split */
  int rc = cost ? pp_simulate(sched, P, M, v, cost, 0, &r) : -1;
  free(cost);
  return rc == 0 ? r.bubble : -1;
}

/* The bubble when the stages are not equal: t[s] = stage s's busy time per step (M micro-batches,
 * all its chunks), run through the simulator with a micro-batch's forward t[s]/3M and its backward
 * 2t[s]/3M (split: B = W = t[s]/3M), no message cost. The slowest stage paces the steady state;
 * where it is the last one the step is M·t_max + (Σt − t_max)/v per micro-batch time t = t[s]/M
 * (chapter 07's first closed form, which the notes' measured tables used), where an earlier one
 * is slowest the later ones catch up in the cool-down and the simulated bubble is smaller. Naive
 * runs every micro-batch through all stages in turn: (P−1)/P whatever the split. */
double pp_bubble_stages(pp_schedule_t sched, int P, int M, int v, const double *t) {
  v = sim_v(sched, v);
  if (sched == PP_INTERLEAVED && (P < 2 || M % P)) return stages_closed_form(sched, P, M, v, t);
  pp_cost_t *cost = calloc((size_t)P, sizeof *cost);
  pp_sim_t r = {0};
  int split = pp_splits_backward(sched);
  for (int s = 0; s < P && cost; s++)
    cost[s] = (pp_cost_t){t[s] / (3.0 * M), (split ? 1.0 : 2.0) * t[s] / (3.0 * M), split ? t[s] / (3.0 * M) : 0};
  int rc = cost ? pp_simulate(sched, P, M, v, cost, 0, &r) : -1;
  free(cost);
  return rc == 0 ? r.bubble : -1;
}
