/* ch08_offload — ZeRO-Offload: ZeRO-2 with the optimizer states and the optimizer step of this
 * rank's shard on the host (notes/08-offload.md).
 *   make run CH=08 NP=2 ARGS="--offload optimizer --steps 20 --trace /tmp/off.json"
 *   make run CH=08 NP=2 ARGS="--offload none --steps 20"        the same ZeRO-2 without offload
 *   build/bin/ch08_offload --bench-adam 16M --host-threads 2     host AdamW throughput, no MPI
 * Flags of this chapter, on top of the training flags (train_parse_args):
 *   --offload none|optimizer   what lives on the host (default optimizer)
 *   --host-threads K           threads of the host optimizer step (default 1; same bits for any K)
 *   --bench-adam N             time the host AdamW on N fp32 parameters and exit
 * The strategy is solutions/offload.c; the loop, the report and the shared flags are common/. */
#include "offload.h" // offload_strategy, offload_parse, offload_host_adamw
#include "train.h"   // train_cfg_t, train_parse_args, train_main
#include <stdio.h>   // printf
#include <stdlib.h>  // malloc, free, strtol, qsort
#include <time.h>    // clock_gettime

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --bench-adam N: our host step (offload_host_adamw, fp32 grads as torch's) on N parameters,
 * median of 20 steps after 3 warm-up steps. One line, parsed by common/scripts/bench_adam.py. */
static int bench_adam(double n_params, int threads) {
  int64_t n = (int64_t)n_params;
  float *w = malloc((size_t)n * 4), *g = malloc((size_t)n * 4), *m = calloc((size_t)n, 4),
        *v = calloc((size_t)n, 4);
  if (!w || !g || !m || !v) {
    fprintf(stderr, "error: --bench-adam %lld: cannot allocate 16 bytes per parameter\n", (long long)n);
    return 1;
  }
  for (int64_t i = 0; i < n; i++)
    w[i] = 0.01f * (float)(i % 97), g[i] = 0.001f * (float)((i * 31) % 101) - 0.05f;
  enum { WARM = 3, REPS = 20 };
  double ms[REPS];
  for (int r = 0; r < WARM + REPS; r++) {
    ew_adamw_t k = ew_adamw_scalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, r + 1);
    double t0 = now_s();
    offload_host_adamw(w, g, DT_F32, m, v, n, k, 1.0f, threads);
    if (r >= WARM) ms[r - WARM] = (now_s() - t0) * 1e3;
  }
  qsort(ms, REPS, sizeof ms[0], cmp_d);
  double med = 0.5 * (ms[REPS / 2 - 1] + ms[REPS / 2]);
  printf("host adamw: %lld params, %d thread%s, median %.3f ms per step, %.1f Mparams/s\n", (long long)n,
         threads, threads > 1 ? "s" : "", med, n / (med / 1e3) / 1e6);
  free(w), free(g), free(m), free(v);
  return 0;
}

int main(int argc, char **argv) {
  offload_kind_t kind = OFFLOAD_OPTIMIZER;
  int threads = 1;
  double bench = 0;
  /* take this chapter's flags out of argv; the rest goes to train_parse_args */
  int rc = offload_take_flags(&argc, argv, &kind, &threads, &bench);
  if (rc) return rc;
  if (bench > 0) return bench_adam(bench, threads);
  train_cfg_t cfg;
  train_parse_args(
      argc, argv, &cfg, "ch08_offload",
      "ZeRO-Offload: ZeRO-2 with the fp32 master and optimizer states of this rank's shard in host\n"
      "memory and the optimizer step on the host; grads go device->host per unit during backward,\n"
      "updated params host->device before the all-gather. Flags of this chapter besides those below:\n"
      "  --offload none|optimizer   what lives on the host (default optimizer; none = plain ZeRO-2)\n"
      "  --host-threads K           threads of the host optimizer step (default 1; the bits do not change)\n"
      "  --bench-adam N             time the host AdamW on N fp32 parameters and exit (no MPI)",
      0);
  cfg.host_threads = threads;
  return train_main(&cfg, offload_strategy(kind), "08_offload");
}
