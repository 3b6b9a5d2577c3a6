/* ch12_experts — Mixture of Experts and expert parallelism (solutions/moe.h, solutions/ep.h;
 * notes/12-experts.md). The GPT's MLPs become --moe E experts (every --moe-every m-th block), the
 * router sends each token to --topk k of them, with a capacity (--capacity-factor cf) or dropless;
 * --ep P_E consecutive ranks split the experts and move the tokens by all-to-all; --zero S chooses
 * the strategy on the data dimension (the D = ranks / P_E replicas of each expert); --tp T splits the
 * attention over T consecutive ranks inside each EP group (solutions/ep_tp.c). --pp P cuts the MoE GPT
 * into chapter 07's pipeline stages (solutions/pipeline.c; --schedule, --micro-batches M): the transform
 * as in chapter 07 with --tp, the EP groups inside each stage (rank = (dp·P + stage)·P_E + ep).
 *   make run CH=12 NP=2 ARGS="--model gpt --gpt tiny --moe 4 --topk 2 --ep 2"   EP 2, dropless
 *   make run CH=12 NP=4 ARGS="--model gpt --gpt tiny --moe 4 --topk 2 --ep 2 --pp 2 --micro-batches 4" */
#include "ep.h"     // ep_transform, ep_tp_transform
#include "moe.h"    // moe_check_args, moe_transform
#include "pipeline.h" // pipeline_schedule (--pp)
#include "zero.h"   // zero_strategy_for (--zero 0|1|2|3)
#include "train.h"  // train_cfg_t, train_parse_args, train_main, TRAIN_FLAG_*
#include <string.h> // strcmp, strncmp

/* 1 when a pipeline flag is given (or --help, to list them): chapter 07's flags, its checks and --accum 1;
 * without them chapter 12 runs as before (--accum, no stages). */
static int wants_pipeline(int argc, char **argv) {
  const char *fl[] = {"--pp",           "--micro-batches", "--schedule",
                      "--virtual-stages", "--post-validate", "--help"};
  for (int i = 1; i < argc; i++)
    for (size_t f = 0; f < sizeof fl / sizeof fl[0]; f++) {
      size_t n = strlen(fl[f]);
      if (!strncmp(argv[i], fl[f], n) && (argv[i][n] == 0 || argv[i][n] == '=')) return 1;
    }
  return 0;
}

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
      "--pp P: chapter 07's pipeline stages over the MoE GPT, the EP groups inside each stage.\n"
      "Example: make run CH=12 NP=2 ARGS=\"--model gpt --gpt tiny --moe 4 --topk 2 --ep 2\"",
      TRAIN_FLAG_MOE | TRAIN_FLAG_ZERO | TRAIN_FLAG_BUCKET | TRAIN_FLAG_PREFETCH |
          (wants_pipeline(argc, argv) ? TRAIN_FLAG_PIPELINE : 0u));
  int rc = moe_check_args(&cfg); /* before MPI and any allocation */
  if (rc) return rc;
  /* the experts on every rank (--ep 1), or split over --ep P_E consecutive ranks (ep.h), with --tp T
   * of them splitting the attention (ep_tp.c) */
  cfg.transform = cfg.ep == 1 ? &moe_transform : cfg.tp > 1 ? &ep_tp_transform : &ep_transform;
  cfg.group = cfg.ep;
  if (cfg.tp > 1) cfg.pa = 0;
  /* --pp: chapter 07's schedule around the transform, as chapter 07 composes it with --tp */
  cfg.sched = wants_pipeline(argc, argv) ? pipeline_schedule(cfg.schedule) : NULL;
  /* DDP's variant: bucketed alone; in a pipeline chapter 07's naive (one all-reduce of the stage's
   * gradient after its last backward or W: the split schedules' grad_ready) */
  return train_main(&cfg, zero_strategy_for(cfg.zero, cfg.sched ? "naive" : "bucketed"), "12_experts");
}
