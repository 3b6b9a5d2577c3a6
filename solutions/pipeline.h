/* pipeline.h — chapter 07's adapter: pipeline parallelism, a schedule of the loop (train.h's
 * schedule_t; notes/07-pipeline.md).
 *
 * The model's units are cut into P contiguous STAGES, one per rank of a pipeline (balanced by
 * parameter count). A stage keeps its own units only — the data-parallel strategy (DDP, ZeRO-1/2/3)
 * allocates their states over the stage's D replicas as it would a whole model's — and the
 * activations of the micro-batches it has in flight. A step is M micro-batches: stage s receives
 * micro-batch k's input activation from stage s−1, runs its units forward and sends the output to
 * stage s+1; later it receives the gradient of that output from s+1, runs its units backward and
 * sends the gradient of its input to s−1. The SCHEDULE is the order in which a stage runs its 2M
 * operations (3M with the W's below; the loop runs them):
 *   naive  F0 B0 F1 B1 ...           one micro-batch in the whole pipe at a time
 *   gpipe  F0 F1 ... F(M−1) B0 ... B(M−1)   all forwards, then all backwards
 *   1f1b   P−s−1 forwards (warm-up), then F B pairs, then the remaining backwards (cool-down)
 *   interleaved  1F1B over v virtual stages: the units cut into v·P chunks, chunk c on stage
 *          c mod P (each rank v non-contiguous chunks; Megatron-LM's interleaved schedule; M a
 *          multiple of P): a bubble v times smaller, v times the messages
 *   zb-h1, zb-h2  zero bubble (Qi et al. 2023): each backward split into B (the input's gradient,
 *          sent on at once) and W (the weights' gradient, deferred: the loop's 'W' operations,
 *          3M per stage); ZB-H1 is 1F1B with stage s's first s W's held back into its cool-down,
 *          ZB-H2 doubles the warm-up and the W's held back (pipeline_sched.h has the orders)
 *   dualpipev  DeepSeek's DualPipeV: 2P chunks in a V (stage s holds chunks s and 2P−1−s; M >= 2P),
 *          the backward split, forwards and backwards of the two directions interleaved
 *          (pipeline_v.c; notes/07d-dualpipev.md)
 * Every schedule runs the backwards of a stage in micro-batch order 0..M−1 (with a split, the W's
 * too: each weight's gradient is written by its W), and each backward
 * writes its units' gradients with beta (micro-batch 0 overwrites, later ones accumulate), as
 * 1-rank training with --accum M does: the gradients, the loss sum (scored on the last stage in
 * micro-batch order) and so the weights are BITWISE those of 1-rank --accum M training (the
 * same additions in the same order; each unit's arithmetic is the same whichever rank runs it).
 * With --clip the global norm is a sum of per-stage sums (another association): equal to
 * rounding. With D = ranks/P > 1 data-parallel pipelines, equal (bitwise for D = 2) to DDP on
 * D ranks with --accum M, with --zero 0 (DDP), 1, 2 or 3 (solutions/zero*.c on the stage's units
 * over the D replicas; no_sync, train.h: each unit reduced once per step, after its last
 * micro-batch, so ZeRO-2/3's full gradient lives through the whole step and is freed only between
 * steps; ZeRO-3 all-gathers each unit before every micro-batch's forward and backward: 2M gathers
 * per step, (2M + 1)(D − 1)/D · Ψs · b bytes per rank).
 *
 * Ranks: rank = dp · P + stage (the process grid's order with T = 1: stages of one pipeline are
 * neighbours). Activations go forward on one communicator and gradients backward on another,
 * each its own stream: a send waits only behind sends of its own direction, never behind the
 * opposite flow (which would deadlock blocking sends in 1F1B's steady state). On the MPI backend
 * the receives that no pair takes are posted ahead (pipeline_post.c), on streams of their own by
 * the receiving stage's parity; on NCCL every message goes on one communicator, in groups: each
 * send with the next receive (v = 1), interleaved's in Megatron's groups of a steady-state pair's
 * two sends and two receives (pipeline_pairs.c). Either way the bits are the same. */
#ifndef ZL_PIPELINE_H
#define ZL_PIPELINE_H
#include <stdint.h>          // int64_t
#include "pipeline_sched.h" // pp_schedule_t, pp_op_t, pp_split, pp_schedule_ops, pp_inflight_formula
#include "pipeline_sim.h"   // pp_simulate, pp_bubble_formula, pp_bubble_stages (the bubble's forms)
#include "train.h" // schedule_t, train_op_t

/* The schedule for --schedule naive|gpipe|1f1b|interleaved|zb-h1|zb-h2|dualpipev (with --pp and
 * --micro-batches from the flags); NULL for anything else. */
const schedule_t *pipeline_schedule(const char *schedule);
#endif
