/* test_scaler.c — the loss scaler's state machine (common/train/scaler.c) against GradScaler's rule,
 * replayed by hand. Suite common_scaler. */
#include "zl_test.h" // Criterion, zl helpers
#include "scaler.h"  // scaler_make, scaler_update
#include <math.h>    // INFINITY

Test(common_scaler, backoff_on_overflow_growth_after_interval) {
  scaler_t s = scaler_make(65536.0f, 2.0f, 0.5f, 3, 1);
  /* overflow, overflow, ok, ok, ok (grow), ok, overflow, ok, ok, ok (grow) */
  const int inf[10] = {1, 1, 0, 0, 0, 0, 1, 0, 0, 0};
  const float want[10] = {32768, 16384, 16384, 16384, 32768, 32768, 16384, 16384, 16384, 32768};
  const int want_tracker[10] = {0, 0, 1, 2, 0, 1, 0, 1, 2, 0};
  for (int k = 0; k < 10; k++) {
    int changed = scaler_update(&s, inf[k]);
    cr_expect(s.scale == want[k], "step %d (found_inf %d): scale got %g, expected %g", k, inf[k], s.scale,
              want[k]);
    cr_expect_eq(s.growth_tracker, want_tracker[k], "step %d: growth_tracker got %d, expected %d", k,
                 s.growth_tracker, want_tracker[k]);
    cr_expect_eq(changed, k == 0 || k == 1 || k == 4 || k == 6 || k == 9, "step %d: changed got %d", k,
                 changed);
  }
  cr_expect_eq(s.overflows, 3, "overflows: got %d, expected 3", s.overflows);
}

Test(common_scaler, static_scale_never_moves_but_counts) {
  scaler_t s = scaler_make(128.0f, 2.0f, 0.5f, 1, 0);
  for (int k = 0; k < 5; k++) cr_expect_eq(scaler_update(&s, k % 2), 0, "step %d: a static scale changed", k);
  cr_expect(s.scale == 128.0f, "static scale: got %g, expected 128", s.scale);
  cr_expect_eq(s.overflows, 2, "overflows: got %d, expected 2", s.overflows);
}

Test(common_scaler, growth_stops_before_inf) {
  scaler_t s = scaler_make(0x1p127f, 2.0f, 0.5f, 1, 1);
  scaler_update(&s, 0);
  cr_expect(s.scale == 0x1p127f, "growth past FLT_MAX: got %g, expected 2^127 kept", s.scale);
  cr_expect_eq(s.growth_tracker, 0);
}
