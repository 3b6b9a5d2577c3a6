/* ch06_tp — tensor parallelism (Megatron-LM) in training: --tp T consecutive ranks split every
 * layer of the model (solutions/tp.h's tp_transform: the MLP's column/row pairs, the GPT's heads,
 * MLP and vocabulary), --zero S chooses the strategy on the ranks / T data-parallel groups.
 * Notes: notes/06-tensor-parallel.md.
 *   make run CH=06 NP=4 ARGS="--tp 2 --zero 1"   TP groups of 2, ZeRO-1 over the 2 DP groups
 * --sp (the GPT): Megatron's sequence parallelism on top (solutions/tp_sp.h; notes/10-long-sequences.md).
 * The chapter's other programs: ch06_example (the worked example), ch06_mlp_check (the split MLP
 * block against 1 rank), ch06_grid (the process grid): make run CH=06 NP=2 PROG=example. */
#include "args.h"   // args_error
#include "tp.h"     // tp_transform
#include "zero.h"   // zero_strategy_for (--zero 0|1|2|3)
#include "train.h"  // train_cfg_t, train_parse_args, train_main, TRAIN_FLAG_*
#include <stdio.h>  // snprintf
#include <string.h> // strcmp

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch06_tp",
      "Training with tensor parallelism: --tp T consecutive ranks split every layer pair (column, then\n"
      "row-parallel), --zero 0|1|2|3 (0: DDP bucketed; 1/2/3: ZeRO) over the ranks / T data-parallel\n"
      "groups; --sp adds sequence parallelism (the GPT: notes/10-long-sequences.md). The chapter's\n"
      "other programs: ch06_example, ch06_mlp_check, ch06_grid.\n"
      "Example: make run CH=06 NP=4 ARGS=\"--tp 2 --zero 1\"",
      TRAIN_FLAG_TP | TRAIN_FLAG_ZERO | TRAIN_FLAG_BUCKET | TRAIN_FLAG_PREFETCH);
  cfg.transform = cfg.sp ? &tp_sp_transform : &tp_transform; /* --sp: the sequence split too (tp_sp.h) */
  cfg.group = cfg.tp;
  char v[32];
  /* the GPT's split (tp_gpt.c): refused before MPI starts */
  if (cfg.tp > 1 && strcmp(cfg.model_kind, "gpt") == 0) {
    snprintf(v, sizeof v, "%d", cfg.tp);
    if (cfg.gpt.n_head % cfg.tp)
      return args_error("--tp", v,
                        "the GPT's %d heads must split evenly over T ranks (--n-head divisible by T)",
                        cfg.gpt.n_head);
    if (cfg.sample || cfg.eval_every)
      return args_error(
          "--tp", v,
          "--sample and --eval-every need whole logits; the vocab-parallel head keeps V/T per row");
  }
  const strategy_t *s = zero_strategy_for(cfg.zero, "bucketed");
  return train_main(&cfg, s, "06_tp");
}
