/* test_ckpt.c — the checkpoint format and the resharding read, without MPI (common/ckpt.h),
 * and the --fault spec parser (common/fault.h). Notes: notes/reliability.md.
 * A synthetic checkpoint with 3 shards holds value(s, u, i) = 100000 s + 1000 u + i at element
 * i of unit u in section s (exact in float32); every range read back, in any cut, must give
 * exactly those values: that is what resuming with another world size or stage relies on. */
#include "zl_test.h" // zl_tmpdir, zl_read_file
#include "ckpt.h"    // ckpt_*
#include "fault.h"   // fault_parse

#define W 3
static const int g_in[3] = {6, 13, 13}, g_out[3] = {13, 13, 11};

static float value(int s, int u, int64_t i) { return (float)(100000 * s + 1000 * u + i); }

/* Write a checkpoint of W shards into dir/step-000004 (+ dir/latest). bad_piece: corrupt the
 * layout of unit 1 (piece off by one) in an otherwise well-checksummed manifest. */
static void write_ckpt(const char *dir, int bad_piece) {
  char step[512], path[600];
  snprintf(step, sizeof step, "%s/step-000004", dir);
  mkdir(step, 0755);
  int64_t numel[3], padded[3], piece[3], shard_off[3], sn = 0, psi = 0, pad = 0;
  for (int u = 0; u < 3; u++) {
    numel[u] = (int64_t)g_in[u] * g_out[u] + g_out[u];
    padded[u] = (numel[u] + W - 1) / W * W;
    piece[u] = padded[u] / W;
    shard_off[u] = sn;
    sn += piece[u];
    psi += numel[u];
    pad += padded[u];
  }
  uint64_t sums[W + 1];
  for (int r = 0; r < W; r++) {
    float *buf = calloc((size_t)(3 * sn), sizeof(float));
    for (int s = 0; s < 3; s++)
      for (int u = 0; u < 3; u++)
        for (int64_t k = 0; k < piece[u]; k++) {
          int64_t i = r * piece[u] + k;
          buf[s * sn + shard_off[u] + k] = i < numel[u] ? value(s, u, i) : 0.0f;
        }
    snprintf(path, sizeof path, "%s/rank-%05d.bin", step, r);
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(buf, sizeof(float), (size_t)(3 * sn), f) == (size_t)(3 * sn));
    fclose(f);
    sums[r] = ckpt_sum(CKPT_SUM_INIT, buf, (size_t)(3 * sn) * sizeof(float));
    free(buf);
  }
  double losses[8] = {2.5, 1, 2.4, 1, 2.3, 1, 2.2, 1};
  snprintf(path, sizeof path, "%s/losses.bin", step);
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(losses, 8, 8, f) == 8);
  fclose(f);
  sums[W] = ckpt_sum(CKPT_SUM_INIT, losses, sizeof losses);
  char txt[4096];
  int n = snprintf(txt, sizeof txt,
                   "zerolab-checkpoint 1\nstrategy zero2\nstage 2\nworld 3\nlayout_world 3\nprecision fp32\noptimizer adamw\n"
                   "input 6\nhidden 13\nclasses 11\nlayers 2\nseed 7\nbatch 120\npsi %lld\npadded_numel %lld\nshard_numel %lld\n"
                   "units 3\n",
                   (long long)psi, (long long)pad, (long long)sn);
  for (int u = 0; u < 3; u++)
    n += snprintf(txt + n, sizeof txt - n, "unit %d %d %d %lld %lld %lld %lld\n", u, g_in[u], g_out[u], (long long)numel[u],
                  (long long)padded[u], (long long)(piece[u] + (bad_piece && u == 1)), (long long)shard_off[u]);
  n += snprintf(txt + n, sizeof txt - n, "step 4\ndata_position 480\nopt_t 4\nskipped 0\nrng none\nsections weights m v\nfiles 4\n");
  for (int r = 0; r < W; r++)
    n += snprintf(txt + n, sizeof txt - n, "file rank-%05d.bin %lld %016llx\n", r, (long long)(3 * sn * 4),
                  (unsigned long long)sums[r]);
  n += snprintf(txt + n, sizeof txt - n, "file losses.bin 64 %016llx\n", (unsigned long long)sums[W]);
  n += snprintf(txt + n, sizeof txt - n, "checksum %016llx\n", (unsigned long long)ckpt_sum(CKPT_SUM_INIT, txt, (size_t)n));
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

Test(common_ckpt, reshard_reads_every_range_exactly) {
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "ckpt_unit");
  write_ckpt(dir, 0);
  ckpt_manifest_t m;
  open_ok(dir, &m);
  char why[1024] = "";
  cr_assert_eq(ckpt_verify_files(&m, why, sizeof why), 0, "verify: %s", why);
  cr_assert_eq(m.layout_world, 3);
  cr_assert_eq(m.step, 4);
  cr_assert_eq(m.opt_t, 4);
  ckpt_reader_t r = {.m = &m};
  float buf[400];
  /* the pieces of every new world size 1..7 (the resharded ranks' reads), and odd cuts */
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
            cr_assert_eq(buf[i - lo], value(s, u, i), "section %d unit %d element %lld (new world %d rank %d): got %g, expected %g",
                         s, u, (long long)i, nw, rk, buf[i - lo], value(s, u, i));
        }
      }
      ckpt_read_range(&r, s, u, 1, numel - 1, buf); /* across every piece boundary */
      for (int64_t i = 1; i < numel - 1; i++)
        cr_assert_eq(buf[i - 1], value(s, u, i), "section %d unit %d element %lld: got %g", s, u, (long long)i, buf[i - 1]);
    }
  ckpt_reader_close(&r);
  ckpt_manifest_free(&m);
}

Test(common_ckpt, damaged_checkpoints_are_named) {
  char dir[256], path[600], why[1024];
  zl_tmpdir(dir, sizeof dir, "ckpt_bad");
  write_ckpt(dir, 1);
  ckpt_manifest_t m;
  snprintf(path, sizeof path, "%s/step-000004", dir);
  cr_assert_eq(ckpt_manifest_read(path, &m, why, sizeof why), 1, "a manifest with an inconsistent layout was accepted");
  cr_assert(strstr(why, "manifest.txt") && strstr(why, "unit 1: inconsistent layout"), "message: %s", why);
  write_ckpt(dir, 0);
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
  cr_assert(f.rank == 2 && f.step == 7 && f.kind == FAULT_HANG, "parsed %d:%d:%d", f.rank, f.step, (int)f.kind);
  const char *kinds[] = {"exit", "abort", "kill", "hang", "nan", "ckpt"};
  for (int k = 0; k < 6; k++) {
    char spec[32];
    snprintf(spec, sizeof spec, "0:0:%s", kinds[k]);
    cr_assert_eq(fault_parse(spec, 1, 1, &f, why, sizeof why), 0, "%s refused: %s", spec, why);
    cr_assert_str_eq(fault_kind_name(f.kind), kinds[k]);
  }
  const char *bad[] = {"", "1", "1:2", "1:2:", "3:0:exit", "0:10:exit", "-1:0:exit", "0:-1:exit", "a:0:exit", "0:0:EXIT",
                       "0:0:exit:1", "0 :0:exit", "0:0x1:exit", "99999999999:0:exit"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(fault_parse(bad[i], 3, 10, &f, why, sizeof why), 1, "'%s' was accepted", bad[i]);
    cr_assert(strstr(why, "RANK in [0, 2]") && strstr(why, "STEP in [0, 9]"), "'%s': message '%s'", bad[i], why);
  }
}
