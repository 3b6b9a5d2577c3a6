/* gpu_coll.c — every collective on CUDA buffers, checked exactly (notes/gpu.md).
 *   mpirun -np N build/tests/gpu_coll --backend nccl|mpi
 * Runs each collective with the vendor and the ring implementation, f32 and bf16, on sizes
 * that N does and does not divide (0, 1, N−1, 1001, 65537 ...). Rank r fills element i with
 * (r+1)·(i mod 7 + 1): small integers, exact in bf16, so every check is exact (nccl-tests' habit).
 * Also checks the stream ordering the NCCL backend promises: a collective sees what the compute
 * stream wrote just before it (no host sync in between), and compute work queued after comm_wait
 * sees the collective's result. Prints one "ok" line on rank 0; any mismatch stops the job naming
 * rank, op, implementation, dtype, numel, index, got and expected (exit code != 0).
 *   --hang-test S   the watchdog instead: the compute stream is held for S seconds (a host function
 *                   that sleeps), a collective queued behind it, comm_wait_all with a 2 s deadline
 *                   must stop the job naming the collective and its tag. */
#include <stdio.h>    // printf
#include <stdlib.h>   // malloc, free
#include <string.h>   // strcmp
#include <unistd.h>   // sleep
#include <cuda_runtime_api.h> // cudaLaunchHostFunc (the hang test)
#include "check.h"    // die
#include "comm.h"     // comm_*, comm_chunk_lo
#include "device.h"   // dev_malloc, dev_memcpy, dev_free
#include "device_cuda.h" // devcu_compute_stream
#include "dtype.h"    // dt_load, dt_store
#include "ledger.h"   // ledger_init
#include "ops.h"      // op_fill, op_scale (compute stream)

static int g_rank, g_world, g_checks;

static float pattern(int r, int64_t i) { return (float)((r + 1) * (int)(i % 7 + 1)); }
static float sum_pattern(int64_t i) { return (float)(g_world * (g_world + 1) / 2 * (int)(i % 7 + 1)); }

/* Host buffer of n elements for rank r (lo: global index of element 0), uploaded to the GPU. */
static void *upload_pattern(int r, int64_t lo, int64_t n, dtype_t dt, int64_t alloc_n) {
  size_t es = dtype_size(dt);
  void *h = malloc((size_t)(alloc_n ? alloc_n : 1) * es);
  for (int64_t i = 0; i < alloc_n; i++) dt_store(h, dt, i, i < n ? pattern(r, lo + i) : -1.0f);
  void *d = dev_malloc(DEV_CUDA, (size_t)(alloc_n ? alloc_n : 1) * es, "gpu_coll buffer");
  dev_memcpy(DEV_CUDA, d, DEV_CPU, h, (size_t)alloc_n * es);
  free(h);
  return d;
}

typedef float (*expect_fn)(int64_t gi);
/* Download n elements and compare element j with want(lo + j). */
static void check(const char *op, const char *impl, dtype_t dt, int64_t numel, const void *d, int64_t lo,
                  int64_t n, expect_fn want) {
  size_t es = dtype_size(dt);
  void *h = malloc((size_t)(n ? n : 1) * es);
  dev_memcpy(DEV_CPU, h, DEV_CUDA, d, (size_t)n * es);
  for (int64_t j = 0; j < n; j++) {
    float got = dt_load(h, dt, j), exp = want(lo + j);
    if (got != exp)
      die_on_rank("%s (%s, %s, numel %lld): element %lld: got %g, expected %g", op, impl, dtype_name(dt),
          (long long)numel, (long long)(lo + j), got, exp);
  }
  free(h);
  g_checks++;
}

static int g_root;
static float want_sum(int64_t gi) { return sum_pattern(gi); }
static float want_max(int64_t gi) { return pattern(g_world - 1, gi); }
static float want_root(int64_t gi) { return pattern(g_root, gi); }
static int64_t g_numel;
static float want_gathered(int64_t gi) { /* element gi came from the rank owning its chunk */
  int q = 0;
  while (q + 1 < g_world && comm_chunk_lo(g_numel, g_world, q + 1) <= gi) q++;
  return pattern(q, gi);
}

static void run_all(comm_t *c, coll_impl_t impl, dtype_t dt, int64_t numel) {
  const char *in = impl == COLL_RING ? "ring" : "vendor";
  size_t es = dtype_size(dt);
  int r = g_rank, N = g_world;
  int64_t lo = comm_chunk_lo(numel, N, r), own = comm_chunk_numel(numel, N, r);
  comm_set_impl(c, impl);
  g_numel = numel;

  void *buf = upload_pattern(r, 0, numel, dt, numel); /* all-reduce sum */
  comm_all_reduce(c, buf, numel, dt, REDOP_SUM);
  check("all_reduce sum", in, dt, numel, buf, 0, numel, want_sum);
  dev_free(DEV_CUDA, buf);

  buf = upload_pattern(r, 0, numel, dt, numel); /* all-reduce max */
  comm_all_reduce(c, buf, numel, dt, REDOP_MAX);
  check("all_reduce max", in, dt, numel, buf, 0, numel, want_max);
  dev_free(DEV_CUDA, buf);

  void *send = upload_pattern(r, 0, numel, dt, numel); /* reduce-scatter */
  void *recv = upload_pattern(r, 0, 0, dt, own);
  comm_reduce_scatter(c, send, recv, numel, dt, REDOP_SUM);
  check("reduce_scatter", in, dt, numel, recv, lo, own, want_sum);
  dev_free(DEV_CUDA, send), dev_free(DEV_CUDA, recv);

  send = upload_pattern(r, lo, own, dt, own); /* all-gather, out of place */
  recv = upload_pattern(r, 0, 0, dt, numel);
  comm_all_gather(c, send, recv, numel, dt);
  check("all_gather", in, dt, numel, recv, 0, numel, want_gathered);
  dev_free(DEV_CUDA, send), dev_free(DEV_CUDA, recv);

  recv = upload_pattern(r, 0, numel, dt, numel); /* all-gather in place: send = own chunk of recv */
  comm_all_gather(c, (char *)recv + lo * (int64_t)es, recv, numel, dt);
  check("all_gather in place", in, dt, numel, recv, 0, numel, want_gathered);
  dev_free(DEV_CUDA, recv);

  g_root = N - 1; /* broadcast from the last rank */
  buf = upload_pattern(r, 0, numel, dt, numel);
  comm_broadcast(c, buf, numel, dt, g_root);
  check("broadcast", in, dt, numel, buf, 0, numel, want_root);
  dev_free(DEV_CUDA, buf);

  send = upload_pattern(r, 0, numel, dt, numel); /* reduce to rank 0 */
  recv = upload_pattern(r, 0, 0, dt, numel);
  comm_reduce(c, send, recv, numel, dt, REDOP_SUM, 0);
  if (r == 0) check("reduce", in, dt, numel, recv, 0, numel, want_sum);
  dev_free(DEV_CUDA, send), dev_free(DEV_CUDA, recv);

  if (N > 1) { /* send/recv around the ring: rank r sends its pattern to r+1 */
    int dst = (r + 1) % N, src = (r + N - 1) % N;
    send = upload_pattern(r, 0, numel, dt, numel);
    recv = upload_pattern(r, 0, 0, dt, numel);
    if (r % 2 == 0) comm_send(c, send, numel, dt, dst), comm_recv(c, recv, numel, dt, src);
    else comm_recv(c, recv, numel, dt, src), comm_send(c, send, numel, dt, dst);
    g_root = src;
    check("send/recv", in, dt, numel, recv, 0, numel, want_root);
    dev_free(DEV_CUDA, send), dev_free(DEV_CUDA, recv);
  }
}

static float g_fill;
static float want_ordered(int64_t gi) { return g_fill; }

/* Stream ordering: fill on the compute stream, all-reduce at once (no host sync), scale on the
 * compute stream after comm_wait, then read: 2·Σ_r (r+1) everywhere, or the ordering is broken. */
static void run_ordering(comm_t *c, coll_impl_t impl) {
  int64_t n = 1 << 20;
  float *d = dev_malloc(DEV_CUDA, (size_t)n * 4, "gpu_coll ordering");
  comm_set_impl(c, impl);
  for (int rep = 0; rep < 3; rep++) {
    op_fill(DEV_CUDA, d, DT_F32, (float)(g_rank + 1), n);
    comm_handle_t h = comm_all_reduce_async(c, d, n, DT_F32, REDOP_SUM, "ordering");
    comm_wait(c, h);
    op_scale(DEV_CUDA, d, DT_F32, 2.0f, n);
    g_fill = (float)(g_world * (g_world + 1));
    check("ordering fill -> all_reduce -> scale", impl == COLL_RING ? "ring" : "vendor", DT_F32, n, d, 0, n,
          want_ordered);
  }
  /* several async ops in flight, waited in reverse order */
  enum { K = 4 };
  float *bufs[K];
  comm_handle_t hs[K];
  for (int k = 0; k < K; k++) {
    bufs[k] = dev_malloc(DEV_CUDA, (size_t)n * 4, "gpu_coll async");
    op_fill(DEV_CUDA, bufs[k], DT_F32, (float)(k + 1), n);
    hs[k] = comm_all_reduce_async(c, bufs[k], n, DT_F32, REDOP_SUM, "async");
  }
  for (int k = K - 1; k >= 0; k--) {
    comm_wait(c, hs[k]);
    g_fill = (float)((k + 1) * g_world);
    check("async all_reduce", impl == COLL_RING ? "ring" : "vendor", DT_F32, n, bufs[k], 0, n, want_ordered);
    dev_free(DEV_CUDA, bufs[k]);
  }
  comm_wait_all(c);
  dev_free(DEV_CUDA, d);
}

static void CUDART_CB sleep_on_stream(void *arg) { sleep((unsigned)*(int *)arg); }

/* The compute stream sleeps; the all-reduce waits for it on the comm stream; the host's wait
 * must give up after the deadline with the collective's name and tag (exit != 0). */
static void run_hang(comm_t *c, int seconds) {
  static int secs;
  secs = seconds;
  float *d = dev_malloc(DEV_CUDA, 1024 * sizeof(float), "gpu_coll hang");
  comm_set_timeout(c, 2);
  if (cudaLaunchHostFunc((cudaStream_t)devcu_compute_stream(), sleep_on_stream, &secs) != cudaSuccess)
    die_on_rank("cudaLaunchHostFunc failed");
  comm_all_reduce_async(c, d, 1024, DT_F32, REDOP_SUM, "hang-test");
  comm_wait_all(c); /* must not return */
  if (g_rank == 0)
    printf("gpu_coll: the hang test returned from comm_wait_all (the watchdog did not fire)\n");
}

int main(int argc, char **argv) {
  backend_t be = BACKEND_NCCL;
  int hang = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "nccl") == 0) be = BACKEND_NCCL;
      else if (strcmp(v, "mpi") == 0) be = BACKEND_MPI;
      else { fprintf(stderr, "error: --backend %s: allowed nccl|mpi\n", v); return 2; }
    } else if (strcmp(argv[i], "--hang-test") == 0 && i + 1 < argc) {
      hang = atoi(argv[++i]);
      if (hang < 1 || hang > 600) {
        fprintf(stderr, "error: --hang-test %s: allowed 1..600 seconds\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "error: %s: usage: gpu_coll [--backend nccl|mpi] [--hang-test SECONDS]\n", argv[i]);
      return 2;
    }
  }
  comm_t *c = comm_init(&argc, &argv, be, DEV_CUDA);
  g_rank = comm_rank(c);
  g_world = comm_world(c);
  ledger_init(g_rank, 0);
  comm_set_timeout(c, 120);
  if (hang) {
    run_hang(c, hang);
    comm_finalize(c);
    return 3; /* reached only if the watchdog failed */
  }
  int64_t sizes[] = {0, 1, g_world > 1 ? g_world - 1 : 2, 7, 1000, 1001, 65537};
  for (int impl = 0; impl < 2; impl++)
    for (int d = 0; d < 2; d++)
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        run_all(c, impl ? COLL_RING : COLL_VENDOR, d ? DT_BF16 : DT_F32, sizes[s]);
  run_ordering(c, COLL_VENDOR);
  run_ordering(c, COLL_RING);
  comm_wait_all(c);
  if (g_rank == 0)
    printf("gpu_coll: ok, %d ranks, %s backend, %d checks on rank 0 (vendor and ring, f32 and bf16)\n",
           g_world, comm_backend_name(c), g_checks);
  comm_finalize(c);
  return 0;
}
