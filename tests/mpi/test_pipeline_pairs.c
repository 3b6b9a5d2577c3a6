/* test_pipeline_pairs.c — 1F1B's steady state sends and receives in pairs (solutions/pipeline.c,
 * "pairs"; comm_sendrecv_async: one grouped NCCL call on a GPU). Under synchronous sends
 * (ZL_SYNC_SENDS=1, ncclSend's rendezvous) P = 4, M = 8 runs to the loss of GPipe (which pairs
 * nothing), and its trace holds exactly the pairs the schedule has: stage s < P−1 pairs
 * M − w_s outputs with gradients (w_s = min(P − s − 1, M) warm-up forwards), and its neighbour
 * the same messages the other way: 2 · Σ_{s<P−1} (M − w_s) pair events. M = 1 (no steady state)
 * pairs none. */
#include "zl_test.h" // zl_run, cr_assert

#define PP_SHAPE \
  "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 1 --timeout-s 20 --quiet"

/* Occurrences of needle in the file at path (0 when it cannot be read). */
static int count_in_file(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  buf[got] = 0;
  fclose(f);
  int k = 0;
  for (const char *p = buf; (p = strstr(p, needle)); p++) k++;
  free(buf);
  return k;
}

static char *loss_of(const char *out) {
  const char *p = strstr(out, "final loss ");
  if (!p) return NULL;
  const char *e = strchr(p, '(');
  return e ? strndup(p, (size_t)(e - p)) : NULL;
}

static int run_sync(int np, char **out, const char *fmt, const char *arg) {
  setenv("ZL_SYNC_SENDS", "1", 1);
  setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS", 1);
  int rc = zl_run(np, 90, out, fmt, arg);
  unsetenv("ZL_SYNC_SENDS");
  unsetenv("ZL_MPIRUN_FLAGS");
  return rc;
}

Test(ch07_pipeline_pairs, steady_state_pairs_under_synchronous_sends, .timeout = 200) {
  const char *tr = "/tmp/zl_pp_pairs_trace.json";
  char *o1 = NULL, *o2 = NULL, *o3 = NULL;
  int rc = run_sync(
      4, &o1, ZL_BIN "/ch07_pipeline " PP_SHAPE " --pp 4 --micro-batches 8 --schedule 1f1b --trace %s", tr);
  cr_assert_eq(rc, 0, "1F1B P 4 M 8 with ZL_SYNC_SENDS=1 exited %d (124: deadlock):\n%s", rc, o1);
  int P = 4, M = 8, want = 0;
  for (int s = 0; s < P - 1; s++) want += 2 * (M - (P - s - 1 < M ? P - s - 1 : M));
  int got = count_in_file(tr, " + recv ");
  cr_assert_eq(got, want, "1F1B P 4 M 8: %d paired send+recv events in the trace, expected %d", got, want);
  rc = run_sync(4, &o2, ZL_BIN "/ch07_pipeline " PP_SHAPE " --pp 4 --micro-batches 8 --schedule gpipe%s", "");
  cr_assert_eq(rc, 0, "GPipe P 4 M 8 with ZL_SYNC_SENDS=1 exited %d:\n%s", rc, o2);
  char *l1 = loss_of(o1), *l2 = loss_of(o2);
  cr_assert(l1 && l2 && strcmp(l1, l2) == 0, "1F1B with pairs vs GPipe: loss '%s' vs '%s'",
            l1 ? l1 : "(none)", l2 ? l2 : "(none)");
  rc =
      run_sync(2, &o3, ZL_BIN "/ch07_pipeline " PP_SHAPE " --micro-batches 1 --schedule 1f1b --trace %s", tr);
  cr_assert_eq(rc, 0, "1F1B P 2 M 1 with ZL_SYNC_SENDS=1 exited %d:\n%s", rc, o3);
  got = count_in_file(tr, " + recv ");
  cr_assert_eq(got, 0, "1F1B P 2 M 1 has no steady state, yet %d pairs in the trace", got);
  unlink(tr);
  free(l1), free(l2), free(o1), free(o2), free(o3);
}

/* The NCCL backend's groups (solutions/pipeline_pairs.c, pp_groups: every message on one communicator,
 * each send grouped with the next receive), run on MPI with ZL_PP_GROUPED=1: under synchronous sends
 * (ncclSend's rendezvous) 1F1B, ZB-H1 and ZB-H2 at P = 4 run to the end with the default messages'
 * final loss (receives posted ahead). */
Test(ch07_pipeline_pairs, nccl_groups_run_on_mpi_under_synchronous_sends, .timeout = 200) {
  static const char *scheds[] = {"1f1b --micro-batches 8 --pp 4", "zb-h1 --micro-batches 8 --pp 4",
                                 "zb-h2 --micro-batches 8 --pp 4"};
  for (int i = 0; i < 3; i++) {
    char *o1 = NULL, *o2 = NULL;
    char cmd[512];
    snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline " PP_SHAPE " --schedule %s%%s", scheds[i]);
    int rc = zl_run(4, 90, &o1, cmd, "");
    cr_assert_eq(rc, 0, "%s (receives posted ahead) exited %d:\n%s", scheds[i], rc, o1);
    setenv("ZL_PP_GROUPED", "1", 1);
    setenv("ZL_SYNC_SENDS", "1", 1);
    setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS -x ZL_PP_GROUPED", 1);
    rc = zl_run(4, 90, &o2, cmd, "");
    unsetenv("ZL_PP_GROUPED");
    unsetenv("ZL_SYNC_SENDS");
    unsetenv("ZL_MPIRUN_FLAGS");
    cr_assert_eq(rc, 0, "%s grouped on one communicator, ZL_SYNC_SENDS=1: exited %d (124: deadlock):\n%s",
                 scheds[i], rc, o2);
    char *l1 = loss_of(o1), *l2 = loss_of(o2);
    cr_assert(l1 && l2 && strcmp(l1, l2) == 0, "%s: posted ahead vs grouped: loss '%s' vs '%s'", scheds[i],
              l1 ? l1 : "(none)", l2 ? l2 : "(none)");
    free(l1), free(l2), free(o1), free(o2);
  }
}

/* Bytes of the file at path into *buf (malloc'd); −1 when it cannot be read. */
static long slurp(const char *path, char **buf) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *buf = malloc((size_t)n + 1);
  n = (long)fread(*buf, 1, (size_t)n, f);
  fclose(f);
  return n;
}

/* Interleaved in Megatron's groups (pp_group_cuts: at each boundary one comm_group_async of up to two
 * sends and two receives, every message on one communicator), run on MPI with ZL_PP_GROUPED=1 under
 * synchronous sends: v = 2 and 3 at P = 2 (M 4) and P = 4 (M 8) run to the end, and the parameters
 * after two steps are the default messages' (receives posted ahead) bit for bit (--save-params, cmp:
 * the same kernels on the same shapes in the same order; only the messages' grouping differs). */
#define PP_SHAPE_IL \
  "--input 6 --hidden 13 --classes 11 --layers 12 --batch 24 --seed 7 --steps 2 --timeout-s 20 --quiet"
Test(ch07_pipeline_pairs, interleaved_groups_run_on_mpi_under_synchronous_sends, .timeout = 200) {
  static const int cases[4][3] = {{2, 2, 4}, {2, 4, 8}, {3, 2, 4}, {3, 4, 8}}; /* v, P, M */
  for (int i = 0; i < 4; i++) {
    int v = cases[i][0], P = cases[i][1], M = cases[i][2];
    char cmd[512], path[2][96], *o[2] = {NULL, NULL}, *bytes[2] = {NULL, NULL};
    long n[2];
    for (int g = 0; g < 2; g++) {
      snprintf(path[g], sizeof path[g], "/tmp/zl_pp_il_%d_%d.bin", (int)getpid(), g);
      snprintf(cmd, sizeof cmd,
               ZL_BIN "/ch07_pipeline " PP_SHAPE_IL " --schedule interleaved --virtual-stages %d --pp %d "
                      "--micro-batches %d --save-params %%s",
               v, P, M);
      if (g) {
        setenv("ZL_PP_GROUPED", "1", 1);
        setenv("ZL_SYNC_SENDS", "1", 1);
        setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS -x ZL_PP_GROUPED", 1);
      }
      int rc = zl_run(P, 90, &o[g], cmd, path[g]);
      unsetenv("ZL_PP_GROUPED");
      unsetenv("ZL_SYNC_SENDS");
      unsetenv("ZL_MPIRUN_FLAGS");
      cr_assert_eq(rc, 0, "interleaved v %d P %d M %d, %s: exited %d (124: deadlock):\n%s", v, P, M,
                   g ? "grouped on one communicator, ZL_SYNC_SENDS=1" : "receives posted ahead", rc, o[g]);
      n[g] = slurp(path[g], &bytes[g]);
      unlink(path[g]);
      cr_assert(n[g] > 0, "interleaved v %d P %d M %d: no --save-params file (%s)", v, P, M, path[g]);
    }
    long at = 0;
    while (at < n[0] && at < n[1] && bytes[0][at] == bytes[1][at]) at++;
    cr_assert(n[0] == n[1] && at == n[0],
              "interleaved v %d P %d M %d: grouped vs posted ahead: the parameters differ at "
              "byte %ld of %ld / %ld (got 0x%02x, expected 0x%02x)",
              v, P, M, at, n[1], n[0], at < n[1] ? (unsigned char)bytes[1][at] : 0,
              at < n[0] ? (unsigned char)bytes[0][at] : 0);
    free(bytes[0]), free(bytes[1]), free(o[0]), free(o[1]);
  }
}
