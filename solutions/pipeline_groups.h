/* pipeline_groups.h — which of a stage's messages go together, decided from the stages' lists
 * alone so that both ends of every link decide alike (notes/07-pipeline.md, 07c): 1F1B's pairs,
 * the NCCL backend's groups, the MPI backend's receives posted ahead. Pure C like
 * pipeline_sched.h (pipeline_groups.c); used at run time by pipeline_pairs.c and pipeline_post.c,
 * and run by the checker (pipeline_check.h), which shares the list-level forms at the end. */
#ifndef ZL_PIPELINE_GROUPS_H
#define ZL_PIPELINE_GROUPS_H
#include "pipeline_sched.h" // pp_schedule_t, pp_op_t

/* ---- the pairs: which sends go with the next receive (pipeline_pairs.c) ---------------------
 * pair_fwd[k] = 1 when stage s ends F k by sending its output together with the receive of the
 * next B's gradient, pair_bwd[k] = 1 when it ends B k by sending the input's gradient with the
 * next F's receive: when its own list has the two operations back to back and the neighbour's
 * list has their partners back to back the other way round (so both sides decide alike). Only
 * with v = 1. pair_fwd, pair_bwd: [M], written. */
void pp_pairs(pp_schedule_t sched, int P, int s, int M, int v, char *pair_fwd, char *pair_bwd);

/* ---- the groups: one communicator per pipeline (the NCCL backend) --------------------------
 * v = 1: hold_fwd[k] = 1 when stage s's send of F k's output is held back and issued with the
 * receive of its next operation that is not a W (as one group), because that operation receives;
 * hold_bwd[k] the same for B k's input gradient. Otherwise the send goes alone at once. Every
 * boundary of the step is then at most one group, on one stream. [M]; all 0 when v > 1. */
void pp_groups(pp_schedule_t sched, int P, int s, int M, int v, char *hold_fwd, char *hold_bwd);
/* v > 1 (interleaved; such pairs deadlock there: pp_check_bounds finds it at P = 2, M = 4):
 * Megatron-LM's groups. Stage s's list ops[0..n) is cut into segments — every operation alone, but
 * a steady-state F with the B after it (the pair Megatron runs between two exchanges) — and at each
 * boundary ONE group holds the sends of the segment before and the receives of the segment after
 * (up to two of each: send_forward_backward_recv_forward_backward). cut[i] bit 0: a boundary before
 * operation i; bit 1: operation i's send sends the held ones at once, as a group of sends (the
 * segment's last send, when the next segment receives nothing or none follows). cut: [n]. */
void pp_group_cuts(pp_schedule_t sched, int P, int s, int M, int v, const pp_op_t *ops, int n,
                   char *cut);

/* ---- receives posted ahead (the MPI backend: pipeline_post.c) ------------------------------
 * The receives stage s posts ahead, of one kind — 'F': activations in (F k of a chunk c > 0), 'B':
 * gradients in (B k of a chunk c < vP − 1) — in the order its list reads them, leaving out those
 * that go in a pair (the operation before held its send back for it: pp_pairs, v = 1). Written
 * to out[0..n) (room for pp_schedule_nops; out NULL: only counted); returns n. The stage posts
 * PP_RECV_AHEAD of each kind ahead, each into a receive buffer of its own: min(PP_RECV_AHEAD, n)
 * buffers of the kind's largest message (b × the boundary's width floats), activations in the
 * ledger (LEDGER_ACTS) beside the slots. */
enum { PP_RECV_AHEAD = 2 };
int pp_posted_recvs(pp_schedule_t sched, int P, int s, int M, int v, char kind, pp_op_t *out);

/* ---- the same decisions on given lists (shared with the checker: pipeline_check*.c) ----------
 * V = v·P chunks in all; stage s's operation o is on chunk o.chunk·P + s. */
/* Does o receive (F: its input from chunk c − 1; B: its output's gradient from chunk c + 1)? */
int pp_op_receives(int P, int V, int s, pp_op_t o);
/* Does o send (F: its output to chunk c + 1; B: its input's gradient to chunk c − 1)? */
int pp_op_sends(int P, int V, int s, pp_op_t o);
/* The segment that starts at operation i of a list cut by cut[0..n) (bit 0): its end, the next cut. */
int pp_segment_end(const char *cut, int n, int i);
/* Bit 1 of cut[0..n) from its bit 0, as pp_group_cuts sets it (the held sends go at once at the
 * last send of each segment whose next segment receives nothing, or that ends the list). */
void pp_group_flush(int P, int s, int v, const pp_op_t *ops, int n, char *cut);
/* pp_groups on stage s's list ops[0..n): sets hf[k] / hb[k] to 1 where F k's / B k's send is held
 * for the next receive (v = 1; nothing else written). */
void pp_groups_of_list(int P, int s, int v, const pp_op_t *ops, int n, char *hf, char *hb);
/* pp_posted_recvs on stage s's list ops[0..n) and its pairs pf / pb: writes out[0..m), returns m. */
int pp_unpaired_recvs(int P, int s, int v, const pp_op_t *ops, int n, const char *pf, const char *pb,
                      char kind, pp_op_t *out);
#endif
