/* formula.h — the formulas of notes/design.md that the programs print beside their
 * measurements (notes/00-memory.md). Ψ = parameter count, N = world size, all in bytes.
 *
 *   stage   params   grads    optimizer states (K bytes/param)   total (bf16, Adam: K = 12)
 *   0 DDP   2Ψ       2Ψ       KΨ                                  16Ψ
 *   1       2Ψ       2Ψ       KΨ/N                                4Ψ + 12Ψ/N
 *   2       2Ψ       2Ψ/N     KΨ/N                                2Ψ + 14Ψ/N
 *   3       2Ψ/N     2Ψ/N     KΨ/N                                16Ψ/N
 *
 * In fp32 mode params and grads are 4 bytes and there is no separate master (Adam: K = 8). */
#ifndef ZL_FORMULA_H
#define ZL_FORMULA_H
#include "dtype.h" // dtype_t

typedef struct mem_formula {
  double params, grads, master, optim; /* bytes per rank; master + optim = K·Ψ/(N or 1) */
  double total;
} mem_formula_t;

/* The paper's form: bytes per param for params and grads (2 in bf16), K bytes of optimizer
 * state per param (master included), Ψ parameters, N ranks, stage 0..3. master is 0 here
 * (it is part of K). */
mem_formula_t formula_zero_k(int stage, double psi, int world, double param_bytes, double grad_bytes,
                             double k);
/* The trainer's form: working dtype wdt (bf16: fp32 master of 4Ψ; fp32: none), optimizer with
 * opt_states fp32 buffers (AdamW 2: m and v; SGD-momentum 1). */
mem_formula_t formula_model_states(int stage, double psi, int world, dtype_t wdt, int opt_states);
/* Bytes sent per rank per step by ring algorithms: stages 0–2: 2(N−1)/N·Ψ·b, stage 3:
 * 3(N−1)/N·Ψ·b,
 * b = bytes per element of the communicated dtype. */
double formula_comm_bytes(int stage, double psi, int world, dtype_t wdt);
/* What a strategy says about itself (train.h's strategy_t.formula): its model-state bytes per rank
 * by category, in the device arena and in the host arena, its bytes sent per step, and the
 * formulas as text. */
typedef struct formula {
  double params, grads, master, optim; /* bytes per rank in the device arena (the whole run's peak) */
  double host;                          /* bytes per rank in the host arena (08's offloaded states) */
  double comm_bytes;                    /* bytes this rank sends per optimizer step (ring model) */
  char mem_text[64];                    /* "4Ψ + 12Ψ/N", "2Ψ + 2Ψ/N on the device" */
  char comm_text[64];                   /* "2(N-1)/N x psi x 2 B" */
  /* The part of comm_bytes that crosses nodes (notes/09-nodes.md), when the strategy states it
   * (comm_inter_set = 1: HSDP's groups); 0: the report applies the ring rule of comm.h's topology
   * (all of comm_bytes when the ring's next rank is on another node, else none). */
  int comm_inter_set;
  double comm_inter_bytes;
  char comm_inter_text[64];
} formula_t;
/* ZeRO stage `stage`'s (0: DDP) for Ψ = psi, N = world (formula_model_states, formula_comm_bytes,
 * formula_text): what strategies built on the stage start from. */
void formula_stage(formula_t *f, int stage, double psi, int world, dtype_t wdt, int opt_states);
/* A printable formula, e.g. "4Ψ + 12Ψ/N" (bf16, Adam), for the report and ch00. */
const char *formula_text(int stage, dtype_t wdt, int opt_states);
/* The same text for the paper's form (formula_zero_k) with any K, written into dst
 * (e.g. stage 1, 2, 2, 12 -> "4Ψ + 12Ψ/N"); returns dst. Used by ch00. */
char *formula_text_k(char *dst, int ndst, int stage, double param_bytes, double grad_bytes, double k);
#endif
