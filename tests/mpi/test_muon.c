/* test_muon.c — --optimizer muon: DDP, ZeRO-1 and ZeRO-2 with whole-matrix owners (ch03_zero1 and
 * ch04_zero2 --shard owner) against 1 rank with --accum 2, bit for bit at N = 2; the ranks' parameters
 * identical after every step; ZeRO-2's gradient bytes per rank = its formula; the refusals; the
 * exercise's tempting wrong body (Newton–Schulz on slices) named. Notes: notes/03-zero1.md, "Muon:
 * whole matrices, not slices".
 *
 * Why bitwise (notes/design.md, "Bits or a tolerance"): each rank's micro-batch is the 1-rank run's
 * micro-batch (same GEMM shapes), a sum of two gradients is a + b in either order, and the matrix
 * then goes through the same op_muon calls on its owner as on the one rank. */
#include "zl_test.h" // zl_run, zl_launch, zl_tmppath, zl_read_floats, zl_rank_mem, zl_json_*, Criterion
#include <math.h>    // fmax
#include <string.h>  // memcmp, strstr

#define GPT "--model gpt --gpt tiny --batch 4 --steps 3 --seed 7 --lr 0.003 --optimizer muon --quiet"
#define MLP_ARGS "--input 6 --hidden 13 --classes 11 --layers 2 --batch 8 --steps 3 --seed 7 --optimizer muon"
#define MLP MLP_ARGS " --quiet"

/* Run prog on np ranks with args + --save-params; returns the floats (*n of them), asserts exit 0. */
static float *run_params(int np, const char *prog, const char *args, const char *name, int64_t *n,
                         char **text) {
  char dir[256], bin[320];
  zl_tmpdir(dir, sizeof dir, "muon");
  snprintf(bin, sizeof bin, "%s/%s.bin", dir, name);
  char *out = NULL;
  int rc = zl_run(np, 120, &out, "%s %s --save-params %s", prog, args, bin);
  cr_assert_eq(rc, 0, "%s (np %d) exited %d:\n%s", name, np, rc, out);
  if (text) *text = out;
  else free(out);
  return zl_read_floats(bin, n);
}

static void expect_same(const float *a, int64_t na, const float *b, int64_t nb, const char *what) {
  cr_assert_eq(na, nb, "%s: %lld vs %lld params", what, (long long)na, (long long)nb);
  for (int64_t i = 0; i < na; i++)
    cr_assert(memcmp(&a[i], &b[i], 4) == 0, "%s: param %lld: %.9g vs %.9g (1 rank --accum 2)", what,
              (long long)i, a[i], b[i]);
}

static void owners_vs_one_rank(const char *prog, const char *model, int with_ddp) {
  setenv("ZL_CHECK_RANKS", "1", 1);
  setenv("ZL_MPIRUN_FLAGS", "-x ZL_CHECK_RANKS", 1);
  char a1[512], a2[512], *text = NULL;
  snprintf(a1, sizeof a1, "--variant naive %s --accum 2", model);
  snprintf(a2, sizeof a2, "--shard owner %s", model);
  int64_t n1, n2, n3;
  float *one = run_params(1, ZL_BIN "/ch02_ddp", a1, "one", &n1, NULL);
  float *own = run_params(2, prog, a2, "owners", &n2, &text);
  expect_same(own, n2, one, n1, strstr(prog, "ch04") ? "ZeRO-2 owners, 2 ranks" : "ZeRO-1 owners, 2 ranks");
  cr_assert(strstr(text, "check: parameters identical on every rank after each of 3 steps"),
            "the rank check did not run:\n%s", text);
  if (with_ddp) {
    snprintf(a1, sizeof a1, "--variant naive %s", model);
    float *ddp = run_params(2, ZL_BIN "/ch02_ddp", a1, "ddp", &n3, NULL);
    expect_same(ddp, n3, one, n1, "DDP, 2 ranks");
    free(ddp);
  }
  free(one), free(own), free(text);
}

Test(ch03_muon, owners_equal_one_rank_gpt, .timeout = 100) {
  owners_vs_one_rank(ZL_BIN "/ch03_zero1", GPT, 1);
}
Test(ch03_muon, owners_equal_one_rank_mlp, .timeout = 100) {
  owners_vs_one_rank(ZL_BIN "/ch03_zero1", MLP, 1);
}
Test(ch04_muon, owners_equal_one_rank_gpt, .timeout = 100) {
  owners_vs_one_rank(ZL_BIN "/ch04_zero2", GPT, 0);
}
Test(ch04_muon, owners_equal_one_rank_mlp, .timeout = 100) {
  owners_vs_one_rank(ZL_BIN "/ch04_zero2", MLP, 0);
}

/* ZeRO-2's owners keep the gradients of their own matrices and their pieces of each unit's rest. The
 * MLP: matrices 13x13 (169, rank 0: the larger first) and 13x6 (78, rank 1); the rest per unit 13, 13,
 * 11x13 + 11 = 154 biases and head, each padded to N = 2 and halved: 7 + 7 + 77 = 91 per rank. So the
 * grads are 4(169 + 91) = 1040 bytes on rank 0 and 4(78 + 91) = 676 on rank 1 — ZeRO-1's owners keep
 * 4Ψ = 1708 on both. The ledger says so, and so does each rank's formula (model states = formula). */
Test(ch04_muon, owners_grads_per_rank_equal_formula, .timeout = 60) {
  zl_out_t r = zl_launch(2, 60, "muon", "owners2_ledger", ZL_BIN "/ch04_zero2 --shard owner %s", MLP_ARGS);
  const double want[2] = {4.0 * (169 + 91), 4.0 * (78 + 91)};
  for (int rk = 0; rk < 2; rk++) {
    cr_expect_eq(zl_rank_mem(r.json, rk, "grads"), want[rk], "rank %d: grads %.0f bytes, expected %.0f", rk,
                 zl_rank_mem(r.json, rk, "grads"), want[rk]);
    cr_expect_eq(zl_rank_mem(r.json, rk, "model_states"), zl_rank_mem(r.json, rk, "formula_model_states"),
                 "rank %d: model states %.0f, formula %.0f", rk, zl_rank_mem(r.json, rk, "model_states"),
                 zl_rank_mem(r.json, rk, "formula_model_states"));
  }
  zl_out_free(&r);
}

/* what does not hold whole matrices is refused before MPI: exit 2, one line saying why */
Test(ch03_muon, refusals, .timeout = 60) {
  static const struct { const char *cmd, *says; } cases[] = {
      {ZL_BIN "/ch03_zero1 " MLP, "Newton-Schulz needs each matrix whole: ch03_zero1 --shard owner"},
      {ZL_BIN "/ch04_zero2 " MLP, "Newton-Schulz needs each matrix whole: ch04_zero2 --shard owner"},
      {ZL_BIN "/ch05_zero3 " MLP, "whole-matrix owners are built for ZeRO-1 and ZeRO-2"},
      {ZL_BIN "/ch06_tp --tp 2 " MLP, "with --tp > 1 each rank holds a slice of every matrix"},
      {ZL_BIN "/ch02_ddp " MLP " --ckpt /tmp/zl_muon_ck", "checkpoints do not carry Muon's states"},
      {ZL_BIN "/ch03_zero1 --shard owner --precision bf16 " MLP, "fp32 only here"},
      {ZL_BIN "/ch04_zero2 --shard owner --precision bf16 " MLP, "fp32 only here"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    int rc = zl_run(2, 60, &out, "%s", cases[i].cmd);
    cr_expect_eq(rc, 2, "%s: exit %d, expected 2:\n%s", cases[i].cmd, rc, out);
    cr_expect(strstr(out, cases[i].says), "%s: no '%s' in:\n%s", cases[i].cmd, cases[i].says, out);
    free(out);
  }
}

/* the exercise's tempting wrong body, Newton–Schulz on each rank's slice, is caught and named */
Test(ch03_muon, slice_body_is_named, .timeout = 60) {
  setenv("ZL_CHECK_RANKS", "1", 1);
  setenv("ZL_MPIRUN_FLAGS", "-x ZL_CHECK_RANKS", 1);
  char *out = NULL;
  int rc = zl_run(2, 60, &out, ZL_TESTBIN "/scn_muon_slice %s", MLP);
  cr_assert_neq(rc, 0, "Newton-Schulz on slices ran to the end:\n%s", out);
  cr_assert(strstr(out, "rank 1's parameters differ from rank 0's after step 1"), "not named:\n%s", out);
  free(out);
}

/* ch00_memory --optimizer muon = the ledger of real runs, per stage, to the byte: GPT tiny at N = 2
 * (each unit's rest is even, so the ledger holds no pad), the largest owner's rank. The MLP's greedy
 * loads (169 and 78) are the imbalance ch00 prints. */
Test(ch00_muon, states_per_stage_equal_the_ledger, .timeout = 90) {
  char path[320], *out = NULL;
  zl_tmppath(path, sizeof path, "muon", "ch00_muon.json");
  int rc = zl_run(0, 20, &out,
                  ZL_BIN "/ch00_memory --optimizer muon --precision fp32 --layers 2 --hidden 32 --heads 2 "
                         "--seq 16 --ranks 2 --json %s", path);
  cr_assert_eq(rc, 0, "ch00_memory exited %d:\n%s", rc, out);
  free(out);
  char *calc = zl_read_file(path, NULL);
  cr_assert(calc, "no %s", path);
  static const char *progs[3] = {ZL_BIN "/ch02_ddp --variant naive", ZL_BIN "/ch03_zero1 --shard owner",
                                 ZL_BIN "/ch04_zero2 --shard owner"};
  const char *st = zl_json_find(calc, "stages");
  for (int s = 0; s < 3; s++) {
    st = zl_json_find(st, "stage");
    zl_out_t r = zl_launch(2, 60, "muon", "ch00_ledger", "%s %s", progs[s],
                           "--model gpt --gpt tiny --batch 4 --steps 2 --seed 7 --optimizer muon");
    for (int k = 0; k < 3; k++) {
      static const char *key[3] = {"params", "grads", "optim"};
      double led = fmax(zl_rank_mem(r.json, 0, key[k]), zl_rank_mem(r.json, 1, key[k]));
      cr_expect_eq(zl_json_num(st, key[k]), led, "stage %d %s: ch00_memory %.0f, the ledger %.0f (%s)", s,
                   key[k], zl_json_num(st, key[k]), led, progs[s]);
    }
    zl_out_free(&r);
  }
  free(calc);
  rc = zl_run(0, 20, &out,
              ZL_BIN "/ch00_memory --optimizer muon --precision fp32 --model 6,13,11,2 --ranks 2");
  cr_assert_eq(rc, 0, "ch00_memory exited %d:\n%s", rc, out);
  cr_expect(strstr(out, "the largest owner holds 169 matrix params, the smallest 78"), "imbalance:\n%s", out);
  free(out);
}
