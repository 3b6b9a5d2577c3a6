/* test_ckpt.c — the checkpoint format and the resharding read, without MPI (common/train/ckpt.h),
 * and the --fault spec parser (common/train/fault.h). Notes: notes/reliability.md.
 * A synthetic checkpoint (3 ZeRO shards, or 2 files of uneven pieces) holds value(s, u, i) = 100000 s + 1000
 * u + i at element
 * i of unit u in section s (exact in float32); every range read back, in any cut, must give
 * exactly those values: that is what resuming with another world size or stage relies on. */
#include "zl_test.h" // zl_tmpdir, zl_read_file
#include "ckpt.h"    // ckpt_*
#include "fault.h"   // fault_parse

#define W 3
static const int g_in[3] = {6, 13, 13}, g_out[3] = {13, 13, 11};

static float value(int s, int u, int64_t i) { return (float)(100000 * s + 1000 * u + i); }

typedef struct { int file, unit; int64_t off, numel; } piece_t;

/* The pieces of a layout: "zero" = W files, file r holds piece r of every unit (padded to a
 * multiple of W, as solutions/zero.h); "odd" = 2 files holding uneven pieces (3 per unit, cut
 * at numel/5 and numel/2) handed out alternately and listed from the last unit down — a layout
 * no stage has, which the format must read as well as ZeRO's. Returns the piece count. */
static int make_layout(const char *kind, piece_t *p, int *files) {
  int n = 0;
  for (int u = 0; u < 3; u++) {
    int64_t numel = (int64_t)g_in[u] * g_out[u] + g_out[u];
    if (!strcmp(kind, "zero")) {
      int64_t piece = (numel + W - 1) / W;
      for (int r = 0; r < W; r++) p[n++] = (piece_t){r, u, r * piece, piece};
      *files = W;
    } else {
      int v = 2 - u; /* last unit first */
      int64_t nv = (int64_t)g_in[v] * g_out[v] + g_out[v], cut[4] = {0, nv / 5, nv / 2, nv};
      for (int k = 0; k < 3; k++) p[n++] = (piece_t){(v + k) % 2, v, cut[k], cut[k + 1] - cut[k]};
      *files = 2;
    }
  }
  return n;
}

/* Write a checkpoint of the given layout into dir/step-000004 (+ dir/latest). bad_piece: move
 * a piece of unit 1 by one element in an otherwise well-checksummed manifest. */
static void write_ckpt(const char *dir, const char *kind, int bad_piece) {
  char step[512], path[600];
  snprintf(step, sizeof step, "%s/step-000004", dir);
  mkdir(step, 0755);
  piece_t pc[16];
  int files = 0, np = make_layout(kind, pc, &files);
  int64_t psi = 0, sec[W] = {0}, at[16];
  for (int u = 0; u < 3; u++) psi += (int64_t)g_in[u] * g_out[u] + g_out[u];
  for (int k = 0; k < np; k++) at[k] = sec[pc[k].file], sec[pc[k].file] += pc[k].numel;
  uint64_t sums[W + 1];
  for (int f = 0; f < files; f++) {
    float *buf = calloc((size_t)(3 * sec[f]), sizeof(float));
    for (int s = 0; s < 3; s++)
      for (int k = 0; k < np; k++) {
        if (pc[k].file != f) continue;
        int64_t numel = (int64_t)g_in[pc[k].unit] * g_out[pc[k].unit] + g_out[pc[k].unit];
        for (int64_t j = 0; j < pc[k].numel; j++) {
          int64_t i = pc[k].off + j;
          buf[s * sec[f] + at[k] + j] = i < numel ? value(s, pc[k].unit, i) : 0.0f; /* pad slots 0 */
        }
      }
    snprintf(path, sizeof path, "%s/rank-%05d.bin", step, f);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp && fwrite(buf, sizeof(float), (size_t)(3 * sec[f]), fp) == (size_t)(3 * sec[f]));
    fclose(fp);
    sums[f] = ckpt_sum(CKPT_SUM_INIT, buf, (size_t)(3 * sec[f]) * sizeof(float));
    free(buf);
  }
  double losses[8] = {2.5, 1, 2.4, 1, 2.3, 1, 2.2, 1};
  snprintf(path, sizeof path, "%s/losses.bin", step);
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(losses, 8, 8, f) == 8);
  fclose(f);
  sums[files] = ckpt_sum(CKPT_SUM_INIT, losses, sizeof losses);
  char txt[8192];
  int n = snprintf(
      txt, sizeof txt,
      "zerolab-checkpoint 2\nstrategy %s\nstage 2\nworld %d\nshards %d\nprecision fp32\noptimizer adamw\n"
      "input 6\nhidden 13\nclasses 11\nlayers 2\nseed 7\nbatch 120\npsi %lld\nunits 3\n",
      strcmp(kind, "zero") ? "toy" : "zero2", files, files, (long long)psi);
  for (int u = 0; u < 3; u++)
    n += snprintf(txt + n, sizeof txt - n, "unit %d %d %d %lld\n", u, g_in[u], g_out[u],
                  (long long)((int64_t)g_in[u] * g_out[u] + g_out[u]));
  n += snprintf(txt + n, sizeof txt - n, "pieces %d\n", np);
  for (int k = 0; k < np; k++)
    n += snprintf(txt + n, sizeof txt - n, "piece %d %d %lld %lld %lld\n", pc[k].file, pc[k].unit,
                  (long long)(pc[k].off + (bad_piece && pc[k].unit == 1 && pc[k].off > 0)),
                  (long long)pc[k].numel, (long long)at[k]);
  n += snprintf(txt + n, sizeof txt - n,
                "step 4\ndata_position 480\nopt_t 4\nskipped 0\nrng none\nsections weights m v\nfiles %d\n",
                files + 1);
  for (int r = 0; r < files; r++)
    n += snprintf(txt + n, sizeof txt - n, "file rank-%05d.bin %lld %016llx\n", r,
                  (long long)(3 * sec[r] * 4), (unsigned long long)sums[r]);
  n += snprintf(txt + n, sizeof txt - n, "file losses.bin 64 %016llx\n", (unsigned long long)sums[files]);
  n += snprintf(txt + n, sizeof txt - n, "checksum %016llx\n",
                (unsigned long long)ckpt_sum(CKPT_SUM_INIT, txt, (size_t)n));
  snprintf(path, sizeof path, "%s/manifest.txt", step);
  f = fopen(path, "w");
  cr_assert(f && fwrite(txt, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  snprintf(path, sizeof path, "%s/latest", dir);
  f = fopen(path, "w");
  fputs("step-000004\n", f);
  fclose(f);
}

static void open_ok(const char *dir, ckpt_manifest_t *m) {
  char step[CKPT_PATH_MAX], why[1024] = "";
  cr_assert_eq(ckpt_resolve(dir, step, sizeof step, why, sizeof why), 0, "ckpt_resolve(%s): %s", dir, why);
  cr_assert_eq(ckpt_manifest_read(step, m, why, sizeof why), 0, "ckpt_manifest_read(%s): %s", step, why);
}

/* Every range a rank of any new layout could ask for (the pieces of world sizes 1..7, and a cut
 * across every piece boundary), from a checkpoint of the given layout, exactly. */
static void reads_every_range(const char *kind, int files) {
  char dir[256];
  zl_tmpdir(dir, sizeof dir, kind);
  write_ckpt(dir, kind, 0);
  ckpt_manifest_t m;
  open_ok(dir, &m);
  char why[1024] = "";
  cr_assert_eq(ckpt_verify_files(&m, why, sizeof why), 0, "verify: %s", why);
  cr_assert_eq(m.shards, files);
  cr_assert_eq(m.step, 4);
  cr_assert_eq(m.opt_t, 4);
  ckpt_reader_t r = {.m = &m};
  float buf[400];
  for (int s = 0; s < 3; s++)
    for (int u = 0; u < 3; u++) {
      int64_t numel = m.units[u].numel;
      for (int nw = 1; nw <= 7; nw++) {
        int64_t piece = (numel + nw - 1) / nw;
        for (int rk = 0; rk < nw; rk++) {
          int64_t lo = rk * piece, hi = lo + piece < numel ? lo + piece : numel;
          if (lo >= hi) continue;
          ckpt_read_range(&r, s, u, lo, hi, buf);
          for (int64_t i = lo; i < hi; i++)
            cr_assert_eq(buf[i - lo], value(s, u, i),
                         "%s: section %d unit %d element %lld (new world %d rank %d): got %g, expected %g",
                         kind, s, u, (long long)i, nw, rk, buf[i - lo], value(s, u, i));
        }
      }
      ckpt_read_range(&r, s, u, 1, numel - 1, buf); /* across every piece boundary */
      for (int64_t i = 1; i < numel - 1; i++)
        cr_assert_eq(buf[i - 1], value(s, u, i), "%s: section %d unit %d element %lld: got %g", kind, s, u,
                     (long long)i, buf[i - 1]);
    }
  ckpt_reader_close(&r);
  ckpt_manifest_free(&m);
}

Test(common_ckpt, reshard_reads_every_range_exactly) { reads_every_range("zero", W); }
/* the format knows pieces, not stages: any tiling a strategy's layout hook names reads the same */
Test(common_ckpt, any_piece_layout_reads_exactly) { reads_every_range("odd", 2); }

Test(common_ckpt, damaged_checkpoints_are_named) {
  char dir[256], path[600], why[1024];
  zl_tmpdir(dir, sizeof dir, "ckpt_bad");
  write_ckpt(dir, "zero", 1);
  ckpt_manifest_t m;
  snprintf(path, sizeof path, "%s/step-000004", dir);
  cr_assert_eq(ckpt_manifest_read(path, &m, why, sizeof why), 1,
               "a manifest with an inconsistent layout was accepted");
  cr_assert(strstr(why, "manifest.txt") && strstr(why, "unit 1: inconsistent layout"), "message: %s", why);
  write_ckpt(dir, "zero", 0);
  /* a flipped character in the manifest */
  snprintf(path, sizeof path, "%s/step-000004/manifest.txt", dir);
  size_t n = 0;
  char *txt = zl_read_file(path, &n);
  char *h = strstr(txt, "hidden 13");
  h[8] = '4';
  FILE *f = fopen(path, "w");
  fwrite(txt, 1, n, f);
  fclose(f);
  snprintf(path, sizeof path, "%s/step-000004", dir);
  cr_assert_eq(ckpt_manifest_read(path, &m, why, sizeof why), 1);
  cr_assert(strstr(why, "manifest.txt: corrupted"), "message: %s", why);
  h[8] = '3';
  snprintf(path, sizeof path, "%s/step-000004/manifest.txt", dir);
  f = fopen(path, "w");
  fwrite(txt, 1, n, f);
  fclose(f);
  free(txt);
  /* a truncated shard */
  snprintf(path, sizeof path, "%s/step-000004/rank-00002.bin", dir);
  cr_assert_eq(truncate(path, 40), 0);
  open_ok(dir, &m);
  cr_assert_eq(ckpt_verify_files(&m, why, sizeof why), 1, "a truncated shard passed verification");
  cr_assert(strstr(why, "rank-00002.bin: truncated"), "message: %s", why);
  ckpt_manifest_free(&m);
  /* no latest, no manifest */
  snprintf(path, sizeof path, "%s/latest", dir);
  unlink(path);
  char step[CKPT_PATH_MAX];
  cr_assert_eq(ckpt_resolve(dir, step, sizeof step, why, sizeof why), 1);
  cr_assert(strstr(why, "latest: missing"), "message: %s", why);
}

Test(common_ckpt, fault_spec_parser) {
  fault_t f;
  char why[256];
  cr_assert_eq(fault_parse("2:7:hang", 3, 10, &f, why, sizeof why), 0);
  cr_assert(f.rank == 2 && f.step == 7 && f.kind == FAULT_HANG, "parsed %d:%d:%d", f.rank, f.step,
            (int)f.kind);
  const char *kinds[] = {"exit", "abort", "kill", "hang", "nan", "ckpt"};
  for (int k = 0; k < 6; k++) {
    char spec[32];
    snprintf(spec, sizeof spec, "0:0:%s", kinds[k]);
    cr_assert_eq(fault_parse(spec, 1, 1, &f, why, sizeof why), 0, "%s refused: %s", spec, why);
    cr_assert_str_eq(fault_kind_name(f.kind), kinds[k]);
  }
  const char *bad[] = {
      "",          "1",        "1:2",      "1:2:",       "3:0:exit",  "0:10:exit",  "-1:0:exit",
      "0:-1:exit", "a:0:exit", "0:0:EXIT", "0:0:exit:1", "0 :0:exit", "0:0x1:exit", "99999999999:0:exit"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(fault_parse(bad[i], 3, 10, &f, why, sizeof why), 1, "'%s' was accepted", bad[i]);
    cr_assert(strstr(why, "RANK in [0, 2]") && strstr(why, "STEP in [0, 9]"), "'%s': message '%s'", bad[i],
              why);
  }
}

/* A checkpoint knows its model: every shape field, the model kind, precision and optimizer
 * differ one at a time from a matching run, and the refusal names that flag with both values;
 * several at once are all named. The grid (world, stage) never counts as a difference; a TP
 * rank's part (slices, not units) read at another --tp is named as a tensor-parallel layout. */
static void match_case(ckpt_manifest_t *m, train_cfg_t c, const char *want) {
  char why[1024] = "";
  int rc = ckpt_match_cfg(m, &c, why, sizeof why);
  if (!want) {
    cr_assert_eq(rc, 0, "a matching run was refused: %s", why);
    return;
  }
  cr_assert_eq(rc, 1, "resume accepted although '%s' differs", want);
  cr_assert(strstr(why, want), "refusal '%s' does not name '%s'", why, want);
}

Test(common_ckpt, a_checkpoint_knows_its_model) {
  ckpt_manifest_t m = {.step = 3,
                       .n_sections = 3,
                       .sections = {"weights", "m", "v"},
                       .seed = 7,
                       .batch = 8,
                       .world = 4,
                       .stage = 3,
                       .tp = 1,
                       .gpt = {.n_layer = 2, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab = 256},
                       .input = 6,
                       .hidden = 13,
                       .classes = 11,
                       .layers = 2};
  snprintf(m.dir, sizeof m.dir, "ck/step-000003");
  snprintf(m.model, sizeof m.model, "gpt");
  snprintf(m.precision, sizeof m.precision, "fp32");
  snprintf(m.optimizer, sizeof m.optimizer, "adamw");
  train_cfg_t g = {.model_kind = "gpt",
                   .gpt = m.gpt,
                   .wdt = DT_F32,
                   .optimizer = OPT_ADAMW,
                   .seed = 7,
                   .batch = 8,
                   /* MLP fields: ignored */
                   .steps = 6,
                   .input = 32,
                   .hidden = 128,
                   .classes = 10,
                   .layers = 3};
  match_case(&m, g, NULL);
  train_cfg_t c = g;
  c.gpt.n_layer = 3, match_case(&m, c, "saved with --n-layer 2, this run has --n-layer 3");
  c = g, c.gpt.n_head = 4, match_case(&m, c, "saved with --n-head 2, this run has --n-head 4");
  c = g, c.gpt.n_embd = 64, match_case(&m, c, "saved with --n-embd 32, this run has --n-embd 64");
  c = g, c.gpt.seq_len = 8, match_case(&m, c, "saved with --seq-len 16, this run has --seq-len 8");
  c = g, c.gpt.vocab = 128, match_case(&m, c, "saved with vocab 256, this run has vocab 128");
  c = g, c.model_kind = "mlp", match_case(&m, c, "saved with --model gpt, this run has --model mlp");
  c = g, c.wdt = DT_BF16, match_case(&m, c, "saved with --precision fp32, this run has --precision bf16");
  c = g, c.optimizer = OPT_SGD,
  match_case(&m, c, "saved with --optimizer adamw, this run has --optimizer sgd");
  c = g, c.seed = 8, match_case(&m, c, "saved with --seed 7, this run has --seed 8");
  c = g, c.batch = 16, match_case(&m, c, "saved with --batch 8, this run has --batch 16");
  c = g, c.gpt.n_embd = 64, c.gpt.n_head = 4, c.wdt = DT_BF16;
  match_case(
      &m, c,
      "(3 differences): saved with --n-head 2, this run has --n-head 4; saved with --n-embd 32, this run "
      "has --n-embd 64; saved with --precision fp32, this run has --precision bf16");
  /* a TP rank's part: fine at its own T, named as a TP layout at another */
  m.tp = 2, m.tp_rank = 1;
  c = g, c.tp = c.group = 2, match_case(&m, c, NULL);
  c = g, c.tp = c.group = 1,
  match_case(&m, c, "a tensor-parallel layout: TP rank 1's slices of a --tp 2 save, this run has --tp 1");
  m.tp = 1, m.tp_rank = 0;
  /* the MLP: its four shape flags, and the GPT's fields ignored */
  snprintf(m.model, sizeof m.model, "mlp");
  train_cfg_t p = {.model_kind = "mlp",
                   .wdt = DT_F32,
                   .optimizer = OPT_ADAMW,
                   .seed = 7,
                   .batch = 8,
                   .steps = 6,
                   .input = 6,
                   .hidden = 13,
                   .classes = 11,
                   .layers = 2,
                   .gpt = {.n_embd = 999}};
  match_case(&m, p, NULL);
  c = p, c.layers = 3, match_case(&m, c, "saved with --layers 2, this run has --layers 3");
  c = p, c.hidden = 14, match_case(&m, c, "saved with --hidden 13, this run has --hidden 14");
  c = p, c.input = 7, match_case(&m, c, "saved with --input 6, this run has --input 7");
  c = p, c.classes = 12, match_case(&m, c, "saved with --classes 11, this run has --classes 12");
  c = p, c.model_kind = "gpt", c.gpt = g.gpt,
  match_case(&m, c, "saved with --model mlp, this run has --model gpt");
}
