/* owners_plan.c — who owns which matrix (owners_assign.c in common/train: greedy by size), the AdamW
 * rest cut into pieces, and the checks both owner stages share (ZeRO-1: owners.c, ZeRO-2:
 * owners_zero2.c; owners.h, notes/03-zero1.md "Muon: whole matrices, not slices"). */
#include "owners.h"   // owners_t, owners_plan, owners_rest_*
#include <stdio.h>    // printf
#include <stdlib.h>   // free
#include <string.h>   // strcmp, strncmp
#include "args.h"     // args_error
#include "check.h"    // xcalloc, die
#include "comm.h"     // comm_ctl_broadcast, comm_ctl_all_reduce_f64, comm_barrier
#include "device.h"   // dev_memcpy
#include "muon.h"     // muon_unit_segments
#include "owners_assign.h" // owners_assign: greedy by size, largest first
#include "ops.h"      // op_adamw

void owners_plan(const model_t *m, int world, int rank, owners_t *o) {
  *o = (owners_t){0};
  muon_seg_t seg[MUON_MAX_SEGS];
  int cap = 1;
  for (int u = 0; u < m->n_units; u++) cap += muon_unit_segments(m, u, seg);
  o->mat = xcalloc((size_t)cap, sizeof *o->mat, "owned matrices");
  o->seg_off = xcalloc((size_t)cap, sizeof(int64_t), "rest offsets");
  o->seg_numel = xcalloc((size_t)cap, sizeof(int64_t), "rest numels");
  o->unit_mat = xcalloc((size_t)m->n_units + 1, sizeof(int), "unit matrices");
  o->unit_seg = xcalloc((size_t)m->n_units + 1, sizeof(int), "unit segments");
  for (int u = 0; u < m->n_units; u++) {
    int k = muon_unit_segments(m, u, seg);
    o->unit_mat[u] = o->n_mat, o->unit_seg[u] = o->n_seg;
    for (int i = 0; i < k; i++) {
      int64_t at = m->units[u].off + seg[i].off;
      if (seg[i].rows > 0)
        o->mat[o->n_mat++] = (owned_matrix_t){at, seg[i].numel, seg[i].rows, seg[i].cols, 0, -1};
      else o->seg_off[o->n_seg] = at, o->seg_numel[o->n_seg++] = seg[i].numel, o->rest_numel += seg[i].numel;
    }
  }
  o->unit_mat[m->n_units] = o->n_mat, o->unit_seg[m->n_units] = o->n_seg;
  o->rest_padded = (o->rest_numel + world - 1) / world * world;
  o->rest_piece = o->rest_padded / world;
  int64_t *numel = xcalloc((size_t)o->n_mat + 1, sizeof(int64_t), "matrix sizes");
  int *owner = xcalloc((size_t)o->n_mat + 1, sizeof(int), "matrix owners");
  for (int i = 0; i < o->n_mat; i++) numel[i] = o->mat[i].numel;
  owners_assign(numel, o->n_mat, world, owner, NULL);
  o->rank_numel = xcalloc((size_t)world, sizeof(int64_t), "rank loads");
  for (int i = 0; i < o->n_mat; i++) {
    o->mat[i].owner = owner[i];
    o->rank_numel[owner[i]] += numel[i];
    if (owner[i] == rank) o->mat[i].state_off = o->mine, o->mine += numel[i];
  }
  free(numel);
  free(owner);
}

void owners_free(owners_t *o) {
  free(o->mat), free(o->seg_off), free(o->seg_numel), free(o->rank_numel), free(o->unit_mat),
      free(o->unit_seg);
  tensor_free(&o->gmat), tensor_free(&o->pack), tensor_free(&o->grest);
  *o = (owners_t){0};
}

void owners_rest_copy(trainer_t *t, const owners_t *o, int s0, int s1, void *flat, int64_t flat_off,
                      void *pack, int64_t lo, int64_t hi, int to_pack) {
  size_t b = dtype_size(t->wdt);
  int64_t at = 0;
  for (int i = s0; i < s1; at += o->seg_numel[i], i++) {
    int64_t a = at > lo ? at : lo, e = at + o->seg_numel[i] < hi ? at + o->seg_numel[i] : hi;
    if (a >= e) continue;
    char *f = (char *)flat + (o->seg_off[i] - flat_off + a - at) * (int64_t)b;
    char *p = (char *)pack + a * (int64_t)b;
    if (to_pack) dev_memcpy(t->dev, p, t->dev, f, (size_t)(e - a) * b);
    else dev_memcpy(t->dev, f, t->dev, p, (size_t)(e - a) * b);
  }
}

void owners_rest_adamw(trainer_t *t, const owners_t *o, int s0, int s1, int64_t lo, int64_t hi,
                       const void *g, float *m, float *v, float gscale) {
  size_t b = dtype_size(t->wdt);
  int64_t at = 0;
  for (int i = s0; i < s1; at += o->seg_numel[i], i++) {
    int64_t a = at > lo ? at : lo, e = at + o->seg_numel[i] < hi ? at + o->seg_numel[i] : hi;
    if (a >= e) continue;
    op_adamw(t->dev, (float *)t->params.data + o->seg_off[i] + (a - at),
             (const char *)g + (a - lo) * (int64_t)b, t->wdt, m + (a - lo), v + (a - lo), e - a, &t->hp,
             t->opt_t, gscale);
  }
}

void owners_check_ranks(trainer_t *t, owners_t *o) {
  const unsigned char *p = t->params.data; /* fp32 on the host (owners_check refuses the rest) */
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < tensor_nbytes(&t->params); i++) h = (h ^ p[i]) * 1099511628211ull;
  uint64_t h0 = h;
  comm_ctl_broadcast(t->comm, &h0, sizeof h0, 0);
  int N = t->world;
  double *bad = xcalloc((size_t)N, sizeof(double), "rank check");
  bad[t->rank] = h != h0;
  comm_ctl_all_reduce_f64(t->comm, bad, N, REDOP_SUM);
  for (int r = 1; r < N; r++)
    if (bad[r] != 0) {
      if (t->rank == 0)
        die("error: rank %d's parameters differ from rank 0's after step %d (each matrix must be updated "
            "whole by its owner, then sent to every rank)", r, t->opt_t);
      comm_barrier(t->comm); /* rank 0 takes the job down */
    }
  free(bad);
  o->checked++;
}

void owners_print(const trainer_t *t, const owners_t *o, const char *rest) {
  if (!trainer_prints(t)) return;
  printf("owners: %d matrices, greedy by size (largest first); the rest (%lld params, AdamW) %s\n", o->n_mat,
         (long long)o->rest_numel, rest);
  for (int r = 0; r < t->world; r++) {
    printf("  rank %d owns", r);
    for (int i = 0; i < o->n_mat; i++)
      if (o->mat[i].owner == r) printf(" %dx%d", o->mat[i].rows, o->mat[i].cols);
    printf(": %lld matrix params\n", (long long)o->rank_numel[r]);
  }
}

int owners_take_flag(int *argc, char **argv, int *owner) {
  *owner = 0;
  int n = 0;
  for (int i = 0; i < *argc; i++) {
    const char *v = NULL;
    if (strcmp(argv[i], "--shard") == 0 && i + 1 < *argc) v = argv[++i];
    else if (strncmp(argv[i], "--shard=", 8) == 0) v = argv[i] + 8;
    else {
      argv[n++] = argv[i];
      continue;
    }
    if (strcmp(v, "owner") && strcmp(v, "flat"))
      return args_error("--shard", v, "must be flat (ZeRO's pieces of every unit) or owner (each matrix "
                        "on one rank: Muon's layout)");
    *owner = strcmp(v, "owner") == 0;
  }
  *argc = n;
  argv[n] = NULL;
  return 0;
}

int owners_check(const train_cfg_t *cfg) {
  if (cfg->wdt != DT_F32)
    return args_error("--shard", "owner",
                      "fp32 only here (--precision fp32): the owners keep no fp32 master");
  if (cfg->ckpt || cfg->resume)
    return args_error("--shard", "owner", "no checkpoints yet (the owners' states are not saved)");
  if (cfg->dev != DEV_CPU)
    return args_error("--shard", "owner", "--device cpu only here (the rank check reads the params)");
  return 0;
}
