/* outfile.h — writing a run's output files so that a failure never leaves a half-written file
 * where the user's was: a temp file beside the path (PATH.tmp.PID) renamed over it, or in place
 * when the path exists and is not a regular file (/dev/null, a pipe: a rename would replace the
 * node). Any failure stops the job with `error: WHAT PATH: ...` (WHAT: the flag, "--json", ...).
 * Layer: base (includes check.h only). */
#ifndef ZL_OUTFILE_H
#define ZL_OUTFILE_H
#include <stddef.h> // size_t
#include <stdint.h> // int64_t
#include <stdio.h>  // FILE

/* Why path cannot be written (0 when it can; else 1 and a phrase in why, e.g. "must be in an
 * existing directory (d: No such file or directory)"). is_dir 1: a directory created or filled
 * (--ckpt); 0: a file written through a temp file beside it, or in place when not regular. */
int outfile_problem(const char *path, int is_dir, char *why, size_t n);
/* Write nbytes of text to path, atomically as above. */
void outfile_write(const char *what, const char *path, const char *text, int64_t nbytes);
/* The same, streamed: open (tmp receives the temp name, or "" when writing in place), fprintf
 * into the FILE, close (flush, rename; dies naming WHAT and path on any error). */
FILE *outfile_open(const char *what, const char *path, char *tmp, size_t ntmp);
void outfile_close(FILE *f, const char *what, const char *path, const char *tmp);
#endif
