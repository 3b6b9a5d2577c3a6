/* ch09_nodes — one all-reduce, two ways, across nodes (notes/09-nodes.md): the flat ring over all
 * N ranks against the two-level all-reduce of solutions/hier.c (reduce-scatter inside the node,
 * all-reduce across the nodes on 1/g of the buffer, all-gather inside), on K nodes of g ranks.
 *   make run CH=09 NP=4 NODES=2 LINK_MBIT=200      (root: 2 emulated nodes, common/scripts/cluster.sh)
 *   ZL_NODE_OF_RANK=0,0,1,1 zlrun 4 build/bin/ch09_nodes   (one box, the node map faked: the bytes only)
 * For each size, alternating the two algorithms every iteration (and who goes first):
 *   time      median over iterations of the max over ranks
 *   busbw     nccl-tests' all-reduce bus bandwidth, size/time × 2(N−1)/N, beside the link's rate:
 *             a flat ring is bound by it (its last rank of each node pushes 2(N−1)/N·B through the
 *             node's link); the two-level one pushes 2(K−1)/K·B, so its busbw can pass the link
 *   inter     inter-node bytes per rank and per node link beside the formula (exact: sizes are
 *             rounded to a multiple of N). With --impl ring they are MEASURED: what our ring code
 *             really sent to another node (the p2p counters); with --impl vendor they are the ring
 *             MODEL's count (comm.h "topology"), the same rule as the formula — Open MPI and NCCL
 *             choose their own algorithm, which may send less (measured on 4 ranks: ~2/3) — and the
 *             measurement is the wire column
 *   wire      on emulated nodes: what the node's eth0 really transmitted during one all-reduce
 *             (/sys/class/net/eth0/statistics/tx_bytes, TCP/IP headers and launcher chatter included)
 *   #wrong    one more run each on inputs (r+1)·(i mod 7 + 1) (bf16 beyond 8 ranks: shorter patterns,
 *             exact_pattern), whose sums are exact; every element
 *             of every rank checked (a WRONG line under the row names the first wrong one: rank,
 *             element, got, expected; a MEASURED != FORMULA line each rank off the formula)
 * Exit 1 when a result is wrong or a measured byte count differs from its formula. */
#include "args.h"   // arg_spec_t, args_parse_nccl, args_error, args_byte_range
#include "check.h"  // xmalloc, xcalloc, die
#include "comm.h"   // comm_t, comm_all_reduce, comm_counters, comm_node_of, comm_nodes, ...
#include "device.h" // dev_malloc, dev_memcpy, dev_sync, device_cuda_built
#include "dtype.h"  // dt_load, dt_store, dtype_size
#include "hier.h"   // hier_t, hier_init, hier_all_reduce, hier_free
#include "outfile.h" // outfile_open, outfile_close
#include <mpi.h>    // MPI_Wtime
#include <stdio.h>  // printf, FILE
#include <stdlib.h> // getenv, qsort, free, atof
#include <string.h> // strcmp

enum { FLAT = 0, TWO_LEVEL = 1, NALGS = 2 };
static const char *const g_alg[NALGS] = {"flat", "two_level"};

typedef struct bench {
  comm_t *c;
  hier_t h;
  int rank, N, K, g, iters, warmup, check;
  int emulated;    /* running on a node of cluster.sh (its eth0 counts the wire bytes) */
  int ring;        /* --impl ring: the inter columns are measured p2p bytes; vendor: the ring model */
  double link_mbit; /* the inter-node link, each way; 0 = unknown */
  dtype_t dt;
  device_t dev;
  void *buf;       /* (max bytes) on dev: the all-reduce's buffer */
  void *orig;      /* (max bytes) host: this rank's input */
  void *host;      /* (max bytes) host: results to check */
  struct pattern { int q, m; } pat; /* the inputs' periods over ranks and elements (exact_pattern, below) */
} bench_t;

typedef struct row {
  double time_us, busbw_mbs;
  double *inter;         /* [N] inter-node bytes per all-reduce, each rank: p2p (ring), ring model (vendor) */
  double *formula;       /* [N] the same by the formula */
  double link, formula_link; /* max over nodes of the node's ranks' inter-node bytes */
  double *wire;          /* [K] eth0 tx bytes during one all-reduce, each node (emulated only) */
  double *p2p;           /* [N] inter-node bytes the ring code really sent (--impl ring) */
  int64_t wrong;
  double first[4];       /* the first wrong element: rank, index, got, expected (rank −1: none) */
} row_t;

/* Rank r's input element i: a(r)·c(i), a(r) = (r mod q) + 1, c(i) = (i mod m) + 1, so every partial
 * sum, in any order, is an integer no larger than the total (Σ_r a(r))·m — exact when that total is
 * representable: fp32 (2^24) always here; bf16 (8 bits: integers to 256) only with q and m chosen
 * small enough (exact_pattern). The expected sum of element i is (Σ_r a(r))·c(i). */
typedef struct pattern pattern_t; /* q: ranks' pattern period; m: elements' (bench_t.pat) */
static float input(pattern_t p, int r, int64_t i) { return (float)((r % p.q + 1) * (int)(i % p.m + 1)); }
static double rank_factor_sum(pattern_t p, int N) {
  double s = 0;
  for (int r = 0; r < N; r++) s += r % p.q + 1;
  return s;
}
/* The largest pattern whose sums stay exact in dtype dt on N ranks: fp32 keeps (r+1)·(i mod 7 + 1);
 * bf16 (integers to 256 exact) shortens the periods until N's total fits — q = N, then 2, then 1 —
 * and returns 0 when even q = m = 1 (a total of N) does not (more than 256 ranks). */
static int exact_pattern(int N, dtype_t dt, pattern_t *p) {
  double limit = dt == DT_BF16 ? 256.0 : 16777216.0;
  const int qs[3] = {1 << 30, 2, 1};
  for (int k = 0; k < 3; k++) {
    p->q = qs[k];
    double s = rank_factor_sum(*p, N);
    for (p->m = 7; p->m >= 1; p->m--)
      if (s * p->m <= limit) return 1;
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void run_alg(bench_t *b, int alg, int64_t numel) {
  if (alg == FLAT) {
    comm_all_reduce(b->c, b->buf, numel, b->dt, REDOP_SUM);
  } else { /* blocking by contract: `make exercise` names a handle it left open (comm.h) */
    comm_handle_t s0 = comm_issued(b->c), s1 = comm_issued(b->h.node), s2 = comm_issued(b->h.cross);
    hier_all_reduce(&b->h, b->buf, numel, b->dt, REDOP_SUM);
    comm_expect_waited(b->h.node, s1, "hier_all_reduce");
    comm_expect_waited(b->h.cross, s2, "hier_all_reduce");
    comm_expect_waited(b->c, s0, "hier_all_reduce");
  }
  dev_sync(b->dev); /* GPU collectives return once queued */
}

static void restore(bench_t *b, int64_t numel) {
  dev_memcpy(b->dev, b->buf, DEV_CPU, b->orig, (size_t)numel * dtype_size(b->dt));
}

/* Inter-node bytes this rank's communicators counted (every op but control), and the ring
 * code's real ones (p2p), for the algorithm. */
static void inter_bytes(const bench_t *b, int alg, double *model, double *p2p) {
  comm_t *cs[2] = {b->c, NULL};
  if (alg == TWO_LEVEL) cs[0] = b->h.node, cs[1] = b->h.cross;
  *model = *p2p = 0;
  for (int k = 0; k < 2 && cs[k]; k++) {
    comm_wait_all(cs[k]);
    comm_counters_t ct = comm_counters(cs[k]);
    for (int op = 0; op < CO_NOPS; op++)
      if (op != CO_CONTROL) *model += (double)ct.inter_sent[op];
    *p2p += (double)ct.p2p_inter_sent;
  }
}

static void reset_counters(bench_t *b) {
  comm_counters_reset(b->c);
  comm_counters_reset(b->h.node);
  comm_counters_reset(b->h.cross);
}

/* This node's eth0 transmit counter (emulated nodes; -1 elsewhere). */
static double eth0_tx(const bench_t *b) {
  if (!b->emulated) return -1;
  FILE *f = fopen("/sys/class/net/eth0/statistics/tx_bytes", "r");
  double v = -1;
  if (f) {
    if (fscanf(f, "%lf", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

/* The formulas (comm.h, topology; hier.h), for rank r and a buffer of B bytes:
 *   flat       2(N−1)/N·B if rank r+1 is on another node (the ring crosses there), else 0
 *   two-level  2(K−1)/K·B/g on every rank (its cross-node all-reduce of B/g bytes) */
static double formula_inter(const bench_t *b, int alg, int r, double B) {
  if (alg == FLAT)
    return comm_node_of(b->c, (r + 1) % b->N) != comm_node_of(b->c, r) ? 2.0 * (b->N - 1) / b->N * B : 0;
  return b->K > 1 ? 2.0 * (b->K - 1) / b->K * B / b->g : 0;
}

/* Sum over the ranks of each node; the largest node's sum. */
static double max_node_sum(const bench_t *b, const double *per_rank) {
  double best = 0;
  for (int n = 0; n < b->K; n++) {
    double s = 0;
    for (int r = 0; r < b->N; r++)
      if (comm_node_of(b->c, r) == n) s += per_rank[r];
    if (s > best) best = s;
  }
  return best;
}

static void measure(bench_t *b, int64_t numel, row_t *rows) {
  int n = b->iters, N = b->N;
  double B = (double)numel * (double)dtype_size(b->dt);
  double *t = xmalloc((size_t)(NALGS * n) * sizeof *t, "timings"); /* [alg][iter] */
  reset_counters(b);
  for (int it = -b->warmup; it < n; it++)
    for (int k = 0; k < NALGS; k++) {
      int alg = (it & 1) ? NALGS - 1 - k : k; /* swap who goes first every iteration */
      restore(b, numel);
      comm_barrier(b->c);
      double t0 = MPI_Wtime();
      run_alg(b, alg, numel);
      double dt = MPI_Wtime() - t0;
      if (it >= 0) t[alg * n + it] = dt;
    }
  comm_ctl_all_reduce_f64(b->c, t, NALGS * n, REDOP_MAX); /* the slowest rank sets the time */
  double *mine = xcalloc(2 * NALGS, sizeof *mine, "inter bytes");
  for (int a = 0; a < NALGS; a++) {
    inter_bytes(b, a, &mine[2 * a], &mine[2 * a + 1]);
    mine[2 * a] /= b->warmup + n; /* per all-reduce */
    mine[2 * a + 1] /= b->warmup + n;
  }
  double *all = xcalloc((size_t)(2 * NALGS * N), sizeof *all, "inter bytes of every rank");
  for (int i = 0; i < 2 * NALGS; i++) all[b->rank * 2 * NALGS + i] = mine[i];
  comm_ctl_all_reduce_f64(b->c, all, 2 * NALGS * N, REDOP_SUM); /* each rank fills its own slots */
  for (int a = 0; a < NALGS; a++) {
    row_t *w = &rows[a];
    qsort(t + a * n, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[a * n + n / 2] : 0.5 * (t[a * n + n / 2 - 1] + t[a * n + n / 2]);
    w->time_us = med * 1e6;
    w->busbw_mbs = med > 0 ? B / med * 2.0 * (N - 1) / N / 1e6 : 0;
    for (int r = 0; r < N; r++) {
      w->p2p[r] = all[r * 2 * NALGS + 2 * a + 1];
      w->inter[r] = b->ring ? w->p2p[r] : all[r * 2 * NALGS + 2 * a]; /* measured, or the model (vendor) */
      w->formula[r] = formula_inter(b, a, r, B);
    }
    w->link = max_node_sum(b, w->inter);
    w->formula_link = max_node_sum(b, w->formula);
    /* one more run: the wire bytes of one all-reduce, then the exact check */
    double *tx = xcalloc((size_t)b->K, sizeof *tx, "wire bytes");
    restore(b, numel);
    double tx0 = eth0_tx(b); /* before the barrier: no rank of this node sends until it is read */
    comm_barrier(b->c);
    run_alg(b, a, numel);
    comm_barrier(b->c);
    double tx1 = eth0_tx(b);
    if (comm_node_rank(b->c) == 0 && tx0 >= 0 && tx1 >= 0) tx[comm_node(b->c)] = tx1 - tx0;
    comm_ctl_all_reduce_f64(b->c, tx, b->K, REDOP_SUM);
    for (int k = 0; k < b->K; k++) w->wire[k] = b->emulated ? tx[k] : -1;
    free(tx);
    w->wrong = -1;
    w->first[0] = -1;
    if (b->check) {
      dev_memcpy(DEV_CPU, b->host, b->dev, b->buf, (size_t)B);
      /* [0]: wrong elements over the ranks; then each rank's first wrong one: index + 1, got, expected */
      double *chk = xcalloc((size_t)(1 + 3 * N), sizeof *chk, "check");
      for (int64_t i = 0; i < numel; i++) {
        double exp = rank_factor_sum(b->pat, N) * (double)(i % b->pat.m + 1);
        double got = (double)dt_load(b->host, b->dt, i);
        if (got != exp && chk[0]++ == 0) {
          chk[1 + 3 * b->rank] = (double)i + 1;
          chk[2 + 3 * b->rank] = got;
          chk[3 + 3 * b->rank] = exp;
        }
      }
      comm_ctl_all_reduce_f64(b->c, chk, 1 + 3 * N, REDOP_SUM);
      w->wrong = (int64_t)chk[0];
      for (int r = 0; r < N && w->first[0] < 0; r++)
        if (chk[1 + 3 * r] > 0)
          w->first[0] = r, w->first[1] = chk[1 + 3 * r] - 1, w->first[2] = chk[2 + 3 * r],
          w->first[3] = chk[3 + 3 * r];
      free(chk);
    }
  }
  free(mine);
  free(all);
  free(t);
}

/* Ranks whose measured inter-node bytes differ from the formula. */
static int mismatches(const bench_t *b, const row_t *w) {
  int k = 0;
  for (int r = 0; r < b->N; r++) k += w->inter[r] != w->formula[r];
  return k;
}

static void json_array(FILE *f, const double *v, int n) {
  fprintf(f, "[");
  for (int i = 0; i < n; i++)
    if (v[i] < 0) fprintf(f, "%snull", i ? ", " : "");
    else fprintf(f, "%s%.17g", i ? ", " : "", v[i]);
  fprintf(f, "]");
}


int main(int argc, char **argv) {
  const char *minb_s = "1M", *maxb_s = "16M", *dtype_s = "float", *impl_s = "vendor", *json = NULL,
             *device_s = "cpu", *backend_s = "mpi";
  double factor = 4, link_mbit = -1, timeout_s = 60;
  int iters = 5, warmup = 1, check = 1;
  arg_spec_t specs[] = {
      {"--minbytes", ARG_STR, &minb_s, 0, 0, NULL, "-b: smallest buffer in bytes (4K, 1M; K = 1024)"},
      {"--maxbytes", ARG_STR, &maxb_s, 0, 0, NULL, "-e: largest buffer in bytes"},
      {"--stepfactor", ARG_DOUBLE, &factor, 1.01, 1024, NULL, "-f: multiply the size by this between rows"},
      {"--iters", ARG_INT, &iters, 1, 100000, NULL, "-n: timed iterations per size and algorithm (median)"},
      {"--warmup_iters", ARG_INT, &warmup, 0, 100000, NULL, "-w: untimed iterations first"},
      {"--check", ARG_INT, &check, 0, 1, NULL, "-c: 1 = one more run each, every element checked (#wrong)"},
      {"--dtype", ARG_CHOICE, &dtype_s, 0, 0, "float|bfloat16", "-d: element type"},
      {"--impl", ARG_CHOICE, &impl_s, 0, 0, "vendor|ring",
       "the collectives both algorithms are made of: the backend's own, or solutions/ring.c"},
      {"--link-mbit", ARG_DOUBLE, &link_mbit, 0, 1e6, NULL,
       "the inter-node link's rate, Mbit/s each way, for the busbw comparison (default: $ZL_LINK_MBIT, which "
       "zlrun --nodes sets from the cluster; 0 = unknown)"},
      {"--timeout-s", ARG_DOUBLE, &timeout_s, 0, 1e6, NULL,
       "a collective that does not complete within this many seconds ends the job, naming the rank (0 = "
       "never)"},
      {"--device", ARG_CHOICE, &device_s, 0, 0, "cpu|cuda",
       "where the buffer lives (cuda: one GPU per local rank)"},
      {"--backend", ARG_CHOICE, &backend_s, 0, 0, "mpi|nccl",
       "mpi: Open MPI; nccl: one rank per GPU, needs --device cuda"},
      {"--json", ARG_STR, &json, 0, 0, NULL, "write the table as JSON to this path (rank 0)"},
  };
  const int nspecs = (int)(sizeof specs / sizeof specs[0]);
  int rc = args_parse_nccl(
      argc, argv, specs, nspecs, "ch09_nodes",
      "The flat ring all-reduce against the two-level one (solutions/hier.c) across nodes:\n"
      "time, busbw beside the link's rate, inter-node bytes per rank measured beside the formula.\n"
      "Example: make run CH=09 NP=4 NODES=2 LINK_MBIT=200   (root; notes/09-nodes.md)");
  if (rc == 1) return 0;
  if (rc) return 2;
  int64_t minb, maxb;
  if (args_byte_range(minb_s, maxb_s, &minb, &maxb)) return 2;
  if (link_mbit < 0) {
    const char *e = getenv("ZL_LINK_MBIT");
    link_mbit = e && *e ? atof(e) : 0;
  }
  int cuda = strcmp(device_s, "cuda") == 0, nccl = strcmp(backend_s, "nccl") == 0;
  if (nccl && !cuda)
    return args_error("--backend", backend_s, "needs --device cuda (NCCL works on GPU buffers)");
  if (cuda && !device_cuda_built())
    return args_error("--device", device_s, "this binary was built without CUDA (make GPU=1)");

  comm_t *c = comm_init(&argc, &argv, nccl ? BACKEND_NCCL : BACKEND_MPI, cuda ? DEV_CUDA : DEV_CPU);
  comm_set_timeout(c, timeout_s);
  comm_set_impl(c, strcmp(impl_s, "ring") == 0 ? COLL_RING : COLL_VENDOR);
  bench_t b = {.c = c, .rank = comm_rank(c), .N = comm_world(c), .K = comm_nodes(c), .g = comm_node_size(c),
               .iters = iters, .warmup = warmup, .check = check, .link_mbit = link_mbit,
               .dt = strcmp(dtype_s, "bfloat16") == 0 ? DT_BF16 : DT_F32, .dev = comm_device(c)};
  b.ring = strcmp(impl_s, "ring") == 0;
  const char *node_name = getenv("ZL_NODE_NAME"); /* set by cluster_agent.sh */
  const char *fake = getenv("ZL_NODE_OF_RANK");
  b.emulated = node_name && *node_name && !(fake && *fake);
  b.h = hier_init(c);
  size_t esz = dtype_size(b.dt);
  int64_t max_numel = maxb / (int64_t)esz;
  size_t max_nbytes = (size_t)(max_numel ? max_numel : 1) * esz;
  b.buf = dev_malloc(b.dev, max_nbytes, "all-reduce buffer");
  b.orig = xmalloc(max_nbytes, "input");
  b.host = xmalloc(max_nbytes, "results");
  if (!exact_pattern(b.N, b.dt, &b.pat)) b.check = 0; /* > 256 ranks in bf16: no pattern sums exactly */
  for (int64_t i = 0; i < max_numel; i++) dt_store(b.orig, b.dt, i, input(b.pat, b.rank, i));
  int N = b.N, K = b.K, g = b.g;

  if (b.rank == 0) {
    printf("ch09_nodes: %d ranks on %d node%s of %d (node of each rank:", N, K, K > 1 ? "s" : "", g);
    for (int r = 0; r < N; r++) printf(" %d", comm_node_of(c, r));
    printf("; from %s), %s collectives, %s\n", fake && *fake ? "ZL_NODE_OF_RANK" : "shared memory", impl_s,
           dtype_name(b.dt));
    if (link_mbit > 0)
      printf("link between nodes: %g Mbit/s = %.1f MB/s each way; inside a node: shared memory\n", link_mbit,
             link_mbit / 8);
    else
      printf("link between nodes: rate unknown (--link-mbit R to compare busbw with it)\n");
    printf(
        "inter-node bytes per all-reduce of B bytes: flat ring 2(N-1)/N x B on the last rank of each node, 0 "
        "on "
        "the others\n  (per node link 2(N-1)/N x B); two-level 2(K-1)/K x B/g on every rank (per node link "
        "2(K-1)/K x B)\n");
    printf("%-10s %-9s %9s %9s %8s %13s %13s %13s %13s %12s %6s\n", "size (B)", "algorithm", "time ms",
           "busbw MB/s", "/link", "inter B/rank", "formula", "per node link", "formula", "wire/node",
           "#wrong");
    printf("%-10s %-9s %9s %9s %8s %13s %13s %13s %13s %12s %6s\n", "", "", "(median)", "", "",
           b.ring ? "(sent, max)" : "(model, max)", "(max rank)", b.ring ? "(measured)" : "(ring model)", "",
           "(eth0 tx)", "");
    if (!b.ring)
      printf("vendor collectives: the library chooses its own algorithm, so the inter-node byte columns are "
             "the ring\n"
             "  model's count (the formula's own rule), not a measurement; --impl ring measures what our "
             "ring sends,\n"
             "  and on emulated nodes wire/node (eth0) is what really crossed\n");
  }
  FILE *jf = NULL;
  char tmp[4096];
  if (json && b.rank == 0) {
    jf = outfile_open("--json", json, tmp, sizeof tmp);
    fprintf(
        jf,
        "{\"bench\": \"nodes\", \"world\": %d, \"nodes\": %d, \"ranks_per_node\": %d, \"node_of_rank\": [", N,
        K, g);
    for (int r = 0; r < N; r++) fprintf(jf, "%s%d", r ? ", " : "", comm_node_of(c, r));
    fprintf(
        jf,
        "], \"node_map_from\": \"%s\", \"emulated\": %s, \"link_mbit\": %.17g, \"impl\": \"%s\", "
        "\"dtype\": \"%s\", \"device\": \"%s\", \"iters\": %d, \"warmup\": %d,\n"
        " \"inter_node_bytes_are\": \"%s\",\n"
        " \"timing\": \"median over iterations of the max over ranks, the algorithms alternating\",\n"
        " \"formula\": {\"flat\": \"2(N-1)/N x B on ranks r whose r+1 is on another node, else 0\", "
        "\"two_level\": \"2(K-1)/K x B/g on every rank\"},\n \"results\": [",
        fake && *fake ? "ZL_NODE_OF_RANK" : "shared_memory", b.emulated ? "true" : "false", link_mbit, impl_s,
        dtype_name(b.dt), device_name(b.dev), iters, warmup,
        b.ring
            ? "measured: what the ring code sent to another node (p2p counters)"
            : "the ring model's count (vendor collectives choose their own algorithm); wire_tx is measured");
  }
  row_t rows[NALGS];
  for (int a = 0; a < NALGS; a++) {
    rows[a].inter = xcalloc((size_t)N, sizeof(double), "row");
    rows[a].formula = xcalloc((size_t)N, sizeof(double), "row");
    rows[a].p2p = xcalloc((size_t)N, sizeof(double), "row");
    rows[a].wire = xcalloc((size_t)K, sizeof(double), "row");
  }
  int64_t wrong = 0, off = 0, njson = 0;
  double last = -1;
  for (double sz = (double)minb; sz <= (double)maxb * (1 + 1e-9); sz *= factor) {
    int64_t numel = (int64_t)(sz / (double)esz);
    numel -= numel % N; /* equal chunks at both levels: the formulas hold to the byte */
    if (numel <= 0 || (double)numel == last) continue;
    last = (double)numel;
    measure(&b, numel, rows);
    int64_t nbytes = numel * (int64_t)esz;
    for (int a = 0; a < NALGS; a++) {
      const row_t *w = &rows[a];
      int bad = mismatches(&b, w);
      off += bad;
      if (w->wrong > 0) wrong += w->wrong;
      if (b.rank != 0) continue;
      double imax = 0, fmax = 0, wmax = -1;
      for (int r = 0; r < N; r++) {
        if (w->inter[r] > imax) imax = w->inter[r];
        if (w->formula[r] > fmax) fmax = w->formula[r];
      }
      for (int k = 0; k < K; k++)
        if (w->wire[k] > wmax) wmax = w->wire[k];
      char ratio[16] = "-", wire[24] = "-", wr[24] = "N/A";
      if (link_mbit > 0) snprintf(ratio, sizeof ratio, "%.2f", w->busbw_mbs / (link_mbit / 8));
      if (wmax >= 0) snprintf(wire, sizeof wire, "%.0f", wmax);
      if (w->wrong >= 0) snprintf(wr, sizeof wr, "%lld", (long long)w->wrong);
      printf("%-10lld %-9s %9.2f %9.1f %8s %13.0f %13.0f %13.0f %13.0f %12s %6s%s\n", (long long)nbytes,
             a == FLAT ? "flat" : "two-level", w->time_us / 1000, w->busbw_mbs, ratio, imax, fmax, w->link,
             w->formula_link, wire, wr, bad ? (b.ring ? "  MEASURED != FORMULA" : "  MODEL != FORMULA") : "");
      if (w->first[0] >= 0)
        printf("  WRONG: rank %.0f element %.0f got %g, expected %g (the sum over the %d ranks)\n",
               w->first[0], w->first[1], w->first[2], w->first[3], N);
      if (bad)
        for (int r = 0; r < N; r++)
          if (w->inter[r] != w->formula[r])
            printf("  %s != FORMULA: rank %d sent %.0f bytes across nodes per all-reduce, the formula %.0f\n",
                   b.ring ? "MEASURED" : "MODEL", r, w->inter[r], w->formula[r]);
      if (jf) {
        fprintf(jf, "%s\n  {\"bytes\": %lld, \"algorithm\": \"%s\", \"time_us\": %.3f, \"busbw_mbs\": %.4f, "
                    "\"busbw_over_link\": ",
                njson++ ? "," : "", (long long)nbytes, g_alg[a], w->time_us, w->busbw_mbs);
        if (link_mbit > 0) fprintf(jf, "%.4f", w->busbw_mbs / (link_mbit / 8));
        else fprintf(jf, "null");
        fprintf(jf, ",\n   \"inter_node_bytes_per_rank\": ");
        json_array(jf, w->inter, N);
        fprintf(jf, ", \"formula_inter_node_bytes_per_rank\": ");
        json_array(jf, w->formula, N);
        fprintf(jf, ",\n   \"p2p_inter_node_bytes_per_rank\": ");
        json_array(jf, w->p2p, N);
        fprintf(
            jf,
            ", \"inter_node_bytes_per_node_link\": %.17g, \"formula_inter_node_bytes_per_node_link\": %.17g, "
            "\"wire_tx_bytes_per_node\": ",
            w->link, w->formula_link);
        if (b.emulated) json_array(jf, w->wire, K);
        else fprintf(jf, "null");
        fprintf(jf, ", \"wrong\": %lld, \"ranks_off_formula\": %d, \"first_wrong\": ", (long long)w->wrong,
                bad);
        if (w->first[0] >= 0)
          fprintf(jf, "{\"rank\": %.0f, \"index\": %.0f, \"got\": %.17g, \"expected\": %.17g}}", w->first[0],
                  w->first[1], w->first[2], w->first[3]);
        else
          fprintf(jf, "null}");
      }
    }
    if (b.rank == 0) fflush(stdout);
  }
  if (b.rank == 0) {
    printf("#wrong: %lld %s; inter-node bytes off the formula: %lld rank-sizes %s\n", (long long)wrong,
           wrong ? "WRONG" : "OK", (long long)off, off ? "OFF" : "OK");
    fflush(stdout);
  }
  if (jf) {
    fprintf(jf, "\n ],\n \"wrong\": %lld, \"ranks_off_formula\": %lld}\n", (long long)wrong, (long long)off);
    outfile_close(jf, "--json", json, tmp);
  }
  for (int a = 0; a < NALGS; a++) {
    free(rows[a].inter);
    free(rows[a].formula);
    free(rows[a].p2p);
    free(rows[a].wire);
  }
  dev_free(b.dev, b.buf);
  free(b.orig);
  free(b.host);
  hier_free(&b.h);
  comm_finalize(c);
  return wrong || off ? 1 : 0;
}
