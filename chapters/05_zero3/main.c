/* ch05_zero3 — ZeRO stage 3 / FSDP FULL_SHARD: params, gradients and optimizer states sharded.
 * Notes: notes/05-zero3.md. Run: make run CH=05 NP=4 ARGS="--steps 20 --prefetch 1 --trace /tmp/z3.json"
 * --prefetch auto (default) picks 1 or 0 for this machine and prints why (solutions/zero3.c).
 * Units are all-gathered just before their forward and backward (--prefetch K ahead) and freed
 * after use: 16Ψ/N resident (bf16, Adam), plus about K+1 gathered units in flight. */
#include <stdio.h>  // snprintf
#include "args.h"  // args_error
#include "qwz.h"   // qwz_check_cfg (--qwz, ZeRO++'s int8 gathers: notes/13-compression.md)
#include "qgz.h"   // qgz_check_cfg (--qgz, ZeRO++'s int4 gradients in two hops: the same notes)
#include "train.h" // train_cfg_t, train_parse_args, train_main
#include "zero.h"  // zero3_strategy, hsdp_strategy

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch05_zero3",
      "ZeRO-3 (FSDP FULL_SHARD): everything sharded; units gathered on use, --prefetch K ahead\n"
      "(auto, the default: 1 where communication has its own engine or a spare core per rank, else 0).",
      TRAIN_FLAG_PREFETCH | TRAIN_FLAG_SHARD_GROUP);
  /* The one check of --prefetch beyond the flag's range: before MPI, exit 2 (zero3.c trusts it). */
  int n_units = cfg.layers + 1; /* prefetching more units than the model has means nothing */
  if (cfg.prefetch > n_units) {
    char v[32];
    snprintf(v, sizeof v, "%d", cfg.prefetch);
    return args_error("--prefetch", v, "must be an integer in [0, %d] (the unit count, --layers + 1)",
                      n_units);
  }
  const char *flag = NULL;
  char why[160];
  if (cfg.qwz && qwz_check_cfg(&cfg, &flag, why, sizeof why)) return args_error(flag, NULL, "%s", why);
  if (cfg.qgz && qgz_check_cfg(&cfg, &flag, why, sizeof why)) return args_error(flag, NULL, "%s", why);
  return train_main(&cfg, cfg.shard_group_node ? hsdp_strategy() : zero3_strategy(), "05_zero3");
}
