/* export.h — the full fp32 weights in a form other tools read: safetensors
 * (https://huggingface.co/docs/safetensors), with GPT-2's tensor names and shapes for the GPT.
 * Notes: notes/gpt.md ("Loading the weights in PyTorch"), notes/reliability.md.
 *
 * A safetensors file: 8 bytes (little-endian u64) header length N, N bytes of JSON
 * {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ..., "__metadata__":
 * {...}} padded with spaces to a multiple of 8, then the tensors' bytes back to back (offsets
 * relative to the end of the header), in the order listed.
 *
 * The GPT (common/model/gpt.h's units) under Hugging Face GPT2LMHeadModel's names:
 *   wte.weight (V, C)  wpe.weight (T, C)
 *   h.N.ln_1.weight/bias (C)          h.N.attn.c_attn.weight (C, 3C)  .bias (3C)
 *   h.N.attn.c_proj.weight (C, C) .bias (C)   h.N.ln_2.weight/bias (C)
 *   h.N.mlp.c_fc.weight (C, 4C) .bias (4C)    h.N.mlp.c_proj.weight (4C, C) .bias (C)
 *   ln_f.weight/bias (C)               lm_head.weight (V, C)  (untied here: GPT-2 ties it to wte)
 * GPT-2's attention and MLP matrices are Conv1D, stored (in, out): ours are (out, in) row-major
 * (nn.Linear's layout), so those four are written transposed; everything else as it is. The
 * MLP (model.h): fc.U.weight (out, in), fc.U.bias (out) per linear unit U. */
#ifndef ZL_EXPORT_H
#define ZL_EXPORT_H
#include <stdint.h> // int64_t
#include "model.h"  // gpt_shape_t

/* What the weights are: the model kind and its shape (as the flags or a manifest give them). */
typedef struct export_model {
  int gpt;            /* 1: the GPT of shape g; 0: the MLP */
  gpt_shape_t g;
  int input, hidden, classes, layers;
} export_model_t;

/* Ψ of that model (the floats export_safetensors expects). */
int64_t export_numel(const export_model_t *em);
/* Write w (Ψ fp32 values, unit after unit, unpadded: the --save-params order) to path as
 * safetensors with the names above; meta: extra "__metadata__" string pairs (NULL-terminated
 * key, value list, may be NULL). Written to a temp file and renamed; dies naming WHAT and path
 * on an error (outfile_open). */
void export_safetensors(const char *what, const char *path, const export_model_t *em, const float *w,
                        const char *const *meta);
#endif
