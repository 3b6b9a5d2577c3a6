/* scn_sp — the sequence collectives of --sp (solutions/tp_sp.h: the exercises tp_sp_all_gather and
 * tp_sp_reduce_scatter) on every rank of the world as one TP group of T = N, vendor and ring, for
 * (B, S, C) = (1, T, 3), (3, 2T, 5) and (2, 3T, 4): a (B, S, C) activation split along the sequence,
 * rank q holding positions [q·S/T, (q+1)·S/T) of EVERY sample (B > 1: not one contiguous range).
 *   all-gather      full[b, q·S/T + s, c] = rank q's part[b, s, c], bitwise (values are moved);
 *   reduce-scatter  part[b, s, c] = Σ_q rank q's full[b, r·S/T + s, c], exact (small integers);
 * and, once every value of every rank is right, each is ONE collective of the whole B·S·C on the
 * group — the all-gather an all-gather, the reduce-scatter a reduce-scatter, nothing else (the
 * counters equal the ring model of that one call): together they move an all-reduce's bytes, which
 * is SP's claim; a failure there says "values right, but" (another pattern). Each function returns
 * with every handle it issued waited for (exercise mode names a dropped one: comm_expect_waited).
 * Prints one line per failure naming the rank, the tensor, the index, got and expected;
 * `scn_sp: ok (K cases)` on success. Driven by tests/mpi/test_sp.c. */
#include "comm.h"   // comm_t, comm_*, comm_model_sent
#include "check.h"  // xcalloc
#include "tp_sp.h"  // tp_sp_all_gather, tp_sp_reduce_scatter (solutions/ or exercises/)
#include "zl_scn.h" // fail, g_rank, g_fails
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // free

static int g_cases;

/* Rank q's value at sample b, position s (of its own slice or of the whole sequence), feature c: a
 * small integer, distinct enough that a misplaced block shows. */
static float val(int q, int b, int s, int c) { return (float)(1 + q * 1000 + b * 100 + s * 10 + c); }

/* Exactly one `op` of numel fp32 elements since the reset, and no other collective — checked once
 * every value was right (the caller's), so a failure here is another pattern than the lesson's: the
 * message says "values right" (make exercise's verdict "other pattern"). */
static void expect_one(comm_t *tp, const char *what, comm_op_t op, int64_t numel) {
  comm_counters_t k = comm_counters(tp);
  int T = comm_world(tp), r = comm_rank(tp);
  char calls[256] = "";
  int off = 0, len = 0;
  for (int o = 0; o < CO_NOPS; o++) {
    if (o == CO_CONTROL) continue;
    off += k.calls[o] != (o == (int)op ? 1 : 0);
    if (k.calls[o] || o == (int)op) {
      int w = snprintf(calls + len, sizeof calls - (size_t)len, "%s%lld %s", len ? ", " : "",
                       (long long)k.calls[o], comm_op_name((comm_op_t)o));
      if (w > 0 && len + w < (int)sizeof calls) len += w;
    }
  }
  if (off)
    fail("%s: values right, but the group saw %s call(s) where the lesson's pattern is exactly one %s of the "
         "whole "
         "B·S·C and nothing else (sequence parallelism's all-gather and reduce-scatter together move one "
         "all-reduce's "
         "bytes; notes/10-long-sequences.md)",
         what, calls, comm_op_name(op));
  int64_t sent = comm_model_sent(op, numel, DT_F32, T, r, 0);
  if (!off && k.sent[op] != sent)
    fail("%s: values right, but the %s sent %lld bytes, expected %lld ((T-1)/T of B·S·C fp32: the call's "
         "numel is the "
         "whole buffer)",
         what, comm_op_name(op), (long long)k.sent[op], (long long)sent);
}

/* How many ranks had a wrong value (bad != 0), over the group (control traffic: not in the counters
 * expect_one reads); the call pattern is checked only when none had. */
static int ranks_wrong(comm_t *tp, int bad) {
  double b = bad != 0;
  comm_ctl_all_reduce_f64(tp, &b, 1, REDOP_SUM);
  return (int)b;
}

static void check_shape(comm_t *tp, int B, int S, int C, const char *impl) {
  int T = comm_world(tp), r = comm_rank(tp), Sl = S / T;
  int64_t n = (int64_t)B * S * C, nl = (int64_t)B * Sl * C;
  float *part = xcalloc((size_t)nl, sizeof(float), "scn_sp part");
  float *full = xcalloc((size_t)n, sizeof(float), "scn_sp full");
  float *stage = xcalloc((size_t)n, sizeof(float), "scn_sp stage");
  char what[96];
  /* all-gather along the sequence */
  snprintf(what, sizeof what, "tp_sp_all_gather B=%d S=%d C=%d T=%d (%s)", B, S, C, T, impl);
  for (int b = 0; b < B; b++)
    for (int s = 0; s < Sl; s++)
      for (int c = 0; c < C; c++) part[((int64_t)b * Sl + s) * C + c] = val(r, b, s, c);
  comm_counters_reset(tp);
  comm_handle_t since = comm_issued(tp);
  tp_sp_all_gather(tp, full, part, stage, B, S, C);
  comm_expect_waited(tp, since, "tp_sp_all_gather"); /* exercise mode: a dropped handle, named */
  int bad = 0;
  for (int b = 0; b < B && !bad; b++)
    for (int s = 0; s < S && !bad; s++)
      for (int c = 0; c < C && !bad; c++) {
        float got = full[((int64_t)b * S + s) * C + c], want = val(s / Sl, b, s % Sl, c);
        if (got != want)
          bad = 1,
          fail("%s: full[b=%d, s=%d, c=%d] = %g, expected %g (rank %d's part[b=%d, s=%d, c=%d])", what, b, s,
               c, got, want, s / Sl, b, s % Sl, c);
      }
  if (!ranks_wrong(tp, bad)) expect_one(tp, what, CO_ALL_GATHER, n);
  g_cases++;
  /* reduce-scatter along the sequence: every rank's full is a partial sum */
  snprintf(what, sizeof what, "tp_sp_reduce_scatter B=%d S=%d C=%d T=%d (%s)", B, S, C, T, impl);
  for (int b = 0; b < B; b++)
    for (int s = 0; s < S; s++)
      for (int c = 0; c < C; c++) full[((int64_t)b * S + s) * C + c] = val(r, b, s, c);
  comm_counters_reset(tp);
  since = comm_issued(tp);
  tp_sp_reduce_scatter(tp, part, full, stage, B, S, C);
  comm_expect_waited(tp, since, "tp_sp_reduce_scatter");
  bad = 0;
  for (int b = 0; b < B && !bad; b++)
    for (int s = 0; s < Sl && !bad; s++)
      for (int c = 0; c < C && !bad; c++) {
        float want = 0;
        for (int q = 0; q < T; q++) want += val(q, b, r * Sl + s, c);
        float got = part[((int64_t)b * Sl + s) * C + c];
        if (got != want)
          bad = 1,
          fail("%s: part[b=%d, s=%d, c=%d] = %g, expected %g (the sum over the %d ranks at sequence position "
               "%d)",
               what, b, s, c, got, want, T, r * Sl + s);
      }
  if (!ranks_wrong(tp, bad)) expect_one(tp, what, CO_REDUCE_SCATTER, n);
  g_cases++;
  free(part);
  free(full);
  free(stage);
}

int main(int argc, char **argv) {
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60);
  g_rank = comm_rank(c);
  int T = comm_world(c);
  for (int impl = 0; impl < 2; impl++) {
    comm_set_impl(c, (coll_impl_t)impl);
    const char *name = impl ? "ring" : "vendor";
    check_shape(c, 1, T, 3, name);
    check_shape(c, 3, 2 * T, 5, name);
    check_shape(c, 2, 3 * T, 4, name);
  }
  double bad = g_fails;
  comm_ctl_all_reduce_f64(c, &bad, 1, REDOP_SUM);
  if (g_rank == 0) {
    if (bad == 0) printf("scn_sp: ok (%d cases)\n", g_cases);
    else printf("scn_sp: %g failures\n", bad);
  }
  comm_finalize(c);
  return bad == 0 ? 0 : 1;
}
