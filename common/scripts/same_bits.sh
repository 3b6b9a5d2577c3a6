#!/usr/bin/env bash
# same_bits.sh BIN_BEFORE BIN_AFTER [FILTER] — "no behaviour change", checked: every training
# chapter (02-08) on a small matrix of runs (MLP and GPT, fp32 and bf16, DDP, ZeRO-1/2/3, TP x D,
# P x D, offload), once with each set of binaries, and the two compared: --save-params bytes
# (cmp) and the --json per-step losses (printed to 9 digits, so equal text = equal fp32 bits up
# to the last printed digit; the params bytes are the exact check).
#   make check-bits BASE=REV  builds REV in a temporary worktree and runs this against build/bin.
#   FILTER: only the runs whose name contains it (e.g. ch07).
# Bitwise is the right test here (notes/design.md, "Bits or a tolerance"): both sets of binaries run
# on this machine, one after the other, under the same OpenBLAS kernel (printed first), so the same
# kernels meet the same shapes in the same order unless the change itself changed them.
# Prints one line per run (same / DIFFERENT and why) and exits 1 if any run differs or fails; a run
# whose flag the BEFORE binaries do not know yet (exit 2, "unknown flag") is named and not compared.
set -u
a=${1:?usage: same_bits.sh BIN_BEFORE BIN_AFTER [FILTER]}
b=${2:?usage: same_bits.sh BIN_BEFORE BIN_AFTER [FILTER]}
filter=${3:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d /tmp/zl_bits.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
kernel=$(python3 -c 'import ctypes; l = ctypes.CDLL("libopenblas.so.0"); l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())' 2>/dev/null)
echo "same_bits: both builds on this machine, OpenBLAS kernel ${kernel:-unknown}${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"

G="--model gpt --gpt tiny --batch 8"
M="--layers 3 --hidden 48 --input 20 --classes 6 --batch 24"
# name | ranks | program | flags  (every run: --steps 3 --quiet, --json and --save-params added)
runs=$(cat <<EOF
ch02_naive_mlp|2|ch02_ddp|$M --variant naive
ch02_bucketed_mlp_bf16|2|ch02_ddp|$M --variant bucketed --precision bf16
ch02_bucketed_gpt|2|ch02_ddp|$G --variant bucketed
ch02_gpt_bf16_accum|1|ch02_ddp|$G --precision bf16 --accum 2
ch03_mlp_sgd|2|ch03_zero1|$M --optimizer sgd
ch03_gpt_bf16|2|ch03_zero1|$G --precision bf16
ch04_mlp_n3|3|ch04_zero2|$M
ch04_gpt|2|ch04_zero2|$G
ch05_mlp_bf16|2|ch05_zero3|$M --precision bf16
ch05_gpt_recompute|2|ch05_zero3|$G --recompute
ch06_tp2_mlp|2|ch06_tp|$M --tp 2
ch06_tp2_gpt|2|ch06_tp|$G --tp 2
ch06_tp2_d2_gpt_bf16_zero1|4|ch06_tp|$G --tp 2 --zero 1 --precision bf16
ch06_tp2_gpt_pa|2|ch06_tp|$G --tp 2 --recompute
ch06_tp2_mlp_bf16_accum|2|ch06_tp|$M --tp 2 --precision bf16 --accum 2
ch06_tp2_d2_mlp_zero3_pa|4|ch06_tp|$M --tp 2 --zero 3 --recompute
ch06_tp2_gpt_sp|2|ch06_tp|$G --tp 2 --sp
ch06_tp2_d2_gpt_sp_zero2_accum|4|ch06_tp|$G --tp 2 --sp --zero 2 --accum 2
ch07_1f1b_mlp|2|ch07_pipeline|$M --pp 2 --micro-batches 4 --schedule 1f1b
ch07_gpipe_gpt|2|ch07_pipeline|$G --pp 2 --micro-batches 2 --schedule gpipe
ch07_interleaved_mlp|2|ch07_pipeline|--layers 7 --hidden 48 --input 20 --classes 6 --batch 24 --pp 2 --micro-batches 4 --schedule interleaved --virtual-stages 2
ch07_zbh1_gpt|2|ch07_pipeline|$G --pp 2 --micro-batches 4 --schedule zb-h1
ch07_zbh2_mlp_p4|4|ch07_pipeline|--layers 7 --hidden 48 --input 20 --classes 6 --batch 24 --pp 4 --micro-batches 8 --schedule zb-h2
ch07_1f1b_mlp_p4|4|ch07_pipeline|--layers 7 --hidden 48 --input 20 --classes 6 --batch 24 --pp 4 --micro-batches 8 --schedule 1f1b
ch07_interleaved_mlp_p4|4|ch07_pipeline|--layers 9 --hidden 48 --input 20 --classes 6 --batch 24 --pp 4 --micro-batches 4 --schedule interleaved --virtual-stages 2
ch07_p2d2_gpt_bf16|4|ch07_pipeline|$G --pp 2 --micro-batches 2 --schedule 1f1b --precision bf16
ch07_p2d2_mlp_zero3|4|ch07_pipeline|$M --pp 2 --micro-batches 2 --schedule 1f1b --zero 3
ch07_p2t2_gpt|4|ch07_pipeline|$G --pp 2 --tp 2 --micro-batches 2 --schedule 1f1b
ch07_p2t2_gpt_sp|4|ch07_pipeline|$G --pp 2 --tp 2 --sp --micro-batches 2 --schedule 1f1b
ch08_mlp_bf16|2|ch08_offload|$M --precision bf16 --offload optimizer
ch08_gpt|2|ch08_offload|$G --offload optimizer
ch12_ep2_gpt|2|ch12_experts|$G --moe 4 --topk 2 --ep 2
ch06_tp2_d2_gpt_zero3_clip|4|ch06_tp|$G --tp 2 --zero 3 --clip 0.5 --optimizer sgd
ch12_ep2_gpt_clip|2|ch12_experts|$G --moe 4 --topk 2 --ep 2 --clip 0.5
ch12_tp2_ep2_d2_zero1_clip|4|ch12_experts|$G --moe 4 --topk 2 --ep 2 --tp 2 --zero 1 --clip 0.5 --optimizer sgd
ch12_ep2_d2_gpt_cap_zero3|4|ch12_experts|$G --moe 4 --topk 1 --ep 2 --zero 3 --capacity-factor 1.0
ch12_moe_every2_bf16_recompute_accum|2|ch12_experts|$G --moe 4 --topk 2 --moe-every 2 --precision bf16 --recompute --accum 2
ch12_tp2_ep4_gpt|4|ch12_experts|$G --moe 4 --topk 2 --ep 4 --tp 2
EOF
)

run_one() { # bin name np prog flags -> writes $tmp/<side>/<name>.{json,bin,log}
  local bin=$1 side=$2 name=$3 np=$4 prog=$5 flags=$6
  mkdir -p "$tmp/$side"
  # shellcheck disable=SC2086
  "$here/zlrun" "$np" "$bin/$prog" $flags --steps 3 --quiet \
    --json "$tmp/$side/$name.json" --save-params "$tmp/$side/$name.bin" >"$tmp/$side/$name.log" 2>&1 </dev/null
}
losses() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%.9g" % s["loss"] for s in d["steps"]))' "$1" 2>/dev/null; }

nbad=0; nrun=0
while IFS='|' read -r name np prog flags; do
  [ -n "$name" ] || continue
  case "$name" in *"$filter"*) ;; *) continue ;; esac
  nrun=$((nrun + 1))
  if ! run_one "$a" before "$name" "$np" "$prog" "$flags"; then
    if grep -q ": unknown flag" "$tmp/before/$name.log"; then # a run of a flag added since BEFORE: nothing to compare
      echo "  $name: new (the BEFORE binaries lack a flag: $(grep -m1 ': unknown flag' "$tmp/before/$name.log")), not compared"
      nrun=$((nrun - 1)); continue; fi
    echo "  $name: the BEFORE run failed: $(tail -1 "$tmp/before/$name.log")"; nbad=$((nbad + 1)); continue; fi
  if ! run_one "$b" after "$name" "$np" "$prog" "$flags"; then
    echo "  $name: DIFFERENT: the AFTER run failed: $(tail -1 "$tmp/after/$name.log")"; nbad=$((nbad + 1)); continue; fi
  la=$(losses "$tmp/before/$name.json"); lb=$(losses "$tmp/after/$name.json")
  if ! cmp -s "$tmp/before/$name.bin" "$tmp/after/$name.bin"; then
    echo "  $name: DIFFERENT params bytes ($(cmp "$tmp/before/$name.bin" "$tmp/after/$name.bin" 2>&1 | head -1))"; nbad=$((nbad + 1))
  elif [ "$la" != "$lb" ]; then
    echo "  $name: DIFFERENT losses: before [$la] after [$lb]"; nbad=$((nbad + 1))
  else
    echo "  $name: same (params bytes, losses $la)"
  fi
done <<<"$runs"
echo "same_bits: $((nrun - nbad)) of $nrun runs the same"
[ "$nbad" = 0 ]
