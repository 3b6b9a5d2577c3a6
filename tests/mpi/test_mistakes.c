/* test_mistakes.c — a communication mistake ends the job with one line in the student's terms
 * (common/comm/comm_mpi.c decodes MPI's errors, comm_checks.c names a handle of another
 * communicator; notes/01-collectives.md): each case of tests/mpi/scn_mistakes on 2 ranks must exit
 * nonzero within seconds, and its line must name the call and its tag, the peer and the counts
 * posted and sent — never MPI's bare "MPI_ERR_IN_STATUS: error code in status" alone. */
#include "zl_test.h" // zl_run, cr_assert

/* Run scn_mistakes MODE on 2 ranks (exercise: in exercise mode, as `make exercise` runs it); every
 * phrase of want[] must be in its output. */
static void expect_named(const char *mode, int exercise, const char *const *want, int n) {
  char *out = NULL;
  if (exercise) setenv("ZL_EXERCISE_TIMEOUT_S", "20", 1); /* this test's own process */
  int rc = zl_run(2, 60, &out, "%s/scn_mistakes %s", ZL_TESTBIN, mode);
  cr_assert_neq(rc, 124, "scn_mistakes %s hung (60 s) instead of ending the job:\n%s", mode, out);
  cr_assert_neq(rc, 0, "scn_mistakes %s exited 0: the mistake went unnoticed:\n%s", mode, out);
  for (int i = 0; i < n; i++)
    cr_assert(strstr(out, want[i]), "scn_mistakes %s: the line should say \"%s\"; the output was:\n%s", mode,
              want[i], out);
  free(out);
}

Test(common_comm_mistakes, receive_smaller_than_its_send, .timeout = 90) {
  const char *want[] = {"rank 1: comm_recv", "from rank 0", "posted for 4 element(s), but rank 0 sent 10",
                        "MPI_ERR_TRUNCATE"};
  expect_named("short_recv", 0, want, 4);
}

Test(common_comm_mistakes, group_receive_names_its_tag, .timeout = 90) {
  const char *want[] = {"comm_group_async (stage 0 -> 1 activations)",
                        "posted for 6 element(s), but rank 0 sent 8"};
  expect_named("short_group", 0, want, 2);
}

Test(common_comm_mistakes, sendrecv_receive_short_by_one, .timeout = 90) {
  const char *want[] = {"comm_sendrecv_async (ring step)", "posted for 4 element(s), but rank 0 sent 5"};
  expect_named("short_pair", 0, want, 2);
}

Test(common_comm_mistakes, wait_on_the_wrong_communicator, .timeout = 90) {
  const char *want[] = {"handle 1 was not issued by this communicator",
                        "comm_recv_async (grad from peer) returned handle 1 on another communicator"};
  expect_named("wrong_comm", 1, want, 2);
}

Test(common_comm_mistakes, collective_sizes_disagree, .timeout = 90) {
  const char *want[] = {"comm_all_gather", "MPI_Iallgatherv failed", "the same sizes"};
  expect_named("coll_sizes", 0, want, 3);
}
