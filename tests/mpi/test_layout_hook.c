/* test_layout_hook.c — a strategy written only against the public hook set gets checkpoint,
 * resume, resharding and zl_ckpt for free: tests/mpi/scn_layout.c ("unit owners": rank u mod N
 * keeps unit u's fp32 weights and optimizer states, every rank the working params) implements
 * strategy_t.layout and nothing checkpoint-specific, and must
 *   - train bit for bit like ch02_ddp --variant naive (the same N, batch and GEMM shapes: only where
 *     the weights live differs; the export goes through its layout too);
 *   - resume bitwise: 8 straight steps == 4 + resume + 4 (params, losses, every shard file);
 *   - reshard both ways: its checkpoint resumed by DDP and ZeRO-3 on 3 ranks, a ZeRO-2
 *     checkpoint resumed by it on 3 ranks, within 1e-6 of the straight runs;
 *   - consolidate with zl_ckpt into the --save-params weights, bitwise.
 * Notes: notes/reliability.md ("Checkpoints"); the hook: common/train/train.h (unit_layout_t). */
#include "zl_test.h" // zl_run, zl_tmpdir, zl_read_file, zl_read_floats, zl_expect_floats

#define MODEL "--input 6 --hidden 13 --classes 11 --layers 2 --batch 120 --seed 7 --optimizer adamw --lr 0.01"
#define TOY ZL_TESTBIN "/scn_layout"

static void run_ok(int np, const char *fmt, const char *prog, const char *args) {
  char *out = NULL;
  int rc = zl_run(np, 120, &out, fmt, prog, args);
  cr_assert_eq(rc, 0, "%s %s (np %d): exit code %d; output:\n%s", prog, args, np, rc, out);
  free(out);
}

static void same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = zl_read_file(a, &na), *y = zl_read_file(b, &nb);
  cr_assert(x && y, "missing %s or %s", a, b);
  cr_assert(na == nb && memcmp(x, y, na) == 0, "%s (%zu bytes) and %s (%zu bytes) differ", a, na, b, nb);
  free(x);
  free(y);
}

static void close_params(const char *what, const char *got_path, const char *want_path, double tol) {
  int64_t n1 = 0, n2 = 0;
  float *got = zl_read_floats(got_path, &n1), *want = zl_read_floats(want_path, &n2);
  cr_assert(got && want && n1 == n2 && n1 > 0, "%s: %s / %s missing or of different sizes", what, got_path,
            want_path);
  zl_expect_floats(what, got, want, n1, tol);
  free(got);
  free(want);
}

Test(common_layout, toy_strategy_gets_checkpoints_for_free, .timeout = 600) {
  char dir[256], a[300], b[300], args[2048], p[400], q[400];
  zl_tmpdir(dir, sizeof dir, "layout_hook");
  /* the straight run, checkpoints at 4 and 8; DDP naive with the same flags */
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(args, sizeof args, MODEL " --steps 8 --ckpt %s --save-every 4 --save-params %s/a.bin", a, dir);
  run_ok(2, "%s %s", TOY, args);
  snprintf(args, sizeof args, MODEL " --steps 8 --variant naive --save-params %s/ddp.bin", dir);
  run_ok(2, "%s %s", ZL_BIN "/ch02_ddp", args);
  snprintf(p, sizeof p, "%s/a.bin", dir);
  snprintf(q, sizeof q, "%s/ddp.bin", dir);
  close_params("unit owners vs ddp-naive (bitwise)", p, q, 0);
  /* its layout on disk: rank 0 owns units 0 and 2, rank 1 unit 1: two files, whole units */
  snprintf(p, sizeof p, "%s/step-000008/manifest.txt", a);
  char *man = zl_read_file(p, NULL);
  cr_assert(man && strstr(man, "\nstrategy unit-owners\n") && strstr(man, "\nshards 2\n") &&
                strstr(man, "\npiece 0 0 0 91 0\n") && strstr(man, "\npiece 0 2 0 154 91\n") &&
                strstr(man, "\npiece 1 1 0 182 0\n"),
            "%s: expected whole units round-robin over 2 files:\n%s", p, man);
  free(man);

  /* resume bitwise */
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(args, sizeof args, MODEL " --steps 8 --resume %s/step-000004 --ckpt %s --save-params %s/b.bin", a,
           b, dir);
  run_ok(2, "%s %s", TOY, args);
  snprintf(p, sizeof p, "%s/a.bin", dir);
  snprintf(q, sizeof q, "%s/b.bin", dir);
  same_file(p, q);
  for (int r = 0; r < 2; r++) {
    snprintf(p, sizeof p, "%s/step-000008/rank-%05d.bin", a, r);
    snprintf(q, sizeof q, "%s/step-000008/rank-%05d.bin", b, r);
    same_file(p, q); /* weights and optimizer states */
  }
  snprintf(p, sizeof p, "%s/step-000008/losses.bin", a);
  snprintf(q, sizeof q, "%s/step-000008/losses.bin", b);
  size_t na = 0, nb = 0;
  char *x = zl_read_file(p, &na), *y = zl_read_file(q, &nb);
  cr_assert(x && y && na == nb && na == 8 * 16, "%s / %s: missing or not 8 (loss, ms) pairs", p, q);
  for (int s = 0; s < 8; s++) /* the losses, bitwise; the step times differ */
    cr_assert(memcmp(x + 16 * s, y + 16 * s, 8) == 0, "loss of step %d differs between %s and %s", s, p, q);
  free(x);
  free(y);

  /* reshard: its checkpoint into DDP and ZeRO-3 on 3 ranks */
  const char *into[2] = {ZL_BIN "/ch02_ddp", ZL_BIN "/ch05_zero3"};
  for (int k = 0; k < 2; k++) {
    snprintf(args, sizeof args, MODEL " --steps 8 --resume %s/step-000004 --save-params %s/r%d.bin", a, dir,
             k);
    run_ok(3, "%s %s", into[k], args);
    snprintf(p, sizeof p, "%s/r%d.bin", dir, k);
    snprintf(q, sizeof q, "%s/a.bin", dir);
    close_params(into[k], p, q, 1e-6);
  }
  /* and a ZeRO-2 checkpoint into it, on 3 ranks (each rank then owns one whole unit) */
  snprintf(args, sizeof args, MODEL " --steps 8 --ckpt %s/z --save-every 4 --save-params %s/z.bin", dir, dir);
  run_ok(2, "%s %s", ZL_BIN "/ch04_zero2", args);
  snprintf(args, sizeof args, MODEL " --steps 8 --resume %s/z/step-000004 --save-params %s/zt.bin", dir, dir);
  run_ok(3, "%s %s", TOY, args);
  snprintf(p, sizeof p, "%s/zt.bin", dir);
  snprintf(q, sizeof q, "%s/z.bin", dir);
  close_params("ZeRO-2 checkpoint resumed by unit owners", p, q, 1e-6);

  /* zl_ckpt reads its layout like any other */
  char *out = NULL;
  int rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt consolidate %s %s/full", a, dir);
  cr_assert_eq(rc, 0, "zl_ckpt consolidate: exit %d:\n%s", rc, out);
  free(out);
  snprintf(p, sizeof p, "%s/full/weights.f32", dir);
  snprintf(q, sizeof q, "%s/a.bin", dir);
  same_file(p, q);
}
