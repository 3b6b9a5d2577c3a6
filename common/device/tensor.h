/* tensor.h — a flat buffer with a dtype, a device, a ledger category and arena.
 * Tensors are flat on purpose: the flat parameter buffer is exactly what ZeRO shards
 * (see notes/03-zero1.md). Views share the owner's memory and are never freed.
 * Host-arena tensors (tensor_alloc_host) hold what chapter 08 offloads (notes/08-offload.md). */
#ifndef ZL_TENSOR_H
#define ZL_TENSOR_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t
#include "ledger.h" // ledger_cat_t, ledger_arena_t

typedef struct tensor {
  void *data;       /* numel elements of dtype on dev; NULL when numel == 0 */
  int64_t numel;
  dtype_t dtype;
  device_t dev;
  ledger_cat_t cat;
  const char *name; /* static string, used in ledger messages */
  int owner;        /* 1: tensor_free releases data; 0: a view */
  ledger_arena_t arena; /* LEDGER_DEVICE (0), or LEDGER_HOST: then dev is DEV_CPU (host memory,
                         * ops run on it with DEV_CPU) and pinned_for says how it was allocated */
  device_t pinned_for;  /* host arena: DEV_CUDA when pinned (cudaMallocHost) for that device */
  int64_t ledger_id;    /* owner: ledger_add's id of this allocation, given back by tensor_free */
} tensor_t;

/* Allocate numel elements, zero-filled, accounted to cat. Dies (whole job) when the ledger
 * budget or the allocator refuses: `out of memory ... on rank R: <name> needs X MiB`. */
tensor_t tensor_alloc(const char *name, ledger_cat_t cat, dtype_t dtype, device_t dev, int64_t numel);
/* The same in the host arena: host memory, pinned for `for_dev` when it is DEV_CUDA (async
 * copies), plain on DEV_CPU; accounted to cat in LEDGER_HOST, outside the --mem-limit-mb budget.
 * The tensor's dev is DEV_CPU: host code and DEV_CPU ops use it directly. */
tensor_t tensor_alloc_host(const char *name, ledger_cat_t cat, dtype_t dtype, device_t for_dev,
                           int64_t numel);
/* Release an owning tensor and give its bytes back to the ledger; a view or empty tensor is a no-op.
 * Leaves t empty (data NULL, numel 0). */
void tensor_free(tensor_t *t);
/* A working buffer that grows: at least numel elements of dtype on dev in *t, reallocated (freed,
 * then tensor_alloc: contents not kept) when it is smaller or of another dtype or device; returns
 * t->data (NULL for numel 0). The scratch of split layers (solutions/: tp, sp, cp, ulysses, moe). */
void *tensor_grow(tensor_t *t, const char *name, ledger_cat_t cat, dtype_t dtype, device_t dev,
                  int64_t numel);
/* A view of elements [off, off+numel) of t. */
tensor_t tensor_view(const tensor_t *t, int64_t off, int64_t numel);
static inline int64_t tensor_nbytes(const tensor_t *t) { return t->numel * (int64_t)dtype_size(t->dtype); }
/* Pointer to element i. */
static inline void *tensor_at(const tensor_t *t, int64_t i) {
  return (char *)t->data + i * (int64_t)dtype_size(t->dtype);
}
#endif
