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

/* make grade's report from saved verdicts: chapter 01's six exercises, two done, one wrong, the rest
 * never judged — the summary line, the JSON's counts, and a JUnit XML that parses with a failure and
 * three skipped. */
Test(common_verdicts, grade_report_parses, .timeout = 60) {
  char dir[256], path[512];
  zl_tmpdir(dir, sizeof dir, "grade");
  snprintf(path, sizeof path, "%s/status.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f, "cannot write %s", path);
  fputs("{\"ring_all_gather\": {\"state\": \"done\", \"detail\": \"ok\", \"seconds\": 41.5, \"measured\":"
        " {\"calls\": 340, \"model_bytes\": 12300000, \"ring_bytes\": 6100000}},\n"
        " \"ring_reduce_scatter\": {\"state\": \"done\", \"detail\": \"ok\", \"seconds\": 38},\n"
        " \"ring_all_reduce\": {\"state\": \"wrong\", \"detail\": \"world2: index 3 got 1 expected 2\","
        " \"seconds\": 20}}\n",
        f);
  fclose(f);
  char *out = NULL;
  int rc = zl_run(0, 50, &out, "python3 common/scripts/grade.py report --status %s --out %s --chapter 01",
                  path, dir);
  cr_assert_eq(rc, 0, "grade.py report exited %d, expected 0 (the report written):\n%s", rc, out);
  cr_assert(strstr(out, "chapter 01: 2/6 done"), "the summary line:\n%s", out);
  cr_assert(strstr(out, "verdict in 42 s of the 120 s budget"), "a done line's time against the budget:\n%s",
            out);
  cr_assert(strstr(out, "index 3 got 1 expected 2"), "a wrong verdict's reason:\n%s", out);
  cr_assert(strstr(out, "sent 12.3 MB by the ring model in 340 collective and point-to-point calls, 6.1 MB"),
            "a done line's bytes and calls:\n%s", out);
  free(out);
  snprintf(path, sizeof path, "%s/grade.json", dir);
  char *json = zl_read_file(path, NULL);
  cr_assert(json, "no %s", path);
  cr_assert_eq(zl_json_num(json, "done"), 2, "grade.json done");
  cr_assert_eq(zl_json_num(json, "total"), 6, "grade.json total");
  free(json);
  rc = zl_run(0, 50, &out,
              "python3 -c \"import xml.etree.ElementTree as E; s = E.parse('%s/grade.xml').getroot()[0]; "
              "print(s.get('tests'), s.get('failures'), s.get('skipped'))\"", dir);
  cr_assert(rc == 0 && strstr(out, "6 1 3"), "grade.xml: tests, failures, skipped of chapter 01: %s", out);
  free(out);
}

/* make answers: an answers file with one right, one wrong and two missing values of chapter 00 — the
 * right one passes, the wrong one is named with the calculator's value and command, exit 1; and
 * `exercises.py generate` keeps a student's values when it rewrites the file. */
Test(common_verdicts, answers_named_right_and_wrong, .timeout = 60) {
  char dir[256], cmd[1024];
  zl_tmpdir(dir, sizeof dir, "answers");
  snprintf(cmd, sizeof cmd,
           "rm -rf %s/answers && mkdir -p %s/answers && printf 'q6_zero2 = 3.5\\nq6_ms = 20\\n' "
           "> %s/answers/00.txt", dir, dir, dir);
  cr_assert_eq(system(cmd), 0, "cannot write the fixture");
  char *out = NULL;
  int rc = zl_run(0, 50, &out, "python3 common/scripts/answers.py check --chapter 00 --bin %s --dst %s",
                  ZL_BIN, dir);
  cr_assert_eq(rc, 1, "answers.py exited %d, expected 1:\n%s", rc, out);
  cr_assert(strstr(out, "q6_zero2  right"), "3.5 GB is ZeRO-2's comm/step at 1B, N 8:\n%s", out);
  cr_assert(strstr(out, "you wrote 20 ms, the calculator says 17.5"), "the wrong one named:\n%s", out);
  cr_assert(strstr(out, "q5        not answered"), "a missing one:\n%s", out);
  cr_assert(strstr(out, "chapter 00: 1/4 right"), "the count:\n%s", out);
  free(out);
  rc = zl_run(0, 50, &out, "python3 -c \"import sys; sys.path.insert(0, 'common/scripts'); import answers; "
              "answers.generate('%s'); print(answers.parse(open('%s/answers/00.txt').read()))\"", dir, dir);
  cr_assert(rc == 0 && strstr(out, "'q6_ms': '20'") && strstr(out, "'q5': ''"),
            "generate keeps the values written and adds the missing questions: %s", out);
  free(out);
}
