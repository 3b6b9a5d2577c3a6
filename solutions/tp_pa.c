/* tp_pa.c — ZeRO-R's partitioned activation checkpointing (Pa) over the TP group, the model
 * transform's pa_* hooks (train.h; notes/06-tensor-parallel.md, "Partitioned activation
 * checkpointing"). With --recompute the loop keeps every unit's output until the backward that
 * reads it; an output that comes out of g's all-reduce (or from replicated weights on such an
 * output) is the same bits on all T ranks of the group — T copies, the waste ZeRO removed from the
 * optimizer states. Pa keeps 1/T of it on each rank and all-gathers it back for the backward. The
 * loop owns the buffers (loop.c: the slices in out[u], the whole outputs in two working buffers);
 * which outputs, which slice and the collective are TP's, here. */
#include "tp_split.h" // tp_split_t, tp_unit_t
#include "device.h"   // dev_memcpy
#include "train.h"    // trainer_t, trainer_pa_slice_numel

/* s = ceil(b·y_numel / T) elements per rank for an output the group replicates (T slices cover it,
 * the pad at the end of the last), else 0: the loop keeps the whole output. */
int64_t tp_pa_slice(const trainer_t *t, int u) {
  const tp_split_t *s = t->model.ctx;
  if (!s->units[u].y_rep) return 0;
  return (t->local_batch * t->model.units[u].y_numel + s->T - 1) / s->T;
}

/* Rank r keeps [r·s, (r+1)·s) of the whole output (the same bits on every TP rank). The last rank's
 * slice may run past the b·y_numel real elements: those pad slots are never written and stay 0
 * (tensor_alloc zero-fills). */
void tp_pa_keep(trainer_t *t, int u, const float *whole, float *slice) {
  const tp_split_t *s = t->model.ctx;
  int64_t sn = trainer_pa_slice_numel(t, u), n = t->local_batch * t->model.units[u].y_numel;
  int64_t lo = sn * s->r, real = n - lo < sn ? n - lo : sn;
  if (real > 0) dev_memcpy(t->dev, slice, t->dev, whole + lo, (size_t)real * sizeof(float));
}

/* One all-gather of T·s over the TP group: it moves bytes and adds nothing. */
void tp_pa_gather(trainer_t *t, int u, const float *slice, float *whole) {
  const tp_split_t *s = t->model.ctx;
  comm_all_gather(s->tp, slice, whole, trainer_pa_slice_numel(t, u) * s->T, DT_F32);
}

/* Per step: one all-gather per micro-batch of each partitioned unit output (s_u elements per rank,
 * T·s_u in all), before the backward of the unit that reads it; each sends (T−1)/T of its bytes from
 * every rank (ring model: T−1 slices of s_u fp32). */
void tp_pa_traffic(const trainer_t *t, int64_t *calls, int64_t *bytes) {
  const tp_split_t *s = t->model.ctx;
  *calls = *bytes = 0;
  for (int u = 0; u < t->model.n_units; u++) {
    int64_t sn = trainer_pa_slice_numel(t, u);
    if (!sn) continue;
    *calls += t->cfg->accum;
    *bytes += t->cfg->accum * comm_model_sent(CO_ALL_GATHER, (int64_t)s->T * sn, DT_F32, s->T, s->r, 0);
  }
}
