/* ckpt_internal.h — what the two halves of the checkpoint module share: ckpt.c (the trainer's
 * side: save, resume, the grid-free form, the export) and ckpt_format.c (the directory on disk). */
#ifndef ZL_CKPT_INTERNAL_H
#define ZL_CKPT_INTERNAL_H
#include "ckpt.h"   // ckpt_manifest_t, CKPT_PATH_MAX
#include <stdint.h> // int64_t

#define MANIFEST "manifest.txt" /* in every step directory */
#define LOSSES "losses.bin"     /* every step's (loss, skipped) so far, 16 bytes each */

/* Whole file into a malloc'd buffer (NUL-terminated; *nbytes its size when not NULL); NULL when it
 * cannot be read. */
char *ckpt_slurp(const char *path, int64_t *nbytes);
/* Write n bytes to path atomically: path.tmp, fsync, rename. Dies naming the path on error. */
void ckpt_write_atomic(const char *path, const void *bytes, int64_t n);
/* rm -rf of a directory this module created (a checkpoint step or a partial one). */
void ckpt_rm_tree(const char *path);
/* The last part of every save (rank 0): partial/manifest.txt from m, then the directory renamed to
 * dir/step-NNNNNN (m->step), then dir/latest rewritten, then older steps pruned (the two newest
 * and m->step kept). */
void ckpt_publish(const char *dir, const char *partial, const ckpt_manifest_t *m);

/* ckpt_pieces.c: what this rank writes of the model (a checkpoint's shard, the export): piece
 * [off, off+numel) of unit u, host holding its sections back to back (section s at s·numel). */
typedef struct ckpt_saved { int u; int64_t off, numel; float *host; } ckpt_saved_t;
/* Every piece this rank writes, units in order, nsec sections each (1: the weights only); *n of them.
 * Collective over t->group_comm with two data-parallel groups (the dense spans); call on every rank. */
ckpt_saved_t *ckpt_saved_pieces(trainer_t *t, int nsec, int *n);
void ckpt_saved_free(ckpt_saved_t *p, int n);
/* The device array of section s (0 weights, 1 m, 2 v) of an own piece; dies naming the strategy and unit
 * when its layout keeps none. */
float *ckpt_section_of(const trainer_t *t, const unit_piece_t *p, int s, int u);
#endif
