/* test_layers.c — common/'s folders are its layers (notes/design.md, "The layers"): a file
 * includes only its own layer and the ones below, and no include cycle joins two modules.
 * The check is common/scripts/check_layers.py; these tests run it on the repository and on
 * small trees that break each rule, so the check itself can fail. Suite common_layers. */
#include "zl_test.h" // zl_run, zl_tmpdir, Criterion
#include <stdio.h>    // fopen, fprintf
#include <sys/stat.h> // mkdir

/* root/rel := text (parent folders created). */
static void put(const char *root, const char *rel, const char *text) {
  char path[512], dir[512];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  for (char *s = path + strlen(root) + 1; (s = strchr(s, '/')); s++) {
    snprintf(dir, sizeof dir, "%.*s", (int)(s - path), path);
    mkdir(dir, 0755);
  }
  FILE *f = fopen(path, "w");
  cr_assert(f, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

Test(common_layers, the_repository_keeps_its_layers, .timeout = 60) {
  char *out = NULL;
  int rc = zl_run(0, 50, &out, "python3 common/scripts/check_layers.py");
  cr_expect_eq(rc, 0, "check_layers.py exited %d (0: no upward include, no cycle):\n%s", rc, out);
  cr_expect(strstr(out, "0 problem(s)") != NULL, "no summary line in:\n%s", out);
  free(out);
}

/* A two-layer tree, then one broken rule at a time: each is named, and the clean tree passes. */
Test(common_layers, each_broken_rule_is_named, .timeout = 60) {
  const char *cases[][3] = {
      /* file to add, its text, what the checker must say */
      {"", "", "0 problem(s)"},
      {"common/low/up.c", "#include \"top.h\"\n", "common/low/up.c: includes top.h of layer top, above low"},
      {"common/low/b.c", "#include \"a.h\"\n", "include cycle among modules: low/a -> low/b -> low/a"},
      {"common/stray.c", "int x;\n", "common/stray.c: a source file outside the layer folders"},
      {"common/low/s.c", "#include \"sol.h\"\n", "common/low/s.c: includes solutions/sol.h"},
      /* rule 5: a blocking CUDA wait outside the watchdog's devcu_wait_stream; in a comment it is no call */
      {"common/low/w.cu", "int x;\nvoid f(void *s) { cudaStreamSynchronize(s); }\n",
       "common/low/w.cu:2: cudaStreamSynchronize blocks the host with no deadline"},
      {"common/low/c.cu",
       "/* cudaStreamSynchronize(s) is not called here */ int c; // nor cudaMemcpy(d, s, n)\n",
       "0 problem(s)"},
      /* rule 6: no mutable file-scope static in solutions/ or common/train/; const tables, static
       * functions, a function's own statics and the word in a string or a comment are no state */
      {"solutions/st.c", "int f(void);\nstatic double g_sum = 0; /* a run's state */\n",
       "solutions/st.c:2: a mutable file-scope static (static double g_sum)"},
      {"common/train/st.c", "static struct { int n; } g_run;\n",
       "common/train/st.c:1: a mutable file-scope static"},
      {"solutions/ok.c",
       "static const char *const k_names[] = {\"static x;\"};\nstatic int twice(int x) "
       "{ static int n; return 2 * x + n; }\n/* static int not_code; */\n",
       "0 problem(s)"},
      /* rule 7: no C line over 110 bytes (a '·' is two: 48 of them fit, 50 do not) */
      {"tests/w.c", "int x; /* "
                    "................................................."
                    "................................................."
                    " */\n", "tests/w.c:1: 111 bytes, over 110"},
      {"chapters/w.c", "int y; /* "
                       "························"
                       "························"
                       " */\n", "0 problem(s)"},
      {"chapters/v.c", "int y; /* "
                       "·························"
                       "·························"
                       " */\n", "chapters/v.c:1: 113 bytes, over 110"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char root[256];
    char tag[32];
    snprintf(tag, sizeof tag, "layers%zu", k);
    zl_tmpdir(root, sizeof root, tag);
    put(root, "Makefile", "LAYERS := low top\n");
    put(root, "common/low/README.md", "# low\n\nMay include: low.\n");
    put(root, "common/top/README.md", "# top\n\nMay include: low, top.\n");
    put(root, "common/low/a.h", "#include \"b.h\"\n");
    put(root, "common/low/b.h", "int b;\n");
    put(root, "common/top/top.h", "#include \"a.h\"\n");
    put(root, "solutions/sol.h", "int s;\n");
    if (cases[k][0][0]) put(root, cases[k][0], cases[k][1]);
    char *out = NULL;
    int rc = zl_run(0, 30, &out, "python3 common/scripts/check_layers.py --root %s", root);
    int clean = strcmp(cases[k][2], "0 problem(s)") == 0;
    cr_expect_eq(rc, clean ? 0 : 1, "case %zu (%s): exit %d:\n%s", k, cases[k][0], rc, out);
    cr_expect(strstr(out, cases[k][2]) != NULL, "case %zu (%s): expected `%s` in:\n%s", k, cases[k][0],
              cases[k][2], out);
    free(out);
  }
  /* rule 8: a file of solutions/ over 400 lines is named; 400 pass */
  for (int n = 400; n <= 401; n++) {
    char root[256], tag[32], *text = malloc((size_t)n * 7 + 1), *out = NULL;
    snprintf(tag, sizeof tag, "layers_len%d", n);
    zl_tmpdir(root, sizeof root, tag);
    put(root, "Makefile", "LAYERS := low\n");
    put(root, "common/low/README.md", "# low\n\nMay include: low.\n");
    for (int i = 0; i < n; i++) memcpy(text + 7 * i, "int x;\n", 7); /* n lines */
    text[7 * n] = 0;
    put(root, "solutions/long.c", text);
    int rc = zl_run(0, 30, &out, "python3 common/scripts/check_layers.py --root %s", root);
    if (n == 400) cr_expect(rc == 0 && strstr(out, "0 problem(s)"), "400 lines pass:\n%s", out);
    else cr_expect(rc == 1 && strstr(out, "solutions/long.c: 401 lines, over 400"), "401 lines:\n%s", out);
    free(out), free(text);
  }
}
