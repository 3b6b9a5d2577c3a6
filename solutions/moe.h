/* moe.h — chapter 12: Mixture of Experts, and expert parallelism (notes/12-experts.md).
 *
 * A MoE block is a GPT block whose MLP is E expert MLPs (each the dense MLP's shape, 4C wide) and
 * a router that sends each token to k of them:
 *
 *   x2 = x + attn(ln1(x));  h = ln2(x2)                              (the dense half: gpt.h)
 *   p = softmax(h · Wrᵀ)  (T, E), fp32                               the router (Switch's selective
 * precision)
 *   top-k of p + b per token (b: DeepSeek-V3's bias, selection only) → experts e_tj, gates g_tj = p_t,e_tj
 *   y = x2 + Σ_j g_tj · MLP_{e_tj}(h_t)                              tokens past an expert's capacity: 0
 *
 * The rows move: dispatch gathers each (token, choice) into its expert's rows (moe_plan: the
 * permutation, the chapter's exercise), the experts run one GEMM pair each on their rows, combine
 * gathers each token's k outputs back with its gates. Two designs, side by side:
 *   capacity (--capacity-factor cf > 0): every expert gets C = ceil(cf · T · k / E) rows per
 *     micro-batch of T tokens (Switch, GShard): a padded [E, C, h] buffer, equal all-to-alls; a
 *     choice past C is dropped (its token keeps the residual) and counted;
 *   dropless (cf = 0): an expert gets exactly its rows (Megatron's dropless dispatcher, MegaBlocks):
 *     the counts first (an all-to-all of E int64 on the host: control data), then all-to-all-v of
 *     the rows.
 * Load balance: Switch's auxiliary loss α·E·Σ_e f_e·P_e per block and micro-batch (f_e the share of
 * the micro-batch's choices that picked e, P_e its mean router probability; its gradient flows
 * through P), and DeepSeek-V3's auxiliary-loss-free bias: after each step b_e += rate·sign(mean −
 * load_e), the loads summed over every rank (integers: the bias is the same bits everywhere).
 *
 * Expert parallelism (--ep P_E, solutions/ep.c): P_E consecutive ranks split every MoE block's
 * experts (rank q holds experts q·E/P_E .. (q+1)·E/P_E − 1); each reads its own samples; dispatch
 * and combine become all-to-alls over the group, whose blocks arrive in rank order — so each expert
 * sees its rows in the order one rank would give them. Everything else (attention, the router, the
 * embedding, the head) is data-parallel over all the ranks.
 *
 * The unit of a MoE block, in this order (full model; a rank of --ep P_E keeps the dense prefix
 * and its E/P_E experts):
 *   the dense block's ln1 w,b | qkv W,b | proj W,b | ln2 w,b       4C² + 8C   (gpt_block_layout)
 *   router W (E, C), no bias                                        E·C
 *   expert e = 0..E−1: fc W (4C,C), fc b, fcproj W (C,4C), fcproj b 8C² + 5C each
 * Expert 0's initial values are those of the dense block's fc and fcproj (same stream, same
 * indices), so E = 1, k = 1 is the dense GPT (moe_test's contract); the router starts N(0, 0.02). */
#ifndef ZL_MOE_H
#define ZL_MOE_H
#include <stdint.h> // int64_t
#include "comm.h"   // comm_t
#include "model.h"  // model_t

/* ---- the dispatch permutation (moe_plan.c: the chapter's exercise) ------------------------------
 * ids (T, k): token t's j-th expert (0 <= ids < E, distinct per token). Lays out the experts' rows
 * expert by expert (expert e's rows before e+1's), within an expert in (t, j) order: token order.
 * cap > 0: expert e's rows start at e·cap and hold its first cap choices in that order; the
 *   others are dropped (slot −1); rows past its count are padding (row_tok −1). Rows: E·cap.
 * cap = 0 (dropless): expert e's rows start at Σ_{e'<e} counts, one per choice. Rows: T·k.
 * Writes counts[e] (the rows kept for e: <= cap when cap > 0), slot[t·k + j] (the row of choice
 * (t, j), −1 if dropped) and row_tok[r] (the token of row r, −1 for padding, r < the rows). Returns
 * the rows. Pure: no allocation, no communication. */
int64_t moe_plan(const int *ids, int64_t T, int k, int E, int64_t cap, int64_t *counts, int *slot,
                 int *row_tok);
/* Capacity rows per expert for T tokens: ceil(cf·T·k/E) (cf > 0), 0 for dropless. */
int64_t moe_capacity(double cf, int64_t T, int k, int E);

/* ---- the model: the GPT's MLPs become experts (moe.c) ---------------------------------------- */
struct trainer;
struct train_cfg;
struct model_transform;
/* Chapter 12's model transform with --ep 1 (every rank all the experts; with --ep P_E: ep.h's). Its
 * setup, moe_setup: every --moe-every m-th block of the GPT becomes a MoE block of --moe E experts,
 * this rank's E / P_E with --ep P_E (the group is t->group_comm, ep.c). Its step_end, moe_step_end:
 * the step's loads over every rank, the router bias. Its report, moe_report: loads, drops, the
 * auxiliary loss, all-to-all bytes and expert/dense bytes per rank beside their formulas. */
extern const struct model_transform moe_transform;
void moe_setup(struct trainer *t);
void moe_step_end(struct trainer *t);
void moe_report(struct trainer *t);
/* Chapter 12's checks of --moe, --topk, --moe-every, --capacity-factor, --ep against the model and
 * the world, before MPI: 0, or 2 after one line naming the flag and its range. */
int moe_check_args(const struct train_cfg *cfg);

/* What ep.c asks of the MoE model m (built by moe_setup): the dense elements at the start of unit u
 * (a MoE block's prefix and router; every other unit whole), the EP group (NULL without --ep), and
 * the full model's Ψ (every expert). */
int64_t moe_unit_dense(const model_t *m, int u);
comm_t *moe_group(const model_t *m);
int64_t moe_full_numel(const model_t *m);
/* And what ep_tp.c asks (--tp T inside the EP group): the router's offset in unit u (−1: not a MoE
 * block; E·C elements), the TP group and the group's ranks with this TP index (NULL without --tp),
 * the model before the experts (tp_gpt.c's split: its fns and ctx, for the dense units' maps), the
 * full unit's size, and full unit u → this rank's (a MoE block: its part of the attention, the
 * router, its experts). */
int64_t moe_unit_router(const model_t *m, int u);
comm_t *moe_tp_group(const model_t *m);
comm_t *moe_xg_group(const model_t *m);
model_t moe_base(const model_t *m);
int64_t moe_full_unit_numel(const model_t *m, int u);
void moe_unit_to_local(const model_t *m, int u, const float *full, float *local);

#endif
