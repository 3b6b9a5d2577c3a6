/* test_universal.c — one checkpoint, any grid (suite common_universal; three more source grids
 * in common_universal_long, make test-long; common/train/ckpt.h, zl_ckpt convert,
 * notes/reliability.md "The universal form"). DeepSpeed's universal checkpointing is the anchor:
 * a checkpoint of any grid (T, P, D, ZeRO stage, offload) is made grid-free — every
 * state keyed by full-model unit and full-model offset — and resumed on another grid.
 *
 * For each SOURCE grid of the table below: a straight run of 8 steps saving at 4 and 8; then
 *   1. lossless: `zl_ckpt convert --step 4` -> G, resumed on the SOURCE grid to step 8: the
 *      params == the straight run's bit for bit, and the converted step-8 states (fp32 weights,
 *      Adam m and v) == the straight run's converted ones byte for byte;
 *   2. exact on another grid: G resumed on the first TARGET grid with --lr 0 for one step and
 *      saved: its converted fp32 weights == G's byte for byte (lr 0 leaves AdamW's w as read;
 *      m and v take the step's gradient, so only the weights can be compared after a step);
 *   3. the loss goes on: G (or, for grids without --tp, the step-4 directory itself, directly)
 *      resumed on every TARGET grid to step 8: params within the case's tolerance of the
 *      straight run, normwise (|Δw_i| <= tol·max|w|; zl_expect_close_norm): another grid runs its
 *      GEMMs on other shapes and sums in another order, so the bits differ (notes/design.md, "Bits
 *      or a tolerance"), and a per-weight relative test is no measure (AdamW moves a weight whose
 *      gradient is ~0 by ~lr in a direction the summation order decides). tol = 1e-6: measured
 *      over the OpenBLAS kernels Prescott..Cooperlake, the largest gap is 5.8e-8 (MLP, AdamW) and
 *      7.4e-9 (GPT, SGD) — a margin of 17x; a lost gradient piece or a wrong lr moves weights by
 *      ~lr·|g| ≈ 1e-3 of max|w| (the log line prints each case's gap).
 *      Tiny models, 2–4 ranks, 8 steps; the table covers TP (the GPT's vocab-parallel embedding
 *      and head, Pa), TP x PP, ZeRO-1/2/3, offload and the interleaved pipeline. */
#include "zl_test.h" // zl_run, zl_tmpdir, zl_read_file, zl_read_floats, zl_expect_floats

#define MLP "--hidden 13 --input 6 --classes 11 --layers 2 --batch 120 --seed 7 --quiet --log-every 0"
#define GPT                                                                                           \
  "--model gpt --gpt tiny --n-embd 36 --n-head 6 --batch 12 --seed 5 --optimizer sgd --momentum 0.9 " \
  "--quiet "                                                                                          \
  "--log-every 0 --device cpu --data /usr/share/games/fortunes/cookie"

typedef struct { int np; const char *prog, *flags; } grid_run_t;

typedef struct {
  const char *name, *model; /* MLP or GPT */
  double tol;
  grid_run_t src;
  int direct;               /* the source has no --tp: targets resume its step-4 directory directly */
  grid_run_t dst[2];
} ucase_t;

static void run(const char *what, const grid_run_t *g, const char *model, const char *fmt, ...) {
  char extra[1024], *out = NULL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(extra, sizeof extra, fmt, ap);
  va_end(ap);
  int rc = zl_run(g->np, 120, &out, ZL_BIN "/%s %s %s %s", g->prog, g->flags, model, extra);
  cr_assert_eq(rc, 0, "%s (%s %s on %d ranks): exit %d; output:\n%s", what, g->prog, g->flags, g->np, rc,
               out);
  free(out);
}

static void convert(const char *from, const char *to, int step) {
  char *out = NULL;
  int rc = step ? zl_run(0, 60, &out, ZL_BIN "/zl_ckpt convert %s %s --step %d", from, to, step)
                : zl_run(0, 60, &out, ZL_BIN "/zl_ckpt convert %s %s", from, to);
  cr_assert(rc == 0 && strstr(out, "grid-free"), "zl_ckpt convert %s %s: exit %d; output:\n%s", from, to, rc,
            out);
  free(out);
}

/* The first nbytes (all when 0) of two files, byte for byte; fails naming the byte and element. */
static void same_bytes(const char *what, const char *a, const char *b, size_t nbytes) {
  size_t na = 0, nb = 0;
  char *x = zl_read_file(a, &na), *y = zl_read_file(b, &nb);
  cr_assert(x && y, "%s: missing %s or %s", what, a, b);
  if (!nbytes) {
    cr_assert_eq(na, nb, "%s: %s has %zu bytes, %s %zu", what, a, na, b, nb);
    nbytes = na;
  }
  cr_assert(na >= nbytes && nb >= nbytes, "%s: %s or %s shorter than %zu bytes", what, a, b, nbytes);
  for (size_t i = 0; i < nbytes; i++)
    cr_assert_eq(x[i], y[i], "%s: %s and %s differ first at byte %zu (float32 element %zu)", what, a, b, i,
                 i / 4);
  free(x);
  free(y);
}

static void universal(const ucase_t *c) {
  char d[256], a[300], abin[300], g[300], a8[300], b[300], bbin[300], b8[300], p[400], q[400];
  zl_tmpdir(d, sizeof d, c->name);
  snprintf(a, sizeof a, "%s/a", d), snprintf(abin, sizeof abin, "%s/a.bin", d),
      snprintf(g, sizeof g, "%s/g", d);
  snprintf(a8, sizeof a8, "%s/a8", d), snprintf(b, sizeof b, "%s/b", d),
      snprintf(bbin, sizeof bbin, "%s/b.bin", d);
  snprintf(b8, sizeof b8, "%s/b8", d);
  run("straight run", &c->src, c->model, "--lr 0.01 --steps 8 --ckpt %s --save-every 4 --save-params %s", a,
      abin);
  convert(a, g, 4);
  convert(a, a8, 0);
  /* 1. lossless on the source grid */
  run("resume of the grid-free form on the source grid", &c->src, c->model,
      "--lr 0.01 --steps 8 --resume %s --ckpt %s "
      "--save-params %s",
      g, b, bbin);
  same_bytes("params after 4 + 4 resumed steps on the source grid", abin, bbin, 0);
  convert(b, b8, 0);
  snprintf(p, sizeof p, "%s/step-000008/rank-00000.bin", a8),
      snprintf(q, sizeof q, "%s/step-000008/rank-00000.bin", b8);
  same_bytes("step-8 states (weights, m, v) converted, resumed vs straight", p, q, 0);
  /* 2. exact on another grid: the fp32 weights after restore + save (lr 0) */
  char z[300], z8[300], gw[400];
  snprintf(z, sizeof z, "%s/z", d), snprintf(z8, sizeof z8, "%s/z8", d);
  run("resume with --lr 0 on the first target grid", &c->dst[0], c->model,
      "--lr 0 --steps 5 --resume %s --ckpt %s", g, z);
  convert(z, z8, 0);
  snprintf(gw, sizeof gw, "%s/step-000004/rank-00000.bin", g),
      snprintf(q, sizeof q, "%s/step-000005/rank-00000.bin", z8);
  int64_t psi = 0;
  float *want = zl_read_floats(abin, &psi);
  same_bytes("fp32 weights read on another grid and saved again (--lr 0)", gw, q, (size_t)psi * 4);
  /* 3. the run goes on, on every target grid */
  for (int k = 0; k < 2; k++) {
    char t[300];
    snprintf(t, sizeof t, "%s/t%d.bin", d, k);
    if (c->direct) snprintf(p, sizeof p, "%s/step-000004", a);
    else snprintf(p, sizeof p, "%s", g);
    run("resume on a target grid", &c->dst[k], c->model, "--lr 0.01 --steps 8 --resume %s --save-params %s",
        p, t);
    int64_t n = 0;
    float *got = zl_read_floats(t, &n);
    cr_assert_eq(n, psi, "%s: %lld params, expected %lld", t, (long long)n, (long long)psi);
    snprintf(q, sizeof q, "%s: %s %s (%d ranks) -> %s %s (%d ranks), params after step 8", c->name,
             c->src.prog, c->src.flags, c->src.np, c->dst[k].prog, c->dst[k].flags, c->dst[k].np);
    double gap = zl_expect_close_norm(q, got, want, n, c->tol);
    cr_log_info("universal %s -> %s %s: largest |difference| / max|w|: %.2g (tolerance %g)", c->name,
                c->dst[k].prog, c->dst[k].flags, gap, c->tol);
    free(got);
  }
  free(want);
  cr_log_info("universal %s: lossless on the source grid, weights exact on %s %s, within %g on both targets",
              c->name, c->dst[0].prog, c->dst[0].flags, c->tol);
}

/* The table (notes/reliability.md lists it). */
static const ucase_t CASES[] = {
    {"u_tp2", MLP, 1e-6, {2, "ch06_tp", "--tp 2"}, 0, {{2, "ch02_ddp", ""}, {4, "ch06_tp", "--tp 4"}}},
    {"u_tp2pp2",
     MLP,
     1e-6,
     {4, "ch07_pipeline", "--tp 2 --pp 2"},
     0,
     {{3, "ch05_zero3", ""}, {4, "ch06_tp", "--tp 2"}}},
    {"u_zero3",
     MLP,
     1e-6,
     {3, "ch05_zero3", ""},
     1,
     {{2, "ch06_tp", "--tp 2"}, {3, "ch07_pipeline", "--pp 3 --zero 1"}}},
    {"u_offload",
     MLP,
     1e-6,
     {2, "ch08_offload", ""},
     1,
     {{4, "ch07_pipeline", "--tp 2 --pp 2"}, {3, "ch04_zero2", ""}}},
    {"u_gpt_tp2_pa",
     GPT,
     1e-6,
     {2, "ch06_tp", "--tp 2 --recompute"},
     0,
     {{3, "ch06_tp", "--tp 3"}, {2, "ch08_offload", ""}}},
    {"u_gpt_interleaved",
     GPT,
     1e-6,
     {2, "ch07_pipeline", "--pp 2 --schedule interleaved --virtual-stages 2"},
     1,
     {{2, "ch06_tp", "--tp 2 --recompute"}, {3, "ch03_zero1", ""}}},
};

Test(common_universal, tp2_to_ddp_and_tp4) { universal(&CASES[0]); }
Test(common_universal_long, tp2_pp2_to_zero3_and_tp2_d2) { universal(&CASES[1]); }
Test(common_universal_long, zero3_to_tp2_and_pp3_zero1) { universal(&CASES[2]); }
Test(common_universal_long, offload_to_tp2_pp2_and_zero2) { universal(&CASES[3]); }
Test(common_universal, gpt_tp2_pa_to_tp3_vocab_and_offload) { universal(&CASES[4]); }
Test(common_universal_long, gpt_interleaved_to_tp2_and_zero1) { universal(&CASES[5]); }
