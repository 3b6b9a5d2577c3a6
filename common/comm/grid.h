/* grid.h — the process grid: N = D × P × T ranks, and each rank's TP, PP and DP communicators
 * (notes/06-tensor-parallel.md).
 *
 * Order, as Megatron-LM and picotron lay it out: TP innermost, then PP, then DP.
 *   rank = (dp_rank · P + pp_rank) · T + tp_rank
 * so the T ranks of a tensor-parallel group are consecutive (on a GPU box: the same node, the
 * fastest links — TP talks every layer), the P stages of a pipeline are T apart, and the D
 * replicas of one (pp, tp) position are P·T apart. N = 4, T = 2:
 *   tp groups: {0, 1} {2, 3}    dp groups: {0, 2} {1, 3}    pp groups: {0} {1} {2} {3}
 * Each group is a comm_split of the world communicator (common/comm/comm.h): its own counters, so
 * TP traffic and DP traffic are reported apart. */
#ifndef ZL_GRID_H
#define ZL_GRID_H
#include <stddef.h> // size_t
#include "comm.h"   // comm_t

typedef enum { GRID_TP = 0, GRID_PP = 1, GRID_DP = 2, GRID_NDIMS } grid_dim_t;

typedef struct grid {
  comm_t *world;            /* the communicator the grid was made from (not owned) */
  int rank, nranks;         /* this rank in world, N */
  int size[GRID_NDIMS];     /* T, P, D */
  int coord[GRID_NDIMS];    /* tp_rank, pp_rank, dp_rank of this rank */
  comm_t *comm[GRID_NDIMS]; /* this rank's TP, PP and DP groups (owned; size-1 groups too) */
} grid_t;

/* ---- the layout itself: pure functions (no MPI), unit-tested ------------------------------ */
/* 0 when N = D·P·T for a whole D >= 1 (T, P >= 1 and T·P divides N); otherwise 1, and why not
 * in `why` (one line, may be NULL). */
int grid_check(int nranks, int tp, int pp, char *why, size_t n);
/* World rank of the grid position (tp_rank, pp_rank, dp_rank). */
static inline int grid_rank_of(int tp, int pp, int tp_rank, int pp_rank, int dp_rank) {
  return (dp_rank * pp + pp_rank) * tp + tp_rank;
}
/* The position of world rank `rank`: coord[GRID_TP], coord[GRID_PP], coord[GRID_DP]. */
void grid_coords(int rank, int tp, int pp, int coord[GRID_NDIMS]);
/* The groups along `dim`: group g (0 <= g < N / size[dim]) is the set of ranks sharing every other
 * coordinate, listed by their coordinate along dim. Group g of GRID_TP is (dp, pp) = (g / P, g % P);
 * of GRID_PP (dp, tp) = (g / T, g % T); of GRID_DP (pp, tp) = (g / T, g % T). Writes the size[dim]
 * ranks of group g into ranks[]. */
void grid_group_ranks(int nranks, int tp, int pp, grid_dim_t dim, int g, int *ranks);
/* The color comm_split uses for this rank's group along dim (= its group index above). */
int grid_group_of(int rank, int tp, int pp, grid_dim_t dim);
/* The grid as text, one line per dimension:
 *   grid: 4 ranks = D 2 × P 1 × T 2 (TP innermost, then PP, then DP)
 *     tp: 2 groups of 2: {0, 1} {2, 3}
 *     pp: 4 groups of 1: {0} {1} {2} {3}
 *     dp: 2 groups of 2: {0, 2} {1, 3}
 * Returns the length written (truncated to n − 1). */
int grid_format(int nranks, int tp, int pp, char *buf, size_t n);
const char *grid_dim_name(grid_dim_t dim); /* "tp", "pp", "dp" */

/* ---- the communicators ------------------------------------------------------------------- */
/* Collective over world: splits it into the TP, PP and DP groups (three comm_split calls, in
 * that order). Dies with grid_check's message when T·P does not divide N. The groups inherit the
 * world's backend, device, implementation (vendor or ring) and timeout. */
grid_t *grid_init(comm_t *world, int tp, int pp);
/* Finalizes the three groups (not world) and frees g. Collective. */
void grid_free(grid_t *g);
/* Rank 0 prints grid_format; then every rank prints, in rank order, where it sits and what its
 * communicators say (ranks and sizes read back from the split communicators, not recomputed):
 *   rank 3: tp 1/2  pp 0/1  dp 1/2 */
void grid_print(const grid_t *g);
#endif
