/* explorer_native.c — the explorer page's C run natively, so that a change to comm.h or ring.c that
 * would break the page breaks make build, and suite common_explorer (tests/unit/test_explorer_native.c)
 * checks what it computes. The Makefile links it with the page's own files (EXPLORER_C:
 * common/explorer/explorer.c, ring.c, ...), the page's include path and the host compiler.
 *   explorer_native ring OP N PER    zx_ring(OP, N, PER), OP 0 reduce-scatter, 1 all-gather,
 *                                    2 all-reduce, 3 broadcast, 4 reduce, 5 all-to-all: prints `steps S`,
 *                                    then `rank R:` and its zx_ring_out_numel(R) output values, then
 *                                    `sent R:` the bytes it sent in all and the ring model's
 *   explorer_native scratch NBYTES   the page communicator's comm_scratch asked for NBYTES past its
 *                                    slot: it dies with one line (exit 1)
 *   explorer_native sched S P M V F B W C   zx_sched: `rc R`, then `step makespan span busy bubble`,
 *                                    `inflight` per stage, and `order ok|bad` (each drawn operation
 *                                    after the one before it on its stage, the last end the step)
 *   explorer_native closed           the closed forms against the simulator on a grid: per schedule
 *                                    `closed S in N equal E`, plus `outside S N` where one differs */
#include "comm.h"   // comm_scratch: explorer.c's, on the page's own communicator
#include <stdio.h>  // printf, fprintf
#include <stdlib.h> // atoi, atoll
#include <string.h> // strcmp
#include <math.h>   // fabs

/* explorer.c's exports used here (the page calls them through ccall; no header of their own) */
int zx_ring(int op, int N, int per);
int zx_sched(int sched, int P, int M, int v, double f, double b, double w, double c);
double zx_sched_makespan(void);
double zx_sched_span(void);
double zx_sched_busy(void);
double zx_sched_bubble(void);
int zx_sched_nops(int s);
double zx_sched_start(int s, int i);
double zx_sched_dur(int s, int i);
int zx_inflight(int sched, int P, int s, int M, int v);
double zx_bubble_closed(int sched, int P, int M, int v, double f, double b, double w, double c);
int zx_ring_numel(void);
int zx_ring_out_numel(int r);
double zx_ring_out(int r, int i);
int zx_ring_sent(int r, int s);
double zx_ring_model_bytes(int op, int N, int numel, int bytes, int rank);

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "ring") == 0) {
    int op = atoi(argv[2]), N = atoi(argv[3]), steps = zx_ring(op, N, atoi(argv[4]));
    printf("steps %d\n", steps);
    for (int r = 0; steps >= 0 && r < N; r++) {
      printf("rank %d:", r);
      for (int i = 0; i < zx_ring_out_numel(r); i++) printf(" %.17g", zx_ring_out(r, i));
      printf("\n");
    }
    for (int r = 0; steps >= 0 && r < N; r++) {
      int sent = 0;
      for (int s = 0; s < steps; s++) sent += zx_ring_sent(r, s) * 4;
      printf("sent %d: %d %.17g\n", r, sent, zx_ring_model_bytes(op, N, zx_ring_numel(), 4, r));
    }
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "scratch") == 0) {
    /* the communicator is explorer.c's own type (opaque here); the size is checked before it is used */
    comm_scratch(NULL, 0, atoll(argv[2]));
    printf("comm_scratch returned\n");
    return 0;
  }
  if (argc == 10 && strcmp(argv[1], "sched") == 0) {
    int sc = atoi(argv[2]), P = atoi(argv[3]), M = atoi(argv[4]), v = atoi(argv[5]);
    int rc = zx_sched(sc, P, M, v, atof(argv[6]), atof(argv[7]), atof(argv[8]), atof(argv[9]));
    printf("rc %d\n", rc);
    if (rc) return 0;
    printf("step %.17g %.17g %.17g %.17g\ninflight", zx_sched_makespan(), zx_sched_span(), zx_sched_busy(),
           zx_sched_bubble());
    int ok = 1;
    double last = 0;
    for (int s = 0; s < P; s++) {
      printf(" %d", zx_inflight(sc, P, s, M, v));
      double free_at = 0;
      for (int i = 0; i < zx_sched_nops(s); i++) {
        ok &= zx_sched_start(s, i) >= free_at - 1e-12;
        free_at = zx_sched_start(s, i) + zx_sched_dur(s, i);
      }
      last = free_at > last ? free_at : last;
    }
    printf("\norder %s\n", ok && fabs(last - zx_sched_makespan()) < 1e-9 ? "ok" : "bad");
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "closed") == 0) {
    const double val[] = {0.5, 1, 2, 3, 0};
    for (int sc = 0; sc < 6; sc++) {
      int in = 0, eq = 0;
      for (int P = 1; P <= 6; P++)
        for (int M = 1; M <= 14; M++)
          for (int v = 1; v <= (sc == 3 ? 3 : 1); v++)
            for (int i = 0; i < 64; i++) {
              double f = val[i % 4], b = val[i / 4 % 4], w = val[i / 16], cf;
              if (zx_sched(sc, P, M, v, f, b, w, 0)) continue;
              if ((cf = zx_bubble_closed(sc, P, M, v, f, b, w, 0)) < 0) continue;
              in++;
              if (fabs(cf - zx_sched_bubble()) < 1e-12) eq++;
              else
                printf("outside %d P %d M %d v %d F %g B %g W %g: closed %.17g, simulator %.17g\n", sc, P, M,
                       v, f, b, w, cf, zx_sched_bubble());
            }
      printf("closed %d in %d equal %d\n", sc, in, eq);
    }
    return 0;
  }
  fprintf(stderr, "usage: explorer_native ring OP N PER | scratch NBYTES | sched S P M V F B W C | closed\n");
  return 2;
}
