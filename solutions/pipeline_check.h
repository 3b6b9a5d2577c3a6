/* pipeline_check.h — the checker of chapter 07's schedules (notes/07-pipeline.md, 07c): a stage's
 * list alone, and the stages' lists run against each other with the program's messages under
 * synchronous sends, so that a deadlock shows here, not on a cluster. Test tooling, pure C like
 * pipeline_sched.h (pipeline_check.c, pipeline_check_stage.c); its rules for one list are also the
 * simulator's (pipeline_sim.h). Every function returns 0, or 1 with the first problem written to
 * why[0..nwhy) (why may be NULL), naming the stage and the operation. */
#ifndef ZL_PIPELINE_CHECK_H
#define ZL_PIPELINE_CHECK_H
#include "pipeline_sched.h" // pp_schedule_t, pp_op_t
#include <stddef.h>         // size_t

/* pp_check_lists: the P stages' lists (ops[s][0..n[s])), v chunks per stage, split = 1 when
 * backwards are split: per chunk every micro-batch's F once, then its B once, then (split) its W
 * once; forwards, backwards and W's each in micro-batch order (the gradients accumulate in 1-rank
 * --accum M's order); no W without a split. Problems: "a W before its B", "a W out of order", ...
 * pp_check_messages: runs the stages' lists of `sched` against each other with the program's
 * messages (pipeline.c, pipeline_pairs.c): per link a stream of sends and receives in issue order,
 * every send synchronous (it completes only once its receive is posted: NCCL's semantics, the
 * strictest), the pairs as one operation, a slot given back only once its output has left, the
 * input gradient's two buffers. Checks that every send pairs with the receive its peer posts in
 * the same place of the link's order, and that the P stages run to the end (no deadlock).
 * pp_check_schedule: both, on pp_schedule_ops's lists. */
int pp_check_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why,
                   size_t nwhy);
int pp_check_messages(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy);
/* The same run for given lists (ops[s][0..n[s]), split as in pp_check_lists), every message alone
 * (no pairs): a list that waits for what its neighbour will only send after waiting for it. */
int pp_check_run(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *why,
                 size_t nwhy);
int pp_check_schedule(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy);
/* DualPipeV's lists with --fb-overlap (loop_fb.c): each F&B posts its B's gradient receive before its
 * F's; early = 1: waits for it, and for B's dx buffer's previous send, before the F's output is sent
 * (an F with an exchange begins B inside), 0: after (the sequential order). Every message alone,
 * synchronous sends, as pp_check_messages. */
int pp_check_fb(int P, int M, int early, char *why, size_t nwhy);
/* The MPI backend's messages (pipeline_post.c): the unpaired receives posted `ahead` ahead (each
 * kind's first before the stage's first operation, the next once one is read), on streams of
 * their own — parity 1: the messages to stage r on a stream of r's parity, so that no stage's
 * receive and send share one; parity 0: on fwd / bwd as without, which deadlocks past P = 2
 * (a receive posted ahead holds back a send queued after it on the same stream). ahead 1..8. */
int pp_check_posted(pp_schedule_t sched, int P, int M, int v, int ahead, int parity, char *why,
                    size_t nwhy);
/* The NCCL backend's messages (pipeline_pairs.c, grouped): every message on ONE communicator per
 * pipeline (a single stream); v = 1: a send held back where pp_groups says and issued with that
 * receive as one group (ncclGroupStart/End: Megatron's batched p2p), else alone; v > 1: the
 * groups of pp_group_cuts, each one operation whose halves match separately (with one peer in the
 * group's order), the stage waiting for a boundary's group before its segment. */
int pp_check_grouped(pp_schedule_t sched, int P, int M, int v, char *why, size_t nwhy);
/* The v > 1 run for given lists and boundaries (bounds[s][i] bit 0 as pp_group_cuts's; the
 * sends that no boundary takes go at their segment's last send, as there): a grouping to try. */
int pp_check_bounds(int P, int M, int v, int split, pp_op_t *const *ops, const int *n,
                    char *const *bounds, char *why, size_t nwhy);
#endif
