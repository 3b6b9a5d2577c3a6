/* pipeline_check_mx.h — the checker's message model, shared by its two files and by nothing else
 * (not a contract: pipeline_check.h is): pipeline_check.c matches the streams and runs the stages,
 * pipeline_check_stage.c issues each stage's sends and receives as the program does.
 *
 * Streams: per stage, one per communicator (0 fwd and 1 bwd: the pipeline's two; 2 fwdw and 3 bwdw:
 * the ring's wrap link, v > 1, or in dualpipev's V chunk 1's two; with receives posted ahead,
 * 4 + r % 2 and 6 + r % 2: the unpaired
 * activations and gradients sent to stage r, and fwd the pairs only), each running its operations
 * one at a time in issue order. A send completes only when its peer's stream is at the matching
 * receive (synchronous: NCCL's and ZL_SYNC_SENDS=1's rendezvous); a send-receive pair is one
 * operation whose two halves match separately. The main thread of a stage runs its list as
 * pipeline.c and the loop do; with receives posted ahead (pipeline_post.c) it posts each kind's
 * first `ahead` unpaired receives before its first operation, waits for the posted one where the
 * list reads it, and then posts the kind's next. */
#ifndef ZL_PIPELINE_CHECK_MX_H
#define ZL_PIPELINE_CHECK_MX_H
#include "pipeline_sched.h" // pp_op_t
#include <stddef.h>         // size_t

enum { MX_SEND = 1, MX_RECV = 2, MX_NCOMM = 8, MX_AHEAD = 8, MX_HALVES = 4 };
/* One send or receive of an operation: dir MX_SEND / MX_RECV (0 once matched), its peer (a stage),
 * its message: kind·2^24 + chunk·2^12 + micro (chunk: the sender's). */
typedef struct mx_half {
  int dir, peer, msg;
} mx_half_t;
/* An operation of a stream: one send, one receive, or a group of them (a pair; NCCL's group of up
 * to two sends and two receives), done when every half matched. Within a group the halves with
 * one peer match in the order they were issued (NCCL's and MPI's order per peer). */
typedef struct mx_op {
  int nh, left;      /* halves, and those not matched yet */
  mx_half_t h[MX_HALVES];
} mx_op_t;

typedef struct mx_stream {
  int *q, head, tail; /* indices into the op table */
} mx_stream_t;

typedef struct mx {
  int P, M, v, V, split;
  int vs;      /* the chunks in a V (dualpipev: split has PP_LIST_V): chunk j's messages on streams
                * 2j (activations) and 2j + 1 (gradients), the V's tip a copy on its stage */
  int seg;     /* grouped with v > 1: the boundaries of pp_group_cuts (mx_step_seg) */
  int grouped; /* NCCL's batched p2p: every message on fwd (one stream), each operation's send held
                * back and grouped with the next operation's receive when it has one (else sent alone) */
  int ahead, parity; /* receives posted ahead (0: none); their streams by the receiver's parity (else
                      * fwd / bwd) */
  char *const *fb; /* --fb-overlap (dualpipev): the lists' F&B marks (pp_schedule_fb), NULL: none */
  int fb_early;     /* 1: an F&B waits for its B's gradient before its F's output is sent (F has an
                     * exchange: loop_fb.c), 0: after (as one operation after the other) */
  mx_op_t *op;
  int nop, cap;
  mx_stream_t st[8][MX_NCOMM]; /* [stage][comm] */
} mx_t;

/* One stage's main thread: the links of its chunks, its position, what it waits for. */
typedef struct mx_main {
  int pc, phase, wait; /* wait: an op index that must complete first (−1: none) */
  int fbh, fbw;        /* an F&B: its B's gradient receive, issued at the F's start (−1: none); fb_early:
                        * 1 once it was waited for inside F, 2 once B's dx buffer's send was too */
  int pend_kind, pend_k, pend_c; /* a send held back for its pair: 'F' / 'B', micro, chunk index j */
  int pend_to, pend_msg;         /* ... its peer and message */
  int *sent;           /* [v·M] the activation send of (chunk j, micro k), −1: none */
  int gsent[8][2];     /* [chunk j][k % 2] the gradient send, −1: none */
  char pf[4096], pb[4096];
  /* receives posted ahead: per kind (0 activations in, 1 gradients in) the unpaired receives in the
   * order the list reads them (micro-batch, chunk j), how many posted and read, the posted ones'
   * operations (ring), and the kind whose next receive is posted once the wait is over (−1: none) */
  int qn[2], *qk[2], *qj[2], posted[2], used[2], ring[2][MX_AHEAD], opened, repost;
  /* segments (grouped, v > 1: pp_group_cuts): cut[i] = 1 where a group boundary precedes operation i;
   * the sends held for the next boundary's group (their kind 'F' / 'B', chunk j, micro-batch) */
  char *cut;
  int npend, segrecv;
  mx_half_t pend[MX_HALVES];
  int pend_kk[MX_HALVES], pend_jj[MX_HALVES], pend_mm[MX_HALVES];
} mx_main_t;

/* Write the printf-style message into why[0..n) (when why and n); returns 1 (pipeline_check.c). */
int mx_say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Advance stage s's main thread as far as it goes, issuing its messages on x's streams; returns 1
 * when it moved. A problem: *err = 1 and why written (pipeline_check_stage.c). mx_step runs each
 * message alone, in pairs or posted ahead; mx_step_seg the segments of interleaved on NCCL. */
int mx_step(mx_t *x, mx_main_t *mm, int s, pp_op_t *const *ops, const int *n, char *why, size_t nwhy,
            int *err);
int mx_step_seg(mx_t *x, mx_main_t *mm, int s, pp_op_t *const *ops, const int *n, char *why,
                size_t nwhy, int *err);
#endif
