/* zl_ckpt — look into and convert zerolab checkpoints (notes/reliability.md; common/train/ckpt.h).
 *   zl_ckpt inspect DIR            print the manifest and verify every file (exit 1 if bad)
 *   zl_ckpt consolidate DIR OUT    the full fp32 state, whatever stage and world size saved it
 *                                  (the zero_to_fp32 of this project), into directory OUT:
 *       OUT/weights.f32     Ψ float32, little-endian, unit after unit (W row-major, then b),
 *                           no padding: the same format as --save-params
 *       OUT/adam_m.f32      Ψ float32, AdamW first moment      (or OUT/sgd_momentum.f32)
 *       OUT/adam_v.f32      Ψ float32, AdamW second moment     (AdamW only)
 *       OUT/meta.txt        shape, precision, optimizer, step, optimizer t, the files' names
 *   zl_ckpt convert DIR OUT [--step N]  the GRID-FREE checkpoint (DeepSpeed's universal checkpoint):
 *                                  OUT/step-NNNNNN with one file of full-model units (weights and
 *                                  optimizer states, keyed by full-model unit and offset) that any
 *                                  grid resumes: --resume OUT with any T, P, D, ZeRO stage,
 *                                  offload. DIR: a --ckpt directory of any run, --tp T ones
 *                                  included (their tp-R-of-T parts are put back together through
 *                                  solutions/tp.h's tp_map_unit)
 *   zl_ckpt export DIR OUT [--format safetensors|raw]
 *                                  the fp32 weights alone for other tools: safetensors (default)
 *                                  with GPT-2's tensor names and shapes (common/model/export.h), which
 *                                  common/scripts/gpt_load.py loads into PyTorch; raw: the
 *                                  --save-params format (Ψ float32)
 * DIR is a --ckpt directory (its latest checkpoint) or one step directory. A plain program:
 * no mpirun needed. Bad usage: one error line, exit 2. */
#include <errno.h>    // errno
#include <stdio.h>    // printf, fprintf, fopen
#include <stdlib.h>   // free, atoi
#include <string.h>   // strcmp, strerror
#include <sys/stat.h> // mkdir
// ckpt_tp_layout, ckpt_write_grid_free, ckpt_resolve, ckpt_manifest_read, ckpt_verify_files, ckpt_read_range
#include "ckpt.h"
#include "check.h"    // die, xmalloc
#include "export.h"   // export_safetensors, export_model_t
#include "outfile.h"  // outfile_write
#include "gpt.h"      // gpt_init (the full model of a manifest)
#include "model.h"    // model_init, model_free
// tp_split_model, tp_map_unit, tp_unit_local_numel (a --tp T save's parts -> full units)
#include "tp.h"
#include "comm.h"     // comm_shape_only (the split sized without communicating)

static int usage_error(const char *what) {
  fprintf(stderr,
          "error: %s: usage: zl_ckpt inspect DIR | zl_ckpt consolidate DIR OUT | zl_ckpt convert DIR OUT "
          "[--step N] | zl_ckpt export DIR OUT [--format safetensors|raw] (see --help)\n",
          what);
  return 2;
}

static int open_checkpoint(const char *where, ckpt_manifest_t *m, int verify) {
  char stepdir[CKPT_PATH_MAX], why[1024];
  if (ckpt_resolve(where, stepdir, sizeof stepdir, why, sizeof why) ||
      ckpt_manifest_read(stepdir, m, why, sizeof why) || (verify && ckpt_verify_files(m, why, sizeof why))) {
    fprintf(stderr, "error: %s: %s\n", where, why);
    return 1;
  }
  return 0;
}

/* Write Ψ floats of section sec, unit after unit, unpadded, to path (temp + rename). */
static void write_section(ckpt_manifest_t *m, int sec, const char *path) {
  char tmp[CKPT_PATH_MAX + 128];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) die("error: cannot create %s: %s", tmp, strerror(errno));
  ckpt_reader_t r = {.m = m};
  int64_t maxn = 0;
  for (int u = 0; u < m->n_units; u++)
    if (m->units[u].numel > maxn) maxn = m->units[u].numel;
  float *buf = xmalloc((size_t)maxn * sizeof(float), "consolidate buffer");
  for (int u = 0; u < m->n_units; u++) {
    ckpt_read_range(&r, sec, u, 0, m->units[u].numel, buf);
    if (fwrite(buf, sizeof(float), (size_t)m->units[u].numel, f) != (size_t)m->units[u].numel)
      die("error: writing %s failed: %s", tmp, strerror(errno));
  }
  free(buf);
  ckpt_reader_close(&r);
  if (fclose(f) != 0 || rename(tmp, path) != 0) die("error: writing %s failed: %s", path, strerror(errno));
}

/* zl_ckpt convert: DIR (any grid; its step `step`, or its latest when -1) -> OUT, grid-free
 * (ckpt_write_grid_free). */
static int convert(const char *dir, const char *out, int step) {
  int T = ckpt_tp_layout(dir) > 1 ? ckpt_tp_layout(dir) : 1;
  ckpt_manifest_t *m = calloc((size_t)T, sizeof *m);
  char part[CKPT_PATH_MAX];
  for (int q = 0; q < T; q++) { /* every part: verified, and the same run and step as part 0 */
    int k = T > 1 ? snprintf(part, sizeof part, "%s/tp-%d-of-%d", dir, q, T)
                  : snprintf(part, sizeof part, "%s", dir);
    if (step > 0) snprintf(part + k, sizeof part - (size_t)k, "/step-%06d", step); /* else the latest */
    if (open_checkpoint(part, &m[q], 1)) return 1;
    if (m[q].tp != T || m[q].tp_rank != (T > 1 ? q : 0)) {
      fprintf(stderr, "error: %s: TP rank %d's part of a --tp %d save, expected %s\n", m[q].dir, m[q].tp_rank,
              m[q].tp,
              T > 1 ? "this directory's part"
                    : "a whole model (convert the --ckpt directory that holds tp-R-of-T/)");
      return 1;
    }
    if (q > 0 &&
        (m[q].step != m[0].step || m[q].n_units != m[0].n_units || m[q].n_sections != m[0].n_sections)) {
      fprintf(stderr,
              "error: %s: step %d, %d units, %d sections; %s has step %d, %d units, %d sections (parts of "
              "different saves?)\n",
              m[q].dir, m[q].step, m[q].n_units, m[q].n_sections, m[0].dir, m[0].step, m[0].n_units,
              m[0].n_sections);
      return 1;
    }
  }
  if (m[0].moe > 0) { /* chapter 12: its units hold experts (and an EP rank only some of them) */
    fprintf(stderr,
            "error: %s: a Mixture-of-Experts checkpoint (--moe %d --moe-every %d): convert knows the dense "
            "models' splits only (not built); ch12_experts resumes it on its EP grid with any D, and 1 "
            "rank's on any\n",
            m[0].dir, m[0].moe, m[0].moe_every);
    return 1;
  }
  model_t full, split = {0}; /* split: the TP split of the full model (any q's map: tp.h) */
  comm_t *shape = NULL;
  if (!strcmp(m[0].model, "gpt")) gpt_init(&full, m[0].gpt);
  else model_init(&full, m[0].input, m[0].hidden, m[0].classes, m[0].layers);
  if (T > 1) {
    if (!strcmp(m[0].model, "gpt")) gpt_init(&split, m[0].gpt);
    else model_init(&split, m[0].input, m[0].hidden, m[0].classes, m[0].layers);
    shape = comm_shape_only(T, 0, DEV_CPU);
    tp_split_model(&split, shape);
  }
  if (full.n_units != m[0].n_units) {
    fprintf(stderr, "error: %s: %d units, its recorded %s shape has %d (a pipeline stage's part?)\n",
            m[0].dir, m[0].n_units, m[0].model, full.n_units);
    return 1;
  }
  ckpt_unit_t *units = calloc((size_t)full.n_units, sizeof *units);
  float *sec[CKPT_MAX_SECTIONS] = {0};
  int64_t most = 0;
  for (int u = 0; u < full.n_units; u++) {
    units[u] = (ckpt_unit_t){.in = full.units[u].in, .out = full.units[u].out, .numel = full.units[u].numel};
    for (int q = 0; q < T; q++) {
      int64_t want = T > 1 ? tp_unit_local_numel(&split, u, q) : full.units[u].numel;
      if (m[q].units[u].numel != want) {
        fprintf(stderr,
                "error: %s: unit %d holds %lld values, the %s split over --tp %d gives rank %d %lld\n",
                m[q].dir, u, (long long)m[q].units[u].numel, m[0].model, T, q, (long long)want);
        return 1;
      }
      if (want > most) most = want;
    }
  }
  float *local = xmalloc((size_t)most * sizeof(float), "convert buffer");
  for (int s = 0; s < m[0].n_sections; s++) {
    sec[s] = xmalloc((size_t)full.numel * sizeof(float), "convert section");
    for (int u = 0, at = 0; u < full.n_units; at += (int)full.units[u].numel, u++)
      for (int q = T - 1; q >= 0; q--) { /* TP rank 0 last: its replicated values are the ones kept */
        ckpt_reader_t r = {.m = &m[q]};
        ckpt_read_range(&r, s, u, 0, m[q].units[u].numel, T > 1 ? local : sec[s] + at);
        ckpt_reader_close(&r);
        if (T > 1) tp_map_unit(&split, u, q, sec[s] + at, local, 0);
      }
  }
  double *losses = ckpt_read_losses(&m[0]);
  ckpt_write_grid_free(out, &m[0], full.n_units, units, sec, losses);
  printf("converted %s (%s, --tp %d, %d shard%s per part, step %d) into %s/step-%06d: grid-free, %lld params "
         "x %d "
         "arrays; resume it on any grid with --resume %s\n",
         dir, m[0].strategy, T, m[0].shards, m[0].shards > 1 ? "s" : "", m[0].step, out, m[0].step,
         (long long)full.numel, m[0].n_sections, out);
  for (int s = 0; s < m[0].n_sections; s++) free(sec[s]);
  for (int q = 0; q < T; q++) ckpt_manifest_free(&m[q]);
  free(m);
  free(units);
  free(local);
  free(losses);
  model_free(&full);
  if (T > 1) model_free(&split);
  free(shape);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf(
        "usage: zl_ckpt inspect DIR | zl_ckpt consolidate DIR OUT | zl_ckpt convert DIR OUT [--step N] | "
        "zl_ckpt export DIR OUT [--format safetensors|raw]\n"
        "  inspect      print the checkpoint's manifest and verify every file's size and checksum\n"
        "  consolidate  write the full fp32 weights and optimizer state into directory OUT:\n"
        "               weights.f32, adam_m.f32 + adam_v.f32 (or sgd_momentum.f32), meta.txt;\n"
        "               Psi float32 each, unit after unit, unpadded (the --save-params format)\n"
        "  convert      a checkpoint any grid resumes (grid-free: full-model units) into --ckpt directory "
        "OUT;\n"
        "               DIR may hold a --tp T save (tp-R-of-T/): its parts are put back together; --step N:\n"
        "               that saved step instead of the latest\n"
        "  export       the fp32 weights into file OUT: safetensors (default) with GPT-2's names and shapes\n"
        "               (wte, wpe, h.N.ln_1, h.N.attn.c_attn, ..., ln_f, lm_head; the MLP: "
        "fc.U.weight/bias),\n"
        "               or raw: Psi float32 as --save-params writes them\n"
        "DIR: a --ckpt directory (its latest checkpoint) or one of its step-NNNNNN directories.\n");
    return 0;
  }
  if (argc < 2) return usage_error("missing command");
  const char *cmd = argv[1];
  if (!strcmp(cmd, "inspect")) {
    if (argc != 3) return usage_error(argc < 3 ? "inspect: missing DIR" : "inspect: too many arguments");
    ckpt_manifest_t m;
    char stepdir[CKPT_PATH_MAX], why[1024];
    if (ckpt_resolve(argv[2], stepdir, sizeof stepdir, why, sizeof why) ||
        ckpt_manifest_read(stepdir, &m, why, sizeof why)) {
      fprintf(stderr, "error: %s: %s\n", argv[2], why);
      return 1;
    }
    ckpt_manifest_print(&m);
    int bad = ckpt_verify_files(&m, why, sizeof why);
    if (bad) fprintf(stderr, "error: %s\n", why);
    else printf("verified: %d files, sizes and checksums match the manifest\n", m.n_files);
    ckpt_manifest_free(&m);
    return bad;
  }
  if (!strcmp(cmd, "consolidate")) {
    if (argc != 4)
      return usage_error(argc < 4 ? "consolidate: missing DIR or OUT" : "consolidate: too many arguments");
    ckpt_manifest_t m;
    if (open_checkpoint(argv[2], &m, 1)) return 1;
    const char *out = argv[3];
    if (mkdir(out, 0755) != 0 && errno != EEXIST) die("error: cannot create %s: %s", out, strerror(errno));
    int sgd = !strcmp(m.optimizer, "sgd");
    const char *names[CKPT_MAX_SECTIONS] = {"weights.f32", sgd ? "sgd_momentum.f32" : "adam_m.f32",
                                            "adam_v.f32"};
    char path[CKPT_PATH_MAX + 64];
    for (int s = 0; s < m.n_sections; s++) {
      snprintf(path, sizeof path, "%s/%s", out, names[s]);
      write_section(&m, s, path);
    }
    snprintf(path, sizeof path, "%s/meta.txt", out);
    FILE *f = fopen(path, "w");
    if (!f) die("error: cannot create %s: %s", path, strerror(errno));
    fprintf(f, "source %s\nstrategy %s\nworld %d\ninput %d\nhidden %d\nclasses %d\nlayers %d\npsi %lld\n",
            m.dir, m.strategy, m.world, m.input, m.hidden, m.classes, m.layers, (long long)m.psi);
    fprintf(f,
            "precision %s\noptimizer %s\nstep %d\nopt_t %d\nformat float32 little-endian, unit after unit "
            "(W out x in row-major, then b), no padding\nfiles",
            m.precision, m.optimizer, m.step, m.opt_t);
    for (int s = 0; s < m.n_sections; s++) fprintf(f, " %s", names[s]);
    fprintf(f, "\n");
    if (fclose(f) != 0) die("error: writing %s failed", path);
    printf("consolidated %s (%s, %d shard%s) into %s: %lld params x %d arrays\n", m.dir, m.strategy, m.shards,
           m.shards > 1 ? "s" : "", out, (long long)m.psi, m.n_sections);
    ckpt_manifest_free(&m);
    return 0;
  }
  if (!strcmp(cmd, "convert")) {
    int step = -1;
    if (argc == 6 && !strcmp(argv[4], "--step")) step = atoi(argv[5]);
    else if (argc != 4)
      return usage_error(argc < 4 ? "convert: missing DIR or OUT" : "convert: expected DIR OUT [--step N]");
    if (argc == 6 && step < 1) {
      fprintf(stderr, "error: --step %s: must be a saved step >= 1 (zl_ckpt inspect DIR lists the latest)\n",
              argv[5]);
      return 2;
    }
    return convert(argv[2], argv[3], step);
  }
  if (!strcmp(cmd, "export")) {
    const char *fmt = "safetensors";
    if (argc == 6 && !strcmp(argv[4], "--format")) fmt = argv[5];
    else if (argc != 4)
      return usage_error(argc < 4 ? "export: missing DIR or OUT" : "export: expected DIR OUT [--format F]");
    if (strcmp(fmt, "safetensors") && strcmp(fmt, "raw")) {
      fprintf(stderr, "error: --format %s: must be safetensors or raw\n", fmt);
      return 2;
    }
    ckpt_manifest_t m;
    if (open_checkpoint(argv[2], &m, 1)) return 1;
    if (m.tp > 1) {
      fprintf(stderr,
              "error: %s: TP rank %d's part of a tensor-parallel layout (--tp %d): its units are slices, not "
              "the model's tensors; export a checkpoint saved without --tp\n",
              m.dir, m.tp_rank, m.tp);
      ckpt_manifest_free(&m);
      return 1;
    }
    export_model_t em = {.gpt = !strcmp(m.model, "gpt"), .g = m.gpt, .input = m.input, .hidden = m.hidden,
                         .classes = m.classes, .layers = m.layers};
    if (export_numel(&em) != m.psi) {
      fprintf(stderr,
              "error: %s: psi %lld, but its recorded %s shape has %lld parameters (not a whole model: a "
              "pipeline stage's part?)\n",
              m.dir, (long long)m.psi, m.model, (long long)export_numel(&em));
      ckpt_manifest_free(&m);
      return 1;
    }
    float *w = xmalloc((size_t)m.psi * sizeof(float) + 1, "export weights");
    ckpt_reader_t r = {.m = &m};
    for (int u = 0, at = 0; u < m.n_units; at += (int)m.units[u].numel, u++)
      ckpt_read_range(&r, 0, u, 0, m.units[u].numel, w + at);
    ckpt_reader_close(&r);
    if (!strcmp(fmt, "raw")) {
      outfile_write("export", argv[3], (const char *)w, m.psi * (int64_t)sizeof(float));
    } else {
      char step[16], shape[96];
      snprintf(step, sizeof step, "%d", m.step);
      if (em.gpt) snprintf(shape, sizeof shape, "%d %d %d %d %d", m.gpt.n_layer, m.gpt.n_head, m.gpt.n_embd,
                           m.gpt.seq_len, m.gpt.vocab);
      else snprintf(shape, sizeof shape, "%d %d %d %d", m.input, m.hidden, m.classes, m.layers);
      const char *meta[] = {"zerolab_model", m.model, "zerolab_shape", shape, "zerolab_step", step,
                            "zerolab_strategy", m.strategy, NULL};
      export_safetensors("export", argv[3], &em, w, meta);
    }
    printf("exported %s (%s %s, step %d) to %s: %lld fp32 weights, %s\n", m.dir, m.model, m.strategy, m.step,
           argv[3], (long long)m.psi, fmt);
    free(w);
    ckpt_manifest_free(&m);
    return 0;
  }
  return usage_error(cmd);
}
