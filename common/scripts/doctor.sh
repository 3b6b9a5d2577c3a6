#!/usr/bin/env bash
# doctor.sh — what this machine has and what the build chose (`make doctor`).
# The Makefile passes its decisions in the environment: ZL_USE_CUDA (0|1), ZL_CUDA_WHY, ZL_GPU
# (auto|0|1), ZL_NVCC, ZL_NCCL_H, ZL_CUDA_HOME, ZL_CC, ZL_PYTHON, ZL_PLOT_PYTHON.
# Run alone (bash common/scripts/doctor.sh) it finds them the way the Makefile does.
set -u
cc=${ZL_CC:-mpicc}
nvcc=${ZL_NVCC-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
nccl_h=${ZL_NCCL_H-$(ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h 2>/dev/null | head -1)}
gpu=${ZL_GPU:-auto}
py=${ZL_PYTHON:-$(command -v python3 || echo /usr/bin/python3)}
if [ -z "${ZL_USE_CUDA:-}" ]; then
  if [ "$gpu" = 0 ]; then ZL_USE_CUDA=0; ZL_CUDA_WHY="GPU=0 asked for a CPU-only build"
  elif [ -n "$nvcc" ] && [ -n "$nccl_h" ]; then ZL_USE_CUDA=1; ZL_CUDA_WHY="GPU=$gpu and both nvcc and nccl.h were found"
  else ZL_USE_CUDA=0; ZL_CUDA_WHY="GPU=$gpu and $([ -n "$nvcc" ] && echo nccl.h || echo nvcc) was not found"; fi
fi

row() { printf '  %-14s %s\n' "$1" "$2"; }
first() { "$@" 2>/dev/null | head -1; }

echo "zerolab doctor"
echo "build"
if command -v "$cc" >/dev/null; then
  row "compiler" "$cc -> $(first "$cc" --showme)"
  row "" "$(first "$cc" --showme:version) ; $(first gcc --version)"
else
  row "compiler" "$cc NOT FOUND (make deps)"
fi
row "Open MPI" "$(first mpirun --version || echo 'mpirun NOT FOUND (make deps)')"
pc() { pkg-config --modversion "$1" 2>/dev/null || echo "NOT FOUND by pkg-config (make deps)"; }
row "Criterion" "$(pc criterion)"
row "OpenBLAS" "$(pc openblas) ($(pkg-config --variable=libdir openblas 2>/dev/null || echo '-lopenblas'))"
row "make" "$(first make --version)"
echo "python"
row "scripts" "$py ($(first "$py" --version || echo 'NOT FOUND'))"
plot=${ZL_PLOT_PYTHON-}
if [ -z "$plot" ] && [ -z "${ZL_PLOT_PYTHON+x}" ]; then
  for p in python3 /usr/bin/python3; do "$p" -c 'import matplotlib' 2>/dev/null && { plot=$(command -v "$p"); break; }; done
fi
if [ -n "$plot" ]; then
  row "plots" "$plot, matplotlib $("$plot" -c 'import matplotlib; print(matplotlib.__version__)' 2>/dev/null)$( [ "$plot" != "$(command -v python3)" ] && echo " (python3 on PATH, $(command -v python3), has no matplotlib)")"
else
  row "plots" "no python with matplotlib (Debian: apt-get install python3-matplotlib, for /usr/bin/python3)"
fi
echo "explorer page (optional; make explorer, notes/tour.md)"
row "emcc" "$(command -v emcc >/dev/null && first emcc --version || echo 'not found: make explorer skips (Debian: apt-get install emscripten)')"
row "chromium" "$(command -v chromium >/dev/null && first chromium --version || echo 'not found: make test-long skips the browser test (Debian: apt-get install chromium)')"
echo "CUDA (optional; notes/gpu.md)"
if [ -n "$nvcc" ]; then
  row "nvcc" "$nvcc ($("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' | head -1))"
else
  row "nvcc" "not found"
fi
if [ -n "$nccl_h" ]; then
  v=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH)[ \t]/ {printf "%s%s", sep, $3; sep="."}' "$nccl_h")
  row "NCCL" "$v ($nccl_h)"
else
  row "NCCL" "nccl.h not found"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null)
  if [ -n "$gpus" ]; then row "GPUs" "$(echo "$gpus" | wc -l)"; echo "$gpus" | sed 's/^/                 /'
  else row "GPUs" "none (nvidia-smi found no device)"; fi
else
  row "GPUs" "none (no nvidia-smi)"
fi
echo "what the build chose"
if [ "$ZL_USE_CUDA" = 1 ]; then
  row "CUDA path" "ON: $ZL_CUDA_WHY; .cu files compiled by nvcc, binaries link cuBLAS/NCCL/cudart"
  row "" "--device auto uses a GPU when one is visible, else the CPU"
else
  row "CUDA path" "OFF: $ZL_CUDA_WHY; CPU ranks only (--device cuda will say it is not built)"
fi
row "" "GPU=auto (default) uses CUDA when nvcc and nccl.h are found; GPU=0 never; GPU=1 demands it"
