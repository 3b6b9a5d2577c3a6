/* zl_scn.h — what the tests/mpi/scn_* programs (one mpirun launch each, driven by a Criterion
 * test) share: fail() prints one "FAIL rank R: ..." line per failure (the first ZL_SCN_MAX_LINES of
 * them) and counts every one in g_fails; g_rank is set by the program after comm_init. */
#ifndef ZL_SCN_H
#define ZL_SCN_H
#include <stdarg.h> // va_list
#include <stdio.h>  // printf, vprintf, fflush

#ifndef ZL_SCN_MAX_LINES
#define ZL_SCN_MAX_LINES 30
#endif

static int g_rank, g_fails, g_lines;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  g_fails++;
  if (g_lines++ >= ZL_SCN_MAX_LINES) return;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL rank %d: ", g_rank);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}
#endif
