/* train.h — the training loop shared by chapters 02–05, and the strategy interface.
 *
 * The model does not know about ranks. The loop calls hooks; a strategy implements them —
 * as PyTorch DDP (autograd hooks) and FSDP (pre/post forward hooks) do:
 *
 *   for each micro-batch:
 *     for u = 0..U−1:   pre_forward(u);  forward of unit u;  post_forward(u)
 *     loss (mean over the GLOBAL batch: local sum / B, so summing over ranks is the mean)
 *     for u = U−1..0:   pre_backward(u); backward of unit u; post_backward(u)
 *   step()   (wait for communication, optimizer on what this rank owns, re-gather)
 *
 * What the strategy must provide before each unit's forward/backward: t->unit_params[u]
 * (where the unit's working params are) and t->unit_grads[u] (where backward writes its
 * grads, with t->grad_beta). Everything else (what is sharded, what is resident) is the
 * strategy's choice — and the lesson of each chapter. See notes/02-ddp.md. */
#ifndef ZL_TRAIN_H
#define ZL_TRAIN_H
#include <stdint.h> // int64_t
#include "comm.h"   // comm_t, comm_handle_t
#include "data.h"   // data_t
#include "model.h"  // model_t, unit_t
#include "ops.h"    // adamw_hp_t
#include "tensor.h" // tensor_t

typedef enum { OPT_ADAMW = 0, OPT_SGD = 1 } optim_kind_t;
typedef enum { NONFINITE_ABORT = 0, NONFINITE_SKIP = 1 } nonfinite_t;

/* Flags shared by chapters 02+ (train_parse_args fills and validates them). */
typedef struct train_cfg {
  int layers, hidden, input, classes; /* --layers --hidden --input --classes */
  int64_t batch;                      /* --batch: GLOBAL batch per step */
  int steps, accum;                   /* --steps, --accum: micro-batches per step */
  int recompute;                      /* --recompute: activation checkpointing per unit */
  double lr, momentum, weight_decay, beta1, beta2, eps, clip; /* --clip 0 = off */
  uint64_t seed;
  optim_kind_t optimizer;             /* --optimizer adamw|sgd */
  dtype_t wdt;                        /* --precision fp32|bf16: working dtype of params and grads */
  coll_impl_t collectives;            /* --collectives vendor|ring */
  const char *device;                 /* --device auto|cpu|cuda */
  const char *backend;                /* --backend auto|mpi|nccl */
  device_t dev;                       /* resolved from --device by train_parse_args */
  backend_t comm_backend;             /* resolved from --backend (and the GPUs per host) */
  char device_note[256];              /* what "auto" chose and why ("" when nothing was automatic) */
  const char *variant;                /* --variant naive|overlap|bucketed (02, 04) */
  double bucket_mb;                   /* --bucket-mb (02, 04) */
  int prefetch;                       /* --prefetch K (05); -1: auto (solutions/zero3.c decides) */
  double mem_limit_mb;                /* --mem-limit-mb, 0 = none */
  double timeout_s;                   /* --timeout-s collective deadline */
  const char *json, *trace;           /* --json PATH --trace PATH */
  const char *save_params;            /* --save-params PATH: full fp32 weights (testing aid) */
  const char *fault;                  /* --fault RANK:STEP:KIND (testing aid) */
  nonfinite_t nonfinite;              /* --nonfinite abort|skip */
  const char *ckpt, *resume;          /* --ckpt DIR, --resume DIR */
  int save_every;
  int log_every;                      /* print a loss line every K steps (0 = first and last) */
  int quiet;
  unsigned chapter_flags;             /* TRAIN_FLAG_* this program accepts (set by train_parse_args) */
} train_cfg_t;

/* Which chapter-specific flags a program accepts. */
enum { TRAIN_FLAG_VARIANT = 1, TRAIN_FLAG_BUCKET = 2, TRAIN_FLAG_PREFETCH = 4 };

struct trainer;

/* Where this rank keeps unit u between steps: the strategy's answer to strategy_t.layout, and
 * the only place anything outside the strategy learns it. Checkpoint save and restore (any
 * world size, any strategy: resharding), the export of the full weights (--save-params, the
 * report's fingerprint) and so zl_ckpt's files all go through it; nothing reads
 * strategy->stage to find memory. Offsets are unit-local elements of the unit's padded
 * layout, [0, padded); slots past numel are pad (0). Pointers are on t->dev. */
typedef struct unit_layout {
  /* The piece whose fp32 truth and optimizer states this rank keeps. Over the ranks the pieces
   * of a unit cover [0, numel) without overlap, or (replicated) every rank keeps the same one. */
  int64_t own_off, own_numel; /* own_numel 0: nothing of unit u here */
  float *w;                   /* (own_numel) fp32 weights: the master in bf16 mode, else the params */
  float *m, *v;               /* (own_numel) optimizer states (m: Adam m or SGD momentum); NULL if none */
  int replicated;             /* 1: every rank keeps this same piece (DDP): rank 0's copy is saved and
                               * exported. The same answer on every rank. */
  /* The working params (wdt) of unit u this rank holds between steps; a restore fills them with
   * the fp32 weights cast to wdt (what every step leaves there). */
  int64_t held_off, held_numel;
  void *params;               /* (held_numel) */
} unit_layout_t;

/* A parallelism strategy. The loop calls, in this order (NULL hooks are skipped):
 *   setup; then per step: per micro-batch  pre_forward(u) / post_forward(u) for u = 0..U−1,
 *   pre_backward(u) / post_backward(u) for u = U−1..0;  then step;  after the last step
 *   (and for every checkpoint or export) layout(u); teardown last.
 * Ownership: setup allocates the model states (t->params, grads, master, opt_m, opt_v) in the
 * shape it chooses; the TRAINER frees them after teardown. teardown frees only the strategy's
 * own state (t->priv and what hangs from it). */
typedef struct strategy {
  const char *name;  /* "ddp-naive", "zero1", ... */
  int stage;         /* 0 DDP, 1, 2, 3: selects the formula the report prints (never memory) */
  void (*setup)(struct trainer *t);                   /* allocate states, shards, buckets */
  void (*pre_forward)(struct trainer *t, int unit);   /* ZeRO-3: gather unit params (+prefetch) */
  void (*post_forward)(struct trainer *t, int unit);  /* ZeRO-3: free gathered params */
  void (*pre_backward)(struct trainer *t, int unit);
  void (*post_backward)(struct trainer *t, int unit); /* unit grads ready: bucket / reduce */
  void (*step)(struct trainer *t);                    /* wait comm, optimizer on own shard, gather */
  void (*teardown)(struct trainer *t);                /* free what setup put in t->priv */
  /* Where unit u lives on this rank (unit_layout_t above): the one hook checkpoints, resume,
   * resharding and the export need. Required; called between steps, comm idle. */
  void (*layout)(struct trainer *t, int u, unit_layout_t *out);
} strategy_t;

typedef struct trainer {
  const train_cfg_t *cfg;
  const strategy_t *strategy;
  comm_t *comm;
  int rank, world;
  device_t dev;
  dtype_t wdt;          /* working dtype of params and grads */
  model_t model;        /* shapes + flat layout (the strategy re-pads it for ZeRO) */
  data_t data;
  int64_t local_batch;  /* rows per micro-batch on this rank: batch / (world·accum) */

  /* Model states: the strategy's setup allocates them (which are full, which are shards is its
   * business; strategy_t.layout tells the rest of the program), the trainer frees them.   */
  tensor_t params;      /* working params (wdt): (P) full in DDP/ZeRO-1/2, (P/N) shard in ZeRO-3 */
  tensor_t grads;       /* grads (wdt): (P) full in DDP/ZeRO-1, (P/N) shard in ZeRO-2/3        */
  tensor_t master;      /* fp32 master, bf16 mode only: (P) in DDP, (P/N) in ZeRO-1..3         */
  tensor_t opt_m, opt_v;/* AdamW m, v (fp32) or SGD momentum in opt_m; (P) DDP, (P/N) ZeRO    */
  adamw_hp_t hp;
  int opt_t;            /* optimizer steps taken (AdamW bias correction) */

  /* Set by the strategy for the unit about to run (see the header comment). */
  void **unit_params;   /* [n_units] */
  void **unit_grads;    /* [n_units] */
  float grad_beta;      /* 0: backward overwrites unit_grads, 1: accumulates (micro-batches) */

  /* Loop position. */
  int step;             /* current step, from 0 */
  int micro;            /* current micro-batch, 0..accum−1 */
  int last_micro;       /* 1 on the last micro-batch of the step (DDP communicates only then) */
  int skipped;          /* set by trainer_finish_grads when --nonfinite skip drops this step */
  double grad_norm;     /* global gradient norm of this step (before clipping) */

  void *priv;           /* the strategy's own state */
  struct train_internal *in; /* activations, batch buffers, results (train.c only) */
} trainer_t;

/* Parse and validate the training flags (before MPI) into cfg, and resolve --device/--backend
 * (cfg->dev, cfg->comm_backend). Returns only when the run should go on: exits the process
 * itself on --help (code 0) and on a bad flag (code 2, one error line). cfg points into argv
 * for its strings. */
void train_parse_args(int argc, char **argv, train_cfg_t *cfg, const char *prog, const char *about, unsigned chapter_flags);
/* The whole program for chapters 02+: the launcher (communicator, model, the strategy's setup,
 * resume), the loop (train.c's train_loop: the diagram above), then the results (report,
 * --json, --trace, --save-params) and the teardown. Returns the process exit code. */
int train_main(const train_cfg_t *cfg, const strategy_t *s, const char *chapter);

/* ---- helpers for strategies ----------------------------------------------------------- */
/* Allocate full params/grads/master/optimizer states ("optim m", "optim v") for the current
 * layout (DDP-style); the trainer frees them after teardown like any model state. */
void trainer_alloc_full_states(trainer_t *t, int with_grads);
/* Fill the full working params (and master) from the deterministic init on rank 0 and
 * broadcast them (counted apart from per-step traffic, as DDP's constructor does). */
void trainer_init_full_params(trainer_t *t);
/* Initial fp32 values of elements [lo, hi) of the padded flat layout (pure function of the seed):
 * lets a sharded strategy fill its shard without the full model. dst: host fp32. */
void trainer_init_values(const trainer_t *t, int64_t lo, int64_t hi, float *dst);
/* Optimizer update on n elements: w fp32 (master, or params in fp32 mode), grad in wdt,
 * states at the same offset; gscale from clipping. Uses t->opt_t, which the loop sets before
 * step() (1 for the first update; a skipped step does not advance it). Does nothing when
 * t->skipped is set (--nonfinite skip), so a strategy may call it unconditionally. */
void trainer_optimizer_update(trainer_t *t, float *w, const void *grad, float *m, float *v, int64_t n, float gscale);
/* Gradient norm and non-finite check of a step. local_sumsq: Σg² over the grads this rank
 * owns; sharded: 1 if ranks own disjoint pieces (sum over ranks), 0 if every rank holds all
 * grads (no communication). Sets t->grad_norm and t->skipped; returns the clip scale (1 when
 * --clip is off). With --nonfinite abort, a non-finite norm stops the job naming the step. */
float trainer_finish_grads(trainer_t *t, double local_sumsq, int sharded);
/* Add a number to the end-of-run report and the --json object (e.g. "n_buckets"); at most
 * 16 per run, key copied (up to 31 characters). Any rank may call it; rank 0's values are used. */
void trainer_report_extra(trainer_t *t, const char *key, double value);
/* Record a named compute phase on the trace (ZeRO's five steps, the optimizer, ...). */
#define TRAINER_PHASE(name, body) do { trace_begin(name); body; trace_end(NULL); } while (0)
#endif
