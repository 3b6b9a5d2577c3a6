/* tp_split.h — what a tensor-parallel split of a whole model keeps (the MLP's, tp_mlp.c; the
 * GPT's, tp_gpt.c), and the machinery both share (tp_split.c): the unsplit model for the init and
 * the export, the map between a full unit and a TP rank's part of it, and per unit what only TP
 * knows — which parameters are replicated, which outputs the group shares, which all-reduces it
 * runs. train.h's model transform (tp_transform, tp.h) answers the loop, the norm and the report
 * from it; common/ holds none of it. Internal to the split files: chapters use tp.h. */
#ifndef ZL_TP_SPLIT_H
#define ZL_TP_SPLIT_H
#include <stdint.h> // int64_t
#include "tensor.h" // tensor_t
#include "tp.h"     // comm_t, model_t, tp_part_*

/* What TP knows of one local unit. */
typedef struct tp_unit {
  int64_t rep_numel;  /* its FIRST rep_numel parameters are the same on every rank of the TP group
                       * (replicated: counted once in the gradient norm); the rest are split */
  int ar_calls;       /* all-reduces over the TP group per forward + backward of the unit, */
  int64_t ar_numel;   /* each of ar_numel fp32 elements per sample (the report's formula) */
  int ar_fwd_calls;   /* how many of ar_calls are in the forward (--recompute reruns them) */
  int ar2_calls;      /* a second size: ar2_calls all-reduces of ar2_numel fp32 elements per */
  int64_t ar2_numel;  /* sample (the GPT head's vocab-parallel loss: per-row max and sums) */
  int ag_calls;       /* --sp (tp_sp.h): all-gathers and reduce-scatters along the sequence per forward +
                       * backward, each of ar_numel fp32 elements per sample (the whole sequence's; */
  int rs_calls;       /* each rank sends (T−1)/T of it), */
  int ag_fwd_calls;   /* of which in the forward (--recompute reruns them) */
  int rs_fwd_calls;
  int ln_calls;       /* --sp: all-reduces of ln_numel fp32 per micro-batch (not per sample): the */
  int64_t ln_numel;   /* LayerNorm weight gradients, summed over the sequence's parts */
  int y_rep;          /* 1: the unit's output is the same on every rank of the group (it comes out of
                       * g's all-reduce, or from replicated inputs and weights): --pa keeps 1/T
                       * (tp_pa.c) */
} tp_unit_t;

struct tp_split;
/* Full unit u (the unsplit model's layout) ↔ TP rank q's local unit: full → local when to_local,
 * else local → full (the export). */
typedef void (*tp_map_fn)(const struct tp_split *s, int u, int q, float *full, float *local, int to_local);
/* Parameters of local unit u on TP rank q. */
typedef int64_t (*tp_local_numel_fn)(const struct tp_split *s, int u, int q);

/* The first member of every split's m->ctx (tp_mlp.c's tp_model_t, tp_gpt.c's tp_gpt_t). */
typedef struct tp_split {
  comm_t *tp;                    /* the TP group (not owned) */
  int T, r;                      /* its size, this rank in it */
  model_t full;                  /* the unsplit model: full shapes and the init (its own units array) */
  tp_unit_t *units;              /* [n_units] */
  tp_map_fn map;
  tp_local_numel_fn local_numel;
} tp_split_t;

/* s := the split of m over tp: keeps the full model (its own units array), zeroed unit infos. */
void tp_split_begin(tp_split_t *s, const model_t *m, comm_t *tp, tp_map_fn map,
                    tp_local_numel_fn local_numel);
/* Frees what tp_split_begin allocated (not s itself). */
void tp_split_end(tp_split_t *s);
/* model_fns_t.init_unit of a split (m->ctx a tp_split_t): the full unit's init (a pure function of
 * seed, u, index), mapped to this rank; then zeros in the pad slots. */
void tp_split_init_unit(const model_t *m, uint64_t seed, int u, float *dst);
/* n floats between a full unit and a local one (tp_map_fn's direction); _cols: columns [lo, lo+n)
 * of a (rows, in) matrix ↔ a contiguous (rows, n). */
void tp_mv(float *full, float *local, int64_t n, int to_local);
void tp_mv_cols(float *full, float *local, int rows, int in, int lo, int n, int to_local);

/* --pa over the TP group (tp_pa.c): the transform's pa_slice, pa_keep, pa_gather, pa_traffic. */
struct trainer;
int64_t tp_pa_slice(const struct trainer *t, int u);
void tp_pa_keep(struct trainer *t, int u, const float *whole, float *slice);
void tp_pa_gather(struct trainer *t, int u, const float *slice, float *whole);
void tp_pa_traffic(const struct trainer *t, int64_t *calls, int64_t *bytes);
/* Unit u's collectives over a TP group of T (this rank r) in one step of t, by k's counts (tp_split.c's
 * formula, per unit): added to *calls, *bytes. */
void tp_unit_traffic(const tp_unit_t *k, const struct trainer *t, int u, int T, int r, int64_t *calls,
                     int64_t *bytes);

/* The vocab-parallel cross-entropy (tp_vocab.c) of rows rows of logits (rows, Vr) over the TP group
 * tp, this rank's vocabulary [v_lo, v_lo + Vr) of V: per row the max, the sum of exponentials and the
 * target's logit all-reduced over the group (stage: a device buffer for them on CUDA, grown here);
 * dlogits = scale·(softmax − onehot) over this rank's columns. Returns the sum of the rows' losses. */
double tp_vocab_loss(comm_t *tp, tensor_t *stage, int64_t rows, int V, int v_lo, int64_t Vr,
                     const float *logits, const int *targets, float *dlogits, float scale);

/* The two splits (tp_split_model dispatches). Not collective. tp_split_gpt_sp: the GPT with
 * sequence parallelism as well (--sp, tp_sp.h): every unit output (B, S/T, C) along the sequence. */
void tp_split_mlp(model_t *m, comm_t *tp);
void tp_split_gpt(model_t *m, comm_t *tp);
void tp_split_gpt_sp(model_t *m, comm_t *tp);
#endif
