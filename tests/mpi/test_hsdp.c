/* test_hsdp.c — HSDP's checkpoints resume like every other strategy's (notes/09-nodes.md,
 * notes/reliability.md "The universal form"): ZeRO-3 inside each node (--shard-group node), the
 * nodes faked on one box with ZL_NODE_OF_RANK (2 nodes x 2 ranks). Every node holds the same
 * pieces; node 0's are saved, the others' restored from them (unit_layout_t.saved_elsewhere).
 *   - 3 HSDP steps + resume + 3 = 6 straight HSDP steps, bitwise: the same kernels, shapes and
 *     order (notes/design.md, "Bits or a tolerance"), every loss and weight;
 *   - the same checkpoint resumed as DDP on 3 ranks and as ZeRO-1 on 2: within 1e-6 · max|w| of the
 *     straight HSDP run (other per-rank batches: other GEMM shapes; SGD with momentum, so the gap is
 *     the gradients' rounding; the log line prints it);
 *   - an HSDP run resumes a ZeRO-2 checkpoint (any grid into HSDP), within the same tolerance.
 * And the gradient norm of HSDP (solutions/hsdp.c: ZeRO-3 whose shard group is the node): after the
 * all-reduce across nodes every node holds every piece, so Σg² is summed over the node's ranks —
 * each piece once — with or without tensor parallelism.
 * Suite ch09_hsdp (with tests/mpi/test_nodes.c's). */
#include "zl_test.h" // zl_launch, zl_run, zl_expect_floats, zl_expect_close_norm

#define RUN "--batch 24 --seed 5 --optimizer sgd --momentum 0.9 --lr 0.05 --timeout-s 30"
#define NODES "env ZL_NODE_OF_RANK=0,0,1,1 "

Test(ch09_hsdp, checkpoint_resumes_on_hsdp_bitwise_and_on_other_grids, .timeout = 120) {
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "hsdp_ck");
  zl_out_t straight = zl_launch(
      4, 60, "hsdp_ck", "straight",
      NODES ZL_BIN "/ch05_zero3 --shard-group node " RUN " --steps 6 --ckpt %s/ck --save-every 3", dir);
  cr_assert(strstr(straight.json, "hsdp"), "the straight run is not HSDP:\n%s", straight.text);
  zl_out_t resumed = zl_launch(4, 60, "hsdp_ck", "resumed", NODES ZL_BIN "/ch05_zero3 --shard-group node " RUN
                               " --steps 6 --resume %s/ck/step-000003", dir);
  zl_expect_floats("HSDP 3 + resumed 3 vs 6 straight: weights", resumed.params, straight.params, straight.n,
                   0);
  zl_expect_same_losses("HSDP 3 + resumed 3 vs 6 straight", resumed.json, straight.json);
  static const struct { int np; const char *cmd; } other[2] = {
      {3, ZL_BIN "/ch02_ddp --variant naive " RUN " --steps 6 --resume %s/ck/step-000003"},
      {2, ZL_BIN "/ch03_zero1 " RUN " --steps 6 --resume %s/ck/step-000003"},
  };
  for (int i = 0; i < 2; i++) {
    char name[32], what[160];
    snprintf(name, sizeof name, "other%d", i);
    zl_out_t o = zl_launch(other[i].np, 60, "hsdp_ck", name, other[i].cmd, dir);
    snprintf(what, sizeof what, "HSDP checkpoint resumed on %d ranks (%s) vs HSDP straight", other[i].np,
             i ? "zero1" : "ddp");
    cr_assert_eq(o.n, straight.n, "%s: %lld weights", what, (long long)o.n);
    double gap = zl_expect_close_norm(what, o.params, straight.params, o.n, 1e-6);
    cr_log_info("%s: largest |difference| / max|w|: %.2g (tolerance 1e-06)", what, gap);
    zl_out_free(&o);
  }
  /* any grid into HSDP: a ZeRO-2 checkpoint of 3 ranks resumed by HSDP on 2 x 2 */
  zl_out_t z2 = zl_launch(3, 60, "hsdp_ck", "zero2",
                          ZL_BIN "/ch04_zero2 " RUN " --steps 6 --ckpt %s/ck2 --save-every 3", dir);
  zl_out_t into = zl_launch(4, 60, "hsdp_ck", "into", NODES ZL_BIN "/ch05_zero3 --shard-group node " RUN
                            " --steps 6 --resume %s/ck2/step-000003", dir);
  double gap = zl_expect_close_norm("ZeRO-2 checkpoint resumed by HSDP vs ZeRO-2 straight", into.params,
                                    z2.params, z2.n, 1e-6);
  cr_log_info("ZeRO-2 (3 ranks) -> HSDP (2 x 2): largest |difference| / max|w|: %.2g (tolerance 1e-06)", gap);
  zl_out_free(&z2), zl_out_free(&into), zl_out_free(&straight), zl_out_free(&resumed);
}

/* --clip makes the update depend on the norm: HSDP on 2 x 2 with the clip active (it moves the weights
 * by 4e-2 of max|w| here) ends where DDP on 4 ranks ends, within 1e-6 · max|w| (the same gradients,
 * summed inside the node then across: another order in general; SGD with momentum). A norm summed over
 * all N ranks counts every piece K = 2 times (the clip scale 1/sqrt 2 of the right one): measured
 * 6.9e-4 of max|w| away. */
Test(ch09_hsdp, gradient_norm_counts_each_piece_once, .timeout = 60) {
  zl_out_t h = zl_launch(4, 60, "hsdp_norm", "hsdp",
                         NODES ZL_BIN "/ch05_zero3 --shard-group node " RUN " --steps 4 --clip 0.05");
  zl_out_t d =
      zl_launch(4, 60, "hsdp_norm", "ddp", ZL_BIN "/ch02_ddp --variant naive " RUN " --steps 4 --clip 0.05");
  cr_assert_eq(h.n, d.n, "HSDP %lld weights, DDP %lld", (long long)h.n, (long long)d.n);
  double gap = zl_expect_close_norm("HSDP (2 x 2) vs DDP (4), --clip 0.05", h.params, d.params, d.n, 1e-6);
  cr_log_info("HSDP vs DDP with the clip active: largest |difference| / max|w|: %.2g (tolerance 1e-06)", gap);
  zl_out_free(&h), zl_out_free(&d);
}

/* HSDP under tensor parallelism (chapter 07's grid, --pp 1 --tp 2: D = 2 replicas, one per node, so the
 * node's shard group is one rank and the all-reduce across does the sum) against ZeRO-3 over the same
 * D = 2, --clip active (it moves the weights by 1.6e-2 of max|w|): within 1e-6 · max|w|. The norm's TP
 * correction (the replicated parameters counted once: tp_split.c's grad_sumsq) sums their gradients
 * over every data-parallel rank, t->comm — which HSDP once swapped for the node's group while its
 * hooks ran: summed over the node only, the run ended 1.5e-5 of max|w| away. */
Test(ch09_hsdp, with_tensor_parallelism_equals_zero3, .timeout = 60) {
#define TPRUN                                                                                       \
  ZL_BIN "/ch07_pipeline --pp 1 --tp 2 --zero 3 --layers 3 --hidden 48 --input 20 --classes 6 " RUN \
         " --steps 3 --clip 0.05"
  zl_out_t h = zl_launch(4, 60, "hsdp_tp", "hsdp", NODES TPRUN " --shard-group node");
  zl_out_t z = zl_launch(4, 60, "hsdp_tp", "zero3", NODES TPRUN);
  cr_assert(strstr(h.json, "hsdp"), "the run is not HSDP:\n%s", h.text);
  cr_assert_eq(h.n, z.n, "HSDP %lld weights, ZeRO-3 %lld", (long long)h.n, (long long)z.n);
  double gap =
      zl_expect_close_norm("HSDP x TP 2 vs ZeRO-3 x TP 2, --clip 0.05", h.params, z.params, z.n, 1e-6);
  cr_log_info("HSDP x TP vs ZeRO-3 x TP: largest |difference| / max|w|: %.2g (tolerance 1e-06)", gap);
  zl_out_free(&h), zl_out_free(&z);
#undef TPRUN
}

/* HSDP under the zero-bubble schedules (chapter 07's split backward: the W of a unit's last micro-batch
 * makes its gradient final, and HSDP's hooks are ZeRO-3's, grad_ready included): P = 2 stages x D = 2
 * replicas, each stage's replicas on two nodes (the shard group one rank, the all-reduce across does
 * the sum), equals 2-rank DDP with --accum 4 bit for bit, every weight and loss — as every strategy
 * under GPipe, 1F1B and interleaved does (tests/mpi/test_compose.c: the same shapes, order and a + b
 * sums). Before, HSDP had no grad_ready and the zero-bubble schedules refused it. */
Test(ch09_hsdp, under_zero_bubble_schedules_equals_ddp_accum, .timeout = 90) {
#define ZBMLP "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 3 --timeout-s 30"
  zl_out_t ref = zl_launch(2, 60, "hsdp_zb", "ref", ZL_BIN "/ch02_ddp --variant naive " ZBMLP " --accum 4");
  static const char *const sched[2] = {"zb-h1", "zb-h2"};
  for (int i = 0; i < 2; i++) {
    char what[128];
    snprintf(what, sizeof what, "HSDP under %s, P 2 x D 2 vs 2-rank DDP --accum 4", sched[i]);
    zl_out_t r = zl_launch(4, 60, "hsdp_zb", sched[i],
                           NODES ZL_BIN "/ch07_pipeline " ZBMLP " --pp 2 --micro-batches 4 "
                                        "--schedule %s --zero 3 --shard-group node",
                           sched[i]);
    cr_assert(strstr(r.json, "hsdp"), "%s: the --json does not name hsdp", what);
    cr_assert_eq(r.n, ref.n, "%s: %lld weights, expected %lld", what, (long long)r.n, (long long)ref.n);
    zl_expect_floats(what, r.params, ref.params, r.n, 0);
    zl_expect_same_losses(what, r.json, ref.json);
    zl_out_free(&r);
  }
  zl_out_free(&ref);
#undef ZBMLP
}
