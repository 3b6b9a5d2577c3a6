/* test_export.c — weights a PyTorch user can load (suite common_export; common/model/export.h,
 * common/scripts/gpt_load.py, notes/gpt.md "Loading the weights in PyTorch"):
 *   --save-params PATH writes PATH.safetensors beside it, and `zl_ckpt export` writes the same
 *   tensors from a checkpoint; the header has GPT-2's names, shapes and dtypes, data offsets
 *   back to back, the Conv1D matrices transposed ((in, out)); every value equals the raw
 *   --save-params float bit for bit (gpt_load.py --check, Python's standard library alone);
 *   the loader's greedy sample (plain-Python engine: no torch, no numpy) is the text
 *   `--sample N --temperature 0` printed. */
#include "zl_test.h" // zl_run, zl_tmpdir, zl_read_file, zl_read_floats

#define TEXT "/usr/share/games/fortunes/cookie"
#define GPT "--model gpt --gpt tiny --batch 16 --lr 0.01 --seed 5 --device cpu --data " TEXT
#define NSAMPLE 48

/* The text after the "sample (...):" line of a run's output (NSAMPLE bytes, may hold newlines). */
static void sample_of(const char *out, char *dst) {
  const char *s = strstr(out, "sample (");
  cr_assert(s, "no sample line in:\n%s", out);
  s = strchr(s, '\n');
  cr_assert(s, "sample line without text:\n%s", out);
  memcpy(dst, s + 1, NSAMPLE);
  dst[NSAMPLE] = 0;
}

Test(common_export, safetensors_gpt2_names_values_and_greedy_sample) {
  char dir[256], ck[300], raw[300], st[320], ex[320], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "export");
  snprintf(ck, sizeof ck, "%s/ck", dir);
  snprintf(raw, sizeof raw, "%s/p.bin", dir);
  snprintf(st, sizeof st, "%s/p.bin.safetensors", dir);
  snprintf(ex, sizeof ex, "%s/export.safetensors", dir);
  /* enough steps that the greedy text is not one repeated byte */
  int rc = zl_run(2, 120, &out,
                  ZL_BIN "/ch05_zero3 " GPT " --steps 300 --ckpt %s --save-params %s --sample %d "
                         "--temperature 0 --quiet",
                  ck, raw, NSAMPLE);
  cr_assert_eq(rc, 0, "ch05_zero3 --model gpt: exit %d; output:\n%s", rc, out);
  char want[NSAMPLE + 1];
  sample_of(out, want);
  free(out);

  /* the header, read here too: length, GPT-2's names and (in, out) Conv1D shapes, F32 */
  size_t n = 0;
  char *b = zl_read_file(st, &n);
  cr_assert(b && n > 8, "%s missing", st);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | (unsigned char)b[i];
  cr_assert(hl % 8 == 0 && 8 + hl < n, "%s: header length %llu", st, (unsigned long long)hl);
  const char *need[] = {"\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[256,32],\"data_offsets\":[0,32768]}",
                        "\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[16,32]",
                        "\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[32,96]",
                        "\"h.1.mlp.c_proj.weight\":{\"dtype\":\"F32\",\"shape\":[128,32]",
                        "\"h.1.mlp.c_fc.bias\":{\"dtype\":\"F32\",\"shape\":[128]",
                        "\"ln_f.bias\"",
                        "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[256,32]",
                        "\"zerolab_shape\":\"2 2 32 16 256\""};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    cr_assert(memmem(b, 8 + hl, need[i], strlen(need[i])), "%s: the header lacks %s", st, need[i]);
  /* h.0.attn.c_attn.weight[i=1][o=0] (stored (in, out)) = our qkv W[o=0][i=1] (out, in) */
  int64_t psi = 0;
  float *w = zl_read_floats(raw, &psi);
  cr_assert(w && (int64_t)(n - 8 - hl) == 4 * psi, "%s: %zu data bytes, --save-params has %lld floats", st,
            n - 8 - hl, (long long)psi);
  const char *h = memmem(b, 8 + hl, "\"h.0.attn.c_attn.weight\"", 24);
  long long beg = 0;
  cr_assert(h && sscanf(strstr(h, "data_offsets"), "data_offsets\":[%lld", &beg) == 1);
  float got;
  memcpy(&got, b + 8 + hl + beg + 4 * 96, 4); /* row i = 1 of (32, 96) */
  int64_t qkvw = 256 * 32 + 16 * 32 + 2 * 32;   /* wte, wpe, ln_1 w and b */
  cr_assert(memcmp(&got, &w[qkvw + 1], 4) == 0,
            "c_attn.weight[1][0] = %g, our qkv W[0][1] = %g (not transposed?)", got, w[qkvw + 1]);
  free(w);
  free(b);

  /* zl_ckpt export from the ZeRO-3 checkpoint: the same tensors */
  rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt export %s %s --format safetensors", ck, ex);
  cr_assert(rc == 0 && strstr(out, "exported"), "zl_ckpt export: exit %d; output:\n%s", rc, out);
  free(out);
  const char *files[] = {st, ex};
  for (int i = 0; i < 2; i++) {
    rc = zl_run(0, 60, &out, "python3 common/scripts/gpt_load.py %s --check %s --engine python --sample %d",
                files[i], raw, NSAMPLE);
    cr_assert(rc == 0 && strstr(out, "check: 29 tensors =="), "gpt_load.py %s --check: exit %d; output:\n%s",
              files[i], rc, out);
    char got_text[NSAMPLE + 1];
    sample_of(out, got_text);
    cr_assert_str_eq(got_text, want, "%s: the loader's greedy sample differs from --sample --temperature 0",
                     files[i]);
    free(out);
  }
  cr_log_info("export: safetensors == --save-params bit for bit; greedy sample '%s' in C and in Python",
              want);
}

/* A TP rank's part is not a model: zl_ckpt export refuses it naming the layout; a bad --format
 * is one line, exit 2. */
Test(common_export, export_refuses_tp_parts_and_bad_format) {
  char dir[256], ck[300], part[320], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "export_tp");
  snprintf(ck, sizeof ck, "%s/ck", dir);
  int rc = zl_run(2, 60, &out, ZL_BIN "/ch06_tp --tp 2 " GPT " --steps 1 --ckpt %s --quiet", ck);
  cr_assert_eq(rc, 0, "ch06_tp: exit %d; output:\n%s", rc, out);
  free(out);
  snprintf(part, sizeof part, "%s/tp-1-of-2", ck);
  rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt export %s %s/x.safetensors", part, dir);
  cr_assert(rc == 1 && strstr(out, "tensor-parallel layout (--tp 2)"),
            "export of a TP part: exit %d; output:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt export %s %s/x --format onnx", part, dir);
  cr_assert(rc == 2 && strstr(out, "--format onnx: must be safetensors or raw"),
            "bad --format: exit %d; output:\n%s", rc, out);
  free(out);
}
