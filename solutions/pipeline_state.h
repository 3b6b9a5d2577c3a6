/* pipeline_state.h — what solutions/pipeline.c (the schedule, its messages), pipeline_pairs.c
 * (1F1B's paired messages) and pipeline_report.c (the bubble and the stages' bytes, measured
 * beside their formulas) share: the schedule's state
 * in t->sched_priv. Not part of the chapter's contract (pipeline.h). */
#ifndef ZL_PIPELINE_STATE_H
#define ZL_PIPELINE_STATE_H
#include "pipeline.h"        // pp_schedule_t
#include "pipeline_groups.h" // PP_RECV_AHEAD, pp_pairs, pp_groups, pp_group_cuts, pp_posted_recvs
#include "comm.h" // comm_t, comm_handle_t
#include "tensor.h" // tensor_t
#include "train.h"  // trainer_t

/* Where a chunk's messages go: a communicator and the peer's rank in it (NULL: none, the data or
 * the loss is at that end). */
typedef struct pp_link {
  comm_t *comm;
  int peer;
} pp_link_t;

/* PRE-POSTED RECEIVES (the MPI backend; pipeline_post.c): the stage's receives of one kind (the
 * activations into its chunks, or the gradients of their outputs) that do not go in a pair,
 * posted PP_RECV_AHEAD ahead of the operation that reads them, each into a receive buffer of its
 * own: so the neighbour's send finds its receive posted, and the message moves while this stage
 * still computes (above Open MPI's eager limit a send without a posted receive waits for it:
 * notes/07-pipeline.md, 07c). One queue per kind: every chunk's receives of that kind come over
 * the same link, matched in the order they are sent, which is the order this stage reads them. */
typedef struct pp_rxq { /* PP_RECV_AHEAD, pp_posted_recvs: pipeline_groups.h */
  int n, *micro, *chunk;     /* the step's unpaired receives in the order read: micro-batch, chunk j */
  int posted, used;          /* how many of them this step has posted, and read */
  int64_t numel;             /* elements of a buffer: the largest of them (b × the boundary's width) */
  tensor_t buf[PP_RECV_AHEAD]; /* receive n lands in buf[n % PP_RECV_AHEAD] (LEDGER_ACTS) */
  comm_handle_t h[PP_RECV_AHEAD];
} pp_rxq_t;

/* One chunk of units on this rank: global chunk c = j·P + stage (the loop's t->chunks[j]). */
typedef struct pp_chunk {
  int c, u0, u1;             /* its units [u0, u1) */
  int64_t in_numel;          /* input elements per sample */
  pp_link_t rx_act, tx_act, rx_grad, tx_grad;
  comm_handle_t *sent;       /* [M] the send of micro-batch k's output (0: none), waited in pp_release */
  tensor_t gsend[2];         /* (b, in_numel) gradients of the input, sent to chunk c−1 (double-buffered) */
  comm_handle_t gsent[2];
} pp_chunk_t;

typedef struct pp_state {
  pp_schedule_t sched;
  int P, D, stage, dp;  /* P stages × D pipelines; this rank's stage and pipeline */
  int v, V;             /* chunks per rank (virtual stages), V = v·P chunks in all */
  int M;                /* micro-batches per step */
  int b;                /* samples per micro-batch on this rank: batch / (M·D) */
  int *first;           /* [V+1] the split: chunk c is units first[c]..first[c+1]−1 */
  pp_chunk_t *chunks;   /* [v] this rank's chunks, j = 0..v−1 */
  comm_t *fwd, *bwd;    /* this pipeline's P ranks: activations forward, gradients backward; with
                         * pre-posted receives, fwd carries the pairs only (pipeline_pairs.c) */
  comm_t *acts[2], *grads[2]; /* pre-posted receives (MPI): the unpaired activations (gradients) sent
                         * to stage r go on acts[r % 2] (grads[r % 2]), so a stage's receives (its
                         * own parity) and its sends (the other) are on different streams: a receive
                         * posted ahead never holds back a send queued after it. Else NULL */
  comm_t *fwdw, *bwdw;  /* the ring's wrap links (P−1 → 0 and back), v > 1 not grouped, on stages 0 and
                         * P−1; else NULL (a stage between joins no wrap group: comm_split with a
                         * negative color). In a V (vs): chunk 1's activations and gradients, on every
                         * stage (fwd and bwd are chunk 0's: each chunk's messages alone on its streams) */
  int vs;               /* 1: the chunks make a V (dualpipev, pipeline_v.c): chunk 0 is model chunk
                         * `stage`, chunk 1 model chunk 2P−1−stage; at the tip (stage P−1) the turn
                         * from chunk 0 to chunk 1 is a local copy, no message */
  const float **tip_y;  /* [M] the tip: chunk 0's output of micro-batch k, in its slot until chunk 1's F k */
  int tip_dx[2];        /* the tip: the micro-batch whose input gradient of chunk 1 waits in its gsend[k % 2]
                         * for chunk 0's B k (−1: none) */
  /* --fb-overlap: the gradient an F&B's backward posted at its start (pp_v_post_backward), waited for in
   * pp_v_recv_backward: its handle, chunk, micro-batch and buffer (NULL: none posted) */
  comm_handle_t fb_h;
  int fb_j, fb_k;
  float *fb_dy;
  int prepost;          /* 1: receives posted ahead (pipeline_post.c; the MPI backend) */
  int grouped;          /* 1: one communicator (fwd) for every message (the NCCL backend), each
                         * operation's send grouped with the next receive where pp_groups says (v = 1),
                         * or Megatron's groups (v > 1: seg below) */
  pp_rxq_t rxa, rxg;    /* ... the activations in, the gradients in */
  int window_open;      /* this step's first receives are posted */
  comm_t *pipe;         /* this pipeline's P ranks, for the control sums (the gradient norm) */
  comm_t *dpc;          /* this stage's D replicas: the strategy's communicator (t->comm) */
  int64_t ws_bytes;     /* gsend, beside the loop's workspace */
  /* 1F1B's steady state (pipeline_pairs.c): [M] 1 where F k's send of its output goes with
   * the next B's receive (pair_fwd), or B k's send of its input's gradient with the next F's
   * receive (pair_bwd), as one comm_sendrecv_async; grouped, where pp_groups says (the next
   * receive, whichever); the deferred send waiting for its partner. */
  char *pair_fwd, *pair_bwd;
  struct { char kind; int k; const float *buf; int64_t numel; } pend;
  /* Interleaved grouped (the NCCL backend, v > 1: pipeline_pairs.c, pp_group_cuts): at each boundary
   * ONE group (comm_group_async on fwd) of the sends held since the last boundary and the receives of
   * the operations up to the next one; a B's gradient received before its segment's F waits in
   * gstage and is copied into the loop's dy. */
  int seg;              /* 1: these groups */
  /* [n_ops] pp_group_cuts: bit 0 a boundary before the op, bit 1 its send sends the held */
  char *cut;
  int *op_at;           /* [2vM] the op index of F k on chunk j at j·M + k, of B k at vM + j·M + k */
  int seg_done;         /* the first op of the segment whose group was issued (−1: none this step) */
  int nheld;            /* sends held for the next boundary: */
  struct { char kind; int j, k; const float *buf; int64_t numel; int peer; } held[2];
  tensor_t gstage;      /* b × the widest output (LEDGER_ACTS, in ws_bytes) */
  int gstage_j, gstage_k; /* whose gradient it holds (−1: none) */
  double busy_us, span_us; /* summed over the measured steps */
  double kind_us[3];       /* the same busy time in F, B and W operations (t->busy_us), summed */
  int measured;            /* steps measured (all but the first when there are several) */
  int steps_run;           /* steps this process ran (after a resume: fewer than --steps) */
  char tag[64];
} pp_state_t;

/* The messages of chunk j for micro-batch k (pipeline.c): the loop's hooks without pairs. The
 * receives: pp_post_recv_* posts one into buf and returns its handle (no wait); pp_recv_* waits
 * for micro-batch k's (posted ahead, then copied into x / dy; or posted now). */
comm_handle_t pp_post_recv_forward(trainer_t *t, int j, int k, float *buf);
comm_handle_t pp_post_recv_backward(trainer_t *t, int j, int k, float *buf);
void pp_recv_forward(trainer_t *t, int j, int k, float *x);
void pp_send_forward(trainer_t *t, int j, int k, const float *y);
void pp_recv_backward(trainer_t *t, int j, int k, float *dy);
void pp_send_backward(trainer_t *t, int j, int k, const float *dx);

/* 1F1B's pairs (pipeline_pairs.c): which sends go with the next receive (st->pair_fwd/pair_bwd,
 * from both neighbours' operation lists), and the loop's hooks that hold such a send back and
 * issue it with that receive as one comm_sendrecv_async. */
void pp_pairs_setup(pp_state_t *st);
void pp_send_forward_paired(trainer_t *t, int j, int k, const float *y);
void pp_send_backward_paired(trainer_t *t, int j, int k, const float *dx);
void pp_recv_backward_paired(trainer_t *t, int j, int k, float *dy);
void pp_recv_forward_paired(trainer_t *t, int j, int k, float *x);
/* Interleaved grouped (st->seg): the boundaries (after the ops list), the step's end check, the release. */
void pp_seg_setup(trainer_t *t);
void pp_seg_step_end(trainer_t *t);
void pp_seg_teardown(trainer_t *t);

/* DualPipeV's V (pipeline_v.c): chunk ch's links (chunk 0 down on fwd / bwd, chunk 1 up on fwdw /
 * bwdw, none at the tip), the loop's hooks (each message alone; at the tip the local copies), the
 * input gradient's buffer (pipeline.c's, checked at the tip), the step's end and the release. */
void pp_v_links(pp_state_t *st, pp_chunk_t *ch);
void pp_v_recv_forward(trainer_t *t, int j, int k, float *x);
void pp_v_send_forward(trainer_t *t, int j, int k, const float *y);
void pp_v_recv_backward(trainer_t *t, int j, int k, float *dy);
void pp_v_post_backward(trainer_t *t, int j, int k, float *dy);
void pp_v_send_backward(trainer_t *t, int j, int k, const float *dx);
float *pp_v_dx_buffer(trainer_t *t, int j, int k);
float *pp_dx_buffer(trainer_t *t, int j, int k);
void pp_v_step_end(trainer_t *t);
void pp_v_release(trainer_t *t, int j, int k);
void pp_release(trainer_t *t, int j, int k);

/* Pre-posted receives (pipeline_post.c): the queues, their buffers (counted in st->ws_bytes), the
 * step's first posts (at the step's first message hook), a receive taken from its queue (waited,
 * copied into dst, the queue's next posted), the step's end (every receive read), the release. */
void pp_post_setup(trainer_t *t);
void pp_post_open(trainer_t *t);
void pp_post_take(trainer_t *t, pp_rxq_t *q, int j, int k, float *dst, const char *what);
void pp_post_step_end(trainer_t *t);
void pp_post_teardown(trainer_t *t);

/* schedule_t.report (pipeline_report.c): bubble, activations in flight, the data dimension's bytes;
 * pp_print: the setup's lines (the shape, the split). */
void pp_report(trainer_t *t);
void pp_print(const trainer_t *t, const pp_state_t *st);
#endif
