/* explorer.c — the explorer page's WebAssembly exports (common/explorer/README.md): every number the
 * page shows comes from here, and here only calls the project's own C, compiled with emcc beside it:
 *   memory       common/train/memcalc.c (ch00_memory's calculator: the same flags, the same text and
 *                JSON), with formula.c, args.c, gpt.c and model.c;
 *   schedules    solutions/pipeline_sched.c (pp_schedule_ops, pp_schedule_fb, pp_inflight_formula) and
 *                pipeline_sim.c (pp_simulate, pp_simulate_fb, pp_bubble_formula), with what the simulator
 *                links (pipeline_check.c, pipeline_check_stage.c, pipeline_groups.c);
 *   collectives  solutions/ring.c itself (reduce-scatter, all-gather, all-reduce, broadcast, reduce)
 *                and alltoall.c (the pairwise all-to-all), run on N simulated ranks by the small
 *                communicator below (comm.h's ring-code side: p2p, local reduce, scratch), which
 *                records what every rank sends at every step;
 *   compression  chapter 13's bytes per rank per step by method: formula.c, solutions/powersgd.c
 *                (powersgd_bytes), onebit.c (onebit_run_bytes), qgz.c (zeropp_bytes), with ddp.c's
 *                buckets, shard.c's padding, qwz.c's words (zx_compress).
 * The JavaScript (explorer.js) draws and reads sliders; it computes no number of its own.
 * Built by `make explorer` (emcc); not a layer, not in libzl. `make build` also compiles the same
 * files natively (build/tests/explorer_native: EXPORT is plain without __EMSCRIPTEN__), so a change
 * to comm.h or ring.c that would break the page breaks the build; suite common_explorer runs it. */
#include "comm.h"           // comm_t's ring-code side, comm_chunk_lo, comm_chunk_numel
#include "dtype.h"          // DT_F32
#include "memcalc.h"        // memcalc_main, memcalc_stage_states
#include "pipeline_sched.h" // pp_schedule_ops, pp_schedule_fb, pp_split, pp_inflight_formula, pp_op_t
#include "pipeline_sim.h"   // pp_simulate, pp_simulate_fb, pp_bubble_formula, pp_cost_t
#include "alltoall.h"       // pairwise_all_to_all
#include "ring.h"           // ring_reduce_scatter, ring_all_gather, ring_all_reduce, ring_broadcast, ...
#include "check.h"          // xcalloc, die_on_rank: defined here for the page
#include "formula.h"        // formula_comm_bytes
#include "gpt.h"            // gpt_shape_error, gpt_unit_sizes
#include "onebit.h"         // onebit_run_bytes
#include "powersgd.h"       // powersgd_bytes
#include "qgz.h"            // zeropp_bytes
#include "zero.h"           // shard_plan
#include <stdarg.h>         // va_list (die_on_rank)
#include <stdio.h>          // open_memstream, fopen, fprintf
#include <stdlib.h>         // free, calloc, exit
#include <string.h>         // strtok, memcpy
#ifdef __EMSCRIPTEN__
#include <emscripten.h> // EMSCRIPTEN_KEEPALIVE
#define EXPORT EMSCRIPTEN_KEEPALIVE
#else /* the native build (make build): plain functions */
#define EXPORT
#endif

/* ---- memory: ch00_memory's calculator ------------------------------------------------------- */

static char *g_text;        /* what ch00_memory prints for the last line (stdout) */
static char g_json[16384];  /* the --json file it writes */
static char g_line[2048];

/* Run ch00_memory with the flags of `line` (space-separated, as typed after the program's name),
 * its --json into the page's memory file system. Returns its exit code: 0, or 2 for a bad flag
 * (its line went to stderr, which the page shows). */
EXPORT int zx_memory(const char *line) {
  char *argv[64];
  int argc = 0;
  snprintf(g_line, sizeof g_line, "ch00_memory %s --json /zx_memory.json", line);
  for (char *tok = strtok(g_line, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
  argv[argc] = NULL;
  remove("/zx_memory.json");
  free(g_text);
  g_text = NULL;
  size_t n = 0;
  FILE *out = open_memstream(&g_text, &n);
  int rc = memcalc_main(argc, argv, memcalc_stage_states, pp_split, out);
  fclose(out);
  fflush(stderr);
  g_json[0] = 0;
  FILE *fp = rc == 0 ? fopen("/zx_memory.json", "r") : NULL;
  if (fp) {
    size_t got = fread(g_json, 1, sizeof g_json - 1, fp);
    g_json[got] = 0;
    fclose(fp);
  }
  return rc;
}
EXPORT const char *zx_memory_text(void) { return g_text ? g_text : ""; }
EXPORT const char *zx_memory_json(void) { return g_json; }

/* ---- schedules: the simulator --------------------------------------------------------------- */

#define ZX_PMAX 32
#define ZX_OPMAX (3 * 8 * 64) /* 2vM with v <= 8, M <= 64; 3vM with a split backward */
static pp_op_t g_ops[ZX_PMAX][ZX_OPMAX];
static double g_at[ZX_PMAX][ZX_OPMAX];
static char g_fb[ZX_PMAX][ZX_OPMAX]; /* pp_schedule_fb: dualpipev's F&B groups (1 opens, 2 follows) */
static int g_n[ZX_PMAX];
static pp_cost_t g_cost[ZX_PMAX];
static pp_sim_t g_sim;
static int g_split, g_v;
EXPORT double zx_sched_dur(int s, int i);

/* Simulate one step of schedule `sched` (pp_schedule_t, dualpipev included) on P equal stages (ranks),
 * M micro-batches, v chunks (interleaved; dualpipev has its 2), a micro-batch's forward f,
 * input-gradient backward b, weight-gradient backward w through ALL of a stage's units (a schedule
 * without a split runs b + w as one B; with v chunks each chunk's operation costs 1/v of it), message
 * time c; dualpipev's F&B at the sum of its operations (no overlap gained). Returns 0, or −1 where the
 * schedule does not run (interleaved: M a multiple of P; dualpipev: M >= 2P; out of range). The
 * bubble is pp_simulate's (ZB-H2's over the stage's own window, span). Inside an F&B the timeline
 * starts each operation where the one before it ends (the simulator starts them as one). */
EXPORT int zx_sched(int sched, int P, int M, int v, double f, double b, double w, double c) {
  if (sched < 0 || sched >= PP_NSCHED || P < 1 || P > ZX_PMAX || M < 1 || M > 64 || v < 1 || v > 8) return -1;
  v = pp_schedule_chunks(sched, v);
  if (pp_schedule_nops(sched, M, v) > ZX_OPMAX) return -1;
  pp_op_t *ops[ZX_PMAX];
  double *at[ZX_PMAX];
  char *fb[ZX_PMAX];
  for (int s = 0; s < P; s++) {
    g_cost[s] = (pp_cost_t){f, b, w};
    ops[s] = g_ops[s], at[s] = g_at[s], fb[s] = g_fb[s];
    g_n[s] = pp_schedule_ops(sched, P, s, M, v, ops[s]);
    pp_schedule_fb(sched, P, s, M, v, fb[s]);
  }
  if (pp_simulate(sched, P, M, v, g_cost, c, &g_sim) != 0) return -1;
  g_split = pp_splits_backward(sched), g_v = v;
  pp_sim_t tl;
  if (pp_simulate_fb(P, M, v, pp_list_flags(sched), ops, g_n, fb, g_cost, 0, c, at, NULL, &tl)) return -1;
  for (int s = 0; s < P; s++)
    for (int i = 1; i < g_n[s]; i++)
      if (g_fb[s][i] == 2) at[s][i] = at[s][i - 1] + zx_sched_dur(s, i - 1);
  return 0;
}
/* The last zx_sched's results: pp_sim_t's fields, and stage s's operations with their start. */
EXPORT double zx_sched_bubble(void) { return g_sim.bubble; }
EXPORT double zx_sched_bubble_makespan(void) { return g_sim.bubble_makespan; }
EXPORT double zx_sched_makespan(void) { return g_sim.makespan; }
EXPORT double zx_sched_span(void) { return g_sim.span; }
EXPORT double zx_sched_busy(void) { return g_sim.busy; }
EXPORT int zx_sched_nops(int s) { return s >= 0 && s < ZX_PMAX ? g_n[s] : 0; }
EXPORT int zx_sched_kind(int s, int i) { return g_ops[s][i].kind; }
EXPORT int zx_sched_micro(int s, int i) { return g_ops[s][i].micro; }
EXPORT int zx_sched_chunk(int s, int i) { return g_ops[s][i].chunk; }
EXPORT int zx_sched_fb(int s, int i) { return g_fb[s][i]; }
EXPORT double zx_sched_start(int s, int i) { return g_at[s][i]; }
/* How long operation i of stage s runs: pp_simulate_lists' rule (pipeline_sim.h): F f, B b (+ w
 * without a split), W w, each over v chunks. */
EXPORT double zx_sched_dur(int s, int i) {
  pp_op_t o = g_ops[s][i];
  pp_cost_t k = g_cost[s];
  return (o.kind == 'F' ? k.f : o.kind == 'B' ? (g_split ? k.b : k.b + k.w) : k.w) / g_v;
}
/* The bubble of equal stages with the backward 2× the forward (pp_bubble_formula: the closed forms'
 * simulator), and the micro-batch-chunks stage s holds at once (pp_inflight_formula: a slot from F k
 * to k's last operation; interleaved's and dualpipev's chunks hold 1/v of the stage's activations). */
EXPORT double zx_bubble_formula(int sched, int P, int M, int v) {
  return pp_bubble_formula(sched, P, M, sched == PP_INTERLEAVED ? v : 1);
}
EXPORT int zx_inflight(int sched, int P, int s, int M, int v) {
  return pp_inflight_formula(sched, P, s, M, pp_schedule_chunks(sched, v));
}

/* The closed form of the bubble beside the simulator's (pipeline_sim.h; Qi et al. 2023), equal
 * stages: bubble time per step over the step, the step = M(f + b + w) + the bubble time:
 *   naive (P−1)M(f+b+w)   gpipe, 1f1b (P−1)(f+b+w)   interleaved (P−1)(f+b+w)/v
 *   zb-h1 (P−1)(f+b−w)   zb-h2 (P−1)(f+b−2w), at least 0 (over the stage's own window).
 * Each only inside its range (zx_bubble_closed_range), where it equals the simulator's (suite
 * common_explorer sweeps it); outside, −1. dualpipev: none here (ch07_pipeline --simulate prints
 * DeepSeek's). */
EXPORT double zx_bubble_closed(int sched, int P, int M, int v, double f, double b, double w, double c) {
  double t = f + b + w, idle;
  if (c != 0) return -1;
  switch (sched) {
  case PP_NAIVE: idle = (P - 1.0) * M * t; break;
  case PP_GPIPE:
  case PP_1F1B: idle = (P - 1.0) * t; break;
  case PP_INTERLEAVED: idle = (P - 1.0) * t / v; break;
  case PP_ZB_H1:
    if (M < P || w > f || w > b) return -1;
    idle = (P - 1.0) * (f + b - w);
    break;
  case PP_ZB_H2:
    if (M < 2 * P - 1 || w > f || w > b) return -1;
    idle = (P - 1.0) * (f + b - 2 * w);
    break;
  default: return -1;
  }
  if (idle < 0) idle = 0;
  return idle / (idle + M * t);
}
/* Where schedule `sched`'s closed form holds (what zx_bubble_closed checks), in words. */
EXPORT const char *zx_bubble_closed_range(int sched) {
  switch (sched) {
  case PP_NAIVE:
  case PP_GPIPE:
  case PP_1F1B: return "c = 0";
  case PP_INTERLEAVED: return "c = 0, M a multiple of P";
  case PP_ZB_H1: return "c = 0, M >= P, W <= F, W <= B";
  case PP_ZB_H2: return "c = 0, M >= 2P-1, W <= F, W <= B";
  default: return "none here: ch07_pipeline --simulate prints DeepSeek's";
  }
}

/* ---- collectives: solutions/ring.c and alltoall.c on N simulated ranks -----------------------
 * Each rank runs the collective alone, one after the other; its k-th receive from rank q is answered
 * with the k-th message q sent it in the previous pass (MPI's order between a pair of ranks). A
 * message depends only on earlier messages, so the passes repeat until one sends exactly what the
 * pass before it sent (at most one pass per step, plus one): then every rank ran on real data, the
 * same bits as N processes. A message's step: 0 from a rank that has received nothing yet, else one
 * after the latest step it has received (a ring's step s, the all-gather of an all-reduce after its
 * reduce-scatter, a chain's hop). Recorded: what every rank sends at each step, and the piece of its
 * buffer that it receives (and adds its own values to) at that step, with the values after. */
#define ZX_NMAX 8
#define ZX_EMAX 64 /* elements per rank's buffer, at most */
#define ZX_SMAX 16 /* steps, at most: 2(N − 1) for the all-reduce */

enum { ZX_RS, ZX_AG, ZX_AR, ZX_BCAST, ZX_REDUCE, ZX_A2A, ZX_NOPS };

struct comm {
  int rank, world;
  const float *send; /* the rank's buffers: a received piece is named by its offset in one of them */
  float *recv;
  float scratch[2][ZX_EMAX];
  int nsent[ZX_NMAX], nrecv[ZX_NMAX]; /* messages so far to and from each rank */
  int clock;                          /* the step of its next message */
  int last;                           /* the step of the last message it received (−1: none) */
};

typedef struct zx_msg {
  int n, step, dst;
  float v[ZX_EMAX];
} zx_msg_t;

/* The collectives panel's state: the messages of the last two passes and what the last one did. */
typedef struct zx_coll {
  zx_msg_t box[2][ZX_NMAX][ZX_NMAX][ZX_SMAX]; /* [pass parity][src][dst][k-th message] */
  zx_msg_t sent[ZX_NMAX][ZX_SMAX];            /* [rank][step] what it sent (n 0: nothing) */
  int lo[ZX_NMAX][ZX_SMAX], n[ZX_NMAX][ZX_SMAX]; /* [rank][step] the piece received, −1: none */
  float after[ZX_NMAX][ZX_SMAX][ZX_EMAX];        /* that piece's values after the step */
  float in[ZX_NMAX][ZX_EMAX], out[ZX_NMAX][ZX_EMAX];
  int pass, steps, op, numel, in_numel, world;
} zx_coll_t;
static zx_coll_t g_c;

int comm_rank(const comm_t *c) { return c->rank; }
int comm_world(const comm_t *c) { return c->world; }
/* A slot of ZX_EMAX floats; more would be written past it by ring.c: one line and exit 1 instead. */
void *comm_scratch(comm_t *c, int slot, int64_t nbytes) {
  if (nbytes > (int64_t)(ZX_EMAX * sizeof(float))) {
    fprintf(stderr, "explorer: comm_scratch of %lld bytes, past a slot's %d floats (ZX_EMAX)\n",
            (long long)nbytes, ZX_EMAX);
    exit(1);
  }
  return c->scratch[slot & 1];
}

/* Where a pointer into the rank's send or recv buffer lies, in elements (−1: elsewhere, e.g. scratch). */
static int offset_of(const comm_t *c, const void *p) {
  const float *f = p;
  if (c->recv && f >= c->recv && f < c->recv + ZX_EMAX) return (int)(f - c->recv);
  if (c->send && f >= c->send && f < c->send + ZX_EMAX) return (int)(f - c->send);
  return -1;
}
static void record(comm_t *c, int lo, const float *v, int64_t numel) {
  if (lo < 0 || c->last < 0 || c->last >= ZX_SMAX) return;
  g_c.lo[c->rank][c->last] = lo, g_c.n[c->rank][c->last] = (int)numel;
  memcpy(g_c.after[c->rank][c->last], v, (size_t)numel * sizeof(float));
}

void comm_p2p_send(comm_t *c, const void *buf, int64_t numel, dtype_t dt, int dst) {
  int k = c->nsent[dst]++, s = c->clock;
  if (k >= ZX_SMAX || s >= ZX_SMAX || numel > ZX_EMAX) return; /* past the range: zx_ring refused it */
  zx_msg_t *m = &g_c.box[g_c.pass & 1][c->rank][dst][k];
  m->n = (int)numel, m->step = s, m->dst = dst;
  memcpy(m->v, buf, (size_t)numel * sizeof(float));
  g_c.sent[c->rank][s] = *m;
  (void)dt;
}
void comm_p2p_recv(comm_t *c, void *buf, int64_t numel, dtype_t dt, int src) {
  int k = c->nrecv[src]++;
  const zx_msg_t *m = &g_c.box[(g_c.pass + 1) & 1][src][c->rank][k < ZX_SMAX ? k : 0];
  memcpy(buf, m->v, (size_t)numel * sizeof(float)); /* the previous pass's (zeros in the first) */
  c->last = m->step;
  if (m->step + 1 > c->clock) c->clock = m->step + 1;
  record(c, offset_of(c, buf), buf, numel); /* a piece that lands in place (all-gather, chains) */
  (void)dt;
}
void comm_p2p_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                       int64_t recv_numel, int src, dtype_t dt) {
  comm_p2p_send(c, sendbuf, send_numel, dt, dst);
  comm_p2p_recv(c, recvbuf, recv_numel, dt, src);
}

void comm_local_reduce(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op) {
  float *d = dst;
  const float *x = src;
  for (int64_t i = 0; i < numel; i++) d[i] = op == REDOP_MAX ? (d[i] > x[i] ? d[i] : x[i]) : d[i] + x[i];
  /* the received partial sum plus this rank's own piece (src, or dst in place) */
  int lo = offset_of(c, src);
  record(c, lo >= 0 ? lo : offset_of(c, dst), d, numel);
  (void)dt;
}

void comm_local_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt) {
  memmove(dst, src, (size_t)numel * sizeof(float));
  (void)c;
  (void)dt;
}

/* Rank r's input, chapter 01's (chapters/01_collectives/main.c: the same values, so that
 * ch01_collectives --impl ring prints what the page shows): reduce-scatter's and the all-reduce's chunk
 * j = [((r+1)(e+1))^(j+1)] (the three-rank example of notes/01-collectives.md at 2 per chunk);
 * all-gather's [10r + e + 1]; broadcast from rank 0 of [1, 2, 3, 4] (the others zeros); reduce to rank 0
 * of (r+1)·[1, 2, 3, 4]; all-to-all's block j (for rank j) = [10(r+1) + j + 100e]. */
static float input(int op, int r, int i, int per) {
  int j = i / per, e = i % per;
  float x = (float)((r + 1) * (e + 1)), v = x;
  switch (op) {
  case ZX_AG: return (float)(10 * r + e + 1);
  case ZX_BCAST: return r == 0 ? (float)(i + 1) : 0;
  case ZX_REDUCE: return (float)((r + 1) * (i + 1));
  case ZX_A2A: return (float)(10 * (r + 1) + j + 100 * e);
  default:
    for (int k = 0; k < j; k++) v *= x;
    return v;
  }
}

/* One pass: every rank runs collective `op` on what the previous pass sent. */
static void coll_pass(int op, int N, int per) {
  int64_t cnt[ZX_NMAX], displ[ZX_NMAX];
  for (int j = 0; j < N; j++) cnt[j] = per, displ[j] = (int64_t)j * per;
  memset(g_c.box[g_c.pass & 1], 0, sizeof g_c.box[0]);
  memset(g_c.sent, 0, sizeof g_c.sent);
  memset(g_c.lo, 0xff, sizeof g_c.lo);
  for (int r = 0; r < N; r++) {
    comm_t c = {.rank = r, .world = N, .send = g_c.in[r], .recv = g_c.out[r], .last = -1};
    float *in = g_c.in[r], *out = g_c.out[r];
    memset(out, 0, sizeof g_c.out[r]);
    switch (op) {
    case ZX_RS: ring_reduce_scatter(&c, in, out, g_c.numel, DT_F32, REDOP_SUM); break;
    case ZX_AG: ring_all_gather(&c, in, out, g_c.numel, DT_F32); break;
    case ZX_AR: /* in place, on a copy of the input: reduce-scatter, then all-gather from its output */
    case ZX_BCAST:
      memcpy(out, in, (size_t)g_c.numel * sizeof(float));
      c.send = out;
      if (op == ZX_AR) ring_all_reduce(&c, out, g_c.numel, DT_F32, REDOP_SUM);
      else ring_broadcast(&c, out, g_c.numel, DT_F32, 0);
      break;
    case ZX_REDUCE: ring_reduce(&c, in, out, g_c.numel, DT_F32, REDOP_SUM, 0); break;
    default: pairwise_all_to_all(&c, in, cnt, displ, out, cnt, displ, DT_F32);
    }
  }
}

/* Run collective `op` (0 reduce-scatter, 1 all-gather, 2 all-reduce, 3 broadcast from rank 0, 4 reduce
 * to rank 0, 5 all-to-all) on N ranks: `per` elements per chunk (the all-to-all's blocks; broadcast and
 * reduce move 4 elements, as chapter 01's). Returns the steps, or −1 out of range. */
EXPORT int zx_ring(int op, int N, int per) {
  if (N < 2 || N > ZX_NMAX || per < 1 || N * per > ZX_EMAX || op < 0 || op >= ZX_NOPS) return -1;
  memset(&g_c, 0, sizeof g_c);
  g_c.op = op, g_c.world = N;
  g_c.numel = op == ZX_BCAST || op == ZX_REDUCE ? 4 : N * per;
  g_c.in_numel = op == ZX_AG ? per : g_c.numel;
  for (int r = 0; r < N; r++)
    for (int i = 0; i < g_c.in_numel; i++) g_c.in[r][i] = input(op, r, i, per);
  for (g_c.pass = 0; g_c.pass < 2 * ZX_SMAX + 2; g_c.pass++) {
    coll_pass(op, N, per);
    if (g_c.pass > 0 && memcmp(g_c.box[0], g_c.box[1], sizeof g_c.box[0]) == 0) break; /* a fixed point */
  }
  g_c.steps = 0;
  for (int r = 0; r < N; r++)
    for (int s = 0; s < ZX_SMAX; s++)
      if (g_c.sent[r][s].n > 0 && s + 1 > g_c.steps) g_c.steps = s + 1;
  return g_c.steps;
}
EXPORT int zx_ring_numel(void) { return g_c.numel; }
EXPORT int zx_ring_in_numel(void) { return g_c.in_numel; }
/* What rank r's output holds: reduce-scatter its chunk, reduce the root's buffer (the others: nothing). */
EXPORT int zx_ring_out_numel(int r) {
  int per = g_c.numel / g_c.world;
  return g_c.op == ZX_RS ? per : g_c.op == ZX_REDUCE && r != 0 ? 0 : g_c.numel;
}
EXPORT double zx_ring_in(int r, int i) { return g_c.in[r][i]; }
EXPORT double zx_ring_out(int r, int i) { return g_c.out[r][i]; }
/* Rank r's message at step s: its elements (0: none), where to, its values. */
EXPORT int zx_ring_sent(int r, int s) { return g_c.sent[r][s].n; }
EXPORT int zx_ring_sent_to(int r, int s) { return g_c.sent[r][s].dst; }
EXPORT double zx_ring_sent_value(int r, int s, int i) { return g_c.sent[r][s].v[i]; }
/* The piece rank r received at step s: its offset in the buffer (−1: none), its length, values after. */
EXPORT int zx_ring_piece(int r, int s) { return g_c.lo[r][s]; }
EXPORT int zx_ring_piece_numel(int r, int s) { return g_c.n[r][s]; }
EXPORT double zx_ring_after(int r, int s, int i) { return g_c.after[r][s][i]; }
/* A step of the ring (and of the all-to-all) sends one chunk: numel/N elements of `bytes`. */
EXPORT double zx_ring_formula_step(int N, int numel, int bytes) { return (double)numel / N * bytes; }
/* The bytes rank r sends in one call of `op` on N ranks with a buffer of numel elements of `bytes`, the
 * ring model of comm.h and notes/01-collectives.md: reduce-scatter, all-gather and the all-to-all (N−1)/N
 * of the buffer (uneven chunks: the buffer less the rank's own chunk), the all-reduce twice that; the
 * chains (broadcast from rank 0, reduce to rank 0) the whole buffer from every rank but the chain's last. */
EXPORT double zx_ring_model_bytes(int op, int N, int numel, int bytes, int rank) {
  double part = (double)(numel - comm_chunk_numel(numel, N, rank)) * bytes, all = (double)numel * bytes;
  switch (op) {
  case ZX_AR: return 2 * part;
  case ZX_BCAST: return rank == N - 1 ? 0 : all;
  case ZX_REDUCE: return rank == 0 ? 0 : all;
  default: return part;
  }
}

/* ---- chapter 13: the bytes a rank sends per step, by method (notes/13-compression.md) ------------
 * The GPT of gpt.h at this shape (its units as gpt_init lays them out: gpt_unit_sizes, model_layout) on N
 * ranks in nodes of g (ranks r·g .. r·g + g − 1), the programs' own formulas: formula_comm_bytes for DDP
 * and ZeRO-3 (stages 0 and 3), powersgd_bytes (rank R), onebit_run_bytes (K all-reduce steps of S),
 * zeropp_bytes (the units padded by shard_plan; blocks of B) for qwZ, qwZ + hpZ, qgZ and all three. Each
 * method's bytes per rank per step (zx_compress_bytes) and across nodes per step, the mean over the
 * ranks (zx_compress_inter): the strategy's own where it states it (ZeRO++), else the ring rule of the
 * report (all of a rank's bytes where its ring neighbour r + 1 is on another node). Returns 0, or 2
 * where g does not divide N or the shape is not a GPT (its line on stderr). */
enum { ZX_DDP, ZX_POWERSGD, ZX_ONEBIT, ZX_ZERO3, ZX_QWZ, ZX_QWZ_HPZ, ZX_QGZ, ZX_ZEROPP, ZX_NCODES };
static double g_cbytes[ZX_NCODES], g_cinter[ZX_NCODES];
EXPORT double zx_compress_bytes(int k) { return k >= 0 && k < ZX_NCODES ? g_cbytes[k] : -1; }
EXPORT double zx_compress_inter(int k) { return k >= 0 && k < ZX_NCODES ? g_cinter[k] : -1; }

static int crosses(int r, int N, int g) { return N > 1 && ((r + 1) % N) / g != r / g; }

EXPORT int zx_compress(int L, int NH, int C, int T, int V, int fp32, int N, int g, int R, int B,
                       double bucket_mb, int K, int S) {
  gpt_shape_t s = {.n_layer = L, .n_head = NH, .n_embd = C, .seq_len = T, .vocab = V};
  const char *why = gpt_shape_error(s);
  if (why || N < 1 || g < 1 || N % g || R < 1 || B < 1 || S < 1 || K < 0) {
    fprintf(stderr, "zx_compress: %s\n", why ? why : "N, g, R, B, S >= 1, g dividing N, K >= 0");
    return 2;
  }
  model_t m = {.gpt = s, .n_units = L + 2};
  m.units = calloc((size_t)m.n_units, sizeof *m.units);
  for (int u = 0; u < m.n_units; u++)
    gpt_unit_sizes(s, u, &m.units[u].numel, &m.units[u].y_numel, &m.units[u].saved_numel);
  model_layout(&m);
  dtype_t wdt = fp32 ? DT_F32 : DT_BF16;
  double psi = (double)m.numel, b = (double)dtype_size(wdt), ring = 0; /* ring: ranks whose r + 1 is across */
  for (int r = 0; r < N; r++) ring += crosses(r, N, g);
  g_cbytes[ZX_DDP] = formula_comm_bytes(0, psi, N, wdt);
  g_cbytes[ZX_POWERSGD] = powersgd_bytes(&m, bucket_mb, N, R);
  g_cbytes[ZX_ONEBIT] = onebit_run_bytes(&m, bucket_mb, N, K, S, NULL);
  g_cbytes[ZX_ZERO3] = formula_comm_bytes(3, psi, N, wdt);
  for (int k = ZX_DDP; k <= ZX_ZERO3; k++) g_cinter[k] = g_cbytes[k] * ring / N;
  shard_plan(&m, N);
  static const int codes[][3] = {{1, 0, 0}, {1, 1, 0}, {0, 0, 1}, {1, 1, 1}}; /* qwz, hpz, qgz */
  for (int k = ZX_QWZ; k <= ZX_ZEROPP; k++) {
    const int *c = codes[k - ZX_QWZ];
    g_cbytes[k] = zeropp_bytes(&m, N, g, B, b, c[0], c[1], c[2], 0).all;
    g_cinter[k] = 0;
    for (int r = 0; r < N; r++)
      g_cinter[k] += zeropp_bytes(&m, N, g, B, b, c[0], c[1], c[2], crosses(r, N, g)).inter / N;
  }
  free(m.units);
  return 0;
}

/* check.c's two that the formulas above call, for the page alone (check.c itself reaches MPI). */
void *xcalloc(size_t n, size_t size, const char *what) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) fprintf(stderr, "out of memory: %s\n", what), exit(1);
  return p;
}
_Noreturn void die_on_rank(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}
