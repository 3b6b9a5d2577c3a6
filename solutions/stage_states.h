/* stage_states.h — a ZeRO stage's model states per rank as its strategy says them (strategy_t.formula
 * of solutions/ddp.c, zero1.c, zero2.c, zero3.c, offload.c): the states hook chapter 00's calculator
 * (common/train/memcalc.h) runs in ch00_memory, and its tests hold the explorer page's formulas to. */
#ifndef ZL_STAGE_STATES_H
#define ZL_STAGE_STATES_H
#include "memcalc.h" // mem_formula_t, MEMCALC_OFFLOAD, MEMCALC_NO_SYNC

/* Stage s (0 DDP .. 3, or MEMCALC_OFFLOAD, | MEMCALC_NO_SYNC under a pipeline) for Ψ = psi on N =
 * world ranks, AdamW, one micro-batch: master and the optimizer states together as the paper's KΨ. */
mem_formula_t strategy_stage_states(int s, double psi, int world, dtype_t wdt);
#endif
