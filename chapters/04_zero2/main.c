/* ch04_zero2 — ZeRO stage 2: optimizer states and gradients sharded (P_os+g).
 * Notes: notes/04-zero2.md. Run: make run CH=04 NP=4 ARGS="--steps 20 --trace /tmp/z2.json"
 * Each unit's gradient is reduce-scattered during backward (overlapped, like chapter 02's
 * buckets; here a unit is a bucket), and a rank keeps only its piece: 2Ψ + 14Ψ/N (bf16, Adam). */
#include "train.h" // train_cfg_t, train_parse_args, train_main
#include "zero.h"  // zero2_strategy
#include "owners.h" // owners_take_flag, owners_check, owners_zero2_strategy (--shard owner)

int main(int argc, char **argv) {
  int owner = 0; /* --shard flat (ZeRO's pieces, the default) | owner (each matrix on one rank: Muon) */
  int rc = owners_take_flag(&argc, argv, &owner);
  if (rc) return rc;
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch04_zero2",
      "ZeRO-2: optimizer states and gradients sharded; per-unit reduce-scatter overlapped with backward.\n"
      "--shard owner: each matrix's gradient reduced to the one rank that owns it (--optimizer muon).", 0);
  if (owner && (rc = owners_check(&cfg))) return rc;
  return train_main(&cfg, owner ? owners_zero2_strategy() : zero2_strategy(), "04_zero2");
}
