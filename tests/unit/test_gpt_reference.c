/* test_gpt_reference.c — common/model/gpt.c against PyTorch (suite common_gpt_ref): one forward and
 * backward of the tiny preset on the committed fixture tests/fixtures/gpt_tiny_ref.* (written
 * by common/scripts/gpt_reference.py; provenance in tests/fixtures/README.md): the loss, the
 * logits of 4 positions, and per parameter tensor the gradient's L2 norm and 5 entries.
 *
 * Tolerance, fp32 on both sides. The two differ only in the order of their sums (OpenBLAS
 * against PyTorch's GEMM and softmax kernels), our polynomial exp and tanh (~1 ulp, ~1e-7
 * absolute) and PyTorch's erf-free tanh GELU: each rounding is ~6e-8 relative, and a value here
 * passes through ~10 ops per layer with sums of up to 4C = 128 terms, so a few 1e-7 is the
 * expected distance. Measured (torch 2.15, the log line of the test): 6.6e-8 relative on the
 * loss, 2.4e-7 of max|logit| on the logits, 2.1e-7 of the tensor's norm on the gradient entries,
 * 1.8e-7 relative on the norms. The test allows about 20× that:
 *   loss    2e-6 relative
 *   logits  |got − ref| <= 5e-6·max|ref| of the row
 *   grads   norms 5e-6 relative; entries |got − ref| <= 1e-5·|ref| + 5e-6·norm of the tensor
 * The weights are trained ones (300 steps), so attention is far from uniform: a wrong mask,
 * scale, LayerNorm term or a transposed weight is off by O(1e-2) or more of these scales. */
#include "zl_test.h" // Criterion, zl_read_file, zl_read_floats, zl_rel, zl_fwd_bwd
#include "data.h"    // data_init_text, data_batch
#include "gpt.h"     // gpt_init, gpt_preset
#include "model.h"   // model_t

#define FIXTURE "tests/fixtures/gpt_tiny_ref"
#define TEXT "/usr/share/games/fortunes/cookie"
enum { MAXTOK = 256, MAXROWS = 8, MAXGRADS = 64, NPICK = 5 };

typedef struct grad_ref {
  char name[32];
  int64_t off, numel;
  double norm;
  int64_t idx[NPICK];
  double val[NPICK];
} grad_ref_t;

typedef struct fixture {
  gpt_shape_t s;
  int seed, B, ntok;
  int tok[MAXTOK], tgt[MAXTOK];
  double loss;
  int nrows, row[MAXROWS];
  float *logits[MAXROWS]; /* (V) each */
  int ngrads;
  grad_ref_t g[MAXGRADS];
  float *params;
  int64_t nparams;
} fixture_t;

/* "key n1 n2 ..." lines; '#' lines are comments. */
static int read_ints(const char *p, int *dst, int max) {
  int n = 0, used;
  while (n < max && sscanf(p, "%d%n", &dst[n], &used) == 1) p += used, n++;
  return n;
}
static void load_fixture(fixture_t *f) {
  memset(f, 0, sizeof *f);
  char *txt = zl_read_file(FIXTURE ".txt", NULL);
  cr_assert(txt, "no %s.txt (run from the repository root; common/scripts/gpt_reference.py writes it)",
            FIXTURE);
  for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    int used = 0;
    if (sscanf(line, "shape %d %d %d %d %d", &f->s.n_layer, &f->s.n_head, &f->s.n_embd, &f->s.seq_len,
               &f->s.vocab) == 5)
      continue;
    if (sscanf(line, "seed %d", &f->seed) == 1 || sscanf(line, "batch %d", &f->B) == 1 ||
        sscanf(line, "loss %lf", &f->loss) == 1)
      continue;
    if (strncmp(line, "tokens ", 7) == 0) f->ntok = read_ints(line + 7, f->tok, MAXTOK);
    else if (strncmp(line, "targets ", 8) == 0)
      cr_assert(read_ints(line + 8, f->tgt, MAXTOK) == f->ntok, "targets count");
    else if (sscanf(line, "logits %d%n", &f->row[f->nrows], &used) == 1) {
      cr_assert(f->nrows < MAXROWS && f->s.vocab > 0, "fixture: logits line before shape, or too many");
      float *l = f->logits[f->nrows++] = malloc(sizeof(float) * f->s.vocab);
      const char *p = line + used;
      for (int v = 0; v < f->s.vocab; v++) {
        int u;
        cr_assert(sscanf(p, "%f%n", &l[v], &u) == 1, "fixture: logits row %d has fewer than %d values",
                  f->row[f->nrows - 1], f->s.vocab);
        p += u;
      }
    } else if (strncmp(line, "grad ", 5) == 0) {
      cr_assert(f->ngrads < MAXGRADS, "fixture: too many grad lines");
      grad_ref_t *g = &f->g[f->ngrads++];
      long long off, numel;
      int n = sscanf(line, "grad %31s %lld %lld %lf%n", g->name, &off, &numel, &g->norm, &used);
      cr_assert(n == 4, "fixture: bad grad line: %.60s", line);
      g->off = off, g->numel = numel;
      const char *p = line + used;
      for (int k = 0; k < NPICK; k++) {
        long long i;
        int u;
        cr_assert(sscanf(p, "%lld %lf%n", &i, &g->val[k], &u) == 2,
                  "fixture: grad %s has fewer than %d entries", g->name, NPICK);
        g->idx[k] = i, p += u;
      }
    }
  }
  free(txt);
  cr_assert(f->s.n_layer > 0 && f->B > 0 && f->ntok == f->B * f->s.seq_len && f->nrows > 0 && f->ngrads > 0,
            "fixture %s.txt incomplete", FIXTURE);
  f->params = zl_read_floats(FIXTURE ".params.bin", &f->nparams);
  cr_assert(f->params, "no %s.params.bin", FIXTURE);
}
static void free_fixture(fixture_t *f) {
  for (int r = 0; r < f->nrows; r++) free(f->logits[r]);
  free(f->params);
}


Test(common_gpt_ref, forward_and_backward_match_pytorch) {
  fixture_t f;
  load_fixture(&f);
  model_t m;
  gpt_init(&m, f.s);
  cr_assert(f.nparams == m.numel, "fixture holds %lld weights, the model has Ψ = %lld", (long long)f.nparams,
            (long long)m.numel);
  float *grads = calloc(m.numel, sizeof(float)), *logits = malloc(sizeof(float) * f.ntok * f.s.vocab);
  double loss = zl_fwd_bwd(&m, f.params, grads, DT_F32, f.tok, f.tgt, f.B, 0.0f, logits);
  double worst_l = 0, worst_g = 0, worst_n = 0;

  cr_assert(zl_rel(loss, f.loss) <= 2e-6, "loss: ours %.9g, PyTorch %.9g", loss, f.loss);
  for (int r = 0; r < f.nrows; r++) {
    double mx = 0;
    for (int v = 0; v < f.s.vocab; v++) mx = fmax(mx, fabs(f.logits[r][v]));
    for (int v = 0; v < f.s.vocab; v++) {
      double d = fabs(logits[(int64_t)f.row[r] * f.s.vocab + v] - f.logits[r][v]);
      worst_l = fmax(worst_l, d / mx);
      cr_assert(d <= 5e-6 * mx, "logits row %d class %d: ours %.9g, PyTorch %.9g (tol %.3g)", f.row[r], v,
                logits[(int64_t)f.row[r] * f.s.vocab + v], f.logits[r][v], 5e-6 * mx);
    }
  }
  int64_t covered = 0;
  for (int k = 0; k < f.ngrads; k++) {
    const grad_ref_t *g = &f.g[k];
    cr_assert(g->off == covered && g->off + g->numel <= m.numel,
              "grad %s at %lld: not contiguous with the previous tensor", g->name, (long long)g->off);
    covered += g->numel;
    double n2 = 0;
    for (int64_t i = 0; i < g->numel; i++) n2 += (double)grads[g->off + i] * grads[g->off + i];
    double norm = sqrt(n2);
    worst_n = fmax(worst_n, zl_rel(norm, g->norm));
    cr_assert(zl_rel(norm, g->norm) <= 5e-6, "grad %s: norm ours %.9g, PyTorch %.9g", g->name, norm, g->norm);
    for (int j = 0; j < NPICK; j++) {
      double got = grads[g->off + g->idx[j]], d = fabs(got - g->val[j]);
      worst_g = fmax(worst_g, d / g->norm);
      cr_assert(d <= 1e-5 * fabs(g->val[j]) + 5e-6 * g->norm,
                "grad %s[%lld]: ours %.9g, PyTorch %.9g (norm %.3g)", g->name, (long long)g->idx[j], got,
                g->val[j], g->norm);
    }
  }
  cr_assert(covered == m.numel, "the fixture's tensors cover %lld of Ψ = %lld", (long long)covered,
            (long long)m.numel);
  cr_log_info("loss rel %.2g, logits %.2g of max, grad entries %.2g of norm, norms rel %.2g",
              zl_rel(loss, f.loss), worst_l, worst_g, worst_n);
  free(grads), free(logits);
  model_free(&m);
  free_fixture(&f);
}

/* The fixture's batch is ours: samples [0, B) of the default text's train split (the weights are
 * a --save-params file of our trainer; the fixture's header says which run). When this fails the
 * data windows changed: rerun common/scripts/gpt_reference.py. */
Test(common_gpt_ref, fixture_batch_is_our_data) {
  fixture_t f;
  load_fixture(&f);
  data_t d;
  data_init_text(&d, TEXT, f.s.seq_len, (uint64_t)f.seed);
  int x[MAXTOK], y[MAXTOK];
  data_batch(&d, 0, f.B, x, y);
  cr_assert(memcmp(x, f.tok, sizeof(int) * f.ntok) == 0 && memcmp(y, f.tgt, sizeof(int) * f.ntok) == 0,
            "the fixture's batch is not samples [0, %d) of %s", f.B, TEXT);
  data_free(&d);
  free_fixture(&f);
}
