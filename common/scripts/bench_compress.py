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
  zeropp    ZeRO++ against ZeRO-3 in bytes (the JSON's "zeropp"): ch05_zero3 with none, --hpz, --qwz,
            --qwz --hpz, --qgz and all three, 4 ranks on 2 emulated nodes (ZL_NODE_OF_RANK=0,0,1,1),
            the GPT in bf16, 3 steps: the bytes across nodes per step per rank (mean over the ranks),
            measured by the counters and by the formula, and ZeRO-3's over them ("4x less").
  links     with --links R1,R2,.. (Mbit/s; root: common/scripts/cluster.sh): ZeRO-3 against all three
            codes on 2 emulated nodes of 2 ranks (zlrun --nodes 2 --link-mbit R, tc tbf), --reps runs
            each, alternating (the order reversed every rep), the median of the runs' median steps;
            the load before and after each rate in the JSON ("links").

    python3 common/scripts/bench_compress.py --bin build/bin [--out results/bench_compress.json]
        [--steps 200] [--seeds 3] [--warmup 50] [--links 1000,100,20 --reps 3 --link-steps 10]
About 1-2 minutes on a 2-core box, plus the links'."""
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

ZEROPP = [("zero3", []), ("hpz", ["--hpz"]), ("qwz", ["--qwz"]), ("qwz_hpz", ["--qwz", "--hpz"]),
          ("qgz", ["--qgz"]), ("qwz_hpz_qgz", ["--qwz", "--hpz", "--qgz"])]
ZEROPP_RUN = ["--precision", "bf16", "--steps", "3", "--seed", "1"]


def run(binary, args, tmp):
    path = os.path.join(tmp, "r.json")
    return run_on(["2"], binary, args, path, None)


def run_on(zlrun_args, binary, args, path, env):
    cmd = ["bash", "common/scripts/zlrun"] + zlrun_args + [binary] + args + ["--json", path]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
    ap.add_argument("--links", default="", help="Mbit/s rates of the emulated link, e.g. 1000,100,20")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--link-steps", type=int, default=10)
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
    with tempfile.TemporaryDirectory() as tmp:
        zeropp = zeropp_bytes(a.bin, tmp)
        links = zeropp_links(a, tmp) if a.links else None
    out = {"_meta": {"command": "make bench-compress" + (f" LINKS={a.links}" if a.links else ""), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "host": platform.node(), "cpus": os.cpu_count(), "load_before": load0,
                     "load_after": os.getloadavg(), "seconds": round(time.time() - t0, 1), "steps": a.steps,
                     "seeds": a.seeds, "warmup_steps": a.warmup, "model": " ".join(GPT), "ranks": 2},
           "methods": rows, "zeropp": zeropp}
    if links:
        out["links"] = links
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"bench_compress: wrote {a.out} (load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f})")


def zeropp_bytes(bindir, tmp):
    """ZeRO++'s codes on ZeRO-3, bytes across nodes: measured and formula, and ZeRO-3's over them."""
    env = dict(os.environ, ZL_NODE_OF_RANK="0,0,1,1")
    res = {"_meta": {"program": "ch05_zero3", "run": " ".join(GPT + ZEROPP_RUN), "ranks": 4,
                     "nodes": "ZL_NODE_OF_RANK=0,0,1,1"}}
    for name, flags in ZEROPP:
        j = run_on(["4"], os.path.join(bindir, "ch05_zero3"), GPT + ZEROPP_RUN + flags, os.path.join(tmp, "z.json"),
                   env)
        n = j["nodes"]
        res[name] = {"flags": " ".join(flags), "bytes_per_step_per_rank": j["comm"]["bytes_per_step_per_rank"],
                     "inter_bytes_per_step_per_rank": n["inter_bytes_per_step_per_rank"],
                     "formula_inter_bytes_per_step_per_rank": n["formula_inter_bytes_per_step_per_rank"]}
    ref = res["zero3"]["inter_bytes_per_step_per_rank"]
    for name, _ in ZEROPP:
        r = res[name]
        r["zero3_over_this"] = ref / r["inter_bytes_per_step_per_rank"]
        print(f"zeropp {name:12s} across nodes {r['inter_bytes_per_step_per_rank']:10.1f} bytes/step/rank "
              f"(formula {r['formula_inter_bytes_per_step_per_rank']:.1f}): {r['zero3_over_this']:.2f}x fewer "
              f"than ZeRO-3", flush=True)
    return res


def zeropp_links(a, tmp):
    """Step times on 2 emulated nodes at each link rate: ZeRO-3 against qwZ + hpZ + qgZ, alternating."""
    check = subprocess.run(["bash", "common/scripts/cluster.sh", "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print("bench_compress: links skipped: " + check.stdout.strip())
        return {"skipped": check.stdout.strip()}
    env = dict(os.environ, ZL_CLUSTER=os.environ.get("ZL_CLUSTER", "zlc"),
               ZL_CLUSTER_SUBNET=os.environ.get("ZL_CLUSTER_SUBNET", "10.213.9"))
    pair = [("zero3", []), ("qwz_hpz_qgz", ["--qwz", "--hpz", "--qgz"])]
    res = {"_meta": {"layout": "2 emulated nodes x 2 ranks (zlrun --nodes 2 --link-mbit R: tc tbf)",
                     "run": " ".join(GPT + ["--precision", "bf16", "--steps", str(a.link_steps)]), "reps": a.reps}}
    subprocess.run(["bash", "common/scripts/cluster.sh", "up", "2", "--ttl", "1800"], check=True,
                   stdout=subprocess.DEVNULL, env=env)
    try:
        for link in [int(x) for x in a.links.split(",")]:
            load0, ms = os.getloadavg(), {n: [] for n, _ in pair}
            for rep in range(a.reps):
                for name, flags in (pair if rep % 2 == 0 else pair[::-1]):
                    j = run_on(["--nodes", "2", "--link-mbit", str(link), "4"], os.path.join(a.bin, "ch05_zero3"),
                               GPT + ["--precision", "bf16", "--steps", str(a.link_steps)] + flags,
                               os.path.join(tmp, "l.json"), env)
                    ms[name].append(j["median_step_ms"])
            row = {n: {"median_step_ms": statistics.median(v), "runs_ms": v} for n, v in ms.items()}
            row["speedup"] = row["zero3"]["median_step_ms"] / row["qwz_hpz_qgz"]["median_step_ms"]
            row["load_before"], row["load_after"] = load0, os.getloadavg()
            res[str(link)] = row
            print(f"link {link:5d} Mbit/s: ZeRO-3 {row['zero3']['median_step_ms']:.1f} ms, ZeRO++ "
                  f"{row['qwz_hpz_qgz']['median_step_ms']:.1f} ms: {row['speedup']:.2f}x (load {load0[0]:.1f})",
                  flush=True)
    finally:
        subprocess.run(["bash", "common/scripts/cluster.sh", "down"], stdout=subprocess.DEVNULL, env=env)
    return res


if __name__ == "__main__":
    main()
