/* test_formula.c — the memory and traffic formulas (common/base/formula.h) against tables written
 * out by hand from the ZeRO paper. Notes: notes/00-memory.md. Suite ch00_memory. */
#include "zl_test.h" // Criterion, zl helpers
#include "formula.h" // formula_zero_k, formula_model_states, formula_comm_bytes, formula_text
#include "model.h"   // model_count_params

/* Ψ = 1000, N = 4: params, grads, master, optim per stage, in bytes. */
typedef struct { double params, grads, master, optim, total; const char *text; } row_t;

static void expect_row(const char *what, int stage, mem_formula_t f, row_t r) {
  cr_expect_eq(f.params, r.params, "%s stage %d params: got %g, expected %g", what, stage, f.params,
               r.params);
  cr_expect_eq(f.grads, r.grads, "%s stage %d grads: got %g, expected %g", what, stage, f.grads, r.grads);
  cr_expect_eq(f.master, r.master, "%s stage %d master: got %g, expected %g", what, stage, f.master,
               r.master);
  cr_expect_eq(f.optim, r.optim, "%s stage %d optim: got %g, expected %g", what, stage, f.optim, r.optim);
  cr_expect_eq(f.total, r.total, "%s stage %d total: got %g, expected %g", what, stage, f.total, r.total);
}

Test(ch00_memory, model_states_bf16_adamw) {
  /* 2Ψ params, 2Ψ grads, 4Ψ master, 8Ψ Adam m+v: 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N */
  const row_t want[4] = {{2000, 2000, 4000, 8000, 16000, "16Ψ"},
                         {2000, 2000, 1000, 2000, 7000, "4Ψ + 12Ψ/N"},
                         {2000, 500, 1000, 2000, 5500, "2Ψ + 14Ψ/N"},
                         {500, 500, 1000, 2000, 4000, "16Ψ/N"}};
  for (int s = 0; s < 4; s++) {
    expect_row("bf16 adamw", s, formula_model_states(s, 1000, 4, DT_BF16, 2), want[s]);
    cr_expect_str_eq(formula_text(s, DT_BF16, 2), want[s].text, "formula_text(%d, bf16, 2)", s);
  }
}

Test(ch00_memory, model_states_fp32_adamw) {
  /* 4Ψ params, 4Ψ grads, no master, 8Ψ Adam: 16Ψ, 8Ψ+8Ψ/N, 4Ψ+12Ψ/N, 16Ψ/N */
  const row_t want[4] = {{4000, 4000, 0, 8000, 16000, "16Ψ"},
                         {4000, 4000, 0, 2000, 10000, "8Ψ + 8Ψ/N"},
                         {4000, 1000, 0, 2000, 7000, "4Ψ + 12Ψ/N"},
                         {1000, 1000, 0, 2000, 4000, "16Ψ/N"}};
  for (int s = 0; s < 4; s++) {
    expect_row("fp32 adamw", s, formula_model_states(s, 1000, 4, DT_F32, 2), want[s]);
    cr_expect_str_eq(formula_text(s, DT_F32, 2), want[s].text, "formula_text(%d, fp32, 2)", s);
  }
}

Test(ch00_memory, model_states_sgd_momentum) {
  /* one fp32 momentum buffer: bf16 12Ψ (2+2+4+4), fp32 12Ψ (4+4+4) */
  const row_t b[4] = {{2000, 2000, 4000, 4000, 12000, "12Ψ"},
                      {2000, 2000, 1000, 1000, 6000, "4Ψ + 8Ψ/N"},
                      {2000, 500, 1000, 1000, 4500, "2Ψ + 10Ψ/N"},
                      {500, 500, 1000, 1000, 3000, "12Ψ/N"}};
  const row_t f[4] = {{4000, 4000, 0, 4000, 12000, "12Ψ"},
                      {4000, 4000, 0, 1000, 9000, "8Ψ + 4Ψ/N"},
                      {4000, 1000, 0, 1000, 6000, "4Ψ + 8Ψ/N"},
                      {1000, 1000, 0, 1000, 3000, "12Ψ/N"}};
  for (int s = 0; s < 4; s++) {
    expect_row("bf16 sgd", s, formula_model_states(s, 1000, 4, DT_BF16, 1), b[s]);
    expect_row("fp32 sgd", s, formula_model_states(s, 1000, 4, DT_F32, 1), f[s]);
    cr_expect_str_eq(formula_text(s, DT_BF16, 1), b[s].text, "formula_text(%d, bf16, 1)", s);
    cr_expect_str_eq(formula_text(s, DT_F32, 1), f[s].text, "formula_text(%d, fp32, 1)", s);
  }
}

Test(ch00_memory, paper_form_figure_1) {
  /* Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB */
  const double want_total[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
  const char *want_text[4] = {"16Ψ", "4Ψ + 12Ψ/N", "2Ψ + 14Ψ/N", "16Ψ/N"};
  for (int s = 0; s < 4; s++) {
    mem_formula_t f = formula_zero_k(s, 7.5e9, 64, 2, 2, 12);
    cr_expect(fabs(f.total - want_total[s]) < 1, "stage %d total: got %.1f, expected %.1f", s, f.total,
              want_total[s]);
    cr_expect_eq(f.master, 0, "paper form counts the master inside K");
    char txt[64];
    cr_expect_str_eq(formula_text_k(txt, sizeof txt, s, 2, 2, 12), want_text[s], "formula_text_k stage %d",
                     s);
  }
  /* the paper form and the trainer form agree when K = master + optimizer buffers */
  for (int s = 0; s < 4; s++) {
    mem_formula_t a = formula_zero_k(s, 12345, 3, 2, 2, 12),
                  b = formula_model_states(s, 12345, 3, DT_BF16, 2);
    cr_expect(fabs(a.total - b.total) < 1e-6, "stage %d: paper %.3f vs trainer %.3f", s, a.total, b.total);
  }
  /* Mistral 7B, half precision, K = 4: 14 + 14 + 28 = 56 GB */
  mem_formula_t m = formula_zero_k(0, 7e9, 8, 2, 2, 4);
  cr_expect(m.params == 14e9 && m.grads == 14e9 && m.optim == 28e9 && m.total == 56e9,
            "Mistral 7B: got %g %g %g %g", m.params, m.grads, m.optim, m.total);
}

Test(ch00_memory, comm_bytes) {
  /* Ψ = 1000, N = 4, ring: 2·(3/4)·Ψ elements for stages 0-2, 3·(3/4)·Ψ for stage 3 */
  for (int s = 0; s < 3; s++) {
    cr_expect_eq(formula_comm_bytes(s, 1000, 4, DT_BF16), 3000, "stage %d bf16: %g", s,
                 formula_comm_bytes(s, 1000, 4, DT_BF16));
    cr_expect_eq(formula_comm_bytes(s, 1000, 4, DT_F32), 6000, "stage %d fp32: %g", s,
                 formula_comm_bytes(s, 1000, 4, DT_F32));
  }
  cr_expect_eq(formula_comm_bytes(3, 1000, 4, DT_BF16), 4500, "stage 3 bf16: %g",
               formula_comm_bytes(3, 1000, 4, DT_BF16));
  cr_expect_eq(formula_comm_bytes(3, 1000, 4, DT_F32), 9000, "stage 3 fp32: %g",
               formula_comm_bytes(3, 1000, 4, DT_F32));
  cr_expect_eq(formula_comm_bytes(0, 1000, 1, DT_F32), 0, "one rank sends nothing");
}

Test(ch00_memory, mlp_param_count) {
  /* unit 0: 3→5 (15+5), unit 1: 5→5 (25+5), unit 2: 5→2 (10+2) with L = 2 hidden layers */
  cr_expect_eq(model_count_params(3, 5, 2, 2), 62, "model_count_params(3,5,2,2): %lld",
               (long long)model_count_params(3, 5, 2, 2));
  cr_expect_eq(model_count_params(784, 1024, 10, 4), 785 * 1024 + 3 * 1025 * 1024 + 1025 * 10,
               "model_count_params(784,1024,10,4): %lld", (long long)model_count_params(784, 1024, 10, 4));
}
