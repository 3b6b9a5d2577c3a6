#!/usr/bin/env python3
"""bench_pipeline.py — `make bench-pipeline`: the pipeline's bubble and step time, before and
after a change of the communication engine, side by side (notes/design.md, the stream model).

For each binary set (--bin: this build; --base-bin: another, e.g. the base commit's) and
alternating between them rep by rep: ch07_pipeline 1F1B and GPipe at P = 2, M = 1, 4, 8 on the
MLP --input 512 --hidden 2048 --layers 4 --batch 256, and the 1-rank step of ch02_ddp on the
same model and batch. Prints the medians (bubble_fraction beside (P-1)/(M+P-1); step time at
P = 2, M = 8 beside the ideal (M+P-1)/(M P) x the 1-rank step) and writes JSON with _meta
(command, machine, date, load before and after)."""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time

MODEL = ["--input", "512", "--hidden", "2048", "--layers", "4", "--batch", "256"]


def run(np_, binary, args, steps):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = ["bash", "common/scripts/zlrun", str(np_), binary] + MODEL + ["--steps", str(steps), "--quiet",
                                                                          "--json", path] + args
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        d = json.load(f)
    os.unlink(path)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--base-bin", default="")
    ap.add_argument("--base-name", default="base")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sets = [("after", a.bin)] + ([("before (%s)" % a.base_name, a.base_bin)] if a.base_bin else [])
    cases = [(s, m) for s in ("1f1b", "gpipe") for m in (1, 4, 8)]
    load0 = os.getloadavg()
    raw = {name: {"1rank": [], **{"%s_M%d" % c: [] for c in cases}} for name, _ in sets}
    for rep in range(a.reps):
        order = sets if rep % 2 == 0 else sets[::-1]  # alternate which build goes first
        for name, b in order:
            d = run(1, os.path.join(b, "ch02_ddp"), [], a.steps)
            raw[name]["1rank"].append({"ms": d["median_step_ms"]})
            for s, m in cases:
                d = run(2, os.path.join(b, "ch07_pipeline"), ["--schedule", s, "--micro-batches", str(m)], a.steps)
                cpu = d.get("cpu", {}).get("per_rank", [])
                raw[name]["%s_M%d" % (s, m)].append({"ms": d["median_step_ms"], "bubble": d["bubble_fraction"],
                                                      "formula": d["bubble_formula"], "cpu": cpu})
            print("rep %d/%d %s done (load %.2f)" % (rep + 1, a.reps, name, os.getloadavg()[0]), file=sys.stderr)
    load1 = os.getloadavg()
    res = {"_meta": {"command": "make bench-pipeline " + " ".join(sys.argv[1:]), "machine": platform.node() + " " +
                     platform.processor() + " %d cores" % os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                     time.gmtime()), "load_before": load0, "load_after": load1, "reps": a.reps, "steps": a.steps,
                     "model": " ".join(MODEL)}, "sets": {}}
    P = 2
    print("\npipeline P = 2, MLP %s: medians of %d reps (alternating), %d steps each; load %.2f -> %.2f" %
          (" ".join(MODEL), a.reps, a.steps, load0[0], load1[0]))
    print("%-22s %-6s %3s %10s %10s %12s" % ("build", "sched", "M", "bubble", "formula", "step ms"))
    for name, _ in sets:
        r = raw[name]
        one = statistics.median(x["ms"] for x in r["1rank"])
        out = {"one_rank_step_ms": one, "cases": {}, "raw": r}
        for s, m in cases:
            xs = r["%s_M%d" % (s, m)]
            bub = statistics.median(x["bubble"] for x in xs)
            ms = statistics.median(x["ms"] for x in xs)
            f = (P - 1) / (m + P - 1)
            out["cases"]["%s_M%d" % (s, m)] = {"bubble_fraction": bub, "bubble_formula": f, "step_ms": ms}
            print("%-22s %-6s %3d %10.3f %10.3f %12.1f" % (name, s, m, bub, f, ms))
        ideal = (8 + P - 1) / (8 * P) * one
        s8 = out["cases"]["1f1b_M8"]["step_ms"]
        out["p2_m8"] = {"step_ms": s8, "ideal_ms": ideal, "ratio": s8 / ideal}
        print("%-22s 1-rank step (ch02_ddp) %.1f ms; 1F1B P=2 M=8 %.1f ms vs ideal (M+P-1)/(MP) x 1-rank = %.1f ms: "
              "%.2fx" % (name, one, s8, ideal, s8 / ideal))
        res["sets"][name] = out
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("results: %s" % a.out)


if __name__ == "__main__":
    main()
