#!/usr/bin/env bash
# bench.sh BIN_DIR OUT_DIR — chapter 02's numbers (make bench-ddp; notes/benchmarks.md, DDP section).
#  1. step time of naive vs overlap vs bucketed at N = 2 on a model where the all-reduce is a
#     sizeable share of the step; the variants alternate within each repetition (the machine is
#     shared and noisy), the table shows the median over repetitions of each run's median step.
#     The headline overlap figure is the step time SAVED against naive in the same repetition
#     (median over repetitions of naive − variant; negative when overlapping loses), also as a
#     share of naive's step and of naive's all-reduce time. Beside it, from each run's trace
#     (report.c: report_overlap_joined, the "overlap" object of --json): the all-reduce time,
#     counted from the moment the LAST rank joined each all-reduce, the share of it that ran
#     under a backward, and the time ranks waited inside an all-reduce for a late peer.
#  2. samples/s at N = 1, 2, 4 (bucketed) on a compute-heavier model; N alternates too.
#     4 ranks on a 2-core laptop oversubscribe the cores: that row measures contention, not scaling.
# Environment: ZL_BENCH_REPS (default 5), ZL_BENCH_STEPS (default 20), ZL_BENCH_PARTS (default
# "variants scaling": run one part again into the same OUT_DIR; the summary reads both).
set -eu
bin=${1:?usage: bench.sh BIN_DIR OUT_DIR}/ch02_ddp
out=${2:?usage: bench.sh BIN_DIR OUT_DIR}
reps=${ZL_BENCH_REPS:-5}
steps=${ZL_BENCH_STEPS:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
zlrun="bash $here/common/scripts/zlrun"
py=$(command -v python3 || true)
[ -x "$bin" ] || { echo "error: $bin not built (make build)" >&2; exit 2; }
[ -n "$py" ] || { echo "error: python3 not found (make deps)" >&2; exit 2; }
mkdir -p "$out"
parts=${ZL_BENCH_PARTS:-variants scaling}
# (zlrun adds --mca mpi_yield_when_idle 1 when 2 threads per rank exceed the cores: a comm thread
# spinning in MPI would otherwise take the core its own compute thread needs.)

# Comm-heavy: 4.2M parameters (16.8 MB of fp32 gradients), 64 rows per rank; 9 units of about
# 2.4 MB, so 5 MiB buckets hold two units each (overlap: one message per unit).
COMM_MODEL="--layers 8 --hidden 768 --input 128 --classes 10 --batch 128 --bucket-mb 5"
# Compute-heavier: 0.9M parameters, 1024 rows per step.
SCALE_MODEL="--layers 4 --hidden 512 --input 256 --classes 10 --batch 1024 --bucket-mb 1"
common="--steps $steps --quiet --device cpu"

case " $parts " in *" variants "*)
echo "== DDP at N = 2: naive vs overlap vs bucketed ($reps repetitions x $steps steps, alternating) =="
echo "model: $COMM_MODEL"
for r in $(seq 1 "$reps"); do
  for v in naive overlap bucketed; do
    $zlrun 2 "$bin" $COMM_MODEL $common --variant "$v" --json "$out/variant_${v}_$r.json" \
      --trace "$out/variant_${v}_$r.trace.json" >/dev/null
  done
  echo "  repetition $r done"
done
;; esac

case " $parts " in *" scaling "*)
echo "== samples/s at N = 1, 2, 4 (bucketed; N alternates; $reps repetitions) =="
echo "model: $SCALE_MODEL"
for r in $(seq 1 "$reps"); do
  for n in 1 2 4; do
    $zlrun "$n" "$bin" $SCALE_MODEL $common --variant bucketed --json "$out/scale_np${n}_$r.json" >/dev/null
  done
  echo "  repetition $r done"
done
;; esac
# Keep one trace of each for the figures (make plots reads results/ch02_*.trace.json).
if [ -f "$out/variant_naive_1.trace.json" ]; then
  cp "$out/variant_naive_1.trace.json" "$out/ch02_naive.trace.json"
  cp "$out/variant_bucketed_1.trace.json" "$out/ch02_bucketed.trace.json"
fi

"$py" - "$out" "$reps" <<'EOF'
import json, statistics, sys, os
out, reps = sys.argv[1], int(sys.argv[2])
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
def have(name):
    return os.path.exists(os.path.join(out, name))
summary = {"variants": {}, "scaling": {}}
if have("variant_naive_1.json"):
    print()
    print("N = 2, comm-heavy model; median over %d repetitions (variants alternate within each)" % reps)
    print("saved vs naive = naive's step - this variant's step in the same repetition (negative: it loses)")
    print("%-10s %9s %19s %13s %10s %11s %9s" % ("variant", "step ms", "saved vs naive", "all-reduce ms",
                                                "under bwd", "waiting ms", "speedup"))
    runs = {v: [load("variant_%s_%d.json" % (v, r)) for r in range(1, reps + 1)] for v in ["naive", "overlap", "bucketed"]}
    naive_ms = [j["median_step_ms"] for j in runs["naive"]]
    naive_comm = statistics.median(j["overlap"]["comm_ms_per_step_per_rank"] for j in runs["naive"] if "overlap" in j)
    base = statistics.median(naive_ms)
    for v in ["naive", "overlap", "bucketed"]:
        rs = runs[v]
        ms = statistics.median(j["median_step_ms"] for j in rs)
        saved = statistics.median(n - j["median_step_ms"] for n, j in zip(naive_ms, rs))
        ov = [j["overlap"] for j in rs if "overlap" in j]
        comm = statistics.median(o["comm_ms_per_step_per_rank"] for o in ov)
        hid = statistics.median(o["hidden_fraction"] for o in ov)
        wait = statistics.median(o.get("wait_ms_per_step_per_rank", 0.0) for o in ov)
        print("%-10s %9.2f %+9.2f ms (%+4.0f%%) %13.2f %9.0f%% %11.2f %8.2fx" % (v, ms, saved, 100 * saved / base, comm,
                                                                             100 * hid, wait, base / ms))
        summary["variants"][v] = {"median_step_ms": ms, "comm_ms_per_step": comm, "hidden_fraction": hid,
                                  "wait_ms_per_step": wait, "saved_ms_vs_naive": saved,
                                  "saved_fraction_of_naive_step": saved / base,
                                  "saved_fraction_of_naive_comm": saved / naive_comm if naive_comm > 0 else None,
                                  "runs_ms": [j["median_step_ms"] for j in rs], "params": rs[0]["params"],
                                  "n_buckets": rs[0].get("n_buckets")}
    b = summary["variants"]["bucketed"]
    print("\noverlap (bucketed vs naive): %+.2f ms per step, %+.0f%% of naive's step, %+.0f%% of naive's all-reduce time"
          % (b["saved_ms_vs_naive"], 100 * b["saved_fraction_of_naive_step"], 100 * (b["saved_fraction_of_naive_comm"] or 0)))
if have("scale_np1_1.json"):
    print()
    print("samples/s, bucketed (4 ranks oversubscribe a 2-core machine)")
    print("%-4s %14s %12s" % ("N", "samples/s", "step ms"))
    for n in [1, 2, 4]:
        rs = [load("scale_np%d_%d.json" % (n, r)) for r in range(1, reps + 1)]
        sps = statistics.median(j["samples_per_s"] for j in rs)
        ms = statistics.median(j["median_step_ms"] for j in rs)
        print("%-4d %14.0f %12.2f" % (n, sps, ms))
        summary["scaling"][n] = {"samples_per_s": sps, "median_step_ms": ms}
with open(os.path.join(out, "bench_ddp.json"), "w") as f:
    json.dump(summary, f, indent=1)
print("\nresults: %s/bench_ddp.json (each run's --json and --trace beside it)" % out)
EOF
