/* scn_tp — chapter 06 multi-rank checks, one mpirun launch per mode (notes/06-tensor-parallel.md).
 *   scn_tp grid   every grid (T, P) with T·P dividing N: each rank's TP, PP and DP groups hold
 *                 exactly the ranks grid_group_ranks says (read back by an all-gather on the group);
 *                 an all-reduce and a reduce-scatter on every group, vendor and ring, give the exact
 *                 sums over the group's members; each group's counters equal the ring model of its
 *                 own calls (the ring's real p2p bytes too) and the world's counters see none of it.
 *   scn_tp ops    for every T in {1, 2, 4} dividing N (grid (T, 1): D = N/T groups run at once):
 *                 f, g, the column- and row-parallel linears and the MLP block, forward and backward,
 *                 vendor and ring, against the 1-rank computation with the same weights; every
 *                 all-reduce count and byte count exact. Then tp_split_model's public map
 *                 (tp_map_unit, tp_unit_local_numel) on an uneven MLP and GPT: this rank's piece of a
 *                 full unit is the split model's own init, and the T pieces put back give the full
 *                 unit, bitwise.
 * Bits or tolerance (notes/design.md, "Bits or a tolerance"): bitwise only where the same kernel
 * runs on the same shapes in the same order — T = 1 (the whole GEMM), the f/g checks (sums of small
 * integers, exact in any order), the bias gradients (a loop over the B rows, the same on any slice),
 * a beta-1 call against twice its own beta-0 result, and the split map (copies, no arithmetic).
 * Everywhere else at T > 1 — the column forward y_r and every weight gradient (a GEMM on a slice of
 * W: OpenBLAS picks its kernel, and so the order of a dot product's sum, by CPU *and* by shape), the
 * row forward and column backward dx (a sum split into T partials) — err = max_i |got_i − ref_i| /
 * max_i |ref_i| <= 1e-6. Why 1e-6: each element is a dot product of K <= 64 terms (in, out, ffn) of
 * inputs in [-1, 1]; any order of its sum is within γ_K·Σ|terms| of the exact value (γ_K = K·u/(1 −
 * K·u),
 * u = 2^-24: 3.8e-6 at K = 64), so two orders differ by at most 2·γ_K·Σ|terms| — the worst case,
 * reached only when every rounding goes one way; typical is ~√K·u (5e-7). Measured over the OpenBLAS
 * kernels Prescott, Nehalem, Sandybridge, Haswell, Zen, SkylakeX, Cooperlake at N = 2 and 4: at most
 * 2.6e-7 (the ok line prints it; notes/benchmarks.md, "Portability"), a margin of ~4x. A wrong
 * slice or a missing partial sum is off by O(1). Prints one line per failure, `scn_tp: ok (K cases)` on
 * success; exit 1 if any
 * rank failed. Driven by tests/mpi/test_tp.c. */
#include "comm.h"   // comm_t, comm_*, comm_model_sent
#include "check.h"  // xmalloc, xcalloc
#include "gpt.h"    // gpt_init (the map on a split GPT)
#include "grid.h"   // grid_t, grid_init, grid_group_ranks
#include "model.h"  // model_init, model_init_unit, model_free
#include "ops.h"    // op_linear_fwd, op_linear_bwd (the 1-rank linear references)
#include "tp.h"     // tp_* (solutions/ or exercises/)
#include "zl_scn.h" // fail, g_rank, g_fails
#include <math.h>   // fabs
#include <stdio.h>  // printf
#include <stdlib.h> // free
#include <string.h> // strcmp, memcpy, memset

#define TOL 1e-6

static int g_world, g_cases;

static float *fnew(int64_t n) { return xcalloc((size_t)(n > 0 ? n : 1), sizeof(float), "scn_tp buffer"); }

/* ---- grid mode ------------------------------------------------------------------------------ */
/* Member k's input element i: a small integer, so sums are exact whatever the order. */
static float input(int world_rank, int64_t i) { return (float)(((i * 5 + world_rank * 7) % 13) + 1); }

static void check_counters(comm_t *c, const char *what, comm_op_t op, int64_t numel, int ncalls, int ring) {
  comm_counters_t k = comm_counters(c);
  int N = comm_world(c), r = comm_rank(c);
  int64_t sent = ncalls * comm_model_sent(op, numel, DT_F32, N, r, 0);
  int64_t recvd = ncalls * comm_model_recvd(op, numel, DT_F32, N, r, 0);
  if (k.calls[op] != ncalls)
    fail("%s: %s calls %lld, expected %d", what, comm_op_name(op), (long long)k.calls[op], ncalls);
  if (k.sent[op] != sent)
    fail("%s: %s sent %lld, expected %lld", what, comm_op_name(op), (long long)k.sent[op], (long long)sent);
  if (k.recvd[op] != recvd)
    fail("%s: %s recvd %lld, expected %lld", what, comm_op_name(op), (long long)k.recvd[op],
         (long long)recvd);
  if (ring && k.p2p_sent != sent)
    fail("%s: ring p2p sent %lld, expected the model's %lld", what, (long long)k.p2p_sent, (long long)sent);
  g_cases++;
}

static void check_group(const grid_t *g, grid_dim_t d, coll_impl_t impl) {
  comm_t *c = g->comm[d];
  int T = g->size[GRID_TP], P = g->size[GRID_PP], n = g->size[d];
  char what[96];
  snprintf(what, sizeof what, "grid T=%d P=%d D=%d %s group (%s)", T, P, g->size[GRID_DP], grid_dim_name(d),
           impl == COLL_RING ? "ring" : "vendor");
  comm_set_impl(c, impl);
  comm_counters_reset(c);
  /* who is in my group, according to the communicator itself */
  int *want = xcalloc((size_t)n, sizeof *want, "group ranks");
  grid_group_ranks(g->nranks, T, P, d, grid_group_of(g->rank, T, P, d), want);
  float me = (float)g->rank, *members = fnew(n);
  comm_all_gather(c, &me, members, n, DT_F32);
  for (int i = 0; i < n; i++)
    if ((int)members[i] != want[i])
      fail("%s: member %d is rank %d, expected %d", what, i, (int)members[i], want[i]);
  check_counters(c, what, CO_ALL_GATHER, n, 1, impl == COLL_RING);
  /* an all-reduce over the group: exact sums over exactly its members */
  comm_counters_reset(c);
  const int64_t numel = 1001; /* not a multiple of 2, 3, 4 or 6: uneven chunks */
  float *x = fnew(numel), *rs = fnew(numel);
  for (int64_t i = 0; i < numel; i++) x[i] = input(g->rank, i);
  comm_all_reduce(c, x, numel, DT_F32, REDOP_SUM);
  for (int64_t i = 0; i < numel; i++) {
    float s = 0;
    for (int k = 0; k < n; k++) s += input(want[k], i);
    if (x[i] != s) {
      fail("%s: all_reduce[%lld] = %g, expected %g", what, (long long)i, x[i], s);
      break;
    }
  }
  check_counters(c, what, CO_ALL_REDUCE, numel, 1, impl == COLL_RING);
  /* a reduce-scatter: chunk r of the sum lands on group rank r */
  comm_counters_reset(c);
  for (int64_t i = 0; i < numel; i++) x[i] = input(g->rank, i);
  comm_reduce_scatter(c, x, rs, numel, DT_F32, REDOP_SUM);
  int64_t lo = comm_chunk_lo(numel, n, comm_rank(c)), cn = comm_chunk_numel(numel, n, comm_rank(c));
  for (int64_t i = 0; i < cn; i++) {
    float s = 0;
    for (int k = 0; k < n; k++) s += input(want[k], lo + i);
    if (rs[i] != s) {
      fail("%s: reduce_scatter[%lld] = %g, expected %g", what, (long long)(lo + i), rs[i], s);
      break;
    }
  }
  check_counters(c, what, CO_REDUCE_SCATTER, numel, 1, impl == COLL_RING);
  free(want);
  free(members);
  free(x);
  free(rs);
}

static int run_grid(comm_t *world) {
  for (int T = 1; T <= g_world; T++)
    for (int P = 1; T * P <= g_world; P++) {
      if (g_world % (T * P)) continue;
      comm_counters_reset(world);
      grid_t *g = grid_init(world, T, P);
      for (int impl = 0; impl < 2; impl++)
        for (int d = 0; d < GRID_NDIMS; d++) check_group(g, (grid_dim_t)d, (coll_impl_t)impl);
      grid_free(g);
      /* the groups' traffic is theirs: the world communicator counted none of it */
      comm_counters_t k = comm_counters(world);
      for (int op = 0; op < CO_CONTROL; op++)
        if (k.calls[op] || k.sent[op])
          fail("grid T=%d P=%d: world counters saw %lld %s calls (%lld bytes) of the groups' traffic", T, P,
               (long long)k.calls[op], comm_op_name((comm_op_t)op), (long long)k.sent[op]);
      g_cases++;
    }
  return 0;
}

/* ---- ops mode -------------------------------------------------------------------------------- */
static uint64_t g_rng;
static float rnd(void) { /* uniform in [-1, 1), the same sequence on every rank */
  g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}
static float *rnd_new(int64_t n) {
  float *p = fnew(n);
  for (int64_t i = 0; i < n; i++) p[i] = rnd();
  return p;
}

/* err = max|got − ref| / max|ref|; bitwise: every element equal. */
static int g_value_fails, g_value_fails_seen; /* compare's failures; those expect_allreduces has seen */
static double g_worst_tol_err; /* the largest err among the tolerance comparisons: the ok line prints it */

/* A failure names the element farthest off: what[i]: got, expected. */
static void compare(const char *what, const float *got, const float *ref, int64_t n, int bitwise) {
  double dmax = 0, rmax = 0;
  int64_t imax = -1;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (d > dmax || (imax < 0 && memcmp(&got[i], &ref[i], sizeof(float)) != 0)) dmax = d, imax = i;
    if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
  }
  double err = rmax > 0 ? dmax / rmax : dmax;
  if (!bitwise && err > g_worst_tol_err) g_worst_tol_err = err;
  if (bitwise ? memcmp(got, ref, (size_t)n * sizeof(float)) != 0 : !(err <= TOL)) {
    g_value_fails++;
    fail("%s[%lld]: got %.9g, expected %.9g (max rel diff %.3g, %s)", what, (long long)imax, got[imax],
         ref[imax], err, bitwise ? "expected bitwise equal" : "tolerance 1e-6");
  }
  g_cases++;
}

/* One all-reduce count and its exact bytes, then reset. When every value compared since the last
 * count was right, a count off is another communication pattern, not a wrong result: said so. */
static void expect_allreduces(comm_t *tp, const char *what, int ncalls, int64_t numel_each) {
  comm_counters_t k = comm_counters(tp);
  if (k.calls[CO_ALL_REDUCE] != ncalls && g_value_fails == g_value_fails_seen) {
    fail("%s: values right, but %lld all-reduce call(s) where the lesson's pattern has %d (reduce-scatter "
         "%lld, "
         "all-gather %lld, broadcast %lld, reduce %lld calls): f's backward and g's forward are one "
         "all-reduce each, "
         "f's forward and g's backward none (notes/06-tensor-parallel.md)",
         what, (long long)k.calls[CO_ALL_REDUCE], ncalls, (long long)k.calls[CO_REDUCE_SCATTER],
         (long long)k.calls[CO_ALL_GATHER], (long long)k.calls[CO_BROADCAST], (long long)k.calls[CO_REDUCE]);
    g_cases++;
  } else {
    check_counters(tp, what, CO_ALL_REDUCE, numel_each, ncalls, comm_impl(tp) == COLL_RING);
  }
  g_value_fails_seen = g_value_fails;
  comm_counters_reset(tp);
}

static void check_ops(comm_t *tp, int T, const char *impl) {
  int r = comm_rank(tp);
  const int B = 6, in = 20, out = 12; /* out and in divisible by 1, 2, 4 */
  char what[128];
  g_rng = 12345;
  float *x = rnd_new((int64_t)B * in), *W = rnd_new((int64_t)out * in), *b = rnd_new(out);
  float *dy = rnd_new((int64_t)B * out);
  /* the 1-rank reference */
  float *y = fnew((int64_t)B * out), *dx = fnew((int64_t)B * in), *dW = fnew((int64_t)out * in),
        *db = fnew(out);
  op_linear_fwd(DEV_CPU, y, x, W, b, DT_F32, B, in, out);
  op_linear_bwd(DEV_CPU, dx, dW, db, dy, x, W, DT_F32, B, in, out, 0.0f);
  comm_counters_reset(tp);

  /* f and g on their own: f forward and g backward move nothing, the other two sum */
  float *v = fnew(out), *vsum = fnew(out);
  for (int i = 0; i < out; i++)
    v[i] = (float)(r + 1) * (float)(i + 1), vsum[i] = (float)(T * (T + 1) / 2) * (float)(i + 1);
  tp_f_forward(tp, v, out);
  tp_g_backward(tp, v, out);
  snprintf(what, sizeof what, "T=%d %s f forward + g backward", T, impl);
  expect_allreduces(tp, what, 0, out);
  tp_f_backward(tp, v, out);
  snprintf(what, sizeof what, "T=%d %s f backward", T, impl);
  compare(what, v, vsum, out, 1);
  expect_allreduces(tp, what, 1, out);
  for (int i = 0; i < out; i++) v[i] = (float)(r + 1) * (float)(i + 1);
  tp_g_forward(tp, v, out);
  snprintf(what, sizeof what, "T=%d %s g forward", T, impl);
  compare(what, v, vsum, out, 1);
  expect_allreduces(tp, what, 1, out);

  /* column-parallel: rank r holds rows [lo, lo+n) of W and b */
  int lo = tp_part_lo(out, T, r), n = tp_part_numel(out, T, r);
  float *W_r = fnew((int64_t)n * in), *b_r = fnew(n), *y_r = fnew((int64_t)B * n),
        *yref_r = fnew((int64_t)B * n);
  float *dy_r = fnew((int64_t)B * n), *dW_r = fnew((int64_t)n * in), *db_r = fnew(n),
        *dxc = fnew((int64_t)B * in);
  tp_column_slice(W_r, b_r, W, b, in, out, T, r);
  tp_column_forward(tp, y_r, x, W_r, b_r, DT_F32, B, in, n);
  tp_cols_of(yref_r, y, B, out, T, r);
  snprintf(what, sizeof what, "T=%d %s column forward y_r", T, impl);
  compare(what, y_r, yref_r, (int64_t)B * n, T == 1);
  expect_allreduces(tp, what, 0, 0);
  tp_cols_of(dy_r, dy, B, out, T, r);
  tp_column_backward(tp, dxc, dW_r, db_r, dy_r, x, W_r, DT_F32, B, in, n, 0.0f);
  snprintf(what, sizeof what, "T=%d %s column backward dx", T, impl);
  compare(what, dxc, dx, (int64_t)B * in, T == 1);
  snprintf(what, sizeof what, "T=%d %s column backward dW_r", T, impl);
  compare(what, dW_r, dW + (int64_t)lo * in, (int64_t)n * in, T == 1);
  snprintf(what, sizeof what, "T=%d %s column backward db_r", T, impl);
  compare(what, db_r, db + lo, n, 1);
  snprintf(what, sizeof what, "T=%d %s column backward", T, impl);
  expect_allreduces(tp, what, 1, (int64_t)B * in); /* f's backward: B·in elements */
  /* beta 1 (a second micro-batch): the same gradients again, added to the first: exactly twice */
  float *two = fnew((int64_t)n * in);
  for (int64_t i = 0; i < (int64_t)n * in; i++) two[i] = 2.0f * dW_r[i];
  tp_column_backward(tp, NULL, dW_r, NULL, dy_r, x, W_r, DT_F32, B, in, n, 1.0f);
  snprintf(what, sizeof what, "T=%d %s column backward beta 1: dW_r (no dx: no all-reduce)", T, impl);
  compare(what, dW_r, two, (int64_t)n * in, 1);
  expect_allreduces(tp, what, 0, 0);
  free(two);

  /* row-parallel: rank r holds columns [lo, lo+m) of W, and x's matching columns */
  int m = tp_part_numel(in, T, r);
  float *Wc = fnew((int64_t)out * m), *Wcref = fnew((int64_t)out * m), *x_r = fnew((int64_t)B * m);
  float *yr = fnew((int64_t)B * out), *dx_r = fnew((int64_t)B * m), *dxref_r = fnew((int64_t)B * m);
  float *dWc = fnew((int64_t)out * m), *dbr = fnew(out);
  tp_row_slice(Wc, W, in, out, T, r);
  tp_cols_of(x_r, x, B, in, T, r);
  tp_row_forward(tp, yr, x_r, Wc, b, DT_F32, B, m, out);
  snprintf(what, sizeof what, "T=%d %s row forward y", T, impl);
  compare(what, yr, y, (int64_t)B * out, 0);
  expect_allreduces(tp, what, 1, (int64_t)B * out); /* g's forward: B·out elements */
  tp_row_backward(tp, dx_r, dWc, dbr, dy, x_r, Wc, DT_F32, B, m, out, 0.0f);
  tp_cols_of(dxref_r, dx, B, in, T, r);
  tp_row_slice(Wcref, dW, in, out, T, r);
  snprintf(what, sizeof what, "T=%d %s row backward dx_r", T, impl);
  compare(what, dx_r, dxref_r, (int64_t)B * m, T == 1);
  snprintf(what, sizeof what, "T=%d %s row backward dW_r", T, impl);
  compare(what, dWc, Wcref, (int64_t)out * m, T == 1);
  snprintf(what, sizeof what, "T=%d %s row backward db", T, impl);
  compare(what, dbr, db, out, 1);
  expect_allreduces(tp, what, 0, 0);
  float *twob = fnew(out);
  for (int i = 0; i < out; i++) twob[i] = 2.0f * dbr[i];
  tp_row_backward(tp, NULL, dWc, dbr, dy, x_r, Wc, DT_F32, B, m, out, 1.0f);
  snprintf(what, sizeof what, "T=%d %s row backward beta 1: db", T, impl);
  compare(what, dbr, twob, out, 1);
  expect_allreduces(tp, what, 0, 0);
  free(twob);

  free(v), free(vsum), free(W_r), free(b_r), free(y_r), free(yref_r), free(dy_r), free(dW_r), free(db_r),
      free(dxc);
  free(Wc), free(Wcref), free(x_r), free(yr), free(dx_r), free(dxref_r), free(dWc), free(dbr);
  free(x), free(W), free(b), free(dy), free(y), free(dx), free(dW), free(db);
}

/* The MLP block against the same block computed on one rank with the plain ops. */
static void check_mlp(comm_t *tp, int T, const char *impl) {
  int r = comm_rank(tp);
  const int B = 5, h = 16, ffn = 64;
  char what[128];
  g_rng = 777;
  float *x = rnd_new((int64_t)B * h), *W1 = rnd_new((int64_t)ffn * h), *b1 = rnd_new(ffn);
  float *W2 = rnd_new((int64_t)h * ffn), *b2 = rnd_new(h), *dy = rnd_new((int64_t)B * h);
  /* reference: a = x·W1ᵀ + b1, u = GELU(a), y = u·W2ᵀ + b2, and back (tp_mlp_reference) */
  float *y = fnew((int64_t)B * h), *dx = fnew((int64_t)B * h);
  float *dW1 = fnew((int64_t)ffn * h), *db1 = fnew(ffn), *dW2 = fnew((int64_t)h * ffn), *db2 = fnew(h);
  tp_mlp_reference(B, h, ffn, x, W1, b1, W2, b2, dy, y, dx, dW1, db1, dW2, db2);

  tp_mlp_t *m = tp_mlp_new(tp, B, h, ffn, W1, b1, W2, b2);
  float *ty = fnew((int64_t)B * h), *tdx = fnew((int64_t)B * h);
  comm_counters_reset(tp);
  tp_mlp_forward(m, ty, x);
  snprintf(what, sizeof what, "T=%d %s MLP y", T, impl);
  compare(what, ty, y, (int64_t)B * h, T == 1);
  snprintf(what, sizeof what, "T=%d %s MLP forward", T, impl);
  expect_allreduces(tp, what, 1, tp_mlp_allreduce_numel(B, h));
  tp_mlp_backward(m, tdx, dy, x);
  snprintf(what, sizeof what, "T=%d %s MLP dx", T, impl);
  compare(what, tdx, dx, (int64_t)B * h, T == 1);
  snprintf(what, sizeof what, "T=%d %s MLP backward", T, impl);
  expect_allreduces(tp, what, 1, tp_mlp_allreduce_numel(B, h));
  int lo = tp_part_lo(ffn, T, r), fr = m->ffn_r;
  float *ref = fnew((int64_t)h * fr);
  snprintf(what, sizeof what, "T=%d %s MLP dW1_r", T, impl);
  compare(what, m->dW1, dW1 + (int64_t)lo * h, (int64_t)fr * h, T == 1);
  snprintf(what, sizeof what, "T=%d %s MLP db1_r", T, impl);
  compare(what, m->db1, db1 + lo, fr, T == 1); /* a sum of GELU'(a)·(dy·W2_r): sliced GEMMs */
  tp_row_slice(ref, dW2, ffn, h, T, r);
  snprintf(what, sizeof what, "T=%d %s MLP dW2_r", T, impl);
  compare(what, m->dW2, ref, (int64_t)h * fr, T == 1);
  snprintf(what, sizeof what, "T=%d %s MLP db2", T, impl);
  compare(what, m->db2, db2, h, 1);
  /* the formula the chapter prints: 2 all-reduces of B·h per forward + backward */
  int64_t want = tp_mlp_bytes_per_step(B, h, T, r),
          per = comm_model_sent(CO_ALL_REDUCE, (int64_t)B * h, DT_F32, T, r, 0);
  if (want != 2 * per)
    fail("%s: tp_mlp_bytes_per_step %lld, expected %lld", what, (long long)want, (long long)(2 * per));
  tp_mlp_free(m);
  free(ref), free(ty), free(tdx), free(x), free(W1), free(b1), free(W2), free(b2), free(dy), free(y);
  free(dx), free(dW1), free(db1), free(dW2), free(db2);
}

/* tp_split_model's map, on the model built by build() (twice: one copy split over tp, one whole). */
static void check_map_of(comm_t *tp, int T, const char *kind, void (*build)(model_t *m)) {
  model_t full, m;
  build(&full);
  build(&m);
  tp_split_model(&m, tp);
  int r = comm_rank(tp);
  char what[160];
  for (int u = 0; u < full.n_units; u++) {
    int64_t n = full.units[u].numel;
    float *w = fnew(n), *back = fnew(n), *mine = fnew(m.units[u].padded);
    model_init_unit(&full, 7, u, w);
    model_init_unit(&m, 7, u, mine);
    snprintf(what, sizeof what, "T=%d %s unit %d: tp_unit_local_numel(rank %d)", T, kind, u, r);
    if (tp_unit_local_numel(&m, u, r) != m.units[u].numel)
      fail("%s = %lld, the split unit has %lld", what, (long long)tp_unit_local_numel(&m, u, r),
           (long long)m.units[u].numel);
    g_cases++;
    for (int q = 0; q < T; q++) {
      int64_t nq = tp_unit_local_numel(&m, u, q);
      float *lq = fnew(nq);
      tp_map_unit(&m, u, q, w, lq, 1);
      if (q == r) {
        snprintf(what, sizeof what, "T=%d %s unit %d: rank %d's piece of the full init vs the split's init",
                 T, kind, u, r);
        compare(what, lq, mine, nq, 1);
      }
      tp_map_unit(&m, u, q, back, lq, 0);
      free(lq);
    }
    snprintf(what, sizeof what, "T=%d %s unit %d: the %d pieces put back vs the full unit", T, kind, u, T);
    compare(what, back, w, n, 1);
    free(w), free(back), free(mine);
  }
  model_free(&m);
  model_free(&full);
}
static void build_mlp(model_t *m) { model_init(m, 5, 9, 3, 3); } /* 9 hidden features: uneven at T = 2, 4 */
static void build_gpt(model_t *m) {
  gpt_init(m, (gpt_shape_t){.n_layer = 1, .n_head = 4, .n_embd = 8, .seq_len = 4, .vocab = 11});
}

static int run_ops(comm_t *world) {
  static const int Ts[] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    int T = Ts[k];
    if (g_world % T) continue;
    grid_t *g = grid_init(world, T, 1);
    for (int impl = 0; impl < 2; impl++) {
      comm_set_impl(g->comm[GRID_TP], (coll_impl_t)impl);
      const char *name = impl ? "ring" : "vendor";
      check_ops(g->comm[GRID_TP], T, name);
      check_mlp(g->comm[GRID_TP], T, name);
    }
    check_map_of(g->comm[GRID_TP], T, "mlp", build_mlp);
    check_map_of(g->comm[GRID_TP], T, "gpt", build_gpt);
    grid_free(g);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "grid") != 0 && strcmp(mode, "ops") != 0) {
    fprintf(stderr, "usage: scn_tp grid|ops\n");
    return 2;
  }
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60);
  g_rank = comm_rank(c);
  g_world = comm_world(c);
  if (strcmp(mode, "grid") == 0) run_grid(c);
  else run_ops(c);
  double bad = g_fails, worst = g_worst_tol_err;
  comm_ctl_all_reduce_f64(c, &bad, 1, REDOP_SUM);
  comm_ctl_all_reduce_f64(c, &worst, 1, REDOP_MAX);
  if (g_rank == 0) {
    if (bad == 0 && strcmp(mode, "ops") == 0)
      printf(
          "scn_tp: ok (%d cases; largest max rel diff where a GEMM's shape changes: %.2g (tolerance %g))\n",
          g_cases, worst, TOL);
    else if (bad == 0) printf("scn_tp: ok (%d cases)\n", g_cases);
    else printf("scn_tp: %g failures\n", bad);
  }
  comm_finalize(c);
  return bad == 0 ? 0 : 1;
}
