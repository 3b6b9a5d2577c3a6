/* ch06_example — tensor parallelism's worked example (notes/06-tensor-parallel.md): Y = act(X·A)
 * with A split between 2 ranks, by columns and by rows, with ReLU and GELU — which way of
 * splitting works, per rank, in rank order (what the tour runs).
 *   make run CH=06 NP=2 PROG=example
 * The split layers themselves are solutions/tp.c (the exercises). */
#include "args.h"   // arg_spec_t, args_parse, args_error, args_env_world
#include "comm.h"   // comm_t, comm_all_gather, comm_all_reduce, comm_print_ordered
#include "grid.h"   // grid_t, grid_init, grid_free
#include "ops.h"    // op_linear_fwd, op_gelu_fwd
#include "tp.h"     // tp_column_slice, tp_column_forward, tp_row_slice, tp_cols_of
#include <stdio.h>  // snprintf, fputs
#include <string.h> // memcmp, memcpy

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
  snprintf(line, sizeof line, "rank %d: A%d = %s  ReLU(X·A%d) = %s\n", r, r + 1, mat(a, sizeof a, A_r, 2, 1),
           r + 1, mat(b, sizeof b, y_r, 2, 1));
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
           mat(a, sizeof a, Y, 2, 2), mat(b, sizeof b, full, 2, 2),
           memcmp(Y, full, sizeof Y) ? "DIFFERENT" : "equal");
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
  snprintf(line, sizeof line, "rank %d: %s%d = %s  A%d = %s  %s%d·A%d = %s  %s(%s%d·A%d) = %s\n", r, xname,
           r + 1, mat(m1, sizeof m1, x_r, 2, 1), r + 1, mat(m2, sizeof m2, W_r, 1, 2), xname, r + 1, r + 1,
           mat(m3, sizeof m3, p, 2, 2), an, xname, r + 1, r + 1, mat(m4, sizeof m4, ap, 2, 2));
  comm_print_ordered(tp, line);
  memcpy(sum, ap, sizeof sum);
  comm_all_reduce(tp, sum, 4, DT_F32, REDOP_SUM); /* g: the partial results summed */
  op_linear_fwd(DEV_CPU, xa, X, W, (float[]){0, 0}, DT_F32, 2, 2, 2);
  act(fn, full, xa, 4);
  int same = memcmp(sum, full, sizeof sum) == 0;
  snprintf(line, sizeof line,
           "all-reduce: %s(%s1·A1) + %s(%s2·A2) = %s\n            %s(%s·A) = %s(%s) = %s   "
           "%s\n", an, xname,
           an, xname, mat(m1, sizeof m1, sum, 2, 2), an, xname, an, mat(m2, sizeof m2, xa, 2, 2),
           mat(m3, sizeof m3, full, 2, 2), same ? "equal" : "DIFFERENT");
  say0(tp, line);
  /* where they differ, element by element: gather both partial products to name them */
  float parts[8];
  comm_all_gather(tp, p, parts, 8, DT_F32); /* parts[0..4) rank 0's X1·A1, [4..8) rank 1's X2·A2 */
  for (int i = 0; i < 4; i++) {
    if (sum[i] == full[i]) continue;
    snprintf(line, sizeof line, "  differ at [%d][%d]: %s(%g) + %s(%g) = %g  vs  %s(%g) = %g\n", i / 2, i % 2,
             an, parts[i], an, parts[4 + i], sum[i], an, xa[i], full[i]);
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

int main(int argc, char **argv) {
  int rc = args_parse(
      argc, argv, NULL, 0, "ch06_example",
      "Tensor parallelism's worked example on exactly 2 ranks: Y = act(X·A), A split by columns, then\n"
      "by rows, with ReLU and GELU. Example: make run CH=06 NP=2 PROG=example");
  if (rc == 1) return 0;
  if (rc) return 2;
  int N = args_env_world();
  if (N != 2) {
    char v[32];
    snprintf(v, sizeof v, "%d", N);
    return args_error("-np", v,
                      "the worked example runs on exactly 2 ranks (make run CH=06 NP=2 PROG=example)");
  }
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60); /* a demo that hangs should say so */
  run_example(c);
  comm_finalize(c);
  return 0;
}
