/* tensor.h — a flat buffer with a dtype, a device and a ledger category.
 * Tensors are flat on purpose: the flat parameter buffer is exactly what ZeRO shards
 * (see notes/03-zero1.md). Views share the owner's memory and are never freed. */
#ifndef ZL_TENSOR_H
#define ZL_TENSOR_H
#include <stdint.h> // int64_t
#include "dtype.h"  // dtype_t, device_t
#include "ledger.h" // ledger_cat_t

typedef struct tensor {
  void *data;       /* numel elements of dtype on dev; NULL when numel == 0 */
  int64_t numel;
  dtype_t dtype;
  device_t dev;
  ledger_cat_t cat;
  const char *name; /* static string, used in ledger messages */
  int owner;        /* 1: tensor_free releases data; 0: a view */
} tensor_t;

/* Allocate numel elements, zero-filled, accounted to cat. Dies (whole job) when the ledger
 * budget or the allocator refuses: `out of memory ... on rank R: <name> needs X MiB`. */
tensor_t tensor_alloc(const char *name, ledger_cat_t cat, dtype_t dtype, device_t dev, int64_t numel);
/* Release an owning tensor and give its bytes back to the ledger; a view or empty tensor is a no-op.
 * Leaves t empty (data NULL, numel 0). */
void tensor_free(tensor_t *t);
/* A view of elements [off, off+numel) of t. */
tensor_t tensor_view(const tensor_t *t, int64_t off, int64_t numel);
static inline int64_t tensor_nbytes(const tensor_t *t) { return t->numel * (int64_t)dtype_size(t->dtype); }
/* Pointer to element i. */
static inline void *tensor_at(const tensor_t *t, int64_t i) { return (char *)t->data + i * (int64_t)dtype_size(t->dtype); }
#endif
