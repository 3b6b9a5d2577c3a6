/* test_exercises_pipeline.c — the exercises/ generator (common/scripts/exercises.py) on a small
 * fixture tree under /tmp: the stub it writes, its errors on bad markers, and `check` catching a
 * stale exercises/ tree. See notes/README.md ("Exercises"). */
#include "zl_test.h" // zl_run, zl_read_file, zl_tmpdir, Criterion

#define GEN "python3 common/scripts/exercises.py"
/* generate writes backups of student work under build/ unless told otherwise: keep them in /tmp */
#define GENERATE GEN " generate --backup /tmp/zl_test_exercises_backup"

/* A fixture solutions/ file: two exercises (one with hints), an unused static helper, plain code. */
static const char *FIXTURE_C =
    "/* ring.c — fixture */\n"
    "#include <stdint.h> // int64_t\n"
    "#include <string.h> // memcpy\n"
    "\n"
    "static int fx_helper(int x) __attribute__((unused));\n"
    "static int fx_helper(int x) { return x + 1; }\n"
    "\n"
    "int64_t fx_add(int64_t a, int64_t b) {\n"
    "  // BEGIN EXERCISE fx_add notes/01-collectives.md\n"
    "  // HINT: add the two numbers.\n"
    "  // HINT: mind the overflow.\n"
    "  int64_t secret_sum = a + b;\n"
    "  return secret_sum;\n"
    "  // END EXERCISE\n"
    "}\n"
    "\n"
    "int fx_keep(int a) { return a; }\n"
    "\n"
    "void fx_twice(int *x) {\n"
    "    // BEGIN EXERCISE fx_twice notes/02-ddp.md\n"
    "    *x *= 2; /* secret_twice */\n"
    "    // END EXERCISE\n"
    "}\n";
static const char *FIXTURE_H = "int fx_keep(int a);\n";

static void write_text(const char *dir, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  FILE *f = fopen(path, "w");
  cr_assert(f, "cannot write fixture %s", path);
  fputs(text, f);
  fclose(f);
}

/* A fresh fixture: <root>/solutions/{fx.c,fx.h}; returns root in dst. */
static void make_fixture(char *root, size_t n, const char *name) {
  zl_tmpdir(root, n, name);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf %s/solutions %s/exercises && mkdir -p %s/solutions", root, root, root);
  cr_assert_eq(system(cmd), 0, "cannot set up fixture %s", root);
  char sol[512];
  snprintf(sol, sizeof sol, "%s/solutions", root);
  write_text(sol, "fx.c", FIXTURE_C);
  write_text(sol, "fx.h", FIXTURE_H);
}

static char *gen_file(const char *root, const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/exercises/%s", root, rel);
  char *text = zl_read_file(path, NULL);
  cr_assert(text, "generator did not write %s", path);
  return text;
}

Test(common_exercises, stub_replaces_marked_bodies) {
  char root[256], *out = NULL;
  make_fixture(root, sizeof root, "ex_stub");
  int rc = zl_run(0, 60, &out, GENERATE " %s/solutions %s/exercises", root, root);
  cr_assert_eq(rc, 0, "generate: exit %d, expected 0; output:\n%s", rc, out);
  free(out);

  char *c = gen_file(root, "fx.c");
  /* the real bodies are gone, the stubs and hints are there, in the marked places */
  cr_expect_null(strstr(c, "secret_sum"), "exercises/fx.c still holds the solution body of fx_add:\n%s", c);
  cr_expect_null(strstr(c, "secret_twice"), "exercises/fx.c still holds the solution body of fx_twice:\n%s", c);
  const char *stub_add =
      "  // BEGIN EXERCISE fx_add notes/01-collectives.md\n"
      "  // HINT: add the two numbers.\n"
      "  // HINT: mind the overflow.\n"
      "  zl_exercise_todo(\"fx_add\", \"notes/01-collectives.md\");\n"
      "  // END EXERCISE\n";
  cr_expect(strstr(c, stub_add), "fx_add stub: expected\n%s\nin exercises/fx.c, got:\n%s", stub_add, c);
  const char *stub_twice =
      "    // BEGIN EXERCISE fx_twice notes/02-ddp.md\n"
      "    zl_exercise_todo(\"fx_twice\", \"notes/02-ddp.md\");\n"
      "    // END EXERCISE\n";
  cr_expect(strstr(c, stub_twice), "fx_twice stub (indent kept, no hint): expected\n%s\ngot:\n%s", stub_twice, c);
  /* unmarked code is kept; exercise.h is included right after the first include block */
  cr_expect(strstr(c, "int fx_keep(int a) { return a; }\n"), "unmarked code changed:\n%s", c);
  const char *inc = "#include <string.h> // memcpy\n#include \"exercise.h\" // zl_exercise_todo\n";
  cr_expect(strstr(c, inc), "expected exercise.h after the first include block:\n%s\ngot:\n%s", inc, c);
  /* the header says where it came from and who edits what */
  cr_expect(strncmp(c, "/* exercises/fx.c", 17) == 0, "exercises/fx.c does not open with its header:\n%s", c);
  cr_expect(strstr(c, "solutions/fx.c") && strstr(c, "make exercises") && strstr(c, "YOUR copy"),
            "header must name solutions/fx.c, `make exercises` and say the student edits this copy:\n%s", c);
  /* a file without exercises is copied under a short header */
  char *h = gen_file(root, "fx.h");
  cr_expect(strstr(h, FIXTURE_H) && !strstr(h, "zl_exercise_todo"), "exercises/fx.h: got\n%s", h);

  /* the stubbed file compiles with the project's warnings (zl_exercise_todo is noreturn) */
  rc = zl_run(0, 60, &out, "cc -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -Icommon -c %s/exercises/fx.c -o %s/fx.o",
              root, root);
  cr_expect_eq(rc, 0, "generated exercises/fx.c does not compile with -Werror (exit %d):\n%s", rc, out);
  free(out);

  /* list and hint see both exercises */
  rc = zl_run(0, 60, &out, GEN " hint %s/solutions fx_add", root);
  cr_expect(rc == 0 && strstr(out, "add the two numbers.") && strstr(out, "mind the overflow.") &&
                strstr(out, "notes/01-collectives.md"),
            "hint fx_add: exit %d, output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 60, &out, GEN " list %s/solutions --chapter 02", root);
  cr_expect(rc == 0 && strstr(out, "fx_twice") && !strstr(out, "fx_add"), "list --chapter 02: exit %d, output:\n%s",
            rc, out);
  free(out);
  free(c);
  free(h);
}

Test(common_exercises, bad_markers_are_errors) {
  char root[256], *out = NULL, sol[300];
  make_fixture(root, sizeof root, "ex_bad");
  snprintf(sol, sizeof sol, "%s/solutions", root);

  /* an exercise that never ends: exit 2, naming the file, line and exercise */
  write_text(sol, "open.c", "void fx_open(void) {\n  // BEGIN EXERCISE fx_open notes/01-collectives.md\n}\n");
  int rc = zl_run(0, 60, &out, GENERATE " %s/solutions %s/exercises", root, root);
  cr_expect_eq(rc, 2, "unbalanced BEGIN: exit %d, expected 2; output:\n%s", rc, out);
  cr_expect(strstr(out, "open.c:2") && strstr(out, "fx_open") && strstr(out, "END EXERCISE"),
            "unbalanced BEGIN: message must name open.c:2, fx_open and END EXERCISE; got:\n%s", out);
  free(out);
  rc = zl_run(0, 60, &out, GEN " check %s/solutions %s/exercises", root, root);
  cr_expect_eq(rc, 2, "check on unbalanced BEGIN: exit %d, expected 2; output:\n%s", rc, out);
  free(out);

  /* an END with no BEGIN */
  write_text(sol, "open.c", "void fx_open(void) {\n  // END EXERCISE\n}\n");
  rc = zl_run(0, 60, &out, GENERATE " %s/solutions %s/exercises", root, root);
  cr_expect(rc == 2 && strstr(out, "open.c:2") && strstr(out, "without a BEGIN"),
            "stray END: exit %d (expected 2), output:\n%s", rc, out);
  free(out);

  /* the same name twice, in two files */
  write_text(sol, "open.c", "void fx_again(int *x) {\n  // BEGIN EXERCISE fx_add notes/01-collectives.md\n"
                            "  *x = 1;\n  // END EXERCISE\n}\n");
  rc = zl_run(0, 60, &out, GENERATE " %s/solutions %s/exercises", root, root);
  cr_expect(rc == 2 && strstr(out, "duplicate exercise name fx_add"), "duplicate name: exit %d (expected 2), output:\n%s",
            rc, out);
  free(out);
}

Test(common_exercises, check_detects_stale_tree) {
  char root[256], *out = NULL, sol[300], ex[300];
  make_fixture(root, sizeof root, "ex_check");
  snprintf(sol, sizeof sol, "%s/solutions", root);
  snprintf(ex, sizeof ex, "%s/exercises", root);
  int rc = zl_run(0, 60, &out, GENERATE " %s %s", sol, ex);
  cr_assert_eq(rc, 0, "generate: exit %d; output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 60, &out, "env -u CI " GEN " check %s %s", sol, ex);
  cr_expect_eq(rc, 0, "check right after generate: exit %d, expected 0; output:\n%s", rc, out);
  free(out);

  /* solutions/ changes outside an exercise: stale, named, with the fix */
  char fx[320];
  snprintf(fx, sizeof fx, "%s/fx.c", sol);
  char *c = zl_read_file(fx, NULL);
  cr_assert(c, "cannot read %s", fx);
  char *edited = malloc(strlen(c) + 64);
  char *at = strstr(c, "int fx_keep(int a) { return a; }");
  cr_assert(at);
  sprintf(edited, "%.*sint fx_keep(int a) { return a + 0; }%s", (int)(at - c), c, at + strlen("int fx_keep(int a) { return a; }"));
  write_text(sol, "fx.c", edited);
  rc = zl_run(0, 60, &out, "env -u CI " GEN " check %s %s", sol, ex);
  cr_expect(rc == 1 && strstr(out, "exercises/fx.c") && strstr(out, "make exercises"),
            "stale exercises/fx.c: exit %d (expected 1), output must name the file and the fix:\n%s", rc, out);
  free(out);

  /* a file only in exercises/ is stale too; generate removes it and check passes again */
  write_text(ex, "gone.c", "int gone;\n");
  rc = zl_run(0, 60, &out, "env -u CI " GENERATE " %s %s && env -u CI " GEN " check %s %s && test ! -e %s/gone.c",
              sol, ex, sol, ex, ex);
  cr_expect_eq(rc, 0, "generate then check: exit %d, expected 0 and gone.c removed; output:\n%s", rc, out);
  free(out);

  /* a body the student wrote in exercises/ is kept by generate, accepted by check, refused in CI */
  char *g = gen_file(root, "fx.c");
  const char *todo = "  zl_exercise_todo(\"fx_add\", \"notes/01-collectives.md\");\n";
  at = strstr(g, todo);
  cr_assert(at, "no fx_add stub in:\n%s", g);
  char *mine = malloc(strlen(g) + 64);
  sprintf(mine, "%.*s  return a + b; /* student */\n%s", (int)(at - g), g, at + strlen(todo));
  write_text(ex, "fx.c", mine);
  rc = zl_run(0, 60, &out, "env -u CI " GEN " check %s %s", sol, ex);
  cr_expect(rc == 0 && strstr(out, "fx_add"), "check with a student body: exit %d (expected 0), output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 60, &out, "env CI=true " GEN " check %s %s", sol, ex);
  cr_expect(rc == 1 && strstr(out, "fx_add"), "check in CI with a student body: exit %d (expected 1), output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 60, &out, GENERATE " %s %s && grep -q 'student' %s/fx.c", sol, ex, ex);
  cr_expect_eq(rc, 0, "generate must keep the student's body of fx_add (exit %d):\n%s", rc, out);
  free(out);
  free(c);
  free(edited);
  free(g);
  free(mine);
}
