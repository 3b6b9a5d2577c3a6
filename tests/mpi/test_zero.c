/* test_zero.c — ZeRO-1, -2, -3 against DDP (contract 2 of notes/design.md), the memory ledger
 * against the formula plus padding (contract 6), the traffic counters against the formula,
 * the pad invariant (checked by tests/mpi/scn_zero_checks.c), ZeRO-3's gather window, the
 * --prefetch auto choice, and the memory budget refusal.
 * Notes: notes/03-zero1.md, notes/04-zero2.md, notes/05-zero3.md.
 *
 * Bits or a tolerance (notes/design.md, "Bits or a tolerance"): ZeRO at N ranks and its DDP reference run the
 * same GEMMs on the same per-rank shapes in the same order; only the gradient reduction differs, and
 * at N = 2 (and 1) each of its sums is a + b either way — bitwise on any CPU. At N >= 3 a
 * reduce-scatter and an all-reduce add three or more terms in other orders: a tolerance.
 *
 * One launch gives loss, parameters, ledger and traffic, so each scenario checks them all.
 * The DDP references (build/bin/ch02_ddp --variant naive, same N and flags) are run once per run of
 * the suite and shared by the three chapters (zl_cache_stem: $ZL_TEST_CACHE, removed after the run,
 * keyed by the flags, the binary, the BLAS kernel and its threads).
 *
 * Model: input 6, hidden 13, classes 11, 2 hidden layers: units of 91, 182 and 154 elements,
 * Ψ = 427 — none of them a multiple of 3, 4 or 5, so N = 3, 4, 5 pad every unit.
 *
 * Exercise mode (ZL_EXERCISE_TIMEOUT_S set by `make exercise`, as for chapters 01 and 02): every
 * launch of a ZeRO program gets that collective deadline (--timeout-s) and a kill after a few of
 * them, so a hanging exercise body is named in seconds ("did not complete within S s" or "timed
 * out"); each test stops at its first failing launch (cr_assert), smallest world first.
 * What the tests need from the exercise bodies beyond the numbers (each failure message says so,
 * and the exercise's HINT): ZeRO-3's gathers go through gather_issue (it measures the gathered
 * window) and gather_release frees the buffer; the traffic is one reduce-scatter and one
 * all-gather per unit; clipping goes through trainer_finish_grads. Tags and tensor names are free. */
#include "zl_test.h" // zl_run, zl_out_t, zl_rank_mem, zl_json_*, zl_read_floats, zl_expect_floats
#include "formula.h" // formula_model_states, formula_comm_bytes
#include <sys/stat.h> // stat

#define MODEL "--input 6 --hidden 13 --classes 11 --layers 2 --batch 120 --seed 7"
#define PSI 427
static const int64_t g_units[3] = {91, 182, 154};

/* Exercise mode: the collective deadline of every launch (0: the program's default). */
static int ex_deadline(void) {
  const char *e = getenv("ZL_EXERCISE_TIMEOUT_S");
  return e && atoi(e) > 0 ? atoi(e) : 0;
}
/* The kill for one launch: `normal` seconds, or a few deadlines in exercise mode. */
static int run_limit(int normal) { return ex_deadline() ? 3 * ex_deadline() + 10 : normal; }
/* " --timeout-s S" in exercise mode, else "" (for a command line). */
static const char *ex_flag(void) {
  static char f[32];
  f[0] = 0;
  if (ex_deadline()) snprintf(f, sizeof f, " --timeout-s %d", ex_deadline());
  return f;
}
/* A launch killed by its time limit (exit 124) says what that usually means. */
static void expect_no_hang(int rc, const char *what, int np, int secs, const char *out) {
  cr_assert_neq(
      rc, 124,
      "%s (N %d): timed out after %d s — a deadlock? every rank must issue the same collectives "
      "(one reduce-scatter per unit, one all-gather per unit) in the same order, and wait for each; "
      "output:\n%s",
      what, np, secs, out);
}

static const char *stage_bin(int stage) {
  return stage == 1 ? ZL_BIN "/ch03_zero1" : stage == 2 ? ZL_BIN "/ch04_zero2" : ZL_BIN "/ch05_zero3";
}

/* Launch ZeRO stage `stage` on np ranks with args (+ --json/--save-params into /tmp); asserts
 * success. The program is tests/mpi/scn_zero_checks.c: the chapter's strategy with the pad check
 * and the smallest gradient norm (testing aids kept out of solutions/) around it. */
static zl_out_t launch(int np, int stage, const char *args, const char *name) {
  char dir[256], json[320], bin_path[320];
  zl_tmpdir(dir, sizeof dir, "zero");
  snprintf(json, sizeof json, "%s/%s.json", dir, name);
  snprintf(bin_path, sizeof bin_path, "%s/%s.bin", dir, name);
  zl_out_t r = {0};
  int rc = zl_run(np, run_limit(240), &r.text,
                  ZL_TESTBIN "/scn_zero_checks %d %s --json %s --save-params %s --quiet%s", stage, args, json,
                  bin_path, ex_flag());
  expect_no_hang(rc, name, np, run_limit(240), r.text);
  cr_assert_eq(rc, 0, "%s (N %d, ZeRO-%d %s) exited %d:\n%s", name, np, stage, args, rc, r.text);
  r.json = zl_read_file(json, NULL);
  cr_assert(r.json, "%s: no --json written", name);
  r.params = zl_read_floats(bin_path, &r.n);
  cr_assert_eq(r.n, PSI, "%s: --save-params holds %lld floats, expected Ψ = %d (unpadded)", name,
               (long long)r.n, PSI);
  return r;
}

/* The DDP reference for the same N and flags: computed once per run of the suite and shared by
 * the three chapters' tests through zl_cache_stem (never across runs: a reference made under
 * another BLAS kernel, thread count or binary is another reference). */
static zl_out_t ddp_reference(int np, const char *args) {
  char key[600], stem[400], json[420], bin[420];
  snprintf(key, sizeof key, "%d|%s", np, args);
  zl_out_t r = {0};
  if (!zl_cache_stem(stem, sizeof stem, "zero_ddp_ref", key, ZL_BIN "/ch02_ddp")) {
    char dir[256];
    zl_tmpdir(dir, sizeof dir, "ddp_ref");
    snprintf(stem, sizeof stem, "%s/ref", dir);
  }
  snprintf(json, sizeof json, "%s.json", stem);
  snprintf(bin, sizeof bin, "%s.bin", stem);
  r.json = zl_read_file(json, NULL);
  if (!r.json) {
    char tj[440], tb[440];
    snprintf(tj, sizeof tj, "%s.%d", json, (int)getpid());
    snprintf(tb, sizeof tb, "%s.%d", bin, (int)getpid());
    int rc = zl_run(np, 240, &r.text,
                    ZL_BIN "/ch02_ddp --variant naive %s --json %s --save-params %s --quiet", args, tj, tb);
    cr_assert_eq(rc, 0, "DDP reference (N %d, %s) exited %d:\n%s", np, args, rc, r.text);
    cr_assert(rename(tb, bin) == 0 && rename(tj, json) == 0, "cannot store the DDP reference %s", json);
    r.json = zl_read_file(json, NULL);
  }
  r.params = zl_read_floats(bin, &r.n);
  return r;
}

static int64_t padded_numel(int N) {
  int64_t s = 0;
  for (int u = 0; u < 3; u++) s += (g_units[u] + N - 1) / N * N;
  return s;
}

/* Contract 6: every rank's params, grads, master, optim bytes equal the formula evaluated at the
 * padded parameter count (Σ units rounded up to multiples of N): formula + padding, to the byte. */
static void check_ledger(const zl_out_t *r, int stage, int N, int bf16, int opt_states, const char *what) {
  mem_formula_t f =
      formula_model_states(stage, (double)padded_numel(N), N, bf16 ? DT_BF16 : DT_F32, opt_states);
  mem_formula_t f0 = formula_model_states(stage, (double)PSI, N, bf16 ? DT_BF16 : DT_F32, opt_states);
  const char *keys[4] = {"params", "grads", "master", "optim"};
  double exp[4] = {f.params, f.grads, f.master, f.optim};
  for (int rk = 0; rk < N; rk++) {
    for (int k = 0; k < 4; k++) {
      double got = zl_rank_mem(r->json, rk, keys[k]);
      cr_assert(got == exp[k],
                "%s: rank %d ledger %s: got %.0f bytes, expected %.0f (formula at padded Ψ = "
                "%lld)", what, rk,
                keys[k], got, exp[k], (long long)padded_numel(N));
    }
    double ms = zl_rank_mem(r->json, rk, "model_states"),
           fms = zl_rank_mem(r->json, rk, "formula_model_states");
    cr_assert(ms == f.total, "%s: rank %d model_states %.0f, expected %.0f", what, rk, ms, f.total);
    cr_assert(fabs(fms - f0.total) <= 0.5,
              "%s: rank %d formula_model_states %.1f, expected the formula at Ψ %.1f", what, rk, fms,
              f0.total);
  }
}

/* Traffic with the ring collectives: the per-step bytes per rank equal the formula evaluated at
 * the padded sizes (for a unit of padded = N·piece elements a reduce-scatter or an all-gather
 * sends exactly (N−1)·piece elements per rank). With --accum K, ZeRO-2 and -3 reduce-scatter every
 * micro-batch (K times) and ZeRO-3 gathers twice per micro-batch (2K): the exact expected value
 * counts the calls, (N−1)·Σpiece·b each; the report's formula counts them too, at the unpadded Ψ. */
static void check_traffic(const zl_out_t *r, int stage, int N, int bf16, int accum, const char *what) {
  const char *c = zl_json_find(r->json, "comm");
  cr_assert(c, "%s: --json has no comm", what);
  double got = zl_json_num(c, "bytes_per_step_per_rank");
  double b = bf16 ? 2 : 4, per_call = (double)(N - 1) * (double)(padded_numel(N) / N) * b;
  int rs_calls = stage == 1 ? 1 : accum, ag_calls = stage == 3 ? 2 * accum : 1;
  double exp = (rs_calls + ag_calls) * per_call;
  if (accum == 1) {
    double f = formula_comm_bytes(stage, (double)padded_numel(N), N, bf16 ? DT_BF16 : DT_F32);
    cr_assert(f == exp, "%s: formula at padded Ψ %.0f != %d x (N-1) x piece bytes %.0f", what, f,
              rs_calls + ag_calls, exp);
  }
  cr_assert(got == exp,
            "%s: bytes per step per rank: got %.0f, expected %.0f (%d reduce-scatters + %d all-gathers of "
            "(N-1) x %lld elements x %.0f B, padded Ψ %lld)",
            what, got, exp, rs_calls, ag_calls, (long long)(padded_numel(N) / N), b,
            (long long)padded_numel(N));
  double fj = zl_json_num(c, "formula_bytes_per_step_per_rank");
  /* the report's formula counts the micro-batches too: ZeRO-2 (K+1)(N−1)/N·Ψ, ZeRO-3 3K(N−1)/N·Ψ */
  double kf = stage == 2 ? (accum + 1) / 2.0 : stage == 3 ? (double)accum : 1;
  double f0 = kf * formula_comm_bytes(stage, (double)PSI, N, bf16 ? DT_BF16 : DT_F32);
  cr_assert(fabs(fj - f0) <= 1e-6 * f0 + 1, "%s: formula_bytes_per_step_per_rank %.1f, expected %.1f", what,
            fj, f0);
}

/* got vs expected: bitwise when tol == 0; else |got − exp| <= tol·max(|exp|, 1% of max|exp|).
 * The floor matters for weights that pass near 0: AdamW moves every weight by about lr per step
 * whatever its size, so a sum-order difference of 1e-7 in a gradient becomes an absolute error
 * of ~lr·1e-7 there — tiny next to the model's weights, large next to a weight of 1e-3. */
static void expect_params(const char *what, const float *got, const float *exp, int64_t n, double tol) {
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(exp[i]));
  for (int64_t i = 0; i < n; i++) {
    int bad = tol == 0 ? memcmp(&got[i], &exp[i], sizeof(float)) != 0
                       : !(fabs((double)got[i] - exp[i]) <= tol * fmax(fabs(exp[i]), 0.01 * scale));
    if (bad)
      cr_assert_fail("%s[%lld]: got %.9g, expected %.9g (%s %g, max|expected| %.3g)", what, (long long)i,
                     got[i], exp[i], tol == 0 ? "bitwise" : "relative tolerance", tol, scale);
  }
}

/* Losses of every step and the final params against the DDP reference. tol 0: bitwise. */
static void check_parity(const zl_out_t *z, const zl_out_t *d, double tol, const char *what) {
  double lz[64], ld[64];
  int nz = zl_json_all(z->json, "loss", lz, 64), nd = zl_json_all(d->json, "loss", ld, 64);
  cr_assert(nz == nd && nz > 0, "%s: %d losses, DDP has %d", what, nz, nd);
  for (int i = 0; i < nz; i++)
    cr_assert(tol == 0 ? lz[i] == ld[i] : zl_rel(lz[i], ld[i]) <= tol,
              "%s: loss of step %d: got %.17g, DDP %.17g (tol %g)", what, i, lz[i], ld[i], tol);
  char name[700];
  snprintf(name, sizeof name, "%s: rank 0 final params vs DDP", what);
  expect_params(name, z->params, d->params, z->n, tol);
  cr_assert(strstr(z->text, "zero pad check:"), "%s: the pad check did not run:\n%s", what, z->text);
}

/* One scenario: the stage and DDP with the same flags; parity, ledger, and (ring) traffic with
 * `traffic` = the --accum value in flags (0: no traffic check). */
static void scenario(int stage, int N, const char *flags, double tol, int opt_states, int bf16, int ring,
                     int traffic) {
  char args[512], what[600], name[64];
  snprintf(args, sizeof args, MODEL " %s --collectives %s%s", flags, ring ? "ring" : "vendor",
           bf16 ? " --precision bf16" : "");
  snprintf(what, sizeof what, "ZeRO-%d N %d [%s]", stage, N, args);
  snprintf(name, sizeof name, "z%d_n%d_%s%s", stage, N, ring ? "ring" : "vendor", bf16 ? "_bf16" : "");
  zl_out_t z = launch(N, stage, args, name);
  zl_out_t d = ddp_reference(N, args);
  check_parity(&z, &d, tol, what);
  check_ledger(&z, stage, N, bf16, opt_states, what);
  if (traffic) check_traffic(&z, stage, N, bf16, traffic, what);
  const char *clip = strstr(flags, "--clip ");
  if (clip) { /* the clip must have acted on every step, or the test would not test it */
    double c = atof(clip + 7), nmin = zl_json_num(z.json, "grad_norm_min");
    cr_assert(nmin > c,
              "%s: smallest gradient norm %.6g is not above --clip %g: clipping was not exercised (the norm "
              "is t->grad_norm, set by trainer_finish_grads: does the optimizer step call it?)",
              what, nmin, c);
  }
  zl_out_free(&z);
  zl_out_free(&d);
}

#define SGD "--optimizer sgd --momentum 0.9 --lr 0.05 --steps 6"
#define ADAM "--optimizer adamw --lr 0.01 --steps 6"

/* Every stage runs the same matrix: N 2 bitwise (vendor and ring, SGD+momentum and AdamW, fp32
 * and bf16), N 3, 4, 5 within 1e-6, accum + clip, bf16 within a tolerance, N 1 and bf16 ledgers. */
static void stage_matrix_exact(int stage) {
  scenario(stage, 2, SGD, 0, 1, 0, 0, 0);  /* bitwise, SGD+momentum, vendor */
  scenario(stage, 2, ADAM, 0, 2, 0, 1, 1); /* bitwise, AdamW, ring, traffic exact */
  scenario(stage, 2, ADAM, 0, 2, 1, 1, 1); /* bitwise in bf16 too: a+b rounds the same way */
}
static void stage_matrix_uneven(int stage) {
  scenario(stage, 3, ADAM, 1e-6, 2, 0, 0, 0);
  scenario(stage, 4, SGD, 1e-6, 1, 0, 1, 1);
  scenario(stage, 1, ADAM, 0, 2, 0, 0, 0); /* one rank: no padding, bitwise, ledger = formula */
  scenario(stage, 1, SGD, 0, 1, 1, 0, 0);  /* and in bf16 */
}
/* bf16 at N 3, 4 (5: stage_matrix_n5): sums in a different order round differently in bf16; stated tolerance
 * 2e-2
 * relative on the params and losses after 6 steps (bf16 has 8 bits of mantissa: 4e-3 per rounding). */
static void stage_matrix_bf16(int stage) {
  scenario(stage, 3, ADAM, 2e-2, 2, 1, 1, 1);
  scenario(stage, 4, SGD, 2e-2, 1, 1, 0, 0);
}
/* make test-long: N = 5 (5 ranks oversubscribed on a small box), fp32 and bf16, the same
 * contracts as above at one more shard count (make test covers them at N = 1..4). */
static void stage_matrix_n5(int stage) {
  scenario(stage, 5, ADAM, 1e-6, 2, 0, 1, 1);
  scenario(stage, 5, ADAM, 2e-2, 2, 1, 0, 0);
}
/* --accum 2 --clip: ZeRO-1 accumulates full grads locally like DDP (bitwise at N 2); ZeRO-2/3
 * reduce-scatter each micro-batch and add the pieces, so the sum runs (r0k0 + r1k0) + (r0k1 + r1k1)
 * where DDP runs (r0k0 + r0k1) + (r1k0 + r1k1): not bitwise even at N 2, stated tolerance 1e-5 with
 * AdamW (which turns a 1e-7 gradient difference into ~lr·1e-7 on any weight). Clipping is active. */
static void stage_matrix_accum_clip(int stage) {
  scenario(stage, 2, ADAM " --accum 2 --clip 0.05", stage == 1 ? 0 : 1e-5, 2, 0, 0, 0);
  scenario(stage, 3, SGD " --accum 2 --clip 0.05", 1e-6, 1, 0, 1, 2); /* ring: traffic with accum 2 */
}

Test(ch03_zero1, parity_n2_bitwise_ledger_traffic, .timeout = 600) { stage_matrix_exact(1); }
Test(ch03_zero1, parity_n3_n4_n1, .timeout = 600) { stage_matrix_uneven(1); }
Test(ch03_zero1_long, parity_and_bf16_n5, .timeout = 600) { stage_matrix_n5(1); }
Test(ch03_zero1, bf16_tolerance, .timeout = 600) { stage_matrix_bf16(1); }
Test(ch03_zero1, accum_and_clip, .timeout = 600) { stage_matrix_accum_clip(1); }

Test(ch04_zero2, parity_n2_bitwise_ledger_traffic, .timeout = 600) { stage_matrix_exact(2); }
Test(ch04_zero2, parity_n3_n4_n1, .timeout = 600) { stage_matrix_uneven(2); }
Test(ch04_zero2_long, parity_and_bf16_n5, .timeout = 600) { stage_matrix_n5(2); }
Test(ch04_zero2, bf16_tolerance, .timeout = 600) { stage_matrix_bf16(2); }
Test(ch04_zero2, accum_and_clip, .timeout = 600) { stage_matrix_accum_clip(2); }

Test(ch05_zero3, parity_n2_bitwise_ledger_traffic, .timeout = 600) { stage_matrix_exact(3); }
Test(ch05_zero3, parity_n3_n4_n1, .timeout = 600) { stage_matrix_uneven(3); }
Test(ch05_zero3_long, parity_and_bf16_n5, .timeout = 600) { stage_matrix_n5(3); }
Test(ch05_zero3, bf16_tolerance, .timeout = 600) { stage_matrix_bf16(3); }
Test(ch05_zero3, accum_and_clip, .timeout = 600) { stage_matrix_accum_clip(3); }

/* Prefetch 0, 1, 3 give the same bits, and the gathered window is exactly what the schedule
 * implies: the gathers of one micro-batch are the events fwd 0, 1, 2, bwd 2, 1, 0; acquiring
 * event e keeps e..e+K alive, so the peak is the largest sum of K+1 consecutive events' padded
 * unit sizes (N 3: units of 93, 183, 156 elements) — never more than (K+1)·largest unit. The
 * ledger's comm peak adds the two gradient staging buffers (and nothing else with vendor MPI). */
Test(ch05_zero3, prefetch_same_bits_and_gather_window, .timeout = 600) {
  const int N = 3;
  const int64_t ev[6] = {93, 183, 156, 156, 183, 93}; /* padded sizes of the 6 events */
  zl_out_t base = {0};
  const int ks[3] = {0, 1, 3};
  for (int i = 0; i < 3; i++) {
    int K = ks[i];
    int64_t peak = 0;
    for (int e = 0; e < 6; e++) {
      int64_t sum = 0;
      for (int j = e; j <= e + K && j < 6; j++) sum += ev[j];
      if (sum > peak) peak = sum;
    }
    char args[512], name[32], what[64];
    snprintf(args, sizeof args, MODEL " " ADAM " --prefetch %d", K);
    snprintf(name, sizeof name, "z3_prefetch%d", K);
    snprintf(what, sizeof what, "ZeRO-3 --prefetch %d", K);
    zl_out_t r = launch(N, 3, args, name);
    double got = zl_json_num(r.json, "gathered_peak_bytes"),
           bound = zl_json_num(r.json, "gather_bound_bytes");
    cr_assert(got == peak * 4.0,
              "%s: gathered_peak_bytes %.0f, expected %lld (largest K+1 consecutive gathers: acquiring "
              "event e keeps events e..e+K gathered, the prefetch running on from the forward into the "
              "backward; the "
              "window is measured in gather_issue, so every gather must go through it)",
              what, got, (long long)(peak * 4));
    cr_assert(bound == (K + 1) * 183 * 4.0 && got <= bound,
              "%s: gathered peak %.0f vs bound %.0f, expected bound %d", what, got, bound, (K + 1) * 183 * 4);
    double comm_peak = zl_rank_mem(r.json, 0, "comm_peak"), staging = 2.0 * 183 * 4;
    cr_assert(comm_peak == got + staging,
              "%s: rank 0 comm_peak %.0f, expected gathered %.0f + staging %.0f (a gathered "
              "unit that gather_release does not tensor_free stays counted)",
              what, comm_peak, got, staging);
    if (i == 0) base = r;
    else {
      expect_params(what, r.params, base.params, r.n, 0);
      zl_out_free(&r);
    }
  }
  zl_out_free(&base);
}

Test(ch05_zero3, prefetch_beyond_units_is_rejected) {
  char *out = NULL;
  int rc = zl_run(2, 60, &out, "%s " MODEL " --steps 1 --prefetch 4", stage_bin(3)); /* 3 units */
  cr_assert_eq(rc, 2, "--prefetch 4 with 3 units: exit %d, expected 2:\n%s", rc, out);
  cr_assert(strstr(out, "error: --prefetch 4:"), "--prefetch 4: missing the one-line error:\n%s", out);
  free(out);
}

/* --mem-limit-mb: a budget too small even for the shards is refused with the ledger's message
 * and a non-zero exit (all ranks down). The budget demo (make budget-demo) shows the other side. */
Test(ch05_zero3, memory_budget_refusal, .timeout = 300) {
  char *out = NULL;
  int rc = zl_run(2, 60, &out,
                  "%s --input 64 --hidden 512 --classes 10 --layers 4 --batch 8 --steps 1 --mem-limit-mb 1",
                  stage_bin(3));
  cr_assert_neq(rc, 0, "a 1 MiB budget for 1 M params must be refused, exit was 0:\n%s", out);
  cr_assert(strstr(out, "out of memory budget on rank "), "missing the budget message:\n%s", out);
  cr_assert(strstr(out, "of 1 MiB in use"), "the budget message does not name the 1 MiB budget:\n%s", out);
  free(out);
}

/* --prefetch auto (the default): with the MPI backend it prefetches one unit only when this host
 * has a spare core per rank for the communication thread (online cores >= 2 x ranks here), and
 * says which and why; the word auto is accepted explicitly, and a bad value names both forms. */
Test(ch05_zero3, prefetch_auto_follows_the_cores) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int want = cores >= 2 * 2;
  char expect[64], *out = NULL;
  snprintf(expect, sizeof expect, "prefetch: auto -> %d (%ld cores online for 2 ranks", want, cores);
  const char *forms[2] = {"", "--prefetch auto"};
  for (int i = 0; i < 2; i++) {
    int rc = zl_run(2, run_limit(60), &out, "%s " MODEL " --steps 1 --device cpu %s%s", stage_bin(3),
                    forms[i], ex_flag());
    expect_no_hang(rc, "ch05_zero3", 2, run_limit(60), out);
    cr_assert_eq(rc, 0, "ch05_zero3 %s: exit %d:\n%s", forms[i], rc, out);
    cr_assert(strstr(out, expect), "ch05_zero3 %s on %ld cores: expected '%s...':\n%s", forms[i], cores,
              expect, out);
    free(out);
  }
  int rc = zl_run(0, 30, &out, "%s " MODEL " --steps 1 --prefetch often", stage_bin(3));
  cr_assert(rc == 2 && strstr(out, "error: --prefetch often: must be an integer in [0, 64] or auto"),
            "--prefetch often: exit %d:\n%s", rc, out);
  free(out);
}
