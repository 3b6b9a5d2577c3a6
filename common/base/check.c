/* check.c — fatal-error reporting that takes the whole job down (see check.h). */
#include "check.h"  // check_fail, die, xmalloc
#include "args.h"   // args_env_rank (the launcher's rank before comm_init)
#include <stdarg.h> // va_list
#include <stdio.h>  // fprintf
#include <stdlib.h> // exit, malloc

static int g_rank = -1;

/* Before comm_init the launcher's word (0 for a process started alone): never -1 in a message. */
int check_rank(void) { return g_rank >= 0 ? g_rank : args_env_rank(); }
void check_set_rank(int rank) { g_rank = rank; }

static _Noreturn void abort_job(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  fflush(stdout);
  fflush(stderr);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

void check_fail(const char *file, int line, const char *call, const char *msg) {
  fprintf(stderr, "rank %d %s:%d %s: %s\n", check_rank(), file, line, call, msg);
  abort_job(1);
}

/* The message of die/die_on_rank, prefixed with `rank R: ` when with_rank is set; then the job ends. */
static _Noreturn void die_va(int with_rank, const char *fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  if (with_rank) fprintf(stderr, "rank %d: %s\n", check_rank(), buf);
  else fprintf(stderr, "%s\n", buf);
  abort_job(1);
}

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  die_va(0, fmt, ap);
}

void die_on_rank(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  die_va(1, fmt, ap);
}

void *xmalloc(size_t nbytes, const char *what) {
  void *p = malloc(nbytes ? nbytes : 1);
  if (!p) die("out of memory on rank %d: %s needs %.1f MiB", check_rank(), what, nbytes / 1048576.0);
  return p;
}

void *xrealloc(void *old, size_t nbytes, const char *what) {
  void *p = realloc(old, nbytes ? nbytes : 1);
  if (!p) die("out of memory on rank %d: %s needs %.1f MiB", check_rank(), what, nbytes / 1048576.0);
  return p;
}

void *xcalloc(size_t n, size_t size, const char *what) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    die("out of memory on rank %d: %s needs %.1f MiB", check_rank(), what, (double)n * size / 1048576.0);
  return p;
}
