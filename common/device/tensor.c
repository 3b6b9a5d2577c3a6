/* tensor.c — flat tensors allocated through the memory ledger (see tensor.h).
 * Notes: notes/00-memory.md. The ledger is charged BEFORE the allocation so that a
 * --mem-limit-mb budget refuses with its own message before the allocator is asked. */
#include "tensor.h" // tensor_t, tensor_alloc, tensor_free, tensor_view
#include "check.h"  // die, check_rank
#include "device.h" // dev_malloc, dev_free, dev_host_malloc, dev_host_free
#include "ledger.h" // ledger_add, ledger_sub, ledger_add_in, ledger_sub_in

tensor_t tensor_alloc(const char *name, ledger_cat_t cat, dtype_t dtype, device_t dev, int64_t numel) {
  if (numel < 0) die_on_rank("tensor_alloc: %s has negative numel %lld", name ? name : "?", (long long)numel);
  tensor_t t = {
      .data = NULL, .numel = numel, .dtype = dtype, .dev = dev, .cat = cat, .name = name, .owner = 1};
  if (numel == 0) return t;
  int64_t nbytes = numel * (int64_t)dtype_size(dtype);
  t.ledger_id = ledger_add(cat, nbytes, name);
  t.data = dev_malloc(dev, (size_t)nbytes, name); /* zero-filled; dies on failure */
  return t;
}

tensor_t tensor_alloc_host(const char *name, ledger_cat_t cat, dtype_t dtype, device_t for_dev,
                           int64_t numel) {
  if (numel < 0)
    die_on_rank("tensor_alloc_host: %s has negative numel %lld", name ? name : "?", (long long)numel);
  tensor_t t = {.data = NULL,
                .numel = numel,
                .dtype = dtype,
                .dev = DEV_CPU,
                .cat = cat,
                .name = name,
                .owner = 1,
                .arena = LEDGER_HOST,
                .pinned_for = for_dev};
  if (numel == 0) return t;
  int64_t nbytes = numel * (int64_t)dtype_size(dtype);
  t.ledger_id = ledger_add_in(LEDGER_HOST, cat, nbytes, name);
  t.data = dev_host_malloc(for_dev, (size_t)nbytes, name); /* zero-filled; dies on failure */
  return t;
}

void tensor_free(tensor_t *t) {
  if (!t) return;
  if (t->owner && t->data) {
    if (t->arena == LEDGER_HOST) dev_host_free(t->pinned_for, t->data);
    else dev_free(t->dev, t->data);
    ledger_sub_in(t->arena, t->cat, tensor_nbytes(t), t->ledger_id);
  }
  t->data = NULL;
  t->numel = 0;
}

tensor_t tensor_view(const tensor_t *t, int64_t off, int64_t numel) {
  if (off < 0 || numel < 0 || off + numel > t->numel)
    die_on_rank("tensor_view of %s: [%lld, %lld) is outside [0, %lld)", t->name ? t->name : "?",
        (long long)off, (long long)(off + numel), (long long)t->numel);
  tensor_t v = *t;
  v.data = numel ? tensor_at(t, off) : NULL;
  v.numel = numel;
  v.owner = 0;
  return v;
}

void *tensor_grow(tensor_t *t, const char *name, ledger_cat_t cat, dtype_t dtype, device_t dev,
                  int64_t numel) {
  if (t->data && (t->numel < numel || t->dtype != dtype || t->dev != dev)) tensor_free(t);
  if (!t->data) *t = tensor_alloc(name, cat, dtype, dev, numel);
  return t->data;
}
