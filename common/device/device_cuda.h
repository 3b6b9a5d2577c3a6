/* device_cuda.h — the CUDA side of device.h, implemented in device_cuda.cu (built with GPU=1,
 * ZL_CUDA defined). device.c calls these only for DEV_CUDA; C files never include CUDA headers. */
#ifndef ZL_DEVICE_CUDA_H
#define ZL_DEVICE_CUDA_H
#include <stddef.h> // size_t
#ifdef __cplusplus
extern "C" {
#endif
int devcu_count(void);                 /* visible GPUs; 0 when no driver/GPU (never dies) */
void devcu_select(int local_rank);     /* cudaSetDevice(local_rank % count), create streams, cuBLAS handle */
int devcu_current(void);               /* selected device id, -1 before devcu_select */
void *devcu_malloc(size_t nbytes);     /* cudaMalloc + memset 0; NULL on failure (device.c reports) */
void devcu_free(void *p);
/* kind: 0 host->device, 1 device->host, 2 device->device (on the compute stream, then synced) */
void devcu_memcpy(void *dst, const void *src, size_t nbytes, int kind);
void devcu_memset0(void *p, size_t nbytes);
/* Synchronize the compute stream. With a watchdog set (devcu_set_sync_watchdog) the host does not
 * block in cudaStreamSynchronize: it records an event and polls it (cudaEventQuery, sleeps
 * doubling from 20 us to 1 ms), calling the watchdog between polls with the seconds waited; the
 * watchdog dies (naming the rank and the operation) when the wait must end, or returns. */
void devcu_sync(void);
/* The same bounded wait for any stream (a cudaStream_t): devcu_sync's is the compute stream's.
 * Every host wait of the CUDA path goes through here (check_layers.py holds it). */
void devcu_wait_stream(void *stream);
/* The NCCL backend's watchdog for devcu_sync (a compute stream that waits on a collective's event
 * hangs when a peer died). NULL: plain cudaStreamSynchronize. */
void devcu_set_sync_watchdog(void (*check)(double waited_s));
/* Pinned host memory (cudaMallocHost + memset 0); NULL on failure (device.c reports). */
void *devcu_host_malloc(size_t nbytes);
void devcu_host_free(void *p);
/* Copy on the copy stream after an event recorded on the compute stream (direction from the
 * pointers: cudaMemcpyDefault); returns at once. devcu_copy_wait: synchronize the copy stream. */
void devcu_copy_async(void *dst, const void *src, size_t nbytes);
void devcu_copy_wait(void);
size_t devcu_used_bytes(void);         /* cudaMemGetInfo: total - free */
/* What p points to, by cudaPointerGetAttributes: 1 device (or managed) memory, 0 host memory (pinned
 * or not: what a device collective must not be handed). */
int devcu_pointer_is_device(const void *p);
/* The compute and communication streams as opaque pointers (cudaStream_t), for ops and NCCL. */
void *devcu_compute_stream(void);
void *devcu_comm_stream(void);
/* The cuBLAS handle (cublasHandle_t as void*), bound to the compute stream; NULL before select. */
void *devcu_cublas(void);
/* Called on a communication thread (host-staged MPI backend with CUDA buffers): sets the
 * thread's device and makes devcu_memcpy / devcu_memset0 / devcu_sync on THIS thread use the
 * comm stream, so staging copies never queue behind compute work. */
void devcu_thread_attach_comm(void);
#ifdef __cplusplus
}
#endif
#endif
