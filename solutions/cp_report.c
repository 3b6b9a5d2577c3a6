/* cp_report.c — chapter 10's checks, formulas and end-of-run lines (cp.h; notes/10-long-sequences.md):
 * the refusals of --cp, --cp-comm and --cp-a2a before MPI starts; the bytes a rank sends per step by
 * the ring and by the all-to-alls, and the activation bytes it keeps, from the shapes; and the cp:
 * lines that print them beside what the communicators measured. */
#include "cp_state.h" // cp_gpt_t, cp_mode, cp_att_saved
#include "cp.h"       // cp_check_args, cp_work_formula, cp_ring_*_numel, cp_layout_check
#include "args.h"     // args_error, args_env_world
#include "comm.h"     // comm_counters, comm_ctl_all_reduce_f64, comm_model_sent
#include "gpt.h"      // gpt_cp_acts_bytes
#include "train.h"    // trainer_t, trainer_report_extra, trainer_steps_run, trainer_prints
#include "ulysses.h"  // cp_ulysses_check, cp_usp_check, cp_ulysses_*_numel
#include <stdio.h>    // printf, snprintf
#include <string.h>   // strcmp

/* ---- the checks ---------------------------------------------------------------------------------- */
int cp_check_args(const train_cfg_t *cfg) {
  char v[32], va[32], why[160];
  int A = cp_group_a2a(cfg);
  snprintf(va, sizeof va, "%d", A);
  if (cfg->cp <= 1 && A > 1)
    return args_error("--cp-a2a", va, "needs --cp C > 1 (groups of A of the C context-parallel ranks)");
  if (cfg->cp <= 1) return 0;
  snprintf(v, sizeof v, "%d", cfg->cp);
  int world = args_env_world();
  if (strcmp(cfg->model_kind, "gpt") != 0)
    return args_error("--cp", v, "needs --model gpt (it splits a sequence)");
  if (world % cfg->cp)
    return args_error("--cp", v, "must divide the ranks (%d): D = ranks / C data-parallel groups of C",
                      world);
  if (A > 1 && cp_is_a2a(cfg))
    return args_error(
        "--cp-a2a", va,
        "is the hybrid of the ring (--cp-comm ring): --cp-comm a2a is the all-to-all over all C");
  if (A > 1 &&
      cp_usp_check(cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp, A, cfg->cp_balance, why, sizeof why)) {
    char ok[96] = ""; /* the A that work with this C, heads and seq_len */
    for (int d = 1, k = 0; d <= cfg->cp && k < 90; d++)
      if (!cp_usp_check(cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp, d, cfg->cp_balance, NULL, 0))
        k += snprintf(ok + k, sizeof ok - k, "%s%d", k ? ", " : "", d);
    return args_error("--cp-a2a", va,
                      "with --cp %d: %s (--seq-len %d, %d heads, --cp-balance %d): allowed %s", cfg->cp, why,
                      cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp_balance, *ok ? ok : "none");
  }
  if (cp_is_a2a(cfg) && cp_ulysses_check(cfg->gpt.seq_len, cfg->gpt.n_head, cfg->cp, why, sizeof why)) {
    char ok[96] = "";
    for (int d = 1, k = 0; d <= cfg->gpt.n_head && k < 90; d++)
      if (cfg->gpt.n_head % d == 0 && cfg->gpt.seq_len % d == 0)
        k += snprintf(ok + k, sizeof ok - k, "%s%d", k ? ", " : "", d);
    return args_error("--cp", v, "with --cp-comm a2a: %s (--seq-len %d, %d heads): allowed %s", why,
                      cfg->gpt.seq_len, cfg->gpt.n_head, ok);
  }
  if (A == 1 && !cp_is_a2a(cfg) &&
      cp_layout_check(cfg->gpt.seq_len, cfg->cp, cfg->cp_balance, why, sizeof why))
    return args_error("--cp", v, "%s (--seq-len %d, --cp-balance %d)", why, cfg->gpt.seq_len,
                      cfg->cp_balance);
  if (cfg->dev == DEV_CUDA)
    return cp_is_a2a(cfg) || A > 1
        ? args_error("--cp", v, "the all-to-all attention runs on the CPU only (--device cpu)")
        : args_error("--cp", v, "the ring attention runs on the CPU only (--device cpu)");
  if (cfg->sample || cfg->eval_every)
    return args_error("--cp", v,
                      "--sample and --eval-every need whole sequences on one rank; use 1 rank for them");
  return 0;
}

/* ---- the formulas --------------------------------------------------------------------------------- */
/* Activation bytes the loop keeps per rank for b loop samples (gpt.h's table with the ring's
 * attention): 4b·[S·E·(L+1) + S·V + L·(15SE + 4S + NH·S) + S·E + 2S] = per sequence that the rank
 * shares, S/C of its tokens: ∝ S/C, and linear in S (no S² term). With --recompute the L blocks'
 * and the head's saved activations become one buffer of the largest: 15SE + 4S + NH·S.
 * Ulysses (a2a) keeps its heads' probabilities and q k v instead of NH·S: 15SE + 4S + NH·S² + 3SE —
 * ∝ S/C for every term but NH·S² (the ordinary attention's, R·NH/C·S² on each rank: b·NH·S²).
 * The hybrid (--cp-a2a A) keeps the ring's lse and q k v and out in the heads' layout: 15SE + 4S + NH·S +
 * 4SE. */
static int64_t cp_acts_formula(gpt_shape_t s, int64_t b, int recompute, int mode) {
  /* gpt.c's: ch00_memory --cp uses it too */
  return gpt_cp_acts_bytes(s, b, recompute, cp_att_saved(s, mode));
}

/* fp32 elements one rank sends per layer and micro-batch of R rows (n positions each), forward
 * (bwd = 0) or backward (bwd = 1), by the ring (part 0: the ring of C, or the hybrid's ring of G = C/A
 * on blocks of A·n positions and E/A features) or by the all-to-alls (part 1: Ulysses' of C, or the
 * hybrid's of A). */
static int64_t cp_layer_numel(const train_cfg_t *cfg, int part, int bwd, int64_t R, int n, int E) {
  int C = cfg->cp, A = cp_group_a2a(cfg), G = C / A, mode = cp_mode(cfg);
  if (part == 0) {
    if (mode == CP_A2A) return 0;
    return bwd ? cp_ring_bwd_numel(G, R, A * n, E / A) : cp_ring_fwd_numel(G, R, A * n, E / A);
  }
  if (mode == CP_RING) return 0;
  int Ca = mode == CP_A2A ? C : A;
  return bwd ? cp_ulysses_bwd_numel(Ca, R, n, E) : cp_ulysses_fwd_numel(Ca, R, n, E);
}
/* Bytes one rank sends per step by the ring (part 0: K/V) or the all-to-alls (part 1): per layer and
 * micro-batch the backward's and the forward's, the forward's twice with --recompute (the loop reruns
 * each block's forward before its backward). */
static double cp_part_formula(const train_cfg_t *cfg, int part, int64_t R, int n, int E) {
  return 4.0 * cfg->gpt.n_layer * cfg->accum *
      ((1 + (cfg->recompute != 0)) * cp_layer_numel(cfg, part, 0, R, n, E) +
       cp_layer_numel(cfg, part, 1, R, n, E));
}

void cp_report_formulas(trainer_t *t, const cp_gpt_t *c) {
  const train_cfg_t *cfg = t->cfg;
  gpt_shape_t s = t->model.gpt;
  int C = cfg->cp, mode = cp_mode(cfg), a2a = mode == CP_A2A, A = cp_group_a2a(cfg);
  int64_t b = t->local_batch, R = b * C;
  trainer_report_extra(t, "cp", C);
  trainer_report_extra(t, "cp_a2a", a2a);
  trainer_report_extra(t, "cp_a2a_group", mode == CP_USP ? A : 0);
  trainer_report_extra(t, "cp_acts_formula_bytes", (double)cp_acts_formula(s, b, cfg->recompute, mode));
  if (mode != CP_A2A)
    trainer_report_extra(t, "cp_kv_bytes_formula", cp_part_formula(cfg, 0, R, c->g.n, c->E));
  if (mode != CP_RING)
    trainer_report_extra(t, "cp_a2a_bytes_formula", cp_part_formula(cfg, 1, R, c->g.n, c->E));
  /* one layer's forward on one micro-batch, per rank: what notes/10's table derives side by side; and
   * forward + backward (the ring's part and the all-to-alls' part together) */
  double f0 = cp_layer_numel(cfg, 0, 0, R, c->g.n, c->E), f1 = cp_layer_numel(cfg, 1, 0, R, c->g.n, c->E);
  double b0 = cp_layer_numel(cfg, 0, 1, R, c->g.n, c->E), b1 = cp_layer_numel(cfg, 1, 1, R, c->g.n, c->E);
  trainer_report_extra(t, "cp_layer_fwd_bytes_formula", 4.0 * (f0 + f1));
  trainer_report_extra(t, "cp_layer_bytes_formula", 4.0 * (f0 + f1 + b0 + b1));}

/* ---- the end-of-run lines (the transform's report) -------------------------------------------- */
void cp_report(trainer_t *t) {
  const cp_gpt_t *c = t->model.ctx;
  const train_cfg_t *cfg = t->cfg;
  comm_wait_all(c->g.c);
  comm_counters_t k = comm_counters(c->g.c);
  int steps = trainer_steps_run(t), C = c->C; /* after --resume: the steps this run made, not --steps */
  int64_t b = t->local_batch, R = b * C, L = t->model.gpt.n_layer;
  double kv = (double)k.sent[CO_SEND] / steps, tok = (double)k.sent[CO_ALL_GATHER] / steps;
  double kv_f = cp_part_formula(cfg, c->u && !c->ring ? 1 : 0, R, c->g.n, c->E);
  /* the time the communication stream spent in the ring's hops and in the all-to-alls, per step: the
   * hops run under the fold's compute (hidden but for what sticks out), the all-to-alls block the
   * attention (exposed) — make bench-long's emulated nodes put the two side by side */
  comm_counters_t kr = c->ring ? (comm_wait_all(c->ring->c), comm_counters(c->ring->c)) : k;
  comm_counters_t ka = c->ring ? (comm_wait_all(c->ga), comm_counters(c->ga)) : k;
  trainer_report_extra(t, "cp_kv_busy_ms_per_step",
                       (kr.busy_us[CO_SEND] + kr.busy_us[CO_RECV]) / steps / 1000.0);
  trainer_report_extra(t, "cp_a2a_busy_ms_per_step", ka.busy_us[CO_ALL_TO_ALL] / steps / 1000.0);
  /* and the time this rank's compute waited for them: exposed (busy − exposed: hidden under the fold) */
  const cp_ring_t *rw = c->ring ? c->ring : c->u ? NULL : &c->g;
  trainer_report_extra(t, "cp_kv_wait_ms_per_step", rw ? rw->wait_us / steps / 1000.0 : 0.0);
  trainer_report_extra(t, "cp_a2a_wait_ms_per_step", c->u ? c->u->wait_us / steps / 1000.0 : 0.0);
  double tok_f = 2.0 * cfg->accum * comm_model_sent(CO_ALL_GATHER, C * b * c->S, DT_F32, C, c->g.r, 0);
  /* Ulysses: the all-to-alls' bytes; every rank attends all S positions of NH/C heads */
  if (c->u && !c->ring) {
    double a2a = (double)k.sent[CO_ALL_TO_ALL] / steps, a2a_f = kv_f;
    trainer_report_extra(t, "cp_a2a_bytes_per_step", a2a);
    trainer_report_extra(t, "cp_tok_bytes_per_step", tok);
    trainer_report_extra(t, "cp_work_max", (double)R * (c->NH / C) * c->S * (c->S + 1.0) / 2);
    if (!trainer_prints(t)) return;
    printf(
        "cp: C=%d, --cp-comm a2a (Ulysses): each rank %d of the %d positions of every sequence (contiguous); "
        "attention on %d of the %d heads over all %d\n",
        C, c->g.n, c->S, c->NH / C, c->NH, c->S);
    printf("cp: all-to-all bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd "
           "4*(C-1)*R*n*E/C + "
           "bwd 4*(C-1)*R*n*E/C], R = %lld rows, n = %d, E = %d: %.0f; the ring would send %.0f)\n",
           a2a, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", (long long)R, c->g.n, c->E, a2a_f,
           4.0 * L * cfg->accum *
               ((1 + (cfg->recompute != 0)) * cp_ring_fwd_numel(C, R, c->g.n, c->E) +
                cp_ring_bwd_numel(C, R, c->g.n, c->E)));
    printf("cp: token and target all-gathers per rank per step %.0f bytes (formula %.0f)\n", tok, tok_f);
    fflush(stdout);
    return;
  }
  /* the hybrid: the ring's hops on the ring's communicator, the all-to-alls on the group's */
  double a2a = 0, a2a_f = 0;
  int A = c->A, G = C / A; /* the ring's size (G = C without the hybrid) and each rank's heads in it */
  const cp_ring_t *rg = c->ring ? c->ring : &c->g;
  if (c->ring) {
    kv = (double)kr.sent[CO_SEND] / steps;
    a2a = (double)ka.sent[CO_ALL_TO_ALL] / steps;
    a2a_f = cp_part_formula(cfg, 1, R, c->g.n, c->E);
  }
  /* the attention work of one layer's forward on one micro-batch: max and sum over the group (the
   * hybrid: the ring of G on NH/A heads, the A ranks of a group alike) */
  double w[2] = {(double)rg->work_fwd, (double)rg->work_fwd}, wmax = 0, wsum = 0;
  comm_ctl_all_reduce_f64(c->g.c, &w[0], 1, REDOP_MAX);
  comm_ctl_all_reduce_f64(c->g.c, &w[1], 1, REDOP_SUM);
  for (int q = 0; q < G; q++) {
    double f = (double)cp_work_formula(c->S, G, cfg->cp_balance, q) * R * (c->NH / A);
    wmax = f > wmax ? f : wmax;
    wsum += A * f;
  }
  double other = 0, osum = 0; /* the other layout's formula, for the line */
  for (int q = 0; q < G; q++) {
    double f = (double)cp_work_formula(c->S, G, !cfg->cp_balance, q);
    other = f > other ? f : other;
    osum += f;
  }
  double imb = w[0] / (w[1] / C), imb_other = other / (osum / G);
  trainer_report_extra(t, "cp_kv_bytes_per_step", kv);
  trainer_report_extra(t, "cp_tok_bytes_per_step", tok);
  trainer_report_extra(t, "cp_work_max", w[0]);
  trainer_report_extra(t, "cp_work_formula_max", wmax);
  trainer_report_extra(t, "cp_imbalance", imb);
  if (c->ring) trainer_report_extra(t, "cp_a2a_bytes_per_step", a2a);
  if (!trainer_prints(t)) return;
  if (c->ring) {
    printf("cp: C=%d, --cp-a2a %d (the 2-D hybrid): all-to-alls inside %d groups of %d consecutive ranks, "
           "the ring across "
           "the %d groups on %d of the %d heads; group g holds %s of the %d positions (%d per rank)\n",
           C, A, G, A, G, c->NH / A, c->NH, cfg->cp_balance ? "chunks g and 2G-1-g of 2G" : "chunk g of G",
           c->S, c->g.n);
    printf("cp: all-to-all bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd "
           "4*(A-1)*R*n*E/A + "
           "bwd 4*(A-1)*R*n*E/A], R = %lld rows, n = %d, E = %d: %.0f)\n",
           a2a, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", (long long)R, c->g.n, c->E, a2a_f);
    printf("cp: K/V ring bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd "
           "(G-1)*2*R*n*E + bwd "
           "((G-1)*4 + 2)*R*n*E], G = %d: %.0f)\n",
           kv, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", G, kv_f);
  } else {
    printf("cp: C=%d, %s: each rank %d of the %d positions of every sequence\n", C,
           cfg->cp_balance ? "balanced (chunks q and 2C-1-q of 2C)" : "contiguous (chunk q of C)", c->g.n,
           c->S);
    printf("cp: K/V ring bytes sent per rank per step %.0f  (formula 4 B x L %lld x accum %d x [%sfwd "
           "(C-1)*2*R*n*E + bwd "
           "((C-1)*4 + 2)*R*n*E], R = %lld rows, n = %d, E = %d: %.0f)\n",
           kv, (long long)L, cfg->accum, cfg->recompute ? "2 x " : "", (long long)R, c->g.n, c->E, kv_f);
  }
  printf("cp: token and target all-gathers per rank per step %.0f bytes (formula %.0f)\n", tok, tok_f);
  printf(
      "cp: attention work per rank (score pairs, one layer's forward of one micro-batch): max %.0f mean %.0f "
      "(formula max %.0f mean %.0f); imbalance max/mean %.3f (--cp-balance %d would give %.3f)\n",
      w[0], w[1] / C, wmax, wsum / C, imb, !cfg->cp_balance, imb_other);
  fflush(stdout);
}
