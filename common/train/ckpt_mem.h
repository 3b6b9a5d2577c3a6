/* ckpt_mem.h — checkpoints in RAM that outlive the process: a killed rank's job is relaunched
 * (common/scripts/zlrun --restarts R) and continues from the last in-memory snapshot, reading and
 * writing no disk (--ckpt-mem-every K; notes/14-fault-tolerance.md).
 *
 *   node 0                         node 1               (ZL_NODE_OF_RANK or the real nodes)
 *   rank 0: /dev/shm/zl-J-r0.snap  rank 1: /dev/shm/zl-J-r1.snap       its own snapshot
 *           /dev/shm/zl-J-r0-holds-r1.snap  zl-J-r1-holds-r0.snap      its buddy's copy
 *
 * Every K steps each rank writes what it needs to go on in the same layout (its held working
 * params, its own fp32 weights and optimizer states, the step, t, the losses so far, the fp16
 * scaler) to tmpfs (temp + rename: a kill mid-write leaves the previous one) and sends the same
 * bytes to its buddy (ckpt_buddy_of, solutions/ckpt_buddy.c: the same place on the next node),
 * which keeps them. J is $ZL_JOB_ID (zlrun sets it, the same for every relaunch). A relaunch
 * ($ZL_RESTART >= 1) takes the newest step every rank can get — its own file or its buddy's copy
 * (a node gone loses its ranks' own files, not the copies on the other node) — and says which and
 * the steps lost.
 * A clean end removes the job's files. CPU runs (--device cpu): the copy rides MPI from host RAM. */
#ifndef ZL_CKPT_MEM_H
#define ZL_CKPT_MEM_H
#include <stdint.h> // int64_t
#include "report.h" // report_step_t
#include "scaler.h" // scaler_t
#include "train.h"  // trainer_t

typedef struct ckpt_mem {
  int every;              /* --ckpt-mem-every K (0: off) */
  char job[64];           /* $ZL_JOB_ID */
  int restart;            /* $ZL_RESTART: 0 the first launch, k the k-th relaunch */
  int saves;
  int64_t own_bytes, copy_bytes; /* this rank's snapshot, and the buddy's copy it keeps */
  int64_t ledger_own, ledger_copy; /* their ids in the memory ledger (host arena, LEDGER_CKPT; 0: none) */
  int steps_held;         /* the step of the snapshots held now (their losses: 24 bytes a step) */
  double stall_ms;        /* summed over the saves: write to tmpfs + the exchange with the buddy */
  double restore_ms;      /* a relaunch: reading the snapshot back and uploading it */
} ckpt_mem_t;

/* The bytes of one snapshot by the formula (ckpt_mem.c's layout, without the units' padding):
 * held·w + own·4·(1 + k) + 24·steps + 16·units + the header — held = Ψ (Ψ/N at stage 3), own =
 * Ψ/N (Ψ for DDP, stage 0), w the working dtype's bytes, k optimizer states (AdamW 2, SGD and Muon 1),
 * 16 bytes a unit for where its own piece lies. A rank keeps two (its own and its buddy's copy) in the
 * host arena's LEDGER_CKPT. */
int64_t ckpt_mem_formula_bytes(int stage, int64_t psi, int world, int w, int k, int steps, int units);
/* Before training (collective): reads the job id and the restart count. */
void ckpt_mem_init(ckpt_mem_t *mm, const train_cfg_t *cfg);
/* At the start of step `step`: records it (rank 0, /dev/shm/zl-J-progress) so a relaunch can
 * say how much work was lost. */
void ckpt_mem_progress(const ckpt_mem_t *mm, const trainer_t *t, int step);
/* After `steps_done` steps, when due (every K): the snapshot and the buddy exchange. Collective. */
void ckpt_mem_save(ckpt_mem_t *mm, trainer_t *t, int steps_done, int opt_t, int skipped,
                   const report_step_t *losses, const scaler_t *scaler);
/* A relaunch: restore the newest complete snapshot (collective). 1 when restored (*start, *opt_t,
 * *skipped, losses[0..*start), *scaler filled), 0 when there is none (the run starts as asked). */
int ckpt_mem_restore(ckpt_mem_t *mm, trainer_t *t, report_step_t *losses, int *start, int *opt_t,
                     int *skipped, scaler_t *scaler);
/* --fault R:S:node (fault.h), before fault_at_step kills rank R at step S: the own snapshots of
 * every rank on R's node removed (and the copies they hold), as a node that does not come back. */
void ckpt_mem_lose_node(const ckpt_mem_t *mm, const trainer_t *t, int step);
/* A clean end: the job's files of this rank removed; the numbers into the report's extras. */
void ckpt_mem_finish(ckpt_mem_t *mm, trainer_t *t);

/* ---- the snapshot file, shared with the elastic restart (ckpt_elastic.c) ------------------ */
/* The file's head; the body follows: held params (wdt bytes, unit after unit), the own pieces
 * (fp32: per unit its weights, m, v), the losses (steps_done x 3 doubles), and where each own piece
 * lies (per unit own_off, own_numel: int64) — what an elastic restart (ckpt_elastic.c) reshards by. */
typedef struct snap_hdr {
  char magic[8];
  int32_t rank, world, steps_done, opt_t, skipped, has_scaler, growth_tracker, overflows;
  float loss_scale;
  int32_t n_sections;
  int64_t held_bytes, own_floats, body_bytes;
  uint64_t sum;      /* FNV-1a 64 of the body */
  char strategy[60];
  int32_t n_units;   /* the piece table's entries */
} ckpt_snap_hdr_t;
#define CKPT_SNAP_MAGIC "ZLSNAP2"
/* Rank `rank`'s own snapshot (holds < 0), or the copy of rank `holds`'s that `rank` keeps. */
void ckpt_mem_path(const ckpt_mem_t *mm, int rank, int holds, char *p, size_t n);
/* The whole file, malloc'd, or NULL; *n its size (-1: a short read). */
char *ckpt_mem_read(const char *path, int64_t *n);
/* Continuing on fewer ranks (zlrun --restarts R --elastic): this relaunch's world is smaller than
 * from_world, the world of the snapshots. Rank 0 takes each old rank's newest snapshot every old
 * rank has (its own file or its buddy's copy), lays the full model's weights and optimizer states
 * out as a grid-free checkpoint in tmpfs, and every rank resumes from it through the universal
 * resharding (ckpt_restore), as a resume from disk on the smaller grid would. Collective. 1 when
 * restored (the outputs as ckpt_mem_restore's), 0 when the snapshots have no complete step. */
int ckpt_elastic_restore(ckpt_mem_t *mm, trainer_t *t, int from_world, report_step_t *losses, int *start,
                         int *opt_t, int *skipped, scaler_t *scaler);
#endif
