/* test_bad_inputs.c — the bad-input table, tests/bad_inputs.txt, row by row: every program and tool
 * against inputs it must refuse (exit 2, ONE line naming the flag and what is allowed, printed once
 * under mpirun, before anything runs) or end with (another exit code and the words of its row), each
 * within its row's time limit (notes/reliability.md, "1. Bad input"). Suite common_bad_inputs runs
 * the rows of kind `fast` (make test, under a minute on 2 cores), common_bad_inputs_long those of
 * kind `long` (make test-long); notes/reliability.md's table is generated from the same file
 * (common/scripts/bad_inputs.py), and a test here checks it is current. */
#include "zl_test.h"           // zl_run, zl_tmpdir
#include <criterion/logging.h> // cr_log_info
#include <time.h>              // clock_gettime

#define TABLE "tests/bad_inputs.txt"

typedef struct row {
  int line;           /* in TABLE */
  char kind[8];       /* fast | long */
  int np, exit;       /* ranks (0: directly), the exit code expected */
  double secs;        /* the time limit */
  char cmd[1024];     /* a program of ZL_BIN and its arguments, or `sh: ...` */
  char expect[512];   /* the words of the output */
} row_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The i-th ' | '-separated field of s (trimmed) into dst; 0 when there is none. */
static int field(const char *s, int i, char *dst, size_t n) {
  for (int k = 0; k < i; k++) {
    s = strstr(s, " | ");
    if (!s) return 0;
    s += 3;
  }
  const char *e = i < 5 ? strstr(s, " | ") : NULL;
  size_t len = e ? (size_t)(e - s) : strlen(s);
  while (len && (s[len - 1] == '\n' || s[len - 1] == ' ')) len--;
  while (len && *s == ' ') s++, len--;
  snprintf(dst, n, "%.*s", (int)len, s);
  return 1;
}

/* Every row of TABLE (malloc'd); fails naming the line of a malformed one. */
static int load_rows(row_t **out) {
  FILE *f = fopen(TABLE, "r");
  cr_assert(f, "%s: missing (run from the repository root)", TABLE);
  int n = 0, cap = 64, line = 0;
  row_t *rows = malloc((size_t)cap * sizeof *rows);
  char buf[2048], v[4][32];
  while (fgets(buf, sizeof buf, f)) {
    line++;
    if (buf[0] == '#' || strspn(buf, " \t\r\n") == strlen(buf)) continue;
    if (n == cap) rows = realloc(rows, (size_t)(cap *= 2) * sizeof *rows);
    row_t *r = &rows[n++];
    r->line = line;
    int ok = field(buf, 0, r->kind, sizeof r->kind) && field(buf, 1, v[0], sizeof v[0]) &&
             field(buf, 2, v[1], sizeof v[1]) && field(buf, 3, v[2], sizeof v[2]) &&
             field(buf, 4, r->cmd, sizeof r->cmd) && field(buf, 5, r->expect, sizeof r->expect);
    r->np = atoi(v[0]), r->exit = atoi(v[1]), r->secs = atof(v[2]);
    cr_assert(ok && (!strcmp(r->kind, "fast") || !strcmp(r->kind, "long")) && r->np >= 0 && r->secs > 0 &&
                  r->cmd[0] && r->expect[0],
              "%s:%d: expected 'fast|long | np | exit | secs | command | expect', got: %s", TABLE, line, buf);
  }
  fclose(f);
  *out = rows;
  return n;
}

/* s with every {key} replaced by val, into dst. */
static void subst(char *dst, size_t n, const char *s, const char *key, const char *val) {
  size_t k = 0, kl = strlen(key);
  while (*s && k + 1 < n) {
    if (!strncmp(s, key, kl)) {
      k += (size_t)snprintf(dst + k, n - k, "%s", val);
      s += kl;
    } else dst[k++] = *s++;
  }
  dst[k < n ? k : n - 1] = 0;
}

/* The words a refusal says what is allowed with. */
static int says_what_is_allowed(const char *line) {
  static const char *const says[] = {"must", "missing", "unknown flag", "more than once", "needs", "usage",
                                     "unexpected", "cannot", "expected", "only", "is the", "is DDP's"};
  for (size_t k = 0; k < sizeof says / sizeof says[0]; k++)
    if (strstr(line, says[k])) return 1;
  return 0;
}

/* Run one row and check it; returns its time. */
static double run_row(const row_t *r, const char *tmp) {
  char cmd[4096], sh[4096], q[4096], *out = NULL;
  if (!strncmp(r->cmd, "sh:", 3)) { /* a bash line from the root: quoted for bash -c */
    subst(q, sizeof q, r->cmd + 3, "{bin}", ZL_BIN);
    subst(sh, sizeof sh, q, "{tmp}", tmp);
    size_t k = (size_t)snprintf(cmd, sizeof cmd, "bash -c '");
    for (const char *p = sh; *p && k + 6 < sizeof cmd; p++) {
      if (*p == '\'') k += (size_t)snprintf(cmd + k, sizeof cmd - k, "'\\''");
      else cmd[k++] = *p;
    }
    snprintf(cmd + k, sizeof cmd - k, "'");
  } else {
    snprintf(cmd, sizeof cmd, ZL_BIN "/%s", r->cmd);
  }
  double t0 = now_s();
  int rc = zl_run(r->np, (int)r->secs + 20, &out, "%s", cmd);
  double dt = now_s() - t0;
  const char *shown = out && *out ? out : "(no output)";
  cr_expect_eq(rc, r->exit, "%s:%d `%s` (np %d): exit %d, expected %d; output:\n%s", TABLE, r->line, r->cmd,
               r->np, rc, r->exit, shown);
  cr_expect(dt < r->secs, "%s:%d `%s` (np %d): took %.1f s, its limit is %g s", TABLE, r->line, r->cmd, r->np,
            dt, r->secs);
  if (r->exit == 2) { /* a bad input: one line, saying what is allowed, printed once */
    int lines = 0;
    char first[1024] = "";
    for (const char *p = out; p && *p;) {
      const char *e = strchr(p, '\n');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      if (strspn(p, " \t\r") < len && lines++ == 0) snprintf(first, sizeof first, "%.*s", (int)len, p);
      p = e ? e + 1 : p + len;
    }
    cr_expect(lines == 1 && strncmp(first, r->expect, strlen(r->expect)) == 0 && says_what_is_allowed(first),
              "%s:%d `%s` (np %d): expected ONE line starting with '%s' and saying what is allowed; got %d "
              "line(s):\n%s",
              TABLE, r->line, r->cmd, r->np, r->expect, lines, shown);
  } else {
    cr_expect(strstr(shown, r->expect), "%s:%d `%s` (np %d): expected '%s' in the output:\n%s", TABLE,
              r->line, r->cmd, r->np, r->expect, shown);
  }
  free(out);
  return dt;
}

static void run_kind(const char *kind) {
  row_t *rows = NULL;
  int n = load_rows(&rows), ran = 0;
  char tmp[256];
  zl_tmpdir(tmp, sizeof tmp, "bad_inputs");
  double total = 0, slowest = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(rows[i].kind, kind)) continue;
    double dt = run_row(&rows[i], tmp);
    total += dt, ran++;
    if (dt > slowest) slowest = dt;
  }
  cr_log_info("%s: %d rows of kind %s in %.1f s (slowest %.2f s)", TABLE, ran, kind, total, slowest);
  cr_expect(ran > 0, "%s: no row of kind %s", TABLE, kind);
  free(rows);
}

Test(common_bad_inputs, every_fast_row) { run_kind("fast"); }
Test(common_bad_inputs_long, every_long_row) { run_kind("long"); }

/* notes/reliability.md's table is this file's, as common/scripts/bad_inputs.py --write makes it. */
Test(common_bad_inputs, the_notes_table_is_generated_from_it) {
  char *out = NULL;
  int rc = zl_run(0, 30, &out, "python3 common/scripts/bad_inputs.py --check");
  cr_expect_eq(rc, 0, "notes/reliability.md's bad-input table is not %s's: %s", TABLE, out);
  free(out);
}
