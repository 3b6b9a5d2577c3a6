/* test_memcalc.c — the two ways chapter 00's calculator gets a stage's model states give the same
 * bytes: the strategies' formula hooks (ch00_memory, chapters/00_memory/main.c) and
 * memcalc_stage_states (formula.h alone: what the explorer page, common/explorer/, compiles to
 * WebAssembly). Bitwise: the same doubles from the same formula. Suite ch00_memory.
 * Notes: notes/00-memory.md, notes/tour.md ("The explorer page"). */
#include "zl_test.h" // Criterion, zl helpers
#include "memcalc.h" // memcalc_main, memcalc_stage_states, MEMCALC_OFFLOAD
#include "pipeline_sched.h" // pp_split
#include "stage_states.h" // strategy_stage_states: ch00_memory's hook
#include <stdio.h>   // open_memstream
#include <stdlib.h>  // free
#include <string.h>  // strcmp

Test(ch00_memory, page_states_equal_the_strategies_hooks) {
  const double psis[] = {1, 1000, 124439808, 7.5e9, 1e15};
  const int worlds[] = {1, 3, 7, 64, 1 << 20};
  const dtype_t dts[] = {DT_BF16, DT_F32};
  /* 0-3: DDP, ZeRO-1/2/3; 4: ZeRO-Offload; 0x100 + 0-3: the same under a pipeline (no_sync) */
  const int codes[] = {0,
                       1,
                       2,
                       3,
                       MEMCALC_OFFLOAD,
                       MEMCALC_NO_SYNC,
                       MEMCALC_NO_SYNC | 1,
                       MEMCALC_NO_SYNC | 2,
                       MEMCALC_NO_SYNC | 3};
  for (int c = 0; c < 9; c++)
    for (int i = 0; i < 5; i++)
      for (int j = 0; j < 5; j++)
        for (int d = 0; d < 2; d++) {
          int s = codes[c];
          mem_formula_t got = memcalc_stage_states(s, psis[i], worlds[j], dts[d]);
          mem_formula_t want = strategy_stage_states(s, psis[i], worlds[j], dts[d]);
          const double g[4] = {got.params, got.grads, got.optim, got.total};
          const double w[4] = {want.params, want.grads, want.optim, want.total};
          const char *names[4] = {"params", "grads", "optim", "total"};
          for (int k = 0; k < 4; k++)
            cr_expect_eq(g[k], w[k],
                         "stage code %#x psi %.17g N %d %s, %s: memcalc_stage_states %.17g, the hook %.17g",
                         s, psis[i], worlds[j], dtype_name(dts[d]), names[k], g[k], w[k]);
        }
}

/* memcalc_main's text for one flag line with the given states. */
static char *run_text(const char *line, memcalc_states_fn states, int *rc) {
  char buf[512], *argv[32];
  int argc = 0;
  snprintf(buf, sizeof buf, "ch00_memory %s", line);
  for (char *tok = strtok(buf, " "); tok && argc < 31; tok = strtok(NULL, " ")) argv[argc++] = tok;
  argv[argc] = NULL;
  char *text = NULL;
  size_t n = 0;
  FILE *out = open_memstream(&text, &n);
  *rc = memcalc_main(argc, argv, states, pp_split, out);
  fclose(out);
  return text;
}

Test(ch00_memory, page_text_equals_the_programs) {
  const char *lines[] = {
      "--params 7.5B --ranks 64",
      "--model 784,1024,10,4 --ranks 4 --precision fp32",
      "--layers 12 --hidden 768 --heads 12 --seq 1024 --ranks 7 --tp 4 --vocab 50304",
      "--params 1.3B --ranks 3 --stage 2",
      "--layers 12 --hidden 768 --heads 12 --seq 1024 --ranks 8 --pp 4 --micro-batch 2",
      "--layers 4 --hidden 64 --heads 4 --seq 256 --ranks 4 --cp 4 --precision fp32 --offload",
      "--params 7.5B --ranks 64 --offload --stage 2"};
  for (int i = 0; i < 7; i++) {
    int rc_page, rc_prog;
    char *page = run_text(lines[i], memcalc_stage_states, &rc_page);
    char *prog = run_text(lines[i], strategy_stage_states, &rc_prog);
    cr_expect_eq(rc_page, 0, "%s: exit %d", lines[i], rc_page);
    cr_expect_eq(rc_prog, 0, "%s: exit %d", lines[i], rc_prog);
    cr_expect(strcmp(page, prog) == 0, "%s: the page's text differs from the program's:\n%s\n---\n%s",
              lines[i], page, prog);
    free(page);
    free(prog);
  }
}

/* Issue 56: a shape whose counts overflow 64 bits printed wrapped numbers, exit 0 (8.6e17 parameters
 * accepted past the 1e15 of --params; --recompute showing more activation bytes than without; the
 * experts' count 2.25e16 for ~3.8e22). Over the flags' whole range: refused (exit 2), or every number
 * positive, Ψ within the one cap, and recompute never above the run without it. */
Test(ch00_memory, extreme_shapes_refused_or_exact) {
  const int layers[] = {1, 96, 65536}, hiddens[] = {64, 12288, 1 << 20}, seqs[] = {16, 2048, 1 << 24};
  const long long micros[] = {1, 1 << 20};
  const int experts[] = {0, 8, 65536, 65536};
  const char *const moe_extra[] = {"", "", "", " --expert-ffn 16777216 --shared-experts 1024"}; /* widest */
  char json[300], line[500];
  zl_tmppath(json, sizeof json, "memcalc_extreme", "m.json");
  int refused = 0, shown = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 3; c++)
        for (int d = 0; d < 2; d++)
          for (int e = 0; e < 4; e++) {
            snprintf(line, sizeof line,
                     "--layers %d --hidden %d --heads 16 --seq %d --micro-batch %lld%s%d%s --json %s",
                     layers[a], hiddens[b], seqs[c], micros[d], experts[e] ? " --experts " : " --ranks ",
                     experts[e] ? experts[e] : 64, moe_extra[e], json);
            remove(json);
            int rc;
            char *text = run_text(line, strategy_stage_states, &rc);
            free(text);
            cr_assert(rc == 0 || rc == 2, "%s: exit %d, expected 0 or 2 (refused)", line, rc);
            if (rc == 2) {
              refused++;
              continue;
            }
            shown++;
            char *j = zl_read_file(json, NULL);
            cr_assert(j, "%s: exit 0 but no --json written", line);
            double psi = zl_json_num(j, "params"), acts = zl_json_num(j, "ours_fp32_acts");
            double rc_acts = zl_json_num(j, "ours_fp32_acts_recompute");
            cr_expect(psi >= 1 && psi <= 1e15, "%s: psi %.17g outside [1, 1e15]", line, psi);
            cr_expect(acts > 0 && rc_acts > 0 && rc_acts <= acts,
                      "%s: activations %.17g, with --recompute %.17g: wrapped (must be positive, recompute "
                      "no more)",
                      line, acts, rc_acts);
            if (experts[e]) {
              double total = zl_json_num(j, "params_total"), active = zl_json_num(j, "params_active");
              cr_expect(total == psi && active > 0 && active <= total,
                        "%s: experts' psi total %.17g (the table's %.17g), active %.17g", line, total, psi,
                        active);
            }
            free(j);
          }
  cr_expect(refused > 0 && shown > 0, "the sweep should both refuse (%d) and show (%d) some shapes", refused,
            shown);
}

/* Selective recomputation (Korthikanti et al. 2022, §5 and Table 2), what FlashAttention stores too: each
 * layer keeps 34·s·b·h bytes, the 5·a·s²·b of attention's scores recomputed: the full count
 * less exactly that term; with t-way TP + SP a t-th of it. L 2, h 64, a 4, s 128, b 2:
 * 34·128·2·64·2 = 1114112, and 2424832 (test_ch00.c's count by hand) less 5·4·128²·2·2. */
Test(ch00_memory, selective_recompute_equals_korthikanti) {
  char json[300];
  zl_tmppath(json, sizeof json, "memcalc_selective", "m.json");
  char line[400];
  snprintf(line, sizeof line,
           "--layers 2 --hidden 64 --heads 4 --seq 128 --micro-batch 2 --ranks 4 --tp 2 --json %s", json);
  int rc;
  free(run_text(line, strategy_stage_states, &rc));
  cr_assert_eq(rc, 0, "%s: exit %d", line, rc);
  char *j = zl_read_file(json, NULL);
  cr_assert(j, "no --json %s", json);
  const char *t = zl_json_find(j, "transformer"), *tp = zl_json_find(j, "tp");
  cr_assert(t && tp, "no transformer or tp object:\n%s", j);
  double s = 128, b = 2, h = 64, a = 4, L = 2;
  cr_expect_eq(zl_json_num(t, "acts_selective"), 34 * s * b * h * L, "34·s·b·h·L");
  cr_expect_eq(zl_json_num(t, "acts") - zl_json_num(t, "acts_selective"), 5 * a * s * s * b * L,
               "the full count less the selective one: 5·a·s²·b·L");
  cr_expect_eq(zl_json_num(tp, "acts_tp_sp_selective"), 34 * s * b * h * L / 2,
               "TP + SP: 34·s·b·h·L/t");
  free(j);
  remove(json);
}

/* A real model's block (memcalc_shape.c): Llama-3's Ψ from its config.json (num_hidden_layers,
 * hidden_size, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size 128256, SwiGLU,
 * RoPE, RMSNorm, no biases, untied) is the published count to the parameter — Hugging Face's
 * safetensors total for meta-llama/Llama-3.1-8B 8030261248, -70B 70553706496, -405B 405853388800 — and
 * GPT-2 small's with --tied-head 124439808 (its config: n_layer 12, n_embd 768, n_head 12, n_ctx 1024,
 * vocab 50257). The activations: Korthikanti's list for the block, s·b·h·(10 + 4 + 4K/H + 6F/h) a
 * layer: 36 for the 8B (K/H 1/4, F/h 3.5), its 5·a·s²·b on top. */
Test(ch00_memory, llama3_params_from_config) {
  const struct {
    const char *flags;
    double psi;
  } models[] = {
      {"--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336", 8030261248.0},
      {"--layers 80 --hidden 8192 --heads 64 --kv-heads 8 --ffn 28672", 70553706496.0},
      {"--layers 126 --hidden 16384 --heads 128 --kv-heads 8 --ffn 53248", 405853388800.0},
      {"--layers 12 --hidden 768 --heads 12 --seq 1024 --vocab 50257 --tied-head", 124439808.0}};
  char json[300], line[600];
  zl_tmppath(json, sizeof json, "memcalc_llama", "m.json");
  for (int i = 0; i < 4; i++) {
    snprintf(line, sizeof line, "%s%s --ranks 8 --json %s", models[i].flags,
             i < 3 ? " --mlp swiglu --pos rope --no-bias --vocab 128256 --seq 8192" : "", json);
    int rc;
    free(run_text(line, strategy_stage_states, &rc));
    cr_assert_eq(rc, 0, "%s: exit %d", line, rc);
    char *j = zl_read_file(json, NULL);
    cr_assert(j, "no --json %s", json);
    cr_expect_eq(zl_json_num(j, "params"), models[i].psi, "%s: psi %.17g, published %.17g", line,
                 zl_json_num(j, "params"), models[i].psi);
    if (i == 0) {
      double s = 8192, h = 4096, a = 32, L = 32;
      cr_expect_eq(zl_json_num(j, "acts_selective"), 36 * s * h * L, "Llama-3 8B: 36·s·b·h·L");
      cr_expect_eq(zl_json_num(j, "acts_per_layer"), s * h * (36 + 5 * a * s / h),
                   "s·b·h·(36 + 5·a·s/h)");
    }
    free(j);
  }
  remove(json);
}

/* The block's flags at this GPT's own values (K = H, F = 4h, gelu, learned) change nothing: the same
 * printout to the byte as without them. */
Test(ch00_memory, gpt_block_flags_change_nothing) {
  const char *base = "--layers 12 --hidden 768 --heads 12 --seq 1024 --ranks 7 --tp 4 --vocab 50304";
  char line[400];
  snprintf(line, sizeof line, "%s --kv-heads 12 --ffn 3072 --mlp gelu --pos learned", base);
  int rc0, rc1;
  char *a = run_text(base, strategy_stage_states, &rc0), *b = run_text(line, strategy_stage_states, &rc1);
  cr_expect(rc0 == 0 && rc1 == 0 && strcmp(a, b) == 0,
            "%s: differs from without the block's flags:\n%s\n---\n%s", line, b, a);
  free(a);
  free(b);
}
