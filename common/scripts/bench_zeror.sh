#!/usr/bin/env bash
# bench_zeror.sh BIN RESULTS — ZeRO-R memory defragmentation (MD) on a GPT step (notes/zero-r.md):
# ch05_zero3 --model gpt at N = 2 writes rank 0's ledger alloc/free sequence (--alloc-trace), with
# and without --recompute; zl_allocsim replays each through the caching allocator and through
# ZeRO's contiguous regions and prints reserved vs allocated peaks, the largest free block at the
# allocated peak, the least budget of each, and the first allocation that fails under a budget
# with the caching allocator but not with the regions. Writes RESULTS/bench_zeror.json.
set -euo pipefail
BIN=${1:?usage: bench_zeror.sh BIN RESULTS}
RES=${2:?usage: bench_zeror.sh BIN RESULTS}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$RES/zeror"
ARGS=(--model gpt --steps 2 --quiet)
"$HERE/zlrun" 2 "$BIN/ch05_zero3" "${ARGS[@]}" --alloc-trace "$RES/zeror/gpt.trace" >/dev/null
"$HERE/zlrun" 2 "$BIN/ch05_zero3" "${ARGS[@]}" --recompute --alloc-trace "$RES/zeror/gpt_recompute.trace" >/dev/null
"$BIN/zl_allocsim" --json "$RES/zeror/md.json" gpt="$RES/zeror/gpt.trace" gpt_recompute="$RES/zeror/gpt_recompute.trace"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$RES/zeror/md.json" "$RES/bench_zeror.json" "$LOAD" <<'PY'
import json, sys, datetime
md = json.load(open(sys.argv[1]))
out = {"md": {r["label"]: r for r in md["runs"]},
       "_meta": {"command": "make bench-zeror (common/scripts/bench_zeror.sh build/bin results)",
                 "writes": "results/bench_zeror.json",
                 "date": datetime.date.today().isoformat(),
                 "machine": "memory, not time: the replay is deterministic; load average " + sys.argv[3],
                 "model": "ch05_zero3 --model gpt (the default GPT) at N = 2, 2 steps, rank 0's device arena; "
                          "budgets searched in 1 MiB steps"}}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("wrote", sys.argv[2])
PY
