/* test_ledger.c — the memory ledger (live/peak by category, budget) and tensors through it.
 * Notes: notes/00-memory.md. Suite common_ledger. */
#include "zl_test.h" // Criterion, zl helpers
#include "ledger.h"  // ledger_*
#include "tensor.h"  // tensor_alloc, tensor_free, tensor_view
#include "device.h"  // device_cuda_count, device_cuda_built, dev_malloc
#include "check.h"   // check_set_rank
#include <pthread.h> // pthread_create

#define MiB (1024 * 1024)

Test(common_ledger, live_and_peak_by_category) {
  ledger_init(0, 0);
  ledger_add(LEDGER_PARAMS, 100, "p");
  int64_t a = ledger_add(LEDGER_ACTS, 50, "a");
  ledger_sub(LEDGER_ACTS, 50, a);
  ledger_add(LEDGER_COMM, 30, "c");
  cr_expect_eq(ledger_live(LEDGER_PARAMS), 100, "params live: got %lld, expected 100",
               (long long)ledger_live(LEDGER_PARAMS));
  cr_expect_eq(ledger_live(LEDGER_ACTS), 0, "acts live: got %lld, expected 0",
               (long long)ledger_live(LEDGER_ACTS));
  cr_expect_eq(ledger_peak(LEDGER_ACTS), 50, "acts peak: got %lld, expected 50",
               (long long)ledger_peak(LEDGER_ACTS));
  cr_expect_eq(ledger_peak(LEDGER_COMM), 30, "comm peak: got %lld, expected 30",
               (long long)ledger_peak(LEDGER_COMM));
  cr_expect_eq(ledger_total_live(), 130, "total live: got %lld, expected 130",
               (long long)ledger_total_live());
  /* peak total is the highest sum at one moment (150), not the sum of category peaks (180) */
  cr_expect_eq(ledger_total_peak(), 150, "total peak: got %lld, expected 150",
               (long long)ledger_total_peak());
  ledger_reset_peaks();
  cr_expect_eq(ledger_peak(LEDGER_ACTS), 0, "acts peak after reset: got %lld, expected 0",
               (long long)ledger_peak(LEDGER_ACTS));
  cr_expect_eq(ledger_peak(LEDGER_PARAMS), 100, "params peak after reset: got %lld",
               (long long)ledger_peak(LEDGER_PARAMS));
  cr_expect_eq(ledger_total_peak(), 130, "total peak after reset: got %lld, expected 130",
               (long long)ledger_total_peak());
  ledger_add(LEDGER_ACTS, 10, "a2");
  cr_expect_eq(ledger_total_peak(), 140, "total peak after reset+add: got %lld, expected 140",
               (long long)ledger_total_peak());
  ledger_init(0, 0);
  cr_expect_eq(ledger_total_live(), 0, "ledger_init must reset: total live %lld",
               (long long)ledger_total_live());
  cr_expect_eq(ledger_peak(LEDGER_PARAMS), 0, "ledger_init must reset peaks");
}

Test(common_ledger, category_names) {
  const char *want[LEDGER_NCAT] = {"params", "grads", "master", "optim", "acts", "comm", "ckpt"};
  for (int c = 0; c < LEDGER_NCAT; c++)
    cr_expect_str_eq(ledger_cat_name((ledger_cat_t)c), want[c], "ledger_cat_name(%d)", c);
}

Test(common_ledger, budget_allows_up_to_the_limit) {
  ledger_init(0, 4 * MiB);
  ledger_add(LEDGER_PARAMS, 3 * MiB, "p");
  ledger_add(LEDGER_GRADS, 1 * MiB, "g"); /* exactly at the limit is allowed */
  cr_expect_eq(ledger_total_live(), 4 * MiB);
  cr_expect_eq(ledger_limit(), 4 * MiB);
}


static void over_budget(void) {
  ledger_init(3, 64 * MiB);
  ledger_add(LEDGER_PARAMS, 40 * MiB, "params");
  ledger_add(LEDGER_OPTIM, 30 * MiB, "adam m"); /* 70 > 64 */
}

Test(common_ledger, budget_refusal_message) {
  char out[1024];
  int rc = zl_run_child(over_budget, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect_str_eq(out, "out of memory budget on rank 3: adam m needs 30.0 MiB, 40.0 of 64 MiB in use\n",
                   "budget message: got '%s'", out);
}

static void tensor_over_budget(void) {
  ledger_init(1, 1 * MiB);
  tensor_t a = tensor_alloc("grads shard", LEDGER_GRADS, DT_F32, DEV_CPU, 200000); /* 0.8 MB */
  tensor_t b = tensor_alloc("bucket", LEDGER_COMM, DT_BF16, DEV_CPU, 1 << 20);     /* 2 MiB: refused */
  (void)a, (void)b;
}

Test(common_ledger, tensor_alloc_refused_by_budget_before_allocating) {
  char out[1024];
  int rc = zl_run_child(tensor_over_budget, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect_str_eq(out, "out of memory budget on rank 1: bucket needs 2.0 MiB, 0.8 of 1 MiB in use\n",
                   "budget message: got '%s'", out);
}

static void huge_alloc(void) {
  ledger_init(2, 0);
  check_set_rank(2);
  tensor_t t = tensor_alloc("huge", LEDGER_ACTS, DT_F32, DEV_CPU, (int64_t)1 << 60); /* 4 EiB */
  (void)t;
}

Test(common_ledger, allocator_failure_is_a_message_not_a_segfault) {
  char out[1024];
  int rc = zl_run_child(huge_alloc, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect(strstr(out, "out of memory on rank 2: huge needs 4398046511104.0 MiB") == out,
            "message: got '%s'", out);
}

Test(common_ledger, tensor_alloc_free_view) {
  ledger_init(0, 0);
  tensor_t t = tensor_alloc("w", LEDGER_MASTER, DT_F32, DEV_CPU, 1000);
  cr_assert(t.data && t.owner && t.numel == 1000 && t.dev == DEV_CPU && t.cat == LEDGER_MASTER);
  for (int64_t i = 0; i < t.numel; i++)
    cr_assert_eq(((float *)t.data)[i], 0.0f, "tensor w[%lld] not zero-filled: %g", (long long)i,
                 ((float *)t.data)[i]);
  cr_expect_eq(ledger_live(LEDGER_MASTER), 4000, "master live: got %lld, expected 4000",
               (long long)ledger_live(LEDGER_MASTER));
  tensor_t h = tensor_alloc("h", LEDGER_PARAMS, DT_BF16, DEV_CPU, 7);
  cr_expect_eq(tensor_nbytes(&h), 14);
  cr_expect_eq(ledger_live(LEDGER_PARAMS), 14, "bf16 params live: got %lld, expected 14",
               (long long)ledger_live(LEDGER_PARAMS));

  tensor_t v = tensor_view(&t, 10, 5);
  cr_expect_eq(v.data, (char *)t.data + 40, "view data pointer");
  cr_expect(v.numel == 5 && v.owner == 0 && v.dtype == DT_F32);
  ((float *)v.data)[0] = 3.0f;
  cr_expect_eq(((float *)t.data)[10], 3.0f, "a view shares its owner's memory");
  tensor_free(&v); /* a view: no-op for the ledger */
  cr_expect_eq(ledger_live(LEDGER_MASTER), 4000, "freeing a view changed the ledger: %lld",
               (long long)ledger_live(LEDGER_MASTER));
  cr_expect(v.data == NULL && v.numel == 0, "tensor_free leaves the view empty");

  tensor_free(&t);
  tensor_free(&h);
  cr_expect(t.data == NULL && t.numel == 0, "tensor_free leaves t empty");
  cr_expect_eq(ledger_total_live(), 0, "all freed: total live %lld", (long long)ledger_total_live());
  cr_expect_eq(ledger_peak(LEDGER_MASTER), 4000, "peak survives the free");
  cr_expect_eq(ledger_total_peak(), 4014, "total peak: got %lld, expected 4014",
               (long long)ledger_total_peak());

  tensor_t e = tensor_alloc("empty", LEDGER_ACTS, DT_F32, DEV_CPU, 0);
  cr_expect(e.data == NULL && e.numel == 0, "numel 0 gives an empty tensor");
  tensor_free(&e);
  cr_expect_eq(ledger_total_live(), 0);
}

/* The communication thread allocates scratch while the compute thread allocates activations. */
static void *hammer(void *arg) {
  ledger_cat_t cat = *(ledger_cat_t *)arg;
  for (int i = 0; i < 100000; i++) {
    int64_t id = ledger_add(cat, 8, "scratch");
    ledger_sub(cat, 8, id);
  }
  for (int i = 0; i < 1000; i++) ledger_add(cat, 1, "kept");
  return NULL;
}

/* The host arena (chapter 08): counted apart from the device, outside the --mem-limit-mb budget,
 * freed back to its own arena; host tensors are DEV_CPU memory ops can use. */
Test(common_ledger, host_arena_apart_and_unbudgeted) {
  ledger_init(0, 1 * MiB);
  tensor_t d = tensor_alloc("dev", LEDGER_PARAMS, DT_F32, DEV_CPU, 1000);
  /* 2 MiB > the 1 MiB budget */
  tensor_t h = tensor_alloc_host("host", LEDGER_OPTIM, DT_F32, DEV_CPU, 2 * MiB / 4);
  cr_assert(h.data && h.dev == DEV_CPU && h.arena == LEDGER_HOST, "host tensor not allocated as host memory");
  cr_expect_eq(ledger_total_live(), 4000, "device total %lld, expected 4000", (long long)ledger_total_live());
  cr_expect_eq(ledger_live_in(LEDGER_HOST, LEDGER_OPTIM), 2 * MiB, "host optim %lld",
               (long long)ledger_live_in(LEDGER_HOST, LEDGER_OPTIM));
  cr_expect_eq(ledger_live(LEDGER_OPTIM), 0, "the host tensor leaked into the device arena");
  cr_expect_eq(ledger_total_peak_in(LEDGER_HOST), 2 * MiB, "host peak");
  tensor_free(&h);
  tensor_free(&d);
  cr_expect_eq(ledger_total_live_in(LEDGER_HOST), 0, "host arena not given back");
  cr_expect_eq(ledger_total_live(), 0, "device arena not given back");
  cr_expect_str_eq(ledger_arena_name(LEDGER_HOST), "host");
}

Test(common_ledger, thread_safe) {
  ledger_init(0, 0);
  ledger_cat_t cats[2] = {LEDGER_COMM, LEDGER_ACTS};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, hammer, &cats[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  cr_expect_eq(ledger_live(LEDGER_COMM), 1000, "comm live after threads: %lld",
               (long long)ledger_live(LEDGER_COMM));
  cr_expect_eq(ledger_live(LEDGER_ACTS), 1000, "acts live after threads: %lld",
               (long long)ledger_live(LEDGER_ACTS));
  cr_expect_eq(ledger_total_live(), 2000, "total live after threads: %lld (lost updates?)",
               (long long)ledger_total_live());
  cr_expect(ledger_total_peak() >= 2000 && ledger_total_peak() <= 2016, "total peak %lld",
            (long long)ledger_total_peak());
}

Test(common_ledger, cuda_count_without_gpu_does_not_die) {
  int n = device_cuda_count();
  cr_expect(n >= 0, "device_cuda_count: got %d", n);
  if (!device_cuda_built()) cr_expect_eq(n, 0, "CPU-only build must report 0 GPUs, got %d", n);
}

static void cuda_in_cpu_build(void) {
  check_set_rank(0);
  (void)dev_malloc(DEV_CUDA, 16, "x");
}

Test(common_ledger, cuda_request_in_cpu_build_dies_clearly) {
  if (device_cuda_built()) cr_skip_test("built with CUDA");
  char out[1024];
  int rc = zl_run_child(cuda_in_cpu_build, out, sizeof out);
  cr_expect_eq(rc, 1, "exit code: got %d, expected 1 (stderr: %s)", rc, out);
  cr_expect(strstr(out, "this binary was built without CUDA (make GPU=1)"), "message: got '%s'", out);
}
