/* memcalc_shape.c — ch00_memory's transformer block beyond this repository's GPT: a real model's Ψ and
 * activations follow from a few choices of its block — grouped-query attention (--kv-heads), the MLP's
 * width and kind (--ffn, --mlp swiglu), the position table (--pos rope), the head tied to the embedding
 * (--tied-head), biases (--no-bias) — and Llama-3's counts come out exact (memcalc.h). A calculator:
 * no model code runs these shapes. Pure, as memcalc.c.
 *
 * Ψ, with C = h, H heads, K kv heads, F the MLP's width, V the vocabulary, S the sequence, L layers:
 *   embeddings  V·C, + S·C for a learned position table (RoPE: none; it rotates q and k by fixed angles)
 *   attention   q C×C, k and v C×(K·C/H) each, the output C×C; biases C + 2·K·C/H + C
 *   MLP         GELU: C×F, F×C, biases F + C; SwiGLU: gate C×F, up C×F, down F×C, biases 2F + C
 *   norms       two a block and a final one: weight and bias 2C each (--no-bias: the weight C, RMSNorm's)
 *   head        V·C, none when tied
 * The defaults (K = H, F = 4C, GELU, learned, biases, untied) give gpt_count_params: L·(12C² + 13C) + ...
 *
 * Activations (Korthikanti et al. 2022, §4.1, 16 bit; the tensors a layer stores for its backward, its
 * dropout masks 1 byte an element), per layer in units of s·b·h, the 5·a·s²·b of the scores aside:
 *   kept whole under TP (§4.2; split by SP): the norms' inputs 4, the attention's input 2 (q, k and v share
 *     it), its output dropout mask 1, the MLP's input 2, its dropout mask 1: 10
 *   split by TP: q 2, k and v 2·K/H each (GQA: K/H of q's width), the output projection's input 2; the MLP's
 *     GELU input and output 2·F/h each (4F/h), SwiGLU's gate and up outputs and their product, the down
 *     projection's input (6F/h: SiLU(gate) recomputed from the gate in the backward, or fused with it)
 * So 10 + 4 + 4K/H + 4F/h = 34 for GPT's defaults (K = H, F = 4h), and 10 + 4 + 1 + 21 = 36 for Llama-3 8B
 * (K/H = 8/32, F/h = 3.5). RoPE adds nothing kept: its backward rotates the gradient back with the same
 * angles, and QKᵀ keeps the rotated q and k anyway. RMSNorm keeps its input as LayerNorm does. The dropout
 * masks stay (Llama trains without dropout: it would keep a·s²·b + 2·s·b·h less a layer). */
#include "memcalc.h" // memcalc_block_t, memcalc_acts_coef_t
#include "args.h"    // args_error, args_given
#include <stdio.h>   // fprintf, snprintf
#include <string.h>  // strcmp

/* The flags of the block, in --help's order: any of them needs a transformer shape. */
static const char *const g_block_flags[] = {"--kv-heads", "--ffn",       "--mlp",
                                            "--pos",      "--tied-head", "--no-bias"};
#define N_BLOCK_FLAGS 6

/* --tied-head and --no-bias take no value (args_given would name the next word) */
static int i_takes_value(const char *flag) {
  return strcmp(flag, "--tied-head") && strcmp(flag, "--no-bias");
}

static double kv_of(gpt_shape_t g, const memcalc_block_t *b) { return b->kv_heads ? b->kv_heads : g.n_head; }
static double ffn_of(gpt_shape_t g, const memcalc_block_t *b) { return b->ffn ? b->ffn : 4.0 * g.n_embd; }
static int swiglu(const memcalc_block_t *b) { return b->mlp && strcmp(b->mlp, "swiglu") == 0; }
static int rope(const memcalc_block_t *b) { return b->pos && strcmp(b->pos, "rope") == 0; }

int memcalc_block_kind(gpt_shape_t g, const memcalc_block_t *b) {
  int same =
      kv_of(g, b) == g.n_head && ffn_of(g, b) == 4.0 * g.n_embd && !swiglu(b) && !rope(b) && !b->no_bias;
  return !same ? MEMCALC_BLOCK_OTHER : b->tied ? MEMCALC_BLOCK_TIED : MEMCALC_BLOCK_GPT;
}

double memcalc_block_params(gpt_shape_t g, const memcalc_block_t *b) {
  double C = g.n_embd, K = kv_of(g, b), F = ffn_of(g, b), kvw = K * C / g.n_head, bias = b->no_bias ? 0 : 1;
  double norm = b->no_bias ? C : 2 * C;
  double attn = 2 * C * C + 2 * C * kvw + bias * (2 * C + 2 * kvw);
  double mlp = swiglu(b) ? 3 * C * F + bias * (2 * F + C) : 2 * C * F + bias * (F + C);
  double emb = (double)g.vocab * C + (rope(b) ? 0 : (double)g.seq_len * C);
  return emb + g.n_layer * (attn + mlp + 2 * norm) + norm + (b->tied ? 0 : (double)g.vocab * C);
}

memcalc_acts_coef_t memcalc_block_acts(gpt_shape_t g, const memcalc_block_t *b) {
  double K = kv_of(g, b), F = ffn_of(g, b), h = g.n_embd;
  memcalc_acts_coef_t c = {.whole = 10.0,
                           .split = 4.0 + 4.0 * K / g.n_head + (swiglu(b) ? 6.0 : 4.0) * F / h};
  return c;
}

int memcalc_block_check(int argc, char **argv, int tf, gpt_shape_t g, const memcalc_block_t *b,
                        const memcalc_with_t *with) {
  char v[32];
  for (int i = 0; i < N_BLOCK_FLAGS && !tf; i++)
    if (args_given(argc, argv, g_block_flags[i]))
      return args_error(g_block_flags[i],
                        i_takes_value(g_block_flags[i]) ? args_given(argc, argv, g_block_flags[i]) : NULL,
                        "needs a transformer shape (--layers --hidden --heads --seq)");
  if (!tf) return 0;
  if (b->kv_heads && g.n_head % b->kv_heads)
    return snprintf(v, sizeof v, "%d", b->kv_heads),
           args_error("--kv-heads", v, "must divide --heads %d (each kv head serves H/K query heads)",
                      g.n_head);
  int kind = memcalc_block_kind(g, b);
  if (kind == MEMCALC_BLOCK_GPT) return 0;
  /* a tied head alone: the fp32 GPT's activations and blocks hold (CP's ring, Muon's matrices), not the
   * units --pp splits nor the count --experts starts from */
  int other = kind == MEMCALC_BLOCK_OTHER;
  const char *no = with->experts > 0       ? "--experts"
                   : with->pp > 1          ? "--pp"
                   : other && with->cp > 1 ? "--cp"
                   : other && with->muon   ? "--optimizer muon"
                                           : NULL;
  const char *mine = NULL; /* the first block flag given: what the line names */
  for (int i = 0; i < N_BLOCK_FLAGS && !mine; i++)
    if (args_given(argc, argv, g_block_flags[i])) mine = g_block_flags[i];
  if (no && mine)
    return args_error(mine, i_takes_value(mine) ? args_given(argc, argv, mine) : NULL,
                      "with %s: not computed here (those tables count this GPT's own blocks only)", no);
  if (other && with->tp > 1 && ((long)kv_of(g, b) % with->tp || (long)ffn_of(g, b) % with->tp))
    return snprintf(v, sizeof v, "%d", with->tp),
           args_error("--tp", v,
                      "must divide --kv-heads %.0f and --ffn %.0f (t ranks split the k, v heads and "
                      "the MLP's width)",
                      kv_of(g, b), ffn_of(g, b));
  return 0;
}

void memcalc_block_text(FILE *out, gpt_shape_t g, const memcalc_block_t *b) {
  double K = kv_of(g, b), F = ffn_of(g, b);
  memcalc_acts_coef_t c = memcalc_block_acts(g, b);
  fprintf(out,
          "block (memcalc_shape.c): %s attention, K = %.0f kv head%s (k, v: C x %.0f), %s MLP of width F = "
          "%.0f (%d matrices), %s, %s, head %s: Ψ of the shape %.0f\n",
          K == g.n_head ? "multi-head"
          : K == 1      ? "multi-query"
                        : "grouped-query",
          K, K == 1 ? "" : "s", K * g.n_embd / g.n_head, swiglu(b) ? "SwiGLU" : "GELU", F, swiglu(b) ? 3 : 2,
          rope(b) ? "RoPE (no position table)" : "a learned position table",
          b->no_bias ? "no biases (norms: a weight alone)" : "biases",
          b->tied ? "tied to the token embedding" : "a matrix of its own", memcalc_block_params(g, b));
  if (memcalc_block_kind(g, b) == MEMCALC_BLOCK_OTHER)
    fprintf(out,
            "activations per layer: Korthikanti's stored tensors for this block, s·b·h·(%g kept whole "
            "under TP + %g split: q, k, v, the MLP's)\n",
            c.whole, c.split);
}

void memcalc_block_json(FILE *fp, gpt_shape_t g, const memcalc_block_t *b) {
  fprintf(
      fp,
      "\"kv_heads\": %.0f, \"ffn\": %.0f, \"mlp\": \"%s\", \"pos\": \"%s\", \"tied_head\": %s, \"bias\": %s, "
      "\"params_shape\": %.17g, ",
      kv_of(g, b), ffn_of(g, b), swiglu(b) ? "swiglu" : "gelu", rope(b) ? "rope" : "learned",
      b->tied ? "true" : "false", b->no_bias ? "false" : "true", memcalc_block_params(g, b));
}
