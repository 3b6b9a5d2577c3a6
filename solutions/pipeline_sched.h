/* pipeline_sched.h — chapter 07's schedules as pure functions (notes/07-pipeline.md): the split of
 * the units into stages, the order of a stage's operations for every schedule, the activations in
 * flight, a CHECKER that runs the stages' lists against each other as the program's messages would,
 * and a SIMULATOR of their timing. No MPI, no trainer, nothing of common/: pipeline_sched.c compiles
 * alone (cc -std=c11 -c solutions/pipeline_sched.c), for this program and for a page that would
 * draw the schedules in a browser (WebAssembly). solutions/pipeline.h is the schedule of the loop.
 *
 * Operations: F k (the forward of micro-batch k), B k (its backward: without a split, the whole
 * backward; with one, the input's gradient only) and W k (the weights' gradient of micro-batch k,
 * the zero-bubble schedules' third operation), each on one chunk of the stage's units (chunk 0..v−1;
 * v > 1 only with interleaved). */
#ifndef ZL_PIPELINE_SCHED_H
#define ZL_PIPELINE_SCHED_H
#include <stddef.h> // size_t
#include <stdint.h> // int64_t

typedef enum {
  PP_NAIVE = 0,       /* F0 B0 F1 B1 ...: one micro-batch in the whole pipe at a time */
  PP_GPIPE = 1,       /* F0 .. F(M−1), then B0 .. B(M−1) */
  PP_1F1B = 2,        /* P−s−1 forwards, then F B pairs, then the remaining backwards */
  PP_INTERLEAVED = 3, /* 1F1B over v chunks per rank (Megatron-LM's interleaved schedule) */
  PP_ZB_H1 = 4,       /* 1F1B with the backward split (B, W): stage s holds its first s W's back
                       * into the cool-down's bubble (Qi et al. 2023, ZB-H1: 1F1B's activation peak) */
  PP_ZB_H2 = 5,       /* ZB-H2: 2(P−s−1) warm-up forwards, 2s W's held back: the bubble nearly gone,
                       * about twice 1F1B's activations */
  PP_NSCHED = 6
} pp_schedule_t;

/* One operation of a stage: 'F', 'B' or 'W' of micro-batch `micro` on chunk `chunk`. */
typedef struct pp_op {
  char kind;
  int micro;
  int chunk;
} pp_op_t;

/* "naive" | "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-h2" → PP_*; −1 for anything else. */
int pp_schedule_parse(const char *name);
const char *pp_schedule_name(pp_schedule_t sched);
/* 1 when the schedule splits each backward into B and W (the zero-bubble ones). */
int pp_splits_backward(pp_schedule_t sched);
/* Operations per stage and step: 2vM, or 3M with a split backward. */
int pp_schedule_nops(pp_schedule_t sched, int M, int v);

/* Cut n_units units of numel[u] parameters each into P contiguous stages, every stage at least
 * one unit, minimizing the largest stage's parameter count (ties: the earliest cuts). Writes
 * first[0..P]: stage s is units first[s] .. first[s+1]−1. Returns 0, or −1 (nothing written)
 * unless 1 <= P <= n_units. */
int pp_split(const int64_t *numel, int n_units, int P, int *first);

/* The operations stage s of P runs in one step, in order, into ops[0..pp_schedule_nops) (v: virtual
 * stages, 1 unless sched is PP_INTERLEAVED, which needs M a multiple of P). Returns their count. */
int pp_schedule_ops(pp_schedule_t sched, int P, int s, int M, int v, pp_op_t *ops);

/* Most micro-batches whose activations stage s holds at once (a slot is taken by F k and given
 * back by the last operation of k: B, or W with a split backward): naive 1, gpipe M, 1f1b
 * min(M, P − s); interleaved, in micro-batch-chunks, min(v·M, 2(P − s − 1) + (v − 1)·P + 1);
 * zb-h1 min(M, P) on every stage (s W's held back: stage 0 holds 1F1B's P); zb-h2 min(M, 2P − 1). */
int pp_inflight_formula(pp_schedule_t sched, int P, int s, int M, int v);

/* The idle fraction of the idealized pipeline, from the simulator below (equal stages, no message
 * cost; the backward 2× the forward, split B = W for the zero-bubble ones): naive (P−1)/P; gpipe and
 * 1f1b (P−1)/(M+P−1) (whatever the backward's cost); interleaved (P−1)/(v·M+P−1); zb-h1
 * (P−1)/(3M+P−1) once M >= P; zb-h2 0 once M >= 2P − 1 (its step measured from the stage's first
 * operation, as the paper's: pp_sim_t.span). Smaller M: what the simulator says. */
double pp_bubble_formula(pp_schedule_t sched, int P, int M, int v);

/* The same for stages that are not equal, t[s] = stage s's busy time per step (any unit): the
 * simulator with each stage's forward a third of its t[s] and its backward two thirds (split: B and
 * W a third each). The slowest stage paces the steady state: with it last, step = M·t_max +
 * (Σt − t_max)/v per micro-batch time t = t[s]/M (the closed form chapter 07 printed first);
 * with an earlier one slowest, a little less. Equal t[s] give pp_bubble_formula. */
double pp_bubble_stages(pp_schedule_t sched, int P, int M, int v, const double *t);

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
void pp_group_cuts(pp_schedule_t sched, int P, int s, int M, int v, const pp_op_t *ops, int n, char *cut);

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

/* ---- the checker --------------------------------------------------------------------------
 * pp_check_lists: the P stages' lists (ops[s][0..n[s])), v chunks per stage, split = 1 when
 * backwards are split: per chunk every micro-batch's F once, then its B once, then (split) its W
 * once; forwards, backwards and W's each in micro-batch order (the gradients accumulate in 1-rank
 * --accum M's order); no W without a split. Returns 0, or 1 with the first problem in why, naming
 * the stage and the operation: "a W before its B", "a W out of order", ...
 * pp_check_messages: runs the stages' lists of `sched` against each other with the program's
 * messages (pipeline.c, pipeline_pairs.c): per link a stream of sends and receives in issue order,
 * every send synchronous (it completes only once its receive is posted: NCCL's semantics, the
 * strictest), the pairs as one operation, a slot given back only once its output has left, the
 * input gradient's two buffers. Checks that every send pairs with the receive its peer posts in
 * the same place of the link's order, and that the P stages run to the end (no deadlock).
 * pp_check_schedule: both, on pp_schedule_ops's lists. */
int pp_check_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why, size_t nwhy);
int pp_check_messages(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy);
/* The same run for given lists (ops[s][0..n[s]), split as in pp_check_lists), every message alone
 * (no pairs): a list that waits for what its neighbour will only send after waiting for it. */
int pp_check_run(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why, size_t nwhy);
int pp_check_schedule(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy);
/* The MPI backend's messages (pipeline_post.c): the unpaired receives posted `ahead` ahead (each
 * kind's first before the stage's first operation, the next once one is read), on streams of
 * their own — parity 1: the messages to stage r on a stream of r's parity, so that no stage's
 * receive and send share one; parity 0: on fwd / bwd as without, which deadlocks past P = 2
 * (a receive posted ahead holds back a send queued after it on the same stream). ahead 1..8. */
int pp_check_posted(pp_schedule_t sched, int P, int M, int v, int ahead, int parity, char *why, size_t nwhy);
/* The NCCL backend's messages (pipeline_pairs.c, grouped): every message on ONE communicator per
 * pipeline (a single stream); v = 1: a send held back where pp_groups says and issued with that
 * receive as one group (ncclGroupStart/End: Megatron's batched p2p), else alone; v > 1: the
 * groups of pp_group_cuts, each one operation whose halves match separately (with one peer in the
 * group's order), the stage waiting for a boundary's group before its segment. */
int pp_check_grouped(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy);
/* The v > 1 run for given lists and boundaries (bounds[s][i] bit 0 as pp_group_cuts's; the
 * sends that no boundary takes go at their segment's last send, as there): a grouping to try. */
int pp_check_bounds(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *const *bounds, char *why,
                    size_t nwhy);

/* ---- the simulator ------------------------------------------------------------------------
 * Per stage s, cost[s]: f, b, w = one micro-batch's forward, input-gradient backward and
 * weight-gradient backward through ALL the stage's units (with v chunks each chunk operation costs
 * 1/v of it; a schedule without a split runs B as b + w). c: the time a message takes between two
 * stages. Each stage runs its list in order; an operation starts when the stage is free and its
 * input is there: F k of chunk c when F k of chunk c−1 ended (+ c on another stage), B k when B k
 * of chunk c+1 ended (+ c) — the last chunk's once its own F k ended —, W k when its B k ended.
 * The closed forms (Qi et al., 2023; sail-sg's efficiency.py asserts the same), M micro-batches,
 * equal stages: bubble time (step − M(f + b + w)) = 1F1B (P−1)(f+b+w) (c = 0); ZB-H1 (P−1)(f+b−w)
 * (c = 0); ZB-H2 (P−1)(f+b+2c−2w) (M >= 2P, its span). */
typedef struct pp_cost {
  double f, b, w;
} pp_cost_t;

typedef struct pp_sim {
  double makespan; /* the step: from 0 (stage 0's first F) to the last operation's end */
  double span;     /* the longest stage window: a stage's first operation's start to its last one's end
                    * (ZB-H2's measure: with post-validation the next step's forwards begin while this
                    * one drains, the parallelogram of the paper's Figure 4) */
  double busy;     /* mean over the stages of their compute per step */
  double bubble;   /* 1 − busy / step, step = the makespan (span for ZB-H2): the paper's bubble rate */
  double bubble_makespan; /* 1 − busy / makespan: what one step of a loop that waits at its end shows */
} pp_sim_t;

/* Simulate one step of `sched` (its pp_schedule_ops lists) with per-stage costs cost[0..P) and
 * message time c. Returns 0, or −1 when the lists cannot run (bad arguments or a deadlock). */
int pp_simulate(pp_schedule_t sched, int P, int M, int v, const pp_cost_t *cost, double c, pp_sim_t *out);
/* The same for given lists (ops[s][0..n[s]), split as in pp_check_lists). */
int pp_simulate_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, const pp_cost_t *cost,
                      double c, pp_sim_t *out);
/* pp_simulate_lists that also writes when each operation starts, at[s][i] for ops[s][i] (its end:
 * + its cost, as above): the timeline the explorer page draws (common/explorer/). at: P arrays of n[s]. */
int pp_simulate_timeline(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, const pp_cost_t *cost,
                         double c, double *const *at, pp_sim_t *out);
#endif
