/* test_ch00.c — the ch00_memory binary: the ZeRO paper's Figure 1, the Mistral 7B example on
 * one GPU, the fp32 gradient-accumulation buffer (--fp32-grads), fp32 mode, --json and bad flags;
 * a transformer shape's activations (notes/gpt.md). Notes: notes/00-memory.md. Suite ch00_memory. */
#include "zl_test.h" // zl_run, zl_json_*, Criterion

/* The 4 GB numbers (params grads optim total) of the row starting with `stage` in the GB table. */
static int gb_row(const char *out, const char *stage, double v[4]) {
  const char *t = strstr(out, "in GB (1e9 bytes)");
  const char *p = t ? strstr(t, stage) : NULL;
  if (!p) return 0;
  return sscanf(p + strlen(stage), "%lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3]) == 4;
}

static void expect_gb(const char *out, const char *stage, double p, double g, double o, double t) {
  double v[4];
  cr_assert(gb_row(out, stage, v), "no GB row '%s' in:\n%s", stage, out);
  const double want[4] = {p, g, o, t};
  const char *col[4] = {"params", "grads", "optim", "total"};
  for (int i = 0; i < 4; i++)
    cr_expect(fabs(v[i] - want[i]) < 1e-9, "%s %s: printed %.3f GB, expected %.3f", stage, col[i], v[i],
              want[i]);
}

Test(ch00_memory, figure_1_of_the_zero_paper, .timeout = 30) {
  char *out = NULL;
  int rc =
      zl_run(0, 20, &out, ZL_BIN "/ch00_memory --params 7.5B --ranks 64 --json /tmp/zl_ch00_fig1_%d.json",
             (int)getpid());
  cr_assert_eq(rc, 0, "ch00_memory exited %d:\n%s", rc, out);
  /* 16Ψ = 120, 4Ψ+12Ψ/N = 31.40625, 2Ψ+14Ψ/N = 16.640625, 16Ψ/N = 1.875 (GB, one decimal) */
  expect_gb(out, "DDP (0)", 15.0, 15.0, 90.0, 120.0);
  expect_gb(out, "ZeRO-1", 15.0, 15.0, 1.4, 31.4);
  expect_gb(out, "ZeRO-2", 15.0, 0.234, 1.4, 16.6);
  expect_gb(out, "ZeRO-3", 0.234, 0.234, 1.4, 1.9);
  cr_expect(strstr(out, "4Ψ + 12Ψ/N") && strstr(out, "2Ψ + 14Ψ/N") && strstr(out, "16Ψ/N"),
            "formulas missing:\n%s", out);
  cr_expect(strstr(out, "64.0x"), "ZeRO-3 saving at N = 64 is 64x:\n%s", out);
  free(out);

  char path[128];
  snprintf(path, sizeof path, "/tmp/zl_ch00_fig1_%d.json", (int)getpid());
  char *js = zl_read_file(path, NULL);
  cr_assert(js, "no --json file %s", path);
  double totals[4];
  cr_assert_eq(zl_json_all(js, "total", totals, 4), 4, "json: expected 4 stages:\n%s", js);
  const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
  for (int s = 0; s < 4; s++)
    cr_expect(fabs(totals[s] - want[s]) < 1, "json stage %d total: got %.1f, expected %.1f", s, totals[s],
              want[s]);
  cr_expect_eq(zl_json_num(js, "world"), 64);
  free(js);
  unlink(path);
}

Test(ch00_memory, mistral_7b_half_precision, .timeout = 30) {
  char *out = NULL;
  /* the seed's 56 GB: Adam m and v in half precision, no master (K = 4), one GPU */
  int rc = zl_run(0, 20, &out, ZL_BIN "/ch00_memory --params 7B --ranks 1 --precision bf16 --k 4 --stage 0");
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_gb(out, "DDP (0)", 14.0, 14.0, 28.0, 56.0); /* weights + grads + optimizer states */
  cr_expect(!strstr(out, "ZeRO-1"), "--stage 0 printed other stages:\n%s", out);
  cr_expect(strstr(out, "N = 1 rank (one GPU"), "one GPU must read as N = 1:\n%s", out);
  free(out);
  /* the real mixed-precision Adam cost of the same model: 16Ψ = 112 GB */
  rc = zl_run(0, 20, &out, ZL_BIN "/ch00_memory --params 7B --ranks 1 --stage 0");
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_gb(out, "DDP (0)", 14.0, 14.0, 84.0, 112.0);
  free(out);
  /* without --ranks the header says that N is the default, not the user's */
  rc = zl_run(0, 20, &out, ZL_BIN "/ch00_memory --params 7B --stage 0");
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "N = 64 ranks (the default of --ranks)"), "default N not marked:\n%s", out);
  free(out);
}

Test(ch00_memory, fp32_grads_add_4psi_sharded_with_the_grads, .timeout = 30) {
  char *out = NULL;
  int rc = zl_run(0, 20, &out,
                  ZL_BIN "/ch00_memory --params 7.5B --ranks 64 --fp32-grads --json /tmp/zl_ch00_acc_%d.json",
                  (int)getpid());
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  /* grads = bf16 2Ψ + fp32 accumulation 4Ψ = 6Ψ, full at stages 0-1, /N at 2-3: 20Ψ at stage 0 */
  expect_gb(out, "DDP (0)", 15.0, 45.0, 90.0, 150.0);
  expect_gb(out, "ZeRO-1", 15.0, 45.0, 1.4, 61.4);
  expect_gb(out, "ZeRO-2", 15.0, 0.703, 1.4, 17.1);
  expect_gb(out, "ZeRO-3", 0.234, 0.703, 1.4, 2.3);
  cr_expect(strstr(out, "= 20Ψ") && strstr(out, "8Ψ + 12Ψ/N") && strstr(out, "2Ψ + 18Ψ/N") &&
                strstr(out, "20Ψ/N"),
            "formulas with the accumulation buffer missing:\n%s", out);
  free(out);
  char path[128];
  snprintf(path, sizeof path, "/tmp/zl_ch00_acc_%d.json", (int)getpid());
  char *js = zl_read_file(path, NULL);
  cr_assert(js, "no --json file %s", path);
  double totals[4];
  cr_assert_eq(zl_json_all(js, "total", totals, 4), 4, "json: expected 4 stages:\n%s", js);
  /* 20Ψ, 8Ψ+12Ψ/N, 2Ψ+18Ψ/N, 20Ψ/N */
  const double want[4] = {150e9, 61.40625e9, 17.109375e9, 2.34375e9};
  for (int s = 0; s < 4; s++)
    cr_expect(fabs(totals[s] - want[s]) < 1, "json stage %d total: got %.1f, expected %.1f", s, totals[s],
              want[s]);
  cr_expect_eq(zl_json_num(js, "grad_bytes"), 6, "grad_bytes with --fp32-grads");
  free(js);
  unlink(path);
}

Test(ch00_memory, fp32_mode_and_model_shape, .timeout = 30) {
  char *out = NULL;
  /* fp32: params 4Ψ, grads 4Ψ, K = 8 (Adam m, v; no master); Ψ from the MLP shape */
  int rc = zl_run(0, 20, &out,
                  ZL_BIN "/ch00_memory --model 784,1024,10,4 --ranks 4 --precision fp32 --stage 3 "
                         "--json /tmp/zl_ch00_fp32_%d.json",
                  (int)getpid());
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  free(out);
  char path[128];
  snprintf(path, sizeof path, "/tmp/zl_ch00_fp32_%d.json", (int)getpid());
  char *js = zl_read_file(path, NULL);
  cr_assert(js, "no --json file %s", path);
  double psi = 785.0 * 1024 + 3 * 1025.0 * 1024 + 1025.0 * 10; /* (D+1)H + (L-1)(H+1)H + (H+1)C = 3962890 */
  cr_expect_eq(zl_json_num(js, "params"), psi, "Ψ of --model: got %.0f, expected %.0f",
               zl_json_num(js, "params"), psi);
  cr_expect_eq(zl_json_num(js, "k"), 8, "fp32 default K");
  const char *st = zl_json_find(js, "stages");
  cr_expect_eq(zl_json_num(st, "total"), 16 * psi / 4, "fp32 ZeRO-3 total: got %.1f, expected 16Ψ/N",
               zl_json_num(st, "total"));
  cr_expect_eq(zl_json_num(st, "params"), 4 * psi / 4, "fp32 ZeRO-3 params shard");
  free(js);
  unlink(path);
}

/* A transformer shape adds activations (notes/gpt.md). By hand, L 2, h 64, a 4, s 128, b 2, V 256:
 *   Korthikanti per layer  s·b·h·(34 + 5·a·s/h) = 16384 · (34 + 40) = 1212416 bytes, × 2 = 2424832
 *   full recompute         2·s·b·h·L + one layer = 65536 + 1212416 = 1277952
 *   our fp32 GPT           4b·[sh + L(16sh + 4s + as²) + (sh + 2s) + sV]
 *                          = 8·(8192 + 2·(131072 + 512 + 65536) + 8448 + 32768) = 3549184
 *            --recompute   4b·[sh(L+1) + sV + (15sh + 4s + as²)] = 8·(24576 + 32768 + 188928) = 1970176
 *   Ψ (no --params)        2Vh + sh + L(12h² + 13h) + 2h = 32768 + 8192 + 99968 + 128 = 141056
 * and the activations are added to every stage's model states unchanged. */
Test(ch00_memory, transformer_activations_by_hand, .timeout = 30) {
  char *out = NULL, path[128];
  snprintf(path, sizeof path, "/tmp/zl_ch00_acts_%d.json", (int)getpid());
  int rc = zl_run(0, 20, &out,
                  ZL_BIN "/ch00_memory --layers 2 --hidden 64 --heads 4 --seq 128 --micro-batch 2 --ranks 4 "
                         "--json %s",
                  path);
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "= 16384 × 74 = 1212416 bytes"), "per-layer count missing:\n%s", out);
  cr_expect(strstr(out, "all 2 layers: 2424832 bytes; full recompute: 2·s·b·h·L + one layer = 1277952 "
                        "bytes"),
            "totals missing:\n%s", out);
  cr_expect(strstr(out, "common/model/gpt.h): 3549184 bytes; --recompute 1970176 bytes"),
            "our fp32 count missing:\n%s", out);
  free(out);
  char *js = zl_read_file(path, NULL);
  cr_assert(js, "no --json file %s", path);
  cr_expect_eq(zl_json_num(js, "params"), 141056, "Ψ from the shape");
  const char *t = zl_json_find(js, "transformer");
  cr_assert(t, "no transformer object in:\n%s", js);
  cr_expect_eq(zl_json_num(t, "acts"), 2424832);
  cr_expect_eq(zl_json_num(t, "acts_recompute"), 1277952);
  cr_expect_eq(zl_json_num(t, "ours_fp32_acts"), 3549184);
  cr_expect_eq(zl_json_num(t, "ours_fp32_acts_recompute"), 1970176);
  double states[4], with[4];
  cr_assert_eq(zl_json_all(js, "total", states, 4), 4, "4 stages");
  cr_assert_eq(zl_json_all(js, "total_with_acts", with, 4), 4, "4 stages with activations");
  for (int st = 0; st < 4; st++)
    cr_expect_eq(with[st], states[st] + 2424832, "stage %d: states %.0f + acts, got %.0f", st, states[st],
                 with[st]);
  free(js);
  unlink(path);
  rc = zl_run(0, 20, &out,
              "env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK " ZL_BIN
              "/ch00_memory --layers 2 --hidden 64");
  cr_expect_eq(rc, 2, "a partial shape must exit 2");
  cr_expect_str_eq(out, "error: --heads: a transformer shape needs --layers, --hidden, --heads and --seq\n");
  free(out);
}

/* --tp t: the same shape per rank of t = 2 tensor-parallel ranks (Korthikanti et al. §4.2), by hand:
 *   TP per layer       s·b·h·(10 + 24/t + 5·a·s/(h·t)) = 16384 · (10 + 12 + 20) = 688128, × 2 =
 * 1376256
 *   TP + SP per layer  s·b·h·(34 + 5·a·s/h)/t = 16384 · 74 / 2 = 606208, × 2 = 1212416
 *   TP + SP recompute  2·s·b·h·L/t + one layer = 32768 + 606208 = 638976
 *   our fp32 GPT, SP   everything at 1/t: 3549184 / 2 = 1774592, --recompute 1970176 / 2 = 985088
 * and t must divide the heads, the width, the sequence and the vocabulary (exit 2 otherwise). */
Test(ch00_memory, tensor_and_sequence_parallel_activations, .timeout = 30) {
  char *out = NULL, path[128];
  snprintf(path, sizeof path, "/tmp/zl_ch00_sp_%d.json", (int)getpid());
  int rc = zl_run(0, 20, &out,
                  ZL_BIN "/ch00_memory --layers 2 --hidden 64 --heads 4 --seq 128 --micro-batch 2 --ranks 4 "
                         "--tp 2 --json %s",
                  path);
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  free(out);
  char *js = zl_read_file(path, NULL);
  cr_assert(js, "no --json file %s", path);
  const char *t = zl_json_find(js, "tp");
  cr_assert(t, "no tp object in:\n%s", js);
  cr_expect_eq(zl_json_num(t, "t"), 2);
  cr_expect_eq(zl_json_num(t, "acts_tp"), 1376256, "TP: %.0f", zl_json_num(t, "acts_tp"));
  cr_expect_eq(zl_json_num(t, "acts_tp_sp"), 1212416, "TP+SP: %.0f", zl_json_num(t, "acts_tp_sp"));
  cr_expect_eq(zl_json_num(t, "acts_tp_sp_recompute"), 638976);
  cr_expect_eq(zl_json_num(t, "ours_fp32_acts_tp_sp"), 1774592);
  cr_expect_eq(zl_json_num(t, "ours_fp32_acts_tp_sp_recompute"), 985088);
  free(js);
  unlink(path);
  rc = zl_run(0, 20, &out, "env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK " ZL_BIN
               "/ch00_memory --layers 2 --hidden 64 --heads 4 --seq 128 --tp 3");
  cr_expect_eq(rc, 2, "--tp 3 on 4 heads must exit 2");
  cr_expect_str_eq(out, "error: --tp 3: must divide --heads 4, --hidden 64, --seq 128 and --vocab 256\n");
  free(out);
}

Test(ch00_memory, bad_flags_exit_2_with_one_line, .timeout = 30) {
  const char *cases[][2] = {
      {"--ranks 0", "error: --ranks 0: must be an integer in [1, 1048576]\n"},
      {"--params 7X",
       "error: --params 7X: must be a count in [1, 1000000000000000], e.g. 7.5e9, 7B, 124M, 350K\n"},
      {"--stage 4", "error: --stage 4: must be one of 0|1|2|3|all\n"},
      {"--precision fp16", "error: --precision fp16: must be one of bf16|fp32\n"},
      {"--k -0.5", "error: --k -0.5: must be -1 (by precision) or a number in [0, 1024]\n"},
      {"--model 1,2,3",
       "error: --model 1,2,3: must be D,H,C,L: input, hidden width, classes, hidden layers, e.g. "
       "784,1024,10,4\n"},
      {"--params 1M --model 3,5,2,2", "error: --model 3,5,2,2: give either --params or --model, not both\n"},
      {"--precision fp32 --fp32-grads",
       "error: --fp32-grads: only with --precision bf16 (fp32 gradients already accumulate in fp32)\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    int rc =
        zl_run(0, 20, &out, "env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK " ZL_BIN "/ch00_memory %s",
               cases[i][0]);
    cr_expect_eq(rc, 2, "'%s': exit %d, expected 2", cases[i][0], rc);
    cr_expect_str_eq(out, cases[i][1], "'%s': output '%s'", cases[i][0], out);
    free(out);
  }
}
