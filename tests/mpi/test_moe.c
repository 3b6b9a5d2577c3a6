/* test_moe.c — chapter 12's Mixture of Experts and expert parallelism (ch12_experts; solutions/moe.h,
 * solutions/ep.h; notes/12-experts.md). The tiny GPT (L2 NH2 C32 S16 V256), 4 steps of SGD with
 * momentum and --clip 0.5, global batch 8:
 *   - the dispatch plan (the exercise moe_dispatch_plan): every property a correct plan must have;
 *   - dispatch then combine with gates 1/k gives the input back bit for bit, and the dispatch's
 *     backward the gradient (k = 1, 2: 1/k and the sum of k halves are exact in fp32);
 *   - E = 1, k = 1 is the dense GPT: the same kernels on the same rows in the same order (the
 *     router's softmax over one expert is exactly 1, its gradient exactly 0): every loss bitwise;
 *   - data parallelism over 2 ranks (the experts replicated) = 1 rank with --accum 2, bitwise: each
 *     micro-batch routes alike (capacity per micro-batch) and the sums meet in the same order;
 *   - expert parallelism over 2 ranks = 1 rank with --accum 2, within 1e-5 of max|w| (the experts see
 *     both ranks' rows in one GEMM, 1 rank sees them in two: another shape, so a tolerance — notes/
 *     design.md "Bits or a tolerance"; the routing, the drops and the aux loss's f_e are the same),
 *     and the all-to-all bytes per step measured on the EP group = the formula from the routing;
 *   - TP inside the EP group (--ep 4 --tp 2, solutions/ep_tp.c) = 1 rank with --accum 4 within 1e-5, and
 *     with --sp = 1 rank (global aux scope); each with its groups' traffic counted here from the shape,
 *     the states by kind and chapter 00's per-rank states;
 *   - the refusals. The sweep (ZeRO-1/2/3 with --ep and with TP inside it, 4 and 8 ranks, bf16,
 *     --moe-every 2, --recompute, checkpoints across grids) is ch12_moe_long. */
#include "zl_test.h" // zl_launch, zl_run, zl_json_num, zl_expect_*, cr_assert
#include "moe.h"     // moe_plan, moe_capacity
#include "ops_gpt.h" // op_rows_gather, op_rows_combine
#include <stdint.h>  // int64_t

#define MOE_TOL 1e-5
#define MOE_NOSTEPS "--model gpt --gpt tiny --optimizer sgd --lr 0.1 --clip 0.5"
#define MOE_BASE MOE_NOSTEPS " --steps 4"
#define MOE_SHAPE MOE_BASE " --batch 8"
#define MOE_LAUNCH(np, tag, name, args) \
  zl_launch(np, 60, tag, name, "%s/ch12_experts " MOE_SHAPE " %s", ZL_BIN, args)
#define MOE_LAUNCH16(np, tag, name, args) \
  zl_launch(np, 90, tag, name, "%s/ch12_experts " MOE_BASE " --batch 16 %s", ZL_BIN, args)

/* ---- the plan (pure) -------------------------------------------------------------------------- */
static uint64_t lcg(uint64_t *s) {
  return *s = *s * 6364136223846793005ull + 1442695040888963407ull, *s >> 33;
}

/* k distinct experts per token, drawn from a skewed distribution so that capacity bites. */
static void random_ids(int *ids, int64_t T, int k, int E, uint64_t seed) {
  for (int64_t t = 0; t < T; t++)
    for (int j = 0; j < k; j++) {
      int e, dup;
      do {
        uint64_t x = lcg(&seed) % (uint64_t)(E * E);
        /* low experts hot */
        e = (int)(x % 3 == 0 ? x % (uint64_t)E : (x / (uint64_t)E) % (uint64_t)((E + 1) / 2));
        dup = 0;
        for (int q = 0; q < j; q++) dup |= ids[t * k + q] == e;
      } while (dup);
      ids[t * k + j] = e;
    }
}

/* What any correct plan must do (moe.h): rows = E·cap or T·k; expert e's rows start where the layout
 * says, hold only its choices, in token order, at most cap of them; every choice of e before its cap
 * keeps a row (first come, first served), the rest are dropped; padding rows name no token. */
static void check_plan(int64_t T, int k, int E, int64_t cap, uint64_t seed) {
  int *ids = malloc((size_t)(T * k) * sizeof(int)), *slot = malloc((size_t)(T * k) * sizeof(int));
  int64_t rows_max = cap > 0 ? E * cap : T * k, counts[64];
  int *row_tok = malloc((size_t)rows_max * sizeof(int));
  random_ids(ids, T, k, E, seed);
  for (int64_t i = 0; i < T * k; i++) slot[i] = -7;
  for (int64_t r = 0; r < rows_max; r++) row_tok[r] = -7;
  int64_t rows = moe_plan(ids, T, k, E, cap, counts, slot, row_tok);
  char what[96];
  snprintf(what, sizeof what, "moe_plan(T %lld, k %d, E %d, cap %lld)", (long long)T, k, E, (long long)cap);
  cr_assert_eq(rows, rows_max, "%s returned %lld rows, expected %lld (%s)", what, (long long)rows,
               (long long)rows_max, cap > 0 ? "E x cap: the padded buffer" : "T x k: one row per choice");
  int64_t seen[64] = {0}, start = 0, last_tok[64];
  for (int e = 0; e < E; e++) last_tok[e] = -1;
  for (int e = 0; e < E; e++) {
    int64_t want = 0;
    for (int64_t i = 0; i < T * k; i++) want += ids[i] == e;
    if (cap > 0 && want > cap) want = cap;
    cr_assert_eq(counts[e], want, "%s: counts[%d] = %lld, expected %lld (%s)", what, e, (long long)counts[e],
                 (long long)want, cap > 0 ? "its choices, at most cap" : "its choices");
  }
  for (int64_t t = 0; t < T; t++)
    for (int j = 0; j < k; j++) {
      int e = ids[t * k + j], s = slot[t * k + j];
      int64_t first = 0;
      for (int e2 = 0; e2 < e; e2++) first += cap > 0 ? cap : counts[e2];
      if (cap > 0 && seen[e] == cap) {
        cr_assert_eq(
            s, -1,
            "%s: choice (token %lld, j %d) of expert %d past its capacity %lld got row %d, expected -1 "
            "(dropped: the first cap choices in token order keep their rows)",
            what, (long long)t, j, e, (long long)cap, s);
        continue;
      }
      cr_assert(s >= first && s < first + (cap > 0 ? cap : counts[e]),
                "%s: choice (token %lld, j %d) of expert %d at "
                "row %d, outside expert %d's rows [%lld, %lld)",
                what, (long long)t, j, e, s, e, (long long)first,
                (long long)(first + (cap > 0 ? cap : counts[e])));
      cr_assert_eq(s, first + seen[e],
                   "%s: choice (token %lld, j %d) of expert %d at row %d, expected %lld (an expert's "
                   "rows in token order, no gaps)",
                   what, (long long)t, j, e, s, (long long)(first + seen[e]));
      cr_assert_eq(row_tok[s], (int)t, "%s: row_tok[%d] = %d, expected token %lld", what, s, row_tok[s],
                   (long long)t);
      cr_assert(last_tok[e] < t || last_tok[e] == -1, "%s: expert %d: token %lld after token %lld", what, e,
                (long long)t, (long long)last_tok[e]);
      last_tok[e] = t, seen[e]++;
    }
  for (int e = 0; e < E && cap > 0; e++)
    for (int64_t r = e * cap + counts[e]; r < (e + 1) * cap; r++)
      cr_assert_eq(row_tok[r], -1,
                   "%s: padding row %lld (expert %d holds %lld of %lld) names token %d, expected -1", what,
                   (long long)r, e, (long long)counts[e], (long long)cap, row_tok[r]);
  (void)start;
  free(ids), free(slot), free(row_tok);
}

Test(ch12_moe, plan_contract) {
  check_plan(64, 2, 4, 0, 1);                       /* dropless */
  check_plan(64, 1, 8, 0, 2);
  check_plan(64, 2, 4, moe_capacity(1.0, 64, 2, 4), 3); /* capacity: 32, the hot experts drop */
  check_plan(64, 2, 4, moe_capacity(1.25, 64, 2, 4), 4);
  check_plan(17, 3, 5, moe_capacity(0.5, 17, 3, 5), 5);
  check_plan(1, 1, 1, 0, 6);
  cr_assert_eq(moe_capacity(1.25, 64, 2, 4), 40, "ceil(1.25 x 64 x 2 / 4) = 40, got %lld",
               (long long)moe_capacity(1.25, 64, 2, 4));
  cr_assert_eq(moe_capacity(0, 64, 2, 4), 0, "cf 0 is dropless: capacity 0");
}

/* Dispatch (the plan's rows) then combine with gates 1/k: the input, bit for bit; the dispatch's
 * backward of a gradient g (combine with no gates of the rows g/k): g. Megatron's dropless test. */
Test(ch12_moe, dispatch_combine_identity) {
  for (int k = 1; k <= 2; k++) {
    int64_t T = 48, C = 8, E = 4, rows = T * k, counts[4];
    int *ids = malloc((size_t)(T * k) * sizeof(int)), *slot = malloc((size_t)(T * k) * sizeof(int));
    int *row_tok = malloc((size_t)rows * sizeof(int));
    float *x = malloc((size_t)(T * C) * sizeof(float)), *y = malloc((size_t)(T * C) * sizeof(float));
    float *xr = malloc((size_t)(rows * C) * sizeof(float)), *w = malloc((size_t)(T * k) * sizeof(float));
    float *rs = malloc((size_t)rows * sizeof(float));
    uint64_t s = 11;
    for (int64_t i = 0; i < T * C; i++) x[i] = (float)((int64_t)lcg(&s) % 2001 - 1000) / 37.0f;
    random_ids(ids, T, k, (int)E, 12);
    moe_plan(ids, T, k, (int)E, 0, counts, slot, row_tok);
    for (int64_t i = 0; i < T * k; i++) w[i] = 1.0f / k;
    for (int64_t r = 0; r < rows; r++) rs[r] = 1.0f / k;
    op_rows_gather(DEV_CPU, xr, x, row_tok, NULL, rows, (int)C);
    op_rows_combine(DEV_CPU, y, xr, slot, w, T, k, (int)C, 0.0f);
    char what[64];
    snprintf(what, sizeof what, "dispatch + combine (k %d, gates 1/k)", k);
    zl_expect_floats(what, y, x, T * C, 0);
    op_rows_gather(DEV_CPU, xr, x, row_tok, rs, rows, (int)C); /* the combine's backward with gates 1/k */
    op_rows_combine(DEV_CPU, y, xr, slot, NULL, T, k, (int)C, 0.0f); /* the dispatch's backward */
    snprintf(what, sizeof what, "the gradient through them (k %d)", k);
    zl_expect_floats(what, y, x, T * C, 0);
    free(ids), free(slot), free(row_tok), free(x), free(y), free(xr), free(w), free(rs);
  }
}

Test(ch12_moe, one_expert_is_the_dense_gpt) {
  zl_out_t moe = MOE_LAUNCH(1, "moe", "e1k1", "--moe 1 --topk 1");
  zl_out_t dense = zl_launch(1, 60, "moe", "dense", "%s/ch02_ddp " MOE_SHAPE, ZL_BIN);
  zl_expect_same_losses("--moe 1 --topk 1 against ch02_ddp's dense GPT", moe.json, dense.json);
  zl_out_free(&moe), zl_out_free(&dense);
}

/* DP 2 (experts replicated), EP 2 and 1 rank --accum 2, dropless and with a capacity. */
static void ep_case(const char *extra, double *gap) {
  char a1[160], a2[160], a3[160], n1[32], n2[32], n3[32];
  snprintf(a1, sizeof a1, "--moe 4 --topk 2 --accum 2 %s", extra);
  snprintf(a2, sizeof a2, "--moe 4 --topk 2 %s", extra);
  snprintf(a3, sizeof a3, "--moe 4 --topk 2 --ep 2 %s", extra);
  snprintf(n1, sizeof n1, "one%zu", strlen(extra)), snprintf(n2, sizeof n2, "dp%zu", strlen(extra));
  snprintf(n3, sizeof n3, "ep%zu", strlen(extra));
  zl_out_t one = MOE_LAUNCH(1, "moe", n1, a1), dp = MOE_LAUNCH(2, "moe", n2, a2),
           ep = MOE_LAUNCH(2, "moe", n3, a3);
  char what[160];
  snprintf(what, sizeof what, "DP 2 against 1 rank --accum 2 (%s)", extra);
  zl_expect_same_losses(what, dp.json, one.json);
  cr_assert_eq(ep.n, one.n, "EP 2 exported %lld weights, 1 rank %lld (the full model: every expert)",
               (long long)ep.n, (long long)one.n);
  snprintf(what, sizeof what, "EP 2 weights against 1 rank --accum 2 (%s)", extra);
  *gap = zl_expect_close_norm(what, ep.params, one.params, one.n, MOE_TOL);
  double d1 = zl_json_num(one.json, "moe_drop_rate"), d2 = zl_json_num(ep.json, "moe_drop_rate");
  cr_assert_eq(
      d1, d2,
      "%s: EP 2 dropped %.17g of the choices, 1 rank %.17g (the same routing: capacity per micro-batch)",
      extra, d2, d1);
  double m = zl_json_num(ep.json, "moe_a2a_bytes_per_step"),
         f = zl_json_num(ep.json, "moe_a2a_bytes_formula");
  cr_assert(m > 0 && m == f, "%s: EP 2 all-to-all bytes per step %.17g measured, formula %.17g", extra, m, f);
  zl_out_free(&one), zl_out_free(&dp), zl_out_free(&ep);
}

Test(ch12_moe, ep_equals_one_rank) {
  double g0, g1;
  ep_case("", &g0);
  ep_case("--capacity-factor 1.0", &g1);
  cr_log_info("EP 2 against 1 rank: largest |difference| / max|w| (dropless): %.3g (tolerance %g)", g0,
              MOE_TOL);
  cr_log_info("EP 2 against 1 rank: largest |difference| / max|w| (capacity 1.0): %.3g (tolerance %g)", g1,
              MOE_TOL);
}

/* Two data-parallel groups (DeepSpeed's and Megatron's; train.h's strategy_t.two_groups): EP 2 x D 2 on 4
 * ranks with DDP, against 1 rank --accum 4 within MOE_TOL; every dense gradient summed in one all-reduce
 * over the 4 ranks and the experts' over their D = 2 replicas: per rank and step 2(N-1)/N·Ψ_dense·4 +
 * 2(D-1)/D·Ψ_experts·4 bytes, counted here from the shape (Ψ_dense: wpe + wte, per block 2 LayerNorms,
 * qkv, proj and the router, lnf + head; Ψ_experts: 2 experts of 2·4C·C + 4C + C per block) = the report's
 * formula = the counters; the EP group all-reduces nothing (the old layout's 2(P_E-1)/P_E·Ψ_dense·4 there,
 * and 2(D-1)/D of every parameter over D). */
Test(ch12_moe, two_groups_dense_traffic) {
  const double N = 4, D = 2, C = 32, S = 16, V = 256, L = 2, E = 4, X = 2 * 4 * C * C + 4 * C + C;
  double dense = S * C + V * C + L * (2 * 2 * C + 3 * C * C + 3 * C + C * C + C + E * C) + 2 * C + V * C;
  double experts = L * (E / 2) * X, want = 2 * (N - 1) / N * dense * 4 + 2 * (D - 1) / D * experts * 4;
  zl_out_t one = MOE_LAUNCH(1, "moe", "tgone", "--moe 4 --topk 2 --accum 4");
  zl_out_t r = MOE_LAUNCH(4, "moe", "tg", "--moe 4 --topk 2 --ep 2");
  double gap = zl_expect_close_norm("EP 2 x D 2 (two groups) against 1 rank --accum 4", r.params, one.params,
                                    one.n, MOE_TOL);
  const char *c = zl_json_find(r.json, "comm");
  double got = zl_json_num(c, "bytes_per_step_per_rank");
  double f = zl_json_num(c, "formula_bytes_per_step_per_rank");
  cr_assert(got == want && f == want,
            "EP 2 x D 2: %.1f bytes per rank and step on the data-parallel groups (formula %.1f), expected "
            "%.1f from the shape (dense %.0f over 4 ranks, experts %.0f over 2)",
            got, f, want, dense, experts);
  const char *p = zl_json_find(r.json, "tp");
  for (int q = 0; q < 4; q++) {
    p = zl_json_find(p, "tp_rank");
    cr_assert(p && zl_json_num(p, "bytes_per_step") == 0 && zl_json_num(p, "formula_bytes_per_step") == 0,
              "EP 2 x D 2 rank %d: the EP group all-reduced dense gradients (two groups: none)", q);
    p += 8;
  }
  cr_log_info("two groups, EP 2 x D 2: %.0f B per rank and step (dense over N, experts over D); "
              "against 1 rank %.3g of max|w|",
              want, gap);
  zl_out_free(&one), zl_out_free(&r);
}

/* --aux-loss-scope global: f_e counts every rank's choices, so the aux loss and its gradient are the
 * same on any layout of the same --accum: EP 2 and DP 2 against 1 rank with the whole batch. */
Test(ch12_moe, global_aux_loss_any_layout) {
  const char *g = "--moe 4 --topk 2 --aux-loss-coeff 0.1 --aux-loss-scope global";
  char a[160];
  zl_out_t one = MOE_LAUNCH(1, "moe", "gone", g);
  snprintf(a, sizeof a, "%s --ep 2", g);
  zl_out_t ep = MOE_LAUNCH(2, "moe", "gep", a);
  double gap = zl_expect_close_norm("--aux-loss-scope global: EP 2 against 1 rank (whole batch)", ep.params,
                                    one.params, one.n, MOE_TOL);
  cr_log_info(
      "--aux-loss-scope global, EP 2 against 1 rank: largest |difference| / max|w|: %.3g (tolerance %g)", gap,
      MOE_TOL);
  double x = zl_json_num(one.json, "moe_aux_loss_last"), y = zl_json_num(ep.json, "moe_aux_loss_last");
  cr_assert(zl_rel(y, x) <= 1e-6, "--aux-loss-scope global: aux loss EP 2 %.9g, 1 rank %.9g", y, x);
  zl_out_free(&one), zl_out_free(&ep);
}

Test(ch12_moe, router_bias_same_on_every_rank) {
  zl_out_t r =
      MOE_LAUNCH(2, "moe", "bias", "--moe 4 --topk 2 --ep 2 --router-bias-rate 0.001 --aux-loss-coeff 0");
  cr_assert(zl_json_num(r.json, "moe_bias_hash") > 0, "no router bias fingerprint in the JSON:\n%s", r.text);
  /* each step every rank compared its bias bits with the others': a difference stops the job */
  zl_out_free(&r);
}

/* The ledger of states by kind: the expert group's sum of expert and of dense states = the formula. */
static void expect_states_by_kind(const char *what, const char *json) {
  const char *kind[2] = {"expert", "dense"};
  for (int q = 0; q < 2; q++) {
    char kg[64], kf[64];
    snprintf(kg, sizeof kg, "moe_%s_state_bytes_group", kind[q]),
        snprintf(kf, sizeof kf, "moe_%s_state_bytes_formula", kind[q]);
    double g = zl_json_num(json, kg), f = zl_json_num(json, kf);
    cr_assert(g == f && f > 0, "%s: %s states kept by the expert group %.17g B, formula %.17g B", what,
              kind[q], g, f);
  }
}

/* Chapter 00's per-rank states for the tiny GPT's layout (layout: "--ep P [--tp T]", fp32, SGD momentum: K =
 * 4)
 * at --stage z = every rank's ledger (np ranks). */
static void expect_ch00_states(const char *what, const char *json, int np, const char *layout, int z) {
  char c0p[320], name[32];
  /* one file per case: suites may run at once */
  snprintf(name, sizeof name, "c0_%d_%d_%zu.json", np, z, strlen(layout));
  zl_tmppath(c0p, sizeof c0p, "moe", name);
  zl_run_ok(0, 30, "ch00_memory",
            "%s/ch00_memory --layers 2 --hidden 32 --heads 2 --seq 16 --experts 4 --topk 2 "
            "--ranks %d %s --precision fp32 --k 4 --stage %d --json %s",
            ZL_BIN, np, layout, z, c0p);
  char *c0 = zl_read_file(c0p, NULL);
  cr_assert(c0, "%s: no --json from ch00_memory", what);
  double f00 = zl_json_num(zl_json_find(c0, "per_stage"), "total");
  for (int q = 0; q < np; q++)
    cr_assert_eq(zl_rank_mem(json, q, "model_states"), f00,
                 "%s rank %d: model states %.17g B in the ledger, "
                 "ch00_memory --experts 4 %s says %.17g B",
                 what, q, zl_rank_mem(json, q, "model_states"), layout, f00);
  free(c0);
}

/* ZeRO-1 on the two groups (solutions/zero_groups.c): each unit's dense prefix sharded over all 4 ranks, its
 * experts over their D = 2 replicas, so a rank's optimizer states at --ep 2 are --ep 1's (DeepSpeed's
 * layout; the tiny GPT's units split evenly, so no padding on either side): the same bytes per rank, the
 * weights against 1 rank --accum 4 within MOE_TOL, each kind's states kept once = formula, every rank's
 * ledger = ch00_memory --ep 2 --stage 1, and the traffic = formula = DDP's on the two groups (a
 * reduce-scatter and an all-gather send what an all-reduce does). */
Test(ch12_moe, zero1_two_groups_states) {
  zl_out_t one = MOE_LAUNCH(1, "moe", "z1one", "--moe 4 --topk 2 --accum 4");
  zl_out_t e1 = MOE_LAUNCH(4, "moe", "z1ep1", "--moe 4 --topk 2 --zero 1");
  zl_out_t e2 = MOE_LAUNCH(4, "moe", "z1ep2", "--moe 4 --topk 2 --ep 2 --zero 1");
  for (int q = 0; q < 4; q++)
    cr_assert(zl_rank_mem(e2.json, q, "optim") == zl_rank_mem(e1.json, q, "optim"),
              "ZeRO-1 rank %d: optimizer states %.17g B at --ep 2, %.17g B at --ep 1 (the dense part must be "
              "sharded over all 4 ranks, the experts over their 2 replicas)",
              q, zl_rank_mem(e2.json, q, "optim"), zl_rank_mem(e1.json, q, "optim"));
  double gap = zl_expect_close_norm("ZeRO-1 EP 2 x D 2 (two groups) against 1 rank --accum 4", e2.params,
                                    one.params, one.n, MOE_TOL);
  expect_states_by_kind("ZeRO-1 EP 2 x D 2", e2.json);
  expect_ch00_states("ZeRO-1 EP 2 x D 2", e2.json, 4, "--ep 2", 1);
  const char *c = zl_json_find(e2.json, "comm");
  double got = zl_json_num(c, "bytes_per_step_per_rank");
  double f = zl_json_num(c, "formula_bytes_per_step_per_rank");
  cr_assert(got == f && f > 0, "ZeRO-1 EP 2 x D 2: %.1f bytes per rank and step, formula %.1f", got, f);
  cr_log_info("ZeRO-1 two groups: optimizer states %.0f B per rank at --ep 2 and --ep 1; %.0f B sent per "
              "step; against 1 rank %.3g of max|w|", zl_rank_mem(e2.json, 0, "optim"), got, gap);
  zl_out_free(&one), zl_out_free(&e1), zl_out_free(&e2);
}

/* --tp T inside the EP group (solutions/ep_tp.c): TP 2 x EP 4 on 4 ranks — the attention split over 2,
 * each TP rank routing half of its group's tokens, the 4 experts one per rank — against 1 rank with
 * --accum 4: each rank routes the tokens of one of 1 rank's micro-batches (2 samples), so the routing,
 * the drops and the aux loss's f_e are the same; the attention and the experts run other shapes: the
 * weights within 1e-5 of max|w| (--clip 0.5 clips every step here: the norm counts each value once).
 * The groups' traffic, counted here from the shape (notes/12-experts.md, "TP inside the EP group"):
 * over TP (T = 2, b·S·C = 4·16·32 fp32 per collective, 2(T-1)/T of it per all-reduce, (T-1)/T per
 * all-gather): the embedding's g, per MoE block 2 all-reduces + 2 all-gathers, the head's f and the
 * loss's 3 all-reduces of b·S; a router's gradient (E·C) over TP per block; each unit's dense
 * gradient over the 2 ranks with the same TP index (wpe + Vr rows of wte; 5C + qkv/proj/T + router;
 * lnf + Vr rows of the head). */
static void tp_ep_expected_traffic(int sp, double *calls, double *bytes) {
  const double T = 2, X = 2, C = 32, S = 16, V = 256, b = 4, L = 2, E = 4, Cr = C / T, Vr = V / T;
  double n = b * S * C, ar = 2 * (T - 1) / T * 4, ag = (T - 1) / T * 4, arx = 2 * (X - 1) / X * 4;
  double emb = S * C + Vr * C, blk = 5 * C + 3 * Cr * C + 3 * Cr + C * Cr + E * C, head = 2 * C + Vr * C;
  /* routers; dense parts */
  double grads_calls = L + (L + 2), grads = L * E * C * ar + (emb + L * blk + head) * arx;
  if (!sp) {
    *calls = 1 + 4 * L + 1 + 3 + grads_calls;
    *bytes = (1 + 2 * L + 1) * n * ar + 2 * L * n * ag + 3 * b * S * ar + grads;
    return;
  }
  /* --sp (along the sequence, each of b·S·C, (T-1)/T of it per rank): the embedding's reduce-scatter and,
   * backward, all-gather; per MoE block's attention 3 all-gathers (qkv's input, proj's d y, ln1 again) and 2
   * reduce-scatters (proj's output, qkv's d x), and the 2 LayerNorms' weight gradients (2C each); the head
   * 2 all-gathers + 1 reduce-scatter, lnf's 2C and the loss's 3 rows; nothing at the MoE half */
  *calls = 2 + L * (5 + 2) + (3 + 1 + 3) + grads_calls;
  *bytes = (2 + 5 * L + 3) * n * ag + (2 * L + 1) * 2 * C * ar + 3 * b * S * ar + grads;
}

/* Every rank's collectives and bytes per step on the TP and data groups, measured and the report's
 * formula, against the count from the shape. */
static void expect_tp_ep_traffic(const char *what, const char *json, int np, int sp) {
  double calls, bytes;
  tp_ep_expected_traffic(sp, &calls, &bytes);
  const char *p = zl_json_find(json, "tp");
  cr_assert(p, "%s: no tp object in the JSON", what);
  for (int q = 0; q < np; q++) {
    p = zl_json_find(p, "tp_rank");
    cr_assert(p, "%s: rank %d missing from tp.per_rank", what, q);
    double c = zl_json_num(p, "calls_per_step"), fc = zl_json_num(p, "formula_calls_per_step");
    double by = zl_json_num(p, "bytes_per_step"), fb = zl_json_num(p, "formula_bytes_per_step");
    cr_assert(c == calls && fc == calls,
              "%s rank %d: %g collectives per step on the TP and data groups (report's "
              "formula %g), expected %g",
              what, q, c, fc, calls);
    cr_assert(by == bytes && fb == bytes,
              "%s rank %d: %.1f bytes per step (report's formula %.1f), expected %.1f", what, q, by, fb,
              bytes);
    p += 8;
  }
  cr_log_info("%s: %g collectives, %.0f B per rank and step besides the all-to-alls (= the report's formula)",
              what, calls, bytes);
}

Test(ch12_moe, tp_inside_ep_equals_one_rank) {
  zl_out_t one = MOE_LAUNCH(1, "moe", "tpone", "--moe 4 --topk 2 --accum 4");
  zl_out_t r = MOE_LAUNCH(4, "moe", "tpep", "--moe 4 --topk 2 --ep 4 --tp 2");
  cr_assert_eq(r.n, one.n, "TP 2 x EP 4 exported %lld weights, 1 rank %lld (the full model)", (long long)r.n,
               (long long)one.n);
  double gap = zl_expect_close_norm("TP 2 x EP 4 weights against 1 rank --accum 4", r.params, one.params,
                                    one.n, MOE_TOL);
  double d1 = zl_json_num(one.json, "moe_drop_rate"), d2 = zl_json_num(r.json, "moe_drop_rate");
  double x1 = zl_json_num(one.json, "moe_aux_loss_last"), x2 = zl_json_num(r.json, "moe_aux_loss_last");
  cr_assert_eq(d1, d2, "TP 2 x EP 4 dropped %.17g of the choices, 1 rank %.17g", d2, d1);
  cr_assert(zl_rel(x2, x1) <= 1e-6,
            "TP 2 x EP 4: aux loss %.9g, 1 rank --accum 4 %.9g (the same tokens per f_e)", x2, x1);
  double m = zl_json_num(r.json, "moe_a2a_bytes_per_step"), f = zl_json_num(r.json, "moe_a2a_bytes_formula");
  cr_assert(m > 0 && m == f, "TP 2 x EP 4: all-to-all bytes per step %.17g measured, formula %.17g", m, f);
  expect_states_by_kind("TP 2 x EP 4", r.json);
  expect_ch00_states("TP 2 x EP 4", r.json, 4, "--ep 4 --tp 2", 0);
  expect_tp_ep_traffic("TP 2 x EP 4", r.json, 4, 0);
  cr_log_info("TP 2 x EP 4 against 1 rank --accum 4: largest |difference| / max|w|: %.3g (tolerance %g)", gap,
              MOE_TOL);
  zl_out_free(&one), zl_out_free(&r);
}

/* With --sp (Megatron's way) each TP rank routes its own positions of every sample — not one of 1 rank's
 * micro-batches — so the contract is the global aux scope's: = 1 rank with the whole batch, 1e-5. */
Test(ch12_moe, tp_sp_inside_ep_equals_one_rank) {
  const char *g = "--moe 4 --topk 2 --aux-loss-scope global";
  char a[160];
  snprintf(a, sizeof a, "%s --ep 4 --tp 2 --sp", g);
  zl_out_t one = MOE_LAUNCH(1, "moe", "spone", g), sp = MOE_LAUNCH(4, "moe", "sp", a);
  double gap = zl_expect_close_norm("TP 2 + SP inside EP 4 against 1 rank (whole batch, global aux scope)",
                                    sp.params, one.params, one.n, MOE_TOL);
  double x = zl_json_num(one.json, "moe_aux_loss_last"), y = zl_json_num(sp.json, "moe_aux_loss_last");
  cr_assert(zl_rel(y, x) <= 1e-6, "TP 2 + SP x EP 4: aux loss %.9g, 1 rank %.9g", y, x);
  expect_tp_ep_traffic("TP 2 + SP x EP 4", sp.json, 4, 1);
  expect_states_by_kind("TP 2 + SP x EP 4", sp.json);
  cr_log_info("TP 2 + SP inside EP 4 against 1 rank: largest |difference| / max|w|: %.3g (tolerance %g)", gap,
              MOE_TOL);
  zl_out_free(&one), zl_out_free(&sp);
}

Test(ch12_moe, refusals) {
  zl_expect_refused(1, "ch12_experts", "--model gpt --gpt tiny --moe 4 --topk 5", "--topk");
  zl_expect_refused(2, "ch12_experts", "--model gpt --gpt tiny --moe 3 --ep 2", "--ep");
  zl_expect_refused(2, "ch12_experts", "--model gpt --gpt tiny --moe 4 --ep 2 --sample 10", "--sample");
  zl_expect_refused(1, "ch12_experts", "--model gpt --gpt tiny --moe-every 3", "--moe-every");
  /* T must divide P_E */
  zl_expect_refused(4, "ch12_experts", "--model gpt --gpt tiny --moe 4 --ep 2 --tp 4", "--tp");
  /* and the heads (2) */
  zl_expect_refused(4, "ch12_experts", "--model gpt --gpt tiny --moe 4 --ep 4 --tp 4", "--tp");
  zl_expect_refused(4, "ch12_experts", "--model gpt --gpt tiny --moe 4 --ep 4 --tp 2 --eval-every 2",
                    "--eval-every");
  /* --pp: what does not compose yet */
  zl_expect_refused(4, "ch12_experts", "--model gpt --gpt tiny --moe 4 --ep 2 --tp 2 --pp 2", "--tp");
  zl_expect_refused(2, "ch12_experts", "--model gpt --gpt tiny --moe 4 --ep 2 --pp 2", "--pp");
  zl_expect_refused(2, "ch12_experts", "--model gpt --gpt tiny --moe 4 --pp 2 --aux-loss-scope global",
                    "--aux-loss-scope");
}

/* ---- MoE inside chapter 07's pipeline (--pp) ----------------------------------------------------------
 * The tiny GPT's 4 units in 2 stages, 4 micro-batches of 2 samples. --ep 1: each stage runs 1 rank
 * --accum 4's kernels on the same shapes in the same order (every micro-batch's routing kept from its
 * forward to its backward while others are in flight: moe.c's routes), so the weights are bitwise
 * those of 1 rank. --ep 2 on 4 ranks: each EP rank routes its own sample of a micro-batch (1 rank
 * --accum 8: the same tokens per capacity and f_e); the experts see both EP ranks' rows in one GEMM,
 * as EP 2 without stages: within MOE_TOL of max|w| (notes/design.md, "Bits or a tolerance"), the same
 * drops, the all-to-all bytes = the formula. */
#define MOE_PP "--moe 4 --topk 2 --pp 2 --micro-batches 4"
static void expect_pp(const char *what, const zl_out_t *r, const zl_out_t *one, double tol) {
  cr_assert_eq(r->n, one->n, "%s exported %lld weights, 1 rank %lld (the full model)", what, (long long)r->n,
               (long long)one->n);
  double gap = tol > 0 ? zl_expect_close_norm(what, r->params, one->params, one->n, tol) : 0;
  if (tol == 0) zl_expect_floats(what, r->params, one->params, one->n, 0);
  double d1 = zl_json_num(one->json, "moe_drop_rate"), d2 = zl_json_num(r->json, "moe_drop_rate");
  cr_assert_eq(d1, d2, "%s dropped %.17g of the choices, 1 rank %.17g (the same routing)", what, d2, d1);
  double x1 = zl_json_num(one->json, "moe_aux_loss_last"), x2 = zl_json_num(r->json, "moe_aux_loss_last");
  cr_assert(zl_rel(x2, x1) <= 1e-6, "%s: aux loss %.9g (summed over the stages' blocks), 1 rank %.9g", what,
            x2, x1);
  if (tol == 0) zl_expect_same_losses(what, r->json, one->json); /* the last stage's, over every sample */
  cr_log_info("%s against 1 rank: largest |difference| / max|w| %.3g (%s)", what, gap,
              tol > 0 ? "tolerance 1e-5" : "bitwise");
}

Test(ch12_moe, pp_equals_one_rank) {
  const char *cf = "--capacity-factor 1.0 --aux-loss-coeff 0.01";
  char a[200];
  snprintf(a, sizeof a, "--moe 4 --topk 2 --accum 4 %s", cf);
  zl_out_t one = MOE_LAUNCH(1, "moe", "ppone", a);
  snprintf(a, sizeof a, MOE_PP " --schedule 1f1b %s", cf);
  zl_out_t pp = MOE_LAUNCH(2, "moe", "pp1f1b", a);
  expect_pp("MoE --pp 2 (1F1B)", &pp, &one, 0);
  snprintf(a, sizeof a, "--moe 4 --topk 2 --accum 8 %s", cf);
  zl_out_t one8 = MOE_LAUNCH(1, "moe", "ppone8", a);
  snprintf(a, sizeof a, MOE_PP " --schedule 1f1b --ep 2 %s", cf);
  zl_out_t ep = MOE_LAUNCH(4, "moe", "ep2pp2", a);
  double m = zl_json_num(ep.json, "moe_a2a_bytes_per_step"),
         f = zl_json_num(ep.json, "moe_a2a_bytes_formula");
  cr_assert(m > 0 && m == f, "EP 2 x PP 2: all-to-all bytes per step %.17g measured, formula %.17g", m, f);
  expect_pp("EP 2 x PP 2 (1F1B)", &ep, &one8, MOE_TOL);
  zl_out_free(&one), zl_out_free(&one8), zl_out_free(&pp), zl_out_free(&ep);
}

/* Every other schedule of chapter 07 around the MoE GPT, dropless: interleaved (2 chunks per stage),
 * the zero-bubble pair (a MoE block's backward stays whole in its B: moe_model.c) and DualPipeV (its V
 * of 4 chunks) — with --ep 1 bitwise 1 rank, zb-h1 and dualpipev with --ep 2 too (4 ranks) within
 * MOE_TOL; and dualpipev --ep 2 with --fb-overlap (07d: each F&B's halves as two coroutines, each
 * run while the other's all-to-alls travel, common/train/loop_fb.c) bitwise the pairs one after the
 * other, with both directions' hidden compute measured. */
Test(ch12_moe, pp_schedules_equal_one_rank) {
  zl_out_t one = MOE_LAUNCH(1, "moe", "ppsone", "--moe 4 --topk 2 --accum 4"),
           one8 = MOE_LAUNCH(1, "moe", "ppsone8", "--moe 4 --topk 2 --accum 8");
  const char *sch[] = {"interleaved --virtual-stages 2", "zb-h1", "zb-h2", "dualpipev"};
  for (int i = 0; i < 4; i++) {
    char a[160], name[32], what[96];
    snprintf(a, sizeof a, MOE_PP " --schedule %s", sch[i]);
    snprintf(name, sizeof name, "pps%d", i);
    zl_out_t r = MOE_LAUNCH(2, "moe", name, a);
    snprintf(what, sizeof what, "MoE --pp 2 --schedule %s", sch[i]);
    expect_pp(what, &r, &one, 0);
    zl_out_free(&r);
    if (i != 1 && i != 3) continue;
    snprintf(a, sizeof a, MOE_PP " --ep 2 --schedule %s", sch[i]);
    snprintf(name, sizeof name, "ppse%d", i);
    r = MOE_LAUNCH(4, "moe", name, a);
    snprintf(what, sizeof what, "EP 2 x PP 2 --schedule %s", sch[i]);
    expect_pp(what, &r, &one8, MOE_TOL);
    if (i == 3) { /* the overlapped F&B: the same kernels in the same order per tensor */
      snprintf(a, sizeof a, MOE_PP " --ep 2 --schedule dualpipev --fb-overlap");
      zl_out_t o = MOE_LAUNCH(4, "moe", "ppsefb", a);
      expect_pp("EP 2 x PP 2 dualpipev --fb-overlap = without", &o, &r, 0);
      double hid = zl_json_num(o.json, "fb_hidden_ms_per_step");
      cr_assert(hid > 0, "--fb-overlap: %g ms of backward run under the all-to-alls (stage 1's forwards have "
                "MoE blocks)", hid);
      double fhid = zl_json_num(o.json, "fb_f_hidden_ms_per_step"),
             fp = zl_json_num(o.json, "fb_f_pieces_all_ranks_per_step");
      cr_assert(fhid > 0 && fp > 0, "--fb-overlap, the other way: %g ms of forward in %g pieces run under "
                "the backward's all-to-alls", fhid, fp);
      zl_out_free(&o);
    }
    zl_out_free(&r);
  }
  zl_out_free(&one), zl_out_free(&one8);
}

/* Every step's loss of got within tol relative of want's (the half precisions round the weights after
 * every step: the losses, not the weights, are compared). */
static void expect_losses_close(const char *what, const char *got, const char *want, double tol) {
  double a[64], b[64];
  int na = zl_json_all(zl_json_find(got, "steps"), "loss", a, 64),
      nb = zl_json_all(zl_json_find(want, "steps"), "loss", b, 64);
  cr_assert(na == nb && na >= 2, "%s: %d losses against %d", what, na, nb);
  for (int i = 0; i < na; i++)
    cr_assert(zl_rel(a[i], b[i]) <= tol, "%s: loss of step %d %.9g, 1 rank %.9g (beyond %g relative)", what,
              i, a[i], b[i], tol);
}

/* DeepSeekMoE's shape on the tiny GPT: fine-grained experts (8 of width F = 2C, half the dense MLP's, k
 * = 4: the same active parameters as 4 of 4C with k = 2), one shared expert every token goes through,
 * the gates renormalised over the k chosen. EP 2 on 2 ranks against 1 rank --accum 2: the weights
 * within MOE_TOL of max|w| (the experts run other row counts), the same drops (dropless: none), the
 * all-to-all bytes = the formula; the exported Ψ and the expert/dense states = the counts of gpt.h
 * (X = 2FC + F + C per expert; the shared expert with the dense part). */
#define MOE_FINE "--moe 8 --topk 4 --expert-ffn 64 --shared-experts 1 --gate-norm topk"
Test(ch12_moe, fine_grained_shared_experts_ep_equals_one_rank) {
  zl_out_t one = MOE_LAUNCH(1, "moe", "fine1", MOE_FINE " --accum 2"),
           ep = MOE_LAUNCH(2, "moe", "fine2", MOE_FINE " --ep 2");
  double C = 32, L = 2, S = 16, V = 256, E = 8, k = 4, F = 64, X = 2 * F * C + F + C;
  double dense = 2 * V * C + S * C + 2 * C + L * (4 * C * C + 8 * C + E * C + X), total = dense + L * E * X;
  cr_assert_eq((double)one.n, total, "1 rank exported %lld weights; Ψ total by gpt.h's count %.17g",
               (long long)one.n, total);
  cr_assert_eq(zl_json_num(one.json, "moe_params_active"), dense + L * k * X,
               "Ψ active %.17g, expected %.17g", zl_json_num(one.json, "moe_params_active"),
               dense + L * k * X);
  double gap = zl_expect_close_norm("EP 2 (fine-grained + shared) against 1 rank --accum 2", ep.params,
                                    one.params, one.n, MOE_TOL);
  double m = zl_json_num(ep.json, "moe_a2a_bytes_per_step"),
         f = zl_json_num(ep.json, "moe_a2a_bytes_formula");
  cr_assert(m > 0 && m == f, "fine-grained EP 2: all-to-all bytes per step %.17g measured, formula %.17g", m,
            f);
  expect_states_by_kind("fine-grained EP 2", ep.json);
  char c0p[320];
  zl_tmppath(c0p, sizeof c0p, "moe", "c0_fine.json");
  zl_run_ok(0, 30, "ch00_memory --expert-ffn --shared-experts",
            "%s/ch00_memory --layers 2 --hidden 32 --heads 2 --seq 16 --experts 8 --topk 4 --expert-ffn 64 "
            "--shared-experts 1 --ranks 2 --ep 2 --precision fp32 --json %s",
            ZL_BIN, c0p);
  char *c0 = zl_read_file(c0p, NULL);
  const char *c0m = c0 ? zl_json_find(c0, "moe") : NULL;
  cr_assert(c0m, "ch00_memory --experts 8 --expert-ffn 64 wrote no \"moe\" object");
  cr_assert(zl_json_num(c0m, "params_total") == total &&
                zl_json_num(c0m, "params_active") == dense + L * k * X,
            "ch00_memory's Ψ total %.17g, active %.17g; the program's %.17g, %.17g",
            zl_json_num(c0m, "params_total"), zl_json_num(c0m, "params_active"), total, dense + L * k * X);
  free(c0);
  cr_log_info("fine-grained + shared EP 2 against 1 rank: largest |difference| / max|w| %.3g (tolerance %g)",
              gap, MOE_TOL);
  zl_out_free(&one), zl_out_free(&ep);
}

/* --gate-norm topk with k = E: the k gates already sum to 1 (the softmax), so the renormalisation changes
 * nothing but rounding, and its gradient term (a shift of every dp by one constant) is cancelled by the
 * softmax's backward: the run equals --gate-norm none within rounding, step after step. */
Test(ch12_moe, gate_norm_over_every_expert_changes_nothing) {
  zl_out_t a = MOE_LAUNCH(1, "moe", "gn_none", "--moe 4 --topk 4 --gate-norm none"),
           b = MOE_LAUNCH(1, "moe", "gn_topk", "--moe 4 --topk 4 --gate-norm topk");
  expect_losses_close("--gate-norm topk with k = E against none", b.json, a.json, 1e-6);
  zl_expect_close_norm("--gate-norm topk with k = E against none: weights", b.params, a.params, a.n, MOE_TOL);
  zl_out_free(&a), zl_out_free(&b);
}

/* A checkpoint knows its experts (--moe E --moe-every m in its manifest): resuming it with other experts, or
 * in a dense program, or a dense one here, is refused in one line before anything runs; zl_ckpt convert
 * refuses it too (it knows the dense models' splits only). */
Test(ch12_moe, checkpoint_knows_its_experts) {
  char dir[256], ckm[300], ckd[300], args[1024];
  zl_tmpdir(dir, sizeof dir, "moeckm");
  snprintf(ckm, sizeof ckm, "%s/moe", dir), snprintf(ckd, sizeof ckd, "%s/dense", dir);
  zl_run_ok(1, 60, "MoE, checkpoint at step 2",
            "%s/ch12_experts " MOE_NOSTEPS " --batch 8 --moe 4 --topk 2 --steps 2 "
            "--save-every 2 --ckpt %s --quiet",
            ZL_BIN, ckm);
  zl_run_ok(1, 60, "dense, checkpoint at step 2",
            "%s/ch02_ddp " MOE_NOSTEPS " --batch 8 --steps 2 --save-every 2 --ckpt %s "
            "--quiet",
            ZL_BIN, ckd);
  snprintf(args, sizeof args, MOE_NOSTEPS " --batch 8 --steps 4 --moe 8 --topk 2 --resume %s", ckm);
  zl_expect_refused(1, "ch12_experts", args,
                    "saved with --moe 4 --moe-every 1, this run has --moe 8 --moe-every 1");
  snprintf(args, sizeof args, MOE_NOSTEPS " --batch 8 --steps 4 --moe 4 --topk 2 --expert-ffn 64 --resume %s",
           ckm);
  zl_expect_refused(1, "ch12_experts", args,
                    "saved with --expert-ffn 0 --shared-experts 0, this run has --expert-ffn 64 "
                    "--shared-experts 0");
  snprintf(args, sizeof args, MOE_NOSTEPS " --batch 8 --steps 4 --resume %s", ckm);
  zl_expect_refused(1, "ch02_ddp", args, "saved with --moe 4 --moe-every 1, this run has a dense model");
  snprintf(args, sizeof args, MOE_NOSTEPS " --batch 8 --steps 4 --moe 4 --topk 2 --resume %s", ckd);
  zl_expect_refused(1, "ch12_experts", args, "saved with a dense model (no experts), this run has --moe 4");
  char *out = NULL;
  int rc = zl_run(0, 30, &out, "%s/zl_ckpt convert %s %s/gf", ZL_BIN, ckm, dir);
  cr_assert(rc == 1 && out && strstr(out, "a Mixture-of-Experts checkpoint (--moe 4"),
            "zl_ckpt convert of a MoE checkpoint: "
            "exit %d, expected 1 and a line naming it:\n%s",
            rc, out ? out : "(no output)");
  free(out);
}

/* ---- the sweep (make test-long) ------------------------------------------------------------------ */
/* EP 2 x D 2 with every strategy on the data dimension, and EP 2 with --accum 2, --moe-every 2,
 * --recompute in bf16 and in fp16, each against 1 rank with --accum 4 (the same micro-batches): the
 * weights within 1e-5 of max|w| in fp32; bf16 and fp16 round the weights to 8 and 11 bits after every
 * step, so there the losses within 1e-4 relative. */
Test(ch12_moe_long, ep_with_every_strategy) {
  zl_out_t one = MOE_LAUNCH16(1, "moel", "one", "--moe 4 --topk 2 --accum 4");
  for (int z = 0; z <= 3; z++) {
    char args[96], name[32], what[96];
    snprintf(args, sizeof args, "--moe 4 --topk 2 --ep 2 --zero %d", z);
    snprintf(name, sizeof name, "ep2z%d", z);
    zl_out_t r = MOE_LAUNCH16(4, "moel", name, args);
    snprintf(what, sizeof what, "EP 2 x D 2 --zero %d against 1 rank --accum 4", z);
    zl_expect_close_norm(what, r.params, one.params, one.n, MOE_TOL);
    expect_states_by_kind(what, r.json);
    expect_ch00_states(what, r.json, 4, "--ep 2", z);
    zl_out_free(&r);
  }
  zl_out_free(&one);
}

/* EP 2 x PP 2 x DP 2 on 8 ranks (rank = (dp·2 + stage)·2 + ep): every stage's EP group, its replica's,
 * 1F1B and zb-h1, DDP and ZeRO-1, and DualPipeV (07d: its V of 4 chunks) with ZeRO-3 on the data
 * dimension, against 1 rank --accum 16 within MOE_TOL. */
Test(ch12_moe_long, ep_pp_dp_eight_ranks) {
  /* each rank routes 1 sample of a micro-batch: 1 rank --accum 16 (the same tokens per f_e) */
  zl_out_t one = MOE_LAUNCH16(1, "moel", "ppone", "--moe 4 --topk 2 --accum 16");
  const char *v[] = {"--schedule 1f1b --zero 0", "--schedule 1f1b --zero 1", "--schedule zb-h1 --zero 1",
                     "--schedule dualpipev --zero 3"};
  for (int i = 0; i < 4; i++) {
    char a[160], name[32], what[96];
    snprintf(a, sizeof a, "--moe 4 --topk 2 --ep 2 --pp 2 --micro-batches 4 %s", v[i]);
    snprintf(name, sizeof name, "eppd%d", i);
    zl_out_t r = MOE_LAUNCH16(8, "moel", name, a);
    snprintf(what, sizeof what, "EP 2 x PP 2 x DP 2 %s against 1 rank --accum 16", v[i]);
    cr_assert_eq(r.n, one.n, "%s: %lld weights exported, 1 rank %lld", what, (long long)r.n,
                 (long long)one.n);
    double gap = zl_expect_close_norm(what, r.params, one.params, one.n, MOE_TOL);
    expect_losses_close(what, r.json, one.json, 1e-5);
    cr_log_info("%s: largest |difference| / max|w| %.3g (tolerance %g)", what, gap, MOE_TOL);
    zl_out_free(&r);
  }
  zl_out_free(&one);
}

/* The two groups with --accum 2 (moe_model.c's no_sync: one reduction per unit and step, from the full
 * gradient) under ZeRO-1/2/3, EP 2 x D 2: against 1 rank --accum 8 (rank (d, q)'s micro-batch k is 1
 * rank's 4k + 2d + q) within MOE_TOL, and the bytes each rank sends = the formula (ZeRO-3: 2M gathers
 * and one reduce-scatter per step, M = 2). */
Test(ch12_moe_long, two_groups_accum_every_zero) {
  zl_out_t one = MOE_LAUNCH16(1, "moel", "tgaone", "--moe 4 --topk 2 --accum 8");
  for (int z = 1; z <= 3; z++) {
    char args[96], name[32], what[96];
    snprintf(args, sizeof args, "--moe 4 --topk 2 --ep 2 --accum 2 --zero %d", z);
    snprintf(name, sizeof name, "tga%d", z);
    zl_out_t r = MOE_LAUNCH16(4, "moel", name, args);
    snprintf(what, sizeof what, "EP 2 x D 2 --accum 2 --zero %d (two groups) against 1 rank --accum 8", z);
    zl_expect_close_norm(what, r.params, one.params, one.n, MOE_TOL);
    const char *c = zl_json_find(r.json, "comm");
    double got = zl_json_num(c, "bytes_per_step_per_rank");
    double f = zl_json_num(c, "formula_bytes_per_step_per_rank");
    cr_assert(got == f && f > 0, "%s: %.1f bytes per rank and step, formula %.1f", what, got, f);
    expect_states_by_kind(what, r.json);
    zl_out_free(&r);
  }
  zl_out_free(&one);
}

Test(ch12_moe_long, ep_half_precision_recompute) {
  const char *prec[2] = {"bf16", "fp16"};
  for (int p = 0; p < 2; p++) {
    char a1[160], a2[160], n1[16], n2[16];
    snprintf(a1, sizeof a1, "--moe 4 --topk 2 --moe-every 2 --recompute --precision %s --accum 4", prec[p]);
    snprintf(a2, sizeof a2, "--moe 4 --topk 2 --moe-every 2 --recompute --precision %s --ep 2 --accum 2",
             prec[p]);
    snprintf(n1, sizeof n1, "one%d", p), snprintf(n2, sizeof n2, "ep%d", p);
    zl_out_t one = MOE_LAUNCH16(1, "moel", n1, a1), ep = MOE_LAUNCH16(2, "moel", n2, a2);
    char what[64];
    snprintf(what, sizeof what, "%s: EP 2 --accum 2 against 1 rank --accum 4", prec[p]);
    expect_losses_close(what, ep.json, one.json, 1e-4);
    zl_out_free(&one), zl_out_free(&ep);
  }
}

/* TP 2 inside EP 4 with D 2 (8 ranks) and every strategy on the data dimension, against 1 rank with
 * --accum 8; and in bf16 / fp16 with --recompute, --moe-every 2 and --accum 2 (4 ranks) against 1 rank
 * --accum 8: fp32 within 1e-5 of max|w|, the half precisions' losses within 1e-4 relative. */
Test(ch12_moe_long, tp_inside_ep_every_strategy) {
  zl_out_t one = MOE_LAUNCH16(1, "moel", "tone", "--moe 4 --topk 2 --accum 8 --capacity-factor 1.25");
  for (int z = 0; z <= 3; z++) {
    char args[128], name[32], what[96];
    snprintf(args, sizeof args, "--moe 4 --topk 2 --ep 4 --tp 2 --capacity-factor 1.25 --zero %d", z);
    snprintf(name, sizeof name, "tpz%d", z);
    zl_out_t r = MOE_LAUNCH16(8, "moel", name, args);
    snprintf(what, sizeof what, "TP 2 x EP 4 x D 2 --zero %d against 1 rank --accum 8", z);
    zl_expect_close_norm(what, r.params, one.params, one.n, MOE_TOL);
    cr_assert_eq(zl_json_num(r.json, "moe_drop_rate"), zl_json_num(one.json, "moe_drop_rate"),
                 "%s: drop rates differ", what);
    expect_states_by_kind(what, r.json);
    expect_ch00_states(what, r.json, 8, "--ep 4 --tp 2", z);
    zl_out_free(&r);
  }
  zl_out_free(&one);
  const char *prec[2] = {"bf16", "fp16"};
  for (int p = 0; p < 2; p++) {
    char a1[160], a2[160], n1[16], n2[16];
    snprintf(a1, sizeof a1, "--moe 4 --topk 2 --moe-every 2 --recompute --precision %s --accum 8", prec[p]);
    snprintf(a2, sizeof a2,
             "--moe 4 --topk 2 --moe-every 2 --recompute --precision %s --ep 4 --tp 2 --accum 2", prec[p]);
    snprintf(n1, sizeof n1, "tone%d", p), snprintf(n2, sizeof n2, "tph%d", p);
    zl_out_t o = MOE_LAUNCH16(1, "moel", n1, a1), r = MOE_LAUNCH16(4, "moel", n2, a2);
    char what[64];
    snprintf(what, sizeof what, "%s: TP 2 x EP 4 --accum 2 against 1 rank --accum 8", prec[p]);
    expect_losses_close(what, r.json, o.json, 1e-4);
    zl_out_free(&o), zl_out_free(&r);
  }
}

/* Checkpoints across grids, with --aux-loss-scope global (f_e over every rank's micro-batch: the same loss
 * on any layout of the same --accum): 1 rank's and `layout`'s (np_a ranks, named `name`) at step 2; `layout`
 * resumed from its own = its straight run bit for bit, from 1 rank's within 1e-5 of max|w| (its first steps
 * ran other GEMM shapes); `wider` (np_b ranks) from `layout`'s within 1e-5 of its straight run. ck: where
 * `layout`'s checkpoint is (the caller's refusals). */
#define MOE_CK_GLOBAL "--moe 4 --topk 2 --aux-loss-scope global"
static void expect_resume_across_grids(const char *tag, const char *name, const char *layout, int np_a,
                                       const char *wider, int np_b, char *ck, size_t nck) {
  char dir[256], ck1[300], args[2048], sa[200], sb[200], ra[600], rb[600], rc[600], what[200];
  zl_tmpdir(dir, sizeof dir, tag);
  snprintf(ck1, sizeof ck1, "%s/one", dir), snprintf(ck, nck, "%s/layout", dir);
  snprintf(args, sizeof args,
           "%s/ch12_experts " MOE_NOSTEPS " --batch 16 " MOE_CK_GLOBAL " --steps 2 --save-every 2 --ckpt %s "
           "--quiet",
           ZL_BIN, ck1);
  zl_run_ok(1, 60, "1 rank, checkpoint at step 2", "%s", args);
  snprintf(args, sizeof args,
           "%s/ch12_experts " MOE_NOSTEPS " --batch 16 " MOE_CK_GLOBAL " --steps 2 --save-every 2 %s "
           "--ckpt %s --quiet",
           ZL_BIN, layout, ck);
  snprintf(what, sizeof what, "%s, checkpoint at step 2", name);
  zl_run_ok(np_a, 60, what, "%s", args);
  snprintf(sa, sizeof sa, MOE_CK_GLOBAL " %s", layout), snprintf(sb, sizeof sb, MOE_CK_GLOBAL " %s", wider);
  snprintf(ra, sizeof ra, "%s --resume %s", sa, ck1), snprintf(rb, sizeof rb, "%s --resume %s", sa, ck);
  snprintf(rc, sizeof rc, "%s --resume %s", sb, ck);
  zl_out_t straight_a = MOE_LAUNCH16(np_a, tag, "straight_a", sa), same = MOE_LAUNCH16(np_a, tag, "same", rb);
  zl_out_t from1 = MOE_LAUNCH16(np_a, tag, "from1", ra);
  zl_out_t straight_b = MOE_LAUNCH16(np_b, tag, "straight_b", sb),
           from_a = MOE_LAUNCH16(np_b, tag, "from_a", rc);
  snprintf(what, sizeof what, "%s resumed from its own checkpoint, against its straight run", name);
  zl_expect_floats(what, same.params, straight_a.params, straight_a.n, 0);
  snprintf(what, sizeof what, "%s resumed from 1 rank's checkpoint, against its straight run", name);
  zl_expect_close_norm(what, from1.params, straight_a.params, straight_a.n, MOE_TOL);
  snprintf(what, sizeof what, "%s resumed from %s's checkpoint, against its straight run", wider, name);
  zl_expect_close_norm(what, from_a.params, straight_b.params, straight_b.n, MOE_TOL);
  zl_out_free(&straight_a), zl_out_free(&same), zl_out_free(&from1), zl_out_free(&straight_b),
      zl_out_free(&from_a);
}

/* EP 2 on 2 ranks, and EP 2 x D 2 on 4 from its checkpoint. */
Test(ch12_moe_long, checkpoints_resume_across_grids) {
  char ck[300];
  expect_resume_across_grids("moeck", "EP 2", "--ep 2", 2, "--ep 2", 4, ck, sizeof ck);
}

/* --sp inside EP: TP 2 + SP x EP 4 x D 2 (8 ranks) with ZeRO-1 and ZeRO-3, dropless, global aux scope,
 * against 1 rank with the whole batch (1e-5 of max|w|); in bf16 with --recompute, --moe-every 2 and
 * --accum 2 against 1 rank --accum 2, the losses within 1e-4 relative. (A capacity is per rank and
 * micro-batch: with SP a rank's tokens are positions, not samples, so its drops differ from 1 rank's.) */
Test(ch12_moe_long, tp_sp_inside_ep) {
  const char *g = "--moe 4 --topk 2 --aux-loss-scope global";
  char a[200];
  zl_out_t one = MOE_LAUNCH16(1, "moesp", "one", g);
  for (int z = 1; z <= 3; z += 2) {
    char name[16], what[96];
    snprintf(a, sizeof a, "%s --ep 4 --tp 2 --sp --zero %d", g, z), snprintf(name, sizeof name, "z%d", z);
    zl_out_t r = MOE_LAUNCH16(8, "moesp", name, a);
    snprintf(what, sizeof what, "TP 2 + SP x EP 4 x D 2 --zero %d against 1 rank", z);
    zl_expect_close_norm(what, r.params, one.params, one.n, MOE_TOL);
    expect_states_by_kind(what, r.json);
    zl_out_free(&r);
  }
  zl_out_free(&one);
  char a1[200];
  snprintf(a1, sizeof a1, "%s --moe-every 2 --recompute --precision bf16 --accum 2", g);
  snprintf(a, sizeof a, "%s --moe-every 2 --recompute --precision bf16 --accum 2 --ep 4 --tp 2 --sp", g);
  zl_out_t o = MOE_LAUNCH16(1, "moesp", "bf1", a1), r = MOE_LAUNCH16(4, "moesp", "bf4", a);
  expect_losses_close("bf16: TP 2 + SP x EP 4 --accum 2 against 1 rank --accum 2", r.json, o.json, 1e-4);
  zl_out_free(&o), zl_out_free(&r);
}

/* The same with --tp 2 inside EP 4 (solutions/ep_tp.c): its checkpoint resumes on its grid bit for bit
 * and on TP 2 x EP 4 x D 2 with ZeRO-1 within 1e-5 of max|w|; 1 rank's resumes on TP 2 x EP 4 within
 * 1e-5; EP 4 without --tp refuses it (another local layout), naming the flag. */
Test(ch12_moe_long, tp_inside_ep_checkpoints) {
  char ck[300], refuse[600];
  expect_resume_across_grids("moetck", "TP 2 x EP 4", "--ep 4 --tp 2", 4, "--ep 4 --tp 2 --zero 1", 8, ck,
                             sizeof ck);
  snprintf(refuse, sizeof refuse, MOE_NOSTEPS " --batch 16 --steps 4 " MOE_CK_GLOBAL " --ep 4 --resume %s",
           ck);
  zl_expect_refused(4, "ch12_experts", refuse, "saved with --tp 2 inside each EP group");
}

/* Chapter 00's calculator knows the experts: Ψ total = the weights ch12_experts exports (every expert),
 * both = the count written here from the shape; active = dense + k experts per MoE block. */
Test(ch12_moe, ch00_counts_total_and_active) {
  char dir[256], json[320];
  zl_tmpdir(dir, sizeof dir, "moe00");
  snprintf(json, sizeof json, "%s/c0.json", dir);
  zl_run_ok(0, 30, "ch00_memory --experts",
            "%s/ch00_memory --layers 2 --hidden 32 --heads 2 --seq 16 --experts 4 "
            "--topk 2 --ranks 4 --ep 2 --precision fp32 --json %s",
            ZL_BIN, json);
  char *c0 = zl_read_file(json, NULL);
  cr_assert(c0, "no --json from ch00_memory");
  const char *moe = zl_json_find(c0, "moe");
  cr_assert(moe, "ch00_memory --experts wrote no \"moe\" object:\n%s", c0);
  double C = 32, L = 2, S = 16, V = 256, E = 4, k = 2, X = 8 * C * C + 5 * C;
  double dense = 2 * V * C + S * C + 2 * C + L * (4 * C * C + 8 * C + E * C), total = dense + L * E * X;
  cr_assert_eq(zl_json_num(moe, "params_total"), total, "Ψ total %.17g, expected %.17g",
               zl_json_num(moe, "params_total"), total);
  cr_assert_eq(zl_json_num(moe, "params_active"), dense + L * k * X, "Ψ active %.17g, expected %.17g",
               zl_json_num(moe, "params_active"), dense + L * k * X);
  zl_out_t r = MOE_LAUNCH(1, "moe00", "export", "--moe 4 --topk 2");
  cr_assert_eq((double)r.n, total, "ch12_experts exported %lld weights, ch00 counts %.17g", (long long)r.n,
               total);
  zl_out_free(&r);
  free(c0);
}
