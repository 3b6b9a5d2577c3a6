/* test_compress.c — chapter 13's contracts on ch13_compress, one mpirun launch per run
 * (notes/13-compression.md):
 *   1. PowerSGD's bytes: every rank's counters = the formula Σ_buckets 2(N−1)/N·(rows + cols)·R·4 per
 *      step, computed here from the buckets of chapter 02 (0.02 MiB: 4810, 4160, 2112 elements), and
 *      the report's formula says the same;
 *   2. at full rank (R clipped to each bucket's rows) the run follows the uncompressed one: losses
 *      within 1e-5 relative, params within 1e-5 · max|w| after 20 SGD steps (each step's update off by
 *      at most 2^-17 of the gradient, test_powersgd.c; measured here: 1.4e-8 and 7e-8); at rank 2 it
 *      still learns (the loss falls) but its weights differ (the test cannot pass by not compressing);
 *   3. 1-bit Adam: its warm-up is ch02's AdamW bit for bit (params and losses); after it, every
 *      rank's counters = the formula (K all-reduce steps, then Σ_buckets 2(N−1)(1 + c/32)·4 bytes a
 *      step, c = ceil(n/32N)·32), and it learns as AdamW does without being AdamW;
 *   4. qwZ (ch05_zero3 --qwz): bytes = formula, the loss near ZeRO-3's;
 *   5. bad flags: one line naming the flag and what is allowed, exit 2, before MPI.
 * Model: 32 -> 64 -> 64 -> 64 -> 10 (Ψ = 11082), global batch 60, SGD with momentum (PowerSGD), AdamW
 * (1-bit Adam). */
#include "zl_test.h"  // zl_run, zl_read_file, zl_json_*, zl_read_floats
#include "onebit.h"   // onebit_chunk: the formula's chunks
#include "qwz.h"      // qwz_words: the formula's words
#include "powersgd.h" // psgd_shape: the formula's matrices

#define BIN ZL_BIN "/ch13_compress"
#define PSI 11082
#define SHAPE                                                                                                \
  "--layers 3 --hidden 64 --input 32 --classes 10 --batch 60 --seed 7 --quiet --log-every 0 "                \
  ""
#define SGD "--optimizer sgd --lr 0.05 --momentum 0.9 "
#define ADAM "--lr 0.01 "

typedef struct crun {
  char *json, *out;
  float *params;
  int64_t nparams;
  double loss[30];
} crun_t;

static crun_t crun_in(const char *bin, int np, const char *name, int steps, const char *args) {
  char dir[256], jpath[512], ppath[512];
  zl_tmpdir(dir, sizeof dir, "compress");
  snprintf(jpath, sizeof jpath, "%s/%s.json", dir, name);
  snprintf(ppath, sizeof ppath, "%s/%s.bin", dir, name);
  crun_t r = {0};
  int rc = zl_run(np, 90, &r.out, "%s " SHAPE " --steps %d %s --json %s --save-params %s", bin, steps, args,
                  jpath, ppath);
  cr_assert_eq(rc, 0, "%s (np %d): exit %d, expected 0; output:\n%s", name, np, rc, r.out);
  r.json = zl_read_file(jpath, NULL);
  cr_assert(r.json, "%s: no --json file %s", name, jpath);
  r.params = zl_read_floats(ppath, &r.nparams);
  cr_assert_eq(r.nparams, PSI, "%s: %lld params saved, expected %d", name, (long long)r.nparams, PSI);
  int n = zl_json_all(zl_json_find(r.json, "steps"), "loss", r.loss, steps);
  cr_assert_eq(n, steps, "%s: %d step losses in the json, expected %d", name, n, steps);
  return r;
}

static crun_t crun(int np, const char *name, int steps, const char *args) {
  char with[512];
  snprintf(with, sizeof with, "--bucket-mb 0.02 %s", args);
  return crun_in(BIN, np, name, steps, with);
}

static void crun_free(crun_t *r) { free(r->json), free(r->out), free(r->params); }

/* Bytes per rank per step for the buckets of 0.02 MiB at rank R, N ranks. */
static double psgd_bytes(int R, int N) {
  const int64_t buckets[] = {4810, 4160, 2112}; /* units 3+2, 1, 0 (test_ddp.c's 0.02 MiB) */
  double floats = 0;
  for (int k = 0; k < 3; k++) {
    psgd_shape_t s = psgd_shape(buckets[k], R);
    floats += (double)(s.rows + s.cols) * s.rank;
  }
  return 2.0 * (N - 1) / N * floats * 4;
}

Test(ch13_compress, powersgd_bytes_equal_formula, .timeout = 90) {
  for (int np = 2; np <= 3; np++) {
    char name[32];
    snprintf(name, sizeof name, "bytes_np%d", np);
    crun_t r = crun(np, name, 3, SGD "--compress powersgd:2");
    const char *comm = zl_json_find(r.json, "comm");
    double want = psgd_bytes(2, np), mean = zl_json_num(comm, "bytes_per_step_per_rank"),
           formula = zl_json_num(comm, "formula_bytes_per_step_per_rank");
    cr_expect(fabs(mean - want) <= 1e-9 * want, "np %d rank 2: measured %.3f bytes/step/rank, formula %.3f",
              np, mean, want);
    cr_expect(fabs(formula - want) <= 1e-9 * want, "np %d: the report's formula %.3f, expected %.3f", np,
              formula, want);
    double total = 0; /* per rank: the ring's uneven chunks; over the ranks: exactly */
    for (int k = 0; k < np; k++) {
      char key[64];
      snprintf(key, sizeof key, "{\"rank\": %d, \"sent_bytes\"", k);
      const char *p = strstr(comm, key);
      cr_assert(p, "np %d: comm.per_rank has no rank %d", np, k);
      total += zl_json_num(p, "sent_bytes");
    }
    cr_expect(fabs(total - 3 * np * want) <= 1e-6,
              "np %d: the ranks sent %.0f bytes in 3 steps, formula %.1f", np, total, 3 * np * want);
    cr_expect(want < 2.0 * (np - 1) / np * PSI * 4 / 10, "rank 2 sends %.0f bytes, not 10x fewer than %.0f",
              want, 2.0 * (np - 1) / np * PSI * 4);
    crun_free(&r);
  }
}

/* 1-bit Adam's bytes per rank per step, run mean over K all-reduce steps and S − K sign steps. */
static double onebit_bytes(int K, int S, int N) {
  const int64_t buckets[] = {4810, 4160, 2112};
  double full = 0, signs = 0;
  for (int k = 0; k < 3; k++) {
    full += 2.0 * (N - 1) / N * buckets[k] * 4;
    signs += 2.0 * (N - 1) * (1 + onebit_chunk(buckets[k], N) / 32) * 4;
  }
  return (K * full + (S - K) * signs) / S;
}

Test(ch13_compress, onebit_bytes_equal_formula, .timeout = 90) {
  for (int np = 2; np <= 3; np++) {
    char name[32];
    snprintf(name, sizeof name, "onebit_np%d", np);
    crun_t r = crun(np, name, 4, ADAM "--optimizer onebit-adam --warmup-steps 1");
    const char *comm = zl_json_find(r.json, "comm");
    double want = onebit_bytes(1, 4, np), mean = zl_json_num(comm, "bytes_per_step_per_rank"),
           formula = zl_json_num(comm, "formula_bytes_per_step_per_rank"),
           a2a = zl_json_num(zl_json_find(comm, "by_op"), "all_to_all");
    cr_expect(fabs(mean - want) <= 1e-9 * want, "np %d: measured %.3f bytes/step/rank, formula %.3f", np,
              mean, want);
    cr_expect(fabs(formula - want) <= 1e-9 * want, "np %d: the report's formula %.3f, expected %.3f", np,
              formula, want);
    double signs = onebit_bytes(0, 1, np); /* one sign step: the all-to-all is half of it */
    cr_expect(fabs(a2a * 4 / 3 - signs / 2) <= 1e-9 * signs, "np %d: all-to-all %.3f bytes/step over 3 of 4 "
              "steps, expected %.3f", np, a2a, signs / 2 * 3 / 4);
    cr_expect(signs < 2.0 * (np - 1) / np * PSI * 4 / 25, "np %d: a sign step sends %.0f bytes, not 25x "
              "fewer "
              "than the all-reduce's %.0f", np, signs, 2.0 * (np - 1) / np * PSI * 4);
    crun_free(&r);
  }
}

Test(ch13_compress, onebit_warmup_is_adamw_bitwise, .timeout = 90) {
  crun_t ref = crun(2, "adamw", 30, ADAM "--variant bucketed");
  crun_t warm = crun(2, "warm", 30, ADAM "--optimizer onebit-adam --warmup-steps 30");
  cr_expect(strstr(warm.json, "\"strategy\": \"ddp-onebit-adam\""), "not the 1-bit strategy");
  cr_expect(memcmp(warm.params, ref.params, PSI * sizeof(float)) == 0,
            "30 warm-up steps: params differ from ch02's AdamW");
  for (int s = 0; s < 30; s++)
    cr_expect(warm.loss[s] == ref.loss[s], "step %d: loss %.9g, AdamW %.9g", s, warm.loss[s], ref.loss[s]);
  crun_t ob = crun(2, "onebit", 30, ADAM "--optimizer onebit-adam --warmup-steps 5");
  for (int s = 0; s < 5; s++)
    cr_expect(ob.loss[s] == ref.loss[s], "warm-up step %d: loss %.9g, AdamW %.9g", s, ob.loss[s],
              ref.loss[s]);
  cr_expect(ob.loss[29] < ob.loss[5] - 0.1, "after the warm-up: loss %g -> %g, not learning", ob.loss[5],
            ob.loss[29]);
  cr_expect(ob.loss[29] < ref.loss[29] * 1.05, "1-bit Adam's loss %g, AdamW's %g: more than 5%% behind",
            ob.loss[29], ref.loss[29]);
  cr_expect(memcmp(ob.params, ref.params, PSI * sizeof(float)) != 0, "25 sign steps gave AdamW's bits");
  crun_free(&ob), crun_free(&warm), crun_free(&ref);
}

/* qwZ on ch05's ZeRO-3: bytes = ZeRO-3's reduce-scatter + two gathers of ceil(p/4) + ceil(p/B) words
 * per piece p (units 2112, 4160, 4160, 650 over N: pieces padded to N | numel); the loss follows the
 * uncompressed run's (5e-3 relative over 20 steps; measured 2e-3), the params do not (quantised). */
Test(ch13_compress, qwz_bytes_equal_formula, .timeout = 90) {
  const int64_t units[] = {2112, 4160, 4160, 650};
  crun_t ref = crun_in(ZL_BIN "/ch05_zero3", 2, "zero3", 20, ADAM);
  for (int np = 2; np <= 3; np++) {
    char name[32];
    snprintf(name, sizeof name, "qwz_np%d", np);
    crun_t r = crun_in(ZL_BIN "/ch05_zero3", np, name, 20, ADAM "--qwz --quant-block 32");
    double want = 0;
    for (int u = 0; u < 4; u++) {
      int64_t piece = (units[u] + np - 1) / np;
      want += (double)(np - 1) * piece * 4 + 2.0 * (np - 1) * qwz_words(piece, 32) * 4;
    }
    const char *comm = zl_json_find(r.json, "comm");
    double mean = zl_json_num(comm, "bytes_per_step_per_rank"),
           formula = zl_json_num(comm, "formula_bytes_per_step_per_rank");
    cr_expect(fabs(mean - want) <= 1e-9 * want, "np %d: measured %.3f bytes/step/rank, formula %.3f", np,
              mean, want);
    cr_expect(fabs(formula - want) <= 1e-9 * want, "np %d: the report's formula %.3f, expected %.3f", np,
              formula, want);
    if (np == 2) {
      for (int s = 0; s < 20; s++)
        cr_expect(zl_rel(r.loss[s], ref.loss[s]) <= 5e-3, "step %d: loss %.9g, ZeRO-3's %.9g", s, r.loss[s],
                  ref.loss[s]);
      cr_expect(memcmp(r.params, ref.params, PSI * sizeof(float)) != 0, "qwZ gave ZeRO-3's bits");
    }
    crun_free(&r);
  }
  crun_free(&ref);
}

static void expect_close(const char *what, const crun_t *got, const crun_t *want, double tol, int steps) {
  for (int s = 0; s < steps; s++)
    cr_expect(zl_rel(got->loss[s], want->loss[s]) <= tol,
              "%s: loss of step %d: %.9g, uncompressed %.9g (tol %g)", what, s, got->loss[s], want->loss[s],
              tol);
  double scale = 0, worst = 0;
  for (int i = 0; i < PSI; i++) {
    scale = fmax(scale, fabs(want->params[i]));
    worst = fmax(worst, fabs((double)got->params[i] - want->params[i]));
  }
  cr_expect(worst <= tol * scale, "%s: params off by %.3g > %g x max|w| %.4g", what, worst, tol, scale);
}

Test(ch13_compress, powersgd_full_rank_follows_the_all_reduce, .timeout = 90) {
  crun_t ref = crun(2, "plain", 20, SGD "--variant bucketed");
  cr_expect(strstr(ref.json, "\"strategy\": \"ddp-bucketed\""),
            "without --compress: not ch02's bucketed DDP");
  crun_t full = crun(2, "full", 20, SGD "--compress powersgd:65536");
  expect_close("rank = rows", &full, &ref, 1e-5, 20);
  crun_t r2 = crun(2, "rank2", 20, SGD "--compress powersgd:2");
  cr_expect(r2.loss[19] < r2.loss[0] - 0.05, "rank 2: loss %g -> %g: not learning", r2.loss[0], r2.loss[19]);
  double worst = 0;
  for (int i = 0; i < PSI; i++)
    worst = fmax(worst, fabs((double)r2.params[i] - ref.params[i]));
  cr_expect(worst > 1e-3, "rank 2: params within %.3g of the uncompressed run: is it compressing?", worst);
  crun_free(&r2), crun_free(&full), crun_free(&ref);
}

Test(ch13_compress, bad_flags_exit_2, .timeout = 90) {
  struct {
    const char *args, *line;
  } c[] = {
      {"--compress powersgd:0",
       "error: --compress powersgd:0: must be powersgd:R with the rank R an integer in 1..65536"},
      {"--compress powersgd:-3", "error: --compress powersgd:-3: must be powersgd:R"},
      {"--compress powersgd", "error: --compress powersgd: must be powersgd:R"},
      {"--compress topk:3", "error: --compress topk:3: must be powersgd:R"},
      {"--compress powersgd:4 --variant naive", "error: --compress powersgd:4: needs --variant bucketed"},
      {"--compress powersgd:4 --precision bf16", "error: --compress powersgd:4: needs --precision fp32"},
      {"--compress powersgd:4 --optimizer muon",
       "error: --compress powersgd:4: takes --optimizer adamw or sgd"},
      {"--optimizer onebit-adam", "error: --optimizer onebit-adam: needs --warmup-steps K >= 1"},
      {"--optimizer onebit-adam --warmup-steps 0", "error: --warmup-steps 0: must be an integer in [1, "},
      {"--warmup-steps 3", "error: --warmup-steps 3: needs --optimizer onebit-adam"},
      {"--optimizer onebit-adam --warmup-steps 2 --precision bf16",
       "error: --optimizer onebit-adam: needs --precision fp32"},
      {"--optimizer onebit-adam --warmup-steps 2 --compress powersgd:2",
       "error: --optimizer onebit-adam: with --compress"},
      {"--optimizer onebit-adam --warmup-steps 2 --clip 1",
       "error: --optimizer onebit-adam: takes no --clip"},
      {"@ch05 --optimizer onebit-adam", "error: --optimizer onebit-adam: is chapter 13's"},
      {"@ch05 --quant-block 64", "error: --quant-block 64: needs --qwz"},
      {"@ch05 --qwz --shard-group node", "error: --qwz: needs --shard-group all"},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    char *out = NULL;
    int ch05 = strncmp(c[i].args, "@ch05 ", 6) == 0; /* ZeRO-3's program */
    /* refused before MPI: run without the launcher */
    int rc = zl_run(0, 30, &out, "%s %s", ch05 ? ZL_BIN "/ch05_zero3" : BIN, c[i].args + (ch05 ? 6 : 0));
    cr_expect_eq(rc, 2, "%s: exit %d, expected 2; output:\n%s", c[i].args, rc, out);
    cr_expect(strstr(out, c[i].line), "%s: expected the line \"%s\"; output:\n%s", c[i].args, c[i].line, out);
    int lines = 0;
    for (const char *p = out; *p; p++)
      lines += *p == '\n';
    cr_expect(lines == 1, "%s: %d lines of output, expected one:\n%s", c[i].args, lines, out);
    free(out);
  }
}
