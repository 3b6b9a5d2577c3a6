#!/usr/bin/env bash
# gpu_session.sh pack|run [BUILD_DIR] — run the GPU tests and benchmarks on a borrowed GPU machine
# that has the NVIDIA driver and CUDA but no compiler toolchain of ours (no mpicc, OpenBLAS,
# Criterion), from binaries built here. Notes: notes/gpu.md.
#
#   here (a machine with nvcc, NCCL, MPI, OpenBLAS, Criterion; no GPU needed):
#     bash common/scripts/gpu_session.sh pack          # make GPU=1 into build-gpu/, libraries into
#                                                      # build-gpu/lib/libs.tar.xz, Open MPI bundle in .ompi/
#   carry build-gpu/bin, build-gpu/tests, build-gpu/lib and .ompi to the GPU machine, then there,
#   from the repository root:
#     bash common/scripts/gpu_session.sh run           # results under $OUT (or results/gpu)
#
# `run` writes: gpu.txt (nvidia-smi, library paths), test_gpu.log (make test-gpu's Criterion run),
# gpu_matmul.md and gpu_steps.md (make bench-gpu's tables), bench_gpu.log.
# Time on the H100 (one run, 2026-11-23): tests ~90 s, benchmarks ~4 min, plus the machine's start.
# Shorter runs: ZL_GPU_FILTER='common_gpu_ops/*' (one suite), ZL_GPU_BENCH=0 (no benchmarks),
# ZL_BENCH_NP=1 ZL_BENCH_CPU=0 (benchmarks at N = 1 only).
set -u
mode=${1:?usage: gpu_session.sh pack|run [BUILD_DIR]}
build=${2:-${ZL_BUILD:-build-gpu}}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 2

pack() {
  make --no-print-directory BUILD="$build" GPU=1 -j"$(nproc)" gpu-build || exit 1
  # shared libraries the binaries need beyond glibc, the CUDA toolkit and Open MPI (the bundle has MPI)
  local libs tmp
  libs=$(for b in "$build"/bin/* "$build"/tests/*; do [ -x "$b" ] && [ -f "$b" ] && ldd "$b" 2>/dev/null; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    grep -Ev '^(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux[^ ]*|libstdc\+\+|libgcc_s)\.so' |
    grep -Ev '^(libmpi|libopen-rte|libopen-pal|libhwloc|libevent[^ ]*|libpmix|libcuda|libcudart|libcublas[^ ]*|libnccl)\.so' |
    grep -Ev ' /usr/local/cuda')
  tmp=$(mktemp -d)
  echo "$libs" | while read -r name path; do [ -n "$name" ] && cp -L "$path" "$tmp/$name"; done
  mkdir -p "$build/lib"
  tar cJf "$build/lib/libs.tar.xz" -C "$tmp" .
  echo "packed $(ls "$tmp" | wc -l) libraries into $build/lib/libs.tar.xz ($(du -h "$build/lib/libs.tar.xz" | cut -f1)):" $(ls "$tmp")
  rm -rf "$tmp"
  [ -f .ompi/ompi_bundle.sh ] || bash "$here/ompi_bundle.sh" fetch .ompi || exit 1
  du -sh "$build/bin" "$build/tests" "$build/lib" .ompi
  echo "carry: $build/bin $build/tests $build/lib .ompi   then: bash common/scripts/gpu_session.sh run $build"
}

run() {
  local out=${OUT:-results/gpu}
  mkdir -p "$out"
  # 1. our libraries, last on the path: the machine's own copies win where it has them
  if [ -f "$build/lib/libs.tar.xz" ]; then
    mkdir -p /tmp/zl_libs && tar xJf "$build/lib/libs.tar.xz" -C /tmp/zl_libs
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/tmp/zl_libs"
  fi
  # 2. Open MPI: the machine's, or the bundle carried in .ompi/
  if ! command -v mpirun >/dev/null && [ -f .ompi/ompi_bundle.sh ]; then
    eval "$(bash .ompi/ompi_bundle.sh env .ompi)"
  fi
  # 3. CUDA libraries the rpath (/usr/local/cuda/lib64 here) does not find there: look for them
  local missing lib dir
  missing=$(ldd "$build/bin/ch02_ddp" "$build/tests/zl_gpu_tests" 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
  for lib in $missing; do
    dir=$(find /usr/local /usr/lib /opt -name "$lib" -print -quit 2>/dev/null | xargs -r dirname)
    [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir:$LD_LIBRARY_PATH"
  done
  {
    nvidia-smi
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "mpirun: $(command -v mpirun)"
    ldd "$build/bin/ch02_ddp" "$build/tests/zl_gpu_tests" | grep -E "not found|nccl|cublas|cudart|mpi|openblas|criterion"
  } >"$out/gpu.txt" 2>&1
  cat "$out/gpu.txt"
  # 4. make test-gpu (the binary, without make: the toolchain is not there)
  echo "== test-gpu"
  # deadlines so that a hang still leaves the logs (a lent machine's command has a time limit)
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 timeout -k 10 "${ZL_GPU_TEST_TIMEOUT:-200}" \
    "$build/tests/zl_gpu_tests" --jobs 1 --short-filename --verbose ${ZL_GPU_FILTER:+--filter "$ZL_GPU_FILTER"} \
    </dev/null 2>&1 | tee "$out/test_gpu.log"
  local test_rc=${PIPESTATUS[0]}
  # 5. make bench-gpu
  local bench_rc=0
  if [ "${ZL_GPU_BENCH:-1}" = 1 ]; then
    echo "== bench-gpu"
    timeout -k 10 "${ZL_GPU_BENCH_TIMEOUT:-330}" bash common/scripts/bench_gpu.sh "$build" "$out" 2>&1 | tee "$out/bench_gpu.log"
    bench_rc=${PIPESTATUS[0]}
  fi
  # 6. optionally part of the CPU suite (make test's binary) on this GPU machine: does it still pass
  #    when --device auto finds a GPU? ZL_GPU_CPU_SUITE=<Criterion filter>, e.g. 'ch03*/*'
  if [ -n "${ZL_GPU_CPU_SUITE:-}" ] && [ -x "$build/tests/zl_tests" ]; then
    echo "== CPU suite on the GPU machine: $ZL_GPU_CPU_SUITE"
    timeout -k 10 "${ZL_GPU_CPU_TIMEOUT:-120}" bash common/scripts/run_tests.sh "$build/tests/zl_tests" \
      "$ZL_GPU_CPU_SUITE" 2>&1 | tail -40 >"$out/cpu_suite.log"
    tail -5 "$out/cpu_suite.log"
  fi
  echo "gpu_session: test-gpu exit $test_rc, bench-gpu exit $bench_rc; results in $out"
  [ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
}

case "$mode" in
pack) pack ;;
run) run ;;
*) echo "usage: gpu_session.sh pack|run [BUILD_DIR]" >&2; exit 2 ;;
esac
