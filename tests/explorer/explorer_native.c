/* explorer_native.c — the explorer page's C run natively, so that a change to comm.h or ring.c that
 * would break the page breaks make build, and suite common_explorer (tests/unit/test_explorer_native.c)
 * checks what it computes. The Makefile links it with the page's own files (EXPLORER_C:
 * common/explorer/explorer.c, ring.c, ...), the page's include path and the host compiler.
 *   explorer_native ring OP N PER    zx_ring(OP, N, PER), OP 0 reduce-scatter, 1 all-gather: prints
 *                                    `steps S`, then `rank R:` and its zx_ring_numel() output values
 *   explorer_native scratch NBYTES   the page communicator's comm_scratch asked for NBYTES past its
 *                                    slot: it dies with one line (exit 1) */
#include "comm.h"   // comm_scratch: explorer.c's, on the page's own communicator
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // atoi, atoll
#include <string.h> // strcmp

/* explorer.c's exports used here (the page calls them through ccall; no header of their own) */
int zx_ring(int op, int N, int per);
int zx_ring_numel(void);
double zx_ring_out(int r, int i);

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "ring") == 0) {
    int N = atoi(argv[3]), steps = zx_ring(atoi(argv[2]), N, atoi(argv[4]));
    printf("steps %d\n", steps);
    for (int r = 0; steps >= 0 && r < N; r++) {
      printf("rank %d:", r);
      for (int i = 0; i < zx_ring_numel(); i++) printf(" %.17g", zx_ring_out(r, i));
      printf("\n");
    }
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "scratch") == 0) {
    /* the communicator is explorer.c's own type (opaque here); the size is checked before it is used */
    comm_scratch(NULL, 0, atoll(argv[2]));
    printf("comm_scratch returned\n");
    return 0;
  }
  fprintf(stderr, "usage: explorer_native ring OP N PER | scratch NBYTES\n");
  return 2;
}
