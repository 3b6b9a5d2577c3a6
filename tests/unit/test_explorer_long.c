/* test_explorer_long.c — the explorer page in a real browser (make test-long; common/explorer/README.md):
 * make explorer builds it with emcc into a fresh folder, then common/explorer/browser_test.py has
 * headless Chromium set its controls for 50 random configurations of each panel (and each model preset)
 * and compares what the page shows with the native programs: ch00_memory's printout, exit code, refusal
 * line and --json to the byte, pp_simulate's bubble bitwise, the collectives (ring.c, alltoall.c) within
 * float rounding of the sums and bitwise = ch01_collectives --impl ring where the page runs its case.
 * Skipped, with the reason, where emcc or chromium is missing (Debian: apt-get install emscripten
 * chromium). Notes: notes/tour.md, "The explorer page". Suite explorer_long. */
#include "zl_test.h" // Criterion, zl_run
#include <stdio.h>   // snprintf
#include <stdlib.h>  // free, system
#include <unistd.h>  // getpid

static int have(const char *tool) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
  return system(cmd) == 0;
}

Test(explorer_long, page_in_chromium_equals_the_programs, .timeout = 900) {
  if (!have("emcc")) cr_skip_test("no emcc (Debian: apt-get install emscripten): the page is not built");
  if (!have("chromium") && !have("chromium-browser"))
    cr_skip_test("no chromium (Debian: apt-get install chromium)");
  char dir[128], *out = NULL;
  snprintf(dir, sizeof dir, "/tmp/zl_explorer_%d", (int)getpid());
  int rc = zl_run(0, 300, &out, "make --no-print-directory explorer EXPLORER_OUT=%s", dir);
  cr_assert_eq(rc, 0, "make explorer exited %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 540, &out, "python3 common/explorer/browser_test.py --page %s/index.html --bin %s --n 50",
              dir, ZL_BIN);
  cr_expect_eq(
      rc, 0,
      "browser_test.py exited %d (each line a configuration where the page and the program differ):\n%s", rc,
      out);
  free(out);
  zl_run(0, 30, NULL, "rm -rf %s", dir);
}
