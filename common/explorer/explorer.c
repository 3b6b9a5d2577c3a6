/* explorer.c — the explorer page's WebAssembly exports (common/explorer/README.md): every number the
 * page shows comes from here, and here only calls the project's own C, compiled with emcc beside it:
 *   memory       common/train/memcalc.c (ch00_memory's calculator: the same flags, the same text and
 *                JSON), with formula.c, args.c, gpt.c and model.c;
 *   schedules    solutions/pipeline_sched.c (pp_schedule_ops, pp_schedule_fb, pp_inflight_formula) and
 *                pipeline_sim.c (pp_simulate, pp_simulate_fb, pp_bubble_formula), with what the simulator
 *                links (pipeline_check.c, pipeline_check_stage.c, pipeline_groups.c);
 *   collectives  solutions/ring.c itself (ring_reduce_scatter, ring_all_gather), run on N simulated
 *                ranks by the small communicator below (comm.h's ring-code side: p2p, local reduce,
 *                scratch), which records what every rank sends at every step.
 * The JavaScript (explorer.js) draws and reads sliders; it computes no number of its own.
 * Built by `make explorer` (emcc); not a layer, not in libzl. `make build` also compiles the same
 * files natively (build/tests/explorer_native: EXPORT is plain without __EMSCRIPTEN__), so a change
 * to comm.h or ring.c that would break the page breaks the build; suite common_explorer runs it. */
#include "comm.h"           // comm_t's ring-code side, comm_chunk_lo, comm_chunk_numel
#include "dtype.h"          // DT_F32
#include "memcalc.h"        // memcalc_main, memcalc_stage_states
#include "pipeline_sched.h" // pp_schedule_ops, pp_schedule_fb, pp_split, pp_inflight_formula, pp_op_t
#include "pipeline_sim.h"   // pp_simulate, pp_simulate_fb, pp_bubble_formula, pp_cost_t
#include "ring.h"           // ring_reduce_scatter, ring_all_gather
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

/* ---- collectives: solutions/ring.c on N simulated ranks --------------------------------------
 * Each rank runs the ring function alone, its comm_p2p_sendrecv answered from what its left
 * neighbour sent at the same step in the previous pass: a step's send depends only on earlier
 * steps' receives, so after N passes every rank has run on its neighbour's real data (the same
 * bits as N processes). What is recorded: per rank and step, the elements sent and the chunk
 * that the received data belongs to (from where ring.c adds or stores it), and the values. */
#define ZX_NMAX 8
#define ZX_EMAX 64 /* elements per rank's buffer, at most */

struct comm {
  int rank, world;
  const float *send; /* the rank's input buffer (chunk of a received piece: from where it is used) */
  float *recv;
  float scratch[2][ZX_EMAX];
  int step; /* sendrecv calls so far */
};

static float g_sent[2][ZX_NMAX][ZX_NMAX][ZX_EMAX]; /* [pass parity][rank][step][element] */
static int g_sent_n[ZX_NMAX][ZX_NMAX];            /* elements rank r sends at step s */
static int g_chunk[ZX_NMAX][ZX_NMAX];             /* the chunk rank r receives (and keeps) at step s */
static float g_after[ZX_NMAX][ZX_NMAX][ZX_EMAX];  /* that chunk's values on rank r after step s */
static float g_in[ZX_NMAX][ZX_EMAX], g_out[ZX_NMAX][ZX_EMAX];
static int g_pass, g_steps, g_numel, g_world;

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

/* The chunk a pointer into the rank's send or recv buffer starts (−1: elsewhere, e.g. scratch). */
static int chunk_of(const comm_t *c, const void *p) {
  for (int k = 0; k < c->world; k++) {
    int64_t lo = comm_chunk_lo(g_numel, c->world, k);
    if (p == c->send + lo || p == c->recv + lo) return k;
  }
  return -1;
}

void comm_p2p_sendrecv(comm_t *c, const void *sendbuf, int64_t send_numel, int dst, void *recvbuf,
                       int64_t recv_numel, int src, dtype_t dt) {
  int s = c->step++, r = c->rank;
  memcpy(g_sent[g_pass & 1][r][s], sendbuf, (size_t)send_numel * sizeof(float));
  g_sent_n[r][s] = (int)send_numel;
  /* what src sent at this step, in the previous pass (right once that pass ran on real data) */
  memcpy(recvbuf, g_sent[(g_pass + 1) & 1][src][s], (size_t)recv_numel * sizeof(float));
  int k = chunk_of(c, recvbuf);
  if (k >= 0) { /* the all-gather's: straight into its place in recv */
    g_chunk[r][s] = k;
    memcpy(g_after[r][s], recvbuf, (size_t)recv_numel * sizeof(float));
  }
  (void)dst;
  (void)dt;
}

void comm_local_reduce(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt, redop_t op) {
  float *d = dst;
  const float *x = src;
  for (int64_t i = 0; i < numel; i++) d[i] = op == REDOP_MAX ? (d[i] > x[i] ? d[i] : x[i]) : d[i] + x[i];
  /* the reduce-scatter's: the received partial sum plus this rank's own chunk (src, or dst in place) */
  int s = c->step - 1, k = chunk_of(c, src);
  if (k < 0) k = chunk_of(c, dst);
  if (s >= 0 && k >= 0) {
    g_chunk[c->rank][s] = k;
    memcpy(g_after[c->rank][s], dst, (size_t)numel * sizeof(float));
  }
  (void)dt;
}

void comm_local_copy(comm_t *c, void *dst, const void *src, int64_t numel, dtype_t dt) {
  memmove(dst, src, (size_t)numel * sizeof(float));
  (void)c;
  (void)dt;
}

/* Run ring op `op` (0: reduce-scatter, 1: all-gather) on N ranks of `per` elements per chunk, the
 * inputs chapter 01's: reduce-scatter's chunk j on rank r = [((r+1)(e+1))^(j+1)], e = 0..per−1 (the
 * three-rank example of notes/01-collectives.md); all-gather's input on rank r = [(r+1)(e+1)].
 * Returns the steps (N − 1), or −1 out of range. */
EXPORT int zx_ring(int op, int N, int per) {
  if (N < 2 || N > ZX_NMAX || per < 1 || N * per > ZX_EMAX || (op != 0 && op != 1)) return -1;
  g_world = N;
  g_numel = N * per;
  memset(g_sent, 0, sizeof g_sent);
  memset(g_chunk, 0xff, sizeof g_chunk);
  for (int r = 0; r < N; r++)
    for (int i = 0; i < g_numel; i++) {
      float x = (float)((r + 1) * (i % per + 1)), v = x;
      for (int j = 0; j < i / per; j++) v *= x;
      g_in[r][i] = op == 0 ? v : (i < per ? x : 0);
    }
  for (g_pass = 0; g_pass < N; g_pass++)
    for (int r = 0; r < N; r++) {
      static comm_t c;
      memset(&c, 0, sizeof c);
      c.rank = r, c.world = N, c.send = g_in[r], c.recv = g_out[r];
      memset(g_out[r], 0, sizeof g_out[r]);
      if (op == 0) ring_reduce_scatter(&c, g_in[r], g_out[r], g_numel, DT_F32, REDOP_SUM);
      else ring_all_gather(&c, g_in[r], g_out[r], g_numel, DT_F32);
    }
  g_steps = N - 1;
  return g_steps;
}
EXPORT int zx_ring_numel(void) { return g_numel; }
EXPORT double zx_ring_in(int r, int i) { return g_in[r][i]; }
EXPORT double zx_ring_out(int r, int i) { return g_out[r][i]; }
EXPORT int zx_ring_sent(int r, int s) { return g_sent_n[r][s]; }
EXPORT double zx_ring_sent_value(int r, int s, int i) { return g_sent[(g_pass + 1) & 1][r][s][i]; }
EXPORT int zx_ring_chunk(int r, int s) { return g_chunk[r][s]; }
EXPORT double zx_ring_after(int r, int s, int i) { return g_after[r][s][i]; }
/* The formulas beside: a step sends one chunk, numel/N elements of `bytes`; a call (N−1) of them. */
EXPORT double zx_ring_formula_step(int N, int numel, int bytes) { return (double)numel / N * bytes; }
EXPORT double zx_ring_formula_total(int N, int numel, int bytes) { return (N - 1.0) / N * numel * bytes; }
/* The ring model's bytes for one call, comm.h's rule: (N−1)/N of the buffer of numel elements of
 * `bytes` each per rank for reduce-scatter and all-gather (exact per rank for uneven chunks: the
 * buffer less the rank's own chunk). */
EXPORT double zx_ring_model_bytes(int N, int numel, int bytes, int rank) {
  return (double)(numel - comm_chunk_numel(numel, N, rank)) * bytes;
}
