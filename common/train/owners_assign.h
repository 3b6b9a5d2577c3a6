/* owners_assign.h — the greedy owner assignment of whole matrices (Muon under ZeRO: each matrix on one
 * rank), pure: the strategies (solutions/owners_plan.c) and ch00_memory's Muon table (memcalc.c) call
 * the same code. Notes: notes/03-zero1.md, "Muon: whole matrices, not slices". */
#ifndef ZL_OWNERS_ASSIGN_H
#define ZL_OWNERS_ASSIGN_H
#include <stdint.h> // int64_t

/* owner[i] for n matrices of numel[i] on `world` ranks: largest first (a stable sort, the same order on
 * every rank), each to the rank with the fewest parameters so far, the lowest rank on a tie. load (may
 * be NULL): [world] the matrix parameters each rank gets. */
void owners_assign(const int64_t *numel, int n, int world, int *owner, int64_t *load);
#endif
