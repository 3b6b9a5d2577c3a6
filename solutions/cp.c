/* cp.c — ring attention with an online softmax (cp.h; notes/10-long-sequences.md, Part 2): the
 * layout of a sequence over a CP group, the block kernels (the exercise cp_attend_block: one ring
 * step's fold of a K/V block into the running softmax) and the ring that moves the blocks. */
#include "cp.h"
#include <math.h>           // expf, logf, sqrtf, INFINITY
#include <stdio.h>          // snprintf
#include <stdlib.h>         // free
#include <string.h>         // memcpy, memset
#include "check.h"    // die, xmalloc, xcalloc
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include "ledger.h"   // LEDGER_ACTS
#include "trace.h"    // trace_now_us

/* ---- the layout ---------------------------------------------------------------------------- */
int cp_layout_check(int S, int C, int balance, char *why, size_t n) {
  if (C < 1) return snprintf(why, n, "C must be >= 1"), 1;
  int parts = balance ? 2 * C : C;
  if (S % parts)
    return snprintf(why, n, "seq_len %d must be divisible by %s = %d", S,
                    balance ? "2C (two mirrored chunks per rank)" : "C", parts),
           1;
  return 0;
}

void cp_positions(int S, int C, int balance, int q, int *pos) {
  int n = S / C;
  if (!balance) {
    for (int i = 0; i < n; i++) pos[i] = q * n + i;
    return;
  }
  int h = S / (2 * C); /* chunks q and 2C−1−q */
  for (int i = 0; i < h; i++) pos[i] = q * h + i, pos[h + i] = (2 * C - 1 - q) * h + i;
}

int64_t cp_work_formula(int S, int C, int balance, int q) {
  int n = S / C;
  int *pos = xmalloc((size_t)n * sizeof(int), "cp positions");
  cp_positions(S, C, balance, q, pos);
  int64_t w = 0;
  for (int i = 0; i < n; i++) w += pos[i] + 1;
  free(pos);
  return w;
}

/* The keys of a block a query at position p sees: kpos is ascending, so a prefix. */
static int visible(const int *kpos, int n, int p) {
  int lo = 0, hi = n; /* first j with kpos[j] > p */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (kpos[mid] <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* ---- the kernels --------------------------------------------------------------------------- */
int64_t cp_attend_block(int R, int n, int E, int NH, const float *qkv, const int *qpos, const float *kv,
                        const int *kpos, float *m, float *l, float *acc) {
  float *s = xmalloc((size_t)n * sizeof(float) + 4, "cp scores"); // (n) one query's scores
  int64_t work = 0;
  for (int rho = 0; rho < R; rho++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < n; i++) {
        int cnt = visible(kpos, n, qpos[i]); /* keys j < cnt: kpos[j] <= qpos[i] */
        if (cnt == 0) continue;
        // BEGIN EXERCISE cp_attend_block notes/10-long-sequences.md
        // HINT: scores of the visible keys, their max; rescale what acc and l hold by e^(m − m') for the
        // HINT: new
        // HINT: max m', then add this block's e^(s − m') terms.
        // HINT2: hs = E/NH, scale = 1/sqrt(hs); q = qkv + (rho·n + i)·3E + h·hs; m[st], l[st] with st =
        // HINT2: (rho·NH + h)·n + i; acc at (rho·n + i)·E + h·hs.
        // HINT2: k_j = kv + (rho·n + j)·2E + h·hs, v_j = the same + E; s[j] = scale·q·k_j for j < cnt.
        // HINT2: m[st]
        // HINT2: starts at −INFINITY: expf(−inf) = 0 rescales nothing.
        // HINT3: mx = max s[j]; mn = fmaxf(m[st], mx); c = expf(m[st] − mn); a[d] *= c; then p = expf(s[j]
        // HINT3: −
        // HINT3: mn): sum += p, a[d] += p·v_j[d]; l[st] = l[st]·c + sum; m[st] = mn.
        int hs = E / NH;                                                         // head size
        const float *q = qkv + ((int64_t)rho * n + i) * 3 * E + (int64_t)h * hs; // (hs) this query, head h
        int64_t st = ((int64_t)rho * NH + h) * n + i;                            // its m, l
        float scale = 1.0f / sqrtf((float)hs);
        float *a = acc + ((int64_t)rho * n + i) * E + (int64_t)h * hs;           // (hs) its acc
        float mx = -INFINITY;
        for (int j = 0; j < cnt; j++) {
          const float *k = kv + ((int64_t)rho * n + j) * 2 * E + (int64_t)h * hs;
          float d = 0.0f;
          for (int c = 0; c < hs; c++) d += q[c] * k[c];
          s[j] = d * scale;
          mx = s[j] > mx ? s[j] : mx;
        }
        float mn = m[st] > mx ? m[st] : mx;
        float corr = expf(m[st] - mn);
        for (int c = 0; c < hs; c++) a[c] *= corr;
        float sum = 0.0f;
        for (int j = 0; j < cnt; j++) {
          const float *v = kv + ((int64_t)rho * n + j) * 2 * E + E + (int64_t)h * hs;
          float p = expf(s[j] - mn);
          sum += p;
          for (int c = 0; c < hs; c++) a[c] += p * v[c];
        }
        l[st] = l[st] * corr + sum;
        m[st] = mn;
        // END EXERCISE
        work += cnt;
      }
  free(s);
  return work;
}

void cp_attend_finish(int R, int n, int E, int NH, float *acc, float *m, const float *l) {
  int hs = E / NH;
  for (int rho = 0; rho < R; rho++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < n; i++) {
        int64_t st = ((int64_t)rho * NH + h) * n + i;
        float inv = 1.0f / l[st], *a = acc + ((int64_t)rho * n + i) * E + (int64_t)h * hs;
        for (int c = 0; c < hs; c++) a[c] *= inv;
        m[st] += logf(l[st]);
      }
}

void cp_attend_dsum(int R, int n, int E, int NH, const float *dout, const float *out, float *dsum) {
  int hs = E / NH;
  for (int rho = 0; rho < R; rho++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < n; i++) {
        int64_t o = ((int64_t)rho * n + i) * E + (int64_t)h * hs;
        float d = 0.0f;
        for (int c = 0; c < hs; c++) d += dout[o + c] * out[o + c];
        dsum[((int64_t)rho * NH + h) * n + i] = d;
      }
}

int64_t cp_attend_block_bwd(int R, int n, int E, int NH, const float *qkv, const int *qpos, const float *dout,
                            const float *lse, const float *dsum, const float *kv, const int *kpos, float *dq,
                            float *dkv) {
  int hs = E / NH;
  float scale = 1.0f / sqrtf((float)hs);
  int64_t work = 0;
  for (int rho = 0; rho < R; rho++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < n; i++) {
        int cnt = visible(kpos, n, qpos[i]);
        int64_t st = ((int64_t)rho * NH + h) * n + i, o = ((int64_t)rho * n + i) * E + (int64_t)h * hs;
        const float *q = qkv + ((int64_t)rho * n + i) * 3 * E + (int64_t)h * hs, *dO = dout + o;
        float *dqi = dq + o;
        for (int j = 0; j < cnt; j++) {
          int64_t kb = ((int64_t)rho * n + j) * 2 * E + (int64_t)h * hs;
          const float *k = kv + kb, *v = kv + kb + E;
          float *dk = dkv + kb, *dv = dkv + kb + E;
          float s = 0.0f, dp = 0.0f;
          for (int c = 0; c < hs; c++) s += q[c] * k[c], dp += dO[c] * v[c];
          float p = expf(s * scale - lse[st]), ds = p * (dp - dsum[st]) * scale;
          for (int c = 0; c < hs; c++) {
            dqi[c] += ds * k[c];
            dk[c] += ds * q[c];
            dv[c] += p * dO[c];
          }
        }
        work += cnt;
      }
  return work;
}

/* ---- the ring ------------------------------------------------------------------------------ */
void cp_ring_init(cp_ring_t *g, comm_t *c, int S, int balance, int E, int NH) {
  *g = (cp_ring_t){
      .c = c, .C = comm_world(c), .r = comm_rank(c), .S = S, .balance = balance, .E = E, .NH = NH};
  char why[160];
  if (cp_layout_check(S, g->C, balance, why, sizeof why)) die("cp_ring_init: %s", why);
  g->n = S / g->C;
  g->pos = xmalloc((size_t)g->C * g->n * sizeof(int), "cp positions");
  for (int q = 0; q < g->C; q++) cp_positions(S, g->C, balance, q, g->pos + (int64_t)q * g->n);
}

void cp_ring_free(cp_ring_t *g) {
  free(g->pos);
  for (int i = 0; i < 2; i++) tensor_free(&g->buf[i]);
  tensor_free(&g->ml);
  tensor_free(&g->dq);
  g->pos = NULL;
}

static float *grow(tensor_t *t, const char *name, int64_t numel) {
  return tensor_grow(t, name, LEDGER_ACTS, DT_F32, DEV_CPU, numel);
}

int64_t cp_ring_fwd_numel(int C, int64_t R, int n, int E) { return (int64_t)(C - 1) * 2 * R * n * E; }
int64_t cp_ring_bwd_numel(int C, int64_t R, int n, int E) {
  return C > 1 ? (int64_t)(C - 1) * 4 * R * n * E + 2 * R * n * E : 0;
}

/* One hop round the ring: send numel floats of `out` to r + 1 and receive numel into `in` from
 * r − 1 as ONE paired operation on the group's stream (comm_sendrecv_async: on NCCL one grouped
 * call, so no cycle of blocked sends forms for any C, with eager or synchronous sends alike).
 * Returns the handle that covers both buffers. */
static comm_handle_t hop_start(cp_ring_t *g, const float *out, float *in, int64_t numel, const char *tag) {
  int nx = (g->r + 1) % g->C, pv = (g->r + g->C - 1) % g->C;
  return comm_sendrecv_async(g->c, out, numel, nx, in, numel, pv, DT_F32, tag);
}

void cp_ring_forward(cp_ring_t *g, float *out, float *lse, const float *qkv, int R) {
  int n = g->n, E = g->E, C = g->C, r = g->r;
  int64_t N = (int64_t)R * n, kvn = N * 2 * E;
  float *cur = grow(&g->buf[0], "cp K/V block", 4 * N * E),
        *nxt = grow(&g->buf[1], "cp K/V block", 4 * N * E);
  float *l = grow(&g->ml, "cp running sum", N * g->NH);
  /* [k | v] */
  for (int64_t t = 0; t < N; t++) memcpy(cur + t * 2 * E, qkv + t * 3 * E + E, (size_t)2 * E * sizeof(float));
  for (int64_t k = 0; k < N * g->NH; k++) lse[k] = -INFINITY, l[k] = 0.0f;
  memset(out, 0, (size_t)N * E * sizeof(float));
  const int *qpos = g->pos + (int64_t)r * n;
  g->work_fwd = 0;
  for (int j = 0; j < C; j++) {
    int src = (r - j + C) % C; /* whose block this rank holds at step j */
    comm_handle_t h = 0;
    /* the next block travels while this one is used */
    if (j < C - 1) h = hop_start(g, cur, nxt, kvn, "cp kv");
    g->work_fwd += cp_attend_block(R, n, E, g->NH, qkv, qpos, cur, g->pos + (int64_t)src * n, lse, l, out);
    if (j < C - 1) {
      double t0 = trace_now_us(); /* what of the hop the fold did not cover */
      comm_wait(g->c, h);
      g->wait_us += trace_now_us() - t0;
      float *t = cur;
      cur = nxt, nxt = t;
    }
  }
  cp_attend_finish(R, n, E, g->NH, out, lse, l);
  g->calls_fwd++;
}

void cp_ring_backward(cp_ring_t *g, float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, int R) {
  int n = g->n, E = g->E, C = g->C, r = g->r;
  int64_t N = (int64_t)R * n, kvn = N * 2 * E;
  float *cur = grow(&g->buf[0], "cp K/V block", 4 * N * E),
        *nxt = grow(&g->buf[1], "cp K/V block", 4 * N * E);
  float *dsum = grow(&g->ml, "cp running sum", N * g->NH), *dq = grow(&g->dq, "cp dq", N * E);
  for (int64_t t = 0; t < N; t++) memcpy(cur + t * 2 * E, qkv + t * 3 * E + E, (size_t)2 * E * sizeof(float));
  memset(cur + kvn, 0, (size_t)kvn * sizeof(float)); /* this block's dK/dV, carried with it */
  memset(dq, 0, (size_t)N * E * sizeof(float));
  cp_attend_dsum(R, n, E, g->NH, dout, out, dsum);
  const int *qpos = g->pos + (int64_t)r * n;
  for (int j = 0; j < C; j++) {
    int src = (r - j + C) % C;
    cp_attend_block_bwd(R, n, E, g->NH, qkv, qpos, dout, lse, dsum, cur, g->pos + (int64_t)src * n, dq,
                        cur + kvn);
    if (C == 1) break;
    /* [K|V|dK|dV] to the next rank */
    comm_handle_t h = j < C - 1 ? hop_start(g, cur, nxt, 2 * kvn, "cp kv+dkv")
                                /* block r+1's gradient to rank r+1 */
                                : hop_start(g, cur + kvn, nxt + kvn, kvn, "cp dkv home");
    double t0 = trace_now_us();
    comm_wait(g->c, h);
    g->wait_us += trace_now_us() - t0;
    float *t = cur;
    cur = nxt, nxt = t;
  }
  const float *dkv = cur + kvn; /* this rank's own block's dK/dV, all C ranks' contributions */
  for (int64_t t = 0; t < N; t++) {
    memcpy(dqkv + t * 3 * E, dq + t * E, (size_t)E * sizeof(float));
    memcpy(dqkv + t * 3 * E + E, dkv + t * 2 * E, (size_t)2 * E * sizeof(float));
  }
  g->calls_bwd++;
}
