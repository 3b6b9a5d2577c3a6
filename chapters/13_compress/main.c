/* ch13_compress — fewer bytes on the link: chapter 02's DDP with its buckets compressed
 * (notes/13-compression.md).
 *   make run CH=13 NP=2 ARGS="--compress powersgd:4"
 *   make run CH=13 NP=2 ARGS="--optimizer onebit-adam --warmup-steps 5"
 * The loop, the report and the flags are common/train/loop.c; PowerSGD is solutions/powersgd.c and
 * 1-bit Adam solutions/onebit.c, both over solutions/ddp.c's buckets. Without either it is ch02_ddp's
 * bucketed DDP (the run to compare with). */
#include "args.h"     // args_error
#include "ddp.h"      // ddp_strategy
#include "onebit.h"   // onebit_check_cfg, onebit_strategy
#include "powersgd.h" // powersgd_check_cfg, powersgd_strategy
#include "train.h"    // train_cfg_t, train_parse_args, train_main
#include <stdlib.h>   // exit

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "ch13_compress",
                   "Chapter 13: communication compression. DDP whose gradient buckets travel compressed:\n"
                   "--compress powersgd:R sends each bucket as a rank-R product with error feedback;\n"
                   "--optimizer onebit-adam --warmup-steps K: the momentum sent as signs after K\n"
                   "AdamW steps.\n"
                   "Run with: make run CH=13 NP=2 ARGS=\"--compress powersgd:4\"",
                   TRAIN_FLAG_VARIANT | TRAIN_FLAG_BUCKET | TRAIN_FLAG_COMPRESS);
  const char *flag = NULL, *value = NULL;
  char why[160];
  if (cfg.onebit_warmup && onebit_check_cfg(&cfg, &flag, &value, why, sizeof why))
    exit(args_error(flag, value, "%s", why));
  if (cfg.compress && powersgd_check_cfg(&cfg, &flag, why, sizeof why))
    exit(args_error(flag, cfg.compress, "%s", why));
  const strategy_t *s = cfg.onebit_warmup ? onebit_strategy()
                        : cfg.compress    ? powersgd_strategy()
                                          : ddp_strategy(cfg.variant);
  return train_main(&cfg, s, "13_compress");
}
