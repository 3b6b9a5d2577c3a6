/* grid.c — the process grid and its communicators (see grid.h; notes/06-tensor-parallel.md). */
#include "grid.h"   // grid_t, grid_dim_t
#include "check.h"  // die, xcalloc
#include <stdio.h>  // snprintf, printf
#include <stdlib.h> // free

static const char *const g_dim_names[GRID_NDIMS] = {"tp", "pp", "dp"};
const char *grid_dim_name(grid_dim_t dim) { return dim >= 0 && dim < GRID_NDIMS ? g_dim_names[dim] : "?"; }

int grid_check(int nranks, int tp, int pp, char *why, size_t n) {
  if (why && n) why[0] = 0;
  if (tp < 1 || pp < 1) {
    if (why) snprintf(why, n, "tensor-parallel size %d and pipeline size %d must be >= 1", tp, pp);
    return 1;
  }
  if (nranks % (tp * pp) != 0) {
    if (why)
      snprintf(why, n,
               "%d ranks cannot be split into groups of T·P = %d·%d = %d: N must be a multiple of T·P",
               nranks, tp, pp, tp * pp);
    return 1;
  }
  return 0;
}

void grid_coords(int rank, int tp, int pp, int coord[GRID_NDIMS]) {
  coord[GRID_TP] = rank % tp;
  coord[GRID_PP] = (rank / tp) % pp;
  coord[GRID_DP] = rank / (tp * pp);
}

int grid_group_of(int rank, int tp, int pp, grid_dim_t dim) {
  int k[GRID_NDIMS];
  grid_coords(rank, tp, pp, k);
  switch (dim) {
  case GRID_TP: return k[GRID_DP] * pp + k[GRID_PP];
  case GRID_PP: return k[GRID_DP] * tp + k[GRID_TP];
  default: return k[GRID_PP] * tp + k[GRID_TP];
  }
}

void grid_group_ranks(int nranks, int tp, int pp, grid_dim_t dim, int g, int *ranks) {
  int dp = nranks / (tp * pp);
  switch (dim) {
  case GRID_TP:
    for (int i = 0; i < tp; i++) ranks[i] = grid_rank_of(tp, pp, i, g % pp, g / pp);
    break;
  case GRID_PP:
    for (int i = 0; i < pp; i++) ranks[i] = grid_rank_of(tp, pp, g % tp, i, g / tp);
    break;
  default:
    for (int i = 0; i < dp; i++) ranks[i] = grid_rank_of(tp, pp, g % tp, g / tp, i);
  }
}

int grid_format(int nranks, int tp, int pp, char *buf, size_t n) {
  char why[160];
  if (grid_check(nranks, tp, pp, why, sizeof why)) return snprintf(buf, n, "grid: %s\n", why);
  int dp = nranks / (tp * pp), size[GRID_NDIMS] = {tp, pp, dp};
  size_t len = (size_t)snprintf(
      buf, n, "grid: %d ranks = D %d × P %d × T %d (TP innermost, then PP, then DP)\n", nranks, dp, pp, tp);
  int *ranks = xcalloc((size_t)nranks, sizeof *ranks, "grid group");
  for (int d = 0; d < GRID_NDIMS && len < n; d++) {
    int groups = nranks / size[d];
    len += (size_t)snprintf(buf + len, n - len, "  %s: %d group%s of %d:", g_dim_names[d], groups,
                            groups == 1 ? "" : "s", size[d]);
    for (int g = 0; g < groups && len < n; g++) {
      grid_group_ranks(nranks, tp, pp, (grid_dim_t)d, g, ranks);
      len += (size_t)snprintf(buf + len, n - len, " {");
      for (int i = 0; i < size[d] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? ", " : "", ranks[i]);
      if (len < n) len += (size_t)snprintf(buf + len, n - len, "}");
    }
    if (len < n) len += (size_t)snprintf(buf + len, n - len, "\n");
  }
  free(ranks);
  return (int)(len < n ? len : (n ? n - 1 : 0));
}

grid_t *grid_init(comm_t *world, int tp, int pp) {
  int nranks = comm_world(world), rank = comm_rank(world);
  char why[160];
  if (grid_check(nranks, tp, pp, why, sizeof why)) die_on_rank("grid_init: %s", why);
  grid_t *g = xcalloc(1, sizeof *g, "grid");
  g->world = world;
  g->rank = rank;
  g->nranks = nranks;
  g->size[GRID_TP] = tp;
  g->size[GRID_PP] = pp;
  g->size[GRID_DP] = nranks / (tp * pp);
  grid_coords(rank, tp, pp, g->coord);
  /* color = the group, key = the position inside it: the group's rank i is coordinate i */
  for (int d = 0; d < GRID_NDIMS; d++) {
    g->comm[d] = comm_split(world, grid_group_of(rank, tp, pp, (grid_dim_t)d), g->coord[d]);
    if (comm_rank(g->comm[d]) != g->coord[d] || comm_world(g->comm[d]) != g->size[d])
      die_on_rank("grid_init: %s group has rank %d of %d, expected %d of %d", g_dim_names[d],
          comm_rank(g->comm[d]), comm_world(g->comm[d]), g->coord[d], g->size[d]);
  }
  return g;
}

void grid_free(grid_t *g) {
  if (!g) return;
  for (int d = GRID_NDIMS - 1; d >= 0; d--) comm_finalize(g->comm[d]);
  free(g);
}

void grid_print(const grid_t *g) {
  if (g->rank == 0) {
    char text[4096];
    grid_format(g->nranks, g->size[GRID_TP], g->size[GRID_PP], text, sizeof text);
    fputs(text, stdout);
    fflush(stdout);
  }
  char line[160];
  snprintf(line, sizeof line, "rank %d: tp %d/%d  pp %d/%d  dp %d/%d\n", g->rank, comm_rank(g->comm[GRID_TP]),
           comm_world(g->comm[GRID_TP]), comm_rank(g->comm[GRID_PP]), comm_world(g->comm[GRID_PP]),
           comm_rank(g->comm[GRID_DP]), comm_world(g->comm[GRID_DP]));
  comm_print_ordered(g->world, line);
}
