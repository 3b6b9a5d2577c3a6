/* test_tp.c — chapter 06 multi-rank tests (notes/06-tensor-parallel.md).
 * Process groups (comm_split, the grid) with tests/mpi/scn_tp grid at N = 3, 4, 6; f, g, the
 * column- and row-parallel linears and the MLP block against 1 rank with scn_tp ops at N = 2 and 4
 * (T = 1, 2, 4; the tolerances are stated in scn_tp.c); then the chapter's programs: the worked
 * example's printed numbers exactly (ch06_example), the MLP check's counts (ch06_mlp_check), their
 * flag errors and ch06_tp's; then training with --tp (ch06_tp). */
#include "zl_test.h" // zl_run, zl_run_ok, zl_launch, zl_out_t, zl_rank_mem, cr_assert

static const char *fail_lines(const char *out) { return out && *out ? out : "(no output)"; }

static void run_scenario(int np, const char *mode) {
  char *out = NULL;
  int rc = zl_run(np, 90, &out, "%s/scn_tp %s", ZL_TESTBIN, mode);
  cr_assert_eq(rc, 0, "scn_tp %s on %d ranks exited %d:\n%s", mode, np, rc, fail_lines(out));
  const char *ok = strstr(out, "scn_tp: ok");
  cr_assert(ok, "scn_tp %s on %d ranks did not report ok:\n%s", mode, np, out);
  const char *eol = strchr(ok, '\n');
  /* the largest gap, for make test-kernels */
  cr_log_info("N %d: %.*s", np, eol ? (int)(eol - ok) : (int)strlen(ok), ok);
  free(out);
}

/* Every grid (T, P) of N ranks: membership, exact sums on every group (vendor and ring), counters per
 * group. */
Test(ch06_tp, groups_4_ranks, .timeout = 120) { run_scenario(4, "grid"); }
Test(ch06_tp, groups_3_ranks, .timeout = 120) { run_scenario(3, "grid"); }
Test(ch06_tp, groups_6_ranks, .timeout = 120) { run_scenario(6, "grid"); }
/* f, g, column/row linear and the MLP block at T = 1, 2 (N = 2) and T = 1, 2, 4 (N = 4). */
Test(ch06_tp, ops_2_ranks, .timeout = 120) { run_scenario(2, "ops"); }
Test(ch06_tp, ops_4_ranks, .timeout = 120) { run_scenario(4, "ops"); }

/* The lines must appear in this order. */
static void expect_in_order(const char *out, const char *const *want, int n, const char *what) {
  const char *at = out;
  for (int i = 0; i < n; i++) {
    const char *p = strstr(at, want[i]);
    cr_assert(p, "%s: missing (or out of order) line\n  %s\ngot:\n%s", what, want[i], out);
    at = p + strlen(want[i]);
  }
}

/* The worked example of issue 13 as corrected: the column split, the row split that only seems to
 * work with ReLU on non-negative numbers, and its failure with GELU and with mixed signs. */
Test(ch06_tp, example_2_ranks, .timeout = 60) {
  static const char *const want[] = {
      "X = [[1, 2], [1, 0]]   A = [[1, 2], [3, 4]]   X·A = [[7, 10], [1, 2]]\n",
      "rank 0: A1 = [[1], [3]]  ReLU(X·A1) = [[7], [1]]\n",
      "rank 1: A2 = [[2], [4]]  ReLU(X·A2) = [[10], [2]]\n",
      "all-gather of the columns: [[7, 10], [1, 2]]   ReLU(X·A) = [[7, 10], [1, 2]]   equal\n",
      "rank 0: X1 = [[1], [1]]  A1 = [[1, 2]]  X1·A1 = [[1, 2], [1, 2]]  ReLU(X1·A1) = [[1, 2], [1, 2]]\n",
      "rank 1: X2 = [[2], [0]]  A2 = [[3, 4]]  X2·A2 = [[6, 8], [0, 0]]  ReLU(X2·A2) = [[6, 8], [0, 0]]\n",
      "all-reduce: ReLU(X1·A1) + ReLU(X2·A2) = [[7, 10], [1, 2]]\n",
      "ReLU(X·A) = ReLU([[7, 10], [1, 2]]) = [[7, 10], [1, 2]]   equal\n",
      "ReLU(a) + ReLU(b) = a + b = ReLU(a + b)\n",
      "rank 0: X1 = [[1], [1]]  A1 = [[1, 2]]  X1·A1 = [[1, 2], [1, 2]]  GELU(X1·A1) = [[0.841192, "
      "1.9546], "
      "[0.841192, "
      "1.9546]]\n",
      "rank 1: X2 = [[2], [0]]  A2 = [[3, 4]]  X2·A2 = [[6, 8], [0, 0]]  GELU(X2·A2) = [[6, 8], [0, 0]]\n",
      "all-reduce: GELU(X1·A1) + GELU(X2·A2) = [[6.84119, 9.9546], [0.841192, 1.9546]]\n",
      "GELU(X·A) = GELU([[7, 10], [1, 2]]) = [[7, 10], [0.841192, 1.9546]]   DIFFERENT\n",
      "  differ at [0][0]: GELU(1) + GELU(6) = 6.84119  vs  GELU(7) = 7\n",
      "  differ at [0][1]: GELU(2) + GELU(8) = 9.9546  vs  GELU(10) = 10\n",
      "X' = [[1, -2], [1, 0]]\n",
      "rank 1: X'2 = [[-2], [0]]  A2 = [[3, 4]]  X'2·A2 = [[-6, -8], [0, 0]]  ReLU(X'2·A2) = [[0, 0], [0, "
      "0]]\n",
      "all-reduce: ReLU(X'1·A1) + ReLU(X'2·A2) = [[1, 2], [1, 2]]\n",
      "ReLU(X'·A) = ReLU([[-5, -6], [1, 2]]) = [[0, 0], [1, 2]]   DIFFERENT\n",
      "  differ at [0][0]: ReLU(1) + ReLU(-6) = 1  vs  ReLU(-5) = 0\n",
      "  differ at [0][1]: ReLU(2) + ReLU(-8) = 2  vs  ReLU(-6) = 0\n",
  };
  char *out = NULL;
  int rc = zl_run(2, 60, &out, "%s/ch06_example", ZL_BIN);
  cr_assert_eq(rc, 0, "ch06_example exited %d:\n%s", rc, fail_lines(out));
  expect_in_order(out, want, (int)(sizeof want / sizeof want[0]), "ch06_example");
  cr_assert(!strstr(out, "differ at [1]"),
            "row 1 has a zero partial: GELU(0) = 0 there, nothing differs:\n%s", out);
  free(out);
}

/* The MLP check on 4 ranks, ring collectives, a shape T does not divide: counts equal the formula. */
Test(ch06_tp, mlp_check_4_ranks, .timeout = 60) {
  static const char *const want[] = {
      "T=1 (4 groups of 1): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 0 ",
      "T=2 (2 groups of 2): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 2048 "
      "(formula 2 × 2(2−1)/2 × 8·32 × 4 B = 2048)\n",
      "T=4 (1 group of 4): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 3072 "
      "(formula 2 × 2(4−1)/4 × 8·32 × 4 B = 3072)\n",
      "\nok: every T matches the 1-rank block within 1e-6, and every count equals the formula\n",
  };
  char *out = NULL;
  int rc = zl_run(4, 60, &out, "%s/ch06_mlp_check --collectives ring", ZL_BIN);
  cr_assert_eq(rc, 0, "ch06_mlp_check exited %d:\n%s", rc, fail_lines(out));
  expect_in_order(out, want, 4, "ch06_mlp_check");
  free(out);
  rc = zl_run(4, 60, &out, "%s/ch06_mlp_check --batch 3 --hidden 7 --ffn 10", ZL_BIN);
  cr_assert_eq(rc, 0, "ch06_mlp_check (3·7, uneven) exited %d:\n%s", rc, fail_lines(out));
  cr_assert(
      strstr(out,
             "T=4 (1 group of 4): all-reduces 2 (formula 2: g forward, f backward), bytes sent per rank 256 "
             "(formula ring model, 3·7 not divisible by 4, rank 0 = 256)\n"),
      "uneven all-reduce line:\n%s", out);
  cr_assert(strstr(out, "\nok: "), "not ok:\n%s", out);
  free(out);
}

/* Bad flags: one line naming the flag and what is allowed, exit 2, before MPI starts. */
Test(ch06_tp, bad_flags_exit_2, .timeout = 60) {
  static const struct {
    const char *args, *msg;
  } cases[] = {
      {"ch06_example", "error: -np 1: the worked example runs on exactly 2 ranks"},
      {"ch06_example --tp 2", "error: --tp: unknown flag"},
      {"ch06_mlp_check --tp 3", "error: --tp 3: T must divide the number of ranks (1)"},
      {"ch06_mlp_check --ffn 3", "error: --ffn 3: must be >= T (4)"},
      {"ch06_grid --tp 65", "error: --tp 65: must be an integer in [0, 64]"},
      {"ch06_grid --pp 2", "error: --pp 2: must divide the number of ranks (1)"},
      {"ch06_tp --zero 4", "error: --zero 4: must be an integer in [0, 3]"},
      {"ch06_tp --zero 1 --prefetch 1", "error: --prefetch 1: only with --zero 3"},
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    char *out = NULL;
    int rc = zl_run(0, 30, &out, "%s/%s", ZL_BIN, cases[i].args);
    cr_assert_eq(rc, 2, "%s: exit %d, expected 2:\n%s", cases[i].args, rc, fail_lines(out));
    cr_assert(strstr(out, cases[i].msg), "%s: expected '%s', got:\n%s", cases[i].args, cases[i].msg, out);
    free(out);
  }
}

/* ---- training with --tp (ch06_tp) ------------------------------------------------------------
 * The tiny MLP (input 32, 3 hidden layers of 16, 10 classes: units (0, 1) and (2, 3) are two
 * column/row pairs), 4 steps of SGD with momentum and --clip 0.5 (so the norm's count-once of
 * the replicated biases matters), global batch 24. The 1-rank run is the reference. Tolerance:
 * 1e-5 relative on every final weight (the all-reduces of the row-parallel outputs and of the
 * column-parallel input gradients add partial dot products in another order: not bitwise, see
 * notes/06-tensor-parallel.md, "Numerics"); measured about 1e-7. */
#define TP_BASE \
  "--input 32 --hidden 16 --layers 3 --classes 10 --batch 24 --optimizer sgd --lr 0.05 --clip 0.5"
#define TP_SHAPE TP_BASE " --steps 4"
#define TP_TOL 1e-5

/* ch06_tp on np ranks with flags (TP_SHAPE or GPT_SHAPE) and args; files under zl_tmpdir(tag). */
#define TP_LAUNCH(np, tag, name, shape, args) \
  zl_launch(np, 60, tag, name, "%s/ch06_tp " shape " %s", ZL_BIN, args)

/* One TP run (np ranks, --tp T --zero zero) against the 1-rank reference ref: the full (unsplit)
 * weights rank 0 writes, every loss, and each rank's all-reduce count and bytes on its TP group
 * exactly as the formula (calls, bytes per step). model names the reference in the messages. */
static zl_out_t vs_one_rank(const char *what, const char *model, zl_out_t run, const zl_out_t *ref, int np,
                            double calls, double want_bytes) {
  cr_assert_eq(run.n, ref->n, "%s: %lld weights written, the 1-rank %s has %lld", what, (long long)run.n,
               model, (long long)ref->n);
  zl_expect_floats(what, run.params, ref->params, run.n, TP_TOL);
  double l[8], lr[8];
  int k = zl_json_all(run.json, "loss", l, 8), kr = zl_json_all(ref->json, "loss", lr, 8);
  cr_assert(k == 4 && kr == 4, "%s: losses %d / %d", what, k, kr);
  for (int s = 0; s < 4; s++)
    cr_assert(zl_rel(l[s], lr[s]) <= TP_TOL, "%s: loss %d: %.9g vs 1 rank %.9g", what, s, l[s], lr[s]);
  const char *p = zl_json_find(run.json, "tp");
  cr_assert(p, "%s: no tp object in the JSON", what);
  for (int r = 0; r < np; r++) {
    p = zl_json_find(p, "tp_rank");
    cr_assert(p, "%s: rank %d missing from tp.per_rank (the report gathers over every rank)", what, r);
    double got_calls = zl_json_num(p, "calls_per_step"), bytes = zl_json_num(p, "bytes_per_step");
    double fcalls = zl_json_num(p, "formula_calls_per_step"),
           fbytes = zl_json_num(p, "formula_bytes_per_step");
    /* the values are already right here: a count off is another communication pattern (say g as a
     * reduce-scatter then an all-gather), its own verdict ("values right, ...") in make exercise */
    cr_assert(
        got_calls == calls && fcalls == calls,
        "%s rank %d: values right, but %g all-reduces per step on the TP group where the lesson's pattern "
        "has %g "
        "(formula %g): g's forward and f's backward are one all-reduce each (notes/06-tensor-parallel.md); "
        "another pattern (e.g. a reduce-scatter then an all-gather) moves the same bytes but is not the one "
        "taught",
        what, r, got_calls, calls, fcalls);
    cr_assert(bytes == want_bytes && fbytes == want_bytes,
              "%s rank %d: %.1f bytes per step (formula %.1f), expected %.1f", what, r, bytes, fbytes,
              want_bytes);
    p += 8;
  }
  return run;
}

/* The MLP: all-reduces per step on the TP group: units 1, 3 (row: g forward) and 2 (column: f
 * backward; unit 0 has no dx) -> 3 calls of b·16, b·16, b·10 elements, 2(T−1)/T of each in fp32
 * bytes (ring model; b·n divisible by T in these shapes), b = 24 / D */
static void tp_vs_one_rank(int np, int T, int zero, const zl_out_t *ref) {
  char args[128], what[96];
  snprintf(what, sizeof what, "tp%d_zero%d_np%d", T, zero, np);
  snprintf(args, sizeof args, "--tp %d --zero %d", T, zero);
  int D = np / T;
  double b = 24.0 / D, want_bytes = 2.0 * (T - 1) / T * b * (16 + 16 + 10) * 4;
  zl_out_t run = vs_one_rank(what, "model", TP_LAUNCH(np, what, "r", TP_SHAPE, args), ref, np, 3, want_bytes);
  zl_out_free(&run);
}

/* T = 2, 4 and the odd (D, T) = (1, 3) (16 hidden features over 3 ranks: 6 + 5 + 5), DDP. */
Test(ch06_tp, train_tp_equals_one_rank, .timeout = 120) {
  zl_out_t ref = TP_LAUNCH(1, "tp_ref", "ref", TP_SHAPE, "");
  tp_vs_one_rank(2, 2, 0, &ref);
  tp_vs_one_rank(4, 4, 0, &ref);
  tp_vs_one_rank(3, 3, 0, &ref);
  zl_out_free(&ref);
}
/* 2-D: (D, T) = (2, 2), each ZeRO stage on the data dimension (0: DDP). */
Test(ch06_tp, train_2d_every_stage, .timeout = 120) {
  zl_out_t ref = TP_LAUNCH(1, "tp_ref", "ref", TP_SHAPE, "");
  for (int z = 0; z <= 3; z++) tp_vs_one_rank(4, 2, z, &ref);
  zl_out_free(&ref);
}

/* Per-rank weight memory (ledger, LEDGER_PARAMS, DDP: the rank's whole local model) = the split
 * parameters / T + the replicated ones (the row-parallel biases), to the byte. Split: W1 b1
 * (16·32 + 16), W2 (16·16), W3 b3 (16·16 + 16), W4 (10·16) = 1216; replicated: b2 16, b4 10. */
Test(ch06_tp, ledger_params_one_T_th, .timeout = 120) {
  for (int T = 2; T <= 4; T += 2) {
    char args[64];
    snprintf(args, sizeof args, "--tp %d", T);
    zl_out_t run = TP_LAUNCH(T, "tp_ledger", "r", TP_SHAPE, args);
    double want = (1216.0 / T + 26) * 4;
    for (int r = 0; r < T; r++) {
      double got = zl_rank_mem(run.json, r, "params");
      cr_assert(got == want, "T=%d rank %d: %g bytes of params, expected (1216/T + 26) x 4 = %g", T, r, got,
                want);
    }
    zl_out_free(&run);
  }
}

/* Checkpoint with TP: 2 steps saved (each TP rank its own DIR/tp-R-of-T), resumed for 2 more,
 * equals 4 uninterrupted steps bit for bit; resuming it directly at another T is refused (exit 2) naming
 * the conversion that makes it resumable on any grid (zl_ckpt convert; test_universal.c). */
Test(ch06_tp, checkpoint_resume_bitwise, .timeout = 120) {
  char ck[300], *out = NULL;
  zl_tmppath(ck, sizeof ck, "tp_ckpt", "ck");
  zl_out_t full = TP_LAUNCH(4, "tp_ckpt", "full", TP_SHAPE, "--tp 2 --zero 2");
  zl_run_ok(4, 60, "save run", "%s/ch06_tp " TP_BASE " --quiet --tp 2 --zero 2 --steps 2 --ckpt %s", ZL_BIN,
            ck);
  zl_out_t resumed = zl_launch(4, 60, "tp_ckpt", "resumed",
                               "%s/ch06_tp " TP_SHAPE " --tp 2 --zero 2 --resume %s", ZL_BIN, ck);
  cr_assert_eq(full.n, resumed.n, "weights: %lld vs %lld", (long long)full.n, (long long)resumed.n);
  zl_expect_floats("resumed vs uninterrupted (tp 2, zero 2)", resumed.params, full.params, full.n, 0);
  zl_out_free(&full);
  zl_out_free(&resumed);
  int rc;
  rc = zl_run(4, 60, &out, "%s/ch06_tp " TP_SHAPE " --quiet --tp 4 --resume %s", ZL_BIN, ck);
  cr_assert_eq(rc, 2, "resume at --tp 4 of a --tp 2 checkpoint: exit %d, expected 2:\n%s", rc,
               fail_lines(out));
  cr_assert(strstr(out, "tensor-parallel layout saved with --tp 2") && strstr(out, "zl_ckpt convert"),
            "refusal message (naming the T and the conversion, test_universal.c):\n%s", out);
  free(out);
}

/* ---- the GPT split (--model gpt: heads, vocab-parallel embedding, head and loss) ------------
 * The tiny GPT with 4 heads (L2 C32 S16 V256; --n-head 4 so that T = 4 divides them), 4 steps of
 * SGD with momentum and --clip 0.5, global batch 8, against 1 rank within 1e-5 (the all-reduces
 * sum partial dot products in another order; the embedding's sum has one nonzero term and is
 * exact). Per step, per rank, on the TP group: the embedding's g, 4 per block (2 g, 2 f), the
 * head's f, the loss's 3 per-row all-reduces = 1 + 4L + 1 + 3 = 13 calls; bytes
 * 2(T−1)/T × 4 × b × ((2 + 4L)·S·C + 3·S) with b = 8/D. */
#define GPT_SHAPE "--model gpt --gpt tiny --n-head 4 --batch 8 --steps 4 --optimizer sgd --lr 0.1 --clip 0.5"
#define GPT_S 16
#define GPT_C 32
#define GPT_L 2
#define GPT_V 256
#define GPT_NH 4

/* Per-rank parameters of the split GPT: wpe S·C and wte V/T rows; per block 6C replicated and
 * 12C·C/T + 7C/T split; the head's lnf 2C and V/T rows. */
static double gpt_local_params(int T) {
  double S = GPT_S, C = GPT_C, L = GPT_L, V = GPT_V;
  return S * C + V / T * C + L * (6 * C + 12 * C * C / T + 7 * C / T) + 2 * C + V / T * C;
}
/* Activations the loop keeps per rank (outputs and saved, fp32): gpt.h's with the split tensors
 * at 1/T and the logits S·V/T per sample. */
static double gpt_local_acts(int T, double b) {
  double S = GPT_S, C = GPT_C, L = GPT_L, V = GPT_V, NH = GPT_NH;
  double outs = S * C * (L + 1) + S * V / T, block = 3 * S * C + 4 * S + 12 * S * C / T + NH / T * S * S;
  return 4 * b * (outs + L * block + S * C + 2 * S);
}

/* One split-GPT run against the 1-rank reference: vs_one_rank's checks with the calls and bytes
 * above, then the activations kept and (DDP) each rank's parameter bytes, as the formulas. */
static void gpt_vs_one_rank(int np, int T, int zero, const zl_out_t *ref) {
  char args[128], what[96];
  snprintf(what, sizeof what, "gpt_tp%d_zero%d_np%d", T, zero, np);
  snprintf(args, sizeof args, "--tp %d --zero %d", T, zero);
  int D = np / T;
  double b = 8.0 / D, calls_want = 1 + 4 * GPT_L + 1 + 3;
  double want_bytes = 2.0 * (T - 1) / T * 4 * b * ((2 + 4 * GPT_L) * GPT_S * GPT_C + 3 * GPT_S);
  zl_out_t run =
      vs_one_rank(what, "GPT", TP_LAUNCH(np, what, "r", GPT_SHAPE, args), ref, np, calls_want, want_bytes);
  double acts = zl_json_num(run.json, "acts_saved_bytes");
  cr_assert(acts == gpt_local_acts(T, b),
            "%s: %g activation bytes kept, formula %g (logits S·V/T per sample)", what, acts,
            gpt_local_acts(T, b));
  if (zero == 0) { /* DDP: the ledger's params are the rank's whole local model */
    double want = gpt_local_params(T) * 4;
    for (int r = 0; r < np; r++) {
      double got_b = zl_rank_mem(run.json, r, "params");
      cr_assert(got_b == want, "%s rank %d: %g bytes of params, formula %g", what, r, got_b, want);
    }
  }
  zl_out_free(&run);
}

/* T = 2, 4 (DDP: one data-parallel group) and (D, T) = (2, 2) with ZeRO-3 on the data dimension;
 * heads that do not split over T are refused before training (exit 2). */
Test(ch06_tp, gpt_tp_equals_one_rank, .timeout = 120) {
  char *out = NULL;
  zl_out_t ref = TP_LAUNCH(1, "gpt_tp_ref", "ref", GPT_SHAPE, "");
  double acts1 = zl_json_num(ref.json, "acts_saved_bytes");
  cr_assert(acts1 == gpt_local_acts(1, 8), "1 rank: %g activation bytes, formula %g", acts1,
            gpt_local_acts(1, 8));
  gpt_vs_one_rank(2, 2, 0, &ref);
  gpt_vs_one_rank(4, 4, 0, &ref);
  gpt_vs_one_rank(4, 2, 3, &ref);
  zl_out_free(&ref);
  int rc = zl_run(4, 30, &out, "%s/ch06_tp --model gpt --gpt tiny --tp 4", ZL_BIN);
  cr_assert_eq(rc, 2, "--tp 4 with 2 heads: exit %d, expected 2:\n%s", rc, fail_lines(out));
  cr_assert(strstr(out, "error: --tp 4: the GPT's 2 heads must split evenly over T ranks"), "refusal:\n%s",
            out);
  free(out);
}

/* ---- --pa: ZeRO-R's partitioned activation checkpointing (common/train/loop.c: pa_keep, pa_gather) --
 * With --recompute at T = 2, --pa (auto: on) against --pa 0: the same losses and final weights
 * bit for bit (the all-gather moves bytes, it adds nothing); the loop's activations (ledger, rank
 * 0's "pa_acts_bytes") = the formula from the shapes, to the byte; per rank, the ledger's acts
 * peak moves by exactly slices + working buffers − whole outputs; one all-gather per partitioned
 * output per micro-batch, (T−1) slices of fp32 from each rank, exactly. */
static void pa_expect_same_run(const char *what, const zl_out_t *off, const zl_out_t *on, int steps) {
  cr_assert_eq(on->n, off->n, "%s: %lld vs %lld weights", what, (long long)on->n, (long long)off->n);
  zl_expect_floats(what, on->params, off->params, on->n, 0); /* bitwise */
  double l0[8], l1[8];
  int k0 = zl_json_all(off->json, "loss", l0, 8), k1 = zl_json_all(on->json, "loss", l1, 8);
  cr_assert(k0 == steps && k1 == steps, "%s: %d / %d losses", what, k0, k1);
  for (int s = 0; s < steps; s++)
    cr_assert(l1[s] == l0[s], "%s: loss %d: %.9g with Pa, %.9g without", what, s, l1[s], l0[s]);
}
/* Every rank of the TP table: gathers and bytes per step measured = formula = want; the all-reduces
 * the same with and without Pa. */
static void pa_expect_traffic(const char *what, const zl_out_t *off, const zl_out_t *on, int np, double calls,
                              double bytes) {
  const char *p = zl_json_find(on->json, "tp"), *q = zl_json_find(off->json, "tp");
  cr_assert(p && q, "%s: no tp object in the JSON", what);
  for (int r = 0; r < np; r++) {
    p = zl_json_find(p, "tp_rank");
    q = zl_json_find(q, "tp_rank");
    cr_assert(p && q, "%s: rank %d missing from tp.per_rank", what, r);
    double g = zl_json_num(p, "pa_gathers_per_step"), fg = zl_json_num(p, "formula_pa_gathers_per_step");
    double b = zl_json_num(p, "pa_bytes_per_step"), fb = zl_json_num(p, "formula_pa_bytes_per_step");
    cr_assert(g == calls && fg == calls, "%s rank %d: %g all-gathers per step (formula %g), expected %g",
              what, r, g, fg, calls);
    cr_assert(b == bytes && fb == bytes, "%s rank %d: %g bytes per step (formula %g), expected %g", what, r,
              b, fb, bytes);
    cr_assert(zl_json_num(q, "pa_gathers_per_step") == 0 &&
                  zl_json_num(q, "formula_pa_gathers_per_step") == 0,
              "%s rank %d: all-gathers with --pa 0", what, r);
    cr_assert(zl_json_num(p, "calls_per_step") == zl_json_num(q, "calls_per_step"),
              "%s rank %d: all-reduces differ", what, r);
  }
  cr_assert(isnan(zl_json_num(off->json, "pa_acts_bytes")), "%s: --pa 0 reports pa_acts_bytes", what);
}

/* The MLP with hidden 15 (T = 2 splits it 7 + 8: the column outputs differ per rank) and b·15 = 135
 * odd, so the last rank's slice ends with 1 pad slot: b = 9, --accum 2. Partitioned: unit 1's
 * output (row-parallel, out of g); unit 0's and unit 2's are this rank's columns, unit 3's the
 * logits (kept whole). Slice s = ceil(9·15 / 2) = 68. Rank 0 (7 columns), fp32 elements:
 * outputs 9·7 + 68 + 9·7 + 9·10, shared saved 9·15 (unit 1's pre-GELU), working 2 × 2·68 = 691
 * → 2764 B. Each rank's acts peak grows by 4 · (2·2·68 + 68 − 135) = 820 B. Per step: 2 gathers
 * (one per micro-batch), each sending 1 slice: 2 × 68 × 4 = 544 B. */
#define PA_MLP                                                                                            \
  "--input 32 --hidden 15 --layers 3 --classes 10 --batch 18 --accum 2 --optimizer sgd --lr 0.05 --clip " \
  "0.5 "                                                                                                  \
  "--steps 4 --recompute --tp 2"
Test(ch06_tp, pa_mlp_bitwise_formula, .timeout = 60) {
  zl_out_t off = zl_launch(2, 30, "pa_mlp", "off", "%s/ch06_tp " PA_MLP " --pa 0", ZL_BIN);
  zl_out_t on = zl_launch(2, 30, "pa_mlp", "on", "%s/ch06_tp " PA_MLP, ZL_BIN);
  pa_expect_same_run("mlp --pa vs --pa 0", &off, &on, 4);
  double acts = zl_json_num(on.json, "pa_acts_bytes"),
         formula = zl_json_num(on.json, "pa_acts_formula_bytes");
  cr_assert(acts == 2764 && formula == 2764, "mlp: pa_acts_bytes %g, formula %g, expected 2764", acts,
            formula);
  for (int r = 0; r < 2; r++) {
    double d = zl_rank_mem(on.json, r, "acts_peak") - zl_rank_mem(off.json, r, "acts_peak");
    cr_assert(d == 820, "mlp rank %d: acts peak %+g B with Pa, expected 4·(2·2·68 + 68 − 135) = "
                        "+820", r, d);
  }
  pa_expect_traffic("mlp", &off, &on, 2, 2, 544);
  zl_out_free(&off);
  zl_out_free(&on);
}

/* The tiny GPT (L2 C32 S16 V256, 4 heads), b = 8, T = 2: the embedding's and both blocks' outputs
 * partitioned (s = 8·16·32 / 2 = 2048 each), the logits kept (8·16·128). Shared saved: a block's
 * 3SC + 4S + 12S·C/T + (NH/T)·S² = 5184 per sample (> the head's SC + 2S). Per rank, fp32:
 * 3·2048 + 16384 + 8·5184 + 2 working × 4096 = 72192 → 288768 B (without Pa: 280576 — at L = 2
 * the two working buffers outweigh the 3 half-outputs saved). Per step: 3 gathers × 2048 × 4 B. */
#define PA_GPT GPT_SHAPE " --recompute --tp 2"
Test(ch06_tp, pa_gpt_bitwise_formula, .timeout = 60) {
  zl_out_t off = zl_launch(2, 30, "pa_gpt", "off", "%s/ch06_tp " PA_GPT " --pa 0", ZL_BIN);
  zl_out_t on = zl_launch(2, 30, "pa_gpt", "on", "%s/ch06_tp " PA_GPT, ZL_BIN);
  pa_expect_same_run("gpt --pa vs --pa 0", &off, &on, 4);
  double S = GPT_S, C = GPT_C, L = GPT_L, V = GPT_V, NH = GPT_NH, T = 2, b = 8;
  double s = b * S * C / T, block = 3 * S * C + 4 * S + 12 * S * C / T + NH / T * S * S;
  double want = 4 * ((L + 1) * s + b * S * V / T + b * block + 2 * T * s),
         want_off = 4 * ((L + 1) * b * S * C + b * S * V / T + b * block);
  double acts = zl_json_num(on.json, "pa_acts_bytes"),
         formula = zl_json_num(on.json, "pa_acts_formula_bytes");
  cr_assert(acts == want && formula == want, "gpt: pa_acts_bytes %g, formula %g, expected %g", acts, formula,
            want);
  cr_assert(zl_json_num(on.json, "acts_saved_bytes") == want &&
                zl_json_num(off.json, "acts_saved_bytes") == want_off,
            "gpt: acts_saved_bytes %g / %g with / without Pa, expected %g / %g",
            zl_json_num(on.json, "acts_saved_bytes"), zl_json_num(off.json, "acts_saved_bytes"), want,
            want_off);
  for (int r = 0; r < 2; r++) {
    double d = zl_rank_mem(on.json, r, "acts_peak") - zl_rank_mem(off.json, r, "acts_peak");
    cr_assert(d == want - want_off, "gpt rank %d: acts peak %+g B with Pa, expected %+g", r, d,
              want - want_off);
  }
  pa_expect_traffic("gpt", &off, &on, 2, L + 1, (L + 1) * s * 4);
  zl_out_free(&off);
  zl_out_free(&on);
}

/* --pa 1 where there is nothing to partition: exit 2 before MPI, naming the flag. */
Test(ch06_tp, pa_needs_recompute_and_tp, .timeout = 30) {
  char *out = NULL;
  int rc = zl_run(0, 30, &out, "%s/ch06_tp --pa 1 --tp 1", ZL_BIN);
  cr_assert_eq(rc, 2, "--pa 1 without --recompute: exit %d, expected 2:\n%s", rc, fail_lines(out));
  cr_assert(strstr(out, "error: --pa 1: needs --recompute and --tp T > 1"), "message:\n%s", out);
  free(out);
}
