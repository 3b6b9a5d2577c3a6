/* ch07_pipeline — pipeline parallelism: the model's units in P stages, M micro-batches per step,
 * naive / GPipe / 1F1B schedules, the bubble measured against its formula (notes/07-pipeline.md).
 *   make run CH=07 NP=4 ARGS="--pp 4 --micro-batches 8 --schedule 1f1b"
 * With --tp T (3-D: N = D x P x T): every stage's units split over T consecutive ranks
 * (solutions/tp.c), the pipelines made of the ranks / T data-parallel ranks.
 * The loop, the report and the flags are common/train/loop.c; the schedule is solutions/pipeline.c;
 * the data dimension (--zero S over the D = ranks / (P x T) replicas of each stage) is the
 * strategy of chapters 02-05: solutions/ddp.c, zero1.c, zero2.c, zero3.c.
 *   ch07_pipeline --simulate --schedule dualpipev --pp 4 --costs 1,2,1,3   (no ranks: the simulator's
 * bubble per rank and DeepSeek's table, solutions/pipeline_table.c; notes/07d-dualpipev.md) */
#include "args.h"     // args_env_world, args_error
#include "offload.h"  // offload_take_flags, offload_strategy (--offload optimizer)
#include "pipeline.h" // pipeline_schedule
#include "pipeline_sched.h" // pp_schedule_parse, pp_splits_backward (a split backward's W)
#include "pipeline_table.h" // pp_table_main (--simulate: DeepSeek's table, no ranks)
#include "tp.h"       // tp_transform (--tp)
#include "train.h"    // train_cfg_t, train_parse_args, train_main
#include "zero.h"     // zero_strategy_for, hsdp_strategy (--zero 0|1|2|3, --variant)
#include <stdio.h>    // snprintf
#include <string.h>   // strcmp, strncmp

int main(int argc, char **argv) {
  int sim = pp_table_main(argc, argv); /* --simulate: the simulator's table, before MPI */
  if (sim >= 0) return sim;
  /* the data dimension's strategy is any of chapters 02-05, 08 and 09 (notes/design.md, "The process
   * grid"): DDP's variant (default here: naive, one all-reduce of the stage's gradient after its
   * last backward), ZeRO-1/2/3, ZeRO-2 with the optimizer offloaded, HSDP */
  int variant_given = 0;
  for (int i = 1; i < argc; i++)
    variant_given |= !strcmp(argv[i], "--variant") || !strncmp(argv[i], "--variant=", 10);
  offload_kind_t offload = OFFLOAD_NONE;
  int threads = 1;
  int rc = offload_take_flags(&argc, argv, &offload, &threads, NULL);
  if (rc) return rc;
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch07_pipeline",
      "Chapter 07: pipeline parallelism. The units are cut into P stages (one per rank); each\n"
      "step is M micro-batches whose activations flow forward and gradients backward between\n"
      "neighbour stages, in the order of --schedule; the bubble is measured beside its formula.\n"
      "--tp T adds tensor parallelism inside every stage (3-D with the data dimension), and the\n"
      "data dimension takes any strategy: --zero 0 (DDP, --variant naive|overlap|bucketed),\n"
      "--zero 1|2|3, --zero 2 --offload optimizer [--host-threads K], --zero 3 --shard-group node.\n"
      "Run with: make run CH=07 NP=4 ARGS=\"--pp 4 --micro-batches 8 --schedule 1f1b\"",
      TRAIN_FLAG_PIPELINE | TRAIN_FLAG_TP | TRAIN_FLAG_PREFETCH | TRAIN_FLAG_VARIANT | TRAIN_FLAG_BUCKET |
          TRAIN_FLAG_SHARD_GROUP);
  cfg.transform = cfg.sp ? &tp_sp_transform : &tp_transform; /* --sp: the sequence split too (tp_sp.h) */
  cfg.group = cfg.tp;
  cfg.sched = pipeline_schedule(cfg.schedule);
  cfg.host_threads = threads; /* --offload optimizer's host step */
  char v[32];
  /* what does not compose is refused here, before MPI, naming why */
  if (variant_given && cfg.zero != 0) {
    snprintf(v, sizeof v, "%s", cfg.variant);
    return args_error("--variant", v, "is DDP's (--zero 0); --zero %d has no variants", cfg.zero);
  }
  if (offload != OFFLOAD_NONE && cfg.zero != 2) {
    snprintf(v, sizeof v, "%d", cfg.zero);
    return args_error(
        "--zero", v,
        "must be 2 with --offload optimizer (ZeRO-Offload is ZeRO-2 with the optimizer on the host)");
  }
  if (cfg.shard_group_node && cfg.zero != 3) {
    snprintf(v, sizeof v, "%d", cfg.zero);
    return args_error("--zero", v, "must be 3 with --shard-group node (HSDP is ZeRO-3 inside a node)");
  }
  if (!variant_given) cfg.variant = "naive";
  /* the data dimension: D replicas of every stage (one: nothing to shard, DDP's all-reduce of one rank) */
  int D = args_env_world() / (cfg.tp * cfg.pp), z = D > 1 ? cfg.zero : 0;
  const strategy_t *s = offload != OFFLOAD_NONE         ? offload_strategy(offload)
                        : z == 3 && cfg.shard_group_node ? hsdp_strategy()
                                                         : zero_strategy_for(z, cfg.variant);
  /* a split backward (zb-h1, zb-h2): a unit's gradient is final after its last W, and a strategy that
   * reduces as the backward goes must say when that is (its grad_ready hook, train.h) */
  if (pp_splits_backward(pp_schedule_parse(cfg.schedule)) && s->post_backward && !s->grad_ready) {
    if (offload != OFFLOAD_NONE) snprintf(v, sizeof v, "--offload optimizer");
    else if (variant_given) snprintf(v, sizeof v, "--variant %s", cfg.variant);
    else snprintf(v, sizeof v, "--zero %d", cfg.zero);
    return args_error("--schedule", cfg.schedule,
                      "cannot go with %s (strategy %s reduces in the backward and cannot tell when a W "
                      "made a gradient final); use --schedule 1f1b, or a --zero whose strategy can "
                      "(0 naive, 1, 2, 3)",
                      v, s->name);
  }
  return train_main(&cfg, s, "07_pipeline");
}
