/* ch06_tp — tensor parallelism (Megatron-LM): split one layer across the ranks of a group.
 * Notes: notes/06-tensor-parallel.md.
 *   make run CH=06 NP=2 ARGS=--example      the worked example: which way of splitting Y = act(X·A)
 *                                           works, per rank, in rank order (what the tour runs)
 *   make run CH=06 NP=4 ARGS=--mlp-check    the tensor-parallel MLP block at T = 1, 2, 4 against
 *                                           the 1-rank block; all-reduce count and bytes vs formula
 *   make run CH=06 NP=4 ARGS="--grid --pp 1" which ranks form which TP / PP / DP group
 *   make run CH=06 NP=4 ARGS="--tp 2 --zero 1"  training: TP groups of 2 split every layer pair,
 *                                           ZeRO-1 (0: DDP) shards over the 2 data-parallel groups
 * The split layers themselves are solutions/tp.c (the exercises), the groups common/grid.c. */
#include "args.h"   // arg_spec_t, args_parse, args_error, args_env_world
#include "check.h"  // die, xcalloc
#include "comm.h"   // comm_t, comm_all_gather, comm_all_reduce, comm_print_ordered, comm_counters
#include "grid.h"   // grid_t, grid_init, grid_print
#include "ops.h"    // op_linear_fwd, op_gelu_fwd (the worked example)
#include "tp.h"     // tp_column_forward, tp_row_slice, tp_mlp_*, tp_mlp_bytes_per_step, tp_split_model
#include "ddp.h"    // ddp_strategy (--zero 0)
#include "zero.h"   // zero1_strategy, zero2_strategy, zero3_strategy (--zero 1|2|3)
#include "train.h"  // train_cfg_t, train_parse_args, train_main, TRAIN_FLAG_TP
#include <math.h>   // fabs
#include <stdio.h>  // snprintf, printf
#include <stdlib.h> // free
#include <string.h> // strcmp, memcpy

#define TOL 1e-6 /* TP vs 1 rank, fp32: max|TP − 1 rank| / max|1 rank| */

/* ---- printing ---------------------------------------------------------------------------- */
/* "[[7, 10], [1, 2]]" for a (rows, cols) row-major matrix. */
static const char *mat(char *dst, size_t n, const float *m, int rows, int cols) {
  size_t len = (size_t)snprintf(dst, n, "[");
  for (int i = 0; i < rows && len < n; i++) {
    len += (size_t)snprintf(dst + len, n - len, "%s[", i ? ", " : "");
    for (int j = 0; j < cols && len < n; j++)
      len += (size_t)snprintf(dst + len, n - len, "%s%.6g", j ? ", " : "", m[i * cols + j]);
    if (len < n) len += (size_t)snprintf(dst + len, n - len, "]");
  }
  if (len < n) snprintf(dst + len, n - len, "]");
  return dst;
}

static void say0(comm_t *c, const char *text) {
  if (comm_rank(c) == 0) {
    fputs(text, stdout);
    fflush(stdout);
  }
}

/* ---- the worked example ------------------------------------------------------------------ */
typedef enum { ACT_RELU, ACT_GELU } act_t;
static const char *act_name(act_t a) { return a == ACT_RELU ? "ReLU" : "GELU"; }
static void act(act_t a, float *y, const float *x, int n) {
  if (a == ACT_GELU) {
    op_gelu_fwd(DEV_CPU, y, x, n);
    return;
  }
  for (int i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}

/* Y = X·A as the library computes a linear: y = x·Wᵀ with W = Aᵀ (out, in). */
static void transpose2(float *dst, const float *src) {
  dst[0] = src[0], dst[1] = src[2], dst[2] = src[1], dst[3] = src[3];
}

/* The column split: rank r holds X and column r of A, i.e. row r of W = Aᵀ (tp_column_slice),
 * and computes act(X·A_r) alone; an all-gather of the columns is the whole act(X·A). */
static void example_column(comm_t *tp, const float *X, const float *A) {
  int r = comm_rank(tp);
  float W[4], W_r[2], xa_r[2], y_r[2], cols[4], Y[4], full[4];
  char a[96], b[96], line[320];
  transpose2(W, A);
  tp_column_slice(W_r, NULL, W, NULL, 2, 2, 2, r);
  tp_column_forward(tp, xa_r, X, W_r, NULL, DT_F32, 2, 2, 1); /* f (identity) + local matmul */
  act(ACT_RELU, y_r, xa_r, 2);
  float A_r[2] = {W_r[0], W_r[1]}; /* column r of A, as a (2, 1) matrix */
  snprintf(line, sizeof line, "rank %d: A%d = %s  ReLU(X·A%d) = %s\n", r, r + 1, mat(a, sizeof a, A_r, 2, 1), r + 1,
           mat(b, sizeof b, y_r, 2, 1));
  comm_print_ordered(tp, line);
  comm_all_gather(tp, y_r, cols, 4, DT_F32); /* [col 0 | col 1] */
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) Y[i * 2 + j] = cols[j * 2 + i];
  op_linear_fwd(DEV_CPU, full, X, W, (float[]){0, 0}, DT_F32, 2, 2, 2);
  act(ACT_RELU, full, full, 4);
  snprintf(line, sizeof line,
           "all-gather of the columns: %s   ReLU(X·A) = %s   %s\n"
           "  -> exact, for any activation: an output column needs only its own column of A, and the\n"
           "     activation acts on each element alone. No communication until the columns are needed.\n\n",
           mat(a, sizeof a, Y, 2, 2), mat(b, sizeof b, full, 2, 2), memcmp(Y, full, sizeof Y) ? "DIFFERENT" : "equal");
  say0(tp, line);
}

/* The row split: rank r holds column r of X and row r of A; X·A = X1·A1 + X2·A2. Applying act to
 * each partial product and then summing (all-reduce) is what would have to equal act(X·A). */
static void example_row(comm_t *tp, const float *X, const float *A, act_t fn, const char *xname) {
  int r = comm_rank(tp);
  float W[4], W_r[2], x_r[2], p[4], ap[4], sum[4], xa[4], full[4];
  char m1[96], m2[96], m3[128], m4[128], line[640];
  const char *an = act_name(fn);
  transpose2(W, A);
  tp_row_slice(W_r, W, 2, 2, 2, r); /* column r of W = row r of A, as (out 2, in_r 1) */
  tp_cols_of(x_r, X, 2, 2, 2, r);   /* column r of X */
  op_linear_fwd(DEV_CPU, p, x_r, W_r, (float[]){0, 0}, DT_F32, 2, 1, 2);
  act(fn, ap, p, 4);
  snprintf(line, sizeof line, "rank %d: %s%d = %s  A%d = %s  %s%d·A%d = %s  %s(%s%d·A%d) = %s\n", r, xname, r + 1,
           mat(m1, sizeof m1, x_r, 2, 1), r + 1, mat(m2, sizeof m2, W_r, 1, 2), xname, r + 1, r + 1,
           mat(m3, sizeof m3, p, 2, 2), an, xname, r + 1, r + 1, mat(m4, sizeof m4, ap, 2, 2));
  comm_print_ordered(tp, line);
  memcpy(sum, ap, sizeof sum);
  comm_all_reduce(tp, sum, 4, DT_F32, REDOP_SUM); /* g: the partial results summed */
  op_linear_fwd(DEV_CPU, xa, X, W, (float[]){0, 0}, DT_F32, 2, 2, 2);
  act(fn, full, xa, 4);
  int same = memcmp(sum, full, sizeof sum) == 0;
  snprintf(line, sizeof line, "all-reduce: %s(%s1·A1) + %s(%s2·A2) = %s\n            %s(%s·A) = %s(%s) = %s   %s\n", an,
           xname, an, xname, mat(m1, sizeof m1, sum, 2, 2), an, xname, an, mat(m2, sizeof m2, xa, 2, 2),
           mat(m3, sizeof m3, full, 2, 2), same ? "equal" : "DIFFERENT");
  say0(tp, line);
  /* where they differ, element by element: gather both partial products to name them */
  float parts[8];
  comm_all_gather(tp, p, parts, 8, DT_F32); /* parts[0..4) rank 0's X1·A1, [4..8) rank 1's X2·A2 */
  for (int i = 0; i < 4; i++) {
    if (sum[i] == full[i]) continue;
    snprintf(line, sizeof line, "  differ at [%d][%d]: %s(%g) + %s(%g) = %g  vs  %s(%g) = %g\n", i / 2, i % 2, an,
             parts[i], an, parts[4 + i], sum[i], an, xa[i], full[i]);
    say0(tp, line);
  }
}

static void run_example(comm_t *world) {
  grid_t *g = grid_init(world, 2, 1); /* one TP group of the 2 ranks */
  comm_t *tp = g->comm[GRID_TP];
  const float X[4] = {1, 2, 1, 0}, A[4] = {1, 2, 3, 4}, Xm[4] = {1, -2, 1, 0};
  char a[96], b[96], c[96], line[512];
  float W[4], XA[4];
  transpose2(W, A);
  op_linear_fwd(DEV_CPU, XA, X, W, (float[]){0, 0}, DT_F32, 2, 2, 2);
  snprintf(line, sizeof line,
           "Worked example: Y = act(X·A) with A split between 2 ranks (notes/06-tensor-parallel.md)\n"
           "X = %s   A = %s   X·A = %s\n\n"
           "1. Column split A = [A1 A2]: rank r holds all of X and column r of A\n",
           mat(a, sizeof a, X, 2, 2), mat(b, sizeof b, A, 2, 2), mat(c, sizeof c, XA, 2, 2));
  say0(tp, line);
  example_column(tp, X, A);
  say0(tp, "2. Row split X = [X1 X2], A = [A1; A2]: rank r holds column r of X and row r of A,\n"
           "   so X·A = X1·A1 + X2·A2 and an all-reduce adds the partial products. With ReLU:\n");
  example_row(tp, X, A, ACT_RELU, "X");
  say0(tp, "  -> it appears to work, but only because every partial product here is >= 0: ReLU is\n"
           "     the identity on non-negative numbers, so ReLU(a) + ReLU(b) = a + b = ReLU(a + b)\n"
           "     when a, b >= 0 (and when both are <= 0). Real activations have both signs.\n\n"
           "3. The same row split with GELU, the MLP block's activation: GELU is not additive anywhere\n"
           "   except where a partial is 0 (GELU(0) = 0)\n");
  example_row(tp, X, A, ACT_GELU, "X");
  snprintf(line, sizeof line, "\n4. The row split with ReLU on inputs of mixed sign: X' = %s\n",
           mat(a, sizeof a, Xm, 2, 2));
  say0(tp, line);
  example_row(tp, Xm, A, ACT_RELU, "X'");
  say0(tp, "\nSo Megatron splits the first linear of the MLP by columns (GELU then acts on whole columns,\n"
           "no communication) and the second by rows, whose partial products are summed by one\n"
           "all-reduce (g) BEFORE anything nonlinear: one all-reduce forward, one backward (f).\n");
  grid_free(g);
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
  float *dW1 = xcalloc((size_t)ffn * h, sizeof(float), "ref"), *db1 = xcalloc((size_t)ffn, sizeof(float), "ref");
  float *dW2 = xcalloc((size_t)h * ffn, sizeof(float), "ref"), *db2 = xcalloc((size_t)h, sizeof(float), "ref");
  tp_mlp_reference(B, h, ffn, x, W1, b1, W2, b2, dy, y, dx, dW1, db1, dW2, db2);
  /* the tensor-parallel block */
  tp_mlp_t *m = tp_mlp_new(tp, B, h, ffn, W1, b1, W2, b2);
  float *ty = xcalloc((size_t)B * h, sizeof(float), "tp y"), *tdx = xcalloc((size_t)B * h, sizeof(float), "tp dx");
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
    printf("T=%d (%d group%s of %d): all-reduces %lld (formula 2: g forward, f backward), bytes sent per rank %lld "
           "(formula %s = %lld)%s\n",
           T, g->size[GRID_DP], g->size[GRID_DP] == 1 ? "" : "s", T, (long long)k.calls[CO_ALL_REDUCE],
           (long long)k.sent[CO_ALL_REDUCE], f, (long long)want_bytes,
           e[6] == 0 && e[7] == 0 ? "" : "  (a rank is OFF the formula)");
    for (int i = 0; i < 6; i++) {
      if (e[i] == 0) snprintf(d[i], sizeof d[i], "0");
      else snprintf(d[i], sizeof d[i], "%.1e", e[i]);
    }
    printf("T=%d max rel diff: y %s  dx %s  dW1 %s  db1 %s  dW2 %s  db2 %s  %s\n", T, d[0], d[1], d[2], d[3], d[4],
           d[5], ok ? "ok" : "FAILED");
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
  snprintf(line, sizeof line,
           "Tensor-parallel MLP block y = GELU(x·W1ᵀ + b1)·W2ᵀ + b2 against the 1-rank block (same weights, x, dy)\n"
           "B %d, h %d, ffn %d, fp32, %d ranks, %s collectives; W1 split by rows (column-parallel), W2 by columns "
           "(row-parallel)\n"
           "max rel diff = max|TP − 1 rank| / max|1 rank| per tensor, worst rank (weight gradients: this rank's "
           "slice); 0 = bitwise; tolerance %g\n\n",
           o->B, o->h, o->ffn, N, o->impl, TOL);
  say0(world, line);
  static const int Ts[] = {1, 2, 4};
  for (int i = 0; i < 3; i++) {
    int T = Ts[i];
    if ((o->tp && T != o->tp) || N % T) continue;
    all_ok &= mlp_check_one(world, o, T);
  }
  if (o->tp && o->tp != 1 && o->tp != 2 && o->tp != 4) all_ok &= mlp_check_one(world, o, o->tp);
  say0(world, all_ok ? "\nok: every T matches the 1-rank block within 1e-6, and every count equals the formula\n"
                     : "\nFAILED: see the lines above\n");
  return all_ok ? 0 : 1;
}

/* ---- the grid ------------------------------------------------------------------------------ */
static void run_grid(comm_t *world, int tp, int pp) {
  int N = comm_world(world);
  for (int T = 1; T <= N / pp; T++) {
    if ((tp && T != tp) || (N / pp) % T) continue;
    grid_t *g = grid_init(world, T, pp);
    grid_print(g);
    say0(world, "\n");
    grid_free(g);
  }
}

/* Training (no --example / --mlp-check / --grid): the launcher of chapters 02-05 with --tp T, the
 * model split by tp_split_model, and --zero S choosing the strategy on the data dimension. */
static int run_training(int argc, char **argv) {
  int zero = 0;
  char **args = xcalloc((size_t)argc + 1, sizeof(char *), "args");
  int n = 0;
  for (int i = 0; i < argc; i++) { /* --zero S is this chapter's own; the rest are the shared flags */
    if (strcmp(argv[i], "--zero") == 0 || strncmp(argv[i], "--zero=", 7) == 0) {
      const char *v = argv[i][6] == '=' ? argv[i] + 7 : i + 1 < argc ? argv[++i] : "";
      if (strlen(v) != 1 || v[0] < '0' || v[0] > '3') return args_error("--zero", v, "allowed: 0|1|2|3 (0: DDP, bucketed)");
      zero = v[0] - '0';
      continue;
    }
    args[n++] = argv[i];
  }
  train_cfg_t cfg;
  train_parse_args(n, args, &cfg, "ch06_tp",
                   "Training with tensor parallelism: --tp T consecutive ranks split every layer pair (column, then\n"
                   "row-parallel), --zero 0|1|2|3 (0: DDP bucketed; 1/2/3: ZeRO) over the ranks / T data-parallel\n"
                   "groups. Other modes: --example, --mlp-check, --grid (ch06_tp --example --help).\n"
                   "Example: make run CH=06 NP=4 ARGS=\"--tp 2 --zero 1\"",
                   TRAIN_FLAG_TP | TRAIN_FLAG_BUCKET | (zero == 3 ? TRAIN_FLAG_PREFETCH : 0));
  cfg.transform = &tp_transform;
  if (cfg.tp > 1 && strcmp(cfg.model_kind, "gpt") == 0) { /* the GPT's split (tp.c): refused before MPI starts */
    char v[32];
    snprintf(v, sizeof v, "%d", cfg.tp);
    if (cfg.gpt.n_head % cfg.tp)
      return args_error("--tp", v, "the GPT's %d heads must split evenly over T ranks (--n-head divisible by T)", cfg.gpt.n_head);
    if (cfg.sample || cfg.eval_every)
      return args_error("--tp", v, "--sample and --eval-every need whole logits; the vocab-parallel head keeps V/T per row");
  }
  const strategy_t *s = zero == 0 ? ddp_strategy("bucketed") : zero == 1 ? zero1_strategy()
                      : zero == 2 ? zero2_strategy() : zero3_strategy();
  int rc = train_main(&cfg, s, "06_tp");
  free(args);
  return rc;
}

int main(int argc, char **argv) {
  int training = argc > 1;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--example") || !strcmp(argv[i], "--mlp-check") || !strcmp(argv[i], "--grid")) training = 0;
  if (training) return run_training(argc, argv);
  int example = 0, mlp_check = 0, grid = 0, tp = 0, pp = 1;
  mlp_opts_t o = {8, 32, 128, 0, 1, "vendor"};
  int64_t seed = 1;
  arg_spec_t specs[] = {
      {"--example", ARG_FLAG, &example, 0, 0, NULL, "the worked example on 2 ranks: column vs row split (the default)"},
      {"--mlp-check", ARG_FLAG, &mlp_check, 0, 0, NULL, "TP MLP block at T = 1, 2, 4 (those dividing N) vs 1 rank"},
      {"--grid", ARG_FLAG, &grid, 0, 0, NULL, "print which ranks form which TP / PP / DP group"},
      {"--tp", ARG_INT, &tp, 0, 64, NULL, "tensor-parallel size T (0: every T the mode tries)"},
      {"--pp", ARG_INT, &pp, 1, 64, NULL, "pipeline size P for --grid"},
      {"--batch", ARG_INT, &o.B, 1, 4096, NULL, "rows B of the MLP check"},
      {"--hidden", ARG_INT, &o.h, 1, 4096, NULL, "model width h of the MLP check"},
      {"--ffn", ARG_INT, &o.ffn, 1, 16384, NULL, "hidden width of the MLP block (Megatron: 4h)"},
      {"--seed", ARG_I64, &seed, 0, 1e15, NULL, "seed of the MLP check's weights and inputs"},
      {"--collectives", ARG_CHOICE, &o.impl, 0, 0, "vendor|ring", "the TP all-reduces: MPI's or solutions/ring.c"},
  };
  int rc = args_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), "ch06_tp",
                      "Tensor parallelism (Megatron-LM): the worked example, the TP MLP block checked against 1 rank,\n"
                      "and the process grid. Example: make run CH=06 NP=2 ARGS=--example");
  if (rc == 1) return 0;
  if (rc) return 2;
  int N = args_env_world();
  char v[32];
  if (example + mlp_check + grid > 1)
    return args_error("--example", NULL, "choose one of --example, --mlp-check, --grid");
  if (!mlp_check && !grid) example = 1;
  if (example && N != 2) {
    snprintf(v, sizeof v, "%d", N);
    return args_error("--example", NULL, "runs on exactly 2 ranks, not %s (make run CH=06 NP=2 ARGS=--example)", v);
  }
  if (grid && N % pp) {
    snprintf(v, sizeof v, "%d", pp);
    return args_error("--pp", v, "must divide the number of ranks (%d)", N);
  }
  if (tp && (N % (tp * (grid ? pp : 1)))) {
    snprintf(v, sizeof v, "%d", tp);
    return args_error("--tp", v, "T%s must divide the number of ranks (%d)", grid ? "·P" : "", N);
  }
  if (mlp_check && o.ffn < (tp ? tp : 4)) {
    snprintf(v, sizeof v, "%d", o.ffn);
    return args_error("--ffn", v, "must be >= T (%d): every rank needs at least one hidden feature", tp ? tp : 4);
  }
  o.tp = tp;
  o.seed = (uint64_t)seed;

  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60); /* a demo that hangs should say so */
  int status = 0;
  if (example) run_example(c);
  else if (mlp_check) status = run_mlp_check(c, &o);
  else run_grid(c, tp, pp);
  comm_finalize(c);
  return status;
}
