/* test_ch00_grid.c — ch00_memory --pp, --cp and --offload against what the training programs of
 * chapters 07, 10 and 08 measure for the same small shape (the tiny GPT: C32 NH2 S16 V256, fp32,
 * AdamW), as ch12_moe_long's ep_with_every_strategy holds --experts to chapter 12's ledger:
 *   --pp       every stage's model states = ch07_pipeline's ledger on each rank of that stage (P 2,
 *              D 1 and P 2 x D 2 --zero 3: the pipeline's ZeRO-3 keeps the full grads through the
 *              step), and its activations in flight = ch07's acts_inflight_peak_sS (the loop's slot
 *              pool; and with --recompute);
 *   --cp       the fp32 GPT's activations per rank = ch10_long's measured acts_saved_bytes (the
 *              ledger's saved activations) and its cp_acts_formula_bytes (with and without
 *              --recompute), the states = the ledger's;
 *   --offload  the device's states = ch08_offload's ledger, the host's = its formula hook, and host
 *              + the staging ch00 names = the ledger's host states (fp32 and bf16);
 * every number equal (bytes are integers in doubles: exact). And the refusals: exit 2, one line.
 * Suite ch00_memory (each run a second or less); the sweep over more grids is ch00_memory_long.
 * Notes: notes/00-memory.md. */
#include "zl_test.h" // zl_run, zl_launch, zl_json_*, zl_rank_mem, Criterion

#define C00_SHAPE "--hidden 32 --heads 2 --seq 16 --precision fp32"
#define TRAIN_TINY "--model gpt --gpt tiny --steps 1"

/* ch00_memory's --json for `args` (exit 0 asserted), read into a malloc'd string. */
static char *ch00_json(const char *tag, const char *name, const char *args) {
  char path[320];
  zl_tmppath(path, sizeof path, tag, name);
  zl_run_ok(0, 30, "ch00_memory", "%s/ch00_memory %s --json %s", ZL_BIN, args, path);
  char *js = zl_read_file(path, NULL);
  cr_assert(js, "no --json from ch00_memory %s", args);
  return js;
}

/* Pipeline stage s's object in ch00's pp.per_stage (the (s+1)-th "pp_stage"). */
static const char *pp_stage_of(const char *js, int s) {
  const char *p = zl_json_find(js, "per_stage");
  cr_assert(p, "no pp.per_stage in:\n%s", js);
  for (int k = 0; k <= s; k++) {
    p = zl_json_find(p, "pp_stage");
    cr_assert(p, "no pp stage %d in:\n%s", s, js);
  }
  return p;
}

static void expect_pp(const char *what, const zl_out_t *r, const char *c0, int P, int D, int z,
                      int recompute) {
  char key[64];
  for (int s = 0; s < P; s++) {
    const char *st = pp_stage_of(c0, s);
    snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
    double got = zl_json_num(r->json, key), want = zl_json_num(st, recompute ? "acts_recompute" : "acts");
    cr_expect(got == want && got > 0,
              "%s: stage %d activations in flight %.17g B in ch07's --json, ch00_memory --pp %d "
              "says %.17g B",
              what, s, got, P, want);
    snprintf(key, sizeof key, "states_z%d", z);
    double states = zl_json_num(st, key);
    for (int d = 0; d < D; d++) { /* the ranks of stage s: s, s + P, ... (pipeline d's stage s) */
      int rank = d * P + s;
      double led = zl_rank_mem(r->json, rank, "model_states");
      cr_expect(led == states && led > 0,
                "%s: rank %d (stage %d) model states %.17g B in the ledger, ch00_memory --pp %d "
                "--stage %d says %.17g B",
                what, rank, s, led, P, z, states);
    }
  }
}

Test(ch00_memory, pp_equals_ch07_ledger, .timeout = 120) {
  /* P 2, D 1 (DDP of one replica), b = 8 / 4 micro-batches = 2 sequences; the tiny GPT with L = 4 */
  zl_out_t a = zl_launch(2, 60, "c00pp", "p2",
                         "%s/ch07_pipeline " TRAIN_TINY " --n-layer 4 --pp 2 --micro-batches 4 "
                         "--batch 8",
                         ZL_BIN);
  char *c0 =
      ch00_json("c00pp", "c0_p2.json", "--layers 4 " C00_SHAPE " --micro-batch 2 --ranks 2 --pp 2 --stage 0");
  expect_pp("ch07 --pp 2 on 2 ranks", &a, c0, 2, 1, 0, 0);
  free(c0);
  zl_out_free(&a);
  /* P 2 x D 2 --zero 3 --recompute, b = 16 / (2 replicas x 4 micro-batches) = 2 */
  zl_out_t b = zl_launch(4, 60, "c00pp", "p2d2",
                         "%s/ch07_pipeline " TRAIN_TINY " --n-layer 4 --pp 2 --zero 3 "
                         "--micro-batches 4 --batch 16 --recompute",
                         ZL_BIN);
  c0 = ch00_json("c00pp", "c0_p2d2.json",
                 "--layers 4 " C00_SHAPE " --micro-batch 2 --ranks 4 --pp 2 --stage 3");
  expect_pp("ch07 --pp 2 --zero 3 --recompute on 4 ranks", &b, c0, 2, 2, 3, 1);
  free(c0);
  zl_out_free(&b);
}

Test(ch00_memory, cp_equals_ch10_measured, .timeout = 120) {
  for (int rc = 0; rc < 2; rc++) {
    /* C 2, D 1: --batch 2 gives each rank b' = 1 sequence, the CP group's 2 sequences of S/C = 8 positions
     * each */
    zl_out_t r =
        zl_launch(2, 60, "c00cp", rc ? "cp2rc" : "cp2", "%s/ch10_long " TRAIN_TINY " --cp 2 --batch 2%s",
                  ZL_BIN, rc ? " --recompute" : "");
    char *c0 = ch00_json("c00cp", rc ? "c0_rc.json" : "c0.json",
                         "--layers 2 " C00_SHAPE " --micro-batch 2 --ranks 2 --cp 2 --stage 0");
    const char *cp = zl_json_find(c0, "cp"); /* the "cp" object: after "transformer", whose keys it repeats */
    cr_assert(cp, "no cp object in ch00's --json:\n%s", c0);
    double want = zl_json_num(cp, rc ? "ours_fp32_acts_recompute" : "ours_fp32_acts");
    double meas = zl_json_num(r.json, "acts_saved_bytes"),
           form = zl_json_num(r.json, "cp_acts_formula_bytes");
    cr_expect(meas == want && want > 0,
              "--cp 2%s: ch10 measured %.17g B of saved activations per rank, ch00_memory --cp 2 "
              "says %.17g B",
              rc ? " --recompute" : "", meas, want);
    cr_expect(form == want, "--cp 2%s: ch10's cp_acts_formula_bytes %.17g B, ch00_memory --cp 2 %.17g B",
              rc ? " --recompute" : "", form, want);
    double states = zl_json_num(zl_json_find(c0, "stages"), "total");
    for (int q = 0; q < 2; q++)
      cr_expect(zl_rank_mem(r.json, q, "model_states") == states,
                "--cp 2: rank %d model states %.17g B in the ledger, "
                "ch00_memory %.17g B",
                q, zl_rank_mem(r.json, q, "model_states"), states);
    free(c0);
    zl_out_free(&r);
  }
}

Test(ch00_memory, offload_equals_ch08_ledger, .timeout = 120) {
  const char *prec[2] = {"fp32", "bf16"};
  for (int p = 0; p < 2; p++) {
    char name[16], args[256];
    snprintf(name, sizeof name, "off_%s", prec[p]);
    zl_out_t r = zl_launch(2, 60, "c00off", name,
                           "%s/ch08_offload " TRAIN_TINY " --offload optimizer --batch 4 "
                           "--precision %s",
                           ZL_BIN, prec[p]);
    snprintf(name, sizeof name, "c0_%s.json", prec[p]);
    snprintf(args, sizeof args,
             "--layers 2 --hidden 32 --heads 2 --seq 16 --ranks 2 --precision %s --offload --stage 2",
             prec[p]);
    char *c0 = ch00_json("c00off", name, args);
    const char *o = zl_json_find(c0, "offload");
    cr_assert(o, "no offload object in ch00's --json:\n%s", c0);
    double dev = zl_json_num(o, "device"), host = zl_json_num(o, "host"),
           stag = zl_json_num(o, "host_staging");
    double fhost = zl_json_num(zl_json_find(r.json, "formula"), "host");
    cr_expect(fhost == host && host > 0,
              "%s: ch08's formula hook keeps %.17g B on the host, ch00_memory --offload %.17g B", prec[p],
              fhost, host);
    for (int q = 0; q < 2; q++) {
      double led = zl_rank_mem(r.json, q, "model_states");
      cr_expect(led == dev,
                "%s: rank %d device model states %.17g B in the ledger, ch00_memory --offload %.17g B",
                prec[p], q, led, dev);
      const char *h = zl_json_find(zl_json_find(r.json, "per_rank"), "rank");
      for (int k = 0; k < q; k++) h = zl_json_find(h, "rank");
      h = zl_json_find(h, "host");
      double hs = zl_json_num(h, "params") + zl_json_num(h, "grads") + zl_json_num(h, "master") +
          zl_json_num(h, "optim");
      cr_expect(hs == host + stag,
                "%s: rank %d host states %.17g B in the ledger, ch00_memory --offload host %.17g + "
                "staging %.17g B",
                prec[p], q, hs, host, stag);
    }
    free(c0);
    zl_out_free(&r);
  }
}

Test(ch00_memory, grid_flags_refused_with_one_line, .timeout = 30) {
  const char *tf = "--layers 4 --hidden 64 --heads 4 --seq 128";
  const char *cases[][2] = {
      {"--params 7B --pp 2", "error: --pp 2: needs a transformer shape (--layers --hidden --heads --seq)\n"},
      {"--params 7B --cp 2", "error: --cp 2: needs a transformer shape (--layers --hidden --heads --seq)\n"},
      {"%s --ranks 6 --pp 4", "error: --pp 4: must divide --ranks 6 (D = N/P replicas of each stage)\n"},
      {"%s --ranks 8 --pp 8",
       "error: --pp 8: must be at most the GPT's L + 2 = 6 units (embedding, blocks, head)\n"},
      {"%s --ranks 8 --pp 2 --cp 2", "error: --pp 2: with --cp: not computed here (give one of them)\n"},
      {"%s --ranks 8 --pp 2 --tp 2",
       "error: --pp 2: with --tp: not computed here (ch07_pipeline's 3-D grid; give one of them)\n"},
      {"%s --ranks 8 --pp 2 --offload",
       "error: --offload: with --pp: not computed here (give one of them)\n"},
      {"%s --ranks 6 --cp 4", "error: --cp 4: must divide --ranks 6 and --seq 128\n"},
      {"%s --ranks 8 --cp 2 --tp 2", "error: --cp 2: with --tp: not computed here (give one of them)\n"},
      {"--params 7B --offload --stage 3",
       "error: --offload: is ZeRO-2's (chapter 08): with --stage 2 or all, not --stage 3\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char line[256], *out = NULL;
    snprintf(line, sizeof line, cases[i][0], tf);
    int rc = zl_run(0, 20, &out,
                    "env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u PMIX_RANK " ZL_BIN "/ch00_memory %s", line);
    cr_expect_eq(rc, 2, "'%s': exit %d, expected 2", line, rc);
    cr_expect_str_eq(out, cases[i][1], "'%s': output '%s'", line, out);
    free(out);
  }
}

/* make test-long: the same contracts over more grids. --pp: P 2..4, D 1..2, --zero 0..3, fp32 and
 * bf16, with and without --recompute (the tiny GPT with L 3..6, b = 2, M = 4); --cp: C 2 and 4, D 1
 * and 2, --zero 0..3, fp32 and bf16, with and without --recompute. Every byte equal. */
Test(ch00_memory_long, pp_and_cp_over_grids, .timeout = 600) {
  const struct { int P, D, z, rc, L; const char *prec; } pp[] = {
      {2, 1, 0, 0, 4, "fp32"}, {3, 1, 0, 1, 4, "bf16"}, {4, 1, 0, 0, 6, "fp32"}, {2, 2, 1, 0, 4, "bf16"},
      {2, 2, 2, 1, 4, "fp32"}, {2, 2, 3, 0, 4, "bf16"}, {3, 2, 2, 0, 3, "bf16"}};
  for (size_t i = 0; i < sizeof pp / sizeof pp[0]; i++) {
    char name[32], what[160], args[256];
    snprintf(name, sizeof name, "pp%zu", i);
    zl_out_t r =
        zl_launch(pp[i].P * pp[i].D, 120, "c00long", name,
                  "%s/ch07_pipeline " TRAIN_TINY " --n-layer %d --pp %d "
                  "--zero %d --micro-batches 4 --batch %d --precision %s%s",
                  ZL_BIN, pp[i].L, pp[i].P, pp[i].z, 8 * pp[i].D, pp[i].prec, pp[i].rc ? " --recompute" : "");
    snprintf(args, sizeof args,
             "--layers %d --hidden 32 --heads 2 --seq 16 --precision %s --micro-batch 2 --ranks %d --pp %d "
             "--stage %d",
             pp[i].L, pp[i].prec, pp[i].P * pp[i].D, pp[i].P, pp[i].z);
    snprintf(name, sizeof name, "c0_pp%zu.json", i);
    char *c0 = ch00_json("c00long", name, args);
    snprintf(what, sizeof what, "ch07 --pp %d x D %d --zero %d %s%s (L %d)", pp[i].P, pp[i].D, pp[i].z,
             pp[i].prec, pp[i].rc ? " --recompute" : "", pp[i].L);
    expect_pp(what, &r, c0, pp[i].P, pp[i].D, pp[i].z, pp[i].rc);
    free(c0);
    zl_out_free(&r);
  }
  const struct { int C, D, z, rc; const char *prec;
  } cp[] = {{2, 1, 0, 0, "fp32"},
            {4, 1, 0, 1, "fp32"},
            {2, 2, 3, 0, "fp32"},
            {2, 2, 1, 1, "bf16"},
            {4, 1, 2, 0, "bf16"}};
  for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++) {
    char name[32], args[256];
    int N = cp[i].C * cp[i].D;
    snprintf(name, sizeof name, "cp%zu", i);
    zl_out_t r = zl_launch(N, 120, "c00long", name,
                           "%s/ch10_long " TRAIN_TINY " --cp %d --batch %d --zero %d --precision %s%s",
                           ZL_BIN, cp[i].C, N, cp[i].z, cp[i].prec, cp[i].rc ? " --recompute" : "");
    snprintf(args, sizeof args,
             "--layers 2 --hidden 32 --heads 2 --seq 16 --precision %s --micro-batch %d --ranks %d --cp %d "
             "--stage %d",
             cp[i].prec, cp[i].C, N, cp[i].C, cp[i].z);
    snprintf(name, sizeof name, "c0_cp%zu.json", i);
    char *c0 = ch00_json("c00long", name, args);
    double want =
        zl_json_num(zl_json_find(c0, "cp"), cp[i].rc ? "ours_fp32_acts_recompute" : "ours_fp32_acts");
    double meas = zl_json_num(r.json, "acts_saved_bytes"),
           states = zl_json_num(zl_json_find(c0, "stages"), "total");
    cr_expect(meas == want && want > 0,
              "ch10 --cp %d x D %d --zero %d %s%s: %.17g B of saved activations measured, "
              "ch00_memory --cp says %.17g B",
              cp[i].C, cp[i].D, cp[i].z, cp[i].prec, cp[i].rc ? " --recompute" : "", meas, want);
    for (int q = 0; q < N; q++)
      cr_expect(zl_rank_mem(r.json, q, "model_states") == states,
                "ch10 --cp %d x D %d --zero %d %s: rank %d model states "
                "%.17g B in the ledger, ch00_memory %.17g B",
                cp[i].C, cp[i].D, cp[i].z, cp[i].prec, q, zl_rank_mem(r.json, q, "model_states"), states);
    free(c0);
    zl_out_free(&r);
  }
}
