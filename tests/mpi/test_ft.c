/* test_ft.c — training that survives a lost rank (notes/14-fault-tolerance.md): the contracts of
 * --ckpt-async (the files a synchronous save writes, the stall is the copy) and of --ckpt-mem-every K
 * with common/scripts/zlrun --restarts R (a rank killed, the job relaunched, restored from RAM —
 * its own snapshot or its buddy's copy when its node is gone — and the final params bitwise those
 * of the uninterrupted run, the steps redone <= K; a spent budget says so; nothing left behind).
 * 2 ranks, the small MLP of test_reliability.c: a few seconds in all. */
#include "zl_test.h" // zl_run, zl_read_file, zl_tmpdir, zl_expect_same_file, zl_json_num
#include "goodput.h" // goodput_calc, goodput_main
#include "ckpt_buddy.h" // ckpt_buddy_of (the exercise of notes/14-fault-tolerance.md)
#include <math.h>    // fabs
#include <criterion/logging.h> // cr_log_info
#include <sys/stat.h> // stat
#include <unistd.h>   // getpid

#define MODEL                                                                                              \
  "--hidden 13 --input 6 --classes 11 --layers 2 --batch 120 --seed 7 --lr 0.01 --quiet --log-every 0"

static void run_ok(int np, const char *what, const char *cmd) {
  char *out = NULL;
  int rc = zl_run(np, 60, &out, "%s", cmd);
  cr_assert_eq(rc, 0, "%s exited %d:\n%s", what, rc, out);
  free(out);
}

/* Nothing of job `job` left: no /dev/shm/zl-JOB-* file and no process naming `mark`. */
static void nothing_left(const char *job, const char *mark) {
  char cmd[600], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "sh -c 'ls /dev/shm | grep -c zl-%s-; ps -e -o args | grep -v grep | grep -c %s'", job, mark);
  zl_run(0, 10, &out, "%s", cmd);
  cr_assert(out && strcmp(out, "0\n0\n") == 0, "job %s left files / processes behind:\n%s", job, out);
  free(out);
}

Test(ch14_ft, async_files_are_the_sync_files) {
  char dir[256], cmd[2048], p[600], q[600];
  zl_tmpdir(dir, sizeof dir, "ft_async");
  const char *how[2] = {"", "--ckpt-async"};
  for (int k = 0; k < 2; k++) {
    snprintf(cmd, sizeof cmd, ZL_BIN "/ch03_zero1 " MODEL
             " --steps 8 --save-every 4 --ckpt %s/%c %s --json %s/%c.json",
             dir, 'a' + k, how[k], dir, 'a' + k);
    run_ok(2, how[k][0] ? "async save" : "sync save", cmd);
  }
  for (int s = 4; s <= 8; s += 4) {
    for (int r = 0; r < 2; r++) {
      snprintf(p, sizeof p, "%s/a/step-%06d/rank-%05d.bin", dir, s, r);
      snprintf(q, sizeof q, "%s/b/step-%06d/rank-%05d.bin", dir, s, r);
      zl_expect_same_file(p, q);
    }
    /* losses.bin: (loss, ms) per step — the losses equal, the times are this run's own */
    snprintf(p, sizeof p, "%s/a/step-%06d/losses.bin", dir, s);
    snprintf(q, sizeof q, "%s/b/step-%06d/losses.bin", dir, s);
    size_t na = 0, nb = 0;
    char *a = zl_read_file(p, &na), *b = zl_read_file(q, &nb);
    cr_assert(a && b && na == nb && na == (size_t)s * 16, "%s: %zu bytes, %s: %zu", p, na, q, nb);
    for (int i = 0; i < s; i++)
      cr_assert(memcmp(a + 16 * i, b + 16 * i, 8) == 0, "loss of step %d differs", i);
    free(a);
    free(b);
    /* the manifests: the same but for losses.bin's checksum line and the manifest's own */
    snprintf(cmd, sizeof cmd, "sh -c 'diff %s/a/step-%06d/manifest.txt %s/b/step-%06d/manifest.txt | "
             "grep \"^[<>]\" | grep -v \"^. file losses.bin\" | grep -v \"^. checksum\" | wc -l'",
             dir, s, dir, s);
    char *out = NULL;
    zl_run(0, 10, &out, "%s", cmd);
    cr_assert(out && strcmp(out, "0\n") == 0, "manifests of step %d differ beyond losses.bin:\n%s", s, out);
    free(out);
  }
  snprintf(p, sizeof p, "%s/b.json", dir);
  char *j = zl_read_file(p, NULL);
  cr_assert(j && strstr(j, "\"ckpt_stall_ms\"") && strstr(j, "\"ckpt_background_write_ms\""),
            "--json lacks the stall and the background write:\n%s", j);
  free(j);
  cr_log_info("--ckpt-async: shards and manifests those of the synchronous save; stall in --json");
}

/* Uninterrupted vs killed + relaunched from RAM: --save-params bitwise, the steps redone printed. */
static void kill_relaunch_on(int np, const char *prog, const char *extra, const char *fault,
                             const char *nodes, const char *source) {
  char dir[256], cmd[2048], u[300], k[300], job[64], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "ft_kill");
  snprintf(u, sizeof u, "%s/u.bin", dir);
  snprintf(k, sizeof k, "%s/k.bin", dir);
  snprintf(job, sizeof job, "t%d%s", (int)getpid(), fault + 4);
  snprintf(cmd, sizeof cmd, "env %s bash common/scripts/zlrun %d " ZL_BIN "/%s " MODEL " %s --steps 8 "
           "--save-params %s", nodes, np, prog, extra, u);
  run_ok(0, "uninterrupted run", cmd);
  int rc = zl_run(0, 90, &out,
                  "env ZL_JOB_ID=%s %s bash common/scripts/zlrun --restarts 2 %d " ZL_BIN "/%s " MODEL
                  " %s --steps 8 --save-params %s --ckpt-mem-every 3 --fault %s",
                  job, nodes, np, prog, extra, k, fault);
  cr_assert_eq(rc, 0, "killed + relaunched run exited %d:\n%s", rc, out);
  cr_assert(strstr(out, "relaunching (restart 1 of 2)") &&
                strstr(out, "restored from RAM (relaunch 1): step 6"),
            "no relaunch from the step-6 snapshot:\n%s", out);
  cr_assert(strstr(out, source), "the restore did not use %s:\n%s", source, out);
  cr_assert(strstr(out, "1 step redone (at most K = 3)"), "the steps redone not printed:\n%s", out);
  zl_expect_same_file(u, k);
  free(out);
  nothing_left(job, k);
  cr_log_info("%s %s --fault %s: relaunched, restored from RAM (%s), params bitwise", prog, extra, fault,
              source);
}

static void kill_relaunch(const char *prog, const char *fault, const char *nodes, const char *source) {
  kill_relaunch_on(2, prog, "", fault, nodes, source);
}

Test(ch14_ft, kill_relaunch_bitwise_zero1) { kill_relaunch("ch03_zero1", "1:7:kill", "", "rank 1 own"); }
Test(ch14_ft, kill_relaunch_bitwise_zero3) { kill_relaunch("ch05_zero3", "0:7:kill", "", "rank 0 own"); }
Test(ch14_ft, node_down_restored_from_buddy) {
  kill_relaunch("ch05_zero3", "1:7:node", "ZL_NODE_OF_RANK=0,1", "rank 1 buddy's copy");
}

/* Continuing on fewer ranks (zlrun --restarts R --elastic): a node of the 4-rank job is lost at step 7 and
 * does not come back; the relaunch runs on the survivors, resharding the step-6 snapshots (own files and
 * the lost ranks' copies at their buddies) through the universal checkpoint. Contract: the final params
 * equal those of the same 4-rank run saved at step 6 and resumed from disk on the smaller grid — bitwise,
 * for both then sum the same states over the same ranks. */
static void elastic(const char *prog, const char *extra, const char *nodes, const char *fault, int left,
                    const char *source) {
  char dir[256], cmd[2048], r[300], k[300], job[64], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "ft_elastic");
  snprintf(r, sizeof r, "%s/resumed.bin", dir);
  snprintf(k, sizeof k, "%s/elastic.bin", dir);
  snprintf(job, sizeof job, "t%de%s", (int)getpid(), prog + 2);
  snprintf(cmd, sizeof cmd, "env ZL_NODE_OF_RANK=%s bash common/scripts/zlrun 4 " ZL_BIN "/%s " MODEL
           " %s --steps 8 --ckpt %s/ck --save-every 6", nodes, prog, extra, dir);
  run_ok(0, "4-rank run saving step 6", cmd);
  snprintf(cmd, sizeof cmd, ZL_BIN "/%s " MODEL " %s --steps 8 --resume %s/ck/step-000006 --save-params %s",
           prog, extra, dir, r);
  run_ok(left, "resume from disk on fewer ranks", cmd);
  int rc = zl_run(0, 90, &out,
                  "env ZL_JOB_ID=%s ZL_NODE_OF_RANK=%s bash common/scripts/zlrun --restarts 1 --elastic 4 "
                  ZL_BIN
                  "/%s " MODEL " %s --steps 8 --save-params %s --ckpt-mem-every 3 --fault %s",
                  job, nodes, prog, extra, k, fault);
  cr_assert_eq(rc, 0, "elastic run exited %d:\n%s", rc, out);
  char want[160];
  snprintf(want, sizeof want, "continuing on %d of 4 ranks", left);
  cr_assert(strstr(out, want), "zlrun did not shrink the job (%s):\n%s", want, out);
  snprintf(want, sizeof want, "step 6 of the 4-rank job's snapshots (%s", source);
  cr_assert(strstr(out, want), "no elastic restore from the step-6 snapshots (%s...):\n%s", want, out);
  zl_expect_same_file(r, k);
  free(out);
  nothing_left(job, k);
  cr_log_info("%s %s --fault %s: 4 -> %d ranks, = the disk resume on %d ranks bitwise", prog, extra, fault,
              left, left);
}

Test(ch14_ft, elastic_fewer_ranks_equals_a_resume_on_the_smaller_grid) {
  elastic("ch03_zero1", "", "0,0,1,1", "2:7:node", 2, "rank 0 own, rank 1 own, rank 2 from rank 0's copy");
}

Test(ch14_ft, budget_exhausted_says_so_and_keeps_the_users_file) {
  char dir[256], k[300], job[64], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "ft_budget");
  snprintf(k, sizeof k, "%s/mine.bin", dir);
  FILE *f = fopen(k, "w");
  fputs("the user's file", f);
  fclose(f);
  snprintf(job, sizeof job, "t%db", (int)getpid());
  int rc = zl_run(0, 60, &out,
                  "env ZL_JOB_ID=%s bash common/scripts/zlrun --restarts 0 2 " ZL_BIN "/ch03_zero1 " MODEL
                  " --steps 8 --save-params %s --ckpt-mem-every 3 --fault 1:5:exit",
                  job, k);
  cr_assert(rc != 0 && strstr(out, "zlrun: restart budget exhausted: 0 restart(s) used"),
            "exit %d; output:\n%s", rc, out);
  char *kept = zl_read_file(k, NULL);
  cr_assert(kept && strcmp(kept, "the user's file") == 0, "a failed run overwrote %s", k);
  free(kept);
  free(out);
  nothing_left(job, k);
}

Test(ch14_ft, bad_flags_one_line_exit_2) {
  const char *cases[][2] = {
      {"bash common/scripts/zlrun --restarts x 2 " ZL_BIN "/ch03_zero1", "error: --restarts x"},
      {ZL_BIN "/ch03_zero1 --steps 8 --ckpt-mem-every 8", "error: --ckpt-mem-every 8"},
      {ZL_BIN "/ch03_zero1 --steps 8 --ckpt-async", "error: --ckpt-async"},
      {ZL_BIN "/ch03_zero1 --steps 8 --fault 0:1:nodes", "error: --fault 0:1:nodes"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    int rc = zl_run(0, 20, &out, "%s", cases[i][0]);
    cr_assert(rc == 2 && strncmp(out, cases[i][1], strlen(cases[i][1])) == 0 && strchr(out, '\n') &&
                  strchr(out, '\n')[1] == 0,
              "%s: exit %d, expected one line '%s...' and exit 2:\n%s", cases[i][0], rc, cases[i][1], out);
    free(out);
  }
}

/* The snapshot's memory in the ledger (host arena, LEDGER_CKPT) beside its formula: ZeRO-1, fp32,
 * AdamW, N = 2, an MLP whose units need no padding (Ψ = 8·16+16 + 16·16+16 + 16·4+4 = 484): after
 * the snapshot of step 6 each rank keeps its own and its buddy's,
 * 2 × (144 + 4Ψ + (Ψ/2)·4·3 + 24·6 + 16·3):
 * the header, held params, own weights, m and v, the losses, where each of the 3 units' own piece lies. */
Test(ch14_ft, snapshot_memory_in_the_ledger_is_the_formula) {
  char dir[256], cmd[1024];
  zl_tmpdir(dir, sizeof dir, "ft_ledger");
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch03_zero1 --hidden 16 --input 8 --classes 4 --layers 2 --batch 8 "
           "--seed 7 --quiet --log-every 0 --steps 8 --ckpt-mem-every 3 --json %s/m.json", dir);
  run_ok(2, "in-memory snapshots", cmd);
  snprintf(cmd, sizeof cmd, "%s/m.json", dir);
  char *j = zl_read_file(cmd, NULL);
  cr_assert(j, "no --json written");
  double psi = 8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4, one = 144 + 4 * psi + psi / 2 * 12 + 24 * 6 + 16 * 3;
  double ledger = zl_json_num(j, "ckpt_mem_ledger_host_peak_bytes");
  double f = zl_json_num(j, "ckpt_mem_formula_bytes");
  cr_assert(ledger == 2 * one && f == 2 * one, "ledger %.0f, formula %.0f, by hand 2 x %.0f", ledger, f, one);
  cr_assert(zl_json_num(j, "ckpt_mem_snapshot_bytes") == one &&
                zl_json_num(j, "ckpt_mem_buddy_copy_bytes") == one,
            "own and copy bytes:\n%s", j);
  free(j);
  cr_log_info("--ckpt-mem-every: ledger (host, ckpt) %.0f bytes = formula 2 x %.0f", ledger, one);
}

/* Young's interval and the goodput, by hand: M = 4 h, δ = 72 s gives τ = √(2·72·14400) = 1440 s,
 * δ/τ = τ/2M = 5 %; R = 144 s adds 1 %; the interval asked for instead (720 s) costs more. */
Test(ch14_ft, goodput_arithmetic) {
  goodput_t g = goodput_calc(14400, 72, 144, 0);
  cr_assert(fabs(g.interval_s - 1440) < 1e-9 && fabs(g.save_frac - 0.05) < 1e-12 &&
                fabs(g.redo_frac - 0.05) < 1e-12 && fabs(g.restart_frac - 0.01) < 1e-12 &&
                fabs(g.goodput - 0.89) < 1e-12,
            "tau %g save %g redo %g restart %g goodput %g", g.interval_s, g.save_frac, g.redo_frac,
            g.restart_frac, g.goodput);
  goodput_t h = goodput_calc(14400, 72, 144, 720), k = goodput_calc(14400, 72, 144, 1584);
  cr_assert(fabs(h.goodput - 0.865) < 1e-12 && k.goodput < g.goodput, "tau 720: %g, 1584: %g", h.goodput,
            k.goodput);
  cr_assert(goodput_calc(100, 60, 60, 0).goodput == 0, "failures faster than the saves: no goodput");
  char *out = NULL; /* Llama 3's 54 days and 419 unexpected interruptions: M = 3.093 h */
  int rc = zl_run(0, 10, &out, ZL_BIN "/ch00_memory --goodput --window-days 54 --interruptions 419 "
                  "--ckpt-s 60 --restart-s 600");
  cr_assert(rc == 0 && strstr(out, "MTBF M = 3.093 h (54 days / 419 interruptions)") &&
                strstr(out, "Young's interval τ = √(2δM) = 1155.9 s"),
            "exit %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 10, &out, ZL_BIN "/ch00_memory --goodput --ckpt-s 60 --restart-s 600");
  cr_assert(rc == 2 && strncmp(out, "error: --mtbf-h", 15) == 0, "exit %d:\n%s", rc, out);
  free(out);
}

/* The exercise ckpt_buddy_of, by its contract and not by one answer: on every node map a
 * permutation without a fixed point (each rank holds one copy, never its own), and on nodes of
 * equal size every buddy on another node. A wrong body is named by what it breaks. */
Test(ch14_ft, buddy_placement) {
  static const int maps[][8] = {{0, 0}, {0, 0, 0}, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 1, 1, 2, 2},
                                {0, 1, 2, 0, 1, 2}, {0, 0, 0, 1}, {0, 1, 1}, {1, 1, 0, 0}, {0, 1}};
  static const int worlds[] = {2, 3, 4, 4, 6, 6, 4, 3, 4, 2};
  for (size_t m = 0; m < sizeof worlds / sizeof worlds[0]; m++) {
    const int *node = maps[m], W = worlds[m];
    int held[8] = {0}, sizes[8] = {0}, nodes = 0, even = 1;
    for (int r = 0; r < W; r++) sizes[node[r]]++, nodes = node[r] + 1 > nodes ? node[r] + 1 : nodes;
    for (int n = 1; n < nodes; n++) even &= sizes[n] == sizes[0];
    char map[64] = "";
    for (int r = 0; r < W; r++)
      snprintf(map + strlen(map), sizeof map - strlen(map), "%s%d", r ? "," : "", node[r]);
    for (int r = 0; r < W; r++) {
      int b = ckpt_buddy_of(node, W, r);
      cr_assert(b >= 0 && b < W, "nodes %s: rank %d's buddy %d is not one of the %d ranks", map, r, b, W);
      cr_assert(b != r, "nodes %s: rank %d is its own buddy: its only copy dies with it", map, r);
      cr_assert(!(nodes >= 2 && even && node[b] == node[r]),
                "nodes %s: rank %d's buddy %d is on its own node %d: a node lost takes both copies", map, r,
                b, node[r]);
      held[b]++;
    }
    for (int r = 0; r < W; r++)
      cr_assert(held[r] == 1, "nodes %s: rank %d holds %d copies, not one (its memory is uneven, and a "
                "sender finds no matching receive)", map, r, held[r]);
  }
}

/* make test-long: ZeRO-3 in bf16 going from 4 ranks to 3 (uneven nodes); HSDP (--shard-group node:
 * ZeRO-3 inside each of 2 emulated nodes, replicas across)
 * with a whole node down — restored from the buddies' copies on the same 4 ranks, bitwise the
 * uninterrupted run; and the elastic case — the node does not come back, 2 ranks go on, bitwise a
 * resume of the step-6 checkpoint on 2 ranks (one node: HSDP's shard group is then all of them). */
Test(ch14_ft_long, hsdp_node_down_from_buddies_and_elastic) {
  kill_relaunch_on(4, "ch05_zero3", "--shard-group node", "3:7:node", "ZL_NODE_OF_RANK=0,0,1,1",
                   "rank 2 buddy's copy, rank 3 buddy's copy");
  elastic("ch05_zero3", "--shard-group node", "0,0,1,1", "3:7:node", 2,
          "rank 0 own, rank 1 own, rank 2 from rank 0's copy, rank 3 from rank 1's copy");
  elastic("ch05_zero3", "--precision bf16", "0,1,1,1", "0:7:node", 3,
          "rank 0 from rank 3's copy, rank 1 own"); /* uneven nodes, rank 0's node lost, 4 -> 3 */
}
