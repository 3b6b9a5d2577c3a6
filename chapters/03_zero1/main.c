/* ch03_zero1 — ZeRO stage 1: optimizer states sharded over the ranks (P_os).
 * Notes: notes/03-zero1.md. Run: make run CH=03 NP=4 ARGS="--steps 20 --precision bf16"
 * The report prints each rank's memory by category beside 4Ψ + 12Ψ/N (bf16, Adam) plus the
 * padding, and the bytes sent per step beside 2(N−1)/N·Ψ. */
#include "train.h" // train_cfg_t, train_parse_args, train_main
#include "zero.h"  // zero1_strategy
#include "owners.h" // owners_take_flag, owners_check, owners_strategy (--shard owner)

int main(int argc, char **argv) {
  int owner = 0; /* --shard flat (ZeRO's pieces, the default) | owner (each matrix on one rank: Muon) */
  int rc = owners_take_flag(&argc, argv, &owner);
  if (rc) return rc;
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch03_zero1",
      "ZeRO-1: optimizer states sharded; reduce-scatter grads, update own shard, all-gather params.\n"
      "--shard owner: each matrix owned whole by one rank (what --optimizer muon needs; owners.h).", 0);
  if (owner && (rc = owners_check(&cfg))) return rc;
  return train_main(&cfg, owner ? owners_strategy() : zero1_strategy(), "03_zero1");
}
