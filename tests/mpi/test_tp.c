/* test_tp.c — chapter 06 multi-rank tests (notes/06-tensor-parallel.md).
 * Process groups (comm_split, the grid) with tests/mpi/scn_tp grid at N = 3, 4, 6; f, g, the
 * column- and row-parallel linears and the MLP block against 1 rank with scn_tp ops at N = 2 and 4
 * (T = 1, 2, 4; the tolerances are stated in scn_tp.c); then the chapter's program: the worked
 * example's printed numbers exactly, the MLP check's counts, and its flag errors. */
#include "zl_test.h" // zl_run, cr_assert

static const char *fail_lines(const char *out) { return out && *out ? out : "(no output)"; }

static void run_scenario(int np, const char *mode) {
  char *out = NULL;
  int rc = zl_run(np, 90, &out, "%s/scn_tp %s", ZL_TESTBIN, mode);
  cr_assert_eq(rc, 0, "scn_tp %s on %d ranks exited %d:\n%s", mode, np, rc, fail_lines(out));
  cr_assert(strstr(out, "scn_tp: ok"), "scn_tp %s on %d ranks did not report ok:\n%s", mode, np, out);
  free(out);
}

/* Every grid (T, P) of N ranks: membership, exact sums on every group (vendor and ring), counters per group. */
Test(ch06_tp, groups_4_ranks, .timeout = 120) { run_scenario(4, "grid"); }
Test(ch06_tp, groups_3_ranks, .timeout = 120) { run_scenario(3, "grid"); }
Test(ch06_tp, groups_6_ranks, .timeout = 120) { run_scenario(6, "grid"); }
/* f, g, column/row linear and the MLP block at T = 1, 2 (N = 2) and T = 1, 2, 4 (N = 4). */
Test(ch06_tp, ops_2_ranks, .timeout = 120) { run_scenario(2, "ops"); }
Test(ch06_tp, ops_4_ranks, .timeout = 120) { run_scenario(4, "ops"); }

/* The lines must appear in this order. */
static void expect_in_order(const char *out, const char *const *want, int n, const char *what) {
  const char *at = out;
  for (int i = 0; i < n; i++) {
    const char *p = strstr(at, want[i]);
    cr_assert(p, "%s: missing (or out of order) line\n  %s\ngot:\n%s", what, want[i], out);
    at = p + strlen(want[i]);
  }
}

/* The worked example of issue 13 as corrected: the column split, the row split that only seems to
 * work with ReLU on non-negative numbers, and its failure with GELU and with mixed signs. */
Test(ch06_tp, example_2_ranks, .timeout = 60) {
  static const char *const want[] = {
      "X = [[1, 2], [1, 0]]   A = [[1, 2], [3, 4]]   X·A = [[7, 10], [1, 2]]\n",
      "rank 0: A1 = [[1], [3]]  ReLU(X·A1) = [[7], [1]]\n",
      "rank 1: A2 = [[2], [4]]  ReLU(X·A2) = [[10], [2]]\n",
      "all-gather of the columns: [[7, 10], [1, 2]]   ReLU(X·A) = [[7, 10], [1, 2]]   equal\n",
      "rank 0: X1 = [[1], [1]]  A1 = [[1, 2]]  X1·A1 = [[1, 2], [1, 2]]  ReLU(X1·A1) = [[1, 2], [1, 2]]\n",
      "rank 1: X2 = [[2], [0]]  A2 = [[3, 4]]  X2·A2 = [[6, 8], [0, 0]]  ReLU(X2·A2) = [[6, 8], [0, 0]]\n",
      "all-reduce: ReLU(X1·A1) + ReLU(X2·A2) = [[7, 10], [1, 2]]\n",
      "ReLU(X·A) = ReLU([[7, 10], [1, 2]]) = [[7, 10], [1, 2]]   equal\n",
      "ReLU(a) + ReLU(b) = a + b = ReLU(a + b)\n",
      "rank 0: X1 = [[1], [1]]  A1 = [[1, 2]]  X1·A1 = [[1, 2], [1, 2]]  GELU(X1·A1) = [[0.841192, 1.9546], [0.841192, "
      "1.9546]]\n",
      "rank 1: X2 = [[2], [0]]  A2 = [[3, 4]]  X2·A2 = [[6, 8], [0, 0]]  GELU(X2·A2) = [[6, 8], [0, 0]]\n",
      "all-reduce: GELU(X1·A1) + GELU(X2·A2) = [[6.84119, 9.9546], [0.841192, 1.9546]]\n",
      "GELU(X·A) = GELU([[7, 10], [1, 2]]) = [[7, 10], [0.841192, 1.9546]]   DIFFERENT\n",
      "  differ at [0][0]: GELU(1) + GELU(6) = 6.84119  vs  GELU(7) = 7\n",
      "  differ at [0][1]: GELU(2) + GELU(8) = 9.9546  vs  GELU(10) = 10\n",
      "X' = [[1, -2], [1, 0]]\n",
      "rank 1: X'2 = [[-2], [0]]  A2 = [[3, 4]]  X'2·A2 = [[-6, -8], [0, 0]]  ReLU(X'2·A2) = [[0, 0], [0, 0]]\n",
      "all-reduce: ReLU(X'1·A1) + ReLU(X'2·A2) = [[1, 2], [1, 2]]\n",
      "ReLU(X'·A) = ReLU([[-5, -6], [1, 2]]) = [[0, 0], [1, 2]]   DIFFERENT\n",
      "  differ at [0][0]: ReLU(1) + ReLU(-6) = 1  vs  ReLU(-5) = 0\n",
      "  differ at [0][1]: ReLU(2) + ReLU(-8) = 2  vs  ReLU(-6) = 0\n",
  };
  char *out = NULL;
  int rc = zl_run(2, 60, &out, "%s/ch06_tp --example", ZL_BIN);
  cr_assert_eq(rc, 0, "ch06_tp --example exited %d:\n%s", rc, fail_lines(out));
  expect_in_order(out, want, (int)(sizeof want / sizeof want[0]), "ch06_tp --example");
  cr_assert(!strstr(out, "differ at [1]"), "row 1 has a zero partial: GELU(0) = 0 there, nothing differs:\n%s", out);
  free(out);
}

/* The MLP check on 4 ranks, ring collectives, a shape T does not divide: counts equal the formula. */
Test(ch06_tp, mlp_check_4_ranks, .timeout = 60) {
  static const char *const want[] = {
      "T=1 (4 groups of 1): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 0 ",
      "T=2 (2 groups of 2): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 2048 "
      "(formula 2 × 2(2−1)/2 × 8·32 × 4 B = 2048)\n",
      "T=4 (1 group of 4): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 3072 "
      "(formula 2 × 2(4−1)/4 × 8·32 × 4 B = 3072)\n",
      "\nok: every T matches the 1-rank block within 1e-6, and every count equals the formula\n",
  };
  char *out = NULL;
  int rc = zl_run(4, 60, &out, "%s/ch06_tp --mlp-check --collectives ring", ZL_BIN);
  cr_assert_eq(rc, 0, "ch06_tp --mlp-check exited %d:\n%s", rc, fail_lines(out));
  expect_in_order(out, want, 4, "ch06_tp --mlp-check");
  free(out);
  rc = zl_run(4, 60, &out, "%s/ch06_tp --mlp-check --batch 3 --hidden 7 --ffn 10", ZL_BIN);
  cr_assert_eq(rc, 0, "ch06_tp --mlp-check (3·7, uneven) exited %d:\n%s", rc, fail_lines(out));
  cr_assert(strstr(out, "T=4 (1 group of 4): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 256 "
                        "(formula ring model, 3·7 not divisible by 4, rank 0 = 256)\n"),
            "uneven all-reduce line:\n%s", out);
  cr_assert(strstr(out, "\nok: "), "not ok:\n%s", out);
  free(out);
}

/* Bad flags: one line naming the flag and what is allowed, exit 2, before MPI starts. */
Test(ch06_tp, bad_flags_exit_2, .timeout = 60) {
  static const struct {
    const char *args, *msg;
  } cases[] = {
      {"--example", "error: --example: runs on exactly 2 ranks, not 1"},
      {"--mlp-check --tp 3", "error: --tp 3: T must divide the number of ranks (1)"},
      {"--tp 65", "error: --tp 65: must be an integer in [0, 64]"},
      {"--example --grid", "error: --example: choose one of --example, --mlp-check, --grid"},
  };
  for (int i = 0; i < 4; i++) {
    char *out = NULL;
    int rc = zl_run(0, 30, &out, "%s/ch06_tp %s", ZL_BIN, cases[i].args);
    cr_assert_eq(rc, 2, "ch06_tp %s: exit %d, expected 2:\n%s", cases[i].args, rc, fail_lines(out));
    cr_assert(strstr(out, cases[i].msg), "ch06_tp %s: expected '%s', got:\n%s", cases[i].args, cases[i].msg, out);
    free(out);
  }
}
