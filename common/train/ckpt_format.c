/* ckpt_format.c — a checkpoint on disk (ckpt.h; the trainer's side is ckpt.c): the step
 * directory, its manifest (read, checked against the files and the run's flags, printed, written),
 * the shard files read as ranges of any layout (the resharding), and the atomic publish of a save
 * (partial directory, fsync, rename, `latest`, pruning). Notes: notes/reliability.md ("Checkpoints"). */
#include "ckpt_internal.h" // ckpt_manifest_t, ckpt_*; MANIFEST, LOSSES
#include "check.h"    // die, die_on_rank, xmalloc, xcalloc
#include <dirent.h>   // opendir, readdir
#include <errno.h>    // errno
#include <fcntl.h>    // open, O_*
#include <ftw.h>      // nftw (removing an old checkpoint directory)
#include <inttypes.h> // PRIx64, SCNx64
#include <math.h>     // isfinite (the saved loss scale)
#include <stdio.h>    // snprintf, fopen, printf
#include <stdlib.h>   // free, qsort
#include <string.h>   // strcmp, strerror, strncmp
#include <sys/stat.h> // stat
#include <unistd.h>   // pread, write, fsync, close, getpid

uint64_t ckpt_sum(uint64_t h, const void *bytes, size_t n) {
  const unsigned char *p = bytes;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* ---- small file helpers ------------------------------------------------------------------- */

/* Whole file into a malloc'd buffer (NUL-terminated); NULL when it cannot be read. */
char *ckpt_slurp(const char *path, int64_t *nbytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  int64_t len = 0, cap = 0;
  for (;;) {
    if (cap - len < 65536) {
      cap = cap ? 2 * cap : 65536;
      buf = realloc(buf, (size_t)cap + 1);
      if (!buf)
        die("out of memory on rank %d: reading %s needs %.1f MiB", check_rank(), path, cap / 1048576.0);
    }
    size_t k = fread(buf + len, 1, (size_t)(cap - len), f);
    len += (int64_t)k;
    if (k == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  buf[len] = 0;
  if (nbytes) *nbytes = len;
  return buf;
}

/* Write n bytes to path atomically: path.tmp, fsync, rename. Dies naming the path on error. */
void ckpt_write_atomic(const char *path, const void *bytes, int64_t n) {
  char tmp[CKPT_PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die_on_rank("checkpoint: cannot create %s: %s", tmp, strerror(errno));
  const char *p = bytes;
  for (int64_t done = 0; done < n;) {
    ssize_t k = write(fd, p + done, (size_t)(n - done > (1 << 30) ? (1 << 30) : n - done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die_on_rank("checkpoint: writing %s failed: %s", tmp, strerror(errno));
    done += k;
  }
  if (fsync(fd) != 0) die_on_rank("checkpoint: fsync %s failed: %s", tmp, strerror(errno));
  close(fd);
  if (rename(tmp, path) != 0)
    die_on_rank("checkpoint: rename %s -> %s failed: %s", tmp, path, strerror(errno));
}

static void fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  fsync(fd); /* the renames inside are durable */
  close(fd);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(path);
}
/* rm -rf of a directory this module created (a checkpoint step or a partial one). */
void ckpt_rm_tree(const char *path) {
  struct stat sb;
  if (stat(path, &sb) == 0) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- the manifest ------------------------------------------------------------------------- */

int ckpt_tp_layout(const char *dir) {
  DIR *d = opendir(dir);
  int T = 0, r, tt;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (sscanf(e->d_name, "tp-%d-of-%d", &r, &tt) == 2) T = tt;
  if (d) closedir(d);
  return T;
}

const char *ckpt_group_flag(const ckpt_manifest_t *m) { return m->moe > 0 ? "--ep" : "--tp"; }

int ckpt_parts_moe(const char *dir, int T) {
  char part[CKPT_PATH_MAX + 64], stepdir[CKPT_PATH_MAX], why[256];
  snprintf(part, sizeof part, "%s/tp-0-of-%d", dir, T);
  ckpt_manifest_t m;
  if (T < 2 || ckpt_resolve(part, stepdir, sizeof stepdir, why, sizeof why) ||
      ckpt_manifest_read(stepdir, &m, why, sizeof why))
    return 0;
  int moe = m.moe > 0;
  ckpt_manifest_free(&m);
  return moe;
}

int ckpt_resolve(const char *where, char *stepdir, size_t n, char *why, size_t nwhy) {
  char path[CKPT_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" MANIFEST, where);
  struct stat sb;
  if (stat(path, &sb) == 0) { /* a step directory itself */
    snprintf(stepdir, n, "%s", where);
    return 0;
  }
  if (!is_dir(where)) {
    snprintf(why, nwhy, "%s: no such checkpoint directory", where);
    return 1;
  }
  snprintf(path, sizeof path, "%s/latest", where);
  char *latest = ckpt_slurp(path, NULL);
  if (!latest) {
    int T = ckpt_tp_layout(where);
    if (T > 1 && ckpt_parts_moe(where, T))
      snprintf(why, nwhy,
               "%s holds an expert-parallel layout saved with --ep %d (one checkpoint per EP rank, "
               "%s/tp-R-of-%d/: its experts, with the dense weights): resume it with ch12_experts --ep %d "
               "(any data-parallel size); zl_ckpt inspect reads every part",
               where, T, where, T, T);
    else if (T > 1)
      snprintf(why, nwhy,
               "%s holds a tensor-parallel layout saved with --tp %d (one checkpoint per TP rank, "
               "%s/tp-R-of-%d/): "
               "resume it with --tp %d (any data-parallel size), or make it grid-free for any grid (T, P, D, "
               "stage): "
               "zl_ckpt convert %s OUT, then --resume OUT",
               where, T, where, T, T, where);
    else
      snprintf(why, nwhy, "%s: missing (no complete checkpoint in %s, and it holds no " MANIFEST ")", path,
               where);
    return 1;
  }
  char name[64];
  int ok = sscanf(latest, "%63s", name) == 1 && strncmp(name, "step-", 5) == 0 && !strchr(name, '/');
  free(latest);
  if (!ok) {
    snprintf(why, nwhy, "%s: does not name a step directory (expected a line like step-000010)", path);
    return 1;
  }
  snprintf(stepdir, n, "%s/%s", where, name);
  return 0;
}

void ckpt_manifest_free(ckpt_manifest_t *m) {
  free(m->units);
  free(m->files);
  free(m->pieces);
  free(m->section_numel);
  m->units = NULL;
  m->files = NULL;
  m->pieces = NULL;
  m->section_numel = NULL;
}

int ckpt_section(const ckpt_manifest_t *m, const char *name) {
  for (int s = 0; s < m->n_sections; s++)
    if (strcmp(m->sections[s], name) == 0) return s;
  return -1;
}

/* Pieces by (unit, off). */
static int cmp_piece(const void *a, const void *b) {
  const ckpt_piece_t *x = a, *y = b;
  if (x->unit != y->unit) return (x->unit > y->unit) - (x->unit < y->unit);
  return (x->off > y->off) - (x->off < y->off);
}

#define FAIL(...) do { snprintf(why, nwhy, __VA_ARGS__); goto fail; } while (0)

int ckpt_manifest_read(const char *stepdir, ckpt_manifest_t *m, char *why, size_t nwhy) {
  memset(m, 0, sizeof *m);
  snprintf(m->dir, sizeof m->dir, "%s", stepdir);
  char path[CKPT_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" MANIFEST, stepdir);
  int64_t len = 0;
  char *text = ckpt_slurp(path, &len);
  if (!text) FAIL("%s: missing or unreadable (the save did not complete?)", path);
  /* The last line checksums everything before it. */
  char *ck = strstr(text, "\nchecksum ");
  uint64_t want = 0;
  if (!ck || sscanf(ck + 10, "%" SCNx64, &want) != 1)
    FAIL("%s: truncated (no checksum line at the end)", path);
  uint64_t got = ckpt_sum(CKPT_SUM_INIT, text, (size_t)(ck + 1 - text));
  if (got != want)
    FAIL("%s: corrupted (checksum %016" PRIx64 ", its last line says %016" PRIx64 ")", path, got, want);
  int nunit = 0, nfile = 0, npiece = 0, have_units = 0, have_files = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    char key[32];
    if (sscanf(l, "%31s", key) != 1) continue;
    const char *v = l + strlen(key);
    int ok = 1;
    if (!strcmp(key, "zerolab-checkpoint")) ok = sscanf(v, "%d", &m->version) == 1;
    else if (!strcmp(key, "strategy")) ok = sscanf(v, "%31s", m->strategy) == 1;
    else if (!strcmp(key, "stage")) ok = sscanf(v, "%d", &m->stage) == 1;
    else if (!strcmp(key, "world")) ok = sscanf(v, "%d", &m->world) == 1;
    else if (!strcmp(key, "shards")) ok = sscanf(v, "%d", &m->shards) == 1;
    else if (!strcmp(key, "precision")) ok = sscanf(v, "%7s", m->precision) == 1;
    else if (!strcmp(key, "optimizer")) ok = sscanf(v, "%7s", m->optimizer) == 1;
    else if (!strcmp(key, "model")) ok = sscanf(v, "%7s", m->model) == 1;
    else if (!strcmp(key, "n_layer")) ok = sscanf(v, "%d", &m->gpt.n_layer) == 1;
    else if (!strcmp(key, "n_head")) ok = sscanf(v, "%d", &m->gpt.n_head) == 1;
    else if (!strcmp(key, "n_embd")) ok = sscanf(v, "%d", &m->gpt.n_embd) == 1;
    else if (!strcmp(key, "seq_len")) ok = sscanf(v, "%d", &m->gpt.seq_len) == 1;
    else if (!strcmp(key, "vocab")) ok = sscanf(v, "%d", &m->gpt.vocab) == 1;
    else if (!strcmp(key, "tp")) ok = sscanf(v, "%d %d", &m->tp, &m->tp_rank) == 2;
    else if (!strcmp(key, "ep_tp")) ok = sscanf(v, "%d", &m->ep_tp) == 1;
    else if (!strcmp(key, "moe")) ok = sscanf(v, "%d %d", &m->moe, &m->moe_every) == 2;
    else if (!strcmp(key, "moe_experts")) ok = sscanf(v, "%d %d", &m->moe_ffn, &m->moe_shared) == 2;
    else if (!strcmp(key, "input")) ok = sscanf(v, "%d", &m->input) == 1;
    else if (!strcmp(key, "hidden")) ok = sscanf(v, "%d", &m->hidden) == 1;
    else if (!strcmp(key, "classes")) ok = sscanf(v, "%d", &m->classes) == 1;
    else if (!strcmp(key, "layers")) ok = sscanf(v, "%d", &m->layers) == 1;
    else if (!strcmp(key, "seed")) ok = sscanf(v, "%" SCNu64, &m->seed) == 1;
    else if (!strcmp(key, "batch")) ok = sscanf(v, "%" SCNd64, &m->batch) == 1;
    else if (!strcmp(key, "psi")) ok = sscanf(v, "%" SCNd64, &m->psi) == 1;
    else if (!strcmp(key, "step")) ok = sscanf(v, "%d", &m->step) == 1;
    else if (!strcmp(key, "data_position")) ok = sscanf(v, "%" SCNd64, &m->data_position) == 1;
    else if (!strcmp(key, "opt_t")) ok = sscanf(v, "%d", &m->opt_t) == 1;
    else if (!strcmp(key, "skipped")) ok = sscanf(v, "%d", &m->skipped) == 1;
    else if (!strcmp(key, "scaler")) {
      double s;
      ok = sscanf(v, "%la %d %d", &s, &m->growth_tracker, &m->overflows) == 3 && s > 0 && isfinite(s);
      m->loss_scale = (float)s;
      m->has_scaler = ok;
    }
    else if (!strcmp(key, "units")) {
      ok = !have_units && sscanf(v, "%d", &m->n_units) == 1 && m->n_units >= 2 && m->n_units <= 257;
      if (ok) m->units = xcalloc((size_t)m->n_units, sizeof *m->units, "checkpoint units");
      have_units = 1;
    } else if (!strcmp(key, "unit")) {
      int u;
      ckpt_unit_t x = {0};
      ok = m->units && nunit < m->n_units &&
          sscanf(v, "%d %d %d %" SCNd64, &u, &x.in, &x.out, &x.numel) == 4 && u == nunit && x.numel > 0;
      if (ok) m->units[nunit++] = x;
    } else if (!strcmp(key, "pieces")) {
      ok = !m->pieces && sscanf(v, "%d", &m->n_pieces) == 1 && m->n_pieces >= 1 && m->n_pieces <= 1 << 24;
      if (ok) m->pieces = xcalloc((size_t)m->n_pieces, sizeof *m->pieces, "checkpoint pieces");
    } else if (!strcmp(key, "piece")) {
      ckpt_piece_t x;
      ok = m->pieces && npiece < m->n_pieces &&
          sscanf(v, "%d %d %" SCNd64 " %" SCNd64 " %" SCNd64, &x.file, &x.unit, &x.off, &x.numel, &x.at) == 5;
      if (ok) m->pieces[npiece++] = x;
    } else if (!strcmp(key, "sections")) {
      char s[CKPT_MAX_SECTIONS + 1][8];
      int k = sscanf(v, "%7s %7s %7s %7s", s[0], s[1], s[2], s[3]);
      ok = k >= 1 && k <= CKPT_MAX_SECTIONS;
      for (int i = 0; ok && i < k; i++) memcpy(m->sections[i], s[i], 8);
      m->n_sections = ok ? k : 0;
    } else if (!strcmp(key, "files")) {
      ok = !have_files && sscanf(v, "%d", &m->n_files) == 1 && m->n_files >= 1 && m->n_files <= 1 << 20;
      if (ok) m->files = xcalloc((size_t)m->n_files, sizeof *m->files, "checkpoint files");
      have_files = 1;
    } else if (!strcmp(key, "file")) {
      ckpt_file_t f;
      ok = m->files && nfile < m->n_files &&
          sscanf(v, "%63s %" SCNd64 " %" SCNx64, f.name, &f.nbytes, &f.sum) == 3 && !strchr(f.name, '/');
      if (ok) m->files[nfile++] = f;
    }
    if (!ok) FAIL("%s: bad line '%.80s'", path, l);
  }
  /* The layout must be self-consistent, or reading it would go out of bounds. */
  if (m->version != 2 && m->version != 3) FAIL("%s: not a zerolab checkpoint of version 2 or 3", path);
  if (!m->model[0]) snprintf(m->model, sizeof m->model, "mlp"); /* version 2 recorded the MLP's shape only */
  if (m->tp < 1) m->tp = 1, m->tp_rank = 0;
  if (m->ep_tp < 1) m->ep_tp = 1; /* written only when > 1 */
  if (!m->units || nunit != m->n_units) FAIL("%s: %d unit lines, 'units' says %d", path, nunit, m->n_units);
  if (!m->pieces || npiece != m->n_pieces)
    FAIL("%s: %d piece lines, 'pieces' says %d", path, npiece, m->n_pieces);
  if (!m->files || nfile != m->n_files) FAIL("%s: %d file lines, 'files' says %d", path, nfile, m->n_files);
  if (m->shards < 1 || m->n_files != m->shards + 1)
    FAIL("%s: shards %d does not match %d files (one per shard + " LOSSES ")", path, m->shards, m->n_files);
  if (m->n_sections < 1) FAIL("%s: no sections line", path);
  int64_t psi = 0;
  for (int u = 0; u < m->n_units; u++) psi += m->units[u].numel;
  if (psi != m->psi)
    FAIL("%s: psi %lld does not add up from the units (%lld)", path, (long long)m->psi, (long long)psi);
  /* each file's pieces lie back to back, in the order listed: a section is their sum */
  m->section_numel = xcalloc((size_t)m->shards, sizeof *m->section_numel, "checkpoint sections");
  for (int k = 0; k < m->n_pieces; k++) {
    const ckpt_piece_t *x = &m->pieces[k];
    if (x->file < 0 || x->file >= m->shards || x->unit < 0 || x->unit >= m->n_units || x->off < 0 ||
        x->numel < 1 || x->at != m->section_numel[x->file])
      FAIL("%s: piece %d (file %d unit %d off %lld numel %lld at %lld): out of range or not back to back",
           path, k, x->file, x->unit, (long long)x->off, (long long)x->numel, (long long)x->at);
    m->section_numel[x->file] += x->numel;
  }
  for (int f = 0; f < m->shards; f++)
    if (m->files[f].nbytes != (int64_t)m->n_sections * m->section_numel[f] * 4 ||
        !strcmp(m->files[f].name, LOSSES))
      FAIL("%s: file %d (%s) should hold %d sections of %lld floats (its pieces): %lld bytes, says %lld",
           path, f, m->files[f].name, m->n_sections, (long long)m->section_numel[f],
           (long long)((int64_t)m->n_sections * m->section_numel[f] * 4), (long long)m->files[f].nbytes);
  if (strcmp(m->files[m->shards].name, LOSSES) || m->files[m->shards].nbytes != (int64_t)m->step * 16)
    FAIL("%s: the last file should be " LOSSES " of %lld bytes", path, (long long)m->step * 16);
  /* per unit, the pieces sorted by offset must tile [0, numel): every element in exactly one */
  qsort(m->pieces, (size_t)m->n_pieces, sizeof *m->pieces, cmp_piece);
  for (int k = 0, u = 0; u < m->n_units; u++) {
    ckpt_unit_t *x = &m->units[u];
    x->first = k;
    int64_t end = 0;
    for (; k < m->n_pieces && m->pieces[k].unit == u; k++) {
      if (m->pieces[k].off != end) break;
      end += m->pieces[k].numel;
    }
    x->n_pieces = k - x->first;
    if ((k < m->n_pieces && m->pieces[k].unit == u) || end < x->numel)
      FAIL("%s: unit %d: inconsistent layout (its pieces do not tile [0, %lld) without overlap)", path, u,
           (long long)x->numel);
  }
  free(text);
  return 0;
fail:
  free(text);
  ckpt_manifest_free(m);
  return 1;
}

int ckpt_verify_files(const ckpt_manifest_t *m, char *why, size_t nwhy) {
  char path[CKPT_PATH_MAX + 80];
  enum { CHUNK = 1 << 20 };
  char *buf = xmalloc(CHUNK, "checkpoint verify buffer");
  int rc = 0;
  for (int i = 0; i < m->n_files && !rc; i++) {
    const ckpt_file_t *f = &m->files[i];
    snprintf(path, sizeof path, "%s/%s", m->dir, f->name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
      snprintf(why, nwhy, "%s: missing (%s)", path, strerror(errno));
      rc = 1;
      break;
    }
    uint64_t h = CKPT_SUM_INIT;
    int64_t total = 0;
    for (;;) {
      ssize_t k = read(fd, buf, CHUNK);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      h = ckpt_sum(h, buf, (size_t)k);
      total += k;
    }
    close(fd);
    if (total != f->nbytes) {
      snprintf(why, nwhy, "%s: truncated or wrong size: %lld bytes, the manifest says %lld", path,
               (long long)total, (long long)f->nbytes);
      rc = 1;
    } else if (h != f->sum) {
      snprintf(why, nwhy, "%s: corrupted: checksum %016" PRIx64 ", the manifest says %016" PRIx64, path, h,
               f->sum);
      rc = 1;
    }
  }
  free(buf);
  return rc;
}

/* The --precision name of a working dtype, as the manifest records it: fp32, bf16, fp16. */

int ckpt_match_cfg(const ckpt_manifest_t *m, const train_cfg_t *c, char *why, size_t nwhy) {
  char path[CKPT_PATH_MAX + 32], diff[768] = "";
  size_t len = 0;
  int n = 0;
  snprintf(path, sizeof path, "%s/" MANIFEST, m->dir);
#define DIFF(...)                                                                                         \
  do {                                                                                                    \
    if (len < sizeof diff) len += (size_t)snprintf(diff + len, sizeof diff - len, "%s", n++ ? "; " : ""); \
    if (len < sizeof diff) len += (size_t)snprintf(diff + len, sizeof diff - len, __VA_ARGS__);           \
  } while (0)
  const char *prec = dtype_precision(c->wdt), *opt = c->optimizer == OPT_SGD ? "sgd" : "adamw";
  int gpt = strcmp(c->model_kind, "gpt") == 0;
  if (strcmp(m->model, c->model_kind) != 0) {
    DIFF("saved with --model %s, this run has --model %s", m->model, c->model_kind);
  } else {
    struct { const char *flag; long long ckpt, run;
    } mlp[] = {{"--layers", m->layers, c->layers},
               {"--hidden", m->hidden, c->hidden},
               {"--input", m->input, c->input},
               {"--classes", m->classes, c->classes}},
      gp[] = {{"--n-layer", m->gpt.n_layer, c->gpt.n_layer},
              {"--n-head", m->gpt.n_head, c->gpt.n_head},
              {"--n-embd", m->gpt.n_embd, c->gpt.n_embd},
              {"--seq-len", m->gpt.seq_len, c->gpt.seq_len},
              {"vocab", m->gpt.vocab, c->gpt.vocab}};
    for (int i = 0; i < (gpt ? 5 : 4); i++) {
      long long a = gpt ? gp[i].ckpt : mlp[i].ckpt, b = gpt ? gp[i].run : mlp[i].run;
      const char *f = gpt ? gp[i].flag : mlp[i].flag;
      if (a != b) DIFF("saved with %s %lld, this run has %s %lld", f, a, f, b);
    }
  }
  if (strcmp(m->precision, prec))
    DIFF("saved with --precision %s, this run has --precision %s", m->precision, prec);
  if (strcmp(m->optimizer, opt))
    DIFF("saved with --optimizer %s, this run has --optimizer %s", m->optimizer, opt);
  if (m->seed != c->seed)
    DIFF("saved with --seed %llu, this run has --seed %llu", (unsigned long long)m->seed,
         (unsigned long long)c->seed);
  if (m->batch != c->batch)
    DIFF("saved with --batch %lld, this run has --batch %lld", (long long)m->batch, (long long)c->batch);
  int group = c->group > 1 ? c->group : 1; /* the transform's group: --tp's, or chapter 12's --ep */
  if (m->tp > 1 && m->tp != group) {
    if (c->chapter_flags & TRAIN_FLAG_MOE)
      DIFF("an expert-parallel layout: EP rank %d's experts of a --ep %d save, this run has --ep %d (resume "
           "it with "
           "--ep %d)",
           m->tp_rank, m->tp, group, m->tp);
    else
      DIFF("a tensor-parallel layout: TP rank %d's slices of a --tp %d save, this run has --tp %d (resume it "
           "with --tp "
           "%d, or make it grid-free for any grid: zl_ckpt convert CKPT_DIR OUT)",
           m->tp_rank, m->tp, group, m->tp);
  }
  /* chapter 12: the experts change every MoE unit */
  int run_moe = (c->chapter_flags & TRAIN_FLAG_MOE) ? c->moe : 0;
  if (m->moe != run_moe || (run_moe && m->moe_every != c->moe_every)) {
    char saved[64], run[64];
    if (m->moe) snprintf(saved, sizeof saved, "--moe %d --moe-every %d", m->moe, m->moe_every);
    else snprintf(saved, sizeof saved, "a dense model (no experts)");
    if (run_moe) snprintf(run, sizeof run, "--moe %d --moe-every %d", run_moe, c->moe_every);
    else snprintf(run, sizeof run, "a dense model (ch12_experts resumes it)");
    DIFF("saved with %s, this run has %s", saved, run);
  }
  if (run_moe && (m->moe_ffn != c->moe_ffn || m->moe_shared != c->moe_shared))
    DIFF("saved with --expert-ffn %d --shared-experts %d, this run has --expert-ffn %d --shared-experts %d "
         "(0: 4C; resume it with the saved ones)",
         m->moe_ffn, m->moe_shared, c->moe_ffn, c->moe_shared);
  int mt = m->ep_tp > 1 ? m->ep_tp : 1, ct = (c->chapter_flags & TRAIN_FLAG_MOE) && c->tp > 1 ? c->tp : 1;
  if (m->tp > 1 && mt != ct) /* chapter 12: the local layouts differ */
    DIFF("saved with --tp %d inside each EP group of %d ranks, this run has --tp %d there (resume it with "
         "--tp %d; 1: "
         "without it)",
         mt, m->tp, ct, mt);
#undef DIFF
  if (n) {
    snprintf(why, nwhy, "%s: the checkpoint does not fit these flags (%d difference%s): %s", path, n,
             n > 1 ? "s" : "", diff);
    return 1;
  }
  if (m->step >= c->steps) {
    snprintf(why, nwhy,
             "%s: already at step %d; --steps %d leaves nothing to run (--steps counts from step 0)", path,
             m->step, c->steps);
    return 1;
  }
  int want_sections = c->optimizer == OPT_ADAMW ? 3 : 2;
  if (m->n_sections != want_sections || ckpt_section(m, "weights") != 0 || ckpt_section(m, "m") != 1) {
    snprintf(why, nwhy, "%s: sections do not hold weights and the %s state", path, opt);
    return 1;
  }
  return 0;
}

void ckpt_manifest_print(const ckpt_manifest_t *m) {
  printf("checkpoint %s\n", m->dir);
  printf("  strategy %s (stage %d) saved by %d rank%s; layout: %d shard%s\n", m->strategy, m->stage, m->world,
         m->world > 1 ? "s" : "", m->shards, m->shards > 1 ? "s" : "");
  if (strcmp(m->model, "gpt") == 0)
    printf("  model gpt n_layer=%d n_head=%d n_embd=%d seq_len=%d vocab=%d: psi %lld params in %d pieces\n",
           m->gpt.n_layer, m->gpt.n_head, m->gpt.n_embd, m->gpt.seq_len, m->gpt.vocab, (long long)m->psi,
           m->n_pieces);
  else
    printf("  model mlp D=%d H=%d C=%d L=%d: psi %lld params in %d pieces\n", m->input, m->hidden, m->classes,
           m->layers, (long long)m->psi, m->n_pieces);
  if (m->tp > 1 && m->moe > 0)
    printf("  expert-parallel layout: EP rank %d of --ep %d (its %d of the %d experts of every MoE block, "
           "with the dense weights)\n",
           m->tp_rank, m->tp, m->moe / m->tp, m->moe);
  else if (m->tp > 1)
    printf("  tensor-parallel layout: TP rank %d of --tp %d (its slices of every split unit)\n", m->tp_rank,
           m->tp);
  if (m->moe > 0)
    printf("  Mixture of Experts (chapter 12): --moe %d --moe-every %d --expert-ffn %d --shared-experts %d\n",
           m->moe, m->moe_every, m->moe_ffn, m->moe_shared);
  if (m->ep_tp > 1)
    printf("  chapter 12: that group is an EP group with --tp %d inside it (ch12_experts --ep %d --tp %d)\n",
           m->ep_tp, m->tp, m->ep_tp);
  printf("  precision %s, optimizer %s, seed %llu, global batch %lld\n", m->precision, m->optimizer,
         (unsigned long long)m->seed, (long long)m->batch);
  printf("  after step %d: data position %lld samples, optimizer step t = %d, %d skipped\n", m->step,
         (long long)m->data_position, m->opt_t, m->skipped);
  printf("  rng: none (sample i and the init are pure functions of the seed and i)\n");
  printf("  sections:");
  for (int s = 0; s < m->n_sections; s++) printf(" %s", m->sections[s]);
  printf("\n  units (in out numel) and their pieces (file: [off, off+numel) at):\n");
  for (int u = 0; u < m->n_units; u++) {
    const ckpt_unit_t *x = &m->units[u];
    printf("    %d: %d %d %lld:", u, x->in, x->out, (long long)x->numel);
    for (int k = x->first; k < x->first + x->n_pieces; k++) {
      const ckpt_piece_t *q = &m->pieces[k];
      printf(" %d:[%lld,%lld)@%lld", q->file, (long long)q->off, (long long)(q->off + q->numel),
             (long long)q->at);
    }
    printf("\n");
  }
  printf("  files (bytes fnv1a64):\n");
  for (int i = 0; i < m->n_files; i++)
    printf("    %s %lld %016" PRIx64 "\n", m->files[i].name, (long long)m->files[i].nbytes, m->files[i].sum);
}

/* ---- reading any layout: the resharding --------------------------------------------------- */

void ckpt_read_range(ckpt_reader_t *r, int sec, int u, int64_t lo, int64_t hi, float *dst) {
  const ckpt_manifest_t *m = r->m;
  if (!r->fds) {
    r->fds = xmalloc((size_t)m->shards * sizeof(int), "checkpoint reader");
    for (int i = 0; i < m->shards; i++) r->fds[i] = -1;
  }
  const ckpt_unit_t *x = u >= 0 && u < m->n_units ? &m->units[u] : NULL;
  if (!x || lo < 0 || hi > x->numel || sec < 0 || sec >= m->n_sections)
    die_on_rank("ckpt_read_range: [%lld, %lld) of unit %d section %d is out of range", (long long)lo,
        (long long)hi, u, sec);
  for (int k = x->first; k < x->first + x->n_pieces && lo < hi; k++) {
    const ckpt_piece_t *q = &m->pieces[k]; /* sorted by off: the pieces tile the unit */
    int64_t a = lo > q->off ? lo : q->off, b = hi < q->off + q->numel ? hi : q->off + q->numel;
    if (a >= b) continue;
    char path[CKPT_PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s", m->dir, m->files[q->file].name);
    if (r->fds[q->file] < 0 && (r->fds[q->file] = open(path, O_RDONLY)) < 0)
      die_on_rank("checkpoint: cannot open %s: %s", path, strerror(errno));
    off_t at = (off_t)(((int64_t)sec * m->section_numel[q->file] + q->at + (a - q->off)) * 4);
    size_t want = (size_t)(b - a) * 4, got = 0;
    while (got < want) {
      ssize_t n = pread(r->fds[q->file], (char *)(dst + (a - lo)) + got, want - got, at + (off_t)got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        die_on_rank("checkpoint: %s: short read at byte %lld (truncated?)", path, (long long)(at + got));
      got += (size_t)n;
    }
  }
}

void ckpt_reader_close(ckpt_reader_t *r) {
  if (r->fds)
    for (int i = 0; i < r->m->shards; i++)
      if (r->fds[i] >= 0) close(r->fds[i]);
  free(r->fds);
  r->fds = NULL;
}

static int cmp_desc(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x < y) - (x > y);
}

/* Keep the two newest step directories (and `keep`), delete the rest. */
static void prune(const char *dir, int keep) {
  DIR *d = opendir(dir);
  if (!d) return;
  int nums[4096], n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 4096) {
    int k;
    char tail;
    if (strlen(e->d_name) == 11 && sscanf(e->d_name, "step-%6d%c", &k, &tail) == 1) nums[n++] = k;
  }
  closedir(d);
  qsort(nums, (size_t)n, sizeof *nums, cmp_desc);
  for (int i = 2; i < n; i++) {
    if (nums[i] == keep) continue;
    char path[CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/step-%06d", dir, nums[i]);
    ckpt_rm_tree(path);
  }
}

/* The manifest's text (the inverse of ckpt_manifest_read), its own checksum last. malloc'd. */
static char *manifest_text(const ckpt_manifest_t *m, size_t *out_len) {
  size_t cap = 4096 + (size_t)m->n_units * 96 + (size_t)m->n_pieces * 96 + (size_t)m->n_files * 96, len = 0;
  char *txt = xmalloc(cap, "checkpoint manifest");
#define EMIT(...) len += (size_t)snprintf(txt + len, cap - len, __VA_ARGS__)
  /* stage: what the report's formula was; informative only (the pieces say where things are) */
  EMIT("zerolab-checkpoint %d\nstrategy %s\nstage %d\nworld %d\nshards %d\n", m->version, m->strategy,
       m->stage, m->world, m->shards);
  EMIT("precision %s\noptimizer %s\nmodel %s\n", m->precision, m->optimizer, m->model);
  if (strcmp(m->model, "gpt") == 0)
    EMIT("n_layer %d\nn_head %d\nn_embd %d\nseq_len %d\nvocab %d\n", m->gpt.n_layer, m->gpt.n_head,
         m->gpt.n_embd, m->gpt.seq_len, m->gpt.vocab);
  EMIT("tp %d %d\n", m->tp, m->tp_rank);
  if (m->ep_tp > 1) EMIT("ep_tp %d\n", m->ep_tp);
  if (m->moe > 0) EMIT("moe %d %d\n", m->moe, m->moe_every);
  if (m->moe > 0) EMIT("moe_experts %d %d\n", m->moe_ffn, m->moe_shared);
  EMIT("input %d\nhidden %d\nclasses %d\nlayers %d\nseed %llu\nbatch %lld\n", m->input, m->hidden, m->classes,
       m->layers, (unsigned long long)m->seed, (long long)m->batch);
  EMIT("psi %lld\nunits %d\n", (long long)m->psi, m->n_units);
  for (int u = 0; u < m->n_units; u++)
    EMIT("unit %d %d %d %lld\n", u, m->units[u].in, m->units[u].out, (long long)m->units[u].numel);
  EMIT("pieces %d\n", m->n_pieces); /* file unit off numel at */
  for (int k = 0; k < m->n_pieces; k++) {
    const ckpt_piece_t *q = &m->pieces[k];
    EMIT("piece %d %d %lld %lld %lld\n", q->file, q->unit, (long long)q->off, (long long)q->numel,
         (long long)q->at);
  }
  EMIT("step %d\ndata_position %lld\nopt_t %d\nskipped %d\n", m->step, (long long)m->data_position, m->opt_t,
       m->skipped);
  if (m->has_scaler) /* fp16: the loss scale exactly (hex float), the growth tracker, the overflows so far */
    EMIT("scaler %a %d %d\n", (double)m->loss_scale, m->growth_tracker, m->overflows);
  EMIT("rng none (data sample i and the init are pure functions of the seed and i)\n");
  EMIT("sections");
  for (int s = 0; s < m->n_sections; s++) EMIT(" %s", s == 0 ? "weights" : s == 1 ? "m" : "v");
  EMIT("\nfiles %d\n", m->n_files);
  for (int f = 0; f < m->n_files; f++)
    EMIT("file %s %lld %016" PRIx64 "\n", m->files[f].name, (long long)m->files[f].nbytes, m->files[f].sum);
  if (len + 40 >= cap) die("rank 0: checkpoint manifest longer than %zu bytes", cap);
  EMIT("checksum %016" PRIx64 "\n", ckpt_sum(CKPT_SUM_INIT, txt, len));
#undef EMIT
  *out_len = len;
  return txt;
}

/* The last part of every save: partial/manifest.txt from m, then the directory renamed to
 * dir/step-NNNNNN (m->step), then dir/latest rewritten, then older steps pruned. */
void ckpt_publish(const char *dir, const char *partial, const ckpt_manifest_t *m) {
  char path[CKPT_PATH_MAX + 64], final_dir[CKPT_PATH_MAX + 32];
  snprintf(final_dir, sizeof final_dir, "%s/step-%06d", dir, m->step);
  size_t len = 0;
  char *txt = manifest_text(m, &len);
  snprintf(path, sizeof path, "%s/" MANIFEST, partial);
  ckpt_write_atomic(path, txt, (int64_t)len);
  free(txt);
  fsync_dir(partial);
  /* publish: the complete directory under its name, then `latest` */
  if (is_dir(final_dir)) { /* an older save of the same step (a rerun): move it away first */
    char old[CKPT_PATH_MAX + 64];
    snprintf(old, sizeof old, "%s/.step-%06d.old-%d", dir, m->step, (int)getpid());
    if (rename(final_dir, old) != 0)
      die("rank 0: checkpoint: rename %s failed: %s", final_dir, strerror(errno));
    if (rename(partial, final_dir) != 0)
      die("rank 0: checkpoint: rename %s failed: %s", partial, strerror(errno));
    ckpt_rm_tree(old);
  } else if (rename(partial, final_dir) != 0) {
    die("rank 0: checkpoint: rename %s -> %s failed: %s", partial, final_dir, strerror(errno));
  }
  fsync_dir(dir);
  char line[32];
  int n = snprintf(line, sizeof line, "step-%06d\n", m->step);
  snprintf(path, sizeof path, "%s/latest", dir);
  ckpt_write_atomic(path, line, n);
  fsync_dir(dir);
  prune(dir, m->step);
}
