/* ckpt.c — checkpoints: atomic save, verification, resume with resharding (see ckpt.h).
 * Notes: notes/reliability.md ("Checkpoints").
 *
 * The one idea: every checkpoint stores each model state (fp32 weights, Adam m and v) in the
 * shard layout of solutions/zero.h — unit after unit, rank r's piece of each. Whatever layout a
 * checkpoint has (N ranks of ZeRO, or DDP's single owner), element i of unit u lives in piece
 * i / piece_u, at offset shard_off_u + i % piece_u of that piece's file. ckpt_read_range uses
 * exactly that to hand any rank of any new layout its own pieces: resharding is an index
 * computation, no full copy of the model is ever assembled on a rank (except by DDP, which
 * holds the full model anyway). */
#include "ckpt.h"   // ckpt_manifest_t, ckpt_*
#include "check.h"  // die, xmalloc, xcalloc
#include "comm.h"   // comm_barrier, comm_ctl_gather, comm_ctl_broadcast, comm_wait_all
#include "device.h" // dev_memcpy, dev_sync
#include "fault.h"  // fault_in_save (--fault R:S:ckpt)
#include "ops.h"    // op_cast
#include <dirent.h> // opendir, readdir
#include <errno.h>  // errno
#include <fcntl.h>  // open, O_*
#include <ftw.h>    // nftw (removing an old checkpoint directory)
#include <inttypes.h> // PRIx64, SCNx64
#include <stdio.h>  // snprintf, fopen, printf
#include <stdlib.h> // free, qsort
#include <string.h> // strcmp, strerror, strncmp
#include <sys/stat.h> // mkdir, stat
#include <unistd.h> // pread, write, fsync, close, getpid

#define MANIFEST "manifest.txt"
#define LOSSES "losses.bin"

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
static char *slurp(const char *path, int64_t *nbytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  int64_t len = 0, cap = 0;
  for (;;) {
    if (cap - len < 65536) {
      cap = cap ? 2 * cap : 65536;
      buf = realloc(buf, (size_t)cap + 1);
      if (!buf) die("out of memory on rank %d: reading %s needs %.1f MiB", check_rank(), path, cap / 1048576.0);
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
static void write_atomic(const char *path, const void *bytes, int64_t n) {
  char tmp[CKPT_PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("rank %d: checkpoint: cannot create %s: %s", check_rank(), tmp, strerror(errno));
  const char *p = bytes;
  for (int64_t done = 0; done < n;) {
    ssize_t k = write(fd, p + done, (size_t)(n - done > (1 << 30) ? (1 << 30) : n - done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("rank %d: checkpoint: writing %s failed: %s", check_rank(), tmp, strerror(errno));
    done += k;
  }
  if (fsync(fd) != 0) die("rank %d: checkpoint: fsync %s failed: %s", check_rank(), tmp, strerror(errno));
  close(fd);
  if (rename(tmp, path) != 0) die("rank %d: checkpoint: rename %s -> %s failed: %s", check_rank(), tmp, path, strerror(errno));
}

static void fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  fsync(fd); /* the renames inside are durable */
  close(fd);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) { return remove(path); }
/* rm -rf of a directory this module created (a checkpoint step or a partial one). */
static void rm_tree(const char *path) {
  struct stat sb;
  if (stat(path, &sb) == 0) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- the manifest ------------------------------------------------------------------------- */

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
  char *latest = slurp(path, NULL);
  if (!latest) {
    snprintf(why, nwhy, "%s: missing (no complete checkpoint in %s, and it holds no " MANIFEST ")", path, where);
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
  m->units = NULL;
  m->files = NULL;
}

int ckpt_section(const ckpt_manifest_t *m, const char *name) {
  for (int s = 0; s < m->n_sections; s++)
    if (strcmp(m->sections[s], name) == 0) return s;
  return -1;
}

#define FAIL(...) do { snprintf(why, nwhy, __VA_ARGS__); goto fail; } while (0)

int ckpt_manifest_read(const char *stepdir, ckpt_manifest_t *m, char *why, size_t nwhy) {
  memset(m, 0, sizeof *m);
  snprintf(m->dir, sizeof m->dir, "%s", stepdir);
  char path[CKPT_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" MANIFEST, stepdir);
  int64_t len = 0;
  char *text = slurp(path, &len);
  if (!text) FAIL("%s: missing or unreadable (the save did not complete?)", path);
  /* The last line checksums everything before it. */
  char *ck = strstr(text, "\nchecksum ");
  uint64_t want = 0;
  if (!ck || sscanf(ck + 10, "%" SCNx64, &want) != 1) FAIL("%s: truncated (no checksum line at the end)", path);
  uint64_t got = ckpt_sum(CKPT_SUM_INIT, text, (size_t)(ck + 1 - text));
  if (got != want) FAIL("%s: corrupted (checksum %016" PRIx64 ", its last line says %016" PRIx64 ")", path, got, want);
  int nunit = 0, nfile = 0, have_units = 0, have_files = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    char key[32];
    if (sscanf(l, "%31s", key) != 1) continue;
    const char *v = l + strlen(key);
    int ok = 1;
    if (!strcmp(key, "zerolab-checkpoint")) ok = sscanf(v, "%d", &m->version) == 1;
    else if (!strcmp(key, "strategy")) ok = sscanf(v, "%31s", m->strategy) == 1;
    else if (!strcmp(key, "stage")) ok = sscanf(v, "%d", &m->stage) == 1;
    else if (!strcmp(key, "world")) ok = sscanf(v, "%d", &m->world) == 1;
    else if (!strcmp(key, "layout_world")) ok = sscanf(v, "%d", &m->layout_world) == 1;
    else if (!strcmp(key, "precision")) ok = sscanf(v, "%7s", m->precision) == 1;
    else if (!strcmp(key, "optimizer")) ok = sscanf(v, "%7s", m->optimizer) == 1;
    else if (!strcmp(key, "input")) ok = sscanf(v, "%d", &m->input) == 1;
    else if (!strcmp(key, "hidden")) ok = sscanf(v, "%d", &m->hidden) == 1;
    else if (!strcmp(key, "classes")) ok = sscanf(v, "%d", &m->classes) == 1;
    else if (!strcmp(key, "layers")) ok = sscanf(v, "%d", &m->layers) == 1;
    else if (!strcmp(key, "seed")) ok = sscanf(v, "%" SCNu64, &m->seed) == 1;
    else if (!strcmp(key, "batch")) ok = sscanf(v, "%" SCNd64, &m->batch) == 1;
    else if (!strcmp(key, "psi")) ok = sscanf(v, "%" SCNd64, &m->psi) == 1;
    else if (!strcmp(key, "padded_numel")) ok = sscanf(v, "%" SCNd64, &m->padded_numel) == 1;
    else if (!strcmp(key, "shard_numel")) ok = sscanf(v, "%" SCNd64, &m->shard_numel) == 1;
    else if (!strcmp(key, "step")) ok = sscanf(v, "%d", &m->step) == 1;
    else if (!strcmp(key, "data_position")) ok = sscanf(v, "%" SCNd64, &m->data_position) == 1;
    else if (!strcmp(key, "opt_t")) ok = sscanf(v, "%d", &m->opt_t) == 1;
    else if (!strcmp(key, "skipped")) ok = sscanf(v, "%d", &m->skipped) == 1;
    else if (!strcmp(key, "units")) {
      ok = !have_units && sscanf(v, "%d", &m->n_units) == 1 && m->n_units >= 2 && m->n_units <= 257;
      if (ok) m->units = xcalloc((size_t)m->n_units, sizeof *m->units, "checkpoint units");
      have_units = 1;
    } else if (!strcmp(key, "unit")) {
      int u;
      ckpt_unit_t x;
      ok = m->units && nunit < m->n_units &&
           sscanf(v, "%d %d %d %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64, &u, &x.in, &x.out, &x.numel, &x.padded,
                  &x.piece, &x.shard_off) == 7 && u == nunit;
      if (ok) m->units[nunit++] = x;
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
      ok = m->files && nfile < m->n_files && sscanf(v, "%63s %" SCNd64 " %" SCNx64, f.name, &f.nbytes, &f.sum) == 3 &&
           !strchr(f.name, '/');
      if (ok) m->files[nfile++] = f;
    }
    if (!ok) FAIL("%s: bad line '%.80s'", path, l);
  }
  /* The layout must be self-consistent, or reading it would go out of bounds. */
  if (m->version != 1) FAIL("%s: not a zerolab checkpoint of version 1", path);
  if (!m->units || nunit != m->n_units) FAIL("%s: %d unit lines, 'units' says %d", path, nunit, m->n_units);
  if (!m->files || nfile != m->n_files) FAIL("%s: %d file lines, 'files' says %d", path, nfile, m->n_files);
  if (m->layout_world < 1 || m->n_files != m->layout_world + 1)
    FAIL("%s: layout_world %d does not match %d files (one per shard + " LOSSES ")", path, m->layout_world, m->n_files);
  if (m->n_sections < 1) FAIL("%s: no sections line", path);
  int64_t psi = 0, padded = 0, shard = 0;
  for (int u = 0; u < m->n_units; u++) {
    const ckpt_unit_t *x = &m->units[u];
    if (x->numel != (int64_t)x->in * x->out + x->out || x->padded < x->numel || x->padded % m->layout_world ||
        x->piece != x->padded / m->layout_world || x->shard_off != shard)
      FAIL("%s: unit %d: inconsistent layout (numel %lld, padded %lld, piece %lld, shard_off %lld for %d shards)", path, u,
           (long long)x->numel, (long long)x->padded, (long long)x->piece, (long long)x->shard_off, m->layout_world);
    psi += x->numel;
    padded += x->padded;
    shard += x->piece;
  }
  if (psi != m->psi || padded != m->padded_numel || shard != m->shard_numel)
    FAIL("%s: psi/padded_numel/shard_numel %lld/%lld/%lld do not add up from the units (%lld/%lld/%lld)", path,
         (long long)m->psi, (long long)m->padded_numel, (long long)m->shard_numel, (long long)psi, (long long)padded,
         (long long)shard);
  for (int r = 0; r < m->layout_world; r++) {
    char want_name[64];
    snprintf(want_name, sizeof want_name, "rank-%05d.bin", r);
    if (strcmp(m->files[r].name, want_name) || m->files[r].nbytes != (int64_t)m->n_sections * m->shard_numel * 4)
      FAIL("%s: file %d should be %s of %lld bytes, says %s of %lld", path, r, want_name,
           (long long)((int64_t)m->n_sections * m->shard_numel * 4), m->files[r].name, (long long)m->files[r].nbytes);
  }
  if (strcmp(m->files[m->layout_world].name, LOSSES) || m->files[m->layout_world].nbytes != (int64_t)m->step * 16)
    FAIL("%s: the last file should be " LOSSES " of %lld bytes", path, (long long)m->step * 16);
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
      snprintf(why, nwhy, "%s: truncated or wrong size: %lld bytes, the manifest says %lld", path, (long long)total,
               (long long)f->nbytes);
      rc = 1;
    } else if (h != f->sum) {
      snprintf(why, nwhy, "%s: corrupted: checksum %016" PRIx64 ", the manifest says %016" PRIx64, path, h, f->sum);
      rc = 1;
    }
  }
  free(buf);
  return rc;
}

int ckpt_match_cfg(const ckpt_manifest_t *m, const train_cfg_t *c, char *why, size_t nwhy) {
  char path[CKPT_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" MANIFEST, m->dir);
  const char *prec = c->wdt == DT_BF16 ? "bf16" : "fp32", *opt = c->optimizer == OPT_SGD ? "sgd" : "adamw";
  struct { const char *flag; long long ckpt, run; } nums[] = {
      {"--input", m->input, c->input}, {"--hidden", m->hidden, c->hidden}, {"--classes", m->classes, c->classes},
      {"--layers", m->layers, c->layers}, {"--seed", (long long)m->seed, (long long)c->seed},
      {"--batch", m->batch, c->batch}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
    if (nums[i].ckpt != nums[i].run) {
      snprintf(why, nwhy, "%s: saved with %s %lld, this run has %s %lld (the checkpoint does not fit these flags)", path,
               nums[i].flag, nums[i].ckpt, nums[i].flag, nums[i].run);
      return 1;
    }
  if (strcmp(m->precision, prec)) {
    snprintf(why, nwhy, "%s: saved with --precision %s, this run has --precision %s", path, m->precision, prec);
    return 1;
  }
  if (strcmp(m->optimizer, opt)) {
    snprintf(why, nwhy, "%s: saved with --optimizer %s, this run has --optimizer %s", path, m->optimizer, opt);
    return 1;
  }
  if (m->step >= c->steps) {
    snprintf(why, nwhy, "%s: already at step %d; --steps %d leaves nothing to run (--steps counts from step 0)", path,
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
         m->world > 1 ? "s" : "", m->layout_world, m->layout_world > 1 ? "s" : "");
  printf("  model D=%d H=%d C=%d L=%d: psi %lld params, padded %lld, %lld floats per shard section\n", m->input, m->hidden,
         m->classes, m->layers, (long long)m->psi, (long long)m->padded_numel, (long long)m->shard_numel);
  printf("  precision %s, optimizer %s, seed %llu, global batch %lld\n", m->precision, m->optimizer,
         (unsigned long long)m->seed, (long long)m->batch);
  printf("  after step %d: data position %lld samples, optimizer step t = %d, %d skipped\n", m->step,
         (long long)m->data_position, m->opt_t, m->skipped);
  printf("  rng: none (sample i and the init are pure functions of the seed and i)\n");
  printf("  sections:");
  for (int s = 0; s < m->n_sections; s++) printf(" %s", m->sections[s]);
  printf("\n  units (in out numel padded piece shard_off):\n");
  for (int u = 0; u < m->n_units; u++) {
    const ckpt_unit_t *x = &m->units[u];
    printf("    %d: %d %d %lld %lld %lld %lld\n", u, x->in, x->out, (long long)x->numel, (long long)x->padded,
           (long long)x->piece, (long long)x->shard_off);
  }
  printf("  files (bytes fnv1a64):\n");
  for (int i = 0; i < m->n_files; i++)
    printf("    %s %lld %016" PRIx64 "\n", m->files[i].name, (long long)m->files[i].nbytes, m->files[i].sum);
}

/* ---- reading any layout: the resharding --------------------------------------------------- */

void ckpt_read_range(ckpt_reader_t *r, int sec, int u, int64_t lo, int64_t hi, float *dst) {
  const ckpt_manifest_t *m = r->m;
  if (!r->fds) {
    r->fds = xmalloc((size_t)m->layout_world * sizeof(int), "checkpoint reader");
    for (int i = 0; i < m->layout_world; i++) r->fds[i] = -1;
  }
  const ckpt_unit_t *x = &m->units[u];
  if (lo < 0 || hi > x->numel || sec < 0 || sec >= m->n_sections)
    die("rank %d: ckpt_read_range: [%lld, %lld) of unit %d section %d is out of range", check_rank(), (long long)lo,
        (long long)hi, u, sec);
  for (int64_t i = lo; i < hi;) {
    int q = (int)(i / x->piece);                           /* the shard holding element i */
    int64_t within = i - (int64_t)q * x->piece;            /* its place in that piece */
    int64_t n = (int64_t)(q + 1) * x->piece < hi ? (int64_t)(q + 1) * x->piece - i : hi - i;
    char path[CKPT_PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s", m->dir, m->files[q].name);
    if (r->fds[q] < 0 && (r->fds[q] = open(path, O_RDONLY)) < 0)
      die("rank %d: checkpoint: cannot open %s: %s", check_rank(), path, strerror(errno));
    off_t at = (off_t)(((int64_t)sec * m->shard_numel + x->shard_off + within) * 4);
    size_t want = (size_t)n * 4, got = 0;
    while (got < want) {
      ssize_t k = pread(r->fds[q], (char *)(dst + (i - lo)) + got, want - got, at + (off_t)got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) die("rank %d: checkpoint: %s: short read at byte %lld (truncated?)", check_rank(), path, (long long)(at + got));
      got += (size_t)k;
    }
    i += n;
  }
}

void ckpt_reader_close(ckpt_reader_t *r) {
  if (r->fds)
    for (int i = 0; i < r->m->layout_world; i++)
      if (r->fds[i] >= 0) close(r->fds[i]);
  free(r->fds);
  r->fds = NULL;
}

/* ---- the trainer's side -------------------------------------------------------------------- */

/* This rank's piece of unit u in the run's layout: unit-local [lo, lo+n). DDP (stage 0) owns
 * every unit whole; ZeRO rank r piece r. */
static void own_piece(const trainer_t *t, const unit_t *un, int64_t *lo, int64_t *n) {
  int sharded = t->strategy->stage > 0;
  *lo = sharded ? (int64_t)t->rank * un->piece : 0;
  *n = sharded ? un->piece : un->padded;
}

/* Where the fp32 weights of this rank's piece of unit u live: the master (bf16 mode) or the
 * params: full buffer in DDP and ZeRO-1/2 (at the piece's place), the shard in ZeRO-3. */
static float *weights_at(trainer_t *t, const unit_t *un) {
  if (t->wdt != DT_F32) return (float *)t->master.data + un->shard_off;
  int stage = t->strategy->stage;
  if (stage == 0) return (float *)t->params.data + un->off;
  if (stage == 3) return (float *)t->params.data + un->shard_off;
  return (float *)t->params.data + un->off + (int64_t)t->rank * un->piece;
}

/* host fp32 -> dst (dt, on t->dev). */
static void upload(trainer_t *t, void *dst, dtype_t dt, const float *host, int64_t n) {
  if (n <= 0) return;
  if (t->dev == DEV_CPU) {
    op_cast(DEV_CPU, dst, dt, host, DT_F32, n);
    return;
  }
  void *tmp = xmalloc((size_t)n * dtype_size(dt), "checkpoint upload");
  op_cast(DEV_CPU, tmp, dt, host, DT_F32, n);
  dev_memcpy(t->dev, dst, DEV_CPU, tmp, (size_t)n * dtype_size(dt));
  free(tmp);
}

/* Unit-local [lo, lo+n) of unit u, section sec, into host dst: the part past numel is pad (0). */
static void read_piece(ckpt_reader_t *r, int sec, int u, int64_t lo, int64_t n, float *dst) {
  int64_t numel = r->m->units[u].numel, hi = lo + n < numel ? lo + n : numel;
  memset(dst, 0, (size_t)n * sizeof(float));
  if (hi > lo) ckpt_read_range(r, sec, u, lo, hi, dst);
}

int ckpt_open_resume(trainer_t *t, const char *where, ckpt_manifest_t *m) {
  char why[1024] = "";
  char stepdir[CKPT_PATH_MAX];
  if (t->rank == 0) { /* one reader checks everything; the verdict goes to all */
    if (!ckpt_resolve(where, stepdir, sizeof stepdir, why, sizeof why) &&
        !ckpt_manifest_read(stepdir, m, why, sizeof why)) {
      if (!ckpt_match_cfg(m, t->cfg, why, sizeof why)) ckpt_verify_files(m, why, sizeof why);
      ckpt_manifest_free(m);
    }
  }
  comm_ctl_broadcast(t->comm, why, sizeof why, 0);
  if (why[0]) {
    if (t->rank == 0) {
      fprintf(stderr, "error: --resume %s: %s; nothing was run or written\n", where, why);
      fflush(stderr);
    }
    return 2;
  }
  comm_ctl_broadcast(t->comm, stepdir, sizeof stepdir, 0);
  if (ckpt_manifest_read(stepdir, m, why, sizeof why)) die("rank %d: --resume %s: %s", t->rank, where, why);
  return 0;
}

void ckpt_restore(trainer_t *t, const ckpt_manifest_t *m, report_step_t *losses) {
  const model_t *md = &t->model;
  int stage = t->strategy->stage, full_params = stage <= 2; /* params the full buffer: DDP, ZeRO-1/2 */
  ckpt_reader_t r = {.m = m};
  float *buf = xmalloc((size_t)md->max_unit_padded * sizeof(float), "checkpoint restore buffer");
  dev_sync(t->dev);
  for (int u = 0; u < md->n_units; u++) {
    const unit_t *un = &md->units[u];
    int64_t lo, n;
    own_piece(t, un, &lo, &n);
    /* weights: the fp32 truth of the own piece, and the working params from it */
    if (full_params && stage > 0) { /* ZeRO-1/2 hold the full working params: read the whole unit */
      read_piece(&r, 0, u, 0, un->padded, buf);
      upload(t, tensor_at(&t->params, un->off), t->wdt, buf, un->padded);
      if (t->wdt != DT_F32) upload(t, weights_at(t, un), DT_F32, buf + lo, n);
    } else {
      read_piece(&r, 0, u, lo, n, buf);
      upload(t, weights_at(t, un), DT_F32, buf, n);
      if (t->wdt != DT_F32) /* bf16 working params = bf16(master), as after every step */
        upload(t, tensor_at(&t->params, stage == 0 ? un->off : un->shard_off), t->wdt, buf, n);
    }
    /* optimizer states of the own piece */
    for (int s = 1; s < m->n_sections; s++) {
      tensor_t *st = s == 1 ? &t->opt_m : &t->opt_v;
      if (!st->data) die("rank %d: checkpoint: section %s has no optimizer state to go to", t->rank, m->sections[s]);
      read_piece(&r, s, u, lo, n, buf);
      upload(t, (float *)st->data + un->shard_off, DT_F32, buf, n);
    }
  }
  ckpt_reader_close(&r);
  free(buf);
  /* losses of the steps before, for the report and --json */
  char path[CKPT_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" LOSSES, m->dir);
  int64_t nb = 0;
  char *lb = slurp(path, &nb);
  if (!lb || nb != (int64_t)m->step * 16) die("rank %d: checkpoint: %s unreadable or the wrong size", t->rank, path);
  for (int s = 0; s < m->step; s++) {
    double v[2];
    memcpy(v, lb + (int64_t)s * 16, 16);
    losses[s] = (report_step_t){.loss = v[0], .ms = v[1]};
  }
  free(lb);
  t->opt_t = m->opt_t;
  dev_sync(t->dev);
  if (t->rank == 0 && !t->cfg->quiet) {
    printf("resumed from %s: %s on %d rank%s (layout of %d shard%s) -> %s on %d; continuing at step %d (optimizer t = %d)\n",
           m->dir, m->strategy, m->world, m->world > 1 ? "s" : "", m->layout_world, m->layout_world > 1 ? "s" : "",
           t->strategy->name, t->world, m->step, m->opt_t);
    fflush(stdout);
  }
}

int ckpt_due(const train_cfg_t *cfg, int step) {
  if (!cfg->ckpt) return 0;
  if (step == cfg->steps - 1) return 1;
  return cfg->save_every > 0 && (step + 1) % cfg->save_every == 0;
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
    rm_tree(path);
  }
}

typedef struct { int64_t nbytes; uint64_t sum; } file_stat_t;

void ckpt_save(trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped, const report_step_t *losses) {
  const model_t *md = &t->model;
  int stage = t->strategy->stage, writes = stage > 0 || t->rank == 0; /* DDP: rank 0 holds it all */
  int layout_world = stage > 0 ? t->world : 1;
  int nsec = t->cfg->optimizer == OPT_ADAMW ? 3 : 2;
  char partial[CKPT_PATH_MAX + 32], final_dir[CKPT_PATH_MAX + 32], path[CKPT_PATH_MAX + 64];
  snprintf(partial, sizeof partial, "%s/.step-%06d.partial", dir, steps_done);
  snprintf(final_dir, sizeof final_dir, "%s/step-%06d", dir, steps_done);
  comm_wait_all(t->comm); /* ZeRO-1/2's param all-gathers of this step finish first */
  dev_sync(t->dev);
  if (t->rank == 0) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("rank 0: --ckpt %s: cannot create it: %s", dir, strerror(errno));
    rm_tree(partial); /* left by a crash during an earlier save */
    if (mkdir(partial, 0755) != 0) die("rank 0: --ckpt: cannot create %s: %s", partial, strerror(errno));
  }
  comm_barrier(t->comm);

  file_stat_t mine = {0, CKPT_SUM_INIT};
  if (writes) { /* sections back to back, each the own pieces unit after unit */
    int64_t sn = md->shard_numel;
    float *host = xmalloc((size_t)(nsec * sn) * sizeof(float) + 1, "checkpoint shard (host)");
    for (int u = 0; u < md->n_units; u++) {
      const unit_t *un = &md->units[u];
      int64_t lo, n;
      own_piece(t, un, &lo, &n);
      dev_memcpy(DEV_CPU, host + un->shard_off, t->dev, weights_at(t, un), (size_t)n * sizeof(float));
      for (int s = 1; s < nsec; s++) {
        const tensor_t *st = s == 1 ? &t->opt_m : &t->opt_v;
        dev_memcpy(DEV_CPU, host + (int64_t)s * sn + un->shard_off, t->dev, (const float *)st->data + un->shard_off,
                   (size_t)n * sizeof(float));
      }
    }
    mine.nbytes = (int64_t)nsec * sn * (int64_t)sizeof(float);
    mine.sum = ckpt_sum(CKPT_SUM_INIT, host, (size_t)mine.nbytes);
    snprintf(path, sizeof path, "%s/rank-%05d.bin", partial, t->rank);
    write_atomic(path, host, mine.nbytes);
    free(host);
  }
  fault_in_save(t->rank, steps_done - 1); /* --fault R:S:ckpt: die between the shards and the manifest */

  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(t->comm, &mine, sizeof mine, &all, &sizes);
  if (t->rank == 0) {
    file_stat_t *fs = (file_stat_t *)all;
    /* losses.bin: (loss, ms) doubles of every step so far */
    double *lb = xmalloc((size_t)steps_done * 16 + 1, "checkpoint losses");
    for (int s = 0; s < steps_done; s++) {
      lb[2 * s] = losses[s].loss;
      lb[2 * s + 1] = losses[s].ms;
    }
    uint64_t lsum = ckpt_sum(CKPT_SUM_INIT, lb, (size_t)steps_done * 16);
    snprintf(path, sizeof path, "%s/" LOSSES, partial);
    write_atomic(path, lb, (int64_t)steps_done * 16);
    free(lb);
    /* the manifest, last */
    size_t cap = 4096 + (size_t)md->n_units * 96 + (size_t)layout_world * 96, len = 0;
    char *txt = xmalloc(cap, "checkpoint manifest");
#define EMIT(...) len += (size_t)snprintf(txt + len, cap - len, __VA_ARGS__)
    const train_cfg_t *c = t->cfg;
    EMIT("zerolab-checkpoint 1\nstrategy %s\nstage %d\nworld %d\nlayout_world %d\n", t->strategy->name, stage, t->world,
         layout_world);
    EMIT("precision %s\noptimizer %s\n", t->wdt == DT_BF16 ? "bf16" : "fp32", c->optimizer == OPT_SGD ? "sgd" : "adamw");
    EMIT("input %d\nhidden %d\nclasses %d\nlayers %d\nseed %llu\nbatch %lld\n", c->input, c->hidden, c->classes, c->layers,
         (unsigned long long)c->seed, (long long)c->batch);
    EMIT("psi %lld\npadded_numel %lld\nshard_numel %lld\nunits %d\n", (long long)md->numel, (long long)md->padded_numel,
         (long long)md->shard_numel, md->n_units);
    for (int u = 0; u < md->n_units; u++) {
      const unit_t *un = &md->units[u];
      EMIT("unit %d %d %d %lld %lld %lld %lld\n", u, un->in, un->out, (long long)un->numel, (long long)un->padded,
           (long long)un->piece, (long long)un->shard_off);
    }
    EMIT("step %d\ndata_position %lld\nopt_t %d\nskipped %d\n", steps_done, (long long)steps_done * c->batch, opt_t,
         skipped);
    EMIT("rng none (data sample i and the init are pure functions of the seed and i)\n");
    EMIT("sections weights m%s\nfiles %d\n", nsec == 3 ? " v" : "", layout_world + 1);
    for (int r = 0; r < layout_world; r++)
      EMIT("file rank-%05d.bin %lld %016" PRIx64 "\n", r, (long long)fs[r].nbytes, fs[r].sum);
    EMIT("file " LOSSES " %lld %016" PRIx64 "\n", (long long)steps_done * 16, lsum);
    if (len + 40 >= cap) die("rank 0: checkpoint manifest longer than %zu bytes", cap);
    EMIT("checksum %016" PRIx64 "\n", ckpt_sum(CKPT_SUM_INIT, txt, len));
#undef EMIT
    snprintf(path, sizeof path, "%s/" MANIFEST, partial);
    write_atomic(path, txt, (int64_t)len);
    free(txt);
    fsync_dir(partial);
    /* publish: the complete directory under its name, then `latest` */
    if (is_dir(final_dir)) { /* an older save of the same step (a rerun): move it away first */
      char old[CKPT_PATH_MAX + 64];
      snprintf(old, sizeof old, "%s/.step-%06d.old-%d", dir, steps_done, (int)getpid());
      if (rename(final_dir, old) != 0) die("rank 0: checkpoint: rename %s failed: %s", final_dir, strerror(errno));
      if (rename(partial, final_dir) != 0) die("rank 0: checkpoint: rename %s failed: %s", partial, strerror(errno));
      rm_tree(old);
    } else if (rename(partial, final_dir) != 0) {
      die("rank 0: checkpoint: rename %s -> %s failed: %s", partial, final_dir, strerror(errno));
    }
    fsync_dir(dir);
    char line[32];
    int n = snprintf(line, sizeof line, "step-%06d\n", steps_done);
    snprintf(path, sizeof path, "%s/latest", dir);
    write_atomic(path, line, n);
    fsync_dir(dir);
    prune(dir, steps_done);
    if (!t->cfg->quiet) {
      printf("checkpoint: saved %s (%d file%s + manifest)\n", final_dir, layout_world + 1, layout_world ? "s" : "");
      fflush(stdout);
    }
  }
  free(all);
  free(sizes);
}
