/* test_gpu_runs.c — the GPU path end to end (needs a GPU: `make test-gpu`, never `make test`).
 * Notes: notes/gpu.md.
 *   - every collective on CUDA buffers, exact (build/tests/gpu_coll): NCCL with one rank on one
 *     GPU, and the host-staged MPI backend with 2, 3 and 4 ranks sharing that GPU;
 *   - NCCL with two ranks on one GPU stops with a message that names --backend mpi;
 *   - chapters 02–05 on --device cuda agree with the same configuration on --device cpu
 *     (final loss and every parameter from --save-params): NCCL at N = 1, MPI at N = 2, 3, 4;
 *     chapter 12's experts too (NCCL at N = 1, EP 2 staged through MPI).
 * Tolerances: fp32 runs 1e-4 relative on the parameters after 8 steps (CPU and GPU matmuls add in
 * different orders, ~1e-7 per op, and training compounds it a little), bf16 runs 2e-2, fp16 runs
 * (with the loss scaler) 2e-2: the same element-wise source, fp16 keeping more bits than bf16. */
#include "zl_test.h" // zl_launch, zl_out_t, zl_run, zl_json_*, zl_rel
#include "device.h"  // device_cuda_count (a case that needs 2 GPUs)

TestSuite(common_gpu_runs, .timeout = 600);

#define MODEL "--input 24 --hidden 96 --classes 10 --layers 3 --batch 96 --steps 8 --seed 11"

/* "key": "value" in the --json text. */
static int json_str_is(const char *json, const char *key, const char *want) {
  const char *p = zl_json_find(json, key);
  if (!p) return 0;
  while (*p == ' ' || *p == ':') p++;
  return *p == '"' && strncmp(p + 1, want, strlen(want)) == 0 && p[1 + strlen(want)] == '"';
}

static zl_out_t launch(int np, const char *bin, const char *args, const char *name) {
  return zl_launch(np, 120, "gpu", name, "%s/%s %s", ZL_BIN, bin, args);
}

/* bin on --device cpu and on --device cuda --backend <backend>, N ranks each; compare. */
static void gpu_vs_cpu_model(const char *bin, int np, const char *backend, const char *model,
                             const char *args, double tol) {
  char cpu_args[512], gpu_args[512], name[160];
  snprintf(cpu_args, sizeof cpu_args, "%s %s --device cpu", model, args);
  snprintf(gpu_args, sizeof gpu_args, "%s %s --device cuda --backend %s", model, args, backend);
  snprintf(name, sizeof name, "%s_n%d_%s", bin, np, backend);
  char cname[200];
  snprintf(cname, sizeof cname, "%s_cpu", name);
  zl_out_t c = launch(np, bin, cpu_args, cname);
  zl_out_t g = launch(np, bin, gpu_args, name);
  cr_assert(json_str_is(g.json, "device", "cuda"),
            "%s: the GPU run's --json does not say \"device\": \"cuda\"", name);
  cr_assert(json_str_is(g.json, "backend", backend),
            "%s: the GPU run's --json does not say \"backend\": \"%s\"", name, backend);
  double lc = zl_json_num(c.json, "final_loss"), lg = zl_json_num(g.json, "final_loss");
  cr_assert(isfinite(lg) && zl_rel(lg, lc) <= tol, "%s (%s): final loss on GPU %.9g, on CPU %.9g (tol %g)",
            name, args, lg, lc, tol);
  cr_assert_eq(g.n, c.n, "%s: GPU saved %lld params, CPU %lld", name, (long long)g.n, (long long)c.n);
  double scale = 0;
  for (int64_t i = 0; i < c.n; i++) scale = fmax(scale, fabs(c.params[i]));
  for (int64_t i = 0; i < c.n; i++) {
    double lim = tol * fmax(fabs(c.params[i]), 1e-2 * scale);
    if (!(fabs((double)g.params[i] - c.params[i]) <= lim))
      cr_assert_fail("%s (%s): param[%lld] on GPU %.9g, on CPU %.9g (tol %g)", name, args, (long long)i,
                     g.params[i], c.params[i], tol);
  }
  free(c.json), free(c.text), free(c.params), free(g.json), free(g.text), free(g.params);
}

static void gpu_vs_cpu(const char *bin, int np, const char *backend, const char *args, double tol) {
  gpu_vs_cpu_model(bin, np, backend, MODEL, args, tol);
}

/* ---- collectives on CUDA buffers ------------------------------------------------------------ */
static void coll(int np, const char *backend) {
  char *out = NULL;
  int rc = zl_run(np, 120, &out, ZL_TESTBIN "/gpu_coll --backend %s", backend);
  cr_assert_eq(rc, 0, "gpu_coll N %d --backend %s exited %d:\n%s", np, backend, rc, out);
  cr_assert(strstr(out, "gpu_coll: ok"), "gpu_coll N %d --backend %s printed no ok line:\n%s", np, backend,
            out);
  free(out);
}
Test(common_gpu_runs, collectives_nccl_1) { coll(1, "nccl"); }
Test(common_gpu_runs, collectives_staged_mpi_2) { coll(2, "mpi"); }
Test(common_gpu_runs, collectives_staged_mpi_3) { coll(3, "mpi"); }
Test(common_gpu_runs, collectives_staged_mpi_4) { coll(4, "mpi"); }

/* The NCCL watchdog: a collective stuck behind a 20 s compute stream, a 2 s deadline. */
Test(common_gpu_runs, nccl_watchdog_timeout) {
  char *out = NULL;
  int rc = zl_run(1, 90, &out, ZL_TESTBIN "/gpu_coll --backend nccl --hang-test 20");
  cr_assert(rc != 0 && rc != 3 && rc != 124,
            "hang test: exit code %d (expected the watchdog to stop the job):\n%s", rc, out);
  cr_assert(strstr(out, "rank 0: all_reduce (hang-test) did not complete within 2 s"),
            "hang test: the message should name the rank, the collective and its tag:\n%s", out);
  free(out);
}

Test(common_gpu_runs, nccl_two_ranks_one_gpu_refused) {
  setenv("CUDA_VISIBLE_DEVICES", "0", 1); /* both ranks on one GPU, however many the box has */
  char *out = NULL;
  int rc = zl_run(2, 120, &out, ZL_BIN "/ch02_ddp " MODEL " --device cuda --backend nccl --quiet");
  cr_assert(rc != 0 && rc != 124,
            "NCCL with two ranks on one GPU: exit code %d (expected a clear failure):\n%s", rc, out);
  cr_assert(strstr(out, "one rank per GPU") && strstr(out, "--backend mpi"),
            "NCCL with two ranks on one GPU: the message should say 'one rank per GPU' and suggest --backend "
            "mpi:\n%s",
            out);
  free(out);
}

/* ---- chapters: GPU agrees with CPU -------------------------------------------------------- */
Test(common_gpu_runs, ch02_nccl_1) {
  gpu_vs_cpu("ch02_ddp", 1, "nccl", "--variant bucketed", 1e-4);
  gpu_vs_cpu("ch02_ddp", 1, "nccl", "--variant naive --optimizer sgd", 1e-4);
}
Test(common_gpu_runs, ch03_nccl_1) {
  gpu_vs_cpu("ch03_zero1", 1, "nccl", "", 1e-4);
  gpu_vs_cpu("ch03_zero1", 1, "nccl", "--precision bf16", 2e-2);
}
/* --precision fp16 with dynamic loss scaling: the weights within the 16-bit tolerance, also where
 * a huge initial scale makes the first steps overflow and skip (on both devices alike, or the
 * weights would differ by whole updates). */
Test(common_gpu_runs, fp16_nccl_1_and_staged_mpi_2) {
  gpu_vs_cpu("ch03_zero1", 1, "nccl", "--precision fp16", 2e-2);
  gpu_vs_cpu("ch05_zero3", 2, "mpi", "--precision fp16 --init-scale 1099511627776", 2e-2);
}
/* Determinism: two GPU runs of the same flags give the same bits (no atomics, fixed orders). */
Test(common_gpu_runs, ch05_nccl_1_bit_reproducible) {
  const char *args = MODEL " --device cuda --backend nccl --prefetch 1";
  zl_out_t a = launch(1, "ch05_zero3", args, "repeat_a");
  zl_out_t b = launch(1, "ch05_zero3", args, "repeat_b");
  cr_assert_eq(a.n, b.n, "repeat: %lld vs %lld params", (long long)a.n, (long long)b.n);
  for (int64_t i = 0; i < a.n; i++)
    if (memcmp(&a.params[i], &b.params[i], sizeof(float)) != 0)
      cr_assert_fail("two identical GPU runs differ: param[%lld] %.9g then %.9g (bitwise)", (long long)i,
                     a.params[i], b.params[i]);
  free(a.json), free(a.text), free(a.params), free(b.json), free(b.text), free(b.params);
}
Test(common_gpu_runs, ch04_nccl_1) { gpu_vs_cpu("ch04_zero2", 1, "nccl", "--collectives ring", 1e-4); }
Test(common_gpu_runs, ch05_nccl_1) { gpu_vs_cpu("ch05_zero3", 1, "nccl", "--optimizer sgd", 1e-4); }

Test(common_gpu_runs, ch02_staged_mpi_2) { gpu_vs_cpu("ch02_ddp", 2, "mpi", "--variant overlap", 1e-4); }
Test(common_gpu_runs, ch03_staged_mpi_2) { gpu_vs_cpu("ch03_zero1", 2, "mpi", "--optimizer sgd", 1e-4); }
Test(common_gpu_runs, ch04_staged_mpi_3_ring) {
  gpu_vs_cpu("ch04_zero2", 3, "mpi", "--collectives ring", 1e-4);
}
Test(common_gpu_runs, ch05_staged_mpi_4) {
  gpu_vs_cpu("ch05_zero3", 4, "mpi", "", 1e-4);
  gpu_vs_cpu("ch05_zero3", 4, "mpi", "--precision bf16", 2e-2);
}
Test(common_gpu_runs, ch02_staged_mpi_4_bf16) { gpu_vs_cpu("ch02_ddp", 4, "mpi", "--precision bf16", 2e-2); }

/* Chapter 12 on the GPU: the router's probabilities go to the host, the rows move with op_rows_* on
 * the device, the all-to-alls on NCCL (one rank: the exchange is local) or staged through MPI (EP 2
 * sharing the GPU). The router picks by value, so a near-tie that CPU and GPU round apart would send
 * a token elsewhere and fail this by far more than rounding: the seed's 8 steps are the check. */
#define MOE_MODEL "--model gpt --gpt tiny --moe 4 --topk 2 --batch 8 --steps 8 --seed 11"
Test(common_gpu_runs, ch12_nccl_1) { gpu_vs_cpu_model("ch12_experts", 1, "nccl", MOE_MODEL, "", 1e-4); }
Test(common_gpu_runs, ch12_staged_mpi_2_ep2) {
  gpu_vs_cpu_model("ch12_experts", 2, "mpi", MOE_MODEL, "--ep 2", 1e-4);
  gpu_vs_cpu_model("ch12_experts", 2, "mpi", MOE_MODEL, "--ep 2 --capacity-factor 1.25 --zero 3", 1e-4);
  /* ZeRO on the two data-parallel groups (solutions/zero_groups.c): the dense chunks over both ranks,
   * with --accum the full gradient reduce-scattered once per group (no_sync) */
  gpu_vs_cpu_model("ch12_experts", 2, "mpi", MOE_MODEL, "--ep 2 --zero 1", 1e-4);
  gpu_vs_cpu_model("ch12_experts", 2, "mpi", MOE_MODEL, "--ep 2 --zero 2 --accum 2", 1e-4);
}
/* EP 2 on NCCL: two ranks, two GPUs (NCCL will not put two ranks on one). The dropless counts go as
 * host control data, the rows as device all-to-alls; a host buffer handed to NCCL would stop the job
 * naming the call (comm_nccl.cu). */
Test(common_gpu_runs, ch12_nccl_2_ep2) {
  if (device_cuda_count() < 2) cr_skip_test("EP 2 on NCCL needs 2 GPUs (%d visible)", device_cuda_count());
  gpu_vs_cpu_model("ch12_experts", 2, "nccl", MOE_MODEL, "--ep 2", 1e-4);
  gpu_vs_cpu_model("ch12_experts", 2, "nccl", MOE_MODEL, "--ep 2 --capacity-factor 1.25", 1e-4);
  gpu_vs_cpu_model("ch12_experts", 2, "nccl", MOE_MODEL, "--ep 2 --zero 3", 1e-4); /* two groups' gathers */
}
/* --tp 2 inside EP 2 (solutions/ep_tp.c): the attention split, each rank routing half the tokens, the
 * all-gathers of the MoE output and of d ln2 on the device. */
Test(common_gpu_runs, ch12_staged_mpi_2_tp2_ep2) {
  gpu_vs_cpu_model("ch12_experts", 2, "mpi", MOE_MODEL, "--ep 2 --tp 2", 1e-4);
}
