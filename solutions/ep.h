/* ep.h — chapter 12's expert parallelism (notes/12-experts.md, "Expert parallelism"): the experts
 * of every MoE block split over P_E consecutive ranks, the tokens moved to them and back by
 * all-to-all (the rows: solutions/moe.c), and the model transform (train.h) that keeps the rest
 * data-parallel over all the ranks.
 *
 * The grid is chapter 06's with the EP group where TP's was: rank = dp·P_E + ep, the strategy on
 * the D ranks that share an ep index (the expert-data-parallel group: the replicas of the same
 * experts), every rank its own slice of the batch (splits_batch). The dense weights (every parameter
 * but the experts) are the same on the whole group and were computed from different samples, so their
 * gradient is summed over all D·P_E ranks: by a strategy with two data-parallel groups (DDP:
 * train.h's two_groups) in one reduction over t->dense_comm, every rank of the job, the transform
 * naming each unit's dense prefix (dense_numel); under ZeRO-1/2/3, which still run everything over
 * D, first over the EP group (one all-reduce per unit and step: after_backward, on the last
 * micro-batch, with no_sync), then over D by the strategy. The experts' gradients are
 * summed over D only — each expert saw every token of its group through the all-to-all — and, like
 * the dense ones, are the gradient of the mean over the GLOBAL batch (the loss is local sum / B):
 * never divided by D (DeepSpeed #6545's bug: expert gradients P_E times too large). */
#ifndef ZL_EP_H
#define ZL_EP_H
#include <stdint.h> // int64_t
#include "comm.h"   // comm_t

struct model_transform;
extern const struct model_transform ep_transform;
/* --ep P_E --tp T (solutions/ep_tp.c): T consecutive ranks of each EP group split the attention (chapter
 * 06's GPT split) and read the same samples; at a MoE block each routes 1/T of their tokens. */
extern const struct model_transform ep_tp_transform;

/* Rows of C fp32 per peer: send_rows[q] rows from send (packed in q order) go to rank q of the group;
 * recv_rows[q] rows from rank q land packed in q order in recv (comm_all_to_allv; a mismatch between
 * two ranks' counts stops the job naming them). */
void ep_exchange_rows(comm_t *g, const float *send, const int64_t *send_rows, float *recv,
                      const int64_t *recv_rows, int C, const char *tag);
/* The same, posted: returns its handle (comm_wait(g, h) before recv is read or send reused). */
comm_handle_t ep_exchange_rows_post(comm_t *g, const float *send, const int64_t *send_rows, float *recv,
                                    const int64_t *recv_rows, int C, const char *tag);
/* The dropless count exchange: send (P_E·El int64: my rows for each expert, expert e at e) → recv
 * (P_E·El: rank q's rows for my expert i at q·El + i). Control data: an all-to-all of El per peer on
 * the host (comm_ctl_all_to_all_i64), so the counts are there, exact, before the rows move. */
void ep_exchange_counts(comm_t *g, const int64_t *send, int64_t *recv, int El);
#endif
