/* ckpt.c — checkpoints, the trainer's side (see ckpt.h): save, resume with resharding, the
 * grid-free form, the export of the full weights. The format on disk is ckpt_format.c.
 * Notes: notes/reliability.md ("Checkpoints").
 *
 * The one idea: a checkpoint stores each model state (fp32 weights, Adam m and v) as the pieces
 * the strategy says its ranks own (strategy_t.layout: unit u, [off, off+numel)), and the
 * manifest lists every piece with its file and place. Whatever wrote it (N ranks of ZeRO,
 * DDP's replicated copy, any future strategy), element i of unit u lives in the one piece of u
 * that covers i: ckpt_read_range hands any rank of any new layout the ranges it needs, so
 * resharding is a table lookup and no rank assembles the full model unless its own layout
 * holds it whole. The stage is only written down for the reader: memory is found by the hook. */
#include "ckpt_internal.h" // ckpt_manifest_t, ckpt_*; ckpt_publish, ckpt_write_atomic, LOSSES
#include "check.h"  // die, xmalloc, xcalloc
#include "comm.h"   // comm_barrier, comm_ctl_gather, comm_ctl_broadcast, comm_wait_all
#include "device.h" // dev_memcpy, dev_sync, dev_upload
#include "fault.h"  // fault_in_save (--fault R:S:ckpt)
#include "grid.h"   // grid_t, GRID_TP (the --tp T a checkpoint was saved with)
#include <errno.h>  // errno
#include <stdio.h>  // snprintf, fopen, printf
#include <stdlib.h> // free
#include <string.h> // strcmp, strerror, strncmp
#include <sys/stat.h> // mkdir

/* ---- the trainer's side -------------------------------------------------------------------- */

/* The strategy's answer for unit u (train.h: unit_layout_t). */
static unit_layout_t layout_of(trainer_t *t, int u) {
  unit_layout_t l = {0};
  if (!t->strategy->layout) die_on_rank("strategy %s has no layout hook (train.h)", t->strategy->name);
  t->strategy->layout(t, u, &l);
  return l;
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
  if (t->model_rank == 0) { /* one reader checks everything; the verdict goes to all */
    if (!ckpt_resolve(where, stepdir, sizeof stepdir, why, sizeof why) &&
        !ckpt_manifest_read(stepdir, m, why, sizeof why)) {
      if (!ckpt_match_cfg(m, t->cfg, why, sizeof why)) ckpt_verify_files(m, why, sizeof why);
      ckpt_manifest_free(m);
    }
  }
  comm_ctl_broadcast(t->model_comm, why, sizeof why, 0);
  /* The verdict is the job's: with --tp/--ep each part (model_comm) read its own checkpoint, and a
   * part that went on alone would block in its first collective with the parts that stopped. Every
   * rank learns whether any part failed; the lowest world rank of a failed part's readers prints. */
  int N = comm_world(t->world_comm), wrank = comm_rank(t->world_comm);
  double first_bad = why[0] && t->model_rank == 0 ? (double)(N - wrank) : 0; /* max: the lowest rank */
  comm_ctl_all_reduce_f64(t->world_comm, &first_bad, 1, REDOP_MAX);
  if (first_bad > 0) {
    if (N - wrank == (int)first_bad) {
      fprintf(stderr, "error: --resume %s: %s; nothing was run or written\n", where, why);
      fflush(stderr);
    }
    return 2;
  }
  comm_ctl_broadcast(t->model_comm, stepdir, sizeof stepdir, 0);
  if (ckpt_manifest_read(stepdir, m, why, sizeof why)) die_on_rank("--resume %s: %s", where, why);
  return 0;
}

/* A tensor-parallel run resuming from full units (a grid-free or a non-TP checkpoint): for each
 * unit and section, the full unit is read, mapped to this TP rank's local unit (the model
 * transform's to_local, train.h), and the layout's held and own ranges taken from that (pad slots 0). buf:
 * room for
 * the largest held or own range (the caller's). */
static void restore_mapped(trainer_t *t, const ckpt_manifest_t *m, float *buf) {
  const model_t *md = t->whole; /* the transform's split, every unit (the layout: t->model's) */
  ckpt_reader_t r = {.m = m};
  int64_t fmost = 0, lmost = 0;
  for (int u = 0; u < md->n_units; u++) {
    if (m->units[u].numel > fmost) fmost = m->units[u].numel;
    if (t->model.units[u].padded > lmost) lmost = t->model.units[u].padded;
    if (md->units[u].numel > lmost) lmost = md->units[u].numel;
  }
  float *full = xmalloc((size_t)fmost * sizeof(float), "checkpoint full unit");
  float *local = xmalloc((size_t)lmost * sizeof(float), "checkpoint local unit");
  for (int u = 0; u < md->n_units; u++) {
    unit_layout_t l = layout_of(t, u);
    for (int s = 0; s < m->n_sections; s++) {
      if (s > 0 && unit_layout_own(&l) == 0) break;
      ckpt_read_range(&r, s, u, 0, m->units[u].numel, full);
      memset(local, 0, (size_t)lmost * sizeof(float));
      t->cfg->transform->to_local(md, u, full, local);
      for (int k = 0; k < 2 && s == 0; k++) { /* the working params this rank holds (two ranges: ZeRO-3
                                                * on two groups), then its own fp32 weights */
        int64_t ho, hn;
        void *hp = unit_layout_held(&l, k, &ho, &hn);
        if (hn == 0) continue;
        memcpy(buf, local + ho, (size_t)hn * sizeof(float));
        dev_upload(t->dev, hp, t->wdt, buf, hn);
      }
      for (int k = 0; k < 2; k++) { /* the own pieces (two with two data-parallel groups) */
        unit_piece_t p = unit_layout_piece(&l, k);
        if (p.numel == 0) continue;
        memcpy(buf, local + p.off, (size_t)p.numel * sizeof(float));
        dev_upload(t->dev, ckpt_section_of(t, &p, s, u), DT_F32, buf, p.numel);
      }
    }
  }
  free(full);
  free(local);
  ckpt_reader_close(&r);
}

void ckpt_restore(trainer_t *t, const ckpt_manifest_t *m, report_step_t *losses) {
  const model_t *md = &t->model;
  ckpt_reader_t r = {.m = m};
  int64_t most = 0;
  for (int u = 0; u < md->n_units; u++) {
    unit_layout_t l = layout_of(t, u);
    if (l.held_numel > most) most = l.held_numel;
    if (l.held2_numel > most) most = l.held2_numel;
    if (l.own_numel > most) most = l.own_numel;
    if (l.own2_numel > most) most = l.own2_numel;
  }
  float *buf = xmalloc((size_t)most * sizeof(float) + 1, "checkpoint restore buffer");
  dev_sync(t->dev);
  if (t->group_comm && m->tp == 1) { /* a TP split reading full units: through the transform's map */
    restore_mapped(t, m, buf);
    most = -1;
  }
  /* the same layout: every unit its size (a backstop of ckpt_match_cfg) */
  for (int u = 0; u < md->n_units && most >= 0; u++)
    if (m->n_units != t->whole->n_units || m->units[u].numel != t->whole->units[u].numel)
      die_on_rank("--resume %s: unit %d holds %lld values there, %lld in this run's model (%d units there, "
                  "%d here): another "
                  "model",
                  m->dir, u, (long long)(u < m->n_units ? m->units[u].numel : -1),
                  (long long)t->whole->units[u].numel, m->n_units, t->whole->n_units);
  for (int u = 0; u < md->n_units && most >= 0; u++) {
    unit_layout_t l = layout_of(t, u);
    /* the working params this rank holds: wdt(fp32 weights), what every step leaves there */
    for (int k = 0; k < 2; k++) {
      int64_t ho, hn;
      void *hp = unit_layout_held(&l, k, &ho, &hn);
      if (hn == 0) continue;
      read_piece(&r, 0, u, ho, hn, buf);
      dev_upload(t->dev, hp, t->wdt, buf, hn);
    }
    /* the own piece: fp32 weights, then the optimizer states */
    for (int k = 0; k < 2; k++) { /* (two with two data-parallel groups) */
      unit_piece_t p = unit_layout_piece(&l, k);
      for (int s = 0; s < m->n_sections && p.numel > 0; s++) {
        read_piece(&r, s, u, p.off, p.numel, buf);
        dev_upload(t->dev, ckpt_section_of(t, &p, s, u), DT_F32, buf, p.numel);
      }
    }
  }
  ckpt_reader_close(&r);
  free(buf);
  /* losses of the steps before, for the report and --json */
  double *lb = ckpt_read_losses(m);
  for (int s = 0; s < m->step; s++) losses[s] = (report_step_t){.loss = lb[2 * s], .ms = lb[2 * s + 1]};
  free(lb);
  t->opt_t = m->opt_t;
  dev_sync(t->dev);
  if (t->model_rank == 0 && !t->cfg->quiet) {
    printf("resumed from %s: %s on %d rank%s (layout of %d shard%s) -> %s on %d; continuing at step %d "
           "(optimizer t = %d)\n",
           m->dir, m->strategy, m->world, m->world > 1 ? "s" : "", m->shards, m->shards > 1 ? "s" : "",
           t->name, t->model_world, m->step, m->opt_t);
    fflush(stdout);
  }
}

int ckpt_due(const train_cfg_t *cfg, int step) {
  if (!cfg->ckpt) return 0;
  if (step == cfg->steps - 1) return 1;
  return cfg->save_every > 0 && (step + 1) % cfg->save_every == 0;
}

/* What each rank tells rank 0 after writing its shard: the file, then its pieces (u, off, numel). */
typedef struct { int64_t nbytes; uint64_t sum; int64_t n_pieces; } file_stat_t;

void ckpt_snapshot(trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped,
                   const report_step_t *losses, const scaler_t *scaler, ckpt_shard_t *sh) {
    int nsec = t->cfg->optimizer == OPT_ADAMW ? 3 : 2;
  *sh = (ckpt_shard_t){.steps_done = steps_done, .opt_t = opt_t, .skipped = skipped, .losses = losses,
                       .has_scaler = scaler != NULL, .model_rank = t->model_rank};
  if (scaler) sh->scaler = *scaler;
  snprintf(sh->dir, sizeof sh->dir, "%s", dir);
  char *partial = sh->partial;
  snprintf(partial, sizeof sh->partial, "%s/.step-%06d.partial", dir, steps_done);
  comm_wait_all(t->comm); /* ZeRO-1/2's param all-gathers of this step finish first */
  dev_sync(t->dev);
  int root = t->model_rank == 0; /* rank 0 of every rank that holds a part of the model */
  if (root) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
      die("rank 0: --ckpt %s: cannot create it: %s", dir, strerror(errno));
    ckpt_rm_tree(partial); /* left by a crash during an earlier save */
    if (mkdir(partial, 0755) != 0) die("rank 0: --ckpt: cannot create %s: %s", partial, strerror(errno));
  }
  comm_barrier(t->model_comm);

  /* The pieces this rank writes, as its strategy's layout names them (ckpt_pieces.c); the blob for
   * rank 0 is file_stat_t then (unit, off, numel) per piece. */
  int n_saved = 0;
  ckpt_saved_t *sv = ckpt_saved_pieces(t, nsec, &n_saved);
  int64_t *blob =
      xmalloc(sizeof(file_stat_t) + (size_t)n_saved * 3 * sizeof(int64_t) + 8, "checkpoint piece list");
  file_stat_t *mine = (file_stat_t *)blob;
  int64_t *list = blob + sizeof(file_stat_t) / sizeof(int64_t), sn = 0;
  *mine = (file_stat_t){0, CKPT_SUM_INIT, n_saved};
  for (int i = 0; i < n_saved; i++) {
    int64_t *e = list + 3 * i;
    e[0] = sv[i].u, e[1] = sv[i].off, e[2] = sv[i].numel;
    sn += sv[i].numel;
  }
  if (n_saved > 0) { /* sections back to back, each the pieces unit after unit */
    float *host = xmalloc((size_t)(nsec * sn) * sizeof(float) + 1, "checkpoint shard (host)");
    for (int i = 0, at = 0; i < n_saved; at += (int)sv[i].numel, i++)
      for (int s = 0; s < nsec; s++)
        memcpy(host + (int64_t)s * sn + at, sv[i].host + s * sv[i].numel,
               (size_t)sv[i].numel * sizeof(float));
    mine->nbytes = (int64_t)nsec * sn * (int64_t)sizeof(float);
    sh->host = host;
  }
  ckpt_saved_free(sv, n_saved);
  sh->blob = blob;
}

void ckpt_persist(ckpt_shard_t *sh) {
  file_stat_t *mine = (file_stat_t *)sh->blob;
  if (!sh->host) return;
  char path[CKPT_PATH_MAX + 64];
  mine->sum = ckpt_sum(CKPT_SUM_INIT, sh->host, (size_t)mine->nbytes);
  snprintf(path, sizeof path, "%s/rank-%05d.bin", sh->partial, sh->model_rank);
  ckpt_write_atomic(path, sh->host, mine->nbytes);
  free(sh->host);
  sh->host = NULL;
}

void ckpt_manifest_head(const trainer_t *t, int steps_done, int opt_t, int skipped, const scaler_t *scaler,
                        ckpt_manifest_t *m) {
  const train_cfg_t *c = t->cfg;
  const model_t *md = t->whole;
  *m = (ckpt_manifest_t){.version = 3,
                         .stage = t->strategy->stage,
                         .world = t->model_world,
                         .input = c->input,
                         .hidden = c->hidden,
                         .classes = c->classes,
                         .layers = c->layers,
                         .tp = t->grid ? t->grid->size[GRID_TP] : 1,
                         .tp_rank = t->grid ? t->grid->coord[GRID_TP] : 0,
                         .ep_tp = (c->chapter_flags & TRAIN_FLAG_MOE) && c->tp > 1 ? c->tp : 1,
                         .moe = (c->chapter_flags & TRAIN_FLAG_MOE) ? c->moe : 0,
                         .moe_every = (c->chapter_flags & TRAIN_FLAG_MOE) ? c->moe_every : 0,
                         .moe_ffn = (c->chapter_flags & TRAIN_FLAG_MOE) ? c->moe_ffn : 0,
                         .moe_shared = (c->chapter_flags & TRAIN_FLAG_MOE) ? c->moe_shared : 0,
                         .seed = c->seed,
                         .batch = c->batch,
                         .psi = md->numel,
                         .n_units = md->n_units,
                         .step = steps_done,
                         .data_position = (int64_t)steps_done * c->batch,
                         .opt_t = opt_t,
                         .skipped = skipped,
                         .n_sections = c->optimizer == OPT_ADAMW ? 3 : 2};
  if (scaler) {
    m->has_scaler = 1;
    m->loss_scale = scaler->scale;
    m->growth_tracker = scaler->growth_tracker;
    m->overflows = scaler->overflows;
  }
  snprintf(m->strategy, sizeof m->strategy, "%s", t->name);
  snprintf(m->precision, sizeof m->precision, "%s", dtype_precision(t->wdt));
  snprintf(m->optimizer, sizeof m->optimizer, "%s", c->optimizer == OPT_SGD ? "sgd" : "adamw");
  snprintf(m->model, sizeof m->model, "%s", c->model_kind);
  if (strcmp(c->model_kind, "gpt") == 0) m->gpt = c->gpt;
  m->units = xcalloc((size_t)md->n_units, sizeof *m->units, "checkpoint units");
  for (int u = 0; u < md->n_units; u++)
    m->units[u] = (ckpt_unit_t){.in = md->units[u].in, .out = md->units[u].out, .numel = md->units[u].numel};
}

void ckpt_commit(trainer_t *t, ckpt_shard_t *sh) {
  int steps_done = sh->steps_done, opt_t = sh->opt_t, skipped = sh->skipped, root = t->model_rank == 0;
  const report_step_t *losses = sh->losses;
  const scaler_t *scaler = sh->has_scaler ? &sh->scaler : NULL;
  const char *dir = sh->dir, *partial = sh->partial;
  int64_t *blob = sh->blob;
  file_stat_t *mine = (file_stat_t *)blob;
  char final_dir[CKPT_PATH_MAX + 32], path[CKPT_PATH_MAX + 64];
  snprintf(final_dir, sizeof final_dir, "%s/step-%06d", dir, steps_done);
  /* --fault R:S:ckpt: die between the shards and the manifest */
  fault_in_save(t->fault, comm_rank(t->world_comm), steps_done - 1);

  char *all = NULL;
  int64_t *sizes = NULL;
  comm_ctl_gather(t->model_comm, blob,
                  (int64_t)sizeof(file_stat_t) + mine->n_pieces * 3 * (int64_t)sizeof(int64_t), &all, &sizes);
  free(blob);
  sh->blob = NULL;
  if (root) {
    /* every rank's blob: which ranks wrote a file, and the pieces in it */
    const char **from = xmalloc((size_t)t->model_world * sizeof *from, "checkpoint blobs");
    int shards = 0, n_pieces = 0;
    for (int r = 0, off = 0; r < t->model_world; off += (int)sizes[r], r++) {
      from[r] = all + off;
      const file_stat_t *fs = (const file_stat_t *)from[r];
      shards += fs->n_pieces > 0;
      n_pieces += (int)fs->n_pieces;
    }
    /* losses.bin: (loss, ms) doubles of every step so far */
    double *lb = xmalloc((size_t)steps_done * 16 + 1, "checkpoint losses");
    for (int s = 0; s < steps_done; s++) {
      lb[2 * s] = losses[s].loss;
      lb[2 * s + 1] = losses[s].ms;
    }
    uint64_t lsum = ckpt_sum(CKPT_SUM_INIT, lb, (size_t)steps_done * 16);
    snprintf(path, sizeof path, "%s/" LOSSES, partial);
    ckpt_write_atomic(path, lb, (int64_t)steps_done * 16);
    free(lb);
    /* the manifest, last: the table of every piece */
    ckpt_manifest_t m;
    ckpt_manifest_head(t, steps_done, opt_t, skipped, scaler, &m);
    m.world = t->model_world, m.shards = shards, m.n_pieces = n_pieces, m.n_files = shards + 1;
    m.pieces = xcalloc((size_t)n_pieces + 1, sizeof *m.pieces, "checkpoint pieces");
    m.files = xcalloc((size_t)shards + 1, sizeof *m.files, "checkpoint files");
    for (int r = 0, f = 0, k = 0; r < t->model_world; r++) {
      const file_stat_t *fs = (const file_stat_t *)from[r];
      const int64_t *e = (const int64_t *)(fs + 1);
      int64_t at = 0;
      for (int i = 0; i < fs->n_pieces; i++, e += 3, k++) {
        m.pieces[k] = (ckpt_piece_t){.file = f, .unit = (int)e[0], .off = e[1], .numel = e[2], .at = at};
        at += e[2];
      }
      if (fs->n_pieces > 0) {
        snprintf(m.files[f].name, sizeof m.files[f].name, "rank-%05d.bin", r);
        m.files[f].nbytes = fs->nbytes, m.files[f].sum = fs->sum;
        f++;
      }
    }
    snprintf(m.files[shards].name, sizeof m.files[shards].name, LOSSES);
    m.files[shards].nbytes = (int64_t)steps_done * 16, m.files[shards].sum = lsum;
    free(from);
    ckpt_publish(dir, partial, &m);
    ckpt_manifest_free(&m);
    if (!t->cfg->quiet) {
      printf("checkpoint: saved %s (%d files + manifest)\n", final_dir, shards + 1);
      fflush(stdout);
    }
  }
  free(all);
  free(sizes);
}

void ckpt_save(trainer_t *t, const char *dir, int steps_done, int opt_t, int skipped,
               const report_step_t *losses, const scaler_t *scaler) {
  ckpt_shard_t sh;
  ckpt_snapshot(t, dir, steps_done, opt_t, skipped, losses, scaler, &sh);
  ckpt_persist(&sh);
  ckpt_commit(t, &sh);
}

/* ---- the grid-free form (zl_ckpt convert) ------------------------------------------------- */

void ckpt_write_grid_free(const char *dir, const ckpt_manifest_t *hdr, int n_units, const ckpt_unit_t *units,
                          float *const *sec, const double *losses) {
  char partial[CKPT_PATH_MAX + 32], path[CKPT_PATH_MAX + 64];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("error: %s: cannot create it: %s", dir, strerror(errno));
  snprintf(partial, sizeof partial, "%s/.step-%06d.partial", dir, hdr->step);
  ckpt_rm_tree(partial);
  if (mkdir(partial, 0755) != 0) die("error: cannot create %s: %s", partial, strerror(errno));
  ckpt_manifest_t m = *hdr;
  snprintf(m.strategy, sizeof m.strategy, "grid-free");
  m.version = 3, m.stage = 0, m.world = 1, m.shards = 1, m.tp = 1, m.tp_rank = 0, m.n_units = n_units;
  m.n_pieces = n_units, m.n_files = 2, m.psi = 0;
  m.units = NULL, m.files = NULL, m.section_numel = NULL;
  for (int u = 0; u < n_units; u++) m.psi += units[u].numel;
  m.units = xcalloc((size_t)n_units, sizeof *m.units, "grid-free units");
  m.pieces = xcalloc((size_t)n_units, sizeof *m.pieces, "grid-free pieces");
  m.files = xcalloc(2, sizeof *m.files, "grid-free files");
  for (int u = 0, at = 0; u < n_units; at += (int)units[u].numel, u++) {
    m.units[u] = (ckpt_unit_t){.in = units[u].in, .out = units[u].out, .numel = units[u].numel};
    m.pieces[u] = (ckpt_piece_t){.file = 0, .unit = u, .off = 0, .numel = units[u].numel, .at = at};
  }
  /* rank-00000.bin: sections back to back, each the Ψ values unit after unit */
  size_t nb = (size_t)m.n_sections * (size_t)m.psi * sizeof(float);
  char *buf = xmalloc(nb + 1, "grid-free shard");
  for (int s = 0; s < m.n_sections; s++)
    memcpy(buf + (size_t)s * (size_t)m.psi * 4, sec[s], (size_t)m.psi * 4);
  snprintf(path, sizeof path, "%s/rank-00000.bin", partial);
  ckpt_write_atomic(path, buf, (int64_t)nb);
  m.files[0] =
      (ckpt_file_t){.name = "rank-00000.bin", .nbytes = (int64_t)nb, .sum = ckpt_sum(CKPT_SUM_INIT, buf, nb)};
  free(buf);
  snprintf(path, sizeof path, "%s/" LOSSES, partial);
  ckpt_write_atomic(path, losses, (int64_t)m.step * 16);
  m.files[1] = (ckpt_file_t){.name = LOSSES, .nbytes = (int64_t)m.step * 16,
                             .sum = ckpt_sum(CKPT_SUM_INIT, losses, (size_t)m.step * 16)};
  ckpt_publish(dir, partial, &m);
  free(m.units);
  free(m.pieces);
  free(m.files);
}

double *ckpt_read_losses(const ckpt_manifest_t *m) {
  char path[CKPT_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" LOSSES, m->dir);
  int64_t nb = 0;
  char *lb = ckpt_slurp(path, &nb);
  if (!lb || nb != (int64_t)m->step * 16) die_on_rank("checkpoint: %s unreadable or the wrong size", path);
  return (double *)lb;
}

/* ---- the export of the full weights ------------------------------------------------------- */

/* Copy the part of piece [off, off+n) of unit u below numel from host src into the unpadded Ψ
 * array dst; returns the elements placed. */
static int64_t place(const model_t *md, int u, int64_t off, int64_t n, const float *src, float *dst) {
  int64_t start = 0; /* the unit's offset in the unpadded layout */
  for (int v = 0; v < u; v++) start += md->units[v].numel;
  int64_t k = off + n < md->units[u].numel ? n : md->units[u].numel - off;
  if (k > 0) memcpy(dst + start + off, src, (size_t)k * sizeof(float));
  return k > 0 ? k : 0;
}

void ckpt_export_weights(trainer_t *t, float *dst) {
  const model_t *md = t->whole; /* every unit of the model, on whichever ranks */
  /* every rank takes the same path: replicated is the same on every rank (train.h); a schedule keeps
   * other units on other ranks, so there rank 0 does not hold them all */
  int all_replicated = t->model_comm == t->comm;
  for (int u = 0; u < md->n_units; u++) all_replicated &= layout_of(t, u).replicated;
  int n_saved = 0;
  ckpt_saved_t *sv = ckpt_saved_pieces(t, 1, &n_saved); /* the weights of each piece this rank writes */
  int64_t sn = 0, n_pieces = n_saved;
  for (int i = 0; i < n_saved; i++) sn += sv[i].numel;
  /* this rank's pieces: (n_pieces, then unit off numel per piece) as int64, then the floats, padded to
   * 8 bytes: rank 0 reads each rank's header where the one before ended (an odd float count would put
   * the next int64s off their alignment) */
  int64_t head = 1 + 3 * n_pieces, fbytes = (sn * (int64_t)sizeof(float) + 7) / 8 * 8;
  int64_t *blob = xmalloc((size_t)head * sizeof(int64_t) + (size_t)fbytes, "export pieces");
  float *vals = (float *)(blob + head);
  if (fbytes > sn * (int64_t)sizeof(float)) vals[sn] = 0; /* the pad: sent, never read */
  blob[0] = n_pieces;
  int64_t *e = blob + 1, at = 0;
  for (int i = 0; i < n_saved; i++) {
    e[0] = sv[i].u, e[1] = sv[i].off, e[2] = sv[i].numel;
    e += 3;
    memcpy(vals + at, sv[i].host, (size_t)sv[i].numel * sizeof(float));
    at += sv[i].numel;
  }
  ckpt_saved_free(sv, n_saved);
  char *all = (char *)blob;
  int64_t *sizes = NULL, one = (int64_t)head * 8 + fbytes;
  if (!all_replicated) { /* one control gather: rank 0 receives every rank's pieces */
    comm_ctl_gather(t->model_comm, blob, one, &all, &sizes);
    free(blob);
  } else {
    sizes = &one; /* rank 0 holds every piece already (replicated): no communication */
  }
  if (t->model_rank == 0) {
    int64_t placed = 0;
    int senders = all_replicated ? 1 : t->model_world;
    const char *p = all;
    for (int r = 0; r < senders; p += sizes[r], r++) {
      const int64_t *h = (const int64_t *)p;
      const float *f = (const float *)(h + 1 + 3 * h[0]);
      for (int64_t k = 0; k < h[0]; k++) {
        const int64_t *e = h + 1 + 3 * k;
        placed += place(md, (int)e[0], e[1], e[2], f, dst);
        f += e[2];
      }
    }
    if (placed != md->numel) /* the pieces must tile every unit (train.h) */
      die("rank 0: export: strategy %s's layout hook names %lld of the %lld weights", t->strategy->name,
          (long long)placed, (long long)md->numel);
  }
  if (!all_replicated) free(sizes);
  free(all);
}
