/* args.c — flag parsing and validation, before MPI_Init or any allocation (see args.h).
 * Notes: notes/00-memory.md (ch00 is the first user). Every bad input gets ONE line,
 *   error: <flag> <value>: <what is allowed>
 * printed by rank 0 only (the launcher's rank, read from the environment), and code 2. */
#include "args.h"   // arg_spec_t, args_parse, args_error, ...
#include <errno.h>  // errno, ERANGE
#include <limits.h> // INT_MAX, INT_MIN
#include <math.h>   // isfinite, floor
#include <stdarg.h> // va_list
#include <stdint.h> // int64_t
#include <stdio.h>  // fprintf, printf
#include <stdlib.h> // getenv, strtoll, strtod
#include <string.h> // strcmp, strchr, strncmp
#include <unistd.h> // sleep

/* First variable present among names, parsed as a non-negative int; dflt otherwise. */
static int env_int(const char *const *names, int nnames, int dflt) {
  for (int i = 0; i < nnames; i++) {
    const char *s = getenv(names[i]);
    if (!s || !*s) continue;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno == 0 && *end == 0 && v >= 0 && v <= INT_MAX) return (int)v;
  }
  return dflt;
}

int args_env_rank(void) {
  static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  return env_int(names, 3, 0);
}

int args_env_world(void) {
  static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
  int w = env_int(names, 2, 1);
  return w >= 1 ? w : 1;
}

/* Seconds a rank other than 0 waits before its error exit (see args_error). */
#define ARGS_PEER_WAIT_S 3

int args_error(const char *flag, const char *value, const char *fmt, ...) {
  /* Under mpirun every rank finds the same error and rank 0 says it. The others wait before they
   * exit: a rank that exits non-zero first makes mpirun end the job, and a rank 0 that started
   * late (a loaded machine) would be killed before it printed — no error line at all. Rank 0
   * exits 2 as soon as it has printed, and mpirun ends the waiting ranks then. */
  if (args_env_rank() != 0) {
    sleep(ARGS_PEER_WAIT_S);
    return 2;
  }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (value) fprintf(stderr, "error: %s %s: %s\n", flag, *value ? value : "''", msg);
  else fprintf(stderr, "error: %s: %s\n", flag, msg);
  fflush(stderr);
  return 2;
}

int args_parse_count(const char *s, double *out) {
  if (!s || !*s) return 1;
  /* strtod alone would take "nan", "inf", hex and leading blanks: allow digits, '.', sign, e only */
  for (const char *p = s; *p; p++)
    if (!strchr("0123456789.+-eEkKmMbBgGtT", *p)) return 1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno == ERANGE) return 1;
  double mult = 1;
  if (*end) {
    switch (*end) {
    case 'k': case 'K': mult = 1e3; break;
    case 'm': case 'M': mult = 1e6; break;
    case 'b': case 'B': case 'g': case 'G': mult = 1e9; break;
    case 't': case 'T': mult = 1e12; break;
    default: return 1;
    }
    if (end[1] != 0) return 1; /* one suffix, last */
  }
  v *= mult;
  if (!isfinite(v)) return 1;
  *out = v;
  return 0;
}

int args_parse_bytes(const char *s, int64_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return 1;
  double mult = 1;
  if (*end) {
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; break;
    case 'm': case 'M': mult = 1048576.0; break;
    case 'g': case 'G': mult = 1073741824.0; break;
    default: return 1;
    }
    if (end[1] && !((end[1] == 'B' || end[1] == 'b') && !end[2])) return 1; /* "4K" or "4KB" */
  }
  v *= mult;
  if (v != floor(v) || v > 1e12) return 1;
  *out = (int64_t)v;
  return 0;
}

/* A bound for messages: integers without exponent, others in %g. */
static void fmt_bound(char *dst, size_t n, double x) {
  if (x > -9.22e18 && x < 9.22e18 && x == (double)(long long)x) snprintf(dst, n, "%lld", (long long)x);
  else snprintf(dst, n, "%g", x);
}

/* "must be ..." text for spec s. */
static void allowed_text(const arg_spec_t *s, char *dst, size_t n) {
  char lo[48], hi[48];
  fmt_bound(lo, sizeof lo, s->lo);
  fmt_bound(hi, sizeof hi, s->hi);
  switch (s->kind) {
  case ARG_INT:
  case ARG_I64:
    snprintf(dst, n, "must be an integer in [%s, %s]%s", lo, hi, s->choices ? " or auto" : "");
    break;
  case ARG_DOUBLE: snprintf(dst, n, "must be a finite number in [%s, %s]", lo, hi); break;
  case ARG_COUNT: snprintf(dst, n, "must be a count in [%s, %s], e.g. 7.5e9, 7B, 124M, 350K", lo, hi); break;
  case ARG_STR: snprintf(dst, n, "must be non-empty text"); break;
  case ARG_CHOICE: snprintf(dst, n, "must be one of %s", s->choices ? s->choices : ""); break;
  case ARG_FLAG: snprintf(dst, n, "takes no value"); break;
  }
}

/* Strict integer: optional sign then digits only; 0 on success. */
static int parse_i64(const char *s, int64_t *out) {
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  if (!*p) return 1;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return 1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE || *end) return 1;
  *out = (int64_t)v;
  return 0;
}

/* Is choice c one of "a|b|c"? */
static int in_choices(const char *choices, const char *c) {
  size_t len = strlen(c);
  if (!choices || len == 0) return 0;
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t k = bar ? (size_t)(bar - p) : strlen(p);
    if (k == len && strncmp(p, c, k) == 0) return 1;
    if (!bar) break;
    p = bar + 1;
  }
  return 0;
}

/* Validate value for spec s and store it; 0 on success, else prints the error and returns 2. */
static int store(const arg_spec_t *s, const char *value) {
  char allowed[256];
  allowed_text(s, allowed, sizeof allowed);
  switch (s->kind) {
  case ARG_INT:
  case ARG_I64: {
    int64_t v;
    double lo = s->lo, hi = s->hi;
    if (s->kind == ARG_INT) { /* the destination is an int, whatever the spec says */
      if (lo < INT_MIN) lo = INT_MIN;
      if (hi > INT_MAX) hi = INT_MAX;
    }
    /* ARG_INT "auto" */
    if (s->choices && in_choices(s->choices, value) && strcmp(value, "auto") == 0) v = -1;
    else if (parse_i64(value, &v) || (double)v < lo || (double)v > hi)
      return args_error(s->flag, value, "%s", allowed);
    if (s->kind == ARG_INT) *(int *)s->dst = (int)v;
    else *(int64_t *)s->dst = v;
    return 0;
  }
  case ARG_DOUBLE: {
    double v;
    char *end;
    errno = 0;
    v = strtod(value, &end);
    if (end == value || *end || errno == ERANGE || !isfinite(v) || v < s->lo || v > s->hi)
      return args_error(s->flag, value, "%s", allowed);
    /* strtod takes "nan", "inf", "0x1p3": refuse anything that is not plain decimal */
    for (const char *p = value; *p; p++)
      if (!strchr("0123456789.+-eE", *p)) return args_error(s->flag, value, "%s", allowed);
    *(double *)s->dst = v;
    return 0;
  }
  case ARG_COUNT: {
    double v;
    if (args_parse_count(value, &v) || v < s->lo || v > s->hi)
      return args_error(s->flag, value, "%s", allowed);
    *(double *)s->dst = v;
    return 0;
  }
  case ARG_STR:
    if (!*value) return args_error(s->flag, value, "%s", allowed);
    *(const char **)s->dst = value;
    return 0;
  case ARG_CHOICE:
    if (!in_choices(s->choices, value)) return args_error(s->flag, value, "%s", allowed);
    *(const char **)s->dst = value;
    return 0;
  case ARG_FLAG: return args_error(s->flag, value, "%s", allowed);
  }
  return args_error(s->flag, value, "bad argument spec");
}

#define ARGS_MAX_SPECS 256

int args_parse(int argc, char **argv, const arg_spec_t *specs, int nspecs, const char *prog,
               const char *about) {
  if (nspecs > ARGS_MAX_SPECS)
    return args_error(prog, NULL, "too many flags (%d > %d)", nspecs, ARGS_MAX_SPECS);
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (args_env_rank() == 0) args_usage(specs, nspecs, prog, about);
      return 1;
    }
  unsigned char seen[ARGS_MAX_SPECS] = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0 || a[2] == 0)
      return args_error(a, NULL, "unexpected argument (flags start with --, see --help)");
    /* --flag=value or --flag value */
    const char *eq = strchr(a, '=');
    size_t flen = eq ? (size_t)(eq - a) : strlen(a);
    const arg_spec_t *s = NULL;
    int si = -1;
    for (int k = 0; k < nspecs; k++)
      if (strlen(specs[k].flag) == flen && strncmp(specs[k].flag, a, flen) == 0) {
        s = &specs[k];
        si = k;
        break;
      }
    if (!s) {
      char name[128];
      snprintf(name, sizeof name, "%.*s", (int)(flen < 120 ? flen : 120), a);
      return args_error(name, NULL, "unknown flag (see --help)");
    }
    const char *value = NULL;
    if (eq) value = eq + 1;
    else if (s->kind != ARG_FLAG) {
      /* a following "--x" is the next flag, not a value; "-1" is a value */
      if (i + 1 >= argc || (strncmp(argv[i + 1], "--", 2) == 0 && argv[i + 1][2] != 0))
        return args_error(s->flag, NULL, "missing value");
      value = argv[++i];
    }
    if (seen[si]) return args_error(s->flag, value, "given more than once");
    seen[si] = 1;
    if (s->kind == ARG_FLAG && !value) {
      *(int *)s->dst = 1;
      continue;
    }
    if (store(s, value)) return 2;
  }
  return 0;
}

/* The placeholder and the current (default) value of a spec, for the usage text. */
static void usage_parts(const arg_spec_t *s, char *meta, size_t nm, char *dflt, size_t nd) {
  char lo[48], hi[48];
  fmt_bound(lo, sizeof lo, s->lo);
  fmt_bound(hi, sizeof hi, s->hi);
  dflt[0] = 0;
  switch (s->kind) {
  case ARG_INT:
    snprintf(meta, nm, "N");
    if (s->choices && *(int *)s->dst == -1)
      snprintf(dflt, nd, "default auto; integer in [%s, %s] or auto", lo, hi);
    else snprintf(dflt, nd, "default %d; integer in [%s, %s]", *(int *)s->dst, lo, hi);
    break;
  case ARG_I64:
    snprintf(meta, nm, "N");
    snprintf(dflt, nd, "default %lld; integer in [%s, %s]", (long long)*(int64_t *)s->dst, lo, hi);
    break;
  case ARG_DOUBLE:
    snprintf(meta, nm, "X");
    snprintf(dflt, nd, "default %g; in [%s, %s]", *(double *)s->dst, lo, hi);
    break;
  case ARG_COUNT:
    snprintf(meta, nm, "COUNT");
    snprintf(dflt, nd, "default %g; in [%s, %s]; suffix K M B/G T", *(double *)s->dst, lo, hi);
    break;
  case ARG_STR: {
    const char *v = *(const char **)s->dst;
    snprintf(meta, nm, "TEXT");
    if (v) snprintf(dflt, nd, "default %s", v);
    break;
  }
  case ARG_CHOICE: {
    const char *v = *(const char **)s->dst;
    snprintf(meta, nm, "%s", s->choices ? s->choices : "");
    if (v) snprintf(dflt, nd, "default %s", v);
    break;
  }
  case ARG_FLAG: meta[0] = 0; break;
  }
}

void args_usage(const arg_spec_t *specs, int nspecs, const char *prog, const char *about) {
  printf("usage: %s [flags]\n", prog);
  if (about && *about) printf("%s\n", about);
  printf("\nflags:\n");
  for (int k = 0; k < nspecs; k++) {
    char meta[256], dflt[256], left[320];
    usage_parts(&specs[k], meta, sizeof meta, dflt, sizeof dflt);
    snprintf(left, sizeof left, "%s%s%s", specs[k].flag, meta[0] ? " " : "", meta);
    printf("  %-26s %s", left, specs[k].help ? specs[k].help : "");
    if (dflt[0]) printf(" (%s)", dflt);
    printf("\n");
  }
  printf("  %-26s %s\n", "--help", "this text");
  fflush(stdout);
}

const char *args_given(int argc, char **argv, const char *flag) {
  size_t n = strlen(flag);
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], flag, n) != 0) continue;
    if (argv[i][n] == '=') return argv[i] + n + 1;
    if (argv[i][n] == 0) return i + 1 < argc ? argv[i + 1] : "";
  }
  return NULL;
}

int args_parse_nccl(int argc, char **argv, const arg_spec_t *specs, int nspecs, const char *prog,
                    const char *about) {
  static const char *const map[][2] = {{"-b", "--minbytes"}, {"-e", "--maxbytes"}, {"-f", "--stepfactor"},
                                       {"-n", "--iters"},    {"-w", "--warmup_iters"}, {"-c", "--check"},
                                       {"-d", "--dtype"},    {"-r", "--root"}};
  char **av = malloc((size_t)(argc + 1) * sizeof *av);
  if (!av) return args_error("argv", "", "out of memory copying %d arguments", argc);
  for (int i = 0; i < argc; i++) {
    av[i] = argv[i];
    for (size_t k = 0; i > 0 && k < sizeof map / sizeof map[0]; k++)
      if (strcmp(argv[i], map[k][0]) == 0) av[i] = (char *)map[k][1];
  }
  av[argc] = NULL;
  int rc = args_parse(argc, av, specs, nspecs, prog, about);
  free(av);
  return rc;
}

int args_byte_range(const char *minb_s, const char *maxb_s, int64_t *minb, int64_t *maxb) {
  if (args_parse_bytes(minb_s, minb) || *minb < 1)
    return args_error("-b", minb_s, "must be a byte count >= 1 like 4096, 4K, 64M, 1G (K = 1024)");
  if (args_parse_bytes(maxb_s, maxb) || *maxb < *minb)
    return args_error("-e", maxb_s, "must be a byte count like 64M, and at least -b (%s)", minb_s);
  return 0;
}
