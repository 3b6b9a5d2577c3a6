/* device.c — raw memory on a device: CPU here, CUDA through device_cuda.h (see device.h).
 * Notes: notes/00-memory.md. In a CPU-only build DEV_CUDA dies with a clear message. */
#include "device.h" // dev_malloc, dev_free, ...
#include "args.h"   // args_env_rank
#include "check.h"  // die, check_rank, xmalloc
#include <stdlib.h> // calloc, free
#include <string.h> // memcpy, memset
#ifdef ZL_CUDA
#include "device_cuda.h" // devcu_*
#endif

/* The rank for messages: comm_init's, or the launcher's before MPI starts. */
static int msg_rank(void) { return check_rank() >= 0 ? check_rank() : args_env_rank(); }

#ifndef ZL_CUDA
static _Noreturn void no_cuda(const char *fn) {
  die_on_rank("%s: this binary was built without CUDA (make GPU=1)", fn);
}
#endif

int device_cuda_built(void) {
#ifdef ZL_CUDA
  return 1;
#else
  return 0;
#endif
}

int device_cuda_count(void) {
#ifdef ZL_CUDA
  return devcu_count(); /* 0 when no driver or no GPU, never dies */
#else
  return 0;
#endif
}

int dev_is_device_pointer(const void *p) {
#ifdef ZL_CUDA
  return p && device_cuda_count() > 0 && devcu_pointer_is_device(p);
#else
  (void)p;
  return 0;
#endif
}

static size_t g_used_at_select; /* driver-reported used bytes right after device_cuda_select */

void device_cuda_select(int local_rank) {
#ifdef ZL_CUDA
  if (devcu_count() <= 0)
    die_on_rank("--device cuda asked for a GPU, but none is visible (check nvidia-smi)");
  devcu_select(local_rank);
  g_used_at_select = devcu_used_bytes(); /* after the context exists: the delta is ours */
#else
  no_cuda("device_cuda_select");
#endif
}

/* p, or stop: "out of memory on rank R: WHAT needs X MiB<where>" (where: which memory). */
static void *alloc_or_die(void *p, size_t nbytes, const char *what, const char *where) {
  if (!p)
    die("out of memory on rank %d: %s needs %.1f MiB%s", msg_rank(), what ? what : "allocation",
        nbytes / 1048576.0, where);
  return p;
}

void *dev_malloc(device_t dev, size_t nbytes, const char *what) {
  if (dev == DEV_CPU) return alloc_or_die(calloc(nbytes ? nbytes : 1, 1), nbytes, what, ""); /* zero-filled */
#ifdef ZL_CUDA
  return alloc_or_die(devcu_malloc(nbytes ? nbytes : 1), nbytes, what, " (GPU)");
#else
  no_cuda("dev_malloc");
#endif
}

void dev_free(device_t dev, void *p) {
  if (!p) return;
  if (dev == DEV_CPU) {
    free(p);
    return;
  }
#ifdef ZL_CUDA
  devcu_free(p);
#else
  no_cuda("dev_free");
#endif
}

void dev_memcpy(device_t dst_dev, void *dst, device_t src_dev, const void *src, size_t nbytes) {
  if (nbytes == 0 || dst == src) return;
  if (dst_dev == DEV_CPU && src_dev == DEV_CPU) {
    memmove(dst, src, nbytes); /* overlapping ranges are allowed on the host */
    return;
  }
#ifdef ZL_CUDA
  int kind = dst_dev == DEV_CUDA && src_dev == DEV_CPU ? 0 : dst_dev == DEV_CPU ? 1 : 2;
  devcu_memcpy(dst, src, nbytes, kind);
#else
  no_cuda("dev_memcpy");
#endif
}

void dev_memset0(device_t dev, void *p, size_t nbytes) {
  if (nbytes == 0) return;
  if (dev == DEV_CPU) {
    memset(p, 0, nbytes);
    return;
  }
#ifdef ZL_CUDA
  devcu_memset0(p, nbytes);
#else
  no_cuda("dev_memset0");
#endif
}

void dev_sync(device_t dev) {
  if (dev == DEV_CPU) return;
#ifdef ZL_CUDA
  devcu_sync();
#else
  no_cuda("dev_sync");
#endif
}

void dev_upload(device_t dev, void *dst, dtype_t dt, const float *host, int64_t n) {
  if (n <= 0) return;
  if (dt == DT_F32) { /* no cast: one copy */
    dev_memcpy(dev, dst, DEV_CPU, host, (size_t)n * sizeof(float));
    return;
  }
  if (dt != DT_BF16 && dt != DT_F16) die_on_rank("dev_upload: fp32 -> %s not supported", dtype_name(dt));
  uint16_t *cast = dev == DEV_CPU ? dst : xmalloc((size_t)n * sizeof(uint16_t), "upload cast (host)");
  if (dt == DT_BF16)
    for (int64_t i = 0; i < n; i++) cast[i] = bf16_from_f32(host[i]);
  else
    for (int64_t i = 0; i < n; i++) cast[i] = fp16_from_f32(host[i]);
  if (dev != DEV_CPU) {
    dev_memcpy(dev, dst, DEV_CPU, cast, (size_t)n * sizeof(bf16_t));
    free(cast);
  }
}

void *dev_host_malloc(device_t dev, size_t nbytes, const char *what) {
  if (dev == DEV_CPU) return alloc_or_die(calloc(nbytes ? nbytes : 1, 1), nbytes, what, " (host)");
#ifdef ZL_CUDA
  return alloc_or_die(devcu_host_malloc(nbytes ? nbytes : 1), nbytes, what, " (host, pinned)");
#else
  no_cuda("dev_host_malloc");
#endif
}

void dev_host_free(device_t dev, void *p) {
  if (!p) return;
  if (dev == DEV_CPU) {
    free(p);
    return;
  }
#ifdef ZL_CUDA
  devcu_host_free(p);
#else
  no_cuda("dev_host_free");
#endif
}

void dev_copy_async(device_t dev, void *dst, const void *src, size_t nbytes) {
  if (nbytes == 0 || dst == src) return;
  if (dev == DEV_CPU) { /* the two arenas are both host memory: a real copy, done now */
    memcpy(dst, src, nbytes);
    return;
  }
#ifdef ZL_CUDA
  devcu_copy_async(dst, src, nbytes);
#else
  no_cuda("dev_copy_async");
#endif
}

void dev_copy_wait(device_t dev) {
  if (dev == DEV_CPU) return;
#ifdef ZL_CUDA
  devcu_copy_wait();
#else
  no_cuda("dev_copy_wait");
#endif
}

size_t dev_used_bytes(device_t dev) {
  if (dev == DEV_CPU) return 0;
#ifdef ZL_CUDA
  return devcu_used_bytes();
#else
  no_cuda("dev_used_bytes");
#endif
}

size_t dev_used_delta(device_t dev) {
  if (dev == DEV_CPU) return 0;
  size_t now = dev_used_bytes(dev);
  return now > g_used_at_select ? now - g_used_at_select : 0;
}
