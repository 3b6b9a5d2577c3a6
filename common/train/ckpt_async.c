/* ckpt_async.c — two-phase checkpoints (ckpt_async.h): training waits for the copy to host RAM
 * only; a thread this struct owns writes the shard while the next steps run, and the collective
 * commit waits for a step boundary where every rank's write is done. */
#include "ckpt_async.h" // ckpt_async_t, ckpt_snapshot, ckpt_persist, ckpt_commit, ckpt_save
#include "check.h"      // die_on_rank
#include "comm.h"       // comm_ctl_all_reduce_f64, REDOP_MAX
#include "trace.h"      // trace_begin, trace_end, trace_now_us
#include <string.h>     // strerror

/* The background thread: the write, timed, then the flag the boundary polls. */
static void *persist_main(void *arg) {
  ckpt_async_t *a = arg;
  double t0 = trace_now_us();
  ckpt_persist(&a->shard);
  a->write_ms = (trace_now_us() - t0) / 1000.0;
  atomic_store(&a->done, 1);
  return NULL;
}

void ckpt_async_finish(ckpt_async_t *a, trainer_t *t) {
  if (!a->pending) return;
  int rc = pthread_join(a->thread, NULL);
  if (rc != 0) die_on_rank("--ckpt-async: joining the writer thread: %s", strerror(rc));
  a->pending = 0;
  a->persist_ms += a->write_ms;
  ckpt_commit(t, &a->shard);
}

void ckpt_async_poll(ckpt_async_t *a, trainer_t *t) {
  if (!a->pending) return;
  double busy = !atomic_load(&a->done); /* every rank asks at the same boundary */
  comm_ctl_all_reduce_f64(t->model_comm, &busy, 1, REDOP_MAX);
  if (busy == 0) ckpt_async_finish(a, t);
}

void ckpt_async_save(ckpt_async_t *a, trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped,
                     const report_step_t *losses, const scaler_t *scaler) {
  ckpt_async_finish(a, t); /* one write in flight at a time: the previous one is committed first */
  double t0 = trace_now_us();
  if (!a->on) {
    trace_begin("ckpt save");
    ckpt_save(t, dir, steps_done, opt_t, skipped, losses, scaler);
    trace_end(NULL);
  } else {
    trace_begin("ckpt copy");
    ckpt_snapshot(t, dir, steps_done, opt_t, skipped, losses, scaler, &a->shard);
    trace_end(NULL);
    atomic_store(&a->done, 0);
    int rc = pthread_create(&a->thread, NULL, persist_main, a);
    if (rc != 0) die_on_rank("--ckpt-async: cannot start the writer thread: %s", strerror(rc));
    a->pending = 1;
  }
  a->stall_ms += (trace_now_us() - t0) / 1000.0;
  a->saves++;
}

void ckpt_async_report(const ckpt_async_t *a, trainer_t *t) {
  if (a->saves == 0) return;
  trainer_report_extra(t, "ckpt_saves", a->saves);
  trainer_report_extra(t, "ckpt_stall_ms", a->stall_ms / a->saves);
  if (a->on) trainer_report_extra(t, "ckpt_background_write_ms", a->persist_ms / a->saves);
}
