/* test_verdicts.c — what `make exercise` tells a student, checked without a build
 * (tests/unit/verdicts_check.py on common/scripts/exercises.py): a decoded MPI error is the verdict,
 * each chapter's most specific test runs first, a missing return is blamed on its body. And
 * `make grade`'s report (common/scripts/grade.py) read back: every chapter, done/total, JSON and
 * JUnit XML that parse. Notes: notes/README.md ("Exercises"). */
#include "zl_test.h" // zl_run, cr_assert

Test(common_verdicts, messages_order_and_blame, .timeout = 60) {
  char *out = NULL;
  int rc = zl_run(0, 50, &out, "python3 tests/unit/verdicts_check.py");
  cr_assert_eq(rc, 0, "verdicts_check.py exited %d:\n%s", rc, out ? out : "(no output)");
  free(out);
}
