/* test_reliability.c — what happens when things go wrong (notes/reliability.md):
 *   1. bad input: every program refuses bad flags with ONE line naming flag, value and the
 *      allowed range, exit code 2, within seconds, printed once under mpirun: the table
 *      tests/bad_inputs.txt, run by test_bad_inputs.c;
 *   2. a failing rank (--fault R:S:exit|abort|kill|hang): the job ends non-zero within 30 s and
 *      the output names the failing rank; hang: the others' collective deadline names the op;
 *   3. non-finite gradients: --nonfinite abort names the step and the rank where the NaN
 *      appeared; --nonfinite skip leaves params and optimizer states unchanged bit for bit;
 *   4. out of memory: the --mem-limit-mb budget and a model the host cannot hold end with
 *      `out of memory ...on rank R`, never a signal;
 *   5. checkpoints: resume is bitwise for DDP and ZeRO-1/2/3 (params, losses, optimizer states),
 *      resharding to another world size / stage stays within 1e-6, a crash mid-save loses
 *      nothing, bad checkpoints are refused naming the file, zl_ckpt consolidates and inspects;
 *   6. output files: an unwritable --json/--trace/--save-params/--ckpt path is refused before
 *      step 0 (bad input, table 1); a write that fails at the end (/dev/full) stops the job
 *      non-zero naming the flag and the file; a device that takes writes (/dev/null) is written
 *      in place and stays a device.
 * Tiny models, few steps: the whole file runs in well under a minute on 2 cores. */
#include "zl_test.h" // zl_run, zl_read_file, zl_tmpdir, zl_expect_floats, zl_read_floats
#include <criterion/logging.h> // cr_log_info
#include <time.h>    // clock_gettime
#include <stdarg.h>  // va_list (tool_expect)

#define SHAPE_REST "--input 6 --classes 11 --layers 2 --batch 120 --seed 7 --lr 0.01 --quiet --log-every 0"
#define MODEL "--hidden 13 " SHAPE_REST
#define PSI 427 /* 13·7 + 13·14 + 11·14 */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- 1. bad input: the table tests/bad_inputs.txt, run by test_bad_inputs.c ---------------- */

/* ---- 2. a failing rank ------------------------------------------------------------------ */

static void fault_case(const char *prog, const char *kind) {
  char *out = NULL, want[128];
  double t0 = now_s();
  int rc = zl_run(3, 60, &out, ZL_BIN "/%s " MODEL " --steps 6 --timeout-s 1 --fault 1:2:%s", prog, kind);
  double dt = now_s() - t0;
  cr_assert_neq(rc, 0, "--fault 1:2:%s (%s, N 3): the job exited 0; output:\n%s", kind, prog, out);
  cr_assert_neq(rc, 124,
                "--fault 1:2:%s (%s, N 3): the job did not end (killed by the test's timeout); output:\n%s",
                kind, prog, out);
  snprintf(want, sizeof want, "rank 1: injected fault %s at step 2", kind);
  cr_assert(strstr(out, want),
            "--fault 1:2:%s: the output does not name the failing rank ('%s'); output:\n%s", kind, want, out);
  cr_assert(dt < 30.0, "--fault 1:2:%s: the job took %.1f s to end, expected < 30 s", kind, dt);
  if (!strcmp(kind, "hang")) /* our deadline, not mpirun's: names the op the survivors waited for */
    cr_assert(strstr(out, "did not complete within 1 s") &&
                  (strstr(out, "all_reduce") || strstr(out, "reduce_scatter") || strstr(out, "all_gather")),
              "--fault hang: no collective-deadline message naming the collective; output:\n%s", out);
  cr_log_info("--fault 1:2:%s (%s, N 3): job down in %.2f s, exit code %d", kind, prog, dt, rc);
  free(out);
}

Test(common_reliability, fault_exit) { fault_case("ch02_ddp", "exit"); }
Test(common_reliability, fault_abort) { fault_case("ch03_zero1", "abort"); }
Test(common_reliability, fault_kill) { fault_case("ch04_zero2", "kill"); }
Test(common_reliability, fault_hang) { fault_case("ch05_zero3", "hang"); }
Test(common_reliability_long, fault_hang_ddp) { fault_case("ch02_ddp", "hang"); }

/* ---- 3. non-finite gradients ------------------------------------------------------------- */

static void nonfinite_abort(const char *prog, int np, int rank) {
  char *out = NULL, want[160];
  int rc = zl_run(np, 60, &out, ZL_BIN "/%s " MODEL " --steps 5 --fault %d:2:nan", prog, rank);
  cr_assert(rc != 0 && rc != 124, "%s --fault %d:2:nan: exit code %d, expected a non-zero stop; output:\n%s",
            prog, rank, rc, out);
  snprintf(want, sizeof want, "error: step 2: non-finite gradient on rank %d (local gradients", rank);
  cr_assert(strstr(out, want), "%s: expected '%s' (the step and the rank where it appeared); output:\n%s",
            prog, want, out);
  free(out);
}
Test(common_reliability, nonfinite_abort_names_step_and_rank) {
  nonfinite_abort("ch02_ddp", 3, 2);   /* the all-reduce spreads it: the local flag names the source */
  nonfinite_abort("ch04_zero2", 3, 1); /* reduce-scatter: pieces of every rank */
}

static void nonfinite_skip(const char *prog, int np, int rank) {
  char dir[256], *out = NULL, a[400], b[400];
  zl_tmpdir(dir, sizeof dir, prog);
  int rc = zl_run(np, 60, &out,
                  ZL_BIN "/%s " MODEL " --steps 2 --fault %d:1:nan --nonfinite skip --ckpt %s --save-every 1",
                  prog, rank, dir);
  cr_assert_eq(rc, 0, "%s --nonfinite skip: exit code %d; output:\n%s", prog, rc, out);
  char want[160];
  snprintf(want, sizeof want, "warning: step 1: non-finite gradient on rank %d", rank);
  cr_assert(strstr(out, want) && strstr(out, "skipped"), "%s: no warning line '%s ... skipped'; output:\n%s",
            prog, want, out);
  /* the state after step 1 (skipped) is the state after step 0, bit for bit, on every shard */
  int files = strcmp(prog, "ch02_ddp") == 0 ? 1 : np;
  for (int r = 0; r < files; r++) {
    snprintf(a, sizeof a, "%s/step-000001/rank-%05d.bin", dir, r);
    snprintf(b, sizeof b, "%s/step-000002/rank-%05d.bin", dir, r);
    zl_expect_same_file(a, b);
  }
  snprintf(a, sizeof a, "%s/step-000002/manifest.txt", dir);
  char *man = zl_read_file(a, NULL);
  cr_assert(man && strstr(man, "\nopt_t 1\n") && strstr(man, "\nskipped 1\n"),
            "%s: after a skipped step the optimizer step t must stay 1 and 1 step be counted skipped:\n%s", a,
            man);
  free(man);
  free(out);
}
Test(common_reliability, nonfinite_skip_leaves_states_bitwise) {
  nonfinite_skip("ch02_ddp", 3, 2);
  nonfinite_skip("ch05_zero3", 2, 1);
}

/* --fault R:S:nan in every chapter (issue 56: on the GPT, whose inputs are tokens, it did nothing
 * and exited 0): announced by rank R, the step stopped (abort: exit 1, one error line) or skipped
 * on every rank (skip: one warning, exit 0), whatever the model and the parallelism. */
typedef struct nan_case { int np; const char *cmd; int skip; } nan_case_t;
static void nan_fault(const nan_case_t *c) {
  char *out = NULL, want[96];
  int rc = zl_run(c->np, 60, &out, ZL_BIN "/%s --steps 4 --fault %d:2:nan --nonfinite %s --quiet", c->cmd,
                  c->np - 1, c->skip ? "skip" : "abort");
  snprintf(want, sizeof want, "rank %d: injected fault nan at step 2", c->np - 1);
  const char *says = c->skip ? "warning: step 2: non-finite gradient on rank"
                              : "error: step 2: non-finite gradient on rank";
  int lines = 0, trained = strstr(out, "final loss") != NULL;
  for (const char *p = out; (p = strstr(p, "step 2: non-finite gradient")); p++) lines++;
  cr_expect(rc == (c->skip ? 0 : 1) && strstr(out, want) && strstr(out, says) && lines == 1 &&
                trained == c->skip,
            "%s --fault %d:2:nan (np %d, %s): exit %d (expected %d), expected '%s' and one line '%s...'; "
            "output:\n%s",
            c->cmd, c->np - 1, c->np, c->skip ? "skip" : "abort", rc, c->skip ? 0 : 1, want, says, out);
  free(out);
}
static const nan_case_t g_nan[] = {
    {2, "ch02_ddp --model gpt --gpt tiny --batch 8", 0},
    {2, "ch06_tp --tp 2 --model gpt --gpt tiny --batch 8", 1},
    {2, "ch07_pipeline --model gpt --gpt tiny --batch 8 --schedule zb-h1", 0},
    {2, "ch10_long --model gpt --gpt tiny --cp 2 --batch 8", 1},
    {2, "ch12_experts --model gpt --gpt tiny --ep 2 --batch 8", 0},
    /* make test-long: the others */
    {2, "ch03_zero1 --model gpt --gpt tiny --batch 8", 1},
    {2, "ch04_zero2 --model gpt --gpt tiny --batch 8 --precision bf16", 0},
    {3, "ch05_zero3 --model gpt --gpt tiny --batch 6", 1},
    {2, "ch08_offload --model gpt --gpt tiny --batch 8", 0},
    {2, "ch05_zero3 --model gpt --gpt tiny --batch 8 --shard-group node", 1},
    {4, "ch07_pipeline --model gpt --gpt tiny --batch 8 --pp 2 --tp 2", 1},
    {2, "ch12_experts --model gpt --gpt tiny --ep 2 --tp 2 --batch 8", 1},
};
Test(common_reliability, nonfinite_fault_in_every_chapter) {
  for (int i = 0; i < 5; i++) nan_fault(&g_nan[i]);
}
Test(common_reliability_long, nonfinite_fault_in_every_chapter_more) {
  for (size_t i = 5; i < sizeof g_nan / sizeof g_nan[0]; i++) nan_fault(&g_nan[i]);
}

/* ---- 4. out of memory ------------------------------------------------------------------- */

Test(common_reliability, out_of_memory_is_a_message) {
  char *out = NULL;
  int rc =
      zl_run(2, 60, &out,
             ZL_BIN "/ch03_zero1 --input 64 --hidden 512 --layers 4 --batch 8 --steps 1 --mem-limit-mb 1");
  cr_assert(rc != 0 && rc < 128,
            "--mem-limit-mb 1: exit code %d (expected an error, not a signal); output:\n%s", rc, out);
  cr_assert(strstr(out, "out of memory budget on rank ") && strstr(out, "needs ") && strstr(out, " MiB"),
            "--mem-limit-mb 1: no 'out of memory budget on rank R: <buffer> needs X MiB' line; output:\n%s",
            out);
  free(out);
  /* 1.1e12 parameters: far beyond this host */
  rc = zl_run(2, 60, &out, ZL_BIN "/ch04_zero2 --hidden 65536 --layers 256 --batch 8 --steps 1 --quiet");
  cr_assert(rc != 0 && rc < 128,
            "--hidden 65536 --layers 256: exit code %d (expected an error, not a signal); output:\n%s", rc,
            out);
  cr_assert(strstr(out, "out of memory on rank ") && strstr(out, " MiB"),
            "--hidden 65536: no 'out of memory on rank R: ... MiB' line; output:\n%s", out);
  free(out);
}

/* ---- 5. checkpoints --------------------------------------------------------------------- */

typedef struct ck {
  char dir[256];  /* tmp dir of the test */
  char a_ck[300]; /* checkpoints of the straight run: step-000004, step-000008 */
  char a_bin[300], a_json[300];
} ck_t;

static void run_ok(int np, const char *what, const char *fmt, const char *prog, const char *args) {
  char *out = NULL;
  int rc = zl_run(np, 90, &out, fmt, prog, args);
  cr_assert_eq(rc, 0, "%s (np %d): exit code %d; output:\n%s", what, np, rc, out);
  free(out);
}

/* The losses (even doubles) of two losses.bin, bitwise. */
static void expect_same_losses(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = zl_read_file(a, &na), *y = zl_read_file(b, &nb);
  cr_assert(x && y && na == nb && na > 0, "%s / %s: missing or of different sizes", a, b);
  for (size_t s = 0; s < na / 16; s++) {
    double p, q;
    memcpy(&p, x + 16 * s, 8);
    memcpy(&q, y + 16 * s, 8);
    cr_assert(memcmp(&p, &q, 8) == 0, "loss of step %zu: %.17g in %s, %.17g in %s (bitwise)", s, p, a, q, b);
  }
  free(x);
  free(y);
}

/* Straight run of 8 steps saving at 4 and 8; resume from step 4 to 8 saving at the end; all
 * bitwise: params, the loss of every step, and every shard file (weights + optimizer states). */
static ck_t ckpt_same_world(const char *prog, int np, const char *extra, const char *name) {
  ck_t k;
  char args[4096], b_ck[300], b_bin[300], p[600], q[600];
  zl_tmpdir(k.dir, sizeof k.dir, name);
  snprintf(k.a_ck, sizeof k.a_ck, "%s/a", k.dir);
  snprintf(k.a_bin, sizeof k.a_bin, "%s/a.bin", k.dir);
  snprintf(k.a_json, sizeof k.a_json, "%s/a.json", k.dir);
  snprintf(b_ck, sizeof b_ck, "%s/b", k.dir);
  snprintf(b_bin, sizeof b_bin, "%s/b.bin", k.dir);
  snprintf(args, sizeof args, MODEL " %s --steps 8 --ckpt %s --save-every 4 --save-params %s --json %s",
           extra, k.a_ck, k.a_bin, k.a_json);
  run_ok(np, "straight run with checkpoints", ZL_BIN "/%s %s", prog, args);
  snprintf(args, sizeof args, MODEL " %s --steps 8 --resume %s/step-000004 --ckpt %s --save-params %s", extra,
           k.a_ck, b_ck, b_bin);
  run_ok(np, "resumed run", ZL_BIN "/%s %s", prog, args);
  zl_expect_same_file(k.a_bin, b_bin);
  snprintf(p, sizeof p, "%s/step-000008/losses.bin", k.a_ck);
  snprintf(q, sizeof q, "%s/step-000008/losses.bin", b_ck);
  expect_same_losses(p, q);
  int files = strcmp(prog, "ch02_ddp") == 0 ? 1 : np;
  for (int r = 0; r < files; r++) {
    snprintf(p, sizeof p, "%s/step-000008/rank-%05d.bin", k.a_ck, r);
    snprintf(q, sizeof q, "%s/step-000008/rank-%05d.bin", b_ck, r);
    zl_expect_same_file(p, q); /* weights AND optimizer states */
  }
  cr_log_info("checkpoint: %s N %d %s: 8 straight steps == 4 + resume + 4, bitwise", prog, np, extra);
  return k;
}

/* Resume k's step-4 checkpoint with another program / world size: within tol of the straight run. */
static void ckpt_reshard(const ck_t *k, const char *prog, int np, const char *extra, double tol) {
  char args[4096], c_bin[300];
  snprintf(c_bin, sizeof c_bin, "%s/reshard_%s_%d.bin", k->dir, prog, np);
  /* --resume DIR would take its latest (step 8): point at step 4 */
  snprintf(args, sizeof args, MODEL " %s --steps 8 --resume %s/step-000004 --save-params %s", extra, k->a_ck,
           c_bin);
  run_ok(np, "resharded resume", ZL_BIN "/%s %s", prog, args);
  int64_t n1 = 0, n2 = 0;
  float *want = zl_read_floats(k->a_bin, &n1), *got = zl_read_floats(c_bin, &n2);
  cr_assert_eq(n1, n2, "resharded run wrote %lld params, expected %lld", (long long)n2, (long long)n1);
  zl_expect_floats("params after resharding", got, want, n1, tol);
  free(want);
  free(got);
  cr_log_info("checkpoint: resharded into %s N %d, within %g of the straight run", prog, np, tol);
}

Test(common_reliability, ckpt_ddp_resume_bitwise_and_reshard) {
  ck_t k = ckpt_same_world("ch02_ddp", 2, "", "ck_ddp");
  ckpt_reshard(&k, "ch05_zero3", 3, "", 1e-6); /* DDP's one full file -> ZeRO-3 thirds */
}

Test(common_reliability, ckpt_zero1_resume_bitwise_bf16) {
  ckpt_same_world("ch03_zero1", 2, "--precision bf16", "ck_z1");
}

Test(common_reliability, ckpt_zero2_resume_crash_midsave_reshard) {
  ck_t k = ckpt_same_world("ch04_zero2", 2, "--optimizer sgd --momentum 0.9 --accum 2", "ck_z2");
  /* crash in the save after step 8 (rank 1 dies after writing its shard, before the manifest) */
  char args[4096], x_ck[300], x_bin[300], *out = NULL;
  snprintf(x_ck, sizeof x_ck, "%s/x", k.dir);
  snprintf(x_bin, sizeof x_bin, "%s/x.bin", k.dir);
  int rc = zl_run(2, 60, &out,
                  ZL_BIN "/ch04_zero2 " MODEL " --optimizer sgd --momentum 0.9 --accum 2 --steps 8 "
                         "--ckpt %s --save-every 4 --fault 1:7:ckpt",
                  x_ck);
  cr_assert(rc != 0 && strstr(out, "rank 1: injected fault ckpt at step 7"),
            "the crash run: exit %d; output:\n%s", rc, out);
  free(out);
  char latest[400];
  snprintf(latest, sizeof latest, "%s/latest", x_ck);
  char *l = zl_read_file(latest, NULL);
  cr_assert(l && strcmp(l, "step-000004\n") == 0, "%s after a crash mid-save: '%s', expected step-000004",
            latest, l);
  free(l);
  snprintf(args, sizeof args, "%s/step-000008", x_ck);
  struct stat sb;
  cr_assert(stat(args, &sb) != 0, "%s exists although its save crashed", args);
  snprintf(args, sizeof args,
           MODEL " --optimizer sgd --momentum 0.9 --accum 2 --steps 8 --resume %s --save-params %s", x_ck,
           x_bin);
  run_ok(2, "resume after the crash", ZL_BIN "/%s %s", "ch04_zero2", args);
  zl_expect_same_file(k.a_bin, x_bin); /* nothing was lost */
  ckpt_reshard(&k, "ch02_ddp", 3, "--optimizer sgd --momentum 0.9 --accum 2", 1e-6);
}

Test(common_reliability, ckpt_zero3_resume_consolidate_inspect) {
  ck_t k = ckpt_same_world("ch05_zero3", 3, "--precision bf16", "ck_z3");
  char out_dir[300], w[400];
  snprintf(out_dir, sizeof out_dir, "%s/full", k.dir);
  char *out = NULL;
  int rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt consolidate %s %s", k.a_ck, out_dir);
  cr_assert_eq(rc, 0, "zl_ckpt consolidate: exit %d; output:\n%s", rc, out);
  free(out);
  snprintf(w, sizeof w, "%s/weights.f32", out_dir);
  zl_expect_same_file(w, k.a_bin); /* the fp32 master weights, as --save-params exports them */
  const char *others[] = {"adam_m.f32", "adam_v.f32", "meta.txt"};
  for (int i = 0; i < 3; i++) {
    snprintf(w, sizeof w, "%s/%s", out_dir, others[i]);
    size_t n = 0;
    char *b = zl_read_file(w, &n);
    cr_assert(b && (i == 2 || n == PSI * 4), "%s: missing or %zu bytes, expected %d", w, n, PSI * 4);
    free(b);
  }
  rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt inspect %s", k.a_ck);
  cr_assert(rc == 0 && strstr(out, "strategy zero3 (stage 3) saved by 3 ranks") &&
                strstr(out, "after step 8") && strstr(out, "verified: 4 files"),
            "zl_ckpt inspect: exit %d; output:\n%s", rc, out);
  free(out);
}

/* A damaged or mismatched checkpoint: refused before training, naming the file and the fault,
 * and nothing in the checkpoint directory changes (the run also has --ckpt pointing at it). */
static void refused(const ck_t *k, const char *name, const char *damage, const char *flags, const char *want1,
                    const char *want2) {
  char d[400], cmd[1200], *out = NULL;
  snprintf(d, sizeof d, "%s/%s", k->dir, name);
  snprintf(cmd, sizeof cmd, "cp -r %s %s && cd %s/step-000004 && %s", k->a_ck, d, d, damage);
  cr_assert_eq(system(cmd), 0, "could not prepare %s: %s", name, cmd);
  char before[256], after[256];
  snprintf(cmd, sizeof cmd, "find %s -type f | sort | xargs cat | cksum", d);
  FILE *p = popen(cmd, "r");
  cr_assert(p && fgets(before, sizeof before, p));
  pclose(p);
  /* one process (no mpirun: the check happens on rank 0 before anything else, whatever N) */
  int rc = zl_run(0, 60, &out,
                  ZL_BIN "/ch03_zero1 " SHAPE_REST
                         " %s --steps 12 --resume %s/step-000004 --ckpt %s --save-every 1",
                  flags, d, d);
  cr_assert(rc != 0 && rc != 124, "%s: resume accepted (exit %d); output:\n%s", name, rc, out);
  cr_assert(strstr(out, want1) && strstr(out, want2),
            "%s: expected '%s' and '%s' in the message; output:\n%s", name, want1, want2, out);
  cr_assert(!strstr(out, "final loss"), "%s: training ran; output:\n%s", name, out);
  p = popen(cmd, "r");
  cr_assert(p && fgets(after, sizeof after, p));
  pclose(p);
  cr_assert_str_eq(before, after, "%s: the checkpoint directory changed although the resume was refused",
                   name);
  free(out);
}

Test(common_reliability, ckpt_refuses_bad_checkpoints) {
  ck_t k = ckpt_same_world("ch03_zero1", 2, "", "ck_bad");
  refused(&k, "truncated", "truncate -s 100 rank-00001.bin", "--hidden 13", "rank-00001.bin", "truncated");
  refused(&k, "flipped", "printf 'X' | dd of=rank-00000.bin bs=1 seek=50 conv=notrunc 2>/dev/null",
          "--hidden 13", "rank-00000.bin", "corrupted");
  refused(&k, "missing", "rm rank-00001.bin", "--hidden 13", "rank-00001.bin", "missing");
  refused(&k, "manifest", "sed -i 's/^hidden 13/hidden 14/' manifest.txt", "--hidden 13", "manifest.txt",
          "corrupted");
  refused(&k, "shape", "true", "--hidden 14", "manifest.txt",
          "saved with --hidden 13, this run has --hidden 14");
  refused(&k, "precision", "true", "--hidden 13 --precision bf16", "manifest.txt", "--precision fp32");
  refused(&k, "optimizer", "true", "--hidden 13 --optimizer sgd", "manifest.txt", "--optimizer adamw");
}

/* A checkpoint knows its model (issue: each of these ran to the end reading weights of another
 * shape): a GPT saved by ZeRO-1 on 2 ranks, resumed with another width, head count, context, or
 * as the MLP, is refused with exit 2 naming the difference, before training. */
/* half: 0 -> cases 0, 2, 4, ... (make test), 1 -> cases 1, 3, 5, ... (make test-long) */
static void refuses_another_model(int half) {
  char dir[256], ck[300], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "ck_model");
  snprintf(ck, sizeof ck, "%s/ck", dir);
  int rc = zl_run(
      2, 90, &out,
      ZL_BIN "/ch03_zero1 --model gpt --gpt tiny --batch 4 --steps 3 --ckpt %s --save-every 3 --quiet", ck);
  cr_assert_eq(rc, 0, "the GPT run that saves: exit %d; output:\n%s", rc, out);
  /* --eval-every 0 (the default): the one-line summary has no validation number */
  cr_assert(strstr(out, "no validation run") && !strstr(out, "validation nan"), "summary line:\n%s", out);
  free(out);
  struct { const char *flags, *want;
  } cases[] = {{"--model gpt --gpt tiny --n-embd 64", "saved with --n-embd 32, this run has --n-embd 64"},
               {"--model gpt --gpt tiny --n-head 4", "saved with --n-head 2, this run has --n-head 4"},
               {"--model gpt --gpt tiny --seq-len 8", "saved with --seq-len 16, this run has --seq-len 8"},
               {"--model gpt --gpt tiny --n-layer 3", "saved with --n-layer 2, this run has --n-layer 3"},
               {"", "saved with --model gpt, this run has --model mlp"},
               {"--model gpt --gpt tiny --optimizer sgd --precision bf16",
                "saved with --precision fp32, this run has --precision bf16; saved with --optimizer adamw, "
                "this run has --optimizer sgd"}};
  for (size_t i = (size_t)half; i < sizeof cases / sizeof cases[0]; i += 2) {
    rc = zl_run(2, 60, &out, ZL_BIN "/ch03_zero1 %s --batch 4 --steps 5 --resume %s --quiet", cases[i].flags,
                ck);
    cr_assert(rc == 2 && strstr(out, cases[i].want) && !strstr(out, "final loss"),
              "resume with '%s': exit %d (expected 2), expected '%s' and no training; output:\n%s",
              cases[i].flags, rc, cases[i].want, out);
    free(out);
  }
  /* the MLP's shape flags with --model gpt: refused like the reverse */
  const char *mlp[] = {"--input 64", "--hidden 64", "--layers 2", "--classes 5"};
  for (int i = half; i < 4; i += 2) {
    rc = zl_run(0, 30, &out, ZL_BIN "/ch03_zero1 --model gpt --gpt tiny %s --steps 1 --quiet", mlp[i]);
    char want[64];
    snprintf(want, sizeof want, "error: %s: is the MLP's shape", mlp[i]);
    cr_assert(rc == 2 && strstr(out, want), "--model gpt %s: exit %d, expected 2 and '%s'; output:\n%s",
              mlp[i], rc, want, out);
    free(out);
  }
}

Test(common_reliability, ckpt_refuses_another_model) { refuses_another_model(0); }
Test(common_reliability_long, ckpt_refuses_another_model_more_flags) { refuses_another_model(1); }

/* A --tp 2 checkpoint resumed without --tp: the message names the tensor-parallel layout (it
 * used to say "ck/latest: missing"). */
Test(common_reliability, ckpt_tp_layout_is_named) {
  char dir[256], ck[300], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "ck_tpname");
  snprintf(ck, sizeof ck, "%s/ck", dir);
  int rc = zl_run(2, 90, &out, ZL_BIN "/ch06_tp --tp 2 " MODEL " --steps 2 --ckpt %s --save-every 1", ck);
  cr_assert_eq(rc, 0, "ch06_tp --tp 2 saving: exit %d; output:\n%s", rc, out);
  free(out);
  const char *progs[] = {"ch06_tp --tp 1", "ch02_ddp"};
  for (int i = 0; i < 2; i++) {
    rc = zl_run(2, 60, &out, ZL_BIN "/%s " MODEL " --steps 4 --resume %s", progs[i], ck);
    cr_assert(rc == 2 && strstr(out, "tensor-parallel layout saved with --tp 2") &&
                  !strstr(out, "latest: missing"),
              "%s --resume of a --tp 2 checkpoint: exit %d; output:\n%s", progs[i], rc, out);
    free(out);
  }
}

/* One part of a --tp/--ep save damaged (issue 56: the rank holding it stopped, the other said
 * "resumed ... continuing" and blocked in its first collective until the 300 s deadline): every
 * rank of the job refuses, exit 2, one error line naming the part's file, within 10 s. */
static void bad_part_stops_every_rank(const char *prog, const char *flags, const char *damage) {
  char dir[256], ck[300], cmd[1200], *out = NULL;
  zl_tmpdir(dir, sizeof dir, "ck_badpart");
  snprintf(ck, sizeof ck, "%s/%s", dir, prog);
  int rc = zl_run(2, 90, &out, ZL_BIN "/%s %s --steps 2 --ckpt %s", prog, flags, ck);
  cr_assert_eq(rc, 0, "%s %s saving: exit %d; output:\n%s", prog, flags, rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "cd %s/tp-1-of-2/step-000002 && %s", ck, damage);
  cr_assert_eq(system(cmd), 0, "could not damage part 1: %s", cmd);
  double t0 = now_s();
  rc = zl_run(2, 20, &out, ZL_BIN "/%s %s --steps 4 --resume %s", prog, flags, ck);
  double dt = now_s() - t0;
  int errors = 0;
  for (const char *p = out; (p = strstr(p, "error:")); p++) errors++;
  cr_assert(rc == 2 && errors == 1 && strstr(out, "tp-1-of-2/step-000002/rank-00000.bin") &&
                !strstr(out, "resumed from") && !strstr(out, "did not complete"),
            "%s %s --resume with part 1 damaged (%s): exit %d (expected 2), %d error lines (expected 1 "
            "naming the part's file), no rank resumed; output:\n%s",
            prog, flags, damage, rc, errors, out);
  cr_assert(dt < 10.0, "%s %s: the refusal took %.1f s, expected < 10 s", prog, flags, dt);
  cr_log_info("%s %s: a damaged part refused by every rank in %.2f s", prog, flags, dt);
  free(out);
}
Test(common_reliability, ckpt_bad_part_stops_every_rank) {
  bad_part_stops_every_rank("ch06_tp", "--tp 2 " MODEL,
                            "printf 'X' | dd of=rank-00000.bin bs=1 seek=50 conv=notrunc 2>/dev/null");
  bad_part_stops_every_rank("ch12_experts", "--model gpt --gpt tiny --ep 2 --batch 8 --quiet",
                            "truncate -s 100 rank-00000.bin");
}

/* zl_ckpt and the parts of a --tp/--ep save (issue 56: consolidate of one EP part exited 0 and wrote
 * 59,328 of the model's 92,736 parameters as if whole; meta.txt recorded the MLP's defaults for every
 * GPT; an EP save was called "a tensor-parallel layout"): a part alone is refused naming its group;
 * a --tp save's directory is consolidated and exported whole (== --save-params); a MoE save over
 * --ep is refused by consolidate and export, read part by part by inspect; a MoE save of 1 rank
 * consolidates with its kind and shape in meta.txt, exports raw (== --save-params), refuses GPT-2's
 * safetensors names; export never overwrites a file. */
static void tool_expect(int want_rc, const char *want, const char *fmt, ...) {
  char cmd[1200], *out = NULL;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = zl_run(0, 30, &out, ZL_BIN "/zl_ckpt %s", cmd);
  cr_expect(rc == want_rc && strstr(out, want),
            "zl_ckpt %s: exit %d (expected %d), expected '%s'; output:\n%s", cmd, rc, want_rc, want, out);
  free(out);
}
Test(common_reliability, ckpt_tools_know_moe_and_ep) {
  char dir[256], f[400], g[400];
  zl_tmpdir(dir, sizeof dir, "ck_tools");
  zl_run_ok(2, 90, "ch12 --ep 2 saving",
            ZL_BIN "/ch12_experts --model gpt --gpt tiny --ep 2 --batch 8 --steps 2 --ckpt %s/ep --quiet",
            dir);
  zl_run_ok(1, 90, "ch12 on 1 rank saving",
            ZL_BIN
            "/ch12_experts --model gpt --gpt tiny --batch 8 --steps 2 --ckpt %s/moe --save-params %s/moe.bin "
            "--quiet",
            dir, dir);
  zl_run_ok(2, 90, "ch06 --tp 2 saving",
            ZL_BIN "/ch06_tp --tp 2 --model gpt --gpt tiny --batch 8 --steps 2 --ckpt %s/tp --save-params "
                   "%s/tp.bin --quiet",
            dir, dir);
  /* an EP part, and the EP save */
  tool_expect(1, "EP rank 1's part of a --ep 2 save", "consolidate %s/ep/tp-1-of-2 %s/x", dir, dir);
  tool_expect(1, "a Mixture-of-Experts save over --ep 2", "consolidate %s/ep %s/x", dir, dir);
  tool_expect(1, "EP rank 0's part of an expert-parallel layout (--ep 2)", "export %s/ep/tp-0-of-2 %s/x.st",
              dir, dir);
  tool_expect(1, "a Mixture-of-Experts save over --ep 2", "export %s/ep %s/x.st", dir, dir);
  tool_expect(0, "expert-parallel layout: EP rank 1 of --ep 2", "inspect %s/ep", dir);
  snprintf(f, sizeof f, "%s/x", dir);
  struct stat st;
  cr_expect(stat(f, &st) != 0, "%s was written although every command above was refused", f);
  /* the MoE model of 1 rank: whole */
  tool_expect(0, "consolidated", "consolidate %s/moe %s/moe_c", dir, dir);
  snprintf(f, sizeof f, "%s/moe_c/meta.txt", dir);
  char *meta = zl_read_file(f, NULL);
  cr_expect(meta && strstr(meta, "\nmodel gpt\n") && strstr(meta, "\nn_embd 32\n") &&
                strstr(meta, "\nmoe 8\n") && !strstr(meta, "\nhidden "),
            "%s: should record the model's kind and shape (gpt, n_embd 32, moe 8; no MLP fields):\n%s", f,
            meta);
  free(meta);
  snprintf(f, sizeof f, "%s/moe_c/weights.f32", dir), snprintf(g, sizeof g, "%s/moe.bin", dir);
  zl_expect_same_file(f, g);
  tool_expect(1, "safetensors carries GPT-2's names", "export %s/moe %s/moe.st", dir, dir);
  tool_expect(0, "exported", "export %s/moe %s/moe.raw --format raw", dir, dir);
  snprintf(f, sizeof f, "%s/moe.raw", dir);
  zl_expect_same_file(f, g);
  tool_expect(2, "exists", "export %s/moe %s/moe.raw --format raw", dir, dir);
  /* a dense --tp 2 save: its directory whole, its part refused */
  tool_expect(1, "TP rank 1's part of a --tp 2 save", "consolidate %s/tp/tp-1-of-2 %s/y", dir, dir);
  tool_expect(0, "--tp parts put together", "consolidate %s/tp %s/tp_c", dir, dir);
  snprintf(f, sizeof f, "%s/tp_c/weights.f32", dir), snprintf(g, sizeof g, "%s/tp.bin", dir);
  zl_expect_same_file(f, g);
  tool_expect(0, "--tp parts put together", "export %s/tp %s/tp.raw --format raw", dir, dir);
  snprintf(f, sizeof f, "%s/tp.raw", dir);
  zl_expect_same_file(f, g);
}

/* ---- 6. output files that cannot be written at the end ------------------------------------ */

/* FLAG /dev/full: every write fails (ENOSPC) after training: the job must end non-zero with one
 * line naming the flag and the file, not exit 0 as if the output were there. */
static void write_fails(const char *prog, const char *flag) {
  char *out = NULL, want[128];
  int rc = zl_run(2, 60, &out, ZL_BIN "/%s " MODEL " --steps 2 %s /dev/full", prog, flag);
  cr_expect(rc != 0 && rc != 124, "%s %s /dev/full: exit code %d, expected a failure; output:\n%s", prog,
            flag, rc, out);
  /* "error: --json /dev/full: writing it failed: No space left on device" (the flag is named
   * where the writer knows it; the file always) */
  snprintf(want, sizeof want, "%s /dev/full: writing it failed", strcmp(flag, "--save-params") ? flag : "");
  cr_expect(strstr(out, want) != NULL, "%s %s /dev/full: the output should say '%s'; output:\n%s", prog, flag,
            want, out);
  free(out);
}

Test(common_reliability, failed_output_write_names_the_file) {
  write_fails("ch02_ddp", "--trace");
  write_fails("ch03_zero1", "--json");
  write_fails("ch05_zero3", "--save-params");
  /* a device that takes writes is written in place: renaming a temp file over it would replace
   * /dev/null itself (as root) */
  char *out = NULL;
  int rc = zl_run(2, 60, &out, ZL_BIN "/ch04_zero2 " MODEL " --steps 2 --json /dev/null --trace /dev/null");
  cr_expect_eq(rc, 0, "--json /dev/null --trace /dev/null: exit code %d, expected 0; output:\n%s", rc, out);
  struct stat st;
  cr_assert(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a character device");
  free(out);
}
