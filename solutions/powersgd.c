/* powersgd.c — PowerSGD: a bucket's gradient sent as a rank-R product P Q^T, what is left out fed
 * back next step (notes/13-compression.md; the steps are in powersgd.h).
 *
 * The strategy is chapter 02's bucketed DDP (solutions/ddp.c: its buckets, replicas, update and
 * layout) with one change: where DDP all-reduces a bucket's n gradients, this all-reduces P
 * (rows x R) when the bucket's backward is done, and Q (cols x R) in step(), after P is
 * orthonormalised. Each rank keeps its residual e (Ψ floats, the error feedback) and every bucket's Q
 * (the warm start). PyTorch: DDP's register_comm_hook(PowerSGDState, batched_powerSGD_hook). */
#include "powersgd.h" // psgd_shape_t, the math, powersgd_strategy
#include "check.h"    // xcalloc
#include "comm.h"     // comm_all_reduce_async, comm_wait
#include "data.h"     // rng_normal
#include "ddp.h"      // ddp_assign_buckets, ddp_replica_setup, ddp_update, ddp_layout
#include "exercise.h" // zl_exercise_todo (the generated stub calls it)
#include "tensor.h"   // tensor_alloc, tensor_free, tensor_at
#include "trace.h"    // TRAINER_PHASE's trace_begin, trace_end
#include <math.h>     // sqrt, ceil
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // free, strtol
#include <string.h>   // strncmp

psgd_shape_t psgd_shape(int64_t numel, int rank_max) {
  psgd_shape_t s = {.numel = numel};
  s.cols = (int)ceil(sqrt((double)numel));
  if ((int64_t)s.cols * s.cols < numel) s.cols++; /* sqrt's rounding */
  s.rows = (int)((numel + s.cols - 1) / s.cols);
  s.rank = rank_max < s.rows ? rank_max : s.rows;
  return s;
}

void psgd_mul_q(const float *M, psgd_shape_t s, const float *Q, float *P) {
  for (int i = 0; i < s.rows; i++) {
    int64_t lo = (int64_t)i * s.cols, n = s.numel - lo < s.cols ? s.numel - lo : s.cols;
    for (int k = 0; k < s.rank; k++) {
      double acc = 0;
      for (int64_t j = 0; j < n; j++)
        acc += (double)M[lo + j] * Q[j * s.rank + k];
      P[(int64_t)i * s.rank + k] = (float)acc;
    }
  }
}

void psgd_mul_pt(const float *M, psgd_shape_t s, const float *P, float *Q) {
  for (int j = 0; j < s.cols; j++)
    for (int k = 0; k < s.rank; k++) {
      double acc = 0;
      for (int i = 0; i < s.rows && (int64_t)i * s.cols + j < s.numel; i++)
        acc += (double)M[(int64_t)i * s.cols + j] * P[(int64_t)i * s.rank + k];
      Q[(int64_t)j * s.rank + k] = (float)acc;
    }
}

void psgd_orthonormalise(float *P, int rows, int R) {
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < R; k++) {
      for (int l = 0; l < k; l++) { /* take column l out of column k */
        double dot = 0;
        for (int i = 0; i < rows; i++)
          dot += (double)P[(int64_t)i * R + l] * P[(int64_t)i * R + k];
        for (int i = 0; i < rows; i++)
          P[(int64_t)i * R + k] = (float)(P[(int64_t)i * R + k] - dot * P[(int64_t)i * R + l]);
      }
      double norm = 0;
      for (int i = 0; i < rows; i++)
        norm += (double)P[(int64_t)i * R + k] * P[(int64_t)i * R + k];
      norm = sqrt(norm);
      if (norm > 0)
        for (int i = 0; i < rows; i++)
          P[(int64_t)i * R + k] = (float)(P[(int64_t)i * R + k] / norm);
    }
}

float psgd_entry(const float *P, const float *Q, int R, int i, int j) {
  double acc = 0;
  for (int k = 0; k < R; k++)
    acc += (double)P[(int64_t)i * R + k] * Q[(int64_t)j * R + k];
  return (float)acc;
}

void psgd_residual(float *e, psgd_shape_t s, const float *P, const float *Qw) {
  // BEGIN EXERCISE psgd_residual notes/13-compression.md
  // HINT: this rank sent only the part of M_w that P^ Q_w^T carries; the rest must not be lost: it
  // HINT: is kept, and added to next step's gradient. e holds M_w on the way in.
  // HINT2: element idx = i·cols + j of the bucket is entry (i, j) of the matrix; its sent value is
  // HINT2: psgd_entry(P, Qw, R, i, j) — the local Q_w, not the summed Q (that one is not here yet).
  // HINT3: for idx in [0, numel): i = idx / cols, j = idx % cols; e[idx] = e[idx] − psgd_entry(P, Qw,
  // HINT3: s.rank, i, j).
  for (int64_t idx = 0; idx < s.numel; idx++)
    e[idx] = e[idx] - psgd_entry(P, Qw, s.rank, (int)(idx / s.cols), (int)(idx % s.cols));
  // END EXERCISE
}

void psgd_decompress(const float *P, const float *Q, psgd_shape_t s, float *out) {
  for (int64_t idx = 0; idx < s.numel; idx++)
    out[idx] = psgd_entry(P, Q, s.rank, (int)(idx / s.cols), (int)(idx % s.cols));
}

void psgd_init_q(float *Q, psgd_shape_t s, uint64_t seed, int bucket) {
  for (int64_t i = 0; i < (int64_t)s.cols * s.rank; i++)
    Q[i] = rng_normal(seed, 0x9573D000u + bucket, i);
}

int powersgd_parse(const char *spec, int *rank, char *why, int nwhy) {
  char *end = NULL;
  long r = strncmp(spec, "powersgd:", 9) == 0 ? strtol(spec + 9, &end, 10) : 0;
  if (!end || end == spec + 9 || *end || r < 1 || r > 65536) {
    snprintf(why, nwhy, "must be powersgd:R with the rank R an integer in 1..65536");
    return -1;
  }
  *rank = (int)r;
  return 0;
}

int powersgd_check_cfg(const train_cfg_t *cfg, const char **flag, char *why, int nwhy) {
  *flag = "--compress";
  if (powersgd_parse(cfg->compress, &(int){0}, why, nwhy)) return -1;
  if (strcmp(cfg->variant, "bucketed") != 0)
    snprintf(why, nwhy, "needs --variant bucketed (P is all-reduced as a bucket's backward ends), not %s",
             cfg->variant);
  else if (cfg->wdt != DT_F32)
    snprintf(why, nwhy, "needs --precision fp32 (the residual and P, Q are fp32 sums of fp32 gradients)");
  else if (cfg->dev != DEV_CPU)
    snprintf(why, nwhy, "runs on --device cpu only (the low-rank products are host loops)");
  else if (cfg->optimizer == OPT_MUON)
    snprintf(why, nwhy, "takes --optimizer adamw or sgd (Muon on a low-rank gradient is not tested here)");
  else if (cfg->ckpt || cfg->resume)
    snprintf(why, nwhy, "takes no --ckpt or --resume (the residual e and the warm-start Q are not saved)");
  else
    return 0;
  return -1;
}

/* One bucket's low-rank pair and its all-reduces. P and Q live in one comm buffer. */
typedef struct psgd_bucket {
  psgd_shape_t s;
  float *P, *Q;         /* (rows x R) and (cols x R), row-major; Q persists: the warm start */
  comm_handle_t p_done; /* the all-reduce of P */
  char tag_p[40], tag_q[40];
} psgd_bucket_t;

typedef struct psgd_state {
  int n_buckets;
  ddp_bucket_t *buckets; /* [n_units] room, [n_buckets] used: chapter 02's, in backward order */
  int *unit_bucket;      /* [n_units] */
  psgd_bucket_t *pb;     /* [n_buckets] */
  tensor_t err;          /* (Ψ) fp32, this rank's residual e; holds M = g + e during a step */
  tensor_t lowrank;      /* every bucket's P and Q, fp32 */
} psgd_state_t;

/* The buckets of chapter 02 for this model and --bucket-mb (fp32 gradients); *pb sized, shapes set. */
static int psgd_buckets(const trainer_t *t, ddp_bucket_t *b, int *unit_bucket, psgd_shape_t *shapes) {
  int rank = 0;
  char why[128];
  powersgd_parse(t->cfg->compress, &rank, why, sizeof why);
  int n = ddp_assign_buckets(&t->model, t->cfg->bucket_mb, 4, b, unit_bucket);
  for (int k = 0; k < n; k++)
    shapes[k] = psgd_shape(b[k].numel, rank);
  return n;
}

static void psgd_setup(trainer_t *t) {
  psgd_state_t *st = xcalloc(1, sizeof *st, "powersgd state");
  t->priv = st;
  int U = t->model.n_units;
  ddp_replica_setup(t);
  st->buckets = xcalloc((size_t)U, sizeof *st->buckets, "powersgd buckets");
  st->unit_bucket = xcalloc((size_t)U, sizeof *st->unit_bucket, "powersgd unit buckets");
  psgd_shape_t *shapes = xcalloc((size_t)U, sizeof *shapes, "powersgd shapes");
  st->n_buckets = psgd_buckets(t, st->buckets, st->unit_bucket, shapes);
  st->pb = xcalloc((size_t)st->n_buckets + 1, sizeof *st->pb, "powersgd pairs");
  int64_t lowrank = 0;
  for (int k = 0; k < st->n_buckets; k++)
    lowrank += (int64_t)(shapes[k].rows + shapes[k].cols) * shapes[k].rank;
  st->err = tensor_alloc("error feedback (PowerSGD)", LEDGER_OPTIM, DT_F32, t->dev, t->model.padded_numel);
  st->lowrank = tensor_alloc("P, Q (PowerSGD)", LEDGER_COMM, DT_F32, t->dev, lowrank);
  int log = trainer_prints(t);
  if (log)
    printf("powersgd: %d bucket%s, each a rows x cols matrix sent as P (rows x R) and Q (cols x R):\n",
           st->n_buckets, st->n_buckets > 1 ? "s" : "");
  float *at = st->lowrank.data;
  for (int k = 0; k < st->n_buckets; k++) {
    psgd_bucket_t *b = &st->pb[k];
    b->s = shapes[k];
    b->P = at;
    b->Q = at + (int64_t)b->s.rows * b->s.rank;
    at = b->Q + (int64_t)b->s.cols * b->s.rank;
    psgd_init_q(b->Q, b->s, t->cfg->seed, k);
    snprintf(b->tag_p, sizeof b->tag_p, "all_reduce P bucket %d", k);
    snprintf(b->tag_q, sizeof b->tag_q, "all_reduce Q bucket %d", k);
    if (log)
      printf("  bucket %d: %lld elements as %d x %d, rank %d: %lld floats sent instead of %lld\n", k,
             (long long)b->s.numel, b->s.rows, b->s.cols, b->s.rank,
             (long long)(b->s.rows + b->s.cols) * b->s.rank, (long long)b->s.numel);
  }
  free(shapes);
  trainer_report_extra(t, "n_buckets", st->n_buckets);
  if (log) fflush(stdout);
}

/* Bucket k's gradients are final: M = g + e, P = M Q, and P's all-reduce starts. */
static void psgd_post_backward(trainer_t *t, int u) {
  psgd_state_t *st = t->priv;
  int k = st->unit_bucket[u];
  if (!t->last_micro || k < 0 || u != st->buckets[k].first_unit) return;
  psgd_bucket_t *b = &st->pb[k];
  float *M = (float *)st->err.data + st->buckets[k].off;
  const float *g = (const float *)t->grads.data + st->buckets[k].off;
  for (int64_t i = 0; i < b->s.numel; i++)
    M[i] = g[i] + M[i];
  psgd_mul_q(M, b->s, b->Q, b->P);
  b->p_done =
      comm_all_reduce_async(t->comm, b->P, (int64_t)b->s.rows * b->s.rank, DT_F32, REDOP_SUM, b->tag_p);
}

/* Every P summed: orthonormalise, Q_w = M^T P^, the residual, Q's all-reduce; then g^ = P^ Q^T. */
static void psgd_step(trainer_t *t) {
  psgd_state_t *st = t->priv;
  comm_handle_t last = 0;
  trace_begin("powersgd: P^, Q_w, residual");
  for (int k = 0; k < st->n_buckets; k++) {
    psgd_bucket_t *b = &st->pb[k];
    float *M = (float *)st->err.data + st->buckets[k].off;
    comm_wait(t->comm, b->p_done);
    psgd_orthonormalise(b->P, b->s.rows, b->s.rank);
    psgd_mul_pt(M, b->s, b->P, b->Q); /* Q_w, this rank's */
    psgd_residual(M, b->s, b->P, b->Q);
    last = comm_all_reduce_async(t->comm, b->Q, (int64_t)b->s.cols * b->s.rank, DT_F32, REDOP_SUM, b->tag_q);
  }
  trace_end(NULL);
  if (last) TRAINER_PHASE("wait Q", comm_wait(t->comm, last));
  TRAINER_PHASE("decompress", for (int k = 0; k < st->n_buckets; k++)
                                  psgd_decompress(st->pb[k].P, st->pb[k].Q, st->pb[k].s,
                                                  (float *)t->grads.data + st->buckets[k].off));
  ddp_update(t);
}

static void psgd_teardown(trainer_t *t) {
  psgd_state_t *st = t->priv;
  if (!st) return;
  tensor_free(&st->err);
  tensor_free(&st->lowrank);
  free(st->buckets);
  free(st->unit_bucket);
  free(st->pb);
  free(st);
  t->priv = NULL;
}

double powersgd_bytes(const model_t *m, double bucket_mb, int N, int R) {
  int U = m->n_units;
  ddp_bucket_t *b = xcalloc((size_t)U, sizeof *b, "powersgd formula buckets");
  int *ub = xcalloc((size_t)U, sizeof *ub, "powersgd formula units");
  int n = ddp_assign_buckets(m, bucket_mb, 4, b, ub);
  double floats = 0;
  for (int k = 0; k < n; k++) {
    psgd_shape_t s = psgd_shape(b[k].numel, R);
    floats += (double)(s.rows + s.cols) * s.rank;
  }
  free(b);
  free(ub);
  return 2.0 * (N - 1) / N * floats * 4;
}

/* DDP's states plus the residual (4Ψ, with the optimizer's); bytes: P and Q of every bucket. */
static void psgd_formula(const trainer_t *t, formula_t *f) {
  formula_stage(f, 0, (double)t->model.numel, t->world, t->wdt, train_opt_states(t->cfg));
  int rank = 0;
  char why[128];
  powersgd_parse(t->cfg->compress, &rank, why, sizeof why);
  f->optim += 4.0 * (double)t->model.numel;
  f->comm_bytes = powersgd_bytes(&t->model, t->cfg->bucket_mb, t->world, rank);
  snprintf(f->comm_text, sizeof f->comm_text, "2(N-1)/N x sum (rows+cols)R x 4 B");
  snprintf(f->mem_text, sizeof f->mem_text, "DDP's + 4 psi (residual)");
}

static const strategy_t g_powersgd = {.name = "ddp-powersgd",
                                      .stage = 0,
                                      .setup = psgd_setup,
                                      .post_backward = psgd_post_backward,
                                      .step = psgd_step,
                                      .teardown = psgd_teardown,
                                      .layout = ddp_layout,
                                      .formula = psgd_formula};

const strategy_t *powersgd_strategy(void) { return &g_powersgd; }
