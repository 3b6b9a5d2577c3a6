/* ch12_experts — Mixture of Experts and expert parallelism (solutions/moe.h, solutions/ep.h;
 * notes/12-experts.md). The GPT's MLPs become --moe E experts (every --moe-every m-th block), the
 * router sends each token to --topk k of them, with a capacity (--capacity-factor cf) or dropless;
 * --ep P_E consecutive ranks split the experts and move the tokens by all-to-all; --zero S chooses
 * the strategy on the data dimension (the D = ranks / P_E replicas of each expert); --tp T splits the
 * attention over T consecutive ranks inside each EP group (solutions/ep_tp.c).
 *   make run CH=12 NP=2 ARGS="--model gpt --gpt tiny --moe 4 --topk 2 --ep 2"   EP 2, dropless */
#include "ddp.h"    // ddp_strategy (--zero 0)
#include "ep.h"     // ep_transform
#include "moe.h"    // moe_check_args, moe_setup, moe_strategy
#include "zero.h"   // zero1_strategy, zero2_strategy, zero3_strategy (--zero 1|2|3)
#include "train.h"  // train_cfg_t, train_parse_args, train_main, TRAIN_FLAG_*

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(argc, argv, &cfg, "ch12_experts",
                   "Mixture of Experts: every --moe-every m-th GPT block has --moe E expert MLPs and a router that sends each\n"
                   "token to --topk k of them (fp32 softmax, Switch's load-balancing loss --aux-loss-coeff, DeepSeek-V3's\n"
                   "bias --router-bias-rate); --capacity-factor cf pads each expert to ceil(cf x tokens x k / E) rows and\n"
                   "drops the rest, 0 is dropless; --ep P_E consecutive ranks split the experts (all-to-all dispatch and\n"
                   "combine), the rest data-parallel over all ranks; --tp T: T ranks of each EP group split the attention\n"
                   "(they read the same samples and route 1/T of their tokens each); --zero 0|1|2|3 on the data dimension.\n"
                   "Example: make run CH=12 NP=2 ARGS=\"--model gpt --gpt tiny --moe 4 --topk 2 --ep 2\"",
                   TRAIN_FLAG_MOE | TRAIN_FLAG_ZERO | TRAIN_FLAG_BUCKET | TRAIN_FLAG_PREFETCH);
  int rc = moe_check_args(&cfg); /* before MPI and any allocation */
  if (rc) return rc;
  cfg.model_hook = moe_setup;
  if (cfg.ep > 1 && cfg.tp > 1) /* --tp T inside the EP group (ep_tp.c): its T consecutive ranks split the attention */
    cfg.ep_tp = cfg.tp, cfg.pa = 0, cfg.tp = cfg.ep, cfg.transform = &ep_tp_transform;
  else if (cfg.ep > 1) cfg.tp = cfg.ep, cfg.transform = &ep_transform; /* the EP group where TP's would be (ep.h) */
  const strategy_t *s = cfg.zero == 0 ? ddp_strategy("bucketed") : cfg.zero == 1 ? zero1_strategy()
                      : cfg.zero == 2 ? zero2_strategy() : zero3_strategy();
  return train_main(&cfg, moe_strategy(s), "12_experts");
}
