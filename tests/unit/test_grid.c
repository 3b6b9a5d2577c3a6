/* test_grid.c — the process grid's layout (common/comm/grid.h; notes/06-tensor-parallel.md): TP
 * innermost, then PP, then DP, as Megatron and picotron order the ranks. Pure functions, no MPI;
 * the communicators themselves are checked by tests/mpi/scn_tp.c. */
#include "zl_test.h" // cr_assert, Test
#include "grid.h"    // grid_coords, grid_rank_of, grid_group_ranks, grid_group_of, grid_format, grid_check

/* Every rank has one position, and back: rank_of(coords(rank)) = rank, for every valid grid. */
Test(ch06_grid, coords_round_trip) {
  for (int N = 1; N <= 12; N++)
    for (int T = 1; T <= N; T++)
      for (int P = 1; T * P <= N; P++) {
        if (N % (T * P)) continue;
        for (int r = 0; r < N; r++) {
          int k[GRID_NDIMS];
          grid_coords(r, T, P, k);
          cr_assert(k[GRID_TP] < T && k[GRID_PP] < P && k[GRID_DP] < N / (T * P), "N=%d T=%d P=%d rank %d", N,
                    T, P, r);
          cr_assert_eq(grid_rank_of(T, P, k[GRID_TP], k[GRID_PP], k[GRID_DP]), r, "N=%d T=%d P=%d rank %d", N,
                       T, P, r);
        }
      }
}

/* The groups along each dimension partition the ranks, and each rank's group index is the one
 * that lists it (the color comm_split gets). */
Test(ch06_grid, groups_partition_the_ranks) {
  for (int N = 1; N <= 12; N++)
    for (int T = 1; T <= N; T++)
      for (int P = 1; T * P <= N; P++) {
        if (N % (T * P)) continue;
        int size[GRID_NDIMS] = {T, P, N / (T * P)};
        for (int d = 0; d < GRID_NDIMS; d++) {
          int seen[12] = {0}, ranks[12];
          for (int g = 0; g < N / size[d]; g++) {
            grid_group_ranks(N, T, P, (grid_dim_t)d, g, ranks);
            for (int i = 0; i < size[d]; i++) {
              cr_assert(ranks[i] >= 0 && ranks[i] < N, "N=%d T=%d P=%d %s group %d: rank %d", N, T, P,
                        grid_dim_name((grid_dim_t)d), g, ranks[i]);
              seen[ranks[i]]++;
              cr_assert_eq(grid_group_of(ranks[i], T, P, (grid_dim_t)d), g, "N=%d T=%d P=%d %s: rank %d", N,
                           T, P, grid_dim_name((grid_dim_t)d), ranks[i]);
              int k[GRID_NDIMS];
              grid_coords(ranks[i], T, P, k);
              cr_assert_eq(k[d], i, "listed by their coordinate along the dimension");
            }
          }
          for (int r = 0; r < N; r++)
            cr_assert_eq(seen[r], 1, "N=%d T=%d P=%d %s: rank %d in %d groups", N, T, P,
                         grid_dim_name((grid_dim_t)d), r, seen[r]);
        }
      }
}

/* The cases the chapter shows: 4 = 2×2, 3 = 1×3 and 3×1, 6 = 3×2 (D × T), and one with P. */
Test(ch06_grid, format_names_the_groups) {
  char buf[1024];
  grid_format(4, 2, 1, buf, sizeof buf);
  cr_assert_str_eq(buf, "grid: 4 ranks = D 2 × P 1 × T 2 (TP innermost, then PP, then DP)\n"
                        "  tp: 2 groups of 2: {0, 1} {2, 3}\n"
                        "  pp: 4 groups of 1: {0} {1} {2} {3}\n"
                        "  dp: 2 groups of 2: {0, 2} {1, 3}\n");
  grid_format(3, 3, 1, buf, sizeof buf);
  cr_assert(strstr(buf, "  tp: 1 group of 3: {0, 1, 2}\n") &&
                strstr(buf, "  dp: 3 groups of 1: {0} {1} {2}\n"),
            "%s", buf);
  grid_format(3, 1, 1, buf, sizeof buf);
  cr_assert(strstr(buf, "  tp: 3 groups of 1: {0} {1} {2}\n") &&
                strstr(buf, "  dp: 1 group of 3: {0, 1, 2}\n"),
            "%s", buf);
  grid_format(6, 2, 1, buf, sizeof buf);
  cr_assert(strstr(buf, "D 3 × P 1 × T 2") && strstr(buf, "  tp: 3 groups of 2: {0, 1} {2, 3} {4, 5}\n") &&
                strstr(buf, "  dp: 2 groups of 3: {0, 2, 4} {1, 3, 5}\n"),
            "%s", buf);
  grid_format(8, 2, 2, buf, sizeof buf); /* Megatron's picture: TP pairs, PP stages T apart, DP P·T apart */
  cr_assert(strstr(buf, "  tp: 4 groups of 2: {0, 1} {2, 3} {4, 5} {6, 7}\n") &&
                strstr(buf, "  pp: 4 groups of 2: {0, 2} {1, 3} {4, 6} {5, 7}\n") &&
                strstr(buf, "  dp: 4 groups of 2: {0, 4} {1, 5} {2, 6} {3, 7}\n"),
            "%s", buf);
}

Test(ch06_grid, check_refuses_what_does_not_divide) {
  char why[160];
  cr_assert_eq(grid_check(4, 2, 1, why, sizeof why), 0);
  cr_assert_eq(grid_check(6, 3, 2, why, sizeof why), 0);
  cr_assert_eq(grid_check(4, 3, 1, why, sizeof why), 1);
  cr_assert(strstr(why, "4 ranks cannot be split into groups of T·P = 3·1 = 3"), "%s", why);
  cr_assert_eq(grid_check(4, 0, 1, why, sizeof why), 1);
  cr_assert_eq(grid_check(6, 2, 2, why, sizeof why), 1);
}
