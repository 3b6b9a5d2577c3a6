/* ch10_long — long sequences: context parallelism (ring attention with an online softmax, or with
 * --cp-comm a2a DeepSpeed-Ulysses' all-to-alls, or with --cp-a2a A the 2-D hybrid of both:
 * solutions/ulysses.h).
 * --cp C consecutive ranks share every sequence, S/C positions each (solutions/cp.h); --zero S
 * chooses the strategy on all the ranks (the C·D of the CP × DP grid: the weights are whole on
 * every rank, their gradients summed over CP and DP alike). Notes: notes/10-long-sequences.md.
 *   make run CH=10 NP=4 ARGS="--model gpt --gpt tiny --cp 2 --zero 1"   CP 2 × DP 2, ZeRO-1
 * Megatron sequence parallelism (--sp) is chapter 06's flag beside --tp. */
#include "cp.h"     // cp_check_args, cp_transform
#include "zero.h"   // zero_strategy_for (--zero 0|1|2|3)
#include "train.h"  // train_cfg_t, train_parse_args, train_main, TRAIN_FLAG_*

int main(int argc, char **argv) {
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch10_long",
      "Training long sequences with context parallelism: --cp C consecutive ranks hold S/C positions of\n"
      "every sequence and pass K/V blocks round a ring for the attention (online softmax); --cp-balance 1\n"
      "(default) gives each rank two mirrored chunks so the causal work is even; --cp-comm a2a instead\n"
      "transposes q, k, v with an all-to-all to NH/C heads of the whole sequence (DeepSpeed-Ulysses), runs\n"
      "the ordinary attention and transposes the output back; --cp-a2a A does that all-to-all inside groups\n"
      "of A ranks and runs the ring across the C/A groups (the 2-D hybrid); --zero 0|1|2|3 over all\n"
      "the ranks (CP x DP). Example: make run CH=10 NP=4 ARGS=\"--model gpt --gpt tiny --cp 2 --zero 1\"",
      TRAIN_FLAG_CP | TRAIN_FLAG_ZERO | TRAIN_FLAG_BUCKET | TRAIN_FLAG_PREFETCH);
  int rc = cp_check_args(&cfg); /* before MPI and any allocation */
  if (rc) return rc;
  if (cfg.cp > 1) cfg.transform = &cp_transform; /* the sequence split over --cp C ranks (cp_gpt.c) */
  return train_main(&cfg, zero_strategy_for(cfg.zero, "bucketed"), "10_long");
}
