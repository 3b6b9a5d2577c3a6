/* outfile.c — the run's output files (outfile.h): written atomically (a temp file renamed over
 * the path, or in place for a device such as /dev/null), a failed write an error naming the flag
 * and the file; outfile_problem says why a path cannot be written before anything runs. */
#include "outfile.h"  // outfile_problem, outfile_open, outfile_close, outfile_write
#include "check.h"    // die
#include <errno.h>    // errno, ENOENT
#include <stdio.h>    // snprintf, fopen, rename
#include <string.h>   // strrchr, strerror
#include <sys/stat.h> // stat, S_ISDIR, S_ISREG
#include <unistd.h>   // getpid, access

/* "dir of path" into dst ("." when path has no slash, "/" for a file at the root). */
static void dir_of(const char *path, char *dst, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dst, n, ".");
  else if (slash == path) snprintf(dst, n, "/");
  else snprintf(dst, n, "%.*s", (int)(slash - path), path);
}

/* (outfile.h) Why path cannot be written (0 when it can): is_dir 1 for a directory we create or fill
 * (--ckpt),
 * 0 for a file written as a temp file beside it and renamed, or in place when it is not a regular
 * file (/dev/null). */
int outfile_problem(const char *path, int is_dir, char *why, size_t n) {
  struct stat st;
  char dir[4096];
  if (stat(path, &st) == 0) {
    if (is_dir) {
      if (!S_ISDIR(st.st_mode)) return snprintf(why, n, "must be a directory (it is a file)"), 1;
      if (access(path, W_OK | X_OK) != 0)
        return snprintf(why, n, "must be a writable directory (%s)", strerror(errno)), 1;
      return 0;
    }
    if (S_ISDIR(st.st_mode)) return snprintf(why, n, "must be a file path (it is a directory)"), 1;
    if (!S_ISREG(st.st_mode)) { /* a device or a pipe: written in place */
      if (access(path, W_OK) != 0) return snprintf(why, n, "must be writable (%s)", strerror(errno)), 1;
      return 0;
    }
  } else if (errno != ENOENT) {
    return snprintf(why, n, "must be a writable path (%s)", strerror(errno)), 1;
  }
  dir_of(path, dir, sizeof dir); /* a new file, or a regular file replaced by a rename: its directory */
  if (stat(dir, &st) != 0)
    return snprintf(why, n, "must be in an existing directory (%s: %s)", dir, strerror(errno)), 1;
  if (!S_ISDIR(st.st_mode)) return snprintf(why, n, "must be in a directory (%s is not one)", dir), 1;
  if (access(dir, W_OK | X_OK) != 0)
    return snprintf(why, n, "must be in a writable directory (%s: %s)", dir, strerror(errno)), 1;
  return 0;
}

FILE *outfile_open(const char *what, const char *path, char *tmp, size_t ntmp) {
  struct stat st;
  tmp[0] = 0;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    FILE *f = fopen(path, "wb"); /* /dev/null, a pipe: in place (a rename would replace the node) */
    if (!f) die("error: %s %s: cannot open it for writing: %s", what, path, strerror(errno));
    return f;
  }
  snprintf(tmp, ntmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f)
    die("error: %s %s: cannot write it: %s (check the directory exists and is writable)", what, path,
        strerror(errno));
  return f;
}

void outfile_close(FILE *f, const char *what, const char *path, const char *tmp) {
  int bad = ferror(f), err = 0;
  if (fflush(f) != 0) bad = 1;
  if (bad) err = errno;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (!bad && tmp[0] && rename(tmp, path) != 0) bad = 1, err = errno;
  if (bad) {
    if (tmp[0]) remove(tmp);
    die("error: %s %s: writing it failed: %s", what, path, err ? strerror(err) : "I/O error");
  }
}

void outfile_write(const char *what, const char *path, const char *text, int64_t nbytes) {
  char tmp[4200];
  FILE *f = outfile_open(what, path, tmp, sizeof tmp);
  if (nbytes > 0) fwrite(text, 1, (size_t)nbytes, f); /* a short write sets the error flag */
  outfile_close(f, what, path, tmp);
}

