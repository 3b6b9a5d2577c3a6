/* test_offload.c — chapter 08, ZeRO-Offload (notes/08-offload.md; contract 11 of notes/design.md):
 *   - offloaded ZeRO-2 trains exactly as ZeRO-2 without offload: every loss and the final
 *     weights bitwise, fp32 and bf16, N = 1..4, AdamW and SGD, --accum and --clip;
 *   - the device ledger drops by exactly the offloaded bytes, and the host arena holds them
 *     (model states device vs host, to the byte); the bytes copied per step equal the shard;
 *   - checkpoints written with offload resume bitwise, with and without offload (layout hook);
 *   - under --mem-limit-mb (the device arena only) a model ZeRO-2 refuses trains with offload.
 * The reference is the same program with --offload none (zero2_strategy() itself): the same
 * kernels on the same shapes in the same order (the host step calls the device step's element-wise
 * functions), so bitwise is the rule's (notes/design.md, "Bits or a tolerance"), on any CPU.
 *
 * Model: input 6, hidden 13, classes 11, 2 hidden layers: units of 91, 182 and 154 elements,
 * Ψ = 427, none a multiple of 3 or 4, so N = 3, 4 pad every unit. */
#include "zl_test.h" // zl_launch, zl_out_t, zl_run, zl_run_ok, zl_json_*, zl_tmppath

#define MODEL "--input 6 --hidden 13 --classes 11 --layers 2 --batch 120 --seed 7"
#define PSI 427
#define BIN ZL_BIN "/ch08_offload"

/* ch08_offload on np ranks with --offload `mode` and args (+ --json / --save-params); asserts success. */
static zl_out_t launch(int np, const char *mode, const char *args, const char *name) {
  char file[160]; /* the files are NAME_MODE.json, NAME_MODE.bin */
  snprintf(file, sizeof file, "%s_%s", name, mode);
  zl_out_t r = zl_launch(np, 120, "offload", file, BIN " --offload %s %s", mode, args);
  cr_assert_eq(r.n, PSI, "%s: --save-params holds %lld floats, expected %d", name, (long long)r.n, PSI);
  return r;
}

/* Rank r's memory entry of the --json; host: its "host" object (the host arena). */
static const char *rank_entry(const char *json, int r, int host, const char *what) {
  char key[64];
  snprintf(key, sizeof key, "{\"rank\": %d, \"params\"", r);
  const char *p = strstr(json, key);
  cr_assert(p, "%s: memory.per_rank has no entry for rank %d", what, r);
  if (!host) return p;
  const char *h = strstr(p, "\"host\"");
  cr_assert(h, "%s: rank %d's memory entry has no \"host\" object", what, r);
  return h;
}

/* Losses of every step and the final weights: bitwise. */
static void expect_same_run(const zl_out_t *got, const zl_out_t *ref, const char *what) {
  double lg[64], lr[64];
  int ng = zl_json_all(got->json, "loss", lg, 64), nr = zl_json_all(ref->json, "loss", lr, 64);
  cr_assert(ng == nr && ng > 0, "%s: %d losses, the reference has %d", what, ng, nr);
  for (int i = 0; i < ng; i++)
    cr_assert(memcmp(&lg[i], &lr[i], sizeof(double)) == 0,
              "%s: loss of step %d: %.17g, without offload %.17g", what, i, lg[i], lr[i]);
  for (int64_t i = 0; i < got->n; i++)
    cr_assert(memcmp(&got->params[i], &ref->params[i], sizeof(float)) == 0,
              "%s: final weight [%lld]: %.9g, without offload %.9g (bitwise)", what, (long long)i,
              got->params[i], ref->params[i]);
}

/* The ledgers of the offloaded run (o) against the plain ZeRO-2 run (z), rank by rank:
 *   device: params and grads unchanged; master and optim 0; the model states drop by exactly
 *           z's master + optim;
 *   host:   optim == z's device optim; master == z's device master (bf16) or the fp32 piece,
 *           4 bytes x shard (fp32, where ZeRO-2 keeps none); grads == the device grad shard;
 *   copies: device -> host and host -> device bytes per step == the grad shard's bytes. */
static void expect_ledgers(const zl_out_t *o, const zl_out_t *z, int N, int bf16, const char *what) {
  const char *keys[4] = {"params", "grads", "master", "optim"};
  for (int r = 0; r < N; r++) {
    const char *od = rank_entry(o->json, r, 0, what), *oh = rank_entry(o->json, r, 1, what);
    const char *zd = rank_entry(z->json, r, 0, what), *zh = rank_entry(z->json, r, 1, what);
    double dev_o[4], dev_z[4], host_o[4];
    for (int k = 0; k < 4; k++) {
      dev_o[k] = zl_json_num(od, keys[k]), dev_z[k] = zl_json_num(zd, keys[k]),
      host_o[k] = zl_json_num(oh, keys[k]);
      cr_assert(zl_json_num(zh, keys[k]) == 0, "%s: rank %d: ZeRO-2 without offload holds host %s bytes",
                what, r, keys[k]);
    }
    cr_assert(dev_o[0] == dev_z[0] && dev_o[1] == dev_z[1],
              "%s: rank %d: device params/grads %.0f/%.0f, without offload %.0f/%.0f", what, r, dev_o[0],
              dev_o[1], dev_z[0], dev_z[1]);
    cr_assert(dev_o[2] == 0 && dev_o[3] == 0,
              "%s: rank %d: device master %.0f, optim %.0f after offloading them", what, r, dev_o[2],
              dev_o[3]);
    double drop = zl_json_num(zd, "model_states") - zl_json_num(od, "model_states");
    cr_assert(drop == dev_z[2] + dev_z[3] && drop > 0,
              "%s: rank %d: device model states drop by %.0f, offloaded %.0f", what, r, drop,
              dev_z[2] + dev_z[3]);
    double shard = dev_z[1] / (bf16 ? 2 : 4); /* elements of the grad shard (own pieces, padded) */
    cr_assert(host_o[3] == dev_z[3], "%s: rank %d: host optim %.0f, ZeRO-2's device optim %.0f", what, r,
              host_o[3], dev_z[3]);
    double want_master = bf16 ? dev_z[2] : 4 * shard;
    cr_assert(host_o[2] == want_master, "%s: rank %d: host master %.0f, expected %.0f", what, r, host_o[2],
              want_master);
    cr_assert(host_o[1] == dev_z[1], "%s: rank %d: host grads %.0f, the device grad shard %.0f", what, r,
              host_o[1], dev_z[1]);
    cr_assert(host_o[0] == 0, "%s: rank %d: host params %.0f", what, r, host_o[0]);
    if (r == 0) {
      double d2h = zl_json_num(o->json, "offload_d2h_bytes_per_step"),
             h2d = zl_json_num(o->json, "offload_h2d_bytes_per_step");
      cr_assert(d2h == dev_z[1] && h2d == dev_z[1],
                "%s: copied per step %.0f D->H, %.0f H->D; the shard is %.0f bytes", what, d2h, h2d,
                dev_z[1]);
      double f = zl_json_num(o->json, "offload_formula_bytes_each_way");
      cr_assert(fabs(f - (double)PSI / N * (bf16 ? 2 : 4)) < 1e-6, "%s: formula bytes each way %.3f", what,
                f);
    }
  }
}

/* One pair: the same flags with and without offload. */
static void pair(int N, const char *flags, int bf16, const char *name) {
  char args[512], what[640];
  snprintf(args, sizeof args, MODEL " --steps 6 %s%s", flags, bf16 ? " --precision bf16" : "");
  snprintf(what, sizeof what, "N %d [%s]", N, args);
  zl_out_t o = launch(N, "optimizer", args, name), z = launch(N, "none", args, name);
  cr_assert(strstr(o.json, "\"strategy\": \"zero2-offload\""), "%s: the offloaded run is not zero2-offload",
            what);
  expect_same_run(&o, &z, what);
  expect_ledgers(&o, &z, N, bf16, what);
  zl_out_free(&o);
  zl_out_free(&z);
}

Test(ch08_offload, n1_fp32_adamw_bitwise) { pair(1, "--optimizer adamw --lr 0.01", 0, "n1"); }
Test(ch08_offload, n2_bf16_adamw_bitwise) { pair(2, "--optimizer adamw --lr 0.01", 1, "n2"); }
/* --accum 2: only the last micro-batch's reduce-scatters may go to the host early */
Test(ch08_offload, n3_bf16_sgd_accum_bitwise) {
  pair(3, "--optimizer sgd --momentum 0.9 --lr 0.05 --accum 2", 1, "n3");
}
Test(ch08_offload, n4_fp32_adamw_clip_threads_bitwise) {
  pair(4, "--optimizer adamw --lr 0.01 --clip 0.05 --host-threads 2", 0, "n4");
}

/* A checkpoint written with offload at step 3 resumes to step 6 with the same bits as running
 * straight through, with offload and without (the layout hook names the host pieces). */
Test(ch08_offload, checkpoint_resumes_bitwise) {
  char ck[320], args[512];
  zl_tmppath(ck, sizeof ck, "offload_ckpt", "ck");
  zl_run_ok(2, 120, "the run writing the checkpoint",
            BIN " --offload optimizer " MODEL " --precision bf16 --steps 3 --ckpt %s --quiet", ck);
  snprintf(args, sizeof args, MODEL " --precision bf16 --steps 6");
  zl_out_t straight = launch(2, "optimizer", args, "ck_straight");
  snprintf(args, sizeof args, MODEL " --precision bf16 --steps 6 --resume %s", ck);
  zl_out_t back = launch(2, "optimizer", args, "ck_resumed"), plain = launch(2, "none", args, "ck_resumed");
  for (int64_t i = 0; i < PSI; i++) {
    cr_assert(memcmp(&back.params[i], &straight.params[i], 4) == 0,
              "resumed with offload: weight [%lld] %.9g, straight %.9g", (long long)i, back.params[i],
              straight.params[i]);
    cr_assert(memcmp(&plain.params[i], &straight.params[i], 4) == 0,
              "resumed without offload: weight [%lld] %.9g, straight %.9g", (long long)i, plain.params[i],
              straight.params[i]);
  }
  zl_out_free(&straight), zl_out_free(&back), zl_out_free(&plain);
}

/* --mem-limit-mb budgets the device arena only: ZeRO-2 keeps 2Ψ + 14Ψ/N there (~2.0 MiB per rank
 * with activations here) and is refused under 1.5 MiB; offloaded (2Ψ + 2Ψ/N, ~1.2 MiB) it trains,
 * with its host arena beyond the budget. */
Test(ch08_offload, trains_under_a_budget_zero2_refuses) {
  const char *m = "--input 32 --hidden 256 --classes 10 --layers 3 --batch 8 --steps 2 --precision bf16 "
                  "--mem-limit-mb 1.5";
  char *out = NULL;
  int rc = zl_run(2, 120, &out, BIN " --offload none %s --quiet", m);
  cr_assert_neq(rc, 0,
                "ZeRO-2 without offload fit the 1.5 MiB budget; the test needs a model it refuses:\n%s", out);
  cr_assert(strstr(out, "out of memory budget on rank "), "missing the budget message:\n%s", out);
  free(out);
  rc = zl_run(2, 120, &out, BIN " --offload optimizer %s", m);
  cr_assert_eq(rc, 0, "offloaded ZeRO-2 under the same 1.5 MiB budget exited %d:\n%s", rc, out);
  cr_assert(strstr(out, "host memory per rank"), "the report has no host table:\n%s", out);
  free(out);
}

/* The chapter's own flags: a bad value is one error line and exit 2, before anything starts. */
Test(ch08_offload, bad_flags_exit_2) {
  char *out = NULL;
  int rc = zl_run(0, 30, &out, BIN " --offload params");
  cr_assert_eq(rc, 2, "--offload params: exit %d, expected 2:\n%s", rc, out);
  cr_assert(strstr(out, "error: --offload params: allowed none|optimizer"), "unexpected message:\n%s", out);
  free(out);
  rc = zl_run(0, 30, &out, BIN " --host-threads 0");
  cr_assert_eq(rc, 2, "--host-threads 0: exit %d, expected 2:\n%s", rc, out);
  free(out);
}
