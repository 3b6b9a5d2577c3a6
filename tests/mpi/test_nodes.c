/* test_nodes.c — chapter 09 (notes/09-nodes.md): the topology counters and the two-level
 * all-reduce on one box (suite ch09_nodes: the node map faked with ZL_NODE_OF_RANK, no root
 * needed), and the emulated nodes of common/scripts/cluster.sh (suite ch09_cluster: root only,
 * each test skips naming the reason elsewhere; CI runs as root). Each cluster test brings up its
 * own cluster name and /24 (from the test's pid), so two test runs on one machine do not meet. */
#include "zl_test.h" // zl_run, zl_read_file, zl_json_find, zl_tmppath
#include <time.h>    // time, difftime

/* Every number of the JSON array after `"key": [` at or after `from`; returns the count (a null
 * entry reads as −1). */
static int json_array_at(const char *from, const char *key, double *v, int max) {
  const char *p = zl_json_find(from, key);
  if (!p) return 0;
  p = strchr(p, '[');
  if (!p) return 0;
  int n = 0;
  p++;
  while (n < max && *p && *p != ']') {
    while (*p == ' ' || *p == ',') p++;
    if (strncmp(p, "null", 4) == 0) v[n++] = -1, p += 4;
    else {
      char *end;
      v[n++] = strtod(p, &end);
      if (end == p) break;
      p = end;
    }
  }
  return n;
}

/* The inter-node bytes the formulas give rank r of N ranks on the nodes node_of[] (K nodes of g
 * consecutive ranks), for one all-reduce of B bytes — computed here, independently of the program:
 * flat: the ring sends its 2(N−1)/N·B to rank r+1, across when r+1 is on another node;
 * two-level: every rank's all-reduce across the K nodes on B/g bytes, 2(K−1)/K·B/g. */
static double expected_inter(int two_level, const int *node_of, int N, int K, int g, int r, double B) {
  if (two_level) return 2.0 * (K - 1) / K * B / g;
  return node_of[(r + 1) % N] != node_of[r] ? 2.0 * (N - 1) / N * B : 0;
}

/* Run ch09_nodes with the node map `map` on N ranks, --impl impl, and check every row of its JSON:
 * first that no element is wrong (a failure names the row, the rank, the element, got and expected),
 * then that the measured inter-node bytes of every rank (the counters' ring model, and with --impl
 * ring the bytes the ring code really sent across) equal the formula — with every value right, a
 * count off is another pattern than the lesson's, and the message says "values right". */
static void check_counters(const char *map, const int *node_of, int N, int K, const char *impl) {
  char json[512], *out = NULL;
  zl_tmppath(json, sizeof json, "nodes", impl);
  int rc = zl_run(N, 120, &out,
                  "env ZL_NODE_OF_RANK=%s %s/ch09_nodes -b 48K -e 192K -f 4 -n 1 -w 0 --impl %s --json %s",
                  map, ZL_BIN, impl, json);
  char *text = zl_read_file(json, NULL);
  cr_assert(text, "ch09_nodes (ZL_NODE_OF_RANK=%s, --impl %s) exited %d and wrote no --json at %s:\n%s", map,
            impl, rc, json, out);
  int g = N / K, rows = 0;
  char off[512] = "";
  for (const char *p = zl_json_find(text, "results"); (p = zl_json_find(p, "bytes")); rows++) {
    double B = strtod(p + 1, NULL);
    const char *alg = zl_json_find(p, "algorithm");
    int two = alg && strncmp(alg, ": \"two_level\"", 13) == 0;
    const char *name = two ? "two-level (hier_all_reduce)" : "flat";
    double wrong = zl_json_num(p, "wrong");
    const char *fw = zl_json_find(p, "first_wrong");
    cr_assert(
        wrong == 0,
        "ch09_nodes ZL_NODE_OF_RANK=%s --impl %s, %s, B = %.0f: #wrong %.0f: rank %.0f element %.0f got %g, "
        "expected %g (the sum over the %d ranks)",
        map, impl, name, B, wrong, zl_json_num(fw, "rank"), zl_json_num(fw, "index"), zl_json_num(fw, "got"),
        zl_json_num(fw, "expected"), N);
    double inter[16], p2p[16];
    cr_assert_eq(json_array_at(p, "inter_node_bytes_per_rank", inter, 16), N,
                 "row %d: inter-node bytes of %d ranks", rows, N);
    int np2p = json_array_at(p, "p2p_inter_node_bytes_per_rank", p2p, 16);
    for (int r = 0; r < N && !off[0]; r++) {
      double want = expected_inter(two, node_of, N, K, g, r, B);
      if (inter[r] != want)
        snprintf(off, sizeof off,
                 "%s, B = %.0f: rank %d sent %.0f bytes across nodes (the counters), the formula %.0f "
                 "(MEASURED != FORMULA)",
                 name, B, r, inter[r], want);
      else if (strcmp(impl, "ring") == 0 && (np2p != N || p2p[r] != want)) /* the ring code's own sends */
        snprintf(off, sizeof off,
                 "%s, B = %.0f: rank %d: the ring code really sent %.0f bytes across nodes, the formula "
                 "%.0f",
                 name, B, r, np2p == N ? p2p[r] : -1, want);
    }
    p = zl_json_find(p, "ranks_off_formula");
  }
  cr_assert_eq(rows, 2 * 2, "expected 2 sizes x 2 algorithms, got %d rows:\n%s", rows, text);
  cr_assert(!off[0],
            "ch09_nodes ZL_NODE_OF_RANK=%s --impl %s: values right, but %s; the two-level all-reduce sends "
            "2(K-1)/K x B/g across from every rank: reduce-scatter inside the node, all-reduce across on "
            "1/g, all-gather "
            "inside (notes/09-nodes.md)",
            map, impl, off);
  cr_assert_eq(rc, 0, "ch09_nodes (ZL_NODE_OF_RANK=%s, --impl %s) exited %d:\n%s", map, impl, rc, out);
  free(text);
  free(out);
}

Test(ch09_nodes, counters_equal_formula_2x2_ring, .timeout = 60) {
  int node_of[] = {0, 0, 1, 1};
  check_counters("0,0,1,1", node_of, 4, 2, "ring");
}
Test(ch09_nodes, counters_equal_formula_3x2_vendor, .timeout = 60) {
  int node_of[] = {0, 0, 1, 1, 2, 2};
  check_counters("0,0,1,1,2,2", node_of, 6, 3, "vendor");
}

/* The two-level all-reduce itself (tests/mpi/scn_hier, the exercise hier_all_reduce called
 * directly): every element of every rank exact and each rank's bytes across nodes = the formula, on
 * sizes g and N do not divide as well as sizes they do, vendor and ring, fp32 and bf16; 2 nodes of 2,
 * 3 nodes of 2 and 2 nodes of 3 (g odd). */
static void run_hier(const char *map, int np) {
  char *out = NULL;
  int rc = zl_run(np, 60, &out, "env ZL_NODE_OF_RANK=%s %s/scn_hier", map, ZL_TESTBIN);
  cr_assert(rc == 0 && strstr(out, "scn_hier: ok"), "scn_hier (ZL_NODE_OF_RANK=%s) exited %d:\n%s", map, rc,
            out && *out ? out : "(no output)");
  free(out);
}
Test(ch09_nodes, hier_all_reduce_any_size, .timeout = 60) {
  run_hier("0,0,1,1", 4);
  run_hier("0,0,0,1,1,1", 6);
  run_hier("0,0,1,1,2,2", 6);
}

/* The two-level all-reduce needs the same ranks on every node; a bad map names the variable. */
Test(ch09_nodes, bad_node_maps_refused, .timeout = 60) {
  char *out = NULL;
  int rc = zl_run(3, 60, &out, "env ZL_NODE_OF_RANK=0,0,1 %s/ch09_nodes -b 4K -e 4K -n 1", ZL_BIN);
  cr_assert(rc != 0 && strstr(out, "same number on every node"), "nodes of 2 and 1 ranks: exit %d:\n%s", rc,
            out);
  free(out);
  rc = zl_run(4, 60, &out, "env ZL_NODE_OF_RANK=0,0,1 %s/ch09_nodes -b 4K -e 4K -n 1", ZL_BIN);
  cr_assert(rc != 0 && strstr(out, "ZL_NODE_OF_RANK"), "3 entries for 4 ranks: exit %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 30, &out, "%s/ch09_nodes --link-mbit -3", ZL_BIN);
  cr_assert(rc == 2 && strstr(out, "--link-mbit"), "--link-mbit -3: exit %d (want 2):\n%s", rc, out);
  free(out);
}

/* ---- HSDP (--shard-group node) on a faked node map: 2 nodes x 2 ranks ---------------------- */
#define HSDP_RUN "--steps 5 --batch 16 --seed 11 --optimizer adamw --lr 0.01 --quiet"

/* Two --save-params files: the largest |a − b| over the weights, and the count. */
static double max_diff(const char *a, const char *b, size_t *n) {
  size_t na = 0, nb = 0;
  float *x = (float *)zl_read_file(a, &na), *y = (float *)zl_read_file(b, &nb);
  cr_assert(x && y && na == nb && na > 0, "--save-params %s (%zu bytes) and %s (%zu bytes)", a, na, b, nb);
  double m = 0;
  for (size_t k = 0; k < na / 4; k++) m = fmax(m, fabs((double)x[k] - (double)y[k]));
  *n = na / 4;
  free(x);
  free(y);
  return m;
}

/* HSDP sums the same gradients as DDP in another order (inside the node, then across): after 5
 * AdamW steps every weight within 1e-5 of DDP's (the stated tolerance; notes/09-nodes.md). */
Test(ch09_hsdp, equals_ddp_within_tolerance, .timeout = 60) {
  char a[512], b[512];
  zl_tmppath(a, sizeof a, "hsdp", "hsdp.bin");
  zl_tmppath(b, sizeof b, "hsdp", "ddp.bin");
  zl_run_ok(4, 60, "ch05_zero3 --shard-group node",
            "env ZL_NODE_OF_RANK=0,0,1,1 %s/ch05_zero3 --shard-group node %s "
            "--save-params %s",
            ZL_BIN, HSDP_RUN, a);
  zl_run_ok(4, 60, "ch02_ddp", "%s/ch02_ddp %s --save-params %s", ZL_BIN, HSDP_RUN, b);
  size_t n = 0;
  double d = max_diff(a, b, &n);
  cr_assert(d <= 1e-5,
            "HSDP vs DDP after 5 steps: max |weight difference| %.3g over %zu weights (tolerance 1e-5)", d,
            n);
}

/* The report's numbers: bytes across nodes per rank = 2(K−1)/K·Ψ/g·4 (measured = formula, every
 * rank), total bytes = the formula, model states = ZeRO-3's with N = g. */
Test(ch09_hsdp, bytes_and_memory_equal_formula, .timeout = 60) {
  char j[512];
  zl_tmppath(j, sizeof j, "hsdp", "hsdp.json");
  zl_run_ok(4, 60, "ch05_zero3 --shard-group node",
            "env ZL_NODE_OF_RANK=0,0,1,1 %s/ch05_zero3 --shard-group node %s --json %s", ZL_BIN, HSDP_RUN, j);
  char *text = zl_read_file(j, NULL);
  cr_assert(text, "no --json");
  double psi = zl_json_num(text, "params"), padded = zl_json_num(text, "padded_params");
  cr_assert_eq(psi, padded, "the test's model must need no padding (psi %.0f, padded %.0f)", psi, padded);
  const char *nodes = zl_json_find(text, "nodes");
  cr_assert(nodes, "--json has no nodes object:\n%s", text);
  cr_assert_eq(zl_json_num(nodes, "count"), 2);
  double want_inter = 2.0 * (2 - 1) / 2 * psi / 2 * 4;
  const char *p = zl_json_find(nodes, "per_rank");
  for (int r = 0; r < 4; r++) {
    p = zl_json_find(p, "rank");
    double got = zl_json_num(p, "inter_bytes_per_step"), f = zl_json_num(p, "formula");
    cr_assert(got == want_inter && f == want_inter,
              "rank %d: bytes across nodes per step got %.1f, its formula %.1f, expected "
              "2(K-1)/K x psi/g x 4 = %.1f",
              r, got, f, want_inter);
  }
  const char *comm = zl_json_find(text, "comm");
  double sent = zl_json_num(comm, "bytes_per_step_per_rank"), want = 3.0 * (2 - 1) / 2 * psi * 4 + want_inter;
  cr_assert_eq(sent, want,
               "bytes sent per step per rank got %.1f expected 3(g-1)/g x psi x 4 + across = %.1f", sent,
               want);
  for (int r = 0; r < 4; r++) {
    double ms = zl_rank_mem(text, r, "model_states"), fms = 16.0 * psi / 2;
    cr_assert_eq(ms, fms, "rank %d: model states got %.0f bytes expected 16 psi / g = %.0f", r, ms, fms);
  }
  free(text);
}

/* A checkpoint HSDP wrote on 2 nodes resumes as ZeRO-3 on 2 ranks of one box; --resume into HSDP
 * is refused (one line, exit 2); nodes of unequal sizes are refused naming them. */
Test(ch09_hsdp, checkpoint_resumes_on_one_box, .timeout = 90) {
  char dir[512], a[512], b[512], *out = NULL;
  zl_tmppath(dir, sizeof dir, "hsdp", "ckpt");
  zl_tmppath(a, sizeof a, "hsdp", "resumed.bin");
  zl_tmppath(b, sizeof b, "hsdp", "straight.bin");
  const char *run = "--batch 16 --seed 11 --optimizer adamw --lr 0.01 --quiet";
  zl_run_ok(4, 60, "hsdp --ckpt",
            "env ZL_NODE_OF_RANK=0,0,1,1 %s/ch05_zero3 --shard-group node --steps 3 %s --ckpt %s", ZL_BIN,
            run, dir);
  zl_run_ok(2, 60, "zero3 --resume", "%s/ch05_zero3 --steps 6 %s --resume %s --save-params %s", ZL_BIN, run,
            dir, a);
  zl_run_ok(4, 60, "hsdp 6 steps",
            "env ZL_NODE_OF_RANK=0,0,1,1 %s/ch05_zero3 --shard-group node --steps 6 %s --save-params %s",
            ZL_BIN, run, b);
  size_t n = 0;
  double d = max_diff(a, b, &n);
  cr_assert(d <= 1e-5,
            "3 HSDP steps + 3 resumed ZeRO-3 steps vs 6 HSDP steps: max |difference| %.3g (tolerance 1e-5)",
            d);
  int rc = zl_run(0, 30, &out, "%s/ch05_zero3 --shard-group node --resume %s", ZL_BIN, dir);
  cr_assert(rc == 2 && strstr(out, "--resume"), "--resume into HSDP: exit %d (want 2):\n%s", rc, out);
  free(out);
  rc = zl_run(4, 60, &out, "env ZL_NODE_OF_RANK=0,0,0,1 %s/ch05_zero3 --shard-group node --steps 1 --quiet",
              ZL_BIN);
  cr_assert(rc != 0 && strstr(out, "same number on every node"), "nodes of 3 and 1 ranks: exit %d:\n%s", rc,
            out);
  free(out);
}

/* ZeRO++ hpZ: the backward gathers the same bits from the node's secondary copy, so the run is
 * ZeRO-3's bit for bit; its bytes across nodes are only the forward gather's and the
 * reduce-scatter's (the ring rule), the backward's stay in the node; params + the copy, P/N + P/g. */
Test(ch09_hsdp, hpz_equals_zero3_bitwise_and_bytes, .timeout = 60) {
  char a[512], b[512], j[512];
  zl_tmppath(a, sizeof a, "hpz", "hpz.bin");
  zl_tmppath(b, sizeof b, "hpz", "zero3.bin");
  zl_tmppath(j, sizeof j, "hpz", "hpz.json");
  zl_run_ok(4, 60, "ch05_zero3 --hpz",
            "env ZL_NODE_OF_RANK=0,0,1,1 %s/ch05_zero3 --hpz %s --save-params %s --json %s", ZL_BIN, HSDP_RUN,
            a, j);
  zl_run_ok(4, 60, "ch05_zero3", "env ZL_NODE_OF_RANK=0,0,1,1 %s/ch05_zero3 %s --save-params %s", ZL_BIN,
            HSDP_RUN, b);
  size_t n = 0;
  double d = max_diff(a, b, &n);
  cr_assert(d == 0, "hpZ vs ZeRO-3: max |weight difference| %.3g over %zu weights (expected bit for bit)", d,
            n);
  char *text = zl_read_file(j, NULL);
  cr_assert(text, "no --json");
  double P = zl_json_num(text, "padded_params");
  const char *p = zl_json_find(zl_json_find(text, "nodes"), "per_rank");
  for (int r = 0; r < 4; r++) {
    p = zl_json_find(p, "rank");
    double got = zl_json_num(p, "inter_bytes_per_step");
    /* ranks 1, 3: the ring's boundary; fwd gather + RS, padded */
    double want = r % 2 ? 2.0 * 3 / 4 * P * 4 : 0;
    cr_assert_eq(
        got, want,
        "rank %d: bytes across nodes per step got %.1f expected %.1f (the backward's gathers must stay "
        "in the node)",
        r, got, want);
    double params = zl_rank_mem(text, r, "params");
    cr_assert_eq(params, (P / 4 + P / 2) * 4,
                 "rank %d: params got %.0f bytes expected (P/N + P/g) x 4 = %.0f", r, params,
                 (P / 4 + P / 2) * 4);
  }
  free(text);
  char *out = NULL;
  int rc = zl_run(0, 30, &out, "%s/ch05_zero3 --hpz --shard-group node", ZL_BIN);
  cr_assert(rc == 2 && strstr(out, "--hpz"), "--hpz with --shard-group node: exit %d (want 2):\n%s", rc, out);
  free(out);
}

/* ---- the emulated nodes (root) ------------------------------------------------------------ */
static char g_name[8], g_subnet[32], g_env[160];

/* This test's own cluster (zl_test.h's zl_own_cluster: t<n>, 10.212.<k>) and zlrun's env for it (g_env). */
static void own_cluster_name(void) {
  zl_own_cluster('t', 212, g_name, sizeof g_name, g_subnet, sizeof g_subnet);
  snprintf(g_env, sizeof g_env, "env ZL_CLUSTER=%s ZL_CLUSTER_SUBNET=%s", g_name, g_subnet);
}

/* Skips the test where nodes cannot be made (zl_need_cluster); else names this test's own cluster. */
static void need_cluster(void) {
  zl_need_cluster();
  own_cluster_name();
}
static void cluster_down(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "bash common/scripts/cluster.sh down --name %s --subnet %s", g_name, g_subnet);
  zl_run(0, 30, NULL, "%s", cmd);
}

/* Not root: one line saying why, exit 3, nothing made — for cluster.sh up and for zlrun --nodes
 * (which would otherwise bring a cluster up). Runs as root too, as the unprivileged user 65534
 * through setpriv, on copies of the scripts in a directory of its own that user can read: the
 * checkout may sit where that user cannot go (/root, or a mode-700 directory from mktemp -d). The
 * cluster name is this test's own, so a cluster someone else has up (the default zl) is not used. */
Test(ch09_cluster, refuses_when_not_root, .timeout = 30) {
  char *out = NULL, dir[256], drop[512];
  own_cluster_name();
  const char *scripts = "common/scripts";
  drop[0] = 0;
  if (getuid() == 0) {
    zl_tmpdir(dir, sizeof dir, "notroot");
    int rc =
        zl_run(0, 20, &out,
               "cp common/scripts/cluster.sh common/scripts/cluster_agent.sh common/scripts/zlrun %s/ && "
               "chmod 755 %s %s/cluster.sh %s/cluster_agent.sh %s/zlrun",
               dir, dir, dir, dir, dir);
    cr_assert_eq(rc, 0, "copying the scripts to %s: exit %d:\n%s", dir, rc, out);
    free(out);
    snprintf(drop, sizeof drop, "env -C %s setpriv --reuid=65534 --regid=65534 --clear-groups ", dir);
    scripts = dir;
  }
  int rc = zl_run(0, 20, &out, "%s%s bash %s/cluster.sh up 2", drop, g_env, scripts);
  cr_assert(rc == 3 && strstr(out, "not root"),
            "cluster.sh up as an unprivileged user: exit %d (want 3, 'not root'):\n%s", rc, out);
  free(out);
  rc = zl_run(0, 20, &out, "%s%s bash %s/zlrun --nodes 2 4 true", drop, g_env, scripts);
  cr_assert(rc == 3 && strstr(out, "not root"),
            "zlrun --nodes 2 as an unprivileged user: exit %d (want 3, 'not root'):\n%s", rc, out);
  free(out);
}

/* up twice is one cluster (the second only re-shapes), status shows it, down twice is fine. */
Test(ch09_cluster, up_status_down_idempotent, .timeout = 60) {
  need_cluster();
  char *out = NULL, opt[96];
  snprintf(opt, sizeof opt, "--name %s --subnet %s", g_name, g_subnet);
  int rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh up 2 --link-mbit 300 --ttl 120 %s", opt);
  cr_assert_eq(rc, 0, "up 2: exit %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh up 2 --link-mbit 500 --ttl 120 %s", opt);
  cr_assert(rc == 0 && strstr(out, "already up"), "up 2 again: exit %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh status %s", opt);
  cr_assert(rc == 0 && strstr(out, "2 nodes") && strstr(out, "500 Mbit/s") && strstr(out, "node 1:"),
            "status after up: exit %d:\n%s", rc, out);
  cr_assert(strstr(out, "eth0 up"), "a node's link is not up:\n%s", out);
  free(out);
  rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh up 9 %s", opt);
  cr_assert(rc == 2 && strstr(out, "2 to 8"), "up 9: exit %d (want 2):\n%s", rc, out);
  free(out);
  cluster_down();
  rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh status %s", opt);
  cr_assert(rc == 1 && strstr(out, "down"), "status after down: exit %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 30, &out, "bash common/scripts/cluster.sh down %s", opt);
  cr_assert(rc == 0 && strstr(out, "was not up"), "down twice: exit %d:\n%s", rc, out);
  free(out);
  rc = zl_run(0, 30, &out, "ip netns list | grep -c '^%s-node' || true", g_name);
  cr_assert(out && atoi(out) == 0, "namespaces left after down:\n%s", out);
  free(out);
}

/* ch09 across 2 real (emulated) nodes: the counters still equal the formula, the sums are exact,
 * and each node's eth0 transmitted at least the counted inter-node bytes of its ranks. */
Test(ch09_cluster, two_level_across_two_nodes, .timeout = 90) {
  need_cluster();
  char json[512], *out = NULL;
  zl_tmppath(json, sizeof json, "cluster", "ch09.json");
  int rc = zl_run(
      0, 60, &out,
      "%s bash common/scripts/zlrun --nodes 2 --link-mbit 800 4 %s/ch09_nodes -b 256K -e 256K -n 1 -w 0 "
      "--impl ring --json %s",
      g_env, ZL_BIN, json);
  cluster_down();
  cr_assert_eq(rc, 0, "ch09_nodes on 2 emulated nodes exited %d:\n%s", rc, out);
  cr_assert(strstr(out, "from shared memory"), "the node map did not come from the nodes:\n%s", out);
  char *text = zl_read_file(json, NULL);
  cr_assert(text && strstr(text, "\"emulated\": true"), "JSON not from emulated nodes:\n%s",
            text ? text : out);
  int node_of[] = {0, 0, 1, 1};
  for (const char *p = zl_json_find(text, "results"); (p = zl_json_find(p, "bytes"));
       p = zl_json_find(p, "ranks_off_formula")) {
    double B = strtod(p + 1, NULL), inter[4], wire[2];
    int two = strncmp(zl_json_find(p, "algorithm"), ": \"two_level\"", 13) == 0;
    cr_assert_eq(json_array_at(p, "inter_node_bytes_per_rank", inter, 4), 4);
    cr_assert_eq(json_array_at(p, "wire_tx_bytes_per_node", wire, 2), 2, "no wire bytes:\n%s", text);
    for (int k = 0; k < 2; k++) {
      double counted = inter[2 * k] + inter[2 * k + 1];
      cr_assert(wire[k] >= counted, "%s: node %d's eth0 sent %.0f bytes, less than its ranks' counted %.0f",
                two ? "two-level" : "flat", k, wire[k], counted);
    }
    for (int r = 0; r < 4; r++)
      cr_assert_eq(inter[r], expected_inter(two, node_of, 4, 2, 2, r, B), "rank %d: inter-node bytes %.0f", r,
                   inter[r]);
    cr_assert_eq(zl_json_num(p, "wrong"), 0, "wrong elements on 2 nodes");
  }
  free(text);
  free(out);
}

/* A strategy on 2 emulated nodes x 2 ranks = the same strategy on 4 ranks of one box, bit for bit
 * (the same collectives, the same GEMM shapes, in the same order: only the transport differs); HSDP
 * included. Strategies [lo, hi) of the table: make test runs DDP and HSDP, make test-long the rest. */
static void strategies_on_two_nodes(int lo, int hi) {
  need_cluster();
  static const char *const progs[][2] = {{"ch02_ddp", "--variant bucketed"},
                                         {"ch05_zero3", "--shard-group node"},
                                         {"ch05_zero3", ""},
                                         {"ch04_zero2", ""},
                                         {"ch05_zero3", "--hpz"}};
  for (int i = lo; i < hi; i++) {
    char a[512], b[512], *out = NULL;
    zl_tmppath(a, sizeof a, "cluster", "nodes.bin");
    zl_tmppath(b, sizeof b, "cluster", "box.bin");
    const char *common = "--steps 3 --batch 16 --seed 4 --optimizer adamw --quiet --timeout-s 30";
    int rc = zl_run(0, 60, &out, "%s bash common/scripts/zlrun --nodes 2 4 %s/%s %s %s --save-params %s",
                    g_env, ZL_BIN, progs[i][0], progs[i][1], common, a);
    cr_assert_eq(rc, 0, "%s on 2 nodes exited %d:\n%s", progs[i][0], rc, out);
    free(out);
    /* one box: the same node map (HSDP's groups), from ZL_NODE_OF_RANK */
    rc = zl_run(4, 60, &out, "env ZL_NODE_OF_RANK=0,0,1,1 %s/%s %s %s --save-params %s", ZL_BIN, progs[i][0],
                progs[i][1], common, b);
    cr_assert_eq(rc, 0, "%s on one box exited %d:\n%s", progs[i][0], rc, out);
    free(out);
    size_t na = 0, nb = 0;
    float *x = (float *)zl_read_file(a, &na), *y = (float *)zl_read_file(b, &nb);
    cr_assert(x && y && na == nb && na > 0, "%s: --save-params sizes %zu and %zu", progs[i][0], na, nb);
    for (size_t k = 0; k < na / 4; k++)
      cr_assert(memcmp(&x[k], &y[k], 4) == 0, "%s: weight %zu on 2 nodes got %.9g, on one box %.9g",
                progs[i][0], k, x[k], y[k]);
    free(x);
    free(y);
  }
  cluster_down();
}
Test(ch09_cluster, strategies_on_two_nodes_equal_one_box, .timeout = 120) { strategies_on_two_nodes(0, 2); }
Test(ch09_cluster_long, zero2_zero3_hpz_on_two_nodes_equal_one_box, .timeout = 120) {
  strategies_on_two_nodes(2, 5);
}

/* A checkpoint written on 2 emulated nodes (ZeRO-3 over 4 ranks) resumes on 2 ranks of one box: the
 * resumed run ends where ZeRO-3 on 2 ranks straight through ends, within 1e-6 · max|w| (normwise).
 * Not bitwise: the first 3 steps ran on 4 ranks, GEMMs of 4 rows per rank where the straight run has
 * 8 — another shape, so another BLAS kernel order (notes/design.md, "Bits or a tolerance"). SGD
 * with momentum, not AdamW: AdamW turns a ~0 gradient's rounding into a step of ~lr either way
 * (measured 1.01e-5 on one kernel), SGD keeps the gap at the gradients' own (~1e-7 of max|w|;
 * the log line prints it). */
Test(ch09_cluster, checkpoint_from_two_nodes_resumes_on_one_box, .timeout = 90) {
  need_cluster();
  char dir[512], a[512], b[512];
  zl_tmppath(dir, sizeof dir, "cluster", "ckpt");
  zl_tmppath(a, sizeof a, "cluster", "resumed.bin");
  zl_tmppath(b, sizeof b, "cluster", "straight.bin");
  const char *run = "--batch 16 --seed 5 --optimizer sgd --momentum 0.9 --lr 0.05 --quiet --timeout-s 30";
  zl_run_ok(0, 60, "zero3 on 2 nodes --ckpt",
            "%s bash common/scripts/zlrun --nodes 2 4 %s/ch05_zero3 --steps 3 %s --ckpt %s", g_env, ZL_BIN,
            run, dir);
  cluster_down();
  zl_run_ok(2, 60, "zero3 --resume on one box", "%s/ch05_zero3 --steps 6 %s --resume %s --save-params %s",
            ZL_BIN, run, dir, a);
  zl_run_ok(2, 60, "zero3 6 steps on one box", "%s/ch05_zero3 --steps 6 %s --save-params %s", ZL_BIN, run, b);
  int64_t na = 0, nb = 0;
  float *got = zl_read_floats(a, &na), *want = zl_read_floats(b, &nb);
  cr_assert(got && want && na == nb && na > 0, "--save-params %s (%lld floats) and %s (%lld)", a,
            (long long)na, b, (long long)nb);
  double gap = zl_expect_close_norm("3 steps on 2 nodes + 3 resumed on one box vs 6 on one box: weights", got,
                                    want, na, 1e-6);
  cr_log_info("checkpoint from two nodes: largest |difference| / max|w|: %.2g (tolerance 1e-06)", gap);
  free(got);
  free(want);
}

/* A node whose link goes down mid-run takes the job down within --timeout-s (plus zlrun's few
 * seconds to end the daemon it can no longer reach), naming the rank that waited — no hang. */
Test(ch09_cluster, link_down_ends_the_job, .timeout = 150) {
  need_cluster();
  char *out = NULL, up[160], log[512];
  snprintf(up, sizeof up, "bash common/scripts/cluster.sh up 2 --ttl 300 --name %s --subnet %s >/dev/null",
           g_name, g_subnet);
  cr_assert_eq(zl_run(0, 30, NULL, "%s", up), 0, "cluster up failed");
  zl_tmppath(log, sizeof log, "linkdown", "job.log");
  /* the link goes down once the job trains (its first step line: every rank is past MPI_Init — a link
   * lost inside MPI_Init is Open MPI's to time out, not ours), then ends within seconds */
  int rc = zl_run(0, 120, &out,
                  "sh -c 'rm -f %s %s.down; (for i in $(seq 300); do "
                  "grep -q \"^step\" %s 2>/dev/null && break; sleep 0.2; done; "
                  "date +%%s > %s.down; ip -n %s-node1 link set eth0 down) & "
                  "%s ZL_REAP_S=2 bash common/scripts/zlrun --nodes 2 4 %s/ch05_zero3 --steps 1000000 "
                  "--timeout-s 3 --log-every 1 > %s 2>&1; rc=$?; wait; grep -v \"^step\" %s; "
                  "echo \"ended $(date +%%s)\"; exit $rc'",
                  log, log, log, log, g_name, g_env, ZL_BIN, log, log);
  char down_path[600];
  snprintf(down_path, sizeof down_path, "%s.down", log);
  char *down = zl_read_file(down_path, NULL);
  const char *ended = out ? strstr(out, "ended ") : NULL;
  double secs = down && ended ? atof(ended + 6) - atof(down) : 1e9; /* from the link down to the end */
  free(down);
  cluster_down();
  cr_assert(rc != 0 && rc != 124,
            "the job with a node's link down: exit %d after %.0f s (want a failure, not a hang):\n%s", rc,
            secs, out);
  cr_assert(strstr(out, "did not complete within 3 s"), "no rank named the collective that timed out:\n%s",
            out);
  cr_assert(strstr(out, "rank 0:") || strstr(out, "rank 1:"), "no rank of node 0 named itself:\n%s", out);
  cr_assert(strstr(out, "node 1 ("), "zlrun did not name the node whose link is down:\n%s", out);
  cr_assert(secs < 30, "took %.0f s from the link down to the job's end (timeout 3 s)", secs);
  free(out);
}
