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

/* ZL_JITTER_US (make exercise REPEAT=N): random delays before point-to-point tasks and waits uncover a
 * planted race — a receive buffer read 5 ms after the post, before comm_wait, which a fast message
 * hides — within 10 runs (each run's delays drawn from its own seed). */
Test(common_comm_mistakes, jitter_uncovers_a_read_before_wait, .timeout = 120) {
  setenv("ZL_JITTER_US", "50000", 1);
  int caught = 0, runs = 0;
  char *out = NULL;
  for (int seed = 1; seed <= 10 && !caught; seed++, runs++) {
    char s[16];
    snprintf(s, sizeof s, "%d", seed);
    setenv("ZL_JITTER_SEED", s, 1);
    free(out);
    int rc = zl_run(2, 60, &out, "%s/scn_mistakes racy_read", ZL_TESTBIN);
    cr_assert_neq(rc, 124, "racy_read hung with jitter (seed %d):\n%s", seed, out);
    caught = rc != 0 && strstr(out, "read the receive buffer before comm_wait");
  }
  cr_assert(caught, "10 runs with random delays (ZL_JITTER_US=50000) did not uncover the planted race (a "
                    "read 5 ms after the post, before its wait); the last output:\n%s", out);
  cr_log_info("the planted race uncovered in run %d of 10", runs);
  free(out);
}

/* make test-long: the same random delays over the engine-driven chapters change no bit — DDP's
 * overlapped buckets, ZeRO-3's prefetch, ZB-H1's pipeline, ring context parallelism, expert
 * parallelism's all-to-alls: each run with ZL_JITTER_US=3000 = the run without, losses and weights. */
Test(common_comm_mistakes_long, jitter_changes_no_bit_in_the_engine_chapters, .timeout = 900) {
  static const struct { int np; const char *cmd; } runs[] = {
      {2, "ch02_ddp --variant overlap --steps 3"},
      {2, "ch05_zero3 --prefetch 2 --steps 3"},
      {2, "ch07_pipeline --model gpt --gpt tiny --n-layer 4 --pp 2 --micro-batches 4 --schedule zb-h1 "
          "--steps 2"},
      {2, "ch10_long --model gpt --gpt tiny --seq-len 16 --batch 4 --steps 2 --cp 2"},
      {2, "ch12_experts --model gpt --gpt tiny --moe 4 --topk 2 --ep 2 --steps 2"}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    char what[256];
    snprintf(what, sizeof what, "%s on %d ranks with random delays", runs[i].cmd, runs[i].np);
    zl_out_t ref = zl_launch(runs[i].np, 180, "jitter", "ref", "%s/%s --timeout-s 60", ZL_BIN, runs[i].cmd);
    zl_out_t jit = zl_launch(runs[i].np, 300, "jitter", "jit",
                             "env ZL_JITTER_US=3000 ZL_JITTER_SEED=%zu %s/%s --timeout-s 60", i + 1, ZL_BIN,
                             runs[i].cmd);
    cr_assert_eq(jit.n, ref.n, "%s: %lld weights, expected %lld", what, (long long)jit.n, (long long)ref.n);
    zl_expect_floats(what, jit.params, ref.params, jit.n, 0);
    zl_expect_same_losses(what, jit.json, ref.json);
    zl_out_free(&ref), zl_out_free(&jit);
  }
}
