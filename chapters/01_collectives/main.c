/* ch01_collectives — the five collectives (and send/recv, and the all-to-all) on tiny tensors, every
 * rank's buffer printed before and after, in rank order. Notes: notes/01-collectives.md.
 *   make run CH=01 NP=3 ARGS="--op reduce_scatter"
 *   After ReduceScatter on rank 0: [6, 12]   (rank 1: [14, 56], rank 2: [36, 288])
 * --impl ring runs the same calls through solutions/ring.c (built from send/recv only) and the
 * all-to-all through the pairwise exchange of solutions/alltoall.c. */
#include "args.h"   // arg_spec_t, args_parse
#include "check.h"  // die, xcalloc
#include "comm.h"   // comm_t, comm_broadcast, comm_reduce_scatter, comm_print_ordered, ...
#include "dtype.h"  // dtype_t, dt_load, dt_store
#include <math.h>   // pow
#include <stdio.h>  // snprintf, printf
#include <stdlib.h> // free
#include <string.h> // strcmp

typedef struct demo {
  comm_t *c;
  int rank, world;
  dtype_t dt;
} demo_t;

/* "[1, 2, 3]" into dst. */
static void fmt_vec(char *dst, size_t n, const void *buf, int64_t numel, dtype_t dt) {
  size_t len = (size_t)snprintf(dst, n, "[");
  for (int64_t i = 0; i < numel && len < n; i++)
    len += (size_t)snprintf(dst + len, n - len, "%s%.9g", i ? ", " : "", dt_load(buf, dt, i));
  if (len < n) snprintf(dst + len, n - len, "]");
}

/* Every rank prints `<when> <Op> on rank r: [...]`; rank 0 prints them in rank order. */
static void show(const demo_t *d, const char *when, const char *op, const void *buf, int64_t numel) {
  char vec[1536], line[1700];
  if (buf) fmt_vec(vec, sizeof vec, buf, numel, d->dt);
  else snprintf(vec, sizeof vec, "(nothing: only the root receives)");
  snprintf(line, sizeof line, "%s %s on rank %d: %s\n", when, op, d->rank, vec);
  comm_print_ordered(d->c, line);
}

static void notice(const demo_t *d, const char *text) {
  if (d->rank == 0) printf("  -> %s\n\n", text);
  fflush(stdout);
}

static void *vec_new(const demo_t *d, int64_t numel) {
  return xcalloc((size_t)(numel ? numel : 1), dtype_size(d->dt), "demo tensor");
}

/* Broadcast from root 0 of [1, 2, 3, 4]; the others start from zeros. */
static void demo_broadcast(const demo_t *d) {
  void *x = vec_new(d, 4);
  if (d->rank == 0)
    for (int i = 0; i < 4; i++) dt_store(x, d->dt, i, (float)(i + 1));
  show(d, "Before", "Broadcast", x, 4);
  comm_broadcast(d->c, x, 4, d->dt, 0);
  show(d, "After", "Broadcast", x, 4);
  notice(d, "every rank now holds root 0's [1, 2, 3, 4].");
  free(x);
}

/* Reduce (sum) to root 0: rank r holds (r+1)·[1, 2, 3, 4]. */
static void demo_reduce(const demo_t *d) {
  void *x = vec_new(d, 4), *y = vec_new(d, 4);
  for (int i = 0; i < 4; i++) dt_store(x, d->dt, i, (float)((d->rank + 1) * (i + 1)));
  show(d, "Before", "Reduce", x, 4);
  comm_reduce(d->c, x, y, 4, d->dt, REDOP_SUM, 0);
  show(d, "After", "Reduce", d->rank == 0 ? y : NULL, 4);
  char msg[160];
  int s = d->world * (d->world + 1) / 2;
  snprintf(msg, sizeof msg, "only root 0 gets the sum (1+...+%d)·[1, 2, 3, 4] = [%d, %d, %d, %d].", d->world,
           s, 2 * s, 3 * s, 4 * s);
  notice(d, msg);
  free(x);
  free(y);
}

/* All-reduce (sum): rank r holds (r+1)·[1, 2, 3, 4]; everyone gets the sum. */
static void demo_all_reduce(const demo_t *d) {
  void *x = vec_new(d, 4);
  for (int i = 0; i < 4; i++) dt_store(x, d->dt, i, (float)((d->rank + 1) * (i + 1)));
  show(d, "Before", "AllReduce", x, 4);
  comm_all_reduce(d->c, x, 4, d->dt, REDOP_SUM);
  show(d, "After", "AllReduce", x, 4);
  notice(d, "every rank holds the same sum: reduce + broadcast in one call (= reduce-scatter + all-gather).");
  free(x);
}

/* Reduce-scatter (sum): rank r holds N chunks of 2; chunk j = [(r+1)^(j+1), (2(r+1))^(j+1)].
 * Rank r ends with chunk r summed over ranks: with 3 ranks [6, 12], [14, 56], [36, 288]. */
static void demo_reduce_scatter(const demo_t *d) {
  int64_t numel = 2 * (int64_t)d->world;
  void *x = vec_new(d, numel), *y = vec_new(d, 2);
  for (int j = 0; j < d->world; j++) {
    dt_store(x, d->dt, 2 * j, (float)pow(d->rank + 1, j + 1));
    dt_store(x, d->dt, 2 * j + 1, (float)pow(2 * (d->rank + 1), j + 1));
  }
  show(d, "Before", "ReduceScatter", x, numel);
  comm_reduce_scatter(d->c, x, y, numel, d->dt, REDOP_SUM);
  show(d, "After", "ReduceScatter", y, 2);
  notice(d, "rank r keeps only chunk r, summed over all ranks: each rank owns 1/N of the result.");
  free(x);
  free(y);
}

/* All-gather: rank r contributes [10r+1, 10r+2]; everyone gets all chunks in rank order. */
static void demo_all_gather(const demo_t *d) {
  int64_t numel = 2 * (int64_t)d->world;
  void *x = vec_new(d, 2), *y = vec_new(d, numel);
  dt_store(x, d->dt, 0, (float)(10 * d->rank + 1));
  dt_store(x, d->dt, 1, (float)(10 * d->rank + 2));
  show(d, "Before", "AllGather", x, 2);
  comm_all_gather(d->c, x, y, numel, d->dt);
  show(d, "After", "AllGather", y, numel);
  notice(
      d,
      "chunk r of the result is rank r's input, on every rank; reduce-scatter then all-gather = all-reduce.");
  free(x);
  free(y);
}

/* Send/recv: rank 0 sends [1, 2, 3, 4] to rank 1. */
static void demo_send_recv(const demo_t *d) {
  if (d->world < 2) {
    notice(d, "send_recv needs 2 ranks or more (make run CH=01 NP=2 ARGS=\"--op send_recv\"); skipped.");
    return;
  }
  void *x = vec_new(d, 4);
  if (d->rank == 0)
    for (int i = 0; i < 4; i++) dt_store(x, d->dt, i, (float)(i + 1));
  show(d, "Before", "SendRecv", x, 4);
  if (d->rank == 0) comm_send(d->c, x, 4, d->dt, 1);
  if (d->rank == 1) comm_recv(d->c, x, 4, d->dt, 0);
  show(d, "After", "SendRecv", x, 4);
  notice(d, "only rank 1 changed: point-to-point, the one primitive the ring collectives are built from.");
  free(x);
}

/* All-to-all: rank r holds [10(r+1), 10(r+1)+1, ..., 10(r+1)+N−1]; element j goes to rank j. With 3
 * ranks rank 0 ends with [10, 20, 30], rank 1 with [11, 21, 31]: the N×N matrix transposed. */
static void demo_all_to_all(const demo_t *d) {
  int N = d->world;
  void *x = vec_new(d, N), *y = vec_new(d, N);
  for (int j = 0; j < N; j++) dt_store(x, d->dt, j, (float)(10 * (d->rank + 1) + j));
  show(d, "Before", "AllToAll", x, N);
  comm_all_to_all(d->c, x, y, N, d->dt);
  show(d, "After", "AllToAll", y, N);
  notice(d, "element j of rank r went to rank j, as element r there: the matrix of blocks transposed.");
  free(x);
  free(y);
}

/* All-to-all-v: rank r sends (r+j) mod N copies of 10(r+1)+j to rank j (0 allowed), in rank
 * order; each rank knows what comes to it (here by formula; in a MoE layer by a count exchange). */
static void demo_all_to_allv(const demo_t *d) {
  int N = d->world, r = d->rank;
  int64_t *sc = xcalloc((size_t)N, sizeof *sc, "counts"), *rc = xcalloc((size_t)N, sizeof *rc, "counts"),
          ns = 0, nr = 0;
  for (int j = 0; j < N; j++) ns += sc[j] = (r + j) % N, nr += rc[j] = (j + r) % N;
  void *x = vec_new(d, ns), *y = vec_new(d, nr);
  for (int j = 0, k = 0; j < N; j++)
    for (int64_t e = 0; e < sc[j]; e++) dt_store(x, d->dt, k++, (float)(10 * (r + 1) + j));
  show(d, "Before", "AllToAllv", x, ns);
  comm_all_to_allv(d->c, x, sc, NULL, y, rc, NULL, d->dt);
  show(d, "After", "AllToAllv", y, nr);
  notice(
      d,
      "uneven blocks (some empty): rank r sent (r+j) mod N elements to rank j, which expected exactly that "
      "many (a count that disagrees stops every rank with exit 2).");
  free(x);
  free(y);
  free(sc);
  free(rc);
}

int main(int argc, char **argv) {
  const char *op = "all", *impl = "vendor", *dtype = "f32";
  arg_spec_t specs[] = {
      {"--op", ARG_CHOICE, &op, 0, 0,
       "broadcast|reduce|all_reduce|reduce_scatter|all_gather|send_recv|all_to_all|all_to_allv|all",
       "which collective to show"},
      {"--impl", ARG_CHOICE, &impl, 0, 0, "vendor|ring",
       "vendor: MPI's own; ring: solutions/ring.c (send/recv only; the all-to-all: solutions/alltoall.c)"},
      {"--dtype", ARG_CHOICE, &dtype, 0, 0, "f32|bf16", "element type of the tensors"},
  };
  int rc = args_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), "ch01_collectives",
                      "The collectives on tiny tensors, each rank's buffer before and after, in rank order.\n"
                      "Example: make run CH=01 NP=3 ARGS=\"--op reduce_scatter\"");
  if (rc == 1) return 0;
  if (rc) return 2;

  comm_t *c = comm_init(&argc, &argv, BACKEND_MPI, DEV_CPU);
  comm_set_impl(c, strcmp(impl, "ring") == 0 ? COLL_RING : COLL_VENDOR);
  comm_set_timeout(c, 60); /* a demo that hangs should say so */
  demo_t d = {c, comm_rank(c), comm_world(c), strcmp(dtype, "bf16") == 0 ? DT_BF16 : DT_F32};
  if (d.rank == 0)
    printf("%d ranks, %s collectives, %s tensors\n\n", d.world, impl, dtype_name(d.dt));
  int all = strcmp(op, "all") == 0;
  if (all || strcmp(op, "broadcast") == 0) demo_broadcast(&d);
  if (all || strcmp(op, "reduce") == 0) demo_reduce(&d);
  if (all || strcmp(op, "all_reduce") == 0) demo_all_reduce(&d);
  if (all || strcmp(op, "reduce_scatter") == 0) demo_reduce_scatter(&d);
  if (all || strcmp(op, "all_gather") == 0) demo_all_gather(&d);
  if (all || strcmp(op, "send_recv") == 0) demo_send_recv(&d);
  if (all || strcmp(op, "all_to_all") == 0) demo_all_to_all(&d);
  if (all || strcmp(op, "all_to_allv") == 0) demo_all_to_allv(&d);
  comm_finalize(c);
  return 0;
}
