/* qwz.h — ZeRO++'s qwZ: ZeRO-3's parameter all-gather in int8 blocks with one fp32 scale each
 * (notes/13-compression.md).
 *
 * Wang et al., ZeRO++ (arXiv 2306.10209), "quantized weight communication": before the all-gather
 * each rank cuts its piece of a unit into blocks of B elements (the last one may be shorter) and
 * sends, per block, s = max|x|/127 and q = round(x/s) in [−127, 127] as int8; each receiver
 * decodes x^ = q·s. So |x − x^| <= s/2 = max|block|/254 per element, and a rank's piece of p
 * elements travels as ceil(p/4) + ceil(p/B) 32-bit words (the bytes, then the scales) instead of
 * p·b bytes: per gather Ψ(1 + 4/B)(N−1)/N bytes a rank (B and 4 dividing the pieces), against
 * Ψ·b(N−1)/N. Only the gathered copy is quantised: the shard, the master weights, the gradients
 * and the reduce-scatter stay as they were. With --hpz (ZeRO++'s composition) only the forward's gather,
 * the one across nodes, is quantised: the secondary copy is kept from its decoded values and the
 * backward gathers those inside the node in the working dtype — the same values qwZ alone would
 * decode again, so the run is qwZ's bit for bit. The bytes: qgz.c's zeropp_formula. DeepSpeed:
 * "zero_quantized_weights": true. */
#ifndef ZL_QWZ_H
#define ZL_QWZ_H
#include <stdint.h>        // int64_t, uint32_t
#include "zero3_state.h"   // zero3_t, gather_slot_t

/* 32-bit words of a piece of p elements in blocks of B: ceil(p/4) of int8s, then ceil(p/B) scales. */
int64_t qwz_words(int64_t p, int B);
/* x[0..p) (dtype dt) into words (qwz_words(p, B)): the int8s, then the fp32 scales. */
void qwz_quantise(const void *x, dtype_t dt, int64_t p, int B, uint32_t *words);
/* out[0..p) (dtype dt) = q·s, block by block, from qwz_quantise's words. */
void qwz_dequantise(const uint32_t *words, int64_t p, int B, void *out, dtype_t dt);

/* --qwz's flags against the rest, before MPI: 0, or −1 with the flag and why (one line, exit 2). */
int qwz_check_cfg(const train_cfg_t *cfg, const char **flag, char *why, int nwhy);
/* ZeRO-3's gather of unit u into slot g, quantised: this rank's piece encoded, the words of every
 * rank all-gathered into g->wire (allocated here); returns the handle. */
comm_handle_t qwz_gather_issue(trainer_t *t, zero3_t *z, int u, gather_slot_t *g, const char *tag);
/* After the wait: every rank's piece decoded into g->buf (the unit, working dtype); g->wire freed.
 * Nothing to do for a slot whose gather was not quantised. */
void qwz_gather_finish(trainer_t *t, zero3_t *z, int u, gather_slot_t *g);
#endif
