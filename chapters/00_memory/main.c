/* ch00_memory — the ZeRO memory calculator: Ψ parameters, N ranks, a precision and K bytes of
 * optimizer state per parameter -> bytes each rank holds for params, grads and optimizer states
 * at every ZeRO stage, beside the formula. Plain C: no MPI calls, no allocation beyond flags.
 * --fp32-grads adds the fp32 gradient-accumulation buffer of bf16 runs (+4Ψ, 20Ψ in all), which
 * is sharded with the gradients (stages 2 and 3).
 * Notes: notes/00-memory.md (the 16Ψ story). Reproduces Figure 1 of Rajbhandari et al. 2020:
 *   ch00_memory --params 7.5B --ranks 64      ->  120.0, 31.4, 16.6, 1.9 GB per rank.
 * With a transformer shape (--layers --hidden --heads --seq [--micro-batch --vocab]) it adds the
 * activations of one micro-batch (notes/gpt.md): Korthikanti et al. 2022's 16-bit count
 * s·b·h·(34 + 5·a·s/h) bytes per layer, with and without full recomputation, beside this
 * repository's fp32 GPT of the same shape (gpt_acts_bytes, common/model/gpt.h). Activations are the
 * same at every stage: ZeRO shards model states, not activations. --tp t adds the activations per
 * rank of t-way tensor parallelism, and with sequence parallelism (gpt_acts_bytes_tp). --pp P, --cp C
 * and --offload: the pipeline's stages (chapter 07: each stage's states and the activations 1F1B keeps
 * in flight), context parallelism's activations of S/C positions (chapter 10), ZeRO-Offload's device
 * and host (chapter 08).
 * With the default K and no --fp32-grads the stages' numbers are what the strategies of chapters
 * 02-05 say about themselves (strategy_t.formula: solutions/ddp.c, zero1.c, zero2.c, zero3.c) —
 * the formulas their training reports print beside the ledger; otherwise the paper's generic form.
 * The calculator itself is common/train/memcalc.c (memcalc_main): the explorer page runs the same
 * code in the browser (common/explorer/); this file gives it the strategies' hooks
 * (solutions/stage_states.c).
 * --goodput (chapter 14, common/train/goodput.c) is another calculator: Young's checkpoint interval
 * √(2δM) and the expected goodput from the mean time between failures, a checkpoint's and a
 * restart's cost: ch00_memory --goodput --mtbf-h 3.09 --ckpt-s 30 --restart-s 300. */
#include "goodput.h"      // goodput_main: --goodput, the checkpoint interval and the goodput
#include "memcalc.h"      // memcalc_main: the calculator, flags to table
#include "pipeline_sched.h" // pp_split: --pp cuts the GPT's units as ch07_pipeline does
#include "stage_states.h"   // strategy_stage_states: the stages' formula hooks
#include <stdio.h>          // stdout
#include <string.h>         // strcmp

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--goodput") == 0) return goodput_main(argc, argv, stdout);
  return memcalc_main(argc, argv, strategy_stage_states, pp_split, stdout);
}
