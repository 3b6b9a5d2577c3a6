/* ch02_ddp — data-parallel training three ways: naive, per-unit overlap, buckets (notes/02-ddp.md).
 *   make run CH=02 NP=2 ARGS="--variant naive"
 * The loop, the report and the flags are common/train/loop.c; the strategy is solutions/ddp.c. */
#include "ddp.h"   // ddp_strategy
#include "train.h" // train_cfg_t, train_parse_args, train_main

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "ch02_ddp",
                   "Chapter 02: DDP. Every rank holds the whole model and all-reduces the gradients:\n"
                   "after the backward (naive), per unit as soon as it is done (overlap), or in buckets\n"
                   "(bucketed, PyTorch DDP). Run with: make run CH=02 NP=2 ARGS=\"--variant naive\"",
                   TRAIN_FLAG_VARIANT | TRAIN_FLAG_BUCKET);
  return train_main(&cfg, ddp_strategy(cfg.variant), "02_ddp");
}
