/* test_pipeline_v.c — chapter 07d's DualPipeV run by the loop (solutions/pipeline_v.c; suite
 * ch07_dualpipev, beside the pure tests of tests/unit/test_pipeline_dpv.c): N ranks hold 2N chunks in
 * a V and train BITWISE as 1 rank with --accum M, and so with 1F1B's losses.
 *
 * Why bitwise: the backward is split (B, then W from a per-chunk queue), and every chunk runs its
 * B's and its W's in micro-batch order 0..M−1 (pp_check_lists proves it of every list), so each
 * weight's gradient adds micro-batches 0..M−1 in order, written with beta 0 by micro-batch 0; the
 * loss is scored on rank 0's chunk 1 (the model's last) in micro-batch order; each unit's arithmetic
 * is the same whichever rank runs it. The V's tip copies bytes (no arithmetic). With D = 2 replicas
 * per stage, DDP and ZeRO-1/2/3 reduce each unit once, after its last W: bitwise DDP on 2 ranks.
 *
 * --fb-overlap (each F&B as one operation, common/train/loop_fb.c) keeps the bits: the same runs.
 *
 * Memory (DeepSeek's table, per device): parameters of 2 of the 2N stages (the ledger's, measured),
 * and at most PP + 1 = 2N + 1 micro-batch-stages of activations in flight (the loop's slots,
 * measured) on stage 0. Notes: notes/07d-dualpipev.md. */
#include "pipeline_sched.h" // pp_split, pp_inflight_formula, pp_chunk_model
#include "zl_test.h"        // zl_run, zl_json_num, zl_read_floats, zl_expect_floats, zl_rank_mem

/* 4 equal units of 13·13 + 13 = 182 parameters (input = hidden = classes): each of P = 2's 4 stages
 * one unit, so "2 stages per device" is exactly 2 × Ψ/4 */
#define EQ "--input 13 --hidden 13 --classes 13 --layers 3 --batch 24 --seed 7 --steps 2"
/* 8 units of unequal sizes (91, 6 × 182, 154): P = 4's 8 stages */
#define ODD "--input 6 --hidden 13 --classes 11 --layers 7 --batch 32 --seed 7 --steps 2"

typedef struct run {
  char *json;
  float *params;
  int64_t n;
} run_t;

static run_t launch(int np, const char *dir, const char *name, const char *cmd) {
  char json[320], bin[320];
  snprintf(json, sizeof json, "%s/%s.json", dir, name);
  snprintf(bin, sizeof bin, "%s/%s.bin", dir, name);
  char *out = NULL;
  int rc = zl_run(np, 120, &out, "%s --json %s --save-params %s --quiet --timeout-s 30", cmd, json, bin);
  cr_assert_eq(rc, 0, "%s (np %d: %s) exited %d:\n%s", name, np, cmd, rc, out ? out : "");
  free(out);
  run_t r = {.json = zl_read_file(json, NULL)};
  cr_assert(r.json, "%s: no --json written", name);
  r.params = zl_read_floats(bin, &r.n);
  return r;
}

static void run_free(run_t *r) { free(r->json), free(r->params); }

static void expect_equal(const char *name, const run_t *got, const run_t *want) {
  cr_assert_eq(got->n, want->n, "%s: %lld params, expected %lld", name, (long long)got->n,
               (long long)want->n);
  zl_expect_floats(name, got->params, want->params, want->n, 0);
  zl_expect_same_losses(name, got->json, want->json);
}

/* P = 2 (4 equal stages) and P = 4 (8 unequal ones): = 1 rank --accum M and = 1F1B's losses, bitwise;
 * the activations in flight per stage = the list's peak (pp_inflight_formula), stage 0's = PP + 1;
 * each rank's parameters (the ledger) = its two chunks', 2 × Ψ/PP with equal stages. */
Test(ch07_dualpipev, equals_one_rank_and_1f1b_with_the_tables_memory, .timeout = 240) {
  char dir[256], cmd[1024];
  zl_tmpdir(dir, sizeof dir, "dpv");
  const struct {
    int P, M;
    const char *model;
    int64_t units[8];
  } c[2] = {{2, 4, EQ, {182, 182, 182, 182}}, {4, 8, ODD, {91, 182, 182, 182, 182, 182, 182, 154}}};
  for (int i = 0; i < 2; i++) {
    int P = c[i].P, M = c[i].M;
    snprintf(cmd, sizeof cmd, ZL_BIN "/ch02_ddp --variant naive %s --accum %d", c[i].model, M);
    run_t ref = launch(1, dir, "ref", cmd);
    snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline %s --pp %d --micro-batches %d --schedule 1f1b",
             c[i].model, P, M);
    run_t f1b = launch(P, dir, "1f1b", cmd);
    snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline %s --pp %d --micro-batches %d --schedule dualpipev",
             c[i].model, P, M);
    run_t dpv = launch(P, dir, "dpv", cmd);
    expect_equal("dualpipev = 1 rank --accum M", &dpv, &ref);
    strcat(cmd, " --fb-overlap"); /* each F&B as one operation (loop_fb.c): B's gradient posted first */
    run_t fb = launch(P, dir, "dpv_fb", cmd);
    expect_equal("dualpipev --fb-overlap = without", &fb, &dpv);
    run_free(&fb);
    zl_expect_same_losses("dualpipev = 1f1b's losses", dpv.json, f1b.json);
    int first[9];
    cr_assert_eq(pp_split(c[i].units, 2 * P, 2 * P, first), 0);
    for (int s = 0; s < P && s < 4; s++) {
      char key[48];
      snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
      double got = zl_json_num(dpv.json, key);
      cr_assert_eq(got, pp_inflight_formula(PP_DUALPIPEV, P, s, M, 2),
                   "P %d stage %d: %g micro-batch-stages in flight, the list's peak %d", P, s, got,
                   pp_inflight_formula(PP_DUALPIPEV, P, s, M, 2));
      if (s == 0)
        cr_assert_eq(got, 2 * P + 1, "P %d stage 0: %g in flight, DeepSeek's table PP + 1 = %d", P, got,
                     2 * P + 1);
      int64_t mine = 0; /* the units of chunks s and 2P−1−s */
      for (int j = 0; j < 2; j++) {
        int m = pp_chunk_model(P, 1, s, j);
        for (int u = first[m]; u < first[m + 1]; u++)
          mine += c[i].units[u];
      }
      double params = zl_rank_mem(dpv.json, s, "params");
      cr_assert_eq(params, 4.0 * (double)mine,
                   "P %d rank %d: the ledger's params %g B, its two chunks' %lld B", P, s, params,
                   4 * (long long)mine);
      if (i == 0)
        cr_assert_eq(params, 2 * 4.0 * 182, "rank %d: %g B of parameters, the table's 2 x one stage's", s,
                     params);
    }
    cr_assert_eq(zl_json_num(dpv.json, "acts_inflight_table_formula"), 2 * P + 1);
    run_free(&ref), run_free(&f1b), run_free(&dpv);
  }
}

/* The data dimension: P = 2 × D = 2, bf16, --zero 0 (DDP), 1, 2, 3 against DDP on 2 ranks with
 * --accum 4, bitwise (each unit reduced once, after its last W); and the GPT (embedding | 2 blocks |
 * head: 4 units, one per stage) at P = 2 against 1 rank with --accum 4. */
Test(ch07_dualpipev, data_dimension_zero0123_and_gpt_bitwise, .timeout = 240) {
#define DPM "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 2 --precision bf16"
#define GPT                                                                                                  \
  "--model gpt --gpt tiny --n-embd 35 --n-head 5 --seq-len 16 --batch 12 --seed 5 --device cpu --steps 2 "   \
  "--data /usr/share/games/fortunes/cookie"
  char dir[256], cmd[1024], name[64];
  zl_tmpdir(dir, sizeof dir, "dpv_dp");
  run_t ref = launch(2, dir, "ddp2", ZL_BIN "/ch02_ddp --variant naive " DPM " --accum 4");
  for (int z = 0; z <= 3; z++) {
    snprintf(name, sizeof name, "pp2_dp2_zero%d", z);
    snprintf(cmd, sizeof cmd,
             ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 4 --zero %d --schedule "
                    "dualpipev",
             z);
    run_t r = launch(4, dir, name, cmd);
    expect_equal(name, &r, &ref);
    run_free(&r);
  }
  run_free(&ref);
  run_t gref = launch(1, dir, "gpt_ref", ZL_BIN "/ch02_ddp --variant naive " GPT " --accum 4");
  run_t g = launch(2, dir, "gpt_dpv",
                   ZL_BIN "/ch07_pipeline " GPT " --pp 2 --micro-batches 4 --schedule dualpipev");
  expect_equal("GPT dualpipev P 2", &g, &gref);
  run_free(&gref), run_free(&g);
#undef DPM
}

/* make test-long: the GPT of 6 blocks (8 units) on 8 ranks, P = 4 × D = 2 with ZeRO-3 on the data
 * dimension, against DDP on 2 ranks with --accum 8; and P = 3 (an odd V: 6 stages of 8 unequal units)
 * under synchronous sends (ZL_SYNC_SENDS=1: NCCL's rendezvous, every message alone) = 1 rank. */
Test(ch07_dualpipev_long, gpt_zero3_eight_ranks_and_synchronous_sends, .timeout = 300) {
#define GPT6                                                                                                 \
  "--model gpt --gpt tiny --n-layer 6 --n-embd 35 --n-head 5 --seq-len 16 --batch 16 --seed 5 --device cpu " \
  "--steps 2 --data /usr/share/games/fortunes/cookie"
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "dpv_long");
  run_t ref = launch(2, dir, "gpt_ddp2", ZL_BIN "/ch02_ddp --variant naive " GPT6 " --accum 8");
  run_t r = launch(8, dir, "gpt_pp4_dp2_zero3",
                   ZL_BIN "/ch07_pipeline " GPT6 " --pp 4 --micro-batches 8 --zero 3 --schedule dualpipev");
  expect_equal("GPT dualpipev P 4 x D 2, ZeRO-3", &r, &ref);
  run_free(&ref), run_free(&r);
#define ODD3 "--input 6 --hidden 13 --classes 11 --layers 7 --batch 36 --seed 7 --steps 2"
  run_t mref = launch(1, dir, "odd_ref", ZL_BIN "/ch02_ddp --variant naive " ODD3 " --accum 6");
  setenv("ZL_SYNC_SENDS", "1", 1);
  setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS", 1);
  run_t s = launch(3, dir, "odd_sync",
                   ZL_BIN "/ch07_pipeline " ODD3 " --pp 3 --micro-batches 6 --schedule "
                          "dualpipev");
  unsetenv("ZL_SYNC_SENDS");
  unsetenv("ZL_MPIRUN_FLAGS");
  expect_equal("dualpipev P 3 under synchronous sends", &s, &mref);
  run_free(&mref), run_free(&s);
#undef GPT6
#undef ODD3
#undef GPT
}
