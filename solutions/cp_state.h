/* cp_state.h — what chapter 10's GPT with context parallelism (cp_gpt.c) and its checks, formulas
 * and end-of-run lines (cp_report.c) share: the split model's state (m->ctx) and the attention's
 * mode. Not part of the chapter's contract (cp.h). Notes: notes/10-long-sequences.md. */
#ifndef ZL_CP_STATE_H
#define ZL_CP_STATE_H
#include <stdint.h>  // int64_t
#include <string.h>  // strcmp
#include "cp.h"      // cp_ring_t
#include "gpt.h"     // gpt_shape_t
#include "tensor.h"  // tensor_t
#include "train.h"   // trainer_t, train_cfg_t
#include "ulysses.h" // cp_ulysses_t

typedef struct cp_gpt {
  cp_ring_t g;          /* the ring over this rank's CP group (g.c: owned here); with a2a its layout only */
  cp_ulysses_t *u;      /* --cp-comm a2a or --cp-a2a A > 1: the all-to-all attention (NULL: the ring) */
  cp_ring_t *ring;      /* --cp-a2a A > 1: the hybrid's ring of G = C/A across the groups (its comm owned) */
  comm_t *ga;           /* --cp-a2a A > 1: the group of A this rank's all-to-alls run in (owned) */
  int A;                /* --cp-a2a: the all-to-all group (1: none) */
  const trainer_t *t;
  int S, E, V, NH, C;
  tensor_t tok_all;     /* (C·b, S) int32: the group's sequences (tokens, then targets) */
  tensor_t tok_loc;     /* (R, n) int32: this rank's positions of them, kept for the embedding's backward */
  tensor_t tgt_loc;     /* (R, n) int32: the targets at those positions */
  tensor_t wpe_loc;     /* (n, E) wdt: wpe's rows at this rank's positions; dwpe_loc its gradient */
  tensor_t dwpe_loc;
  tensor_t scratch;     /* the blocks' backward scratch */
} cp_gpt_t;

/* The attention's mode: the ring, Ulysses (--cp-comm a2a), the hybrid (--cp-a2a A > 1). */
enum { CP_RING, CP_A2A, CP_USP };
static inline int cp_is_a2a(const train_cfg_t *cfg) {
  return cfg->cp_comm && strcmp(cfg->cp_comm, "a2a") == 0;
}
static inline int cp_group_a2a(const train_cfg_t *cfg) { return cfg->cp_a2a > 1 ? cfg->cp_a2a : 1; }
static inline int cp_mode(const train_cfg_t *cfg) {
  return cp_is_a2a(cfg) ? CP_A2A : cp_group_a2a(cfg) > 1 ? CP_USP : CP_RING;
}
/* cp_gpt.c: fp32 the attention keeps per local token in a mode (the ring's log-sum-exp NH, Ulysses'
 * NH·S + 3E, the hybrid's NH + 4E). */
int64_t cp_att_saved(gpt_shape_t s, int mode);
/* cp_report.c: the split's formulas into the report (activation bytes, the ring's and the
 * all-to-alls' bytes per step and per layer), at setup; the end-of-run cp: lines (the transform's
 * report). */
void cp_report_formulas(trainer_t *t, const cp_gpt_t *c);
void cp_report(trainer_t *t);
#endif
