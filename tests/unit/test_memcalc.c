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
