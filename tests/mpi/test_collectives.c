/* test_collectives.c — chapter 01 multi-rank tests (notes/01-collectives.md).
 * One mpirun launch of tests/mpi/scn_collectives per world size 1..5 checks every collective,
 * both dtypes, awkward sizes, vendor and ring, the byte counters and async ordering; one of
 * tests/mpi/scn_alltoall per world size 1..5 (suite ch01_alltoall) the all-to-all and all-to-all-v,
 * vendor and pairwise, and the exit 2 of splits that disagree (longer sweeps: ch01_alltoall_long); the rest
 * (suite ch01_programs, which sorts after it: `make exercise` stops at the first failing test, so
 * a wrong ring is named by the scenario's failure lines, smallest world first) check the
 * chapter's two programs and the timeout path. In exercise mode (`make exercise`
 * sets ZL_EXERCISE_TIMEOUT_S) every launch gets a short deadline, so a deadlocked ring is named
 * in seconds: "timed out after N s — a deadlock?". */
#include "zl_test.h" // zl_run, cr_assert

/* The program's output for an assertion message (scenario failure lines included). */
static const char *fail_lines(const char *out) { return out && *out ? out : "(no output)"; }

/* The kill for one launch: `normal` seconds, or a few collective deadlines in exercise mode
 * (ZL_EXERCISE_TIMEOUT_S, set by `make exercise`; scn_collectives takes it as its deadline). */
static int limit(int normal) {
  const char *e = getenv("ZL_EXERCISE_TIMEOUT_S");
  return e && atoi(e) > 0 ? 3 * atoi(e) + 10 : normal;
}
/* A launch killed by its time limit (exit 124) says what that usually means. */
static void expect_no_hang(int rc, const char *what, int np, int secs, const char *out) {
  cr_assert_neq(rc, 124,
                "%s on %d ranks: timed out after %d s — a deadlock? check who sends to whom (each "
                "comm_p2p_send needs the matching comm_p2p_recv on the other rank):\n%s",
                what, np, secs, fail_lines(out));
}

static void run_scenario(int np) {
  char *out = NULL;
  int rc = zl_run(np, limit(120), &out, "%s/scn_collectives", ZL_TESTBIN);
  expect_no_hang(rc, "scn_collectives", np, limit(120), out);
  cr_assert_eq(rc, 0, "scn_collectives on %d ranks exited %d:\n%s", np, rc, fail_lines(out));
  cr_assert(strstr(out, "scn_collectives: ok"), "scn_collectives on %d ranks did not report ok:\n%s", np,
            out);
  free(out);
}

Test(ch01_collectives, world1, .timeout = 150) { run_scenario(1); }
Test(ch01_collectives, world2, .timeout = 150) { run_scenario(2); }
Test(ch01_collectives, world3, .timeout = 150) { run_scenario(3); }
Test(ch01_collectives, world4, .timeout = 150) { run_scenario(4); }
Test(ch01_collectives, world5, .timeout = 150) { run_scenario(5); }

/* ---- the all-to-all (scn_alltoall; notes/01-collectives.md, "All-to-all") ------------------- */
/* One launch of scn_alltoall [mode] on np ranks (env: a prefix such as "env ZL_SYNC_SENDS=1 "),
 * which must print its ok line. */
static void run_alltoall(int np, const char *env, const char *mode) {
  char *out = NULL;
  int rc = zl_run(np, limit(120), &out, "%s%s/scn_alltoall %s", env, ZL_TESTBIN, mode);
  expect_no_hang(rc, "scn_alltoall", np, limit(120), out);
  cr_assert_eq(rc, 0, "scn_alltoall %s%s on %d ranks exited %d:\n%s", env, mode, np, rc, fail_lines(out));
  cr_assert(strstr(out, "scn_alltoall: ok"), "scn_alltoall %s on %d ranks did not report ok:\n%s", mode, np,
            out);
  free(out);
}

Test(ch01_alltoall, world1, .timeout = 150) { run_alltoall(1, "", ""); }
Test(ch01_alltoall, world2, .timeout = 150) { run_alltoall(2, "", ""); }
Test(ch01_alltoall, world3, .timeout = 150) { run_alltoall(3, "", ""); }
Test(ch01_alltoall, world4, .timeout = 150) { run_alltoall(4, "", ""); }
Test(ch01_alltoall, world5, .timeout = 150) { run_alltoall(5, "", ""); }

/* Splits that disagree (rank 1 expects 2 elements from rank 0, which sends 3; on 3 ranks rank 2
 * also expects 4 from rank 1, which sends 3) stop every rank with exit 2 and one line naming the
 * pairs, vendor and pairwise — never a hang or MPI_ERR_TRUNCATE (Megatron-LM #1877). */
Test(ch01_alltoall, mismatched_splits_exit_2, .timeout = 60) {
  const char *impls[] = {"vendor", "ring"};
  for (int k = 0; k < 2; k++) {
    int np = 2 + k;
    char *out = NULL;
    int rc = zl_run(np, 30, &out, "%s/scn_alltoall mismatch %s", ZL_TESTBIN, impls[k]);
    cr_assert_neq(rc, 124, "mismatched all_to_allv (%s, %d ranks) hung instead of stopping:\n%s", impls[k],
                  np, fail_lines(out));
    cr_assert_eq(rc, 2, "mismatched all_to_allv (%s, %d ranks): exit %d, expected 2:\n%s", impls[k], np, rc,
                 fail_lines(out));
    cr_assert(
        strstr(
            out,
            "comm_all_to_allv (blocking): split sizes disagree between ranks: rank 0 sends 3 element(s) to "
            "rank 1, which expects 2 from it"),
        "message (%s, %d ranks):\n%s", impls[k], np, out);
    if (np >= 3)
      cr_assert(strstr(out, "rank 1 sends 3 element(s) to rank 2, which expects 4 from it"),
                "second pair:\n%s", out);
    cr_assert(!strstr(out, "returned instead of stopping"), "a rank went on:\n%s", out);
    free(out);
  }
}

/* The demo's transpose on 3 ranks, as the notes show it, with both implementations. */
Test(ch01_alltoall, demo_3_ranks, .timeout = 120) {
  static const char *const want[] = {
      "Before AllToAll on rank 0: [10, 11, 12]\n", "Before AllToAll on rank 2: [30, 31, 32]\n",
      "After AllToAll on rank 0: [10, 20, 30]\n",  "After AllToAll on rank 1: [11, 21, 31]\n",
      "After AllToAll on rank 2: [12, 22, 32]\n",  "Before AllToAllv on rank 0: [11, 12, 12]\n",
      "After AllToAllv on rank 0: [20, 30, 30]\n", "After AllToAllv on rank 1: [11, 21, 21]\n",
      "After AllToAllv on rank 2: [12, 12, 32]\n",
  };
  const char *impls[] = {"vendor", "ring"}, *ops[] = {"all_to_all", "all_to_allv"};
  for (int k = 0; k < 2; k++) {
    const char *at = NULL;
    char *out[2] = {NULL, NULL};
    for (int o = 0; o < 2; o++) {
      int rc =
          zl_run(3, limit(60), &out[o], "%s/ch01_collectives --op %s --impl %s", ZL_BIN, ops[o], impls[k]);
      expect_no_hang(rc, "ch01_collectives --op all_to_all", 3, limit(60), out[o]);
      cr_assert_eq(rc, 0, "ch01_collectives --op %s --impl %s exited %d:\n%s", ops[o], impls[k], rc,
                   fail_lines(out[o]));
    }
    for (int i = 0; i < 9; i++) {
      const char *text = out[i < 5 ? 0 : 1];
      if (i == 0 || i == 5) at = text;
      const char *p = strstr(at, want[i]);
      cr_assert(p, "ch01_collectives --impl %s: missing (or out of order) line\n  %sgot:\n%s", impls[k],
                want[i], text);
      at = p + strlen(want[i]);
    }
    free(out[0]);
    free(out[1]);
  }
}

/* The longer sweep: 40 random split matrices per dtype (f32, bf16, f16), a sub-communicator, on
 * 1 to 8 ranks; with synchronous sends (the rendezvous of ncclSend: an order that only eager
 * sends let through hangs here); and the inter-node counters on faked node maps. */
Test(ch01_alltoall_long, sweep_1_to_8_ranks, .timeout = 300) {
  for (int np = 1; np <= 8; np++) run_alltoall(np, "", "sweep");
}
Test(ch01_alltoall_long, sweep_sync_sends, .timeout = 200) {
  for (int np = 2; np <= 5; np++) run_alltoall(np, "env ZL_SYNC_SENDS=1 ", "sweep");
}
Test(ch01_alltoall_long, sweep_node_maps, .timeout = 200) {
  run_alltoall(4, "env ZL_NODE_OF_RANK=0,0,1,1 ", "sweep");
  run_alltoall(5, "env ZL_NODE_OF_RANK=0,1,0,1,1 ", "sweep");
  run_alltoall(6, "env ZL_NODE_OF_RANK=0,0,1,1,2,2 ", "sweep");
}

/* The chapter's classic example, exactly as the notes show it, with both implementations. */
Test(ch01_programs, demo_reduce_scatter_3_ranks, .timeout = 120) {
  static const char *const want[] = {
      "Before ReduceScatter on rank 0: [1, 2, 1, 4, 1, 8]\n",
      "Before ReduceScatter on rank 1: [2, 4, 4, 16, 8, 64]\n",
      "Before ReduceScatter on rank 2: [3, 6, 9, 36, 27, 216]\n",
      "After ReduceScatter on rank 0: [6, 12]\n",
      "After ReduceScatter on rank 1: [14, 56]\n",
      "After ReduceScatter on rank 2: [36, 288]\n",
  };
  const char *impls[] = {"vendor", "ring"};
  for (int k = 0; k < 2; k++) {
    char *out = NULL;
    int rc =
        zl_run(3, limit(60), &out, "%s/ch01_collectives --op reduce_scatter --impl %s", ZL_BIN, impls[k]);
    expect_no_hang(rc, "ch01_collectives --op reduce_scatter", 3, limit(60), out);
    cr_assert_eq(rc, 0, "ch01_collectives --impl %s exited %d:\n%s", impls[k], rc, fail_lines(out));
    const char *at = out; /* the lines must appear in this order */
    for (int i = 0; i < 6; i++) {
      const char *p = strstr(at, want[i]);
      cr_assert(p, "ch01_collectives --impl %s: missing (or out of order) line\n  %sgot:\n%s", impls[k],
                want[i], out);
      at = p + strlen(want[i]);
    }
    free(out);
  }
}

/* Every op with the ring on 4 ranks in bf16 runs and prints the all-reduce sum (1+2+3+4)·[1,2,3,4]
 * (and the all-to-all's transpose, through the pairwise exchange). */
Test(ch01_programs, demo_all_ops_ring_bf16, .timeout = 120) {
  char *out = NULL;
  int rc = zl_run(4, limit(60), &out, "%s/ch01_collectives --op all --impl ring --dtype bf16", ZL_BIN);
  expect_no_hang(rc, "ch01_collectives --op all --impl ring", 4, limit(60), out);
  cr_assert_eq(rc, 0, "ch01_collectives --op all exited %d:\n%s", rc, fail_lines(out));
  for (int r = 0; r < 4; r++) {
    char line[128];
    snprintf(line, sizeof line, "After AllReduce on rank %d: [10, 20, 30, 40]\n", r);
    cr_assert(strstr(out, line), "missing line: %sgot:\n%s", line, out);
  }
  cr_assert(strstr(out, "After SendRecv on rank 1: [1, 2, 3, 4]\n"), "send/recv line missing:\n%s", out);
  cr_assert(strstr(out, "After AllToAll on rank 3: [13, 23, 33, 43]\n"), "all-to-all line missing:\n%s", out);
  free(out);
}

/* A bad flag: one error line, exit 2, before MPI starts. */
Test(ch01_programs, bad_flag_exits_2) {
  char *out = NULL;
  int rc = zl_run(0, 30, &out, "%s/ch01_collectives --op allreduce", ZL_BIN);
  cr_assert_eq(rc, 2, "exit %d, expected 2:\n%s", rc, fail_lines(out));
  cr_assert(strstr(out, "error: --op allreduce: must be one of"), "message:\n%s", out);
  free(out);
  rc = zl_run(0, 30, &out, "%s/ch01_collbench -b 4Q", ZL_BIN);
  cr_assert_eq(rc, 2, "collbench -b 4Q: exit %d, expected 2:\n%s", rc, fail_lines(out));
  cr_assert(strstr(out, "error: -b 4Q:"), "message:\n%s", out);
  free(out);
}

/* collbench on a tiny sweep: every op, both implementations, exact check, #wrong 0, JSON rows. */
Test(ch01_programs, collbench_tiny_sweep, .timeout = 120) {
  char dir[256], json[320], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "collbench");
  snprintf(json, sizeof json, "%s/cb.json", dir);
  int rc = zl_run(3, limit(90), &out,
                  "%s/ch01_collbench -b 1K -e 64K -f 8 -n 3 -w 1 --op all --impl both -d bfloat16 --json %s",
                  ZL_BIN, json);
  expect_no_hang(rc, "ch01_collbench", 3, limit(90), out);
  cr_assert_eq(rc, 0, "ch01_collbench exited %d:\n%s", rc, fail_lines(out));
  cr_assert(strstr(out, "# Out of bounds values : 0 OK"), "collbench reported wrong values:\n%s", out);
  cr_assert(strstr(out, "# Avg bus bandwidth    :"), "no footer:\n%s", out);
  char *j = zl_read_file(json, NULL);
  cr_assert(j, "collbench did not write %s", json);
  cr_assert_eq(zl_json_num(j, "world"), 3, "json world");
  cr_assert_eq(zl_json_num(j, "wrong"), 0, "json wrong");
  double vals[64];
  int rows = zl_json_all(j, "busbw_gbs", vals, 64);
  /* 6 ops (the five and all_to_all) x 3 sizes (1K, 8K, 64K) x 2 implementations */
  cr_assert_eq(rows, 36, "json rows: %d, expected 36\n%s", rows, j);
  for (int i = 0; i < rows; i++) cr_assert(vals[i] > 0, "row %d busbw %g", i, vals[i]);
  free(j);
  free(out);
}

/* comm_set_timeout: rank 0 skips an all-reduce; the others name it and take the job down. */
Test(ch01_programs, timeout_names_the_op, .timeout = 60) {
  char *out = NULL;
  int rc = zl_run(2, 40, &out, "%s/scn_collectives timeout", ZL_TESTBIN);
  cr_assert_neq(rc, 0, "the job should have been aborted:\n%s", fail_lines(out));
  cr_assert_neq(rc, 124, "the job hung instead of aborting:\n%s", fail_lines(out));
  cr_assert(strstr(out, "rank 1: all_reduce (stuck_on_purpose) did not complete within 1 s"),
            "timeout message missing:\n%s", out);
  free(out);
}
