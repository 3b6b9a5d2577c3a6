/* test_tutorial.c — the tour and its figures (notes/tour.md): `demo.sh --quick` runs every
 * chapter with tiny sizes (the real programs, through zlrun), writes the JSON results and the
 * traces, and plots.py draws every figure from them; then each PNG must exist and not be blank
 * (plots.py --check decodes it and counts the non-background pixels and colours). */
#include "zl_test.h" // zl_run, zl_tmpdir, Criterion

/* The last `keep` characters of a long output, for failure messages. */
static const char *tail_of(const char *out, size_t keep) {
  size_t n = strlen(out);
  return n > keep ? out + n - keep : out;
}

/* make test-long: the whole quick tour, every chapter, every figure (about 45 s); make test runs one
 * chapter of it (one_chapter_of_the_tour_draws_its_figures, below). */
Test(common_tutorial_long, quick_tour_draws_every_figure, .timeout = 170) {
  char dir[256], cmd[1024];
  zl_tmpdir(dir, sizeof dir, "tour");
  char *out = NULL;
  snprintf(cmd, sizeof cmd,
           "env ZL_BIN=%s ZL_RESULTS=%s/results ZL_FIGURES=%s/figures ZL_DEMO_DEVICE=cpu bash "
           "common/scripts/demo.sh --quick",
           ZL_BIN, dir, dir);
  int rc = zl_run(0, 150, &out, "%s", cmd);
  cr_assert_eq(rc, 0, "demo.sh --quick exited with %d (every chapter built? make build):\n...%s", rc,
               tail_of(out, 3000));
  cr_assert(strstr(out, "plots: 10 drawn, 0 skipped, 0 failed"),
            "plots.py did not draw all 10 figures:\n...%s", tail_of(out, 3000));
  /* the tour's shape: progress counters, no chapter left unbuilt, the closing pointers */
  cr_assert(strstr(out, "[1/") && strstr(out, "Next, try:"),
            "demo.sh output lacks [1/N] progress or the closing "
            "'Next, try:' line:\n...%s",
            tail_of(out, 2000));
  cr_assert(!strstr(out, "not built"), "demo.sh found a chapter not built:\n...%s", tail_of(out, 2000));
  free(out);
  out = NULL;
  rc = zl_run(0, 60, &out, "python3 common/scripts/plots.py --check --out %s/figures", dir);
  cr_assert_eq(rc, 0, "plots.py --check: a figure is missing or blank (exit %d):\n%s", rc, out);
  free(out);
  zl_run(0, 30, NULL, "rm -rf %s", dir); /* kept when a check fails, to look at */
}

/* make test: one chapter of the quick tour (02: DDP's loss, memory, traffic and the timeline), its
 * figures drawn and not blank, the closing pointers to the next command and the exercises. */
Test(common_tutorial, one_chapter_of_the_tour_draws_its_figures, .timeout = 90) {
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "tour02");
  char *out = NULL;
  int rc = zl_run(0, 80, &out,
                  "env ZL_BIN=%s ZL_RESULTS=%s/results ZL_FIGURES=%s/figures ZL_DEMO_DEVICE=cpu bash "
                  "common/scripts/demo.sh 02 --quick",
                  ZL_BIN, dir, dir);
  cr_assert_eq(rc, 0, "demo.sh 02 --quick exited with %d:\n...%s", rc, tail_of(out, 3000));
  cr_assert(strstr(out, "plots: 4 drawn, 0 skipped, 0 failed"),
            "plots.py did not draw chapter 02's 4 figures:\n...%s", tail_of(out, 3000));
  cr_assert(strstr(out, "Next, try:") && strstr(out, "make exercise CH=02"), "no closing pointers:\n...%s",
            tail_of(out, 2000));
  free(out);
  out = NULL;
  rc = zl_run(
      0, 60, &out,
      "python3 common/scripts/plots.py --check --only memory,timeline_ddp,loss,traffic --out %s/figures",
      dir); /* chapter 02's: the memory, its timeline (and schematic), the loss, the traffic */
  cr_assert(rc == 0 && strstr(out, "5 of 5 figures ok"),
            "plots.py --check: a figure of chapter 02 is missing or blank "
            "(exit %d):\n%s",
            rc, out);
  free(out);
  zl_run(0, 30, NULL, "rm -rf %s", dir);
}

/* No results at all: every figure is skipped with a one-line note (the schematics, which need no
 * input, are still drawn), nothing crashes, exit 0. */
Test(common_tutorial, plots_skip_missing_inputs, .timeout = 60) {
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "noresults");
  char *out = NULL;
  int rc =
      zl_run(0, 50, &out, "python3 common/scripts/plots.py --results %s/none --out %s/figures", dir, dir);
  cr_assert_eq(rc, 0, "plots.py with no results exited with %d:\n%s", rc, out);
  cr_assert(strstr(out, "plots: 0 drawn, 10 skipped, 0 failed"), "expected every figure skipped, got:\n%s",
            out);
  cr_assert(strstr(out, "skipped memory: "), "expected a note naming the missing memory inputs, got:\n%s",
            out);
  cr_assert(strstr(out, "schematics: 5 drawn"),
            "expected the 5 schematics (ddp, zero3, gpt_units, tp, cp) drawn "
            "without inputs, got:\n%s",
            out);
  rc = zl_run(0, 30, NULL, "test -s %s/figures/schematic_tp.png", dir);
  cr_assert_eq(rc, 0, "no %s/figures/schematic_tp.png (chapter 06's f and g figure)", dir);
  free(out);
  zl_run(0, 30, NULL, "rm -rf %s", dir);
}

/* A chapter that does not exist: one error line, exit code 2, nothing run. */
Test(common_tutorial, demo_rejects_bad_chapter, .timeout = 30) {
  char *out = NULL;
  int rc = zl_run(0, 20, &out, "bash common/scripts/demo.sh 11");
  cr_assert_eq(rc, 2, "demo.sh 11 exited with %d, expected 2:\n%s", rc, out);
  cr_assert(strstr(out, "error: CH=11: allowed 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10"),
            "expected the allowed chapters, got:\n%s", out);
  free(out);
}
