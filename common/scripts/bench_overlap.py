#!/usr/bin/env python3
"""bench_overlap.py — `make bench-overlap`: what overlapping communication with compute saves,
beside the most it could save (notes/02-ddp.md, notes/05-zero3.md).

At N = 2 and 4 ranks, on the MLP --input 512 --hidden 2048 --layers 4 --batch 256:
  DDP     ch02_ddp --variant naive (all-reduce after the backward) vs --variant bucketed
          (buckets all-reduced while the backward goes on);
  ZeRO-3  ch05_zero3 --prefetch 0 (each unit's all-gather just before it runs) vs --prefetch 1
          (the next unit's all-gather issued before this one computes).
Saved = step(without) - step(with). The most overlap could save = the time of the collectives
that can be hidden, measured in the run WITHOUT overlap, where nothing else runs beside them:
the all-reduces' stream time per step (DDP naive), the all-gathers' (ZeRO-3 prefetch 0), from
--json comm.busy_ms_per_step_per_rank. Reps alternate the variants' order; medians of --reps.
JSON: --out, with _meta (command, machine, date, load before and after)."""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time

MODEL = ["--input", "512", "--hidden", "2048", "--layers", "4", "--batch", "256"]
PAIRS = {  # name: program, (without overlap), (with overlap), the op overlap hides
    "ddp": ("ch02_ddp", ["--variant", "naive"], ["--variant", "bucketed"], "all_reduce"),
    "zero3": ("ch05_zero3", ["--prefetch", "0"], ["--prefetch", "1"], "all_gather"),
}


def run(np_, binary, args, steps):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = ["bash", "common/scripts/zlrun", str(np_), binary] + MODEL + args + ["--steps", str(steps), "--quiet",
                                                                               "--json", path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        d = json.load(f)
    os.unlink(path)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    load0 = os.getloadavg()
    raw = {}
    for rep in range(a.reps):
        for name, (prog, off, on, op) in PAIRS.items():
            for n in (2, 4):
                variants = [("without", off), ("with", on)]
                if rep % 2:
                    variants = variants[::-1]
                for v, args in variants:
                    d = run(n, os.path.join(a.bin, prog), args, a.steps)
                    raw.setdefault("%s_N%d" % (name, n), {}).setdefault(v, []).append(
                        {"ms": d["median_step_ms"], "coll_ms": d["comm"].get("busy_ms_per_step_per_rank", {}).get(op, 0.0),
                         "cpu": d.get("cpu", {}).get("per_rank", [])})
        print("rep %d/%d done (load %.2f)" % (rep + 1, a.reps, os.getloadavg()[0]), file=sys.stderr)
    load1 = os.getloadavg()
    res = {"_meta": {"command": "make bench-overlap " + " ".join(sys.argv[1:]), "machine": platform.node() + " " +
                     platform.processor() + " %d cores" % os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                     time.gmtime()), "load_before": load0, "load_after": load1, "reps": a.reps, "steps": a.steps,
                     "model": " ".join(MODEL)}, "cases": {}, "raw": raw}
    print("\noverlap, MLP %s: medians of %d reps (alternating), %d steps each; load %.2f -> %.2f" %
          (" ".join(MODEL), a.reps, a.steps, load0[0], load1[0]))
    hdr = "%-6s %2s %-26s %12s %12s %10s %14s %8s"
    print(hdr % ("", "N", "without -> with", "without ms", "with ms", "saved ms", "could save ms", "share"))
    for name, (prog, off, on, op) in PAIRS.items():
        for n in (2, 4):
            r = raw["%s_N%d" % (name, n)]
            w0 = statistics.median(x["ms"] for x in r["without"])
            w1 = statistics.median(x["ms"] for x in r["with"])
            most = statistics.median(x["coll_ms"] for x in r["without"])
            saved = w0 - w1
            res["cases"]["%s_N%d" % (name, n)] = {"without_ms": w0, "with_ms": w1, "saved_ms": saved,
                                                 "collectives_alone_ms": most, "op": op,
                                                 "saved_share": saved / most if most > 0 else 0.0,
                                                 "without": " ".join(off), "with": " ".join(on)}
            print(hdr.replace("%12s %12s %10s %14s %8s", "%12.1f %12.1f %10.1f %14.1f %8.2f") %
                  (name, n, "%s -> %s" % (" ".join(off), " ".join(on)), w0, w1, saved, most,
                   saved / most if most > 0 else 0.0))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("results: %s" % a.out)


if __name__ == "__main__":
    main()
