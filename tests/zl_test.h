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
#include "dtype.h" // bf16_t, bf16_from_f32, bf16_to_f32
#include "model.h" // model_t, unit_io_t, model_forward, model_backward: zl_fwd_bwd
#include "ops.h"   // op_softmax_xent: zl_fwd_bwd

#ifndef ZL_BIN
#define ZL_BIN "build/bin"
#endif
#ifndef ZL_TESTBIN
#define ZL_TESTBIN "build/tests"
#endif

/* make test-sanitize's builds (AddressSanitizer, ThreadSanitizer) run every program 2-5 times slower
 * than the plain build, for which each time limit of a test is sized: there, zl_run's limits and the
 * .timeout of the slowest tests (the exercise checker's, the notes' pasted outputs) are ZL_SLOW times
 * longer (a limit the plain build needed 150 s for ran out under ASan at load 10). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ZL_SLOW 3
#else
#define ZL_SLOW 1
#endif

/* make test-sanitize (common/scripts/sanitize.sh sets ZL_SANITIZE_LOG): a program's output that
 * holds a sanitizer's report is kept in that directory too, so a finding is counted even where its
 * test expected the program to fail anyway (UndefinedBehaviorSanitizer writes to the output: GCC's
 * combined ASan+UBSan runtime ignores its log_path). */
static inline void zl_sanitize_keep(const char *cmd, const char *out) {
  const char *dir = getenv("ZL_SANITIZE_LOG");
  if (!dir || !*dir || !(strstr(out, "runtime error:") || strstr(out, "ERROR: AddressSanitizer") ||
                         strstr(out, "WARNING: ThreadSanitizer")))
    return;
  char path[512];
  snprintf(path, sizeof path, "%s/output.XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) return;
  FILE *f = fdopen(fd, "w");
  fprintf(f, "command: %s\n%s", cmd, out);
  fclose(f);
}

/* make test-sanitize's ThreadSanitizer pass (common/scripts/sanitize.sh sets ZL_RUN_BUILD=DIR): a
 * command's programs of this build (paths under ZL_BIN's directory) are DIR's instead. Criterion's
 * runner cannot itself run under ThreadSanitizer (its arena maps at random fixed addresses, which
 * TSan's shadow holds), so the AddressSanitizer runner launches the ThreadSanitizer programs. */
static inline void zl_run_build(char *cmd, size_t n) {
  const char *to = getenv("ZL_RUN_BUILD");
  char from[256], out[8192];
  if (!to || !*to) return;
  snprintf(from, sizeof from, "%s", ZL_BIN); /* "build-sanitize/bin" -> "build-sanitize/" */
  char *slash = strrchr(from, '/');
  if (!slash) return;
  slash[1] = 0;
  size_t lf = strlen(from), o = 0;
  for (const char *c = cmd; *c && o + 1 < sizeof out;) {
    int at_word = c == cmd || strchr(" '\"=:", c[-1]) != NULL; /* a path's start, not inside one */
    if (at_word && strncmp(c, from, lf) == 0) {
      o += (size_t)snprintf(out + o, sizeof out - o, "%s/", to);
      c += lf;
    } else {
      out[o++] = *c++;
    }
  }
  if (o >= sizeof out) o = sizeof out - 1; /* a truncated snprintf counts what it could not write */
  if (o >= n) o = n - 1;                   /* as long as cmd holds */
  memcpy(cmd, out, o);
  cmd[o] = 0;
}

/* Run `timeout T common/scripts/zlrun NP <cmd>` (np <= 0: run cmd directly), capturing stdout
 * and stderr together into *out (malloc'd, may be NULL). Returns the exit code (124: timeout).
 * T = timeout_s·ZL_SLOW (a sanitizer's build runs slower). */
static inline int zl_run(int np, int timeout_s, char **out, const char *fmt, ...) {
  char cmd[4096], full[8192];
  timeout_s *= ZL_SLOW;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  zl_run_build(cmd, sizeof cmd);
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
  zl_sanitize_keep(full, buf);
  if (out) *out = buf;
  else free(buf);
  return rc;
}

/* zl_run that must exit 0: otherwise fails with "WHAT exited RC:" and the output. */
static inline void zl_run_ok(int np, int timeout_s, const char *what, const char *fmt, ...) {
  char cmd[4096], *out = NULL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = zl_run(np, timeout_s, &out, "%s", cmd);
  cr_assert_eq(rc, 0, "%s exited %d:\n%s", what, rc, out);
  free(out);
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
  /* keyed by the pid AND the process's start time (/proc/self/stat's 22nd field, clock ticks since
   * boot): a pid is reused, and a directory an earlier test process left under the same pid must not
   * be read as this one's (an export that refuses to overwrite failed on such a file) */
  unsigned long long start = 0;
  FILE *f = fopen("/proc/self/stat", "r");
  char line[1024] = "";
  if (f && fgets(line, sizeof line, f)) {
    const char *p = strrchr(line, ')'); /* the command name may hold spaces: fields count after it */
    for (int field = 2; p && *p && field < 22; p++)
      if (*p == ' ') field++;
    if (p) start = strtoull(p, NULL, 10);
  }
  if (f) fclose(f);
  snprintf(dst, n, "/tmp/zl_test_%d_%llu_%s", (int)getpid(), start, name);
  mkdir(dst, 0755);
}

/* A cache of reference runs shared by the tests of ONE run of the suite, never by a later one: it
 * lives in $ZL_TEST_CACHE, the directory run_tests.sh makes for its run and removes after it (no
 * variable: no cache, every reference is computed). Inside the run the entry is keyed anyway by
 * everything that changes a reference's bits: the caller's key (ranks, flags), the binary's size
 * and mtime, the BLAS kernel OpenBLAS runs (openblas_get_corename: the machine's, or
 * OPENBLAS_CORETYPE's) and its thread count. Writes DIR/HASH.ext's stem (no extension) into dst;
 * returns 0 (dst untouched) when there is no cache. */
char *openblas_get_corename(void); /* OpenBLAS's cblas.h; the test binary links OpenBLAS */
static inline int zl_cache_stem(char *dst, size_t n, const char *what, const char *key, const char *binary) {
  const char *dir = getenv("ZL_TEST_CACHE");
  if (!dir || !*dir) return 0;
  struct stat st;
  cr_assert(stat(binary, &st) == 0, "missing %s (make build)", binary);
  const char *thr = getenv("OPENBLAS_NUM_THREADS");
  char full[1024];
  snprintf(full, sizeof full, "%s|%s|%s|%lld|%lld.%09ld|%s|%s", what, key, binary, (long long)st.st_size,
           (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, openblas_get_corename(), thr ? thr : "");
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = full; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  snprintf(dst, n, "%s/%s_%016llx", dir, what, (unsigned long long)h);
  return 1;
}

/* DIR/name into dst, DIR = zl_tmpdir(dir_tag) (created). */
static inline void zl_tmppath(char *dst, size_t n, const char *dir_tag, const char *name) {
  char dir[256];
  zl_tmpdir(dir, sizeof dir, dir_tag);
  snprintf(dst, n, "%s/%s", dir, name);
}

/* Rank r's value of key in the --json's memory.per_rank (the (r+1)-th "rank" entry). */
static inline double zl_rank_mem(const char *json, int r, const char *key) {
  const char *p = zl_json_find(json, "per_rank");
  cr_assert(p, "--json has no memory.per_rank");
  for (int k = 0; k <= r; k++) {
    p = zl_json_find(p, "rank");
    cr_assert(p, "--json memory.per_rank has no entry for rank %d", r);
  }
  return zl_json_num(p, key);
}

/* Relative difference |a-b| / max(|b|, tiny). */
static inline double zl_rel(double a, double b) {
  double d = fabs(a - b), s = fabs(b);
  return s > 1e-30 ? d / s : d;
}
/* Program prog (under ZL_BIN) with args on np ranks refuses before anything starts: exit 2, the
 * line `want` in its output, no training step printed. Fails naming the command and the output. */
static inline void zl_expect_refused(int np, const char *prog, const char *args, const char *want) {
  char *out = NULL;
  int rc = zl_run(np, 30, &out, "%s/%s %s", ZL_BIN, prog, args);
  const char *shown = out && *out ? out : "(no output)";
  cr_assert_eq(rc, 2, "%s %s on %d ranks: exit %d, expected 2:\n%s", prog, args, np, rc, shown);
  cr_assert(strstr(shown, want), "%s %s: expected the line\n  %s\ngot:\n%s", prog, args, want, shown);
  cr_assert(!strstr(shown, "step "), "%s %s: trained before refusing:\n%s", prog, args, shown);
  free(out);
}
/* Every step's loss of two --json outputs ("steps": [{"loss": ...}, ...]), bitwise: at least two
 * steps, as many in each; fails naming the step, got and expected. */
static inline void zl_expect_same_losses(const char *what, const char *got, const char *want) {
  double a[64], b[64];
  int na = zl_json_all(zl_json_find(got, "steps"), "loss", a, 64),
      nb = zl_json_all(zl_json_find(want, "steps"), "loss", b, 64);
  cr_assert(na >= 2 && na == nb, "%s: %d losses, expected %d", what, na, nb);
  for (int i = 0; i < na; i++)
    cr_assert(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s: loss of step %d %.17g, expected %.17g (bitwise)",
              what, i, a[i], b[i]);
}
/* Compare two float arrays: bitwise when tol == 0 — only for runs that call the same kernels on the
 * same shapes in the same order (notes/design.md, "Bits or a tolerance") — else normwise,
 * |got_i − exp_i| <= tol·max_j |exp_j| (zl_expect_close_norm: a run that sums in another order
 * moves a weight by rounding relative to the tensor's scale, not to the weight's own). Fails naming
 * what, index, got, expected. */
static inline double zl_expect_close_norm(const char *what, const float *got, const float *exp, int64_t n,
                                          double tol);
static inline void zl_expect_floats(const char *what, const float *got, const float *exp, int64_t n,
                                    double tol) {
  if (tol > 0) {
    zl_expect_close_norm(what, got, exp, n, tol);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&got[i], &exp[i], sizeof(float)) != 0)
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (bitwise)", what, (long long)i, got[i], exp[i]);
}
/* Normwise: |got_i − expected_i| <= tol·max_j |expected_j| for every element i — the comparison for
 * runs that sum in another order (another grid, another GEMM shape: notes/design.md, "Bits or a
 * tolerance"), where one weight's relative error is no measure (AdamW moves a weight with a ~0
 * gradient by ~lr either way). Fails naming what, index, got, expected and the bound; returns the
 * largest |difference| / max|expected| (for a log line stating the margin). */
static inline double zl_expect_close_norm(const char *what, const float *got, const float *exp, int64_t n,
                                          double tol) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(exp[i]));
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - exp[i]);
    if (!(d <= tol * scale))
      cr_assert_fail(
          "%s[%lld]: got %.9g, expected %.9g (|difference| %.3g > tolerance %g · max|expected| %.3g)", what,
          (long long)i, got[i], exp[i], d, tol, scale);
    worst = fmax(worst, d);
  }
  return scale > 0 ? worst / scale : worst;
}
/* |got − expected| <= tol (absolute) for every element, against a double reference; fails
 * naming what, index, got, expected. NaN never passes. */
static inline void zl_expect_close_abs(const char *what, const float *got, const double *exp, int64_t n,
                                       double tol) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - exp[i]) <= tol))
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (abs tol %g)", what, (long long)i, got[i], exp[i],
                     tol);
}
/* bf16 arrays bit for bit; fails naming what, index, both bit patterns and their values. */
static inline void zl_expect_bits_bf16(const char *what, const bf16_t *got, const bf16_t *exp, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (got[i] != exp[i])
      cr_assert_fail("%s[%lld]: got bf16 0x%04x (%g), expected 0x%04x (%g) (bitwise)", what, (long long)i,
                     got[i], bf16_to_f32(got[i]), exp[i], bf16_to_f32(exp[i]));
}
/* n floats rounded to bf16: a new malloc'd array. */
static inline bf16_t *zl_to_bf16(const float *p, int64_t n) {
  bf16_t *h = malloc((size_t)(n ? n : 1) * sizeof(bf16_t));
  for (int64_t i = 0; i < n; i++) h[i] = bf16_from_f32(p[i]);
  return h;
}
/* Round an fp32 array to bf16-representable values in place (so fp32 and bf16 inputs agree). */
static inline void zl_round_bf16(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = bf16_to_f32(bf16_from_f32(p[i]));
}
/* The float with bits u, and the bits of f (cast tests). */
static inline float zl_f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t zl_bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
/* Load a raw float32 file (from --save-params); *n elements. */
static inline float *zl_read_floats(const char *path, int64_t *n) {
  size_t len = 0;
  char *b = zl_read_file(path, &len);
  cr_assert(b, "missing file %s", path);
  *n = (int64_t)(len / sizeof(float));
  return (float *)b;
}

/* Whole file equality (bitwise), failing with both paths. */
static inline void zl_expect_same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = zl_read_file(a, &na), *y = zl_read_file(b, &nb);
  cr_assert(x, "missing file %s", a);
  cr_assert(y, "missing file %s", b);
  cr_assert_eq(na, nb, "%s has %zu bytes, %s has %zu", a, na, b, nb);
  for (size_t i = 0; i < na; i++)
    cr_assert_eq(x[i], y[i],
                 "%s and %s differ first at byte %zu (offset %zu of a float32 array: element %zu)", a, b, i,
                 i, i / 4);
  free(x);
  free(y);
}

/* ---- one launch with --json and --save-params ------------------------------------------- */
/* What a launch leaves: the --json text, stdout + stderr, the --save-params floats (n of them). */
typedef struct zl_out {
  char *json, *text;
  float *params;
  int64_t n;
} zl_out_t;
static inline void zl_out_free(zl_out_t *r) {
  free(r->json), free(r->text), free(r->params);
  memset(r, 0, sizeof *r);
}
/* The command fmt... on np ranks (zl_run, killed after timeout_s) with `--json DIR/NAME.json
 * --save-params DIR/NAME.bin --quiet` appended, DIR = zl_tmpdir(dir_tag). Asserts exit 0 (the
 * message names name, N, the command and its output) and a written --json; reads both files. */
static inline zl_out_t zl_launch(int np, int timeout_s, const char *dir_tag, const char *name,
                                 const char *fmt, ...) {
  char dir[256], json[320], bin[320], cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  zl_tmpdir(dir, sizeof dir, dir_tag);
  snprintf(json, sizeof json, "%s/%s.json", dir, name);
  snprintf(bin, sizeof bin, "%s/%s.bin", dir, name);
  zl_out_t r = {0};
  int rc = zl_run(np, timeout_s, &r.text, "%s --json %s --save-params %s --quiet", cmd, json, bin);
  cr_assert_eq(rc, 0, "%s (N %d: %s) exited %d:\n%s", name, np, cmd, rc, r.text);
  r.json = zl_read_file(json, NULL);
  cr_assert(r.json, "%s: no --json written", name);
  r.params = zl_read_floats(bin, &r.n);
  return r;
}

/* ---- --trace files: was the communication overlapped with the backward? ------------------- */
/* One complete event of a --trace file (row 0 compute, 1 comm); issued = ts − args.queued (the
 * caller's issue); coll: a collective whose args say "op":"<op>". */
typedef struct zl_tev { char name[48]; int pid, tid, coll; double ts, dur, issued; } zl_tev_t;
/* Every "ph": "X" event of a trace (one per line, as common/base/trace.c writes them); returns the count. */
static inline int zl_read_trace(const char *text, const char *op, zl_tev_t *ev, int max) {
  char want[64];
  snprintf(want, sizeof want, "\"op\":\"%s\"", op);
  int n = 0;
  for (const char *p = text; p && *p && n < max; p = strchr(p, '\n')) {
    if (*p == '\n') p++;
    const char *end = strchr(p, '\n');
    zl_tev_t e = {0};
    if (sscanf(p,
               "{\"name\": \"%47[^\"]\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %lf, \"dur\": %lf",
               e.name, &e.pid, &e.tid, &e.ts, &e.dur) != 5)
      continue;
    const char *q = strstr(p, "\"queued\":"), *o = strstr(p, want);
    e.issued = q && (!end || q < end) ? e.ts - strtod(q + 9, NULL) : e.ts;
    e.coll = e.tid == 1 && o && (!end || o < end);
    ev[n++] = e;
  }
  return n;
}
/* What a trace says about overlap. steps: rank-steps ("step N" spans on row 0); late: those whose
 * first `op` collective is issued only after "bwd 0" starts (first_late describes the first,
 * naming the collective `label`); running: backward spans that start while an earlier-issued `op`
 * collective is still running (0 when every collective is waited for at once). */
typedef struct zl_overlap { int steps, late, running; char first_late[256]; } zl_overlap_t;
static inline zl_overlap_t zl_trace_overlap(const char *trace_text, const char *op, const char *label) {
  enum { MAXEV = 8192 };
  zl_tev_t *ev = calloc(MAXEV, sizeof *ev);
  int n = zl_read_trace(trace_text, op, ev, MAXEV);
  zl_overlap_t o = {0};
  for (int i = 0; i < n; i++) {
    if (ev[i].tid != 0 || strncmp(ev[i].name, "step ", 5) != 0) continue;
    double s0 = ev[i].ts, s1 = ev[i].ts + ev[i].dur, bwd0 = -1, first = -1;
    for (int k = 0; k < n; k++) {
      if (ev[k].pid != ev[i].pid) continue;
      if (ev[k].tid == 0 && strcmp(ev[k].name, "bwd 0") == 0 && ev[k].ts >= s0 && ev[k].ts <= s1)
        bwd0 = ev[k].ts;
      if (ev[k].coll && ev[k].issued >= s0 && ev[k].issued <= s1 && (first < 0 || ev[k].issued < first))
        first = ev[k].issued;
    }
    o.steps++;
    if ((bwd0 < 0 || first < 0 || first >= bwd0) && !o.late++)
      snprintf(o.first_late, sizeof o.first_late,
               "rank %d %s: first %s issued at %.1f us, bwd 0 starts at %.1f us", ev[i].pid, ev[i].name,
               label, first, bwd0);
  }
  for (int k = 0; k < n; k++)
    for (int b = 0; ev[k].coll && b < n; b++)
      if (ev[b].pid == ev[k].pid && ev[b].tid == 0 && strncmp(ev[b].name, "bwd ", 4) == 0 &&
          ev[b].ts > ev[k].issued && ev[b].ts < ev[k].ts + ev[k].dur)
        o.running++;
  free(ev);
  return o;
}

/* ---- one forward + backward through a model's units, on the CPU --------------------------- */
/* As the trainer does it: outputs out[u], saved[u], the dy ping-pong. params/grads: flat buffers
 * in wdt (grads NULL: forward and loss only); x: the first unit's input (floats for the MLP,
 * token ids for the GPT); tgt: B·rows class indices; beta: the backward's accumulation. Returns
 * the mean loss; the logits (B·rows × classes) are copied out when logits is not NULL. */
static inline double zl_fwd_bwd(const model_t *m, const void *params, void *grads, dtype_t wdt, const void *x,
                                const int *tgt, int B, float beta, float *logits) {
  enum { MAXU = 16 };
  size_t es = dtype_size(wdt);
  int U = m->n_units;
  cr_assert(U <= MAXU, "zl_fwd_bwd: %d units, at most %d", U, MAXU);
  float *out[MAXU] = {0}, *saved[MAXU] = {0}, *dy[2];
  int64_t maxy = model_max_y_numel(m);
  for (int u = 0; u < U; u++) {
    out[u] = calloc((size_t)B * m->units[u].y_numel, sizeof(float));
    saved[u] = calloc((size_t)B * m->units[u].saved_numel + 1, sizeof(float));
  }
  dy[0] = calloc((size_t)(B * maxy), sizeof(float));
  dy[1] = calloc((size_t)(B * maxy), sizeof(float));
  for (int u = 0; u < U; u++) {
    unit_io_t io = {.dev = DEV_CPU, .wdt = wdt, .B = B, .params = (const char *)params + m->units[u].off * es,
                    .x = u == 0 ? x : out[u - 1], .y = out[u], .saved = saved[u]};
    model_forward(m, u, &io);
  }
  int64_t rows = (int64_t)B * m->rows;
  if (logits) memcpy(logits, out[U - 1], sizeof(float) * rows * m->classes);
  double loss = op_softmax_xent(DEV_CPU, dy[0], out[U - 1], tgt, (int)rows, m->classes, 1.0f / rows) / rows;
  if (grads)
    for (int u = U - 1, k = 0; u >= 0; u--, k ^= 1) {
      unit_io_t io = {.dev = DEV_CPU,
                      .wdt = wdt,
                      .B = B,
                      .params = (const char *)params + m->units[u].off * es,
                      .grads = (char *)grads + m->units[u].off * es,
                      .beta = beta,
                      .x = u == 0 ? x : out[u - 1],
                      .y = out[u],
                      .saved = saved[u],
                      .dy = dy[k],
                      .dx = u == 0 ? NULL : dy[k ^ 1]};
      model_backward(m, u, &io);
    }
  for (int u = 0; u < U; u++) free(out[u]), free(saved[u]);
  free(dy[0]), free(dy[1]);
  return loss;
}
/* ---- emulated nodes (root: common/scripts/cluster.sh) -------------------------------------------
 * zl_need_cluster: skips the test, with cluster.sh's reason, where nodes cannot be made (Criterion lists
 * it as skipped). zl_own_cluster: a cluster name <pfx><n> and a /24 10.<net>.<k> of this test's own, from
 * its pid: never the default cluster (zl) a user may have up, nor one another test or run has up (its
 * state, namespaces or bridge exist), nor a /24 this host already routes (each suite its own net). */
static inline void zl_need_cluster(void) {
  char *out = NULL;
  int rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh check");
  if (rc != 0) {
    char why[512];
    snprintf(why, sizeof why, "emulated nodes cannot be made here: %s", out ? out : "");
    free(out);
    cr_skip_test("%s", why);
  }
  free(out);
}
static inline void zl_own_cluster(char pfx, int net, char *name, size_t nn, char *subnet, size_t ns) {
  int id = (int)getpid();
  for (int k = 0; k < 200; k++) {
    snprintf(name, nn, "%c%d", pfx, (id + 7919 * k) % 10000);
    snprintf(subnet, ns, "10.%d.%d", net, (id + k) % 250);
    int rc = zl_run(0, 20, NULL,
                    "sh -c '! test -e /run/zerolab-cluster/%s && ! ip link show %s-br >/dev/null 2>&1 && "
                    "! ip netns list 2>/dev/null | grep -q \"^%s-node\" && "
                    "! ip -4 route show to match %s.1 2>/dev/null | grep -vq \"^default\"'",
                    name, name, name, subnet);
    if (rc == 0) return;
  }
  cr_assert_fail("no free cluster name %c<n> and /24 10.%d.<k> found in 200 tries (ip netns list; ip route)",
                 pfx, net);
}
#endif
