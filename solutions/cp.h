/* cp.h — chapter 10's context parallelism: ring attention with an online softmax
 * (notes/10-long-sequences.md, Part 2).
 *
 * C consecutive ranks (a CP group) share every sequence: each holds n = S/C of its positions, for
 * every layer (q, k, v, the MLP, the LayerNorms, the residual stream: everything is per token
 * except attention). Attention needs every key and value up to the query's position, so the
 * group passes K/V blocks round a ring: at ring step j rank r holds the block of rank
 * (r − j) mod C, folds it into its queries' running softmax (the online softmax of
 * FlashAttention: a running max m, a running sum l, an unnormalised output acc), and sends it on
 * to r + 1 while it computes. After C steps every query has seen every key: out = acc / l.
 *
 * Positions: rank q of C holds n = S/C positions. Contiguous (balance 0): [q·n, (q+1)·n).
 * Balanced (balance 1, the default; Megatron's and Llama-3's zigzag): S cut into 2C chunks of
 * h = S/(2C), rank q holds chunks q and 2C−1−q, so the causal work (the keys each query sees) is
 * the same on every rank. A rank's local positions are ascending in both layouts.
 *
 * Local tensors: R rows (sequences), n positions each, E = NH·hs features, row-major:
 *   qkv (R, n, 3E) = [q | k | v] per position (gpt.h's), a K/V block kv (R, n, 2E) = [k | v],
 *   out (R, n, E), lse (R, NH, n) the log-sum-exp of each query's scores (what the backward keeps
 *   instead of the S² probabilities). The kernels are host fp32. */
#ifndef ZL_CP_H
#define ZL_CP_H
#include <stdint.h>           // int64_t
#include "comm.h"   // comm_t
#include "tensor.h" // tensor_t

/* ---- the layout (pure functions) ---------------------------------------------------------- */
/* 0 when C ranks can split a sequence of S positions (C >= 1, S divisible by C, or by 2C with
 * balance); else 1 and why in `why`. */
int cp_layout_check(int S, int C, int balance, char *why, size_t n);
/* The n = S/C global positions of rank q (ascending) into pos[n]. */
void cp_positions(int S, int C, int balance, int q, int *pos);
/* Causal attention work of rank q: the (query, key) score pairs it computes per row and head,
 * Σ over its positions p of (p + 1). */
int64_t cp_work_formula(int S, int C, int balance, int q);

/* ---- the kernels (host fp32) --------------------------------------------------------------- */
/* One ring step (the exercise): fold the K/V block kv (R, n, 2E) whose positions are kpos[n]
 * (ascending) into the running softmax of this rank's queries (qkv's q, positions qpos[n]):
 * for each row, head and query i, the keys j with kpos[j] <= qpos[i] (causal), scores
 * s_j = q·k_j / sqrt(hs), then
 *   m' = max(m, max_j s_j)   acc = acc·e^(m − m') + Σ_j e^(s_j − m')·v_j   l = l·e^(m − m') + Σ_j
 * e^(s_j −
 * m')
 * m, l (R, NH, n) start at −∞ and 0, acc (R, n, E) at 0. Returns the score pairs computed. */
int64_t cp_attend_block(int R, int n, int E, int NH, const float *qkv, const int *qpos, const float *kv,
                        const int *kpos, float *m, float *l, float *acc);
/* After the last block: out = acc / l in place (acc is out), lse = m + log l (into m). */
void cp_attend_finish(int R, int n, int E, int NH, float *acc, float *m, const float *l);
/* The backward of one block: with P_ij = e^(s_ij − lse_i) and D_i = Σ dout_i·out_i (dsum,
 * (R, NH, n)), dq (R, n, E) += Σ_j dS_ij·k_j/sqrt(hs), dkv (R, n, 2E) = [dk | dv] of the block:
 * dk_j += Σ_i dS_ij·q_i/sqrt(hs), dv_j += Σ_i P_ij·dout_i, where dS_ij = P_ij·(dout_i·v_j − D_i).
 * Returns the score pairs computed. */
int64_t cp_attend_block_bwd(int R, int n, int E, int NH, const float *qkv, const int *qpos, const float *dout,
                            const float *lse, const float *dsum, const float *kv, const int *kpos, float *dq,
                            float *dkv);
/* D_i = Σ_d dout·out over each head's features: dsum (R, NH, n). */
void cp_attend_dsum(int R, int n, int E, int NH, const float *dout, const float *out, float *dsum);

/* ---- the ring over a CP group ------------------------------------------------------------- */
typedef struct cp_ring {
  comm_t *c;          /* the CP group: C consecutive ranks (not owned) */
  int C, r, S, n, balance, E, NH;
  int *pos;           /* [C·n] every rank's positions: rank q's at pos + q·n */
  tensor_t buf[2];    /* the blocks in flight: (R, n, 4E) fp32 (K/V, and dK/dV in the backward) */
  tensor_t ml, dq;    /* (R, NH, n) the running sum / dsum; (R, n, E) dq */
  int64_t work_fwd;   /* score pairs computed by the last forward call (one layer, one micro-batch) */
  int64_t calls_fwd, calls_bwd; /* ring calls so far (the layers × micro-batches × steps) */
  double wait_us;     /* time this rank's compute waited for hops so far: what the fold did not hide */
} cp_ring_t;

/* Collective-free: the ring of this rank in group c over sequences of S, E features, NH heads. */
void cp_ring_init(cp_ring_t *g, comm_t *c, int S, int balance, int E, int NH);
void cp_ring_free(cp_ring_t *g);
/* Forward over R local rows: out (R, n, E) and lse (R, NH, n) from qkv (R, n, 3E), the K/V blocks
 * sent round the ring (each hop's send and receive overlap the step's compute). */
void cp_ring_forward(cp_ring_t *g, float *out, float *lse, const float *qkv, int R);
/* Backward: dqkv (R, n, 3E) overwritten. The K/V blocks go round the ring again, carrying their
 * dK/dV accumulators (no recompute of the forward): C − 1 hops of [K | V | dK | dV], then one hop
 * of [dK | dV] that brings each block's gradient home. */
void cp_ring_backward(cp_ring_t *g, float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, int R);
/* fp32 elements one rank sends per layer and micro-batch of R rows: forward (C − 1)·2·R·n·E,
 * backward (C − 1)·4·R·n·E + 2·R·n·E (0 when C = 1). */
int64_t cp_ring_fwd_numel(int C, int64_t R, int n, int E);
int64_t cp_ring_bwd_numel(int C, int64_t R, int n, int E);

/* ---- training: the GPT with --cp C (cp_gpt.c) ---------------------------------------------- */
struct train_cfg;
struct trainer;
struct model_transform;
/* The chapter's checks of --cp and --cp-balance against the world size and the model, before MPI:
 * 0, or 2 after one line naming the flag and what it allows. */
int cp_check_args(const struct train_cfg *cfg);
/* Chapter 10's model transform (with --cp C > 1). Its setup, cp_split_trainer: the GPT becomes this
 * rank's chunks of every sequence over its CP group (C consecutive ranks of the job, comm_split
 * here); the data-parallel strategy runs over all the ranks (the C·D of the CP × DP grid:
 * Megatron's data-and-context-parallel group), so the gradients of the replicated weights are
 * summed over the CP group too; formulas into the report. Its report: the end-of-run cp: lines (K/V
 * bytes per step measured and by formula, the attention work per rank and its imbalance). */
extern const struct model_transform cp_transform;
void cp_split_trainer(struct trainer *t);
#endif
