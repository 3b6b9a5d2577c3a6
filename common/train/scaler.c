/* scaler.c — the loss scaler's state machine (scaler.h; torch/amp/grad_scaler.py, the
 * _amp_update_scale_ kernel: the same rule in the same order). */
#include "scaler.h" // scaler_t
#include <math.h>   // isfinite

scaler_t scaler_make(float init_scale, float growth_factor, float backoff_factor, int growth_interval,
                     int dynamic) {
  scaler_t s = {init_scale, growth_factor, backoff_factor, growth_interval, 0, dynamic, 0};
  return s;
}

int scaler_update(scaler_t *s, int found_inf) {
  if (found_inf) s->overflows++;
  if (!s->dynamic) return 0;
  if (found_inf) {
    s->scale *= s->backoff_factor;
    s->growth_tracker = 0;
    return 1;
  }
  int successful = s->growth_tracker + 1;
  if (successful == s->growth_interval) {
    float grown = s->scale * s->growth_factor;
    s->growth_tracker = 0;
    if (isfinite(grown)) {
      s->scale = grown;
      return 1;
    }
    return 0;
  }
  s->growth_tracker = successful;
  return 0;
}
