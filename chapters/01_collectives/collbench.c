/* ch01_collbench — nccl-tests for zerolab's communicator: one harness, every collective, vendor
 * (MPI's own) against ring (solutions/ring.c), same columns and semantics as nccl-tests:
 *   size count type redop root | time algbw busbw #wrong      (one group per implementation)
 * size = bytes of the full buffer; algbw = size / time; busbw = algbw × 2(N−1)/N (all-reduce),
 * × (N−1)/N (reduce-scatter, all-gather, all-to-all), × 1 (broadcast, reduce) — the bandwidth a link
 * must carry, comparable across N (nccl-tests doc/PERFORMANCE.md). Notes: notes/01-collectives.md.
 * The all-to-all's "ring" column is the pairwise exchange of solutions/alltoall.c (COLL_RING).
 *   make run CH=01 NP=4 ARGS=... runs ch01_collectives; this one: zlrun 4 build/bin/ch01_collbench -b 4K -e
 * 64M
 * Timing: a barrier, then each op timed alone with MPI_Wtime; the per-iteration time is the max
 * over ranks and the table shows the median over iterations. With --impl both, vendor and ring
 * alternate inside every iteration (and swap who goes first), so machine noise hits both alike.
 * Check (-c 1): one more run per size and implementation on inputs whose results are exact
 * (small integers: exact sums in fp32 and bf16), counting wrong elements over all ranks; the
 * program exits 1 if any count is not 0.
 * GPUs (CUDA build): --device cuda --backend nccl (one rank per GPU) or --backend mpi (staged through
 * the host); each timed call ends with dev_sync, since GPU collectives return once queued. */
#include "args.h"   // arg_spec_t, args_parse_nccl, args_error, args_byte_range
#include "check.h"  // xmalloc, die
#include "comm.h"   // comm_t, comm_all_reduce, comm_reduce_scatter, ..., comm_ctl_all_reduce_f64
#include "device.h" // dev_malloc, dev_memcpy, dev_sync, device_cuda_built
#include "dtype.h"  // dt_load, dt_store, dtype_size
#include <mpi.h>    // MPI_Wtime
#include <stdio.h>  // printf, fopen
#include <stdlib.h> // qsort, free
#include <string.h> // strcmp, memcpy

/* ---- one struct per collective (as nccl-tests) ----------------------------------------------- */
typedef struct coll {
  const char *name;
  comm_op_t op;
  int has_root, reduces;
  int even;                     /* numel rounded down to a multiple of N (chunked ops) */
  double (*busbw_factor)(int N);
} coll_t;

static double f_allreduce(int N) { return 2.0 * (N - 1) / N; }
static double f_chunked(int N) { return (double)(N - 1) / N; }
static double f_one(int N) { return 1.0; }

static const coll_t g_colls[] = {
    {"all_reduce", CO_ALL_REDUCE, 0, 1, 0, f_allreduce},
    {"reduce_scatter", CO_REDUCE_SCATTER, 0, 1, 1, f_chunked},
    {"all_gather", CO_ALL_GATHER, 0, 0, 1, f_chunked},
    {"broadcast", CO_BROADCAST, 1, 0, 0, f_one},
    {"reduce", CO_REDUCE, 1, 1, 0, f_one},
    {"all_to_all", CO_ALL_TO_ALL, 0, 0, 1, f_chunked}, /* every block but its own leaves: (N−1)/N */
};
#define NCOLLS ((int)(sizeof g_colls / sizeof g_colls[0]))

/* The element counts of collective co's rows for sizes minb, minb·factor, ... up to maxb bytes on N
 * ranks: what main's loop measures. Returns how many rows. */
static int rows_of(const coll_t *co, int64_t minb, int64_t maxb, double factor, size_t esz, int N) {
  int n = 0;
  double last = -1;
  for (double sz = (double)minb; sz <= (double)maxb * (1 + 1e-9); sz *= factor) {
    int64_t numel = (int64_t)(sz / (double)esz);
    if (co->even) numel -= numel % N; /* equal chunks, as nccl-tests */
    if (numel <= 0 || (double)numel == last) continue;
    last = (double)numel;
    n++;
  }
  return n;
}

typedef struct bench {
  comm_t *c;
  int rank, world, root, iters, warmup, check;
  dtype_t dt;
  device_t dev;             /* where send and recv live (--device) */
  void *send, *recv;        /* (max bytes) each, on dev; send holds the input and is never written */
  void *orig, *host;        /* (max bytes) each, host: this rank's pristine input; results to check */
} bench_t;

/* Rank r's input element i: a small integer so every sum over ranks is exact (N·7 <= 256). */
static float input(int r, int64_t i) { return (float)(((i * 3 + r) % 7) + 1); }

static void fill_input(const bench_t *b, int64_t numel) {
  for (int64_t i = 0; i < numel; i++) dt_store(b->orig, b->dt, i, input(b->rank, i));
}

/* Inputs in place for one run of `co` (outside the timed region). */
static void prepare(const bench_t *b, const coll_t *co, int64_t numel) {
  /* in place: restore the input; the others read send, which holds orig and is never written */
  if (co->op == CO_ALL_REDUCE || co->op == CO_BROADCAST)
    dev_memcpy(b->dev, b->recv, DEV_CPU, b->orig, (size_t)numel * dtype_size(b->dt));
}

static void run_op(const bench_t *b, const coll_t *co, int64_t numel) {
  switch (co->op) {
  case CO_ALL_REDUCE: comm_all_reduce(b->c, b->recv, numel, b->dt, REDOP_SUM); break;
  case CO_REDUCE_SCATTER: comm_reduce_scatter(b->c, b->send, b->recv, numel, b->dt, REDOP_SUM); break;
  case CO_ALL_GATHER: /* send: this rank's chunk of the input */
    comm_all_gather(b->c,
                    (char *)b->send + comm_chunk_lo(numel, b->world, b->rank) * (int64_t)dtype_size(b->dt),
                    b->recv, numel, b->dt);
    break;
  case CO_BROADCAST: comm_broadcast(b->c, b->recv, numel, b->dt, b->root); break;
  case CO_REDUCE: comm_reduce(b->c, b->send, b->recv, numel, b->dt, REDOP_SUM, b->root); break;
  case CO_ALL_TO_ALL: comm_all_to_all(b->c, b->send, b->recv, numel, b->dt); break;
  default: die_on_rank("collbench: op %d", (int)co->op);
  }
  dev_sync(b->dev); /* on GPUs the call returns once queued: the time must include the work */
}

/* Wrong elements of this rank's result after one run. */
static int64_t count_wrong(const bench_t *b, const coll_t *co, int64_t numel) {
  int N = b->world, r = b->rank;
  int64_t lo = 0, n = numel, wrong = 0;
  if (co->op == CO_REDUCE_SCATTER) {
    lo = comm_chunk_lo(numel, N, r);
    n = comm_chunk_numel(numel, N, r);
  }
  if (co->op == CO_REDUCE && r != b->root) return 0; /* only the root receives */
  dev_memcpy(DEV_CPU, b->host, b->dev, b->recv, (size_t)n * dtype_size(b->dt));
  int owner = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = lo + k;
    float exp = 0;
    if (co->reduces) {
      for (int q = 0; q < N; q++) exp += input(q, i);
    } else if (co->op == CO_BROADCAST) {
      exp = input(b->root, i);
    } else if (co->op == CO_ALL_TO_ALL) { /* block q came from rank q: its block r */
      int64_t blk = numel / N;
      exp = input((int)(i / blk), r * blk + i % blk);
    } else { /* all-gather: the chunk owner's input */
      while (comm_chunk_lo(numel, N, owner + 1) <= i) owner++;
      exp = input(owner, i);
    }
    if (dt_load(b->host, b->dt, k) != exp) wrong++;
  }
  return wrong;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct result { double time_us, algbw, busbw; int64_t wrong; } result_t;

/* Time `iters` runs of each implementation in impls[0..nimpl), alternating; fill res[]. */
static void measure(bench_t *b, const coll_t *co, int64_t numel, const coll_impl_t *impls, int nimpl,
                    result_t *res) {
  int n = b->iters;
  double *t = xmalloc((size_t)(nimpl * n) * sizeof *t, "timings"); /* [impl][iter] */
  for (int it = -b->warmup; it < n; it++)
    for (int k = 0; k < nimpl; k++) {
      int j = (it & 1) ? nimpl - 1 - k : k; /* swap the order every iteration */
      comm_set_impl(b->c, impls[j]);
      prepare(b, co, numel);
      comm_barrier(b->c);
      double t0 = MPI_Wtime();
      run_op(b, co, numel);
      double dt = MPI_Wtime() - t0;
      if (it >= 0) t[j * n + it] = dt;
    }
  comm_ctl_all_reduce_f64(b->c, t, nimpl * n, REDOP_MAX); /* the slowest rank sets the time */
  double nbytes = (double)numel * (double)dtype_size(b->dt);
  for (int j = 0; j < nimpl; j++) {
    qsort(t + j * n, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[j * n + n / 2] : 0.5 * (t[j * n + n / 2 - 1] + t[j * n + n / 2]);
    res[j].time_us = med * 1e6;
    res[j].algbw = med > 0 ? nbytes / med / 1e9 : 0;
    res[j].busbw = res[j].algbw * co->busbw_factor(b->world);
    res[j].wrong = -1; /* not checked */
    if (b->check) {
      comm_set_impl(b->c, impls[j]);
      prepare(b, co, numel);
      run_op(b, co, numel);
      double w = (double)count_wrong(b, co, numel);
      comm_ctl_all_reduce_f64(b->c, &w, 1, REDOP_SUM);
      res[j].wrong = (int64_t)w;
    }
  }
  free(t);
}

int main(int argc, char **argv) {
  const char *minb_s = "4K", *maxb_s = "64M", *op_s = "all_reduce", *dtype_s = "float", *impl_s = "both",
             *json = NULL, *device_s = "cpu", *backend_s = "mpi";
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, root = 0;
  arg_spec_t specs[] = {
      {"--minbytes", ARG_STR, &minb_s, 0, 0, NULL, "-b: smallest size in bytes (4096, 4K, 1M; K = 1024)"},
      {"--maxbytes", ARG_STR, &maxb_s, 0, 0, NULL, "-e: largest size in bytes"},
      {"--stepfactor", ARG_DOUBLE, &factor, 1.01, 1024, NULL, "-f: multiply the size by this between rows"},
      {"--iters", ARG_INT, &iters, 1, 100000, NULL,
       "-n: timed iterations per size (the table shows the median)"},
      {"--warmup_iters", ARG_INT, &warmup, 0, 100000, NULL, "-w: untimed iterations first"},
      {"--check", ARG_INT, &check, 0, 1, NULL, "-c: 1 = one more run per row, checked exactly (#wrong)"},
      {"--op", ARG_CHOICE, &op_s, 0, 0,
       "all_reduce|reduce_scatter|all_gather|broadcast|reduce|all_to_all|all", "collective"},
      {"--dtype", ARG_CHOICE, &dtype_s, 0, 0, "float|bfloat16", "-d: element type"},
      {"--root", ARG_INT, &root, 0, 1 << 20, NULL, "-r: root of broadcast and reduce"},
      {"--impl", ARG_CHOICE, &impl_s, 0, 0, "vendor|ring|both",
       "vendor: the backend's own; ring: solutions/ring.c (all_to_all: the pairwise exchange, "
       "solutions/alltoall.c)"},
      {"--device", ARG_CHOICE, &device_s, 0, 0, "cpu|cuda",
       "where the buffers live (cuda: one GPU per local rank)"},
      {"--backend", ARG_CHOICE, &backend_s, 0, 0, "mpi|nccl",
       "mpi: Open MPI (CUDA buffers staged through the host); nccl: one rank per GPU, needs --device cuda"},
      {"--json", ARG_STR, &json, 0, 0, NULL, "write every row as JSON to this path (rank 0)"},
  };
  const int nspecs = (int)(sizeof specs / sizeof specs[0]);
  int rc = args_parse_nccl(
      argc, argv, specs, nspecs, "ch01_collbench",
      "nccl-tests-style bandwidth table of the collectives, vendor (MPI) vs ring (solutions/ring.c).\n"
      "Example: zlrun 4 build/bin/ch01_collbench -b 4K -e 64M -f 2 --op all_reduce --impl both");
  if (rc == 1) return 0;
  if (rc) return 2;
  int64_t minb, maxb;
  if (args_byte_range(minb_s, maxb_s, &minb, &maxb)) return 2;
  if (root >= args_env_world()) {
    char v[16];
    snprintf(v, sizeof v, "%d", root);
    return args_error("-r", v, "must be a rank in [0, %d]", args_env_world() - 1);
  }

  /* a collective with no size in [-b, -e] would print an empty table and "0 OK": refused */
  size_t elem = strcmp(dtype_s, "bfloat16") == 0 ? 2 : 4;
  for (int ci = 0; ci < NCOLLS; ci++) {
    const coll_t *co = &g_colls[ci];
    if ((strcmp(op_s, "all") == 0 || strcmp(op_s, co->name) == 0) &&
        rows_of(co, minb, maxb, factor, elem, args_env_world()) == 0)
      return args_error("-e", maxb_s,
                        "must be at least %lld bytes: no size from -b %s up to it holds one %s element%s "
                        "for %s (it would measure nothing)",
                        (long long)(co->even ? elem * (size_t)args_env_world() : elem), minb_s, dtype_s,
                        co->even ? " per rank" : "", co->name);
  }

  int cuda = strcmp(device_s, "cuda") == 0, nccl = strcmp(backend_s, "nccl") == 0;
  if (nccl && !cuda)
    return args_error("--backend", backend_s, "needs --device cuda (NCCL works on GPU buffers)");
  if (cuda && !device_cuda_built())
    return args_error("--device", device_s, "this binary was built without CUDA (make GPU=1)");

  comm_t *c = comm_init(&argc, &argv, nccl ? BACKEND_NCCL : BACKEND_MPI, cuda ? DEV_CUDA : DEV_CPU);
  comm_set_timeout(c, 120);
  bench_t b = {c, comm_rank(c), comm_world(c), root, iters, warmup, check,
               strcmp(dtype_s, "bfloat16") == 0 ? DT_BF16 : DT_F32, comm_device(c), NULL, NULL, NULL, NULL};
  size_t esz = dtype_size(b.dt);
  int64_t max_numel = maxb / (int64_t)esz;
  size_t max_nbytes = (size_t)(max_numel ? max_numel : 1) * esz;
  b.send = dev_malloc(b.dev, max_nbytes, "bench send");
  b.recv = dev_malloc(b.dev, max_nbytes, "bench recv");
  b.orig = xmalloc(max_nbytes, "bench input");
  b.host = xmalloc(max_nbytes, "bench results");
  fill_input(&b, max_numel);
  dev_memcpy(b.dev, b.send, DEV_CPU, b.orig, (size_t)max_numel * esz);

  coll_impl_t impls[2];
  const char *impl_names[2];
  int nimpl = 0;
  if (strcmp(impl_s, "ring") != 0) { impls[nimpl] = COLL_VENDOR; impl_names[nimpl++] = "vendor"; }
  if (strcmp(impl_s, "vendor") != 0) { impls[nimpl] = COLL_RING; impl_names[nimpl++] = "ring"; }

  FILE *jf = NULL;
  char json_tmp[4096]; /* written there, renamed at the end: readers never see half a file */
  if (json && b.rank == 0) {
    snprintf(json_tmp, sizeof json_tmp, "%s.tmp", json);
    jf = fopen(json_tmp, "w");
    if (!jf) die("rank 0: cannot write --json %s", json_tmp);
    fprintf(jf,
            "{\"bench\": \"collbench\", \"world\": %d, \"device\": \"%s\", \"backend\": \"%s\", \"dtype\": "
            "\"%s\", "
            "\"iters\": %d, \"warmup\": %d, \"impl\": \"%s\", "
            "\"timing\": \"median over iterations of the max over ranks\",\n \"results\": [",
            b.world, device_name(b.dev), comm_backend_name(c), dtype_name(b.dt), iters, warmup, impl_s);
  }
  int64_t total_wrong = 0, nrows_json = 0;
  for (int ci = 0; ci < NCOLLS; ci++) {
    const coll_t *co = &g_colls[ci];
    if (strcmp(op_s, "all") != 0 && strcmp(op_s, co->name) != 0) continue;
    double sum_busbw[2] = {0, 0};
    int nrows = 0;
    int64_t op_wrong = 0;
    if (b.rank == 0) {
      printf("# ch01_collbench %s: %d ranks, %s on %s, %s backend, %s, %d iters (median of per-iteration max "
             "over "
             "ranks), %d warmup\n",
             co->name, b.world, dtype_name(b.dt), device_name(b.dev), comm_backend_name(c),
             nimpl == 2 ? "vendor vs ring, alternating" : impl_names[0], iters, warmup);
      printf("#%50s", "");
      for (int j = 0; j < nimpl; j++) printf(" %-35s", impl_names[j]);
      printf("\n# %12s %12s %8s %6s %5s", "size", "count", "type", "redop", "root");
      for (int j = 0; j < nimpl; j++) printf(" %9s %7s %7s %7s ", "time", "algbw", "busbw", "#wrong");
      if (nimpl == 2) printf(" %10s", "ring/vendor");
      printf("\n# %12s %12s %8s %6s %5s", "(B)", "(elements)", "", "", "");
      for (int j = 0; j < nimpl; j++) printf(" %9s %7s %7s %7s ", "(us)", "(GB/s)", "(GB/s)", "");
      if (nimpl == 2) printf(" %10s", "(busbw)");
      printf("\n");
    }
    double last = -1;
    for (double sz = (double)minb; sz <= (double)maxb * (1 + 1e-9); sz *= factor) { /* as rows_of */
      int64_t numel = (int64_t)(sz / (double)esz);
      if (co->even) numel -= numel % b.world; /* equal chunks, as nccl-tests */
      if (numel <= 0 || (double)numel == last) continue;
      last = (double)numel;
      result_t res[2];
      measure(&b, co, numel, impls, nimpl, res);
      int64_t nbytes = numel * (int64_t)esz;
      for (int j = 0; j < nimpl; j++) {
        sum_busbw[j] += res[j].busbw;
        if (res[j].wrong > 0) op_wrong += res[j].wrong;
      }
      nrows++;
      if (b.rank != 0) continue;
      printf("  %12lld %12lld %8s %6s %5d", (long long)nbytes, (long long)numel, dtype_name(b.dt),
             co->reduces ? "sum" : "none", co->has_root ? root : -1);
      for (int j = 0; j < nimpl; j++) {
        char w[24];
        if (res[j].wrong < 0) snprintf(w, sizeof w, "N/A");
        else snprintf(w, sizeof w, "%lld", (long long)res[j].wrong);
        printf(" %9.1f %7.2f %7.2f %7s ", res[j].time_us, res[j].algbw, res[j].busbw, w);
      }
      if (nimpl == 2) printf(" %10.2f", res[0].busbw > 0 ? res[1].busbw / res[0].busbw : 0);
      printf("\n");
      fflush(stdout);
      if (jf)
        for (int j = 0; j < nimpl; j++)
          fprintf(
              jf,
              "%s\n  {\"op\": \"%s\", \"impl\": \"%s\", \"bytes\": %lld, \"count\": %lld, \"time_us\": %.3f, "
              "\"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": %lld}",
              nrows_json++ ? "," : "", co->name, impl_names[j], (long long)nbytes, (long long)numel,
              res[j].time_us, res[j].algbw, res[j].busbw, (long long)res[j].wrong);
    }
    total_wrong += op_wrong;
    if (b.rank == 0) {
      printf("# Out of bounds values : %lld %s\n", (long long)op_wrong, op_wrong ? "WRONG" : "OK");
      printf("# Avg bus bandwidth    :");
      for (int j = 0; j < nimpl; j++)
        printf(" %s %.3f GB/s", impl_names[j], nrows ? sum_busbw[j] / nrows : 0);
      printf("\n#\n");
      fflush(stdout);
    }
  }
  if (jf) {
    fprintf(jf, "\n ],\n \"wrong\": %lld}\n", (long long)total_wrong);
    if (fclose(jf) != 0 || rename(json_tmp, json) != 0) die("rank 0: cannot write --json %s", json);
  }
  dev_free(b.dev, b.send);
  dev_free(b.dev, b.recv);
  free(b.orig);
  free(b.host);
  comm_finalize(c);
  return total_wrong ? 1 : 0;
}
