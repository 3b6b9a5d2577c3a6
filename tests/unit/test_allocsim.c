/* test_allocsim.c — the allocator simulation of ZeRO-R memory defragmentation (common/base/allocsim.h):
 * best fit, split, merge, release-and-retry, the contiguous regions, a free giving back its own
 * block (by ledger id), and a fragmentation example whose answer is worked out by hand.
 * Notes: notes/zero-r.md. Suite common_allocsim. */
#include "zl_test.h"  // Criterion, zl helpers
#include "allocsim.h" // allocsim_run, allocsim_load
#include "ledger.h"   // LEDGER_*, ledger_trace_open
#include <stdio.h>    // snprintf, fopen
#include <unistd.h>   // unlink

#define MiB ((int64_t)1 << 20)
/* an allocation with its ledger id; a free of the allocation with that id */
#define A(i, c, b, w) ((allocsim_event_t){.op = 'A', .id = (i), .cat = (c), .bytes = (b), .what = w})
#define F(i, c, b) ((allocsim_event_t){.op = 'F', .id = (i), .cat = (c), .bytes = (b)})

static void expect_i64(int64_t got, int64_t want, const char *what) {
  cr_expect_eq(got, want, "%s: got %lld, expected %lld", what, (long long)got, (long long)want);
}

/* Holes of 2048 B (first) and 1024 B: best fit puts 1024 B into the 1024 B hole, so a later 2048 B
 * still fits the first hole and the 2 MiB segment's tail stays 2 MiB - 4096 B (first fit: - 6144). */
Test(common_allocsim, best_fit_takes_the_smallest_hole) {
  allocsim_event_t ev[] = {A(1, LEDGER_ACTS, 2048, "p"), A(2, LEDGER_ACTS, 512, "q"),
                           A(3, LEDGER_ACTS, 1024, "r"), A(4, LEDGER_ACTS, 512, "s"),
                           F(1, LEDGER_ACTS, 2048),      F(3, LEDGER_ACTS, 1024),
                           A(5, LEDGER_ACTS, 1024, "z"), A(6, LEDGER_ACTS, 2048, "w")};
  allocsim_result_t r;
  cr_assert_eq(allocsim_run(ev, 8, ALLOCSIM_CACHING, 0, &r), 0, "replay failed at event %d", r.failed_at);
  expect_i64(r.segments, 1, "segments");
  expect_i64(r.largest_free_end, 2 * MiB - 4096, "largest free block (the tail)");
  expect_i64(r.reserved_peak, 2 * MiB, "reserved peak");
  expect_i64(r.alloc_peak, 4096, "allocated peak");
}

/* Sizes round up to 512 B; three freed neighbours merge back into the whole segment. */
Test(common_allocsim, split_and_merge) {
  allocsim_event_t ev[] = {A(1, LEDGER_ACTS, 1000, "a"), A(2, LEDGER_ACTS, 1, "b"),
                           A(3, LEDGER_ACTS, 1024, "c"), F(2, LEDGER_ACTS, 1),
                           F(1, LEDGER_ACTS, 1000),      F(3, LEDGER_ACTS, 1024)};
  allocsim_result_t r;
  cr_assert_eq(allocsim_run(ev, 3, ALLOCSIM_CACHING, 0, &r), 0, "replay failed");
  expect_i64(r.alloc_peak, 1024 + 512 + 1024, "allocated (rounded to 512 B)");
  expect_i64(r.largest_free_end, 2 * MiB - 2560, "tail after three splits");
  cr_assert_eq(allocsim_run(ev, 6, ALLOCSIM_CACHING, 0, &r), 0, "replay failed");
  expect_i64(r.largest_free_end, 2 * MiB, "merged back into one block");
  expect_i64(r.reserved_peak, 2 * MiB, "freed blocks stay cached (reserved)");
}

/* A cached free 20 MiB segment cannot hold 22 MiB; it is released when a new segment would exceed
 * the budget (one retry). */
Test(common_allocsim, release_and_retry_under_budget) {
  allocsim_event_t ev[] = {A(1, LEDGER_COMM, 8 * MiB, "s"), F(1, LEDGER_COMM, 8 * MiB),
                           A(2, LEDGER_COMM, 22 * MiB, "t")};
  allocsim_result_t r;
  cr_assert_eq(allocsim_run(ev, 3, ALLOCSIM_CACHING, 24 * MiB, &r), 0, "failed at %d", r.failed_at);
  expect_i64(r.retries, 1, "retries");
  expect_i64(r.reserved_peak, 22 * MiB, "reserved peak (the 20 MiB segment, then the 22 MiB one)");
  allocsim_run(ev, 3, ALLOCSIM_CACHING, 0, &r);
  expect_i64(r.reserved_peak, 42 * MiB, "without a budget both segments stay reserved");
}

/* The fragmentation example: a short-lived 8 MiB buffer and a long-lived 8 MiB gradient share a
 * 20 MiB segment; freeing the buffer leaves holes of 8 and 4 MiB, so a 9 MiB buffer needs a second
 * 20 MiB segment: under a 30 MiB budget the caching allocator fails at event 3 although only
 * 17 MiB would be live. With the gradient in its own 8 MiB region the 20 MiB segment frees whole
 * and the 9 MiB buffer fits it: reserved peak 28 MiB. */
Test(common_allocsim, fragmentation_example_fails_only_without_regions) {
  allocsim_event_t ev[] = {A(1, LEDGER_COMM, 8 * MiB, "s1"), A(2, LEDGER_GRADS, 8 * MiB, "g1"),
                           F(1, LEDGER_COMM, 8 * MiB), A(3, LEDGER_COMM, 9 * MiB, "s2")};
  allocsim_result_t a, b, u;
  cr_expect_eq(allocsim_run(ev, 4, ALLOCSIM_CACHING, 30 * MiB, &a), 1, "caching must fail under 30 MiB");
  expect_i64(a.failed_at, 3, "caching: failing event");
  cr_expect_str_eq(a.fail_what, "s2", "caching: failing allocation");
  cr_expect_eq(allocsim_run(ev, 4, ALLOCSIM_REGIONS, 30 * MiB, &b), 0, "regions failed at %d", b.failed_at);
  expect_i64(b.region_bytes, 8 * MiB, "region size");
  expect_i64(b.reserved_peak, 28 * MiB, "regions: reserved peak");
  expect_i64(b.alloc_peak, 17 * MiB, "regions: allocated peak");
  allocsim_run(ev, 4, ALLOCSIM_CACHING, 0, &u);
  expect_i64(u.reserved_peak, 40 * MiB, "caching, no budget: reserved peak");
  expect_i64(u.alloc_peak, 17 * MiB, "caching, no budget: allocated peak");
  expect_i64(u.cached_peak, 23 * MiB, "caching, no budget: reserved - allocated");
  expect_i64(u.cached_at_peak, 23 * MiB, "caching, no budget: cached at the allocated peak");
  expect_i64(u.largest_free_at_peak, 11 * MiB, "caching, no budget: largest free block at the peak");
  expect_i64(b.cached_at_peak, 11 * MiB, "regions: cached at the allocated peak");
  expect_i64(allocsim_min_budget(ev, 4, ALLOCSIM_CACHING, MiB), 40 * MiB, "caching: least budget");
  expect_i64(allocsim_min_budget(ev, 4, ALLOCSIM_REGIONS, MiB), 28 * MiB, "regions: least budget");
}

/* A free gives back the block its allocation took, not the latest of its size: two 4 MiB buffers
 * share a 20 MiB segment, a at [0, 4), b at [4, 8); freeing a (the first) leaves holes of 4 and
 * 12 MiB, so 14 MiB needs a segment of its own (reserved 34 MiB, two segments). Freeing b instead
 * (the old rule: the most recent block of the size) would leave one 16 MiB hole that fits it. */
Test(common_allocsim, a_free_gives_back_its_own_block) {
  allocsim_event_t ev[] = {A(1, LEDGER_COMM, 4 * MiB, "a"), A(2, LEDGER_COMM, 4 * MiB, "b"),
                           F(1, LEDGER_COMM, 4 * MiB), A(3, LEDGER_COMM, 14 * MiB, "c"),
                           F(2, LEDGER_COMM, 4 * MiB), F(3, LEDGER_COMM, 14 * MiB)};
  allocsim_result_t r;
  cr_assert_eq(allocsim_run(ev, 6, ALLOCSIM_CACHING, 0, &r), 0, "replay failed at event %d", r.failed_at);
  expect_i64(r.segments, 2, "segments (14 MiB does not fit a's 4 MiB hole nor the 12 MiB tail)");
  expect_i64(r.reserved_peak, 34 * MiB, "reserved peak");
  expect_i64(r.alloc_peak, 18 * MiB, "allocated peak (b and c)");
  expect_i64(r.largest_free_at_peak, 12 * MiB, "largest free block at the peak (the first segment's tail)");
  cr_expect_eq(allocsim_run(ev, 6, ALLOCSIM_CACHING, 20 * MiB, &r), 1, "a 20 MiB budget must fail");
  expect_i64(r.failed_at, 3, "the failing event (c)");
}

Test(common_allocsim, long_lived_classes) {
  cr_expect(allocsim_long_lived(LEDGER_GRADS, "grads"), "gradients are long-lived");
  cr_expect(allocsim_long_lived(LEDGER_ACTS, "unit output"), "checkpoints are long-lived");
  cr_expect(!allocsim_long_lived(LEDGER_ACTS, "ops workspace"), "workspaces are short-lived");
  cr_expect(!allocsim_long_lived(LEDGER_COMM, "comm scratch"), "comm buffers are short-lived");
}

/* The ledger writes its real sequence; allocsim_load reads the device arena back. */
Test(common_allocsim, ledger_trace_round_trip) {
  char path[] = "/tmp/zl_allocsim_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0, "mkstemp");
  close(fd);
  ledger_init(0, 0);
  ledger_trace_open(path);
  int64_t p = ledger_add(LEDGER_PARAMS, 4096, "params");
  int64_t h = ledger_add_in(LEDGER_HOST, LEDGER_OPTIM, 100, "host optim");
  int64_t c = ledger_add(LEDGER_COMM, 1000, "comm scratch");
  ledger_sub(LEDGER_COMM, 1000, c);
  cr_expect(p < h && h < c, "ledger ids in allocation order: %lld %lld %lld", (long long)p, (long long)h,
            (long long)c);
  ledger_trace_open(NULL);
  expect_i64(ledger_live(LEDGER_PARAMS), 4096, "ledger counters unchanged by the trace");
  int n = 0;
  allocsim_event_t *ev = allocsim_load(path, &n);
  unlink(path);
  cr_assert_eq(n, 3, "device events: got %d, expected 3", n);
  cr_expect(ev[0].op == 'A' && ev[0].cat == LEDGER_PARAMS && ev[0].bytes == 4096, "event 0: %c %d %lld",
            ev[0].op, ev[0].cat, (long long)ev[0].bytes);
  cr_expect_str_eq(ev[1].what, "comm scratch", "event 1 name");
  cr_expect(ev[2].op == 'F' && ev[2].cat == LEDGER_COMM && ev[2].bytes == 1000, "event 2: %c %d %lld",
            ev[2].op, ev[2].cat, (long long)ev[2].bytes);
  cr_expect(ev[0].id == p && ev[1].id == c && ev[2].id == c, "ids %lld %lld %lld, want %lld %lld %lld",
            (long long)ev[0].id, (long long)ev[1].id, (long long)ev[2].id, (long long)p, (long long)c,
            (long long)c);
  free(ev);
  ledger_init(0, 0);
}
