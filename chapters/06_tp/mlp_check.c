/* ch06_mlp_check — the tensor-parallel MLP block (solutions/tp.c: the split linears, the
 * exercises) at T = 1, 2, 4 (those dividing the ranks) against the 1-rank block with the same
 * weights, x and dy; its all-reduce count and bytes against the formula
 * (notes/06-tensor-parallel.md, "Measured").
 *   make run CH=06 NP=4 PROG=mlp_check
 *   make run CH=06 NP=4 PROG=mlp_check ARGS="--collectives ring --batch 3 --hidden 7 --ffn 10" */
#include "args.h"   // arg_spec_t, args_parse, args_error, args_env_world
#include "check.h"  // xcalloc
#include "comm.h"   // comm_t, comm_counters, comm_ctl_all_reduce_f64
#include "grid.h"   // grid_t, grid_init, grid_free
#include "tp.h"     // tp_mlp_*, tp_row_slice, tp_part_lo, tp_mlp_bytes_per_step
#include <math.h>   // fabs
#include <stdio.h>  // snprintf, printf
#include <stdlib.h> // free
#include <string.h> // strcmp

#define TOL 1e-6 /* TP vs 1 rank, fp32: max|TP − 1 rank| / max|1 rank| */

/* Rank 0 prints text (the block's lines, in order). */
static void print0(comm_t *c, const char *text) {
  if (comm_rank(c) == 0) {
    fputs(text, stdout);
    fflush(stdout);
  }
}

/* ---- the MLP block against 1 rank ----------------------------------------------------------- */
static uint64_t g_rng;
static float rnd(void) { /* uniform in [-1, 1), the same sequence on every rank */
  g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}
static float *rnd_new(int64_t n, float scale) {
  float *p = xcalloc((size_t)n, sizeof(float), "mlp check tensor");
  for (int64_t i = 0; i < n; i++) p[i] = scale * rnd();
  return p;
}
static double rel_diff(const float *got, const float *ref, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    if (fabs((double)got[i] - ref[i]) > d) d = fabs((double)got[i] - ref[i]);
    if (fabs(ref[i]) > m) m = fabs(ref[i]);
  }
  return m > 0 ? d / m : d;
}

typedef struct mlp_opts {
  int B, h, ffn, tp;
  uint64_t seed;
  const char *impl;
} mlp_opts_t;

/* One T: every TP group computes the same block; returns 1 when within TOL and counted right. */
static int mlp_check_one(comm_t *world, const mlp_opts_t *o, int T) {
  int B = o->B, h = o->h, ffn = o->ffn;
  grid_t *g = grid_init(world, T, 1);
  comm_t *tp = g->comm[GRID_TP];
  comm_set_impl(tp, strcmp(o->impl, "ring") == 0 ? COLL_RING : COLL_VENDOR);
  int r = comm_rank(tp);
  g_rng = o->seed;
  float *x = rnd_new((int64_t)B * h, 1), *dy = rnd_new((int64_t)B * h, 1);
  float *W1 = rnd_new((int64_t)ffn * h, 0.2f), *b1 = rnd_new(ffn, 0.1f);
  float *W2 = rnd_new((int64_t)h * ffn, 0.1f), *b2 = rnd_new(h, 0.1f);
  /* the 1-rank block, with the plain ops */
  float *y = xcalloc((size_t)B * h, sizeof(float), "ref"), *dx = xcalloc((size_t)B * h, sizeof(float), "ref");
  float *dW1 = xcalloc((size_t)ffn * h, sizeof(float), "ref"),
        *db1 = xcalloc((size_t)ffn, sizeof(float), "ref");
  float *dW2 = xcalloc((size_t)h * ffn, sizeof(float), "ref"),
        *db2 = xcalloc((size_t)h, sizeof(float), "ref");
  tp_mlp_reference(B, h, ffn, x, W1, b1, W2, b2, dy, y, dx, dW1, db1, dW2, db2);
  /* the tensor-parallel block */
  tp_mlp_t *m = tp_mlp_new(tp, B, h, ffn, W1, b1, W2, b2);
  float *ty = xcalloc((size_t)B * h, sizeof(float), "tp y"),
        *tdx = xcalloc((size_t)B * h, sizeof(float), "tp dx");
  comm_counters_reset(tp);
  tp_mlp_forward(m, ty, x);
  tp_mlp_backward(m, tdx, dy, x);
  comm_wait_all(tp);
  comm_counters_t k = comm_counters(tp);
  int lo = tp_part_lo(ffn, T, r), fr = m->ffn_r;
  float *slice = xcalloc((size_t)h * fr, sizeof(float), "dW2 slice");
  tp_row_slice(slice, dW2, ffn, h, T, r);
  /* worst over every rank: [y dx dW1 db1 dW2 db2], then counters off the formula */
  double e[8] = {rel_diff(ty, y, (int64_t)B * h),
                 rel_diff(tdx, dx, (int64_t)B * h),
                 rel_diff(m->dW1, dW1 + (int64_t)lo * h, (int64_t)fr * h),
                 rel_diff(m->db1, db1 + lo, fr),
                 rel_diff(m->dW2, slice, (int64_t)h * fr),
                 rel_diff(m->db2, db2, h)};
  int64_t want_bytes = tp_mlp_bytes_per_step(B, h, T, r);
  e[6] = k.calls[CO_ALL_REDUCE] != tp_mlp_calls_per_step();
  e[7] = k.sent[CO_ALL_REDUCE] != want_bytes;
  comm_ctl_all_reduce_f64(world, e, 8, REDOP_MAX);
  int ok = e[6] == 0 && e[7] == 0;
  for (int i = 0; i < 6; i++) ok = ok && e[i] <= TOL;
  if (comm_rank(world) == 0) {
    char f[96], d[6][16];
    if (((int64_t)B * h) % T == 0) snprintf(f, sizeof f, "2 × 2(%d−1)/%d × %d·%d × 4 B", T, T, B, h);
    else snprintf(f, sizeof f, "ring model, %d·%d not divisible by %d, rank 0", B, h, T);
    printf("T=%d (%d group%s of %d): all-reduces %lld (formula 2: g forward, f backward), bytes sent per "
           "rank %lld "
           "(formula %s = %lld)%s\n",
           T, g->size[GRID_DP], g->size[GRID_DP] == 1 ? "" : "s", T, (long long)k.calls[CO_ALL_REDUCE],
           (long long)k.sent[CO_ALL_REDUCE], f, (long long)want_bytes,
           e[6] == 0 && e[7] == 0 ? "" : "  (a rank is OFF the formula)");
    for (int i = 0; i < 6; i++) {
      if (e[i] == 0) snprintf(d[i], sizeof d[i], "0");
      else snprintf(d[i], sizeof d[i], "%.1e", e[i]);
    }
    printf("T=%d max rel diff: y %s  dx %s  dW1 %s  db1 %s  dW2 %s  db2 %s  %s\n", T, d[0], d[1], d[2], d[3],
           d[4], d[5], ok ? "ok" : "FAILED");
    fflush(stdout);
  }
  tp_mlp_free(m);
  free(slice), free(ty), free(tdx), free(x), free(dy), free(W1), free(b1), free(W2), free(b2);
  free(y), free(dx), free(dW1), free(db1), free(dW2), free(db2);
  grid_free(g);
  return ok;
}

static int run_mlp_check(comm_t *world, const mlp_opts_t *o) {
  int N = comm_world(world), all_ok = 1;
  char line[512];
  snprintf(
      line, sizeof line,
      "Tensor-parallel MLP block y = GELU(x·W1ᵀ + b1)·W2ᵀ + b2 against the 1-rank block (same weights, "
      "x, "
      "dy)\n"
      "B %d, h %d, ffn %d, fp32, %d ranks, %s collectives; W1 split by rows (column-parallel), W2 by columns "
      "(row-parallel)\n"
      "max rel diff = max|TP − 1 rank| / max|1 rank| per tensor, worst rank (weight gradients: this rank's "
      "slice); 0 = bitwise; tolerance %g\n\n",
      o->B, o->h, o->ffn, N, o->impl, TOL);
  print0(world, line);
  static const int Ts[] = {1, 2, 4};
  for (int i = 0; i < 3; i++) {
    int T = Ts[i];
    if ((o->tp && T != o->tp) || N % T) continue;
    all_ok &= mlp_check_one(world, o, T);
  }
  if (o->tp && o->tp != 1 && o->tp != 2 && o->tp != 4) all_ok &= mlp_check_one(world, o, o->tp);
  print0(world,
         all_ok ? "\nok: every T matches the 1-rank block within 1e-6, and every count equals the formula\n"
                : "\nFAILED: see the lines above\n");
  return all_ok ? 0 : 1;
}

int main(int argc, char **argv) {
  mlp_opts_t o = {8, 32, 128, 0, 1, "vendor"};
  int64_t seed = 1;
  arg_spec_t specs[] = {
      {"--tp", ARG_INT, &o.tp, 0, 64, NULL,
       "tensor-parallel size T (0: every T in 1, 2, 4 dividing the ranks)"},
      {"--batch", ARG_INT, &o.B, 1, 4096, NULL, "rows B of the block's input"},
      {"--hidden", ARG_INT, &o.h, 1, 4096, NULL, "model width h"},
      {"--ffn", ARG_INT, &o.ffn, 1, 16384, NULL, "hidden width of the MLP block (Megatron: 4h)"},
      {"--seed", ARG_I64, &seed, 0, 1e15, NULL, "seed of the weights and inputs"},
      {"--collectives", ARG_CHOICE, &o.impl, 0, 0, "vendor|ring",
       "the TP all-reduces: MPI's or solutions/ring.c"},
  };
  int rc = args_parse(
      argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), "ch06_mlp_check",
      "The tensor-parallel MLP block checked against the 1-rank block, its all-reduces against the\n"
      "formula. Example: make run CH=06 NP=4 PROG=mlp_check");
  if (rc == 1) return 0;
  if (rc) return 2;
  int N = args_env_world();
  char v[32];
  if (o.tp && N % o.tp) {
    snprintf(v, sizeof v, "%d", o.tp);
    return args_error("--tp", v, "T must divide the number of ranks (%d)", N);
  }
  if (o.ffn < (o.tp ? o.tp : 4)) {
    snprintf(v, sizeof v, "%d", o.ffn);
    return args_error("--ffn", v, "must be >= T (%d): every rank needs at least one hidden feature",
                      o.tp ? o.tp : 4);
  }
  o.seed = (uint64_t)seed;
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60); /* a check that hangs should say so */
  int status = run_mlp_check(c, &o);
  comm_finalize(c);
  return status;
}
