/* ckpt_mem.c — in-memory snapshots and their buddy copies (ckpt_mem.h): what a rank needs to go
 * on in the same layout, kept in tmpfs on its node and on a rank of another node, and the
 * relaunch's choice of the newest step every rank can get. */
#include "ckpt_mem.h" // ckpt_mem_t
#include "ckpt_buddy.h" // ckpt_buddy_of: the buddy placement (solutions/, chapter 14's exercise)
#include "check.h"    // die_on_rank, xmalloc, xcalloc
#include "ckpt.h"     // ckpt_sum, CKPT_SUM_INIT
#include "comm.h"     // comm_ctl_all_reduce_f64, comm_group_async, comm_wait, comm_node_of
#include "device.h"   // dev_memcpy, dev_sync
#include "fault.h"    // fault_t, FAULT_NODE (--fault R:S:node)
#include "ledger.h"   // ledger_add_in, ledger_sub_in, ledger_peak_in: LEDGER_HOST, LEDGER_CKPT
#include "trace.h"    // trace_begin, trace_end, trace_now_us
#include <errno.h>    // errno
#include <fcntl.h>    // open
#include <stdio.h>    // snprintf, printf, rename
#include <stdlib.h>   // getenv, atoi, free
#include <string.h>   // memcpy, strcmp, strerror
#include <unistd.h>   // write, close, unlink


int64_t ckpt_mem_formula_bytes(int stage, int64_t psi, int world, int w, int k, int steps, int units) {
  int64_t held = stage == 3 ? psi / world : psi, own = stage == 0 ? psi : psi / world;
  return (int64_t)sizeof(ckpt_snap_hdr_t) + held * w + own * 4 * (1 + k) + 24 * (int64_t)steps +
         16 * (int64_t)units;
}

/* The snapshots this rank keeps in tmpfs now (own, the buddy's copy: file bytes, 0 none) into the
 * memory ledger in place of the previous ones: host RAM, LEDGER_CKPT. */
static void hold(ckpt_mem_t *mm, int64_t own, int64_t copy, int steps) {
  if (mm->ledger_own) ledger_sub_in(LEDGER_HOST, LEDGER_CKPT, mm->own_bytes, mm->ledger_own);
  if (mm->ledger_copy) ledger_sub_in(LEDGER_HOST, LEDGER_CKPT, mm->copy_bytes, mm->ledger_copy);
  mm->ledger_own = own ? ledger_add_in(LEDGER_HOST, LEDGER_CKPT, own, "in-memory snapshot (tmpfs)") : 0;
  mm->ledger_copy = copy ? ledger_add_in(LEDGER_HOST, LEDGER_CKPT, copy, "buddy's snapshot (tmpfs)") : 0;
  mm->own_bytes = own, mm->copy_bytes = copy, mm->steps_held = steps;
}

void ckpt_mem_path(const ckpt_mem_t *mm, int rank, int holds, char *p, size_t n) {
  if (holds < 0) snprintf(p, n, "/dev/shm/zl-%s-r%d.snap", mm->job, rank);
  else snprintf(p, n, "/dev/shm/zl-%s-r%d-holds-r%d.snap", mm->job, rank, holds);
}

/* tmpfs, atomically: path.tmp then rename (a kill mid-write leaves the previous snapshot). */
static void write_file(const char *path, const void *bytes, int64_t n) {
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die_on_rank("--ckpt-mem-every: cannot create %s: %s", tmp, strerror(errno));
  for (int64_t done = 0; done < n;) {
    ssize_t k = write(fd, (const char *)bytes + done, (size_t)(n - done));
    if (k <= 0) die_on_rank("--ckpt-mem-every: writing %s: %s", tmp, strerror(errno));
    done += k;
  }
  close(fd);
  if (rename(tmp, path) != 0) die_on_rank("--ckpt-mem-every: rename to %s: %s", path, strerror(errno));
}

char *ckpt_mem_read(const char *path, int64_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = xmalloc((size_t)*n + 4, "in-memory snapshot");
  if (fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
  fclose(f);
  return b;
}

static float *section(const unit_piece_t *l, int s) { return s == 0 ? l->w : s == 1 ? l->m : l->v; }

/* This run's sizes in its layout: held bytes and own floats (the checks of a snapshot read back). */
static void layout_sizes(trainer_t *t, int nsec, int64_t *held_bytes, int64_t *own_floats) {
  *held_bytes = *own_floats = 0;
  for (int u = 0; u < t->whole->n_units; u++) {
    unit_layout_t l = {0};
    t->strategy->layout(t, u, &l);
    *held_bytes += (l.held_numel + l.held2_numel) * (int64_t)dtype_size(t->wdt);
    *own_floats += unit_layout_own(&l) * nsec;
  }
}

void ckpt_mem_init(ckpt_mem_t *mm, const train_cfg_t *cfg) {
  *mm = (ckpt_mem_t){.every = cfg->ckpt_mem_every};
  const char *j = getenv("ZL_JOB_ID"), *r = getenv("ZL_RESTART");
  snprintf(mm->job, sizeof mm->job, "%s", j && *j ? j : "nojob");
  mm->restart = r ? atoi(r) : 0;
}

void ckpt_mem_progress(const ckpt_mem_t *mm, const trainer_t *t, int step) {
  if (!mm->every || comm_rank(t->world_comm) != 0) return;
  char p[200];
  snprintf(p, sizeof p, "/dev/shm/zl-%s-progress", mm->job);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return;
  char s[16];
  int n = snprintf(s, sizeof s, "%d\n", step);
  if (write(fd, s, (size_t)n) != n) step = -1;
  close(fd);
}

void ckpt_mem_save(ckpt_mem_t *mm, trainer_t *t, int steps_done, int opt_t, int skipped,
                   const report_step_t *losses, const scaler_t *scaler) {
  double t0 = trace_now_us();
  trace_begin("ckpt mem");
  comm_wait_all(t->comm);
  dev_sync(t->dev);
  int nsec = t->cfg->optimizer == OPT_ADAMW ? 3 : 2, rank = comm_rank(t->world_comm);
  comm_t *wc = t->world_comm;
  int world = comm_world(wc);
  ckpt_snap_hdr_t h = {.magic = CKPT_SNAP_MAGIC, .rank = rank, .world = world, .steps_done = steps_done,
                  .opt_t = opt_t, .skipped = skipped, .has_scaler = scaler != NULL, .n_sections = nsec};
  if (scaler) h.loss_scale = scaler->scale, h.growth_tracker = scaler->growth_tracker;
  if (scaler) h.overflows = scaler->overflows;
  snprintf(h.strategy, sizeof h.strategy, "%s", t->name);
  h.n_units = t->whole->n_units;
  layout_sizes(t, nsec, &h.held_bytes, &h.own_floats);
  h.body_bytes = h.held_bytes + h.own_floats * 4 + (int64_t)steps_done * 24 + 16 * (int64_t)h.n_units;
  int64_t total = (int64_t)sizeof h + h.body_bytes, padded = (total + 3) / 4 * 4;
  char *buf = xcalloc((size_t)padded, 1, "in-memory snapshot"), *p = buf + sizeof h;
  for (int u = 0; u < t->whole->n_units; u++) { /* held params, raw */
    unit_layout_t l = {0};
    t->strategy->layout(t, u, &l);
    for (int k = 0; k < 2; k++) { /* (two ranges: ZeRO-3 on two groups) */
      int64_t ho, hn;
      void *hp = unit_layout_held(&l, k, &ho, &hn);
      size_t nb = (size_t)hn * dtype_size(t->wdt);
      if (nb) dev_memcpy(DEV_CPU, p, t->dev, hp, nb);
      p += nb;
    }
  }
  for (int u = 0; u < t->whole->n_units; u++) { /* own pieces, fp32 */
    unit_layout_t l = {0};
    t->strategy->layout(t, u, &l);
    for (int k = 0; k < 2; k++) { /* the own pieces (two with two data-parallel groups) */
      unit_piece_t q = unit_layout_piece(&l, k);
      for (int s = 0; s < nsec && q.numel > 0; s++, p += q.numel * 4)
        dev_memcpy(DEV_CPU, p, t->dev, section(&q, s), (size_t)q.numel * 4);
    }
  }
  for (int s = 0; s < steps_done; s++, p += 24) {
    double v[3] = {losses[s].loss, losses[s].ms, losses[s].loss_scale};
    memcpy(p, v, 24);
  }
  for (int u = 0; u < t->whole->n_units; u++, p += 16) { /* where each own piece lies */
    unit_layout_t l = {0};
    t->strategy->layout(t, u, &l);
    int64_t at[2] = {l.own_off, l.own_numel};
    memcpy(p, at, 16);
  }
  h.sum = ckpt_sum(CKPT_SUM_INIT, buf + sizeof h, (size_t)h.body_bytes);
  memcpy(buf, &h, sizeof h);
  char path[300];
  ckpt_mem_path(mm, rank, -1, path, sizeof path);
  write_file(path, buf, total);
  int64_t copy_file = 0; /* the buddy's copy this rank keeps: its file's bytes */
  /* the buddy's copy: mine to my buddy, the one whose buddy I am to me (sizes first: a control sum) */
  if (world > 1) {
    int *node_of = xmalloc((size_t)world * sizeof(int), "node map");
    for (int r = 0; r < world; r++) node_of[r] = comm_node_of(wc, r);
    int to = ckpt_buddy_of(node_of, world, rank), from = -1;
    for (int r = 0; r < world; r++)
      if (ckpt_buddy_of(node_of, world, r) == rank) from = r;
    double *sizes = xcalloc((size_t)world, sizeof(double), "snapshot sizes");
    sizes[rank] = (double)padded;
    comm_ctl_all_reduce_f64(wc, sizes, world, REDOP_SUM);
    int64_t in_bytes = from >= 0 ? (int64_t)sizes[from] : 0;
    char *copy = xmalloc((size_t)in_bytes + 4, "buddy's snapshot");
    comm_p2p_t ops[2] = {{.send = buf, .numel = padded / 4, .peer = to},
                         {.recv = copy, .numel = in_bytes / 4, .peer = from}};
    comm_wait(wc, comm_group_async(wc, from >= 0 ? 2 : 1, ops, DT_F32, "ckpt buddy"));
    if (from >= 0) {
      ckpt_snap_hdr_t hb;
      memcpy(&hb, copy, sizeof hb);
      ckpt_mem_path(mm, rank, from, path, sizeof path);
      copy_file = (int64_t)sizeof hb + hb.body_bytes;
      write_file(path, copy, copy_file);
    }
    free(copy);
    free(sizes);
    free(node_of);
  }
  free(buf);
  hold(mm, total, copy_file, steps_done);
  mm->saves++;
  trace_end(NULL);
  mm->stall_ms += (trace_now_us() - t0) / 1000.0;
}

/* A snapshot read back: the step it holds, or -1 when missing, torn or of another run's layout. */
static int snap_check(const char *b, int64_t n, int rank, trainer_t *t, int nsec) {
  ckpt_snap_hdr_t h;
  if (!b || n < (int64_t)sizeof h) return -1;
  memcpy(&h, b, sizeof h);
  int64_t held = 0, own = 0;
  layout_sizes(t, nsec, &held, &own);
  if (memcmp(h.magic, CKPT_SNAP_MAGIC, 8) || h.rank != rank || h.world != comm_world(t->world_comm) ||
      strcmp(h.strategy, t->name) || h.n_units != t->whole->n_units || h.held_bytes != held ||
      h.own_floats != own || h.n_sections != nsec ||
      n < (int64_t)sizeof h + h.body_bytes || h.steps_done > t->cfg->steps ||
      ckpt_sum(CKPT_SUM_INIT, b + sizeof h, (size_t)h.body_bytes) != h.sum)
    return -1;
  return h.steps_done;
}

/* Upload snapshot b (checked) into this rank's layout. */
static void snap_load(trainer_t *t, const char *b, int nsec, report_step_t *losses, int *opt_t, int *skipped,
                      scaler_t *scaler) {
  ckpt_snap_hdr_t h;
  memcpy(&h, b, sizeof h);
  const char *p = b + sizeof h;
  for (int u = 0; u < t->whole->n_units; u++) {
    unit_layout_t l = {0};
    t->strategy->layout(t, u, &l);
    for (int k = 0; k < 2; k++) {
      int64_t ho, hn;
      void *hp = unit_layout_held(&l, k, &ho, &hn);
      size_t nb = (size_t)hn * dtype_size(t->wdt);
      if (nb) dev_memcpy(t->dev, hp, DEV_CPU, p, nb);
      p += nb;
    }
  }
  for (int u = 0; u < t->whole->n_units; u++) {
    unit_layout_t l = {0};
    t->strategy->layout(t, u, &l);
    for (int k = 0; k < 2; k++) {
      unit_piece_t q = unit_layout_piece(&l, k);
      for (int s = 0; s < nsec && q.numel > 0; s++, p += q.numel * 4)
        dev_memcpy(t->dev, section(&q, s), DEV_CPU, p, (size_t)q.numel * 4);
    }
  }
  for (int s = 0; s < h.steps_done; s++, p += 24) {
    double v[3];
    memcpy(v, p, 24);
    losses[s] = (report_step_t){.loss = v[0], .ms = v[1], .loss_scale = v[2]};
  }
  *opt_t = h.opt_t, *skipped = h.skipped;
  if (h.has_scaler && scaler) {
    scaler->scale = h.loss_scale, scaler->growth_tracker = h.growth_tracker;
    scaler->overflows = h.overflows;
  }
  dev_sync(t->dev);
}

int ckpt_mem_restore(ckpt_mem_t *mm, trainer_t *t, report_step_t *losses, int *start, int *opt_t,
                     int *skipped, scaler_t *scaler) {
  if (!mm->every || mm->restart < 1) return 0;
  double t0 = trace_now_us();
  comm_t *wc = t->world_comm;
  int world = comm_world(wc), rank = comm_rank(wc), nsec = t->cfg->optimizer == OPT_ADAMW ? 3 : 2;
  const char *ef = getenv("ZL_ELASTIC_FROM"); /* zlrun --elastic: the world the snapshots were taken on */
  int from_world = ef ? atoi(ef) : 0;
  int *node_of = xmalloc((size_t)world * sizeof(int), "node map");
  for (int r = 0; r < world; r++) node_of[r] = comm_node_of(wc, r);
  int to = ckpt_buddy_of(node_of, world, rank), from = -1;
  for (int r = 0; r < world && world > 1; r++)
    if (ckpt_buddy_of(node_of, world, r) == rank) from = r;
  char path[300];
  int64_t n_own = 0, n_held = 0;
  ckpt_mem_path(mm, rank, -1, path, sizeof path);
  char *own = ckpt_mem_read(path, &n_own), *held = NULL;
  if (from >= 0) {
    ckpt_mem_path(mm, rank, from, path, sizeof path);
    held = ckpt_mem_read(path, &n_held);
  }
  /* av[r]: rank r's own step + 1, av[world + r]: the step + 1 of r's copy at its buddy; sizes beside */
  double *av = xcalloc((size_t)world * 3, sizeof(double), "snapshot steps");
  av[rank] = snap_check(own, n_own, rank, t, nsec) + 1;
  if (from >= 0) av[world + from] = snap_check(held, n_held, from, t, nsec) + 1;
  if (from >= 0) av[2 * world + from] = (double)((n_held + 3) / 4 * 4);
  comm_ctl_all_reduce_f64(wc, av, 3 * world, REDOP_SUM);
  int best = -1; /* the newest step every rank has, own or at its buddy */
  for (int c = 0; c < 2 * world; c++) {
    int s = (int)av[c] - 1, all = s >= 0;
    for (int r = 0; r < world && all; r++)
      all = (int)av[r] - 1 == s || (world > 1 && (int)av[world + r] - 1 == s);
    if (all && s > best) best = s;
  }
  int ok = best >= 0;
  if (ok) { /* who needs the buddy's copy: it comes over, the owner loads one snapshot either way */
    int need = (int)av[rank] - 1 != best, give = from >= 0 && (int)av[from] - 1 != best;
    int64_t in_bytes = need ? (int64_t)av[2 * world + rank] : 0;
    char *got = need ? xmalloc((size_t)in_bytes + 4, "buddy's snapshot") : NULL;
    comm_p2p_t ops[2];
    int n = 0;
    if (give) ops[n++] = (comm_p2p_t){.send = held, .numel = (n_held + 3) / 4, .peer = from};
    if (need) ops[n++] = (comm_p2p_t){.recv = got, .numel = in_bytes / 4, .peer = to};
    if (n) comm_wait(wc, comm_group_async(wc, n, ops, DT_F32, "ckpt buddy restore"));
    snap_load(t, need ? got : own, nsec, losses, opt_t, skipped, scaler);
    /* the files the failed run left: held again */
    hold(mm, own && n_own > 0 ? n_own : 0, held && n_held > 0 ? n_held : 0, best);
    *start = best;
    free(got);
    char *where = xcalloc((size_t)world, 48, "restore sources");
    for (int r = 0; r < world; r++) /* every rank knows every choice from av */
      snprintf(where + 48 * r, 48, "%s", (int)av[r] - 1 == best ? "own" : "buddy's copy");
    mm->restore_ms = (trace_now_us() - t0) / 1000.0;
    if (rank == 0) { /* also with --quiet: a relaunch is an event to see */
      char p[200];
      int64_t nb = 0;
      snprintf(p, sizeof p, "/dev/shm/zl-%s-progress", mm->job);
      char *pr = ckpt_mem_read(p, &nb);
      int failed_at = pr && nb > 0 ? atoi(pr) : -1;
      free(pr);
      printf("restored from RAM (relaunch %d): step %d, no disk read;", mm->restart, best);
      for (int r = 0; r < world; r++) printf(" rank %d %s%s", r, where + 48 * r, r + 1 < world ? "," : "");
      if (failed_at >= 0)
        printf("; the failed run had started step %d: %d step%s redone (at most K = %d)", failed_at,
               failed_at - best, failed_at - best == 1 ? "" : "s", mm->every);
      printf("; %.2f ms\n", mm->restore_ms);
      fflush(stdout);
    }
    free(where);
  } else if (from_world > 0 && from_world != world) { /* zlrun --elastic: fewer ranks than the snapshots' */
    ok = ckpt_elastic_restore(mm, t, from_world, losses, start, opt_t, skipped, scaler);
  } else if (rank == 0) {
    printf("no complete in-memory snapshot of job %s (relaunch %d): starting as asked\n", mm->job,
           mm->restart);
    fflush(stdout);
  }
  free(own);
  free(held);
  free(av);
  free(node_of);
  return ok;
}

void ckpt_mem_lose_node(const ckpt_mem_t *mm, const trainer_t *t, int step) {
  const fault_t *f = t->fault;
  int rank = comm_rank(t->world_comm), world = comm_world(t->world_comm);
  if (!f || f->kind != FAULT_NODE || f->rank != rank || f->step != step) return;
  char path[300], lost[400] = "";
  for (int r = 0, n = 0; r < world; r++) /* the supervisor learns which ranks do not come back */
    if (comm_node_of(t->world_comm, r) == comm_node_of(t->world_comm, rank) && n < (int)sizeof lost - 12)
      n += snprintf(lost + n, sizeof lost - (size_t)n, "%s%d", n ? " " : "", r);
  snprintf(path, sizeof path, "/dev/shm/zl-%s-lost", mm->job);
  FILE *lf = fopen(path, "w");
  if (lf) fprintf(lf, "%s\n", lost), fclose(lf);
  for (int r = 0; r < world; r++) {
    if (comm_node_of(t->world_comm, r) != comm_node_of(t->world_comm, rank)) continue;
    ckpt_mem_path(mm, r, -1, path, sizeof path);
    unlink(path);
    for (int c = 0; c < world; c++) {
      ckpt_mem_path(mm, r, c, path, sizeof path);
      unlink(path);
    }
  }
}

void ckpt_mem_finish(ckpt_mem_t *mm, trainer_t *t) {
  if (!mm->every) return;
  int rank = comm_rank(t->world_comm), world = comm_world(t->world_comm);
  char path[300];
  ckpt_mem_path(mm, rank, -1, path, sizeof path);
  unlink(path);
  for (int r = 0; r < world; r++) {
    ckpt_mem_path(mm, rank, r, path, sizeof path);
    unlink(path);
  }
  if (rank == 0) {
    snprintf(path, sizeof path, "/dev/shm/zl-%s-progress", mm->job);
    unlink(path);
  }
  int64_t own = mm->own_bytes, copy = mm->copy_bytes;
  int steps = mm->steps_held;
  hold(mm, 0, 0, 0); /* the files are gone */
  if (mm->saves == 0) return;
  trainer_report_extra(t, "ckpt_mem_saves", mm->saves);
  trainer_report_extra(t, "ckpt_mem_stall_ms", mm->stall_ms / mm->saves);
  trainer_report_extra(t, "ckpt_mem_snapshot_bytes", (double)own);
  trainer_report_extra(t, "ckpt_mem_buddy_copy_bytes", (double)copy);
  /* the ledger beside the formula: two snapshots of the last step (measured: with the units' padding) */
  double peak = (double)ledger_peak_in(LEDGER_HOST, LEDGER_CKPT);
  trainer_report_extra(t, "ckpt_mem_ledger_host_peak_bytes", peak);
  int stage = t->strategy->stage, k = t->cfg->optimizer == OPT_ADAMW ? 2 : 1;
  if (!t->group_comm && stage >= 0 && stage <= 3) /* a --tp/--ep rank's Ψ is its group's slice */
    trainer_report_extra(t, "ckpt_mem_formula_bytes",
                         2.0 * (double)ckpt_mem_formula_bytes(stage, t->model.numel, t->world,
                                                               (int)dtype_size(t->wdt), k, steps,
                                                               t->whole->n_units));
  if (mm->restore_ms > 0) trainer_report_extra(t, "ckpt_mem_restore_ms", mm->restore_ms);
}
