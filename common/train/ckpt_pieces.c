/* ckpt_pieces.c — what each rank writes of the model, for a checkpoint's shard and for the export of
 * the full weights (ckpt.c): the pieces its strategy's layout names (train.h's unit_layout_t), one copy
 * of each, copied to the host.
 *
 * One case is more than a lookup: two data-parallel groups (chapter 12's --ep with DDP or ZeRO-1/2,
 * strategy_t.two_groups). A ZeRO rank then owns chunk r of N of a unit's dense prefix, but the ranks that
 * save together (t->model_comm: the D ranks with the same experts, one checkpoint directory per EP rank)
 * must save ALL of the prefix, or their directory would not tile the unit. The transform's group (the
 * P_E ranks of one EP group, consecutive ranks, so consecutive dense chunks) sums its chunks into one
 * span first: each of its ranks writes the group's span, D spans tile the prefix in every directory. A
 * host control all-reduce of fp64 (each value once, the rest zeros: exact), so the GPU path needs no
 * device collective here. */
#include "ckpt_internal.h" // ckpt_saved_t
#include "check.h"         // xcalloc, xmalloc
#include "comm.h"          // comm_ctl_all_reduce_f64
#include "device.h"        // dev_memcpy
#include <stdlib.h>        // free

float *ckpt_section_of(const trainer_t *t, const unit_piece_t *p, int s, int u) {
  float *a = s == 0 ? p->w : s == 1 ? p->m : p->v;
  if (!a) die_on_rank("checkpoint: strategy %s keeps no %s for unit %d (layout hook)", t->strategy->name,
                      s == 0 ? "weights" : s == 1 ? "optimizer state m" : "optimizer state v", u);
  return a;
}

/* Piece p of unit u, sections 0..nsec−1, into one host array (section s at s·numel). */
static float *to_host(const trainer_t *t, const unit_piece_t *p, int u, int nsec) {
  float *h = xmalloc((size_t)(nsec * p->numel) * sizeof(float) + 4, "checkpoint piece (host)");
  for (int s = 0; s < nsec && p->numel > 0; s++)
    dev_memcpy(DEV_CPU, h + s * p->numel, t->dev, ckpt_section_of(t, p, s, u),
               (size_t)p->numel * sizeof(float));
  return h;
}

/* Two groups: the transform group's chunks of unit u's dense prefix, summed into the span they cover. */
static ckpt_saved_t dense_span(const trainer_t *t, const unit_piece_t *p, int u, int nsec) {
  comm_t *g = t->group_comm;
  double lim[2] = {-(double)p->off, (double)(p->off + p->numel)}; /* max of −lo, of hi: the span */
  comm_ctl_all_reduce_f64(g, lim, 2, REDOP_MAX);
  int64_t lo = (int64_t)-lim[0], n = (int64_t)lim[1] - lo;
  double *v = xcalloc((size_t)(nsec * n) + 1, sizeof(double), "checkpoint dense span");
  float *mine = to_host(t, p, u, nsec);
  for (int s = 0; s < nsec; s++)
    for (int64_t i = 0; i < p->numel; i++) v[s * n + p->off - lo + i] = mine[s * p->numel + i];
  comm_ctl_all_reduce_f64(g, v, (int)(nsec * n), REDOP_SUM);
  float *h = xmalloc((size_t)(nsec * n) * sizeof(float) + 4, "checkpoint dense span (host)");
  for (int64_t i = 0; i < nsec * n; i++) h[i] = (float)v[i];
  free(v);
  free(mine);
  return (ckpt_saved_t){.u = u, .off = lo, .numel = n, .host = h};
}

ckpt_saved_t *ckpt_saved_pieces(trainer_t *t, int nsec, int *n) {
  const model_t *md = t->whole;
  ckpt_saved_t *out = xcalloc(2 * (size_t)md->n_units + 1, sizeof *out, "checkpoint pieces");
  *n = 0;
  for (int u = 0; u < md->n_units; u++) {
    unit_layout_t l = {0};
    if (!t->strategy->layout) die_on_rank("strategy %s has no layout hook (train.h)", t->strategy->name);
    t->strategy->layout(t, u, &l);
    if (l.saved_elsewhere || (l.replicated && t->rank != 0)) continue; /* one copy of every piece */
    for (int k = 0; k < 2; k++) {
      unit_piece_t p = unit_layout_piece(&l, k);
      int span = k == 0 && t->dense_comm && !l.replicated && trainer_dense_numel(t, u) > 0;
      if (span) out[(*n)++] = dense_span(t, &p, u, nsec);
      else if (p.numel > 0)
        out[(*n)++] = (ckpt_saved_t){.u = u, .off = p.off, .numel = p.numel, .host = to_host(t, &p, u, nsec)};
    }
  }
  return out;
}

void ckpt_saved_free(ckpt_saved_t *p, int n) {
  for (int i = 0; i < n; i++) free(p[i].host);
  free(p);
}
