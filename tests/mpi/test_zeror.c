/* test_zeror.c — ZeRO-R on real runs (notes/zero-r.md). Memory defragmentation: --alloc-trace
 * writes the ledger's own sequence (its running sum peaks at the ledger's reported peak, to the
 * byte) and changes no bit of the result. Constant-size buffers: --buffer-mb runs every
 * collective in pieces and gives DDP's and ZeRO-1/2/3's result of the unbounded run — bitwise at
 * N = 2 (every sum is a+b), within 1e-4 at N = 3 (the vendor library may sum a smaller message
 * in another order) — with the same bytes in more calls, and the ZeRO-2/3 temporaries no larger.
 * The GEMMs are the unbounded run's, shape for shape: only the collectives are cut (notes/design.md, "Bits or
 * a tolerance").
 * Suite ch05_zeror. */
#include "zl_test.h"  // Criterion, zl_launch, zl_tmppath, zl_rank_mem, zl_expect_same_file
#include "allocsim.h" // allocsim_load, allocsim_run

Test(ch05_zeror, alloc_trace_is_the_ledger_and_changes_no_bits, .timeout = 300) {
  char trace[320], a[320], b[320];
  zl_tmppath(trace, sizeof trace, "zeror", "gpt.trace");
  const char *args = "--model gpt --gpt small --steps 2 --recompute";
  zl_out_t plain = zl_launch(2, 240, "zeror", "plain", ZL_BIN "/ch05_zero3 %s", args);
  zl_out_t traced =
      zl_launch(2, 240, "zeror", "traced", ZL_BIN "/ch05_zero3 %s --alloc-trace %s", args, trace);
  zl_tmppath(a, sizeof a, "zeror", "plain.bin");
  zl_tmppath(b, sizeof b, "zeror", "traced.bin");
  zl_expect_same_file(a, b);
  int n = 0;
  allocsim_event_t *ev = allocsim_load(trace, &n);
  cr_assert_gt(n, 10, "the trace holds %d device events", n);
  int64_t live = 0, peak = 0;
  for (int e = 0; e < n; e++) {
    live += ev[e].op == 'A' ? ev[e].bytes : -ev[e].bytes;
    if (live > peak) peak = live;
  }
  double want = zl_rank_mem(traced.json, 0, "peak");
  cr_expect_eq((double)peak, want,
               "rank 0: the trace's running sum peaks at %lld bytes, the ledger reports %.0f",
               (long long)peak, want);
  allocsim_result_t r;
  cr_expect_eq(allocsim_run(ev, n, ALLOCSIM_CACHING, 0, &r), 0,
               "the replay without a budget failed at event %d", r.failed_at);
  cr_expect_geq(r.alloc_peak, peak, "allocated peak %lld (blocks rounded up) below the ledger's %lld",
                (long long)r.alloc_peak, (long long)peak);
  cr_expect_geq(r.reserved_peak, r.alloc_peak, "reserved %lld below allocated %lld",
                (long long)r.reserved_peak, (long long)r.alloc_peak);
  free(ev);
  zl_out_free(&plain);
  zl_out_free(&traced);
}

/* ---- constant-size buffers (--buffer-mb) ---------------------------------------------------- */
static const char *const cb_chapters[4] = {"ch02_ddp", "ch03_zero1", "ch04_zero2", "ch05_zero3"};
static const char *const cb_models[2] = {"mlp", "gpt --gpt tiny"};
#define CB_MB "0.001" /* 1048 bytes: below every unit of both models, so every collective is cut */

/* rank 0's collective calls (all steps) and the bytes per step, from the --json's comm object */
static double cb_calls(const char *json) { return zl_json_num(zl_json_find(json, "comm"), "calls"); }
static double cb_bytes(const char *json) { return zl_json_num(json, "bytes_per_step_per_rank"); }

/* Chapter c on model m with --buffer-mb against ref, an unbounded run with the same extra flags:
 * params bitwise (tol 0) or within tol; at N = 2 the bytes per step of the formula. same_chapter:
 * ref is c's own run, so also more calls, the same bytes, and (ZeRO-2/3) a comm peak no larger. */
static void cb_check(int np, int m, int c, const char *extra, const zl_out_t *ref, int same_chapter,
                     double tol) {
  char name[64], what[160];
  snprintf(name, sizeof name, "cb_%d_%d_%s", np, m, cb_chapters[c]);
  zl_out_t b = zl_launch(np, 120, "zeror_cb", name, ZL_BIN "/%s --model %s --steps 2 %s --buffer-mb " CB_MB,
                         cb_chapters[c], cb_models[m], extra);
  snprintf(what, sizeof what, "%s N=%d --model %s %s --buffer-mb " CB_MB " vs unbounded", cb_chapters[c], np,
           cb_models[m], extra);
  cr_assert_eq(b.n, ref->n, "%s: %lld floats, unbounded %lld", what, (long long)b.n, (long long)ref->n);
  zl_expect_floats(what, b.params, ref->params, b.n, tol);
  double formula = zl_json_num(b.json, "formula_bytes_per_step_per_rank");
  if (np == 2) /* (at N = 3 uneven GPT chunks round the formula) */
    cr_expect_eq(cb_bytes(b.json), formula, "%s: bytes/step %.0f, formula %.0f", what, cb_bytes(b.json),
                 formula);
  if (!same_chapter) {
    zl_out_free(&b);
    return;
  }
  cr_expect_eq(cb_bytes(b.json), cb_bytes(ref->json),
               "%s: bytes/step %.0f, unbounded %.0f (pieces send the same bytes)", what, cb_bytes(b.json),
               cb_bytes(ref->json));
  cr_expect_gt(cb_calls(b.json), cb_calls(ref->json), "%s: %.0f calls, unbounded %.0f: no collective was cut",
               what, cb_calls(b.json), cb_calls(ref->json));
  if (c >= 2) /* ZeRO-2/3: one staging slot, one gathered unit, + the piece buffer */
    cr_expect_leq(zl_rank_mem(b.json, 0, "comm_peak"), zl_rank_mem(ref->json, 0, "comm_peak"),
                  "%s: rank 0 comm peak %.0f bytes, unbounded %.0f", what,
                  zl_rank_mem(b.json, 0, "comm_peak"), zl_rank_mem(ref->json, 0, "comm_peak"));
  zl_out_free(&b);
}

/* N = 2: every sum is a+b, whatever the pieces: bitwise. The MLP against each chapter's own run
 * (calls, bytes, comm peak too); the GPT against DDP's (ZeRO-1/2/3 = DDP bitwise at N = 2, suite
 * ch03_zero), to keep the suite short. */
/* m: the MLP (make test) or the GPT (make test-long: the same contract on the other model). */
static void buffer_mb_n2(int m) {
  zl_out_t ref = {0};
  for (int c = 0; c < 4; c++) {
    if (m == 0 || c == 0) {
      char name[32];
      snprintf(name, sizeof name, "ref2_%d_%d", m, c);
      zl_out_free(&ref);
      ref = zl_launch(2, 120, "zeror_cb", name, ZL_BIN "/%s --model %s --steps 2", cb_chapters[c],
                      cb_models[m]);
    }
    cb_check(2, m, c, "", &ref, m == 0 || c == 0, 0);
  }
  zl_out_free(&ref);
}
Test(ch05_zeror, buffer_mb_same_bits_at_n2, .timeout = 300) { buffer_mb_n2(0); }
Test(ch05_zeror_long, buffer_mb_same_bits_at_n2_gpt, .timeout = 300) { buffer_mb_n2(1); }

/* N = 3: the vendor all-reduce may sum a smaller message in another order, so within 1e-4; with
 * SGD (Adam's first step is g/|g|: an ulp on a gradient near 0 flips a whole step). Reference:
 * DDP's own run, and ZeRO-1's for ZeRO-1/2/3 (equal unbounded: suite ch03_zero). */
static void buffer_mb_n3(int m) {
  zl_out_t ref[2];
  for (int k = 0; k < 2; k++) {
    char name[32];
    snprintf(name, sizeof name, "ref3_%d_%d", m, k);
    ref[k] = zl_launch(3, 120, "zeror_cb", name, ZL_BIN "/%s --model %s --steps 2 --optimizer sgd",
                       cb_chapters[k], cb_models[m]);
  }
  for (int c = 0; c < 4; c++) cb_check(3, m, c, "--optimizer sgd", &ref[c > 0], c <= 1, 1e-4);
  zl_out_free(&ref[0]);
  zl_out_free(&ref[1]);
}
Test(ch05_zeror, buffer_mb_within_tolerance_at_n3, .timeout = 300) { buffer_mb_n3(0); } /* the MLP */
Test(ch05_zeror_long, buffer_mb_within_tolerance_at_n3_gpt, .timeout = 300) { buffer_mb_n3(1); }

/* Below one element per rank: one line naming the flag, exit 2, before any collective. */
Test(ch05_zeror, buffer_mb_too_small_is_refused, .timeout = 60) {
  char *out = NULL;
  int rc = zl_run(2, 30, &out, ZL_BIN "/ch04_zero2 --steps 1 --buffer-mb 1e-7");
  cr_expect_eq(rc, 2, "--buffer-mb 1e-7 exited %d (want 2):\n%s", rc, out);
  cr_expect(strstr(out, "--buffer-mb") != NULL, "the message does not name --buffer-mb:\n%s", out);
  free(out);
}
