/* cpuuse.c — per-thread CPU time from /proc (see cpuuse.h). */
#include "cpuuse.h"
#include <dirent.h> // opendir, readdir: the threads under /proc/self/task
#include <stdio.h>  // fopen, fscanf, snprintf
#include <string.h> // strrchr
#include <unistd.h> // getpid, sysconf(_SC_CLK_TCK)

/* Fields 14, 15 (utime, stime) and 22 (starttime) of a /proc stat line, in clock ticks; the
 * command name (field 2) may hold spaces, so parsing starts after its closing parenthesis. */
static int stat_ticks(const char *path, double *cpu, double *start) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[1024];
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = 0;
  const char *p = strrchr(line, ')');
  if (!p) return 0;
  unsigned long long ut = 0, stt = 0, st0 = 0;
  /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15)
   * cutime cstime priority nice num_threads itrealvalue starttime(22) */
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu",
             &ut, &stt, &st0) != 3)
    return 0;
  *cpu = (double)(ut + stt);
  if (start) *start = (double)st0;
  return 1;
}

cpuuse_t cpuuse_now(void) {
  cpuuse_t u = {0};
  double hz = (double)sysconf(_SC_CLK_TCK);
  if (hz <= 0) return u;
  double cpu = 0, start = 0, up = 0;
  FILE *f = fopen("/proc/uptime", "r");
  if (f) {
    if (fscanf(f, "%lf", &up) != 1) up = 0;
    fclose(f);
  }
  if (stat_ticks("/proc/self/stat", &cpu, &start) && up > 0) u.wall_s = up - start / hz;
  DIR *d = opendir("/proc/self/task");
  if (!d) return u;
  int pid = (int)getpid();
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    if (!stat_ticks(path, &cpu, NULL)) continue;
    u.nthreads++;
    double s = cpu / hz;
    int tid = 0;
    sscanf(e->d_name, "%d", &tid);
    if (tid == pid) u.main_cpu_s = s;
    else {
      u.other_cpu_s += s;
      if (s > u.max_other_cpu_s) u.max_other_cpu_s = s;
    }
  }
  closedir(d);
  return u;
}
