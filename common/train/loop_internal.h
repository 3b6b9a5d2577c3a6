/* loop_internal.h — what the loop's files share and nothing else sees (common/train/loop.c: the
 * launcher, the step, the helpers for strategies; loop_ops.c: the activations and a step's
 * operations; loop_eval.c: the evaluation and --sample). The contract is train.h. */
#ifndef ZL_TRAIN_INTERNAL_H
#define ZL_TRAIN_INTERNAL_H
#include "ckpt_async.h" // ckpt_async_t (--ckpt-async)
#include "ckpt_mem.h" // ckpt_mem_t (--ckpt-mem-every)
#include "report.h" // report_step_t, report_extra_t, report_eval_t
#include "scaler.h" // scaler_t
#include "tensor.h" // tensor_t
#include "train.h"  // trainer_t, train_chunk_t, train_op_t, train_use_t
#include "trace.h"  // trace_stack_t
#include <ucontext.h> // ucontext_t (the F&B's two halves)

/* --model gpt's default text: the largest file of Debian's fortunes package (common/scripts/deps.sh). */

/* What only the loop sees. Activations live in SLOTS, one per micro-batch in flight on a chunk
 * (B = local micro-batch, in samples; u the chunk's units):
 *   in        (B, in_numel_c)     the chunk's input: the batch, or a previous stage's output
 *   out[u]    (B, y_numel_u)      the unit's output = the next unit's input (kept to the backward)
 *   saved[u]  (B, saved_numel_u)  what the unit's backward needs; with --recompute ONE buffer
 *                                 (the largest unit's) shared by all, refilled in the backward
 * Without a schedule there is one chunk and one slot, allocated at the start; a schedule's pool
 * grows a slot at a time, when more micro-batches are in flight than ever before, so its size is
 * the peak the schedule needs (07). Beside the pool: the targets (on the last chunk) and the
 * gradient ping-pong dy[2] (B, max y_numel).
 * With --pa (--recompute --tp T, ZeRO-R's Pa; notes/06-tensor-parallel.md): out[u] of a unit whose
 * output the TP group replicates is this rank's 1/T slice, ceil(B·y_numel_u / T) (the model
 * transform's pa_slice); the whole output lives in work[u % 2] while the forward or the backward
 * needs it (pa_keep, pa_gather: the transform's). */
typedef struct act_slot {
  tensor_t in;       /* (b, in_numel_c) 4-byte inputs: fp32 features, int32 tokens or a stage's activation */
  tensor_t *out;     /* [n] (b, y_numel_u) unit outputs (the last chunk's last: the logits)              */
  tensor_t *saved;   /* [n] (b, saved_numel_u); none with --recompute                                   */
  int micro;         /* the micro-batch it holds, −1: free                                              */
  /* A split backward (a schedule's 'W' operations): B leaves these for W, which gives the slot back */
  tensor_t *wsaved;  /* [n] (b, wsaved_numel_u): what the model's backward_input keeps for its W         */
  void **wgrads;     /* [n] where B's strategy hooks said unit u's gradients go, and with what beta:    */
  float *wbeta;      /* W writes them there (the strategy's pointer and beta of that micro-batch)       */
  int bdone;         /* 1 once B of this micro-batch ran (its W may run)                                */
} act_slot_t;

typedef struct act_pool {
  act_slot_t *slots; /* [n_micro] room; n_slots allocated */
  int n_slots;
  int64_t in_numel;  /* 4-byte input elements per sample */
  int64_t slot_bytes;
} act_pool_t;

/* An F or a B in progress (loop_ops.c's op_fwd_* / op_bwd_*: begin, a unit at a time, end): its slot,
 * the next unit, its index in t->uses, the gradient ping-pong and where the input's gradient goes. */
typedef struct op_run {
  const train_op_t *op;
  act_slot_t *sl;
  int u, use;
  float *dy, *dyp, *dx_out;
  double t0;   /* when its compute began (µs) */
  double lent; /* µs of the other half of an F&B run inside it (not its compute) */
} op_run_t;

/* The F&B under way (loop_fb.c): two halves, the forward on the loop's own stack and the backward on a
 * coroutine's (ucontext), switched at every exchange either one posts; each half's trainer fields kept in
 * its fb_half_t while the other runs. */
typedef struct fb_half {
  int use, micro, last;
  float beta;
} fb_half_t;
typedef struct fb_state {
  int on;                    /* --fb-overlap and the list marks F&B's (pp_schedule_fb) */
  int open, run;             /* inside an F&B; which half runs (0 the forward, 1 the backward) */
  int f_done, b_state;       /* F's units done; B: 0 not begun, 1 begun, 2 its units done */
  int b_posted;              /* B switched out at its own exchange (it travels while F runs) */
  const train_op_t *bop;     /* the backward half: its operation, its run */
  op_run_t b;
  double *loss;
  fb_half_t half[2];         /* the trainer's fields of the half that does not run */
  ucontext_t ctx[2];         /* where each half stopped */
  void *stack;               /* the backward's stack (FB_STACK_BYTES, allocated the first time) */
  trace_stack_t spans[2];    /* each half's open trace spans while the other runs */
  void *san_fake[2];         /* make test-sanitize: each half's ASan fake stack while it waits, */
  const void *main_bottom;   /* the loop's stack (learnt at B's first arrival), */
  size_t main_size;
  void *tsan[2];             /* the halves' TSan fibers (loop_fb.c: san_leave, san_arrived) */
  void (*aside)(void *);     /* the model's scratch swap, run at every switch (trainer_fb_fill) */
  void *aside_arg;
  double since;              /* when the running half was switched in (µs) */
  double lent_us, b_in_us;   /* this F&B: B's spans before F's end (the forward's lent time), from its t0 */
  double b_run_us;           /* this F&B: B's spans from its t0 (its busy, its own waits in) */
  double f_in_us;            /* this F&B: F's spans while B's exchange travelled */
  int fills, f_fills;        /* this F&B: B's pieces inside F, F's pieces inside B */
  double step[5];            /* this step: b_in_us, fills, the marked B's compute, f_in_us, f_fills */
  int role;                  /* trainer_fb_role: 1 F, 2 its B, 3 B inside F, 4 F inside B */
} fb_state_t;

struct train_internal {
  act_pool_t *pools; /* [n_chunks] */
  int split;         /* the step's list has 'W' operations: B computes the inputs' gradients only, W the
                      * weights' later (model_fns_t.backward_input / backward_weight) */
  int *w_due;        /* [n_chunks] split: the micro-batch whose W comes next (the W's run in the order
                      * of their B's, so each weight's gradient adds micro-batches 0..M−1 in order) */
  int in_flight, peak_in_flight; /* slots in use, over all chunks */
  tensor_t y;        /* (b, rows) int32 targets (allocated as 4-byte elements), on the last chunk          */
  tensor_t saved_rc; /* --recompute: (b, max saved_numel) shared by every unit                             */
  tensor_t dy[2];    /* (b, max y_numel) ping-pong: gradient w.r.t. a unit's output                    */
  int64_t ws_bytes;  /* y, saved_rc and dy: the buffers beside the pool                                 */
  int pa;            /* --pa: the replicated outputs are kept as 1/T slices in out[u]                  */
  tensor_t work[2];  /* --pa: (T · max slice) whole outputs, ping-pong: the one read, the one written   */
  int64_t acts_kept; /* the ledger's LEDGER_ACTS growth for out, saved and work (alloc_acts)           */
  void *xh;          /* (b, in_numel) host staging of the evaluation batches when the device is a GPU   */
  int *yh;           /* (b, rows) host staging (evaluation)                                             */
  train_chunk_t whole_chunk; /* without a schedule: the one chunk, every unit                          */
  train_op_t *own_ops;       /* without a schedule: F k, B k for k < accum                             */
  train_use_t *step_uses, *fwd_uses; /* the pre hooks' order in a step, and in a forward-only pass     */
  int n_step_uses;
  model_t whole;             /* a schedule's copy of the model before trainer_keep_units                 */
  report_step_t *steps;
  report_extra_t *extras; /* the report's strategy numbers (trainer_report_extra): grows as needed */
  int nextras, cap_extras;
  int check_master;  /* ZL_CHECK_MASTER=1: bf16 params == bf16(master) after every step */
  int local_nonfinite; /* this rank's OWN gradients of this step held NaN/Inf (before any reduction) */
  int checked_steps;
  report_eval_t *evals; /* --eval-every: [nevals] validation losses (--model gpt) */
  int nevals;
  scaler_t scaler;             /* --precision fp16: the loss scale S and its state (scaler.h) */
  int steps_run, overflows_run; /* this run's steps, and those of them fp16 overflowed (skipped) */
  /* --post-validate (07; loop.c, pv_*): the step's update runs before the stages' sum of the norm and
   * of the overflow flags; a host copy of what the update may touch is taken before it and put back
   * when that sum says the step is skipped (or clipped: then the step runs again, pv.redo) */
  struct {
    int on, pending, redo;
    double stage_sumsq;   /* this stage's Σg² (its replicas' sum), INFINITY when its gradients overflowed */
    float gscale;         /* the scale the update ran with: no clip (1/S in fp16) */
    tensor_t copy[4];     /* host: params, master, optim m, optim v as they were before the update */
    int rollbacks, redos; /* steps rolled back (skipped), and rolled back then redone clipped */
  } pv;
  ckpt_async_t ckpt;           /* the run's checkpoints: a background write, the stall (ckpt_async.h) */
  ckpt_mem_t mem;              /* --ckpt-mem-every: snapshots in RAM and their buddy copies (ckpt_mem.h) */
  fb_state_t fb;               /* --fb-overlap: the F&B under way (loop_fb.c) */
  double fb_total[6];          /* this run: the sums of fb.step[5], then the steps */
  int64_t overflow_ctl_bytes;  /* fp16: bytes this rank sent in the overflow check (its flags ride the norm's
                                * control all-reduce, trainer_finish_grads), summed over the steps */
};

/* loop_ops.c: the pools (without a schedule: its one slot now) and the buffers beside them; their
 * release. */
void train_alloc_acts(trainer_t *t);
void train_free_acts(trainer_t *t);
/* Without a schedule: one chunk of every unit, F k B k for each of the --accum micro-batches. */
void train_own_schedule(trainer_t *t);
/* The pre hooks' order of a step and of a forward-only pass (t->uses). */
void train_build_uses(trainer_t *t);
/* One step's operations in order; returns this rank's local loss sum (0 without the last chunk). */
double train_run_ops(trainer_t *t);
/* The forward of B samples through every unit with the strategy's forward hooks (so ZeRO-3 gathers),
 * no backward, in the loop's own slot: the evaluation and --sample (no schedule: loop_flags.c). */
void train_forward_only(trainer_t *t, int B);
/* "acts_saved_bytes" and the activation formulas (--model gpt, --pa) into the report. */
void train_report_acts(trainer_t *t);
/* An operation in pieces (loop_ops.c): op_forward and op_backward run them in a row. */
void op_fwd_begin(trainer_t *t, const train_op_t *op, op_run_t *r);
void op_fwd_unit(trainer_t *t, op_run_t *r);
double op_fwd_end(trainer_t *t, op_run_t *r);
void op_bwd_begin(trainer_t *t, const train_op_t *op, op_run_t *r, double *loss);
void op_bwd_unit(trainer_t *t, op_run_t *r);
double op_bwd_end(trainer_t *t, op_run_t *r);
/* loop_fb.c: ops[0] (an F) and ops[1] (a B) as one F&B; returns their compute (µs) in busy[0], busy[1]. */
void train_run_fb(trainer_t *t, const train_op_t *ops, double *loss, double *busy);
/* loop_fb.c: the backward's stack and TSan fiber, at the trainer's end. */
void train_fb_free(trainer_t *t);
/* loop_eval.c: --eval-every's validation loss after `step` steps (collective); --sample N. */
void train_eval_record(trainer_t *t, int step);
void train_sample_text(trainer_t *t);
#endif
