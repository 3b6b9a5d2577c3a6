/* ddp.h — chapter 02's adapter: data-parallel training, three ways (notes/02-ddp.md).
 *   naive     all-reduce every gradient after the whole backward (in step)
 *   overlap   each unit's gradients all-reduced asynchronously the moment backward made them
 *   bucketed  units packed, in backward order, into buckets of about --bucket-mb MiB; each
 *             bucket all-reduced asynchronously as soon as its last unit is done
 * Gradients live in one flat buffer; a bucket is a contiguous range of it (units are contiguous
 * and backward walks them from the highest offset down), so nothing is copied into buckets. */
#ifndef ZL_DDP_H
#define ZL_DDP_H
#include <stdint.h>          // int64_t
#include "model.h" // model_t
#include "train.h" // strategy_t

/* One bucket: units first_unit..last_unit (first <= last), i.e. the flat range [off, off+numel). */
typedef struct ddp_bucket {
  int first_unit, last_unit; /* backward reaches last_unit first and first_unit last */
  int64_t off, numel;        /* elements of the flat gradient buffer */
  int64_t nbytes;            /* numel x elem_bytes */
} ddp_bucket_t;

/* Assign units to buckets in backward order (unit U−1 first). cap = bucket_mb MiB (2^20 bytes),
 * elem_bytes per gradient element. A bucket closes when adding the next unit would take it past
 * the cap; a unit larger than the cap gets a bucket of its own. So bucket 0 holds the last unit(s)
 * and is launched first. A unit this rank does not hold (padded 0: on another pipeline stage) is in
 * no bucket (unit_bucket[u] = −1): a bucket launches when its lowest unit's backward is done, and
 * that backward never runs on this rank — the replicas would silently drift apart. Writes
 * out[0..n) (room for m->n_units) and unit_bucket[u] for every unit; returns n, the number of
 * buckets (0 when no unit is held). */
int ddp_assign_buckets(const model_t *m, double bucket_mb, int elem_bytes, ddp_bucket_t *out,
                       int *unit_bucket);

/* Shared with the strategies built on DDP's replicas (chapter 13's solutions/powersgd.c):
 * ddp_replica_setup allocates the full states on every rank (rank 0's init, broadcast) and sets
 * every unit's views; ddp_update, once every gradient is summed, takes the norm (no communication:
 * every rank holds all of them), clips, runs the optimizer and casts the bf16 copy; ddp_layout is
 * strategy_t.layout for a full replica on every rank. */
void ddp_replica_setup(trainer_t *t);
void ddp_update(trainer_t *t);
void ddp_layout(trainer_t *t, int u, unit_layout_t *out);

/* The strategy for --variant naive|overlap|bucketed; NULL for anything else. */
const strategy_t *ddp_strategy(const char *variant);
#endif
