#!/usr/bin/env bash
# bench_zero.sh BIN RESULTS — chapter 03-05 numbers for notes/benchmarks.md (make bench-zero):
#   1. step time of ZeRO-1, -2, -3 over DDP (bucketed, and naive) at N = 2 and 4: the programs
#      run alternately, REPS rounds, each run's median step; the table shows the median of the rounds;
#      the overlap figures are the step time saved in the same round: DDP bucketed against DDP
#      naive, ZeRO-3 --prefetch 1 against --prefetch 0 (median over rounds; negative: it loses);
#   2. peak bytes per rank at N = 4, measured (ledger) beside the formula, per stage, bf16;
#   3. the memory budget demo (common/scripts/budget_demo.sh).
# Environment: ZL_BENCH_REPS (default 5), ZL_BENCH_MODEL (flags of the timed model),
# ZL_BENCH_SKIP_BUDGET=1 leaves out part 3.
set -eu
bin=${1:?usage: bench_zero.sh BIN RESULTS}
res=${2:?usage: bench_zero.sh BIN RESULTS}
here=$(cd "$(dirname "$0")" && pwd)
reps=${ZL_BENCH_REPS:-5}
model=${ZL_BENCH_MODEL:-"--input 256 --hidden 1024 --layers 4 --classes 16 --batch 256 --steps 12"}
out="$res/bench_zero"
mkdir -p "$out"
py=$(command -v python3)

progs=("ddp:ch02_ddp --variant bucketed" "ddp-naive:ch02_ddp --variant naive" "zero1:ch03_zero1" "zero2:ch04_zero2"
       "zero3:ch05_zero3 --prefetch 1" "zero3-noprefetch:ch05_zero3 --prefetch 0")
echo "step time: $model, fp32 AdamW, vendor collectives, $reps alternating rounds (median of per-run medians)"
for np in 2 4; do
  for r in $(seq 1 "$reps"); do
    for p in "${progs[@]}"; do
      name=${p%%:*}
      cmd=${p#*:}
      bash "$here/zlrun" "$np" "$bin"/$cmd $model --quiet --json "$out/time_${name}_np${np}_r${r}.json" >/dev/null
    done
  done
done

# peak bytes per rank at N = 4, bf16 AdamW (the memory table of notes/design.md), one step
peak_model="--input 64 --hidden 512 --layers 4 --classes 10 --batch 64 --steps 2 --precision bf16"
for p in "ddp:ch02_ddp --variant bucketed" "zero1:ch03_zero1" "zero2:ch04_zero2" "zero3:ch05_zero3"; do
  name=${p%%:*}
  cmd=${p#*:}
  bash "$here/zlrun" 4 "$bin"/$cmd $peak_model --quiet --json "$out/peak_${name}_np4.json" >/dev/null
done

"$py" - "$out" "$reps" <<'PY'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def med_step(path):
    d = json.load(open(path))
    ms = [s["ms"] for s in d["steps"]][1:]  # step 0 is warm-up
    return statistics.median(ms)
names = ["ddp", "ddp-naive", "zero1", "zero2", "zero3", "zero3-noprefetch"]
rows, summary, overlap = [], {}, {}
for np in (2, 4):
    med = {n: statistics.median(med_step(os.path.join(out, "time_%s_np%d_r%d.json" % (n, np, r))) for r in range(1, reps + 1))
           for n in names}
    summary["np%d" % np] = med
    rows.append((np, med))
    # overlap: step time saved in the same round against the variant without overlap
    for name, base in (("ddp", "ddp-naive"), ("zero3", "zero3-noprefetch")):
        saved = statistics.median(med_step(os.path.join(out, "time_%s_np%d_r%d.json" % (base, np, r)))
                                  - med_step(os.path.join(out, "time_%s_np%d_r%d.json" % (name, np, r))) for r in range(1, reps + 1))
        overlap.setdefault("np%d" % np, {})[name] = {"against": base, "saved_ms": saved, "saved_fraction": saved / med[base]}
print("\n%-18s %10s %10s   (ratio over DDP bucketed)" % ("strategy", "N=2 ms", "N=4 ms"))
for n in names:
    m2, m4 = rows[0][1][n], rows[1][1][n]
    print("%-18s %10.2f %10.2f   %5.2fx %5.2fx" % (n, m2, m4, m2 / rows[0][1]["ddp"], m4 / rows[1][1]["ddp"]))
print("\noverlap: step time saved against the same strategy without it, same round (median; negative: it loses)")
for name, label in (("ddp", "DDP bucketed vs naive"), ("zero3", "ZeRO-3 --prefetch 1 vs 0")):
    print("%-28s" % label + "".join("   N=%d %+7.2f ms (%+4.0f%%)" % (np, overlap["np%d" % np][name]["saved_ms"],
                                                                   100 * overlap["np%d" % np][name]["saved_fraction"])
                                      for np in (2, 4)))
print("\npeak bytes per rank at N = 4 (bf16, AdamW), measured vs formula (model states), rank 0:")
print("%-8s %12s %12s %10s %12s %12s %12s" % ("stage", "model states", "formula", "padding", "comm peak", "acts peak", "peak"))
peaks = {}
for n in ("ddp", "zero1", "zero2", "zero3"):
    d = json.load(open(os.path.join(out, "peak_%s_np4.json" % n)))
    r = d["memory"]["per_rank"][0]
    peaks[n] = r
    print("%-8s %12d %12.0f %10s %12d %12d %12d" % (n, r["model_states"], r["formula_model_states"], r.get("padding_bytes", "?"),
                                                   r["comm_peak"], r["acts_peak"], r["peak"]))
json.dump({"step_ms": summary, "overlap_saved": overlap, "peak_np4_bf16": peaks, "reps": reps}, open(os.path.join(out, "summary.json"), "w"), indent=1)
print("\nresults: %s/summary.json" % out)
PY
[ "${ZL_BENCH_SKIP_BUDGET:-0}" = 1 ] || bash "$here/budget_demo.sh" "$bin" "$res"
