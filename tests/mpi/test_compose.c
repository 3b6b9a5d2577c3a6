/* test_compose.c — every layout composes (notes/design.md, "The process grid"): each data-dimension
 * strategy — DDP naive, overlap and bucketed; ZeRO-1, -2, -3; ZeRO-2 with the optimizer offloaded;
 * HSDP — under each pipeline schedule (GPipe, 1F1B, interleaved v = 2), on the MLP and the GPT, with
 * P = 2 stages and D = 2 replicas (4 ranks), trains exactly like 2-rank DDP (naive) with --accum M:
 * every loss and every final weight, bitwise.
 *
 * Why bitwise is right here (notes/design.md, "Bits or a tolerance"): each replica's stages run the
 * reference's GEMMs on the same micro-batch shapes in the same order (every unit sees its backwards
 * in micro-batch order), and at D = 2 every gradient sum is a + b, whatever the strategy reduces
 * with (an all-reduce, a reduce-scatter, in buckets, on the host). The reference itself equals 1
 * rank within 1e-5 (chapter 02's contract 1, tests/mpi/test_ddp.c).
 *
 * What it catches: a strategy that silently diverges under a pipeline — e.g. DDP's buckets counted
 * over the units a stage does not hold (a bucket that starts on another stage is never all-reduced,
 * and the replicas drift apart with no error). Suite common_compose: every strategy once (1F1B, the
 * MLP) and the GPT under the interleaved schedule; common_compose_long (make test-long): the whole
 * matrix, 8 strategies x 3 schedules x 2 models. */
#include "zl_test.h" // zl_launch, zl_expect_floats, zl_json_*

#define MLP "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7"
#define STEPS " --steps 3"
#define GPT \
  "--model gpt --gpt tiny --batch 8 --seed 5 --steps 3 --device cpu --data /usr/share/games/fortunes/cookie"
#define M_MICRO 4

static const char *const MODELS[2] = {MLP STEPS, GPT};
static const char *const MODEL_NAMES[2] = {"mlp", "gpt"};
static const struct { const char *name, *flags; } STRATEGIES[8] = {
    {"ddp-naive", "--zero 0"},
    {"ddp-overlap", "--zero 0 --variant overlap"},
    /* the default 0.1 MiB: one bucket spanning both stages' units */
    {"ddp-bucketed", "--zero 0 --variant bucketed"},
    {"zero1", "--zero 1"},
    {"zero2", "--zero 2"},
    {"zero3", "--zero 3"},
    {"zero2-offload", "--zero 2 --offload optimizer"},
    {"hsdp", "--zero 3 --shard-group node"},
};
static const char *const SCHEDULES[3] = {"--schedule 1f1b", "--schedule gpipe",
                                         "--schedule interleaved --virtual-stages 2"};

/* The reference of model m: 2-rank DDP (naive) with --accum M. */
static zl_out_t reference(int m) {
  char name[32];
  snprintf(name, sizeof name, "ref_%s", MODEL_NAMES[m]);
  return zl_launch(2, 120, "compose", name, ZL_BIN "/ch02_ddp --variant naive %s --accum %d --timeout-s 30",
                   MODELS[m], M_MICRO);
}

/* Strategy s under schedule c on model m, P = 2 x D = 2, against ref. HSDP's node map: ranks 0, 1
 * (stage 0 and stage 1 of replica 0) on node 0, ranks 2, 3 on node 1 — each stage's replicas on two
 * nodes, so HSDP's shard group is one rank and its cross-node all-reduce does the sum. */
static void one(int m, int s, int c, const zl_out_t *ref) {
  char name[64], what[256];
  snprintf(name, sizeof name, "%s_%s_%d", MODEL_NAMES[m], STRATEGIES[s].name, c);
  snprintf(what, sizeof what, "%s, %s, %s, P 2 x D 2 vs 2-rank DDP --accum %d", MODEL_NAMES[m],
           STRATEGIES[s].name, SCHEDULES[c], M_MICRO);
  zl_out_t r = zl_launch(4, 120, "compose", name,
                         "env ZL_NODE_OF_RANK=0,0,1,1 " ZL_BIN
                         "/ch07_pipeline %s --pp 2 --micro-batches %d %s %s --timeout-s 30",
                         MODELS[m], M_MICRO, SCHEDULES[c], STRATEGIES[s].flags);
  cr_assert_eq(r.n, ref->n, "%s: %lld weights, expected %lld", what, (long long)r.n, (long long)ref->n);
  zl_expect_floats(what, r.params, ref->params, r.n, 0);
  zl_expect_same_losses(what, r.json, ref->json);
  /* the strategy the report names is the one asked for (a flag dropped on the way would pass above
   * only by luck of an identical strategy) */
  cr_assert(strstr(r.json, STRATEGIES[s].name), "%s: the --json does not name strategy %s", what,
            STRATEGIES[s].name);
  zl_out_free(&r);
}

Test(common_compose, every_strategy_under_1f1b_and_the_gpt_interleaved, .timeout = 300) {
  zl_out_t ref = reference(0);
  for (int s = 0; s < 8; s++) one(0, s, 0, &ref);
  zl_out_free(&ref);
  ref = reference(1);
  one(1, 2, 2, &ref); /* DDP's buckets with two chunks per rank */
  one(1, 5, 2, &ref);
  zl_out_free(&ref);
}

Test(common_compose_long, every_strategy_every_schedule_both_models, .timeout = 900) {
  for (int m = 0; m < 2; m++) {
    zl_out_t ref = reference(m);
    for (int c = 0; c < 3; c++)
      for (int s = 0; s < 8; s++) one(m, s, c, &ref);
    zl_out_free(&ref);
  }
}

/* What does not compose is refused before anything starts: one line naming the flag, exit 2. */
Test(common_compose, what_does_not_compose_is_refused, .timeout = 60) {
  static const struct { const char *flags, *says; } bad[] = {
      {"--zero 1 --variant overlap", "error: --variant overlap: is DDP's (--zero 0)"},
      {"--zero 3 --offload optimizer", "error: --zero 3: must be 2 with --offload optimizer"},
      {"--zero 2 --shard-group node", "error: --zero 2: must be 3 with --shard-group node"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char args[512];
    snprintf(args, sizeof args, MLP " --pp 2 %s", bad[i].flags);
    zl_expect_refused(4, "ch07_pipeline", args, bad[i].says);
  }
}

/* Per-step rates divide by the steps this run made: a run resumed at step 2 of 4 reports the
 * same pipeline p2p and CP K/V bytes per step as the straight run (they used to divide by --steps
 * and came out half as large after a resume). */
Test(common_compose, per_step_bytes_after_a_resume, .timeout = 120) {
  static const struct { int np; const char *cmd, *key;
  } runs[2] = {
      {2, ZL_BIN "/ch07_pipeline " MLP " --pp 2 --micro-batches 4 --steps 4", "p2p_bytes_per_step_per_rank"},
      {2, ZL_BIN "/ch10_long --model gpt --gpt tiny --seq-len 16 --batch 4 --steps 4 --cp 2 --device cpu",
       "cp_kv_bytes_per_step"},
  };
  for (int i = 0; i < 2; i++) {
    char dir[256], name[32];
    zl_tmpdir(dir, sizeof dir, "compose_rates");
    snprintf(name, sizeof name, "straight%d", i);
    zl_out_t a = zl_launch(runs[i].np, 60, "compose_rates", name,
                           "%s --ckpt %s/ck%d --save-every 2 --timeout-s 30", runs[i].cmd, dir, i);
    snprintf(name, sizeof name, "resumed%d", i);
    zl_out_t b = zl_launch(runs[i].np, 60, "compose_rates", name,
                           "%s --resume %s/ck%d/step-000002 --timeout-s 30", runs[i].cmd, dir, i);
    double x = zl_json_num(a.json, runs[i].key), y = zl_json_num(b.json, runs[i].key);
    cr_assert(x > 0 && x == y, "%s: straight run %.17g, resumed at step 2 %.17g (the steps run, not --steps)",
              runs[i].key, x, y);
    zl_out_free(&a);
    zl_out_free(&b);
  }
}
