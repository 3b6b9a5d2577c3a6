/* test_zeror.c — ZeRO-R memory defragmentation on a real run (notes/zero-r.md): --alloc-trace
 * writes the ledger's own sequence (its running sum peaks at the ledger's reported peak, to the
 * byte) and changes no bit of the result. Suite ch05_zeror. */
#include "zl_test.h"  // Criterion, zl_launch, zl_tmppath, zl_rank_mem, zl_expect_same_file
#include "allocsim.h" // allocsim_load, allocsim_run

Test(ch05_zeror, alloc_trace_is_the_ledger_and_changes_no_bits, .timeout = 300) {
  char trace[320], a[320], b[320];
  zl_tmppath(trace, sizeof trace, "zeror", "gpt.trace");
  const char *args = "--model gpt --gpt small --steps 2 --recompute";
  zl_out_t plain = zl_launch(2, 240, "zeror", "plain", ZL_BIN "/ch05_zero3 %s", args);
  zl_out_t traced = zl_launch(2, 240, "zeror", "traced", ZL_BIN "/ch05_zero3 %s --alloc-trace %s", args, trace);
  zl_tmppath(a, sizeof a, "zeror", "plain.bin");
  zl_tmppath(b, sizeof b, "zeror", "traced.bin");
  zl_expect_same_file(a, b);
  int n = 0;
  allocsim_event_t *ev = allocsim_load(trace, &n);
  cr_assert_gt(n, 10, "the trace holds %d device events", n);
  int64_t live = 0, peak = 0;
  for (int e = 0; e < n; e++) {
    live += ev[e].op == 'A' ? ev[e].bytes : -ev[e].bytes;
    if (live > peak) peak = live;
  }
  double want = zl_rank_mem(traced.json, 0, "peak");
  cr_expect_eq((double)peak, want, "rank 0: the trace's running sum peaks at %lld bytes, the ledger reports %.0f", (long long)peak, want);
  allocsim_result_t r;
  cr_expect_eq(allocsim_run(ev, n, ALLOCSIM_CACHING, 0, &r), 0, "the replay without a budget failed at event %d", r.failed_at);
  cr_expect_geq(r.alloc_peak, peak, "allocated peak %lld (blocks rounded up) below the ledger's %lld", (long long)r.alloc_peak, (long long)peak);
  cr_expect_geq(r.reserved_peak, r.alloc_peak, "reserved %lld below allocated %lld", (long long)r.reserved_peak, (long long)r.alloc_peak);
  free(ev);
  zl_out_free(&plain);
  zl_out_free(&traced);
}
