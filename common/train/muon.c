/* muon.c — Muon on a replica held whole: the split into Muon's matrices and AdamW's rest, and the
 * update that walks it (muon.h; notes/03-zero1.md). Strategies that hold a matrix whole (one rank,
 * DDP) call it through trainer_optimizer_update; ZeRO's owners (solutions/owners_plan.c) walk the same
 * segments, each matrix on its owner. */
#include "muon.h"   // the contracts implemented here
#include <stdio.h>  // printf
#include "check.h"  // die
#include "ops.h"    // op_adamw

int muon_unit_segments(const model_t *m, int u, muon_seg_t *out) {
  if (!m->fns->matrices) die("error: --optimizer muon: the model kind '%s' lists no matrices", m->fns->name);
  const unit_t *un = &m->units[u];
  if (un->numel == 0) return 0; /* a unit this rank does not hold (another pipeline stage's) */
  model_matrix_t mx[MODEL_MAX_MATRICES];
  int k = m->fns->matrices(m, u, mx), n = 0;
  int64_t at = 0;
  for (int i = 0; i < k; i++) { /* in offset order (the hooks list them so) */
    if (mx[i].off > at) out[n++] = (muon_seg_t){at, mx[i].off - at, 0, 0};
    out[n++] = (muon_seg_t){mx[i].off, (int64_t)mx[i].rows * mx[i].cols, mx[i].rows, mx[i].cols};
    at = mx[i].off + (int64_t)mx[i].rows * mx[i].cols;
  }
  if (at < un->numel) out[n++] = (muon_seg_t){at, un->numel - at, 0, 0};
  return n;
}

static int64_t split_numel(const model_t *m, int matrices) {
  int64_t s = 0;
  muon_seg_t seg[MUON_MAX_SEGS];
  for (int u = 0; u < m->n_units; u++) {
    int n = muon_unit_segments(m, u, seg);
    for (int i = 0; i < n; i++)
      if ((seg[i].rows > 0) == matrices) s += seg[i].numel;
  }
  return s;
}
int64_t muon_adamw_numel(const model_t *m) { return split_numel(m, 0); }
int64_t muon_matrix_numel(const model_t *m) { return split_numel(m, 1); }

muon_hp_t trainer_muon_hp(const trainer_t *t) {
  return (muon_hp_t){.lr = (float)t->cfg->muon_lr, .momentum = MUON_MOMENTUM,
                     .weight_decay = (float)t->cfg->weight_decay, .ns_steps = MUON_NS_STEPS};
}

void muon_update_replica(trainer_t *t, float *w, const void *grad, float *m, float *v, int64_t n,
                         float gscale) {
  const model_t *md = &t->model;
  if (n != md->padded_numel)
    die_on_rank("--optimizer muon: an update of %lld of the %lld parameters: Muon needs whole matrices",
                (long long)n, (long long)md->padded_numel);
  size_t gb = dtype_size(t->wdt);
  muon_hp_t hp = trainer_muon_hp(t);
  muon_seg_t seg[MUON_MAX_SEGS];
  int64_t vat = 0; /* v: the AdamW segments one after another */
  for (int u = 0; u < md->n_units; u++) {
    int k = muon_unit_segments(md, u, seg);
    for (int i = 0; i < k; i++) {
      int64_t at = md->units[u].off + seg[i].off;
      const void *g = (const char *)grad + at * (int64_t)gb;
      if (seg[i].rows > 0) {
        op_muon(t->dev, w + at, g, t->wdt, m + at, seg[i].rows, seg[i].cols, &hp, gscale);
        continue;
      }
      op_adamw(t->dev, w + at, g, t->wdt, m + at, v + vat, seg[i].numel, &t->hp, t->opt_t, gscale);
      vat += seg[i].numel;
    }
  }
}

void muon_print_split(const trainer_t *t) {
  const model_t *m = &t->model;
  if (!m->fns->matrices) return;
  int nm = 0;
  model_matrix_t mx[MODEL_MAX_MATRICES];
  for (int u = 0; u < m->n_units; u++) nm += m->units[u].numel ? m->fns->matrices(m, u, mx) : 0;
  printf("muon: %d matrices, %lld params with Muon (lr %g, momentum %g Nesterov, Newton-Schulz %d steps); "
         "%lld params with AdamW (lr %g: embeddings, head, norms, biases)\n",
         nm, (long long)muon_matrix_numel(m), t->cfg->muon_lr, (double)MUON_MOMENTUM, MUON_NS_STEPS,
         (long long)muon_adamw_numel(m), t->cfg->lr);
}
