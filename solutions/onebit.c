/* onebit.c — 1-bit Adam: after a warm-up of plain AdamW, the momentum crosses the link as signs and
 * one scale, the error fed back on both sides (notes/13-compression.md; the steps are in onebit.h).
 *
 * The strategy is chapter 02's bucketed DDP (solutions/ddp.c: buckets, replicas, update, layout).
 * Warm-up steps (t->step < K) are exactly ch02's: each bucket all-reduced as its backward ends, then
 * ddp_update's AdamW. Later steps: when a bucket's backward ends this rank folds its gradient into its
 * own momentum, compresses it (worker error e_w) and starts an all-to-all of the sign chunks; step()
 * lets each chunk's owner average and compress again (server error e_j), all-gathers the chunks and
 * applies the update with v frozen. DeepSpeed: OnebitAdam with its NcclBackend.compressed_allreduce
 * (which scales by |x|/sqrt(n); here mean|x|, the scale that minimises |x − s·sign(x)|). */
#include "onebit.h"   // onebit_chunk, onebit_scale, onebit_pack, onebit_decode, onebit_strategy
#include "check.h"    // xcalloc
#include "comm.h"     // comm_all_reduce_async, comm_all_to_all_async, comm_all_gather_async, comm_wait
#include "ddp.h"      // ddp_assign_buckets, ddp_replica_setup, ddp_update, ddp_layout
#include "elementwise.h" // ew_adamw_scalars: the step's and the frozen v's bias corrections
#include "tensor.h"   // tensor_alloc, tensor_free
#include "trace.h"    // TRAINER_PHASE's trace_begin, trace_end
#include <math.h>     // fabs, sqrtf
#include <stdio.h>    // printf, snprintf
#include <stdlib.h>   // free
#include <string.h>   // memcpy, memset, strcmp

int64_t onebit_chunk(int64_t n, int N) { return (n + 32LL * N - 1) / (32LL * N) * 32; }

float onebit_scale(const float *x, int64_t n) {
  double abs_sum = 0;
  for (int64_t i = 0; i < n; i++)
    abs_sum += fabs((double)x[i]);
  return n ? (float)(abs_sum / (double)n) : 0.0f;
}

void onebit_pack(const float *x, int64_t n, float s, uint32_t *words, float *err) {
  memset(words, 0, (size_t)((n + 31) / 32) * sizeof *words);
  for (int64_t i = 0; i < n; i++) {
    int plus = x[i] >= 0;
    if (plus) words[i / 32] |= 1u << (i % 32);
    err[i] = x[i] - (plus ? s : -s);
  }
}

void onebit_decode(const uint32_t *words, float s, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++)
    out[i] = (words[i / 32] >> (i % 32)) & 1u ? s : -s;
}

int onebit_check_cfg(const train_cfg_t *cfg, const char **flag, const char **value, char *why, int nwhy) {
  *flag = "--optimizer";
  *value = "onebit-adam";
  if (cfg->compress)
    snprintf(why, nwhy, "with --compress (it compresses the momentum itself: one compression at a time)");
  else if (strcmp(cfg->variant, "bucketed") != 0)
    snprintf(why, nwhy, "needs --variant bucketed (the momentum travels by buckets), not %s", cfg->variant);
  else if (cfg->wdt != DT_F32)
    snprintf(why, nwhy, "needs --precision fp32 (the fp32 momentum is what is compressed; bf16 not built)");
  else if (cfg->dev != DEV_CPU)
    snprintf(why, nwhy, "runs on --device cpu only (the sign packing is a host loop)");
  else if (cfg->clip > 0)
    snprintf(why, nwhy, "takes no --clip (after the warm-up no rank sees the summed gradient's norm)");
  else if (cfg->nonfinite != NONFINITE_ABORT)
    snprintf(why, nwhy, "takes --nonfinite abort only (a skipped step would desync the error feedback)");
  else if (cfg->buffer_mb > 0)
    snprintf(why, nwhy, "takes no --buffer-mb (the all-to-all of the signs is not pieced)");
  else if (cfg->ckpt || cfg->resume)
    snprintf(why, nwhy, "takes no --ckpt or --resume (the two error buffers are not saved)");
  else
    return 0;
  return -1;
}

/* One bucket's exchange: N blocks of wb words, each [scale, c/32 words of signs]. */
typedef struct onebit_bucket {
  int64_t off, n, chunk;       /* the flat range [off, off+n) and its chunk c per rank */
  int64_t wb;                  /* words per block: 1 + c/32 */
  uint32_t *send, *recv;       /* (N·wb) the all-to-all's */
  uint32_t *mine, *all;        /* (wb) this rank's server block, (N·wb) the all-gather's */
  float *server_err;           /* (c) e_j of this rank's chunk */
  comm_handle_t a2a;           /* the all-to-all, or in the warm-up the all-reduce */
  char tag_a2a[40], tag_ag[40];
} onebit_bucket_t;

/* Elements of chunk j that are in the bucket (the last chunks hold padding, or nothing). */
static int64_t chunk_len(const onebit_bucket_t *b, int j) {
  int64_t lo = j * b->chunk;
  return lo >= b->n ? 0 : b->n - lo < b->chunk ? b->n - lo : b->chunk;
}

typedef struct onebit_state {
  int n_buckets;
  ddp_bucket_t *buckets; /* [n_units] room, [n_buckets] used: chapter 02's, in backward order */
  int *unit_bucket;      /* [n_units] */
  onebit_bucket_t *ob;   /* [n_buckets] */
  tensor_t worker_err;   /* (Ψ) fp32 e_w; holds x = m_w + e_w while compressing */
  tensor_t server_err;   /* (Σ c) fp32, every bucket's e_j */
  tensor_t wire;         /* every bucket's send, recv, mine, all (32-bit words) */
} onebit_state_t;

static void onebit_setup(trainer_t *t) {
  onebit_state_t *st = xcalloc(1, sizeof *st, "onebit state");
  t->priv = st;
  int U = t->model.n_units, N = t->world;
  ddp_replica_setup(t);
  st->buckets = xcalloc((size_t)U, sizeof *st->buckets, "onebit buckets");
  st->unit_bucket = xcalloc((size_t)U, sizeof *st->unit_bucket, "onebit unit buckets");
  st->n_buckets = ddp_assign_buckets(&t->model, t->cfg->bucket_mb, 4, st->buckets, st->unit_bucket);
  st->ob = xcalloc((size_t)st->n_buckets + 1, sizeof *st->ob, "onebit exchanges");
  int64_t words = 0, chunks = 0;
  for (int k = 0; k < st->n_buckets; k++) {
    onebit_bucket_t *b = &st->ob[k];
    b->off = st->buckets[k].off;
    b->n = st->buckets[k].numel;
    b->chunk = onebit_chunk(b->n, N);
    b->wb = 1 + b->chunk / 32;
    words += (3LL * N + 1) * b->wb;
    chunks += b->chunk;
  }
  int64_t P = t->model.padded_numel;
  st->worker_err = tensor_alloc("worker error (1-bit Adam)", LEDGER_OPTIM, DT_F32, t->dev, P);
  st->server_err = tensor_alloc("server error (1-bit Adam)", LEDGER_OPTIM, DT_F32, t->dev, chunks);
  st->wire = tensor_alloc("sign words (1-bit Adam)", LEDGER_COMM, DT_F32, t->dev, words);
  uint32_t *at = st->wire.data;
  float *se = st->server_err.data;
  int log = trainer_prints(t);
  if (log)
    printf("onebit-adam: AdamW for %d step%s, then v frozen and the momentum sent as signs, %d bucket%s:\n",
           t->cfg->onebit_warmup, t->cfg->onebit_warmup > 1 ? "s" : "", st->n_buckets,
           st->n_buckets > 1 ? "s" : "");
  for (int k = 0; k < st->n_buckets; k++) {
    onebit_bucket_t *b = &st->ob[k];
    b->send = at, b->recv = at + N * b->wb, b->mine = at + 2 * N * b->wb, b->all = b->mine + b->wb;
    at = b->all + N * b->wb;
    b->server_err = se;
    se += b->chunk;
    snprintf(b->tag_a2a, sizeof b->tag_a2a, "all_to_all signs bucket %d", k);
    snprintf(b->tag_ag, sizeof b->tag_ag, "all_gather signs bucket %d", k);
    if (log)
      printf("  bucket %d: %lld elements, %d chunks of %lld signs: %lld words per rank, not %lld floats\n",
             k, (long long)b->n, N, (long long)b->chunk, (long long)b->wb, (long long)b->n);
  }
  trainer_report_extra(t, "n_buckets", st->n_buckets);
  trainer_report_extra(t, "warmup_steps", t->cfg->onebit_warmup);
  if (log) fflush(stdout);
}

/* Bucket k's gradients are final. Warm-up: DDP's all-reduce. Later: m_w, x = m_w + e_w, the worker's
 * compression into N blocks, and their all-to-all. */
static void onebit_post_backward(trainer_t *t, int u) {
  onebit_state_t *st = t->priv;
  int k = st->unit_bucket[u];
  if (!t->last_micro || k < 0 || u != st->buckets[k].first_unit) return;
  onebit_bucket_t *b = &st->ob[k];
  float *g = (float *)t->grads.data + b->off;
  if (t->step < t->cfg->onebit_warmup) { /* ch02's ddp_launch, the same call */
    b->a2a = comm_all_reduce_async(t->comm, g, b->n, DT_F32, REDOP_SUM, b->tag_a2a);
    return;
  }
  int N = t->world;
  const float *m = (const float *)t->opt_m.data + b->off;
  float *x = (float *)st->worker_err.data + b->off, b1 = t->hp.beta1, fN = (float)N;
  for (int64_t i = 0; i < b->n; i++)
    x[i] = (b1 * m[i] + (1.0f - b1) * (fN * g[i])) + x[i];
  float s = onebit_scale(x, b->n); /* one scale for the bucket, in every block */
  for (int j = 0; j < N; j++) { /* block j: [s, the signs of chunk j]; x becomes e_w */
    uint32_t *blk = b->send + j * b->wb;
    memset(blk, 0, (size_t)b->wb * sizeof *blk);
    memcpy(&blk[0], &s, sizeof s);
    onebit_pack(x + j * b->chunk, chunk_len(b, j), s, blk + 1, x + j * b->chunk);
  }
  b->a2a = comm_all_to_all_async(t->comm, b->send, b->recv, N * b->wb, DT_F32, b->tag_a2a);
}

/* This rank's chunk of bucket b: the N blocks averaged, e_j added, compressed, all-gathered. */
static comm_handle_t onebit_server(trainer_t *t, onebit_bucket_t *b, float *z) {
  int N = t->world, r = comm_rank(t->comm);
  int64_t len = chunk_len(b, r);
  comm_wait(t->comm, b->a2a);
  for (int64_t i = 0; i < len; i++) {
    double acc = 0;
    for (int w = 0; w < N; w++) {
      const uint32_t *blk = b->recv + w * b->wb;
      float s;
      memcpy(&s, &blk[0], sizeof s);
      acc += (blk[1 + i / 32] >> (i % 32)) & 1u ? s : -s;
    }
    z[i] = (float)(acc / N) + b->server_err[i];
  }
  float S = onebit_scale(z, len);
  memset(b->mine, 0, (size_t)b->wb * sizeof *b->mine);
  memcpy(&b->mine[0], &S, sizeof S);
  onebit_pack(z, len, S, b->mine + 1, b->server_err);
  return comm_all_gather_async(t->comm, b->mine, b->all, N * b->wb, DT_F32, b->tag_ag);
}

/* After the warm-up: every bucket's chunks served and gathered, m decoded, the update with v frozen. */
static void onebit_update(trainer_t *t) {
  onebit_state_t *st = t->priv;
  int N = t->world;
  comm_handle_t last = 0;
  int64_t most = 0;
  for (int k = 0; k < st->n_buckets; k++)
    most = st->ob[k].chunk > most ? st->ob[k].chunk : most;
  float *z = xcalloc((size_t)most + 1, sizeof *z, "onebit server chunk");
  trace_begin("1-bit: server average, compress");
  for (int k = 0; k < st->n_buckets; k++)
    last = onebit_server(t, &st->ob[k], z);
  trace_end(NULL);
  free(z);
  if (last) TRAINER_PHASE("wait signs", comm_wait(t->comm, last));
  /* the "norm" of a compressed step: sqrt Σ_w |g_w|², the ranks' own gradients (none sees the sum) */
  trainer_finish_grads(t, trainer_grad_sumsq(t, t->grads.data, -1), t->comm);
  for (int k = 0; k < st->n_buckets; k++) {
    onebit_bucket_t *b = &st->ob[k];
    for (int j = 0; j < N; j++) {
      float S;
      memcpy(&S, &b->all[j * b->wb], sizeof S);
      float *m = (float *)t->opt_m.data + b->off + j * b->chunk;
      onebit_decode(b->all + j * b->wb + 1, S, chunk_len(b, j), m);
    }
  }
  const adamw_hp_t *hp = &t->hp;
  ew_adamw_t k = ew_adamw_scalars(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, t->opt_t);
  float frozen = ew_adamw_scalars(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay,
                                  t->cfg->onebit_warmup).bc2_sqrt; /* v's correction stays step K's */
  float *w = t->params.data, *m = t->opt_m.data, *v = t->opt_v.data;
  trace_begin("optimizer (v frozen)");
  for (int64_t i = 0; i < t->model.padded_numel; i++)
    w[i] = w[i] * k.decay - k.step_size * (m[i] / (sqrtf(v[i]) / frozen + k.eps));
  trace_end(NULL);
}

static void onebit_step(trainer_t *t) {
  onebit_state_t *st = t->priv;
  if (t->step >= t->cfg->onebit_warmup) {
    onebit_update(t);
    return;
  }
  if (st->n_buckets) TRAINER_PHASE("wait grads", comm_wait(t->comm, st->ob[st->n_buckets - 1].a2a));
  ddp_update(t); /* AdamW: these steps are ch02's, bit for bit */
}

static void onebit_teardown(trainer_t *t) {
  onebit_state_t *st = t->priv;
  if (!st) return;
  tensor_free(&st->worker_err);
  tensor_free(&st->server_err);
  tensor_free(&st->wire);
  free(st->buckets);
  free(st->unit_bucket);
  free(st->ob);
  free(st);
  t->priv = NULL;
}

/* DDP's states plus the two errors; bytes: the run's mean over K all-reduce steps and S − K sign steps. */
double onebit_run_bytes(const model_t *m, double bucket_mb, int N, int K, int S, double *chunks) {
  int U = m->n_units;
  ddp_bucket_t *b = xcalloc((size_t)U, sizeof *b, "onebit formula buckets");
  int *ub = xcalloc((size_t)U, sizeof *ub, "onebit formula units");
  int n = ddp_assign_buckets(m, bucket_mb, 4, b, ub);
  double full = 0, signs = 0, sum_c = 0;
  for (int k = 0; k < n; k++) {
    int64_t c = onebit_chunk(b[k].numel, N);
    full += 2.0 * (N - 1) / N * (double)b[k].numel * 4;
    signs += 2.0 * (N - 1) * (1.0 + (double)c / 32) * 4;
    sum_c += (double)c;
  }
  free(b);
  free(ub);
  if (chunks) *chunks = sum_c;
  if (K > S) K = S;
  return (K * full + (S - K) * signs) / S;
}

static void onebit_formula(const trainer_t *t, formula_t *f) {
  formula_stage(f, 0, (double)t->model.numel, t->world, t->wdt, train_opt_states(t->cfg));
  double chunks = 0;
  const train_cfg_t *c = t->cfg;
  f->comm_bytes = onebit_run_bytes(&t->model, c->bucket_mb, t->world, c->onebit_warmup, c->steps, &chunks);
  f->optim += 4.0 * (double)t->model.padded_numel + 4.0 * chunks;
  snprintf(f->comm_text, sizeof f->comm_text, "mean of K x 2(N-1)/N 4n, (S-K) x 2(N-1)(4+c/8)");
  snprintf(f->mem_text, sizeof f->mem_text, "DDP's + 4 psi + 4 psi/N (errors)");
}

static const strategy_t g_onebit = {.name = "ddp-onebit-adam",
                                    .stage = 0,
                                    .setup = onebit_setup,
                                    .post_backward = onebit_post_backward,
                                    .step = onebit_step,
                                    .teardown = onebit_teardown,
                                    .layout = ddp_layout,
                                    .formula = onebit_formula};

const strategy_t *onebit_strategy(void) { return &g_onebit; }
