#!/usr/bin/env bash
# bench_zeror.sh BIN RESULTS — ZeRO-R memory defragmentation (MD) on a GPT step (notes/zero-r.md):
# ch05_zero3 --model gpt at N = 2 writes rank 0's ledger alloc/free sequence (--alloc-trace), with
# and without --recompute; zl_allocsim replays each through the caching allocator and through
# ZeRO's contiguous regions and prints reserved vs allocated peaks, the largest free block at the
# allocated peak, the least budget of each, and the first allocation that fails under a budget
# with the caching allocator but not with the regions. Then constant-size buffers (CB): the same
# GPT with ZeRO-2 and ZeRO-3 at N = 2 and --buffer-mb unbounded, 4, 1, 0.25, 1/16 MiB: rank 0's
# comm peak (every per-step temporary of the strategies and the comm layer: LEDGER_COMM) and its
# collective calls per step (synchronization points) — memory against synchronization. Prints
# the table and writes RESULTS/bench_zeror.json (md and cb).
set -euo pipefail
BIN=${1:?usage: bench_zeror.sh BIN RESULTS}
RES=${2:?usage: bench_zeror.sh BIN RESULTS}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$RES/zeror"
ARGS=(--model gpt --steps 2 --quiet)
"$HERE/zlrun" 2 "$BIN/ch05_zero3" "${ARGS[@]}" --alloc-trace "$RES/zeror/gpt.trace" >/dev/null
"$HERE/zlrun" 2 "$BIN/ch05_zero3" "${ARGS[@]}" --recompute --alloc-trace "$RES/zeror/gpt_recompute.trace" >/dev/null
"$BIN/zl_allocsim" --json "$RES/zeror/md.json" gpt="$RES/zeror/gpt.trace" gpt_recompute="$RES/zeror/gpt_recompute.trace"
CB_SIZES=(0 4 1 0.25 0.0625)
for ch in ch04_zero2 ch05_zero3; do
  for mb in "${CB_SIZES[@]}"; do
    "$HERE/zlrun" 2 "$BIN/$ch" "${ARGS[@]}" --buffer-mb "$mb" --json "$RES/zeror/cb_${ch}_${mb}.json" >/dev/null
  done
done
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$RES/zeror/md.json" "$RES/bench_zeror.json" "$LOAD" "$RES/zeror" "${CB_SIZES[@]}" <<'PY'
import json, sys, datetime
md = json.load(open(sys.argv[1]))
cb = {}
print("constant-size buffers (--buffer-mb), GPT, N = 2, rank 0, per step:")
print("%-10s %12s %14s %10s %14s" % ("strategy", "--buffer-mb", "comm peak B", "calls", "bytes sent"))
for ch in ("ch04_zero2", "ch05_zero3"):
    rows = []
    for mb in sys.argv[5:]:
        d = json.load(open("%s/cb_%s_%s.json" % (sys.argv[4], ch, mb)))
        r0 = d["comm"]["per_rank"][0]
        row = {"buffer_mb": float(mb), "comm_peak": d["memory"]["per_rank"][0]["comm_peak"],
               "calls_per_step": r0["calls"] / r0["steps"], "bytes_per_step": d["comm"]["bytes_per_step_per_rank"],
               "formula_bytes_per_step": d["comm"]["formula_bytes_per_step_per_rank"]}
        rows.append(row)
        print("%-10s %12s %14d %10.0f %14d" % (ch[5:], "unbounded" if float(mb) == 0 else mb, row["comm_peak"],
                                                row["calls_per_step"], row["bytes_per_step"]))
    cb[ch[5:]] = rows
out = {"md": {r["label"]: r for r in md["runs"]}, "cb": cb,
       "_meta": {"command": "make bench-zeror (common/scripts/bench_zeror.sh build/bin results)",
                 "writes": "results/bench_zeror.json",
                 "date": datetime.date.today().isoformat(),
                 "machine": "memory, not time: the replay is deterministic; load average " + sys.argv[3],
                 "model": "ch05_zero3 --model gpt (the default GPT) at N = 2, 2 steps, rank 0's device arena; "
                          "budgets searched in 1 MiB steps; cb: ch04_zero2 and ch05_zero3 --model gpt at N = 2, "
                          "2 steps, --buffer-mb 0 (unbounded), 4, 1, 0.25, 0.0625; rank 0's comm peak and calls"}}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("wrote", sys.argv[2])
PY
