/* test_engine.c — the rank's one progress engine (common/comm/comm_engine.h), on 4 ranks
 * (tests/mpi/scn_engine.c): the thread count grows only by a helper per communicator that
 * reduces (never for a send/receive link, never on a second use), each
 * communicator keeps its issue order and one blocked stream does not hold up another, a
 * deadline on a sub-communicator still ends the job naming the rank and the operation, and a
 * split with a negative color gives that rank no communicator (NULL, no fiber). */
#include "zl_test.h" // zl_run, cr_assert
#include <sched.h>   // sched_getaffinity, CPU_COUNT: the cores zlrun counts
#include <stdlib.h>  // setenv, unsetenv

Test(common_engine, threads_bounded_with_sub_communicators, .timeout = 180) {
  char *out = NULL;
  unsetenv("ZL_ENGINE_POLL"); /* zlrun's own choice first */
  int rc = zl_run(4, 60, &out, ZL_TESTBIN "/scn_engine threads");
  cr_assert(rc == 0,
            "seven sub-communicators must add no thread but a helper per group that reduced (6; none for the "
            "link) (rc %d):\n%s",
            rc, out);
  cr_assert(strstr(out, "rank 3: init") && strstr(out, "engine threads 1, helpers 6, fibers 8"),
            "every rank should print its thread counts: one engine thread, 6 helpers, 8 fibers:\n%s", out);
  /* the engine polls for a waiting main thread only when every rank has a core (zlrun: 4 ranks
   * against the cores this process may run on, as nproc counts them), or as ZL_ENGINE_POLL says */
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  char want[64];
  const char *line3 = strstr(out, "threads: rank 3:");
  snprintf(want, sizeof want, "polls when waited %d", 4 <= cores);
  cr_assert(line3 && strstr(line3, want), "4 ranks on %d cores: expected '%s' on rank 3's line:\n%s", cores,
            want, out);
  free(out);
  const char *forced[2] = {"0", "1"};
  for (int i = 0; i < 2; i++) { /* ZL_ENGINE_POLL decides when set */
    setenv("ZL_ENGINE_POLL", forced[i], 1);
    rc = zl_run(4, 60, &out, ZL_TESTBIN "/scn_engine threads");
    unsetenv("ZL_ENGINE_POLL");
    snprintf(want, sizeof want, "polls when waited %s", forced[i]);
    line3 = strstr(out, "threads: rank 3:");
    cr_assert(rc == 0 && line3 && strstr(line3, want),
              "ZL_ENGINE_POLL=%s: expected '%s' on rank 3's line (rc %d):\n%s", forced[i], want, rc, out);
    free(out);
  }
}

Test(common_engine, issue_order_kept_and_streams_independent, .timeout = 90) {
  char *out = NULL;
  int rc = zl_run(4, 60, &out, ZL_TESTBIN "/scn_engine order");
  cr_assert(
      rc == 0 && strstr(out, "order: ok"),
      "order per communicator, and a stream blocked on one communicator holding up another? (rc %d; 124: "
      "deadlock):\n%s",
      rc, out);
  free(out);
}

Test(common_engine, deadline_on_a_sub_communicator_names_the_rank, .timeout = 90) {
  char *out = NULL;
  int rc = zl_run(4, 60, &out, ZL_TESTBIN "/scn_engine timeout");
  cr_assert(rc != 0 && rc != 124, "the 1 s deadline must end the job (rc %d; 124: nothing did):\n%s", rc,
            out);
  cr_assert(strstr(out, "rank 0: recv (never-sent) did not complete within 1 s"),
            "the abort should name rank 0, the op and its tag:\n%s", out);
  free(out);
}

Test(common_engine, split_with_a_negative_color_gives_null, .timeout = 90) {
  char *out = NULL;
  int rc = zl_run(4, 60, &out, ZL_TESTBIN "/scn_engine none");
  cr_assert(rc == 0 && strstr(out, "none: rank 0 ok") && strstr(out, "none: rank 3 ok"),
            "comm_split with color < 0: NULL on that rank, the others' group works, later splits line up "
            "(rc %d; 124: a split that did not line up):\n%s", rc, out);
  free(out);
}

Test(common_engine, sendrecv_pairs_complete_under_synchronous_sends, .timeout = 90) {
  const char *modes[] = {"0", "1"};
  for (int m = 0; m < 2; m++) {
    char *out = NULL;
    setenv("ZL_SYNC_SENDS", modes[m], 1);
    setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS", 1);
    int rc = zl_run(2, 60, &out, ZL_TESTBIN "/scn_engine sendrecv");
    unsetenv("ZL_SYNC_SENDS");
    unsetenv("ZL_MPIRUN_FLAGS");
    /* 8 pairs + 1 pair-vs-plain, twice (vendor, ring): 18 sends and 18 receives counted */
    cr_assert(
        rc == 0 && strstr(out, "sendrecv: ok (send calls 18, recv calls 18)"),
        "ZL_SYNC_SENDS=%s: a send/receive pair must complete where two plain sends would deadlock, and count "
        "as one send and one receive (rc %d; 124: deadlock):\n%s",
        modes[m], rc, out);
    free(out);
  }
}
