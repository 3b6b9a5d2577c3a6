/* comm_engine.h — one progress engine per rank: the thread that runs every MPI-backend
 * communicator's stream (the world, and every TP / PP / DP sub-communicator split from it).
 * Notes: notes/design.md (the stream model).
 *
 * Each communicator keeps the contract of comm.h (its own queue, issue order, handles,
 * deadlines, counters, traces); what changes is who runs it. Instead of a thread per
 * communicator (a rank at TP x PP x DP had 1 + its communicators threads), the rank has ONE
 * engine thread, and each communicator's stream is a fiber (a user-level context with its own
 * stack) on it. A fiber runs its tasks in order; where a task would block — waiting for an MPI
 * request — it tests the request and, if it is not done, yields to the next fiber. When a
 * whole round of fibers made no progress, the engine backs off: a few rounds of pure tests,
 * then sleeps doubling from 1 us to 200 us (a new task wakes it at once) — unless the main
 * thread is blocked in comm_wait and every rank of the machine has a core of its own: then the
 * engine tests again at once (sched_yield between rounds), since the core would idle anyway and a
 * sleep delays the message the rank waits for (comm_engine.c: engine_poll_allowed). When no fiber has
 * work the engine sleeps on a condition until a task is queued. So the ENGINE's waiting costs a
 * test per fiber per sleep, not a core; and since every MPI call it makes is nonblocking, a
 * communicator blocked on its peer never holds up another one.
 *
 * One exception: the vendor reductions (MPI_Allreduce, MPI_Reduce_scatter, MPI_Reduce) run as
 * the blocking MPI call on the communicator's helper thread (created at its first such call),
 * while its fiber waits and the engine sleeps until the helper wakes it. The helper's wait is
 * Open MPI's, not ours: inside a blocking call Open MPI polls its transports in a loop — a spinning
 * core — unless mpi_yield_when_idle is set, and then it yields between polls (zlrun sets it when
 * the ranks' threads outnumber the cores). So with vendor reductions a waiting rank may spin one
 * helper per busy communicator; the report prints the helpers' CPU seconds (helper_cpu_s) beside
 * the engine's and the main thread's, so the cost is measured, not assumed. Open MPI's nonblocking
 * reductions add in another order than its blocking ones once a group has 3 or more ranks, so
 * the blocking call keeps the results bitwise what they were; at 2 ranks (a+b either way) the
 * nonblocking one was slower when progressed by tests (comm_mpi.c has the numbers). (Only with
 * MPI_THREAD_MULTIPLE, which Open MPI gives; with less, the nonblocking reduction runs instead.)
 *
 * Threads per rank on the MPI backend: the main thread + 1 engine thread + Open MPI's own
 * (2 here), + 1 helper per communicator that runs vendor reductions — the world and the
 * rank's groups (TP, DP, a pipeline's control group), a handful whatever the grid; never a
 * pipeline link. So the count stays bounded whatever TP x PP x DP (tests/mpi/test_engine.c
 * checks it; the report prints it). */
#ifndef ZL_COMM_ENGINE_H
#define ZL_COMM_ENGINE_H
#include <stdint.h> // int64_t

/* What the rank's waiting cost, since the process started (all seconds of wall clock unless
 * named cpu). Read at any time (values are a consistent-enough snapshot for a report). */
typedef struct comm_engine_stats {
  int engine_threads;      /* engine threads running now (0 or 1) */
  int helper_threads;      /* helpers of >= 3-rank communicators' blocking reductions, now */
  int fibers;              /* communicator streams on the engine now */
  int fibers_peak;         /* ... the most at once */
  double engine_busy_s;    /* engine thread: inside fibers (MPI calls, tests, copies, ring reductions) */
  double engine_sleep_s;   /* engine thread: asleep (backing off, or no work) */
  double engine_cpu_s;     /* engine thread: CPU seconds (CLOCK_THREAD_CPUTIME_ID), summed over its lives */
  double helper_cpu_s;     /* helper threads: CPU seconds (may spin inside Open MPI's blocking reductions) */
  double engine_poll_s;    /* engine thread: testing without sleeps while the main thread waited */
  int poll_when_waited;    /* 1: the engine polls while the main thread waits (a core per rank) */
  double main_wait_s;      /* callers (the main thread) blocked in comm_wait / comm_wait_all */
  int64_t sleeps;          /* backoff sleeps taken by the engine */
  int64_t tests;           /* MPI_Testall calls made by fibers */
} comm_engine_stats_t;

comm_engine_stats_t comm_engine_stats(void);
#endif
