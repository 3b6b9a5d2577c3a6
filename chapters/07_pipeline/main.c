/* ch07_pipeline — pipeline parallelism: the model's units in P stages, M micro-batches per step,
 * naive / GPipe / 1F1B schedules, the bubble measured against its formula (notes/07-pipeline.md).
 *   make run CH=07 NP=4 ARGS="--pp 4 --micro-batches 8 --schedule 1f1b"
 * With --tp T (3-D: N = D x P x T): every stage's units split over T consecutive ranks
 * (solutions/tp.c), the pipelines made of the ranks / T data-parallel ranks.
 * The loop, the report and the flags are common/train.c; the strategy is solutions/pipeline.c. */
#include "pipeline.h" // pipeline_strategy
#include "tp.h"       // tp_transform (--tp)
#include "train.h"    // train_cfg_t, train_parse_args, train_main

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "ch07_pipeline",
                   "Chapter 07: pipeline parallelism. The units are cut into P stages (one per rank); each\n"
                   "step is M micro-batches whose activations flow forward and gradients backward between\n"
                   "neighbour stages, in the order of --schedule; the bubble is measured beside its formula.\n"
                   "--tp T adds tensor parallelism inside every stage (3-D with the data dimension).\n"
                   "Run with: make run CH=07 NP=4 ARGS=\"--pp 4 --micro-batches 8 --schedule 1f1b\"",
                   TRAIN_FLAG_PIPELINE | TRAIN_FLAG_TP);
  cfg.transform = &tp_transform;
  return train_main(&cfg, pipeline_strategy(cfg.schedule), "07_pipeline");
}
