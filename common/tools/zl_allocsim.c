/* zl_allocsim — replay --alloc-trace files through the caching allocator and ZeRO's contiguous
 * regions (common/base/allocsim.h) and print reserved vs allocated peaks, the largest free block and
 * the first allocation that fails under a budget with the caching allocator but not with the
 * regions. Usage: zl_allocsim [--json PATH] LABEL=TRACE... (notes/zero-r.md). */
#include "allocsim.h" // allocsim_run, allocsim_min_budget, allocsim_load
#include "outfile.h"  // outfile_problem (--json checked before anything runs)
#include <errno.h>    // errno
#include <stdio.h>    // printf, fprintf
#include <stdlib.h>   // free
#include <string.h>   // strchr, strcmp, strerror

#define MIB 1048576.0
#define USAGE "usage: zl_allocsim [--json PATH] LABEL=TRACE... (TRACE: an --alloc-trace file)"

int main(int argc, char **argv) {
  const char *json = NULL;
  int first = 1;
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("%s\nReplays each trace through the caching allocator and ZeRO's contiguous regions "
           "(notes/zero-r.md).\n", USAGE);
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "--json") == 0) { json = argv[2]; first = 3; }
  if (first >= argc) {
    fprintf(stderr, "error: %s: %s\n",
            first == 1 ? "missing LABEL=TRACE" : "--json PATH: missing LABEL=TRACE", USAGE);
    return 2;
  }
  /* every argument checked before the table starts: one error line, exit 2 */
  for (int a = first; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    if (!eq || eq == argv[a] || !eq[1]) {
      fprintf(stderr, "error: %s: expected LABEL=TRACE (%s)\n", argv[a], USAGE);
      return 2;
    }
    FILE *t = fopen(eq + 1, "r");
    if (!t) {
      fprintf(stderr, "error: %s: cannot read %s (%s)\n", argv[a], eq + 1, strerror(errno));
      return 2;
    }
    fclose(t);
  }
  char why[4200];
  if (json && outfile_problem(json, 0, why, sizeof why)) {
    fprintf(stderr, "error: --json %s: %s\n", json, why);
    return 2;
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) { fprintf(stderr, "error: --json %s: cannot open for writing\n", json); return 2; }
  if (jf) fprintf(jf, "{\"runs\": [");
  for (int a = first; a < argc; a++) {
    char *eq = strchr(argv[a], '=');
    *eq = 0;
    int n = 0;
    allocsim_event_t *ev = allocsim_load(eq + 1, &n); /* a malformed trace: its line, exit 1 */
    if (a == first) /* the header once the first trace has loaded */
      printf("%-12s %-8s %12s %12s %12s %12s %9s %12s\n", "trace", "alloc", "allocated", "reserved",
             "cached@peak", "free@peak", "segments", "min budget");
    allocsim_result_t r[2];
    int64_t minb[2];
    const char *names[2] = {"caching", "regions"};
    for (int m = 0; m < 2; m++) {
      allocsim_run(ev, n, (allocsim_mode_t)m, 0, &r[m]);
      minb[m] = allocsim_min_budget(ev, n, (allocsim_mode_t)m, 1 << 20);
      printf("%-12s %-8s %10.2f M %10.2f M %10.2f M %10.2f M %9d %10.0f M\n", argv[a], names[m],
             r[m].alloc_peak / MIB, r[m].reserved_peak / MIB, r[m].cached_at_peak / MIB,
             r[m].largest_free_at_peak / MIB, r[m].segments, minb[m] / MIB);
    }
    /* The budget just below the caching allocator's minimum: what fails there, and does (b) fit? */
    allocsim_result_t fa = {.failed_at = -1}, fb = {.failed_at = -1};
    int64_t budget = minb[0] - (1 << 20);
    if (budget > 0) {
      allocsim_run(ev, n, ALLOCSIM_CACHING, budget, &fa);
      allocsim_run(ev, n, ALLOCSIM_REGIONS, budget, &fb);
      printf("%-12s budget %.0f MiB: caching fails at trace line %d (%s, %.2f MiB); regions %s\n", argv[a],
             budget / MIB, fa.failed_at + 1, fa.fail_what, fa.fail_bytes / MIB,
             fb.failed_at < 0 ? "fit" : "fail too");
    }
    if (jf) {
      fprintf(jf,
              "%s\n  {\"label\": \"%s\", \"events\": %d, \"budget_probe\": %lld, \"caching_fails_at\": %d, "
              "\"caching_fail_what\": \"%s\", \"caching_fail_bytes\": %lld, \"regions_fit\": %d",
              a > first ? "," : "", argv[a], n, (long long)budget, fa.failed_at, fa.fail_what,
              (long long)fa.fail_bytes, fb.failed_at < 0);
      for (int m = 0; m < 2; m++)
        fprintf(jf,
                ", \"%s\": {\"allocated_peak\": %lld, \"reserved_peak\": %lld, \"cached_peak\": %lld, "
                "\"largest_free_end\": %lld, \"cached_at_peak\": %lld, \"largest_free_at_peak\": %lld, "
                "\"segments\": %d, \"retries\": %d, \"spills\": %d, \"region_bytes\": %lld, \"min_budget\": "
                "%lld}",
                names[m], (long long)r[m].alloc_peak, (long long)r[m].reserved_peak,
                (long long)r[m].cached_peak, (long long)r[m].largest_free_end, (long long)r[m].cached_at_peak,
                (long long)r[m].largest_free_at_peak, r[m].segments, r[m].retries, r[m].spills,
                (long long)r[m].region_bytes, (long long)minb[m]);
      fprintf(jf, "}");
    }
    free(ev);
  }
  if (jf) { fprintf(jf, "\n]}\n"); fclose(jf); }
  return 0;
}
