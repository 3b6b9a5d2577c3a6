/* test_pipeline.c — chapter 07, pipeline parallelism (notes/design.md, "The process grid": its contracts):
 * pipeline training equals 1-rank training with --accum M, bitwise, for P = 2, 3, 4 and every
 * schedule; the activations in flight per stage equal their formula (and the ledger's acts
 * peak moves by exactly that between GPipe and 1F1B); a failing stage takes the job down;
 * checkpoint and resume through the layout hook, bitwise. Notes: notes/07-pipeline.md.
 *
 * Why bitwise: every stage runs its backwards in micro-batch order 0..M−1 and writes gradients
 * with beta (0 for micro-batch 0, then 1), the last stage adds the losses in that order, and a
 * unit's arithmetic does not depend on which rank runs it — the same operations on the same
 * numbers in the same order as the 1-rank loop with --accum M. (No --clip here: its global norm
 * is a sum of per-stage sums, another association.)
 *
 * MLP: input 6, hidden 13, classes 11, 4 hidden layers: 5 units of 91, 182, 182, 182, 154
 * parameters — 5 units, so no P of 2, 3, 4 divides them (odd splits). */
#include "zl_test.h"         // zl_run, zl_json_num, zl_read_floats, zl_expect_floats
#include "pipeline.h"        // pp_split, pp_schedule_ops, pp_inflight_formula, pp_bubble_stages
#include "pipeline_groups.h" // pp_posted_recvs

#define SHAPE "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7"
#define MODEL SHAPE " --steps 2"
#define PSI (91 + 3 * 182 + 154)
#define M_MICRO 4
#define B_MICRO (24 / M_MICRO) /* samples per micro-batch (D = 1) */
static const int64_t g_units[5] = {91, 182, 182, 182, 154};

/* ---- pure parts: the split and the schedules --------------------------------------------- */

Test(ch07_pipeline, split_is_contiguous_and_balanced) {
  int first[6];
  pp_split(g_units, 5, 2, first); /* 273 | 518 or 455 | 336: the second is better */
  cr_assert(first[0] == 0 && first[1] == 3 && first[2] == 5, "P=2: got %d %d %d", first[0], first[1],
            first[2]);
  pp_split(g_units, 5, 5, first);
  for (int s = 0; s <= 5; s++) cr_assert_eq(first[s], s, "P=5: one unit each");
  const int64_t skew[4] = {1000, 1, 1, 1};
  pp_split(skew, 4, 2, first);
  cr_assert(first[1] == 1, "a heavy first unit is a stage of its own (got cut at %d)", first[1]);
  for (int P = 1; P <= 5; P++) {
    pp_split(g_units, 5, P, first);
    for (int s = 0; s < P; s++) cr_assert(first[s + 1] > first[s], "P=%d: stage %d is empty", P, s);
  }
}

/* Every schedule, P <= 5, M <= 8 (interleaved: v = 2, 3 and M a multiple of P): per chunk, each
 * micro-batch's F once and B once, forwards and backwards in micro-batch order (the bitwise
 * argument), in-flight peak equal to the formula; and the P ranks' lists together run to the end
 * when each op waits only for what it needs (F k of chunk c: F k of chunk c−1; B k: B k of chunk
 * c+1 and F k of chunk c) — no schedule deadlocks by itself. */
/* The bubble for the stages as they ran: equal stage times give the schedule's formula; unequal
 * ones are paced by the slowest (t = 1, 2 per step, M = 4: step = 4·(2/4) + 1/4 = 2.25 micro-units,
 * mean busy 1.5, bubble 1 − 1.5/2.25 = 1/3; interleaved v = 2: 2 + 1/8, 1 − 1.5/2.125); naive stays
 * (P−1)/P. */
Test(ch07_pipeline, bubble_for_unequal_stages) {
  const pp_schedule_t sc[4] = {PP_NAIVE, PP_GPIPE, PP_1F1B, PP_INTERLEAVED};
  for (int i = 0; i < 4; i++)
    for (int P = 2; P <= 4; P++)
      for (int M = 1; M <= 8; M *= 2) {
        double t[4] = {3.5, 3.5, 3.5, 3.5}, got = pp_bubble_stages(sc[i], P, M, 2, t),
               want = pp_bubble_formula(sc[i], P, M, 2);
        cr_assert(fabs(got - want) < 1e-12,
                  "schedule %d, P %d, M %d, equal stages: %.15g, the formula says %.15g", i, P, M, got, want);
      }
  const double t2[2] = {1, 2};
  struct { pp_schedule_t s; double want; } c[4] = {
      {PP_NAIVE, 0.5}, {PP_GPIPE, 1.0 / 3}, {PP_1F1B, 1.0 / 3}, {PP_INTERLEAVED, 1 - 1.5 / 2.125}};
  for (int i = 0; i < 4; i++) {
    double got = pp_bubble_stages(c[i].s, 2, 4, 2, t2);
    cr_assert(fabs(got - c[i].want) < 1e-12,
              "schedule %d, stage times 1 and 2, M 4: bubble %.15g, expected %.15g", c[i].s, got, c[i].want);
  }
}

Test(ch07_pipeline, schedules_are_valid_and_hold_their_formula) {
  static const char *sched_names[4] = {"naive", "GPipe", "1F1B", "interleaved 1F1B"};
  enum { MAXOPS = 2 * 3 * 8 };
  pp_op_t ops[5][MAXOPS];
  int n_ops[5];
  for (int sched = 0; sched <= 3; sched++)
    for (int v = 1; v <= (sched == PP_INTERLEAVED ? 3 : 1); v++) {
      if (sched == PP_INTERLEAVED && v == 1) continue;
      for (int pi = 0; pi < 5; pi++) /* P = 2..5, then 1 (a first failure on a real pipeline) */
        for (int M = 1, P = pi < 4 ? pi + 2 : 1; M <= 8 && !(sched == PP_INTERLEAVED && P == 1); M++) {
          if (sched == PP_INTERLEAVED && M % P) continue;
          int V = v * P;
          for (int s = 0; s < P; s++) {
            int n = n_ops[s] = pp_schedule_ops((pp_schedule_t)sched, P, s, M, v, ops[s]);
            cr_assert_eq(
                n, 2 * v * M,
                "%s (v %d), P %d, M %d, stage %d: %d operations, expected 2vM = %d (every micro-batch's "
                "forward and backward once per chunk)",
                sched_names[sched], v, P, M, s, n, 2 * v * M);
            int fwd[3] = {0}, bwd[3] = {0}, inflight = 0, peak = 0;
            for (int i = 0; i < n; i++) {
              const pp_op_t *o = &ops[s][i];
              cr_assert(o->chunk >= 0 && o->chunk < v, "chunk %d out of range", o->chunk);
              if (o->kind == 'F') {
                cr_assert_eq(o->micro, fwd[o->chunk]++, "sched %d v %d P %d s %d M %d: forwards out of order",
                             sched, v, P, s, M);
                if (++inflight > peak) peak = inflight;
              } else {
                cr_assert_eq(o->micro, bwd[o->chunk]++,
                             "sched %d v %d P %d s %d M %d: backwards out of order", sched, v, P, s, M);
                cr_assert(o->micro < fwd[o->chunk], "backward of %d before its forward", o->micro);
                inflight--;
              }
            }
            int allowed = pp_inflight_formula((pp_schedule_t)sched, P, s, M, v);
            cr_assert_eq(
                peak, allowed,
                "%s (v %d), P %d, M %d: %d micro-batches in flight on stage %d, %s allows %d on stage %d",
                sched_names[sched], v, P, M, peak, s, sched_names[sched], allowed, s);
          }
          /* run the P lists against each other: done[kind][chunk][micro] */
          static char done[2][15][8];
          memset(done, 0, sizeof done);
          int at[5] = {0}, left = 0, moved = 1;
          for (int s = 0; s < P; s++) left += n_ops[s];
          while (left > 0 && moved) {
            moved = 0;
            for (int s = 0; s < P; s++)
              while (at[s] < n_ops[s]) {
                const pp_op_t *o = &ops[s][at[s]];
                int c = o->chunk * P + s, k = o->micro, ready;
                if (o->kind == 'F') ready = c == 0 || done[0][c - 1][k];
                else ready = done[0][c][k] && (c == V - 1 || done[1][c + 1][k]);
                if (!ready) break;
                done[o->kind == 'B'][c][k] = 1;
                at[s]++, left--, moved = 1;
              }
          }
          cr_assert_eq(left, 0, "sched %d v %d P %d M %d: the ranks' lists deadlock (%d ops never run)",
                       sched, v, P, M, left);
        }
    }
}

/* ---- runs ---------------------------------------------------------------------------------- */

typedef struct run_out {
  char *json, *text;
  float *params;
  int64_t n;
} run_out_t;

static run_out_t launch(int np, const char *cmd, const char *name) {
  char dir[256], json[320], bin[320];
  zl_tmpdir(dir, sizeof dir, "pp");
  snprintf(json, sizeof json, "%s/%s.json", dir, name);
  snprintf(bin, sizeof bin, "%s/%s.bin", dir, name);
  run_out_t r = {0};
  int rc = zl_run(np, 120, &r.text, "%s --json %s --save-params %s --quiet --timeout-s 30", cmd, json, bin);
  cr_assert_eq(rc, 0, "%s (np %d: %s) exited %d:\n%s", name, np, cmd, rc, r.text);
  r.json = zl_read_file(json, NULL);
  cr_assert(r.json, "%s: no --json written", name);
  r.params = zl_read_floats(bin, &r.n);
  cr_assert_eq(r.n, PSI, "%s: --save-params holds %lld floats, expected %d", name, (long long)r.n, PSI);
  return r;
}

static void run_free(run_out_t *r) { free(r->json), free(r->text), free(r->params); }

/* Activation bytes of one micro-batch on stage s (units first[s]..first[s+1]−1): the stage's
 * input, and per unit its output and saved pre-activation (the MLP: H and H, the last C and 0). */
static int64_t slot_bytes(const int *first, int s) {
  const int D = 6, H = 13, C = 11, L = 4;
  int64_t per = first[s] == 0 ? D : H;
  for (int u = first[s]; u < first[s + 1]; u++) per += u < L ? 2 * H : C;
  return 4 * (int64_t)B_MICRO * per;
}

/* The receive buffers of stage s (pipeline_post.c, the MPI backend: min(PP_RECV_AHEAD, its
 * receives posted ahead) of each kind, pp_posted_recvs; every stage boundary of this MLP is a hidden
 * output, H = 13 wide), in the ledger's acts beside the slots. */
static int64_t recv_ahead_bytes(pp_schedule_t sc, int P, int s) {
  int64_t n = 0;
  for (int a = 0; a < 2; a++) {
    int m = pp_posted_recvs(sc, P, s, M_MICRO, 1, a ? 'B' : 'F', NULL);
    n += m < PP_RECV_AHEAD ? m : PP_RECV_AHEAD;
  }
  return n * 4 * B_MICRO * 13;
}

static double rank_acts_peak(const char *json, int r) {
  const char *p = zl_json_find(json, "per_rank");
  for (int i = 0; i < r && p; i++) p = zl_json_find(p, "acts_peak") ;
  return p ? zl_json_num(p, "acts_peak") : NAN;
}

/* P = 2, 3, 4 × gpipe, 1f1b (and naive at P = 2, 4; interleaved at P = 2) against 1 rank with
 * --accum 4: bitwise weights and losses;
 * the in-flight activations per stage equal the formula; GPipe − 1F1B on the ledger's acts
 * peak is exactly (M − min(M, P − s)) micro-batches of the stage, plus the difference of their
 * receive buffers (pipeline_post.c: 1F1B pairs most of its receives, which need none). */
/* Pipelines of P = Plo..Phi stages (and, with interleaved, P = 2 v = 2) against 1 rank with
 * --accum M: the same micro-batches through the same kernels, in the same order — bitwise. */
static void pp_equals_one_rank(int Plo, int Phi, int interleaved) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch02_ddp --variant naive " MODEL " --accum %d", M_MICRO);
  run_out_t ref = launch(1, cmd, "ref");
  const char *names[3] = {"naive", "gpipe", "1f1b"};
  /* interleaved: P = 2, v = 2 (4 chunks of the 5 units); in-flight peaks counted in chunk-slots */
  if (interleaved) {
    snprintf(cmd, sizeof cmd,
             ZL_BIN "/ch07_pipeline " MODEL
                    " --pp 2 --micro-batches %d --schedule interleaved --virtual-stages 2",
             M_MICRO);
    run_out_t r = launch(2, cmd, "pp2_interleaved");
    zl_expect_floats("pp2_interleaved", r.params, ref.params, PSI, 0);
    zl_expect_same_losses("pp2_interleaved", r.json, ref.json);
    for (int s = 0; s < 2; s++) {
      char key[40];
      snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
      double got = zl_json_num(r.json, key);
      cr_assert_eq(got, pp_inflight_formula(PP_INTERLEAVED, 2, s, M_MICRO, 2),
                   "interleaved stage %d: %g in flight", s, got);
    }
    run_free(&r);
  }
  for (int P = Plo; P <= Phi; P++) {
    int first[6];
    pp_split(g_units, 5, P, first);
    double acts[3][4] = {{0}};
    for (int sc = 0; sc < 3; sc++) {
      /* naive is 1F1B without warm-up: P = 2 and 4 cover it (time budget) */
      if (sc == PP_NAIVE && P == 3) continue;
      char name[64];
      snprintf(name, sizeof name, "pp%d_%s", P, names[sc]);
      snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline " MODEL " --pp %d --micro-batches %d --schedule %s", P,
               M_MICRO, names[sc]);
      run_out_t r = launch(P, cmd, name);
      zl_expect_floats(name, r.params, ref.params, PSI, 0);
      zl_expect_same_losses(name, r.json, ref.json);
      for (int s = 0; s < P; s++) {
        char key[40];
        snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
        double got = zl_json_num(r.json, key);
        double want =
            (double)pp_inflight_formula((pp_schedule_t)sc, P, s, M_MICRO, 1) * (double)slot_bytes(first, s);
        cr_assert_eq(
            got, want,
            "%s stage %d: %.3g micro-batches in flight (peak %.0f B of activations), the schedule allows %d "
            "(%.0f B)",
            name, s, got / (double)slot_bytes(first, s), got,
            pp_inflight_formula((pp_schedule_t)sc, P, s, M_MICRO, 1), want);
        acts[sc][s] = rank_acts_peak(r.json, s);
      }
      double bf = sc == 0 ? (double)(P - 1) / P : (double)(P - 1) / (M_MICRO + P - 1);
      cr_assert(fabs(zl_json_num(r.json, "bubble_formula") - bf) < 1e-8, "%s: bubble_formula, expected %g",
                name, bf);
      /* the stages' formula, from this run's measured busy times: an idle fraction, and for naive the
       * equal-stage one whatever the times. (Not compared with bf otherwise: with an earlier stage the
       * slowest it may fall a little below it — pipeline_sim.h — so that would assert a timing.) */
      double bs = zl_json_num(r.json, "bubble_formula_stages");
      cr_assert(bs >= 0 && bs < 1 && (sc != 0 || fabs(bs - bf) < 1e-9),
                "%s: bubble_formula_stages %g, expected in "
                "[0, 1)%s",
                name, bs, sc == 0 ? " and equal to the formula (naive)" : "");
      run_free(&r);
    }
    for (int s = 0; s < P; s++) {
      int k1 = pp_inflight_formula(PP_1F1B, P, s, M_MICRO, 1);
      double want = (double)(M_MICRO - k1) * (double)slot_bytes(first, s) +
                    (double)(recv_ahead_bytes(PP_GPIPE, P, s) - recv_ahead_bytes(PP_1F1B, P, s));
      cr_assert_eq(acts[1][s] - acts[2][s], want,
                   "P %d stage %d: ledger acts peak gpipe %.0f - 1f1b %.0f, expected %.0f "
                   "(%d slots of %lld B, and receive buffers %lld - %lld B)",
                   P, s, acts[1][s], acts[2][s], want, M_MICRO - k1, (long long)slot_bytes(first, s),
                   (long long)recv_ahead_bytes(PP_GPIPE, P, s), (long long)recv_ahead_bytes(PP_1F1B, P, s));
    }
    cr_log_info("pipeline P=%d (split %d|%d..): naive, gpipe, 1f1b == 1 rank --accum %d, bitwise", P,
                first[1], first[2], M_MICRO);
  }
  run_free(&ref);
}

/* make test: P = 2 (every schedule, and interleaved) and P = 4; make test-long: P = 3 (an odd split) */
Test(ch07_pipeline, equals_one_rank_accum_bitwise_and_acts_formula, .timeout = 240) {
  pp_equals_one_rank(2, 2, 1);
  pp_equals_one_rank(4, 4, 0);
}
Test(ch07_pipeline_long, equals_one_rank_accum_bitwise_p3, .timeout = 240) { pp_equals_one_rank(3, 3, 0); }

/* Run `np` ranks of CMD (a program and its flags, printf-style) with --quiet --save-params
 * DIR/NAME.bin; it must exit 0 (else the failure names the command). Returns the saved fp32
 * weights, *n their count. */
static float *run_params(int np, int timeout_s, const char *dir, const char *name, int64_t *n,
                         const char *fmt, ...) {
  char cmd[2048], bin[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  snprintf(bin, sizeof bin, "%s/%s.bin", dir, name);
  zl_run_ok(np, timeout_s, cmd, "%s --quiet --save-params %s", cmd, bin);
  return zl_read_floats(bin, n);
}

/* The GPT (embedding | 2 blocks | head: 4 units): P = 2 naive, 3 gpipe (an odd split), 4 1f1b
 * against 1 rank with --accum 4, bitwise. */
Test(ch07_pipeline, gpt_equals_one_rank_accum_bitwise, .timeout = 240) {
#define GPT                                                                                                \
  "--model gpt --gpt tiny --n-embd 35 --n-head 5 --seq-len 16 --batch 12 --seed 5 --device cpu --steps 2 " \
  "--data /usr/share/games/fortunes/cookie"
  const int64_t gpsi = 48860;
  char dir[256], name[32];
  zl_tmpdir(dir, sizeof dir, "pp_gpt");
  int64_t n0 = 0, n1 = 0;
  float *want = run_params(1, 120, dir, "ref", &n0, ZL_BIN "/ch02_ddp --variant naive " GPT " --accum 4");
  cr_assert_eq(n0, gpsi, "GPT reference: %lld params, expected %lld", (long long)n0, (long long)gpsi);
  const char *scheds[3] = {"naive", "gpipe", "1f1b"};
  for (int P = 2; P <= 4; P++) {
    snprintf(name, sizeof name, "pp%d", P);
    float *got = run_params(P, 120, dir, name, &n1,
                            ZL_BIN "/ch07_pipeline " GPT " --pp %d --micro-batches 4 --schedule %s "
                                   "--timeout-s 30",
                            P, scheds[P - 2]);
    cr_assert_eq(n1, gpsi);
    zl_expect_floats(scheds[P - 2], got, want, gpsi, 0);
    free(got);
  }
  free(want);
#undef GPT
}

/* Activations of 16 KiB, past MPI's eager limit (a send then waits for its receive): the
 * one-communicator-per-direction design must not deadlock in 1F1B's or the interleaved ring's
 * steady state; still bitwise. */
Test(ch07_pipeline, large_messages_do_not_deadlock, .timeout = 180) {
#define BIG "--input 16 --hidden 512 --classes 10 --layers 3 --batch 32 --seed 7 --steps 2"
  char dir[256], name[32];
  zl_tmpdir(dir, sizeof dir, "pp_big");
  int64_t n0 = 0, n1 = 0;
  float *want = run_params(1, 60, dir, "ref", &n0, ZL_BIN "/ch02_ddp --variant naive " BIG " --accum 4");
  const char *runs[2][2] = {{"3", "--schedule 1f1b"}, {"2", "--schedule interleaved --virtual-stages 2"}};
  for (int i = 0; i < 2; i++) {
    snprintf(name, sizeof name, "big%d", i);
    float *got = run_params(atoi(runs[i][0]), 120, dir, name, &n1,
                            ZL_BIN "/ch07_pipeline " BIG " --pp %s %s --micro-batches 4 "
                                   "--timeout-s 30",
                            runs[i][0], runs[i][1]);
    cr_assert_eq(n1, n0);
    zl_expect_floats(runs[i][1], got, want, n0, 0);
    free(got);
  }
  free(want);
#undef BIG
}

/* Two data-parallel pipelines (P = 2, D = 2), bf16, against DDP on 2 ranks with --accum 2:
 * bitwise with --zero 1 (ZeRO-1 on the data dimension: reduce-scatter, own pieces, all-gather)
 * and --zero 2 (the same, its full grads freed between steps: the ledger's numbers exact) and
 * --zero 3 (the params in pieces too, each unit gathered 2M times per step);
 * its checkpoint after 2 steps resumed with --zero 0 (dp 0 owns each stage's states and hands
 * them to its replica): bitwise too — the layout hook reshards between the two. */
Test(ch07_pipeline, two_pipelines_zero123_equal_ddp_bitwise, .timeout = 180) {
#define DPM "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 4 --precision bf16"
  char dir[256], cmd[1024], ck[300];
  zl_tmpdir(dir, sizeof dir, "pp_dp");
  snprintf(ck, sizeof ck, "%s/ck", dir);
  run_out_t ref = launch(2, ZL_BIN "/ch02_ddp --variant naive " DPM " --accum 2", "ddp2");
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero 1 --ckpt %s --save-every 2", ck);
  run_out_t a = launch(4, cmd, "pp2_dp2_zero1");
  zl_expect_floats("pp 2 x dp 2, --zero 1", a.params, ref.params, PSI, 0);
  zl_expect_same_losses("pp 2 x dp 2, --zero 1", a.json, ref.json);
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero 0 --resume %s/step-000002", ck);
  run_out_t b = launch(4, cmd, "pp2_dp2_zero0_resumed");
  zl_expect_floats("--zero 1 checkpoint resumed with --zero 0", b.params, ref.params, PSI, 0);
  /* --zero 2: the same reduce-scatter once per step (after the last micro-batch), the full grads
   * freed after it; its checkpoint resumed with --zero 1, bitwise. Bytes exact: stage 0 holds
   * units 0..2 (91 + 182 + 182 = 455, padded to 456 for D = 2: pieces of 228), bf16 (2 B). */
  snprintf(ck, sizeof ck, "%s/ck2", dir);
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero 2 --ckpt %s --save-every 2", ck);
  run_out_t c = launch(4, cmd, "pp2_dp2_zero2");
  zl_expect_floats("pp 2 x dp 2, --zero 2", c.params, ref.params, PSI, 0);
  zl_expect_same_losses("pp 2 x dp 2, --zero 2", c.json, ref.json);
  const double full = 456 * 2, piece = 228 * 2;
  const struct { const char *key; double want; } nums[4] = {
      {"dp_bytes_per_step", 2 * piece},    /* reduce-scatter + all-gather: (D−1)/D·456·2 B each */
      {"dp_bytes_formula", 2 * piece},
      {"grads_peak_bytes", full + piece},  /* the full gradient and the own pieces, at the reduce-scatter */
      {"grads_between_steps_bytes", piece}, /* ZeRO-2's only saving under pipelining */
  };
  for (int i = 0; i < 4; i++) {
    double got = zl_json_num(c.json, nums[i].key);
    cr_assert_eq(got, nums[i].want, "--zero 2: %s %.0f, expected %.0f", nums[i].key, got, nums[i].want);
  }
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero 1 --resume %s/step-000002", ck);
  run_out_t d = launch(4, cmd, "pp2_dp2_zero1_resumed");
  zl_expect_floats("--zero 2 checkpoint resumed with --zero 1", d.params, ref.params, PSI, 0);
  /* --zero 3: the params held between steps are the own pieces (228 of stage 0's 456, bf16), each
   * unit all-gathered before every micro-batch's forward and backward: 2M = 4 gathers and one
   * reduce-scatter per step, (2M + 1)(D − 1)/D·456·2 B; its checkpoint resumed with --zero 1. */
  snprintf(ck, sizeof ck, "%s/ck3", dir);
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero 3 --ckpt %s --save-every 2", ck);
  run_out_t e = launch(4, cmd, "pp2_dp2_zero3");
  zl_expect_floats("pp 2 x dp 2, --zero 3", e.params, ref.params, PSI, 0);
  zl_expect_same_losses("pp 2 x dp 2, --zero 3", e.json, ref.json);
  const struct { const char *key; double want; } nums3[5] = {
      /* 4 all-gathers + 1 reduce-scatter of (D−1)/D·456·2 B */
      {"dp_bytes_per_step", (2 * 2 + 1) * piece},
      {"dp_bytes_formula", (2 * 2 + 1) * piece},
      {"params_between_steps_bytes", piece},      /* the ledger's params: the own pieces only */
      {"grads_peak_bytes", full + piece},
      {"grads_between_steps_bytes", piece},
  };
  for (int i = 0; i < 5; i++) {
    double got = zl_json_num(e.json, nums3[i].key);
    cr_assert_eq(got, nums3[i].want, "--zero 3: %s %.0f, expected %.0f", nums3[i].key, got, nums3[i].want);
  }
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero 1 --resume %s/step-000002", ck);
  run_out_t f = launch(4, cmd, "pp2_dp2_zero3_resumed_zero1");
  zl_expect_floats("--zero 3 checkpoint resumed with --zero 1", f.params, ref.params, PSI, 0);
  run_free(&e);
  run_free(&f);
  run_free(&a);
  run_free(&b);
  run_free(&c);
  run_free(&d);
  run_free(&ref);
#undef DPM
}

/* What a strategy says about itself (strategy_t.formula) on a pipeline rank is its stage's units
 * only: 16·Ψs in fp32 with AdamW under DDP, to the byte the ledger's model states of that rank (no
 * padding), different per stage — the report's table and the out-of-memory pre-check use it. And
 * ZeRO-3 on the data dimension prefetches along the schedule's operations (--prefetch 1, 2: the
 * gathers of the next use, whichever micro-batch and direction it is): the same bits as without,
 * and the gathered window within its bound (K + 1 units). */
Test(ch07_pipeline, formulas_per_stage_and_zero3_prefetch_along_the_ops, .timeout = 180) {
  int first[3];
  pp_split(g_units, 5, 2, first);
  run_out_t a = launch(2, ZL_BIN "/ch07_pipeline " MODEL " --pp 2 --micro-batches 4", "pp2_formula");
  for (int s = 0; s < 2; s++) {
    double psi_s = 0;
    for (int u = first[s]; u < first[s + 1]; u++) psi_s += (double)g_units[u];
    double ms = zl_rank_mem(a.json, s, "model_states"), f = zl_rank_mem(a.json, s, "formula_model_states");
    cr_assert_eq(
        f, 16 * psi_s,
        "rank %d (stage %d, %.0f params): formula_model_states %.0f, expected 16 x its params = %.0f", s, s,
        psi_s, f, 16 * psi_s);
    cr_assert_eq(ms, f, "rank %d: the ledger's model states %.0f, its formula %.0f", s, ms, f);
  }
  run_free(&a);
#define Z3 ZL_BIN "/ch07_pipeline " SHAPE " --steps 3 --pp 2 --micro-batches 4 --zero 3 --precision bf16"
  run_out_t ref = launch(4, Z3 " --prefetch 0", "z3_prefetch0");
  for (int K = 1; K <= 2; K++) {
    char cmd[512], name[32];
    snprintf(cmd, sizeof cmd, Z3 " --prefetch %d", K);
    snprintf(name, sizeof name, "z3_prefetch%d", K);
    run_out_t r = launch(4, cmd, name);
    zl_expect_floats(name, r.params, ref.params, PSI, 0);
    zl_expect_same_losses(name, r.json, ref.json);
    double peak = zl_json_num(r.json, "gathered_peak_bytes"),
           bound = zl_json_num(r.json, "gather_bound_bytes");
    cr_assert_eq(zl_json_num(r.json, "prefetch_depth"), K, "%s: prefetch depth %g", name,
                 zl_json_num(r.json, "prefetch_depth"));
    cr_assert(peak > 0 && peak <= bound, "%s: gathered peak %.0f B, bound (K+1) x largest unit %.0f B", name,
              peak, bound);
    run_free(&r);
  }
  run_free(&ref);
#undef Z3
}

/* 3-D: --tp T inside every stage (solutions/tp.c's split), pipelines over the ranks / T data-parallel
 * ranks. (T, P, D) = (2, 2, 1), (2, 1, 2) and (1, 2, 2) on 4 ranks against 1 rank with --accum:
 * within 1e-5 (a row-parallel layer sums partial products in another order, and the data
 * dimension's all-reduce adds the replicas' halves: not bitwise, notes/06). */
Test(ch07_pipeline, three_d_tp_pp_dp_equal_one_rank, .timeout = 180) {
#define TPM "--input 6 --hidden 16 --classes 12 --layers 4 --batch 24 --seed 7 --steps 2"
  char dir[256], name[32];
  zl_tmpdir(dir, sizeof dir, "pp_3d");
  int64_t n0 = 0, n1 = 0;
  float *want = run_params(1, 60, dir, "ref", &n0, ZL_BIN "/ch02_ddp --variant naive " TPM " --accum 4");
  const struct { int T, P, D, M; } g[3] = {{2, 2, 1, 4}, {2, 1, 2, 4}, {1, 2, 2, 4}};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "t%dp%dd%d", g[i].T, g[i].P, g[i].D);
    float *got = run_params(4, 120, dir, name, &n1,
                            ZL_BIN "/ch07_pipeline " TPM " --tp %d --pp %d --micro-batches %d "
                                   "--timeout-s 30",
                            g[i].T, g[i].P, g[i].M);
    cr_assert_eq(n1, n0, "(T %d, P %d, D %d): %lld params, expected %lld", g[i].T, g[i].P, g[i].D,
                 (long long)n1, (long long)n0);
    zl_expect_floats("3-D params", got, want, n0, 1e-5);
    free(got);
  }
  free(want);
#undef TPM
}

/* A stage that dies, or hangs, mid-pipeline: the job ends, naming it; the survivors' p2p waits
 * have the collectives' deadline (--timeout-s), so nobody waits for ever on a recv. */
Test(ch07_pipeline, failing_stage_takes_the_job_down, .timeout = 120) {
  const char *kinds[2] = {"exit", "hang"};
  for (int i = 0; i < 2; i++) {
    char *out = NULL, want[96];
    int rc = zl_run(3, 60, &out,
                    ZL_BIN "/ch07_pipeline " SHAPE
                           " --steps 5 --pp 3 --micro-batches 4 --timeout-s 1 --fault 1:2:%s",
                    kinds[i]);
    cr_assert(rc != 0 && rc != 124,
              "--fault 1:2:%s: exit code %d (expected a non-zero stop, not the test's timeout):\n%s",
              kinds[i], rc, out);
    snprintf(want, sizeof want, "rank 1: injected fault %s at step 2", kinds[i]);
    cr_assert(strstr(out, want), "--fault %s: the output does not name the failing rank ('%s'):\n%s",
              kinds[i], want, out);
    if (i == 1)
      cr_assert(strstr(out, "did not complete within 1 s") &&
                    (strstr(out, "recv act") || strstr(out, "recv grad")),
                "--fault hang: no deadline message naming a pipeline recv:\n%s", out);
    free(out);
  }
}

/* Checkpoint after 2 of 4 steps, resume: bitwise the straight run; and the same checkpoint
 * resumed by 1-rank DDP with --accum 4 (the layout hook's pieces read by another strategy).
 * In bf16 with SGD and --recompute, so those paths of a stage are checked bitwise as well. */
Test(ch07_pipeline, checkpoint_resume_bitwise, .timeout = 120) {
  char dir[256], cmd[2048], ck[300];
  zl_tmpdir(dir, sizeof dir, "pp_ck");
  snprintf(ck, sizeof ck, "%s/ck", dir);
  /* bf16 with its fp32 master, SGD's momentum, --recompute: the other paths of a stage, here too */
  const char *model =
      "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 4 --precision bf16 "
      "--optimizer sgd --lr 0.1 --recompute";
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline %s --pp 3 --micro-batches 4 --ckpt %s --save-every 2",
           model, ck);
  run_out_t a = launch(3, cmd, "ck_straight");
  snprintf(cmd, sizeof cmd,
           ZL_BIN "/ch07_pipeline %s --pp 3 --micro-batches 4 --schedule gpipe --resume %s/step-000002",
           model, ck);
  run_out_t b = launch(3, cmd, "ck_resumed");
  zl_expect_floats("pipeline resumed", b.params, a.params, PSI, 0);
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch02_ddp --variant naive %s --accum 4 --resume %s/step-000002", model,
           ck);
  run_out_t c = launch(1, cmd, "ck_into_ddp");
  zl_expect_floats("pipeline checkpoint resumed by DDP", c.params, a.params, PSI, 0);
  run_free(&a);
  run_free(&b);
  run_free(&c);
}

/* ---- the zero-bubble schedules (meeting 07c): B and W apart, the bits of 1F1B ------------------- */

/* Pipelines of P stages with --schedule zb-h1 and zb-h2 (each backward split into B, the input's
 * gradient, and W, the weights', run later from a per-stage queue in micro-batch order) against
 * 1 rank with --accum 4: bitwise weights and losses, as 1F1B (the same GEMMs on the same operands,
 * each weight's gradient adding micro-batches 0..M−1 in order); a slot lives from F k to W k, so the
 * in-flight peak is the schedule's formula (ZB-H1: P on every stage; ZB-H2: 2P − 1) times the slot. */
static void zb_equals_one_rank(int P) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch02_ddp --variant naive " MODEL " --accum %d", M_MICRO);
  run_out_t ref = launch(1, cmd, "zb_ref");
  int first[6];
  pp_split(g_units, 5, P, first);
  const char *names[2] = {"zb-h1", "zb-h2"};
  for (int i = 0; i < 2; i++) {
    char name[64];
    snprintf(name, sizeof name, "pp%d_%s", P, names[i]);
    snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline " MODEL " --pp %d --micro-batches %d --schedule %s", P,
             M_MICRO, names[i]);
    run_out_t r = launch(P, cmd, name);
    zl_expect_floats(name, r.params, ref.params, PSI, 0);
    zl_expect_same_losses(name, r.json, ref.json);
    for (int s = 0; s < P && s < 2; s++) {
      char key[40];
      snprintf(key, sizeof key, "acts_inflight_peak_s%d", s);
      int k = pp_inflight_formula(i ? PP_ZB_H2 : PP_ZB_H1, P, s, M_MICRO, 1);
      /* the MLP keeps no wsaved */
      double got = zl_json_num(r.json, key), want = (double)k * (double)slot_bytes(first, s);
      cr_assert_eq(
          got, want,
          "%s stage %d: %.0f B of activations in flight at the peak, the schedule's formula %d x %lld B",
          name, s, got, k, (long long)slot_bytes(first, s));
    }
    double sim = zl_json_num(r.json, "bubble_sim"), w = zl_json_num(r.json, "op_w_ms");
    cr_assert(sim >= 0 && sim < 1 && w > 0,
              "%s: bubble_sim %g, op_w_ms %g (the simulator fed with the run's F, B, W)", name, sim, w);
    run_free(&r);
  }
  run_free(&ref);
}

Test(ch07_pipeline, zero_bubble_equals_one_rank_bitwise, .timeout = 240) {
  zb_equals_one_rank(2);
  /* the GPT (embedding | 2 blocks | head): its B keeps d out / 4C per token / d lnf for W */
#define GPT                                                                                                \
  "--model gpt --gpt tiny --n-embd 35 --n-head 5 --seq-len 16 --batch 12 --seed 5 --device cpu --steps 2 " \
  "--data /usr/share/games/fortunes/cookie"
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "pp_zb_gpt");
  int64_t n0 = 0, n1 = 0;
  float *want = run_params(1, 120, dir, "ref", &n0, ZL_BIN "/ch02_ddp --variant naive " GPT " --accum 4");
  float *got = run_params(2, 120, dir, "zb_h1", &n1,
                          ZL_BIN "/ch07_pipeline " GPT " --pp 2 --micro-batches 4 --schedule zb-h1 "
                                 "--timeout-s 30");
  cr_assert_eq(n1, n0);
  zl_expect_floats("GPT zb-h1", got, want, n0, 0);
  free(got);
  free(want);
#undef GPT
}
Test(ch07_pipeline_long, zero_bubble_equals_one_rank_bitwise_p3_p4, .timeout = 300) {
  zb_equals_one_rank(3);
  zb_equals_one_rank(4);
  char dir[256];
  zl_tmpdir(dir, sizeof dir, "pp_zb_gpt_long");
  int64_t n0 = 0, n1 = 0;
#define GPT                                                                                                \
  "--model gpt --gpt tiny --n-embd 35 --n-head 5 --seq-len 16 --batch 12 --seed 5 --device cpu --steps 2 " \
  "--data /usr/share/games/fortunes/cookie"
  float *want = run_params(1, 120, dir, "ref", &n0, ZL_BIN "/ch02_ddp --variant naive " GPT " --accum 4");
  for (int P = 3; P <= 4; P++) {
    float *got = run_params(P, 120, dir, "zb_h2", &n1,
                            ZL_BIN "/ch07_pipeline " GPT " --pp %d --micro-batches 4 --schedule "
                                   "zb-h2 --timeout-s 30",
                            P);
    cr_assert_eq(n1, n0);
    zl_expect_floats("GPT zb-h2", got, want, n0, 0);
    free(got);
  }
  free(want);
#undef GPT
  /* synchronous sends (NCCL's rendezvous): the zero-bubble lists still pair and run */
  float *ref = run_params(1, 60, dir, "mref", &n0, ZL_BIN "/ch02_ddp --variant naive " MODEL " --accum 4");
  setenv("ZL_SYNC_SENDS", "1", 1);
  setenv("ZL_MPIRUN_FLAGS", "-x ZL_SYNC_SENDS", 1);
  float *sync = run_params(3, 120, dir, "zb_sync", &n1,
                           ZL_BIN "/ch07_pipeline " MODEL " --pp 3 --micro-batches 4 "
                                  "--schedule zb-h2 --timeout-s 30");
  unsetenv("ZL_SYNC_SENDS");
  unsetenv("ZL_MPIRUN_FLAGS");
  zl_expect_floats("zb-h2 under synchronous sends", sync, ref, n0, 0);
  free(ref);
  free(sync);
}

/* The data dimension under a split backward: P = 2 × D = 2, bf16, --zero 1, 2, 3 with zb-h1 (and
 * zb-h2 with --zero 2) against DDP on 2 ranks with --accum 2: bitwise, as 1F1B. A unit's reduction
 * waits for its last W (loop_ops.c, op_weight: the strategy's grad_ready after the W of micro-batch
 * M−1): in the trace every reduce-scatter of a step is issued after that step's "W 1" began on its
 * rank, none after its B. */
Test(ch07_pipeline, zero_bubble_data_dimension_bitwise_and_reduce_after_last_w, .timeout = 240) {
#define DPM "--input 6 --hidden 13 --classes 11 --layers 4 --batch 24 --seed 7 --steps 3 --precision bf16"
  char dir[256], cmd[1024], trace[400];
  zl_tmpdir(dir, sizeof dir, "pp_zb_dp");
  run_out_t ref = launch(2, ZL_BIN "/ch02_ddp --variant naive " DPM " --accum 2", "zb_ddp2");
  const struct {
    int zero;
    const char *sched;
  } c[4] = {{1, "zb-h1"}, {2, "zb-h1"}, {3, "zb-h1"}, {2, "zb-h2"}};
  for (int i = 0; i < 4; i++) {
    char name[64];
    snprintf(name, sizeof name, "pp2_dp2_zero%d_%s", c[i].zero, c[i].sched);
    snprintf(trace, sizeof trace, "%s/%s.trace.json", dir, name);
    snprintf(cmd, sizeof cmd,
             ZL_BIN "/ch07_pipeline " DPM " --pp 2 --micro-batches 2 --zero %d --schedule %s%s%s", c[i].zero,
             c[i].sched, i == 1 ? " --trace " : "", i == 1 ? trace : "");
    run_out_t r = launch(4, cmd, name);
    zl_expect_floats(name, r.params, ref.params, PSI, 0);
    zl_expect_same_losses(name, r.json, ref.json);
    run_free(&r);
    if (i != 1) continue;
    char *t = zl_read_file(trace, NULL);
    cr_assert(t, "no trace %s", trace);
    enum { MAXEV = 16384 };
    zl_tev_t *ev = calloc(MAXEV, sizeof *ev);
    int n = zl_read_trace(t, "reduce_scatter", ev, MAXEV), rs = 0, ws = 0;
    for (int a = 0; a < n; a++) {
      if (ev[a].tid == 0 && strncmp(ev[a].name, "W ", 2) == 0) ws++;
      if (!ev[a].coll) continue;
      rs++;
      double last_w = -1, step0 = -1, step1 = -1; /* the step holding it, and its W 1 on the same rank */
      for (int b = 0; b < n; b++)
        if (ev[b].pid == ev[a].pid && ev[b].tid == 0 && strncmp(ev[b].name, "step ", 5) == 0 &&
            ev[b].ts <= ev[a].issued && ev[a].issued <= ev[b].ts + ev[b].dur)
          step0 = ev[b].ts, step1 = ev[b].ts + ev[b].dur;
      for (int b = 0; b < n; b++)
        if (ev[b].pid == ev[a].pid && ev[b].tid == 0 && strcmp(ev[b].name, "W 1") == 0 && ev[b].ts >= step0 &&
            ev[b].ts <= step1)
          last_w = ev[b].ts;
      cr_assert(last_w >= 0 && ev[a].issued >= last_w,
                "rank %d: a reduce-scatter issued at %.1f us, before its step's last "
                "W began (%.1f us): the gradient was not final",
                ev[a].pid, ev[a].issued, last_w);
    }
    cr_assert(rs > 0 && ws >= 4 * 2 * 3,
              "the trace has %d reduce-scatters and %d W blocks (expected every rank's 2 per step)", rs, ws);
    free(ev);
    free(t);
  }
  run_free(&ref);
#undef DPM
}

/* --post-validate (optimizer post-validation, meeting 07c): each stage updates at once and learns the
 * stages' gradient norm and overflow flags after; an fp16 overflow forced on stage 1 at step 1 rolls
 * the update back on every stage — the weights are bitwise those of the run that skipped the step
 * the ordinary way (waiting for the flags first) — and a clipped step is rolled back and redone,
 * bitwise the ordinary run with --clip. */
static void pv_pair(int np, const char *what, const char *flags, const char *count_key, int count_min) {
  char cmd[1024], name[64];
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline %s", flags);
  snprintf(name, sizeof name, "%s_waiting", what);
  run_out_t a = launch(np, cmd, name);
  snprintf(cmd, sizeof cmd, ZL_BIN "/ch07_pipeline %s --post-validate", flags);
  snprintf(name, sizeof name, "%s_post_validated", what);
  run_out_t b = launch(np, cmd, name);
  zl_expect_floats(name, b.params, a.params, PSI, 0);
  zl_expect_same_losses(name, b.json, a.json);
  double n = zl_json_num(b.json, count_key);
  cr_assert(n >= count_min, "%s: %s %g, expected at least %d", name, count_key, n, count_min);
  run_free(&a);
  run_free(&b);
}

Test(ch07_pipeline, post_validate_rolls_back_bitwise, .timeout = 120) {
  pv_pair(2, "overflow",
          SHAPE " --steps 3 --pp 2 --micro-batches 4 --schedule zb-h1 --precision fp16 --fault 1:1:overflow",
          "post_validate_rollbacks", 1);
  pv_pair(2, "clip", SHAPE " --steps 3 --pp 2 --micro-batches 4 --schedule zb-h2 --clip 0.3",
          "post_validate_redos", 1);
}
Test(ch07_pipeline_long, post_validate_data_dimension_bitwise, .timeout = 240) {
  for (int z = 1; z <= 3; z++) {
    char flags[512], what[32];
    snprintf(flags, sizeof flags,
             SHAPE " --steps 3 --pp 2 --micro-batches 2 --zero %d --schedule zb-h1 --precision bf16 "
                   "--clip 0.3",
             z);
    snprintf(what, sizeof what, "zero%d_clip", z);
    pv_pair(4, what, flags, "post_validate_redos", 1);
  }
  pv_pair(4, "zero1_overflow",
          SHAPE " --steps 3 --pp 2 --micro-batches 2 --zero 1 --schedule 1f1b --precision fp16 "
                "--fault 2:1:overflow",
          "post_validate_rollbacks", 1);
}

/* Flags that cannot work: one line naming the flag, exit code 2, before anything runs. */
Test(ch07_pipeline, bad_flags_one_line_exit_2) {
  const struct {
    int np;
    const char *args, *flag;
  } cases[] = {
      {2, "--pp 3", "error: --pp 3"},
      {3, "--pp 2", "error: --pp 2"},
      {3, "--pp 3 --layers 1", "error: --pp 3"},
      {2, "--pp 2 --micro-batches 5", "error: --batch 24"},
      {2, "--pp 2 --accum 2", "error: --accum 2"},
      {2, "--pp 2 --schedule interleaved --micro-batches 3", "error: --micro-batches 3"},
      {2, "--pp 2 --schedule interleaved --virtual-stages 3", "error: --virtual-stages 3"},
      {4, "--pp 2 --schedule zb-h1 --tp 2", "error: --tp 2"},
      {2, "--pp 2 --schedule zb-h2 --recompute", "error: --recompute"},
      {4, "--pp 2 --post-validate --clip 1 --zero 0", "error: --post-validate"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    /* refused before MPI starts: the world size comes from the launcher's environment alone */
    int rc = zl_run(0, 30, &out,
                    "env OMPI_COMM_WORLD_SIZE=%d OMPI_COMM_WORLD_RANK=0 " ZL_BIN
                    "/ch07_pipeline --input 6 --hidden 13 --classes 11 --batch 24 %s",
                    cases[i].np, cases[i].args);
    cr_assert_eq(rc, 2, "`%s` (np %d): exit code %d, expected 2:\n%s", cases[i].args, cases[i].np, rc, out);
    cr_assert(strstr(out, cases[i].flag), "`%s`: expected '%s' in:\n%s", cases[i].args, cases[i].flag, out);
    free(out);
  }
}

/* --eval-every and --sample run a forward of the whole model on every rank, which a stage lacks: refused up
 * front (exit 2, one line naming the flag), not after training. */
Test(ch07_pipeline, eval_and_sample_refused_up_front) {
  const char *cases[][2] = {{"--eval-every 1", "error: --eval-every 1"}, {"--sample 8", "error: --sample 8"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    int rc = zl_run(
        0, 30, &out,
        "env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 " ZL_BIN
        "/ch07_pipeline --model gpt --gpt tiny --n-embd 35 --n-head 5 --seq-len 16 --batch 12 --pp 2 %s",
        cases[i][0]);
    cr_assert_eq(rc, 2, "`%s`: exit code %d, expected 2:\n%s", cases[i][0], rc, out);
    cr_assert(strstr(out, cases[i][1]), "`%s`: expected '%s' in:\n%s", cases[i][0], cases[i][1], out);
    cr_assert(!strstr(out, "step "), "`%s`: refused after training started:\n%s", cases[i][0], out);
    free(out);
  }
}
