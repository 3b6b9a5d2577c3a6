#!/usr/bin/env python3
"""bench_long.py — chapter 10's long-sequence demo (notes/10-long-sequences.md): the largest
sequence length S that trains one step under one per-rank memory budget (--mem-limit-mb: the
ledger refuses beyond it), global batch 4 sequences, for

    1 rank             ch10_long                    (the whole sequence, NH·S² probabilities kept)
    TP 4               ch06_tp --tp 4               (heads and MLP split; LayerNorms, residual whole)
    TP 4 + SP          ch06_tp --tp 4 --sp          (only when ch06_tp --help lists --sp)
    ZeRO-3 (D 4)       ch10_long --zero 3           (one whole sequence per rank: the same tokens per
                                                     rank as CP 4, and its NH·S² probabilities)
    CP 4               ch10_long --cp 4             (every layer at S/4 positions; ring attention)
    CP 4 a2a           ch10_long --cp 4 --cp-comm a2a (Ulysses: every layer at S/4 positions but the
                                                     attention, NH/4 heads of the whole sequence and their
                                                     NH/4·S² probabilities)
    CP 4 + ZeRO-3      ch10_long --cp 4 --zero 3    (the weights sharded over the same 4 ranks)
    CP 2 x ZeRO-3 D 2  ch10_long --cp 2 --zero 3    (CP 2 x DP 2, ZeRO-3 over the 4 ranks)
    ... + recompute    ch10_long --cp 4 --zero 3 --recompute (one block's saved activations kept)

then the causal balance: one run of CP 4 with --cp-balance 0 and one with 1 at the CP 4 row's S,
the attention work per rank measured (score pairs; max/mean) and the step time; then the traffic:
SP (ch06_tp --tp C --sp), the ring and Ulysses at C = 2 and 4 on C ranks (no data parallelism),
S = --comm-seq (256), 4 steps: the bytes each rank sends per step for the sequence split (measured,
and the per-layer forward formula of each: SP 4·(C−1)/C·B·S·E, ring 2·(C−1)·B·S·E/C, Ulysses
4·(C−1)/C²·B·S·E floats, B = 4 sequences) and the median step time. Short runs: on a shared small
box the times are indicative only (the JSON's _meta says so).

    python3 common/scripts/bench_long.py --bin build/bin --out notes/data/bench_long.json [--budget 24]

The model: the small GPT with 2 layers (L2 NH4 E128 V256, fp32 AdamW). S is searched in steps of
64 (every layout divides it), doubling from 64 then bisecting; a run that fails for another reason
than the budget stops the script. Each row costs about 8 one-step runs (a refused run ends at its
first allocation over the budget)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODEL = ["--model", "gpt", "--gpt", "small", "--n-layer", "2", "--batch", "4", "--steps", "1"]
STEP = 64


def run(zlrun, np, prog, args, js):
    cmd = ["bash", zlrun, str(np), prog] + MODEL + args + ["--quiet", "--json", js]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, time.time() - t0, cmd


def comm_rows(a, zlrun, ch06, ch10, tmp, out, has_sp):
    """SP, the ring and Ulysses at C = 2, 4 on C ranks: bytes per step per rank and step time."""
    S, L, B = a.comm_seq, 2, 4
    E = 128  # the small GPT's width
    print("\ntraffic of the sequence split, S = %d, global batch %d, C ranks, 4 steps (bytes per rank)" % (S, B))
    print("%-18s %3s %16s %16s %16s %10s" % ("layout", "C", "sent/step", "per layer f+b", "layer fwd formula", "step ms"))
    for C in (2, 4):
        cases = [("ring", ch10, ["--cp", str(C)], "cp_kv_bytes_per_step", 2.0 * (C - 1) * B * S * E / C),
                 ("Ulysses (a2a)", ch10, ["--cp", str(C), "--cp-comm", "a2a"], "cp_a2a_bytes_per_step",
                  4.0 * (C - 1) / C / C * B * S * E)]
        if has_sp:
            cases.insert(0, ("SP (TP + SP)", ch06, ["--tp", str(C), "--sp"], None, 4.0 * (C - 1) / C * B * S * E))
        for name, prog, args, key, fwd in cases:
            js = os.path.join(tmp, "c.json")
            cmd = ["bash", zlrun, str(C), prog, "--model", "gpt", "--gpt", "small", "--n-layer", str(L), "--batch", str(B),
                   "--steps", "4", "--seq-len", str(S)] + args + ["--quiet", "--json", js]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                sys.exit("bench_long: %s failed:\n%s" % (" ".join(cmd), p.stdout))
            d = json.load(open(js))
            sent = d["tp"]["per_rank"][0]["bytes_per_step"] if key is None else d[key]
            # SP's count includes the embedding's and the head's collectives: per layer only for the CP rows
            per_layer = None if key is None else sent / L
            print("%-18s %3d %16.0f %16s %16.0f %10.1f" % (name, C, sent, "-" if per_layer is None else "%.0f" % per_layer,
                                                            4 * fwd, d["median_step_ms"]))
            out["comm"].append({"layout": name, "C": C, "seq": S, "batch": B, "layers": L, "sent_bytes_per_step": sent,
                                "bytes_per_layer_fwd_bwd": per_layer, "layer_fwd_formula_bytes": 4 * fwd,
                                "step_ms": d["median_step_ms"], "command": " ".join(cmd[3:])})
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default=os.path.join("notes", "data", "bench_long.json"))
    ap.add_argument("--budget", type=float, default=24.0, help="MiB per rank (default 24)")
    ap.add_argument("--max-seq", type=int, default=4096)
    ap.add_argument("--comm-seq", type=int, default=256, help="S of the traffic rows (default 256)")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    zlrun = os.path.join(here, "zlrun")
    tmp = tempfile.mkdtemp(prefix="zl_long_")
    ch06, ch10 = os.path.join(a.bin, "ch06_tp"), os.path.join(a.bin, "ch10_long")
    help06 = subprocess.run([ch06, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    rows = [("1 rank", 1, ch10, []), ("TP 4", 4, ch06, ["--tp", "4"])]
    if "--sp" in help06:
        rows.append(("TP 4 + SP", 4, ch06, ["--tp", "4", "--sp"]))
    rows += [("ZeRO-3 (D 4)", 4, ch10, ["--zero", "3"]), ("CP 4", 4, ch10, ["--cp", "4"]), ("CP 4 + ZeRO-3", 4, ch10, ["--cp", "4", "--zero", "3"]),
             ("CP 2 x ZeRO-3 (D 2)", 4, ch10, ["--cp", "2", "--zero", "3"]),
             ("CP 4 + ZeRO-3 + recompute", 4, ch10, ["--cp", "4", "--zero", "3", "--recompute"]),
             ("CP 4 a2a (Ulysses)", 4, ch10, ["--cp", "4", "--cp-comm", "a2a"])]
    budget = ["--mem-limit-mb", "%g" % a.budget]
    out = {"budget_mib": a.budget, "model": " ".join(MODEL), "load": os.getloadavg()[0], "rows": [], "balance": [],
           "comm": [], "_meta": {"cores": os.cpu_count(), "note": "short runs (one step per max-S probe, 4 steps per "
                                 "traffic row) on a shared %d-core box: byte counts are exact, step times indicative "
                                 "only (ranks oversubscribe the cores)" % (os.cpu_count() or 0)}}
    print("largest S that trains one step under --mem-limit-mb %g per rank; %s (S in steps of %d)"
          % (a.budget, " ".join(MODEL), STEP))
    print("%-22s %5s %7s %14s %14s %14s  %s" % ("layout", "ranks", "max S", "peak/rank", "acts peak", "model states",
                                                "first refusal above it"))
    for name, np, prog, args in rows:
        js = os.path.join(tmp, "r.json")
        seen = {}

        def fits(S):
            if S in seen:
                return seen[S][0]
            p, secs, cmd = run(zlrun, np, prog, args + ["--seq-len", str(S)] + budget, js)
            ok = p.returncode == 0
            if not ok and "out of memory budget" not in p.stdout:
                sys.exit("bench_long: %s S=%d failed for another reason than the budget:\n%s\n%s"
                         % (name, S, " ".join(cmd), p.stdout))
            doc = json.load(open(js)) if ok else None
            refusal = "" if ok else [l for l in p.stdout.splitlines() if "out of memory budget" in l][0]
            seen[S] = (ok, doc, refusal, secs, " ".join(cmd[3:]))
            return ok
        lo, hi = None, None
        S = STEP
        while S <= a.max_seq:
            if fits(S):
                lo = S
                S *= 2
            else:
                hi = S
                break
        if lo is None:
            print("%-22s %5d %7s  (S = %d does not fit)" % (name, np, "-", STEP))
            out["rows"].append({"layout": name, "ranks": np, "args": args, "max_seq": 0})
            continue
        while hi is not None and hi - lo > STEP:
            mid = (lo + hi) // (2 * STEP) * STEP
            if fits(mid):
                lo = mid
            else:
                hi = mid
        ok, doc, _, secs, cmd = seen[lo]
        refusal = seen[hi][2] if hi is not None else "(reached --max-seq %d)" % a.max_seq
        mem = doc["memory"]["per_rank"]
        peak = max(r["peak"] for r in mem)
        acts = max(r["acts_peak"] for r in mem)
        states = max(r["model_states"] for r in mem)
        print("%-22s %5d %7d %14d %14d %14d  %s" % (name, np, lo, peak, acts, states, refusal))
        out["rows"].append({"layout": name, "ranks": np, "args": args, "max_seq": lo, "peak": peak, "acts_peak": acts,
                            "model_states": states, "refusal_above": refusal, "command": cmd,
                            "step_ms": doc.get("median_step_ms")})
        sys.stdout.flush()
    cp4 = [r for r in out["rows"] if r["layout"] == "CP 4" and r["max_seq"]]
    if cp4:
        S = cp4[0]["max_seq"]
        print("\ncausal balance, CP 4 at S = %d (attention work = score pairs of one layer's forward on one micro-batch)" % S)
        print("%-14s %12s %12s %10s %10s" % ("--cp-balance", "work max", "work mean", "max/mean", "step ms"))
        for bal in (0, 1):
            js = os.path.join(tmp, "b.json")
            p, secs, cmd = run(zlrun, 4, ch10, ["--cp", "4", "--cp-balance", str(bal), "--seq-len", str(S)], js)
            if p.returncode != 0:
                sys.exit("bench_long: %s failed:\n%s" % (" ".join(cmd), p.stdout))
            d = json.load(open(js))
            wmax, imb = d["cp_work_max"], d["cp_imbalance"]
            print("%-14d %12.0f %12.0f %10.3f %10.1f" % (bal, wmax, wmax / imb, imb, d["median_step_ms"]))
            out["balance"].append({"balance": bal, "seq": S, "work_max": wmax, "work_mean": wmax / imb, "imbalance": imb,
                                   "step_ms": d["median_step_ms"], "command": " ".join(cmd[3:])})
    comm_rows(a, zlrun, ch06, ch10, tmp, out, "--sp" in help06)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(out, open(a.out, "w"), indent=1)
    print("results: %s (load average %.2f at the start)" % (a.out, out["load"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
