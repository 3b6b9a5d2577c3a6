/* ledger.h — per-rank memory ledger: live and peak bytes by category.
 * Every tensor allocation goes through it (tensor_alloc), so the report can print what a
 * rank really holds beside the formula of notes/design.md (notes/00-memory.md). */
#ifndef ZL_LEDGER_H
#define ZL_LEDGER_H
#include <stdint.h> // int64_t

typedef enum {
  LEDGER_PARAMS = 0, /* working parameters (bf16 or fp32), full or shard                  */
  LEDGER_GRADS,      /* resident gradients, full or shard                                   */
  LEDGER_MASTER,     /* fp32 master weights (bf16 mode only)                                */
  LEDGER_OPTIM,      /* optimizer states: Adam m and v, or SGD momentum                     */
  LEDGER_ACTS,       /* activations and op workspaces                                       */
  LEDGER_COMM,       /* transient communication buffers: buckets, gathered layers, scratch  */
  LEDGER_CKPT,       /* checkpoint copies kept in RAM: --ckpt-mem-every's snapshot + a buddy's */
  LEDGER_NCAT
} ledger_cat_t;

typedef enum {
  LEDGER_DEVICE = 0, /* accelerator memory (budgeted by --mem-limit-mb)                     */
  LEDGER_HOST,       /* host memory of the offloaded states (pinned on CUDA); no budget     */
  LEDGER_NARENA
} ledger_arena_t;

const char *ledger_cat_name(ledger_cat_t cat); /* "params", "grads", ... */
const char *ledger_arena_name(ledger_arena_t a); /* "device", "host" */

/* Reset all counters; rank is used in messages; limit_bytes > 0 sets the --mem-limit-mb budget. */
void ledger_init(int rank, int64_t limit_bytes);
/* Account nbytes of `what` to cat; returns the allocation's id (1, 2, ... per process, in order),
 * which its ledger_sub gives back. If the budget would be exceeded, dies with
 * `out of memory budget on rank R: <what> needs X MiB, Y of M MiB in use` (whole job down). */
int64_t ledger_add(ledger_cat_t cat, int64_t nbytes, const char *what);
/* Give back allocation `id` (ledger_add's answer) of nbytes in cat: the id names which block a
 * --alloc-trace replay frees when several of one size are live. */
void ledger_sub(ledger_cat_t cat, int64_t nbytes, int64_t id);

int64_t ledger_live(ledger_cat_t cat);
int64_t ledger_peak(ledger_cat_t cat);   /* highest live value of this category since init/reset */
int64_t ledger_total_live(void);
int64_t ledger_total_peak(void);         /* highest sum over all categories at one moment */
int64_t ledger_limit(void);
/* Peaks restart from the current live values (e.g. to measure steady state after setup); both arenas. */
void ledger_reset_peaks(void);

/* The same in a chosen arena (ledger_add(c, n, w) is ledger_add_in(LEDGER_DEVICE, c, n, w)).
 * The budget applies only when a is LEDGER_DEVICE. */
int64_t ledger_add_in(ledger_arena_t a, ledger_cat_t cat, int64_t nbytes, const char *what);
void ledger_sub_in(ledger_arena_t a, ledger_cat_t cat, int64_t nbytes, int64_t id);
int64_t ledger_live_in(ledger_arena_t a, ledger_cat_t cat);
int64_t ledger_peak_in(ledger_arena_t a, ledger_cat_t cat);
int64_t ledger_total_live_in(ledger_arena_t a);
int64_t ledger_total_peak_in(ledger_arena_t a);
/* --alloc-trace PATH: from now on every ledger_add/ledger_sub is written to PATH, one line each,
 * `A <arena> <cat> <bytes> <id> <what>` or `F <arena> <cat> <bytes> <id>` (arena and category as
 * numbers; a free names the id of the allocation it gives back), the real allocation/free sequence
 * that common/base/allocsim.h replays. NULL or "" turns it off.
 * Counters and budgets are unchanged by it. Dies naming PATH if it cannot be opened. */
void ledger_trace_open(const char *path);
#endif
