/* args.h — flag parsing with validation, before MPI_Init, any allocation or any collective.
 * A bad flag gets one line on stderr (printed by rank 0 only), naming the flag, the value and
 * the allowed range, e.g.
 *   error: --batch 0: must be an integer in [1, 1073741824]
 * and the program exits with code 2 on every rank. The rank and world size come from the
 * launcher's environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE), so checks that need N
 * (batch divisible by N·accum) also run before MPI starts. */
#ifndef ZL_ARGS_H
#define ZL_ARGS_H
#include <stdint.h> // int64_t

typedef enum {
  ARG_INT,    /* int,     range [lo, hi]; with choices "auto" the word auto is accepted too, stored as -1 */
  ARG_I64,    /* int64_t, range [lo, hi] */
  ARG_DOUBLE, /* double,  range [lo, hi]; NaN and inf refused */
  /* double,  a count with optional suffix: 7.5e9, 7B, 124M, 350K (K=1e3, M=1e6, B/G=1e9, T=1e12) */
  ARG_COUNT,
  ARG_STR,    /* const char * (any non-empty text) */
  ARG_CHOICE, /* const char *, one of `choices` ("a|b|c") */
  ARG_FLAG    /* int set to 1, takes no value */
} arg_kind_t;

typedef struct arg_spec {
  const char *flag; /* "--batch" */
  arg_kind_t kind;
  void *dst;        /* where the value goes (type by kind); keeps its default when absent */
  double lo, hi;    /* inclusive range for numbers */
  const char *choices;
  const char *help;
} arg_spec_t;

/* Parse argv against specs. Returns 0 on success, 1 after printing --help (exit 0), 2 after
 * printing one error line (exit 2). Unknown flags, missing values, non-numbers, out-of-range
 * values, repeated flags are errors. */
int args_parse(int argc, char **argv, const arg_spec_t *specs, int nspecs, const char *prog,
               const char *about);
/* Print one error line (rank 0 only) in the standard form and return 2:
 *   error: <flag> <value>: <what is allowed>
 * Under mpirun the other ranks return only after a few seconds, so that mpirun cannot end the
 * job before rank 0 has printed (rank 0's exit ends it at once). */
int args_error(const char *flag, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rank and world size from the launcher's environment (0 and 1 when run without mpirun). */
/* The value flag was given with on a command line args_parse accepted ("--f v" or "--f=v"),
 * or NULL when it was not given: tells an explicit flag from its default. */
const char *args_given(int argc, char **argv, const char *flag);
int args_env_rank(void);
int args_env_world(void);
/* Print the usage of specs to stdout. */
void args_usage(const arg_spec_t *specs, int nspecs, const char *prog, const char *about);
/* Parse a count such as "7.5e9", "7B", "124M" into *out; 0 on success. */
int args_parse_count(const char *s, double *out);
/* Parse a byte count as nccl-tests writes them: 4096, 4K, 64M, 1G, 4KB (binary: K = 1024), a
 * whole number of bytes in [0, 1e12], into *out; 0 on success. */
int args_parse_bytes(const char *s, int64_t *out);
/* args_parse with nccl-tests' short flags first mapped to the long ones the specs name: -b
 * --minbytes, -e --maxbytes, -f --stepfactor, -n --iters, -w --warmup_iters, -c --check,
 * -d --dtype, -r --root (ch01_collbench, ch09_nodes). Same return values as args_parse. */
int args_parse_nccl(int argc, char **argv, const arg_spec_t *specs, int nspecs, const char *prog,
                    const char *about);
/* -b MIN and -e MAX as byte counts (args_parse_bytes), 1 <= MIN <= MAX, into *minb, *maxb:
 * 0, or 2 after one error line naming the flag. */
int args_byte_range(const char *minb_s, const char *maxb_s, int64_t *minb, int64_t *maxb);
#endif
