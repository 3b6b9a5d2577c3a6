/* test_fp16.c — --precision fp16 with the loss scaler (common/train/scaler.c, loop.c:
 * trainer_finish_grads; notes/fp16.md):
 *   1. a forced overflow skips exactly the expected steps and leaves the weights bitwise
 *      unchanged on them: a huge --init-scale at N = 1 (the skipped steps are the prefix where
 *      the scale is too big, each one halving it), and --fault R:S:overflow under ZeRO-3 at
 *      N = 3, where only rank R's shard overflows and every rank must skip;
 *   2. fp16 DDP at N = 2 = N = 1 within a stated tolerance (other per-rank GEMM shapes); fp16
 *      ZeRO-1/2/3 = fp16 DDP bitwise (the same kernels and shapes; at N = 2 each sum is a + b);
 *   3. the GPT trains in fp16 to bf16's validation loss within a stated margin;
 *   4. fp16's range problem: without scaling (--loss-scale 1) gradients flush to zero, counted,
 *      and the default scale (65536) flushes fewer of them.
 * Suite ch_fp16. Tiny models, few steps. */
#include "zl_test.h" // zl_run, zl_launch, zl_json_num, zl_read_file, zl_expect_floats, zl_expect_same_file
#include <math.h>    // ldexp, fabs

#define SHAPE "--hidden 13 --input 6 --classes 11 --layers 2 --batch 120 --seed 7 --precision fp16"
#define MLP SHAPE " --lr 0.01"

/* 1a. N = 1, --init-scale 2^40: the first steps overflow, each halving the scale, until it
 * fits (then it may overflow again later: the dynamic scaler probes). Every step the scale
 * halved after is a skipped step and no other: the count of halvings (the scales in --json,
 * then loss_scale_final) is skipped_steps. The weights after the first run of skipped steps
 * are the initial weights, bitwise (a run with --lr 0). */
/* A static scale that overflows on every step trains nothing: the run says so in one line, and
 * how to fix it — not only "overflow_steps: 3" — and exits 1 (issue 56: it exited 0). */
Test(ch_fp16, a_static_scale_that_always_overflows_is_named) {
  char *out = NULL;
  int rc = zl_run(1, 30, &out, ZL_BIN "/ch02_ddp " MLP " --loss-scale 1e30 --steps 3");
  cr_assert_eq(rc, 1, "exit %d, expected 1 (nothing trained):\n%s", rc, out);
  cr_assert(strstr(out, "error: every one of the 3 steps of this run overflowed in fp16") &&
                strstr(out, "static --loss-scale is too large"),
            "no line saying that every step overflowed and why:\n%s", out);
  free(out);
  rc = zl_run(1, 30, &out, ZL_BIN "/ch02_ddp " MLP " --steps 3");
  cr_assert(rc == 0 && !strstr(out, "warning: every one"), "a run that trains must not say it:\n%s", out);
  free(out);
}

Test(ch_fp16, huge_initial_scale_skips_the_expected_steps_weights_unchanged) {
  enum { S = 30 };
  zl_out_t a = zl_launch(1, 60, "fp16_huge", "huge",
                         ZL_BIN "/ch02_ddp " MLP " --steps %d --init-scale 1099511627776", S);
  double sc[S + 1];
  const char *p = strstr(a.json, "\"loss_scales\": [");
  cr_assert(p, "--json has no loss_scales array:\n%s", a.json);
  p += strlen("\"loss_scales\": [");
  for (int i = 0; i < S; i++) {
    char *e;
    sc[i] = strtod(p, &e);
    cr_assert(e != p, "loss_scales[%d] missing", i);
    p = e + (*e == ',' ? 2 : 0);
  }
  sc[S] = zl_json_num(a.json, "loss_scale_final");
  cr_assert(sc[0] == ldexp(1.0, 40), "loss_scales[0]: got %.17g, expected 2^40", sc[0]);
  int halvings = 0, first = 0;
  for (int i = 0; i < S; i++) {
    int halved = sc[i + 1] == sc[i] / 2;
    cr_assert(halved || sc[i + 1] == sc[i],
              "step %d: scale %.17g -> %.17g: neither kept nor halved (growth interval 2000)", i, sc[i],
              sc[i + 1]);
    halvings += halved;
    if (halved && first == i) first = i + 1; /* the first run of skipped steps: 0..first-1 */
  }
  int skipped = (int)zl_json_num(a.json, "skipped_steps");
  cr_assert(first >= 1, "scale 2^40 did not overflow at step 0 (loss_scales %g %g)", sc[0], sc[1]);
  cr_assert_eq(skipped, halvings, "skipped_steps %d, but the scale halved after %d steps", skipped, halvings);
  cr_assert_eq((int)zl_json_num(a.json, "overflow_steps"), halvings, "overflow_steps != %d", halvings);
  zl_out_free(&a);
  /* only the first skipped steps: the weights are the initial ones, bit for bit */
  zl_out_t s = zl_launch(1, 60, "fp16_huge", "skipped",
                         ZL_BIN "/ch02_ddp " MLP " --steps %d --init-scale 1099511627776", first);
  zl_out_t z = zl_launch(1, 60, "fp16_huge", "lr0", ZL_BIN "/ch02_ddp " SHAPE " --steps 1 --lr 0");
  cr_assert_eq((int)zl_json_num(s.json, "skipped_steps"), first, "the first %d steps again: not all skipped",
               first);
  cr_assert_eq(s.n, z.n);
  zl_expect_floats("weights after only skipped steps vs the initial weights", s.params, z.params, s.n, 0);
  zl_out_free(&s);
  zl_out_free(&z);
}

/* 1b. ZeRO-3 at N = 3: only rank 1's shard overflows at step 1; every rank skips it: each
 * rank's checkpoint after step 1 equals the one before it, the optimizer's t stays 1. */
Test(ch_fp16, one_shard_overflow_skips_on_every_rank_zero3) {
  char dir[256], a[400], b[400], json[320], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "fp16_z3");
  snprintf(json, sizeof json, "%s/r.json", dir);
  int rc =
      zl_run(3, 60, &out,
             ZL_BIN "/ch05_zero3 " MLP " --steps 2 --fault 1:1:overflow --ckpt %s --save-every 1 --json %s",
             dir, json);
  cr_assert_eq(rc, 0, "ch05_zero3 --fault 1:1:overflow: exit %d:\n%s", rc, out);
  cr_assert(strstr(out, "step 1: gradient overflow") && strstr(out, "skipped on every rank"),
            "no 'step 1: gradient overflow ... skipped on every rank' line:\n%s", out);
  for (int r = 0; r < 3; r++) {
    snprintf(a, sizeof a, "%s/step-000001/rank-%05d.bin", dir, r);
    snprintf(b, sizeof b, "%s/step-000002/rank-%05d.bin", dir, r);
    zl_expect_same_file(a, b); /* params, master, m, v of rank r's shard */
  }
  snprintf(a, sizeof a, "%s/step-000002/manifest.txt", dir);
  char *man = zl_read_file(a, NULL), *js = zl_read_file(json, NULL);
  cr_assert(man && strstr(man, "\nopt_t 1\n") && strstr(man, "\nprecision fp16\n"),
            "%s: after the skipped step the optimizer's t must stay 1 (and fp16 be recorded):\n%s", a, man);
  cr_assert_eq((int)zl_json_num(js, "skipped_steps"), 1, "skipped_steps: expected 1:\n%s", js);
  cr_assert(zl_json_num(js, "loss_scale_final") == 32768,
            "loss_scale_final: got %g, expected 32768 (65536 backed off)",
            zl_json_num(js, "loss_scale_final"));
  cr_assert(zl_json_num(js, "overflow_check_bytes") > 0,
            "overflow_check_bytes: the check is a collective under ZeRO");
  free(man);
  free(js);
  free(out);
}

/* 2. fp16 DDP: N = 2 vs N = 1 within 1e-2 relative, floor 1e-3·max|w| (the fp16 all-reduce
 * rounds the sum of two halves, one rank rounds the whole: 10 steps of AdamW at lr 0.01 give
 * 2.9e-3 at most, 5.8e-5 absolute, measured);
 * ZeRO-1/2/3 at N = 2 = DDP at N = 2 bitwise (the same fp16 sums, the same fp32 update). */
Test(ch_fp16, ddp_n2_vs_n1_and_zero_stages_bitwise) {
  zl_out_t one = zl_launch(1, 60, "fp16_ddp", "n1", ZL_BIN "/ch02_ddp " MLP " --steps 10");
  zl_out_t two = zl_launch(2, 60, "fp16_ddp", "n2", ZL_BIN "/ch02_ddp " MLP " --steps 10");
  cr_assert_eq(one.n, two.n);
  zl_expect_floats("fp16 DDP N=2 vs N=1 params", two.params, one.params, one.n, 1e-2);
  const char *progs[3] = {"ch03_zero1", "ch04_zero2", "ch05_zero3"};
  for (int s = 0; s < 3; s++) {
    zl_out_t z = zl_launch(2, 60, "fp16_ddp", progs[s], ZL_BIN "/%s " MLP " --steps 10", progs[s]);
    char what[96];
    snprintf(what, sizeof what, "fp16 %s N=2 vs DDP N=2 params", progs[s]);
    cr_assert_eq(z.n, two.n);
    zl_expect_floats(what, z.params, two.params, z.n, 0);
    zl_out_free(&z);
  }
  zl_out_free(&one);
  zl_out_free(&two);
}

/* 3. The GPT (tiny, 20 steps) in fp16 reaches bf16's validation loss within 0.05 nats. */
Test(ch_fp16, gpt_fp16_matches_bf16_validation_loss, .timeout = 300) {
  const char *g = ZL_BIN "/ch02_ddp --model gpt --gpt tiny --steps 20 --eval-every 20";
  zl_out_t h = zl_launch(1, 240, "fp16_gpt", "fp16", "%s --precision fp16", g);
  zl_out_t b = zl_launch(1, 240, "fp16_gpt", "bf16", "%s --precision bf16", g);
  double vh = zl_json_num(h.json, "final_val_loss"), vb = zl_json_num(b.json, "final_val_loss");
  cr_assert(fabs(vh - vb) <= 0.05, "GPT validation loss: fp16 %.6f, bf16 %.6f: differ by more than 0.05", vh,
            vb);
  cr_assert(vh < 5.0, "fp16 GPT did not learn: validation loss %.4f (uniform 5.545)", vh);
  zl_out_free(&h);
  zl_out_free(&b);
}

/* 4. Range: with no scaling (--loss-scale 1) small gradients flush to zero in fp16; the
 * default dynamic scale (65536) keeps most of them. */
Test(ch_fp16, without_scaling_gradients_flush_to_zero, .timeout = 300) {
  const char *g = ZL_BIN "/ch02_ddp --model gpt --gpt tiny --steps 20 --precision fp16";
  zl_out_t u = zl_launch(1, 240, "fp16_range", "unscaled", "%s --loss-scale 1", g);
  zl_out_t s = zl_launch(1, 240, "fp16_range", "scaled", "%s", g);
  double fu = zl_json_num(u.json, "fp16_flushed_to_zero"), fs = zl_json_num(s.json, "fp16_flushed_to_zero");
  cr_assert(fu > 0, "--loss-scale 1: expected gradients flushed to zero, got %g", fu);
  cr_assert(fs < fu / 2, "scale 65536 flushed %g gradient elements, unscaled %g: expected far fewer", fs, fu);
  zl_out_free(&u);
  zl_out_free(&s);
}

/* 5. The loss scaler's state is part of the checkpoint: a dynamic fp16 run of 8 steps (scale
 * 2^30 at first, so it backs off; growth interval 2, so the growth tracker matters) equals the
 * same run stopped after step 4 and resumed, bitwise — the weights and the scale of every step
 * after the resume (a resume that restarted from --init-scale would skip steps again). */
static void json_scales(const char *json, double *sc, int n) {
  const char *p = strstr(json, "\"loss_scales\": [");
  cr_assert(p, "--json has no loss_scales array:\n%s", json);
  p += strlen("\"loss_scales\": [");
  for (int i = 0; i < n; i++) {
    char *e;
    sc[i] = strtod(p, &e);
    cr_assert(e != p, "loss_scales[%d] missing", i);
    p = e + (*e == ',' ? 2 : 0);
  }
}
Test(ch_fp16, scaler_state_survives_a_resume_bitwise) {
  enum { S = 8, CUT = 4 }; /* --save-every 4 saves after steps 4 and 8; both are kept */
  char dir[256], step[320];
  zl_tmpdir(dir, sizeof dir, "fp16_resume_ck");
#define SCALER MLP " --steps 8 --init-scale 1073741824 --growth-interval 2"
  zl_out_t full = zl_launch(2, 60, "fp16_resume", "full",
                            ZL_BIN "/ch03_zero1 " SCALER " --ckpt %s --save-every %d", dir, CUT);
  snprintf(step, sizeof step, "%s/step-%06d", dir, CUT);
  char man_path[400];
  snprintf(man_path, sizeof man_path, "%s/manifest.txt", step);
  char *man = zl_read_file(man_path, NULL);
  cr_assert(man && strstr(man, "\nscaler "),
            "%s: no 'scaler' line (the loss scaler's state is not saved):\n%s", man_path,
            man ? man : "(missing)");
  free(man);
  zl_out_t res =
      zl_launch(2, 60, "fp16_resume", "resumed", ZL_BIN "/ch03_zero1 " SCALER " --resume %s", step);
  double a[S], b[S];
  json_scales(full.json, a, S);
  json_scales(res.json, b, S);
  cr_assert(zl_json_num(full.json, "skipped_steps") >= 1,
            "scale 2^30 never overflowed: the test proves nothing");
  for (int i = CUT; i < S; i++)
    cr_assert(a[i] == b[i], "loss scale of step %d: resumed %.17g, uninterrupted %.17g", i, b[i], a[i]);
  cr_assert(zl_json_num(full.json, "loss_scale_final") == zl_json_num(res.json, "loss_scale_final"),
            "loss_scale_final: resumed %g, uninterrupted %g", zl_json_num(res.json, "loss_scale_final"),
            zl_json_num(full.json, "loss_scale_final"));
  cr_assert_eq(full.n, res.n);
  zl_expect_floats("weights after 8 steps: resumed at step 4 vs uninterrupted", res.params, full.params,
                   full.n, 0);
#undef SCALER
  zl_out_free(&full);
  zl_out_free(&res);
}
