/* zl_test.h — helpers shared by the Criterion tests (unit and multi-rank).
 * Multi-rank scenarios: one mpirun launch per scenario (Criterion cannot fork MPI ranks);
 * the test reads the program's exit code, its output and its --json / --save-params files.
 * A failing comparison names the rank (when known), the tensor, the index, got and expected. */
#ifndef ZL_TEST_H
#define ZL_TEST_H
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef ZL_BIN
#define ZL_BIN "build/bin"
#endif
#ifndef ZL_TESTBIN
#define ZL_TESTBIN "build/tests"
#endif

/* Run `timeout T common/scripts/zlrun NP <cmd>` (np <= 0: run cmd directly), capturing stdout
 * and stderr together into *out (malloc'd, may be NULL). Returns the exit code (124: timeout). */
static inline int zl_run(int np, int timeout_s, char **out, const char *fmt, ...) {
  char cmd[4096], full[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (np > 0)
    snprintf(full, sizeof full, "timeout -k 5 %d bash common/scripts/zlrun %d %s 2>&1", timeout_s, np, cmd);
  else
    snprintf(full, sizeof full, "timeout -k 5 %d %s 2>&1", timeout_s, cmd);
  FILE *p = popen(full, "r");
  cr_assert(p, "popen failed for: %s", full);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  size_t k;
  while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += k;
    if (cap - len < 4096) buf = realloc(buf, cap *= 2);
  }
  buf[len] = 0;
  int st = pclose(p);
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (out) *out = buf;
  else free(buf);
  return rc;
}

/* Run fn in a forked child with its stderr captured into buf (NUL-terminated); returns the
 * child's exit code (128 + signal when killed). For testing paths that end the process. */
static inline int zl_run_child(void (*fn)(void), char *buf, size_t n) {
  int fds[2];
  cr_assert(pipe(fds) == 0, "pipe failed");
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0, "fork failed");
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    fn();
    _exit(0); /* fn was supposed to die */
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t k;
  while (len + 1 < n && (k = read(fds[0], buf + len, n - 1 - len)) > 0) len += (size_t)k;
  buf[len] = 0;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Whole file into a malloc'd, NUL-terminated buffer (NULL if missing); *len its size. */
static inline char *zl_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f);
  fclose(f);
  b[got] = 0;
  if (len) *len = got;
  return b;
}

/* The number after the first `"key":` at or after `from` in a JSON text (NAN if absent).
 * Keys are matched literally; nest by searching from a sub-object: zl_json_find(json, "comm"). */
static inline const char *zl_json_find(const char *json, const char *key) {
  char pat[256];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *p = json ? strstr(json, pat) : NULL;
  return p ? p + strlen(pat) : NULL;
}
static inline double zl_json_num(const char *json, const char *key) {
  const char *p = zl_json_find(json, key);
  if (!p) return NAN;
  while (*p == ' ' || *p == ':') p++;
  if (*p == '"') p++; /* numbers written as strings (fingerprints) */
  return strtod(p, NULL);
}
/* Every value of `"key":` in order (e.g. all "loss" of the steps array); returns the count. */
static inline int zl_json_all(const char *json, const char *key, double *vals, int max) {
  int n = 0;
  const char *p = json;
  while (n < max && (p = zl_json_find(p, key))) {
    while (*p == ' ' || *p == ':') p++;
    vals[n++] = strtod(p, NULL);
  }
  return n;
}

/* A temp directory for one test's files (created; path static per call site). */
static inline void zl_tmpdir(char *dst, size_t n, const char *name) {
  snprintf(dst, n, "/tmp/zl_test_%d_%s", (int)getpid(), name);
  mkdir(dst, 0755);
}

/* Relative difference |a-b| / max(|b|, tiny). */
static inline double zl_rel(double a, double b) {
  double d = fabs(a - b), s = fabs(b);
  return s > 1e-30 ? d / s : d;
}
/* Compare two float arrays: bitwise when tol == 0, else relative (with an absolute floor
 * of tol·max|expected| so values near 0 do not dominate). Fails naming what, index, got, expected. */
static inline void zl_expect_floats(const char *what, const float *got, const float *exp, int64_t n, double tol) {
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(exp[i]));
  for (int64_t i = 0; i < n; i++) {
    int bad;
    if (tol == 0) bad = memcmp(&got[i], &exp[i], sizeof(float)) != 0;
    else bad = !(fabs((double)got[i] - exp[i]) <= tol * fmax(fabs(exp[i]), 1e-3 * scale));
    if (bad)
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (%s)", what, (long long)i, got[i], exp[i],
                     tol == 0 ? "bitwise" : "relative tolerance");
  }
}
/* Load a raw float32 file (from --save-params); *n elements. */
static inline float *zl_read_floats(const char *path, int64_t *n) {
  size_t len = 0;
  char *b = zl_read_file(path, &len);
  cr_assert(b, "missing file %s", path);
  *n = (int64_t)(len / sizeof(float));
  return (float *)b;
}
#endif
