/* pipeline_groups.c — which of a stage's messages go together, decided from the lists alone so
 * that both ends of a link decide alike (the contract: pipeline_groups.h; notes/07-pipeline.md,
 * 07c). Holds 1F1B's pairs (pp_pairs: pipeline_pairs.c sends them as one comm_sendrecv_async),
 * the NCCL backend's groups (pp_groups, v = 1; pp_group_cuts, Megatron's boundaries for
 * interleaved), the MPI backend's receives posted ahead (pp_posted_recvs: pipeline_post.c), and
 * the same decisions on given lists, which the checker (pipeline_check*.c) runs. Plain C11 and
 * libc only, as pipeline_sched.c. */
#include "pipeline_groups.h" // the contracts implemented here; pp_schedule_ops, pp_schedule_nops
#include <stdlib.h>          // calloc, free
#include <string.h>          // memset

/* ---- the pairs -------------------------------------------------------------------------------- */

void pp_pairs(pp_schedule_t sched, int P, int s, int M, int v, char *pair_fwd, char *pair_bwd) {
  memset(pair_fwd, 0, (size_t)M);
  memset(pair_bwd, 0, (size_t)M);
  if (v != 1 || P < 2) return;
  int cap = pp_schedule_nops(sched, M, v);
  pp_op_t *me = calloc((size_t)cap, sizeof *me), *nb = calloc((size_t)cap, sizeof *nb);
  if (!me || !nb) {
    free(me), free(nb);
    return;
  }
  int n = pp_schedule_ops(sched, P, s, M, 1, me);
  for (int side = 0; side < 2; side++) { /* 0: with s+1 (F then B here), 1: with s-1 (B then F here) */
    int peer = side == 0 ? s + 1 : s - 1;
    if (peer < 0 || peer >= P) continue;
    int nn = pp_schedule_ops(sched, P, peer, M, 1, nb);
    char a = side == 0 ? 'F' : 'B', b = side == 0 ? 'B' : 'F';
    for (int i = 0; i + 1 < n; i++) {
      if (me[i].kind != a || me[i + 1].kind != b) continue;
      for (int m = 0; m + 1 < nn; m++)
        if (nb[m].kind == b && nb[m].micro == me[i + 1].micro && nb[m + 1].kind == a &&
            nb[m + 1].micro == me[i].micro)
          (side == 0 ? pair_fwd : pair_bwd)[me[i].micro] = 1;
    }
  }
  free(me);
  free(nb);
}

/* ---- the segments of interleaved on NCCL ------------------------------------------------------- */

int pp_op_receives(int P, int V, int s, pp_op_t o) {
  int c = o.chunk * P + s;
  return (o.kind == 'F' && c > 0) || (o.kind == 'B' && c < V - 1);
}

int pp_op_sends(int P, int V, int s, pp_op_t o) {
  int c = o.chunk * P + s;
  return (o.kind == 'F' && c < V - 1) || (o.kind == 'B' && c > 0);
}

int pp_segment_end(const char *cut, int n, int i) {
  int e = i + 1;
  while (e < n && !(cut[e] & 1)) e++;
  return e;
}

/* The held sends go at once (bit 1 of cut[i]) at the last send of each segment whose next segment
 * receives nothing (or that ends the list): no boundary would take them. cut[i] & 1: the boundaries. */
void pp_group_flush(int P, int s, int v, const pp_op_t *ops, int n, char *cut) {
  int V = v * P;
  for (int i = 0; i < n; i++) cut[i] &= 1;
  for (int i = 0; i < n;) {
    int e = pp_segment_end(cut, n, i), last = -1, recv = 0;
    for (int i2 = i; i2 < e; i2++)
      if (pp_op_sends(P, V, s, ops[i2])) last = i2;
    int e2 = e < n ? pp_segment_end(cut, n, e) : e;
    for (int i2 = e; i2 < e2; i2++) recv |= pp_op_receives(P, V, s, ops[i2]);
    if (last >= 0 && !recv) cut[last] |= 2;
    i = e;
  }
}

/* Interleaved on NCCL (Megatron-LM's forward_backward_pipelining_with_interleaving): a boundary
 * before every operation but the B of a steady-state pair (F, B) — the pair's two sends go together
 * after its B, its two receives together before its F (send_forward_backward_recv_forward_backward). */
void pp_group_cuts(pp_schedule_t sched, int P, int s, int M, int v, const pp_op_t *ops, int n,
                   char *cut) {
  (void)sched;
  int w = (P - s - 1) * 2 + (v - 1) * P; /* the warm-up forwards (pp_schedule_ops), then the pairs */
  if (w > v * M) w = v * M;
  for (int i = 0; i < n; i++) cut[i] = 1;
  /* the steady pairs: F at w, w + 2, ..., B after it */
  for (int i = w; i + 1 < n && i < 2 * v * M - w; i += 2)
    if (ops[i].kind == 'F' && ops[i + 1].kind == 'B') cut[i + 1] = 0;
  pp_group_flush(P, s, v, ops, n, cut);
}

/* ---- the groups of v = 1 on NCCL -------------------------------------------------------------- */

/* hf[k] / hb[k] = 1 when F k's / B k's send is held back for the receive of the next operation
 * that is not a W, that one receiving (v = 1). */
void pp_groups_of_list(int P, int s, int v, const pp_op_t *ops, int n, char *hf, char *hb) {
  if (v != 1) return;
  for (int i = 0; i < n; i++) {
    pp_op_t o = ops[i];
    if (!((o.kind == 'F' && s < P - 1) || (o.kind == 'B' && s > 0))) continue; /* no send */
    int i2 = i + 1;
    while (i2 < n && ops[i2].kind == 'W') i2++;
    if (i2 < n && ((ops[i2].kind == 'F' && s > 0) || (ops[i2].kind == 'B' && s < P - 1)))
      (o.kind == 'F' ? hf : hb)[o.micro] = 1;
  }
}

void pp_groups(pp_schedule_t sched, int P, int s, int M, int v, char *hold_fwd, char *hold_bwd) {
  memset(hold_fwd, 0, (size_t)M), memset(hold_bwd, 0, (size_t)M);
  if (v != 1 || sched < 0 || sched >= PP_NSCHED || P < 1 || s < 0 || s >= P || M < 1) return;
  pp_op_t *ops = calloc((size_t)pp_schedule_nops(sched, M, v), sizeof *ops);
  int n = pp_schedule_ops(sched, P, s, M, v, ops);
  pp_groups_of_list(P, s, v, ops, n, hold_fwd, hold_bwd);
  free(ops);
}

/* ---- the receives posted ahead (MPI) ---------------------------------------------------------- */

/* Stage s's receives of one kind ('F': activations in, 'B': gradients in) from its list, in order,
 * but those the previous operation's held send goes with (pairs pf / pb, v = 1). */
int pp_unpaired_recvs(int P, int s, int v, const pp_op_t *ops, int n, const char *pf, const char *pb,
                      char kind, pp_op_t *out) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    pp_op_t o = ops[i];
    int c = o.chunk * P + s;
    if (o.kind != kind || (kind == 'F' ? c == 0 : c == v * P - 1)) continue;
    if (v == 1 && i > 0 && ops[i - 1].kind == (kind == 'F' ? 'B' : 'F') &&
        (kind == 'F' ? pb : pf)[ops[i - 1].micro])
      continue; /* a pair: the previous operation's send goes with this receive */
    out[m++] = o;
  }
  return m;
}

int pp_posted_recvs(pp_schedule_t sched, int P, int s, int M, int v, char kind, pp_op_t *out) {
  if (sched < 0 || sched >= PP_NSCHED || P < 1 || s < 0 || s >= P || M < 1 || v < 1) return 0;
  int nops = pp_schedule_nops(sched, M, v), m;
  pp_op_t *ops = calloc((size_t)nops, sizeof *ops), *tmp = out ? out : calloc((size_t)nops, sizeof *ops);
  char *pf = calloc((size_t)M, 1), *pb = calloc((size_t)M, 1);
  int n = pp_schedule_ops(sched, P, s, M, v, ops);
  pp_pairs(sched, P, s, M, v, pf, pb);
  m = pp_unpaired_recvs(P, s, v, ops, n, pf, pb, kind, tmp);
  if (!out) free(tmp);
  free(ops), free(pf), free(pb);
  return m;
}
