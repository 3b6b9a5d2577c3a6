/* ch12_experts — Mixture of Experts and expert parallelism (solutions/moe.h, solutions/ep.h;
 * notes/12-experts.md). The GPT's MLPs become --moe E experts (every --moe-every m-th block), the
 * router sends each token to --topk k of them, with a capacity (--capacity-factor cf) or dropless;
 * --ep P_E consecutive ranks split the experts and move the tokens by all-to-all; --zero S chooses
 * the strategy on the data dimension (the D = ranks / P_E replicas of each expert); --tp T splits the
 * attention over T consecutive ranks inside each EP group (solutions/ep_tp.c).
 *   make run CH=12 NP=2 ARGS="--model gpt --gpt tiny --moe 4 --topk 2 --ep 2"   EP 2, dropless */
#include "ep.h"     // ep_transform, ep_tp_transform
#include "moe.h"    // moe_check_args, moe_transform
#include "zero.h"   // zero_strategy_for (--zero 0|1|2|3)
#include "train.h"  // train_cfg_t, train_parse_args, train_main, TRAIN_FLAG_*

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch12_experts",
      "Mixture of Experts: every --moe-every m-th GPT block has --moe E expert MLPs and a router that sends "
      "each\n"
      "token to --topk k of them (fp32 softmax, Switch's load-balancing loss --aux-loss-coeff, "
      "DeepSeek-V3's\n"
      "bias --router-bias-rate); --capacity-factor cf pads each expert to ceil(cf x tokens x k / E) rows "
      "and\n"
      "drops the rest, 0 is dropless; --ep P_E consecutive ranks split the experts (all-to-all dispatch and\n"
      "combine), the rest data-parallel over all ranks; --tp T: T ranks of each EP group split the "
      "attention\n"
      "(they read the same samples and route 1/T of their tokens each); --zero 0|1|2|3 on the data "
      "dimension.\n"
      "Example: make run CH=12 NP=2 ARGS=\"--model gpt --gpt tiny --moe 4 --topk 2 --ep 2\"",
      TRAIN_FLAG_MOE | TRAIN_FLAG_ZERO | TRAIN_FLAG_BUCKET | TRAIN_FLAG_PREFETCH);
  int rc = moe_check_args(&cfg); /* before MPI and any allocation */
  if (rc) return rc;
  /* the experts on every rank (--ep 1), or split over --ep P_E consecutive ranks (ep.h), with --tp T
   * of them splitting the attention (ep_tp.c) */
  cfg.transform = cfg.ep == 1 ? &moe_transform : cfg.tp > 1 ? &ep_tp_transform : &ep_transform;
  cfg.group = cfg.ep;
  if (cfg.tp > 1) cfg.pa = 0;
  return train_main(&cfg, zero_strategy_for(cfg.zero, "bucketed"), "12_experts");
}
