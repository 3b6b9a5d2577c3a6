/* scn_gpt_dump — the inputs of the PyTorch reference (common/scripts/gpt_reference.py): a GPT's
 * step-0 weights exactly as the trainer initializes them, and one training batch of the text,
 * so the script never re-implements our RNG or our data windows.
 *
 *   scn_gpt_dump PRESET SEED BATCH TEXT OUTDIR [WEIGHTS]
 *
 * writes OUTDIR/params.bin   Ψ float32 (little endian), the unpadded flat buffer unit by unit
 *                            (common/model/gpt.h for the order inside each unit): the init of SEED, or
 *                            WEIGHTS (a --save-params file of a trained run) checked for size
 *        OUTDIR/batch.bin    int32 tokens (BATCH, T), then int32 targets (BATCH, T): global
 *                            samples [0, BATCH) of the train split (step 0's batch)
 * and prints one line: "shape n_layer n_head n_embd seq_len vocab psi batch". No MPI. */
#include <stdio.h>  // fopen, fread, fwrite, printf
#include <stdlib.h> // atoi, strtoull
#include "check.h"  // die, xmalloc
#include "data.h"   // data_init_text, data_batch, data_free
#include "gpt.h"    // gpt_preset, gpt_init
#include "model.h"  // model_init_unit, model_free

static void write_all(const char *dir, const char *name, const void *p, size_t nbytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, nbytes, f) != nbytes || fclose(f) != 0) die("scn_gpt_dump: cannot write %s", path);
}

int main(int argc, char **argv) {
  if (argc != 6 && argc != 7) {
    fprintf(stderr, "usage: scn_gpt_dump PRESET SEED BATCH TEXT OUTDIR [WEIGHTS]\n");
    return 2;
  }
  gpt_shape_t s;
  if (gpt_preset(argv[1], &s) != 0) die("scn_gpt_dump: unknown preset %s", argv[1]);
  uint64_t seed = strtoull(argv[2], NULL, 10);
  int B = atoi(argv[3]);
  if (B < 1) die("scn_gpt_dump: batch %s", argv[3]);
  model_t m;
  gpt_init(&m, s); /* unpadded: off = Σ numel, padded = numel */
  float *params = xmalloc((size_t)m.numel * sizeof(float), "params");
  for (int u = 0; u < m.n_units; u++) model_init_unit(&m, seed, u, params + m.units[u].off);
  if (argc == 7) { /* trained weights instead: attention and LayerNorm far from their init */
    FILE *f = fopen(argv[6], "rb");
    if (!f || fread(params, sizeof(float), (size_t)m.numel, f) != (size_t)m.numel || fgetc(f) != EOF)
      die("scn_gpt_dump: %s is not %lld float32 weights (--save-params of this shape)", argv[6],
          (long long)m.numel);
    fclose(f);
  }
  write_all(argv[5], "params.bin", params, (size_t)m.numel * sizeof(float));
  data_t d;
  data_init_text(&d, argv[4], s.seq_len, seed);
  int *xy = xmalloc(2 * (size_t)B * s.seq_len * sizeof(int), "batch");
  data_batch(&d, 0, B, xy, xy + (size_t)B * s.seq_len);
  write_all(argv[5], "batch.bin", xy, 2 * (size_t)B * s.seq_len * sizeof(int));
  printf("shape %d %d %d %d %d %lld %d\n", s.n_layer, s.n_head, s.n_embd, s.seq_len, s.vocab,
         (long long)m.numel, B);
  data_free(&d);
  free(params), free(xy);
  model_free(&m);
  return 0;
}
