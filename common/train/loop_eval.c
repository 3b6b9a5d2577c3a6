/* loop_eval.c — --model gpt's validation loss (--eval-every) and --sample: forwards only,
 * through the strategy's hooks (so ZeRO-3 gathers each unit as in training), every rank in step.
 * notes/gpt.md. */
#include "loop_internal.h" // struct train_internal, train_forward_only
#include "check.h"          // die_on_rank, xmalloc, xcalloc
#include "comm.h"           // comm_ctl_all_reduce_f64
#include "data.h"           // data_val_batch, rng_uniform
#include "device.h"         // dev_memcpy
#include "ops.h"            // op_softmax_xent
#include "trace.h"          // trace_begin, trace_end
#include <math.h>           // exp, log
#include <stdio.h>          // printf
#include <stdlib.h>         // realloc, free
#include <string.h>         // memmove

/* Validation loss: --eval-batches global batches of the validation split, each split over the
 * ranks and micro-batches exactly as a training batch is; the mean over all their tokens.
 * Collective. */
static double evaluate(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  const model_t *m = &t->model;
  int64_t B = cfg->batch, b = t->local_batch, mb = B / cfg->accum;
  int U = m->n_units;
  const act_slot_t *sl = &in->pools[0].slots[0];
  double sum = 0;
  int slice, nslices; /* this rank's slice: its DP rank's, or with expert parallelism its own (of D·T) */
  trainer_data_slice(t, &slice, &nslices);
  trace_begin("eval");
  for (int e = 0; e < cfg->eval_batches; e++)
    for (int k = 0; k < cfg->accum; k++) {
      int64_t first = (int64_t)e * B + (int64_t)k * mb + (int64_t)slice * b;
      int *x = t->dev == DEV_CPU ? sl->in.data : in->xh, *y = t->dev == DEV_CPU ? in->y.data : in->yh;
      data_val_batch(&t->data, first, (int)b, x, y);
      if (t->dev != DEV_CPU) {
        dev_memcpy(t->dev, sl->in.data, DEV_CPU, x, (size_t)(b * m->in_numel) * 4);
        dev_memcpy(t->dev, in->y.data, DEV_CPU, y, (size_t)(b * m->rows) * sizeof(int));
      }
      train_forward_only(t, (int)b);
      sum += op_softmax_xent(t->dev, in->dy[0].data, sl->out[U - 1].data, (const int *)in->y.data,
                             (int)(b * m->rows), m->classes, 1.0f);
    }
  comm_ctl_all_reduce_f64(t->comm, &sum, 1, REDOP_SUM); /* control traffic */
  if (nslices > t->world) { /* the group's slices too, each once */
    if (comm_rank(t->group_comm) % trainer_batch_share(t)) sum = 0;
    comm_ctl_all_reduce_f64(t->group_comm, &sum, 1, REDOP_SUM);
  }
  trace_end(NULL);
  return sum / ((double)cfg->eval_batches * (double)B * m->rows);
}

void train_eval_record(trainer_t *t, int step) {
  struct train_internal *in = t->in;
  double v = evaluate(t);
  in->evals = realloc(in->evals, sizeof(report_eval_t) * (size_t)(in->nevals + 1));
  if (!in->evals) die_on_rank("out of host memory for the evaluations");
  in->evals[in->nevals++] = (report_eval_t){.step = step, .val_loss = v};
  if (t->rank == 0 && !t->cfg->quiet) {
    printf("step %5d  val loss %.6f  (%d validation batches; uniform over 256 bytes: %.4f)\n", step, v,
           t->cfg->eval_batches, log(256.0));
    fflush(stdout);
  }
}

/* --sample N: N bytes generated from a newline, one forward of ONE sequence per byte (the last
 * seq_len bytes as context), each byte drawn from softmax(logits / temperature) with
 * rng_uniform(seed, stream 0x3000, k) (greedy at temperature 0). Every rank computes the same
 * bytes (ZeRO-3 gathers are collective); rank 0 prints them. */
void train_sample_text(trainer_t *t) {
  const train_cfg_t *cfg = t->cfg;
  struct train_internal *in = t->in;
  const model_t *m = &t->model;
  int T = m->rows, V = m->classes, U = m->n_units, N = cfg->sample, len = 1;
  const act_slot_t *sl = &in->pools[0].slots[0];
  int *ctx = xcalloc((size_t)T, sizeof(int), "sample context");
  float *row = xmalloc((size_t)V * sizeof(float), "sample logits");
  char *text = xcalloc((size_t)N + 1, 1, "sample text");
  ctx[0] = '\n';
  trace_begin("sample");
  for (int k = 0; k < N; k++) {
    dev_memcpy(t->dev, sl->in.data, DEV_CPU, ctx, (size_t)T * sizeof(int));
    train_forward_only(t, 1); /* one sequence: positions >= len are padding the causal mask keeps out */
    dev_memcpy(DEV_CPU, row, t->dev, (float *)sl->out[U - 1].data + (int64_t)(len - 1) * V,
               (size_t)V * sizeof(float));
    int next = 0;
    for (int v = 1; v < V; v++)
      if (row[v] > row[next]) next = v;
    if (cfg->temperature > 0) { /* inverse CDF of softmax(row / temperature), in double */
      double mx = row[next], z = 0, cdf = 0, r = rng_uniform(cfg->seed, 0x3000, (uint64_t)k);
      for (int v = 0; v < V; v++) z += exp((row[v] - mx) / cfg->temperature);
      for (int v = 0; v < V; v++) {
        cdf += exp((row[v] - mx) / cfg->temperature) / z;
        if (r < cdf) { next = v; break; }
      }
    }
    text[k] = (char)((next >= 32 && next < 127) || next == '\n' || next == '\t' ? next : '?');
    if (len < T) ctx[len++] = next;
    else {
      memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int));
      ctx[T - 1] = next;
    }
  }
  trace_end(NULL);
  if (t->rank == 0) {
    printf("sample (%d bytes, temperature %g, seed %llu; bytes outside printable ASCII shown as ?):\n%s\n", N,
           cfg->temperature, (unsigned long long)cfg->seed, text);
    fflush(stdout);
  }
  free(ctx);
  free(row);
  free(text);
}

