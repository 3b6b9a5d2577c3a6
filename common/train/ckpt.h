/* ckpt.h — checkpoints: save, verify, resume (also with another world size or stage), and
 * the manifest the zl_ckpt tool reads. Notes: notes/reliability.md.
 *
 * On disk, DIR given to --ckpt:
 *   DIR/latest                 one line, "step-000010": the newest COMPLETE checkpoint
 *   DIR/step-000010/           one checkpoint, after 10 steps
 *     manifest.txt             what the files hold (text, key value; written last, checksummed)
 *     rank-00000.bin ...       one file per rank that owns pieces: ZeRO-1..3 every rank, DDP
 *                              rank 0 (its pieces are replicated: rank 0's copy is written)
 *     losses.bin               the per-step loss and time so far (doubles), for the report
 * What a rank owns is the strategy's answer (strategy_t.layout, train.h): per unit, a piece
 * [off, off+numel) of the padded unit. A shard file is its sections back to back: "weights"
 * (fp32: the master in bf16 mode), then "m" and "v" (AdamW) or "m" (SGD momentum); each
 * section holds the rank's pieces back to back, unit after unit (pad slots are 0). The
 * manifest lists every piece (file, unit, off, numel, at): reading any element of any unit,
 * whatever strategy or world size wrote it, is a lookup in that table — the resharding.
 *
 * Atomic: a save writes DIR/.step-000010.partial/ (each file to a temp name, fsync, rename),
 * the manifest last, then renames the directory to step-000010 and only then rewrites
 * DIR/latest (temp + fsync + rename). A crash at any point leaves the previous checkpoint and
 * `latest` as they were. The two newest checkpoints are kept, older ones deleted. */
#ifndef ZL_CKPT_H
#define ZL_CKPT_H
#include <stddef.h> // size_t
#include <stdint.h> // int64_t, uint64_t
#include "report.h" // report_step_t
#include "scaler.h" // scaler_t (--precision fp16: the loss scaler's state is part of the checkpoint)
#include "train.h"  // trainer_t, train_cfg_t, gpt_shape_t

#define CKPT_MAX_SECTIONS 3
#define CKPT_PATH_MAX 1024

typedef struct ckpt_unit {
  int in, out;   /* MLP shape (0 for other units) */
  int64_t numel; /* real parameters */
  int first, n_pieces; /* its pieces: pieces[first .. first+n_pieces), sorted by off */
} ckpt_unit_t;

/* One piece of one unit in one shard file: unit-local [off, off+numel) at element `at` of each
 * section of the file. */
typedef struct ckpt_piece {
  int file, unit;
  int64_t off, numel, at;
} ckpt_piece_t;

typedef struct ckpt_file {
  char name[64];   /* "rank-00000.bin", "losses.bin" */
  int64_t nbytes;
  uint64_t sum;    /* FNV-1a 64 of the bytes */
} ckpt_file_t;

typedef struct ckpt_manifest {
  char dir[CKPT_PATH_MAX]; /* the step directory it was read from */
  int version;
  char strategy[32];       /* "zero2", "ddp-bucketed", ... */
  int stage, world;        /* stage 0..3 and ranks of the run that saved */
  int shards;              /* shard files (ranks that owned pieces): world (ZeRO) or 1 (DDP) */
  char precision[8], optimizer[8];
  char model[8];           /* "mlp" or "gpt" (version 2 files: "mlp") */
  int input, hidden, classes, layers; /* the MLP's shape (--input --hidden --classes --layers) */
  gpt_shape_t gpt;         /* the GPT's shape (n_layer n_head n_embd seq_len vocab); 0s for the MLP */
  int tp, tp_rank;         /* --tp T of the run that saved, and which TP rank's part this is (1, 0: no TP) */
  /* chapter 12: --tp inside each EP group of the run that saved (1: none; tp is P_E) */
  int ep_tp;
  /* chapter 12: --moe E and --moe-every m of the run that saved (0: a dense model) */
  int moe, moe_every;
  /* --expert-ffn F (0: 4C) and --shared-experts S of that run (line "moe_experts F S"; absent in older
   * manifests: 0 0, the only shape they could hold) */
  int moe_ffn, moe_shared;
  uint64_t seed;
  int64_t batch;
  int64_t psi;
  int n_units;
  ckpt_unit_t *units;      /* [n_units] */
  int n_pieces;
  ckpt_piece_t *pieces;    /* [n_pieces], sorted by (unit, off) */
  int64_t *section_numel;  /* [shards] floats per section of each shard file */
  int step;                /* steps completed: the resumed run starts at this step */
  int64_t data_position;   /* samples consumed = step x batch (the data is addressed by sample) */
  int opt_t;               /* optimizer steps applied (AdamW bias correction) */
  int skipped;             /* steps dropped by --nonfinite skip (and fp16 overflows) */
  int has_scaler;          /* --precision fp16: the loss scaler's state below was saved */
  float loss_scale;        /* its scale S, exact (written as a hex float)               */
  int growth_tracker, overflows; /* steps since S last changed; steps skipped for overflow */
  int n_sections;
  char sections[CKPT_MAX_SECTIONS][8]; /* "weights", "m", "v" */
  int n_files;
  ckpt_file_t *files;      /* [n_files]: the shards in rank order, then losses.bin */
} ckpt_manifest_t;

/* FNV-1a 64 of n bytes, continuing from h (start with CKPT_SUM_INIT). */
#define CKPT_SUM_INIT 14695981039346656037ULL
uint64_t ckpt_sum(uint64_t h, const void *bytes, size_t n);

/* Find the checkpoint of `where`: a step directory (holds manifest.txt) or a --ckpt DIR (its
 * latest). Writes the step directory into stepdir. 0 on success, else 1 and why (names the file). */
int ckpt_resolve(const char *where, char *stepdir, size_t n, char *why, size_t nwhy);
/* T when dir holds the per-TP-rank directories of a --tp T save (dir/tp-R-of-T/), else 0. Chapter 12
 * saves its expert-parallel parts the same way (dir/tp-R-of-P_E/, --ep P_E). */
int ckpt_tp_layout(const char *dir);
/* 1 when dir's T parts (dir/tp-R-of-T/) are a chapter 12 save: expert-parallel (part 0 has experts). */
int ckpt_parts_moe(const char *dir, int T);
/* The flag of the group a part m belongs to (m->tp > 1): "--ep" for chapter 12's expert-parallel
 * parts (m->moe > 0), "--tp" for tensor-parallel ones. */
const char *ckpt_group_flag(const ckpt_manifest_t *m);
/* Read and check stepdir/manifest.txt (syntax, its own checksum, consistent layout). 0 on
 * success; else 1 with why naming the file and what is wrong. Free with ckpt_manifest_free. */
int ckpt_manifest_read(const char *stepdir, ckpt_manifest_t *m, char *why, size_t nwhy);
void ckpt_manifest_free(ckpt_manifest_t *m);
/* Every file of the manifest: present, the right size, the right checksum. 0 or 1 + why. */
int ckpt_verify_files(const ckpt_manifest_t *m, char *why, size_t nwhy);
/* The manifest against the flags of this run: the model kind and every shape field (GPT: layers,
 * heads, width, context, vocab; MLP: layers, hidden, input, classes), precision, optimizer, seed,
 * batch, steps. 0, or 1 with why naming EVERY difference ("saved with --n-embd 32, this run has --n-embd 64;
 * ...").
 * The grid (T, P, D, ZeRO stage, offload) is not compared: that is what resharding is for. */
int ckpt_match_cfg(const ckpt_manifest_t *m, const train_cfg_t *cfg, char *why, size_t nwhy);
/* Print the manifest in readable form (zl_ckpt inspect). */
void ckpt_manifest_print(const ckpt_manifest_t *m);

/* Elements [lo, hi) (unit-local, hi <= numel) of unit u of section sec, fp32, into dst,
 * whatever layout the checkpoint has: this is the resharding. ctx caches open files; pass a
 * zeroed ckpt_reader_t and close it with ckpt_reader_close. Dies naming the file on a read error. */
typedef struct ckpt_reader {
  const ckpt_manifest_t *m;
  int *fds; /* [shards], -1 when not open */
} ckpt_reader_t;
void ckpt_read_range(ckpt_reader_t *r, int sec, int u, int64_t lo, int64_t hi, float *dst);
void ckpt_reader_close(ckpt_reader_t *r);
/* Section index of name in m, or -1. */
int ckpt_section(const ckpt_manifest_t *m, const char *name);

/* The losses.bin of m: m->step × (loss, ms) doubles, malloc'd. Dies naming the file if unreadable. */
double *ckpt_read_losses(const ckpt_manifest_t *m);
/* zl_ckpt convert: write a complete GRID-FREE checkpoint into dir (dir/step-NNNNNN, dir/latest):
 * one file rank-00000.bin holding, per section, the full model's units back to back, unpadded
 * (one piece per unit, [0, numel): keyed by full-model unit and full-model offset), and a
 * manifest copying hdr's model, run and position fields (step, opt_t, skipped, sections) with
 * strategy "grid-free", world 1, tp 1. units[n_units]: the full model's units (in, out, numel);
 * sec[s]: Ψ floats of section s; losses: hdr->step × (loss, ms). Any grid resumes from it
 * (with --tp T through the model transform's to_local, train.h). Dies naming the file on an error. */
void ckpt_write_grid_free(const char *dir, const ckpt_manifest_t *hdr, int n_units, const ckpt_unit_t *units,
                          float *const *sec, const double *losses);

/* ---- the trainer's side (collective calls) ----------------------------------------------- */
/* A manifest's head from this run (no collective): the strategy, model, run and position fields
 * after `steps_done` steps, m->units[] (malloc'd: ckpt_manifest_free), no pieces or files yet. The
 * save (ckpt_commit) and the elastic restart (ckpt_elastic.c) fill the rest. */
void ckpt_manifest_head(const trainer_t *t, int steps_done, int opt_t, int skipped, const scaler_t *scaler,
                        ckpt_manifest_t *m);
/* --resume: rank 0 of the part (t->model_comm) resolves and verifies (manifest, every file, the
 * flags), then tells its ranks; then every rank of the JOB agrees (t->world_comm: with --tp/--ep
 * each part reads its own checkpoint, and one bad part stops them all). 0: m filled on every rank.
 * 2 on every rank: one line `error: --resume ...: <why>` was printed (by the lowest rank of a bad
 * part); the caller ends the run with exit code 2 before training (nothing written). Collective. */
int ckpt_open_resume(trainer_t *t, const char *where, ckpt_manifest_t *m);
/* After strategy setup: overwrite what the strategy's layout says this rank keeps (its held
 * working params, its own fp32 weights and optimizer states) from m, whatever strategy and
 * world size wrote it, and losses[0..m->step) from losses.bin. Sets t->opt_t. No collective. */
void ckpt_restore(trainer_t *t, const ckpt_manifest_t *m, report_step_t *losses);
/* Whether to save after step `step` (0-based): every --save-every steps and after the last. */
int ckpt_due(const train_cfg_t *cfg, int step);
/* Save after `steps_done` steps (collective; see the header comment for the layout). Each rank
 * writes the pieces its strategy's layout says it owns (rank 0 alone for replicated ones).
 * scaler: the fp16 loss scaler's state after that step (NULL unless --precision fp16); a resume
 * continues with it (manifest fields has_scaler, loss_scale, growth_tracker, overflows). */
void ckpt_save(trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped,
               const report_step_t *losses, const scaler_t *scaler);
/* ckpt_save's two phases, apart for --ckpt-async (ckpt_async.h): ckpt_snapshot (collective) copies
 * this rank's shard to host RAM — the only stall training sees; ckpt_persist (no collective, no
 * device: safe on a background thread) sums it and writes rank-NNNNN.bin into the partial
 * directory; ckpt_commit (collective) gathers the piece lists and rank 0 writes losses.bin and the
 * manifest and publishes the step. ckpt_save = the three in a row: the same bytes either way. */
typedef struct ckpt_shard {
  char dir[CKPT_PATH_MAX], partial[CKPT_PATH_MAX + 32];
  int steps_done, opt_t, skipped, has_scaler, model_rank;
  scaler_t scaler;               /* has_scaler: the fp16 loss scaler after that step */
  const report_step_t *losses;   /* [steps_done]: entries below steps_done no longer change */
  int64_t *blob;                 /* what rank 0's manifest needs: size, sum, pieces (ckpt.c) */
  float *host;                   /* the shard's bytes on the host (NULL: this rank writes none) */
} ckpt_shard_t;
void ckpt_snapshot(trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped,
                   const report_step_t *losses, const scaler_t *scaler, ckpt_shard_t *sh);
void ckpt_persist(ckpt_shard_t *sh);
void ckpt_commit(trainer_t *t, ckpt_shard_t *sh);
/* The full fp32 weights (Ψ, unpadded, unit after unit) into host dst on rank 0 (dst NULL
 * elsewhere), from the pieces the strategy's layout names: collective, one control gather —
 * none when every unit is replicated (DDP: rank 0 copies its own). */
void ckpt_export_weights(trainer_t *t, float *dst);
#endif
