/* ckpt_elastic.c — continuing on fewer ranks: the old ranks' in-memory snapshots, resharded to a
 * smaller data-parallel degree through the universal checkpoint (ckpt_mem.h: ckpt_elastic_restore).
 *
 *   4 ranks, 2 nodes: node 1 does not come back         2 ranks: the same states, cut anew
 *   r0 own   r1 own   (r2, r3 gone: their copies        r0 ← [0, Ψ/2)   r1 ← [Ψ/2, Ψ)
 *   r0 holds r2's, r1 holds r3's  on node 0)
 *        │ each old rank's pieces, placed by its table (unit, off, numel)
 *        ▼
 *   a grid-free checkpoint in tmpfs: the full weights, m, v — what `zl_ckpt convert` writes
 *        │ ckpt_restore: every new rank reads the ranges its layout owns (the resharding)
 *        ▼
 *   training goes on at the snapshot's step, as a resume from disk on 2 ranks would
 *
 * Rank 0 reads every snapshot it needs from the one box's tmpfs (the survivors' own files and the
 * copies they hold): on real nodes each survivor would send the files it holds to it instead. */
#include "ckpt_mem.h" // ckpt_mem_t, ckpt_snap_hdr_t, ckpt_mem_path, ckpt_mem_read
#include "check.h"    // xmalloc, xcalloc
#include "ckpt.h"     // ckpt_manifest_head, ckpt_write_grid_free, ckpt_open_resume, ckpt_restore, ckpt_sum
#include "ckpt_internal.h" // ckpt_rm_tree
#include "comm.h"     // comm_ctl_broadcast, comm_barrier, comm_rank, comm_world
#include "trace.h"    // trace_now_us
#include <stdio.h>    // snprintf, printf, fprintf
#include <stdlib.h>   // free, exit
#include <string.h>   // memcpy, memcmp, memset, strcmp

/* Snapshot b of old rank `rank` (of `world`), checked whole: its step, or -1. */
static int old_step(const char *b, int64_t n, int rank, int world, const trainer_t *t, int nsec) {
  ckpt_snap_hdr_t h;
  if (!b || n < (int64_t)sizeof h) return -1;
  memcpy(&h, b, sizeof h);
  if (memcmp(h.magic, CKPT_SNAP_MAGIC, 8) || h.rank != rank || h.world != world || h.n_sections != nsec ||
      strcmp(h.strategy, t->name) || h.n_units != t->whole->n_units || n < (int64_t)sizeof h + h.body_bytes ||
      h.steps_done > t->cfg->steps || ckpt_sum(CKPT_SUM_INIT, b + sizeof h, (size_t)h.body_bytes) != h.sum)
    return -1;
  return h.steps_done;
}

/* Old rank r's own pieces out of its snapshot b into the full sections sec[s] (Ψ floats, unit after
 * unit); covered[i] set for each element written. Pad slots (past a unit's numel) are dropped. */
static void place(const char *b, const trainer_t *t, float **sec, char *covered) {
  ckpt_snap_hdr_t h;
  memcpy(&h, b, sizeof h);
  const model_t *md = t->whole;
  const char *own = b + sizeof h + h.held_bytes;
  const char *table = own + h.own_floats * 4 + (int64_t)h.steps_done * 24;
  int64_t base = 0;
  for (int u = 0; u < md->n_units; base += md->units[u].numel, u++) {
    int64_t at[2]; /* own_off, own_numel */
    memcpy(at, table + 16 * (int64_t)u, 16);
    int64_t n = at[0] + at[1] <= md->units[u].numel ? at[1] : md->units[u].numel - at[0];
    for (int s = 0; s < h.n_sections && at[1] > 0; s++, own += at[1] * 4) {
      if (n > 0) memcpy(sec[s] + base + at[0], own, (size_t)n * 4);
      if (n > 0 && s == 0) memset(covered + base + at[0], 1, (size_t)n);
    }
  }
}

/* Rank 0: the newest step every old rank has; the full sections and the losses from it; a
 * grid-free checkpoint in dir. 0 and why[] when the snapshots have no complete step. */
static int rebuild(ckpt_mem_t *mm, trainer_t *t, int from_world, const char *dir, char *said, size_t n_said,
                   char *why, size_t nwhy) {
  int nsec = t->cfg->optimizer == OPT_ADAMW ? 3 : 2, F = from_world, best = -1;
  char **file = xcalloc((size_t)F * (size_t)(F + 1), sizeof(char *), "old snapshots");
  int64_t *size = xcalloc((size_t)F * (size_t)(F + 1), sizeof(int64_t), "old snapshot sizes");
  int *step = xmalloc((size_t)F * (size_t)(F + 1) * sizeof(int), "old snapshot steps");
  for (int r = 0; r < F; r++) /* slot 0: r's own file; slot 1 + b: the copy rank b keeps */
    for (int c = 0; c <= F; c++) {
      char p[300];
      ckpt_mem_path(mm, c == 0 ? r : c - 1, c == 0 ? -1 : r, p, sizeof p);
      int k = r * (F + 1) + c;
      file[k] = ckpt_mem_read(p, &size[k]);
      step[k] = old_step(file[k], size[k], r, F, t, nsec);
      if (step[k] > best) best = step[k];
    }
  int *pick = xmalloc((size_t)F * sizeof(int), "old snapshot picks");
  for (; best >= 0; best--) { /* the newest step every old rank has */
    int all = 1;
    for (int r = 0; r < F && all; r++) {
      pick[r] = -1;
      for (int c = 0; c <= F && pick[r] < 0; c++)
        if (step[r * (F + 1) + c] == best) pick[r] = r * (F + 1) + c;
      all = pick[r] >= 0;
    }
    if (all) break;
  }
  int ok = best >= 0;
  if (!ok) snprintf(why, nwhy, "no step that all %d ranks' snapshots (own or buddy's copy) have", F);
  int64_t psi = t->whole->numel;
  float *sec[3] = {NULL, NULL, NULL};
  char *covered = ok ? xcalloc((size_t)psi + 1, 1, "elastic coverage") : NULL;
  for (int s = 0; s < nsec && ok; s++) sec[s] = xcalloc((size_t)psi + 1, sizeof(float), "elastic section");
  for (int r = 0, n = 0; r < F && ok; r++) {
    place(file[pick[r]], t, sec, covered);
    int c = pick[r] - r * (F + 1);
    if (c == 0) n += snprintf(said + n, n_said - (size_t)n, "%srank %d own", r ? ", " : "", r);
    else
      n += snprintf(said + n, n_said - (size_t)n, "%srank %d from rank %d's copy", r ? ", " : "", r, c - 1);
    if (n >= (int)n_said) n = (int)n_said - 1;
  }
  for (int64_t i = 0; i < psi && ok; i++)
    if (!covered[i]) ok = 0, snprintf(why, nwhy, "element %lld of the model is in no snapshot", (long long)i);
  if (ok) {
    ckpt_snap_hdr_t h;
    memcpy(&h, file[pick[0]], sizeof h);
    scaler_t sc = {.scale = h.loss_scale, .growth_tracker = h.growth_tracker, .overflows = h.overflows};
    ckpt_manifest_t m;
    ckpt_manifest_head(t, best, h.opt_t, h.skipped, h.has_scaler ? &sc : NULL, &m);
    double *lb = xmalloc((size_t)best * 16 + 1, "elastic losses"); /* (loss, ms) of each step */
    const char *lp = file[pick[0]] + sizeof h + h.held_bytes + h.own_floats * 4;
    for (int s = 0; s < best; s++) memcpy(lb + 2 * s, lp + 24 * (int64_t)s, 16);
    ckpt_write_grid_free(dir, &m, m.n_units, m.units, sec, lb);
    free(lb);
    ckpt_manifest_free(&m);
  }
  for (int s = 0; s < 3; s++) free(sec[s]);
  for (int k = 0; k < F * (F + 1); k++) free(file[k]);
  free(covered);
  free(pick);
  free(step);
  free(size);
  free(file);
  return ok ? best : -1;
}

int ckpt_elastic_restore(ckpt_mem_t *mm, trainer_t *t, int from_world, report_step_t *losses, int *start,
                         int *opt_t, int *skipped, scaler_t *scaler) {
  double t0 = trace_now_us();
  comm_t *wc = t->world_comm;
  int rank = comm_rank(wc), world = comm_world(wc);
  if (t->grid || t->cfg->optimizer == OPT_MUON) { /* the same answer on every rank */
    if (rank == 0)
      fprintf(stderr, "error: an elastic restart reshards data-parallel runs with AdamW or SGD only (no "
              "--tp/--ep, no Muon owners); nothing was run\n");
    exit(2);
  }
  char dir[300], said[2048] = "", why[256] = "";
  snprintf(dir, sizeof dir, "/dev/shm/zl-%s-elastic", mm->job);
  int best = rank == 0 ? rebuild(mm, t, from_world, dir, said, sizeof said, why, sizeof why) : -1;
  comm_ctl_broadcast(wc, &best, sizeof best, 0);
  if (best < 0) {
    if (rank == 0) printf("no complete in-memory snapshot of the %d-rank job %s (relaunch %d, elastic: %s): "
                          "starting as asked\n", from_world, mm->job, mm->restart, why);
    fflush(stdout);
    return 0;
  }
  ckpt_manifest_t m;
  if (ckpt_open_resume(t, dir, &m)) exit(2); /* it printed why */
  ckpt_restore(t, &m, losses);
  *start = m.step, *opt_t = m.opt_t, *skipped = m.skipped;
  if (m.has_scaler && scaler && t->wdt == DT_F16 && t->cfg->loss_scale == 0)
    scaler->scale = m.loss_scale, scaler->growth_tracker = m.growth_tracker, scaler->overflows = m.overflows;
  ckpt_manifest_free(&m);
  comm_barrier(wc); /* every rank has read it: the grid-free copy goes */
  mm->restore_ms = (trace_now_us() - t0) / 1000.0;
  if (rank == 0) {
    ckpt_rm_tree(dir);
    printf("restored from RAM on fewer ranks (relaunch %d, elastic): step %d of the %d-rank job's snapshots "
           "(%s), resharded to %d ranks through the universal checkpoint, no disk; %.2f ms\n",
           mm->restart, best, from_world, said, world, mm->restore_ms);
    fflush(stdout);
  }
  return 1;
}
