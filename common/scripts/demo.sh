#!/usr/bin/env bash
# demo.sh [CH] [--quick] — the guided tour behind `make demo` (notes/tour.md).
#
#   make demo            every chapter, briefly: 4 CPU ranks through common/scripts/zlrun, or one
#                        rank per GPU when `nvidia-smi -L` lists 2 or more and the build has CUDA
#   make demo CH=03      one chapter (a lecture slot): 00 .. 10, 12 (09: on 2 emulated nodes as root,
#                        else on one box with the node map faked: the bytes, not the times)
#   --quick              tiny sizes, 2 ranks, fewer launches, into /tmp/zerolab-quick/ (the CI
#                        check of the figures, tests/mpi/test_tutorial.c, uses it)
#
# Writes results/*.json (the programs' --json), results/*.trace.json and
# results/pipeline/*.trace.json (--trace, open them in ui.perfetto.dev) and
# results/figures/*.png (common/scripts/plots.py): everything under results/ (ignored by git), so a checkout is as clean after the tour as before it. The figures
# the notes show (notes/figures/, tracked) change only through `make figures` (maintainers).
# Each run is one program launch with small sizes; a chapter whose binary is not built is
# announced and skipped.
# Environment: ZL_BIN (default build/bin), ZL_RESULTS (results), ZL_FIGURES (results/figures),
# ZL_DEMO_NP (ranks for the chapter runs, default 4), ZL_DEMO_DEVICE (auto|cpu|cuda),
# ZL_DEMO_GPT_STEPS (the closing GPT run, default 500: under a minute on 2 cores).
set -u
cd "$(dirname "$0")/../.." || exit 2

CH=""
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    [0-9][0-9]) CH=$a ;;
    [0-9]) CH=0$a ;;
    *) echo "error: demo.sh $a: allowed a chapter number 00..10 or 12 (make demo CH=03) or --quick" >&2; exit 2 ;;
  esac
done
BIN=${ZL_BIN:-build/bin}
RES=${ZL_RESULTS:-results}
FIG=${ZL_FIGURES:-$RES/figures}
if [ "$QUICK" = 1 ]; then  # tiny runs never overwrite the real results and figures
  RES=${ZL_RESULTS:-/tmp/zerolab-quick/results}
  FIG=${ZL_FIGURES:-/tmp/zerolab-quick/figures}
fi
case "$CH" in ''|00|01|02|03|04|05|06|07|08|09|10|12) ;; *) echo "error: CH=$CH: allowed 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10, 12 (11 is a reading: notes/11-choosing-a-layout.md)" >&2; exit 2 ;; esac

if [ -t 1 ]; then B=$'\e[1m'; D=$'\e[2m'; Y=$'\e[33m'; R=$'\e[31m'; N=$'\e[0m'
else B=""; D=""; Y=""; R=""; N=""; fi

mkdir -p "$RES" "$RES/loss" "$RES/sweep" "$RES/pipeline" "$FIG"
# the whole tour starts the loss, sweep and pipeline folders afresh: runs of another size would not compare
[ -z "$CH" ] && rm -f "$RES"/loss/*.json "$RES"/sweep/*.json "$RES"/pipeline/*.json
T0=$(date +%s)
FAILED=()
SKIPPED=()

# ---- where to run: GPUs if there are some and the build can use them, else CPU ranks ------
NP=${ZL_DEMO_NP:-4}
[ "$QUICK" = 1 ] && NP=${ZL_DEMO_NP:-2}
DEVICE=${ZL_DEMO_DEVICE:-auto}
NGPU=0
if command -v nvidia-smi >/dev/null 2>&1; then NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
GPU_NOTE=""
if [ "$DEVICE" = auto ]; then
  DEVICE=cpu
  # the build has the CUDA path when a 1-rank, 1-step cuda run works (a CPU-only build says no)
  if [ "$NGPU" -gt 0 ] && [ -x "$BIN/ch02_ddp" ] &&
     timeout 60 bash common/scripts/zlrun 1 "$BIN/ch02_ddp" --device cuda --steps 1 --quiet >/dev/null 2>&1; then
    if [ "$NGPU" -ge 2 ]; then DEVICE=cuda
    else GPU_NOTE="1 GPU found: data parallelism needs 2 ranks or more, so the tour uses CPU ranks (ZL_DEMO_DEVICE=cuda: 1 GPU rank)"; fi
  elif [ "$NGPU" -gt 0 ]; then
    GPU_NOTE="$NGPU GPU(s) found but this build has no CUDA path (make doctor): the tour uses CPU ranks"
  fi
fi
NPC=$NP   # chapter 01 runs on CPU ranks everywhere (MPI collectives)
if [ "$DEVICE" = cuda ]; then
  NP=${ZL_DEMO_NP:-$(( NGPU > 8 ? 8 : (NGPU < 1 ? 1 : NGPU) ))}  # one rank per GPU (NCCL: never two on one GPU)
fi

# ---- sizes: small enough for 5 minutes on 2 cores, the same model for every loss curve ----
if [ "$DEVICE" = cuda ]; then
  BATCH=$((64 * NP)); STEPS=60; MODEL=(--layers 6 --hidden 1024 --input 256 --classes 32 --lr 0.003)
  TRACE_MODEL=(--layers 8 --hidden 4096 --input 1024 --classes 32 --batch $((256 * NP)) --lr 0.0003)
elif [ "$QUICK" = 1 ]; then
  BATCH=16; STEPS=6; MODEL=(--layers 3 --hidden 48 --input 32 --classes 8)
  TRACE_MODEL=(--layers 3 --hidden 64 --input 32 --classes 8 --batch 16)
else
  BATCH=128; STEPS=40; MODEL=(--layers 3 --hidden 128 --input 32 --classes 10 --lr 0.01)
  TRACE_MODEL=(--layers 4 --hidden 512 --input 128 --classes 10 --batch 64)  # compute large enough to see
fi
MODEL+=(--batch "$BATCH")   # loss runs add --steps $STEPS
# the memory/traffic sweep: a tiny model, bf16 + AdamW (the paper's 16Ψ setting), 2 steps
SWEEP=(--layers 3 --hidden 64 --input 32 --classes 8 --batch 16 --steps 2 --precision bf16 --optimizer adamw --device cpu)
SWEEP_NS=(1 2 4 8)
[ "$QUICK" = 1 ] && SWEEP_NS=(2)
COLL_NS=(2 4)
[ "$QUICK" = 1 ] && COLL_NS=(2)
NPT=2   # the timelines: 2 CPU ranks, so each rank has a core and the rows stay readable
[ "$DEVICE" = cuda ] && NPT=$NP
# chapter 07's pipeline: the MLP of notes/07's figure, 6 micro-batches (tiny with --quick)
PIPE_M=6; PIPE_MODEL=(--layers 5 --hidden 512 --input 256 --classes 10 --batch 384)
[ "$QUICK" = 1 ] && PIPE_M=4 && PIPE_MODEL=(--layers 3 --hidden 64 --input 32 --classes 8 --batch 16)
[ "$DEVICE" = cuda ] && PIPE_M=8 && PIPE_MODEL=("${TRACE_MODEL[@]}")
NPP=$NPT  # pipeline stages: one per rank
NTP=$(( NPT / 2 * 2 )); [ "$NTP" -lt 2 ] && NTP=2   # tensor parallelism: --tp 2 needs an even count
# the activations chart (plot_gpt.py's ch00_gpt_acts): an 8B model, Llama-3-8B's shape, per sequence length
ACTS_SEQS=(1024 2048 4096 8192 16384)
ACTS_ARGS=(--params 8B --layers 32 --hidden 4096 --heads 32 --micro-batch 1 --ranks 8 --tp 8)
BENCH=(--maxbytes 4M --iters 5 --warmup_iters 2)          # 4 KiB .. 4 MiB, median of 5
[ "$QUICK" = 1 ] && BENCH=(--maxbytes 64K --iters 2 --warmup_iters 1)

# ---- output helpers ----------------------------------------------------------------------
STEP=0
NSTEPS=0
step() { # step TITLE, then the lines of explanation on stdin
  STEP=$((STEP + 1))
  echo
  echo "${B}[$STEP/$NSTEPS] $1${N}  ${D}($(( $(date +%s) - T0 )) s)${N}"
  sed 's/^/  /'
  echo
}
have() { # have BINARY: 0 if built, else say it is not and return 1 (the tour goes on)
  if [ -x "$BIN/$1" ]; then return 0; fi
  echo "  ${Y}$BIN/$1 is not built yet: skipping (make build builds every chapter)${N}"
  SKIPPED+=("$1")
  return 1
}
run() { # run NP PROGRAM ARGS...: show the command, run it (2 minutes at most), note a failure.
  local np=$1 prog=$2 rc                 # NP 0: no mpirun (ch00 is a plain calculator)
  shift 2
  if [ "$np" = 0 ]; then
    echo "${D}\$ $BIN/$prog $*${N}"
    timeout -k 5 120 "$BIN/$prog" "$@"
  else
    echo "${D}\$ common/scripts/zlrun $np $BIN/$prog $*${N}"
    timeout -k 5 120 bash common/scripts/zlrun "$np" "$BIN/$prog" "$@"
  fi
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "  ${R}$prog exited with $rc${N}"
    FAILED+=("$prog $*")
  fi
  return $rc
}
brief_run() { # brief_run REGEX NP PROGRAM ARGS...: like run, but shows only the lines matching REGEX
  local re=$1 np=$2 prog=$3 out rc
  shift 3
  echo "${D}\$ common/scripts/zlrun $np $BIN/$prog $*${N}"
  out=$(timeout -k 5 120 bash common/scripts/zlrun "$np" "$BIN/$prog" "$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$out" | tail -n 20
    echo "  ${R}$prog exited with $rc${N}"
    FAILED+=("$prog $*")
  else
    echo "$out" | grep -E "$re"
    echo "  ${D}(summary lines only; every row is in the JSON)${N}"
  fi
  return $rc
}
quiet_run() { # quiet_run LABEL NP PROGRAM ARGS...: one line per run (the sweep)
  local label=$1 np=$2 prog=$3 out
  shift 3
  if out=$(timeout -k 5 120 bash common/scripts/zlrun "$np" "$BIN/$prog" "$@" 2>&1); then
    printf "  %-22s ok\n" "$label"
  else
    printf "  %-22s ${R}failed${N}: %s\n" "$label" "$(echo "$out" | tail -n 1)"
    FAILED+=("$prog $*")
  fi
}

# ---- the steps -----------------------------------------------------------------------------
want() { [ -z "$CH" ] || [ "$CH" = "$1" ]; }

do_ch00() {
  step "Chapter 00 — the memory calculator: where 16 bytes per parameter go" <<EOF
Mixed-precision Adam keeps 2Ψ bf16 params + 2Ψ grads + 12Ψ fp32 master, m and v = 16Ψ bytes.
First the ZeRO paper's Figure 1 (7.5B parameters on 64 GPUs: 120 GB per GPU with DDP,
1.9 GB with ZeRO-3), then an 8B model on one 8-GPU box. Look at the 'total' column.
Last, the same 8B model with the activations of one sequence beside the model states, at
sequence lengths ${ACTS_SEQS[0]} .. ${ACTS_SEQS[-1]}: ZeRO shards the states, never the activations.
EOF
  have ch00_memory || return
  run 0 ch00_memory --params 7.5B --ranks 64 --json "$RES/ch00_paper.json"
  echo
  run 0 ch00_memory --params 8B --ranks 8 --json "$RES/ch00_8b.json"
  echo
  echo "${D}\$ $BIN/ch00_memory ${ACTS_ARGS[*]} --seq S --json $RES/ch00_acts_sS.json${N}  (S = ${ACTS_SEQS[*]})"
  local s out
  for s in "${ACTS_SEQS[@]}"; do   # one summary line each; the tables are in the JSON
    if out=$(timeout -k 5 60 "$BIN/ch00_memory" "${ACTS_ARGS[@]}" --seq "$s" --json "$RES/ch00_acts_s$s.json" 2>&1); then
      printf "  seq %5d: %s\n" "$s" "$(echo "$out" | grep -E '^activations are' | cut -d';' -f1)"
    else
      printf "  seq %5d: ${R}failed${N}: %s\n" "$s" "$(echo "$out" | tail -n 1)"
      FAILED+=("ch00_memory ${ACTS_ARGS[*]} --seq $s")
    fi
  done
}

do_ch01() {
  step "Chapter 01 — the five collectives, printed per rank" <<EOF
Each rank starts from known values; look at what every rank holds after broadcast, reduce,
all-reduce, reduce-scatter and all-gather. All-reduce = reduce-scatter + all-gather: the
identity ZeRO is built on.
EOF
  if [ "$QUICK" = 1 ]; then echo "  (--quick: skipped)"
  else have ch01_collectives && run "$NPC" ch01_collectives; fi
  step "Chapter 01 — collbench: bus bandwidth of the vendor collectives vs our ring" <<EOF
An nccl-tests-style table per message size: algbw = bytes / time; busbw scales it by
2(N-1)/N (all-reduce) or (N-1)/N (reduce-scatter, all-gather) so it compares across N.
Small messages are latency-bound, large ones bandwidth-bound. Runs with ${COLL_NS[*]} ranks;
the 'ring/vendor' column says how close our ring (solutions/ring.c) gets to MPI's own.
EOF
  have ch01_collbench || return
  local n
  for n in "${COLL_NS[@]}"; do
    if [ "$n" = "${COLL_NS[0]}" ]; then   # the first run in full, the others summed up
      run "$n" ch01_collbench --op all "${BENCH[@]}" --json "$RES/collbench_np$n.json"
    else
      echo
      brief_run '^# (ch01_collbench|Avg bus)' "$n" ch01_collbench --op all "${BENCH[@]}" --json "$RES/collbench_np$n.json"
    fi
  done
}

do_ch02() {
  step "Chapter 02 — DDP: N ranks train exactly like 1 rank" <<EOF
The same global batch of $BATCH samples, split over 1 and then $NP ranks; gradients are
averaged with one all-reduce. Compare the loss lines of the two runs: they agree to within 1e-5 (the tolerance tests/mpi/test_ddp.c uses).
The loss falls towards the teacher's entropy, the best any model can do on this data.
EOF
  if have ch02_ddp; then
    run 1 ch02_ddp "${MODEL[@]}" --steps "$STEPS" --device "$DEVICE" --json "$RES/loss/ddp_np1.json"
  echo
    run "$NP" ch02_ddp "${MODEL[@]}" --steps "$STEPS" --device "$DEVICE" --variant bucketed --json "$RES/loss/ddp_np$NP.json"
  fi
  step "Chapter 02 — overlap: naive vs bucketed all-reduce, on a timeline" <<EOF
Naive DDP waits for the whole backward, then all-reduces. Bucketed DDP starts a bucket's
all-reduce as soon as its layers' gradients exist, so communication hides behind the
backward of the earlier layers. Two traces ($NPT ranks, 6 steps): open them in
ui.perfetto.dev (notes/tour.md). The report's 'overlap' line says how much of the
communication ran under a backward, counted from the moment the last rank joined each
all-reduce; whether overlap paid off is the step time: compare the two runs' medians.
EOF
  have ch02_ddp || return
  run "$NPT" ch02_ddp "${TRACE_MODEL[@]}" --device "$DEVICE" --steps 6 --variant naive --trace "$RES/ch02_naive.trace.json" \
    --json "$RES/ch02_naive.json"
  echo
  run "$NPT" ch02_ddp "${TRACE_MODEL[@]}" --device "$DEVICE" --steps 6 --variant bucketed --bucket-mb 0.5 \
    --trace "$RES/ch02_bucketed.trace.json" --json "$RES/ch02_bucketed.json"
}

do_zero() { # do_zero CH PROGRAM STAGE
  local ch=$1 prog=$2 stage=$3
  case $stage in
    1) step "Chapter $ch — ZeRO-1: shard the optimizer states" <<EOF
Each rank keeps Adam's m, v (and the fp32 master) for 1/$NP of the parameters only: it
reduce-scatters the gradients, updates its shard and all-gathers the parameters. Same
traffic as DDP (2Ψ), same losses as DDP; look at the memory table: optim is 1/$NP of DDP's.
EOF
    ;;
    2) step "Chapter $ch — ZeRO-2: shard the gradients too" <<EOF
Gradients are reduce-scattered bucket by bucket during the backward and only this rank's
1/$NP is kept. Look at the grads column of the memory table, and the loss: still DDP's.
EOF
    ;;
    3) step "Chapter $ch — ZeRO-3: shard the parameters, gather each layer just in time" <<EOF
Before each layer's forward and backward the rank all-gathers the layer (prefetching the
next one), uses it, and frees it: model states are 16Ψ/N, traffic grows to 3Ψ. The trace
shows the gather / compute / free pattern; the loss still matches DDP.
EOF
    ;;
  esac
  have "$prog" || return
  if [ "$stage" = 3 ] && [ "$QUICK" = 1 ]; then  # one launch: the loss run writes the timeline too
    run "$NP" "$prog" "${MODEL[@]}" --steps "$STEPS" --device "$DEVICE" --json "$RES/loss/zero${stage}_np$NP.json" \
      --prefetch 1 --trace "$RES/ch05_zero3.trace.json"
    return
  fi
  run "$NP" "$prog" "${MODEL[@]}" --steps "$STEPS" --device "$DEVICE" --json "$RES/loss/zero${stage}_np$NP.json"
  if [ "$stage" = 3 ]; then
    echo
    echo "  Two timelines ($NPT ranks, 6 steps): without prefetch, then one unit prefetched."
    run "$NPT" "$prog" "${TRACE_MODEL[@]}" --steps 6 --device "$DEVICE" --prefetch 0 --quiet \
      --trace "$RES/ch05_zero3_p0.trace.json" --json "$RES/ch05_zero3_p0.json"
    run "$NPT" "$prog" "${TRACE_MODEL[@]}" --steps 6 --device "$DEVICE" --prefetch 1 --quiet \
      --trace "$RES/ch05_zero3.trace.json" --json "$RES/ch05_zero3.json"
  fi
}

do_sweep() { # do_sweep STRATEGY...: memory and traffic at N = 1, 2, 4, 8 (CPU ranks, tiny model)
  step "Measured memory and traffic at N = ${SWEEP_NS[*]} ranks" <<EOF
One tiny bf16 + AdamW model, two steps per run, for each of: $*. The ledger counts every
byte each rank allocates; the communicator counts the bytes each rank sends. The figures
compare both with the formulas (16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N; 2Ψ and 3Ψ of traffic).
EOF
  local s n prog
  for s in "$@"; do
    case $s in ddp) prog=ch02_ddp ;; zero1) prog=ch03_zero1 ;; zero2) prog=ch04_zero2 ;; zero3) prog=ch05_zero3 ;; esac
    have "$prog" || continue
    for n in "${SWEEP_NS[@]}"; do
      quiet_run "$s, N=$n" "$n" "$prog" "${SWEEP[@]}" --json "$RES/sweep/${s}_np$n.json"
    done
  done
}

do_ch06() {
  step "Chapter 06 — tensor parallelism: the worked example on 2 ranks" <<'EOF'
Y = act(X·A) with the 2×2 matrix A split between 2 ranks, printed rank by rank: split by
columns, every rank gets whole output columns (exact for any activation, no communication);
split by rows, the partial products must be summed by an all-reduce BEFORE the activation
(GELU(a) + GELU(b) is not GELU(a + b)). That is Megatron's MLP: columns, then rows.
EOF
  have ch06_tp || return
  run 2 ch06_example
  step "Chapter 06 — training with --tp 2: every layer pair split across 2 ranks" <<EOF
The MLP of chapter 02 trained by $NTP ranks in TP groups of 2 (ranks / 2 data-parallel
replicas): each pair of layers is one column-parallel and one row-parallel linear, with one
all-reduce forward and one backward. The 'tensor-parallel traffic' table counts the bytes
each rank sent in its TP group, beside the formula.
EOF
  brief_run '^(grid:|loss:|tensor-parallel traffic|rank +tp rank|[0-9]+ +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9.]+ +[0-9]+ *$)' \
    "$NTP" ch06_tp --tp 2 "${MODEL[@]}" --steps "$STEPS" --device "$DEVICE" --json "$RES/ch06_tp.json"
}

do_ch07() {
  step "Chapter 07 — pipeline parallelism: naive, GPipe and 1F1B, and their bubble" <<EOF
The model's units cut into $NPP stages, one per rank; each step is $PIPE_M micro-batches whose
activations flow forward and gradients backward between neighbour stages. naive runs one
micro-batch at a time; GPipe all forwards, then all backwards; 1F1B alternates. Look at the
'bubble' line: the idle fraction measured from the trace, beside (P-1)/P (naive) and
(P-1)/(M+P-1). Each run writes a timeline: $RES/pipeline/<schedule>.trace.json.
EOF
  have ch07_pipeline || return
  local sc
  for sc in naive gpipe 1f1b; do
    [ "$sc" = naive ] || echo
    brief_run '^(ch07_pipeline:|bubble:|loss:)' "$NPP" ch07_pipeline "${PIPE_MODEL[@]}" --micro-batches "$PIPE_M" \
      --schedule "$sc" --steps 6 \
      --device "$DEVICE" --trace "$RES/pipeline/$sc.trace.json" --json "$RES/pipeline/$sc.json"
  done
}

do_ch08() {
  step "Chapter 08 — ZeRO-Offload: the optimizer states and the update on the host" <<EOF
ZeRO-2 with --offload optimizer, bf16 + AdamW, on $NPT ranks: the device keeps the bf16
params and this rank's grad shard (2Ψ + 2Ψ/N); the fp32 master, m and v (12Ψ/N) and the
AdamW update live on the host, and each step copies the grad shard device -> host and the
updated params host -> device. Compare the two memory tables: 'memory per rank' is the
device, 'host memory per rank' holds exactly what left it. Timeline: $RES/offload.trace.json.
EOF
  have ch08_offload || return
  brief_run '^(ch08_offload:|loss:|offload_|(host )?memory per rank|rank +params|0 +[0-9]+ |moved here)' \
    "$NPT" ch08_offload --offload optimizer "${TRACE_MODEL[@]}" --precision bf16 --steps 6 --device "$DEVICE" \
    --trace "$RES/offload.trace.json" --json "$RES/offload.json"
}

do_ch10() { # chapter 10 alone (make demo CH=10): context parallelism, then the long-sequence demo
  step "Chapter 10 — long sequences: context parallelism (ring attention)" <<EOF
--cp 4: every rank holds S/4 positions of each sequence; attention passes K/V blocks round a ring
with an online softmax. Look at the cp: lines — the K/V bytes per step beside their formula, and
the attention work per rank: balanced (two mirrored chunks) against contiguous (--cp-balance 0).
Then the demo: the largest sequence that trains under one per-rank budget, per layout (a few
minutes on 2 cores: one-step runs; a refused one ends at its first allocation over the budget).
EOF
  have ch10_long || return
  local bal
  for bal in 1 0; do
    [ "$bal" = 1 ] || echo
    brief_run '^(ch10_long:|cp:|step )' 4 ch10_long --model gpt --gpt small --n-layer 2 --seq-len 256 --batch 4 \
      --steps 3 --cp 4 --cp-balance "$bal" --json "$RES/ch10_cp4_bal$bal.json"
  done
  echo
  echo "${D}\$ python3 common/scripts/bench_long.py --bin $BIN --out $RES/bench_long.json${N}"
  python3 common/scripts/bench_long.py --bin "$BIN" --out "$RES/bench_long.json" || FAILED+=("bench_long.py")
}

do_ch12() { # chapter 12 alone (make demo CH=12): Mixture of Experts, expert parallelism
  step "Chapter 12 — Mixture of Experts: the router, capacity, expert parallelism" <<EOF
Every block's MLP becomes 8 experts and a router that sends each token to 2 of them. First on 2
ranks, data-parallel (every rank all 8 experts), with a capacity factor of 1.25: look at the moe:
lines — Ψ total against active per token, the choices dropped, the expert load max/mean. Then
--ep 2: each rank holds 4 experts, the tokens travel to them and back by all-to-all (the bytes
beside their formula), and the same losses as the data-parallel run, to rounding.
EOF
  have ch12_experts || return
  local ep
  for ep in 1 2; do
    [ "$ep" = 1 ] || echo
    brief_run '^(ch12_experts:|ep:|moe:|step )' 2 ch12_experts --model gpt --gpt tiny --moe 8 --topk 2 \
      --capacity-factor 1.25 --ep "$ep" --batch 16 --steps 8 --log-every 4 --json "$RES/ch12_ep$ep.json"
  done
}

do_plots() {
  step "Figures from the JSON results" <<EOF
common/scripts/plots.py draws every figure from the files just written under $RES/
(never from numbers typed in): memory per rank, ch00's tables and activations, busbw, the
timelines (DDP, ZeRO-3, the pipeline, offload), the loss curves and the traffic per step.
EOF
  local only=()
  case "$CH" in   # one chapter: its own figures only
    00) only=(--only ch00,ch00_gpt_acts) ;;
    01) only=(--only collbench) ;;
    02) only=(--only "memory,traffic,loss,timeline_ddp") ;;
    03 | 04) only=(--only "memory,traffic,loss") ;;
    05) only=(--only "memory,traffic,loss,timeline_zero3") ;;
    07) only=(--only timeline_pipeline) ;;
    08) only=(--only timeline_offload) ;;
    10) only=(--only schematic_cp,long_seq --data "$RES") ;;
  esac
  "${PLOT_PYTHON:-python3}" common/scripts/plots.py --results "$RES" --out "$FIG" "${only[@]}" || FAILED+=("plots.py")
}

do_gpt() { # the last step of the full tour: a GPT on real text, ZeRO-3, then a sample (notes/gpt.md)
  step "A GPT on real text: ZeRO-3 on $NP ranks, then a sample" <<EOF
The same ZeRO-3 trains a transformer now (--model gpt: embedding | 4 pre-LN blocks | head, bytes as
tokens, Debian's fortunes as the text), for about a minute. Watch the validation loss fall from
ln 256 = 5.55 (a uniform guess over bytes); at the end rank 0 prints what the model writes.
EOF
  have ch05_zero3 || return
  run "$NP" ch05_zero3 --model gpt --gpt small --batch 16 --steps "$GPT_STEPS" --lr 3e-3 --eval-every 100 \
    --sample 300 --device "$DEVICE" --json "$RES/gpt_zero3.json"
}
do_ch09() {
  local where=(env ZL_NODE_OF_RANK=0,0,1,1) nodes=() how="one box, the node map faked (ZL_NODE_OF_RANK=0,0,1,1): the bytes are
the emulated nodes' bytes, the times one box's (as root the run goes on 2 emulated nodes)"
  if bash common/scripts/cluster.sh check >/dev/null 2>&1; then
    where=(env ZL_CLUSTER=zldem) nodes=(--nodes 2 --link-mbit 200)
    how="2 emulated nodes (network namespaces, common/scripts/cluster.sh), 2 ranks each, the link
between them shaped to 200 Mbit/s each way; inside a node, shared memory"
  fi
  step "Chapter 09 — two nodes: the flat ring against the two-level all-reduce, then HSDP" <<EOF
Where: $how.
Per size: time and busbw of the flat ring and of the two-level all-reduce (reduce-scatter in the
node, all-reduce across on 1/g of the data, all-gather in the node), and the bytes each rank sent
ACROSS nodes, measured beside the formula: flat 2(N-1)/N x B on the last rank of each node,
two-level 2(K-1)/K x B/g on every rank. Then ZeRO-3 over all 4 ranks against HSDP
(--shard-group node): compare the 'across nodes' tables.
EOF
  have ch09_nodes || return
  echo "${D}\$ common/scripts/zlrun ${nodes[*]} 4 $BIN/ch09_nodes -b 1M -e 4M -n 3 --impl ring --json $RES/ch09_nodes.json${N}"
  "${where[@]}" timeout -k 5 120 bash common/scripts/zlrun "${nodes[@]}" 4 "$BIN/ch09_nodes" -b 1M -e 4M -n 3 --impl ring \
    --json "$RES/ch09_nodes.json" || FAILED+=("ch09_nodes")
  local s
  for s in all node; do
    echo
    echo "${D}\$ common/scripts/zlrun ${nodes[*]} 4 $BIN/ch05_zero3 --shard-group $s --steps 6 --json $RES/ch09_zero3_$s.json${N}"
    "${where[@]}" timeout -k 5 120 bash common/scripts/zlrun "${nodes[@]}" 4 "$BIN/ch05_zero3" --shard-group "$s" --steps 6 \
      --log-every 0 --json "$RES/ch09_zero3_$s.json" 2>&1 |
      grep -E '^(ch05_zero3|hsdp:|loss:|time:|across nodes|rank +node|[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$|mean +)' ||
      FAILED+=("ch05_zero3 --shard-group $s")
  done
}
GPT_STEPS=${ZL_DEMO_GPT_STEPS:-500}

# count the steps first, so the progress reads [3/9]
plan=()
want 00 && plan+=(ch00)
want 01 && plan+=(ch01)
want 02 && plan+=(ch02)
want 03 && plan+=(ch03)
want 04 && plan+=(ch04)
want 05 && plan+=(ch05)
sweep=()   # after the ZeRO chapters, the sweep that measures them
want 02 && sweep+=(ddp)
want 03 && sweep+=(zero1)
want 04 && sweep+=(zero2)
want 05 && sweep+=(zero3)
[ ${#sweep[@]} -gt 0 ] && plan+=(sweep)
want 06 && plan+=(ch06)
want 07 && plan+=(ch07)
want 08 && plan+=(ch08)
want 09 && [ "$QUICK" = 0 ] && plan+=(ch09)
[ "$CH" = 10 ] && plan+=(ch10)   # not in the whole tour: its demo alone takes minutes
[ "$CH" = 12 ] && plan+=(ch12)   # chapter 12 alone (a lecture slot)
for p in "${plan[@]}"; do
  case $p in ch01 | ch02 | ch06) NSTEPS=$((NSTEPS + 2)) ;; *) NSTEPS=$((NSTEPS + 1)) ;; esac
done
PLOTS=1   # chapter 06 alone draws no figure
[ "$CH" = 06 ] && PLOTS=0
[ "$CH" = 09 ] && PLOTS=0
[ "$CH" = 12 ] && PLOTS=0   # its figure comes from make bench-experts (notes/12-experts.md)
NSTEPS=$((NSTEPS + PLOTS))
GPT=0   # the full tour ends with the GPT (not --quick: the CI check keeps to the figures)
[ -z "$CH" ] && [ "$QUICK" = 0 ] && GPT=1 && NSTEPS=$((NSTEPS + 1))

echo "${B}zerolab tour${N}${CH:+ — chapter $CH}: $NSTEPS steps on $([ "$DEVICE" = cuda ] && echo "$NP GPUs" || echo "$NP CPU ranks (mpirun)")."
echo "Programs from $BIN, results to $RES/, figures to $FIG/."
[ -n "$GPU_NOTE" ] && echo "${Y}$GPU_NOTE${N}"

for p in "${plan[@]}"; do
  case $p in
    ch00) do_ch00 ;;
    ch01) do_ch01 ;;
    ch02) do_ch02 ;;
    ch03) do_zero 03 ch03_zero1 1 ;;
    ch04) do_zero 04 ch04_zero2 2 ;;
    ch05) do_zero 05 ch05_zero3 3 ;;
    sweep) do_sweep "${sweep[@]}" ;;
    ch06) do_ch06 ;;
    ch07) do_ch07 ;;
    ch08) do_ch08 ;;
    ch09) do_ch09 ;;
    ch10) do_ch10 ;;
    ch12) do_ch12 ;;
  esac
done
[ "$PLOTS" = 1 ] && do_plots
[ "$GPT" = 1 ] && do_gpt

# ---- where everything is --------------------------------------------------------------------
echo
echo "${B}Done in $(( $(date +%s) - T0 )) s.${N}"
echo "  results (JSON, one object per run):  $RES/*.json $RES/loss/ $RES/sweep/"
traces=$(find "$RES" -maxdepth 2 -name '*.trace.json' | sort | tr '\n' ' ')
[ -n "$traces" ] && echo "  timelines (open in ui.perfetto.dev):  $traces"
echo "  figures:                             $FIG/*.png"
echo "  the tour explained:                  notes/tour.md"
if [ ${#SKIPPED[@]} -gt 0 ]; then
  echo "  ${Y}not built, skipped: $(printf '%s\n' "${SKIPPED[@]}" | sort -u | tr '\n' ' ')${N}"
fi
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "  ${R}failed (${#FAILED[@]}):${N}"
  printf '    %s\n' "${FAILED[@]}"
fi
case "$CH" in
  '' | 05) next="make run CH=05 NP=4 ARGS=\"--steps 50 --prefetch 2 --trace /tmp/z3.trace.json\"" ;;
  00) next="$BIN/ch00_memory --params 70B --ranks 512" ;;
  06) next="make run CH=06 NP=4 ARGS=\"--tp 2 --zero 1\"" ;;
  07) next="make run CH=07 NP=4 ARGS=\"--pp 4 --micro-batches 8 --schedule 1f1b\"" ;;
  08) next="make run CH=08 NP=2 ARGS=\"--precision bf16 --steps 20 --offload none\"" ;;
  10) next="make run CH=10 NP=4 ARGS=\"--model gpt --gpt tiny --cp 2 --zero 3\"" ;;
  12) next="make run CH=12 NP=4 ARGS=\"--model gpt --gpt tiny --moe 8 --topk 2 --ep 2 --zero 1\"" ;;
  01) next="make run CH=01 NP=3 ARGS=\"--op reduce_scatter\"" ;;
  09) next="make run CH=09 NP=4 NODES=2 LINK_MBIT=100 ARGS=\"-b 4M -e 16M\"   (root; else ZL_NODE_OF_RANK=0,0,1,1 make run CH=09 NP=4)" ;;
  *) next="make run CH=$CH NP=3 ARGS=\"--steps 50 --collectives ring\"" ;;
esac
echo "Next, try:  $next"
case "$CH" in
  00) echo "  then read notes/00-memory.md" ;;
  '') echo "  then the exercises, chapter by chapter: make exercise CH=01 (notes/README.md)" ;;
  *) echo "  then the exercises of this chapter: make exercise CH=$CH (notes/$CH-*.md)" ;;
esac
[ ${#FAILED[@]} -eq 0 ]
