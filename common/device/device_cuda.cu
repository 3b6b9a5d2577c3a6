/* device_cuda.cu — the CUDA side of device.h (see device_cuda.h). Notes: notes/gpu.md.
 *
 * One GPU per process: devcu_select picks local_rank % count, creates two non-blocking streams
 * (compute, comm) and a cuBLAS handle bound to the compute stream. Device memory uses CUDA's
 * stream-ordered allocator on the compute stream (cudaMallocAsync / cudaFreeAsync): freeing a
 * ZeRO-3 gathered layer then does not stall the host the way cudaFree's implicit device-wide
 * synchronization would, so NCCL keeps overlapping. Nothing here runs before devcu_count or
 * devcu_select is called: CPU runs of a CUDA-enabled binary never touch the driver. */
#include "cuda_common.cuh" // CHECK_CUDA, CHECK_CUBLAS, die, check_rank
#include "device_cuda.h"   // devcu_*
#include <string.h>        // memset (pinned host memory)
#include <time.h>          // clock_gettime: devcu_sync's watchdog
#include <unistd.h>        // usleep: devcu_sync's polling

static int g_device = -1;              /* selected GPU, -1 before devcu_select */
static cudaStream_t g_compute = NULL;  /* kernels, cuBLAS, copies of the compute thread */
static cudaStream_t g_comm = NULL;     /* NCCL collectives and the ring's kernels */
static cudaStream_t g_copy = NULL;     /* offload copies device <-> pinned host (created on first use) */
static cudaEvent_t g_copy_after = NULL; /* recorded on g_compute: g_copy waits for it */
static cublasHandle_t g_cublas = NULL; /* bound to g_compute */
/* 1 on a communication thread (devcu_thread_attach_comm): its copies go on the comm stream. */
static thread_local int t_on_comm = 0;

static cudaStream_t my_stream(void) { return t_on_comm ? g_comm : g_compute; }

static void need_device(const char *fn) {
  if (g_device < 0) die_on_rank("%s: no GPU selected yet (device_cuda_select first)", fn);
}

int devcu_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) { /* no driver, no device, driver too old: the CPU path must go on */
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls do not see it */
    return 0;
  }
  return n;
}

void devcu_select(int local_rank) {
  if (g_device >= 0) return; /* once */
  int n = devcu_count();
  if (n <= 0) die_on_rank("--device cuda: no GPU visible (nvidia-smi; CUDA_VISIBLE_DEVICES)");
  int dev = (local_rank < 0 ? 0 : local_rank) % n;
  CHECK_CUDA(cudaSetDevice(dev));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_compute, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_comm, cudaStreamNonBlocking));
  CHECK_CUBLAS(cublasCreate(&g_cublas));
  CHECK_CUBLAS(cublasSetStream(g_cublas, g_compute));
  /* Plain fp32 math unless an op asks for tensor cores itself: no silent TF32 (notes/gpu.md). */
  CHECK_CUBLAS(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));
  g_device = dev;
}

int devcu_current(void) { return g_device; }

void *devcu_malloc(size_t nbytes) {
  need_device("devcu_malloc");
  cudaStream_t s = my_stream();
  void *p = NULL;
  cudaError_t e = cudaMallocAsync(&p, nbytes, s);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return NULL; /* device.c reports it with the tensor's name */
  }
  CHECK_CUDA(e);
  CHECK_CUDA(cudaMemsetAsync(p, 0, nbytes, s)); /* zero-filled, ordered before any use on s */
  if (t_on_comm) devcu_wait_stream(s);
  return p;
}

void devcu_free(void *p) {
  if (!p) return;
  need_device("devcu_free");
  CHECK_CUDA(cudaFreeAsync(p, my_stream())); /* released once the stream's queued work is done */
}

void devcu_memcpy(void *dst, const void *src, size_t nbytes, int kind) {
  if (nbytes == 0) return;
  need_device("devcu_memcpy");
  /* cudaMemcpyDefault: the direction from the pointers (unified addressing), so a "device"
   * pointer that is really pinned host memory (chapter 08's offloaded states, reached through
   * strategy_t.layout by the checkpoints) copies right too. `kind` documents the caller's intent. */
  (void)kind;
  cudaMemcpyKind k = cudaMemcpyDefault;
  cudaStream_t s = my_stream();
  CHECK_CUDA(cudaMemcpyAsync(dst, src, nbytes, k, s));
  devcu_wait_stream(s); /* the contract: done when the call returns (the watchdog bounds the wait) */
}

void devcu_memset0(void *p, size_t nbytes) {
  if (nbytes == 0) return;
  need_device("devcu_memset0");
  CHECK_CUDA(cudaMemsetAsync(p, 0, nbytes, my_stream())); /* ordered on the stream, no host wait */
}

static void (*g_sync_watchdog)(double waited_s) = NULL; /* set by the NCCL backend */
static thread_local cudaEvent_t t_sync_ev = NULL;      /* per thread: the compute and comm threads */

void devcu_set_sync_watchdog(void (*check)(double waited_s)) { g_sync_watchdog = check; }

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void devcu_sync(void) {
  if (g_device < 0) return;
  devcu_wait_stream(my_stream());
}

/* THE host wait of the CUDA path: every wait of common/ for a stream's work comes here (the layer
 * check, common/scripts/check_layers.py, fails on any other cudaStreamSynchronize), so a stream
 * that waits on a collective whose peer died ends the job within --timeout-s, naming the rank —
 * the loss, the gradient norm, a dev_memcpy, the offload copy, the embedding backward alike. */
void devcu_wait_stream(void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  if (!g_sync_watchdog) { /* no collective can hang this stream (no NCCL): a plain wait */
    CHECK_CUDA(cudaStreamSynchronize(s));
    return;
  }
  if (!t_sync_ev) CHECK_CUDA(cudaEventCreateWithFlags(&t_sync_ev, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(t_sync_ev, s));
  double t0 = mono_s();
  int sleep_us = 20;
  for (;;) {
    cudaError_t q = cudaEventQuery(t_sync_ev);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) CHECK_CUDA(q);
    g_sync_watchdog(mono_s() - t0); /* dies on a NCCL error or past the deadline */
    usleep((useconds_t)sleep_us);
    if (sleep_us < 1000) sleep_us *= 2;
  }
}

void *devcu_host_malloc(size_t nbytes) {
  need_device("devcu_host_malloc");
  void *p = NULL;
  cudaError_t e = cudaMallocHost(&p, nbytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return NULL;
  }
  CHECK_CUDA(e);
  memset(p, 0, nbytes);
  return p;
}

void devcu_host_free(void *p) {
  if (!p) return;
  /* cudaFreeHost synchronizes the device: nothing queued may still read or write p. The bounded
   * wait first, so a stream stuck behind a dead peer's collective ends the job, not this call. */
  devcu_sync();
  CHECK_CUDA(cudaFreeHost(p));
}

void devcu_copy_async(void *dst, const void *src, size_t nbytes) {
  if (nbytes == 0) return;
  need_device("devcu_copy_async");
  if (!g_copy) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&g_copy, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&g_copy_after, cudaEventDisableTiming));
  }
  CHECK_CUDA(cudaEventRecord(g_copy_after, g_compute)); /* after what compute queued so far ... */
  CHECK_CUDA(cudaStreamWaitEvent(g_copy, g_copy_after, 0));
  /* ... beside what it queues next */
  CHECK_CUDA(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, g_copy));
}

void devcu_copy_wait(void) {
  if (g_copy) devcu_wait_stream(g_copy);
}

size_t devcu_used_bytes(void) {
  if (g_device < 0) return 0;
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

int devcu_pointer_is_device(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError(); /* an unknown pointer: plain host memory (clears the sticky error) */
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void *devcu_compute_stream(void) { return (void *)g_compute; }
void *devcu_comm_stream(void) { return (void *)g_comm; }
void *devcu_cublas(void) { return (void *)g_cublas; }

void devcu_thread_attach_comm(void) {
  need_device("devcu_thread_attach_comm");
  CHECK_CUDA(cudaSetDevice(g_device)); /* the device is per thread in the runtime API */
  t_on_comm = 1;
}
