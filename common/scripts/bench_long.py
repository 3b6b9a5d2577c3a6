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
    CP 4 hybrid        ch10_long --cp 4 --cp-a2a 2  (the 2-D hybrid: all-to-all inside groups of 2, the
                                                     ring across the 2 groups; the ring's lse, no S² term)

then the causal balance: one run of CP 4 with --cp-balance 0 and one with 1 at the CP 4 row's S,
the attention work per rank measured (score pairs; max/mean) and the step time; then the traffic:
SP (ch06_tp --tp C --sp), the ring, Ulysses and the hybrid (--cp-a2a 2) at C = 2 and 4 on C ranks
(no data parallelism), S = --comm-seq (256), 4 steps: the bytes each rank sends per step for the
sequence split (measured, and the per-layer forward formula of each: SP 4·(C−1)/C·B·S·E, ring
2·(C−1)·B·S·E/C, Ulysses 4·(C−1)/C²·B·S·E, the hybrid 4·(A−1)/A·B·S·E/C + 2·(C/A−1)·B·S·E/C floats,
B = 4 sequences), the time the communication stream spent in the ring's hops and in the
all-to-alls, and the median step time. At C = 4 the 4 ranks oversubscribe a 2-core box. Short runs:
on a shared small box the times are indicative only (the JSON's _meta says so).

Then, with --links (Mbit/s, 0 = unshaped; root only, common/scripts/cluster.sh: elsewhere it says
why and keeps the JSON's previous "nodes"), the same traffic rows on 2 emulated nodes: C = 4 as 2
nodes x 2 ranks (the ring: 2 of its 4 hops cross; Ulysses: half of each all-to-all crosses; the
hybrid: its all-to-alls inside a node, every ring hop across) and C = 2 as 2 nodes x 1 rank (ring
and Ulysses), --reps runs each, alternating: the median step, the stream's time in the hops and in
the all-to-alls. What the link adds to the step over the unshaped run is the exposed communication.

    python3 common/scripts/bench_long.py --bin build/bin [--out results/bench_long.json] [--budget 24]
        [--parts seq,balance,comm,nodes] [--links 0,1000,100,20] [--reps 2]
(--out notes/data/bench_long.json, what make bench-long UPDATE_NOTES=1 runs, refreshes the committed
measurement the pages quote.)
--parts runs only those parts and keeps the others from the existing --out.

The model: the small GPT with 2 layers (L2 NH4 E128 V256, fp32 AdamW). S is searched in steps of
64 (every layout divides it), doubling from 64 then bisecting; a run that fails for another reason
than the budget stops the script. Each row costs about 8 one-step runs (a refused run ends at its
first allocation over the budget)."""
import argparse
import json
import os
import statistics
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


def split_cases(C, S, B, E, ch06, ch10, has_sp):
    """The sequence splits at C: name, program, flags, and the per-layer forward formula (floats per rank)."""
    A = 2  # the hybrid's all-to-all group (a node's 2 ranks in the emulated-nodes rows)
    cases = [("ring", ch10, ["--cp", str(C)], 2.0 * (C - 1) * B * S * E / C),
             ("Ulysses (a2a)", ch10, ["--cp", str(C), "--cp-comm", "a2a"], 4.0 * (C - 1) / C / C * B * S * E)]
    if C % A == 0:
        cases.append(("hybrid (a2a %d x ring %d)" % (A, C // A), ch10, ["--cp", str(C), "--cp-a2a", str(A)],
                      4.0 * (A - 1) / A * B * S * E / C + 2.0 * (C // A - 1) * B * S * E / C))
    if has_sp:
        cases.insert(0, ("SP (TP + SP)", ch06, ["--tp", str(C), "--sp"], 4.0 * (C - 1) / C * B * S * E))
    return cases


def split_run(zlrun, C, prog, args, S, B, L, js, pre=()):
    cmd = ["bash", zlrun] + list(pre) + [str(C), prog, "--model", "gpt", "--gpt", "small", "--n-layer", str(L), "--batch",
                                         str(B), "--steps", "4", "--seq-len", str(S)] + args + ["--quiet", "--json", js]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit("bench_long: %s failed:\n%s" % (" ".join(cmd), p.stdout))
    d = json.load(open(js))
    if "cp" in d:  # the CP rows: the ring's K/V and the all-to-alls, each on its own communicator
        sent = d.get("cp_kv_bytes_per_step", 0) + d.get("cp_a2a_bytes_per_step", 0)
    else:  # SP's count includes the embedding's and the head's collectives
        sent = d["tp"]["per_rank"][0]["bytes_per_step"]
    return d, sent, " ".join(cmd[2:])


def cp_times(d):
    """The CP run's communication per step, ms: the stream's time in the hops and the all-to-alls (busy), the
    time the rank's compute waited for them (wait: exposed), and the gradients' all-reduce's stream time."""
    if "cp" not in d:
        return None
    return {"hops_busy_ms": d["cp_kv_busy_ms_per_step"], "hops_wait_ms": d["cp_kv_wait_ms_per_step"],
            "a2a_busy_ms": d["cp_a2a_busy_ms_per_step"], "a2a_wait_ms": d["cp_a2a_wait_ms_per_step"],
            "grad_all_reduce_busy_ms": d["comm"]["busy_ms_per_step_per_rank"]["all_reduce"]}


def comm_rows(a, zlrun, ch06, ch10, tmp, out, has_sp):
    """SP, the ring, Ulysses and the hybrid at C = 2, 4 on C ranks: bytes per step per rank and step time."""
    S, L, B = a.comm_seq, 2, 4
    E = 128  # the small GPT's width
    print("\ntraffic of the sequence split, S = %d, global batch %d, C ranks, 4 steps (bytes per rank; C = 4 "
          "oversubscribes %d cores)" % (S, B, os.cpu_count() or 0))
    print("%-26s %3s %12s %14s %14s %9s %9s %9s" % ("layout", "C", "sent/step", "per layer f+b", "layer fwd f.",
                                                      "CP busy", "CP wait", "step ms"))
    out["comm"] = []
    for C in (2, 4):
        for name, prog, args, fwd in split_cases(C, S, B, E, ch06, ch10, has_sp):
            d, sent, cmd = split_run(zlrun, C, prog, args, S, B, L, os.path.join(tmp, "c.json"))
            per_layer = sent / L if "cp" in d else None  # per layer only for the CP rows
            w = cp_times(d)
            print("%-26s %3d %12.0f %14s %14.0f %9s %9s %9.1f" % (
                name, C, sent, "-" if per_layer is None else "%.0f" % per_layer, 4 * fwd,
                "-" if w is None else "%.1f" % (w["hops_busy_ms"] + w["a2a_busy_ms"]),
                "-" if w is None else "%.1f" % (w["hops_wait_ms"] + w["a2a_wait_ms"]), d["median_step_ms"]))
            row = {"layout": name, "C": C, "seq": S, "batch": B, "layers": L, "sent_bytes_per_step": sent,
                   "bytes_per_layer_fwd_bwd": per_layer, "layer_fwd_formula_bytes": 4 * fwd,
                   "layer_bytes_formula": d.get("cp_layer_bytes_formula"), "step_ms": d["median_step_ms"], "command": cmd}
            row.update(w or {})
            out["comm"].append(row)
            sys.stdout.flush()


def nodes_rows(a, zlrun, ch10, tmp, out):
    """The ring, Ulysses and the hybrid on 2 emulated nodes at each link rate of --links."""
    here = os.path.dirname(os.path.abspath(__file__))
    check = subprocess.run(["bash", os.path.join(here, "cluster.sh"), "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print("\nemulated nodes: skipped (%s); the JSON keeps its previous \"nodes\"" % check.stdout.strip())
        return
    os.environ.setdefault("ZL_CLUSTER", "zlcp")  # its own cluster: bench-nodes' (zlb) may be up beside it
    os.environ.setdefault("ZL_CLUSTER_SUBNET", "10.214.9")
    S, L, B, E = a.comm_seq, 2, 4, 128
    links = [int(x) for x in a.links.split(",")]
    res = {"links_mbit": links, "reps": a.reps, "seq": S, "batch": B, "layers": L, "runs": [],
           "layout": "C = 4: 2 emulated nodes x 2 ranks (ranks 0, 1 on node 0); C = 2: 2 nodes x 1 rank; "
                     "network namespaces, tc htb token bucket per direction (common/scripts/cluster.sh)",
           "load_before": os.getloadavg()[0]}
    cases = [(C, name, args) for C in (4, 2) for name, _, args, _ in split_cases(C, S, B, E, None, ch10, False)
             if not (C == 2 and "hybrid" in name)]
    cl = ["bash", os.path.join(here, "cluster.sh")]
    subprocess.run(cl + ["up", "2", "--ttl", "1800"], check=True, stdout=subprocess.DEVNULL)
    try:
        print("\nemulated nodes: the sequence split across 2 nodes, S = %d, global batch %d, 4 steps; median of %d runs"
              % (S, B, a.reps))
        print("%6s %-26s %2s %9s %9s %9s %9s %9s %9s %12s" % ("Mbit", "layout", "C", "step ms", "hops busy", "hops wait",
                                                              "a2a busy", "a2a wait", "grad AR", "runs (ms)"))
        for link in links:
            raw = {(C, name): [] for C, name, _ in cases}
            cmds = {}
            for rep in range(a.reps):
                for C, name, args in (cases if rep % 2 == 0 else cases[::-1]):
                    d, sent, cmd = split_run(zlrun, C, ch10, args, S, B, L, os.path.join(tmp, "n.json"),
                                             pre=["--nodes", "2", "--link-mbit", str(link)])
                    raw[(C, name)].append(dict(cp_times(d), step_ms=d["median_step_ms"], sent=sent))
                    cmds[(C, name)] = cmd
            for C, name, _ in cases:
                rs = raw[(C, name)]
                m = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "sent"}
                print("%6d %-26s %2d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %12s" % (
                    link, name, C, m["step_ms"], m["hops_busy_ms"], m["hops_wait_ms"], m["a2a_busy_ms"], m["a2a_wait_ms"],
                    m["grad_all_reduce_busy_ms"], "/".join("%.0f" % r["step_ms"] for r in rs)))
                res["runs"].append(dict(m, link_mbit=link, layout=name, C=C, runs_ms=[r["step_ms"] for r in rs],
                                        sent_bytes_per_step=rs[0]["sent"], command=cmds[(C, name)]))
            sys.stdout.flush()
    finally:
        subprocess.run(cl + ["down"], stdout=subprocess.DEVNULL)
    res["load_after"] = os.getloadavg()[0]
    out["nodes"] = res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default=os.path.join("results", "bench_long.json"))
    ap.add_argument("--budget", type=float, default=24.0, help="MiB per rank (default 24)")
    ap.add_argument("--max-seq", type=int, default=4096)
    ap.add_argument("--comm-seq", type=int, default=256, help="S of the traffic rows (default 256)")
    ap.add_argument("--parts", default="seq,balance,comm,nodes", help="which parts to run (the others: kept from --out)")
    ap.add_argument("--links", default="0,1000,100,20", help="emulated nodes' link rates, Mbit/s (0 = unshaped)")
    ap.add_argument("--reps", type=int, default=2, help="runs per case on the emulated nodes (default 2)")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
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
             ("CP 4 a2a (Ulysses)", 4, ch10, ["--cp", "4", "--cp-comm", "a2a"]),
             ("CP 4 hybrid (a2a 2 x ring 2)", 4, ch10, ["--cp", "4", "--cp-a2a", "2"])]
    budget = ["--mem-limit-mb", "%g" % a.budget]
    out = {"budget_mib": a.budget, "model": " ".join(MODEL), "load": os.getloadavg()[0], "rows": [], "balance": [],
           "comm": []}
    if os.path.exists(a.out):  # the parts not run this time stay as they were
        old = json.load(open(a.out))
        for k in ("rows", "balance", "comm", "nodes"):
            if k in old:
                out[k] = old[k]
    out["_meta"] = {"cores": os.cpu_count(), "parts_run": sorted(parts), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "note": "short runs (one step per max-S probe, 4 steps per traffic row) on a shared %d-core box: byte "
                            "counts are exact, step times indicative only (4 ranks oversubscribe the cores)" % (os.cpu_count() or 0)}
    if "seq" in parts:
        seq_rows(a, zlrun, rows, budget, tmp, out)
    if "balance" in parts:
        balance_rows(zlrun, ch10, tmp, out)
    if "comm" in parts:
        comm_rows(a, zlrun, ch06, ch10, tmp, out, "--sp" in help06)
    if "nodes" in parts and a.links:
        nodes_rows(a, zlrun, ch10, tmp, out)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(out, open(a.out, "w"), indent=1)
    print("results: %s (load average %.2f at the start)" % (a.out, out["load"]))
    return 0


def seq_rows(a, zlrun, rows, budget, tmp, out):
    out["rows"] = []
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


def balance_rows(zlrun, ch10, tmp, out):
    cp4 = [r for r in out["rows"] if r["layout"] == "CP 4" and r["max_seq"]]
    out["balance"] = []
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


if __name__ == "__main__":
    sys.exit(main())
