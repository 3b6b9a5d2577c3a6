/* formula.c — the memory and traffic formulas of notes/design.md (see formula.h).
 * Notes: notes/00-memory.md (the 16Ψ story and the table of stages). */
#include "formula.h" // mem_formula_t, formula_zero_k, ...
#include <pthread.h> // pthread_mutex_t
#include <stdio.h>   // snprintf

/* Which states a stage shards over N ranks (the ZeRO paper's P_os, P_os+g, P_os+g+p). */
static double shard(double bytes, int sharded, int world) { return sharded ? bytes / world : bytes; }

mem_formula_t formula_zero_k(int stage, double psi, int world, double param_bytes, double grad_bytes,
                             double k) {
  mem_formula_t f;
  f.params = shard(param_bytes * psi, stage >= 3, world);
  f.grads = shard(grad_bytes * psi, stage >= 2, world);
  f.master = 0; /* counted inside K in the paper's form */
  f.optim = shard(k * psi, stage >= 1, world);
  f.total = f.params + f.grads + f.master + f.optim;
  return f;
}

mem_formula_t formula_model_states(int stage, double psi, int world, dtype_t wdt, int opt_states) {
  /* bf16: working params and grads in bf16, an fp32 master copy for the update;
   * fp32: params and grads in fp32 and the optimizer updates them in place (no master). */
  double wbytes = dtype_is_half(wdt) ? 2 : 4;
  double master = dtype_is_half(wdt) ? 4 : 0;
  mem_formula_t f;
  f.params = shard(wbytes * psi, stage >= 3, world);
  f.grads = shard(wbytes * psi, stage >= 2, world);
  f.master = shard(master * psi, stage >= 1, world);
  f.optim = shard(4.0 * opt_states * psi, stage >= 1, world);
  f.total = f.params + f.grads + f.master + f.optim;
  return f;
}

double formula_comm_bytes(int stage, double psi, int world, dtype_t wdt) {
  /* stages 0-2: reduce-scatter + all-gather (= one all-reduce) of Ψ elements;
   * stage 3 all-gathers the parameters twice (forward and backward) and reduce-scatters grads once. */
  double rounds = stage >= 3 ? 3 : 2;
  return rounds * (world - 1) / (double)world * psi * (double)dtype_size(wdt);
}

char *formula_text_k(char *dst, int ndst, int stage, double param_bytes, double grad_bytes, double k) {
  /* replicated bytes per param (times Ψ) and sharded bytes per param (times Ψ/N) */
  double full = 0, part = 0;
  if (stage >= 3) part += param_bytes; else full += param_bytes;
  if (stage >= 2) part += grad_bytes; else full += grad_bytes;
  if (stage >= 1) part += k; else full += k;
  if (full > 0 && part > 0) snprintf(dst, (size_t)ndst, "%gΨ + %gΨ/N", full, part);
  else if (part > 0) snprintf(dst, (size_t)ndst, "%gΨ/N", part);
  else snprintf(dst, (size_t)ndst, "%gΨ", full);
  return dst;
}

/* Texts for formula_text, made once per (stage, dtype, opt_states) so the pointers stay valid. */
#define FT_STATES 8
static char g_text[4][2][FT_STATES][48];
static pthread_mutex_t g_text_mu = PTHREAD_MUTEX_INITIALIZER;

const char *formula_text(int stage, dtype_t wdt, int opt_states) {
  if (stage < 0 || stage > 3 || opt_states < 0 || opt_states >= FT_STATES)
    return "(no formula for this stage/optimizer)";
  int d = dtype_is_half(wdt) ? 1 : 0;
  pthread_mutex_lock(&g_text_mu);
  char *s = g_text[stage][d][opt_states];
  if (!s[0]) {
    double w = d ? 2 : 4, k = (d ? 4 : 0) + 4.0 * opt_states; /* K = master + optimizer buffers */
    formula_text_k(s, (int)sizeof g_text[0][0][0], stage, w, w, k);
  }
  pthread_mutex_unlock(&g_text_mu);
  return s;
}

void formula_stage(formula_t *f, int stage, double psi, int world, dtype_t wdt, int opt_states) {
  mem_formula_t m = formula_model_states(stage, psi, world, wdt, opt_states);
  *f = (formula_t){.params = m.params, .grads = m.grads, .master = m.master, .optim = m.optim,
                   .comm_bytes = formula_comm_bytes(stage, psi, world, wdt)};
  snprintf(f->mem_text, sizeof f->mem_text, "%s", formula_text(stage, wdt, opt_states));
  snprintf(f->comm_text, sizeof f->comm_text, "stage %d: %s(N-1)/N x psi x %d B", stage,
           stage >= 3 ? "3" : "2", (int)dtype_size(wdt));
}
