/* allocsim.h — replay a rank's real allocation/free sequence (the ledger's --alloc-trace) through
 * two allocator designs and measure fragmentation (ZeRO-R "MD", notes/zero-r.md):
 *   ALLOCSIM_CACHING  PyTorch's CUDA caching allocator in miniature: sizes rounded to 512 B; a
 *                     small pool (<= 1 MiB, 2 MiB segments) and a large pool (< 10 MiB: 20 MiB
 *                     segments, else the size rounded to 2 MiB); best fit (smallest free block
 *                     that fits, then lowest segment and offset); a block is split when the rest
 *                     is >= 512 B (small) or > 1 MiB (large); freed blocks stay cached and merge
 *                     with free neighbours; when a new segment would exceed the budget, the fully
 *                     free segments are released and it retries once (num_alloc_retries).
 *   ALLOCSIM_REGIONS  ZeRO's contiguous regions: the long-lived tensors (allocsim_long_lived) go
 *                     to one pre-allocated region sized to their live peak (
 *                     best fit inside it, spilling to the caching pool if none fits); the short-lived ones
 * use
 *                     the caching allocator above.
 * A free names the id of the allocation it gives back (the ledger's contract), so it frees exactly
 * the block that allocation took. Nothing here touches real memory. */
#ifndef ZL_ALLOCSIM_H
#define ZL_ALLOCSIM_H
#include <stdint.h> // int64_t

typedef struct {
  char op;       /* 'A' allocate, 'F' free */
  int cat;       /* ledger_cat_t */
  int64_t bytes; /* as given to the ledger */
  int64_t id;    /* ledger_add's id: 'A' its own (increasing along the trace), 'F' the allocation it frees */
  char what[48]; /* the allocation's name ('A' only) */
} allocsim_event_t;

typedef enum { ALLOCSIM_CACHING = 0, ALLOCSIM_REGIONS } allocsim_mode_t;

typedef struct {
  int64_t alloc_peak;        /* highest sum of live (rounded) block sizes: allocated_bytes.all.peak   */
  int64_t reserved_peak;     /* highest sum of segment sizes: reserved_bytes.all.peak                 */
  int64_t cached_peak;       /* highest reserved - allocated at one moment (free but held)            */
  int64_t largest_free_end;  /* largest free block inside the reserved segments after the last event */
  int64_t cached_at_peak;    /* reserved - allocated when allocated last reached its peak             */
  int64_t largest_free_at_peak; /* largest free block at that moment                                  */
  int64_t region_bytes;      /* ALLOCSIM_REGIONS: the long-lived region's size; 0 otherwise            */
  int segments;              /* segments created (cudaMalloc calls)                                   */
  int retries;               /* release-and-retry rounds (num_alloc_retries)                          */
  int spills;                /* ALLOCSIM_REGIONS: long-lived allocations that did not fit the region  */
  int failed_at;             /* index of the first event that failed under the budget, -1 = none      */
  int64_t fail_bytes;        /* its size                                                              */
  char fail_what[48];        /* its name                                                              */
} allocsim_result_t;

/* 1 if a tensor of this category and name is long-lived (its own contiguous region in
 * ALLOCSIM_REGIONS): parameters, gradients, master weights, optimizer states and the kept
 * activations (checkpoints, saved tensors, unit outputs); 0 for communication buffers and the
 * grow-only op workspaces and scratch ("workspace"/"scratch" in the name). */
int allocsim_long_lived(int cat, const char *what);

/* Replay ev[0..n) under mode with a budget on reserved bytes (0 = none) into *r; returns 0, or 1
 * if an allocation failed (r->failed_at says which; the replay stops there). A free whose id names
 * no live allocation, or one of another category or size, dies naming its index. */
int allocsim_run(const allocsim_event_t *ev, int n, allocsim_mode_t mode, int64_t budget,
                 allocsim_result_t *r);

/* The smallest budget (a multiple of `step` bytes, step > 0) under which the replay succeeds, found
 * by bisection (it assumes a larger budget never fails where a smaller one succeeds). */
int64_t allocsim_min_budget(const allocsim_event_t *ev, int n, allocsim_mode_t mode, int64_t step);

/* Read a --alloc-trace file, device arena only, into a new array (*n events); dies naming the
 * path and line on a malformed line. Free it with free(). */
allocsim_event_t *allocsim_load(const char *path, int *n);
#endif
