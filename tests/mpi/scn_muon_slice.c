/* scn_muon_slice — ch03_zero1 --shard owner with the tempting wrong body of owners_update_matrix:
 * Newton–Schulz on this rank's slice of each matrix (its rows r·R/N..(r+1)·R/N, as ZeRO's flat pieces
 * would hand it), the slice updated in place and never sent. Run with ZL_CHECK_RANKS=1, it must stop
 * with "rank 1's parameters differ from rank 0's after step 1" (tests/mpi/test_muon.c): what the
 * check catches when an exercise body orthogonalises slices (DeepSpeed's issue 7807). */
#include "owners.h"   // owners_t, owners_step_with, owners_strategy, owners_check
#include "muon.h"     // trainer_muon_hp, op_muon
#include "check.h"    // xcalloc
#include <stdlib.h>   // free

static strategy_t g_slice; /* owners' strategy with the wrong step */

static void slice_update(trainer_t *t, owners_t *o, int i, float gscale) {
  const owned_matrix_t *x = &o->mat[i];
  int N = t->world, r = t->rank, lo = x->rows * r / N, hi = x->rows * (r + 1) / N;
  if (hi <= lo) return;
  float *mom = xcalloc((size_t)(hi - lo) * x->cols, sizeof(float), "slice momentum");
  muon_hp_t hp = trainer_muon_hp(t);
  int64_t at = x->off + (int64_t)lo * x->cols;
  op_muon(t->dev, (float *)t->params.data + at, (const float *)t->grads.data + at, t->wdt, mom, hi - lo,
          x->cols, &hp, gscale);
  free(mom);
}

static void slice_step(trainer_t *t) { owners_step_with(t, slice_update); }

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "scn_muon_slice", "owners with Newton-Schulz on slices (a test)", 0);
  int rc = owners_check(&cfg);
  if (rc) return rc;
  g_slice = *owners_strategy();
  g_slice.step = slice_step;
  return train_main(&cfg, &g_slice, "03_zero1");
}
