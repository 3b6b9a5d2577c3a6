/* ch04_zero2 — ZeRO stage 2: optimizer states and gradients sharded (P_os+g).
 * Notes: notes/04-zero2.md. Run: make run CH=04 NP=4 ARGS="--steps 20 --trace /tmp/z2.json"
 * Each unit's gradient is reduce-scattered during backward (overlapped, like chapter 02's
 * buckets; here a unit is a bucket), and a rank keeps only its piece: 2Ψ + 14Ψ/N (bf16, Adam). */
#include "train.h" // train_cfg_t, train_parse_args, train_main
#include "zero.h"  // zero2_strategy

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch04_zero2",
      "ZeRO-2: optimizer states and gradients sharded; per-unit reduce-scatter overlapped with backward.", 0);
  return train_main(&cfg, zero2_strategy(), "04_zero2");
}
