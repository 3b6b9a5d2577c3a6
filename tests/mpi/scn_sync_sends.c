/* scn_sync_sends.c — a send/send crossing that only eager sends get away with (driven by
 * tests/mpi/test_sync_sends.c). Two ranks each queue comm_send_async to the other, then
 * comm_recv_async from it, on one stream. With eager sends (small CPU messages, the default)
 * both sends return at once and the receives match them: "scn_sync_sends: exchanged". With
 * ZL_SYNC_SENDS=1 (rendezvous, like ncclSend) each send waits for a receive the peer's stream
 * will only post after its own send: a deadlock, which the 2 s deadline names
 * ("rank R: recv (crossed) did not complete within 2 s"). */
#include "comm.h"   // comm_init, comm_send_async, comm_recv_async, comm_wait, comm_set_timeout
#include <stdio.h>  // printf

int main(int argc, char **argv) {
  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  int rank = comm_rank(c), peer = 1 - rank;
  if (comm_world(c) != 2) {
    printf("scn_sync_sends: needs 2 ranks, got %d\n", comm_world(c));
    return 2;
  }
  comm_set_timeout(c, 2.0);
  float mine[4] = {(float)rank, 1, 2, 3}, theirs[4] = {0};
  comm_handle_t hs = comm_send_async(c, mine, 4, DT_F32, peer, "crossed");
  comm_handle_t hr = comm_recv_async(c, theirs, 4, DT_F32, peer, "crossed");
  comm_wait(c, hr);
  comm_wait(c, hs);
  if (theirs[0] != (float)peer) {
    printf("FAIL rank %d: received [0] = %g, expected %d\n", rank, theirs[0], peer);
    return 1;
  }
  if (rank == 0) printf("scn_sync_sends: exchanged\n");
  fflush(stdout);
  comm_finalize(c);
  return 0;
}
