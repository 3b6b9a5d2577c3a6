/* test_exercises_pipeline.c — the exercises/ generator (common/scripts/exercises.py) on a small
 * fixture tree under /tmp: the stub it writes (only for the files with an exercise), its errors on
 * bad markers, and `check` catching a stale exercises/ tree or a file with no exercise in it. See
 * notes/README.md ("Exercises"). */
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
  cr_expect_null(strstr(c, "secret_twice"), "exercises/fx.c still holds the solution body of fx_twice:\n%s",
                 c);
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
  cr_expect(strstr(c, stub_twice), "fx_twice stub (indent kept, no hint): expected\n%s\ngot:\n%s", stub_twice,
            c);
  /* unmarked code is kept; exercise.h is included right after the first include block */
  cr_expect(strstr(c, "int fx_keep(int a) { return a; }\n"), "unmarked code changed:\n%s", c);
  const char *inc = "#include <string.h> // memcpy\n#include \"exercise.h\" // zl_exercise_todo\n";
  cr_expect(strstr(c, inc), "expected exercise.h after the first include block:\n%s\ngot:\n%s", inc, c);
  /* the header says where it came from and who edits what */
  cr_expect(strncmp(c, "/* exercises/fx.c", 17) == 0, "exercises/fx.c does not open with its header:\n%s", c);
  cr_expect(strstr(c, "solutions/fx.c") && strstr(c, "make exercises") && strstr(c, "YOUR copy"),
            "header must name solutions/fx.c, `make exercises` and say the student edits this copy:\n%s", c);
  /* a file without exercises is not written: the build takes it from solutions/ */
  char fxh[320];
  snprintf(fxh, sizeof fxh, "%s/exercises/fx.h", root);
  cr_expect(access(fxh, F_OK) != 0,
            "generate wrote %s, a file with no exercise (the build takes it from solutions/)", fxh);

  /* the stubbed file compiles with the project's warnings (zl_exercise_todo is noreturn) */
  rc = zl_run(
      0, 60, &out,
      "cc -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -Icommon/base -c %s/exercises/fx.c -o %s/fx.o",
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
  cr_expect(rc == 0 && strstr(out, "fx_twice") && !strstr(out, "fx_add"),
            "list --chapter 02: exit %d, output:\n%s", rc, out);
  free(out);
  free(c);
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
  cr_expect(rc == 2 && strstr(out, "duplicate exercise name fx_add"),
            "duplicate name: exit %d (expected 2), output:\n%s", rc, out);
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
  sprintf(edited, "%.*sint fx_keep(int a) { return a + 0; }%s", (int)(at - c), c,
          at + strlen("int fx_keep(int a) { return a; }"));
  write_text(sol, "fx.c", edited);
  rc = zl_run(0, 60, &out, "env -u CI " GEN " check %s %s", sol, ex);
  cr_expect(rc == 1 && strstr(out, "exercises/fx.c") && strstr(out, "make exercises"),
            "stale exercises/fx.c: exit %d (expected 1), output must name the file and the fix:\n%s", rc,
            out);
  free(out);

  /* a file only in exercises/ is stale too; generate removes it and check passes again */
  write_text(ex, "gone.c", "int gone;\n");
  rc = zl_run(0, 60, &out,
              "env -u CI " GENERATE " %s %s && env -u CI " GEN " check %s %s && test ! -e %s/gone.c", sol, ex,
              sol, ex, ex);
  cr_expect_eq(rc, 0, "generate then check: exit %d, expected 0 and gone.c removed; output:\n%s", rc, out);
  free(out);

  /* a copy of a file with no exercise (what an older generate wrote): stale, named; generate removes
   * it without a backup (nothing of a student's in it), and saves an edited one before removing it */
  char bk[320];
  snprintf(bk, sizeof bk, "%s/bk", root);
  write_text(ex, "fx.h",
             "/* exercises/fx.h — a copy of solutions/fx.h, with no exercise in it: read it, no need\n"
             " * to edit it. Generated by `make exercises` (maintainers: edit solutions/ and rerun it)."
             " */\n");
  rc = zl_run(0, 60, &out, "cat %s/fx.h >>%s/fx.h && env -u CI " GEN " check %s %s", sol, ex, sol, ex);
  cr_expect(rc == 1 && strstr(out, "exercises/fx.h (no exercise in it"),
            "check must fail on a copy of a file with no exercise, naming it: exit %d, output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 60, &out, "rm -rf %s && " GEN " generate %s %s --backup %s && test ! -e %s/fx.h && "
              "test ! -e %s", bk, sol, ex, bk, ex, bk);
  cr_expect_eq(rc, 0, "generate must remove the plain copy exercises/fx.h, no backup (exit %d):\n%s", rc,
               out);
  free(out);
  write_text(ex, "fx.h", "int fx_keep(int a);\nint my_own(int a); /* a student's */\n");
  rc = zl_run(0, 60, &out, GEN " generate %s %s --backup %s && test ! -e %s/fx.h && grep -rq my_own %s",
              sol, ex, bk, ex, bk);
  cr_expect(rc == 0 && strstr(out, "fx.h") && strstr(out, bk),
            "generate must save an edited exercises/fx.h under the backup, then remove it (exit %d):\n%s", rc,
            out);
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
  cr_expect(rc == 0 && strstr(out, "fx_add"), "check with a student body: exit %d (expected 0), output:\n%s",
            rc, out);
  free(out);
  rc = zl_run(0, 60, &out, "env CI=true " GEN " check %s %s", sol, ex);
  cr_expect(rc == 1 && strstr(out, "fx_add"),
            "check in CI with a student body: exit %d (expected 1), output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 60, &out, GENERATE " %s %s && grep -q 'student' %s/fx.c", sol, ex, ex);
  cr_expect_eq(rc, 0, "generate must keep the student's body of fx_add (exit %d):\n%s", rc, out);
  free(out);

  /* solutions/fx.c loses its exercises: exercises/fx.c goes (the student's body saved first), and the
   * tree with no file left is up to date */
  write_text(sol, "fx.c", "int fx_keep(int a) { return a; }\n");
  rc = zl_run(0, 60, &out, "rm -rf %s && " GEN " generate %s %s --backup %s && test ! -e %s/fx.c && "
              "grep -rq student %s && env -u CI " GEN " check %s %s", bk, sol, ex, bk, ex, bk, sol, ex);
  cr_expect(rc == 0 && strstr(out, "up to date (0 files"),
            "no exercise left in fx.c: removed, its body saved, check passes (exit %d):\n%s", rc, out);
  free(out);
  free(c);
  free(edited);
  free(g);
  free(mine);
}

/* ---- hints, list, backups, check's diff: the fixture tree again ------------------------------ */

Test(common_exercises, graded_hints_list_backup_and_diff) {
  char root[256], *out = NULL, sol[300], ex[300], bk[320];
  make_fixture(root, sizeof root, "ex_loop");
  snprintf(sol, sizeof sol, "%s/solutions", root);
  snprintf(ex, sizeof ex, "%s/exercises", root);
  snprintf(bk, sizeof bk, "%s/backup", root);
  /* a second-level hint: not in the stub, shown by --level 2 only */
  write_text(sol, "lv.c",
             "int fx_lv(int a) {\n  // BEGIN EXERCISE fx_lv notes/01-collectives.md\n"
             "  // HINT: the idea\n  // HINT2: the indices\n  return a;\n  // END EXERCISE\n}\n");
  int rc = zl_run(0, 60, &out, GEN " generate %s %s --backup %s", sol, ex, bk);
  cr_assert_eq(rc, 0, "generate: %s", out);
  free(out);
  char *lv = gen_file(root, "lv.c");
  cr_expect(strstr(lv, "// HINT: the idea") && !strstr(lv, "the indices") && strstr(lv, "LEVEL=2"),
            "the stub shows the first hint and points at the next, never the second:\n%s", lv);
  free(lv);
  rc = zl_run(0, 60, &out, GEN " hint %s fx_lv", sol);
  cr_expect(rc == 0 && strstr(out, "the idea") && !strstr(out, "the indices") && strstr(out, "LEVEL=2"),
            "hint level 1:\n%s", out);
  free(out);
  rc = zl_run(0, 60, &out, GEN " hint %s fx_lv --level 2", sol);
  cr_expect(rc == 0 && strstr(out, "the idea") && strstr(out, "the indices") &&
                strstr(out, "no further hint"),
            "hint level 2 (the last):\n%s", out);
  free(out);
  rc = zl_run(0, 60, &out, GEN " hint %s fx_lv --level 3", sol);
  cr_expect(rc == 0 && strstr(out, "there is no level-3 hint") && strstr(out, "no further hint"),
            "a level beyond the last must say so, not silently repeat:\n%s", out);
  free(out);

  /* the student writes fx_add and adds a helper above it (outside the markers) */
  char *g = gen_file(root, "fx.c");
  const char *todo = "  zl_exercise_todo(\"fx_add\", \"notes/01-collectives.md\");\n";
  const char *fn = "int64_t fx_add(int64_t a, int64_t b) {\n";
  char *at = strstr(g, todo), *f = strstr(g, fn);
  cr_assert(at && f && f < at, "fixture stub not found:\n%s", g);
  char *mine = malloc(strlen(g) + 256);
  sprintf(mine,
          "%.*s/* five lines down */\nstatic int64_t my_helper(int64_t x) { return x; }\n%.*s  return "
          "my_helper(a) + b;\n%s",
          (int)(f - g), g, (int)(at - f), f, at + strlen(todo));
  write_text(ex, "fx.c", mine);
  /* list: the line of the BEGIN in the student's file as it is now, and the last run's status */
  char st[320];
  snprintf(st, sizeof st, "%s/status.json", root);
  write_text(root, "status.json",
             "{\"fx_add\": {\"state\": \"wrong\", \"detail\": \"x\", \"when\": \"today\"}}");
  rc = zl_run(0, 60, &out, GEN " list %s --dst %s --status %s", sol, ex, st);
  int line = 0;
  for (char *p = mine; p < strstr(mine, "// BEGIN EXERCISE fx_add"); p++) line += *p == '\n';
  char want[128];
  snprintf(want, sizeof want, "exercises/fx.c:%d  last run: wrong (today)", line + 1);
  cr_expect(rc == 0 && strstr(out, want), "list must read the line from exercises/ (%s):\n%s", want, out);
  free(out);
  /* check: accepted bodies, but the helper is outside them: stale, with the line shown */
  rc = zl_run(0, 60, &out, "env -u CI " GEN " check %s %s", sol, ex);
  cr_expect(rc == 1 && strstr(out, "+static int64_t my_helper") == NULL &&
                strstr(out, "-static int64_t my_helper"),
            "check must show the differing line:\n%s", out);
  cr_expect(!strstr(out, "RESET=1"), "no advice to RESET=1 a student's work:\n%s", out);
  free(out);
  /* generate keeps the body, saves the whole file (helper included) outside build/, says where */
  rc = zl_run(0, 60, &out, GEN " generate %s %s --backup %s", sol, ex, bk);
  cr_expect(rc == 0 && strstr(out, bk) && strstr(out, "fx.c") && !strstr(out, "RESET=1"),
            "generate must say where it saved the student's file:\n%s", out);
  free(out);
  rc = zl_run(0, 60, &out, "grep -rl my_helper %s && grep -q 'return my_helper(a) + b;' %s/fx.c", bk, ex);
  cr_expect_eq(rc, 0, "the backup must hold the helper, exercises/fx.c the body:\n%s", out);
  free(out);
  free(g);
  free(mine);
}

/* ---- make exercise on the real tree: student bodies of our own ------------------------------ */
/* Each case copies exercises/ to /tmp, writes bodies into it and runs `exercises.py status` with
 * one quick test (a 3-rank scenario, or the DDP overlap check), a 3 s deadline, the judged tree
 * under /tmp and the objects of this build. Budget: about 45 s for all of them on 2 cores. */

static const char *build_dir(char *dst, size_t n) { /* the BUILD this test binary came from */
  const char *bin = ZL_BIN, *tail = strcmp(ZL_IMPL, "exercises") == 0 ? "/exercises/bin" : "/bin";
  size_t k = strlen(bin), t = strlen(tail);
  cr_assert(k > t && strcmp(bin + k - t, tail) == 0, "cannot tell BUILD from ZL_BIN %s", bin);
  snprintf(dst, n, "%.*s", (int)(k - t), bin);
  return dst;
}

/* dir/file with the body of exercise `name` replaced by `body`. */
static void put_body(const char *dir, const char *file, const char *name, const char *body) {
  char path[512], begin[160];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *t = zl_read_file(path, NULL);
  cr_assert(t, "cannot read %s", path);
  snprintf(begin, sizeof begin, "// BEGIN EXERCISE %s ", name);
  char *b = strstr(t, begin);
  cr_assert(b, "no exercise %s in %s", name, path);
  char *s = strchr(b, '\n') + 1, *e = strstr(s, "// END EXERCISE");
  while (e > s && e[-1] != '\n') e--; /* the END line's indent stays */
  char *o = malloc(strlen(t) + strlen(body) + 1);
  sprintf(o, "%.*s%s%s", (int)(s - t), t, body, e);
  write_text(dir, file, o);
  free(o);
  free(t);
}
/* Prepend text to dir/file (a student's include or helper outside the markers). */
static void put_top(const char *dir, const char *file, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *t = zl_read_file(path, NULL);
  char *o = malloc(strlen(t) + strlen(text) + 1);
  sprintf(o, "%s%s", text, t);
  write_text(dir, file, o);
  free(o);
  free(t);
}

/* A fresh exercises/ tree generated from solutions/ under /tmp (stubs only, whatever the
 * checkout's exercises/ holds); returns its path in dst. */
static void student_tree(char *dst, size_t n, const char *name) {
  char root[256], cmd[1024];
  zl_tmpdir(root, sizeof root, name);
  snprintf(dst, n, "%s/exercises", root);
  snprintf(cmd, sizeof cmd, "rm -rf %s && " GEN " generate solutions %s --backup %s/backup >/dev/null", dst,
           dst, root);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

/* exercises.py status on tree dst; returns the exit code, the output in *out. */
static int judge(const char *dst, const char *chapter, const char *filter, char **out) {
  char build[256];
  build_dir(build, sizeof build);
  /* one judged tree for every case, kept in BUILD: later runs relink only */
  return zl_run(0, 150, out,
                GEN " status solutions %s --chapter %s --build %s --work %s/exercise-check-tests "
                    "--filter '%s' --deadline 3 --make 'make --no-print-directory BUILD=%s'",
                dst, chapter, build, build, filter, build);
}

/* The exercise line of `name` in the verdict block (NULL if none). */
static const char *verdict(const char *out, const char *name) {
  const char *blk = strstr(out, "---- chapter");
  if (!blk) return NULL;
  char key[96];
  snprintf(key, sizeof key, "\n%s ", name);
  const char *p = strstr(blk, key);
  return p ? p + 1 : NULL;
}
static int verdict_is(const char *out, const char *name, const char *state) {
  const char *v = verdict(out, name);
  if (!v) return 0;
  v += strlen(name);
  while (*v == ' ') v++;
  return strncmp(v, state, strlen(state)) == 0;
}

/* The ring the other way round (send to r−1, receive from r+1), through a static helper and an
 * include the student put outside the markers: both exercises done; the block starts with the
 * exercise the notes say to do first. */
static const char *REV_AG = "  int N = comm_world(c), r = comm_rank(c);\n"
                            "  comm_local_copy(c, elem(recv, comm_chunk_lo(numel, N, r), dt), send, "
                            "comm_chunk_numel(numel, N, r), dt);\n"
                            "  for (int s = 0; s < N - 1; s++) {\n"
                            "    int ks = rev_mod(r + s, N), kr = rev_mod(r + s + 1, N);\n"
                            "    comm_p2p_sendrecv(c, elem(recv, comm_chunk_lo(numel, N, ks), dt), "
                            "comm_chunk_numel(numel, N, ks), rev_mod(r - 1, N),\n"
                            "                      elem(recv, comm_chunk_lo(numel, N, kr), dt), "
                            "comm_chunk_numel(numel, N, kr), rev_mod(r + 1, N), dt);\n"
                            "  }\n";
static const char *REV_RS =
    "  int N = comm_world(c), r = comm_rank(c);\n"
    "  if (N == 1) { comm_local_copy(c, recv, send, numel, dt); return; }\n"
    "  int64_t nbytes = ((numel + N - 1) / N) * (int64_t)dtype_size(dt);\n"
    "  int in_place = recv == elem(send, comm_chunk_lo(numel, N, r), dt);\n"
    "  const void *out = NULL;\n"
    "  for (int s = 0; s < N - 1; s++) {\n"
    "    int ks = rev_mod(r + s + 1, N), kr = rev_mod(r + s + 2, N), last = s == N - 2;\n"
    "    const void *sb = s == 0 ? elem(send, comm_chunk_lo(numel, N, ks), dt) : out;\n"
    "    void *rb = last && !in_place ? recv : comm_scratch(c, s % 2, nbytes);\n"
    "    comm_p2p_sendrecv(c, sb, comm_chunk_numel(numel, N, ks), rev_mod(r - 1, N), rb, "
    "comm_chunk_numel(numel, N, kr),\n"
    "                      rev_mod(r + 1, N), dt);\n"
    "    if (last && in_place) comm_local_reduce(c, recv, rb, comm_chunk_numel(numel, N, kr), dt, op);\n"
    "    else comm_local_reduce(c, rb, elem(send, comm_chunk_lo(numel, N, kr), dt), comm_chunk_numel(numel, "
    "N, kr), dt, op);\n"
    "    out = rb;\n"
    "  }\n";

Test(common_exercises, reversed_ring_with_helper_is_done, .timeout = 150 * ZL_SLOW) {
  char dst[300], *out = NULL;
  student_tree(dst, sizeof dst, "ex_rev");
  put_top(dst, "ring.c",
          "#include <limits.h> /* a student's include */\nstatic int rev_mod(int x, int n) { return ((x % n) "
          "+ n) % n; }\n");
  put_body(dst, "ring.c", "ring_all_gather", REV_AG);
  put_body(dst, "ring.c", "ring_reduce_scatter", REV_RS);
  int rc = judge(dst, "01", "ch01_collectives/world3", &out);
  cr_expect(verdict_is(out, "ring_all_gather", "done") && verdict_is(out, "ring_reduce_scatter", "done"),
            "a ring running to r-1 (helper outside the markers) must be done (exit %d):\n%s", rc, out);
  const char *blk = strstr(out, "----\n");
  cr_expect(blk && strncmp(blk + 5, "ring_all_gather ", 16) == 0,
            "the block must start with ring_all_gather:\n%s", out);
  cr_expect(verdict_is(out, "ring_broadcast", "not done"), "stubs stay not done:\n%s", out);
  free(out);
  /* the student's tree and the judged one hold ring.c, not ring.h (no exercise in it: from solutions/) */
  char build[256], path[600];
  build_dir(build, sizeof build);
  const char *where[] = {dst, build};
  const char *sub[] = {"", "/exercise-check-tests/exercise-check/impl"};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s%s/ring.c", where[k], sub[k]);
    cr_expect(access(path, F_OK) == 0, "%s is missing", path);
    snprintf(path, sizeof path, "%s%s/ring.h", where[k], sub[k]);
    cr_expect(access(path, F_OK) != 0, "%s: a file with no exercise, expected only in solutions/", path);
  }
}

/* A wrong body: named wrong within seconds, with the failure line (sentinel explained); a hang:
 * "timed out after 3 s — a deadlock?"; a syntax error: the compiler's own line. */
Test(common_exercises, wrong_hang_and_syntax_error_are_named, .timeout = 150 * ZL_SLOW) {
  char dst[300], *out = NULL;
  student_tree(dst, sizeof dst, "ex_wrong");
  put_body(dst, "ring.c", "ring_all_gather",
           "  int N = comm_world(c), r = comm_rank(c);\n" /* forgets its own chunk */
           "  for (int s = 0; s < N - 1; s++) {\n"
           "    int ks = mod(r - s, N), kr = mod(r - s - 1, N);\n"
           "    comm_p2p_sendrecv(c, elem(recv, comm_chunk_lo(numel, N, ks), dt), comm_chunk_numel(numel, N, "
           "ks), mod(r + 1, N),\n"
           "                      elem(recv, comm_chunk_lo(numel, N, kr), dt), comm_chunk_numel(numel, N, "
           "kr), mod(r - 1, N), dt);\n"
           "  }\n");
  int rc = judge(dst, "01", "ch01_collectives/world3", &out);
  cr_expect(rc == 1 && verdict_is(out, "ring_all_gather", "wrong") && strstr(out, "in_place=") &&
                strstr(out, "never written"),
            "wrong body: exit %d, expected verdict wrong with the failure line:\n%s", rc, out);
  free(out);

  put_body(dst, "ring.c", "ring_all_gather",
           "  int N = comm_world(c), r = comm_rank(c);\n" /* every rank receives first: deadlock */
           "  for (int s = 0; s < N - 1; s++) {\n"
           "    int ks = mod(r - s, N), kr = mod(r - s - 1, N);\n"
           "    comm_p2p_recv(c, elem(recv, comm_chunk_lo(numel, N, kr), dt), comm_chunk_numel(numel, N, "
           "kr), dt, mod(r - 1, N));\n"
           "    comm_p2p_send(c, elem(recv, comm_chunk_lo(numel, N, ks), dt), comm_chunk_numel(numel, N, "
           "ks), dt, mod(r + 1, N));\n"
           "  }\n");
  rc = judge(dst, "01", "ch01_collectives/world3", &out);
  cr_expect(verdict_is(out, "ring_all_gather", "timed out") && strstr(out, "timed out after 3 s") &&
                strstr(out, "a deadlock? check who sends to whom") && !strstr(out, "exited 124"),
            "hang: exit %d, expected a timed-out verdict:\n%s", rc, out);
  free(out);

  put_body(dst, "ring.c", "ring_all_gather", "  int N = comm_world(c)\n  (void)N;\n");
  rc = judge(dst, "01", "ch01_collectives/world3", &out);
  cr_expect(verdict_is(out, "ring_all_gather", "does not compile") && strstr(out, "exercises/ring.c:") &&
                strstr(out, "error: expected"),
            "syntax error: exit %d, expected the compiler's line:\n%s", rc, out);
  free(out);
}

/* A DDP hook that launches every all-reduce only once the backward is over: the numbers are right,
 * the overlap is gone. In make test-long (about 80 s: the judged tree runs chapter 02's overlap checks);
 * make test keeps the overlap contract in ch02_ddp_overlap. */
Test(common_exercises_long, ddp_hook_without_overlap_is_named, .timeout = 150 * ZL_SLOW) {
  char dst[300], *out = NULL;
  student_tree(dst, sizeof dst, "ex_ddp");
  put_body(dst, "ddp.c", "ddp_post_backward",
           "  ddp_state_t *st = t->priv;\n"
           "  if (!t->last_micro || st->variant == DDP_NAIVE || u != 0) return;\n"
           "  for (int k = t->model.n_units - 1; k >= 0; k--)\n"
           "    if (st->variant == DDP_OVERLAP) ddp_launch(t, t->model.units[k].off, "
           "t->model.units[k].padded, st->tags[k]);\n"
           "    else if (k == st->buckets[st->unit_bucket[k]].first_unit)\n"
           "      ddp_launch(t, st->buckets[st->unit_bucket[k]].off, st->buckets[st->unit_bucket[k]].numel, "
           "st->tags[st->unit_bucket[k]]);\n");
  int rc = judge(dst, "02", "ch02_ddp_overlap/overlap_issues_during_backward", &out);
  cr_expect(verdict_is(out, "ddp_post_backward", "not overlapped") &&
                strstr(out, "correct but not overlapped"),
            "no-overlap hook: exit %d, expected \"correct but not overlapped\":\n%s", rc, out);
  free(out);
}

/* ---- chapters 06-08: every verdict says why (notes/README.md, "Exercises") ------------------ */
/* How many times needle occurs in hay. */
static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* Judge tree dst (chapter, Criterion filter): exercise `name` must get `state`, and its verdict
 * (the line and the lines under it) must hold every string of `must` (NULL-ended) and none of
 * `never` (NULL-ended, may be NULL). Returns the whole output (the caller frees it). */
static char *expect_verdict(const char *case_name, const char *dst, const char *chapter, const char *filter,
                            const char *name, const char *state, const char *const *must,
                            const char *const *never) {
  char *out = NULL;
  int rc = judge(dst, chapter, filter, &out);
  const char *v = verdict(out, name);
  cr_expect(verdict_is(out, name, state), "%s: exit %d, expected %s \"%s\":\n%s", case_name, rc, name, state,
            out);
  for (int i = 0; must[i]; i++)
    cr_expect(v && strstr(v, must[i]), "%s: the verdict of %s must say \"%s\":\n%s", case_name, name, must[i],
              out);
  for (int i = 0; never && never[i]; i++)
    cr_expect(!strstr(out, never[i]), "%s: the output must not say \"%s\":\n%s", case_name, never[i], out);
  return out;
}
#define STRS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* g forgotten: the scenario's own message (element, got, expected), shown once; g as a
 * reduce-scatter then an all-gather: values right, another pattern — its own verdict; the bias
 * added on every rank before the sum, judged by --mlp-check alone: the program's "T=2 ... FAILED"
 * line, which sits below its banner; f's backward as the identity, judged by the GPT run alone:
 * the message of an assertion in the test header (zl_test.h). */
Test(common_exercises, tp_verdicts_name_value_pattern_and_failed_line, .timeout = 300 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_tp");
  put_body(dst, "tp.c", "tp_g_forward", "  (void)tp, (void)y, (void)numel; /* no sum at all */\n");
  char *out = expect_verdict("g forgotten", dst, "06", "ch06_tp/ops_2_ranks", "tp_g_forward", "wrong",
                             STRS("g forward[", "got ", "expected "), NULL);
  /* rank 0's line (got 12) or rank 1's (got 24) is the reason, whichever printed first (the ranks' lines
   * race); the other may follow under it; neither twice */
  int r0 = count_of(out, "vendor g forward[11]: got 12"), r1 = count_of(out, "vendor g forward[11]: got 24");
  cr_expect(r0 <= 1 && r1 <= 1 && r0 + r1 >= 1,
            "the reason must be shown once (rank 0's %d times, rank 1's %d):\n%s", r0, r1, out);
  free(out);

  put_body(
      dst, "tp.c", "tp_g_forward",
      "  int T = comm_world(tp), r = comm_rank(tp);\n"
      "  float *mine = xmalloc((size_t)(comm_chunk_numel(numel, T, r) + 1) * sizeof(float), \"my chunk\");\n"
      "  comm_reduce_scatter(tp, y, mine, numel, DT_F32, REDOP_SUM);\n"
      "  comm_all_gather(tp, mine, y, numel, DT_F32);\n"
      "  free(mine);\n");
  free(expect_verdict("g as reduce-scatter + all-gather", dst, "06", "ch06_tp/ops_2_ranks", "tp_g_forward",
                      "other pattern", STRS("values right", "one all-reduce each"), NULL));

  student_tree(dst, sizeof dst, "ex_tp");
  put_body(dst, "tp.c", "tp_row_forward",
           "  op_linear_fwd(comm_device(tp), y, x_r, W_r, b, wdt, B, in_r, out); /* b on every rank */\n"
           "  tp_g_forward(tp, y, (int64_t)B * out);\n");
  free(expect_verdict("bias before the sum", dst, "06", "ch06_tp/mlp_check_4_ranks", "tp_row_forward",
                      "wrong", STRS("T=2 max rel diff", "FAILED"), NULL));

  student_tree(dst, sizeof dst, "ex_tp");
  put_body(dst, "tp.c", "tp_f_backward", "  (void)tp, (void)dx, (void)numel; /* identity */\n");
  free(expect_verdict("f's backward as the identity", dst, "06", "ch06_tp/gpt_tp_equals_one_rank",
                      "tp_f_backward", "wrong", STRS("]: got ", "expected"), NULL));
}

/* The whole chapter 07 (its own test order): GPipe passed off as 1F1B is named by the 0-second
 * schedule check in micro-batches; a send whose handle is dropped, a send on a link the stage
 * does not have (NULL communicator) and one to a rank past the link are named by the comm layer
 * with the call's tag, not a segfault. */
Test(common_exercises, pipeline_verdicts_in_flight_handles_and_links, .timeout = 300 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_pp");
  put_body(dst, "pipeline_sched.c", "pp_1f1b_schedule",
           "    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'F', k, 0};\n"
           "    for (int k = 0; k < M; k++) ops[n++] = (pp_op_t){'B', k, 0};\n");
  free(expect_verdict("GPipe as 1F1B", dst, "07", "ch07_pipeline/*", "pp_1f1b_schedule", "wrong",
                      STRS("schedules_are_valid", "micro-batches in flight on stage", "1F1B allows"), NULL));

  static const struct { const char *what, *send, *must;
  } cases[] = {
      {"a dropped send handle", "  comm_send_async(ch->tx_act.comm, %s, ch->tx_act.peer, st->tag);\n",
       "never waited"},
      {"a send on a missing link",
       "  ch->sent[k] = comm_send_async(ch->tx_grad.comm, %s, ch->tx_act.peer, st->tag);\n",
       "communicator is NULL"},
      {"a send past the link",
       "  ch->sent[k] = comm_send_async(ch->tx_act.comm, %s, ch->tx_act.peer + 2, st->tag);\n",
       "outside the group"},
  };
  student_tree(dst, sizeof dst, "ex_pp");
  for (int i = 0; i < 3; i++) {
    char send[256], body[1024];
    snprintf(send, sizeof send, cases[i].send, "y, (int64_t)st->b * un->y_numel, DT_F32");
    snprintf(body, sizeof body,
             "  pp_state_t *st = t->sched_priv;\n"
             "  pp_chunk_t *ch = &st->chunks[j];\n"
             "  const unit_t *un = &t->model.units[ch->u1 - 1];\n"
             "  snprintf(st->tag, sizeof st->tag, \"send act %%d\", k);\n%s", send);
    put_body(dst, "pipeline.c", "pp_stage_send", body);
    free(expect_verdict(cases[i].what, dst, "07", "ch07_pipeline/*", "pp_stage_send", "wrong",
                        STRS("comm_send_async (send act", cases[i].must), STRS("signal")));
  }
}

/* Chapter 07c's exercise: the ZB-H1 order judged by the pure checker, first and in microseconds —
 * a W put before its B and the W's in the wrong order are each named in the verdict's reason. */
Test(common_exercises_long, zbh1_verdicts_name_the_w, .timeout = 300 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_zb");
  put_body(dst, "pipeline_sched.c", "pp_zbh1_schedule",
           "  int w = P - s - 1 < M ? P - s - 1 : M;\n"
           "  for (int i = 0; i < w; i++) ops[n++] = (pp_op_t){'F', i, 0};\n"
           "  for (int i = 0; i < M; i++) {\n"
           "    if (w + i < M) ops[n++] = (pp_op_t){'F', w + i, 0};\n"
           "    ops[n++] = (pp_op_t){'W', i, 0}; /* before its B */\n"
           "    ops[n++] = (pp_op_t){'B', i, 0};\n"
           "  }\n");
  free(expect_verdict("W before B", dst, "07", "ch07_pipeline/schedules_*", "pp_zbh1_schedule", "wrong",
                      STRS("schedules_are_valid_zero_bubble", "a W before its B"), NULL));
  put_body(dst, "pipeline_sched.c", "pp_zbh1_schedule",
           "  int w = P - s - 1 < M ? P - s - 1 : M;\n"
           "  for (int i = 0; i < w; i++) ops[n++] = (pp_op_t){'F', i, 0};\n"
           "  for (int i = 0; i < M; i++) {\n"
           "    if (w + i < M) ops[n++] = (pp_op_t){'F', w + i, 0};\n"
           "    ops[n++] = (pp_op_t){'B', i, 0};\n"
           "  }\n"
           "  for (int i = M - 1; i >= 0; i--) ops[n++] = (pp_op_t){'W', i, 0}; /* last first */\n");
  free(expect_verdict("W's reversed", dst, "07", "ch07_pipeline/schedules_*", "pp_zbh1_schedule", "wrong",
                      STRS("a W out of order"), NULL));
}

/* Chapter 08: a gradient never copied to the host is reported by the offload run itself (the
 * chapter's test order), not by the checkpoint-resume run. */
Test(common_exercises, offload_bug_named_by_the_offload_run, .timeout = 150 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_off");
  put_body(dst, "offload.c", "offload_grad_to_host",
           "  o->d2h += (int64_t)t->model.units[u].piece * (int64_t)dtype_size(t->wdt); /* never copied */\n"
           "  o->on_host[u] = 1;\n");
  free(expect_verdict("no copy", dst, "08", "ch08_offload/*", "offload_grad_to_host", "wrong",
                      STRS("ch08_offload::n1_"), STRS("checkpoint")));
}

/* Right bodies written otherwise than the reference are done: g's all-reduce issued async and
 * waited for, and 1F1B built op by op from the micro-batch counts. */
Test(common_exercises, right_alternatives_are_done, .timeout = 300 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_alt");
  put_body(dst, "tp.c", "tp_g_forward",
           "  comm_wait(tp, comm_all_reduce_async(tp, y, numel, DT_F32, REDOP_SUM, \"g\"));\n");
  free(expect_verdict("g async + wait", dst, "06", "ch06_tp/ops_*", "tp_g_forward", "done",
                      STRS("tests pass"), NULL));
  put_body(dst, "pipeline_sched.c", "pp_1f1b_schedule",
           "    int f = 0, b = 0, warm = P - s - 1 < M ? P - s - 1 : M;\n"
           "    while (f < warm) ops[n++] = (pp_op_t){'F', f++, 0};\n"
           "    while (b < M) {\n"
           "      if (f < M) ops[n++] = (pp_op_t){'F', f++, 0};\n"
           "      ops[n++] = (pp_op_t){'B', b++, 0};\n"
           "    }\n");
  free(expect_verdict("1F1B op by op", dst, "07", "ch07_pipeline/schedules_*", "pp_1f1b_schedule", "done",
                      STRS("tests pass"), NULL));
}

/* ---- chapters 09 and 10: the reason in the first lines, whatever the class ------------------- */
/* Chapter 09 on its own scenario (tests/mpi/scn_hier: sizes g does not divide, the bytes across
 * nodes; a second each): a forgotten cross-node step names a rank, an element, got and expected;
 * reduce + all-reduce + broadcast (right sums, the whole buffer across from one rank) is "other
 * pattern", values right. (The piece at me·(numel/g) and a dropped handle: make test-long, below.) */
#define HIER_PIECE "  int g = comm_world(h->node), i = comm_rank(h->node);\n" \
                   "  int64_t lo = comm_chunk_lo(numel, g, i), n = comm_chunk_numel(numel, g, i);\n" \
                   "  void *own = (char *)buf + lo * (int64_t)dtype_size(dt);\n"
Test(common_exercises, ch09_verdicts_say_why, .timeout = 150 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_hier");
  put_body(dst, "hier.c", "hier_all_reduce", HIER_PIECE "  (void)n;\n"
           "  comm_reduce_scatter(h->node, buf, own, numel, dt, op);\n"
           "  comm_all_gather(h->node, own, buf, numel, dt);\n");
  free(expect_verdict("no cross-node step", dst, "09", "ch09_nodes/hier_*", "hier_all_reduce", "wrong",
                      STRS("hier_all_reduce numel=", "rank 0: buf[", "expected", "the sum over the 4 ranks"),
                      NULL));
  put_body(dst, "hier.c", "hier_all_reduce",
           "  comm_reduce(h->node, buf, buf, numel, dt, op, 0);\n"
           "  if (comm_rank(h->node) == 0) comm_all_reduce(h->cross, buf, numel, dt, op);\n"
           "  comm_broadcast(h->node, buf, numel, dt, 0);\n");
  free(expect_verdict("reduce + all-reduce + broadcast", dst, "09", "ch09_nodes/hier_*", "hier_all_reduce",
                      "other pattern",
                      STRS("values right", "bytes across nodes where the two-level all-reduce sends"), NULL));
}

/* make test-long: chapter 09's other two verdicts (make test keeps the forgotten cross-node step and the
 * other pattern): the piece at me·(numel/g), caught on the sizes g does not divide; an all-gather whose
 * handle is dropped, named by the comm layer. */
Test(common_exercises_long, ch09_piece_and_dropped_handle, .timeout = 150 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_hier_long");
  put_body(dst, "hier.c", "hier_all_reduce",
           "  int g = comm_world(h->node), me = comm_rank(h->node);\n"
           "  int64_t n = numel / g;\n"
           "  void *own = (char *)buf + me * n * (int64_t)dtype_size(dt);\n"
           "  comm_reduce_scatter(h->node, buf, own, numel, dt, op);\n"
           "  comm_all_reduce(h->cross, own, n, dt, op);\n"
           "  comm_all_gather(h->node, own, buf, numel, dt);\n");
  free(expect_verdict("the piece at me*(numel/g)", dst, "09", "ch09_nodes/hier_*", "hier_all_reduce", "wrong",
                      STRS("right for every size g = 2", "numel*i/g", "buf[0] = ", "expected"), NULL));
  put_body(dst, "hier.c", "hier_all_reduce", HIER_PIECE
           "  comm_reduce_scatter(h->node, buf, own, numel, dt, op);\n"
           "  comm_all_reduce(h->cross, own, n, dt, op);\n"
           "  comm_all_gather_async(h->node, own, buf, numel, dt, \"gather back\");\n");
  free(expect_verdict(
      "a dropped all-gather handle", dst, "09", "ch09_nodes/hier_*", "hier_all_reduce", "wrong",
      STRS("comm_all_gather_async (gather back)", "never waited before hier_all_reduce returned"),
      STRS("signal")));
}

/* make test-long: chapter 10's classes and chapter 09's race. T broadcasts for the all-gather and an
 * all-reduce then my positions for the reduce-scatter: values right, other pattern; an all-gather
 * whose handle is dropped: named; a forgotten running max: the forward's statistics, not a NaN in
 * the backward; with cp_attend_block wrong beside a right tp_sp_all_gather, cp_attend_block is named
 * without a rebuild (its test does not call the other); in chapter 09, a reduce-scatter whose handle
 * is dropped before the cross-node all-reduce reads its output: the race, named. */
Test(common_exercises_long, ch10_verdicts_and_the_cross_group_race, .timeout = 300 * ZL_SLOW) {
  char dst[300];
  student_tree(dst, sizeof dst, "ex_long10");
  const char *gather_out = "  for (int q = 0; q < T; q++)\n"
                           "    for (int b = 0; b < B; b++)\n"
                           "      dev_memcpy(dev, full + ((int64_t)b * S + (int64_t)q * Sl) * C, dev, stage "
                           "+ ((int64_t)q * B + b) * blk,\n"
                           "                 (size_t)blk * sizeof(float));\n";
  char body[2048];
  snprintf(body, sizeof body,
           "  int T = comm_world(tp), Sl = S / T, r = comm_rank(tp);\n"
           "  int64_t blk = (int64_t)Sl * C, pn = (int64_t)B * blk;\n"
           "  device_t dev = comm_device(tp);\n"
           "  for (int q = 0; q < T; q++) {\n"
           "    if (q == r) dev_memcpy(dev, stage + q * pn, dev, part, (size_t)pn * sizeof(float));\n"
           "    comm_broadcast(tp, stage + q * pn, pn, DT_F32, q);\n"
           "  }\n%s", gather_out);
  put_body(dst, "tp_sp.c", "tp_sp_all_gather", body);
  free(expect_verdict("T broadcasts", dst, "10", "ch10_sp/collectives_2_ranks", "tp_sp_all_gather",
                      "other pattern", STRS("values right", "broadcast", "exactly one all_gather"), NULL));
  snprintf(body, sizeof body,
           "  int T = comm_world(tp), Sl = S / T;\n"
           "  int64_t blk = (int64_t)Sl * C;\n"
           "  device_t dev = comm_device(tp);\n"
           "  comm_all_gather_async(tp, part, stage, (int64_t)B * S * C, DT_F32, \"sequence gather\");\n%s",
           gather_out);
  put_body(dst, "tp_sp.c", "tp_sp_all_gather", body);
  free(expect_verdict(
      "a dropped all-gather handle", dst, "10", "ch10_sp/collectives_2_ranks", "tp_sp_all_gather", "wrong",
      STRS("comm_all_gather_async (sequence gather)", "never waited before tp_sp_all_gather returned"),
      NULL));
  student_tree(dst, sizeof dst, "ex_long10");
  put_body(
      dst, "tp_sp.c", "tp_sp_reduce_scatter",
      "  int T = comm_world(tp), Sl = S / T, r = comm_rank(tp);\n"
      "  int64_t blk = (int64_t)Sl * C;\n"
      "  device_t dev = comm_device(tp);\n"
      "  dev_memcpy(dev, stage, dev, full, (size_t)B * S * C * sizeof(float));\n"
      "  comm_all_reduce(tp, stage, (int64_t)B * S * C, DT_F32, REDOP_SUM);\n"
      "  for (int b = 0; b < B; b++)\n"
      "    dev_memcpy(dev, part + (int64_t)b * blk, dev, stage + ((int64_t)b * S + (int64_t)r * Sl) * C,\n"
      "               (size_t)blk * sizeof(float));\n");
  free(expect_verdict("an all-reduce, then my positions", dst, "10", "ch10_sp/collectives_2_ranks",
                      "tp_sp_reduce_scatter", "other pattern", STRS("values right", "1 all_reduce"), NULL));
  /* the reference's online softmax without its last line (m[st] = mn), beside a right all-gather */
  student_tree(dst, sizeof dst, "ex_long10");
  char *cp = zl_read_file("solutions/cp.c", NULL);
  cr_assert(cp, "cannot read solutions/cp.c");
  char *s = strchr(strstr(cp, "// BEGIN EXERCISE cp_attend_block "), '\n') + 1,
       *e = strstr(s, "// END EXERCISE");
  while (e > s && e[-1] != '\n') e--;
  char *nomax = malloc((size_t)(e - s) + 1), *k = strstr(s, "        m[st] = mn;\n");
  cr_assert(k && k < e, "no 'm[st] = mn;' line in cp_attend_block's reference body");
  sprintf(nomax, "%.*s%.*s", (int)(k - s), s, (int)(e - k - strlen("        m[st] = mn;\n")),
          k + strlen("        m[st] = mn;\n"));
  put_body(dst, "cp.c", "cp_attend_block", nomax);
  snprintf(body, sizeof body,
           "  int T = comm_world(tp), Sl = S / T;\n"
           "  int64_t blk = (int64_t)Sl * C;\n"
           "  device_t dev = comm_device(tp);\n"
           "  comm_all_gather(tp, part, stage, (int64_t)B * S * C, DT_F32);\n%s", gather_out);
  put_body(dst, "tp_sp.c", "tp_sp_all_gather", body); /* right */
  char *out = NULL;
  char build[256];
  build_dir(build, sizeof build);
  zl_run(0, 150, &out,
         GEN " status solutions %s --chapter 10 --build %s --work %s/exercise-check-tests --deadline 3 "
             "--make 'make --no-print-directory BUILD=%s'",
         dst, build, build, build);
  cr_expect(verdict_is(out, "cp_attend_block", "wrong") && strstr(out, "forward statistics") &&
                strstr(out, "got -inf"),
            "a forgotten running max: the forward's statistics:\n%s", out);
  cr_expect(!strstr(out, "alone"),
            "cp_attend_block's test does not call tp_sp_all_gather: no body rebuilt alone:\n%s", out);
  free(out);
  free(nomax);
  free(cp);
  /* chapter 09: the reduce-scatter's handle dropped, the cross-node all-reduce reading its output */
  student_tree(dst, sizeof dst, "ex_long10");
  put_body(dst, "hier.c", "hier_all_reduce", HIER_PIECE
           "  comm_reduce_scatter_async(h->node, buf, own, numel, dt, op, \"node sum\");\n"
           "  comm_handle_t x = comm_all_reduce_async(h->cross, own, n, dt, op, \"across\");\n"
           "  comm_wait(h->node, comm_all_gather_async(h->node, own, buf, numel, dt, \"gather back\"));\n"
           "  comm_wait(h->cross, x);\n");
  free(expect_verdict(
      "a dropped reduce-scatter handle", dst, "09", "ch09_nodes/hier_*", "hier_all_reduce", "wrong",
      STRS("comm_all_reduce_async (across)", "comm_reduce_scatter_async (node sum)", "never waited"), NULL));
}

/* make test-long: EXERCISE_TESTS (exercises.py), the tests a body of chapters 09 and 10 is judged on,
 * against the code itself: with one exercise stubbed and the reference for every other, each test
 * the map gives it fails (it calls the stub) and every other test of its chapter passes (it cannot
 * see the body: a done verdict may leave it out). A test that skips itself here (no root) is not
 * counted. */
static char *body_of(const char *path, const char *name) {
  char *t = zl_read_file(path, NULL), begin[160];
  cr_assert(t, "cannot read %s", path);
  snprintf(begin, sizeof begin, "// BEGIN EXERCISE %s ", name);
  char *b = strstr(t, begin);
  cr_assert(b, "no exercise %s in %s", name, path);
  char *s = strchr(b, '\n') + 1, *e = strstr(s, "// END EXERCISE");
  while (e > s && e[-1] != '\n') e--;
  char *o = malloc((size_t)(e - s) + 1);
  sprintf(o, "%.*s", (int)(e - s), s);
  free(t);
  return o;
}
Test(common_exercises_long, exercise_tests_map_matches_the_stubs, .timeout = 1200 * ZL_SLOW) {
  struct { char chapter[4], file[64], name[64]; } ex[16];
  size_t nex = 0;
  char root[256], build[256], cmd[2048], *out = NULL;
  zl_tmpdir(root, sizeof root, "ex_map");
  build_dir(build, sizeof build);
  snprintf(cmd, sizeof cmd,
           "rm -rf %s/gen %s/tree %s/tree-build && " GEN
           " generate solutions %s/gen --backup %s/bk >/dev/null",
           root, root, root, root, root);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
  /* every exercise of chapters 09 and 10 (exercises.py list: name, notes page, file:line) */
  for (int ch = 9; ch <= 10; ch++) {
    int rc = zl_run(0, 60, &out, GEN " list solutions --chapter %02d --dst %s/gen", ch, root);
    cr_assert(rc == 0 && out, "exercises.py list --chapter %02d: exit %d:\n%s", ch, rc, out);
    for (char *line = strtok(out, "\n"); line && nex < sizeof ex / sizeof ex[0]; line = strtok(NULL, "\n")) {
      char name[64], notes[128], where[256];
      if (sscanf(line, "%63s %127s %255s", name, notes, where) != 3 || !strchr(where, ':') ||
          !strstr(where, "/gen/"))
        continue;
      char *slash = strstr(where, "/gen/") + 4; /* <root>/gen/<file>:<line> */
      snprintf(ex[nex].chapter, sizeof ex[nex].chapter, "%02d", ch);
      snprintf(ex[nex].name, sizeof ex[nex].name, "%s", name);
      snprintf(ex[nex].file, sizeof ex[nex].file, "%.*s", (int)(strchr(where, ':') - slash - 1), slash + 1);
      nex++;
    }
    free(out);
  }
  cr_assert(nex >= 4, "exercises.py list found %zu exercises in chapters 09 and 10", nex);
  for (size_t i = 0; i < nex; i++) {
    char tree[300], gen[300];
    snprintf(tree, sizeof tree, "%s/tree", root);
    snprintf(gen, sizeof gen, "%s/gen/%s", root, ex[i].file);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r solutions %s", tree, tree);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    char *stub = body_of(gen, ex[i].name);
    put_body(tree, ex[i].file, ex[i].name, stub);
    free(stub);
    int rc = zl_run(0, 600, &out, "make --no-print-directory BUILD=%s IMPL=%s GPU=0 build", build, tree);
    cr_assert_eq(rc, 0, "the tree with %s stubbed does not build:\n%s", ex[i].name, out);
    free(out);
    rc = zl_run(0, 60, &out, GEN " calls solutions --chapter %s --binary %s-build/tests/zl_tests",
                ex[i].chapter, tree);
    cr_assert(rc == 0 && out && *out, "exercises.py calls: exit %d:\n%s", rc, out);
    int checked = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
      char test[256], *colon = strstr(line, ": ");
      cr_assert(colon, "exercises.py calls printed %s", line);
      snprintf(test, sizeof test, "%.*s", (int)(colon - line), line);
      char pad[128];
      snprintf(pad, sizeof pad, " %s ", ex[i].name);
      char list[1024];
      snprintf(list, sizeof list, " %s ", colon + 2);
      int mapped = strstr(list, pad) != NULL;
      char *res = NULL;
      /* a Criterion run of its own: without this one's CRITERION_* / BXF_* variables (exercises.py's
       * run_tests) */
      int trc =
          zl_run(0, 300, &res,
                 "sh -c 'for v in $(env | sed -n \"s/^\\(CRITERION[^=]*\\|BXF[^=]*\\)=.*/\\1/p\"); "
                 "do unset $v; done; ZL_EXERCISE_TIMEOUT_S=10 exec %s-build/tests/zl_tests --filter %s'",
                 tree, test);
      if (trc == 0 && strstr(res, "Tested: 0 ")) { /* it skipped itself here */
        free(res);
        continue;
      }
      cr_expect(mapped ? trc != 0 : trc == 0,
                "%s stubbed: %s %s (exit %d) but EXERCISE_TESTS says it %s:\n%s", ex[i].name, test,
                trc ? "fails" : "passes", trc, mapped ? "calls it" : "does not call it", res);
      checked++;
      free(res);
    }
    cr_expect(checked > 0, "no test of chapter %s checked for %s", ex[i].chapter, ex[i].name);
    free(out);
  }
}
