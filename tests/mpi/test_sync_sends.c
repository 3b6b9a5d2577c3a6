/* test_sync_sends.c — the synchronous-send mode of the MPI backend (ZL_SYNC_SENDS=1: every send
 * is MPI_Issend, completing only when the receiver has matched it: ncclSend's rendezvous
 * semantics). Small CPU messages otherwise go eagerly, so an ordering of sends and receives that
 * deadlocks on a GPU would pass on the laptop; in this mode it hangs here too, and the deadline
 * names the rank. First the mode is shown to bite (a crossed send/send, tests/mpi/scn_sync_sends),
 * then the pipeline (1F1B and GPipe), tensor parallelism, ZeRO-3 and the context-parallel ring
 * (3 ranks: an odd ring) run under it without deadlock and to the same loss as with eager sends. Notes:
 * notes/design.md (the stream model). */
#include "zl_test.h" // zl_run, cr_assert

#define SHAPE \
  "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 2 --timeout-s 20 --quiet"
/* 8 units */
#define SHAPE7 \
  "--input 6 --hidden 13 --classes 11 --layers 7 --batch 24 --seed 7 --steps 2 --timeout-s 20 --quiet"

/* zl_run with ZL_SYNC_SENDS set to `sync` ("0" or "1") on every rank. */
static int run_mode(const char *sync, int np, char **out, const char *cmd) {
  setenv("ZL_SYNC_SENDS", sync, 1);
  setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS", 1);
  int rc = zl_run(np, 90, out, "%s", cmd);
  unsetenv("ZL_SYNC_SENDS");
  unsetenv("ZL_MPIRUN_FLAGS");
  return rc;
}

Test(common_sync_sends, crossed_sends_pass_eager_and_deadlock_named_when_synchronous, .timeout = 120) {
  char *out = NULL;
  int rc = run_mode("0", 2, &out, ZL_TESTBIN "/scn_sync_sends");
  cr_assert(rc == 0 && strstr(out, "scn_sync_sends: exchanged"),
            "eager sends: the crossed exchange should complete (rc %d):\n%s", rc, out);
  free(out);
  rc = run_mode("1", 2, &out, ZL_TESTBIN "/scn_sync_sends");
  cr_assert(rc != 0 && rc != 124,
            "ZL_SYNC_SENDS=1: the crossed sends must deadlock and the deadline abort the job "
            "(rc %d; 0 means the sends were not synchronous, 124 that nothing named the hang):\n%s",
            rc, out);
  cr_assert(strstr(out, "rank ") && strstr(out, "did not complete within 2 s"),
            "ZL_SYNC_SENDS=1: the abort should name the rank and the op:\n%s", out);
  free(out);
}

/* The "final loss ..." line of a --quiet run (the loss to 6 digits), or NULL. */
static char *final_loss(const char *out) {
  const char *p = strstr(out, "final loss ");
  if (!p) return NULL;
  const char *e = strchr(p, ',');
  return e ? strndup(p, (size_t)(e - p)) : NULL;
}

static const struct { int np; const char *cmd;
} SYNC_RUNS[] = {
    {2, ZL_BIN "/ch07_pipeline " SHAPE " --micro-batches 4 --schedule 1f1b"},
    {4, ZL_BIN "/ch07_pipeline " SHAPE " --micro-batches 4 --schedule interleaved --virtual-stages 1 --pp 4"},
    {3,
     ZL_BIN
     "/ch10_long --model gpt --gpt tiny --seq-len 24 --batch 6 --steps 2 --timeout-s 20 --quiet --cp 3"},
    /* two chunks per rank: the warm-up and cool-down messages of the interleaved schedule */
    {2, ZL_BIN "/ch07_pipeline " SHAPE " --micro-batches 4 --schedule interleaved --virtual-stages 2"},
    /* four stages of ZB-H2 (receives posted ahead on the MPI backend, the middle stages' on their own
     * streams: solutions/pipeline_post.c) */
    {4, ZL_BIN "/ch07_pipeline " SHAPE " --micro-batches 8 --schedule zb-h2 --pp 4"},
    /* make test-long: the rest */
    {2, ZL_BIN "/ch07_pipeline " SHAPE7 " --micro-batches 4 --schedule interleaved --virtual-stages 3"},
    {4,
     ZL_BIN "/ch07_pipeline " SHAPE7 " --micro-batches 4 --schedule interleaved --virtual-stages 2 --pp 4"},
    {2, ZL_BIN "/ch07_pipeline " SHAPE " --micro-batches 4 --schedule gpipe"},
    {4, ZL_BIN "/ch06_tp " SHAPE " --tp 2"},
    {2, ZL_BIN "/ch05_zero3 " SHAPE " --prefetch 1"},
};
/* runs [lo, hi) of SYNC_RUNS, eager then with ZL_SYNC_SENDS=1: the same final loss, no deadlock */
static void sync_runs(size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; i++) {
    char *eager = NULL, *sync = NULL;
    int rc0 = run_mode("0", SYNC_RUNS[i].np, &eager, SYNC_RUNS[i].cmd);
    cr_assert_eq(rc0, 0, "%s (eager sends) exited %d:\n%s", SYNC_RUNS[i].cmd, rc0, eager);
    int rc1 = run_mode("1", SYNC_RUNS[i].np, &sync, SYNC_RUNS[i].cmd);
    cr_assert_eq(rc1, 0, "%s with ZL_SYNC_SENDS=1 exited %d (124: a deadlock nothing named):\n%s",
                 SYNC_RUNS[i].cmd, rc1, sync);
    char *l0 = final_loss(eager), *l1 = final_loss(sync);
    cr_assert(l0 && l1 && strcmp(l0, l1) == 0,
              "%s: synchronous sends changed the result: eager '%s', sync '%s'", SYNC_RUNS[i].cmd,
              l0 ? l0 : "(none)", l1 ? l1 : "(none)");
    free(l0), free(l1), free(eager), free(sync);
  }
}
/* make test: the pipeline (1F1B; interleaved across 4 stages, and with 2 chunks per rank; ZB-H2 across
 * 4 stages) and ring CP, whose sends pair up across ranks; make test-long adds interleaved v = 3 and v = 2 at
 * P = 4,
 * GPipe, TP and ZeRO-3 prefetch (collectives only). */
Test(common_sync_sends, pipeline_tp_zero3_cp_run_under_synchronous_sends, .timeout = 600) { sync_runs(0, 5); }
Test(common_sync_sends_long, gpipe_tp_and_zero3_under_synchronous_sends, .timeout = 600) {
  sync_runs(5, sizeof SYNC_RUNS / sizeof SYNC_RUNS[0]);
}
