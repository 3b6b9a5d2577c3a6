/* pipeline_check_stage.c — in the checker, each stage issues its messages exactly as the program
 * does, so a deadlock of the program is a deadlock of the model (notes/07-pipeline.md, 07c; the
 * model: pipeline_check_mx.h). Holds a stage's main thread: mx_step for every message alone, 1F1B's
 * pairs (pipeline_pairs.c), the NCCL groups of v = 1 and the receives posted ahead
 * (pipeline_post.c), with its helpers (the links, a send held for its pair, a receive posted
 * ahead), and mx_step_seg for interleaved's segments on NCCL (pp_group_cuts). pipeline_check.c
 * runs them. Test tooling in plain C11 and libc, as pipeline_sched.c. */
#include "pipeline_check_mx.h" // mx_t, mx_main_t, mx_half_t, mx_say; the contracts implemented here
#include "pipeline_groups.h"   // pp_op_receives, pp_op_sends, pp_segment_end

static int mx_msg(int kind, int chunk, int micro) { return kind * (1 << 24) + chunk * (1 << 12) + micro; }

/* Queue an operation on stage s's stream of communicator c; returns its index. */
static int mx_issue_halves(mx_t *x, int s, int c, int nh, const mx_half_t *h) {
  mx_op_t *o = &x->op[x->nop];
  o->nh = o->left = nh;
  for (int i = 0; i < nh; i++) o->h[i] = h[i];
  mx_stream_t *q = &x->st[s][c];
  q->q[q->tail++] = x->nop;
  return x->nop++;
}

static int mx_issue(mx_t *x, int s, int c, int parts, int to, int msg_s, int from, int msg_r) {
  mx_half_t h[2];
  int nh = 0;
  if (parts & MX_SEND) h[nh++] = (mx_half_t){MX_SEND, to, msg_s};
  if (parts & MX_RECV) h[nh++] = (mx_half_t){MX_RECV, from, msg_r};
  return mx_issue_halves(x, s, c, nh, h);
}

static int mx_done(const mx_t *x, int id) { return id < 0 || x->op[id].left == 0; }

/* Model chunk c's neighbour on side dir (0: c − 1, 1: c + 1) seen from stage s: 0 none (the model's
 * end), 1 on another stage, 2 on this one (the tip of dualpipev's V: a copy, no message). */
static int mx_side(const mx_t *x, int s, int c, int dir) {
  int d = dir ? c + 1 : c - 1;
  return d < 0 || d >= x->V ? 0 : pp_chunk_stage(x->P, x->vs, d) == s ? 2 : 1;
}

/* At the V's tip, what a local input waits for: F k of chunk 0 (for F k of chunk 1), B k of chunk 1
 * (for B k of chunk 0), earlier in stage s's list; 1 once it ran. */
static int mx_local_ready(const mx_main_t *mm, pp_op_t *const *ops, int s, pp_op_t o) {
  for (int i = 0; i < mm->pc; i++)
    if (ops[s][i].kind == o.kind && ops[s][i].micro == o.micro && ops[s][i].chunk == 1 - o.chunk) return 1;
  return 0;
}

/* The communicator and peer of model chunk c's link: dir 0 the input side (c − 1), 1 the output
 * side (c + 1); data 0 activations, 1 gradients. In a V: chunk j's own two streams, 2j + data. */
static void mx_link(const mx_t *x, int s, int c, int dir, int data, int *comm, int *peer) {
  if (x->vs) {
    *comm = data + 2 * pp_chunk_local(x->P, 1, c);
    *peer = pp_chunk_stage(x->P, 1, dir ? c + 1 : c - 1);
    return;
  }
  int wrap = dir == 0 ? s == 0 : s == x->P - 1;
  *comm = data + (wrap ? 2 : 0);
  *peer = dir == 0 ? (wrap ? x->P - 1 : s - 1) : (wrap ? 0 : s + 1);
  if (x->grouped) *comm = 0; /* one communicator: the wrap link's peers are ranks of it too */
  if (!wrap && x->ahead && x->parity) { /* the stage the message goes to: its parity's stream */
    int to = dir == 0 ? (data == 0 ? s : s - 1) : (data == 0 ? s + 1 : s);
    *comm = 4 + 2 * data + to % 2;
  }
}

/* Is the send of stage s's current operation held back for the next receive? Where pf / pb say
 * (v = 1): pp_pairs's pairs, or grouped, pp_groups's. */
static int mx_hold(const mx_t *x, const mx_main_t *mm, int s, pp_op_t *const *ops) {
  pp_op_t o = ops[s][mm->pc];
  return x->v == 1 && (o.kind == 'F' ? mm->pf[o.micro] : mm->pb[o.micro]);
}

static void mx_hold_send(mx_main_t *mm, int kind, int k, int j, int to, int msg) {
  mm->pend_kind = kind, mm->pend_k = k, mm->pend_c = j, mm->pend_to = to, mm->pend_msg = msg;
}

/* The held send and this receive (from `from`, message msg_r) as one operation on fwd. */
static void mx_group(mx_t *x, mx_main_t *mm, int s, int from, int msg_r) {
  mm->wait = mx_issue(x, s, 0, MX_SEND | MX_RECV, mm->pend_to, mm->pend_msg, from, msg_r);
  if (mm->pend_kind == 'F') mm->sent[mm->pend_c * x->M + mm->pend_k] = -1;
  else mm->gsent[mm->pend_c][mm->pend_k % 2] = -1;
  mm->pend_kind = 0;
}

/* Post kind a's next receive ahead (its link, its message), on stage s's stream. */
static void mx_post(mx_t *x, mx_main_t *mm, int s, int a) {
  int i = mm->posted[a], j = mm->qj[a][i], k = mm->qk[a][i], comm, peer;
  int c = pp_chunk_model(x->P, x->vs, s, j);
  mx_link(x, s, c, a, a, &comm, &peer); /* activations in: the input side; gradients in: the output side */
  mm->ring[a][i % x->ahead] =
      mx_issue(x, s, comm, MX_RECV, -1, 0, peer, a ? mx_msg(1, c + 1, k) : mx_msg(0, c - 1, k));
  mm->posted[a]++;
}

/* Where the list reads kind a's receive of (chunk j, micro-batch k) posted ahead: it must be the
 * kind's next; wait for it, and post the kind's next once it is in. */
static int mx_take(mx_t *x, mx_main_t *mm, int s, int a, int j, int k, char *why, size_t nwhy) {
  int i = mm->used[a];
  if (i >= mm->qn[a] || mm->qk[a][i] != k || mm->qj[a][i] != j)
    return mx_say(why, nwhy, "stage %d: the %s of micro-batch %d (chunk %d) is not the next receive posted "
                  "ahead", s, a ? "gradient" : "activation", k, j);
  mm->wait = mm->ring[a][i % x->ahead];
  mm->used[a]++;
  if (mm->posted[a] < mm->qn[a]) mm->repost = a;
  return 0;
}

/* ---- every message alone, in pairs, grouped with the next receive (v = 1), or posted ahead ---- */

int mx_step(mx_t *x, mx_main_t *mm, int s, pp_op_t *const *ops, const int *n, char *why, size_t nwhy,
            int *err) {
  int moved = 0, P = x->P;
  while (mm->pc < n[s]) {
    if (!mx_done(x, mm->wait)) return moved;
    mm->wait = -1;
    if (mm->repost >= 0) mx_post(x, mm, s, mm->repost), mm->repost = -1, moved = 1;
    if (x->ahead && !mm->opened) { /* the step's first receives, before its first operation */
      mm->opened = 1, moved = 1;
      for (int a = 0; a < 2; a++)
        while (mm->posted[a] < mm->qn[a] && mm->posted[a] < x->ahead) mx_post(x, mm, s, a);
    }
    pp_op_t o = ops[s][mm->pc];
    int j = o.chunk, c = pp_chunk_model(P, x->vs, s, j), k = o.micro, comm, peer;
    int in = mx_side(x, s, c, 0), out = mx_side(x, s, c, 1);
    if (x->fb && x->fb[s][mm->pc] == 1 && mm->phase == 0 && mm->fbh < 0 && mm->pc + 1 < n[s]) {
      pp_op_t b = ops[s][mm->pc + 1]; /* an F&B: its B's gradient posted first (loop_fb.c) */
      int cb = pp_chunk_model(P, x->vs, s, b.chunk);
      if (mx_side(x, s, cb, 1) == 1) {
        mx_link(x, s, cb, 1, 1, &comm, &peer);
        mm->fbh = mx_issue(x, s, comm, MX_RECV, -1, 0, peer, mx_msg(1, cb + 1, b.micro)), mm->fbw = 0;
      }
    }
    if (o.kind != 'W' && mm->phase == 0 && (o.kind == 'F' ? in : out) == 2 && !mx_local_ready(mm, ops, s, o))
      return moved; /* the V's tip: waits for this stage's own other chunk (never: a deadlock) */
    if (o.kind == 'F') {
      if (mm->phase == 0) {
        mm->phase = 1;
        if (in == 1) {
          mx_link(x, s, c, 0, 0, &comm, &peer);
          if (mm->pend_kind) { /* the held send with this receive, one operation on the forward link */
            mx_group(x, mm, s, peer, mx_msg(0, c - 1, k));
          } else if (x->ahead) {
            if (mx_take(x, mm, s, 0, j, k, why, nwhy)) return *err = 1, moved;
          } else mm->wait = mx_issue(x, s, comm, MX_RECV, -1, 0, peer, mx_msg(0, c - 1, k));
          moved = 1;
          continue;
        }
      }
      if (x->fb_early && x->fb[s][mm->pc] == 1 && mm->fbw < 2 && mm->pc + 1 < n[s]) {
        /* B begins inside F (loop_fb.c): its gradient, then its dx buffer's previous send, before F sends */
        pp_op_t b = ops[s][mm->pc + 1];
        int jb = b.chunk, cb = pp_chunk_model(P, x->vs, s, jb);
        if (mm->fbw++ == 0) {
          mm->wait = mm->fbh; /* (B's phase 0 then finds it done) */
        } else if (mx_side(x, s, cb, 0) == 1 && mm->gsent[jb][b.micro % 2] >= 0)
          mm->wait = mm->gsent[jb][b.micro % 2], mm->gsent[jb][b.micro % 2] = -1;
        moved = 1;
        continue;
      }
      if (out == 1) {
        mx_link(x, s, c, 1, 0, &comm, &peer);
        if (mx_hold(x, mm, s, ops)) mx_hold_send(mm, 'F', k, j, peer, mx_msg(0, c, k));
        else mm->sent[j * x->M + k] = mx_issue(x, s, comm, MX_SEND, peer, mx_msg(0, c, k), -1, 0);
      }
      mm->pc++, mm->phase = 0, mm->fbw = 0, moved = 1;
    } else if (o.kind == 'B') {
      if (mm->phase == 0) {
        mm->phase = 1;
        if (out == 1 && mm->fbh >= 0) { /* posted at its F&B's start */
          mm->wait = mm->fbh, mm->fbh = -1, moved = 1;
          continue;
        }
        if (out == 1) {
          mx_link(x, s, c, 1, 1, &comm, &peer);
          if (mm->pend_kind) {
            mx_group(x, mm, s, peer, mx_msg(1, c + 1, k));
          } else if (x->ahead) {
            if (mx_take(x, mm, s, 1, j, k, why, nwhy)) return *err = 1, moved;
          } else mm->wait = mx_issue(x, s, comm, MX_RECV, -1, 0, peer, mx_msg(1, c + 1, k));
          moved = 1;
          continue;
        }
      }
      if (mm->phase == 1) { /* the input gradient's buffer k % 2: its previous send must have left */
        mm->phase = 2;
        if (in == 1 && mm->gsent[j][k % 2] >= 0) {
          mm->wait = mm->gsent[j][k % 2];
          mm->gsent[j][k % 2] = -1;
          moved = 1;
          continue;
        }
      }
      if (mm->phase == 2) {
        mm->phase = 3;
        if (in == 1) {
          mx_link(x, s, c, 0, 1, &comm, &peer);
          if (mx_hold(x, mm, s, ops)) mx_hold_send(mm, 'B', k, j, peer, mx_msg(1, c, k));
          else mm->gsent[j][k % 2] = mx_issue(x, s, comm, MX_SEND, peer, mx_msg(1, c, k), -1, 0);
        }
        moved = 1;
        if (!x->split) { /* the slot goes back: its output's send must have left */
          mm->wait = mm->sent[j * x->M + k];
          mm->sent[j * x->M + k] = -1;
        }
        continue;
      }
      mm->pc++, mm->phase = 0, moved = 1;
    } else { /* W: the slot goes back after it */
      if (mm->phase == 0) {
        mm->phase = 1;
        mm->wait = mm->sent[j * x->M + k];
        mm->sent[j * x->M + k] = -1;
        moved = 1;
        continue;
      }
      mm->pc++, mm->phase = 0, moved = 1;
    }
  }
  if (mm->pend_kind && !*err) {
    *err = 1;
    mx_say(why, nwhy, "stage %d: the %s of micro-batch %d was held for a pair that never came", s,
           mm->pend_kind == 'F' ? "activation" : "input gradient", mm->pend_k);
  }
  return moved;
}

/* ---- interleaved on NCCL: Megatron's segments ---------------------------------------------------
 * Grouped with segments (x->seg): at each boundary (cut) ONE group of the sends held since the last
 * boundary and the receives of the operations up to the next one; a boundary whose next segment
 * receives nothing sends what is held as one group of sends. The main thread waits for a
 * boundary's group before the segment's first operation. */
int mx_step_seg(mx_t *x, mx_main_t *mm, int s, pp_op_t *const *ops, const int *n, char *why,
                size_t nwhy, int *err) {
  int moved = 0, P = x->P, V = x->V;
  while (mm->pc < n[s]) {
    if (!mx_done(x, mm->wait)) return moved;
    mm->wait = -1;
    pp_op_t o = ops[s][mm->pc];
    int j = o.chunk, c = j * P + s, k = o.micro, comm, peer; /* (no V here: interleaved's ring) */
    if (mm->phase == 0) { /* the boundary before this operation: its group */
      mm->phase = 1;
      if (mm->cut[mm->pc] & 1) {
        int e = pp_segment_end(mm->cut, n[s], mm->pc), nh = 0;
        mx_half_t h[MX_HALVES];
        for (int i = 0; i < mm->npend; i++) h[nh++] = mm->pend[i];
        for (int i = mm->pc; i < e; i++) {
          pp_op_t r = ops[s][i];
          if (!pp_op_receives(P, V, s, r)) continue;
          int cr = r.chunk * P + s;
          mx_link(x, s, cr, r.kind == 'F' ? 0 : 1, r.kind == 'F' ? 0 : 1, &comm, &peer);
          if (nh == MX_HALVES)
            return *err = 1, mx_say(why, nwhy, "stage %d: a group of more than %d", s, MX_HALVES), moved;
          h[nh++] = (mx_half_t){MX_RECV, peer,
                                r.kind == 'F' ? mx_msg(0, cr - 1, r.micro) : mx_msg(1, cr + 1, r.micro)};
        }
        if (nh > mm->npend) { /* a group with receives: the held sends go in it */
          mm->wait = mx_issue_halves(x, s, 0, nh, h);
          for (int i = 0; i < mm->npend; i++)
            if (mm->pend_kk[i] == 'F') mm->sent[mm->pend_jj[i] * x->M + mm->pend_mm[i]] = -1;
            else mm->gsent[mm->pend_jj[i]][mm->pend_mm[i] % 2] = -1;
          mm->npend = 0;
        } else if (nh)
          return *err = 1, mx_say(why, nwhy, "stage %d: sends held for a segment with no receive", s), moved;
        moved = 1;
        continue;
      }
    }
    /* the input gradient's buffer k % 2: its previous send must have left */
    if (o.kind == 'B' && mm->phase == 1) {
      mm->phase = 2;
      for (int i = 0; i < mm->npend && c > 0; i++)
        if (mm->pend_kk[i] == 'B' && mm->pend_jj[i] == j && mm->pend_mm[i] % 2 == k % 2)
          return *err = 1, mx_say(why, nwhy, "stage %d: B %d of chunk %d needs its input-gradient buffer %d, "
                                  "whose send is held", s, k, j, k % 2), moved;
      if (c > 0 && mm->gsent[j][k % 2] >= 0) {
        mm->wait = mm->gsent[j][k % 2];
        mm->gsent[j][k % 2] = -1;
        moved = 1;
        continue;
      }
    }
    /* the operation ran: its send held for the next boundary, or (flush) the held ones now */
    if (mm->phase <= 2) {
      mm->phase = 3;
      if (pp_op_sends(P, V, s, o)) {
        mx_link(x, s, c, o.kind == 'F' ? 1 : 0, o.kind == 'F' ? 0 : 1, &comm, &peer);
        int i = mm->npend++;
        mm->pend[i] = (mx_half_t){MX_SEND, peer, o.kind == 'F' ? mx_msg(0, c, k) : mx_msg(1, c, k)};
        mm->pend_kk[i] = o.kind, mm->pend_jj[i] = j, mm->pend_mm[i] = k;
        if (mm->cut[mm->pc] & 2) {
          int id = mx_issue_halves(x, s, 0, mm->npend, mm->pend);
          for (int i2 = 0; i2 < mm->npend; i2++)
            if (mm->pend_kk[i2] == 'F') mm->sent[mm->pend_jj[i2] * x->M + mm->pend_mm[i2]] = id;
            else mm->gsent[mm->pend_jj[i2]][mm->pend_mm[i2] % 2] = id;
          mm->npend = 0;
        }
      }
      if (o.kind == 'B' && !x->split) { /* the slot goes back: its output's send must have left */
        for (int i = 0; i < mm->npend; i++)
          if (mm->pend_kk[i] == 'F' && mm->pend_jj[i] == j && mm->pend_mm[i] == k)
            return *err = 1, mx_say(why, nwhy, "stage %d: B %d of chunk %d gives its slot back while its "
                                    "output's send is held", s, k, j), moved;
        mm->wait = mm->sent[j * x->M + k];
        mm->sent[j * x->M + k] = -1;
      }
      moved = 1;
      continue;
    }
    mm->pc++, mm->phase = 0, moved = 1;
  }
  if (mm->npend && !*err) {
    *err = 1;
    mx_say(why, nwhy, "stage %d: %d sends held at the end of the list", s, mm->npend);
  }
  return moved;
}
