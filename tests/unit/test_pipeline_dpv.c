/* test_pipeline_dpv.c — chapter 07d's DualPipeV as pure functions (solutions/pipeline_sched.h,
 * pipeline_check.h, pipeline_sim.h, pipeline_table.h; suite ch07_dualpipev): DeepSeek's table
 * reproduced by the simulator cell for cell at PP = 8 and 16 (bubble, activations and parameters
 * per device, devices), the largest rank's idle = (PP/2−1)(F&B+B−3W) for an F&B cheaper than F + B
 * too; the lists (6M operations per rank, DeepSeek's per-rank phase counts) run against each other
 * with every message alone under synchronous sends without deadlock for N <= 8 ranks, 2N <= M <=
 * 32; and the checker naming a list that deadlocks at the V's tip or between two ranks.
 * Notes: notes/07d-dualpipev.md. */
#include "zl_test.h"        // Criterion
#include "pipeline_check.h" // pp_check_schedule, pp_check_run, pp_check_lists, pp_check_fb
#include "pipeline_sim.h"   // pp_simulate_sched
#include "pipeline_table.h" // pp_table_row, pp_costs_ds_t

enum { NMAX = 8, MMAX = 32 };

typedef struct lists {
  pp_op_t ops[NMAX][6 * MMAX];
  pp_op_t *p[NMAX];
  int n[NMAX];
} lists_t;

static void make_lists(lists_t *L, int N, int M) {
  for (int s = 0; s < N; s++)
    L->p[s] = L->ops[s], L->n[s] = pp_schedule_ops(PP_DUALPIPEV, N, s, M, 2, L->ops[s]);
}

/* DualPipe's README with F = 1, B = 2, W = 1, F&B = 3: bubble 21 / 7 / 6 / 6 at PP = 8, 45 / 15 / 14 / 14
 * at PP = 16 (1F1B, ZB1P, DualPipe, DualPipeV); activations PP, PP, PP + 1, PP + 1; parameters 1×, 1×,
 * 2×, 2×; devices PP, PP, PP, PP/2. Every cell simulated from the lists: DualPipe's as two V's on PP
 * devices (PP_TABLE_DUALPIPE: M/2 micro-batches each way, the simulator's PP_LIST_DUAL). */
Test(ch07_dualpipev, the_table_cells_are_simulated) {
  const pp_costs_ds_t cost = {1, 2, 1, 3};
  const pp_schedule_t rows[4] = {PP_1F1B, PP_ZB_H1, PP_TABLE_DUALPIPE, PP_DUALPIPEV};
  const char *label[4] = {"1F1B", "ZB1P", "DualPipe", "DualPipeV"};
  const double want[2][4] = {{21, 7, 6, 6}, {45, 15, 14, 14}};
  for (int t = 0; t < 2; t++) {
    int PP = t ? 16 : 8;
    for (int i = 0; i < 4; i++) {
      pp_table_row_t r;
      cr_assert_eq(pp_table_row(rows[i], PP, 2 * PP, cost, &r), 0, "%s PP %d", label[i], PP);
      cr_expect_eq(r.bubble, want[t][i], "%s PP %d: bubble %g simulated, DeepSeek's table %g", label[i], PP,
                   r.bubble, want[t][i]);
      cr_expect_eq(r.bubble_formula, want[t][i], "%s PP %d: formula %g", label[i], PP, r.bubble_formula);
      int two = i >= 2;
      cr_expect_eq(r.acts, two ? PP + 1 : PP, "%s PP %d: %d activations in flight", label[i], PP, r.acts);
      cr_expect_eq(r.stages_per_device, two ? 2 : 1, "%s: parameters per device", label[i]);
      cr_expect_eq(r.devices, rows[i] == PP_DUALPIPEV ? PP / 2 : PP, "%s: devices", label[i]);
      pp_table_free(&r);
    }
  }
}

/* The F&B's overlap is what the formula counts: with F&B below F + B the ranks differ (each runs
 * its own number of F&B), and the largest idle is still (PP/2−1)(F&B+B−3W): DualPipeV's and
 * DualPipe's. */
Test(ch07_dualpipev, the_bubble_follows_the_overlap) {
  const double fbs[3] = {2, 2.5, 3};
  for (int PP = 4; PP <= 16; PP += 2)
    for (int i = 0; i < 3; i++)
      for (int dual = 0; dual < 2; dual++) { /* DualPipeV, then DualPipe (M even, >= 2PP) */
        pp_table_row_t r;
        pp_costs_ds_t cost = {1, 2, 1, fbs[i]};
        pp_schedule_t sc = dual ? PP_TABLE_DUALPIPE : PP_DUALPIPEV;
        cr_assert_eq(pp_table_row(sc, PP, dual ? 2 * PP + 2 : 2 * PP + 3, cost, &r), 0, "PP %d", PP);
        cr_expect_eq(r.bubble, r.bubble_formula, "%s PP %d, F&B %g: bubble %g simulated, formula %g",
                     dual ? "DualPipe" : "DualPipeV", PP, fbs[i], r.bubble, r.bubble_formula);
        pp_table_free(&r);
      }
}

/* The exercise's contract (pp_dualpipev_phases): every rank's list is 6M operations (F, B, W of each
 * micro-batch on each chunk, in micro-batch order) and the N lists, every message alone on its
 * chunk's stream under synchronous sends, run to the end: N <= 8, 2N <= M <= 32. */
Test(ch07_dualpipev, every_list_runs_without_deadlock) {
  char why[1024];
  int runs = 0;
  for (int N = 1; N <= NMAX; N++)
    for (int M = 2 * N; M <= MMAX; M++, runs++) {
      for (int r = 0; r < N; r++) {
        int c[8];
        pp_dualpipev_phases(N, r, M, c);
        cr_assert(c[0] + c[1] + c[3] == M, "N %d, M %d, rank %d: %d forwards of chunk 0", N, M, r,
                  c[0] + c[1] + c[3]);
      }
      cr_assert(!pp_check_schedule(PP_DUALPIPEV, N, M, 1, why, sizeof why), "%s", why);
    }
  cr_assert_eq(runs, 192, "%d cases", runs);
  cr_assert(pp_check_schedule(PP_DUALPIPEV, 4, 7, 1, why, sizeof why) && strstr(why, "M >= 2P"), "%s", why);
}

/* --fb-overlap (loop_fb.c): each F&B posts its B's gradient receive before its F's, and waits for it
 * either after F's output is sent (no exchange in F: the sequential order) or before (F's exchanges
 * run B's pieces: DeepSeek's F&B order); both run to the end, N <= 8, 2N <= M <= 32. */
Test(ch07_dualpipev, the_overlapped_fb_runs_without_deadlock) {
  char why[1024];
  int runs = 0;
  for (int early = 0; early < 2; early++)
    for (int N = 1; N <= NMAX; N++)
      for (int M = 2 * N; M <= MMAX; M++, runs++)
        cr_assert(!pp_check_fb(N, M, early, why, sizeof why), "%s", why);
  cr_assert_eq(runs, 2 * 192, "%d cases", runs);
}

/* The checker names what is wrong: at the V's tip the last rank's F k of chunk 1 before its own F k of
 * chunk 0 waits for itself; rank 0 waiting for chunk 1's activation before sending chunk 0's first
 * waits for rank 1, which waits for it; a W dropped. */
Test(ch07_dualpipev, the_checker_names_a_wrong_list) {
  static lists_t L;
  char why[1024];
  const int flags = PP_LIST_SPLIT | PP_LIST_V;
  make_lists(&L, 2, 4);
  cr_assert(!pp_check_run(2, 4, 2, flags, L.p, L.n, why, sizeof why), "%s", why);
  pp_op_t t = L.ops[1][0]; /* rank 1 (the tip): F0 F0' ... → F0' F0 */
  cr_assert(t.kind == 'F' && t.chunk == 0 && L.ops[1][1].chunk == 1, "rank 1 starts F0 F0'");
  L.ops[1][0] = L.ops[1][1], L.ops[1][1] = t;
  cr_assert(pp_check_run(2, 4, 2, flags, L.p, L.n, why, sizeof why) && strstr(why, "deadlock"), "%s", why);
  make_lists(&L, 2, 4);
  int i = 0; /* rank 0: move its first F of chunk 1 to the front */
  while (!(L.ops[0][i].kind == 'F' && L.ops[0][i].chunk == 1)) i++;
  t = L.ops[0][i];
  for (; i > 0; i--) L.ops[0][i] = L.ops[0][i - 1];
  L.ops[0][0] = t;
  cr_assert(!pp_check_lists(2, 4, 2, flags, L.p, L.n, why, sizeof why), "each list alone is fine: %s", why);
  cr_assert(pp_check_run(2, 4, 2, flags, L.p, L.n, why, sizeof why) && strstr(why, "deadlock"), "%s", why);
  make_lists(&L, 2, 4);
  L.n[0]--; /* its last W */
  cr_assert(pp_check_run(2, 4, 2, flags, L.p, L.n, why, sizeof why) && strstr(why, "have their W"), "%s",
            why);
}
