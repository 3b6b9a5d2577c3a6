/* test_compress_long.c — chapter 13's make test-long contracts (suite ch13_compress_long,
 * notes/13-compression.md): a compressed run learns as well as the uncompressed one, within a band
 * the uncompressed run's own seed spread sets, and ZeRO++'s bytes across a real (emulated) link
 * equal the formula.
 *   1. loss bands: the GPT (--gpt tiny, global batch 8, fp32, 200 steps, seeds 1, 2, 3) — PowerSGD
 *      (ch13_compress --compress powersgd:4) and 1-bit Adam (--optimizer onebit-adam --warmup-steps
 *      50) against ch13_compress (chapter 02's bucketed DDP, AdamW) on 2 ranks; ZeRO++ (ch05_zero3
 *      --qwz --hpz --qgz) against ch05_zero3 on 4 ranks over ZL_NODE_OF_RANK=0,0,1,1.
 *      The band, as common/scripts/bench_compress.py computes it: the reference's final losses over
 *      the seeds span [lo, hi]; spread = hi − lo, the loss one seed moves by with nothing compressed;
 *      the band is [lo − spread, hi + spread] (the reference's own seed-to-seed spread on both sides),
 *      and the mean of the method's final losses over the same seeds must lie in it. Measured
 *      (2 cores): reference 2.5276, 2.7966, 2.6331, band [2.2585, 3.0656]; PowerSGD mean 2.976,
 *      1-bit Adam 2.729, ZeRO++ 2.654 (its reference on 4 ranks gives the same three losses). Each
 *      method also sends fewer bytes than its reference and ends on other losses (it did compress).
 *   2. the emulated link: ch05_zero3 --qwz --hpz --qgz on 2 emulated nodes of 2 ranks (zlrun --nodes 2
 *      --link-mbit 100, common/scripts/cluster.sh; root only, else skipped naming why), the MLP of
 *      test_zeropp.c: every rank's bytes across nodes = the formula computed here from the units (and
 *      = the report's), and each node's eth0 sent at least its ranks' counted bytes. No timing.
 * About 30 s on 2 cores. */
#include "zl_test.h" // zl_run, zl_read_file, zl_json_*, zl_tmpdir
#include "qgz.h"     // qgz_words
#include "qwz.h"     // qwz_words

#define GPT "--model gpt --gpt tiny --batch 8 --quiet --steps 200 "
#define SEEDS 3

typedef struct seeds {
  double loss[SEEDS], mean, bytes;
} seeds_t;

/* The final losses of `prog args` over seeds 1..SEEDS on np ranks (env before it), their mean, and
 * the bytes a rank sends per step. */
static seeds_t over_seeds(int np, const char *env, const char *prog, const char *args) {
  seeds_t s = {0};
  char dir[256], j[512];
  zl_tmpdir(dir, sizeof dir, "compress_long");
  for (int k = 0; k < SEEDS; k++) {
    char *out = NULL;
    snprintf(j, sizeof j, "%s/%s_%d.json", dir, prog, k);
    int rc =
        zl_run(np, 120, &out, "%s %s/%s " GPT "--seed %d %s --json %s", env, ZL_BIN, prog, k + 1, args, j);
    cr_assert_eq(rc, 0, "%s %s --seed %d: exit %d:\n%s", prog, args, k + 1, rc, out);
    free(out);
    char *text = zl_read_file(j, NULL);
    cr_assert(text, "%s %s: no --json file %s", prog, args, j);
    s.loss[k] = zl_json_num(text, "final_loss");
    s.bytes = zl_json_num(zl_json_find(text, "comm"), "bytes_per_step_per_rank");
    s.mean += s.loss[k] / SEEDS;
    free(text);
  }
  return s;
}

static void expect_within_band(const char *name, const seeds_t *got, const seeds_t *ref) {
  double lo = ref->loss[0], hi = ref->loss[0];
  for (int k = 1; k < SEEDS; k++) lo = fmin(lo, ref->loss[k]), hi = fmax(hi, ref->loss[k]);
  double spread = hi - lo;
  cr_expect(spread > 0, "%s: the reference's seeds give one loss %.6f (no spread to set a band)", name, lo);
  cr_expect(
      got->mean >= lo - spread && got->mean <= hi + spread,
      "%s: mean final loss %.6f (%.6f, %.6f, %.6f) outside the band [%.6f, %.6f] (reference %.6f, %.6f, "
      "%.6f)",
      name, got->mean, got->loss[0], got->loss[1], got->loss[2], lo - spread, hi + spread, ref->loss[0],
      ref->loss[1], ref->loss[2]);
  cr_expect(got->bytes < ref->bytes, "%s: %.0f bytes/step/rank, not fewer than the reference's %.0f", name,
            got->bytes, ref->bytes);
  cr_expect(memcmp(got->loss, ref->loss, sizeof got->loss) != 0, "%s: the reference's losses exactly", name);
}

Test(ch13_compress_long, ddp_codes_within_the_seed_band, .timeout = 240) {
  seeds_t ddp = over_seeds(2, "", "ch13_compress", "");
  seeds_t psgd = over_seeds(2, "", "ch13_compress", "--compress powersgd:4");
  seeds_t onebit = over_seeds(2, "", "ch13_compress", "--optimizer onebit-adam --warmup-steps 50");
  expect_within_band("PowerSGD rank 4", &psgd, &ddp);
  expect_within_band("1-bit Adam (warm-up 50)", &onebit, &ddp);
}

Test(ch13_compress_long, zeropp_within_the_seed_band, .timeout = 240) {
  const char *env = "env ZL_NODE_OF_RANK=0,0,1,1";
  seeds_t zero3 = over_seeds(4, env, "ch05_zero3", "");
  seeds_t zeropp = over_seeds(4, env, "ch05_zero3", "--qwz --hpz --qgz");
  expect_within_band("ZeRO++ (qwZ + hpZ + qgZ)", &zeropp, &zero3);
}

/* ---- the emulated link (root) ---------------------------------------------------------------- */

/* Bytes across nodes per step of rank r (0..3), nodes {0,0,1,1}, for qwZ + hpZ + qgZ on the MLP
 * 32 -> 64 -> 64 -> 64 -> 10 (units 2112, 4160, 4160, 650; N = 4, g = 2 per node, K = 2 nodes, blocks
 * of 32), as test_zeropp.c derives it: the forward's int8 gather a ring whose bytes cross on ranks 1
 * and 3, hpZ's backward gather and qgZ's hop 1 inside the node, qgZ's hop 2 all across. */
static double inter_formula(int r) {
  const int64_t units[] = {2112, 4160, 4160, 650};
  int N = 4, K = 2, QB = 32;
  double fwd = 0, hop2 = 0;
  for (int u = 0; u < 4; u++) {
    int64_t p = (units[u] + N - 1) / N;
    fwd += (N - 1.0) * qwz_words(p, QB) * 4;
    hop2 += (K - 1.0) * qgz_words(p, QB) * 4;
  }
  return (r % 2 ? fwd : 0) + hop2;
}

/* A cluster name and a /24 of this test's own (zl_test.h: c<n>, 10.214.x, apart from test_nodes.c's
 * 10.212.x and bench_compress.py's 10.213.x), or the test skipped with cluster.sh's reason. */
static void own_cluster(char *name, size_t nn, char *subnet, size_t ns) {
  zl_need_cluster();
  zl_own_cluster('c', 214, name, nn, subnet, ns);
}

/* eth0's transmitted bytes in node i's namespace (−1 when it cannot be read). */
static double node_tx(const char *name, int i) {
  char *out = NULL;
  int rc =
      zl_run(0, 20, &out, "ip netns exec %s-node%d cat /sys/class/net/eth0/statistics/tx_bytes", name, i);
  double v = rc == 0 && out ? strtod(out, NULL) : -1;
  free(out);
  return v;
}

Test(ch13_compress_long, zeropp_bytes_across_an_emulated_link, .timeout = 120) {
  char name[16], subnet[32], env[128], dir[256], j[512], *out = NULL;
  own_cluster(name, sizeof name, subnet, sizeof subnet);
  snprintf(env, sizeof env, "env ZL_CLUSTER=%s ZL_CLUSTER_SUBNET=%s", name, subnet);
  int steps = 5;
  int rc = zl_run(0, 60, &out, "%s bash common/scripts/cluster.sh up 2 --link-mbit 100 --ttl 120", env);
  cr_assert_eq(rc, 0, "cluster.sh up 2 (%s): exit %d:\n%s", name, rc, out);
  free(out);
  double tx0[2] = {node_tx(name, 0), node_tx(name, 1)};
  zl_tmpdir(dir, sizeof dir, "compress_long");
  snprintf(j, sizeof j, "%s/link.json", dir);
  rc = zl_run(0, 90, &out,
              "%s bash common/scripts/zlrun --nodes 2 --link-mbit 100 4 %s/ch05_zero3 --layers 3 --hidden 64 "
              "--input 32 --classes 10 --batch 16 --seed 7 --lr 0.01 --steps %d --log-every 0 --quiet "
              "--prefetch 0 --qwz --hpz --qgz --quant-block 32 --timeout-s 60 --json %s",
              env, ZL_BIN, steps, j);
  double tx1[2] = {node_tx(name, 0), node_tx(name, 1)};
  zl_run(0, 30, NULL, "%s bash common/scripts/cluster.sh down", env);
  cr_assert_eq(rc, 0, "ZeRO++ on 2 emulated nodes: exit %d:\n%s", rc, out);
  free(out);
  char *text = zl_read_file(j, NULL);
  cr_assert(text, "no --json file %s", j);
  const char *nodes = zl_json_find(text, "nodes");
  double count = zl_json_num(nodes, "count");
  cr_assert_eq(count, 2, "the run saw %.0f nodes, expected 2", count);
  double mean = 0, counted[2] = {0, 0};
  for (int r = 0; r < 4; r++) {
    char key[32];
    snprintf(key, sizeof key, "{\"rank\": %d, \"node\"", r);
    const char *p = strstr(nodes, key);
    cr_assert(p, "nodes.per_rank has no rank %d:\n%s", r, text);
    double got = zl_json_num(p, "inter_bytes_per_step"), want = inter_formula(r),
           node = zl_json_num(p, "node");
    cr_expect(fabs(got - want) <= 1e-9 * (want + 1), "rank %d: %.1f bytes/step across the link, formula %.1f",
              r, got, want);
    cr_expect_eq(node, r / 2, "rank %d on node %.0f, expected %d", r, node, r / 2);
    mean += want / 4, counted[r / 2] += got * steps;
  }
  double got = zl_json_num(nodes, "inter_bytes_per_step_per_rank");
  double f = zl_json_num(nodes, "formula_inter_bytes_per_step_per_rank");
  cr_expect(fabs(got - mean) <= 1e-9 * mean, "%.1f bytes/step/rank across the link, formula %.1f", got, mean);
  cr_expect(fabs(f - mean) <= 1e-9 * mean, "the report's formula %.1f, expected %.1f", f, mean);
  for (int k = 0; k < 2; k++)
    cr_expect(tx0[k] >= 0 && tx1[k] - tx0[k] >= counted[k],
              "node %d's eth0 sent %.0f bytes, less than its ranks' counted %.0f", k, tx1[k] - tx0[k],
              counted[k]);
  free(text);
}
