/* scn_mistakes — the communication mistakes a student makes, each ended by the comm layer with one
 * line in the student's terms (common/comm/comm_mpi.c, comm_checks.c; notes/01-collectives.md):
 *   scn_mistakes short_recv    rank 1 receives 4 floats where rank 0 sends 10 (comm_send/comm_recv)
 *   scn_mistakes short_group   the same inside comm_group_async (a pipeline's posted receives)
 *   scn_mistakes short_pair    comm_sendrecv_async whose receive is 1 short
 *   scn_mistakes wrong_comm    a receive posted on a sub-communicator, waited on the world (exercise
 *                              mode: ZL_EXERCISE_TIMEOUT_S set by the test)
 *   scn_mistakes coll_sizes    an all-gather whose ranks pass different sizes
 *   scn_mistakes racy_read     a planted race: rank 1 reads its receive buffer 5 ms after posting the
 *                              receive, before comm_wait — right whenever the message is faster than
 *                              5 ms, wrong when it is late (what ZL_JITTER_US makes happen)
 * Each mode but racy_read exits nonzero; racy_read exits 1 with a FAIL line when the read was early,
 * 0 when the race went unnoticed. tests/mpi/test_mistakes.c reads the lines. Run on 2 ranks. */
#include "comm.h"   // comm_t, comm_*
#include <stdio.h>  // printf
#include <string.h> // strcmp
#include <time.h>   // clock_gettime: racy_read's 5 ms of work

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_timeout(c, 20);
  int r = comm_rank(c);
  float a[16] = {0}, b[16] = {0};
  if (strcmp(mode, "short_recv") == 0) {
    if (r == 0) comm_send(c, a, 10, DT_F32, 1);
    else comm_recv(c, b, 4, DT_F32, 0);
  } else if (strcmp(mode, "short_group") == 0) {
    comm_p2p_t op = {.peer = 1 - r, .numel = 8};
    if (r == 0) op.send = a;
    else op.recv = b, op.numel = 6;
    comm_wait(c, comm_group_async(c, 1, &op, DT_F32, "stage 0 -> 1 activations"));
  } else if (strcmp(mode, "short_pair") == 0) {
    int64_t nr = r == 1 ? 4 : 5;
    comm_wait(c, comm_sendrecv_async(c, a, 5, 1 - r, b, nr, 1 - r, DT_F32, "ring step"));
  } else if (strcmp(mode, "wrong_comm") == 0) {
    comm_t *half = comm_split(c, 0, r); /* the same ranks: another communicator */
    comm_handle_t h = r == 0 ? comm_send_async(half, a, 4, DT_F32, 1, "grad to peer")
                             : comm_recv_async(half, b, 4, DT_F32, 0, "grad from peer");
    comm_wait(c, h); /* on the world: not the communicator that issued h */
  } else if (strcmp(mode, "coll_sizes") == 0) {
    comm_all_gather(c, a, b, r == 0 ? 8 : 12, DT_F32);
  } else if (strcmp(mode, "racy_read") == 0) {
    for (int i = 0; i < 4; i++) a[i] = (float)(i + 1);
    if (r == 0) comm_wait(c, comm_send_async(c, a, 4, DT_F32, 1, "values"));
    if (r == 1) {
      comm_handle_t h = comm_recv_async(c, b, 4, DT_F32, 0, "values");
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      do clock_gettime(CLOCK_MONOTONIC, &t1); /* 5 ms of "work" between the post and the read */
      while ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 < 5);
      float seen = b[0]; /* THE RACE: read before comm_wait */
      comm_wait(c, h);
      if (seen != 1.0f) {
        printf("FAIL rank 1: read the receive buffer before comm_wait: got %g, expected 1\n", seen);
        comm_finalize(c);
        return 1;
      }
    }
    comm_finalize(c);
    return 0;
  } else {
    printf("usage: scn_mistakes short_recv|short_group|short_pair|wrong_comm|coll_sizes|racy_read\n");
    return 2;
  }
  printf("rank %d: %s ended without an error\n", r, mode);
  comm_finalize(c);
  return 1;
}
