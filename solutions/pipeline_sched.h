/* pipeline_sched.h — chapter 07's schedules as pure functions (notes/07-pipeline.md): the split of
 * the units into stages, the order of a stage's operations for every schedule, the activations in
 * flight. No MPI, no trainer, nothing of common/: pipeline_sched.c compiles alone (cc -std=c11 -c
 * solutions/pipeline_sched.c), for this program and for the page that draws the schedules in a
 * browser (common/explorer/). Beside it, as pure: pipeline_groups.h (which messages go together),
 * pipeline_check.h (the checker), pipeline_sim.h (the simulator and the bubble's closed forms).
 * solutions/pipeline.h is the schedule of the loop.
 *
 * Operations: F k (the forward of micro-batch k), B k (its backward: without a split, the whole
 * backward; with one, the input's gradient only) and W k (the weights' gradient of micro-batch k,
 * the zero-bubble schedules' third operation), each on one chunk of the stage's units (chunk 0..v−1;
 * v > 1 only with interleaved, and dualpipev's two chunks of a V: notes/07d-dualpipev.md). */
#ifndef ZL_PIPELINE_SCHED_H
#define ZL_PIPELINE_SCHED_H
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
  PP_DUALPIPEV = 6,   /* DualPipeV (DeepSeek; Sea AI Lab's "cut-in-half"): N ranks, 2N chunks in a V, rank
                       * r chunk 0 = model chunk r, chunk 1 = model chunk 2N−1−r; split backward;
                       * forwards and backwards of the two directions overlapped in pairs (F&B) */
  PP_NSCHED = 7
} pp_schedule_t;

/* The lists' layout, for the functions that take lists rather than a schedule (the checker, the
 * simulator: their `split` argument): PP_LIST_SPLIT when backwards are split into B and W,
 * PP_LIST_V when the chunks make a V (dualpipev) instead of interleaved's ring; PP_LIST_DUAL (the
 * simulator only: the table's DualPipe, not a schedule that trains) two mirrored V's on P ranks, P
 * even: micro-batches 0..M/2−1 go down ranks 0..P−1, M/2..M−1 up ranks P−1..0; rank d's chunk 0 is
 * the stage of the direction that enters on its half (d < P/2: down), chunk 1 the other's; its
 * list is dualpipev's of rank min(d, P−1−d) of P/2, with M/2 micro-batches (local numbers). */
enum { PP_LIST_SPLIT = 1, PP_LIST_V = 2, PP_LIST_DUAL = 4 };

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
/* Chunks per stage: v for interleaved, 2 for dualpipev, else 1. */
int pp_schedule_chunks(pp_schedule_t sched, int v);
/* PP_LIST_SPLIT and PP_LIST_V as the schedule has them (the checker's and simulator's `split`). */
int pp_list_flags(pp_schedule_t sched);
/* Operations per stage and step: 2vM, or 3vM with a split backward (v: pp_schedule_chunks). */
int pp_schedule_nops(pp_schedule_t sched, int M, int v);
/* Where chunk j of stage s is in the model (0..v·P−1): j·P + s on interleaved's ring; in a V
 * (vshape = 1, v = 2) s for j = 0 and 2P−1−s for j = 1. pp_chunk_stage: the stage holding model
 * chunk c; pp_chunk_local: its chunk index j there. */
int pp_chunk_model(int P, int vshape, int s, int j);
int pp_chunk_stage(int P, int vshape, int c);
int pp_chunk_local(int P, int vshape, int c);

/* Cut n_units units of numel[u] parameters each into P contiguous stages, every stage at least
 * one unit, minimizing the largest stage's parameter count (ties: the earliest cuts). Writes
 * first[0..P]: stage s is units first[s] .. first[s+1]−1. Returns 0, or −1 (nothing written)
 * unless 1 <= P <= n_units. */
int pp_split(const int64_t *numel, int n_units, int P, int *first);

/* The operations stage s of P runs in one step, in order, into ops[0..pp_schedule_nops) (v: virtual
 * stages, 1 unless sched is PP_INTERLEAVED, which needs M a multiple of P; dualpipev has 2 whatever v
 * says and needs M >= 2P). Returns their count. */
int pp_schedule_ops(pp_schedule_t sched, int P, int s, int M, int v, pp_op_t *ops);

/* DualPipeV's eight phases on rank r of N (M >= 2N micro-batches): count[0..8) = how many times
 * rank r runs each phase's body (notes/07d-dualpipev.md): nF0, nF0F1, nB1W1F1, nF0B1F1B0 (the main
 * one: two F&B), nB1F1B0, nB1B0, nWB0, nW. pp_schedule_ops builds the list from them. */
void pp_dualpipev_phases(int N, int r, int M, int *count);

/* Which of stage s's operations (pp_schedule_ops's list) run overlapped as DualPipe's F&B (a forward
 * and another micro-batch's backward run as one, each hiding the other's communication): fb[i] = 1
 * on the F that opens one, 2 on its B and W that follow it, 0 on an operation alone (every one but
 * dualpipev's). Returns the list's length. */
int pp_schedule_fb(pp_schedule_t sched, int P, int s, int M, int v, char *fb);

/* Most micro-batches whose activations stage s holds at once (a slot is taken by F k and given
 * back by the last operation of k: B, or W with a split backward): naive 1, gpipe M, 1f1b
 * min(M, P − s); interleaved, in micro-batch-chunks, min(v·M, 2(P − s − 1) + (v − 1)·P + 1);
 * zb-h1 min(M, P) on every stage (s W's held back: stage 0 holds 1F1B's P); zb-h2 min(M, 2P − 1);
 * dualpipev, in micro-batch-chunks, counted from its list (2P + 1 on rank 0: DeepSeek's PP + 1). */
int pp_inflight_formula(pp_schedule_t sched, int P, int s, int M, int v);
#endif
