/* qgz.c — ZeRO++'s qgZ: a unit's gradient reduced in int4 blocks in two all-to-alls, inside the node
 * then across the nodes, in place of ZeRO-3's reduce-scatter (the scheme and its bound: qgz.h).
 * Notes: notes/13-compression.md.
 *
 * ZeRO-3 (solutions/zero3.c) calls qgz_setup in its setup, qgz_end_unit where it would start a
 * unit's reduce-scatter and qgz_release in its teardown; the all-to-alls are chapter 01's
 * (comm_all_to_all_async: with --impl ring, the pairwise exchange of solutions/alltoall.c). The
 * formula of every ZeRO++ combination on ZeRO-3 (zeropp_formula) is here too. */
#include "qgz.h"      // qgz_t, qgz_words, qgz_quantise, qgz_dequantise_add, the hooks
#include "qwz.h"      // qwz_words (zeropp_formula: the int8 gathers)
#include "args.h"     // args_env_world
#include "check.h"    // xcalloc, xmalloc, die_on_rank
#include "tensor.h"   // tensor_at
#include "trace.h"    // trace_begin, trace_end (TRAINER_PHASE)
#include <math.h>     // fabsf, fmaxf, lrintf
#include <stdio.h>    // snprintf, printf
#include <stdlib.h>   // free, getenv, strtol
#include <string.h>   // memset, memcpy

int64_t qgz_words(int64_t n, int B) { return (n + 7) / 8 + (n + B - 1) / B; }

void qgz_quantise(const float *x, int64_t n, int B, uint32_t *words) {
  // BEGIN EXERCISE qgz_quantise notes/13-compression.md
  // HINT: each block of B elements (the last may be shorter) is sent as one fp32 scale and a 4-bit
  // HINT: integer per element; the receiver's x^ = q·s must be within max|block|/14 of x.
  // HINT2: s = max|block|/7, q = round(x/s) clamped to [−7, 7] (0 for an all-zero block); element i's
  // HINT2: q goes in byte i/2 of words (low nibble for even i, two's complement), the scales after the
  // HINT2: ceil(n/8) words of nibbles, block b's at float index b. Clear the nibble words first.
  // HINT3: memset the (n+7)/8 words; per block: amax, s = amax/7.0f, scales[b] = s, v = lrintf(x/s)
  // HINT3: clamped; nib[i/2] |= (v & 0xF) << (4·(i&1)).
  uint8_t *nib = (uint8_t *)words;
  float *scales = (float *)(words + (n + 7) / 8);
  memset(nib, 0, (size_t)((n + 7) / 8) * 4);
  for (int64_t lo = 0, b = 0; lo < n; lo += B, b++) {
    int64_t hi = lo + B < n ? lo + B : n;
    float amax = 0;
    for (int64_t i = lo; i < hi; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = amax / 7.0f;
    scales[b] = s;
    for (int64_t i = lo; i < hi; i++) {
      long v = s > 0 ? lrintf(x[i] / s) : 0;
      v = v > 7 ? 7 : v < -7 ? -7 : v;
      nib[i / 2] |= (uint8_t)((v & 0xF) << (4 * (i & 1))); /* two's complement nibble, low one first */
    }
  }
  // END EXERCISE
}

void qgz_dequantise_add(const uint32_t *words, int64_t n, int B, float *acc) {
  const uint8_t *nib = (const uint8_t *)words;
  const float *scales = (const float *)(words + (n + 7) / 8);
  for (int64_t i = 0; i < n; i++) {
    int v = (nib[i / 2] >> (4 * (i & 1))) & 0xF;
    acc[i] += (float)(v >= 8 ? v - 16 : v) * scales[i / B];
  }
}

qgz_t *qgz_new(comm_t *shard, int B) {
  int N = comm_world(shard), me = comm_rank(shard);
  int *node = xcalloc((size_t)N, sizeof *node, "qgz node index"), K = 0;
  for (int r = 0; r < N; r++) { /* node index j: the order of the nodes' first ranks */
    node[r] = -1;
    for (int q = 0; q < r && node[r] < 0; q++)
      if (comm_node_of(shard, q) == comm_node_of(shard, r)) node[r] = node[q];
    if (node[r] < 0) node[r] = K++;
  }
  qgz_t *q = xcalloc(1, sizeof *q, "qgz state");
  q->K = K, q->g = N / K, q->B = B;
  q->rank_of = xcalloc((size_t)N, sizeof *q->rank_of, "qgz rank map");
  int *filled = xcalloc((size_t)K, sizeof *filled, "qgz node sizes"), local = 0;
  for (int r = 0; r < N; r++) {
    if (filled[node[r]] >= q->g || N % K)
      die_on_rank("--qgz: node %d holds more than %d ranks; it needs the same number on every node "
                  "(zlrun --nodes K puts NP/K on each)", comm_node_of(shard, r), N / K);
    if (r == me) local = filled[node[r]];
    q->rank_of[node[r] * q->g + filled[node[r]]++] = r;
  }
  q->node = comm_split(shard, node[me], me);      /* rank = local index, in rank order */
  q->across = comm_split(shard, local, node[me]); /* rank = node index */
  free(node), free(filled);
  return q;
}

void qgz_free(qgz_t *q) {
  if (!q) return;
  comm_finalize(q->node), comm_finalize(q->across);
  free(q->rank_of), free(q);
}

void qgz_reduce(qgz_t *q, const float *grad, int64_t p, float *out) {
  int K = q->K, g = q->g, B = q->B;
  int64_t c1 = K * p, w1 = qgz_words(c1, B), w2 = qgz_words(p, B);
  float *chunk = xmalloc((size_t)c1 * sizeof *chunk, "qgz chunk");
  uint32_t *wire = xmalloc((size_t)(2 * g * w1 + 2 * K * w2) * 4, "qgz wire");
  uint32_t *s1 = wire, *r1 = s1 + g * w1, *s2 = r1 + g * w1, *r2 = s2 + K * w2;
  for (int l = 0; l < g; l++) { /* chunk l: the pieces of the ranks (0..K−1, l), in node order */
    for (int j = 0; j < K; j++) memcpy(chunk + j * p, grad + q->rank_of[j * g + l] * p, (size_t)p * 4);
    qgz_quantise(chunk, c1, B, s1 + l * w1);
  }
  comm_wait(q->node, comm_all_to_all_async(q->node, s1, r1, g * w1, DT_F32, "all-to-all int4 grads (node)"));
  memset(chunk, 0, (size_t)c1 * sizeof *chunk); /* the node's sum of this local index's K pieces */
  for (int l = 0; l < g; l++) qgz_dequantise_add(r1 + l * w1, c1, B, chunk);
  for (int j = 0; j < K; j++) qgz_quantise(chunk + j * p, p, B, s2 + j * w2);
  comm_wait(q->across,
            comm_all_to_all_async(q->across, s2, r2, K * w2, DT_F32, "all-to-all int4 grads (across)"));
  memset(out, 0, (size_t)p * sizeof *out);
  for (int j = 0; j < K; j++) qgz_dequantise_add(r2 + j * w2, p, B, out);
  free(chunk), free(wire);
}

/* Distinct nodes before MPI: ZL_NODE_OF_RANK's entries, else the ranks over those on this host. */
static int nodes_before_mpi(void) {
  const char *map = getenv("ZL_NODE_OF_RANK");
  int world = args_env_world();
  if (map && *map) {
    int seen[64] = {0}, k = 0;
    for (char *e = (char *)map; *e;) {
      long v = strtol(e, &e, 10);
      if (v >= 0 && v < 64 && !seen[v]) seen[v] = 1, k++;
      while (*e == ',' || *e == ' ') e++;
      if (*e && (*e < '0' || *e > '9')) break;
    }
    return k;
  }
  const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int local = ls && atoi(ls) > 0 ? atoi(ls) : world;
  return world / (local > 0 ? local : 1);
}

int qgz_check_cfg(const train_cfg_t *cfg, const char **flag, char *why, int nwhy) {
  *flag = "--qgz";
  if (cfg->shard_group_node)
    snprintf(why, nwhy, "needs --shard-group all (HSDP reduces inside the node, then all-reduces shards)");
  else if (cfg->dev != DEV_CPU)
    snprintf(why, nwhy, "runs on --device cpu only (the int4 blocks are encoded by host loops)");
  else if (cfg->buffer_mb > 0)
    snprintf(why, nwhy, "cannot take --buffer-mb (its wire buffers are sized by the unit)");
  else if (nodes_before_mpi() < 2)
    snprintf(why, nwhy, "needs 2 nodes or more (zlrun --nodes K, or ZL_NODE_OF_RANK=0,0,1,1 to emulate "
             "them): its second hop is the one across nodes");
  else
    return 0;
  return -1;
}

void qgz_setup(trainer_t *t, zero3_t *z) {
  z->qgz = qgz_new(z->shard, t->cfg->quant_block);
  if (t->n_sub_comms + 2 > TRAIN_SUB_COMMS_MAX)
    die_on_rank("--qgz: the trainer already holds %d sub-communicators (TRAIN_SUB_COMMS_MAX)",
                t->n_sub_comms);
  t->sub_comms[t->n_sub_comms++] = z->qgz->node; /* the report counts their bytes */
  t->sub_comms[t->n_sub_comms++] = z->qgz->across;
  if (trainer_prints(t))
    printf("qgZ: the gradients reduced in int4 blocks of %d in two all-to-alls: inside each of %d nodes of "
           "%d ranks, then across\n", z->qgz->B, z->qgz->K, z->qgz->g);
}

void qgz_end_unit(trainer_t *t, zero3_t *z, int u) {
  const unit_t *un = &t->model.units[u];
  zero_rs_t *r = &z->rs;
  const void *grad = r->staging[r->nslots == 1 ? 0 : r->next].data; /* zero_rs_begin_unit's slot */
  int64_t p = un->piece;
  float *full = xmalloc((size_t)un->padded * sizeof *full, "qgz grad"), *mine = xmalloc((size_t)p * 4, "qgz");
  for (int64_t i = 0; i < un->padded; i++) full[i] = dt_load(grad, t->wdt, i);
  TRAINER_PHASE("qgZ reduce (2 all-to-alls)", qgz_reduce(z->qgz, full, p, mine));
  void *dst = tensor_at(&t->grads, un->shard_off);
  for (int64_t i = 0; i < p; i++) /* micro-batch 0 lands, the later ones add (as zero_rs_end_unit) */
    dt_store(dst, t->wdt, i, t->micro == 0 ? mine[i] : dt_load(dst, t->wdt, i) + mine[i]);
  free(full), free(mine);
}

void qgz_release(trainer_t *t, zero3_t *z) {
  qgz_free(z->qgz);
  z->qgz = NULL;
  t->n_sub_comms = 0;
}

zeropp_bytes_t zeropp_bytes(const model_t *m, int N, int g, int B, double b, int qwz, int hpz, int qgz,
                            int crosses) {
  int K = N / g;
  zeropp_bytes_t x = {0};
  for (int u = 0; u < m->n_units; u++) {
    int64_t padded = m->units[u].padded, p = padded / N;
    double plain = (double)(N - 1) * (double)p * b, int8 = (double)(N - 1) * (double)qwz_words(p, B) * 4;
    x.fwd += qwz ? int8 : plain;
    x.bwd += hpz ? (double)(g - 1) * (double)(padded / g) * b : qwz ? int8 : plain;
    x.red += qgz ? (double)(g - 1) * (double)qgz_words(K * p, B) * 4 : plain; /* qgZ: hop 1, in the node */
    x.red_x += qgz ? (double)(K - 1) * (double)qgz_words(p, B) * 4 : 0;      /* hop 2, all across */
  }
  x.all = x.fwd + x.bwd + x.red + x.red_x;
  /* the gathers and the reduce-scatter: the ring rule; hpZ's gather and qgZ's hop 1: never across */
  x.inter = (crosses ? x.fwd + (hpz ? 0 : x.bwd) + (qgz ? 0 : x.red) : 0) + x.red_x;
  return x;
}

/* Rank r's bytes in this run (its model, ranks, nodes, block and dtype). */
static zeropp_bytes_t zpp_bytes(const trainer_t *t, int r, int qwz, int hpz, int qgz) {
  int N = t->world, crosses = N > 1 && comm_node_of(t->comm, (r + 1) % N) != comm_node_of(t->comm, r);
  return zeropp_bytes(&t->model, N, comm_node_size(t->comm), t->cfg->quant_block, (double)dtype_size(t->wdt),
                      qwz, hpz, qgz, crosses);
}

void zeropp_print(trainer_t *t) {
  const train_cfg_t *c = t->cfg;
  double ours = 0, zero3 = 0;
  for (int r = 0; r < t->world; r++) {
    ours += zpp_bytes(t, r, c->qwz, c->hpz, c->qgz).inter / t->world;
    zero3 += zpp_bytes(t, r, 0, 0, 0).inter / t->world;
  }
  trainer_report_extra(t, "zeropp_inter_bytes", ours);
  trainer_report_extra(t, "zero3_inter_bytes", zero3);
  char codes[16];
  snprintf(codes, sizeof codes, "%s%s%s%s%s", c->qwz ? "qwZ" : "", c->qwz && c->hpz ? " " : "",
           c->hpz ? "hpZ" : "", (c->qwz || c->hpz) && c->qgz ? " " : "", c->qgz ? "qgZ" : "");
  if (trainer_prints(t) && comm_nodes(t->comm) > 1)
    printf("ZeRO++ (%s) against ZeRO-3: %.1f bytes across nodes per step per rank (formula, mean), "
           "ZeRO-3's %.1f: %.2fx fewer\n", codes, ours, zero3, ours > 0 ? zero3 / ours : 0);
}

void zeropp_formula(const trainer_t *t, formula_t *f) {
  const train_cfg_t *c = t->cfg;
  zeropp_bytes_t x = zpp_bytes(t, t->rank, c->qwz, c->hpz, c->qgz);
  f->comm_bytes = x.all;
  f->comm_inter_set = 1;
  f->comm_inter_bytes = x.inter;
  snprintf(f->comm_text, sizeof f->comm_text, "fwd %s + bwd %s + grads %s, B = %d", c->qwz ? "int8" : "b",
           c->hpz ? "b in node" : c->qwz ? "int8" : "b", c->qgz ? "int4 2 hops" : "RS b", c->quant_block);
  snprintf(f->comm_inter_text, sizeof f->comm_inter_text, "ring rule on %s%s%s",
           c->hpz ? "fwd gather" : "gathers", c->qgz ? " + (K-1) W(p) hop 2" : " + RS",
           c->qwz ? " (int8)" : "");
}
