/* owners.h — ZeRO-1 and ZeRO-2 with whole-matrix owners (--shard owner, chapters 03 and 04): the layout
 * Muon needs. Notes: notes/03-zero1.md, "Muon: whole matrices, not slices"; notes/04-zero2.md.
 *
 * ZeRO's flat slices (zero.h) cut every unit into N pieces, straight through its matrices: fine
 * for AdamW, element-wise, wrong for Muon, which orthogonalises each matrix whole. Here each 2-D
 * matrix of the split (common/train/muon.h) belongs to ONE rank — a greedy assignment by size,
 * largest first, to the rank with the fewest matrix parameters so far — and the rest (embeddings,
 * head, norms, biases: AdamW's) stays flat, packed and sliced as ZeRO-1 slices it:
 *
 *   flat slices (zero1.c)               whole-matrix owners (this file)
 *   qkv  | r0 piece | r1 piece |        qkv  | ....... rank 0 ........ |
 *   fc   | r0 piece | r1 piece |        fc   | ....... rank 1 ........ |
 *   rest | r0 piece | r1 piece |        rest | r0 piece | r1 piece     |  (packed AdamW params)
 *
 * A step: every matrix's gradient reduced to its owner, the packed rest reduce-scattered; the
 * norm over both (disjoint: they add); the owner updates the matrix whole (Muon, or AdamW) and
 * broadcasts it; each rank updates its rest piece and the rest is all-gathered. ZeRO-2's owners
 * (owners_zero2.c) do the reduces during the backward, unit by unit, so a rank keeps only the gradients
 * of its own matrices and its pieces of each unit's rest. Files: owners_plan.c (the plan, the rest's
 * pieces, the rank check, the flag), owners.c (ZeRO-1, the owner's update), owners_zero2.c. fp32 only (the
 * owners keep no fp32 master), no checkpoints yet (the layout hook says every rank holds the
 * whole fp32 params, which is true after a step, but the states are not saved). */
#ifndef ZL_OWNERS_H
#define ZL_OWNERS_H
#include <stdint.h> // int64_t
#include "tensor.h" // tensor_t
#include "train.h"  // trainer_t, strategy_t, train_cfg_t

typedef struct owned_matrix {
  int64_t off, numel; /* in the full flat buffer (padded layout, pad 1 here) */
  int rows, cols, owner;
  int64_t state_off;  /* in the owner's states (opt_m, gmat); -1 on the other ranks */
} owned_matrix_t;

typedef struct owners {
  int n_mat;
  owned_matrix_t *mat;                /* [n_mat] in unit order: every rank walks them in this order */
  int n_seg;
  int64_t *seg_off, *seg_numel;       /* [n_seg] AdamW's segments in the flat buffer, packed in order */
  int64_t rest_numel, rest_padded, rest_piece; /* the packed rest: R, R rounded up to N, R/N */
  int64_t mine;                       /* Σ numel of this rank's matrices */
  int64_t *rank_numel;                /* [N] Σ numel of each rank's matrices (the imbalance) */
  int *unit_mat, *unit_seg;           /* [n_units + 1]: unit u's matrices [unit_mat[u], unit_mat[u + 1]),
                                       * its segments [unit_seg[u], unit_seg[u + 1]) */
  tensor_t gmat;                      /* (mine) wdt: the summed gradients of this rank's matrices */
  tensor_t pack;                      /* (rest_padded) wdt: the packed rest, gradients then params */
  tensor_t grest;                     /* (rest_piece) wdt: this rank's piece of the summed rest */
  int check_ranks;                    /* ZL_CHECK_RANKS=1: params compared over the ranks each step */
  int checked;                        /* steps checked */
} owners_t;

/* The plan of this rank (no tensors): the matrices, their owners, the rest. Pure: a function of the
 * model, world and rank. owners_free frees it (and any tensors). */
void owners_plan(const model_t *m, int world, int rank, owners_t *o);
void owners_free(owners_t *o);
/* Matrix i after the norm: its owner updates it whole, and every rank gets the result. */
void owners_update_matrix(trainer_t *t, owners_t *o, int i, float gscale);
typedef void (*owners_update_fn)(trainer_t *t, owners_t *o, int i, float gscale);
/* The strategy's step with another per-matrix update (tests/mpi/scn_muon_slice.c: the wrong one). */
void owners_step_with(trainer_t *t, owners_update_fn update);
/* Copies [lo, hi) of the packed run of segments s0..s1-1 between the flat buffer `flat` (element
 * flat_off of the full layout at flat[0]) and `pack` (the run's element 0 at pack[0]); to_pack 1:
 * flat -> pack, 0: pack -> flat (wdt elements). */
void owners_rest_copy(trainer_t *t, const owners_t *o, int s0, int s1, void *flat, int64_t flat_off,
                      void *pack, int64_t lo, int64_t hi, int to_pack);
/* AdamW on [lo, hi) of that packed run: w in the fp32 params, g (wdt), m and v from element lo. */
void owners_rest_adamw(trainer_t *t, const owners_t *o, int s0, int s1, int64_t lo, int64_t hi,
                       const void *g, float *m, float *v, float gscale);
/* ZL_CHECK_RANKS=1 (tests): every rank's params, bit for bit, against rank 0's (after a step); dies
 * naming the first rank that differs ("rank 1's parameters differ from rank 0's after step 1"). */
void owners_check_ranks(trainer_t *t, owners_t *o);
/* rank 0: the matrices each rank owns and its matrix params (the imbalance); `rest` says how the
 * rest is cut. */
void owners_print(const trainer_t *t, const owners_t *o, const char *rest);
/* "zero1-owners" (owners.c) and "zero2-owners" (owners_zero2.c). */
const strategy_t *owners_strategy(void);
const strategy_t *owners_zero2_strategy(void);
/* Takes "--shard flat|owner" out of argv (chapters 03 and 04): *owner = 1 for owner. Returns 0, or 2 after
 * one error line (a bad value, or what owners does not do: bf16/fp16, --ckpt, --resume: call
 * owners_check after train_parse_args). */
int owners_take_flag(int *argc, char **argv, int *owner);
int owners_check(const train_cfg_t *cfg);
#endif
