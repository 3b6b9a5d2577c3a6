/* tp_vocab.c — chapter 06's vocab-parallel cross-entropy (tp_split.h; notes/06-tensor-parallel.md,
 * "The vocabulary, split"): the loss of logits whose rows are split over the TP group by
 * vocabulary, from three all-reduces of one number per row — no rank ever holds a whole row.
 * Megatron's vocab_parallel_cross_entropy; the GPT's head (tp_gpt.c) is its one user. */
#include "tp_split.h" // tp_vocab_loss
#include "check.h"    // die_on_rank, xmalloc
#include "comm.h"     // comm_all_reduce, comm_device
#include "device.h"   // dev_memcpy
#include "ledger.h"   // LEDGER_ACTS
#include "tensor.h"   // tensor_grow
#include <math.h>     // expf, log
#include <stdlib.h>   // free

/* One fp32 value per loss row, all-reduced over the TP group (host array; staged on CUDA). */
static void rows_all_reduce(comm_t *tp, tensor_t *stage, float *h, int64_t rows, redop_t op) {
  device_t dev = comm_device(tp);
  if (dev == DEV_CPU) {
    comm_all_reduce(tp, h, rows, DT_F32, op);
    return;
  }
  float *d = tensor_grow(stage, "tp loss row stats", LEDGER_ACTS, DT_F32, dev, rows);
  dev_memcpy(dev, d, DEV_CPU, h, (size_t)rows * sizeof(float));
  comm_all_reduce(tp, d, rows, DT_F32, op);
  dev_memcpy(DEV_CPU, h, dev, d, (size_t)rows * sizeof(float));
}

/* The vocab-parallel cross-entropy: this rank holds logits (rows, Vr) for its vocabulary only. Per row: M =
 * max over the group of the local maxima (all-reduce MAX),
 * Z = Σ over the group of Σ_j exp(l_j − M) (all-reduce SUM), and the target's logit from the one
 * rank that holds it (0 elsewhere, all-reduce SUM): loss = log Z + M − l_target. The gradient is
 * local: scale·(exp(l_j − M)/Z − [j is the target]). Three all-reduces of rows fp32 values, no
 * rank ever holds a whole row of logits. Computed on the host (copied over on CUDA). */
double tp_vocab_loss(comm_t *tp, tensor_t *stage, int64_t rows, int V, int v_lo, int64_t Vr,
                     const float *logits, const int *targets, float *dlogits, float scale) {
  device_t dev = comm_device(tp);
  size_t nl = (size_t)(rows * Vr) * sizeof(float);
  const float *l = logits;
  const int *tg = targets;
  float *d = dlogits;
  if (dev != DEV_CPU) {
    float *hl = xmalloc(nl, "tp logits (host)");
    int *ht = xmalloc((size_t)rows * sizeof(int), "tp targets (host)");
    dev_memcpy(DEV_CPU, hl, dev, logits, nl);
    dev_memcpy(DEV_CPU, ht, dev, targets, (size_t)rows * sizeof(int));
    l = hl, tg = ht, d = xmalloc(nl, "tp dlogits (host)");
  }
  float *mx = xmalloc((size_t)rows * 3 * sizeof(float), "tp loss rows"), *z = mx + rows, *lt = z + rows;
  for (int64_t i = 0; i < rows; i++) {
    const float *li = l + i * Vr;
    float v = li[0];
    for (int64_t j = 1; j < Vr; j++) v = li[j] > v ? li[j] : v;
    mx[i] = v;
  }
  rows_all_reduce(tp, stage, mx, rows, REDOP_MAX); /* 1: each row's max over the whole vocabulary */
  for (int64_t i = 0; i < rows; i++) {
    const float *li = l + i * Vr;
    float *di = d + i * Vr;
    double sum = 0.0;
    for (int64_t j = 0; j < Vr; j++) {
      di[j] = expf(li[j] - mx[i]);
      sum += di[j];
    }
    z[i] = (float)sum;
    int y = tg[i];
    if (y < 0 || y >= V) die_on_rank("tp_vocab_loss: label y[%lld] = %d outside [0, %d)", (long long)i, y, V);
    lt[i] = y >= v_lo && y < v_lo + Vr ? li[y - v_lo] : 0.0f;
  }
  rows_all_reduce(tp, stage, z, rows, REDOP_SUM);  /* 2: Σ exp over the whole vocabulary */
  rows_all_reduce(tp, stage, lt, rows, REDOP_SUM); /* 3: the target's logit, from the rank that holds it */
  double loss = 0.0;
  for (int64_t i = 0; i < rows; i++) {
    loss += log((double)z[i]) - ((double)lt[i] - mx[i]);
    float inv = (float)(1.0 / z[i]), *di = d + i * Vr;
    for (int64_t j = 0; j < Vr; j++) di[j] = di[j] * inv * scale;
    int y = tg[i];
    if (y >= v_lo && y < v_lo + Vr) di[y - v_lo] -= scale;
  }
  free(mx);
  if (dev != DEV_CPU) {
    dev_memcpy(dev, dlogits, DEV_CPU, d, nl);
    free((void *)l);
    free((void *)tg);
    free(d);
  }
  return loss;
}
