/* test_chunks.c — the chunking and the ring-model byte counters of comm.h (notes/01-collectives.md).
 * Pure functions: no MPI. The multi-rank side (the ring really sends what the model says) is
 * tests/mpi/test_collectives.c. */
#include "zl_test.h" // Test, cr_assert
#include "comm.h"    // comm_chunk_lo, comm_chunk_numel, comm_model_sent, comm_model_recvd, comm_op_name

/* Chunks tile [0, numel) in order, and differ in size by at most one element. */
Test(common_comm, chunks_tile_the_buffer) {
  const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 10, 1000003, (int64_t)1 << 33};
  for (int N = 1; N <= 9; N++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      int64_t n = sizes[s], total = 0, lo_min = INT64_MAX, hi_max = 0;
      cr_assert_eq(comm_chunk_lo(n, N, 0), 0, "N=%d numel=%lld: chunk 0 starts at %lld", N, (long long)n,
                   (long long)comm_chunk_lo(n, N, 0));
      for (int r = 0; r < N; r++) {
        int64_t k = comm_chunk_numel(n, N, r);
        cr_assert(k >= 0, "N=%d numel=%lld rank %d: negative chunk %lld", N, (long long)n, r, (long long)k);
        cr_assert_eq(comm_chunk_lo(n, N, r) + k, comm_chunk_lo(n, N, r + 1), "chunks not contiguous");
        total += k;
        if (k < lo_min) lo_min = k;
        if (k > hi_max) hi_max = k;
      }
      cr_assert_eq(total, n, "N=%d: chunks sum to %lld, expected %lld", N, (long long)total, (long long)n);
      cr_assert(hi_max - lo_min <= 1, "N=%d numel=%lld: chunk sizes %lld..%lld", N, (long long)n,
                (long long)lo_min, (long long)hi_max);
    }
}

/* numel = 10 on 3 ranks: chunks 3, 3, 4 (floor boundaries 0, 3, 6, 10). */
Test(common_comm, model_uneven_example) {
  cr_assert_eq(comm_chunk_numel(10, 3, 0), 3);
  cr_assert_eq(comm_chunk_numel(10, 3, 2), 4);
  /* reduce-scatter: rank r sends every chunk but r; receives every chunk but r−1 */
  cr_assert_eq(comm_model_sent(CO_REDUCE_SCATTER, 10, DT_F32, 3, 0, 0), (10 - 3) * 4);
  cr_assert_eq(comm_model_sent(CO_REDUCE_SCATTER, 10, DT_F32, 3, 2, 0), (10 - 4) * 4);
  cr_assert_eq(comm_model_recvd(CO_REDUCE_SCATTER, 10, DT_F32, 3, 0, 0), (10 - 4) * 4); /* all but chunk 2 */
  /* all-gather: rank r sends every chunk but r+1; receives every chunk but r */
  cr_assert_eq(comm_model_sent(CO_ALL_GATHER, 10, DT_BF16, 3, 1, 0), (10 - 4) * 2);
  cr_assert_eq(comm_model_recvd(CO_ALL_GATHER, 10, DT_BF16, 3, 1, 0), (10 - 3) * 2);
  /* all-reduce = both */
  cr_assert_eq(comm_model_sent(CO_ALL_REDUCE, 10, DT_F32, 3, 1, 0), ((10 - 3) + (10 - 4)) * 4);
  /* chain broadcast from root 1: 1 -> 2 -> 0; rank 0 is last and sends nothing */
  cr_assert_eq(comm_model_sent(CO_BROADCAST, 10, DT_F32, 3, 0, 1), 0);
  cr_assert_eq(comm_model_sent(CO_BROADCAST, 10, DT_F32, 3, 2, 1), 40);
  cr_assert_eq(comm_model_recvd(CO_BROADCAST, 10, DT_F32, 3, 1, 1), 0);
  /* chain reduce to root 1: 2 -> 0 -> 1; every rank but the root sends; rank 2 starts, receives nothing */
  cr_assert_eq(comm_model_sent(CO_REDUCE, 10, DT_F32, 3, 1, 1), 0);
  cr_assert_eq(comm_model_sent(CO_REDUCE, 10, DT_F32, 3, 0, 1), 40);
  cr_assert_eq(comm_model_recvd(CO_REDUCE, 10, DT_F32, 3, 2, 1), 0);
  cr_assert_eq(comm_model_recvd(CO_REDUCE, 10, DT_F32, 3, 1, 1), 40);
  /* one rank: no traffic at all */
  for (int op = CO_BROADCAST; op <= CO_ALL_GATHER; op++)
    cr_assert_eq(comm_model_sent((comm_op_t)op, 10, DT_F32, 1, 0, 0), 0, "%s on 1 rank",
                 comm_op_name((comm_op_t)op));
}

/* Every byte sent is received by someone: per op, Σ_r sent = Σ_r recvd; and when N divides numel
 * the per-rank totals are the textbook (N−1)/N and 2(N−1)/N of the buffer. */
Test(common_comm, model_conserves_bytes_and_matches_formula) {
  const comm_op_t ops[] = {CO_BROADCAST, CO_REDUCE, CO_ALL_REDUCE, CO_REDUCE_SCATTER, CO_ALL_GATHER};
  for (int N = 1; N <= 8; N++)
    for (int64_t n = 0; n <= 3 * N + 2; n++)
      for (int o = 0; o < 5; o++)
        for (int root = 0; root < N; root++) {
          int64_t s = 0, r = 0;
          for (int k = 0; k < N; k++) {
            s += comm_model_sent(ops[o], n, DT_F32, N, k, root);
            r += comm_model_recvd(ops[o], n, DT_F32, N, k, root);
          }
          cr_assert_eq(s, r, "%s N=%d numel=%lld root=%d: sent %lld != received %lld", comm_op_name(ops[o]),
                       N, (long long)n, root, (long long)s, (long long)r);
        }
  for (int N = 1; N <= 8; N++) {
    int64_t n = 12 * 7 * 5 * 8, b = n * 2; /* divisible by 1..8, bf16 */
    for (int k = 0; k < N; k++) {
      cr_assert_eq(comm_model_sent(CO_ALL_REDUCE, n, DT_BF16, N, k, 0), 2 * (N - 1) * b / N);
      cr_assert_eq(comm_model_sent(CO_REDUCE_SCATTER, n, DT_BF16, N, k, 0), (N - 1) * b / N);
      cr_assert_eq(comm_model_recvd(CO_ALL_GATHER, n, DT_BF16, N, k, 0), (N - 1) * b / N);
    }
  }
}

/* The all-to-all sends every block but its own, straight to its owner: (N−1)/N of an equal one
 * each way; the v form sums its blocks but its own; the blocks for other nodes cross. */
Test(common_comm, model_all_to_all) {
  for (int N = 1; N <= 8; N++)
    for (int r = 0; r < N; r++) {
      int64_t n = 12 * 7 * 5 * 8; /* divisible by 1..8 */
      cr_assert_eq(comm_model_sent(CO_ALL_TO_ALL, n, DT_BF16, N, r, 0), (N - 1) * n / N * 2, "N=%d rank %d",
                   N, r);
      cr_assert_eq(comm_model_recvd(CO_ALL_TO_ALL, n, DT_BF16, N, r, 0), (N - 1) * n / N * 2, "N=%d rank %d",
                   N, r);
    }
  /* a 3×3 split matrix (rank i sends m[i][j] to j): every byte sent is received */
  const int64_t m[3][3] = {{4, 0, 7}, {1, 9, 0}, {0, 2, 5}};
  int64_t sent = 0, recvd = 0;
  for (int r = 0; r < 3; r++) {
    int64_t col[3] = {m[0][r], m[1][r], m[2][r]};
    sent += comm_model_all_to_allv(m[r], DT_F32, 3, r);
    recvd += comm_model_all_to_allv(col, DT_F32, 3, r);
  }
  cr_assert_eq(comm_model_all_to_allv(m[0], DT_F32, 3, 0), 7 * 4, "rank 0 sends 0 + 7 elements (its 4 stay)");
  cr_assert_eq(sent, (0 + 7 + 1 + 0 + 0 + 2) * 4);
  cr_assert_eq(sent, recvd);
  cr_assert_eq(comm_model_sent(CO_ALL_TO_ALL, 16, DT_F32, 4, 0, 0), 3 * 4 * 4);
}

Test(common_comm, op_names) {
  cr_assert_str_eq(comm_op_name(CO_ALL_REDUCE), "all_reduce");
  cr_assert_str_eq(comm_op_name(CO_REDUCE_SCATTER), "reduce_scatter");
  cr_assert_str_eq(comm_op_name(CO_CONTROL), "control");
  cr_assert_str_eq(comm_op_name(CO_ALL_TO_ALL), "all_to_all");
}
