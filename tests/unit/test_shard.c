/* test_shard.c — the ZeRO shard plan (solutions/shard.c, notes/03-zero1.md): every unit padded
 * to a multiple of N with fewer than N pad slots, N equal pieces that tile the unit, piece r
 * equal to comm.h's chunk r (so one reduce-scatter per unit hands rank r its piece), offsets
 * and totals consistent, and shards reassembled into exactly the unpadded weights. */
#include "zl_test.h" // cr_assert, zl_expect_floats
#include "comm.h"    // comm_chunk_lo, comm_chunk_numel
#include "model.h"   // model_init, model_free, model_count_params
#include "zero.h"    // shard_plan, shard_piece_off, shard_assemble

/* Shapes whose unit sizes are not multiples of 2..5 (and some that are). */
static const int g_shapes[][4] = {{7, 5, 3, 2}, {10, 9, 4, 3},  {3, 1, 2, 1},
                                  {1, 1, 1, 0}, {16, 16, 8, 4}, {5, 13, 7, 1}};

Test(ch03_shard, plan_pads_every_unit_and_tiles_it) {
  for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0]; s++) {
    const int *sh = g_shapes[s];
    for (int N = 1; N <= 5; N++) {
      model_t m;
      model_init(&m, sh[0], sh[1], sh[2], sh[3]);
      shard_plan(&m, N);
      cr_assert_eq(m.numel, model_count_params(sh[0], sh[1], sh[2], sh[3]), "shape %zu N %d: numel changed",
                   s, N);
      int64_t off = 0, shard_off = 0, maxp = 0;
      for (int u = 0; u < m.n_units; u++) {
        const unit_t *un = &m.units[u];
        cr_assert_eq(un->padded % N, 0, "shape %zu N %d unit %d: padded %lld not a multiple of N", s, N, u,
                     (long long)un->padded);
        cr_assert(un->padded >= un->numel && un->padded - un->numel < N,
                  "shape %zu N %d unit %d: padded %lld for numel %lld (pad must be < N)", s, N, u,
                  (long long)un->padded, (long long)un->numel);
        cr_assert_eq(un->piece * N, un->padded, "shape %zu N %d unit %d: piece %lld x N != padded %lld", s, N,
                     u, (long long)un->piece, (long long)un->padded);
        cr_assert_eq(un->off, off, "shape %zu N %d unit %d: off got %lld expected %lld", s, N, u,
                     (long long)un->off, (long long)off);
        cr_assert_eq(un->shard_off, shard_off, "shape %zu N %d unit %d: shard_off got %lld expected %lld", s,
                     N, u, (long long)un->shard_off, (long long)shard_off);
        for (int r = 0; r < N; r++) { /* piece r IS the reduce-scatter / all-gather chunk r */
          cr_assert_eq(shard_piece_off(un, r) - un->off, comm_chunk_lo(un->padded, N, r),
                       "shape %zu N %d unit %d rank %d: piece at %lld, chunk at %lld", s, N, u, r,
                       (long long)(shard_piece_off(un, r) - un->off),
                       (long long)comm_chunk_lo(un->padded, N, r));
          cr_assert_eq(comm_chunk_numel(un->padded, N, r), un->piece,
                       "shape %zu N %d unit %d rank %d: chunk numel", s, N, u, r);
        }
        off += un->padded;
        shard_off += un->piece;
        if (un->padded > maxp) maxp = un->padded;
      }
      cr_assert_eq(m.padded_numel, off, "shape %zu N %d: padded_numel %lld expected %lld", s, N,
                   (long long)m.padded_numel, (long long)off);
      cr_assert_eq(m.shard_numel, shard_off, "shape %zu N %d: shard_numel", s, N);
      cr_assert_eq(m.shard_numel * N, m.padded_numel, "shape %zu N %d: N shards != padded buffer", s, N);
      cr_assert_eq(m.max_unit_padded, maxp,
                   "shape %zu N %d: max_unit_padded %lld, expected %lld (the largest unit's padded "
                   "numel: ZeRO-2/3 size their staging buffers by it)",
                   s, N, (long long)m.max_unit_padded, (long long)maxp);
      if (N == 1) cr_assert_eq(m.padded_numel, m.numel, "shape %zu: N 1 must not pad", s);
      model_free(&m);
    }
  }
}

Test(ch03_shard, uneven_shape_really_pads) {
  /* units of 7·5+5 = 40, 5·5+5 = 30 and 5·3+3 = 18 elements: N 4 pads units 1 and 2 */
  model_t m;
  model_init(&m, 7, 5, 3, 2);
  shard_plan(&m, 4);
  cr_assert_gt(m.padded_numel, m.numel, "N 4: expected some padding, got none (test shape too round)");
  shard_plan(&m, 2); /* re-plan: the layout follows N only */
  cr_assert_eq(m.units[0].padded, m.units[0].numel, "re-planning for N 2 left unit 0 padded");
  model_free(&m);
}

Test(ch03_shard, assemble_drops_padding_and_reorders_pieces) {
  for (int N = 1; N <= 5; N++) {
    model_t m;
    model_init(&m, 10, 9, 4, 3);
    shard_plan(&m, N);
    /* the padded full buffer: value = unpadded index + 1, pad slots 0 */
    float *full = calloc((size_t)m.padded_numel, sizeof(float)),
          *expect = malloc((size_t)m.numel * sizeof(float));
    int64_t k = 0;
    for (int u = 0; u < m.n_units; u++)
      for (int64_t i = 0; i < m.units[u].numel; i++, k++)
        full[m.units[u].off + i] = (float)(k + 1), expect[k] = (float)(k + 1);
    /* cut it into the N shards: rank r's shard = its piece of every unit, unit after unit */
    float *shards = malloc((size_t)m.padded_numel * sizeof(float)),
          *got = malloc((size_t)m.numel * sizeof(float));
    for (int r = 0; r < N; r++)
      for (int u = 0; u < m.n_units; u++)
        memcpy(shards + (int64_t)r * m.shard_numel + m.units[u].shard_off,
               full + shard_piece_off(&m.units[u], r), (size_t)m.units[u].piece * sizeof(float));
    shard_assemble(&m, N, shards, got);
    zl_expect_floats("assembled weights", got, expect, m.numel, 0);
    free(full), free(expect), free(shards), free(got);
    model_free(&m);
  }
}
