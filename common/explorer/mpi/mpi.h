/* mpi.h — for the explorer's WebAssembly build only (common/explorer/README.md): what check.h names
 * from MPI, so that gpt.c and model.c compile for the browser. Nothing here runs: the page calls no
 * function that reaches check.h's CHECK_MPI (the unreached ones are left out by the linker). */
#ifndef ZL_EXPLORER_MPI_H
#define ZL_EXPLORER_MPI_H
#define MPI_SUCCESS 0
#define MPI_MAX_ERROR_STRING 64
static inline int MPI_Error_string(int code, char *s, int *n) {
  (void)code;
  s[0] = 0;
  *n = 0;
  return 0;
}
#endif
