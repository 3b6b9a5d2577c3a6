/* test_ulysses.c — chapter 10's all-to-all context parallelism in training (ch10_long --cp C
 * --cp-comm a2a; solutions/ulysses.h, notes/10-long-sequences.md meeting 10b). The tiny GPT
 * (L2 E32 S16 V256; NH 2, or 4 for C = 4), 4 steps of SGD with momentum and --clip 0.5, global
 * batch 8, against 1 rank: every loss and every final weight within 1e-5 (the attention itself is
 * bitwise, tests/unit/test_ulysses.c; what differs is the rest of the model on R·n rows instead of
 * b·S and the gradient summed over the ranks: notes/design.md, "Bits or a tolerance"; measured
 * gap 2.2e-8 of max|w| under OPENBLAS_CORETYPE Haswell, Prescott and SkylakeX); per rank, the
 * all-to-all bytes sent per step and the activation bytes kept equal to the formulas written here;
 * CP × DP with ZeRO on the data dimension; the refusals (heads, seq_len). The sweep
 * (ch10_ulysses_long): C = 2, 3, 4 × --zero 0..3 × --recompute.
 * The 2-D hybrid (--cp-a2a A, USP): the all-to-all inside groups of A, the ring across the G = C/A
 * groups — against 1 rank within the ring's 1e-5 (the ring's online softmax sums in another order);
 * the all-to-all bytes and the ring's bytes per step each equal to their formula, the activation
 * bytes too; C = 4 on 2 heads (the head count bounds A, not C); its refusals. */
#include "zl_test.h" // zl_launch, zl_run, zl_json_num, zl_json_all, zl_expect_floats, cr_assert

#define U_TOL 1e-5
#define U_SHAPE "--model gpt --gpt tiny --batch 8 --steps 4 --optimizer sgd --lr 0.1 --clip 0.5"
#define U_L 2
#define U_V 256


/* All-to-all bytes one rank sends per step: per layer, forward Q, K, V out and O back, backward dO
 * out and dQ, dK, dV back — 4 tensors each way, each an all-to-all that keeps 1/C home: (C−1)/C of
 * R·n·E floats, R = C·b rows of n = S/C positions; the forward twice with --recompute. */
static double a2a_bytes(int C, double b, int S, int E, int rc) {
  double R = C * b, n = (double)S / C, t = (C - 1.0) / C * R * n * E;
  return 4.0 * U_L * ((1 + rc) * 4 * t + 4 * t);
}
/* Activation bytes kept per rank for b loop samples: gpt.h's table with the attention's saved
 * tensors per local token NH·S (this rank's heads' probabilities over the whole sequence) and 3E
 * (their q, k, v): per block 15SE + 4S + NH·S² + 3SE. */
static double acts_bytes(double b, int S, int E, int NH, int rc) {
  double L = U_L, V = U_V, block = 15.0 * S * E + 4.0 * S + (double)NH * S * S + 3.0 * S * E;
  return 4 * b * ((double)S * E * (L + 1) + S * V + (rc ? block : L * block + (double)S * E + 2.0 * S));
}

typedef struct { int S, E, NH; const char *extra; } u_shape_t;

/* One Ulysses run against the 1-rank reference of the same shape. */
static void u_vs_one_rank(int np, int C, int zero, int rc, u_shape_t sh, const zl_out_t *ref) {
  char args[192], what[96];
  snprintf(what, sizeof what, "a2a_cp%d_zero%d_np%d_nh%d%s", C, zero, np, sh.NH, rc ? "_rc" : "");
  snprintf(args, sizeof args, "%s --cp %d --cp-comm a2a --zero %d%s", sh.extra, C, zero,
           rc ? " --recompute" : "");
  zl_out_t run = zl_launch(np, 60, what, "r", "%s/ch10_long " U_SHAPE " %s", ZL_BIN, args);
  cr_assert_eq(run.n, ref->n, "%s: %lld weights written, 1 rank %lld", what, (long long)run.n,
               (long long)ref->n);
  zl_expect_floats(what, run.params, ref->params, run.n, U_TOL);
  double l[8], lr[8];
  int k = zl_json_all(run.json, "loss", l, 8), kr = zl_json_all(ref->json, "loss", lr, 8);
  cr_assert(k == 4 && kr == 4, "%s: losses %d / %d", what, k, kr);
  for (int s = 0; s < 4; s++)
    cr_assert(zl_rel(l[s], lr[s]) <= U_TOL, "%s: loss %d: %.9g vs 1 rank %.9g", what, s, l[s], lr[s]);
  double b = 8.0 / np, want = a2a_bytes(C, b, sh.S, sh.E, rc);
  double got = zl_json_num(run.json, "cp_a2a_bytes_per_step"),
         gf = zl_json_num(run.json, "cp_a2a_bytes_formula");
  cr_assert(got == want && gf == want,
            "%s rank 0: %g all-to-all bytes sent per step (its formula %g), expected %g", what, got, gf,
            want);
  double acts = zl_json_num(run.json, "acts_saved_bytes"),
         af = zl_json_num(run.json, "cp_acts_formula_bytes");
  double aw = acts_bytes(b, sh.S, sh.E, sh.NH, rc);
  cr_assert(acts == aw && af == aw, "%s rank 0: %g activation bytes kept (its formula %g), expected %g", what,
            acts, af, aw);
  zl_out_free(&run);
}

static zl_out_t u_ref(u_shape_t sh, const char *tag) {
  return zl_launch(1, 60, tag, "ref", "%s/ch10_long " U_SHAPE " %s", ZL_BIN, sh.extra);
}

/* The hybrid's bytes one rank sends per step, R = C·b rows of n = S/C positions, G = C/A.
 * All-to-alls (groups of A): per layer forward Q, K, V out and O back, backward dO out and dQ, dK, dV
 * back, each keeping 1/A home: 4 tensors × (A−1)/A of R·n·E each way. The ring of G on blocks of the
 * group's A·n positions and NH/A heads (E/A features): per hop A·n·E/A = n·E floats per row and
 * tensor, so forward (G−1)·2·R·n·E, backward (G−1)·4·R·n·E + 2·R·n·E (none when G = 1). The
 * forward's
 * twice with --recompute. */
static double usp_a2a_bytes(int C, int A, double b, int S, int E, int rc) {
  double R = C * b, n = (double)S / C, t = (A - 1.0) / A * R * n * E;
  return 4.0 * U_L * ((1 + rc) * 4 * t + 4 * t);
}
static double usp_ring_bytes(int C, int A, double b, int S, int E, int rc) {
  double R = C * b, n = (double)S / C, G = C / A, blk = R * n * E;
  return G > 1 ? 4.0 * U_L * ((1 + rc) * (G - 1) * 2 * blk + (G - 1) * 4 * blk + 2 * blk) : 0;
}
/* The hybrid keeps per local token the ring's lse (NH/A heads over A·n positions: NH), and q, k, v
 * and the output in the heads' layout (3E + E): per block 15SE + 4S + NH·S + 4SE. */
static double usp_acts_bytes(double b, int S, int E, int NH, int rc) {
  double L = U_L, V = U_V, block = 15.0 * S * E + 4.0 * S + (double)NH * S + 4.0 * S * E;
  return 4 * b * ((double)S * E * (L + 1) + S * V + (rc ? block : L * block + (double)S * E + 2.0 * S));
}

/* One hybrid run against the 1-rank reference of the same shape. */
static void usp_vs_one_rank(int np, int C, int A, int balance, int zero, int rc, u_shape_t sh,
                            const zl_out_t *ref) {
  char args[192], what[112];
  snprintf(what, sizeof what, "usp_cp%d_a%d_bal%d_zero%d_np%d_nh%d%s", C, A, balance, zero, np, sh.NH,
           rc ? "_rc" : "");
  snprintf(args, sizeof args, "%s --cp %d --cp-a2a %d --cp-balance %d --zero %d%s", sh.extra, C, A, balance,
           zero, rc ? " --recompute" : "");
  zl_out_t run = zl_launch(np, 60, what, "r", "%s/ch10_long " U_SHAPE " %s", ZL_BIN, args);
  cr_assert_eq(run.n, ref->n, "%s: %lld weights written, 1 rank %lld", what, (long long)run.n,
               (long long)ref->n);
  zl_expect_floats(what, run.params, ref->params, run.n, U_TOL);
  double l[8], lr[8];
  int k = zl_json_all(run.json, "loss", l, 8), kr = zl_json_all(ref->json, "loss", lr, 8);
  cr_assert(k == 4 && kr == 4, "%s: losses %d / %d", what, k, kr);
  for (int s = 0; s < 4; s++)
    cr_assert(zl_rel(l[s], lr[s]) <= U_TOL, "%s: loss %d: %.9g vs 1 rank %.9g", what, s, l[s], lr[s]);
  double b = 8.0 / np, wa = usp_a2a_bytes(C, A, b, sh.S, sh.E, rc),
         wr = usp_ring_bytes(C, A, b, sh.S, sh.E, rc);
  double ga = zl_json_num(run.json, "cp_a2a_bytes_per_step"),
         gaf = zl_json_num(run.json, "cp_a2a_bytes_formula");
  cr_assert(ga == wa && gaf == wa,
            "%s rank 0: %g all-to-all bytes sent per step (its formula %g), expected %g", what, ga, gaf, wa);
  double gr = zl_json_num(run.json, "cp_kv_bytes_per_step"),
         grf = zl_json_num(run.json, "cp_kv_bytes_formula");
  cr_assert(gr == wr && grf == wr, "%s rank 0: %g ring bytes sent per step (its formula %g), expected %g",
            what, gr, grf, wr);
  /* one layer's forward and backward, both parts: the report's per-layer formula and the measured step / L */
  if (!rc) {
    double lf = zl_json_num(run.json, "cp_layer_bytes_formula"), want = (wa + wr) / U_L;
    cr_assert(lf == want && (ga + gr) / U_L == want,
              "%s rank 0: %g bytes per layer by its formula, %g measured, expected %g", what, lf,
              (ga + gr) / U_L, want);
  }
  double acts = zl_json_num(run.json, "acts_saved_bytes"),
         af = zl_json_num(run.json, "cp_acts_formula_bytes");
  double aw = usp_acts_bytes(b, sh.S, sh.E, sh.NH, rc);
  cr_assert(acts == aw && af == aw, "%s rank 0: %g activation bytes kept (its formula %g), expected %g", what,
            acts, af, aw);
  zl_out_free(&run);
}

/* C = 2 on 2 heads, C = 4 on 4; CP 2 × DP 2 with ZeRO-1 and ZeRO-3 on the data dimension. */
Test(ch10_ulysses, a2a_equals_one_rank, .timeout = 120) {
  u_shape_t nh2 = {16, 32, 2, ""}, nh4 = {16, 32, 4, "--n-head 4"};
  zl_out_t r2 = u_ref(nh2, "cp_ref"), r4 = u_ref(nh4, "u_ref_nh4");
  u_vs_one_rank(2, 2, 0, 0, nh2, &r2);
  u_vs_one_rank(4, 4, 0, 0, nh4, &r4);
  u_vs_one_rank(4, 2, 1, 0, nh2, &r2);
  u_vs_one_rank(4, 2, 3, 0, nh2, &r2);
  zl_out_free(&r2), zl_out_free(&r4);
}

/* Ulysses' degree is bounded by the heads and needs C | S: one line naming --cp and the allowed
 * values, exit 2, before training; a bad --cp-comm names its choices. */
Test(ch10_ulysses, a2a_refusals, .timeout = 120) {
  static const struct { int np; const char *args, *want;
  } cases[] = {
      {4, "--model gpt --gpt tiny --cp 4 --cp-comm a2a",
       "error: --cp 4: with --cp-comm a2a: the heads (2) must be divisible by C: each rank attends NH/C of "
       "them (--seq-len 16, "
       "2 heads): allowed 1, 2"},
      {4, "--model gpt --gpt tiny --n-head 4 --seq-len 18 --cp 4 --cp-comm a2a",
       "error: --cp 4: with --cp-comm a2a: seq_len 18 must be divisible by C (--seq-len 18, 4 heads): "
       "allowed 1, 2"},
      {2, "--model gpt --gpt tiny --cp 2 --cp-comm alltoall",
       "error: --cp-comm alltoall: must be one of ring|a2a"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    zl_expect_refused(cases[i].np, "ch10_long", cases[i].args, cases[i].want);
}

/* The hybrid at C = 4 on 2 heads (Ulysses alone would be refused): groups of A = 2, a ring of 2. */
Test(ch10_ulysses, hybrid_equals_one_rank, .timeout = 120) {
  u_shape_t nh2 = {16, 32, 2, ""};
  zl_out_t r2 = u_ref(nh2, "cp_ref");
  usp_vs_one_rank(4, 4, 2, 1, 0, 0, nh2, &r2);
  zl_out_free(&r2);
}

/* --cp-a2a A: one line naming the flag and the allowed values, exit 2, before training. */
Test(ch10_ulysses, hybrid_refusals, .timeout = 120) {
  static const struct { int np; const char *args, *want;
  } cases[] = {
      {4, "--model gpt --gpt tiny --cp 4 --cp-a2a 3",
       "error: --cp-a2a 3: with --cp 4: A must divide C (4): groups of A ranks (--seq-len 16, 2 heads, "
       "--cp-balance 1): allowed 1, 2"},
      {4, "--model gpt --gpt tiny --cp 4 --cp-a2a 4",
       "error: --cp-a2a 4: with --cp 4: the heads (2) must be divisible by A: each rank of a group attends "
       "NH/A of them "
       "(--seq-len 16, 2 heads, --cp-balance 1): allowed 1, 2"},
      {6, "--model gpt --gpt tiny --n-head 3 --n-embd 48 --seq-len 18 --cp 6 --cp-a2a 3",
       "error: --cp-a2a 3: with --cp 6: seq_len 18 must be divisible by 2G = 4 (the ring of G = C/A groups, "
       "two mirrored "
       "chunks each) (--seq-len 18, 3 heads, --cp-balance 1): allowed none"},
      {4, "--model gpt --gpt tiny --cp 4 --cp-a2a 2 --cp-comm a2a",
       "error: --cp-a2a 2: is the hybrid of the ring (--cp-comm ring): --cp-comm a2a is the all-to-all over "
       "all C"},
      {2, "--model gpt --gpt tiny --cp-a2a 2",
       "error: --cp-a2a 2: needs --cp C > 1 (groups of A of the C context-parallel ranks)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    zl_expect_refused(cases[i].np, "ch10_long", cases[i].args, cases[i].want);
}

/* The hybrid's sweep: C = 4 with A = 2 on 2 and 4 heads × --zero 0..3, both layouts, --recompute;
 * A = C (one group: the ring of 1, Ulysses with the ring's kernel); CP 2 (A 2) × DP 2. */
Test(ch10_ulysses_long, hybrid_sweep, .timeout = 600) {
  u_shape_t nh2 = {16, 32, 2, ""}, nh4 = {16, 32, 4, "--n-head 4"};
  zl_out_t r2 = u_ref(nh2, "cp_ref"), r4 = u_ref(nh4, "u_ref_nh4");
  for (int zero = 0; zero <= 3; zero++) usp_vs_one_rank(4, 4, 2, zero & 1, zero, 0, nh2, &r2);
  usp_vs_one_rank(4, 4, 2, 1, 0, 1, nh2, &r2);
  usp_vs_one_rank(4, 4, 2, 0, 1, 0, nh4, &r4);
  usp_vs_one_rank(4, 4, 4, 1, 0, 0, nh4, &r4);
  usp_vs_one_rank(2, 2, 2, 1, 0, 1, nh2, &r2);
  usp_vs_one_rank(4, 2, 2, 0, 3, 0, nh2, &r2);
  zl_out_free(&r2), zl_out_free(&r4);
}

/* The sweep: C = 2, 4 × --zero 0..3, --recompute, and C = 3 (3 heads of 16, S = 24, batch 6). */
Test(ch10_ulysses_long, a2a_sweep, .timeout = 600) {
  u_shape_t nh2 = {16, 32, 2, ""}, nh4 = {16, 32, 4, "--n-head 4"};
  zl_out_t r2 = u_ref(nh2, "cp_ref"), r4 = u_ref(nh4, "u_ref_nh4");
  for (int zero = 0; zero <= 3; zero++) {
    u_vs_one_rank(2, 2, zero, 0, nh2, &r2);
    u_vs_one_rank(4, 4, zero, 0, nh4, &r4);
    u_vs_one_rank(4, 2, zero, 0, nh2, &r2);
  }
  u_vs_one_rank(2, 2, 0, 1, nh2, &r2);
  u_vs_one_rank(4, 4, 1, 1, nh4, &r4);
  zl_out_free(&r2), zl_out_free(&r4);
  const char *shape = "--model gpt --gpt tiny --n-head 3 --n-embd 48 --seq-len 24 --batch 6 --steps 4 "
                      "--optimizer sgd --lr 0.1 "
                      "--clip 0.5";
  zl_out_t ref = zl_launch(1, 60, "u3_ref", "ref", "%s/ch10_long %s", ZL_BIN, shape);
  zl_out_t run = zl_launch(3, 60, "u3", "r", "%s/ch10_long %s --cp 3 --cp-comm a2a", ZL_BIN, shape);
  cr_assert_eq(run.n, ref.n, "a2a cp3: %lld weights, 1 rank %lld", (long long)run.n, (long long)ref.n);
  zl_expect_floats("a2a cp3 weights", run.params, ref.params, run.n, U_TOL);
  double got = zl_json_num(run.json, "cp_a2a_bytes_per_step"), want = a2a_bytes(3, 2.0, 24, 48, 0);
  cr_assert(got == want, "a2a cp3: %g all-to-all bytes per step, expected %g", got, want);
  zl_out_free(&run), zl_out_free(&ref);
}
