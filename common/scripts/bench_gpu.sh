#!/usr/bin/env bash
# bench_gpu.sh BUILD_DIR RESULTS_DIR — the GPU benchmarks (make bench-gpu; notes/benchmarks.md).
#   gpu_matmul.md   matmul TFLOP/s: raw cuBLAS (bf16 tensor cores, fp32) vs our op_linear_fwd
#   gpu_steps.md    step time and samples/s for chapters 02-05: NCCL with N = 1 (one rank, one GPU),
#                   the host-staged MPI backend with N = 2 and 4 ranks sharing the GPU
# Skipped (exit 0) when no GPU is visible, so `make bench` works on CPU-only machines.
# Environment: ZL_BENCH_STEPS (default 10), ZL_BENCH_MODEL (model flags), ZL_BENCH_NP ("1 2 4").
set -u
build=${1:?usage: bench_gpu.sh BUILD_DIR RESULTS_DIR}
results=${2:?usage: bench_gpu.sh BUILD_DIR RESULTS_DIR}
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench-gpu: skipped (no GPU visible: nvidia-smi -L fails)"; exit 0
fi
mkdir -p "$results"
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "bench-gpu: python3 is needed to read the --json results" >&2; exit 1; }
steps=${ZL_BENCH_STEPS:-10}
# Wide hidden layers, few inputs and classes: the synthetic data is generated on the host
# (data.c: a teacher matmul per sample), and with --input 1024 --classes 1000 that alone took
# ~4 s per 4096-sample step on the H100 box — the benchmark would time the data, not the GPU.
model=${ZL_BENCH_MODEL:---input 64 --hidden 4096 --layers 4 --classes 10 --batch 2048 --lr 1e-4}
nps=${ZL_BENCH_NP:-1 2 4}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
failed=0

# ---- 1. matmul ----------------------------------------------------------------------------
echo "== matmul throughput ($gpu)"
if "$build/tests/gpu_bench_gemm" --size 4096 --size 8192 >"$results/gpu_matmul.md" 2>&1; then
  cat "$results/gpu_matmul.md"
else
  cat "$results/gpu_matmul.md"; echo "bench-gpu: gpu_bench_gemm failed" >&2; failed=1
fi

# ---- 2. training steps -------------------------------------------------------------------------
# median step time over the steps after the first (warm-up: cuBLAS heuristics, NCCL set-up)
summ() {
  "$py" - "$1" <<'EOF'
import json, statistics, sys
j = json.load(open(sys.argv[1]))
ms = [s["ms"] for s in j["steps"]][1:] or [s["ms"] for s in j["steps"]]
med = statistics.median(ms)
print(f'{med:.3f} {j.get("params", 0)} {j.get("final_loss", float("nan")):.5f}')
EOF
}
batch=$(echo "$model" | sed -n 's/.*--batch \([0-9]*\).*/\1/p')
tmp=$(mktemp -d /tmp/zl_bench_gpu.XXXXXX)
{
  echo "GPU: $gpu. Model: $model, fp32 AdamW unless noted, $steps steps; step time = median over steps 2..$steps."
  echo "N = 1 uses NCCL (one rank, one GPU); N > 1 uses --backend mpi: collectives staged through host memory,"
  echo "so several ranks can share this one GPU (that measures staging, not NCCL's multi-GPU bandwidth)."
  echo
  echo "| chapter | N | backend | precision | step ms | samples/s | final loss |"
  echo "|---|---|---|---|---|---|---|"
} >"$results/gpu_steps.md"
for ch in ch02_ddp ch03_zero1 ch04_zero2 ch05_zero3; do
  for np in $nps; do
    be=$([ "$np" = 1 ] && echo nccl || echo mpi)
    for prec in fp32 bf16; do
      [ "$prec" = bf16 ] && [ "$np" != 1 ] && continue # bf16 rows at N = 1 only
      env_mm=$([ "$prec" = bf16 ] && echo "ZL_CUDA_MATMUL=bf16" || echo "ZL_CUDA_MATMUL=fp32")
      json="$tmp/${ch}_${np}_${prec}.json"
      log="$tmp/${ch}_${np}_${prec}.log"
      echo "== $ch N=$np --backend $be --precision $prec"
      if env $env_mm timeout 120 bash "$here/zlrun" "$np" "$build/bin/$ch" $model --steps "$steps" --device cuda \
           --backend "$be" --precision "$prec" --json "$json" --quiet >"$log" 2>&1 && [ -s "$json" ]; then
        read -r ms params loss < <(summ "$json")
        sps=$("$py" -c "print(f'{$batch / ($ms / 1000):.0f}')")
        label=$prec; [ "$prec" = bf16 ] && label="bf16 (tensor cores)"
        echo "| $ch | $np | $be | $label | $ms | $sps | $loss |" >>"$results/gpu_steps.md"
        echo "   $ms ms/step, $sps samples/s (params $params)"
      else
        echo "| $ch | $np | $be | $prec | failed | | |" >>"$results/gpu_steps.md"
        tail -5 "$log"; failed=1
      fi
    done
  done
done
# one CPU row for scale: the same model on 4 CPU ranks of this machine (one core each), 3 steps
if [ "${ZL_BENCH_CPU:-1}" = 1 ]; then
  json="$tmp/cpu.json"
  echo "== ch02_ddp N=4 --device cpu (for comparison)"
  if timeout 200 bash "$here/zlrun" 4 "$build/bin/ch02_ddp" $model --steps 3 --device cpu --json "$json" --quiet \
       >"$tmp/cpu.log" 2>&1 && [ -s "$json" ]; then
    read -r ms params loss < <(summ "$json")
    sps=$("$py" -c "print(f'{$batch / ($ms / 1000):.0f}')")
    echo "| ch02_ddp | 4 | mpi | fp32, **CPU** (4 ranks x 1 core, 3 steps) | $ms | $sps | $loss |" >>"$results/gpu_steps.md"
  else
    echo "| ch02_ddp | 4 | mpi | fp32, CPU | failed | | |" >>"$results/gpu_steps.md"; tail -5 "$tmp/cpu.log"
  fi
fi
cat "$results/gpu_steps.md"
rm -rf "$tmp"
exit $failed
