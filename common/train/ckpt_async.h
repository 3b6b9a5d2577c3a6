/* ckpt_async.h — a checkpoint that costs training only the copy to host RAM: the write goes on
 * in a background thread while the next steps run (--ckpt-async; notes/14-fault-tolerance.md).
 *
 *   step k ends ─ copy shard to host (the stall) ─ step k+1 ─ step k+2 ─ ...
 *                      └─ thread: sum + write rank-NNNNN.bin ─┘  commit at the next boundary
 *
 * The commit (rank 0's manifest, the rename that publishes the step) is collective, so it runs on
 * the training thread at the first step boundary where every rank's thread is done (one control
 * all-reduce per step while a write is pending), or before the next save, or at the end of the
 * loop. Until then `latest` names the previous checkpoint: a crash loses the pending one only.
 * The files are the bytes of a synchronous save (ckpt.h: ckpt_snapshot, ckpt_persist, ckpt_commit).
 * Both modes time themselves: the stall (trace span "ckpt copy" or "ckpt save") and, async, the
 * background write; train_finish prints them and --json holds them (ckpt_async_report). */
#ifndef ZL_CKPT_ASYNC_H
#define ZL_CKPT_ASYNC_H
#include <pthread.h> // pthread_t
#include <stdatomic.h> // atomic_int
#include "ckpt.h"    // ckpt_shard_t, report_step_t, scaler_t, trainer_t

typedef struct ckpt_async {
  int on;                /* --ckpt-async */
  pthread_t thread;      /* owned here: joined before the next save and at the end (ckpt_async_finish) */
  int pending;           /* a shard is being written (the thread runs or has not been joined) */
  atomic_int done;       /* the thread's last act: 1 when its write finished */
  ckpt_shard_t shard;    /* what the thread writes */
  double write_t0_us;    /* when the thread started */
  double write_ms;       /* the thread's last write, measured by the thread */
  int saves;             /* checkpoints taken by this run */
  double stall_ms;       /* summed over the saves: what training waited for */
  double persist_ms;     /* async: summed background writes */
} ckpt_async_t;

/* The save due after `steps_done` steps: synchronous (ckpt_save, timed) or, with a->on, the
 * snapshot now and the write in the background (an earlier pending write is joined and committed
 * first). Collective. */
void ckpt_async_save(ckpt_async_t *a, trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped,
                     const report_step_t *losses, const scaler_t *scaler);
/* At a step boundary: when a write is pending and every rank's thread is done, join and commit.
 * Collective while a write is pending; nothing otherwise. */
void ckpt_async_poll(ckpt_async_t *a, trainer_t *t);
/* Join the pending write (if any) and commit it. Collective. */
void ckpt_async_finish(ckpt_async_t *a, trainer_t *t);
/* The numbers into the report's extras (printed and in --json): ckpt_saves, ckpt_stall_ms (per
 * save), with --ckpt-async ckpt_background_write_ms (per save). No-op without saves. */
void ckpt_async_report(const ckpt_async_t *a, trainer_t *t);
#endif
