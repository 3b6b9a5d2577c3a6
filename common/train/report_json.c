/* report_json.c — the --json results of a run (report.h; the schema: notes/design.md, "The results
 * JSON"): every number measured on its rank beside its strategy's formula, the losses, the
 * strategy's extras. */
#include "report_internal.h" // rank_numbers_t, report_json_text, report_fmt_bytes
#include "check.h"           // die
#include "comm.h"            // comm_backend_name, CO_*
#include "formula.h"         // formula_t
#include <math.h>            // isfinite, isnan
#include <stdarg.h>          // va_list
#include <stdio.h>           // vsnprintf
#include <stdlib.h>          // realloc

/* A growing string for the JSON object. */
typedef struct sbuf { char *p; int64_t len, cap; } sbuf_t;
static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int64_t room = b->cap - b->len;
    int k = vsnprintf(b->p ? b->p + b->len : NULL, (size_t)(room > 0 ? room : 0), fmt, ap);
    va_end(ap);
    if (k < room) {
      b->len += k;
      return;
    }
    b->cap = (b->cap + k + 1) * 2;
    b->p = realloc(b->p, (size_t)b->cap);
    if (!b->p) die("error: out of memory writing the report");
  }
}

/* A JSON number, or null when not finite (a diverged loss must not make the file unreadable). */
static const char *jnum(char *dst, size_t n, double x) {
  if (isfinite(x)) snprintf(dst, n, "%.9g", x);
  else snprintf(dst, n, "null");
  return dst;
}

char *report_json_text(const trainer_t *t, const report_run_t *run, const rank_numbers_t *all,
                       const formula_t *f, int64_t *len) {
  const train_cfg_t *cfg = t->cfg;
  int N = t->model_world, NR = report_rows(t), steps = run->nsteps;
  sbuf_t b = {0};
  sb_printf(
      &b,
      "{\"chapter\": \"%s\", \"strategy\": \"%s\", \"world\": %d, \"device\": \"%s\", \"backend\": \"%s\", "
      "\"collectives\": \"%s\", \"precision\": \"%s\", \"optimizer\": \"%s\",\n",
      run->chapter, t->name, N, device_name(t->dev), comm_backend_name(t->comm),
      cfg->collectives == COLL_RING ? "ring" : "vendor", dtype_precision(cfg->wdt),
      train_opt_name(cfg));
  int whole = t->whole == &t->model; /* a schedule's model holds only this rank's units */
  sb_printf(&b, " \"params\": %lld, \"padded_params\": %lld,\n", (long long)t->whole->numel,
            (long long)(whole ? t->model.padded_numel : t->whole->numel));
  sb_printf(&b, " \"steps\": [");
  char num[40];
  for (int s = 0; s < steps; s++)
    sb_printf(&b, "%s{\"step\": %d, \"loss\": %s, \"ms\": %.4f}", s ? ",\n   " : "", s,
              jnum(num, sizeof num, run->steps[s].loss), run->steps[s].ms);
  char fpr[96];
  report_fingerprint(run->full_params, run->full_numel ? run->full_numel : t->whole->numel, fpr, sizeof fpr);
  sb_printf(&b, "],\n \"final_loss\": %s, \"params_fingerprint\": \"%s\",\n",
            jnum(num, sizeof num, run->steps[steps - 1].loss), fpr);
  sb_printf(&b, " \"memory\": {\"per_rank\": [");
  for (int r = 0; r < NR; r++) { /* each rank beside its own strategy's formula */
    const rank_numbers_t *q = &all[r];
    char fb[32], pb[32];
    int64_t ms = report_row_states(q, fb, pb, sizeof fb, "null");
    sb_printf(&b, "%s{\"rank\": %d, \"params\": %lld, \"grads\": %lld, \"master\": %lld, \"optim\": %lld, "
                  "\"model_states\": %lld, \"formula_model_states\": %s, \"padding_bytes\": %s, "
                  "\"acts_peak\": %lld, \"comm_peak\": %lld, \"peak\": %lld, \"device_used\": %lld",
              r ? ",\n   " : "", r, (long long)q->params, (long long)q->grads, (long long)q->master,
              (long long)q->optim, (long long)ms, fb, pb, (long long)q->acts_peak, (long long)q->comm_peak,
              (long long)q->peak, (long long)q->device_used);
    /* the host arena (offload): every rank, zeros when nothing is offloaded */
    const int64_t *h = q->host;
    sb_printf(&b,
              ", \"host\": {\"params\": %lld, \"grads\": %lld, \"master\": %lld, \"optim\": %lld, "
              "\"acts\": %lld, \"comm\": %lld, \"peak\": %lld}}",
              (long long)h[LEDGER_PARAMS], (long long)h[LEDGER_GRADS], (long long)h[LEDGER_MASTER],
              (long long)h[LEDGER_OPTIM], (long long)h[LEDGER_ACTS], (long long)h[LEDGER_COMM],
              (long long)q->host_peak);
  }
  char fp[32], fg[32], fm[32], fo[32], fh[32], fb[32];
  report_fmt_bytes(fp, sizeof fp, f->params);
  report_fmt_bytes(fg, sizeof fg, f->grads);
  report_fmt_bytes(fm, sizeof fm, f->master);
  report_fmt_bytes(fo, sizeof fo, f->optim);
  report_fmt_bytes(fh, sizeof fh, f->host);
  report_fmt_bytes(fb, sizeof fb, f->params + f->grads + f->master + f->optim);
  /* rank 0's formula; "every_rank": false when the ranks' differ (a pipeline's stages) */
  sb_printf(
      &b,
      "],\n   \"formula\": {\"params\": %s, \"grads\": %s, \"master\": %s, \"optim\": %s, \"host\": %s, "
      "\"total\": %s, \"text\": \"%s\", \"every_rank\": %s}},\n",
      fp, fg, fm, fo, fh, fb, f->mem_text, report_uniform(all, NR) ? "true" : "false");
  /* Traffic: mean over ranks (exactly the formula for ring all-reduces of Ψ elements; single
   * ranks differ by a chunk when N does not divide a buffer), and every rank's own number. */
  double total = 0, by_op[CO_NOPS] = {0}, fc = 0;
  for (int r = 0; r < NR; r++) fc += all[r].f_comm;
  /* each rank's formula: their mean when they differ */
  fc = report_uniform(all, NR) ? f->comm_bytes : fc / NR;
  for (int r = 0; r < NR; r++)
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) {
        total += (double)all[r].sent[op];
        by_op[op] += (double)all[r].sent[op];
      }
  sb_printf(&b, " \"comm\": {\"bytes_per_step_per_rank\": %.6f, \"formula_bytes_per_step_per_rank\": %.6f,\n",
            total / NR / steps, fc);
  sb_printf(&b,
            "   \"by_op\": {\"all_reduce\": %.6f, \"reduce_scatter\": %.6f, \"all_gather\": %.6f, "
            "\"broadcast\": %.6f, "
            "\"reduce\": %.6f, \"send\": %.6f, \"all_to_all\": %.6f},\n",
            by_op[CO_ALL_REDUCE] / NR / steps, by_op[CO_REDUCE_SCATTER] / NR / steps,
            by_op[CO_ALL_GATHER] / NR / steps, by_op[CO_BROADCAST] / NR / steps,
            by_op[CO_REDUCE] / NR / steps, by_op[CO_SEND] / NR / steps, by_op[CO_ALL_TO_ALL] / NR / steps);
  /* the stream's time in each op (on the MPI engine: wall time, waits for peers included) */
  double busy[CO_NOPS] = {0};
  for (int r = 0; r < NR; r++)
    for (int op = 0; op < CO_NOPS; op++) busy[op] += all[r].busy_us[op];
  sb_printf(&b,
            "   \"busy_ms_per_step_per_rank\": {\"all_reduce\": %.4f, \"reduce_scatter\": %.4f, "
            "\"all_gather\": %.4f, "
            "\"broadcast\": %.4f, \"send\": %.4f, \"recv\": %.4f, \"all_to_all\": %.4f},\n",
            busy[CO_ALL_REDUCE] / NR / steps / 1e3, busy[CO_REDUCE_SCATTER] / NR / steps / 1e3,
            busy[CO_ALL_GATHER] / NR / steps / 1e3, busy[CO_BROADCAST] / NR / steps / 1e3,
            busy[CO_SEND] / NR / steps / 1e3, busy[CO_RECV] / NR / steps / 1e3,
            busy[CO_ALL_TO_ALL] / NR / steps / 1e3);
  sb_printf(&b, "   \"per_rank\": [");
  for (int r = 0; r < NR; r++) {
    int64_t s = 0, calls = 0;
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) {
        s += all[r].sent[op];
        calls += all[r].calls[op];
      }
    sb_printf(
        &b,
        "%s{\"rank\": %d, \"sent_bytes\": %lld, \"p2p_sent_bytes\": %lld, \"calls\": %lld, \"steps\": %d}",
        r ? ", " : "", r, (long long)s, (long long)all[r].p2p_sent, (long long)calls, steps);
  }
  sb_printf(&b, "]},\n");
  /* topology (report_nodes.c): bytes per step across nodes, measured and formula, every rank */
  double inter = 0, fi = 0;
  for (int r = 0; r < NR; r++) {
    fi += all[r].f_inter;
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) inter += (double)all[r].inter_sent[op];
  }
  sb_printf(&b, " \"nodes\": {\"count\": %d, \"inter_bytes_per_step_per_rank\": %.6f, "
                "\"formula_inter_bytes_per_step_per_rank\": %.6f,\n   \"per_rank\": [",
            comm_nodes(t->world_comm), inter / NR / steps, fi / NR);
  for (int r = 0; r < NR; r++) {
    int64_t x = 0;
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) x += all[r].inter_sent[op];
    sb_printf(&b,
              "%s{\"rank\": %d, \"node\": %lld, \"inter_bytes_per_step\": %.6f, \"formula\": %.6f, "
              "\"tp_inter_bytes_per_step\": %.6f}",
              r ? ", " : "", r, (long long)all[r].node, (double)x / steps, all[r].f_inter,
              (double)all[r].tp_inter_sent / steps);
  }
  sb_printf(&b, "]},\n");
  if (t->group_comm) { /* --tp: the TP groups' all-reduces, apart from the DP traffic above */
    sb_printf(&b, " \"tp\": {\"T\": %d, \"dp\": %d, \"params_full\": %lld, \"per_rank\": [",
              comm_world(t->group_comm), N, (long long)(run->full_numel ? run->full_numel : t->whole->numel));
    for (int r = 0; r < NR; r++)
      sb_printf(
          &b,
          "%s{\"rank\": %d, \"tp_rank\": %lld, \"calls_per_step\": %.6f, \"formula_calls_per_step\": %lld, "
          "\"bytes_per_step\": %.6f, \"formula_bytes_per_step\": %lld, \"pa_gathers_per_step\": %.6f, "
          "\"formula_pa_gathers_per_step\": %lld, \"pa_bytes_per_step\": %.6f, "
          "\"formula_pa_bytes_per_step\": %lld}",
          r ? ",\n   " : "", r, (long long)all[r].tp_rank, (double)all[r].tp_calls / steps,
          (long long)all[r].tp_formula_calls, (double)all[r].tp_sent / steps,
          (long long)all[r].tp_formula_bytes, (double)all[r].pa_calls / steps,
          (long long)all[r].pa_formula_calls, (double)all[r].pa_sent / steps,
          (long long)all[r].pa_formula_bytes);
    sb_printf(&b, "]},\n");
  }
  /* Extras: timing summary, overlap from the trace, the strategy's numbers. */
  double med = report_median_ms(run->steps, steps);
  if (isnan(run->teacher_entropy)) sb_printf(&b, " \"teacher_entropy\": null,"); /* text: no teacher */
  else sb_printf(&b, " \"teacher_entropy\": %.9g,", run->teacher_entropy);
  sb_printf(&b,
            " \"skipped_steps\": %d, \"median_step_ms\": %.4f, \"samples_per_s\": %.2f, \"batch\": %lld, "
            "\"accum\": %d, \"seed\": %llu",
            run->skipped_steps, med, med > 0 ? (double)cfg->batch / (med / 1000.0) : 0.0,
            (long long)cfg->batch, cfg->accum, (unsigned long long)cfg->seed);
  if (cfg->wdt == DT_F16) { /* the loss scale each step's backward used (notes/fp16.md) */
    sb_printf(&b, ", \"loss_scales\": [");
    for (int i = 0; i < steps; i++) sb_printf(&b, "%s%.17g", i ? ", " : "", run->steps[i].loss_scale);
    sb_printf(&b, "]");
  }
  if (report_is_gpt(t)) {
    const gpt_shape_t *g = &t->model.gpt;
    sb_printf(
        &b,
        ", \"model\": {\"kind\": \"gpt\", \"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"seq_len\": %d, "
        "\"vocab\": %d, \"units\": %d}, \"tokens_per_s\": %.2f",
        g->n_layer, g->n_head, g->n_embd, g->seq_len, g->vocab, t->model.n_units,
        med > 0 ? (double)cfg->batch * t->model.rows / (med / 1000.0) : 0.0);
    sb_printf(&b, ", \"evals\": [");
    for (int i = 0; i < run->nevals; i++)
      sb_printf(&b, "%s{\"step\": %d, \"val_loss\": %.9g}", i ? ", " : "", run->evals[i].step,
                run->evals[i].val_loss);
    sb_printf(&b, "]");
    if (run->nevals > 0) sb_printf(&b, ", \"final_val_loss\": %.9g", run->evals[run->nevals - 1].val_loss);
  } else
    sb_printf(&b,
              ", \"model\": {\"kind\": \"mlp\", \"D\": %d, \"H\": %d, \"L\": %d, \"C\": %d, \"units\": %d}",
              t->model.D, t->model.H, t->model.L, t->model.C, t->model.n_units);
  if (cfg->chapter_flags & TRAIN_FLAG_VARIANT) sb_printf(&b, ", \"variant\": \"%s\"", cfg->variant);
  if (cfg->chapter_flags & TRAIN_FLAG_BUCKET) sb_printf(&b, ", \"bucket_mb\": %.9g", cfg->bucket_mb);
  if (cfg->chapter_flags & TRAIN_FLAG_PREFETCH) sb_printf(&b, ", \"prefetch\": %d", cfg->prefetch);
  for (int i = 0; i < run->nextras; i++)
    sb_printf(&b, ", \"%s\": %.15g", run->extras[i].key, run->extras[i].value);
  double cu = 0, hu = 0, wu = 0;
  report_overlap_sums(all, NR, &cu, &hu, &wu);
  if (cu > 0 || wu > 0)
    sb_printf(
        &b,
        ",\n \"overlap\": {\"comm_ms_per_step_per_rank\": %.4f, \"hidden_ms_per_step_per_rank\": %.4f, "
        "\"hidden_fraction\": %.4f, \"wait_ms_per_step_per_rank\": %.4f, \"measured_from\": \"last_join\"}",
        cu / NR / steps / 1000.0, hu / NR / steps / 1000.0, cu > 0 ? hu / cu : 0.0, wu / NR / steps / 1000.0);
  /* where each rank's CPU went: a thread that polls while it waits shows as CPU beside no work */
  sb_printf(&b, ",\n \"cpu\": {\"per_rank\": [");
  for (int r = 0; r < NR; r++) {
    const cpuuse_t *u = &all[r].cpu;
    const comm_engine_stats_t *e = &all[r].engine;
    sb_printf(
        &b,
        "%s{\"rank\": %d, \"threads\": %d, \"wall_s\": %.3f, \"main_cpu_s\": %.3f, "
        "\"main_idle_s\": %.3f, \"other_threads_cpu_s\": %.3f, \"busiest_other_thread_cpu_s\": %.3f, "
        "\"main_comm_wait_s\": %.3f, \"engine\": {\"threads\": %d, \"helper_threads\": %d, \"streams_peak\": "
        "%d, "
        "\"busy_s\": %.3f, \"sleep_s\": %.3f, \"poll_s\": %.3f, \"polls_when_waited\": %d, \"cpu_s\": %.3f, "
        "\"helper_cpu_s\": %.3f, \"sleeps\": %lld, \"tests\": %lld}}",
        r ? ",\n   " : "", r, u->nthreads, u->wall_s, u->main_cpu_s, u->wall_s - u->main_cpu_s,
        u->other_cpu_s, u->max_other_cpu_s, e->main_wait_s, e->engine_threads, e->helper_threads,
        e->fibers_peak, e->engine_busy_s, e->engine_sleep_s, e->engine_poll_s, e->poll_when_waited,
        e->engine_cpu_s, e->helper_cpu_s, (long long)e->sleeps, (long long)e->tests);
  }
  sb_printf(
      &b,
      "], \"source\": \"/proc/self/task/*/stat utime+stime, since process start; main_comm_wait_s: time "
      "blocked in comm_wait; engine: the progress thread's wall time inside streams (busy), asleep, "
      "and polling without sleeps while the main thread waited (poll_s; only with a core per rank), its CPU "
      "(comm_engine.h)\"}");
  sb_printf(&b, "}\n");
  *len = b.len;
  return b.p;
}
