/* cpuuse.h — where a rank's CPU goes: the CPU time of each of its threads (Linux /proc).
 * On a box with one core per rank a thread that waits by polling takes the core from the one
 * that computes; this makes that visible (the report prints it, --json carries it). Notes:
 * notes/design.md (the stream model). */
#ifndef ZL_CPUUSE_H
#define ZL_CPUUSE_H

typedef struct cpuuse {
  int nthreads;       /* threads of this process now (main, comm threads, MPI's and BLAS's own) */
  double wall_s;      /* seconds since the process started */
  double main_cpu_s;  /* CPU seconds (user + system) of the main thread: compute, and its waits */
  double other_cpu_s; /* CPU seconds of all other threads together (comm threads, MPI progress) */
  double max_other_cpu_s; /* ... and of the busiest one of them */
} cpuuse_t;

/* This process's threads and their CPU time, from /proc/self/task/<tid>/stat (utime + stime).
 * All zero where /proc is not there (the report then prints zeros, it never fails). */
cpuuse_t cpuuse_now(void);
#endif
