/* ch07_pipeline — pipeline parallelism: the model's units in P stages, M micro-batches per step,
 * naive / GPipe / 1F1B schedules, the bubble measured against its formula (notes/07-pipeline.md).
 *   make run CH=07 NP=4 ARGS="--pp 4 --micro-batches 8 --schedule 1f1b"
 * With --tp T (3-D: N = D x P x T): every stage's units split over T consecutive ranks
 * (solutions/tp.c), the pipelines made of the ranks / T data-parallel ranks.
 * The loop, the report and the flags are common/train/loop.c; the schedule is solutions/pipeline.c;
 * the data dimension (--zero S over the D = ranks / (P x T) replicas of each stage) is the
 * strategy of chapters 02-05: solutions/ddp.c, zero1.c, zero2.c, zero3.c. */
#include "args.h"     // args_env_world
#include "ddp.h"      // ddp_strategy (--zero 0)
#include "pipeline.h" // pipeline_schedule
#include "tp.h"       // tp_transform (--tp)
#include "train.h"    // train_cfg_t, train_parse_args, train_main
#include "zero.h"     // zero1_strategy, zero2_strategy, zero3_strategy (--zero 1|2|3)

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "ch07_pipeline",
                   "Chapter 07: pipeline parallelism. The units are cut into P stages (one per rank); each\n"
                   "step is M micro-batches whose activations flow forward and gradients backward between\n"
                   "neighbour stages, in the order of --schedule; the bubble is measured beside its formula.\n"
                   "--tp T adds tensor parallelism inside every stage (3-D with the data dimension).\n"
                   "Run with: make run CH=07 NP=4 ARGS=\"--pp 4 --micro-batches 8 --schedule 1f1b\"",
                   TRAIN_FLAG_PIPELINE | TRAIN_FLAG_TP | TRAIN_FLAG_PREFETCH);
  cfg.transform = cfg.sp ? &tp_sp_transform : &tp_transform; /* --sp: the sequence split too (tp_sp.h) */
  cfg.sched = pipeline_schedule(cfg.schedule);
  /* the data dimension: D replicas of every stage (one: nothing to shard, DDP's all-reduce of one rank);
   * DDP's naive variant: one all-reduce of the stage's gradient after its last backward */
  int D = args_env_world() / (cfg.tp * cfg.pp), z = D > 1 ? cfg.zero : 0;
  const strategy_t *s = z == 0 ? ddp_strategy("naive") : z == 1 ? zero1_strategy() : z == 2 ? zero2_strategy() : zero3_strategy();
  return train_main(&cfg, s, "07_pipeline");
}
