/* muon.h — --optimizer muon on a whole replica: which parameters Muon updates and which AdamW does
 * (the split), and the update of a replica held whole (one rank, DDP). Notes: notes/03-zero1.md,
 * "Muon: whole matrices, not slices".
 *
 * The reference's split (Keller Jordan's Muon README; modded-nanogpt): Muon for the hidden 2-D
 * weight matrices (the model's `matrices` hook: the GPT's qkv, proj, fc, fcproj; the MLP's W but the
 * head's), AdamW (--lr, --beta1/2, --eps) for the rest: embeddings, the head, LayerNorms, biases.
 * Muon's learning rate is --muon-lr (0.02, the reference's), its momentum 0.95 with Nesterov.
 * States: one fp32 momentum per parameter (opt_m, Muon's or Adam's m), and Adam's v for the AdamW
 * part only — in DDP a compact buffer, the AdamW segments one after another (muon_adamw_numel). */
#ifndef ZL_MUON_H
#define ZL_MUON_H
#include <stdint.h>   // int64_t
#include "model.h"    // model_t, model_matrix_t
#include "ops_muon.h" // muon_hp_t
#include "train.h"    // trainer_t

/* One segment of a unit: a matrix (rows > 0: Muon's) or a run of AdamW parameters between them. */
typedef struct muon_seg { int64_t off, numel; int rows, cols; } muon_seg_t;
enum { MUON_MAX_SEGS = 2 * MODEL_MAX_MATRICES + 1 };
/* Unit u's real parameters [0, numel) cut into segments in order (pad slots are not in any); returns
 * how many. Dies when the model kind lists no matrices (model_fns_t.matrices NULL). */
int muon_unit_segments(const model_t *m, int u, muon_seg_t *out);
/* Parameters the split gives AdamW, and Muon, over the model's units. */
int64_t muon_adamw_numel(const model_t *m);
int64_t muon_matrix_numel(const model_t *m);
/* Muon's scalars of this run (--muon-lr, the reference's momentum and 5 steps, --weight-decay). */
muon_hp_t trainer_muon_hp(const trainer_t *t);
/* The update of a replica held whole: w, grad and m over the padded layout (n = padded_numel), v the
 * compact AdamW part. What trainer_optimizer_update does under --optimizer muon. */
void muon_update_replica(trainer_t *t, float *w, const void *grad, float *m, float *v, int64_t n,
                         float gscale);
/* One line on rank 0: "muon: K matrices, X params (Muon); Y params (AdamW: ...)". */
void muon_print_split(const trainer_t *t);
#endif
