/* zl_ckpt — look into and convert zerolab checkpoints (notes/reliability.md; common/train/ckpt.h).
 *   zl_ckpt inspect DIR            print the manifest and verify every file (exit 1 if bad); of
 *                                  a --tp/--ep save (DIR/tp-R-of-T/), every part's
 *   zl_ckpt consolidate DIR OUT    the full fp32 state, whatever stage and world size saved it
 *                                  (the zero_to_fp32 of this project), into directory OUT; a
 *                                  dense --tp save's parts put back together, a part alone or a
 *                                  Mixture-of-Experts save over --ep refused:
 *       OUT/weights.f32     Ψ float32, little-endian, unit after unit (W row-major, then b),
 *                           no padding: the same format as --save-params
 *       OUT/adam_m.f32      Ψ float32, AdamW first moment      (or OUT/sgd_momentum.f32)
 *       OUT/adam_v.f32      Ψ float32, AdamW second moment     (AdamW only)
 *       OUT/meta.txt        model kind and shape (and experts), precision, optimizer, step,
 *                           optimizer t, the files' names
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
 *                                  --save-params format (Ψ float32); OUT a new file; a part, or
 *                                  a Mixture-of-Experts save in safetensors, refused
 * DIR is a --ckpt directory (its latest checkpoint) or one step directory. A plain program:
 * no mpirun needed. Bad usage: one error line, exit 2. */
#include <errno.h>    // errno
#include <stdio.h>    // printf, fprintf, fopen
#include <stdlib.h>   // free, atoi
#include <string.h>   // strcmp, strerror
#include <sys/stat.h> // mkdir, stat (export: OUT exists)
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

/* A checkpoint read whole into memory: the full model's units and, per section, its Ψ values unit
 * after unit (unpadded), from one checkpoint or from the tp-R-of-T parts of a --tp T save put back
 * together (tp.h's tp_map_unit). */
typedef struct whole {
  int T;                          /* parts (1: a checkpoint of whole units) */
  ckpt_manifest_t *m;             /* [T] every part's manifest, verified */
  model_t full;                   /* the full model of m[0]'s shape */
  ckpt_unit_t *units;             /* [full.n_units] */
  float *sec[CKPT_MAX_SECTIONS];  /* [n_sections][full.numel] */
} whole_t;

static void whole_free(whole_t *w) {
  for (int s = 0; s < CKPT_MAX_SECTIONS; s++) free(w->sec[s]);
  for (int q = 0; q < w->T && w->m; q++) ckpt_manifest_free(&w->m[q]);
  free(w->m);
  free(w->units);
  if (w->full.units) model_free(&w->full);
}

/* The refusal of a chapter 12 checkpoint where the full model is needed: its MoE units hold the
 * experts in chapter 12's own layout (and an EP part only E/P_E of them). */
static int refuse_moe(const ckpt_manifest_t *m, const char *cmd) {
  fprintf(stderr,
          "error: %s: a Mixture-of-Experts checkpoint (--moe %d --moe-every %d%s): %s knows the dense "
          "models' units only (not built); ch12_experts resumes it on its EP grid with any D, and 1 rank's "
          "on any%s\n",
          m->dir, m->moe, m->moe_every, m->tp > 1 ? ", saved over --ep" : "", cmd,
          !strcmp(cmd, "consolidate") && m->tp == 1 ? "" : "; zl_ckpt inspect reads it");
  return 1;
}

/* dir (a --ckpt directory, its step `step` or its latest when -1; with tp-R-of-T parts, all of them)
 * read whole into w. 0, or 1 after one error line naming the part and why. cmd: the command, for the
 * messages. */
static int read_whole(const char *dir, int step, whole_t *w, const char *cmd) {
  *w = (whole_t){.T = ckpt_tp_layout(dir) > 1 ? ckpt_tp_layout(dir) : 1};
  int T = w->T;
  w->m = calloc((size_t)T, sizeof *w->m);
  ckpt_manifest_t *m = w->m;
  char part[CKPT_PATH_MAX];
  for (int q = 0; q < T; q++) { /* every part: verified, and the same run and step as part 0 */
    int k = T > 1 ? snprintf(part, sizeof part, "%s/tp-%d-of-%d", dir, q, T)
                  : snprintf(part, sizeof part, "%s", dir);
    if (step > 0) snprintf(part + k, sizeof part - (size_t)k, "/step-%06d", step); /* else the latest */
    if (open_checkpoint(part, &m[q], 1)) return 1;
    if (m[q].moe > 0) return refuse_moe(&m[q], cmd);
    if (m[q].tp != T || m[q].tp_rank != (T > 1 ? q : 0)) {
      fprintf(stderr, "error: %s: TP rank %d's part of a --tp %d save, expected %s\n", m[q].dir, m[q].tp_rank,
              m[q].tp,
              T > 1 ? "this directory's part"
                    : "a whole model (give the --ckpt directory that holds tp-R-of-T/)");
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
  model_t split = {0}; /* split: the TP split of the full model (any q's map: tp.h) */
  comm_t *shape = NULL;
  if (!strcmp(m[0].model, "gpt")) gpt_init(&w->full, m[0].gpt);
  else model_init(&w->full, m[0].input, m[0].hidden, m[0].classes, m[0].layers);
  const model_t *full = &w->full;
  if (full->n_units != m[0].n_units) {
    fprintf(stderr, "error: %s: %d units, its recorded %s shape has %d (a pipeline stage's part?)\n",
            m[0].dir, m[0].n_units, m[0].model, full->n_units);
    return 1;
  }
  if (T > 1) {
    if (!strcmp(m[0].model, "gpt")) gpt_init(&split, m[0].gpt);
    else model_init(&split, m[0].input, m[0].hidden, m[0].classes, m[0].layers);
    shape = comm_shape_only(T, 0, DEV_CPU);
    tp_split_model(&split, shape);
  }
  w->units = calloc((size_t)full->n_units, sizeof *w->units);
  int64_t most = 0;
  for (int u = 0; u < full->n_units; u++) {
    w->units[u] =
        (ckpt_unit_t){.in = full->units[u].in, .out = full->units[u].out, .numel = full->units[u].numel};
    for (int q = 0; q < T; q++) {
      int64_t want = T > 1 ? tp_unit_local_numel(&split, u, q) : full->units[u].numel;
      if (m[q].units[u].numel != want) {
        fprintf(stderr,
                "error: %s: unit %d holds %lld values, the %s split over --tp %d gives rank %d %lld\n",
                m[q].dir, u, (long long)m[q].units[u].numel, m[0].model, T, q, (long long)want);
        if (T > 1) model_free(&split);
        free(shape);
        return 1;
      }
      if (want > most) most = want;
    }
  }
  float *local = xmalloc((size_t)most * sizeof(float), "whole-model buffer");
  for (int s = 0; s < m[0].n_sections; s++) {
    w->sec[s] = xmalloc((size_t)full->numel * sizeof(float), "whole-model section");
    for (int u = 0, at = 0; u < full->n_units; at += (int)full->units[u].numel, u++)
      for (int q = T - 1; q >= 0; q--) { /* TP rank 0 last: its replicated values are the ones kept */
        ckpt_reader_t r = {.m = &m[q]};
        ckpt_read_range(&r, s, u, 0, m[q].units[u].numel, T > 1 ? local : w->sec[s] + at);
        ckpt_reader_close(&r);
        if (T > 1) tp_map_unit(&split, u, q, w->sec[s] + at, local, 0);
      }
  }
  free(local);
  if (T > 1) model_free(&split);
  free(shape);
  return 0;
}

/* zl_ckpt convert: DIR (any grid; its step `step`, or its latest when -1) -> OUT, grid-free
 * (ckpt_write_grid_free). */
static int convert(const char *dir, const char *out, int step) {
  whole_t w;
  if (read_whole(dir, step, &w, "convert")) return whole_free(&w), 1;
  const ckpt_manifest_t *m = &w.m[0];
  double *losses = ckpt_read_losses(m);
  ckpt_write_grid_free(out, m, w.full.n_units, w.units, w.sec, losses);
  printf("converted %s (%s, --tp %d, %d shard%s per part, step %d) into %s/step-%06d: grid-free, %lld params "
         "x %d arrays; resume it on any grid with --resume %s\n",
         dir, m->strategy, w.T, m->shards, m->shards > 1 ? "s" : "", m->step, out, m->step,
         (long long)w.full.numel, m->n_sections, out);
  free(losses);
  whole_free(&w);
  return 0;
}

/* OUT/meta.txt of a consolidation: where it came from, the model's kind and shape (what any reader
 * needs to cut Ψ floats into tensors), precision, optimizer, position, the files. */
static void write_meta(const char *out, const ckpt_manifest_t *m, int T, int64_t psi,
                       const char *const *names) {
  char path[CKPT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/meta.txt", out);
  FILE *f = fopen(path, "w");
  if (!f) die("error: cannot create %s: %s", path, strerror(errno));
  fprintf(f, "source %s\nstrategy %s\nworld %d\n", m->dir, m->strategy, m->world);
  if (T > 1) fprintf(f, "parts %d (--tp %d, put back together)\n", T, T);
  fprintf(f, "model %s\n", m->model);
  if (!strcmp(m->model, "gpt"))
    fprintf(f, "n_layer %d\nn_head %d\nn_embd %d\nseq_len %d\nvocab %d\n", m->gpt.n_layer, m->gpt.n_head,
            m->gpt.n_embd, m->gpt.seq_len, m->gpt.vocab);
  else fprintf(f, "input %d\nhidden %d\nclasses %d\nlayers %d\n", m->input, m->hidden, m->classes, m->layers);
  if (m->moe > 0) fprintf(f, "moe %d\nmoe_every %d\n", m->moe, m->moe_every);
  fprintf(f, "psi %lld\nprecision %s\noptimizer %s\nstep %d\nopt_t %d\n", (long long)psi, m->precision,
          m->optimizer, m->step, m->opt_t);
  fprintf(f, "format float32 little-endian, unit after unit (%s), no padding\nfiles",
          !strcmp(m->model, "gpt") ? "the GPT's units: wte|wpe, the blocks, lnf|head; gpt.h"
                                   : "W out x in row-major, then b");
  for (int s = 0; s < m->n_sections; s++) fprintf(f, " %s", names[s]);
  fprintf(f, "\n");
  if (fclose(f) != 0) die("error: writing %s failed", path);
}

/* zl_ckpt consolidate DIR OUT: the whole model's fp32 state. A part of a --tp/--ep save is refused
 * (its units are slices or some of the experts); the --ckpt directory holding a --tp save's parts is
 * consolidated whole (read_whole); a chapter 12 save over --ep is refused (refuse_moe). */
static int consolidate(const char *dir, const char *out) {
  ckpt_manifest_t m;
  whole_t w = {0};
  int T = ckpt_tp_layout(dir) > 1 ? ckpt_tp_layout(dir) : 1;
  if (T > 1) { /* every part, put back together */
    if (ckpt_parts_moe(dir, T)) {
      fprintf(stderr,
              "error: %s: a Mixture-of-Experts save over --ep %d (tp-R-of-%d/: each part holds %s of the "
              "experts): consolidate knows the dense models' units only (not built); ch12_experts resumes "
              "it, zl_ckpt inspect reads every part\n",
              dir, T, T, "its share");
      return 1;
    }
    if (read_whole(dir, -1, &w, "consolidate")) return whole_free(&w), 1;
  } else {
    if (open_checkpoint(dir, &m, 1)) return 1;
    if (m.tp > 1) {
      fprintf(stderr,
              "error: %s: %s rank %d's part of a %s %d save: its units are %s, not the whole model; "
              "consolidate the --ckpt directory that holds tp-R-of-%d/%s\n",
              m.dir, m.moe > 0 ? "EP" : "TP", m.tp_rank, ckpt_group_flag(&m), m.tp,
              m.moe > 0 ? "its share of the experts" : "slices", m.tp,
              m.moe > 0 ? " (a Mixture-of-Experts one is refused there too: ch12_experts resumes it)" : "");
      ckpt_manifest_free(&m);
      return 1;
    }
  }
  const ckpt_manifest_t *h = T > 1 ? &w.m[0] : &m;
  if (mkdir(out, 0755) != 0 && errno != EEXIST) die("error: cannot create %s: %s", out, strerror(errno));
  int sgd = !strcmp(h->optimizer, "sgd");
  const char *names[CKPT_MAX_SECTIONS] = {"weights.f32", sgd ? "sgd_momentum.f32" : "adam_m.f32",
                                          "adam_v.f32"};
  char path[CKPT_PATH_MAX + 64];
  int64_t psi = T > 1 ? w.full.numel : h->psi;
  for (int s = 0; s < h->n_sections; s++) {
    snprintf(path, sizeof path, "%s/%s", out, names[s]);
    if (T > 1) outfile_write("consolidate", path, (const char *)w.sec[s], psi * (int64_t)sizeof(float));
    else write_section(&m, s, path);
  }
  write_meta(out, h, T, psi, names);
  printf("consolidated %s (%s, %d shard%s%s) into %s: %lld params x %d arrays\n", T > 1 ? dir : h->dir,
         h->strategy, h->shards, h->shards > 1 ? "s" : "", T > 1 ? " per part, --tp parts put together" : "",
         out, (long long)psi, h->n_sections);
  if (T > 1) whole_free(&w);
  else ckpt_manifest_free(&m);
  return 0;
}

/* zl_ckpt inspect DIR: every part of a --tp/--ep save (tp-R-of-T/), or the one checkpoint. */
static int inspect(const char *dir) {
  int T = ckpt_tp_layout(dir) > 1 ? ckpt_tp_layout(dir) : 1, bad = 0;
  char part[CKPT_PATH_MAX + 64], stepdir[CKPT_PATH_MAX], why[1024];
  if (T > 1)
    printf("%s: %s save, %d parts (tp-R-of-%d/), each a checkpoint of its own:\n", dir,
           ckpt_parts_moe(dir, T) ? "an expert-parallel (--ep)" : "a tensor-parallel (--tp)", T, T);
  for (int q = 0; q < T; q++) {
    if (T > 1) snprintf(part, sizeof part, "%s/tp-%d-of-%d", dir, q, T);
    else snprintf(part, sizeof part, "%s", dir);
    ckpt_manifest_t m;
    if (ckpt_resolve(part, stepdir, sizeof stepdir, why, sizeof why) ||
        ckpt_manifest_read(stepdir, &m, why, sizeof why)) {
      fprintf(stderr, "error: %s: %s\n", part, why);
      bad = 1;
      continue;
    }
    ckpt_manifest_print(&m);
    if (ckpt_verify_files(&m, why, sizeof why)) {
      fprintf(stderr, "error: %s\n", why);
      bad = 1;
    } else printf("verified: %d files, sizes and checksums match the manifest\n", m.n_files);
    ckpt_manifest_free(&m);
  }
  return bad;
}

/* zl_ckpt export DIR OUT: the fp32 weights of a whole model (one checkpoint, or a --tp save's parts
 * put back together); a part alone, or a Mixture-of-Experts save in safetensors (GPT-2's names are
 * the dense GPT's), is refused in one line. */
static int export_weights(const char *dir, const char *out, const char *fmt) {
  ckpt_manifest_t m;
  whole_t whole = {0};
  int T = ckpt_tp_layout(dir) > 1 ? ckpt_tp_layout(dir) : 1;
  if (T > 1) {
    if (ckpt_parts_moe(dir, T)) {
      fprintf(stderr,
              "error: %s: a Mixture-of-Experts save over --ep %d (each part holds its share of the experts): "
              "export knows the dense models' units only (not built); save it with --ep 1 to export raw\n",
              dir, T);
      return 1;
    }
    if (read_whole(dir, -1, &whole, "export")) return whole_free(&whole), 1;
    m = whole.m[0];
    m.psi = whole.full.numel;
  } else {
    if (open_checkpoint(dir, &m, 1)) return 1;
    if (m.tp > 1) {
      fprintf(stderr,
              "error: %s: %s rank %d's part of a%s layout (%s %d): its units are %s, not the model's "
              "tensors; export the --ckpt directory that holds tp-R-of-%d/%s\n",
              m.dir, m.moe > 0 ? "EP" : "TP", m.tp_rank, m.moe > 0 ? "n expert-parallel" : " tensor-parallel",
              ckpt_group_flag(&m), m.tp, m.moe > 0 ? "its share of the experts" : "slices", m.tp,
              m.moe > 0 ? " (a Mixture-of-Experts one is refused there too)" : "");
      ckpt_manifest_free(&m);
      return 1;
    }
  }
  export_model_t em = {.gpt = !strcmp(m.model, "gpt"), .g = m.gpt, .input = m.input, .hidden = m.hidden,
                       .classes = m.classes, .layers = m.layers};
  int bad = 0;
  if (m.moe > 0 && strcmp(fmt, "raw")) {
    fprintf(
        stderr,
        "error: %s: a Mixture-of-Experts checkpoint (--moe %d --moe-every %d): safetensors carries GPT-2's "
        "names, the dense GPT's; --format raw writes its %lld fp32 weights\n",
        m.dir, m.moe, m.moe_every, (long long)m.psi);
    bad = 1;
  } else if (m.moe == 0 && export_numel(&em) != m.psi) {
    fprintf(stderr,
            "error: %s: psi %lld, but its recorded %s shape has %lld parameters (not a whole model: a "
            "pipeline stage's part?)\n",
            m.dir, (long long)m.psi, m.model, (long long)export_numel(&em));
    bad = 1;
  }
  float *w = bad || T > 1 ? NULL : xmalloc((size_t)m.psi * sizeof(float) + 1, "export weights");
  if (w) {
    ckpt_reader_t r = {.m = &m};
    for (int u = 0, at = 0; u < m.n_units; at += (int)m.units[u].numel, u++)
      ckpt_read_range(&r, 0, u, 0, m.units[u].numel, w + at);
    ckpt_reader_close(&r);
  }
  const float *weights = T > 1 ? whole.sec[0] : w;
  if (!bad && !strcmp(fmt, "raw")) {
    outfile_write("export", out, (const char *)weights, m.psi * (int64_t)sizeof(float));
  } else if (!bad) {
    char step[16], shape[96];
    snprintf(step, sizeof step, "%d", m.step);
    if (em.gpt)
      snprintf(shape, sizeof shape, "%d %d %d %d %d", m.gpt.n_layer, m.gpt.n_head, m.gpt.n_embd,
               m.gpt.seq_len, m.gpt.vocab);
    else snprintf(shape, sizeof shape, "%d %d %d %d", m.input, m.hidden, m.classes, m.layers);
    const char *meta[] = {"zerolab_model", m.model, "zerolab_shape", shape, "zerolab_step", step,
                          "zerolab_strategy", m.strategy, NULL};
    export_safetensors("export", out, &em, weights, meta);
  }
  if (!bad)
    printf("exported %s (%s %s%s, step %d) to %s: %lld fp32 weights, %s\n", T > 1 ? dir : m.dir, m.model,
           m.strategy, T > 1 ? ", --tp parts put together" : "", m.step, out, (long long)m.psi, fmt);
  free(w);
  if (T > 1) whole_free(&whole); /* m is its part 0's manifest */
  else ckpt_manifest_free(&m);
  return bad;
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
    return inspect(argv[2]);
  }
  if (!strcmp(cmd, "consolidate")) {
    if (argc != 4)
      return usage_error(argc < 4 ? "consolidate: missing DIR or OUT" : "consolidate: too many arguments");
    return consolidate(argv[2], argv[3]);
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
    struct stat sb; /* a new file (a device such as /dev/null is written in place) */
    if (stat(argv[3], &sb) == 0 && S_ISREG(sb.st_mode)) {
      fprintf(stderr, "error: %s: exists; export writes a new file (remove it, or name another)\n", argv[3]);
      return 2;
    }
    return export_weights(argv[2], argv[3], fmt);
  }
  return usage_error(cmd);
}
