/* ulysses.h — chapter 10's all-to-all context parallelism: DeepSpeed-Ulysses
 * (Jacobs et al. 2023, arXiv:2309.14509; notes/10-long-sequences.md, meeting 10b), beside the ring of cp.h.
 *
 * The sequence is split as the ring splits it: rank q of a CP group of C holds n = S/C positions
 * (cp_positions) of every sequence for every per-token layer. Attention is where it differs: instead
 * of passing K/V blocks round a ring, one all-to-all TRANSPOSES q, k, v from
 *     [R rows, n positions (this rank's), all NH heads]   to   [R rows, all S positions, NH/C heads]
 * (rank p gets heads p·NH/C .. (p+1)·NH/C − 1 of every position), each rank runs the ordinary causal
 * attention (op_attention_fwd) on its heads over the whole sequence, and a second all-to-all turns
 * the output back to [R, n, all heads]. The backward mirrors it: an all-to-all of dO, the attention's
 * backward (op_attention_bwd), one all-to-all of [dQ | dK | dV] back.
 *
 * Each head's attention is computed whole, by the same kernel on the same shapes as on 1 rank (the
 * per-head GEMMs are (rows, S, hs) whatever C is; only their leading dimension changes): the
 * attention's output equals 1 rank's bit for bit (tests/unit/test_ulysses.c).
 *
 * Bytes one rank sends per layer and micro-batch of R rows (each all-to-all keeps 1/C of its buffer
 * home): forward 4·(C−1)·R·n·E/C (Q, K, V out, O back), backward the same (dO out, dQ dK dV back);
 * per sequence (R·n = S positions over the group, C ranks) that is 4·S·E·(C−1)/C² ≈ the paper's
 * 4Nh/P,
 * against the ring's 2·S·E·(C−1)/C forward. The degree is limited by the heads: C must divide NH. */
#ifndef ZL_ULYSSES_H
#define ZL_ULYSSES_H
#include <stdint.h>  // int64_t
#include "comm.h"    // comm_t
#include "cp.h"      // cp_ring_t (the 2-D hybrid's ring across the groups)
#include "tensor.h"  // tensor_t

/* ---- the transpose's index arithmetic (the exercise; pure, no communication) -------------------
 * x (R, n, F·E) holds F parts of E features per position ([q | k | v]: F = 3; the output: F = 1),
 * part f's head block p = its features [p·E/C, (p+1)·E/C). ulysses_pack writes the all-to-all's send
 * buffer: C blocks of R·n·F·E/C floats, block p = what rank p gets, laid out (R, n, F, E/C):
 *   send[p·blk + ((rho·n + i)·F + f)·Eh + e] = x[(rho·n + i)·F·E + f·E + p·Eh + e],  Eh = E/C.
 * ulysses_unpack takes the receive buffer (block q from rank q, the same layout, q's positions
 * qpos = pos + q·n) to y (R, S, F·Eh), each position at its global place:
 *   y[(rho·S + pos[q·n + i])·F·Eh + f·Eh + e] = recv[q·blk + ((rho·n + i)·F + f)·Eh + e]. */
void ulysses_pack(int R, int n, int E, int F, int C, const float *x, float *send);
void ulysses_unpack(int R, int n, int S, int E, int F, int C, const int *pos, const float *recv, float *y);
/* The way back: y (R, S, F·Eh) this rank's heads → send blocks (block q: q's positions, (R, n, F, Eh)),
 * and the received blocks (block p: heads of rank p) → x (R, n, F·E). The inverses of the two above. */
void ulysses_pack_back(int R, int n, int S, int E, int F, int C, const int *pos, const float *y, float *send);
void ulysses_unpack_back(int R, int n, int E, int F, int C, const float *recv, float *x);

/* ---- the all-to-all attention over a CP group -------------------------------------------------- */
typedef struct cp_ulysses {
  comm_t *c;            /* the group of the all-to-all: C consecutive ranks (not owned) */
  int C, r, S, n, E, NH;
  const int *pos;       /* [C·n] every rank's positions (the ring's cp_ring_t.pos: not owned) */
  tensor_t send, recv;  /* the all-to-all's buffers: R·n·3E fp32 each */
  tensor_t dh;          /* (R, S, E/C) dO in the heads' layout, then (R, S, 3E/C) d[q|k|v] */
  cp_ring_t *ring;      /* the 2-D hybrid (cp_usp_init): the ring across the groups; NULL: plain Ulysses */
  int *own_pos;         /* the hybrid's positions inside the group, 0 .. A·n − 1 (owned) */
  int64_t calls_fwd, calls_bwd;
  double wait_us;       /* time this rank spent in the all-to-alls so far (blocking: all of it exposed) */
} cp_ulysses_t;

/* Collective-free. pos: every rank's n = S/C positions (cp_positions), kept by the caller. */
void cp_ulysses_init(cp_ulysses_t *u, comm_t *c, int S, int E, int NH, const int *pos);
void cp_ulysses_free(cp_ulysses_t *u);
/* 0 when C ranks can run Ulysses on NH heads and S positions (C divides both); else 1 and why. */
int cp_ulysses_check(int S, int NH, int C, char *why, size_t n);
/* fp32 the forward saves per local token (gpt_block_t.att_saved): the probabilities of this rank's
 * NH/C heads over the whole sequence, R·(NH/C)·S² = NH·S per local token, and q, k, v in the heads'
 * layout, R·S·3E/C = 3E per local token (what the backward's attention reads). */
int64_t cp_ulysses_saved_per_token(int S, int E, int NH);
/* Forward over R local rows: out (R, n, E) from qkv (R, n, 3E); saved (R·n·saved_per_token) keeps
 * [probabilities (R, NH/C, S, S) | q k v of this rank's heads (R, S, 3E/C)]. */
void cp_ulysses_forward(cp_ulysses_t *u, float *out, float *saved, const float *qkv, int R);
/* Backward: dqkv (R, n, 3E) overwritten from dout (R, n, E) and what the forward saved. */
void cp_ulysses_backward(cp_ulysses_t *u, float *dqkv, const float *dout, const float *saved, int R);
/* fp32 elements one rank sends per layer and micro-batch of R rows, forward and backward alike:
 * 4·(C−1)·R·n·E/C (0 when C = 1). */
int64_t cp_ulysses_fwd_numel(int C, int64_t R, int n, int E);
int64_t cp_ulysses_bwd_numel(int C, int64_t R, int n, int E);

/* ---- the 2-D hybrid: all-to-all inside groups of A, the ring across the G = C/A groups ----------
 * USP (Fang & Zhao 2024, arXiv:2405.07719; feifeibear/long-context-attention), Megatron's
 * --cp-comm-type a2a+p2p. CP rank q = g·A + a: ulysses group g holds A consecutive ranks (a = 0..A−1),
 * ring a the G ranks with the same a (g = 0..G−1). The sequence is laid out for a ring of G: group g
 * holds the A·n positions cp_positions(S, G, balance, g) (two mirrored chunks with balance), and rank a
 * of the group the a-th n of them — rank q's positions are cp_positions' flat array at q·n, as for a
 * ring of C. The all-to-all inside the group turns [R, n, all NH heads] into [R, A·n, NH/A heads] (the
 * group's positions, in the group's order: pos = 0 .. A·n − 1), the ring of G runs on those heads with
 * A·n positions per block and E/A features, and the all-to-all turns the output back. The backward
 * mirrors it: dO out, the ring's backward (its dK/dV travel with the blocks), [dQ | dK | dV] back.
 * The head count bounds A only: C = A·G may exceed NH.
 * Bytes one rank sends per layer and micro-batch of R rows (n = S/C positions):
 *   forward  all-to-all 4·(A−1)·R·n·E/A        + ring (G−1)·2·R·n·E
 *   backward all-to-all 4·(A−1)·R·n·E/A        + ring (G−1)·4·R·n·E + 2·R·n·E  (the ring's: 0
 * when G = 1)
 * (the ring of G on blocks of A·n positions of E/A features: the same R·n·E per hop as a ring of C). */
/* 0 when the hybrid can run: A divides C, A divides NH, C divides S, and a ring of G = C/A splits S
 * (2G | S with balance); else 1 and why. */
int cp_usp_check(int S, int NH, int C, int A, int balance, char *why, size_t n);
/* Collective-free. u over the group's all-to-all communicator a2a (A ranks), ring: a ring of G ranks
 * (the ranks with this a) already made by cp_ring_init(ring, ring_comm, S, balance, E/A, NH/A), not owned. */
void cp_usp_init(cp_ulysses_t *u, comm_t *a2a, cp_ring_t *ring, int E, int NH);
/* fp32 the hybrid's forward saves per local token: the ring's lse NH (NH/A heads over A·n positions),
 * q k v and the output in the heads' layout 3E + E (what the ring's backward reads). */
int64_t cp_usp_saved_per_token(int E, int NH);
#endif
