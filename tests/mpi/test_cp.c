/* test_cp.c — chapter 10's context parallelism in training (ch10_long --cp C; solutions/cp.h,
 * notes/10-long-sequences.md). The tiny GPT (L2 NH2 E32 S16 V256), 4 steps of SGD with momentum
 * and --clip 0.5, global batch 8, against 1 rank: every loss and every final weight within 1e-5
 * (the ring sums each query's keys block by block, in another order than the plain softmax);
 * per rank, the K/V bytes sent round the ring per step and the activation bytes the loop keeps
 * equal to the formulas written here from the shapes (--recompute too); CP × DP with ZeRO on the data
 * dimension;
 * the attention work per rank (causal imbalance) with and without --cp-balance; the refusals. */
#include "zl_test.h" // zl_launch, zl_run, zl_json_num, zl_json_all, zl_expect_floats, cr_assert

#define CP_TOL 1e-5
#define CP_SHAPE "--model gpt --gpt tiny --batch 8 --steps 4 --optimizer sgd --lr 0.1 --clip 0.5"
#define CP_S 16
#define CP_E 32
#define CP_L 2
#define CP_V 256
#define CP_NH 2
#define CP_LAUNCH(np, tag, name, args) \
  zl_launch(np, 60, tag, name, "%s/ch10_long " CP_SHAPE " %s", ZL_BIN, args)

/* K/V bytes one rank sends per step: per layer, forward (C−1) hops of [K|V] (twice with
 * --recompute: the block's forward runs again before its backward) and backward (C−1) hops of
 * [K|V|dK|dV] and one of [dK|dV], each block R·n·E floats per K, R = C·b rows of n = S/C. */
static double kv_bytes(int C, double b, int rc) {
  double R = C * b, n = (double)CP_S / C, blk = R * n * CP_E;
  return 4.0 * CP_L * ((1 + rc) * (C - 1) * 2 * blk + (C - 1) * 4 * blk + 2 * blk);
}
/* Activation bytes the loop keeps per rank for b loop samples (S tokens each: b·S = this rank's
 * share of batch/D sequences at S/C positions): outputs S·E per unit, the logits S·V; per block
 * 15SE + 4S and the log-sum-exp NH·S (no S² term); the head's lnf SE + 2S. */
static double acts_bytes(double b, int rc) {
  double S = CP_S, E = CP_E, L = CP_L, V = CP_V, NH = CP_NH, block = 15 * S * E + 4 * S + NH * S;
  /* --recompute: one block's */
  return 4 * b * (S * E * (L + 1) + S * V + (rc ? block : L * block + S * E + 2 * S));
}

/* One CP run against the 1-rank reference. */
static zl_out_t cp_vs_one_rank_rc(int np, int C, int balance, int zero, int rc, const zl_out_t *ref) {
  char args[128], what[96];
  snprintf(what, sizeof what, "cp%d_bal%d_zero%d_np%d%s", C, balance, zero, np, rc ? "_rc" : "");
  snprintf(args, sizeof args, "--cp %d --cp-balance %d --zero %d%s", C, balance, zero,
           rc ? " --recompute" : "");
  zl_out_t run = CP_LAUNCH(np, what, "r", args);
  cr_assert_eq(run.n, ref->n, "%s: %lld weights written, 1 rank %lld", what, (long long)run.n,
               (long long)ref->n);
  zl_expect_floats(what, run.params, ref->params, run.n, CP_TOL);
  double l[8], lr[8];
  int k = zl_json_all(run.json, "loss", l, 8), kr = zl_json_all(ref->json, "loss", lr, 8);
  cr_assert(k == 4 && kr == 4, "%s: losses %d / %d", what, k, kr);
  for (int s = 0; s < 4; s++)
    cr_assert(zl_rel(l[s], lr[s]) <= CP_TOL, "%s: loss %d: %.9g vs 1 rank %.9g", what, s, l[s], lr[s]);
  double b = 8.0 / np; /* loop samples per rank: batch / (C·D) */
  double kv = zl_json_num(run.json, "cp_kv_bytes_per_step"),
         kvf = zl_json_num(run.json, "cp_kv_bytes_formula");
  cr_assert(kv == kv_bytes(C, b, rc) && kvf == kv_bytes(C, b, rc),
            "%s rank 0: %g K/V bytes sent per step (its formula %g), expected %g", what, kv, kvf,
            kv_bytes(C, b, rc));
  double acts = zl_json_num(run.json, "acts_saved_bytes"),
         af = zl_json_num(run.json, "cp_acts_formula_bytes");
  cr_assert(acts == acts_bytes(b, rc) && af == acts_bytes(b, rc),
            "%s rank 0: %g activation bytes kept (its formula %g), expected %g", what, acts, af,
            acts_bytes(b, rc));
  return run;
}
static zl_out_t cp_vs_one_rank(int np, int C, int balance, int zero, const zl_out_t *ref) {
  return cp_vs_one_rank_rc(np, C, balance, zero, 0, ref);
}

/* C = 2 and 4, balanced and contiguous, DDP over the CP ranks; activations ∝ 1/C at one batch. */
Test(ch10_context, cp_equals_one_rank, .timeout = 120) {
  zl_out_t ref = CP_LAUNCH(1, "cp_ref", "ref", "");
  zl_out_t c2 = cp_vs_one_rank(2, 2, 1, 0, &ref), c4 = cp_vs_one_rank(4, 4, 1, 0, &ref);
  zl_out_t c2c = cp_vs_one_rank(2, 2, 0, 0, &ref);
  double a2 = zl_json_num(c2.json, "acts_saved_bytes"), a4 = zl_json_num(c4.json, "acts_saved_bytes");
  cr_assert(a2 == 2 * a4, "activation bytes per rank: C=2 %g, C=4 %g: not halved", a2, a4);
  zl_out_free(&c2), zl_out_free(&c4), zl_out_free(&c2c), zl_out_free(&ref);
}

/* --recompute: each block's forward (and its ring) runs again before its backward; the loop keeps
 * one block's saved activations. Same weights as 1 rank within 1e-5. */
Test(ch10_context, cp_recompute, .timeout = 120) {
  zl_out_t ref = CP_LAUNCH(1, "cp_ref", "ref", "");
  zl_out_t rc = cp_vs_one_rank_rc(2, 2, 1, 0, 1, &ref);
  zl_out_free(&rc), zl_out_free(&ref);
}

/* C = 3 on a sequence of 24 (2C = 6 chunks of 4), batch 6. */
Test(ch10_context, cp3_equals_one_rank, .timeout = 120) {
  const char *shape =
      "--model gpt --gpt tiny --seq-len 24 --batch 6 --steps 4 --optimizer sgd --lr 0.1 --clip 0.5";
  zl_out_t ref = zl_launch(1, 60, "cp3_ref", "ref", "%s/ch10_long %s", ZL_BIN, shape);
  zl_out_t run = zl_launch(3, 60, "cp3", "r", "%s/ch10_long %s --cp 3", ZL_BIN, shape);
  cr_assert_eq(run.n, ref.n, "cp3: %lld weights, 1 rank %lld", (long long)run.n, (long long)ref.n);
  zl_expect_floats("cp3 weights", run.params, ref.params, run.n, CP_TOL);
  double l[8], lr[8];
  cr_assert(zl_json_all(run.json, "loss", l, 8) == 4 && zl_json_all(ref.json, "loss", lr, 8) == 4,
            "cp3: 4 losses each");
  for (int s = 0; s < 4; s++)
    cr_assert(zl_rel(l[s], lr[s]) <= CP_TOL, "cp3: loss %d: %.9g vs 1 rank %.9g", s, l[s], lr[s]);
  zl_out_free(&run), zl_out_free(&ref);
}

/* CP × DP: C = 2 × D = 2 with ZeRO-1 and ZeRO-3 over the four ranks (the weights are whole on the
 * CP ranks, so the data dimension and the CP dimension shard and reduce together). */
Test(ch10_context, cp_x_dp_zero, .timeout = 120) {
  zl_out_t ref = CP_LAUNCH(1, "cp_ref", "ref", "");
  zl_out_t z1 = cp_vs_one_rank(4, 2, 1, 1, &ref), z3 = cp_vs_one_rank(4, 2, 1, 3, &ref);
  zl_out_free(&z1), zl_out_free(&z3), zl_out_free(&ref);
}

/* The causal work per rank (score pairs of one layer's forward on one micro-batch, R = C·b rows,
 * NH heads): contiguous chunks of C = 4, n = 4: rank q computes Σ_{p=4q}^{4q+3} (p+1) = 16q + 10 per
 * row and head: max 58, mean 34, imbalance 58/34; balanced: 34 on every rank, 1. */
Test(ch10_context, causal_balance, .timeout = 120) {
  double R = 4 * 2.0; /* b = 8/4 loop samples, C = 4 rows each */
  for (int balance = 0; balance <= 1; balance++) {
    char args[64], what[32];
    snprintf(args, sizeof args, "--cp 4 --cp-balance %d", balance);
    snprintf(what, sizeof what, "cp4_bal%d", balance);
    zl_out_t run = CP_LAUNCH(4, what, "r", args);
    double wmax = zl_json_num(run.json, "cp_work_max"), imb = zl_json_num(run.json, "cp_imbalance");
    double want = (balance ? 34 : 58) * R * CP_NH, want_imb = balance ? 1.0 : 58.0 / 34.0;
    cr_assert(wmax == want, "%s: most score pairs on a rank %g, expected %g", what, wmax, want);
    cr_assert(fabs(imb - want_imb) < 1e-12, "%s: imbalance %.6f, expected %.6f", what, imb, want_imb);
    cr_assert(zl_json_num(run.json, "cp_work_formula_max") == want, "%s: the formula's max", what);
    zl_out_free(&run);
  }
}

/* Bad --cp values: one line naming the flag and what it allows, exit 2, before training. */
Test(ch10_context, cp_refusals, .timeout = 120) {
  static const struct { int np; const char *args, *want;
  } cases[] = {
      {2, "--model gpt --gpt tiny --cp 3", "error: --cp 3: must divide the ranks (2)"},
      {2, "--model gpt --gpt tiny --seq-len 18 --cp 2", "error: --cp 2: seq_len 18 must be divisible by 2C"},
      {2, "--cp 2", "error: --cp 2: needs --model gpt"},
      {2, "--model gpt --gpt tiny --cp 2 --sample 10",
       "error: --cp 2: --sample and --eval-every need whole sequences"},
      {1, "--model gpt --gpt tiny --cp 0", "--cp"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    zl_expect_refused(cases[i].np, "ch10_long", cases[i].args, cases[i].want);
}
