#!/usr/bin/env python3
"""bench_compress.py — chapter 13's measurements (notes/13-compression.md): for each code, the bytes
a rank sends per step, measured by the comm counters beside the strategy's formula, and the GPT's
loss after a short run against the uncompressed run of the same program, over a few seeds.

  methods   ddp          ch13_compress (chapter 02's bucketed DDP, AdamW): the reference of the next two
            powersgd     ch13_compress --compress powersgd:4
            onebit_adam  ch13_compress --optimizer onebit-adam --warmup-steps K (K = --warmup, 50)
            zero3        ch05_zero3: the reference of qwz
            qwz          ch05_zero3 --qwz (B = 256)
  model     --model gpt --gpt tiny, global batch 8, --steps S (200), seeds 1..R (3), 2 ranks, CPU, fp32.
  band      the reference's final losses over the seeds: [min, max]; a method is "within_band" when
            the mean of its final losses lies in [min − spread, max + spread], spread = max − min
            (the reference's own seed-to-seed spread, on both sides).
  load      os.getloadavg() before and after (the step times in the JSON move with it; bytes and
            losses do not).

    python3 common/scripts/bench_compress.py --bin build/bin [--out results/bench_compress.json]
        [--steps 200] [--seeds 3] [--warmup 50]
About 1-2 minutes on a 2-core box."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

GPT = ["--model", "gpt", "--gpt", "tiny", "--batch", "8", "--quiet"]
METHODS = [  # name, program, flags, reference
    ("ddp", "ch13_compress", [], None),
    ("powersgd", "ch13_compress", ["--compress", "powersgd:4"], "ddp"),
    ("onebit_adam", "ch13_compress", ["--optimizer", "onebit-adam", "--warmup-steps", "{warmup}"], "ddp"),
    ("zero3", "ch05_zero3", [], None),
    ("qwz", "ch05_zero3", ["--qwz"], "zero3"),
]


def run(binary, args, tmp):
    path = os.path.join(tmp, "r.json")
    cmd = ["bash", "common/scripts/zlrun", "2", binary] + args + ["--json", path]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_compress: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="results/bench_compress.json")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=50)
    a = ap.parse_args()
    load0 = os.getloadavg()
    t0 = time.time()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, prog, flags, ref in METHODS:
            flags = [f.format(warmup=a.warmup) for f in flags]
            row = {"program": prog, "flags": " ".join(flags), "reference": ref, "final_loss": [],
                   "median_step_ms": []}
            for seed in range(1, a.seeds + 1):
                j = run(os.path.join(a.bin, prog), GPT + flags + ["--steps", str(a.steps), "--seed", str(seed)],
                        tmp)
                row["final_loss"].append(j["final_loss"])
                row["median_step_ms"].append(j["median_step_ms"])
                row["bytes_per_step_per_rank"] = j["comm"]["bytes_per_step_per_rank"]
                row["formula_bytes_per_step_per_rank"] = j["comm"]["formula_bytes_per_step_per_rank"]
            row["mean_final_loss"] = statistics.mean(row["final_loss"])
            rows[name] = row
            print(f"{name:12s} bytes/step/rank {row['bytes_per_step_per_rank']:12.1f} (formula "
                  f"{row['formula_bytes_per_step_per_rank']:.1f})  final loss {row['final_loss']}", flush=True)
    for name, row in rows.items():
        ref = rows.get(row["reference"]) if row["reference"] else None
        if not ref:
            continue
        lo, hi = min(ref["final_loss"]), max(ref["final_loss"])
        spread = hi - lo
        row["band"] = [lo - spread, hi + spread]
        row["within_band"] = lo - spread <= row["mean_final_loss"] <= hi + spread
        row["bytes_vs_reference"] = row["bytes_per_step_per_rank"] / ref["bytes_per_step_per_rank"]
        print(f"{name:12s} {ref['bytes_per_step_per_rank'] / row['bytes_per_step_per_rank']:.2f}x fewer bytes "
              f"than {row['reference']}; mean loss {row['mean_final_loss']:.4f}, band [{lo - spread:.4f}, "
              f"{hi + spread:.4f}]: {'within' if row['within_band'] else 'OUTSIDE'}")
    out = {"_meta": {"command": "make bench-compress", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "host": platform.node(), "cpus": os.cpu_count(), "load_before": load0,
                     "load_after": os.getloadavg(), "seconds": round(time.time() - t0, 1), "steps": a.steps,
                     "seeds": a.seeds, "warmup_steps": a.warmup, "model": " ".join(GPT), "ranks": 2},
           "methods": rows}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"bench_compress: wrote {a.out} (load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
