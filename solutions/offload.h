/* offload.h — chapter 08's adapter: ZeRO-Offload, the optimizer states and the optimizer step
 * of this rank's shard on the host. Notes: notes/08-offload.md.
 *
 * The strategy is ZeRO-2 (solutions/zero.h: the shard plan, the reduce-scatter per unit during
 * backward, the all-gather of the params) with the fp32 truth of the rank's pieces moved:
 *
 *                      device arena                         host arena
 *   ZeRO-2          params (P) + grads (P/N)             -
 *                   + master, m, v (P/N)
 *   + offload       params (P) + grads (P/N)             master/fp32 piece, m, v (P/N)
 *                                                        + the grad shard copy (P/N, wdt)
 *
 * Per step: each unit's gradient piece goes device → host as soon as its reduce-scatter is
 * known to be done (a copy stream on CUDA, overlapping the backward; a memcpy on the CPU), the
 * optimizer runs on the host with elementwise.h's AdamW / SGD (the device's own code, so the
 * bits are the same), and the updated pieces (cast to the working dtype on the host) go host →
 * device before the usual all-gather. */
#ifndef ZL_OFFLOAD_H
#define ZL_OFFLOAD_H
#include <stdint.h>                // int64_t
#include "dtype.h"       // dtype_t
#include "elementwise.h" // ew_adamw_t
#include "train.h"       // strategy_t

typedef enum { OFFLOAD_NONE = 0, OFFLOAD_OPTIMIZER = 1 } offload_kind_t;

/* "none" | "optimizer" → *kind; returns 0, or -1 for any other word. */
int offload_parse(const char *word, offload_kind_t *kind);
/* Takes the offload flags out of argv (the rest goes on to train_parse_args, *argc updated):
 * --offload none|optimizer into *kind, --host-threads K (1..64) into *threads, and --bench-adam N
 * into *bench when bench is not NULL (else it is not one of them). Returns 0, or 2 after one error
 * line naming the flag (the caller exits with it). */
int offload_take_flags(int *argc, char **argv, offload_kind_t *kind, int *threads, double *bench);
/* The ZeRO-2 strategy with `kind` offloaded: OFFLOAD_NONE is zero2_strategy() itself (the
 * reference the tests compare with), OFFLOAD_OPTIMIZER is "zero2-offload". Its host step runs on
 * t->cfg->host_threads threads (the chapter's main sets it from --host-threads; the bits do not
 * depend on it). */
const strategy_t *offload_strategy(offload_kind_t kind);

/* The host optimizer step on n elements, split over `threads` threads (contiguous ranges):
 * AdamW (elementwise.h's ew_adamw with the step's scalars k) on fp32 w, m, v and grad in gdt.
 * Element-wise, so every split gives the same bits as op_adamw on either device. */
void offload_host_adamw(float *w, const void *grad, dtype_t gdt, float *m, float *v, int64_t n, ew_adamw_t k,
                        float gscale, int threads);
/* SGD with momentum the same way (ew_sgd). */
void offload_host_sgd(float *w, const void *grad, dtype_t gdt, float *buf, int64_t n, float lr, float mu,
                      float wd, float gscale, int threads);
#endif
