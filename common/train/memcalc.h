/* memcalc.h — chapter 00's memory calculator as a function (notes/00-memory.md): the flags of
 * ch00_memory in, its table out. ch00_memory's main() is this with the strategies' formula hooks
 * (chapters/00_memory/main.c); the explorer page (common/explorer/) calls the same code compiled
 * to WebAssembly with memcalc_stage_states, so the page's numbers are ch00_memory's to the byte.
 * Pure: no MPI, no CUDA, nothing of train.h (it compiles alone with base/ and model/ on the path).
 * A new row of the table (a new kind of bytes) is added here, once, for both. */
#ifndef ZL_MEMCALC_H
#define ZL_MEMCALC_H
#include <stdio.h>   // FILE
#include "dtype.h"   // dtype_t
#include "formula.h" // mem_formula_t
#include "model.h"   // gpt_shape_t

#include <stdint.h>  // int64_t

/* The stage code of ZeRO-Offload (chapter 08, solutions/offload.c: ZeRO-2 with the master and
 * optimizer states on the host): params and grads on the device, optim the host's. */
#define MEMCALC_OFFLOAD 4
/* Or'd into a stage code: the states of a strategy that accumulates the step's full gradient over its
 * micro-batches before one reduction (train.h's no_sync: a pipeline's data dimension, chapter 07):
 * ZeRO-2 and ZeRO-3 keep bΨ of full grads besides their shard. */
#define MEMCALC_NO_SYNC 0x100

/* Model states per rank of ZeRO stage `stage` (0: DDP; MEMCALC_OFFLOAD) for Ψ = psi, N = world,
 * working dtype wdt, AdamW: params, grads, and master + optimizer states together in optim (the
 * paper's KΨ). */
typedef mem_formula_t (*memcalc_states_fn)(int stage, double psi, int world, dtype_t wdt);

/* The pipeline's split (--pp; chapter 07's pp_split, solutions/pipeline_sched.h): n_units sizes into P
 * consecutive stages, first[0..P] the first unit of each (first[P] = n_units); 0, or -1. */
typedef int (*memcalc_split_fn)(const int64_t *numel, int n_units, int P, int *first);

/* The stage's states from formula.h: what the four strategies' formula hooks (solutions/ddp.c,
 * zero1.c, zero2.c, zero3.c) say for ch00's trainer; a unit test holds the two equal. */
mem_formula_t memcalc_stage_states(int stage, double psi, int world, dtype_t wdt);

/* ch00_memory with argv: parses the flags (a bad one: its line on stderr, returns 2; --help: 0),
 * prints the table to `out`, writes --json's file. Returns the exit code. `states` gives the stages'
 * model states when the default K and no --fp32-grads (else the paper's generic form); `split` cuts
 * the GPT's units into --pp stages (ch00_memory and the page both pass pp_split). */
int memcalc_main(int argc, char **argv, memcalc_states_fn states, memcalc_split_fn split, FILE *out);
/* ch00_memory --optimizer muon (memcalc_muon.c): the table of Muon's model states per rank for Ψ = psi
 * on N = world, the hidden matrices mats[0..n) (n 0: `assumed` says what is taken instead); --json too. */
int memcalc_muon(FILE *out, const char *json, double psi, int world, const int64_t *mats, int n,
                 const char *assumed);

/* ch00_memory's transformer block (memcalc_shape.c): what it has beyond this repository's GPT (gpt.h),
 * as its flags give it; zero (NULL) fields: the GPT's own. */
typedef struct memcalc_block {
  int kv_heads;    /* --kv-heads K: grouped-query attention, k and v C × (K·C/H); 0: H */
  int ffn;         /* --ffn F: the MLP's hidden width; 0: 4C */
  const char *mlp; /* --mlp gelu|swiglu (SwiGLU: gate, up C × F, down F × C) */
  const char *pos; /* --pos learned|rope (RoPE: no position table) */
  int tied;        /* --tied-head: the head is the token embedding (GPT-2's) */
  int no_bias;     /* --no-bias: no bias vectors, the norms a weight alone (Llama's RMSNorm) */
} memcalc_block_t;
/* What a block is to the calculator: this GPT's own (gpt.h's counts hold); its own with a tied head
 * (gpt.h's activations hold, not its Ψ); another block (memcalc_shape.c's Ψ and activations). */
enum { MEMCALC_BLOCK_GPT, MEMCALC_BLOCK_TIED, MEMCALC_BLOCK_OTHER };
int memcalc_block_kind(gpt_shape_t g, const memcalc_block_t *b);
/* Ψ of the shape g with block b, in double (exact below 2^53): gpt_count_params for this GPT's block. */
double memcalc_block_params(gpt_shape_t g, const memcalc_block_t *b);
/* A layer's stored activations, Korthikanti et al.'s list for this block, in units of s·b·h, the
 * scores' 5·a·s/h aside: `whole` kept whole under tensor parallelism, `split` divided by it
 * (10 and 24 for this GPT's block). */
typedef struct memcalc_acts_coef {
  double whole, split;
} memcalc_acts_coef_t;
memcalc_acts_coef_t memcalc_block_acts(gpt_shape_t g, const memcalc_block_t *b);
/* What the block's flags are checked against: the other flags' values (muon: --optimizer muon). */
typedef struct memcalc_with {
  int tp, pp, cp, experts, muon;
} memcalc_with_t;
/* The block's flags after args_parse (tf: a transformer shape was given): 0, or args_error's 2 with
 * its one line (a flag without a shape, K not dividing H, another block with what it is not computed
 * with, t not dividing K and F; memcalc_main caps its Ψ). */
int memcalc_block_check(int argc, char **argv, int tf, gpt_shape_t g, const memcalc_block_t *b,
                        const memcalc_with_t *with);
/* The printout's line of the block (and of its activations where it is not this GPT's); --json's
 * fields of it, each followed by ", ". */
void memcalc_block_text(FILE *out, gpt_shape_t g, const memcalc_block_t *b);
void memcalc_block_json(FILE *fp, gpt_shape_t g, const memcalc_block_t *b);
#endif
