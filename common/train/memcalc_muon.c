/* memcalc_muon.c — ch00_memory --optimizer muon: Muon keeps one fp32 momentum where Adam keeps two, and
 * under ZeRO each matrix lives whole on one owner, so the largest owner's share sets the states per
 * rank (memcalc.h; notes/03-zero1.md, "Muon: whole matrices, not slices"). Pure, as memcalc.c. */
#include "memcalc.h"       // memcalc_muon
#include <stdio.h>         // fprintf, fopen
#include <stdlib.h>        // calloc, free, abort
#include "owners_assign.h" // owners_assign: the strategies' greedy by size

/* fp32 (the owners keep no master): params 4Ψ; Muon's matrices M, AdamW's rest R = Ψ − M; own = the
 * largest owner's matrices. Stage 0 (DDP, every matrix whole): grads 4Ψ, optim 4M + 8R. Stage 1
 * (ch03_zero1 --shard owner): grads 4Ψ, optim 4·own + 8R/N. Stage 2 (ch04_zero2 --shard owner): grads
 * 4(own + R/N), optim as stage 1. Stage 3: not built (ZeRO-3 would gather each matrix on its owner). */
int memcalc_muon(FILE *out, const char *json, double psi, int world, const int64_t *mats, int n_mats,
                 const char *assumed) {
  double M = 0, N = world;
  for (int i = 0; i < n_mats; i++) M += (double)mats[i];
  if (!n_mats) M = psi; /* --params alone: Ψ taken as many small matrices, evenly owned */
  int *owner = calloc((size_t)n_mats + 1, sizeof *owner);
  int64_t *load = calloc((size_t)world, sizeof *load);
  if (!owner || !load) abort();
  owners_assign(mats, n_mats, world, owner, load);
  double own = 0, low = n_mats ? 1e300 : 0;
  for (int r = 0; r < world; r++)
    own = load[r] > own ? (double)load[r] : own, low = load[r] < low ? load[r] : low;
  if (!n_mats) own = M / N, low = own;
  double R = psi - M;
  double rows[3][3] = {{4 * psi, 4 * psi, 4 * M + 8 * R},
                       {4 * psi, 4 * psi, 4 * own + 8 * R / N},
                       {4 * psi, 4 * (own + R / N), 4 * own + 8 * R / N}};
  fprintf(out,
          "Muon (--optimizer muon, fp32): %.0f params in hidden matrices (Muon: one fp32 momentum, 4 "
          "bytes), %.0f with AdamW (m + v, 8 bytes)%s%s\n",
          M, R, assumed ? ": " : "", assumed ? assumed : "");
  fprintf(out, "owners (greedy by size, largest first) of %d matrices on N = %d: the largest owner holds "
          "%.0f matrix params, the smallest %.0f (even: %.0f; imbalance %.3f)\n\n", n_mats, world, own, low,
          M / N, M > 0 ? own / (M / N) : 1.0);
  fprintf(out, "%-22s %14s %14s %14s %14s %14s\n", "stage (bytes per rank)", "params", "grads", "optim",
          "total", "AdamW optim");
  const char *name[3] = {"0 DDP", "1 owners (ch03)", "2 owners (ch04)"};
  double adam[3] = {8 * psi, 8 * psi / N, 8 * psi / N}; /* AdamW's flat ZeRO, for comparison */
  for (int s = 0; s < 3; s++)
    fprintf(out, "%-22s %14.0f %14.0f %14.0f %14.0f %14.0f\n", name[s], rows[s][0], rows[s][1], rows[s][2],
            rows[s][0] + rows[s][1] + rows[s][2], adam[s]);
  fprintf(out, "%-22s not built: ZeRO-3 would gather each matrix on its owner once more per step\n",
          "3 (refused)");
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) return fprintf(stderr, "error: --json %s: cannot write\n", json), free(owner), free(load), 1;
    fprintf(f,
            "{\"optimizer\": \"muon\", \"psi\": %.17g, \"ranks\": %d, \"muon_params\": %.17g, "
            "\"adamw_params\": %.17g, \"owner_max\": %.17g, \"owner_min\": %.17g, \"imbalance\": %.17g, "
            "\"stages\": [",
            psi, world, M, R, own, low, M > 0 ? own / (M / N) : 1.0);
    for (int s = 0; s < 3; s++) /* total and AdamW's optim: the printout's last two columns */
      fprintf(f,
              "%s{\"stage\": %d, \"params\": %.17g, \"grads\": %.17g, \"optim\": %.17g, \"total\": %.17g, "
              "\"adamw_optim\": %.17g}",
              s ? ", " : "", s, rows[s][0], rows[s][1], rows[s][2], rows[s][0] + rows[s][1] + rows[s][2],
              adam[s]);
    fprintf(f, "]}\n");
    fclose(f);
  }
  free(owner);
  free(load);
  return 0;
}
