/* model.h — the models behind one table: units over one flat parameter buffer, and what each
 * unit does forward and backward (notes/design.md, "Models"; notes/02-ddp.md for the MLP).
 *
 * A model is a list of UNITS. For the strategies a unit is only a flat range of parameters
 * (numel, off, padded, piece, shard_off): that is what DDP buckets and ZeRO shards. For the
 * training loop a unit is a function of its input activation:
 *
 *   x (B, in) ──forward──► y (B, y_numel)      and it keeps `saved` (B, saved_numel) for backward
 *   dx (B, in) ◄─backward── dy (B, y_numel)    writing its parameters' gradients
 *
 * where the input of unit u is the output of unit u−1 (unit 0 reads the batch), the output of
 * the last unit is the logits (rows × classes per sample), and B counts SAMPLES (a sequence
 * of seq_len tokens for the GPT, a row for the MLP). The loop keeps every unit's output (the
 * next unit's input) and its saved activations; with recompute it keeps only the outputs and
 * reruns a unit's forward inside its backward. The model knows nothing of ranks; which buffer
 * a unit's parameters live in (full, gathered, shard) is the strategy's business.
 *
 * All parameters live in ONE flat buffer; unit u occupies [off, off+padded): its numel real
 * parameters, then padded−numel pad slots that stay exactly 0. DDP uses pad 1 (no padding);
 * ZeRO pads each unit to a multiple of N so every rank owns the same-numbered 1/N piece of
 * every unit (FSDP's flat-parameter layout). */
#ifndef ZL_MODEL_H
#define ZL_MODEL_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t

typedef struct unit {
  int in, out;          /* MLP: the linear layer's input and output features (0 for other models) */
  int64_t numel;        /* real parameters of the unit */
  int64_t off;          /* offset of the unit in the padded flat buffer */
  int64_t padded;       /* numel rounded up to a multiple of the pad */
  int64_t piece;        /* padded / N: the slice each rank owns (ZeRO); = padded when pad is 1 */
  int64_t shard_off;    /* offset of this rank's piece inside its shard buffer: Σ_{v<u} piece_v */
  int64_t y_numel;      /* fp32 output elements per sample (the next unit's input) */
  int64_t saved_numel;  /* fp32 elements per sample kept for backward besides input and output */
  int64_t wsaved_numel; /* a backward split in two (model_fns_t.backward_input/_weight): fp32 elements per
                         * sample the input half leaves for the weight half beside saved (0: the MLP) */
} unit_t;

/* GPT-2's shape (kind "gpt"). */
typedef struct gpt_shape { int n_layer, n_head, n_embd, seq_len, vocab; } gpt_shape_t;

/* One 2-D weight matrix inside a unit (unit-local offset, row-major rows × cols): what Muon
 * orthogonalises whole (common/train/muon.c). */
typedef struct model_matrix { int64_t off; int rows, cols; } model_matrix_t;
enum { MODEL_MAX_MATRICES = 8 }; /* per unit */

struct model;
/* A unit's buffers for one forward or backward call. */
typedef struct unit_io {
  device_t dev;
  dtype_t wdt;          /* dtype of params and grads; activations are fp32 */
  int B;                /* samples */
  const void *params;   /* the unit's parameters (wdt), `padded` elements */
  void *grads;          /* backward: the unit's gradients (wdt), written with beta */
  float beta;           /* 0: overwrite grads, 1: accumulate (micro-batches) */
  const void *x;        /* (B, in) input: the previous unit's y (fp32), or the batch input for unit 0 */
  float *y;             /* (B, y_numel) output */
  float *saved;         /* (B, saved_numel) what backward needs (may be NULL when saved_numel is 0) */
  float *dy;            /* backward: (B, y_numel) gradient w.r.t. y; the unit may overwrite it */
  float *dx;            /* backward: (B, in) gradient w.r.t. x, overwritten; NULL: not needed (unit 0) */
  /* split backward: (B, wsaved_numel) written by backward_input, read by backward_weight */
  float *wsaved;
} unit_io_t;

/* Unit parameters and gradients by element offset (the unit's flat layout, in io->wdt elements):
 * the views every model kind carves out of its unit (gpt.c, tp_gpt.c, cp_gpt.c, moe.c). */
static inline const void *param_at(const unit_io_t *io, int64_t off) {
  return (const char *)io->params + off * (int64_t)dtype_size(io->wdt);
}
static inline void *grad_at(const unit_io_t *io, int64_t off) {
  return (char *)io->grads + off * (int64_t)dtype_size(io->wdt);
}

/* What a model kind provides. Every function is deterministic: same inputs, same bits. */
typedef struct model_fns {
  const char *name;     /* "mlp", "gpt" */
  /* Initial values of unit u, a pure function of (seed, u, index): numel values, then
   * padded−numel zeros, into dst (fp32, host). */
  void (*init_unit)(const struct model *m, uint64_t seed, int u, float *dst);
  void (*forward)(const struct model *m, int u, const unit_io_t *io);  /* x → y, saved */
  void (*backward)(const struct model *m, int u, const unit_io_t *io); /* dy, x, y, saved → dx, grads */
  /* The backward in two halves (chapter 07's zero-bubble schedules; NULL: the kind has none).
   * backward_input (B): dx from dy (dx NULL: nothing to send), and into io->wsaved — and over the
   * activations only B reads (saved's pre-activations, the output y) — the gradients of the unit's
   * weight GEMMs' outputs; it writes no parameter gradient. backward_weight (W), any time later
   * while x, y, saved and wsaved are kept: the parameter gradients (io->grads with io->beta) from
   * them; it needs no parameters and reads no io->dx (the loop passes none). B then W writes the same dx and
   * gradients as backward, bit for
   * bit (the same ops on the same operands), and leaves io->dy as backward does. */
  void (*backward_input)(const struct model *m, int u, const unit_io_t *io);
  void (*backward_weight)(const struct model *m, int u, const unit_io_t *io);
  /* The hidden 2-D weight matrices of unit u, the ones Muon updates (not the embeddings, the head,
   * norms or biases: the reference's split), into out (at most MODEL_MAX_MATRICES); returns how many.
   * NULL: the kind lists none (--optimizer muon is refused for it). */
  int (*matrices)(const struct model *m, int u, model_matrix_t *out);
  /* Frees what the kind keeps in m->ctx (NULL: nothing). */
  void (*free_ctx)(struct model *m);
  /* Forward FLOPs per sample of the whole model (multiply-add = 2), for MFU. */
  double (*flops_per_sample)(const struct model *m);
  /* Optional (NULL: the loop's softmax cross-entropy on the last unit's output): the loss of b
   * samples computed by the model itself — a vocab-parallel head whose logits no rank holds
   * whole. Same contract as trainer_loss: returns the local loss sum, writes dlogits (the last
   * unit's dy, its own layout) with scale 1/(global batch · rows). Collective for a split kind
   * (chapter 06's transform, train.h's model_transform_t, gives a model this table of its own). */
  double (*loss)(const struct model *m, int b, const float *logits, const int *targets, float *dlogits,
                 float scale);
} model_fns_t;

typedef struct model {
  const model_fns_t *fns;
  void *ctx;            /* the kind's own state (a tensor-parallel split: its communicator, slices) */
  int D, H, C, L;       /* MLP: input, hidden width, classes, hidden layers (kind "mlp") */
  gpt_shape_t gpt;      /* kind "gpt" */
  /* What the loop feeds and scores, per sample: */
  int64_t in_numel;     /* 4-byte input elements of unit 0 (fp32 features, or int32 tokens) */
  int in_is_tokens;     /* 1: the input is int32 token ids */
  int rows;             /* loss rows per sample (1 for the MLP, seq_len for the GPT) */
  int classes;          /* classes per loss row (C, or the vocabulary) */
  int n_units;
  unit_t *units;        /* [n_units] */
  int64_t numel;        /* Ψ: real parameters */
  int64_t padded_numel; /* Σ padded */
  int64_t shard_numel;  /* Σ piece: one rank's shard */
  int64_t max_unit_padded;
} model_t;

/* ---- the MLP: input D, L hidden layers of width H with GELU, C classes ---------------------
 * Linear units u = 0..L: unit 0 is D→H, units 1..L−1 are H→H, unit L is H→C. Unit u < L
 * outputs y = GELU(z) and saves the pre-activation z; unit L outputs the logits z.
 * L = 0 is allowed: one unit D→C, logistic regression (H is then unused). */
extern const model_fns_t model_mlp_fns;
void model_init(model_t *m, int D, int H, int C, int L);
/* Parameter count of a shape, without building it (for validation and ch00). */
int64_t model_count_params(int D, int H, int C, int L);

/* Fill the unpadded layout (pad 1, piece = padded, shard_off = off) from units[].numel, and
 * the totals; for model constructors. */
void model_layout(model_t *m);
void model_free(model_t *m);

/* Dispatch to the model's table. */
static inline void model_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  m->fns->init_unit(m, seed, u, dst);
}
static inline void model_forward(const model_t *m, int u, const unit_io_t *io) { m->fns->forward(m, u, io); }
static inline void model_backward(const model_t *m, int u, const unit_io_t *io) {
  m->fns->backward(m, u, io);
}
static inline void model_backward_input(const model_t *m, int u, const unit_io_t *io) {
  m->fns->backward_input(m, u, io);
}
static inline void model_backward_weight(const model_t *m, int u, const unit_io_t *io) {
  m->fns->backward_weight(m, u, io);
}
/* Largest per-sample output and saved sizes over the units (buffers the loop shares). */
int64_t model_max_y_numel(const model_t *m);
int64_t model_max_saved_numel(const model_t *m);

/* Views into one MLP unit's parameters (or gradients) laid out W (out×in, row-major) then b. */
static inline void *unit_W(void *unit_base, dtype_t dt) { return unit_base; }
static inline void *unit_b(const unit_t *u, void *unit_base, dtype_t dt) {
  return (char *)unit_base + (int64_t)u->out * u->in * (int64_t)dtype_size(dt);
}
#endif
