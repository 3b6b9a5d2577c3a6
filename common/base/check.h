/* check.h — one place that checks every MPI / CUDA / NCCL / cuBLAS return.
 * On failure: print `rank R file:line call: error text` to stderr, then MPI_Abort the whole
 * job so no rank is left blocked in a collective. comm_init sets MPI_ERRORS_RETURN so that
 * MPI errors reach CHECK_MPI instead of aborting inside the library. */
#ifndef ZL_CHECK_H
#define ZL_CHECK_H
#include <mpi.h> // MPI_SUCCESS, MPI_Error_string

/* Print `rank R file:line call: msg` and abort every rank (MPI_Abort, or exit(1) before MPI_Init). */
_Noreturn void check_fail(const char *file, int line, const char *call, const char *msg);
/* A fatal error that is not a failed call: print the message as given (a user-facing
 * "error: --flag ..." line, or one that names the rank itself), then abort the job (exit 1). */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, prefixed with this process's rank in the job: `rank R: <message>` (R is the world
 * rank set by comm_init, also inside a sub-communicator; before comm_init the launcher's
 * OMPI_COMM_WORLD_RANK or PMI_RANK, else 0: a process started alone). */
_Noreturn void die_on_rank(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The rank this process reports in messages (set by comm_init; before it the launcher's, else 0). */
int check_rank(void);
void check_set_rank(int rank);

#define CHECK_MPI(call)                                                       \
  do {                                                                        \
    int e_ = (call);                                                          \
    if (e_ != MPI_SUCCESS) {                                                  \
      char s_[MPI_MAX_ERROR_STRING];                                          \
      int n_ = 0;                                                             \
      MPI_Error_string(e_, s_, &n_);                                          \
      check_fail(__FILE__, __LINE__, #call, s_);                              \
    }                                                                         \
  } while (0)

/* Allocation that never returns NULL: dies with `out of memory on rank R: <what> needs X MiB`. */
void *xmalloc(size_t nbytes, const char *what);
void *xcalloc(size_t n, size_t size, const char *what);
/* realloc(old, nbytes), dying as xmalloc does when it cannot. */
void *xrealloc(void *old, size_t nbytes, const char *what);

#ifdef ZL_CUDA_SOURCE /* only .cu files and files that include the CUDA runtime define this */
#define CHECK_CUDA(call)                                                      \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) check_fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)
#define CHECK_CUBLAS(call)                                                    \
  do {                                                                        \
    cublasStatus_t e_ = (call);                                               \
    if (e_ != CUBLAS_STATUS_SUCCESS) check_fail(__FILE__, __LINE__, #call, cublasGetStatusString(e_)); \
  } while (0)
#define CHECK_NCCL(call)                                                      \
  do {                                                                        \
    ncclResult_t e_ = (call);                                                 \
    if (e_ != ncclSuccess) check_fail(__FILE__, __LINE__, #call, ncclGetErrorString(e_)); \
  } while (0)
#endif
#endif
