/* tp_split.c — tensor parallelism as a model transform (train.h's model_transform_t): the split
 * of a whole model (tp_mlp.c, tp_gpt.c) and what the loop, the gradient norm, the report and the
 * export ask of it (--pa's hooks: tp_pa.c). The knowledge behind the answers — which parameters are
 * replicated, which
 * unit outputs the group shares, which all-reduces a unit runs — is tp_split.h's tp_unit_t, kept
 * in the split's m->ctx; notes/06-tensor-parallel.md explains each. */
#include "tp_split.h" // tp_split_t, tp_unit_t, tp_split_mlp, tp_split_gpt
#include "check.h"    // die, xmalloc, xcalloc, check_rank
#include "gpt.h"      // model_gpt_fns
#include "train.h"    // trainer_t, model_transform_t
#include <stdlib.h>   // free
#include <string.h>   // memcpy

/* ---- the machinery both splits share ------------------------------------------------------ */
void tp_mv(float *full, float *local, int64_t n, int to_local) {
  if (to_local) memcpy(local, full, (size_t)n * sizeof(float));
  else memcpy(full, local, (size_t)n * sizeof(float));
}

void tp_mv_cols(float *full, float *local, int rows, int in, int lo, int n, int to_local) {
  for (int o = 0; o < rows; o++) tp_mv(full + (int64_t)o * in + lo, local + (int64_t)o * n, n, to_local);
}

void tp_split_begin(tp_split_t *s, const model_t *m, comm_t *tp, tp_map_fn map,
                    tp_local_numel_fn local_numel) {
  s->tp = tp, s->T = comm_world(tp), s->r = comm_rank(tp);
  s->full = *m;
  s->full.units = xmalloc((size_t)m->n_units * sizeof(unit_t), "tp full units");
  memcpy(s->full.units, m->units, (size_t)m->n_units * sizeof(unit_t));
  s->full.ctx = NULL;
  s->units = xcalloc((size_t)m->n_units, sizeof(tp_unit_t), "tp unit infos");
  s->map = map, s->local_numel = local_numel;
}

void tp_split_end(tp_split_t *s) {
  free(s->full.units);
  free(s->units);
}

void tp_split_init_unit(const model_t *m, uint64_t seed, int u, float *dst) {
  const tp_split_t *s = m->ctx;
  float *w = xmalloc((size_t)s->full.units[u].numel * sizeof(float), "tp init (full unit)");
  s->full.fns->init_unit(&s->full, seed, u, w);
  s->map(s, u, s->r, w, dst, 1);
  for (int64_t k = m->units[u].numel; k < m->units[u].padded; k++) dst[k] = 0.0f; /* pad slots */
  free(w);
}

void tp_split_model(model_t *m, comm_t *tp) {
  if (m->fns == &model_gpt_fns) tp_split_gpt(m, tp);
  else if (m->fns == &model_mlp_fns) tp_split_mlp(m, tp);
  else
    die("rank %d: --tp: the %s model has no tensor-parallel split here (the MLP and the GPT have)",
        check_rank(), m->fns->name);
}

void tp_map_unit(const model_t *m, int u, int q, float *full, float *local, int to_local) {
  const tp_split_t *s = m->ctx;
  s->map(s, u, q, full, local, to_local);
}

int64_t tp_unit_local_numel(const model_t *m, int u, int q) {
  const tp_split_t *s = m->ctx;
  return s->local_numel(s, u, q);
}

int64_t tp_full_unit_numel(const model_t *m, int u) {
  return ((const tp_split_t *)m->ctx)->full.units[u].numel;
}

/* ---- the transform's answers -------------------------------------------------------------- */
/* Rank 0 of the TP group gathers every rank's units and maps each slice back where the full unit
 * has it; rank 0 last, so its replicated parameters are the ones kept. */
static float *tp_unsplit(const model_t *m, const float *local, int has_local, int64_t *full_numel) {
  const tp_split_t *s = m->ctx;
  *full_numel = s->full.numel;
  if (!has_local) return NULL; /* the same on the whole group (loop.c: DP rank 0 holds the export) */
  int T = s->T;
  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(s->tp, local, m->numel * (int64_t)sizeof(float), &all, &sizes);
  if (s->r != 0) {
    free(all);
    free(sizes);
    return NULL;
  }
  float *w = xmalloc((size_t)s->full.numel * sizeof(float), "tp unsplit weights");
  float **at = xcalloc((size_t)T, sizeof(float *), "tp unsplit blobs"); /* rank q's next unit */
  for (int64_t q = 0, boff = 0; q < T; boff += sizes[q] / 4, q++) at[q] = (float *)all + boff;
  int64_t fo = 0;
  for (int u = 0; u < m->n_units; u++) {
    for (int q = T - 1; q >= 0; q--) {
      s->map(s, u, q, w + fo, at[q], 0);
      at[q] += s->local_numel(s, u, q);
    }
    fo += s->full.units[u].numel;
  }
  free(at);
  free(all);
  free(sizes);
  return w;
}

/* The norm's ranges (train.h's norm_ranges): a unit's first rep_numel parameters are the same on every
 * TP rank (replicated), so TP rank 0 counts them and the others count only their split slices — the
 * sum over the group then holds every value once (Megatron's param_is_not_tensor_parallel_duplicate). */
static int tp_norm_ranges(const trainer_t *t, int u, int64_t r[][2]) {
  const tp_split_t *s = t->model.ctx;
  r[0][0] = s->r == 0 ? 0 : s->units[u].rep_numel, r[0][1] = t->model.units[u].numel;
  return 1;
}

/* The all-reduces the split units run (ar_calls of ar_numel per sample, fp32) in one step of this
 * rank: × micro-batches (t->n_micro: --accum, or a pipeline's M), of the units it holds; --recompute reruns
 * a
 * unit's forward, its forward all-reduces (ar_fwd_calls:
 * the g's) included; ar2_* a second size (the GPT's loss). */
void tp_unit_traffic(const tp_unit_t *k, const trainer_t *t, int u, int T, int r, int64_t *calls,
                     int64_t *bytes) {
  int64_t A = t->n_micro, b = t->local_batch;
  if (t->model.units[u].numel == 0) return; /* a pipeline keeps it on another stage */
  int64_t n = k->ar_calls;
  if (t->cfg->recompute && t->model.units[u].saved_numel > 0) n += k->ar_fwd_calls;
  *calls += (n + k->ar2_calls) * A;
  *bytes += n * A * comm_model_sent(CO_ALL_REDUCE, b * k->ar_numel, DT_F32, T, r, 0);
  *bytes += k->ar2_calls * A * comm_model_sent(CO_ALL_REDUCE, b * k->ar2_numel, DT_F32, T, r, 0);
  int rc = t->cfg->recompute && t->model.units[u].saved_numel > 0; /* --sp: the sequence's collectives */
  int64_t ag = k->ag_calls + (rc ? k->ag_fwd_calls : 0), rs = k->rs_calls + (rc ? k->rs_fwd_calls : 0);
  *calls += (ag + rs + k->ln_calls) * A;
  *bytes += ag * A * comm_model_sent(CO_ALL_GATHER, b * k->ar_numel, DT_F32, T, r, 0);
  *bytes += rs * A * comm_model_sent(CO_REDUCE_SCATTER, b * k->ar_numel, DT_F32, T, r, 0);
  *bytes += k->ln_calls * A * comm_model_sent(CO_ALL_REDUCE, k->ln_numel, DT_F32, T, r, 0);
}

static void tp_traffic(const trainer_t *t, int64_t *calls, int64_t *bytes) {
  const tp_split_t *s = t->model.ctx;
  *calls = *bytes = 0;
  for (int u = 0; u < t->model.n_units; u++) tp_unit_traffic(&s->units[u], t, u, s->T, s->r, calls, bytes);
}

/* tp_sp_transform's split: the GPT only (the MLP has no sequence; train_flags.c refuses it first). */
static void tp_sp_split_model(model_t *m, comm_t *tp) {
  if (m->fns != &model_gpt_fns)
    die("rank %d: --sp: the %s model has no sequence to split (the GPT has)", check_rank(), m->fns->name);
  tp_split_gpt_sp(m, tp);
}

/* The transform's to_local: this rank's slices of full unit u (tp_map_unit with q = this rank). */
static void tp_to_local(const model_t *m, int u, const float *full, float *local) {
  const tp_split_t *s = m->ctx;
  s->map(s, u, s->r, (float *)full, local, 1); /* full → local: full is only read */
}

const model_transform_t tp_transform = {
    .name = "tp",
    .split = tp_split_model,
    .norm_ranges = tp_norm_ranges,
    .pa_slice = tp_pa_slice,
    .pa_keep = tp_pa_keep,
    .pa_gather = tp_pa_gather,
    .pa_traffic = tp_pa_traffic,
    .traffic = tp_traffic,
    .traffic_text =
        "per split unit and micro-batch, its all-reduces of b x features fp32 elements, each 2(T-1)/T of "
        "its bytes (a column/row pair of the MLP: g forward, f backward; the first unit has no dx to sum)",
    .unsplit = tp_unsplit,
    .to_local = tp_to_local,
};

/* --sp: the same transform with the GPT split along the sequence between its attention and MLP
 * (tp_sp.h). No Pa: no unit output is replicated over the group any more (train_flags.c refuses
 * --pa 1 with --sp). The traffic formula counts the all-gathers and reduce-scatters too. */
const model_transform_t tp_sp_transform = {
    .name = "tp+sp",
    .split = tp_sp_split_model,
    .norm_ranges = tp_norm_ranges,
    .traffic = tp_traffic,
    .traffic_text =
        "per micro-batch, along the sequence: the embedding 1 reduce-scatter + 1 all-gather, each block "
        "6 all-gathers + 4 reduce-scatters (g, g-bar: the bytes of plain TP's 4 all-reduces, + 2 gathers of "
        "the LayerNorm outputs for the weight gradients), the head 2 + 1, of b x s x h fp32, (T-1)/T of "
        "their bytes each; all-reduces of 2h per LayerNorm (its weight gradients) and the loss's 3 of b x s",
    .unsplit = tp_unsplit,
    .to_local = tp_to_local,
};
