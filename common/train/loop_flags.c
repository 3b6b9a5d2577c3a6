/* loop_flags.c — the training flags of chapters 02+ (train.h: train_parse_args): parsed and
 * checked before MPI starts, one line naming the flag and exit code 2 on a bad one, --device and
 * --backend resolved once. The loop and the launcher are in loop.c. */
#include "train.h"  // train_cfg_t, train_parse_args, TRAIN_FLAG_*
#include "args.h"   // args_parse, args_error, args_given, args_env_world, args_env_rank, arg_spec_t
#include "data.h"   // data_text_check (--data)
#include "device.h" // device_cuda_built, device_cuda_count
#include "fault.h"  // fault_parse (--fault)
#include "gpt.h"    // gpt_preset, gpt_shape_error, gpt_count_params (--model gpt)
#include "model.h"  // model_count_params
#include "report.h" // report_check_outputs
#include <stdio.h>  // snprintf, fprintf
#include <stdlib.h> // exit, getenv, atoi
#include <string.h> // strcmp, strncmp
#include <sys/stat.h> // stat, S_ISDIR (--resume)

#define TRAIN_DEFAULT_TEXT "/usr/share/games/fortunes/cookie"

/* ---- flags ----------------------------------------------------------------------------- */

/* --device and --backend, checked and resolved once, here (before MPI): cfg->dev and
 * cfg->comm_backend are what the run uses, cfg->device_note says why when "auto" chose. */
static void resolve_device(train_cfg_t *cfg) {
  int built = device_cuda_built(), ngpu = built ? device_cuda_count() : 0;
  int want_cuda = strcmp(cfg->device, "cuda") == 0, want_cpu = strcmp(cfg->device, "cpu") == 0;
  if (want_cuda && !built)
    exit(args_error(
        "--device", "cuda",
        "this binary was built without CUDA (rebuild with make GPU=1 on a machine with nvcc and NCCL)"));
  if (want_cuda && ngpu == 0)
    exit(args_error("--device", "cuda", "no GPU is visible to this process (use --device cpu or auto)"));
  if (strcmp(cfg->backend, "nccl") == 0 && !built)
    exit(args_error("--backend", "nccl", "this binary was built without CUDA and NCCL (make GPU=1)"));
  cfg->dev = want_cuda || (!want_cpu && ngpu > 0) ? DEV_CUDA : DEV_CPU;
  if (strcmp(cfg->backend, "nccl") == 0 && cfg->dev != DEV_CUDA)
    exit(args_error("--backend", "nccl",
                    want_cpu ? "needs --device cuda (NCCL moves GPU buffers); use --backend mpi on cpu"
                             : "needs a GPU (--device auto found none); use --backend mpi"));
  size_t n = 0, cap = sizeof cfg->device_note;
  cfg->device_note[0] = 0;
  if (!want_cuda && !want_cpu && ngpu > 0)
    n = (size_t)snprintf(cfg->device_note, cap,
                         "device: auto -> cuda (%d GPU%s visible; --device cpu to stay on the CPU)", ngpu,
                         ngpu > 1 ? "s" : "");
  else if (!want_cuda && !want_cpu)
    n = (size_t)snprintf(cfg->device_note, cap, "device: auto -> cpu (%s)",
                         built ? "no GPU visible" : "built without CUDA");
  cfg->comm_backend = cfg->dev == DEV_CUDA ? BACKEND_NCCL : BACKEND_MPI;
  if (strcmp(cfg->backend, "mpi") == 0) cfg->comm_backend = BACKEND_MPI;
  if (cfg->dev == DEV_CUDA && strcmp(cfg->backend, "auto") == 0) {
    /* NCCL needs one GPU per rank; more ranks on this host than GPUs share them through the
     * host-staged MPI backend instead — said out loud, never silently. */
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local_ranks = ls ? atoi(ls) : 1;
    if (local_ranks > ngpu) {
      cfg->comm_backend = BACKEND_MPI;
      snprintf(cfg->device_note + n, cap - n,
               "%sbackend: auto -> mpi (%d ranks on this host share %d GPU%s; NCCL needs one GPU per rank)",
               n ? "\n" : "", local_ranks, ngpu, ngpu > 1 ? "s" : "");
    }
  }
}

/* The pipeline's flags against the world size (chapter 07): P stages of D = world/P ranks each.
 * Prints the one error line and returns 1 when they do not fit. */
static int pipeline_check(train_cfg_t *cfg, int world) {
  char v[64];
  /* units: the MLP's L+1 linears; the GPT's embeddings | L blocks | final LN + head */
  int units = strcmp(cfg->model_kind, "gpt") == 0 ? cfg->gpt.n_layer + 2 : cfg->layers + 1;
  /* --tp T: the pipelines are made of the ranks / T data-parallel ranks */
  world /= cfg->tp > 1 ? cfg->tp : 1;
  if (cfg->pp < 0) cfg->pp = world; /* auto */
  if (cfg->fb_overlap && strcmp(cfg->schedule, "dualpipev") != 0)
    return args_error("--fb-overlap", NULL, "needs --schedule dualpipev (the F&B pairs of its list)"), 1;
  if (cfg->fb_overlap && cfg->zero == 3)
    return args_error("--fb-overlap", NULL, "only with --zero 0, 1 or 2: ZeRO-3's gathers follow the list's "
                      "order of the units' uses, which an F&B interleaves"), 1;
  snprintf(v, sizeof v, "%d", cfg->pp);
  if (cfg->pp > world) return args_error("--pp", v, "must be at most the ranks (%d)", world), 1;
  if (world % cfg->pp)
    return args_error("--pp", v, "must divide the ranks (%d): D = ranks / P data-parallel pipelines", world),
           1;
  if (cfg->pp > units)
    return args_error("--pp", v, "must be at most the model's units (%d): every stage holds at least one",
                      units),
           1;
  /* v·P chunks of at least one unit; micro-batches in groups of P */
  if (strcmp(cfg->schedule, "interleaved") == 0) {
    if (cfg->pp < 2)
      return args_error("--pp", v, "must be at least 2 with --schedule interleaved (a ring of stages)"), 1;
    snprintf(v, sizeof v, "%d", cfg->virtual_stages);
    if ((int64_t)cfg->virtual_stages * cfg->pp > units)
      return args_error("--virtual-stages", v, "times --pp %d must be at most the model's units (%d)",
                        cfg->pp, units),
             1;
    snprintf(v, sizeof v, "%d", cfg->micro_batches);
    if (cfg->micro_batches % cfg->pp)
      return args_error("--micro-batches", v, "must be a multiple of --pp %d with --schedule interleaved",
                        cfg->pp),
             1;
  }
  if (strcmp(cfg->schedule, "dualpipev") == 0) { /* 2P chunks in a V, M >= 2P (notes/07d-dualpipev.md) */
    if (2 * cfg->pp > units)
      return args_error("--pp", v, "times 2 must be at most the model's units (%d) with --schedule dualpipev "
                        "(2P chunks in a V)", units), 1;
    snprintf(v, sizeof v, "%d", cfg->micro_batches);
    if (cfg->micro_batches < 2 * cfg->pp)
      return args_error("--micro-batches", v, "must be at least 2 x --pp %d with --schedule dualpipev",
                        cfg->pp), 1;
  }
  if (cfg->accum != 1) {
    snprintf(v, sizeof v, "%d", cfg->accum);
    return args_error("--accum", v, "must be 1 with a pipeline: its micro-batches are --micro-batches M"), 1;
  }
  /* DDP sums the gradients in its step */
  if (cfg->post_validate && cfg->clip > 0 && cfg->zero == 0 && world / cfg->pp > 1)
    return args_error(
               "--post-validate", NULL,
               "with --clip and --zero 0 needs one replica per stage (D = 1): DDP sums "
               "the gradients inside its step, which a clipped redo would run again (use --zero 1, 2 or 3)"),
           1;
  /* B now, W later: the unsplit model's two halves (model.h) */
  if (strncmp(cfg->schedule, "zb-", 3) == 0 || strcmp(cfg->schedule, "dualpipev") == 0) {
    if (cfg->tp > 1) {
      snprintf(v, sizeof v, "%d", cfg->tp);
      return args_error("--tp", v,
                        "must be 1 with --schedule %s (the tensor-parallel layers keep their backward whole)",
                        cfg->schedule),
             1;
    }
    if (cfg->recompute)
      return args_error("--recompute", NULL,
                        "cannot go with --schedule %s (a W runs after its B, when the shared "
                        "recompute buffer holds another unit)",
                        cfg->schedule),
             1;
  }
  /* validation and sampling run a forward of the whole model on every rank: a stage holds only its units */
  if (cfg->eval_every > 0) {
    snprintf(v, sizeof v, "%d", cfg->eval_every);
    return args_error("--eval-every", v,
                      "must be 0 with a pipeline (validation runs the whole model on one rank)"),
           1;
  }
  if (cfg->sample > 0) {
    snprintf(v, sizeof v, "%d", cfg->sample);
    return args_error("--sample", v, "must be 0 with a pipeline (sampling runs the whole model on one rank)"),
           1;
  }
  int64_t per = (int64_t)cfg->micro_batches * (world / cfg->pp);
  if (cfg->batch % per) {
    snprintf(v, sizeof v, "%lld", (long long)cfg->batch);
    return args_error("--batch", v,
                      "must be divisible by micro-batches x data-parallel size = %d x %d = %lld",
                      cfg->micro_batches, world / cfg->pp, (long long)per),
           1;
  }
  return 0;
}

/* Flags that mean something only beside another flag: refused naming the one they need (exit 2),
 * or, where a script may pass them for every variant, one warning line (rank 0) — never ignored in
 * silence. After the flags are parsed and --model resolved. */
static void check_ignored_flags(const train_cfg_t *cfg, int argc, char **argv) {
  unsigned cf = cfg->chapter_flags;
  int pipeline = (cf & TRAIN_FLAG_PIPELINE) != 0, cp = (cf & TRAIN_FLAG_CP) != 0;
  int moe = (cf & TRAIN_FLAG_MOE) != 0;
  const struct { const char *flag; int unused; const char *why; } only[] = {
      {"--eval-batches", cfg->eval_every == 0, "needs --eval-every E > 0 (the batches of each evaluation)"},
      {"--temperature", cfg->sample == 0, "needs --sample N > 0 (the temperature of the sampling)"},
      {"--momentum", cfg->optimizer != OPT_SGD,
       "needs --optimizer sgd (SGD's momentum; AdamW keeps its own moments, beta1 0.9)"},
      {"--virtual-stages", pipeline && strcmp(cfg->schedule, "interleaved") != 0,
       "needs --schedule interleaved (the chunks per rank of that schedule; the others run one)"},
      {"--cp-comm", cp && cfg->cp <= 1, "needs --cp C > 1 (how the C context-parallel ranks attend)"},
      {"--cp-balance", cp && cfg->cp <= 1, "needs --cp C > 1 (how a sequence is cut over the C ranks)"},
      {"--cp-balance", cp && cfg->cp > 1 && cfg->cp_comm && strcmp(cfg->cp_comm, "a2a") == 0,
       "is the ring's (--cp-comm ring): with --cp-comm a2a every rank holds one contiguous chunk"},
      {"--aux-loss-scope", moe && cfg->aux_loss_coeff == 0,
       "needs --aux-loss-coeff > 0 (the tokens the auxiliary loss counts; 0 turns it off)"},
  };
  for (size_t i = 0; i < sizeof only / sizeof only[0]; i++) {
    const char *given = only[i].unused ? args_given(argc, argv, only[i].flag) : NULL;
    if (given) exit(args_error(only[i].flag, given, "%s", only[i].why));
  }
  /* chapter 02's benchmarks pass one --bucket-mb to every --variant: a warning, not a refusal */
  const char *bucket = (cf & TRAIN_FLAG_BUCKET) && cfg->variant && strcmp(cfg->variant, "bucketed") != 0
      ? args_given(argc, argv, "--bucket-mb") : NULL;
  if (bucket && args_env_rank() == 0)
    fprintf(stderr, "warning: --bucket-mb %s: ignored with --variant %s (only the bucketed variant has "
            "buckets)\n", bucket, cfg->variant);
}

/* --model gpt: the preset, then the overrides, then the text file, and none of the MLP's shape
 * flags given; --model mlp: none of the GPT flags. Exits 2 with one line naming the flag. */
/* --optimizer muon: what does not compose is refused here, naming why (notes/03-zero1.md). The
 * strategies that cut matrices into flat slices are refused by train_main (strategy_t.whole_matrices). */
static void check_muon_flags(const train_cfg_t *cfg) {
  if (cfg->tp > 1)
    exit(args_error("--optimizer", "muon",
                    "with --tp > 1 each rank holds a slice of every matrix (Megatron's rows or columns), and "
                    "Newton-Schulz needs it whole: gathering it across the TP group is not built"));
  if (cfg->chapter_flags & TRAIN_FLAG_MOE)
    exit(args_error("--optimizer", "muon",
                    "the MoE model lists no matrices for Muon (its experts' W): not built"));
  if (cfg->ckpt || cfg->resume)
    exit(args_error(cfg->ckpt ? "--ckpt" : "--resume", cfg->ckpt ? cfg->ckpt : cfg->resume,
                    "with --optimizer muon: checkpoints do not carry Muon's states yet (its momentum, "
                    "and v for the AdamW part only)"));
}

static void check_model_flags(train_cfg_t *cfg, int argc, char **argv) {
  char v[64];
  gpt_shape_t over = cfg->gpt;
  static const char *mlp_flags[] = {"--layers", "--hidden", "--input", "--classes"};
  for (int i = 0; i < 4 && strcmp(cfg->model_kind, "gpt") == 0; i++) {
    const char *given = args_given(argc, argv, mlp_flags[i]);
    if (given)
      exit(args_error(mlp_flags[i], given,
                      "is the MLP's shape; --model gpt takes --gpt PRESET, --n-layer, --n-head, "
                      "--n-embd, --seq-len"));
  }
  if (strcmp(cfg->model_kind, "gpt") != 0) {
    const char *gflag = cfg->gpt_preset ? "--gpt" : over.n_layer ? "--n-layer" : over.n_head ? "--n-head"
                      : over.n_embd ? "--n-embd" : over.seq_len ? "--seq-len" : cfg->data ? "--data"
                      : cfg->eval_every ? "--eval-every" : cfg->sample ? "--sample" : NULL;
    if (gflag)
      exit(args_error(gflag, args_given(argc, argv, gflag),
                      "needs --model gpt (the MLP trains on synthetic data)"));
    return;
  }
  gpt_preset(cfg->gpt_preset ? cfg->gpt_preset : "small", &cfg->gpt); /* the choice was checked */
  if (over.n_layer) cfg->gpt.n_layer = over.n_layer;
  if (over.n_head) cfg->gpt.n_head = over.n_head;
  if (over.n_embd) cfg->gpt.n_embd = over.n_embd;
  if (over.seq_len) cfg->gpt.seq_len = over.seq_len;
  const char *why = gpt_shape_error(cfg->gpt);
  if (why) {
    snprintf(v, sizeof v, "%d", cfg->gpt.n_embd);
    exit(args_error("--n-embd", v, "%s (--n-head %d)", why, cfg->gpt.n_head));
  }
  if (!cfg->data) cfg->data = TRAIN_DEFAULT_TEXT;
  char dwhy[256];
  if (data_text_check(cfg->data, cfg->gpt.seq_len, dwhy, sizeof dwhy))
    exit(args_error(
        "--data", cfg->data, "%s%s", dwhy,
        strcmp(cfg->data, TRAIN_DEFAULT_TEXT) == 0
            ? " (the default text: install the Debian package fortunes, or pass --data PATH to any text file)"
            : ""));
}

void train_parse_args(int argc, char **argv, train_cfg_t *cfg, const char *prog, const char *about,
                      unsigned chapter_flags) {
  /* Defaults: a small model that learns visibly in a few seconds on 2 CPU ranks; the batch of
   * 240 divides by 1, 2, 3, 4, 5, 6 and 8 ranks. */
  *cfg = (train_cfg_t){.layers = 3,
                       .hidden = 128,
                       .input = 32,
                       .classes = 10,
                       .batch = 240,
                       .steps = 60,
                       .accum = 1,
                       .lr = 3e-3,
                       .momentum = 0.9,
                       .weight_decay = 0.0,
                       .beta1 = 0.9,
                       .beta2 = 0.999,
                       .eps = 1e-8,
                       .clip = 0.0,
                       .seed = 1234,
                       .optimizer = OPT_ADAMW,
                       .muon_lr = 0.02,
                       .wdt = DT_F32,
                       .collectives = COLL_VENDOR,
                       .device = "auto",
                       .backend = "auto",
                       .variant = "bucketed",
                       .bucket_mb = 0.1,
                       .prefetch = -1,
                       .mem_limit_mb = 0,
                       .timeout_s = 300,
                       .nonfinite = NONFINITE_ABORT,
                       .log_every = 10,
                       .chapter_flags = chapter_flags,
                       .model_kind = "mlp",
                       .tp = 1,
                       .host_threads = 1,
                       .moe = 8,
                       .topk = 2,
                       .moe_every = 1,
                       .ep = 1,
                       .aux_loss_coeff = 1e-2,
                       .cp = 1,
                       .cp_balance = 1,
                       .pa = -1,
                       .eval_batches = 2,
                       .temperature = 1.0,
                       .pp = -1,
                       .micro_batches = 4,
                       .schedule = "1f1b",
                       .virtual_stages = 2,
                       .loss_scale = 0,
                       .init_scale = 65536,
                       .growth_factor = 2,
                       .backoff_factor = 0.5,
                       .growth_interval = 2000};
  const char *optimizer = "adamw", *precision = "fp32", *collectives = "vendor", *nonfinite = "abort";
  int64_t seed = 1234;
  arg_spec_t specs[96];
  int n = 0;
#define SPEC(...) specs[n++] = (arg_spec_t){__VA_ARGS__}
  SPEC("--layers", ARG_INT, &cfg->layers, 1, 256, NULL, "hidden layers L (the model has L+1 linear units)");
  SPEC("--hidden", ARG_INT, &cfg->hidden, 1, 65536, NULL, "hidden width H");
  SPEC("--input", ARG_INT, &cfg->input, 1, 65536, NULL, "input features D");
  SPEC("--classes", ARG_INT, &cfg->classes, 2, 65536, NULL, "classes C");
  SPEC("--model", ARG_CHOICE, &cfg->model_kind, 0, 0, "mlp|gpt",
       "the MLP on teacher-student data, or GPT-2 on text (bytes as tokens)");
  SPEC("--gpt", ARG_CHOICE, &cfg->gpt_preset, 0, 0, "tiny|small|124m-shape",
       "GPT shape preset (default small; common/model/gpt.h)");
  SPEC("--n-layer", ARG_INT, &cfg->gpt.n_layer, 1, 1024, NULL, "GPT blocks L (overrides the preset)");
  SPEC("--n-head", ARG_INT, &cfg->gpt.n_head, 1, 1024, NULL, "GPT attention heads (overrides the preset)");
  SPEC("--n-embd", ARG_INT, &cfg->gpt.n_embd, 1, 65536, NULL,
       "GPT width C, divisible by --n-head (overrides the preset)");
  SPEC("--seq-len", ARG_INT, &cfg->gpt.seq_len, 1, 65536, NULL,
       "GPT context T in bytes (overrides the preset)");
  SPEC("--data", ARG_STR, &cfg->data, 0, 0, NULL,
       "text file for --model gpt (default " TRAIN_DEFAULT_TEXT ", Debian package fortunes)");
  SPEC("--eval-every", ARG_INT, &cfg->eval_every, 0, 10000000, NULL,
       "validation loss every E steps and after the last (0: never; --model gpt)");
  SPEC("--eval-batches", ARG_INT, &cfg->eval_batches, 1, 100000, NULL,
       "global batches of the validation split per evaluation");
  SPEC("--sample", ARG_INT, &cfg->sample, 0, 1000000, NULL,
       "generate N bytes at the end, printed by rank 0 (--model gpt)");
  SPEC("--temperature", ARG_DOUBLE, &cfg->temperature, 0, 100, NULL,
       "sampling temperature for --sample (0: greedy)");
  SPEC("--batch", ARG_I64, &cfg->batch, 1, 1 << 30, NULL,
       "GLOBAL batch per step (divisible by ranks x accum)");
  SPEC("--steps", ARG_INT, &cfg->steps, 1, 10000000, NULL, "training steps");
  SPEC("--lr", ARG_DOUBLE, &cfg->lr, 0, 10, NULL, "learning rate");
  SPEC("--seed", ARG_I64, &seed, 0, 4e18, NULL, "seed of the data, the teacher and the init");
  SPEC("--optimizer", ARG_CHOICE, &optimizer, 0, 0, "adamw|sgd|muon|onebit-adam",
       "AdamW, SGD with momentum, Muon for the hidden matrices + AdamW for the rest (muon.h), or 1-bit Adam "
       "(chapter 13's DDP: AdamW for --warmup-steps, then the momentum all-reduced as signs; onebit.h)");
  SPEC("--muon-lr", ARG_DOUBLE, &cfg->muon_lr, 0, 10, NULL,
       "--optimizer muon: Muon's learning rate (AdamW's part: --lr)");
  SPEC("--momentum", ARG_DOUBLE, &cfg->momentum, 0, 0.999999, NULL, "SGD momentum");
  SPEC("--weight-decay", ARG_DOUBLE, &cfg->weight_decay, 0, 10, NULL,
       "decoupled weight decay (AdamW), L2 (SGD)");
  SPEC("--precision", ARG_CHOICE, &precision, 0, 0, "fp32|bf16|fp16",
       "working dtype of params and grads (bf16, fp16: fp32 master; fp16 with loss scaling)");
  SPEC("--loss-scale", ARG_DOUBLE, &cfg->loss_scale, 0, 1e30, NULL,
       "fp16: static loss scale S (0: dynamic, GradScaler's rule; DeepSpeed's \"loss_scale\")");
  SPEC("--init-scale", ARG_DOUBLE, &cfg->init_scale, 1e-30, 1e30, NULL,
       "fp16, dynamic: the first loss scale (GradScaler init_scale 65536)");
  SPEC("--growth-factor", ARG_DOUBLE, &cfg->growth_factor, 1, 1e6, NULL,
       "fp16, dynamic: scale *= this after --growth-interval steps without overflow (2)");
  SPEC("--backoff-factor", ARG_DOUBLE, &cfg->backoff_factor, 1e-6, 1, NULL,
       "fp16, dynamic: scale *= this on an overflow; the step is skipped (0.5)");
  SPEC("--growth-interval", ARG_INT, &cfg->growth_interval, 1, 1000000000, NULL,
       "fp16, dynamic: steps without overflow before the scale grows (2000)");
  SPEC("--collectives", ARG_CHOICE, &collectives, 0, 0, "vendor|ring",
       "MPI/NCCL collectives, or ours (solutions/ring.c)");
  SPEC("--device", ARG_CHOICE, &cfg->device, 0, 0, "auto|cpu|cuda",
       "where tensors live (auto: a GPU when visible)");
  SPEC("--backend", ARG_CHOICE, &cfg->backend, 0, 0, "auto|mpi|nccl",
       "communicator (auto: nccl on cuda, mpi on cpu)");
  SPEC("--recompute", ARG_FLAG, &cfg->recompute, 0, 0, NULL,
       "activation checkpointing: keep each unit's output only, rerun its forward in the backward");
  SPEC("--accum", ARG_INT, &cfg->accum, 1, 4096, NULL, "micro-batches per step (gradient accumulation)");
  SPEC("--clip", ARG_DOUBLE, &cfg->clip, 0, 1e9, NULL, "clip the global gradient norm to this (0: off)");
  SPEC("--json", ARG_STR, &cfg->json, 0, 0, NULL, "write the results object to PATH (rank 0)");
  SPEC("--trace", ARG_STR, &cfg->trace, 0, 0, NULL, "write a Chrome trace (Perfetto) to PATH");
  SPEC("--alloc-trace", ARG_STR, &cfg->alloc_trace, 0, 0, NULL,
       "write rank 0's ledger alloc/free sequence to PATH (replayed by zl_allocsim, notes/zero-r.md)");
  SPEC("--save-params", ARG_STR, &cfg->save_params, 0, 0, NULL,
       "write the final fp32 weights (raw float32, Psi values) to PATH");
  SPEC("--mem-limit-mb", ARG_DOUBLE, &cfg->mem_limit_mb, 0, 1e9, NULL,
       "per-rank memory budget in MiB (0: none)");
  SPEC("--buffer-mb", ARG_DOUBLE, &cfg->buffer_mb, 0, 1e6, NULL,
       "constant-size buffers (ZeRO-R CB, notes/zero-r.md): cap every collective and per-step comm buffer at "
       "this many MiB, larger ones run in pieces (0: unbounded)");
  SPEC("--timeout-s", ARG_DOUBLE, &cfg->timeout_s, 0, 1e6, NULL,
       "deadline for any one collective wait (0: none)");
  SPEC("--nonfinite", ARG_CHOICE, &nonfinite, 0, 0, "abort|skip",
       "on a NaN/Inf gradient: stop, or skip the step");
  SPEC("--log-every", ARG_INT, &cfg->log_every, 0, 10000000, NULL,
       "print the loss every L steps (0: first and last)");
  SPEC("--quiet", ARG_FLAG, &cfg->quiet, 0, 0, NULL, "no per-step lines and tables, one summary line");
  SPEC("--fault", ARG_STR, &cfg->fault, 0, 0, NULL,
       "RANK:STEP:KIND, KIND exit|abort|kill|hang|nan|ckpt|overflow|node: make one rank fail (testing aid)");
  SPEC("--ckpt", ARG_STR, &cfg->ckpt, 0, 0, NULL,
       "checkpoint directory (DIR/step-NNNNNN/, DIR/latest); with --save-every");
  SPEC("--save-every", ARG_INT, &cfg->save_every, 0, 10000000, NULL,
       "save a checkpoint to --ckpt every S steps and after the last (0: after the last only)");
  SPEC("--ckpt-async", ARG_FLAG, &cfg->ckpt_async, 0, 0, NULL,
       "with --ckpt: copy each shard to host RAM, write it on a background thread");
  SPEC("--ckpt-mem-every", ARG_INT, &cfg->ckpt_mem_every, 0, 10000000, NULL,
       "keep a snapshot in RAM (/dev/shm) and on a buddy rank every K steps: zlrun --restarts R resumes it");
  SPEC("--resume", ARG_STR, &cfg->resume, 0, 0, NULL,
       "continue from a checkpoint: DIR (its latest) or DIR/step-NNNNNN");
  if (chapter_flags & TRAIN_FLAG_VARIANT)
    SPEC("--variant", ARG_CHOICE, &cfg->variant, 0, 0, "naive|overlap|bucketed",
         "naive: all-reduce after backward; overlap: per unit, async; bucketed: buckets of --bucket-mb");
  if (chapter_flags & TRAIN_FLAG_BUCKET)
    SPEC("--bucket-mb", ARG_DOUBLE, &cfg->bucket_mb, 0, 1e6, NULL, "bucket cap in MiB (any value > 0)");
  if (chapter_flags & TRAIN_FLAG_COMPRESS) /* the value is checked by the chapter (13) */
    SPEC("--compress", ARG_STR, &cfg->compress, 0, 0, NULL,
         "powersgd:R: each bucket's gradient sent as a rank-R product P Q^T (PowerSGD, with error feedback "
         "and warm start; --variant bucketed, fp32, CPU; notes/13-compression.md)");
  /* ZeRO-1 and ZeRO-2 (chapters 03, 04) know --compress only to refuse it, saying why (issue 50) */
  const char *compress_zero = NULL;
  int zero12 = strcmp(prog, "ch03_zero1") == 0 || strcmp(prog, "ch04_zero2") == 0;
  if (zero12 && !(chapter_flags & TRAIN_FLAG_COMPRESS))
    SPEC("--compress", ARG_STR, &compress_zero, 0, 0, NULL,
         "chapter 13's PowerSGD (ch13_compress): refused here, the line says why");
  int warmup = 0;
  if (chapter_flags & TRAIN_FLAG_COMPRESS)
    SPEC("--warmup-steps", ARG_INT, &warmup, 1, 10000000, NULL,
         "--optimizer onebit-adam: AdamW steps (the gradients all-reduced) before the variance freezes and "
         "the momentum travels as 1 bit per element");
  if (chapter_flags & TRAIN_FLAG_PIPELINE) {
    SPEC("--pp", ARG_INT, &cfg->pp, 1, 256, "auto",
         "pipeline stages P (contiguous units); auto: every rank a stage");
    SPEC("--micro-batches", ARG_INT, &cfg->micro_batches, 1, 4096, NULL,
         "micro-batches M per step (same samples as 1 rank with --accum M)");
    SPEC("--schedule", ARG_CHOICE, &cfg->schedule, 0, 0, "naive|gpipe|1f1b|interleaved|zb-h1|zb-h2|dualpipev",
         "naive: one micro-batch at a time; gpipe: all forwards, then all backwards; 1f1b: one forward one "
         "backward; interleaved: 1f1b over --virtual-stages chunks per rank; zb-h1, zb-h2: zero bubble, each "
         "backward split into B (inputs' gradient) and W (weights', deferred into the bubble): h1 at 1F1B's "
         "peak (stage 0: P micro-batches in flight), h2 about twice (2P - 1); dualpipev: DeepSeek's V, 2P "
         "chunks (stage s: chunks s and 2P-1-s), split backward, M >= 2P");
    SPEC("--virtual-stages", ARG_INT, &cfg->virtual_stages, 1, 64, NULL,
         "chunks of units per rank with --schedule interleaved (v: P*v chunks, chunk c on stage c mod P)");
    SPEC("--fb-overlap", ARG_FLAG, &cfg->fb_overlap, 0, 0, NULL,
         "--schedule dualpipev: run each F&B of its list as one operation, the backward's units while the "
         "forward's exchanges travel (a MoE block's all-to-alls; the bits unchanged; "
         "notes/07d-dualpipev.md)");
    SPEC("--post-validate", ARG_FLAG, &cfg->post_validate, 0, 0, NULL,
         "optimizer post-validation (zero bubble's): each stage updates at once, without waiting for the "
         "gradient norm and overflow check summed over the stages; when they come back saying clip or skip, "
         "the update is rolled back bitwise (from a host copy of the stage's states) and redone clipped, or "
         "dropped");
  }
  if (chapter_flags & (TRAIN_FLAG_PIPELINE | TRAIN_FLAG_ZERO))
    SPEC("--zero", ARG_INT, &cfg->zero, 0, 3, NULL,
         "the data dimension (ranks / (P x T) replicas): 0 all-reduce the grads, 1 ZeRO-1 (optimizer states "
         "sharded), 2 ZeRO-2 (grads sharded between steps only: they accumulate over the micro-batches), 3 "
         "ZeRO-3 (params sharded too: each unit gathered 2M times per step; notes/07)");
  if (chapter_flags & TRAIN_FLAG_TP)
    SPEC("--tp", ARG_INT, &cfg->tp, 1, 256, NULL,
         "tensor-parallel ranks T per layer (consecutive ranks); the data dimension is ranks / T");
  if (chapter_flags & TRAIN_FLAG_TP)
    SPEC("--sp", ARG_FLAG, &cfg->sp, 0, 0, NULL,
         "sequence parallelism (Megatron's --sequence-parallel): with --tp T > 1 and "
         "--model gpt, the LayerNorm and residual regions split along the sequence over the TP group (T must "
         "divide "
         "--seq-len); notes/10-long-sequences.md");
  /* a pipeline keeps its own activations */
  if ((chapter_flags & TRAIN_FLAG_TP) && !(chapter_flags & TRAIN_FLAG_PIPELINE))
    SPEC("--pa", ARG_INT, &cfg->pa, 0, 1, "auto",
         "partitioned activation checkpointing (ZeRO-R Pa): with --recompute, each TP rank keeps 1/T of "
         "every unit "
         "output the TP group replicates and all-gathers it for the backward; auto: on with --recompute and "
         "--tp > 1, "
         "0: whole outputs (to compare)");
  const char *shard_group = "all";
  if (chapter_flags & TRAIN_FLAG_SHARD_GROUP)
    SPEC("--shard-group", ARG_CHOICE, &shard_group, 0, 0, "all|node",
         "the ranks ZeRO-3 shards over: all of them, or each node's (HSDP, FSDP's HYBRID_SHARD: shard inside "
         "the node, "
         "all-reduce the grad shards across nodes; notes/09-nodes.md)");
  if (chapter_flags & TRAIN_FLAG_SHARD_GROUP)
    SPEC("--hpz", ARG_FLAG, &cfg->hpz, 0, 0, NULL,
         "ZeRO++ hpZ: keep a second copy of the params sharded inside the node (+2Psi/g in bf16), so the "
         "backward's "
         "all-gathers stay in the node; the forward's still span every rank (notes/09-nodes.md)");
  int quant_block = 0;
  if (chapter_flags & TRAIN_FLAG_SHARD_GROUP) {
    SPEC("--qwz", ARG_FLAG, &cfg->qwz, 0, 0, NULL,
         "ZeRO++ qwZ: ZeRO-3's parameter all-gathers in int8 blocks, one fp32 scale each (|error| <= "
         "max|block|/254; notes/13-compression.md)");
    SPEC("--qgz", ARG_FLAG, &cfg->qgz, 0, 0, NULL,
         "ZeRO++ qgZ: ZeRO-3's gradient reduce-scatter as two all-to-alls of int4 blocks, inside the node "
         "then across (needs 2 nodes or more; notes/13-compression.md)");
    SPEC("--quant-block", ARG_INT, &quant_block, 1, 1 << 24, NULL,
         "--qwz, --qgz: elements per block B (default 256): one fp32 scale per block of int8 params or "
         "int4 grads");
  }
  /* checked against the world and the model by the chapter (solutions/cp.h) */
  if (chapter_flags & TRAIN_FLAG_CP) {
    SPEC("--cp", ARG_INT, &cfg->cp, 1, 256, NULL,
         "context-parallel ranks C per sequence (consecutive ranks): each holds S/C of every sequence, "
         "attention a ring of K/V blocks; the data dimension is ranks / C");
    SPEC("--cp-balance", ARG_INT, &cfg->cp_balance, 0, 1, NULL,
         "1: each rank holds two mirrored chunks of 2C (causal load balance), 0: one contiguous chunk "
         "(--cp-comm ring; a2a: contiguous, every rank attends every position)");
    cfg->cp_comm = "ring";
    SPEC("--cp-comm", ARG_CHOICE, &cfg->cp_comm, 0, 0, "ring|a2a",
         "the attention over the C ranks: ring, K/V blocks round a ring (online softmax); a2a, "
         "DeepSpeed-Ulysses: an all-to-all to NH/C heads of the whole sequence, the ordinary attention, an "
         "all-to-all back (C must divide the heads)");
    cfg->cp_a2a = 1;
    SPEC("--cp-a2a", ARG_INT, &cfg->cp_a2a, 1, 256, NULL,
         "the 2-D hybrid (USP; --cp-comm ring): Ulysses' all-to-all inside groups of A consecutive ranks of "
         "the C, to NH/A heads of the group's positions, the ring of K/V blocks across the C/A groups; A "
         "must divide C and the heads (1: the ring alone)");
  }
  /* checked against the world and the model by the chapter (solutions/moe.h) */
  if (chapter_flags & TRAIN_FLAG_MOE) {
    SPEC("--moe", ARG_INT, &cfg->moe, 1, 1024, NULL,
         "experts E in each MoE block (each a GPT MLP of 4C); the router sends each token to --topk of them");
    SPEC("--topk", ARG_INT, &cfg->topk, 1, 1024, NULL,
         "experts k per token (<= --moe): the router's top-k of its softmax");
    SPEC("--moe-every", ARG_INT, &cfg->moe_every, 1, 1024, NULL,
         "every m-th block is MoE (blocks m-1, 2m-1, ...), the others keep their dense MLP; 1: all");
    SPEC("--expert-ffn", ARG_INT, &cfg->moe_ffn, 1, 65536, NULL,
         "each expert's hidden width F (default 4C, the dense MLP's): DeepSeekMoE's fine-grained experts are "
         "m times more experts of 1/m the width, --topk m times larger, the same active parameters");
    SPEC("--shared-experts", ARG_INT, &cfg->moe_shared, 0, 64, NULL,
         "S shared experts of width F in every MoE block, every token through them beside its routed ones "
         "(DeepSeekMoE, DeepSeek-V3: 1); data-parallel like the dense part");
    cfg->gate_norm = "none";
    SPEC("--gate-norm", ARG_CHOICE, &cfg->gate_norm, 0, 0, "none|topk",
         "the gates: none, the router's probabilities as they are (Switch; DeepSpeed's top-1), or topk, "
         "renormalised over the k chosen to sum to 1 (GShard's top-2, Mixtral, DeepSeek-V3)");
    SPEC("--capacity-factor", ARG_DOUBLE, &cfg->capacity_factor, 0, 64, NULL,
         "cf > 0: capacity ceil(cf x tokens x k / E) rows per expert and micro-batch, padded [E, C, h] "
         "buffers, tokens past it dropped (they ride the residual); 0: dropless (a count exchange, then "
         "all-to-all-v)");
    SPEC("--aux-loss-coeff", ARG_DOUBLE, &cfg->aux_loss_coeff, 0, 10, NULL,
         "Switch's load-balancing loss alpha: alpha x E x sum_e f_e P_e per block and micro-batch (0: none)");
    cfg->aux_loss_scope = "local";
    SPEC("--aux-loss-scope", ARG_CHOICE, &cfg->aux_loss_scope, 0, 0, "local|global",
         "the tokens the aux loss's f_e counts: this rank's micro-batch (local: Switch, GShard), or the "
         "micro-batch of every rank (global: the same loss on any layout of the same --accum)");
    SPEC("--router-bias-rate", ARG_DOUBLE, &cfg->router_bias_rate, 0, 10, NULL,
         "DeepSeek-V3's auxiliary-loss-free balance: after each step every expert's selection bias moves by "
         "this rate toward the mean load, from counts summed over all ranks (0: no bias)");
    SPEC("--ep", ARG_INT, &cfg->ep, 1, TRAIN_EP_MAX, NULL,
         "expert-parallel ranks P_E (consecutive): each holds E / P_E of every MoE block's experts, tokens "
         "go to them and back by all-to-all; the dense weights stay data-parallel over all ranks");
    if (!(chapter_flags & TRAIN_FLAG_TP))
      SPEC("--tp", ARG_INT, &cfg->tp, 1, 256, NULL,
           "tensor-parallel ranks T on the attention inside each EP group (consecutive; T must divide --ep): "
           "they split the heads, the embedding and the head, and read the same samples; at each MoE block "
           "they take 1/T of the tokens each, so the P_E ranks of the group route and hold E/P_E experts as "
           "without TP (Megatron's MoE parallel folding)");
    if (!(chapter_flags & TRAIN_FLAG_TP))
      SPEC("--sp", ARG_FLAG, &cfg->sp, 0, 0, NULL,
           "with --tp: sequence parallelism (Megatron's way, which it requires for MoE with TP): the "
           "LayerNorm/residual regions split along the sequence over the TP group (T must divide --seq-len), "
           "so each TP rank routes its own positions at a MoE block and nothing is all-gathered there");
  }
  if (chapter_flags & TRAIN_FLAG_PREFETCH)
    SPEC("--prefetch", ARG_INT, &cfg->prefetch, 0, 64, "auto",
         "units gathered ahead (ZeRO-3); auto: 1 where communication has its own engine or core, else 0");
#undef SPEC
  int rc = args_parse(argc, argv, specs, n, prog, about);
  if (rc == 1) exit(0);
  if (rc != 0) exit(2);

  cfg->seed = (uint64_t)seed;
  cfg->optimizer = strcmp(optimizer, "sgd") == 0    ? OPT_SGD
                   : strcmp(optimizer, "muon") == 0 ? OPT_MUON
                                                    : OPT_ADAMW; /* onebit-adam too: its warm-up is AdamW */
  cfg->wdt = strcmp(precision, "bf16") == 0 ? DT_BF16 : strcmp(precision, "fp16") == 0 ? DT_F16 : DT_F32;
  cfg->collectives = strcmp(collectives, "ring") == 0 ? COLL_RING : COLL_VENDOR;
  cfg->nonfinite = strcmp(nonfinite, "skip") == 0 ? NONFINITE_SKIP : NONFINITE_ABORT;
  cfg->shard_group_node = strcmp(shard_group, "node") == 0;

  /* Checks that need more than one flag, or the world size (from the launcher's environment). */
  char v[64];
  if (compress_zero)
    exit(args_error("--compress", compress_zero,
                    "is chapter 13's and runs only on DDP's replicas (ch13_compress): ZeRO-%c "
                    "reduce-scatters each gradient to the rank that owns its piece, while PowerSGD "
                    "all-reduces P and Q whole (P is orthogonalised over all its rows), so every rank "
                    "would get the whole gradient (ZeRO's own codes: ch05_zero3 --qwz, --qgz)",
                    prog[3] == '3' ? '1' : '2'));
  if (strcmp(optimizer, "onebit-adam") == 0) {
    if (!(chapter_flags & TRAIN_FLAG_COMPRESS))
      exit(args_error("--optimizer", optimizer,
                      "is chapter 13's (ch13_compress, on DDP's replicas): with ZeRO, a pipeline or TP the "
                      "momentum is sharded or split and the compressed all-reduce is not built for it"));
    if (warmup < 1)
      exit(args_error("--optimizer", optimizer,
                      "needs --warmup-steps K >= 1 (the AdamW steps whose variance it freezes)"));
    cfg->onebit_warmup = warmup;
  } else if (warmup) {
    snprintf(v, sizeof v, "%d", warmup);
    exit(args_error("--warmup-steps", v,
                    "needs --optimizer onebit-adam (the other optimizers have no warm-up)"));
  }
  if (cfg->wdt != DT_F16) { /* the loss scaler's flags mean nothing without fp16: refused, not ignored */
    const struct { const char *flag; double got, dflt; } fp16_only[] = {
        {"--loss-scale", cfg->loss_scale, 0},          {"--init-scale", cfg->init_scale, 65536},
        {"--growth-factor", cfg->growth_factor, 2},    {"--backoff-factor", cfg->backoff_factor, 0.5},
        {"--growth-interval", cfg->growth_interval, 2000}};
    for (size_t i = 0; i < sizeof fp16_only / sizeof fp16_only[0]; i++)
      if (fp16_only[i].got != fp16_only[i].dflt) {
        snprintf(v, sizeof v, "%g", fp16_only[i].got);
        exit(args_error(fp16_only[i].flag, v,
                        "needs --precision fp16 (the loss scaler; --precision %s has no scaling)",
                        precision));
      }
  }
  int world = args_env_world();
  if ((chapter_flags & TRAIN_FLAG_BUCKET) && !(cfg->bucket_mb > 0)) {
    snprintf(v, sizeof v, "%g", cfg->bucket_mb);
    exit(args_error("--bucket-mb", v,
                    "must be > 0 (any positive size; 1e-9 puts each unit in its own bucket)"));
  }
  if (cfg->buffer_mb > 0 && cfg->buffer_mb * 1048576.0 < 8.0 * world) {
    snprintf(v, sizeof v, "%g", cfg->buffer_mb);
    exit(args_error("--buffer-mb", v,
                    "must be 0 (unbounded) or at least one 8-byte element per rank (%d bytes)", 8 * world));
  }
  if (cfg->tp < 1) cfg->tp = 1;
  if (world % cfg->tp) {
    snprintf(v, sizeof v, "%d", cfg->tp);
    exit(args_error("--tp", v, "must divide the ranks (%d): D = ranks / T data-parallel groups of T", world));
  }
  int dp = world / cfg->tp; /* the ranks a batch is split over: TP ranks read the same samples */
  if (!(chapter_flags & TRAIN_FLAG_PIPELINE) && cfg->batch % ((int64_t)dp * cfg->accum) != 0) {
    snprintf(v, sizeof v, "%lld", (long long)cfg->batch);
    exit(args_error("--batch", v, "must be divisible by %s x accum = %d x %d = %lld",
                    cfg->tp > 1 ? "data-parallel ranks (ranks / --tp)" : "ranks", dp, cfg->accum,
                    (long long)dp * cfg->accum));
  }
  fault_t fault;
  char why[256];
  const char *ef = getenv("ZL_ELASTIC_FROM"); /* zlrun --elastic: the fault named a rank of the first world */
  int fault_world = ef && atoi(ef) > world ? atoi(ef) : world;
  if (cfg->fault && fault_parse(cfg->fault, fault_world, cfg->steps, &fault, why, sizeof why))
    exit(args_error("--fault", cfg->fault, "%s", why));
  if (quant_block && !cfg->qwz && !cfg->qgz) {
    snprintf(v, sizeof v, "%d", quant_block);
    exit(args_error("--quant-block", v, "needs --qwz or --qgz (the block size of their quantisation)"));
  }
  cfg->quant_block = quant_block ? quant_block : 256;
  if (cfg->qwz && (chapter_flags & TRAIN_FLAG_PIPELINE))
    exit(args_error("--qwz", NULL, "runs only on chapter 05's ZeRO-3 (ch05_zero3), not under a pipeline"));
  if (cfg->qgz && (chapter_flags & TRAIN_FLAG_PIPELINE))
    exit(args_error("--qgz", NULL, "runs only on chapter 05's ZeRO-3 (ch05_zero3), not under a pipeline"));
  if (cfg->hpz && cfg->shard_group_node) /* HSDP gathers inside the node already */
    exit(args_error(
        "--hpz", NULL,
        "needs --shard-group all: with --shard-group node every gather is inside the node already"));
  if (cfg->save_every > 0 && !cfg->ckpt) {
    snprintf(v, sizeof v, "%d", cfg->save_every);
    exit(args_error("--save-every", v, "needs --ckpt DIR (where to save)"));
  }
  if (cfg->ckpt_async && !cfg->ckpt) exit(args_error("--ckpt-async", "", "needs --ckpt DIR (where to save)"));
  if (cfg->ckpt_mem_every > 0) { /* the snapshot is the rank's own layout, copied from host RAM */
    snprintf(v, sizeof v, "%d", cfg->ckpt_mem_every);
    if (cfg->ckpt_mem_every >= cfg->steps)
      exit(args_error("--ckpt-mem-every", v, "1 to --steps - 1 = %d (a snapshot every K steps)",
                      cfg->steps - 1));
    if (cfg->dev != DEV_CPU) exit(args_error("--ckpt-mem-every", v, "CPU runs only (--device cpu)"));
    if (cfg->sched) exit(args_error("--ckpt-mem-every", v, "not with a pipeline schedule (--pp)"));
  }
  if ((chapter_flags & (TRAIN_FLAG_ZERO | TRAIN_FLAG_PIPELINE)) && (chapter_flags & TRAIN_FLAG_PREFETCH)) {
    if (cfg->prefetch >= 0 && cfg->zero != 3) { /* ZeRO-3's flag: the other strategies gather nothing */
      snprintf(v, sizeof v, "%d", cfg->prefetch);
      exit(args_error("--prefetch", v, "only with --zero 3 (the units ZeRO-3 gathers ahead)"));
    }
    /* the report names it for ZeRO-3 only */
    if (cfg->zero != 3) cfg->chapter_flags &= ~(unsigned)TRAIN_FLAG_PREFETCH;
  }
  if (cfg->pa == 1 && !(cfg->recompute && cfg->tp > 1))
    exit(args_error("--pa", "1",
                    "needs --recompute and --tp T > 1 (it partitions the checkpoints over the TP group)"));
  if (cfg->pa == 1 && cfg->sp)
    exit(args_error("--pa", "1",
                    "with --sp no unit output is replicated over the TP group: every checkpoint is "
                    "already 1/T along the sequence (nothing for Pa to partition)"));
  cfg->pa = cfg->pa != 0 && cfg->recompute && cfg->tp > 1 && !cfg->sp &&
      !(chapter_flags & TRAIN_FLAG_PIPELINE); /* auto: on */
  check_model_flags(cfg, argc, argv);
  check_ignored_flags(cfg, argc, argv);
  if (cfg->sp && cfg->tp < 2)
    exit(args_error("--sp", NULL,
                    "needs --tp T > 1 (it splits the LayerNorm/residual regions over the TP group)"));
  if (cfg->sp && strcmp(cfg->model_kind, "gpt") != 0)
    exit(args_error("--sp", NULL, "needs --model gpt (the MLP has no sequence to split)"));
  if (cfg->sp && cfg->gpt.seq_len % cfg->tp) {
    snprintf(v, sizeof v, "%d", cfg->tp);
    exit(args_error("--sp", NULL,
                    "--seq-len %d must be divisible by --tp %s (each TP rank holds seq_len / T positions)",
                    cfg->gpt.seq_len, v));
  }
  if ((chapter_flags & TRAIN_FLAG_PIPELINE) && pipeline_check(cfg, world)) exit(2);
  int64_t psi = strcmp(cfg->model_kind, "gpt") == 0
      ? gpt_count_params(cfg->gpt)
      : model_count_params(cfg->input, cfg->hidden, cfg->classes, cfg->layers);
  if (world > psi) { /* ZeRO would give some rank nothing but padding to own */
    snprintf(v, sizeof v, "%d", world);
    exit(args_error(
        "-np", v,
        "must be at most the parameter count psi = %lld of this model (--input --hidden --classes --layers)",
        (long long)psi));
  }
  if (cfg->optimizer == OPT_MUON) check_muon_flags(cfg);
  resolve_device(cfg);
  /* an unwritable --json/--trace/--save-params/--ckpt: now, not after training */
  if (report_check_outputs(cfg)) exit(2);
  /* a --resume that names nothing: now (what it holds is verified by every rank after MPI starts) */
  struct stat sb;
  if (cfg->resume && (stat(cfg->resume, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    exit(args_error("--resume", cfg->resume,
                    "must be a checkpoint directory: a --ckpt DIR or one of its step-NNNNNN (%s)",
                    stat(cfg->resume, &sb) != 0 ? "no such directory" : "not a directory"));
}

