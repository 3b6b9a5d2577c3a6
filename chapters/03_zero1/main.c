/* ch03_zero1 — ZeRO stage 1: optimizer states sharded over the ranks (P_os).
 * Notes: notes/03-zero1.md. Run: make run CH=03 NP=4 ARGS="--steps 20 --precision bf16"
 * The report prints each rank's memory by category beside 4Ψ + 12Ψ/N (bf16, Adam) plus the
 * padding, and the bytes sent per step beside 2(N−1)/N·Ψ. */
#include "train.h" // train_cfg_t, train_parse_args, train_main
#include "zero.h"  // zero1_strategy

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch03_zero1",
      "ZeRO-1: optimizer states sharded; reduce-scatter grads, update own shard, all-gather params.", 0);
  return train_main(&cfg, zero1_strategy(), "03_zero1");
}
