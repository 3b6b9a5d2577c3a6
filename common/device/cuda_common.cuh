/* cuda_common.cuh — what every .cu file of the CUDA path includes first (notes/gpu.md).
 * The shared C headers (check.h, ledger.h, ...) are plain C11: this wraps them for nvcc's C++
 * (C linkage, C11's _Noreturn spelled the C++ way) and turns on check.h's CUDA/cuBLAS/NCCL
 * macros. Include order matters: system and vendor headers first, then the C headers. */
#ifndef ZL_CUDA_COMMON_CUH
#define ZL_CUDA_COMMON_CUH
#define OMPI_SKIP_MPICXX 1  /* the C API only: MPI's C++ bindings do not build with -Werror */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>            // MPI_Comm; before check.h's extern "C" block
#include <cuda_runtime.h>   // cudaError_t, cudaStream_t
#include <cublas_v2.h>      // cublasStatus_t, cublasGetStatusString
#include <nccl.h>           // ncclResult_t, ncclGetErrorString
#include <stdint.h>         // int64_t

#define ZL_CUDA_SOURCE 1    /* check.h: define CHECK_CUDA, CHECK_CUBLAS, CHECK_NCCL */
#ifndef _Noreturn
#define _Noreturn [[noreturn]]
#define ZL_UNDEF_NORETURN 1
#endif
extern "C" {
#include "check.h"          // CHECK_CUDA, CHECK_CUBLAS, CHECK_NCCL, die, check_rank
#include "dtype.h"          // dtype_t, bf16_t
#include "ledger.h"         // ledger_add, ledger_sub
}
#ifdef ZL_UNDEF_NORETURN
#undef _Noreturn
#undef ZL_UNDEF_NORETURN
#endif

/* After every kernel launch: a bad configuration shows up here, at the launch that made it. */
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())
#endif
