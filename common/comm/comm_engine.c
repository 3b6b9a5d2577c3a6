/* comm_engine.c — the rank's one progress engine (see comm_engine.h): a thread that runs each
 * communicator's stream as a fiber (ucontext), backing off when nothing moves.
 *
 * Locks: e.mu guards the fiber list and the engine's state; a communicator's c->mu guards its
 * queue. Order: c->mu before e.mu (comm_engine_wake is called under c->mu), never the reverse.
 * A fiber's `runnable` flag is set under c->mu by the submitter (work queued) and cleared under
 * c->mu by the fiber itself (queue empty), so a wake is never lost. */
#include "comm_engine.h"   // comm_engine_stats_t
#include "comm_internal.h" // struct comm, comm_engine_* (internal part)
#include "check.h"         // die_on_rank, xcalloc
#include "fiber_san.h"     // san_leave, san_arrived: the switches told to ASan and TSan
#include <stdatomic.h>     // atomic_int: runnable, flags read by the engine without c->mu
#include <stdlib.h>        // free, getenv, atoi
#include <sys/mman.h>      // mmap, munmap, mprotect: fiber stacks with a guard page
#include <sched.h>         // sched_yield, sched_getaffinity, CPU_COUNT
#include <time.h>          // clock_gettime, CLOCK_THREAD_CPUTIME_ID
#include <ucontext.h>      // ucontext_t, makecontext, swapcontext
#ifdef __SANITIZE_ADDRESS__ /* make test-sanitize: fiber switches told to the sanitizers (below) */
#include <sanitizer/common_interface_defs.h> // __sanitizer_start_switch_fiber, ..._finish_...
#endif
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h> // __tsan_create_fiber, __tsan_switch_to_fiber, ...
#endif

enum { ENGINE_SPIN_ROUNDS = 64 };          /* rounds of pure tests before the first sleep */
#define ENGINE_BACKOFF_MIN_NS 1000L
#define ENGINE_BACKOFF_MAX_NS 200000L
#define FIBER_STACK_BYTES ((size_t)1 << 20) /* 1 MiB, touched lazily; CUDA staging calls run here */
/* A wait keeps the engine testing without sleeps for max(ENGINE_SPIN_MIN_S, task bytes /
 * ENGINE_SPIN_BYTES_PER_S): Open MPI moves a large shared-memory message a fragment per test, so
 * sleeping between tests would cap its bandwidth (64 KiB per 200 us sleep = 0.3 GB/s); a peer
 * that is simply late (a pipeline bubble) costs at most that long of tests before the sleeps. */
#define ENGINE_SPIN_MIN_S 50e-6
#define ENGINE_SPIN_BYTES_PER_S 0.25e9

/* A thread that runs one communicator's blocking MPI reductions (comm_engine_run_blocking). */
typedef struct blocking_helper {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void (*fn)(void *);
  void *arg;
  int stop;
  atomic_int busy; /* 1 from posting a call until it returned */
} blocking_helper_t;

struct comm_fiber {
  comm_t *c;
  blocking_helper_t *helper; /* created at the first comm_engine_run_blocking, NULL before */
  void (*body)(comm_t *);
  ucontext_t ctx;
  void *stack;
  void *san_fake;       /* AddressSanitizer's fake stack of this fiber while it is switched out */
  void *san_tsan;       /* ThreadSanitizer's fiber (NULL unless built with it) */
  atomic_int runnable;  /* has work (or is inside a task): the engine resumes it */
  double spin_s;        /* the running task's spin budget per wait (comm_engine_task_bytes) */
  double spin_until;    /* the current wait keeps the engine hot until then; 0: not waiting */
  int progressed;       /* set by the fiber during its turn: a test succeeded or a task ended */
  int on_helper;        /* waiting for its helper's blocking call: nothing to test meanwhile */
  int finished;         /* its body returned (TASK_STOP): never resumed again */
  int reaped;           /* the engine has let go of it: comm_engine_detach may free it */
  struct comm_fiber *next;
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* work queued (wake), a fiber reaped, the engine stopped */
  pthread_t thread;
  int running;             /* the engine thread exists */
  int stop;                /* asked to exit once no fiber is left */
  int wake;                /* a wake came since the engine last looked */
  struct comm_fiber *fibers;
  int nfibers, peak, helpers;
  ucontext_t sched;        /* the engine's own context, which fibers yield to */
  const void *sched_bottom; /* its stack, for AddressSanitizer (learnt at a fiber's first start) */
  size_t sched_size;
  void *sched_fake, *sched_tsan; /* AddressSanitizer's fake stack, ThreadSanitizer's fiber of it */
  double busy_s, sleep_s, cpu_s_done, main_wait_s, poll_s;
  double helper_cpu_s_done; /* CPU seconds of the helpers that have exited */
  atomic_int main_waiting; /* threads blocked in comm_wait: the rank has nothing else to run */
  int poll_when_waited;    /* engine_poll_allowed(), decided when the thread starts */
  int64_t sleeps;
  atomic_llong tests;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local struct comm_fiber *g_current; /* the fiber running on this thread, or NULL */
static pthread_once_t g_cv_once = PTHREAD_ONCE_INIT;

static void engine_cv_init(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&E.cv, &ca);
  pthread_condattr_destroy(&ca);
}

static double now_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the sanitizers and the fibers (make test-sanitize) --------------------------------------
 * A switch of stacks by swapcontext is invisible to AddressSanitizer and ThreadSanitizer unless
 * told: ASan would take the other stack's frames for overflows, TSan would mix up the two
 * contexts' histories. So each switch says where it goes (san_leave, before swapcontext) and that it
 * arrived (san_arrived, after): common/base/fiber_san.h, shared with loop_fb.c. */

/* ---- inside a fiber ------------------------------------------------------------------------ */
int comm_engine_in_fiber(void) { return g_current != NULL; }

static void fiber_yield(void) {
  struct comm_fiber *f = g_current;
  san_leave(&f->san_fake, E.sched_bottom, E.sched_size, E.sched_tsan);
  swapcontext(&f->ctx, &E.sched);
  san_arrived(f->san_fake, NULL, NULL);
  g_current = f; /* resumed on the engine thread (the only one) */
}

void comm_engine_block(void) {
  struct comm_fiber *f = g_current;
  if (!f) return;
  double now = now_s(CLOCK_MONOTONIC);
  if (f->spin_until == 0) f->spin_until = now + (f->spin_s > 0 ? f->spin_s : ENGINE_SPIN_MIN_S);
  if (now < f->spin_until) f->progressed = 1; /* a large message is moving: no sleep yet */
  fiber_yield();
}

void comm_engine_progress(void) {
  if (!g_current) return;
  g_current->progressed = 1;
  g_current->spin_until = 0;
}

void comm_engine_task_bytes(comm_t *c, int64_t bytes) {
  struct comm_fiber *f = c->fiber;
  if (!f) return;
  double s = (double)bytes / ENGINE_SPIN_BYTES_PER_S;
  f->spin_s = s > ENGINE_SPIN_MIN_S ? s : ENGINE_SPIN_MIN_S;
}

void comm_engine_count_test(void) { atomic_fetch_add_explicit(&E.tests, 1, memory_order_relaxed); }

void comm_engine_idle(comm_t *c) { /* called with c->mu held, queue empty */
  struct comm_fiber *f = c->fiber;
  atomic_store(&f->runnable, 0);
  pthread_mutex_unlock(&c->mu);
  fiber_yield();
  pthread_mutex_lock(&c->mu);
}

void comm_engine_wake(comm_t *c) { /* called with c->mu held, a task queued */
  struct comm_fiber *f = c->fiber;
  if (atomic_exchange(&f->runnable, 1)) return; /* already runnable: the engine will get to it */
  pthread_mutex_lock(&E.mu);
  E.wake = 1;
  pthread_cond_signal(&E.cv);
  pthread_mutex_unlock(&E.mu);
}

static void fiber_start(void) {
  san_arrived(NULL, &E.sched_bottom, &E.sched_size); /* the engine's stack: where yields go */
  struct comm_fiber *f = g_current;
  f->body(f->c);
  f->finished = 1;
  f->progressed = 1;
  san_leave(NULL, E.sched_bottom, E.sched_size, E.sched_tsan); /* this stack ends here */
  swapcontext(&f->ctx, &E.sched); /* never resumed */
}

/* ---- blocking reductions on a helper (see comm_engine.h) ----------------------------------- */
static void *helper_main(void *arg) {
  blocking_helper_t *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!h->fn && !h->stop) pthread_cond_wait(&h->cv, &h->mu);
    if (h->stop) break;
    void (*fn)(void *) = h->fn;
    pthread_mutex_unlock(&h->mu);
    fn(h->arg);
    pthread_mutex_lock(&h->mu);
    h->fn = NULL;
    atomic_store(&h->busy, 0);
    pthread_mutex_lock(&E.mu); /* the engine may sleep until this call returns: wake it */
    E.wake = 1;
    pthread_cond_signal(&E.cv);
    pthread_mutex_unlock(&E.mu);
  }
  pthread_mutex_unlock(&h->mu);
  struct timespec ts; /* this helper's CPU: Open MPI may spin inside the blocking call (report) */
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  pthread_mutex_lock(&E.mu);
  E.helper_cpu_s_done += (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  pthread_mutex_unlock(&E.mu);
  return NULL;
}

void comm_engine_run_blocking(comm_t *c, void (*fn)(void *), void *arg) {
  struct comm_fiber *f = g_current;
  if (!f || f->c != c) { /* not on the engine: the caller's own thread may block */
    fn(arg);
    return;
  }
  blocking_helper_t *h = f->helper;
  if (!h) {
    h = xcalloc(1, sizeof *h, "comm blocking helper");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->thread, NULL, helper_main, h) != 0)
      die_on_rank("comm: cannot start the helper thread of a %d-rank communicator", c->world);
    f->helper = h;
    pthread_mutex_lock(&E.mu);
    E.helpers++;
    pthread_mutex_unlock(&E.mu);
  }
  atomic_store(&h->busy, 1);
  pthread_mutex_lock(&h->mu);
  h->fn = fn;
  h->arg = arg;
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
  f->on_helper = 1;
  while (atomic_load(&h->busy)) fiber_yield(); /* the other streams go on meanwhile */
  f->on_helper = 0;
  f->progressed = 1;
}

static void helper_stop(struct comm_fiber *f) {
  blocking_helper_t *h = f->helper;
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->stop = 1;
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->thread, NULL);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
  f->helper = NULL;
  pthread_mutex_lock(&E.mu);
  E.helpers--;
  pthread_mutex_unlock(&E.mu);
}

/* ---- the engine thread --------------------------------------------------------------------- */
/* Sleep on E.cv until a wake, or for ns nanoseconds when ns > 0. Called with E.mu held. */
static void engine_sleep(long ns) {
  double t0 = now_s(CLOCK_MONOTONIC);
  if (ns <= 0) {
    while (!E.wake && !E.stop) pthread_cond_wait(&E.cv, &E.mu);
  } else if (!E.wake) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += ns;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&E.cv, &E.mu, &dl);
    E.sleeps++;
  }
  E.sleep_s += now_s(CLOCK_MONOTONIC) - t0;
}

/* May the engine test without sleeping while the main thread waits? Only when every rank of
 * this machine has a core of its own: then the waiting rank's core has nothing else to run. With
 * more ranks than cores, a polling engine would take the core from another rank's compute, so it
 * backs off as usual. ZL_ENGINE_POLL=1|0 decides (zlrun sets it from the ranks on this machine,
 * emulated nodes included); else Open MPI's local rank count against the cores we may run on. */
static int engine_poll_allowed(void) {
  const char *e = getenv("ZL_ENGINE_POLL");
  if (e && *e) return atoi(e) != 0;
  const char *n = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!n) n = getenv("MPI_LOCALNRANKS"); /* MPICH */
  cpu_set_t set;
  if (!n || sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return atoi(n) >= 1 && atoi(n) <= CPU_COUNT(&set);
}

static void *engine_main(void *arg) {
  (void)arg;
  long backoff = ENGINE_BACKOFF_MIN_NS;
  int quiet_rounds = 0;
  int poll = engine_poll_allowed();
#ifdef __SANITIZE_THREAD__
  E.sched_tsan = __tsan_get_current_fiber(); /* the engine thread's own, which fibers switch back to */
#endif
  pthread_mutex_lock(&E.mu);
  E.poll_when_waited = poll;
  for (;;) {
    E.wake = 0;
    /* one round: resume every runnable fiber once (the list only grows at its head, under E.mu,
     * and only the engine removes from it, so walking it unlocked is safe) */
    struct comm_fiber *head = E.fibers;
    pthread_mutex_unlock(&E.mu);
    int any_runnable = 0, any_testing = 0, progressed = 0, reap = 0;
    double t0 = now_s(CLOCK_MONOTONIC);
    for (struct comm_fiber *f = head; f; f = f->next) {
      if (f->finished || !atomic_load(&f->runnable)) continue;
      any_runnable = 1;
      f->progressed = 0;
      g_current = f;
      san_leave(&E.sched_fake, f->ctx.uc_stack.ss_sp, f->ctx.uc_stack.ss_size, f->san_tsan);
      swapcontext(&E.sched, &f->ctx);
      san_arrived(E.sched_fake, NULL, NULL);
      g_current = NULL;
      progressed |= f->progressed;
      reap |= f->finished;
      any_testing |= !f->on_helper && !f->finished;
    }
    double t1 = now_s(CLOCK_MONOTONIC);
    pthread_mutex_lock(&E.mu);
    E.busy_s += t1 - t0;
    if (reap) { /* let comm_engine_detach free the fibers that ended */
      for (struct comm_fiber **p = &E.fibers; *p;) {
        struct comm_fiber *f = *p;
        if (f->finished && !f->reaped) {
          f->reaped = 1;
          *p = f->next;
          E.nfibers--;
        } else {
          p = &f->next;
        }
      }
      pthread_cond_broadcast(&E.cv);
    }
    if (E.stop && E.nfibers == 0) break;
    if (progressed || E.wake) {
      backoff = ENGINE_BACKOFF_MIN_NS;
      quiet_rounds = 0;
    } else if (!any_runnable) {
      engine_sleep(0); /* no work anywhere: until a task is queued */
      backoff = ENGINE_BACKOFF_MIN_NS;
      quiet_rounds = 0;
    } else if (!any_testing) {
      engine_sleep(0); /* every busy stream waits for its helper's blocking call: until one returns */
      backoff = ENGINE_BACKOFF_MIN_NS;
      quiet_rounds = 0;
    } else if (E.poll_when_waited && atomic_load(&E.main_waiting) > 0) {
      /* the main thread is blocked on us, so its core is idle: test again at once instead of
       * sleeping (a message that lands during a 200 us sleep waits for it: measured, the first
       * activation of a 1F1B step took 3.0 ms to arrive instead of 0.05) */
      double y0 = now_s(CLOCK_MONOTONIC);
      pthread_mutex_unlock(&E.mu);
      sched_yield();
      pthread_mutex_lock(&E.mu);
      E.poll_s += now_s(CLOCK_MONOTONIC) - y0;
      backoff = ENGINE_BACKOFF_MIN_NS;
    } else if (++quiet_rounds > ENGINE_SPIN_ROUNDS) {
      engine_sleep(backoff); /* waiting on peers: cheap sleeps, doubling */
      backoff = backoff * 2 < ENGINE_BACKOFF_MAX_NS ? backoff * 2 : ENGINE_BACKOFF_MAX_NS;
    }
  }
  E.cpu_s_done += now_s(CLOCK_THREAD_CPUTIME_ID);
  pthread_mutex_unlock(&E.mu);
  return NULL;
}

/* ---- attach / detach (the caller's thread: comm_init, comm_split, comm_finalize) ----------- */
void comm_engine_attach(comm_t *c, void (*body)(comm_t *)) {
  pthread_once(&g_cv_once, engine_cv_init);
  struct comm_fiber *f = xcalloc(1, sizeof *f, "comm fiber");
  f->c = c;
  f->body = body;
  long page = 4096;
  f->stack = mmap(NULL, FIBER_STACK_BYTES + (size_t)page, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (f->stack == MAP_FAILED)
    die_on_rank("comm: cannot map a %zu-byte stack for a communicator's stream", FIBER_STACK_BYTES);
  mprotect(f->stack, (size_t)page, PROT_NONE); /* guard page: an overflow faults, not corrupts */
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = (char *)f->stack + page;
  f->ctx.uc_stack.ss_size = FIBER_STACK_BYTES;
  f->ctx.uc_link = NULL;
  makecontext(&f->ctx, fiber_start, 0);
#ifdef __SANITIZE_THREAD__
  f->san_tsan = __tsan_create_fiber(0);
#endif
  atomic_store(&f->runnable, 1); /* first turn: it runs until its queue is empty */
  c->fiber = f;
  pthread_mutex_lock(&E.mu);
  f->next = E.fibers;
  E.fibers = f;
  if (++E.nfibers > E.peak) E.peak = E.nfibers;
  E.wake = 1;
  if (!E.running) {
    E.stop = 0;
    if (pthread_create(&E.thread, NULL, engine_main, NULL) != 0)
      die_on_rank("comm_init: cannot start the communication engine thread");
    E.running = 1;
  }
  pthread_cond_signal(&E.cv);
  pthread_mutex_unlock(&E.mu);
}

void comm_engine_detach(comm_t *c) {
  struct comm_fiber *f = c->fiber;
  if (!f) return;
  pthread_mutex_lock(&E.mu);
  while (!f->reaped) pthread_cond_wait(&E.cv, &E.mu);
  int last = E.nfibers == 0 && E.running;
  if (last) {
    E.stop = 1;
    pthread_cond_broadcast(&E.cv);
  }
  pthread_mutex_unlock(&E.mu);
  if (last) {
    pthread_join(E.thread, NULL);
    pthread_mutex_lock(&E.mu);
    E.running = 0;
    pthread_mutex_unlock(&E.mu);
  }
  helper_stop(f);
#ifdef __SANITIZE_THREAD__
  __tsan_destroy_fiber(f->san_tsan);
#endif
  munmap(f->stack, FIBER_STACK_BYTES + 4096);
  free(f);
  c->fiber = NULL;
}

void comm_engine_main_waits(int delta) { atomic_fetch_add(&E.main_waiting, delta); }

void comm_engine_note_wait(double seconds) {
  pthread_mutex_lock(&E.mu);
  E.main_wait_s += seconds;
  pthread_mutex_unlock(&E.mu);
}

comm_engine_stats_t comm_engine_stats(void) {
  comm_engine_stats_t s = {0};
  pthread_mutex_lock(&E.mu);
  s.engine_threads = E.running;
  s.helper_threads = E.helpers;
  s.fibers = E.nfibers;
  s.fibers_peak = E.peak;
  s.engine_busy_s = E.busy_s;
  s.engine_sleep_s = E.sleep_s;
  s.engine_cpu_s = E.cpu_s_done;
  if (E.running) { /* the live thread's CPU so far */
    clockid_t id;
    if (pthread_getcpuclockid(E.thread, &id) == 0) s.engine_cpu_s += now_s(id);
  }
  s.helper_cpu_s = E.helper_cpu_s_done;
  for (struct comm_fiber *f = E.fibers; f; f = f->next) /* the live helpers' CPU so far */
    if (f->helper) {
      clockid_t id;
      if (pthread_getcpuclockid(f->helper->thread, &id) == 0) s.helper_cpu_s += now_s(id);
    }
  s.main_wait_s = E.main_wait_s;
  s.engine_poll_s = E.poll_s;
  s.poll_when_waited = E.poll_when_waited;
  s.sleeps = E.sleeps;
  s.tests = atomic_load(&E.tests);
  pthread_mutex_unlock(&E.mu);
  return s;
}
