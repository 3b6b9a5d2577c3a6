/* test_explorer.c — what the explorer page (common/explorer/) draws from the C it compiles: the
 * simulator's timeline (pp_simulate_timeline, solutions/pipeline_sim.c) agrees with its summary
 * (pp_simulate): every operation after the stage's previous one, the last end the makespan,
 * the busy time the sum of the costs. Exact: the same additions in the same order. The page
 * itself is tested in a browser by make test-long (suite explorer_long, tests/unit/test_explorer_long.c).
 * Notes: notes/tour.md ("The explorer page"). Suite pipeline_sched. */
#include "zl_test.h"      // Criterion, zl helpers
#include "pipeline_sim.h" // pp_simulate_timeline, pp_simulate; pipeline_sched.h: pp_schedule_ops
#include <stdlib.h>       // calloc, free

Test(pipeline_sched, timeline_agrees_with_the_summary) {
  const pp_schedule_t scheds[] = {PP_GPIPE, PP_1F1B, PP_INTERLEAVED, PP_ZB_H1, PP_ZB_H2};
  for (int i = 0; i < 5; i++) {
    pp_schedule_t sc = scheds[i];
    int P = 4, M = 8, v = sc == PP_INTERLEAVED ? 2 : 1, split = pp_splits_backward(sc);
    int cap = pp_schedule_nops(sc, M, v);
    pp_op_t *ops[4];
    double *at[4];
    int n[4];
    pp_cost_t cost[4];
    for (int s = 0; s < P; s++) {
      ops[s] = calloc((size_t)cap, sizeof(pp_op_t));
      at[s] = calloc((size_t)cap, sizeof(double));
      n[s] = pp_schedule_ops(sc, P, s, M, v, ops[s]);
      cost[s] = (pp_cost_t){1.0 + 0.25 * s, 2.0, split ? 1.5 : 0.5};
    }
    pp_sim_t tl, sum;
    cr_assert_eq(pp_simulate_timeline(P, M, v, split, ops, n, cost, 0.125, at, &tl), 0, "%s: timeline",
                 pp_schedule_name(sc));
    cr_assert_eq(pp_simulate_lists(P, M, v, split, ops, n, cost, 0.125, &sum), 0, "%s: lists",
                 pp_schedule_name(sc));
    cr_expect_eq(tl.makespan, sum.makespan, "%s: makespan %.17g, without the timeline %.17g",
                 pp_schedule_name(sc), tl.makespan, sum.makespan);
    double last_end = 0;
    for (int s = 0; s < P; s++) {
      double free_at = 0;
      for (int k = 0; k < n[s]; k++) {
        pp_op_t o = ops[s][k];
        double t = (o.kind == 'F'       ? cost[s].f
                        : o.kind == 'B' ? (split ? cost[s].b : cost[s].b + cost[s].w)
                                        : cost[s].w) /
            v;
        cr_expect(at[s][k] >= free_at,
                  "%s: stage %d op %d (%c %d) starts at %g, before its previous one ends at %g",
                  pp_schedule_name(sc), s, k, o.kind, o.micro, at[s][k], free_at);
        free_at = at[s][k] + t;
      }
      if (free_at > last_end) last_end = free_at;
    }
    cr_expect_eq(last_end, sum.makespan, "%s: the timeline's last end %.17g, the makespan %.17g",
                 pp_schedule_name(sc), last_end, sum.makespan);
    for (int s = 0; s < P; s++) free(ops[s]), free(at[s]);
  }
}
