/* memcalc.c — chapter 00's calculator (ch00_memory) as one function of its flags: the text it prints
 * and the JSON it writes (see memcalc.h). chapters/00_memory/main.c is main() around it, with the
 * strategies' formula hooks; the explorer page (common/explorer/) runs this same file compiled to
 * WebAssembly, with memcalc_stage_states. Plain C: no MPI, no allocation beyond flags and --pp's unit table.
 * Notes: notes/00-memory.md (the 16Ψ story), notes/gpt.md (activations). */
#include "memcalc.h" // memcalc_main, memcalc_states_fn
#include "args.h"    // arg_spec_t, args_parse, args_error, args_env_rank
#include "dtype.h"   // DT_BF16, DT_F32
#include "formula.h" // formula_zero_k, formula_text_k, formula_comm_bytes, formula_model_states
#include "gpt.h"     // gpt_acts_bytes, gpt_count_params: this repository's fp32 GPT
#include "model.h"   // model_count_params: Ψ of the zerolab MLP
#include <stdint.h>  // int64_t
#include <stdio.h>   // fprintf, fopen
#include <stdlib.h>  // calloc, free: --pp's unit table
#include <string.h>  // strcmp, strerror
#include <errno.h>   // errno (--json)

/* A --json that could be opened but not written to the end (a full disk): one line, exit code 1. */
static int memcalc_fail(const char *json) {
  fflush(stdout);
  fprintf(stderr, "error: --json %s: writing it failed (%s)\n", json, strerror(errno));
  return 1;
}

mem_formula_t memcalc_stage_states(int stage, double psi, int world, dtype_t wdt) {
  /* what ddp.c's, zero1.c's, zero2.c's and zero3.c's formula hooks say for ch00's trainer (AdamW,
   * one micro-batch, no hpZ; MEMCALC_NO_SYNC: a pipeline's, ZeRO-2/3 + bΨ of full grads):
   * formula_stage, master and optimizer states together; MEMCALC_OFFLOAD: offload.c's, ZeRO-2's with
   * those in host memory (optim: the host's) */
  int no_sync = (stage & MEMCALC_NO_SYNC) != 0;
  stage &= ~MEMCALC_NO_SYNC;
  mem_formula_t f = formula_model_states(stage == MEMCALC_OFFLOAD ? 2 : stage, psi, world, wdt, 2);
  if (no_sync && (stage == 2 || stage == 3)) f.grads += psi * (double)dtype_size(wdt);
  mem_formula_t m = {.params = f.params, .grads = f.grads, .master = 0, .optim = f.master + f.optim};
  m.total = m.params + m.grads + m.optim;
  return m;
}

#define GB 1e9
#define GIB 1073741824.0

static const char *const g_stage_name[4] = {"DDP (0)", "ZeRO-1", "ZeRO-2", "ZeRO-3"};

/* The paper's generic form of a stage with the bytes per param of params (p) and grads (g),
 * plus acc bytes per param of an fp32 gradient-accumulation buffer (0: none), which is sharded
 * with the grads: bf16 stage 1 -> "2Ψ + 2Ψ + KΨ/N"; with acc = 4 -> "2Ψ + (2+4)Ψ + KΨ/N". */
static void generic_text(char *dst, size_t n, int stage, int p, int g, int acc) {
  char gt[32]; /* the grads' bytes per param: "2" or "2+4" */
  if (acc) snprintf(gt, sizeof gt, "%d+%d", g, acc);
  else snprintf(gt, sizeof gt, "%d", g);
  switch (stage) {
  case 0: snprintf(dst, n, "(%d+%s+K)Ψ", p, gt); break;
  case 1: snprintf(dst, n, acc ? "%dΨ + (%s)Ψ + KΨ/N" : "%dΨ + %sΨ + KΨ/N", p, gt); break;
  case 2: snprintf(dst, n, "%dΨ + (%s+K)Ψ/N", p, gt); break;
  default: snprintf(dst, n, "(%d+%s+K)Ψ/N", p, gt); break;
  }
}

/* A number of GB for the table: one decimal like the paper, three when below 1 GB. */
static void fmt_size(char *dst, size_t n, double bytes, double unit) {
  double v = bytes / unit;
  snprintf(dst, n, v >= 0.95 || v == 0 ? "%.1f" : "%.3f", v);
}

/* Activations of one micro-batch of a transformer (bytes per rank, every stage alike). */
typedef struct acts {
  double per_layer;       /* Korthikanti et al. 2022, 16 bit: s·b·h·(34 + 5·a·s/h) */
  double total;           /* × L */
  double recompute;       /* full recomputation: 2·s·b·h per layer (its input) + one layer's per_layer */
  /* selective recomputation (Korthikanti et al. §5: QKᵀ, softmax, its dropout, the product with V
   * recomputed, the 5·a·s/h term gone): 34·s·b·h per layer, × L — what FlashAttention stores too,
   * never keeping the s × s scores (up to its a·s·b softmax statistics) */
  double selective;
  double ours, ours_rc;   /* this repository's fp32 GPT: gpt_acts_bytes(recompute 0 / 1) */
  /* --tp t > 1, per rank (Korthikanti et al. §4.2): tensor parallelism splits the 24 and the 5as/h
   * of a layer, sequence parallelism (Megatron's --sequence-parallel) the remaining 10 too */
  double tp_layer, tp_total;       /* TP: s·b·h·(10 + 24/t + 5·a·s/(h·t)) per layer, × L */
  /* TP + SP: s·b·h·(34 + 5·a·s/h)/t per layer, × L; full recompute 2sbhL/t + a layer; selective
   * 34sbhL/t */
  double sp_layer, sp_total, sp_rc, sp_sel;
  /* the fp32 GPT with --tp t --sp: gpt_acts_bytes_tp (= gpt_acts_bytes / t) */
  double ours_sp, ours_sp_rc;
} acts_t;

/* c: the block's stored tensors (memcalc_block_acts: 10 + 24 for this GPT's); ours: the fp32 GPT's counts
 * too (this GPT's block) */
static acts_t acts_of(gpt_shape_t g, int64_t b, int t, memcalc_acts_coef_t c, int ours) {
  double s = g.seq_len, h = g.n_embd, a = g.n_head, L = g.n_layer, sbh = s * (double)b * h;
  double all = c.whole + c.split; /* 34 */
  acts_t r = {0};
  if (t > 1) {
    r.tp_layer = sbh * (c.whole + c.split / t + 5.0 * a * s / (h * t));
    r.tp_total = L * r.tp_layer;
    r.sp_layer = sbh * (all + 5.0 * a * s / h) / t;
    r.sp_total = L * r.sp_layer;
    r.sp_rc = 2.0 * sbh * L / t + r.sp_layer;
    r.sp_sel = all * sbh * L / t;
    r.ours_sp = ours ? (double)gpt_acts_bytes_tp(g, b, 0, t, 1) : 0;
    r.ours_sp_rc = ours ? (double)gpt_acts_bytes_tp(g, b, 1, t, 1) : 0;
  }
  r.per_layer = sbh * (all + 5.0 * a * s / h);
  r.total = L * r.per_layer;
  r.recompute = 2.0 * sbh * L + r.per_layer;
  r.selective = all * sbh * L;
  r.ours = ours ? (double)gpt_acts_bytes(g, b, 0) : 0;
  r.ours_rc = ours ? (double)gpt_acts_bytes(g, b, 1) : 0;
  return r;
}

/* Ψ for humans: 7500000000 -> "7.5e+09 (7.50 B)". */
static void fmt_psi(char *dst, size_t n, double psi) {
  const char *sfx = "";
  double div = 1;
  if (psi >= 1e12) { sfx = " T"; div = 1e12; }
  else if (psi >= 1e9) { sfx = " B"; div = 1e9; }
  else if (psi >= 1e6) { sfx = " M"; div = 1e6; }
  else if (psi >= 1e3) { sfx = " K"; div = 1e3; }
  if (div > 1) snprintf(dst, n, "%.0f (%.2f%s)", psi, psi / div, sfx);
  else snprintf(dst, n, "%.0f", psi);
}

/* The model states of `stage` (MEMCALC_OFFLOAD: ZeRO-Offload's; | MEMCALC_NO_SYNC: under a pipeline)
 * for Ψ = psi on N = world: the strategies' own formulas (`ours`: the default K, no accumulation
 * buffer, a whole Ψ), else the paper's generic form with K (offload: ZeRO-2's, its optim column the
 * host's; no_sync: ZeRO-2/3 + the full gradient, gbytes·Ψ). */
static mem_formula_t states_of(memcalc_states_fn states, int ours, int stage, double psi, int world,
                               dtype_t wdt, int wbytes, int gbytes, double k) {
  if (ours && psi == (double)(int64_t)psi) return states(stage, psi, world, wdt);
  int no_sync = (stage & MEMCALC_NO_SYNC) != 0;
  stage &= ~MEMCALC_NO_SYNC;
  mem_formula_t f = formula_zero_k(stage == MEMCALC_OFFLOAD ? 2 : stage, psi, world, wbytes, gbytes, k);
  if (no_sync && (stage == 2 || stage == 3)) f.grads += gbytes * psi, f.total += gbytes * psi;
  return f;
}

/* One pipeline stage of the GPT (ch00_memory --pp; chapter 07): its units [u0, u1) as pp_split cuts
 * them by parameter count, and what 1F1B keeps there for micro-batches of b sequences. */
typedef struct pp_stage {
  int u0, u1, blocks;   /* units, and how many of them are transformer blocks */
  double params;        /* Ψ of its units */
  int in_flight;        /* 1F1B with M >= P micro-batches: stage s holds P − s (pp_inflight_formula) */
  double slot, slot_rc; /* the loop's slot for one micro-batch: 4b·(input + Σ output + saved), --recompute
                         * without the saved (loop_ops.c: pool.slot_bytes; one saved buffer of the
                         * largest unit besides, the workspace, is not in the pool) */
} pp_stage_t;

/* The first of flags[0..n) given on the command line, or NULL. */
static const char *first_given(int argc, char **argv, const char *const *flags, int n) {
  for (int i = 0; i < n; i++)
    if (args_given(argc, argv, flags[i])) return flags[i];
  return NULL;
}

/* The one cap on Ψ, whatever gives it (--params, --model, a transformer shape, its experts): 1e15
 * parameters keep 16Ψ and every count below far inside 64 bits. */
#define MEMCALC_PSI_MAX 1e15
/* Past this many bytes an activation count of the fp32 GPT (gpt.h's int64 functions) could wrap. */
#define MEMCALC_BYTES_MAX 4.6e18 /* ~2^62 */

/* The largest activation count the calculator asks gpt.h for, in double (no wrap): the fp32 GPT's
 * bytes for b sequences without recompute, gpt_acts_bytes's terms — every other count it takes
 * (--recompute, --tp, --cp, a --pp stage's slots) is a part of these or smaller. */
static double acts_bound(gpt_shape_t g, int64_t b) {
  double S = g.seq_len, C = g.n_embd, L = g.n_layer, V = g.vocab, NH = g.n_head;
  double block = 15.0 * S * C + 4.0 * S + NH * S * S;
  return 4.0 * (double)b * (S * C * (L + 1) + S * V + L * block + S * C + 2.0 * S);
}

int memcalc_main(int argc, char **argv, memcalc_states_fn states, memcalc_split_fn split, FILE *out) {
  double psi = 7.5e9, k = -1;
  int world = 64, fp32_grads = 0, layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 256, tp = 1;
  int experts = 0, topk = 2, moe_every = 1, ep = 1; /* chapter 12: Mixture of Experts */
  int expert_ffn = 0, shared = 0;                   /* its experts' width (0: 4h), its shared experts */
  /* chapters 07, 10, 08: pipeline stages, context parallelism, ZeRO-Offload */
  int pp = 1, cp = 1, offload = 0;
  int64_t micro = 1;
  const char *precision = "bf16", *stage_s = "all", *json = NULL, *model = NULL, *optimizer = "adamw";
  memcalc_block_t blk = {.mlp = "gelu", .pos = "learned"}; /* a real model's block (memcalc_shape.c) */
  arg_spec_t specs[] = {
      {"--params", ARG_COUNT, &psi, 1, MEMCALC_PSI_MAX, NULL, "parameter count Ψ: 7.5e9, 7B, 124M, 350K"},
      {"--model", ARG_STR, &model, 0, 0, NULL, "D,H,C,L: take Ψ from the zerolab MLP of this shape instead"},
      {"--ranks", ARG_INT, &world, 1, 1 << 20, NULL, "data-parallel ranks N"},
      {"--precision", ARG_CHOICE, &precision, 0, 0, "bf16|fp32",
       "bf16: 2-byte params and grads, fp32 master in K; fp32: 4-byte params and grads, no master"},
      {"--k", ARG_DOUBLE, &k, -1, 1024, NULL,
       "optimizer-state bytes per parameter; -1: 12 in bf16 (master 4 + Adam m 4 + v 4), 8 in fp32 (m + v)"},
      {"--fp32-grads", ARG_FLAG, &fp32_grads, 0, 0, NULL,
       "bf16 only: add an fp32 gradient-accumulation buffer (+4Ψ, 20Ψ with Adam), sharded with the grads"},
      {"--stage", ARG_CHOICE, &stage_s, 0, 0, "0|1|2|3|all", "ZeRO stage to show"},
      {"--json", ARG_STR, &json, 0, 0, NULL, "write the table as JSON to this path (for plots)"},
      {"--layers", ARG_INT, &layers, 1, 1 << 16, NULL,
       "transformer layers L: adds activations (with --hidden --heads --seq)"},
      {"--hidden", ARG_INT, &hidden, 1, 1 << 20, NULL, "transformer hidden size h"},
      {"--heads", ARG_INT, &heads, 1, 1 << 16, NULL, "attention heads a (h divisible by a)"},
      {"--seq", ARG_INT, &seq, 1, 1 << 24, NULL, "sequence length s"},
      {"--micro-batch", ARG_I64, &micro, 1, 1 << 20, NULL, "sequences per rank per forward b (default 1)"},
      {"--tp", ARG_INT, &tp, 1, 1 << 16, NULL,
       "with a transformer shape: also the activations per rank of t-way tensor parallelism, without and "
       "with "
       "sequence parallelism (notes/10-long-sequences.md); t divides --heads, --hidden, --seq and --vocab"},
      {"--experts", ARG_INT, &experts, 0, 1 << 16, NULL,
       "with a transformer shape: E expert MLPs in every --moe-every m-th block (chapter 12; 0: dense): Ψ "
       "total and "
       "active, and per rank with --ep"},
      {"--topk", ARG_INT, &topk, 1, 1 << 16, NULL, "experts per token k (<= --experts; default 2)"},
      {"--moe-every", ARG_INT, &moe_every, 1, 1 << 16, NULL, "every m-th block is MoE (default 1: all)"},
      {"--expert-ffn", ARG_INT, &expert_ffn, 1, 1 << 24, NULL,
       "with --experts: each expert's hidden width F (default 4h, the dense MLP's; DeepSeekMoE's "
       "fine-grained experts: m times more of 1/m the width)"},
      {"--shared-experts", ARG_INT, &shared, 0, 1 << 10, NULL,
       "with --experts: S shared experts of width F in every MoE block, every token through them "
       "(DeepSeekMoE; data-parallel like the dense part)"},
      {"--ep", ARG_INT, &ep, 1, 1 << 20, NULL,
       "expert-parallel ranks P_E: each holds E/P_E of the experts; P_E divides --ranks and --experts"},
      {"--vocab", ARG_INT, &vocab, 1, 1 << 24, NULL,
       "vocabulary of the fp32 GPT's count and of Ψ when --params is not given (default 256: bytes)"},
      {"--pp", ARG_INT, &pp, 1, 1 << 16, NULL,
       "with a transformer shape: P pipeline stages (chapter 07): per stage its units' states over the D = "
       "N/P "
       "replicas and the activations 1F1B keeps in flight (stage s: P - s micro-batches); P divides --ranks"},
      {"--cp", ARG_INT, &cp, 1, 1 << 16, NULL,
       "with a transformer shape: C-way context parallelism (chapter 10, the ring): each rank holds S/C "
       "positions "
       "of the --micro-batch sequences; C divides --ranks and --seq"},
      {"--optimizer", ARG_CHOICE, &optimizer, 0, 0, "adamw|muon",
       "muon: Muon's states (fp32: one momentum for the hidden matrices, AdamW's m, v for the rest) under "
       "whole-matrix owners (memcalc_muon.c)"},
      {"--offload", ARG_FLAG, &offload, 0, 0, NULL,
       "ZeRO-Offload (chapter 08): ZeRO-2 with the fp32 master and optimizer states in host memory: the "
       "device "
       "keeps params + grads"},
      {"--kv-heads", ARG_INT, &blk.kv_heads, 1, 1 << 16, NULL,
       "with a transformer shape: K key-value heads (grouped-query attention: k and v C x K·C/H; K divides "
       "--heads; default H)"},
      {"--ffn", ARG_INT, &blk.ffn, 1, 1 << 24, NULL, "the MLP's hidden width F (default 4h)"},
      {"--mlp", ARG_CHOICE, &blk.mlp, 0, 0, "gelu|swiglu",
       "swiglu: three matrices C x F, C x F, F x C (Llama's); gelu: two (this GPT's)"},
      {"--pos", ARG_CHOICE, &blk.pos, 0, 0, "learned|rope", "rope: no position table (Llama's)"},
      {"--tied-head", ARG_FLAG, &blk.tied, 0, 0, NULL, "the head is the token embedding (GPT-2's, GPT-3's)"},
      {"--no-bias", ARG_FLAG, &blk.no_bias, 0, 0, NULL,
       "no bias vectors, the norms a weight alone (Llama's RMSNorm); Ψ and activations: memcalc_shape.c"},
  };
  const int nspecs = (int)(sizeof specs / sizeof specs[0]);
  int rc = args_parse(
      argc, argv, specs, nspecs, "ch00_memory",
      "ZeRO memory calculator: bytes per rank of params, grads and optimizer states at each stage\n"
      "(Rajbhandari et al. 2020, Figure 1). Example: ch00_memory --params 7.5B --ranks 64");
  if (rc == 1) return 0;
  if (rc) return 2;
  if (k < 0 && k != -1) {
    char kv[32];
    snprintf(kv, sizeof kv, "%g", k);
    return args_error("--k", kv, "must be -1 (by precision) or a number in [0, 1024]");
  }
  int psi_given = 0, ranks_given = 0;
  for (int i = 1; i < argc; i++) {
    psi_given |= strncmp(argv[i], "--params", 8) == 0;
    ranks_given |= strncmp(argv[i], "--ranks", 7) == 0;
  }
  if (fp32_grads && strcmp(precision, "bf16") != 0)
    return args_error("--fp32-grads", NULL,
                      "only with --precision bf16 (fp32 gradients already accumulate in fp32)");
  if (model) {
    long long d[4];
    char tail;
    if (psi_given) return args_error("--model", model, "give either --params or --model, not both");
    if (sscanf(model, "%lld,%lld,%lld,%lld%c", &d[0], &d[1], &d[2], &d[3], &tail) != 4 || d[0] < 1 ||
        d[1] < 1 || d[2] < 1 || d[3] < 1 || d[0] > 1 << 24 || d[1] > 1 << 24 || d[2] > 1 << 24 ||
        d[3] > 1 << 16)
      return args_error("--model", model,
                        "must be D,H,C,L: input, hidden width, classes, hidden layers, e.g. 784,1024,10,4");
    /* Ψ in double first: this shape range can overflow a 64-bit count (and its byte counts) */
    double psi_d =
        (double)d[1] * (d[0] + 1) + (double)(d[3] - 1) * d[1] * (d[1] + 1) + (double)d[2] * (d[1] + 1);
    if (psi_d > MEMCALC_PSI_MAX)
      return args_error("--model", model,
                        "must have at most 1e15 parameters (as --params); this shape has psi = %.3g, whose "
                        "byte counts overflow",
                        psi_d);
    psi = (double)model_count_params((int)d[0], (int)d[1], (int)d[2], (int)d[3]);
  }
  int tf = layers || hidden || heads || seq; /* a transformer shape: activations too */
  static const char *const shape_only[] = {"--experts",    "--ep",         "--topk",         "--moe-every",
                                           "--expert-ffn", "--shared-experts", "--micro-batch", "--vocab"};
  gpt_shape_t shape = {.n_layer = layers, .n_head = heads, .n_embd = hidden, .seq_len = seq, .vocab = vocab};
  if (tf) {
    const char *missing = !layers ? "--layers"
        : !hidden                 ? "--hidden"
        : !heads                  ? "--heads"
        : !seq                    ? "--seq"
                                  : NULL;
    if (missing)
      return args_error(missing, NULL, "a transformer shape needs --layers, --hidden, --heads and --seq");
    if (model)
      return args_error("--model", model,
                        "give either an MLP (--model) or a transformer shape (--layers ...), not both");
    if (hidden % heads != 0) {
      char hv[32];
      snprintf(hv, sizeof hv, "%d", hidden);
      return args_error("--hidden", hv, "must be divisible by --heads %d", heads);
    }
    static const char *const moe_only[] = {"--ep", "--topk", "--moe-every", "--expert-ffn",
                                           "--shared-experts"}; /* ignored when dense */
    for (int i = 0; i < 5 && experts == 0; i++)
      if (args_given(argc, argv, moe_only[i]))
        return args_error(moe_only[i], args_given(argc, argv, moe_only[i]),
                          "needs --experts E > 0 (a dense model has no experts to spread or pick)");
    if (experts > 0) {
      char v[32];
      if (topk > experts)
        return snprintf(v, sizeof v, "%d", topk),
               args_error("--topk", v, "must be between 1 and --experts %d", experts);
      if (world % ep || experts % ep)
        return snprintf(v, sizeof v, "%d", ep),
               args_error("--ep", v, "must divide --ranks %d and --experts %d", world, experts);
      if (psi_given)
        return args_error("--params", NULL,
                          "give the transformer shape alone with --experts (Ψ comes from it)");
      if (ep % tp)
        return snprintf(v, sizeof v, "%d", tp),
               args_error("--tp", v,
                          "with --experts must divide --ep %d (chapter 12: T ranks "
                          "of each EP group split the attention)",
                          ep);
    }
    { /* Ψ of the shape in double first (gpt.h counts in int64: this range of flags can wrap it), under the
       * one cap; then the activation counts, in double, under theirs */
      double C = hidden;
      double dense = (double)(vocab + seq) * C + layers * (12.0 * C * C + 13.0 * C) + vocab * C + 2 * C;
      double nm = experts > 0 ? (double)(layers / moe_every) : 0, mlp = 8.0 * C * C + 5.0 * C;
      double F = expert_ffn > 0 ? expert_ffn : 4.0 * C, X = 2.0 * F * C + F + C; /* gpt_moe_expert_numel */
      double total = dense - nm * mlp + nm * (experts * C + shared * X) + nm * experts * X;
      if (memcalc_block_kind(shape, &blk) != MEMCALC_BLOCK_GPT) total = memcalc_block_params(shape, &blk);
      char v[32];
      snprintf(v, sizeof v, "%d", experts > 0 ? experts : hidden);
      if (total > MEMCALC_PSI_MAX)
        return args_error(experts > 0 ? "--experts" : "--hidden", v,
                          "with --layers %d%s: this transformer has psi = %.3g parameters; must be at most "
                          "%.0e (the cap of --params)",
                          layers, experts > 0 ? " and its shape" : "", total, MEMCALC_PSI_MAX);
      double bytes = acts_bound(shape, micro);
      snprintf(v, sizeof v, "%d", seq);
      if (bytes > MEMCALC_BYTES_MAX)
        return args_error("--seq", v,
                          "with --layers %d --hidden %d --heads %d --micro-batch %lld: the activations "
                          "come to %.3g bytes; must be at most %.2g (their counts would overflow 64 bits)",
                          layers, hidden, heads, (long long)micro, bytes, MEMCALC_BYTES_MAX);
    }
    gpt_moe_t moe_shape = {experts, topk, moe_every, expert_ffn, shared};
    if (!psi_given) psi = experts > 0 ? (double)gpt_moe_count_params(shape, moe_shape).total
                                      : (double)gpt_count_params(shape);
    if (!psi_given && memcalc_block_kind(shape, &blk) != MEMCALC_BLOCK_GPT)
      psi = memcalc_block_params(shape, &blk);
    if (heads % tp || hidden % tp || seq % tp || vocab % tp) {
      char tv[32];
      snprintf(tv, sizeof tv, "%d", tp);
      return args_error("--tp", tv, "must divide --heads %d, --hidden %d, --seq %d and --vocab %d", heads,
                        hidden, seq, vocab);
    }
  } else if (first_given(argc, argv, shape_only, 8)) { /* meaningless without a shape: refused, not ignored */
    const char *f = first_given(argc, argv, shape_only, 8);
    return args_error(f, args_given(argc, argv, f),
                      "needs a transformer shape (--layers --hidden --heads --seq)");
  } else if (tp > 1) {
    char tv[32];
    snprintf(tv, sizeof tv, "%d", tp);
    return args_error("--tp", tv, "needs a transformer shape (--layers --hidden --heads --seq)");
  }
  { /* the block's flags (memcalc_shape.c): with a shape, and what they compose with */
    memcalc_with_t w = {tp, pp, cp, experts, strcmp(optimizer, "muon") == 0};
    int e = memcalc_block_check(argc, argv, tf, shape, &blk, &w);
    if (e) return e;
  }
  { /* chapters 07, 10, 08: what composes here (ch00 computes each with the data-parallel ranks alone) */
    char v[32];
    if ((pp > 1 || cp > 1) && !tf)
      return snprintf(v, sizeof v, "%d", pp > 1 ? pp : cp),
             args_error(pp > 1 ? "--pp" : "--cp", v,
                        "needs a transformer shape (--layers --hidden --heads --seq)");
    if (pp > 1) {
      snprintf(v, sizeof v, "%d", pp);
      if (world % pp)
        return args_error("--pp", v, "must divide --ranks %d (D = N/P replicas of each stage)", world);
      if (pp > layers + 2)
        return args_error("--pp", v, "must be at most the GPT's L + 2 = %d units (embedding, blocks, head)",
                          layers + 2);
      if (cp > 1) return args_error("--pp", v, "with --cp: not computed here (give one of them)");
      if (tp > 1)
        return args_error("--pp", v,
                          "with --tp: not computed here (ch07_pipeline's 3-D grid; give one of them)");
      if (experts > 0)
        return args_error("--pp", v, "with --experts: not computed here (chapter 12 runs no pipeline)");
      if (offload) return args_error("--offload", NULL, "with --pp: not computed here (give one of them)");
      if (!split) return args_error("--pp", v, "this build has no pipeline split");
    }
    if (cp > 1) {
      snprintf(v, sizeof v, "%d", cp);
      if (world % cp || seq % cp)
        return args_error("--cp", v, "must divide --ranks %d and --seq %d", world, seq);
      if (tp > 1) return args_error("--cp", v, "with --tp: not computed here (give one of them)");
      if (experts > 0)
        return args_error("--cp", v,
                          "with --experts: not computed here (chapter 12 runs no context parallelism)");
    }
    if (offload) {
      if (strcmp(stage_s, "2") != 0 && strcmp(stage_s, "all") != 0)
        return args_error("--offload", NULL,
                          "is ZeRO-2's (chapter 08): with --stage 2 or all, not --stage %s", stage_s);
      if (experts > 0)
        return args_error("--offload", NULL, "with --experts: not computed here (give one of them)");
    }
  }
  if (strcmp(optimizer, "muon") == 0) { /* its own table (memcalc_muon.c): the split needs the shape */
    const char *no = experts > 0 ? "--experts" : tp > 1 ? "--tp" : pp > 1 ? "--pp" : cp > 1 ? "--cp"
                     : offload ? "--offload" : fp32_grads ? "--fp32-grads" : k != -1 ? "--k" : NULL;
    if (no) return args_error("--optimizer", "muon", "with %s: not computed here (nor built)", no);
    if (strcmp(precision, "fp32") != 0)
      return args_error("--optimizer", "muon", "needs --precision fp32 (the owners keep no fp32 master)");
    if (args_env_rank() != 0) return 0;
    int n = 0, cap = tf ? 4 * layers : model ? 1 << 16 : 1;
    int64_t *mats = calloc((size_t)cap, sizeof *mats);
    if (!mats) return fprintf(stderr, "error: out of memory\n"), 1;
    long long d[4] = {0};
    if (tf)
      for (int l = 0; l < layers; l++) /* a block's qkv, proj, fc, fcproj (gpt.h's matrices hook) */
        for (int q = 0; q < 4; q++) mats[n++] = (int64_t)(q == 0 ? 3 : q == 1 ? 1 : 4) * hidden * hidden;
    else if (model && sscanf(model, "%lld,%lld,%lld,%lld", &d[0], &d[1], &d[2], &d[3]) == 4)
      for (int l = 0; l < d[3]; l++) mats[n++] = d[1] * (l ? d[1] : d[0]); /* every W but the head's */
    rc = memcalc_muon(out, json, psi, world, mats, n,
                      n ? NULL : "--params alone: all of it taken as hidden matrices, evenly owned (give a "
                      "shape for the split)");
    free(mats);
    return rc;
  }
  if (args_env_rank() != 0) return 0; /* a calculator: under mpirun only rank 0 prints */
  /* --json opened now: a path that cannot be written is a bad flag (exit 2), not a table then exit 1 */
  FILE *fp = json ? fopen(json, "w") : NULL;
  if (json && !fp) return args_error("--json", json, "cannot be written (%s)", strerror(errno));

  int bf16 = strcmp(precision, "bf16") == 0;
  int wbytes = bf16 ? 2 : 4; /* bytes per param of the working params and of the grads */
  int acc = fp32_grads ? 4 : 0; /* fp32 gradient-accumulation buffer, bytes per param */
  int gbytes = wbytes + acc;    /* everything that is sharded like the gradients */
  if (k == -1) k = bf16 ? 12 : 8;
  dtype_t wdt = bf16 ? DT_BF16 : DT_F32;
  int s0 = 0, s1 = 3;
  if (strcmp(stage_s, "all") != 0) s0 = s1 = stage_s[0] - '0';

  char psi_txt[64];
  fmt_psi(psi_txt, sizeof psi_txt, psi);
  fprintf(out, "ZeRO model states per rank: Ψ = %s parameters, N = %d rank%s", psi_txt, world,
          world == 1 ? "" : "s");
  if (world == 1) fprintf(out, " (one GPU: every stage holds the same and sends nothing)");
  else if (!ranks_given) fprintf(out, " (the default of --ranks)");
  fprintf(out, "\nprecision %s: params %dΨ bytes, grads %dΨ bytes", precision, wbytes, wbytes);
  if (acc) fprintf(out, " + fp32 accumulation %dΨ bytes", acc);
  fprintf(out, ", optimizer states KΨ bytes with K = %g", k);
  if (bf16 && k == 12) fprintf(out, " (fp32 master 4 + Adam m 4 + v 4)");
  else if (!bf16 && k == 8) fprintf(out, " (Adam m 4 + v 4, no master)");
  fprintf(out, "\n\n");

  /* the default K and no accumulation buffer: the strategies' own formulas (the training reports'); else the
   * paper's generic form */
  int ours = k == (bf16 ? 12 : 8) && !acc && psi == (double)(int64_t)psi;
  mem_formula_t ddp = ours ? states(0, psi, world, wdt) : formula_zero_k(0, psi, world, wbytes, gbytes, k);
  mem_formula_t f[4];
  for (int s = s0; s <= s1; s++)
    f[s] = ours ? states(s, psi, world, wdt) : formula_zero_k(s, psi, world, wbytes, gbytes, k);

  fprintf(out, "in GB (1e9 bytes) per rank\n");
  fprintf(out, "%-8s %10s %10s %10s %10s %8s %12s   %s\n", "stage", "params", "grads", "optim", "total",
          "vs DDP", "comm/step", "formula");
  for (int s = s0; s <= s1; s++) {
    char p[32], g[32], o[32], t[32], c[32], gen[64], num[64];
    fmt_size(p, sizeof p, f[s].params, GB);
    fmt_size(g, sizeof g, f[s].grads, GB);
    fmt_size(o, sizeof o, f[s].optim, GB);
    fmt_size(t, sizeof t, f[s].total, GB);
    fmt_size(c, sizeof c, formula_comm_bytes(s, psi, world, wdt), GB);
    generic_text(gen, sizeof gen, s, wbytes, wbytes, acc);
    formula_text_k(num, sizeof num, s, wbytes, gbytes, k);
    fprintf(out, "%-8s %10s %10s %10s %10s %7.1fx %12s   %s = %s\n", g_stage_name[s], p, g, o, t,
            ddp.total / f[s].total, c, gen, num);
  }
  fprintf(out, "\nin GiB (2^30 bytes) per rank\n");
  fprintf(out, "%-8s %10s %10s %10s %10s\n", "stage", "params", "grads", "optim", "total");
  for (int s = s0; s <= s1; s++)
    fprintf(out, "%-8s %10.2f %10.2f %10.2f %10.2f\n", g_stage_name[s], f[s].params / GIB, f[s].grads / GIB,
           f[s].optim / GIB, f[s].total / GIB);
  fprintf(
      out,
      "\ncomm/step: bytes each rank sends per step with ring collectives, %s elements: stages 0-2 "
      "2(N-1)/N·Ψ (all-reduce = reduce-scatter + all-gather), stage 3 3(N-1)/N·Ψ (params gathered "
      "twice)\n",
      precision);
  if (acc)
    fprintf(out,
            "grads include the fp32 accumulation buffer (%dΨ + %dΨ): full at stages 0-1, sharded at 2-3\n",
            wbytes, acc);
  acts_t act = {0};
  if (!tf)
    fprintf(out, "activations, temporary buffers and fragmentation come on top of these model states\n");
  else {
    /* another block (memcalc_shape.c): its coefficients, no fp32 GPT's counts */
    int kind = memcalc_block_kind(shape, &blk), gpt_acts = kind != MEMCALC_BLOCK_OTHER;
    memcalc_acts_coef_t co = memcalc_block_acts(shape, &blk);
    act = acts_of(shape, micro, tp, co, gpt_acts);
    double s = seq, h = hidden, a = heads, sbh = s * (double)micro * h;
    fprintf(out, "\nactivations of one micro-batch (every rank, every stage: ZeRO does not shard them)\n");
    fprintf(out, "shape: L = %d layers, h = %d, a = %d heads, s = %d, b = %lld%s\n", layers, hidden, heads,
            seq, (long long)micro,
            psi_given ? ""
            : kind    ? " (Ψ above from this shape and the block below, with --vocab)"
                      : " (Ψ above from this shape: the GPT of common/model/gpt.h with --vocab)");
    if (kind) memcalc_block_text(out, shape, &blk);
    fprintf(out,
            "Korthikanti et al. 2022, 16 bit, per layer: s·b·h·(%g + 5·a·s/h) = %.0f × %.6g = %.0f "
            "bytes\n",
            co.whole + co.split, sbh, co.whole + co.split + 5.0 * a * s / h, act.per_layer);
    fprintf(out, "  all %d layers: %.0f bytes; full recompute: 2·s·b·h·L + one layer = %.0f "
                 "bytes\n", layers,
            act.total, act.recompute);
    if (gpt_acts)
      fprintf(out,
              "this repository's fp32 GPT (vocab %d, gpt_acts_bytes, common/model/gpt.h): %.0f bytes; "
              "--recompute %.0f bytes\n",
              vocab, act.ours, act.ours_rc);
    else
      fprintf(out, "this repository's fp32 GPT has not this block: its own activations (gpt_acts_bytes) "
                   "not shown\n");
    fprintf(out,
            "\nmodel states + activations per rank, in GB (1e9 bytes); activations by Korthikanti et al.\n");
    fprintf(out, "%-8s %10s %10s %10s   %12s %10s\n", "stage", "states", "acts", "total", "acts recomp",
            "total");
    for (int st = s0; st <= s1; st++) {
      char m_[32], a_[32], t_[32], ar[32], tr[32];
      fmt_size(m_, sizeof m_, f[st].total, GB);
      fmt_size(a_, sizeof a_, act.total, GB);
      fmt_size(t_, sizeof t_, f[st].total + act.total, GB);
      fmt_size(ar, sizeof ar, act.recompute, GB);
      fmt_size(tr, sizeof tr, f[st].total + act.recompute, GB);
      fprintf(out, "%-8s %10s %10s %10s   %12s %10s\n", g_stage_name[st], m_, a_, t_, ar, tr);
    }
    fprintf(out, "activations are %.0f%% of the DDP total without recompute; ZeRO-3 divides the states by N, "
           "never the activations\n", 100.0 * act.total / (ddp.total + act.total));
    if (tp > 1) { /* the same formulas, per rank of a TP group of t (Korthikanti et al. §4.2) */
      char m_[32], a_[32], t_[32], ar[32], tr[32];
      fprintf(
          out,
          "\nwith t = %d ranks splitting every layer, per rank, 16 bit (Korthikanti et al. 2022, §4.2):\n",
          tp);
      fprintf(
          out,
          "  TP:      s·b·h·(%g + %g/t + 5·a·s/(h·t)) = %.0f bytes per layer, all %d layers: %.0f "
          "bytes\n",
          co.whole, co.split, act.tp_layer, layers, act.tp_total);
      fprintf(out,
              "  TP + SP: s·b·h·(%g + 5·a·s/h)/t        = %.0f bytes per layer, all %d layers: %.0f "
              "bytes; "
              "full recompute: 2·s·b·h·L/t + one layer = %.0f bytes\n",
              co.whole + co.split, act.sp_layer, layers, act.sp_total, act.sp_rc);
      if (gpt_acts)
        fprintf(out,
                "this repository's fp32 GPT with --tp %d --sp (gpt_acts_bytes_tp): %.0f bytes; --recompute "
                "%.0f bytes "
                "(= the whole model's / t)\n",
                tp, act.ours_sp, act.ours_sp_rc);
      fprintf(out,
              "model states + activations per rank of t = %d tensor-parallel ranks, GB (every rank holds 1/t "
              "of every\n"
              "parameter with its states: DDP's states / t, the replicated LayerNorms left out; TP's "
              "recompute keeps\n"
              "2·s·b·h·L whole)\n",
              tp);
      for (int sp = 0; sp < 2; sp++) {
        double a0 = sp ? act.sp_total : act.tp_total,
               a1 = sp ? act.sp_rc : 2.0 * s * (double)micro * h * layers + act.tp_layer;
        fmt_size(m_, sizeof m_, ddp.total / tp, GB);
        fmt_size(a_, sizeof a_, a0, GB);
        fmt_size(t_, sizeof t_, ddp.total / tp + a0, GB);
        fmt_size(ar, sizeof ar, a1, GB);
        fmt_size(tr, sizeof tr, ddp.total / tp + a1, GB);
        fprintf(out, "%-8s %10s %10s %10s   %12s %10s\n", sp ? "TP+SP" : "TP", m_, a_, t_, ar, tr);
      }
    }
  }

  gpt_moe_params_t mp = {0};
  mem_formula_t ms[4] = {{0}};
  if (experts > 0) { /* chapter 12: total against active, and where the expert states live */
    gpt_moe_t moe_shape = {experts, topk, moe_every, expert_ffn, shared};
    mp = gpt_moe_count_params(shape, moe_shape);
    int D = world / ep;
    /* one rank's model: the dense part (--tp t inside the EP group: its part of it), E/P_E experts */
    double dense = (double)gpt_moe_dense_rank(shape, moe_shape, tp, vocab / tp);
    double local = dense + (double)mp.expert / ep;
    char every[32] = "every";
    if (moe_every > 1)
      snprintf(every, sizeof every, "every %d%s", moe_every,
               moe_every == 2       ? "nd"
                   : moe_every == 3 ? "rd"
                                    : "th");
    int F = expert_ffn > 0 ? expert_ffn : 4 * hidden;
    fprintf(out,
            "\nMixture of Experts (chapter 12): %d expert MLPs of width %d (2·F·h + F + h each) in %s "
            "block, top-%d per token, %d shared\n",
            experts, F, every, topk, shared);
    fprintf(
        out,
        "  Ψ total %.0f = dense %.0f (routers E·h and shared experts included) + experts %.0f; active per "
        "token %.0f "
        "(%.1f%% of total)\n",
        (double)mp.total, (double)mp.dense, (double)mp.expert, (double)mp.active,
        100.0 * mp.active / mp.total);
    fprintf(out,
            "  expert parallelism P_E = %d of the N = %d ranks: each rank holds E/P_E = %d experts of every "
            "MoE block, "
            "Ψ per rank %.0f;\n  two data-parallel groups (ch12_experts' DDP and ZeRO, as DeepSpeed's "
            "and Megatron's): the dense states over all N = %d ranks, the experts' over the D = N/P_E = %d "
            "that hold the same experts%s\n",
            ep, world, experts / ep, local, world, D, tp > 1 ? "; with --tp inside EP both over D" : "");
    if (tp > 1)
      fprintf(out,
              "  --tp %d inside each EP group: the attention, the embedding and the head split over %d "
              "ranks, dense per "
              "rank %.0f of %.0f (the routers and LayerNorms whole)\n",
              tp, tp, dense, (double)mp.dense);
    fprintf(out, "%-8s %14s %14s %14s   (GB per rank)\n", "stage", "dense states", "expert states", "total");
    for (int st = s0; st <= s1; st++) {
      int nd = tp == 1 ? world : D; /* the dense part's group: two groups, or D with --tp inside EP */
      mem_formula_t fd = ours ? states(st, dense, nd, wdt) : formula_zero_k(st, dense, nd, wbytes, gbytes, k);
      double xe = (double)mp.expert / ep;
      mem_formula_t fx = ours && xe == (double)(int64_t)xe ? states(st, xe, D, wdt)
                                                           : formula_zero_k(st, xe, D, wbytes, gbytes, k);
      char a_[32], b_[32], t_[32];
      fmt_size(a_, sizeof a_, fd.total, GB);
      fmt_size(b_, sizeof b_, fx.total, GB);
      fmt_size(t_, sizeof t_, fd.total + fx.total, GB);
      fprintf(out, "%-8s %14s %14s %14s\n", g_stage_name[st], a_, b_, t_);
      ms[st].params = fd.total, ms[st].grads = fx.total, ms[st].total = fd.total + fx.total;
    }
  }

  /* chapter 07: the GPT's units cut into P stages as ch07_pipeline cuts them (pp_split, by parameter
   * count) */
  pp_stage_t *ps = NULL;
  int D = world / pp;
  if (pp > 1) {
    int U = layers + 2, *first = calloc((size_t)pp + 1, sizeof *first);
    int64_t *nu = calloc((size_t)U * 3, sizeof *nu), *yu = nu + U, *su = nu + 2 * (size_t)U;
    ps = calloc((size_t)pp, sizeof *ps);
    if (first && nu)
      for (int u = 0; u < U; u++) gpt_unit_sizes(shape, u, &nu[u], &yu[u], &su[u]); /* gpt_init's units */
    if (!first || !nu || !ps || split(nu, U, pp, first)) {
      free(first), free(nu), free(ps);
      if (fp) fclose(fp);
      fflush(stdout);
      fprintf(stderr, "ch00_memory: cannot split %d units into %d stages\n", U, pp);
      return 1;
    }
    for (int st = 0; st < pp; st++) {
      pp_stage_t *q = &ps[st];
      q->u0 = first[st], q->u1 = first[st + 1], q->in_flight = pp - st;
      /* the tokens (int32: 4 bytes each) or the previous unit's output */
      int64_t in = st == 0 ? seq : yu[q->u0 - 1];
      double per = (double)in, per_rc = (double)in;
      for (int u = q->u0; u < q->u1; u++) {
        q->params += (double)nu[u], per += (double)(yu[u] + su[u]), per_rc += (double)yu[u];
        q->blocks += u >= 1 && u <= layers;
      }
      q->slot = 4.0 * (double)micro * per, q->slot_rc = 4.0 * (double)micro * per_rc;
    }
    free(first), free(nu);
    fprintf(
        out,
        "\npipeline parallelism (chapter 07): P = %d stages x D = N/P = %d replica%s of each; 1F1B with M >= "
        "P "
        "micro-batches of b = %lld:\nstage s keeps P - s of them in flight. The split by parameter count is "
        "ch07_pipeline's (pp_split; unit 0 the embedding, 1..%d the blocks, %d the head)\n",
        pp, D, D == 1 ? "" : "s", (long long)micro, layers, layers + 1);
    fprintf(out, "%-6s %-11s %14s %9s %16s %16s %16s   (bytes per rank)\n", "stage", "units", "params",
            "in flight", "acts fp32 GPT", "--recompute", "Korthikanti");
    for (int st = 0; st < pp; st++) {
      char u_[32];
      snprintf(u_, sizeof u_, "%d..%d", ps[st].u0, ps[st].u1 - 1);
      fprintf(out, "%-6d %-11s %14.0f %9d %16.0f %16.0f %16.0f\n", st, u_, ps[st].params, ps[st].in_flight,
              ps[st].in_flight * ps[st].slot, ps[st].in_flight * ps[st].slot_rc,
              ps[st].in_flight * ps[st].blocks * act.per_layer);
    }
    fprintf(out,
            "acts fp32 GPT: in flight x the loop's slot of the stage (ch07_pipeline's 'activations in "
            "flight': its input, "
            "every unit's\noutput and saved activations; --recompute: the outputs, one saved buffer of the "
            "largest unit "
            "besides). Korthikanti et al.\n2022, 16 bit: in flight x the stage's blocks x s·b·h·(34 + "
            "5·a·s/h), the "
            "embedding and head not counted: with L/P blocks\non the first stage its P micro-batches hold "
            "all L layers' "
            "worth, as without a pipeline (a large vocabulary's embedding or head\nmay take a stage of its "
            "own: the "
            "split is by parameters)\n");
    fprintf(out,
            "model states per rank of each stage, GB: its units' Ψ over its D = %d replica%s as "
            "ch07_pipeline --zero runs them\n"
            "(a stage sums its micro-batches' gradients before one reduction: ZeRO-2 and -3 keep the full "
            "grads through the step)\n",
            D, D == 1 ? "" : "s");
    fprintf(out, "%-6s", "stage");
    for (int z = s0; z <= s1; z++) fprintf(out, " %10s", g_stage_name[z]);
    fprintf(out, "\n");
    for (int st = 0; st < pp; st++) {
      fprintf(out, "%-6d", st);
      for (int z = s0; z <= s1; z++) {
        char t_[32];
        fmt_size(t_, sizeof t_,
                 states_of(states, ours, z | MEMCALC_NO_SYNC, ps[st].params, D, wdt, wbytes, gbytes, k).total,
                 GB);
        fprintf(out, " %10s", t_);
      }
      fprintf(out, "\n");
    }
  }

  /* chapter 10: the ring's activations per rank of S/C positions of each sequence */
  double cp_ours = 0, cp_ours_rc = 0;
  if (cp > 1) {
    /* exact: every term is a multiple of S, C | S */
    cp_ours = (double)gpt_cp_acts_bytes(shape, micro, 0, heads) / cp;
    cp_ours_rc = (double)gpt_cp_acts_bytes(shape, micro, 1, heads) / cp;
    fprintf(out,
            "\ncontext parallelism (chapter 10, the ring): C = %d ranks share each of the b = %lld "
            "sequences, S/C = %d "
            "positions each;\nthe weights whole on every rank: the states are the N = %d ranks' above (CP "
            "ranks are "
            "data-parallel to the strategy)\n",
            cp, (long long)micro, seq / cp, world);
    fprintf(out,
            "Korthikanti et al. 2022, 16 bit, on S/C positions: s·b·h·(34 + 5·a·s/h)/C = %.0f bytes per "
            "layer, all %d "
            "layers: %.0f bytes;\n  full recompute: (2·s·b·h·L + one layer)/C = %.0f bytes\n",
            act.per_layer / cp, layers, act.total / cp, act.recompute / cp);
    fprintf(out,
            "this repository's fp32 GPT with ring attention (gpt_cp_acts_bytes / C: the log-sum-exp, no S² "
            "probabilities;\nch10_long's cp_acts_formula_bytes when its loop gives each rank b/C sequences): "
            "%.0f bytes; "
            "--recompute %.0f bytes\n",
            cp_ours, cp_ours_rc);
    fprintf(out, "model states + activations per rank of C = %d, GB; activations by Korthikanti et al. / C\n",
            cp);
    fprintf(out, "%-8s %10s %10s %10s   %12s %10s\n", "stage", "states", "acts", "total", "acts recomp",
            "total");
    for (int st = s0; st <= s1; st++) {
      char m_[32], a_[32], t_[32], ar[32], tr[32];
      fmt_size(m_, sizeof m_, f[st].total, GB);
      fmt_size(a_, sizeof a_, act.total / cp, GB);
      fmt_size(t_, sizeof t_, f[st].total + act.total / cp, GB);
      fmt_size(ar, sizeof ar, act.recompute / cp, GB);
      fmt_size(tr, sizeof tr, f[st].total + act.recompute / cp, GB);
      fprintf(out, "%-8s %10s %10s %10s   %12s %10s\n", g_stage_name[st], m_, a_, t_, ar, tr);
    }
  }

  /* chapter 08: ZeRO-2 with the master and optimizer states on the host (offload.c's formula hook) */
  mem_formula_t off = {0}, z2 = {0};
  double staging = 0;
  if (offload) {
    off = states_of(states, ours, MEMCALC_OFFLOAD, psi, world, wdt, wbytes, gbytes, k);
    z2 = states_of(states, ours, 2, psi, world, wdt, wbytes, gbytes, k);
    staging = (double)wbytes * psi / world + (bf16 ? 0 : 4.0 * psi / world);
    char p_[32], g_[32], d_[32], h_[32], z_[32], txt[64];
    fmt_size(p_, sizeof p_, off.params, GB);
    fmt_size(g_, sizeof g_, off.grads, GB);
    fmt_size(d_, sizeof d_, off.params + off.grads, GB);
    fmt_size(h_, sizeof h_, off.optim, GB);
    fmt_size(z_, sizeof z_, z2.total, GB);
    formula_text_k(txt, sizeof txt, 2, wbytes, gbytes, 0);
    fprintf(out,
            "\nZeRO-Offload (chapter 08, --offload): ZeRO-2 with the master and optimizer states (KΨ/N) in "
            "host memory, "
            "per rank, GB\n");
    fprintf(out, "%-8s %10s %10s %12s %12s %14s\n", "", "params", "grads", "device", "host (K)",
            "ZeRO-2 device");
    fprintf(out, "%-8s %10s %10s %12s %12s %14s\n", "offload", p_, g_, d_, h_, z_);
    fprintf(out,
            "device %s = %.0f bytes, host KΨ/N = %.0f bytes (ch08_offload's formula); its ledger also keeps "
            "on the "
            "host\nthe gradient shard's copy %dΨ/N%s: %.0f bytes\n",
            txt, off.params + off.grads, off.optim, wbytes, bf16 ? "" : " and the fp32 piece as master 4Ψ/N",
            staging);
  }

  if (fp) {
    fprintf(fp, "{\"chapter\": \"00_memory\", \"params\": %.17g, \"world\": %d, \"precision\": \"%s\", "
                "\"param_bytes\": %d, \"grad_bytes\": %d, \"fp32_grads\": %s, \"k\": %.17g,\n",
            psi, world, precision, wbytes, gbytes, acc ? "true" : "false", k);
    /* a block not this GPT's: its fields where the fp32 GPT's counts were (memcalc_shape.c) */
    int kind = tf ? memcalc_block_kind(shape, &blk) : MEMCALC_BLOCK_GPT;
    int gpt_acts = kind != MEMCALC_BLOCK_OTHER;
    if (tf) {
      fprintf(fp,
              " \"transformer\": {\"layers\": %d, \"hidden\": %d, \"heads\": %d, \"seq\": %d, "
              "\"micro_batch\": %lld, "
              "\"vocab\": %d, \"acts_per_layer\": %.17g, \"acts\": %.17g, \"acts_recompute\": %.17g, ",
              layers, hidden, heads, seq, (long long)micro, vocab, act.per_layer, act.total, act.recompute);
      if (kind) memcalc_block_json(fp, shape, &blk);
      if (gpt_acts)
        fprintf(fp, "\"ours_fp32_acts\": %.17g, \"ours_fp32_acts_recompute\": %.17g, ", act.ours,
                act.ours_rc);
      fprintf(fp, "\"acts_selective\": %.17g},\n", act.selective);
    }
    if (tf && tp > 1) { /* --tp: per rank of the TP group, without and with sequence parallelism */
      fprintf(fp,
              " \"tp\": {\"t\": %d, \"acts_tp\": %.17g, \"acts_tp_sp\": %.17g, \"acts_tp_sp_recompute\": "
              "%.17g, ",
              tp, act.tp_total, act.sp_total, act.sp_rc);
      if (gpt_acts)
        fprintf(fp, "\"ours_fp32_acts_tp_sp\": %.17g, \"ours_fp32_acts_tp_sp_recompute\": %.17g, ",
                act.ours_sp, act.ours_sp_rc);
      fprintf(fp, "\"states\": %.17g, \"acts_tp_sp_selective\": %.17g},\n", ddp.total / tp, act.sp_sel);
    }
    if (experts > 0) {
      fprintf(fp,
              " \"moe\": {\"experts\": %d, \"topk\": %d, \"moe_every\": %d, \"ep\": %d, \"expert_ffn\": %d, "
              "\"shared_experts\": %d, \"params_total\": %.17g, \"params_active\": %.17g, \"params_expert\": "
              "%.17g, "
              "\"params_dense\": %.17g, \"per_stage\": [",
              experts, topk, moe_every, ep, expert_ffn > 0 ? expert_ffn : 4 * hidden, shared,
              (double)mp.total, (double)mp.active, (double)mp.expert, (double)mp.dense);
      for (int st = s0; st <= s1; st++)
        fprintf(fp, "%s{\"stage\": %d, \"dense_states\": %.17g, \"expert_states\": %.17g, \"total\": %.17g}",
                st == s0 ? "" : ", ", st, ms[st].params, ms[st].grads, ms[st].total);
      fprintf(fp, "]},\n");
    }
    if (pp > 1) {
      fprintf(fp, " \"pp\": {\"p\": %d, \"d\": %d, \"per_stage\": [", pp, D);
      for (int st = 0; st < pp; st++) {
        const pp_stage_t *q = &ps[st];
        fprintf(
            fp,
            "%s{\"pp_stage\": %d, \"first_unit\": %d, \"last_unit\": %d, \"blocks\": %d, \"params\": %.17g, "
            "\"in_flight\": %d, \"slot_bytes\": %.17g, \"acts\": %.17g, \"acts_recompute\": %.17g, "
            "\"acts_korthikanti\": %.17g",
            st ? ", " : "", st, q->u0, q->u1 - 1, q->blocks, q->params, q->in_flight, q->slot,
            q->in_flight * q->slot, q->in_flight * q->slot_rc, q->in_flight * q->blocks * act.per_layer);
        for (int z = s0; z <= s1; z++)
          fprintf(fp, ", \"states_z%d\": %.17g", z,
                  states_of(states, ours, z | MEMCALC_NO_SYNC, q->params, D, wdt, wbytes, gbytes, k).total);
        fprintf(fp, "}");
      }
      fprintf(fp, "]},\n");
    }
    if (cp > 1)
      fprintf(fp,
              " \"cp\": {\"c\": %d, \"positions\": %d, \"acts_korthikanti\": %.17g, "
              "\"acts_korthikanti_recompute\": %.17g, "
              "\"ours_fp32_acts\": %.17g, \"ours_fp32_acts_recompute\": %.17g},\n",
              cp, seq / cp, act.total / cp, act.recompute / cp, cp_ours, cp_ours_rc);
    if (offload)
      fprintf(fp,
              " \"offload\": {\"device_params\": %.17g, \"device_grads\": %.17g, \"device\": %.17g, "
              "\"host\": %.17g, "
              "\"host_staging\": %.17g, \"zero2_device\": %.17g},\n",
              off.params, off.grads, off.params + off.grads, off.optim, staging, z2.total);
    fprintf(fp, " \"stages\": [");
    for (int s = s0; s <= s1; s++) {
      char num[64];
      formula_text_k(num, sizeof num, s, wbytes, gbytes, k);
      fprintf(
          fp,
          "%s\n  {\"stage\": %d, \"params\": %.17g, \"grads\": %.17g, \"optim\": %.17g, \"total\": %.17g, "
          "\"saving\": %.17g, \"comm_bytes_per_step\": %.17g, \"formula\": \"%s\"",
          s == s0 ? "" : ",", s, f[s].params, f[s].grads, f[s].optim, f[s].total, ddp.total / f[s].total,
          formula_comm_bytes(s, psi, world, wdt), num);
      if (tf) /* "total" stays the model states' (the plots and tests read it); these come after it */
        fprintf(fp, ", \"acts\": %.17g, \"total_with_acts\": %.17g, \"total_with_acts_recompute\": %.17g",
                act.total, f[s].total + act.total, f[s].total + act.recompute);
      fprintf(fp, "}");
    }
    fprintf(fp, "\n]}\n");
    if (fclose(fp) != 0) return free(ps), memcalc_fail(json);
  }
  free(ps);
  return 0;
}
