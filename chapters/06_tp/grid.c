/* ch06_grid — which ranks form which tensor-, pipeline- and data-parallel group (common/comm/grid.h):
 * for every T dividing ranks / P (or the one --tp names), each rank's line, in rank order.
 *   make run CH=06 NP=4 PROG=grid ARGS="--tp 2"
 *   make run CH=06 NP=8 PROG=grid ARGS="--tp 2 --pp 2" */
#include "args.h"  // arg_spec_t, args_parse, args_error, args_env_world
#include "comm.h"  // comm_t, comm_init, comm_rank
#include "grid.h"  // grid_t, grid_init, grid_print, grid_free
#include <stdio.h> // snprintf, printf

/* ---- the grid ------------------------------------------------------------------------------ */
static void run_grid(comm_t *world, int tp, int pp) {
  int N = comm_world(world);
  for (int T = 1; T <= N / pp; T++) {
    if ((tp && T != tp) || (N / pp) % T) continue;
    grid_t *g = grid_init(world, T, pp);
    grid_print(g);
    if (comm_rank(world) == 0) printf("\n");
    fflush(stdout);
    grid_free(g);
  }
}

int main(int argc, char **argv) {
  int tp = 0, pp = 1;
  arg_spec_t specs[] = {
      {"--tp", ARG_INT, &tp, 0, 64, NULL, "tensor-parallel size T (0: every T dividing ranks / P)"},
      {"--pp", ARG_INT, &pp, 1, 64, NULL, "pipeline size P"},
  };
  int rc = args_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), "ch06_grid",
                      "The process grid: which ranks form which TP / PP / DP group.\n"
                      "Example: make run CH=06 NP=4 PROG=grid ARGS=\"--tp 2\"");
  if (rc == 1) return 0;
  if (rc) return 2;
  int N = args_env_world();
  char v[32];
  if (N % pp) {
    snprintf(v, sizeof v, "%d", pp);
    return args_error("--pp", v, "must divide the number of ranks (%d)", N);
  }
  if (tp && N % (tp * pp)) {
    snprintf(v, sizeof v, "%d", tp);
    return args_error("--tp", v, "T·P must divide the number of ranks (%d)", N);
  }
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 60);
  run_grid(c, tp, pp);
  comm_finalize(c);
  return 0;
}
