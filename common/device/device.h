/* device.h — raw memory on a device: the only place that knows CPU from CUDA memory.
 * The CUDA side (device_cuda.cu) exists when built with GPU=1 (ZL_CUDA defined); asking for
 * DEV_CUDA in a CPU-only build dies with a clear message (no silent fallback). */
#ifndef ZL_DEVICE_H
#define ZL_DEVICE_H
#include <stddef.h> // size_t
#include <stdint.h> // int64_t
#include "dtype.h"  // device_t

/* 1 when this binary was built with the CUDA path. */
int device_cuda_built(void);
/* Number of visible GPUs (0 when none or CPU-only build). Does not create a CUDA context
 * unless a driver is present. */
int device_cuda_count(void);
/* 1 when p is GPU memory (cudaPointerGetAttributes: device or managed), 0 for host memory, pinned or
 * not, and always in a CPU-only build or without a GPU. What a device collective may be handed. */
int dev_is_device_pointer(const void *p);
/* Select the GPU for this rank (local_rank % count) and create the streams; call once. */
void device_cuda_select(int local_rank);

void *dev_malloc(device_t dev, size_t nbytes, const char *what); /* zero-filled; dies on failure */
void dev_free(device_t dev, void *p);
void dev_memcpy(device_t dst_dev, void *dst, device_t src_dev, const void *src, size_t nbytes);
void dev_memset0(device_t dev, void *p, size_t nbytes);
void dev_sync(device_t dev); /* wait for all queued work on the compute stream */
/* n host fp32 values into dst (dtype dt: F32 or BF16, round to nearest even) on dev. The cast
 * runs on the host and one copy uploads it: no device staging buffer (the ledger sees none). */
void dev_upload(device_t dev, void *dst, dtype_t dt, const float *host, int64_t n);
/* Host memory for the host arena (chapter 08, notes/08-offload.md): zero-filled; pinned
 * (cudaMallocHost) when dev is DEV_CUDA so that copies to and from it run asynchronously, plain
 * calloc on DEV_CPU. Dies on failure naming `what`. Free with dev_host_free(dev, p). */
void *dev_host_malloc(device_t dev, size_t nbytes, const char *what);
void dev_host_free(device_t dev, void *p);
/* Copy nbytes between device memory and host-arena memory (either way) on the copy stream,
 * ordered after everything queued so far on the compute stream (an event), overlapping what
 * is queued after: returns at once on CUDA. DEV_CPU: a memcpy, done when it returns. The
 * buffers must stay untouched until dev_copy_wait. */
void dev_copy_async(device_t dev, void *dst, const void *src, size_t nbytes);
/* Wait (host) for every dev_copy_async issued so far; nothing on DEV_CPU. */
void dev_copy_wait(device_t dev);
/* Used bytes as the driver sees them (cudaMemGetInfo total - free); 0 on CPU. */
size_t dev_used_bytes(device_t dev);
/* Used bytes now minus used bytes right after device_cuda_select (other processes on the GPU
 * move it too); 0 on CPU. The report prints it beside the ledger total. */
size_t dev_used_delta(device_t dev);
#endif
