/* qwz.c — ZeRO++'s qwZ: the parameter all-gather sent as int8 blocks and fp32 scales, decoded on
 * arrival (notes/13-compression.md; the scheme and its bound are in qwz.h).
 *
 * ZeRO-3 (solutions/zero3.c) calls qwz_gather_issue where it would all-gather a unit's pieces,
 * and qwz_gather_finish once that gather is waited, before the unit is used; the slot then holds
 * the decoded unit like any gathered one. */
#include "qwz.h"     // qwz_words, qwz_quantise, qwz_dequantise, the gather hooks
#include "comm.h"    // comm_all_gather_async
#include "tensor.h"  // tensor_alloc, tensor_free, tensor_at
#include <math.h>    // fabsf, lrintf
#include <stdio.h>   // snprintf
#include <string.h>  // memcpy

int64_t qwz_words(int64_t p, int B) { return (p + 3) / 4 + (p + B - 1) / B; }

void qwz_quantise(const void *x, dtype_t dt, int64_t p, int B, uint32_t *words) {
  int8_t *q = (int8_t *)words;
  float *scales = (float *)(words + (p + 3) / 4);
  memset(q, 0, (size_t)((p + 3) / 4) * 4);
  for (int64_t lo = 0, b = 0; lo < p; lo += B, b++) {
    int64_t hi = lo + B < p ? lo + B : p;
    float amax = 0;
    for (int64_t i = lo; i < hi; i++)
      amax = fmaxf(amax, fabsf(dt_load(x, dt, i)));
    float s = amax / 127.0f;
    scales[b] = s;
    for (int64_t i = lo; i < hi; i++) {
      long v = s > 0 ? lrintf(dt_load(x, dt, i) / s) : 0;
      q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
  }
}

void qwz_dequantise(const uint32_t *words, int64_t p, int B, void *out, dtype_t dt) {
  const int8_t *q = (const int8_t *)words;
  const float *scales = (const float *)(words + (p + 3) / 4);
  for (int64_t i = 0; i < p; i++)
    dt_store(out, dt, i, (float)q[i] * scales[i / B]);
}

int qwz_check_cfg(const train_cfg_t *cfg, const char **flag, char *why, int nwhy) {
  *flag = "--qwz";
  if (cfg->chapter_flags & TRAIN_FLAG_PIPELINE)
    snprintf(why, nwhy, "is built for chapter 05's ZeRO-3 (ch05_zero3), not under a pipeline");
  else if (cfg->shard_group_node)
    snprintf(why, nwhy, "needs --shard-group all (HSDP gathers inside the node: nothing slow to compress)");
  else if (cfg->dev != DEV_CPU)
    snprintf(why, nwhy, "runs on --device cpu only (the int8 blocks are encoded by host loops)");
  else if (cfg->buffer_mb > 0)
    snprintf(why, nwhy, "takes no --buffer-mb (the gathered window counts the decoded unit only)");
  else
    return 0;
  return -1;
}

comm_handle_t qwz_gather_issue(trainer_t *t, zero3_t *z, int u, gather_slot_t *g, const char *tag) {
  const unit_t *un = &t->model.units[u];
  int64_t wq = qwz_words(un->piece, z->qwz_block);
  g->wire = tensor_alloc("int8 blocks + scales (qwZ)", LEDGER_COMM, DT_F32, t->dev, (z->world + 1) * wq);
  uint32_t *wire = g->wire.data, *mine = wire + z->world * wq; /* the receive buffer, then this rank's */
  qwz_quantise(tensor_at(&t->params, un->shard_off), t->wdt, un->piece, z->qwz_block, mine);
  return comm_all_gather_async(z->shard, mine, wire, z->world * wq, DT_F32, tag);
}

void qwz_gather_finish(trainer_t *t, zero3_t *z, int u, gather_slot_t *g) {
  if (!g->wire.data) return;
  const unit_t *un = &t->model.units[u];
  int64_t wq = qwz_words(un->piece, z->qwz_block);
  size_t b = dtype_size(t->wdt);
  for (int r = 0; r < z->world; r++)
    qwz_dequantise((const uint32_t *)g->wire.data + r * wq, un->piece, z->qwz_block,
                   (char *)g->buf.data + (size_t)(r * un->piece) * b, t->wdt);
  tensor_free(&g->wire);
}
