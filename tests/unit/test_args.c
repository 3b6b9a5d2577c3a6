/* test_args.c — flag validation (common/base/args.h): every bad input gives exactly one line
 * `error: <flag> <value>: <allowed>` on stderr and code 2, before anything else happens.
 * Notes: notes/00-memory.md. Suite common_args. */
#include "zl_test.h" // Criterion, zl helpers
#include "args.h"    // args_parse, args_parse_count, args_env_rank

/* The flags of a typical trainer, fresh defaults per parse. */
typedef struct {
  int batch, steps, verbose;
  int64_t seed;
  double lr, params;
  const char *opt, *json;
} opts_t;

static int parse(opts_t *o, int argc, const char **argv) {
  *o = (opts_t){.batch = 64,
                .steps = 10,
                .verbose = 0,
                .seed = 1,
                .lr = 1e-3,
                .params = 7.5e9,
                .opt = "adamw",
                .json = NULL};
  arg_spec_t specs[] = {
      {"--batch", ARG_INT, &o->batch, 1, 1073741824, NULL, "global batch"},
      {"--steps", ARG_INT, &o->steps, 0, 1000000, NULL, "steps"},
      {"--seed", ARG_I64, &o->seed, 0, 9.2e18, NULL, "seed"},
      {"--lr", ARG_DOUBLE, &o->lr, 0, 10, NULL, "learning rate"},
      {"--params", ARG_COUNT, &o->params, 1, 1e15, NULL, "parameter count"},
      {"--optimizer", ARG_CHOICE, &o->opt, 0, 0, "adamw|sgd", "optimizer"},
      {"--json", ARG_STR, &o->json, 0, 0, NULL, "results file"},
      {"--verbose", ARG_FLAG, &o->verbose, 0, 0, NULL, "say more"},
  };
  return args_parse(argc, (char **)argv, specs, (int)(sizeof specs / sizeof specs[0]), "prog", "about");
}

/* Parse with stderr (and stdout) captured into err/out. */
static int parse_captured(opts_t *o, int argc, const char **argv, char *err, size_t nerr, char *out,
                          size_t nout) {
  fflush(stdout);
  fflush(stderr);
  FILE *fe = tmpfile(), *fo = tmpfile();
  cr_assert(fe && fo, "tmpfile failed");
  int save_err = dup(2), save_out = dup(1);
  dup2(fileno(fe), 2);
  dup2(fileno(fo), 1);
  int rc = parse(o, argc, argv);
  fflush(stdout);
  fflush(stderr);
  dup2(save_err, 2);
  dup2(save_out, 1);
  close(save_err);
  close(save_out);
  FILE *fs[2] = {fe, fo};
  char *bufs[2] = {err, out};
  size_t ns[2] = {nerr, nout};
  for (int k = 0; k < 2; k++) {
    rewind(fs[k]);
    size_t len = fread(bufs[k], 1, ns[k] - 1, fs[k]);
    bufs[k][len] = 0;
    fclose(fs[k]);
  }
  return rc;
}

static void clear_launcher_env(void) {
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_RANK");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
}

typedef struct {
  const char *argv[6];
  const char *line; /* the exact error line */
} bad_case_t;

static const bad_case_t g_bad[] = {
    {{"--stepz", "5"}, "error: --stepz: unknown flag (see --help)"},
    {{"--steps"}, "error: --steps: missing value"},
    {{"--steps", "--lr", "0.1"}, "error: --steps: missing value"},
    {{"--batch", "0"}, "error: --batch 0: must be an integer in [1, 1073741824]"},
    {{"--batch", "-4"}, "error: --batch -4: must be an integer in [1, 1073741824]"},
    {{"--batch", "abc"}, "error: --batch abc: must be an integer in [1, 1073741824]"},
    {{"--batch", "12x"}, "error: --batch 12x: must be an integer in [1, 1073741824]"},
    {{"--batch", "1.5"}, "error: --batch 1.5: must be an integer in [1, 1073741824]"},
    {{"--batch", ""}, "error: --batch '': must be an integer in [1, 1073741824]"},
    {{"--batch", "1073741825"}, "error: --batch 1073741825: must be an integer in [1, 1073741824]"},
    {{"--batch", "99999999999999999999"},
     "error: --batch 99999999999999999999: must be an integer in [1, 1073741824]"},
    {{"--seed", "9223372036854775808"},
     "error: --seed 9223372036854775808: must be an integer in [0, 9200000000000000000]"},
    {{"--seed", "-1"}, "error: --seed -1: must be an integer in [0, 9200000000000000000]"},
    {{"--lr", "nan"}, "error: --lr nan: must be a finite number in [0, 10]"},
    {{"--lr", "inf"}, "error: --lr inf: must be a finite number in [0, 10]"},
    {{"--lr", "-inf"}, "error: --lr -inf: must be a finite number in [0, 10]"},
    {{"--lr", "1e999"}, "error: --lr 1e999: must be a finite number in [0, 10]"},
    {{"--lr", "0x1p1"}, "error: --lr 0x1p1: must be a finite number in [0, 10]"},
    {{"--lr", "-0.5"}, "error: --lr -0.5: must be a finite number in [0, 10]"},
    {{"--lr", "11"}, "error: --lr 11: must be a finite number in [0, 10]"},
    {{"--params", "7Q"},
     "error: --params 7Q: must be a count in [1, 1000000000000000], e.g. 7.5e9, 7B, 124M, 350K"},
    {{"--params", "7BB"},
     "error: --params 7BB: must be a count in [1, 1000000000000000], e.g. 7.5e9, 7B, 124M, 350K"},
    {{"--params", "nan"},
     "error: --params nan: must be a count in [1, 1000000000000000], e.g. 7.5e9, 7B, 124M, 350K"},
    {{"--params", "0"},
     "error: --params 0: must be a count in [1, 1000000000000000], e.g. 7.5e9, 7B, 124M, 350K"},
    {{"--params", "2000T"},
     "error: --params 2000T: must be a count in [1, 1000000000000000], e.g. 7.5e9, 7B, 124M, 350K"},
    {{"--optimizer", "adamx"}, "error: --optimizer adamx: must be one of adamw|sgd"},
    {{"--optimizer", "adam"}, "error: --optimizer adam: must be one of adamw|sgd"},
    {{"--json", ""}, "error: --json '': must be non-empty text"},
    {{"--verbose=1"}, "error: --verbose 1: takes no value"},
    {{"--steps", "5", "--steps", "6"}, "error: --steps 6: given more than once"},
    {{"--verbose", "--verbose"}, "error: --verbose: given more than once"},
    {{"steps", "5"}, "error: steps: unexpected argument (flags start with --, see --help)"},
    {{"--batch", "8", "extra"}, "error: extra: unexpected argument (flags start with --, see --help)"},
};

Test(common_args, bad_inputs_give_one_line_and_code_2) {
  clear_launcher_env();
  for (size_t i = 0; i < sizeof g_bad / sizeof g_bad[0]; i++) {
    const char *argv[8] = {"prog"};
    int argc = 1;
    for (int k = 0; k < 6 && g_bad[i].argv[k]; k++) argv[argc++] = g_bad[i].argv[k];
    opts_t o;
    char err[1024], out[1024], want[512];
    int rc = parse_captured(&o, argc, argv, err, sizeof err, out, sizeof out);
    snprintf(want, sizeof want, "%s\n", g_bad[i].line);
    cr_expect_eq(rc, 2, "case %zu (%s %s): code %d, expected 2", i, argv[1], argc > 2 ? argv[2] : "", rc);
    cr_expect_str_eq(err, want, "case %zu: stderr '%s', expected '%s'", i, err, want);
    cr_expect_str_eq(out, "", "case %zu: stdout must stay empty, got '%s'", i, out);
  }
}

Test(common_args, good_inputs_are_stored) {
  clear_launcher_env();
  const char *argv[] = {"prog",
                        "--batch",
                        "1073741824",
                        "--lr=0.5",
                        "--params",
                        "1.5T",
                        "--optimizer",
                        "sgd",
                        "--verbose",
                        "--seed",
                        "9000000000000000000",
                        "--json",
                        "/tmp/x.json",
                        "--steps",
                        "0"};
  opts_t o;
  char err[256], out[256];
  int rc = parse_captured(&o, (int)(sizeof argv / sizeof argv[0]), argv, err, sizeof err, out, sizeof out);
  cr_assert_eq(rc, 0, "rc %d, stderr '%s'", rc, err);
  cr_expect_eq(o.batch, 1073741824);
  cr_expect_eq(o.lr, 0.5);
  cr_expect_eq(o.params, 1.5e12, "--params 1.5T: got %g", o.params);
  cr_expect_str_eq(o.opt, "sgd");
  cr_expect_eq(o.verbose, 1);
  cr_expect_eq(o.seed, 9000000000000000000LL, "--seed: got %lld", (long long)o.seed);
  cr_expect_str_eq(o.json, "/tmp/x.json");
  cr_expect_eq(o.steps, 0);
  cr_expect_str_eq(err, "");
  /* defaults survive when a flag is absent; a negative number is a value, not a flag */
  const char *argv2[] = {"prog", "--lr", "0"};
  rc = parse_captured(&o, 3, argv2, err, sizeof err, out, sizeof out);
  cr_expect_eq(rc, 0);
  cr_expect_eq(o.batch, 64, "default --batch: got %d", o.batch);
  cr_expect_str_eq(o.opt, "adamw");
}

Test(common_args, counts_with_suffixes) {
  const struct { const char *s; double v; } ok[] = {
      {"7.5e9", 7.5e9}, {"7B", 7e9}, {"7b", 7e9}, {"7G", 7e9}, {"124M", 124e6}, {"350K", 350e3},
      {"1.5T", 1.5e12}, {"42", 42}, {"0.5M", 5e5}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    double v = -1;
    cr_expect_eq(args_parse_count(ok[i].s, &v), 0, "args_parse_count(%s) refused", ok[i].s);
    cr_expect(fabs(v - ok[i].v) <= 1e-9 * ok[i].v, "args_parse_count(%s): got %.17g, expected %.17g", ok[i].s,
              v, ok[i].v);
  }
  const char *bad[] = {"", "B", "7X", "7BM", "inf", "nan", "1e999", " 7", "7 ", "0x10"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double v = 123;
    cr_expect_neq(args_parse_count(bad[i], &v), 0, "args_parse_count('%s') accepted: %g", bad[i], v);
  }
}

Test(common_args, only_rank_0_prints) {
  clear_launcher_env();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  cr_expect_eq(args_env_rank(), 1);
  cr_expect_eq(args_env_world(), 3);
  const char *argv[] = {"prog", "--batch", "0"};
  opts_t o;
  char err[256], out[256];
  int rc = parse_captured(&o, 3, argv, err, sizeof err, out, sizeof out);
  cr_expect_eq(rc, 2, "rank 1 must fail too (code %d)", rc);
  cr_expect_str_eq(err, "", "rank 1 printed '%s'", err);
  clear_launcher_env();
  setenv("PMI_RANK", "2", 1);
  setenv("PMI_SIZE", "4", 1);
  cr_expect_eq(args_env_rank(), 2);
  cr_expect_eq(args_env_world(), 4);
  clear_launcher_env();
  setenv("PMIX_RANK", "5", 1);
  cr_expect_eq(args_env_rank(), 5);
  clear_launcher_env();
  cr_expect_eq(args_env_rank(), 0);
  cr_expect_eq(args_env_world(), 1);
}

Test(common_args, help_prints_usage_and_returns_1) {
  clear_launcher_env();
  const char *argv[] = {"prog", "--batch", "0", "--help"};
  opts_t o;
  char err[256], out[4096];
  int rc = parse_captured(&o, 4, argv, err, sizeof err, out, sizeof out);
  cr_expect_eq(rc, 1, "--help: code %d, expected 1", rc);
  cr_expect_str_eq(err, "", "--help wrote to stderr: '%s'", err);
  cr_expect(strstr(out, "usage: prog") && strstr(out, "--batch N") && strstr(out, "adamw|sgd") &&
                strstr(out, "default 64"),
            "usage text: '%s'", out);
}
