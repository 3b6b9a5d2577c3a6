/* owners_assign.c — the greedy assignment of whole matrices to ranks by size (owners_assign.h). */
#include "owners_assign.h" // owners_assign
#include <stdlib.h>        // calloc, free, abort

void owners_assign(const int64_t *numel, int n, int world, int *owner, int64_t *load) {
  int *order = calloc((size_t)n + 1, sizeof *order);
  int64_t *got = calloc((size_t)world, sizeof *got);
  if (!order || !got) abort(); /* pure (the explorer's wasm too): no check.h */
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort, largest first, stable: the same order on every rank */
    for (int j = i; j > 0 && numel[order[j]] > numel[order[j - 1]]; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
  for (int k = 0; k < n; k++) {
    int best = 0;
    for (int r = 1; r < world; r++)
      if (got[r] < got[best]) best = r;
    owner[order[k]] = best;
    got[best] += numel[order[k]];
  }
  for (int r = 0; load && r < world; r++) load[r] = got[r];
  free(order);
  free(got);
}
