/* ulysses.c — all-to-all context parallelism, DeepSpeed-Ulysses (ulysses.h; notes/10-long-sequences.md,
 * meeting 10b): the transpose [n positions, all heads] ↔ [S positions, NH/C heads] as pack, one
 * comm_all_to_all, unpack (the exercise ulysses_unpack: where a received row lands), and the ordinary
 * attention op between the two all-to-alls. */
#include "ulysses.h"
#include <stdio.h>    // snprintf
#include <stdlib.h>   // free
#include <string.h>   // memcpy
#include "check.h"    // die, xmalloc
#include "exercise.h" // zl_exercise_todo (what the generated stubs call)
#include "ledger.h"   // LEDGER_ACTS
#include "ops_gpt.h"  // op_attention_fwd, op_attention_bwd
#include "trace.h"    // trace_now_us

/* ---- the transpose's index arithmetic ---------------------------------------------------------- */
void ulysses_pack(int R, int n, int E, int F, int C, const float *x, float *send) {
  int Eh = E / C;
  int64_t blk = (int64_t)R * n * F * Eh;
  for (int p = 0; p < C; p++)
    for (int64_t t = 0; t < (int64_t)R * n; t++) /* t = rho·n + i: the local token */
      for (int f = 0; f < F; f++)
        memcpy(send + p * blk + (t * F + f) * Eh, x + t * F * E + (int64_t)f * E + (int64_t)p * Eh,
               (size_t)Eh * sizeof(float));
}

void ulysses_unpack(int R, int n, int S, int E, int F, int C, const int *pos, const float *recv, float *y) {
  // BEGIN EXERCISE ulysses_unpack notes/10-long-sequences.md
  // HINT: block q of recv came from rank q: its R rows × n positions (q's own, in order) × F parts of this
  // HINT: rank's heads. Each (row, position) lands at the row's global position in y, every part beside the
  // HINT: others.
  // HINT2: Eh = E/C features per part; blk = R·n·F·Eh floats per block; the source of (q, rho, i, f) is
  // HINT2: recv + q·blk + ((rho·n + i)·F + f)·Eh, the destination y + (rho·S + pos[q·n + i])·F·Eh +
  // HINT2: f·Eh.
  // HINT3: for q < C, rho < R, i < n, f < F: memcpy(y + ((int64_t)rho·S + pos[q·n + i])·F·Eh + f·Eh,
  // HINT3: recv + q·blk + (((int64_t)rho·n + i)·F + f)·Eh, Eh floats). pos[q·n + i], not q·n + i: with
  // HINT3: --cp-balance 1 a rank's positions are two mirrored chunks.
  int Eh = E / C;
  int64_t blk = (int64_t)R * n * F * Eh;
  for (int q = 0; q < C; q++)
    for (int rho = 0; rho < R; rho++)
      for (int i = 0; i < n; i++)
        for (int f = 0; f < F; f++)
          memcpy(y + ((int64_t)rho * S + pos[q * n + i]) * F * Eh + (int64_t)f * Eh,
                 recv + q * blk + (((int64_t)rho * n + i) * F + f) * Eh, (size_t)Eh * sizeof(float));
  // END EXERCISE
}

void ulysses_pack_back(int R, int n, int S, int E, int F, int C, const int *pos, const float *y,
                       float *send) {
  int Eh = E / C;
  int64_t blk = (int64_t)R * n * F * Eh;
  for (int q = 0; q < C; q++)
    for (int rho = 0; rho < R; rho++)
      for (int i = 0; i < n; i++)
        memcpy(send + q * blk + ((int64_t)rho * n + i) * F * Eh,
               y + ((int64_t)rho * S + pos[q * n + i]) * F * Eh, (size_t)F * Eh * sizeof(float));
}

void ulysses_unpack_back(int R, int n, int E, int F, int C, const float *recv, float *x) {
  int Eh = E / C;
  int64_t blk = (int64_t)R * n * F * Eh;
  for (int p = 0; p < C; p++)
    for (int64_t t = 0; t < (int64_t)R * n; t++)
      for (int f = 0; f < F; f++)
        memcpy(x + t * F * E + (int64_t)f * E + (int64_t)p * Eh, recv + p * blk + (t * F + f) * Eh,
               (size_t)Eh * sizeof(float));
}

/* ---- the attention over the group --------------------------------------------------------------- */
int cp_ulysses_check(int S, int NH, int C, char *why, size_t n) {
  if (C < 1) return snprintf(why, n, "C must be >= 1"), 1;
  if (NH % C)
    return snprintf(why, n, "the heads (%d) must be divisible by C: each rank attends NH/C of them", NH), 1;
  if (S % C) return snprintf(why, n, "seq_len %d must be divisible by C", S), 1;
  return 0;
}

void cp_ulysses_init(cp_ulysses_t *u, comm_t *c, int S, int E, int NH, const int *pos) {
  *u = (cp_ulysses_t){.c = c, .C = comm_world(c), .r = comm_rank(c), .S = S, .E = E, .NH = NH, .pos = pos};
  char why[160];
  if (cp_ulysses_check(S, NH, u->C, why, sizeof why)) die("cp_ulysses_init: %s", why);
  u->n = S / u->C;
}

void cp_ulysses_free(cp_ulysses_t *u) {
  free(u->own_pos);
  u->own_pos = NULL;
  tensor_free(&u->send);
  tensor_free(&u->recv);
  tensor_free(&u->dh);
}

static float *grow(tensor_t *t, const char *name, int64_t numel) {
  return tensor_grow(t, name, LEDGER_ACTS, DT_F32, DEV_CPU, numel);
}

int64_t cp_ulysses_saved_per_token(int S, int E, int NH) { return (int64_t)NH * S + 3 * (int64_t)E; }
int64_t cp_ulysses_fwd_numel(int C, int64_t R, int n, int E) {
  return (int64_t)(C - 1) * 4 * R * n * (E / C);
}
int64_t cp_ulysses_bwd_numel(int C, int64_t R, int n, int E) { return cp_ulysses_fwd_numel(C, R, n, E); }

/* [R, n, F·E] on every rank → [R, S, F·E/C] (this rank's heads): pack, all-to-all, unpack. */
static void to_heads(cp_ulysses_t *u, float *y, const float *x, int R, int F) {
  int64_t numel = (int64_t)R * u->n * F * u->E;
  float *snd = grow(&u->send, "ulysses a2a send", numel), *rcv = grow(&u->recv, "ulysses a2a recv", numel);
  ulysses_pack(R, u->n, u->E, F, u->C, x, snd);
  double t0 = trace_now_us();
  comm_all_to_all(u->c, snd, rcv, numel, DT_F32);
  u->wait_us += trace_now_us() - t0;
  ulysses_unpack(R, u->n, u->S, u->E, F, u->C, u->pos, rcv, y);
}
/* The way back: [R, S, F·E/C] → [R, n, F·E]. */
static void to_positions(cp_ulysses_t *u, float *x, const float *y, int R, int F) {
  int64_t numel = (int64_t)R * u->n * F * u->E;
  float *snd = grow(&u->send, "ulysses a2a send", numel), *rcv = grow(&u->recv, "ulysses a2a recv", numel);
  ulysses_pack_back(R, u->n, u->S, u->E, F, u->C, u->pos, y, snd);
  double t0 = trace_now_us();
  comm_all_to_all(u->c, snd, rcv, numel, DT_F32);
  u->wait_us += trace_now_us() - t0;
  ulysses_unpack_back(R, u->n, u->E, F, u->C, rcv, x);
}

/* The hybrid: the ring of G across the groups instead of the ordinary attention, on this rank's
 * NH/A heads of the group's A·n positions. saved: [lse (R, NH/A, A·n) | q k v (R, A·n, 3E/A) |
 * out (R, A·n, E/A)]. */
static void usp_forward(cp_ulysses_t *u, float *out, float *saved, const float *qkv, int R) {
  int64_t N = (int64_t)R * u->S; /* R rows × the group's A·n positions */
  int Eh = u->E / u->C;
  float *lse = saved, *qkvh = lse + N * (u->NH / u->C), *outh = qkvh + N * 3 * Eh;
  to_heads(u, qkvh, qkv, R, 3);
  cp_ring_forward(u->ring, outh, lse, qkvh, R); /* K/V blocks of A·n positions, E/A features, round G */
  to_positions(u, out, outh, R, 1);
  u->calls_fwd++;
}

static void usp_backward(cp_ulysses_t *u, float *dqkv, const float *dout, const float *saved, int R) {
  int64_t N = (int64_t)R * u->S;
  int Eh = u->E / u->C;
  const float *lse = saved, *qkvh = lse + N * (u->NH / u->C), *outh = qkvh + N * 3 * Eh;
  float *doh = grow(&u->dh, "ulysses heads buffer", N * 4 * Eh), *dqkvh = doh + N * Eh;
  to_heads(u, doh, dout, R, 1);
  cp_ring_backward(u->ring, dqkvh, doh, qkvh, outh, lse, R);
  to_positions(u, dqkv, dqkvh, R, 3);
  u->calls_bwd++;
}

void cp_ulysses_forward(cp_ulysses_t *u, float *out, float *saved, const float *qkv, int R) {
  if (u->ring) {
    usp_forward(u, out, saved, qkv, R);
    return;
  }
  int S = u->S, Eh = u->E / u->C, NHh = u->NH / u->C;
  float *att = saved, *qkvh = saved + (int64_t)R * NHh * S * S; /* (R, NH/C, S, S) | (R, S, 3Eh) */
  to_heads(u, qkvh, qkv, R, 3);                                  /* Q, K, V: one all-to-all of 3 parts */
  float *outh = grow(&u->dh, "ulysses heads buffer", (int64_t)R * S * 3 * Eh);
  op_attention_fwd(DEV_CPU, outh, att, qkvh, R, S, Eh, NHh);    /* the ordinary attention, whole sequence */
  to_positions(u, out, outh, R, 1);                              /* O back */
  u->calls_fwd++;
}

void cp_ulysses_backward(cp_ulysses_t *u, float *dqkv, const float *dout, const float *saved, int R) {
  if (u->ring) {
    usp_backward(u, dqkv, dout, saved, R);
    return;
  }
  int S = u->S, Eh = u->E / u->C, NHh = u->NH / u->C;
  const float *att = saved, *qkvh = saved + (int64_t)R * NHh * S * S;
  float *dh = grow(&u->dh, "ulysses heads buffer", (int64_t)R * S * 4 * Eh),
        *dqkvh = dh + (int64_t)R * S * Eh;
  to_heads(u, dh, dout, R, 1);                                   /* dO out */
  op_attention_bwd(DEV_CPU, dqkvh, dh, qkvh, att, R, S, Eh, NHh);
  to_positions(u, dqkv, dqkvh, R, 3);                            /* dQ, dK, dV back: one all-to-all */
  u->calls_bwd++;
}

/* ---- the 2-D hybrid ------------------------------------------------------------------------------ */
int cp_usp_check(int S, int NH, int C, int A, int balance, char *why, size_t n) {
  if (A < 1 || C < 1 || C % A) return snprintf(why, n, "A must divide C (%d): groups of A ranks", C), 1;
  if (NH % A)
    return snprintf(why, n,
                    "the heads (%d) must be divisible by A: each rank of a group attends NH/A of them", NH),
           1;
  if (S % C) return snprintf(why, n, "seq_len %d must be divisible by C = %d", S, C), 1;
  if (balance && S % (2 * (C / A))) /* the ring of G = C/A groups: two mirrored chunks each */
    return snprintf(why, n,
                    "seq_len %d must be divisible by 2G = %d (the ring of G = C/A groups, two mirrored "
                    "chunks each)",
                    S, 2 * (C / A)),
           1;
  return 0;
}

void cp_usp_init(cp_ulysses_t *u, comm_t *a2a, cp_ring_t *ring, int E, int NH) {
  int A = comm_world(a2a);
  *u = (cp_ulysses_t){.c = a2a, .C = A, .r = comm_rank(a2a), .S = ring->n, .E = E, .NH = NH, .ring = ring};
  if (ring->n % A || NH % A || E % A || ring->E * A != E || ring->NH * A != NH)
    die("cp_usp_init: the ring (n %d, E %d, %d heads) is not the groups' of A = %d (E %d, %d heads)", ring->n,
        ring->E, ring->NH, A, E, NH);
  u->n = ring->n / A;
  u->own_pos = xmalloc((size_t)ring->n * sizeof(int), "usp group positions");
  for (int i = 0; i < ring->n; i++) u->own_pos[i] = i; /* the group's positions, in the ring block's order */
  u->pos = u->own_pos;
}

int64_t cp_usp_saved_per_token(int E, int NH) { return (int64_t)NH + 4 * (int64_t)E; }
