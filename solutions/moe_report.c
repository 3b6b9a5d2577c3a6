/* moe_report.c — chapter 12's end-of-run lines and flags (moe.h; notes/12-experts.md): what a MoE run
 * measured beside its formulas (loads, drops, the aux loss, the all-to-all bytes, expert and dense
 * state bytes per rank), the refusals of bad flags before MPI starts, and the transform of --ep 1. */
#include "moe_state.h" // moe_gpt_t, moe_stats_t, MOE_STATS_STEPS
#include "moe.h"      // moe_transform, moe_report, moe_check_args, moe_capacity, moe_unit_dense
#include "tp.h"       // tp_part_numel
#include "args.h"     // args_error, args_env_world
#include "comm.h"     // comm_counters, comm_ctl_all_reduce_f64
#include "gpt.h"      // gpt_moe_count_params, gpt_moe_dense_rank
#include "train.h"    // trainer_t, train_cfg_t, model_transform_t, trainer_report_extra
#include <stdio.h>    // printf, snprintf
#include <string.h>   // strcmp

/* ---- the end-of-run lines ---------------------------------------------------------------------- */

/* This rank's expert and dense elements of what it keeps (the strategy's layout: the own pieces'
 * fp32 states, the held working params) beside the formula. */
void moe_report(trainer_t *t) {
  moe_gpt_t *c = moe_ctx(&t->model);
  const moe_stats_t *st = t->transform_priv;
  const model_t *m = &t->model;
  int steps = trainer_steps_run(t), U = m->n_units, nm = 0;
  for (int u = 0; u < U; u++) nm += c->u[u].on;
  double own[2] = {0, 0}, held[2] = {0, 0}; /* [dense, expert] */
  int copies = 1; /* DDP: every rank of the expert group keeps a whole copy (its layout says replicated) */
  int replicated = 0;
  for (int u = 0; u < U; u++) {
    unit_layout_t lay = {0};
    t->strategy->layout(t, u, &lay);
    if (lay.replicated) copies = t->world, replicated = 1;
    int64_t d = moe_unit_dense(m, u);
    for (int k = 0; k < 2; k++) { /* the own pieces (two with two data-parallel groups) */
      unit_piece_t q = unit_layout_piece(&lay, k);
      int64_t o0 = q.off, o1 = q.off + q.numel;
      own[0] += (double)((o1 < d ? o1 : d) - (o0 < d ? o0 : d));
      own[1] += (double)((o1 > d ? o1 : d) - (o0 > d ? o0 : d));
    }
    for (int k = 0; k < 2; k++) { /* the held ranges (two: ZeRO-3 on two groups) */
      int64_t h0, hn;
      unit_layout_held(&lay, k, &h0, &hn);
      int64_t h1 = h0 + hn;
      held[0] += (double)((h1 < d ? h1 : d) - (h0 < d ? h0 : d));
      held[1] += (double)((h1 > d ? h1 : d) - (h0 > d ? h0 : d));
    }
  }
  gpt_moe_params_t p = gpt_moe_count_params(m->gpt, moe_shape_of(c));
  double exp_rank = (double)p.expert / c->ep; /* this rank's experts: E/P_E of every MoE block */
  double dense_rank = (double)gpt_moe_dense_rank(m->gpt, moe_shape_of(c), c->tp,
                                                 tp_part_numel(m->gpt.vocab, c->tp, c->tp_rank));
  if (t->whole != m) { /* --pp: this stage's units, its MoE blocks' share of the experts */
    int here = 0;
    dense_rank = 0;
    for (int u = 0; u < U; u++)
      here += c->u[u].on && m->units[u].numel > 0, dense_rank += (double)moe_unit_dense(m, u);
    exp_rank *= nm ? (double)here / nm : 0;
  }
  double a2a = st->a2a_sent / steps; /* the EP group's, counted at the last step's end (moe_step_end) */
  trainer_report_extra(t, "moe_drop_rate", st->chosen_total > 0 ? st->drop_total / st->chosen_total : 0);
  trainer_report_extra(t, "moe_load_max_over_mean_last", st->last_ratio);
  trainer_report_extra(t, "moe_aux_loss_last", st->last_aux);
  for (int s = 0; s < MOE_STATS_STEPS && s < steps; s++) {
    char key[32];
    snprintf(key, sizeof key, "moe_load_ratio_%d", s);
    trainer_report_extra(t, key, st->load_ratio[s]);
  }
  trainer_report_extra(t, "moe_expert_params_rank", exp_rank);
  trainer_report_extra(t, "moe_expert_own_rank", own[1]);
  trainer_report_extra(t, "moe_dense_own_rank", own[0]);
  trainer_report_extra(t, "moe_a2a_bytes_per_step", a2a);
  trainer_report_extra(t, "moe_a2a_bytes_formula", c->a2a_formula / steps);
  /* dropless: the saved expert rows one block held at most, beside the worst case (every token of the
   * EP group routed to this rank's experts: P_E·b·S·k/tp rows at the experts, b·S·k/tp sent) that a
   * reservation made before routing would have to hold */
  double worst = 0, peak = 4.0 * (double)c->rows_peak;
  if (c->cf == 0) {
    double sk = (double)t->local_batch * (double)((c->S * c->k + c->tp - 1) / c->tp);
    worst = 4.0 * (sk * c->ep * (c->C + 2 * c->F) + sk * c->C);
    comm_ctl_all_reduce_f64(t->world_comm, &peak, 1, REDOP_MAX);
    trainer_report_extra(t, "moe_dropless_rows_peak_bytes", peak);
    trainer_report_extra(t, "moe_dropless_rows_worst_bytes", worst);
  }
  if (c->rate > 0) trainer_report_extra(t, "moe_bias_hash", (double)st->bias_hash);
  /* the exchanges' time, ms per step, the mean over every rank: on the stream (their comm), waited for by
   * the main thread (exposed), of that inside the F's of the pairs dualpipev marks F&B; the compute of
   * those pairs' B's (their own waits taken out), and the most an overlap can hide, min(those two) per
   * rank; with --fb-overlap the backward's compute run while the forward's exchanges travelled (its
   * waits out); the other way: the waits inside those B's, the forward's compute run while the
   * backward's exchanges travelled (its waits out) */
  double fbs[5], *w = c->a2a_wait_role;
  trainer_fb_stats(t, fbs);
  double xt[8] = {0, c->a2a_wait_us / steps, (w[1] + w[4]) / steps, fbs[2] - (w[2] + w[3]) / steps, 0,
                  fbs[0] - w[3] / steps, (w[2] + w[3]) / steps, fbs[3] - w[4] / steps};
  if (c->ep_comm) /* the stream's time in the all-to-alls */
    comm_wait_all(c->ep_comm), xt[0] = comm_counters(c->ep_comm).busy_us[CO_ALL_TO_ALL] / steps;
  xt[4] = xt[2] < xt[3] ? xt[2] : xt[3];
  comm_ctl_all_reduce_f64(t->world_comm, xt, 8, REDOP_SUM);
  const char *xk[8] = {"moe_a2a_stream_ms_per_step", "moe_a2a_wait_ms_per_step",
                       "moe_a2a_wait_fb_ms_per_step", "fb_b_ms_per_step",
                       "fb_hideable_ms_per_step", "fb_hidden_ms_per_step",
                       "moe_a2a_wait_fb_b_ms_per_step", "fb_f_hidden_ms_per_step"};
  for (int i = 0; i < 8; i++) trainer_report_extra(t, xk[i], xt[i] / comm_world(t->world_comm) / 1000);
  double pieces[2] = {fbs[1], fbs[4]}; /* the halves' pieces inside each other, per step, all ranks' */
  comm_ctl_all_reduce_f64(t->world_comm, pieces, 2, REDOP_SUM);
  if (t->cfg->fb_overlap) {
    trainer_report_extra(t, "fb_b_pieces_all_ranks_per_step", pieces[0]);
    trainer_report_extra(t, "fb_f_pieces_all_ranks_per_step", pieces[1]);
  }
  /* bytes of fp32 state per owned parameter: the weight (or bf16's master) and the optimizer's states.
   * ZeRO cuts each unit's flat range into D pieces, so one rank's piece of a MoE block may be mostly
   * dense or mostly experts: the D ranks of an expert group together hold each once (+ padding) */
  double per = 4.0 * (1 + (t->cfg->optimizer == OPT_ADAMW ? 2 : 1)), grp[2] = {own[0], own[1]};
  /* ZeRO on two groups (solutions/zero_groups.c): the dense pieces tile the prefix over every rank */
  int dense_all = t->dense_comm && !replicated;
  comm_ctl_all_reduce_f64(t->comm, grp, 2, REDOP_SUM);
  if (dense_all) grp[0] = own[0], comm_ctl_all_reduce_f64(t->dense_comm, grp, 1, REDOP_SUM);
  trainer_report_extra(t, "moe_expert_state_bytes_group", grp[1] * per);
  trainer_report_extra(t, "moe_expert_state_bytes_formula", copies * exp_rank * per);
  trainer_report_extra(t, "moe_dense_state_bytes_group", grp[0] * per);
  trainer_report_extra(t, "moe_dense_state_bytes_formula", copies * dense_rank * per);
  if (!trainer_prints(t)) return;
  char width[64] = "4C MLPs", extra[96] = ""; /* DeepSeekMoE's fine-grained and shared experts, the gates */
  if (c->F != 4 * c->C) snprintf(width, sizeof width, "MLPs of width F = %lld", (long long)c->F);
  size_t n = 0;
  if (c->shared) n += (size_t)snprintf(extra + n, sizeof extra - n, ", shared %d", c->shared);
  if (c->gate_topk) snprintf(extra + n, sizeof extra - n, ", gates renormalised over the k");
  printf("moe: %d of %d blocks MoE, E=%d experts (%s), top-%d%s, %s; Ψ total %lld, active per token %lld "
         "(experts %lld)\n",
         nm, m->gpt.n_layer, c->E, width, c->k, extra, c->cf > 0 ? "capacity" : "dropless",
         (long long)p.total, (long long)p.active, (long long)p.expert);
  if (c->cf > 0)
    printf("moe: capacity factor %.2f: %.0f rows per expert and micro-batch; choices dropped %.4f of %.0f "
           "(they keep "
           "their residual)\n",
           c->cf, (double)moe_capacity(c->cf, t->local_batch * c->S, c->k, c->E),
           st->chosen_total > 0 ? st->drop_total / st->chosen_total : 0, st->chosen_total);
  printf("moe: load max/mean over the experts (mean over the MoE blocks): step 0 %.3f, last %.3f; aux loss "
         "last step "
         "%.6f (alpha %g)%s\n",
         st->load_ratio[0], st->last_ratio, st->last_aux, c->aux,
         c->rate > 0 ? "; router bias: the same bits on every rank (checked each step)" : "");

  printf("moe: fp32 states (weights + optimizer, %.0f B per parameter): the %d rank%s holding the same "
         "experts keep%s experts "
         "%.0f B, dense %.0f B%s (formula: %sE/P_E = %d/%d of the %lld expert parameters = %.0f B, the %lld "
         "dense%s = %.0f B; "
         "measured includes ZeRO's padding); this rank experts %.0f B, dense %.0f B\n",
         per, t->world, t->world > 1 ? "s" : "", t->world > 1 ? "" : "s", grp[1] * per, grp[0] * per,
         dense_all ? " over all the ranks (two groups: the dense part sharded over every rank)" : "",
         copies > 1 ? "D whole copies (DDP) of " : "", c->e_local, c->E, (long long)p.expert,
         copies * exp_rank * per, (long long)p.dense, c->tp_comm ? " (this TP rank's part of them)" : "",
         copies * dense_rank * per, own[1] * per, own[0] * per);
  printf("moe: working params held between steps: experts %.0f, dense %.0f parameters\n", held[1], held[0]);
  if (c->cf == 0)
    printf("moe: dropless saved expert rows, sized after routing: at most %.0f B per block on a rank (a "
           "reservation for the worst case, every token of the EP group here, would be %.0f "
           "B)\n", peak, worst);
  if (c->ep_comm)
    printf("moe: all-to-all bytes sent per rank per step %.0f  (formula %.0f: 4 exchanges (dispatch, combine "
           "and their backwards) x rows for other ranks' experts x C x 4 B%s)\n",
           a2a, c->a2a_formula / steps,
           c->cf > 0 ? ", rows = (P_E-1) x E/P_E x capacity"
                     : ", rows from this run's routing; the counts before them are control data");
  fflush(stdout);
}

/* --ep 1: the experts on every rank, no group (ep.h's transforms with --ep P_E > 1). */
const model_transform_t moe_transform = {
    .name = "moe",
    .setup = moe_setup,
    .step_end = moe_step_end,
    .report = moe_report,
};

/* ---- the flags ------------------------------------------------------------------------------- */
int moe_check_args(const train_cfg_t *cfg) {
  char v[64];
  if (strcmp(cfg->model_kind, "gpt") != 0)
    return args_error("--model", cfg->model_kind, "must be gpt: the experts replace the GPT's MLPs");
  if (cfg->topk > cfg->moe) {
    snprintf(v, sizeof v, "%d", cfg->topk);
    return args_error("--topk", v, "must be between 1 and --moe (%d): k distinct experts per token",
                      cfg->moe);
  }
  if (cfg->moe_every > cfg->gpt.n_layer) {
    snprintf(v, sizeof v, "%d", cfg->moe_every);
    return args_error("--moe-every", v,
                      "must be between 1 and the blocks (--n-layer %d): no block would be MoE",
                      cfg->gpt.n_layer);
  }
  int world = args_env_world();
  if (cfg->ep > 1 && (world % cfg->ep != 0 || cfg->moe % cfg->ep != 0)) {
    snprintf(v, sizeof v, "%d", cfg->ep);
    return args_error(
        "--ep", v,
        "must divide the ranks (%d) and the experts (--moe %d): P_E consecutive ranks hold E/P_E "
        "experts each",
        world, cfg->moe);
  }
  if (cfg->tp > 1) { /* TP on the attention inside each EP group (ep_tp.c) */
    snprintf(v, sizeof v, "%d", cfg->tp);
    if (cfg->ep % cfg->tp != 0)
      return args_error(
          "--tp", v,
          "must divide --ep (%d): T consecutive ranks of each EP group split the attention (for "
          "--tp alone: chapter 06)",
          cfg->ep);
    if (cfg->gpt.n_head % cfg->tp != 0)
      return args_error("--tp", v, "must divide the heads (--n-head %d): each rank a whole number of heads",
                        cfg->gpt.n_head);
    if (cfg->gpt.vocab < cfg->tp)
      return args_error("--tp", v, "must be at most the vocabulary (%d rows: every rank some)",
                        cfg->gpt.vocab);
    /* samples per micro-batch of a TP group */
    int64_t b = cfg->batch / ((int64_t)(world / cfg->tp) * cfg->accum);
    if (b * cfg->gpt.seq_len % cfg->tp != 0)
      return args_error(
          "--tp", v, "must divide the tokens of a micro-batch (%lld x %d): each TP rank routes 1/T of them",
          (long long)b, cfg->gpt.seq_len);
    if (cfg->eval_every)
      return args_error("--eval-every", NULL,
                        "not with --tp (the vocab-parallel head keeps V/T of each row: validation needs "
                        "whole logits, as in chapter 06)");
  }
  if (cfg->ep > 1 && cfg->sample > 0) {
    snprintf(v, sizeof v, "%d", cfg->sample);
    return args_error("--sample", v,
                      "must be 0 with --ep > 1 (generation runs on one rank's copy of the model)");
  }
  if (cfg->chapter_flags & TRAIN_FLAG_PIPELINE) { /* --pp: chapter 07's stages, the EP groups inside them */
    snprintf(v, sizeof v, "%d", cfg->pp);
    if (cfg->tp > 1)
      return args_error("--tp", NULL, "must be 1 with --pp: TP inside the EP group of a pipeline stage is "
                        "not built (chapter 07 runs --tp with --pp for the dense GPT)");
    if (world % (cfg->pp * cfg->ep) != 0)
      return args_error("--pp", v, "times --ep %d must divide the ranks (%d): D = ranks / (P x P_E) replicas "
                        "of each stage's EP group", cfg->ep, world);
    if (cfg->aux_loss_scope && strcmp(cfg->aux_loss_scope, "global") == 0)
      return args_error("--aux-loss-scope", "global", "must be local with --pp: its f_e sums a block's "
                        "micro-batch over every rank, a collective only the stage's ranks reach (not built)");
    if (cfg->ckpt || cfg->resume)
      return args_error(cfg->ckpt ? "--ckpt" : "--resume", cfg->ckpt ? cfg->ckpt : cfg->resume,
                        "with --pp: checkpoints of a MoE pipeline are not built");
  }
  if (cfg->router_bias_rate > 0 && cfg->resume) {
    snprintf(v, sizeof v, "%g", cfg->router_bias_rate);
    return args_error("--router-bias-rate", v,
                      "must be 0 with --resume: the router bias is not in the checkpoint (not built)");
  }
  return 0;
}

