/* export.c — safetensors with GPT-2's names (see export.h). */
#include "export.h" // export_model_t, export_safetensors
#include "check.h"  // die, xmalloc
#include "gpt.h"    // gpt_count_params
#include "model.h"  // model_count_params
#include "outfile.h" // outfile_open, outfile_close
#include <stdio.h>  // snprintf, fwrite
#include <stdlib.h> // free
#include <string.h> // memcpy

/* One tensor of the file: name, shape (1 or 2 dims), where it starts in w, whether the stored
 * matrix is the transpose of ours (GPT-2's Conv1D: (in, out) of our (out, in)). */
typedef struct { char name[64]; int64_t d0, d1; int64_t src; int transpose; } st_tensor_t;

int64_t export_numel(const export_model_t *em) {
  return em->gpt ? gpt_count_params(em->g)
                 : model_count_params(em->input, em->hidden, em->classes, em->layers);
}

/* Elements of a tensor of the table (d1 0: a vector of d0). */
static int64_t numel_of(const st_tensor_t *t) { return t->d0 * (t->d1 ? t->d1 : 1); }

/* Append tensor (name, d0, d1) starting at *at in w; *at moves past it. */
static void add(st_tensor_t *t, int *n, int64_t *at, const char *name, int64_t d0, int64_t d1,
                int transpose) {
  st_tensor_t *x = &t[(*n)++];
  snprintf(x->name, sizeof x->name, "%s", name);
  x->d0 = d0, x->d1 = d1, x->src = *at, x->transpose = transpose;
  *at += numel_of(x);
}

/* The tensors in file order (= our order). Returns their count; t has room for 12·L + 8 (GPT)
 * or 2·(L+1) (MLP). */
static int tensors(const export_model_t *em, st_tensor_t *t) {
  int n = 0;
  int64_t at = 0;
  char nm[64];
  if (!em->gpt) { /* the MLP: L+1 linears D -> H -> ... -> C, each W (out, in) | b (out) */
    for (int u = 0; u <= em->layers; u++) {
      int in = u == 0 ? em->input : em->hidden, out = u == em->layers ? em->classes : em->hidden;
      snprintf(nm, sizeof nm, "fc.%d.weight", u), add(t, &n, &at, nm, out, in, 0);
      snprintf(nm, sizeof nm, "fc.%d.bias", u), add(t, &n, &at, nm, out, 0, 0);
    }
    return n;
  }
  int64_t C = em->g.n_embd, V = em->g.vocab, S = em->g.seq_len;
  add(t, &n, &at, "wte.weight", V, C, 0);
  add(t, &n, &at, "wpe.weight", S, C, 0);
  /* a block (gpt.h): vectors (d1 0), and the four Conv1D matrices stored (in, out) */
  struct { const char *part; int64_t d0, d1;
  } b[] = {{"ln_1.weight", C, 0},
           {"ln_1.bias", C, 0},
           {"attn.c_attn.weight", C, 3 * C},
           {"attn.c_attn.bias", 3 * C, 0},
           {"attn.c_proj.weight", C, C},
           {"attn.c_proj.bias", C, 0},
           {"ln_2.weight", C, 0},
           {"ln_2.bias", C, 0},
           {"mlp.c_fc.weight", C, 4 * C},
           {"mlp.c_fc.bias", 4 * C, 0},
           {"mlp.c_proj.weight", 4 * C, C},
           {"mlp.c_proj.bias", C, 0}};
  for (int l = 0; l < em->g.n_layer; l++)
    for (int k = 0; k < 12; k++) {
      snprintf(nm, sizeof nm, "h.%d.%s", l, b[k].part);
      add(t, &n, &at, nm, b[k].d0, b[k].d1, b[k].d1 != 0);
    }
  add(t, &n, &at, "ln_f.weight", C, 0, 0);
  add(t, &n, &at, "ln_f.bias", C, 0, 0);
  add(t, &n, &at, "lm_head.weight", V, C, 0);
  return n;
}

void export_safetensors(const char *what, const char *path, const export_model_t *em, const float *w,
                        const char *const *meta) {
  int cap = em->gpt ? 12 * em->g.n_layer + 8 : 2 * (em->layers + 1);
  st_tensor_t *t = xmalloc((size_t)cap * sizeof *t, "safetensors table");
  int n = tensors(em, t);
  /* the header: JSON, then spaces to a multiple of 8 */
  size_t hcap = 256 + (size_t)n * 160, len = 0;
  for (int k = 0; meta && meta[k]; k++) hcap += strlen(meta[k]) + 8;
  char *h = xmalloc(hcap + 8, "safetensors header");
#define EMIT(...) len += (size_t)snprintf(h + len, hcap - len, __VA_ARGS__)
  EMIT("{\"__metadata__\":{\"format\":\"pt\"");
  for (int k = 0; meta && meta[k] && meta[k + 1]; k += 2) EMIT(",\"%s\":\"%s\"", meta[k], meta[k + 1]);
  EMIT("}");
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    int64_t numel = numel_of(&t[k]);
    if (t[k].d1)
      EMIT(",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%lld,%lld]}", t[k].name,
           (long long)t[k].d0, (long long)t[k].d1, (long long)off, (long long)(off + 4 * numel));
    else
      EMIT(",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%lld,%lld]}", t[k].name,
           (long long)t[k].d0, (long long)off, (long long)(off + 4 * numel));
    off += 4 * numel;
  }
  EMIT("}");
#undef EMIT
  if (len >= hcap) die("error: %s %s: safetensors header longer than %zu bytes", what, path, hcap);
  while (len % 8) h[len++] = ' ';
  if (off != 4 * export_numel(em)) die("error: %s %s: the tensor table covers %lld bytes of %lld", what, path,
                                       (long long)off, (long long)(4 * export_numel(em)));
  char tmp[1200];
  FILE *f = outfile_open(what, path, tmp, sizeof tmp);
  unsigned char n8[8];
  for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((uint64_t)len >> (8 * i)); /* little-endian u64 */
  fwrite(n8, 1, 8, f);
  fwrite(h, 1, len, f);
  int64_t most = 0;
  for (int k = 0; k < n; k++)
    if (t[k].transpose && t[k].d0 * t[k].d1 > most) most = t[k].d0 * t[k].d1;
  float *tr = xmalloc((size_t)most * sizeof(float) + 1, "safetensors transpose");
  for (int k = 0; k < n; k++) {
    int64_t numel = numel_of(&t[k]);
    const float *src = w + t[k].src;
    if (t[k].transpose) { /* ours (out = d1, in = d0) row-major -> stored (in, out) */
      for (int64_t i = 0; i < t[k].d0; i++)
        for (int64_t o = 0; o < t[k].d1; o++) tr[i * t[k].d1 + o] = src[o * t[k].d0 + i];
      src = tr;
    }
    fwrite(src, sizeof(float), (size_t)numel, f); /* little-endian hosts only (x86, ARM) */
  }
  free(tr);
  free(h);
  free(t);
  outfile_close(f, what, path, tmp);
}
