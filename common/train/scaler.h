/* scaler.h — the loss scaler of --precision fp16: PyTorch's torch.amp.GradScaler state
 * machine (names and defaults: init_scale 65536, growth_factor 2, backoff_factor 0.5,
 * growth_interval 2000), or a static scale (--loss-scale S > 0, DeepSpeed's "loss_scale": S).
 *
 * The loss is multiplied by `scale` before the backward (loop.c: the gradient of the loss,
 * dlogits, is scaled; the backward is linear in it), the gradients are unscaled by 1/scale
 * inside the update (the optimizer's gscale), and after every step scaler_update is told
 * whether any gradient anywhere held inf/NaN (one flag combined over all ranks and shards,
 * trainer_finish_grads). notes/fp16.md draws the state machine. */
#ifndef ZL_SCALER_H
#define ZL_SCALER_H

typedef struct scaler {
  float scale;           /* S: the loss is multiplied by S before the backward (GradScaler: _scale, fp32) */
  float growth_factor;   /* S *= growth_factor after growth_interval steps in a row without overflow */
  float backoff_factor;  /* S *= backoff_factor on a step that overflowed (the step is skipped) */
  int growth_interval;   /* steps without overflow before S grows */
  int growth_tracker;    /* steps without overflow since S last changed (GradScaler: _growth_tracker) */
  int dynamic;           /* 0: static scale, S never changes (overflowing steps are still skipped) */
  int overflows;         /* steps skipped for inf/NaN so far */
} scaler_t;

/* A scaler at S = init_scale. dynamic 0: S stays init_scale. */
scaler_t scaler_make(float init_scale, float growth_factor, float backoff_factor, int growth_interval,
                     int dynamic);

/* After a step: found_inf (any rank's gradients held inf/NaN; the step was skipped) backs S
 * off and resets the tracker; otherwise the tracker counts, and on reaching growth_interval S
 * grows (when S·growth_factor is finite, as GradScaler) and the tracker resets. Returns 1 when
 * S changed. Identical on every rank: found_inf must be the combined flag. */
int scaler_update(scaler_t *s, int found_inf);

#endif
