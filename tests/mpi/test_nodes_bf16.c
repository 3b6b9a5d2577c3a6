/* test_nodes_bf16.c — chapter 09's exact check holds in bf16 at any rank count (suite ch09_nodes;
 * chapters/09_nodes/main.c, exact_pattern). Its inputs (r+1)·(i mod 7 + 1) sum to 28·N(N+1)/2 at most,
 * an integer bf16 holds exactly only up to 256: 8 ranks (252) fit, 9 (315) did not, and the check
 * called a right all-reduce WRONG. Beyond 8 ranks the pattern is shortened so every partial sum
 * stays exact; 9 ranks on 3 faked nodes, both algorithms, every element checked: 0 wrong. */
#include "zl_test.h" // zl_run, Criterion

Test(ch09_nodes, bf16_sums_exact_beyond_8_ranks, .timeout = 60) {
  char *out = NULL;
  int rc = zl_run(
      9, 50, &out,
      "env ZL_NODE_OF_RANK=0,0,0,1,1,1,2,2,2 %s/ch09_nodes -b 64K -e 64K -n 1 -w 0 --dtype bfloat16", ZL_BIN);
  cr_assert(rc == 0 && strstr(out, "#wrong: 0 OK"),
            "ch09_nodes on 9 ranks in bf16: exit %d, expected 0 and \"#wrong: 0 OK\" "
            "(a right all-reduce must not be judged wrong because bf16 cannot hold the expected sum):\n%s",
            rc, out);
  free(out);
}
