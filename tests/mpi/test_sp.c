/* test_sp.c — --sp, Megatron's sequence parallelism with chapter 06's TP (solutions/tp_sp.h;
 * notes/10-long-sequences.md, "Part 1 — sequence parallelism"). The sequence collectives (the
 * exercises) with tests/mpi/scn_sp; then training the tiny GPT with --tp T --sp against 1 rank and
 * against plain --tp T: weights and losses, the TP group's collectives per step measured = formula
 * = the count by hand, and the activation bytes per rank (ledger) = the formula to the byte.
 *
 * Tolerance: 1e-5 relative on every final weight and loss, as plain TP's (tests/mpi/test_tp.c): the
 * row-parallel outputs are still sums of partial dot products. TP + SP is not bitwise equal to TP
 * either: each rank's LayerNorm weight gradient covers its own S/T positions and the group's sum
 * adds T partial sums where TP adds every position in one running sum (measured: 7e-9 largest
 * weight difference after 4 steps). */
#include "zl_test.h" // zl_run, zl_launch, zl_out_t, zl_json_*, zl_expect_floats, cr_assert

static const char *fail_lines(const char *out) { return out && *out ? out : "(no output)"; }

static void run_scn(int np) {
  char *out = NULL;
  int rc = zl_run(np, 60, &out, "%s/scn_sp", ZL_TESTBIN);
  cr_assert_eq(rc, 0, "scn_sp on %d ranks exited %d:\n%s", np, rc, fail_lines(out));
  cr_assert(strstr(out, "scn_sp: ok"), "scn_sp on %d ranks did not report ok:\n%s", np, out);
  free(out);
}

/* The all-gather and the reduce-scatter along the sequence: T = 2 and the odd T = 3. */
Test(ch10_sp, collectives_2_ranks, .timeout = 60) { run_scn(2); }
Test(ch10_sp, collectives_3_ranks, .timeout = 60) { run_scn(3); }

/* ---- training --------------------------------------------------------------------------------
 * The tiny GPT with 4 heads (L2 C32 S16 V256), 4 steps of SGD with momentum and --clip 0.5 (the
 * replicated LayerNorm parameters must count once in the norm), global batch 8. */
#define SP_SHAPE "--model gpt --gpt tiny --n-head 4 --batch 8 --steps 4 --optimizer sgd --lr 0.1 --clip 0.5"
#define SP_S 16.0
#define SP_C 32.0
#define SP_L 2.0
#define SP_V 256.0
#define SP_NH 4.0
#define SP_TOL 1e-5

/* Activation bytes 1 rank keeps for b samples (gpt.h's table): every unit's output (the embedding
 * and each block S·C, the logits S·V) and what each saves (a block 15SC + 4S + NH·S², the head
 * SC + 2S), fp32. --recompute: the outputs and one shared saved buffer (the largest: a block's). */
static double acts_one_rank(double b, int recompute) {
  double S = SP_S, C = SP_C, L = SP_L, V = SP_V, NH = SP_NH;
  double outs = S * C * (L + 1) + S * V, block = 15 * S * C + 4 * S + NH * S * S, head = S * C + 2 * S;
  return 4 * b * (outs + (recompute ? block : L * block + head));
}

/* The ring model's bytes sent per rank: all-gather and reduce-scatter (T−1)/T of n fp32 elements,
 * all-reduce 2(T−1)/T (T divides every n here). */
static double ag(double n, int T) { return (T - 1.0) / T * n * 4; }
static double ar(double n, int T) { return 2 * ag(n, T); }

/* Per step and rank on the TP group with --sp, A micro-batches of b samples, n = b·S·C: the
 * embedding 1 reduce-scatter + 1 all-gather; per block 6 all-gathers + 4 reduce-scatters + 2
 * all-reduces of 2C (the LayerNorms' dw, db); the head 2 all-gathers + 1 reduce-scatter + 1
 * all-reduce of 2C; the loss 3 all-reduces of b·S. --recompute reruns the forwards' (a block's
 * 2 + 2, the head's 1 gather). */
static void sp_traffic(int T, double b, int A, int recompute, double *calls, double *bytes) {
  double L = SP_L, n = b * SP_S * SP_C, C = SP_C;
  double gathers = 1 + 6 * L + 2 + (recompute ? 2 * L + 1 : 0),
         scatters = 1 + 4 * L + 1 + (recompute ? 2 * L : 0);
  *calls = A * (gathers + scatters + (2 * L + 1) + 3);
  *bytes = A * ((gathers + scatters) * ag(n, T) + (2 * L + 1) * ar(2 * C, T) + 3 * ar(b * SP_S, T));
}

/* Every rank's TP-group calls and bytes per step, measured and formula, against want. */
static void expect_traffic(const char *what, const char *json, int np, double calls, double bytes) {
  const char *p = zl_json_find(json, "tp");
  cr_assert(p, "%s: no tp object in the JSON", what);
  for (int r = 0; r < np; r++) {
    p = zl_json_find(p, "tp_rank");
    cr_assert(p, "%s: rank %d missing from tp.per_rank", what, r);
    double c = zl_json_num(p, "calls_per_step"), fc = zl_json_num(p, "formula_calls_per_step");
    double by = zl_json_num(p, "bytes_per_step"), fb = zl_json_num(p, "formula_bytes_per_step");
    cr_assert(c == calls && fc == calls,
              "%s rank %d: %g collectives per step on the TP group (formula %g), expected %g", what, r, c, fc,
              calls);
    cr_assert(by == bytes && fb == bytes, "%s rank %d: %.1f bytes per step (formula %.1f), expected %.1f",
              what, r, by, fb, bytes);
    p += 8;
  }
}

static void expect_close_run(const char *what, const zl_out_t *run, const zl_out_t *ref, int steps) {
  cr_assert_eq(run->n, ref->n, "%s: %lld weights written, the reference has %lld", what, (long long)run->n,
               (long long)ref->n);
  zl_expect_floats(what, run->params, ref->params, run->n, SP_TOL);
  double l[8], lr[8];
  int k = zl_json_all(run->json, "loss", l, 8), kr = zl_json_all(ref->json, "loss", lr, 8);
  cr_assert(k == steps && kr == steps, "%s: %d / %d losses", what, k, kr);
  for (int s = 0; s < steps; s++)
    cr_assert(zl_rel(l[s], lr[s]) <= SP_TOL, "%s: loss %d: %.9g vs the reference %.9g", what, s, l[s], lr[s]);
}

/* The activation bytes the loop keeps on rank 0 (ledger) and the report's formula, both = want. */
static void expect_acts(const char *what, const zl_out_t *run, double want) {
  double got = zl_json_num(run->json, "acts_saved_bytes"), f = zl_json_num(run->json, "acts_formula_bytes");
  cr_assert(got == want && f == want, "%s: acts_saved_bytes %.0f, acts_formula_bytes %.0f, expected %.0f",
            what, got, f, want);
}

/* --tp T --sp --zero zero on np ranks against the 1-rank reference: weights and losses, activations
 * 1 rank's / T at b = 8/D samples per rank, the TP group's collectives as sp_traffic. */
static void sp_vs_one_rank(int np, int T, int zero, const zl_out_t *ref) {
  char what[64], args[64];
  snprintf(what, sizeof what, "(D, T) = (%d, %d) --sp --zero %d", np / T, T, zero);
  snprintf(args, sizeof args, "--tp %d --sp --zero %d", T, zero);
  zl_out_t run = zl_launch(np, 60, "sp_train", "sp", "%s/ch06_tp " SP_SHAPE " %s", ZL_BIN, args);
  double b = 8.0 / (np / T), calls, bytes;
  expect_close_run(what, &run, ref, 4);
  expect_acts(what, &run, acts_one_rank(b, 0) / T);
  sp_traffic(T, b, 1, 0, &calls, &bytes);
  expect_traffic(what, run.json, np, calls, bytes);
  zl_out_free(&run);
}

/* 1 rank; --tp 2; --tp 2 --sp; --tp 4 --sp; (D, T) = (2, 2) --sp with ZeRO-1 on the data dimension.
 * SP: within SP_TOL of 1 rank and of TP; activations per rank exactly 1 rank's / T (everything of
 * every unit is split: outputs, LayerNorm and residual tensors along the sequence, the rest by
 * heads, features, vocabulary); collectives = the count above; and SP − TP bytes = exactly the
 * extra gathers of the LayerNorm outputs (2 per block, 1 in the head) and the LayerNorm gradient
 * all-reduces: the g/ḡ pairs move what TP's all-reduces moved. */
Test(ch10_sp, sp_equals_tp_and_one_rank, .timeout = 120) {
  zl_out_t ref = zl_launch(1, 60, "sp_train", "ref", "%s/ch06_tp " SP_SHAPE, ZL_BIN);
  zl_out_t tp = zl_launch(2, 60, "sp_train", "tp2", "%s/ch06_tp " SP_SHAPE " --tp 2", ZL_BIN);
  zl_out_t sp = zl_launch(2, 60, "sp_train", "sp2", "%s/ch06_tp " SP_SHAPE " --tp 2 --sp", ZL_BIN);
  expect_acts("1 rank", &ref, acts_one_rank(8, 0));
  expect_close_run("tp2 --sp vs 1 rank", &sp, &ref, 4);
  expect_close_run("tp2 --sp vs tp2", &sp, &tp, 4);
  expect_acts("tp2 --sp", &sp, acts_one_rank(8, 0) / 2);
  double calls, bytes;
  sp_traffic(2, 8, 1, 0, &calls, &bytes);
  expect_traffic("tp2 --sp", sp.json, 2, calls, bytes);
  double n = 8 * SP_S * SP_C, extra = (2 * SP_L + 1) * (ag(n, 2) + ar(2 * SP_C, 2));
  double d = zl_json_num(zl_json_find(sp.json, "tp"), "bytes_per_step") -
      zl_json_num(zl_json_find(tp.json, "tp"), "bytes_per_step");
  cr_assert(
      d == extra,
      "tp2: --sp sends %.1f bytes per step more than --tp alone; expected %.1f = (2L+1) gathers of "
      "b·s·h (the LayerNorm outputs again) + (2L+1) all-reduces of 2h (their gradients): g and ḡ must "
      "move "
      "exactly the all-reduces' bytes",
      d, extra);
  zl_out_free(&tp);
  zl_out_free(&sp);
  sp_vs_one_rank(4, 4, 0, &ref);
  sp_vs_one_rank(4, 2, 1, &ref);
  zl_out_free(&ref);
}

/* --recompute --accum 2: the checkpoints are (S/T, C) per sample already (no Pa needed), the
 * forward's gathers and scatters run again in the backward. */
Test(ch10_sp, sp_recompute_accum, .timeout = 60) {
  zl_out_t ref = zl_launch(1, 60, "sp_rc", "ref", "%s/ch06_tp " SP_SHAPE " --recompute --accum 2", ZL_BIN);
  zl_out_t sp =
      zl_launch(2, 60, "sp_rc", "sp2", "%s/ch06_tp " SP_SHAPE " --recompute --accum 2 --tp 2 --sp", ZL_BIN);
  expect_close_run("tp2 --sp --recompute --accum 2 vs 1 rank", &sp, &ref, 4);
  expect_acts("1 rank --recompute", &ref, acts_one_rank(4, 1));
  expect_acts("tp2 --sp --recompute", &sp, acts_one_rank(4, 1) / 2);
  double calls, bytes;
  sp_traffic(2, 4, 2, 1, &calls, &bytes);
  expect_traffic("tp2 --sp --recompute --accum 2", sp.json, 2, calls, bytes);
  zl_out_free(&ref);
  zl_out_free(&sp);
}

/* The pipeline's P × T grid (ch07, P = 2 stages of T = 2): a stage sends its (b, S/T, C) part to the
 * same TP rank of the next stage; against 1 rank with --accum M (the same micro-batches). */
Test(ch10_sp, sp_pipeline_2x2, .timeout = 60) {
  zl_out_t ref = zl_launch(1, 60, "sp_pp", "ref", "%s/ch06_tp " SP_SHAPE " --accum 2", ZL_BIN);
  zl_out_t pp = zl_launch(4, 60, "sp_pp", "pp",
                          "%s/ch07_pipeline " SP_SHAPE " --pp 2 --micro-batches 2 --tp 2 --sp", ZL_BIN);
  expect_close_run("P 2 x T 2 --sp vs 1 rank", &pp, &ref, 4);
  zl_out_free(&ref);
  zl_out_free(&pp);
}

/* Refused before MPI starts, exit 2, one line naming the flag. */
Test(ch10_sp, bad_flags_exit_2, .timeout = 60) {
  static const struct {
    int np;
    const char *args, *msg;
  } cases[] = {
      {0, "ch06_tp --model gpt --gpt tiny --sp", "error: --sp: needs --tp T > 1"},
      {2, "ch06_tp --tp 2 --sp", "error: --sp: needs --model gpt"},
      {0, "ch06_tp --model gpt --gpt tiny --tp 1 --sp", "error: --sp: needs --tp T > 1"},
      {4, "ch06_tp --model gpt --gpt tiny --n-head 4 --seq-len 10 --tp 4 --sp",
       "error: --sp: --seq-len 10 must be divisible by --tp 4"},
      {2, "ch06_tp --model gpt --gpt tiny --tp 2 --sp --recompute --pa 1",
       "error: --pa 1: with --sp no unit output is replicated"},
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    char *out = NULL;
    int rc = zl_run(cases[i].np, 30, &out, "%s/%s", ZL_BIN, cases[i].args);
    cr_assert_eq(rc, 2, "%s: exit %d, expected 2:\n%s", cases[i].args, rc, fail_lines(out));
    cr_assert(strstr(out, cases[i].msg), "%s: expected '%s', got:\n%s", cases[i].args, cases[i].msg, out);
    free(out);
  }
}
