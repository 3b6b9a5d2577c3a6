/* test_ddp_buckets.c — chapter 02's bucket assignment (solutions/ddp.c: ddp_assign_buckets;
 * notes/02-ddp.md). Model 32 -> 64 -> 64 -> 64 -> 10: unit numels 2112, 4160, 4160, 650 (Ψ 11082).
 * Rule: backward order (unit 3 first); a bucket closes when adding the next unit would pass the
 * cap (bucket_mb MiB); a unit larger than the cap sits alone; buckets are contiguous ranges.
 * Also the overlap fraction the report reads from the trace (report_overlap). */
#include "zl_test.h" // Criterion, cr_assert
#include "ddp.h"     // ddp_assign_buckets, ddp_bucket_t
#include "model.h"   // model_init, model_free
#include "report.h"  // report_overlap
#include "trace.h"   // trace_init, trace_event, trace_clear

#define MIB 1048576.0

/* Assign and check the invariants every assignment must have; returns the bucket count. */
static int assign(const model_t *m, double bucket_mb, int esz, ddp_bucket_t *b, int *ub) {
  int n = ddp_assign_buckets(m, bucket_mb, esz, b, ub);
  cr_assert(n >= 1 && n <= m->n_units, "cap %g MiB: %d buckets for %d units", bucket_mb, n, m->n_units);
  int64_t end = m->padded_numel; /* bucket 0 ends at the top of the flat buffer, each next one below */
  int next_unit = m->n_units - 1;
  while (next_unit >= 0 && m->units[next_unit].padded == 0) next_unit--; /* not held: in no bucket */
  for (int k = 0; k < n; k++) {
    cr_assert_eq(b[k].last_unit, next_unit, "cap %g: bucket %d last_unit %d, expected %d (backward order)",
                 bucket_mb, k, b[k].last_unit, next_unit);
    cr_assert(b[k].first_unit <= b[k].last_unit, "cap %g: bucket %d units %d..%d", bucket_mb, k,
              b[k].first_unit, b[k].last_unit);
    cr_assert(m->units[b[k].first_unit].padded > 0,
              "cap %g: bucket %d starts at unit %d, which this rank does not hold "
              "(padded 0): its backward never runs here, so the bucket would never be all-reduced",
              bucket_mb, k, b[k].first_unit);
    int64_t numel = 0;
    for (int u = b[k].first_unit; u <= b[k].last_unit; u++) {
      numel += m->units[u].padded;
      int want = m->units[u].padded ? k : -1;
      cr_assert_eq(ub[u], want, "cap %g: unit %d (padded %lld) maps to bucket %d, expected %d", bucket_mb, u,
                   (long long)m->units[u].padded, ub[u], want);
    }
    cr_assert_eq(b[k].off, m->units[b[k].first_unit].off, "cap %g: bucket %d off %lld, expected %lld",
                 bucket_mb, k, (long long)b[k].off, (long long)m->units[b[k].first_unit].off);
    cr_assert_eq(b[k].numel, numel, "cap %g: bucket %d numel %lld, expected %lld", bucket_mb, k,
                 (long long)b[k].numel, (long long)numel);
    cr_assert_eq(b[k].off + b[k].numel, end, "cap %g: bucket %d is not contiguous with bucket %d", bucket_mb,
                 k, k - 1);
    cr_assert_eq(b[k].nbytes, numel * esz, "cap %g: bucket %d nbytes %lld, expected %lld", bucket_mb, k,
                 (long long)b[k].nbytes, (long long)(numel * esz));
    /* never past the cap, unless a single unit is larger than the cap */
    cr_assert(b[k].first_unit == b[k].last_unit || (double)b[k].nbytes <= bucket_mb * MIB,
              "cap %g: bucket %d has %lld bytes and %d units", bucket_mb, k, (long long)b[k].nbytes,
              b[k].last_unit - b[k].first_unit + 1);
    end = b[k].off;
    next_unit = b[k].first_unit - 1;
    while (next_unit >= 0 && m->units[next_unit].padded == 0) next_unit--;
  }
  for (int u = next_unit; u >= 0; u--) /* below the last bucket: only units not held */
    cr_assert(m->units[u].padded == 0 && ub[u] == -1, "cap %g: unit %d is in no bucket (unit_bucket %d)",
              bucket_mb, u, ub[u]);
  cr_assert_eq(end, 0, "cap %g: buckets do not reach offset 0", bucket_mb);
  return n;
}

/* units as "first..last" of each bucket, e.g. "3..3 2..2 0..1" */
static void expect_units(const ddp_bucket_t *b, int n, const char *want, double cap) {
  char got[128] = "";
  for (int k = 0; k < n; k++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d..%d", k ? " " : "", b[k].first_unit,
             b[k].last_unit);
  cr_assert_str_eq(got, want, "cap %g MiB: buckets %s, expected %s", cap, got, want);
}

Test(ch02_buckets, caps_from_one_element_to_whole_model) {
  model_t m;
  model_init(&m, 32, 64, 10, 3);
  cr_assert_eq(m.numel, 11082, "psi %lld", (long long)m.numel);
  ddp_bucket_t b[4];
  int ub[4];
  int n = assign(&m, 4.0 / MIB, 4, b, ub); /* one fp32 element: every unit alone */
  expect_units(b, n, "3..3 2..2 1..1 0..0", 4.0 / MIB);
  n = assign(&m, 1e-9, 4, b, ub); /* any positive value is accepted */
  expect_units(b, n, "3..3 2..2 1..1 0..0", 1e-9);
  n = assign(&m, 1000, 4, b, ub); /* the whole model */
  expect_units(b, n, "0..3", 1000);
  n = assign(&m, 0.02, 4, b, ub); /* 20971 bytes: units 3+2 = 19240 fit, + unit 1 does not */
  expect_units(b, n, "2..3 1..1 0..0", 0.02);
  model_free(&m);
}

Test(ch02_buckets, boundary_is_inclusive_and_large_units_sit_alone) {
  model_t m;
  model_init(&m, 32, 64, 10, 3);
  ddp_bucket_t b[4];
  int ub[4];
  double exact = (650 + 4160) * 4 / MIB; /* units 3 and 2 fill it exactly: they share a bucket */
  int n = assign(&m, exact, 4, b, ub);
  expect_units(b, n, "2..3 1..1 0..0", exact);
  double less = (650 + 4160) * 4 / MIB - 1.0 / MIB; /* one byte less: unit 2 starts a new bucket */
  n = assign(&m, less, 4, b, ub);
  expect_units(b, n, "3..3 2..2 1..1 0..0", less);
  /* 10485 bytes: unit 2 (16640 bytes) alone past the cap, unit 0 (8448) cannot join unit 1 */
  n = assign(&m, 0.01, 4, b, ub);
  expect_units(b, n, "3..3 2..2 1..1 0..0", 0.01);
  cr_assert_gt((double)b[1].nbytes, 0.01 * MIB, "unit 2 should be larger than the cap");
  /* bf16 grads: half the bytes, so the same cap holds more units */
  n = assign(&m, exact, 2, b, ub);
  expect_units(b, n, "1..3 0..0", exact);
  model_free(&m);
}

Test(ch02_buckets, single_unit_model) {
  model_t m;
  model_init(&m, 5, 7, 3, 1); /* L = 1: units 5->7 and 7->3 */
  ddp_bucket_t b[2];
  int ub[2];
  int n = assign(&m, 1e-9, 4, b, ub);
  expect_units(b, n, "1..1 0..0", 1e-9);
  n = assign(&m, 1, 4, b, ub);
  expect_units(b, n, "0..1", 1);
  model_free(&m);
}

/* A pipeline stage holds some units only; the others have numel and padded 0 (train.h). Stage 1 of
 * 2 (units 2, 3 held), stage 0 (units 0, 1), and a middle stage of 3 (unit 1 of 0..2 held) of an
 * interleaved layout with holes: buckets over the held units only, every bucket starting (its
 * lowest unit, the one whose backward launches it) at a unit this rank holds. The bug this
 * catches: a bucket "first unit" on another stage is never launched, and the replicas drift. */
static void hold_only(model_t *m, const int *held) {
  int64_t off = 0;
  for (int u = 0; u < m->n_units; u++) {
    if (!held[u]) m->units[u].numel = 0, m->units[u].padded = 0;
    m->units[u].off = off;
    off += m->units[u].padded;
  }
  m->numel = m->padded_numel = off;
}
Test(ch02_buckets, a_pipeline_stage_buckets_only_its_own_units) {
  static const int stages[4][4] = {{0, 0, 1, 1}, {1, 1, 0, 0}, {0, 1, 0, 0}, {1, 0, 1, 0}};
  static const char *const whole[4] = {"2..3", "0..1", "1..1", "0..2"};
  static const char *const alone[4] = {"3..3 2..2", "1..1 0..0", "1..1", "2..2 0..0"};
  for (int i = 0; i < 4; i++) {
    model_t m;
    model_init(&m, 32, 64, 10, 3);
    hold_only(&m, stages[i]);
    ddp_bucket_t b[4];
    int ub[4];
    int n = assign(&m, 1000, 4, b, ub); /* one bucket: from the lowest HELD unit */
    expect_units(b, n, whole[i], 1000);
    n = assign(&m, 4.0 / MIB, 4, b, ub); /* every held unit alone */
    expect_units(b, n, alone[i], 4.0 / MIB);
    model_free(&m);
  }
}

/* The overlap measurement of the report (common/train/report.c:report_overlap) on a hand-made trace:
 * communication [15, 35) us overlaps bwd [10, 20) by 5 and bwd [30, 40) by 5: half hidden.
 * Control traffic and anything before the first step do not count. */
Test(ch02_buckets, overlap_fraction_from_trace) {
  trace_init(0, "/tmp/zl_unused.trace.json"); /* enabled; nothing is written without trace_write */
  trace_clear();
  trace_event(TRACE_COMM, "blocking", -10, -5, "\"op\":\"broadcast\",\"bytes\":4");        /* setup */
  trace_event(TRACE_COMPUTE, "step 0", 0, 100, NULL);
  trace_event(TRACE_COMPUTE, "fwd 0", 1, 9, NULL);
  trace_event(TRACE_COMPUTE, "bwd 1", 10, 20, NULL);
  trace_event(TRACE_COMPUTE, "bwd 0", 30, 40, NULL);
  trace_event(TRACE_COMM, "all_reduce bucket 0", 15, 35, "\"op\":\"all_reduce\",\"bytes\":64");
  trace_event(TRACE_COMM, "blocking", 50, 60, "\"op\":\"control\",\"bytes\":8");           /* the loss */
  double comm = 0, hidden = 0;
  double f = report_overlap(&comm, &hidden);
  cr_assert_float_eq(comm, 20.0, 1e-12, "communication time %g us, expected 20", comm);
  cr_assert_float_eq(hidden, 10.0, 1e-12, "hidden time %g us, expected 10", hidden);
  cr_assert_float_eq(f, 0.5, 1e-12, "hidden fraction %g, expected 0.5", f);
  trace_init(0, NULL); /* disabled: -1, nothing measured */
  cr_assert_eq(report_overlap(&comm, &hidden), -1.0, "a disabled trace should give -1");
}

/* A collective counts from the moment its LAST rank joined: here this rank starts all-reduce #3
 * at 15 us but its peer only at 25, so [15, 25) is waiting (not communication, not hidden) and
 * the busy window is [25, 35): 5 us of it under bwd [30, 40). Operations of another
 * communicator (or with no arrival time) count from this rank's own start. */
Test(ch02_buckets, overlap_counts_from_the_last_arrival) {
  trace_init(0, "/tmp/zl_unused.trace.json");
  trace_clear();
  int comm_a, comm_b; /* two communicators: only their addresses matter */
  trace_event(TRACE_COMPUTE, "step 0", 0, 100, NULL);
  trace_event(TRACE_COMPUTE, "bwd 1", 10, 20, NULL);
  trace_event(TRACE_COMPUTE, "bwd 0", 30, 40, NULL);
  trace_comm_event((const struct comm *)&comm_a, 3, "all_reduce bucket 0", 15, 35,
                   "\"op\":\"all_reduce\",\"bytes\":64");
  trace_comm_event((const struct comm *)&comm_b, 3, "all_reduce tp", 50, 60,
                   "\"op\":\"all_reduce\",\"bytes\":64");
  double joined[4] = {-1e300, -1e300, 25, -1e300}; /* last arrival of operation seq (index seq − 1) */
  double comm = 0, hidden = 0, wait = 0;
  double f = report_overlap_joined(&comm_a, joined, 4, &comm, &hidden, &wait);
  cr_assert_float_eq(wait, 10.0, 1e-12, "waiting time %g us, expected 10 (15 to the peer's arrival at 25)",
                     wait);
  cr_assert_float_eq(comm, 20.0, 1e-12,
                     "communication time %g us, expected 10 + 10 (the other communicator's op)", comm);
  cr_assert_float_eq(hidden, 5.0, 1e-12, "hidden time %g us, expected 5 ([30, 35))", hidden);
  cr_assert_float_eq(f, 0.25, 1e-12, "hidden fraction %g, expected 0.25", f);
  trace_init(0, NULL);
}
