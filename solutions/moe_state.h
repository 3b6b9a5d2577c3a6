/* moe_state.h — what chapter 12's MoE files share: the MoE GPT's state (the model's m->ctx) and the
 * run's statistics (the transform's t->transform_priv). Not part of the chapter's contract (moe.h).
 * Notes: notes/12-experts.md.
 *
 *   moe.c          the block: route, dispatch, the experts, combine; forward and backward
 *   moe_exchange.c the rows' exchange over the EP group: counts, the layouts' maps, the formula's bytes
 *   moe_balance.c  load balance: the router's gradient with Switch's aux loss, the step's loads, the
 *                  DeepSeek-V3 bias (moe_step_end)
 *   moe_model.c    the model: the units, their init, moe_setup, what ep.c and ep_tp.c ask
 *   moe_report.c   the end-of-run lines (moe_report), the flags (moe_check_args), moe_transform */
#ifndef ZL_MOE_STATE_H
#define ZL_MOE_STATE_H
#include <stdint.h> // int64_t
#include "comm.h"   // comm_t
#include "gpt.h"    // gpt_block_t
#include "model.h"  // model_t, model_fns_t, unit_io_t
#include "tensor.h" // tensor_t
#include "train.h"  // trainer_t

#define MOE_STATS_STEPS 16 /* loads per step kept for the report: the first 16 steps */

/* The routing of one micro-batch through one MoE block, from its forward to its backward. Rs, Rx: rows in
 * this rank's send layout (the plan's) and in its experts' layout (what it received). A pipeline keeps
 * several micro-batches in flight between their forward and backward (chapter 07: 1F1B's warm-up),
 * so a block holds one route per activation slot in use, found by the slot's saved buffer (key). */
typedef struct moe_route {
  const float *key;            /* the unit's saved activations of the micro-batch (unit_io_t.saved) */
  int64_t tokens;              /* tokens the host arrays below hold room for */
  float *probs;                /* (tokens, E) router softmax */
  int *ids, *slot;             /* (tokens, k) chosen experts; their rows (−1 dropped) */
  float *gates;                /* (tokens, k) */
  int *row_tok;                /* (Rs) the token of each send row */
  float *row_gate;             /* (Rs) its gate (0 for padding) */
  int64_t *counts;             /* (E) rows kept per expert (the plan's) */
  double *f;                   /* (E) the micro-batch's share of choices per expert (the aux loss's f_e) */
  double *load_now;            /* (E) this rank's choices per expert in the micro-batch */
  int64_t Rs, Rx;
  int64_t *recv_rows;          /* (ep·e_local) rows from source q for local expert i: [q·e_local + i] */
  int *perm_x, *perm_b;        /* (Rx) expert row → received row; received row → expert row (ep > 1) */
  tensor_t rows;               /* dropless: the expert rows the backward reads (moe.c's saved_rows), grown to
                                * the micro-batch's rows; with a capacity they sit in the loop's saved slot */
} moe_route_t;

/* One MoE block's host state: its routes (the micro-batches in flight) and the step's loads. */
typedef struct moe_unit {
  int on;                      /* 1: a MoE block */
  moe_route_t *routes;         /* [n_routes]: one per saved buffer seen (moe.c's route_of) */
  int n_routes;
  /* (E) choices per expert this step (before capacity), over its micro-batches */
  double *load_step;
  double dropped_step, chosen_step;
  float *bias;                 /* (E) DeepSeek-V3's selection bias (same bits on every rank) */
} moe_unit_t;

/* The MoE GPT (m->ctx). A MoE unit's local layout: the attention half (attn_numel: ln1 .. ln2, this
 * rank's TP part of the full attn_full), the router (router_numel = E·C), the shared experts
 * (shared_numel = S·expert_numel), then this rank's e_local routed experts of expert_numel = 2FC + F + C
 * each (fc W (F, C), b (F), fcproj W (C, F), b (C); 8C² + 5C at F = 4C). */
#define MOE_SCRATCH 15 /* the device scratch tensors of moe_gpt_t (moe_swap_scratch) */
typedef struct moe_gpt {
  trainer_t *t;
  int E, k, every;               /* experts, top-k, every m-th block */
  int ep, ep_rank, e_local;      /* the EP group's size P_E, this rank in it, E / P_E experts here */
  double cf, aux, rate;          /* --capacity-factor, --aux-loss-coeff, --router-bias-rate */
  int aux_global;                /* --aux-loss-scope global */
  int64_t C, S;                  /* n_embd, seq_len */
  int64_t F;                     /* each expert's hidden width (--expert-ffn; 4C: the dense MLP's) */
  int shared;                    /* S shared experts (--shared-experts) */
  int gate_topk;                 /* --gate-norm topk: the gates renormalised over the k chosen */
  int64_t attn_numel, attn_full, router_numel, shared_numel, expert_numel;
  comm_t *ep_comm;               /* the EP group (t->group_comm), NULL with --ep 1 */
  /* --tp T inside the EP group (solutions/ep_tp.c): the tp consecutive ranks that split the attention
   * (tp_comm) and the P_E/tp ranks of the group with the same TP index (xg_comm: data-parallel for the
   * attention); at a MoE block TP rank tp_rank routes its 1/tp of the micro-batch's B·S tokens (with
   * --sp: its own B·S/tp positions) */
  comm_t *tp_comm, *xg_comm;
  int tp, tp_rank;
  int gather; /* --tp without --sp: the tp ranks hold the same rows, each routes its 1/tp and
               * the output is all-gathered; with --sp (Megatron's way) each holds 1/tp of
               * the
               * positions of every sample already: it routes those, nothing to gather */
  /* the model before the experts: gpt.c's, or tp_gpt.c's split (its fns, ctx) */
  model_t base;
  model_fns_t fns;               /* this model's table (the base's loss when it has one) */
  gpt_block_t kb;                /* a MoE block's attention half: gpt.h's whole block, or TP's split one */
  moe_unit_t *u;                 /* [n_units] */
  /* device scratch, grown on demand (LEDGER_ACTS) */
  tensor_t logits, xs, recv, eo_x, dsend, dx_x, dpost, dln2, dln2r, dg, work;
  tensor_t idx;                  /* the device copy of a pass's index arrays and row weights (moe.c) */
  tensor_t ys;                   /* --tp: this rank's rows of the MoE output (forward), of d ln2 (backward) */
  tensor_t sh_out, sh_d;         /* the shared experts' output rows; their backward's d hidden and d ln2 */
  tensor_t rows_rc;              /* dropless with --recompute: every block's saved rows in one buffer (one
                                  * block's are live at a time: its forward reruns just before its
                                  * backward) */
  int64_t rows_peak;             /* dropless: the most saved-row floats one block held (the report's line) */
  int64_t rows_per_sample;       /* with a capacity: the expert rows' floats per sample in the saved slot */
  int64_t ix_off[6];             /* where each array of idx starts (moe.c's IX_*) */
  /* --fb-overlap (07d): the other half's scratch of an F&B (its exchange travels in one set while the
   * other half computes in this one): moe_swap_scratch at every switch, MOE_SCRATCH tensors, then ix_off */
  struct {
    tensor_t t[MOE_SCRATCH];
    int64_t ix_off[6];
  } spare;
  double a2a_wait_us;      /* the main thread's wait for the exchanges (exposed), since the start */
  double a2a_wait_role[5]; /* ... by what ran (trainer_fb_role: a marked F&B's F, its B, B inside F,
                           * F inside B) */
  /* what the passes add up, until moe_step_end reads them */
  double aux_sum, aux_n;         /* Σ aux loss values and their count (layers × micro-batches), this step */
  /* Σ over the run's training passes: the bytes the exchanges send by the formula */
  double a2a_formula;
} moe_gpt_t;

/* The run's statistics (t->transform_priv: moe_setup allocates it, the trainer frees it), written by
 * moe_step_end after each step, read by moe_report. */
typedef struct moe_stats {
  double load_ratio[MOE_STATS_STEPS], drop_rate[MOE_STATS_STEPS]; /* per step, the first steps */
  double last_ratio, last_drop, last_aux, drop_total, chosen_total;
  double a2a_sent;               /* the EP group's all-to-all bytes sent, as of the last step's end */
  uint64_t bias_hash;
} moe_stats_t;

static inline moe_gpt_t *moe_ctx(const model_t *m) { return (moe_gpt_t *)m->ctx; }
/* gpt.h's description of this model's experts (its Ψ counts, chapter 00's formulas). */
static inline gpt_moe_t moe_shape_of(const moe_gpt_t *c) {
  return (gpt_moe_t){.experts = c->E, .topk = c->k, .every = c->every, .ffn = (int)c->F, .shared = c->shared};
}

/* moe.c: a MoE block's forward and backward (moe_model.c's table calls them for the MoE units). */
void moe_block_forward(const model_t *m, int u, const unit_io_t *io);
void moe_block_backward(const model_t *m, int u, const unit_io_t *io);
/* moe_balance.c: the router's logits' gradient dl (routed, E) on the host, from the gates' gradient
 * dg (routed, k): the softmax's backward with Switch's aux term; and the micro-batch's loads, drops
 * and aux loss added to the step's. */
void moe_router_backward(moe_gpt_t *c, moe_unit_t *mu, moe_route_t *r, int64_t routed, const float *dg,
                         float *dl);
/* The rows' exchange over the EP group (moe_exchange.c). After the plan: the rows to each rank
 * (send_rows[P]) and from each (recv_src[P]) — capacity: cap per expert each way; dropless: the
 * counts exchanged — and r's maps between the received and the experts' layouts (perm_x, perm_b, Rx). */
void moe_exchange_plan(moe_gpt_t *c, moe_route_t *r, int64_t cap, int64_t *send_rows, int64_t *recv_src);
/* The bytes one pass sends over the group by the formula (rows to and from other ranks, C fp32 each). */
double moe_a2a_bytes(const moe_gpt_t *c, const int64_t *send_rows, const int64_t *recv_src);
/* Rows of local expert i in the experts' layout: [*first, *first + n), returns n. */
/* The rows' exchange of a pass (moe.c's dispatch and combine, both ways): ep_exchange_rows; inside an
 * F&B (--fb-overlap, either half) posted, the other half run meanwhile (trainer_fb_fill, in the other
 * scratch set), then waited for. The wait is timed (a2a_wait_us). */
void moe_exchange_rows(moe_gpt_t *c, const float *send, const int64_t *send_rows, float *recv,
                       const int64_t *recv_rows, int Cn, const char *tag);
/* Swap the device scratch (and ix_off) with the spare set. */
void moe_swap_scratch(moe_gpt_t *c);
int64_t moe_expert_rows(const moe_gpt_t *c, const moe_route_t *r, int i, int64_t *first);
#endif
