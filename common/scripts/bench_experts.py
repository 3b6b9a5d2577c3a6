#!/usr/bin/env python3
"""bench_experts.py — chapter 12's measurements (notes/12-experts.md): what a Mixture-of-Experts
layer and expert parallelism cost and buy, on the small GPT (L4 NH4 C128 S64 V256, fp32 AdamW,
--lr 3e-4: at the default 3e-3 the router collapses onto k experts within 3 steps whatever the
balancing), every row measured by ch12_experts (or ch02_ddp / ch06_tp) --json:

  drop      the share of (token, expert) choices past the capacity (moe_drop_rate, over the run) at
            --capacity-factor 1.0, 1.25, 2.0, top-1 (Switch) and top-2, with Switch's aux loss
            (alpha 0.01, the paper's) and without; E = 8, EP 2, 40 steps.
  balance   max/mean expert load of each of the first 16 steps (moe_load_ratio_0..15) and the last
            (moe_load_max_over_mean_last) with no balancing, the aux loss (0.01, 0.1) and the aux-free
            bias (--aux-loss-coeff 0 --router-bias-rate 1e-3, 1e-2); E = 8, top-2, dropless, EP 2, 40 steps.
            A ratio of E/k (4 here) is every token on the same k experts.
  bytes     the all-to-all bytes per rank per step (moe_a2a_bytes_per_step) beside the formula
            (moe_a2a_bytes_formula) at EP 2 (top-1 and top-2 dropless, top-1 cf 1.25), beside chapter
            06's tensor parallelism of the same (dense) MLP on the same 2 ranks and global batch:
            ch06_tp --tp 2's measured TP bytes (the whole model) and notes/06's formula for the MLPs alone,
            L x 2 all-reduces x 2(T-1)/T x b·s·h x 4 B (b the TP group's sequences).
  step      step time (median over --reps runs, alternating; each run's own median step) and peak bytes
            per rank (the ledger's memory.per_rank[].peak, max over ranks) of --moe 4 --topk 1 at EP 1,
            2 (2 ranks) and EP 1, 2, 4 (4 ranks: oversubscribes a 2-core box) against ch02_ddp on the
            dense GPT of the same shape (top-1: the same active parameters, + the router's E·C per block),
            global batch 16; and the bytes each rank sends per step: the strategy's (over D, and with two
            data-parallel groups the dense gradients' over all N), the EP group's all-reduce of the dense
            gradients (none with two groups) and the all-to-alls; dense_group: which layout ran.
            notes/data/bench_experts_two_groups.json is this part after two groups (make bench-experts
            EXPERTS_PARTS=step EXPERTS_OUT=...), beside bench_experts.json's (everything over D).
            --zero Z (make bench-experts EXPERTS_ZERO=Z): the MoE rows with --zero Z (no dense row);
            notes/data/bench_experts_zero1_{old,two_groups}.json are ZeRO-1's rows before and after
            ZeRO's two groups (the old binary: a build of the commit before them, --bin).
  trace     one EP 2 run of the step row with --trace: rank 0's time per step in the spans "moe dispatch",
            "moe experts", "moe combine" and their backwards (compute thread), and the communication
            thread's all-to-alls (by tag; "blocking" = the dropless count exchange), steps 1.. (step 0 is
            the warm-up).

    python3 common/scripts/bench_experts.py --bin build/bin [--out results/bench_experts.json] [--reps 3]
        [--parts drop,balance,bytes,step,trace]
(--out notes/data/bench_experts.json, what make bench-experts UPDATE_NOTES=1 runs, refreshes the
committed measurement the pages quote.)
--parts runs only those parts and keeps the others from the existing --out. Whole bench: about
2-6 minutes on a 2-core box (372 s measured under load 4-6). Times on a shared small box are indicative only: the JSON's _meta has
the load average before and after."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

GPT = ["--model", "gpt", "--gpt", "small"]
LR = ["--lr", "3e-4"]
PARTS = ["drop", "balance", "bytes", "step", "trace"]


def run(a, np_, prog, args, tmp, extra=()):
    js = os.path.join(tmp, "r.json")
    if os.path.exists(js):
        os.remove(js)
    cmd = ["bash", a.zlrun, str(np_), os.path.join(a.bin, prog)] + args + ["--quiet", "--json", js] + list(extra)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 or not os.path.exists(js):
        sys.exit("bench_experts: %s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:]))
    with open(js) as f:
        d = json.load(f)
    d["_cmd"] = "zlrun %d %s %s" % (np_, prog, " ".join(args))
    return d


def peak(d):
    return max(r["peak"] for r in d["memory"]["per_rank"])


def cf_key(cf):
    return "cf%d" % round(100 * cf)


def part_drop(a, tmp):
    rows = {}
    print("\ndrop rate against the capacity factor (E 8, EP 2, batch 8, 40 steps; choices past capacity / all)")
    print("%4s %6s %5s %10s %12s %16s" % ("k", "aux", "cf", "dropped", "load last", "a2a B/step"))
    for k in (1, 2):
        for aux in (0.01, 0.0):
            for cf in (1.0, 1.25, 2.0):
                args = GPT + LR + ["--moe", "8", "--topk", str(k), "--ep", "2", "--batch", "8", "--steps", "40",
                                   "--aux-loss-coeff", "%g" % aux, "--capacity-factor", "%g" % cf]
                d = run(a, 2, "ch12_experts", args, tmp)
                r = {"k": k, "aux": aux, "cf": cf, "drop_rate": d["moe_drop_rate"],
                     "load_ratio_last": d["moe_load_max_over_mean_last"], "a2a_bytes_per_step": d["moe_a2a_bytes_per_step"],
                     "a2a_bytes_formula": d["moe_a2a_bytes_formula"], "final_loss": d["final_loss"], "cmd": d["_cmd"]}
                rows["top%d_%s_%s" % (k, "aux" if aux else "noaux", cf_key(cf))] = r
                print("%4d %6g %5g %10.4f %12.2f %16.0f" % (k, aux, cf, r["drop_rate"], r["load_ratio_last"],
                                                             r["a2a_bytes_per_step"]))
    return rows


BALANCE = [("none", "none", ["--aux-loss-coeff", "0"]), ("aux_0p01", "aux loss 0.01", ["--aux-loss-coeff", "0.01"]),
           ("aux_0p1", "aux loss 0.1", ["--aux-loss-coeff", "0.1"]),
           ("bias_0p001", "bias 1e-3", ["--aux-loss-coeff", "0", "--router-bias-rate", "1e-3"]),
           ("bias_0p01", "bias 1e-2", ["--aux-loss-coeff", "0", "--router-bias-rate", "1e-2"])]


def part_balance(a, tmp):
    rows = {}
    print("\nmax/mean expert load per step (E 8, top-2, dropless, EP 2, batch 8; E/k = 4: all on k experts)")
    for key, name, flags in BALANCE:
        args = GPT + LR + ["--moe", "8", "--topk", "2", "--ep", "2", "--batch", "8", "--steps", "40"] + flags
        d = run(a, 2, "ch12_experts", args, tmp)
        ratios = [d["moe_load_ratio_%d" % i] for i in range(16)]
        r = {"name": name, "ratios": ratios, "last": d["moe_load_max_over_mean_last"], "steps": 40,
             "final_loss": d["final_loss"], "aux_loss_last": d["moe_aux_loss_last"], "cmd": d["_cmd"]}
        rows[key] = r
        print("%-14s %s | step 39 %.2f  loss %.4f" % (name, " ".join("%.2f" % x for x in ratios), r["last"],
                                                      r["final_loss"]))
    return rows


def part_bytes(a, tmp):
    B, L, S, H = 16, 4, 64, 128  # global batch, the small GPT's blocks, positions, width
    print("\nall-to-all bytes per rank per step at EP 2 against TP 2 of the dense MLP (2 ranks, global batch %d, "
          "4 steps)" % B)
    rows = {}
    for key, name, flags in [("top1_dropless", "EP 2 top-1 dropless", ["--topk", "1"]),
                             ("top2_dropless", "EP 2 top-2 dropless", ["--topk", "2"]),
                             ("top1_cf125", "EP 2 top-1 cf 1.25", ["--topk", "1", "--capacity-factor", "1.25"])]:
        args = GPT + LR + ["--moe", "4", "--ep", "2", "--batch", str(B), "--steps", "4"] + flags
        d = run(a, 2, "ch12_experts", args, tmp)
        k = int(flags[1])
        rows[key] = {"name": name, "k": k, "measured": d["moe_a2a_bytes_per_step"],
                     "formula": d["moe_a2a_bytes_formula"], "per_layer": d["moe_a2a_bytes_per_step"] / L,
                     # if the router were uniform: 4 exchanges x k x (B/2)·s rows x 1/2 to the other rank x h x 4 B
                     "uniform_formula": L * 4 * k * (B // 2) * S * 0.5 * H * 4, "cmd": d["_cmd"]}
    d = run(a, 2, "ch06_tp", GPT + LR + ["--tp", "2", "--batch", str(B), "--steps", "4"], tmp)
    tp = d["tp"]["per_rank"][0]
    T = 2
    mlp = L * 2 * 2.0 * (T - 1) / T * B * S * H * 4  # notes/06: g forward + f backward per MLP, b = B (D = 1)
    tp_row = {"name": "TP 2 (ch06_tp), whole model", "measured": tp["bytes_per_step"],
              "formula": tp["formula_bytes_per_step"], "mlp_formula": mlp, "mlp_per_layer": mlp / L,
              "calls_per_step": tp["calls_per_step"], "cmd": d["_cmd"]}
    print("%-32s %14s %14s %14s" % ("", "measured B", "formula B", "per layer B"))
    for r in rows.values():
        print("%-32s %14.0f %14.0f %14.0f" % (r["name"], r["measured"], r["formula"], r["per_layer"]))
    print("%-32s %14.0f %14.0f %14s" % (tp_row["name"], tp_row["measured"], tp_row["formula"], "-"))
    print("%-32s %14s %14.0f %14.0f" % ("TP 2, the MLPs alone (notes/06)", "-", mlp, mlp / L))
    return {"ep": rows, "tp": tp_row, "global_batch": B, "layers": L, "seq": S, "width": H}


STEP_CASES = [("dense DDP", 2, "ch02_ddp", []), ("MoE EP 1", 2, "ch12_experts", ["--ep", "1"]),
              ("MoE EP 2", 2, "ch12_experts", ["--ep", "2"]),
              ("dense DDP", 4, "ch02_ddp", []), ("MoE EP 1", 4, "ch12_experts", ["--ep", "1"]),
              ("MoE EP 2", 4, "ch12_experts", ["--ep", "2"]), ("MoE EP 4", 4, "ch12_experts", ["--ep", "4"]),
              ("MoE EP 4 TP 2", 4, "ch12_experts", ["--ep", "4", "--tp", "2"]),
              ("MoE EP 4 TP 2 SP", 4, "ch12_experts", ["--ep", "4", "--tp", "2", "--sp"])]


def step_key(name, np_, flags):
    return "%s_N%d" % ("dense" if not flags else "".join(f.lstrip("-") for f in flags), np_)


def step_args(prog, flags, steps, zero=0):
    moe = ["--moe", "4", "--topk", "1"] if prog == "ch12_experts" else []
    z = ["--zero", str(zero)] if zero and prog == "ch12_experts" else []  # --zero Z: the MoE rows' strategy
    return GPT + LR + moe + ["--batch", "16", "--steps", str(steps)] + flags + z


def part_step(a, tmp):
    raw = {step_key(n, np_, f): [] for n, np_, _, f in STEP_CASES}
    for rep in range(a.reps):
        for name, np_, prog, flags in STEP_CASES:  # alternating: one run of each case per rep
            if a.zero and prog != "ch12_experts":
                continue  # --zero: the MoE rows only (the dense row is chapter 02's DDP)
            d = run(a, np_, prog, step_args(prog, flags, a.steps, a.zero), tmp)
            raw[step_key(name, np_, flags)].append({"ms": d["median_step_ms"], "peak": peak(d),
                                               "states": max(r["model_states"] for r in d["memory"]["per_rank"]),
                                               "params": d["params"], "active": d.get("moe_params_active", d["params"]),
                                               "total": d.get("moe_params_total", d["params"]),
                                               "load_last": d.get("moe_load_max_over_mean_last"),
                                               "a2a": d.get("moe_a2a_bytes_per_step", 0),
                                               "grad_bytes": d["comm"]["bytes_per_step_per_rank"],
                                               "ep_ar_bytes": d["tp"]["per_rank"][0]["bytes_per_step"] if d.get("tp") else 0,
                                               "cmd": d["_cmd"]})
        print("rep %d/%d done (load %.2f)" % (rep + 1, a.reps, os.getloadavg()[0]), file=sys.stderr)
    rows = {}
    print("\nstep time and peak per rank, GPT small, global batch 16, %d steps, median of %d runs (alternating); "
          "N = 4 oversubscribes %d cores" % (a.steps, a.reps, os.cpu_count() or 0))
    print("%-12s %2s %10s %10s %12s %12s %12s %10s %10s" % ("", "N", "Ψ active", "Ψ total", "step ms", "peak B",
                                                             "states B", "a2a B", "sent B"))
    for name, np_, prog, flags in STEP_CASES:
        rs = raw[step_key(name, np_, flags)]
        if not rs:
            continue
        r = {"name": name, "N": np_, "ep": int(flags[1]) if flags else 0, "tp": int(flags[3]) if len(flags) > 3 else 1,
             "sp": "--sp" in flags,
             "median_step_ms": statistics.median(x["ms"] for x in rs),
             "step_ms_runs": [x["ms"] for x in rs], "peak_bytes": rs[0]["peak"], "model_states_bytes": rs[0]["states"],
             "params_active": rs[0]["active"], "params_total": rs[0]["total"], "params_rank": rs[0]["params"],
             "a2a_bytes_per_step": rs[0]["a2a"], "grad_bytes_per_step": rs[0]["grad_bytes"],
             "ep_all_reduce_bytes_per_step": rs[0]["ep_ar_bytes"],
             # the dense gradients' data-parallel group, from what was measured: with EP (no TP inside),
             # an EP group that all-reduces nothing is the two-group layout (dense over all N ranks)
             "dense_group": ("all N" if rs[0]["ep_ar_bytes"] == 0 else "D (EP group first)")
             if flags and int(flags[1]) > 1 and len(flags) <= 2 else None,
             "sent_bytes_per_step": rs[0]["a2a"] + rs[0]["grad_bytes"] + rs[0]["ep_ar_bytes"],
             "load_last_runs": [x["load_last"] for x in rs], "cmd": rs[0]["cmd"], "zero": a.zero}
        rows[step_key(name, np_, flags)] = r
        print("%-12s %2d %10d %10d %12.1f %12d %12d %10.0f %10.0f" % (
            name, np_, r["params_active"], r["params_total"], r["median_step_ms"], r["peak_bytes"],
            r["model_states_bytes"], r["a2a_bytes_per_step"], r["sent_bytes_per_step"]))
    return rows


SPANS = ["moe dispatch", "moe experts", "moe combine", "moe combine backward", "moe experts backward",
         "moe dispatch backward"]


def part_trace(a, tmp):
    tr = os.path.join(tmp, "t.json")
    steps = max(a.steps, 4)
    d = run(a, 2, "ch12_experts", step_args("ch12_experts", ["--ep", "2"], steps), tmp, ["--trace", tr])
    with open(tr) as f:
        doc = json.load(f)
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    stepsp = sorted([e for e in ev if e.get("ph") == "X" and e.get("pid") == 0 and e.get("tid") == 0
                     and str(e.get("name", "")).startswith("step ")], key=lambda e: e["ts"])[1:]  # step 0: warm-up
    comp = {s: 0.0 for s in SPANS}
    comm = {}
    for e in ev:
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue
        if not any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in stepsp):
            continue
        if e.get("tid") == 0 and e["name"] in comp:
            comp[e["name"]] += e["dur"]
        elif e.get("tid") == 1 and (e.get("args") or {}).get("op") == "all_to_all":
            comm[e["name"]] = comm.get(e["name"], 0.0) + e["dur"]
    n = len(stepsp)
    step_ms = statistics.median(s["dur"] for s in stepsp) / 1000.0
    res = {"steps_counted": n, "rank": 0, "median_step_ms": step_ms,
           "compute_ms_per_step": {k.replace(" ", "_"): v / n / 1000.0 for k, v in comp.items()},
           "all_to_all_ms_per_step": {k.replace(" ", "_"): v / n / 1000.0 for k, v in comm.items()},
           "cmd": d["_cmd"] + " --trace t.json"}
    print("\ntrace, rank 0, EP 2 (the step row's run), steps 1..%d: ms per step (median step %.1f ms)" % (n, step_ms))
    for k in SPANS:
        c = res["compute_ms_per_step"][k.replace(" ", "_")]
        w = res["all_to_all_ms_per_step"].get(k.replace(" ", "_"))
        print("  %-24s %8.2f  %s" % (k, c, "" if w is None else "(its all-to-all on the comm thread %.2f)" % w))
    if "blocking" in res["all_to_all_ms_per_step"]:
        print("  %-24s %8s  (the dropless count exchange, comm thread %.2f)" % ("counts", "", res["all_to_all_ms_per_step"]["blocking"]))
    moe = sum(res["compute_ms_per_step"].values())
    print("  MoE spans together %.2f ms of the %.1f ms step (%.0f%%)" % (moe, step_ms, 100 * moe / step_ms))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="results/bench_experts.json")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="steps of the step-time runs (default 8)")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3],
                    help="the step part's MoE rows with --zero Z (0: DDP, the default; then no dense row)")
    a = ap.parse_args()
    a.zlrun = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zlrun")
    parts = [p for p in a.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad or a.reps < 1 or a.steps < 2:
        sys.stderr.write("error: --parts %s: allowed %s; --reps >= 1, --steps >= 2\n" % (",".join(bad), ",".join(PARTS)))
        return 2
    for prog in ("ch12_experts", "ch02_ddp", "ch06_tp"):
        if not os.access(os.path.join(a.bin, prog), os.X_OK):
            sys.stderr.write("error: --bin %s: no %s (make build first)\n" % (a.bin, prog))
            return 2
    out = {}
    if os.path.exists(a.out) and set(parts) != set(PARTS):
        with open(a.out) as f:
            out = json.load(f)
    prev_meta = out.get("_meta")
    load0 = os.getloadavg()
    t0 = time.time()
    fns = {"drop": part_drop, "balance": part_balance, "bytes": part_bytes, "step": part_step, "trace": part_trace}
    with tempfile.TemporaryDirectory(prefix="zl_bench_experts.") as tmp:
        for p in PARTS:
            if p in parts:
                l0, d0 = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
                out[p] = fns[p](a, tmp)
                out.setdefault("_part_meta", {})[p] = {"date": d0, "load_before": l0, "load_after": os.getloadavg(),
                                                       "reps": a.reps, "steps": a.steps,
                                                       "command": "bench_experts.py %s" % " ".join(sys.argv[1:])}
    load1 = os.getloadavg()
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        rev = "?"
    meta = {"command": "make bench-experts (bench_experts.py %s)" % " ".join(sys.argv[1:]),
                    "machine": "%s, %d cores" % (platform.machine(), os.cpu_count() or 0), "git": rev,
                    "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_before": load0,
                    "load_after": load1, "reps": a.reps, "steps": a.steps, "parts": parts, "seconds": time.time() - t0,
                    "model": "GPT small (L4 NH4 C128 S64 V256), fp32 AdamW --lr 3e-4",
                    "switch_paper": "Fedus, Zoph, Shazeer, Switch Transformers (JMLR 23, 2022; arXiv:2101.03961) "
                                    "section 2.2: tokens dropped 'typically < 1%' with the auxiliary loss, alpha = 1e-2; "
                                    "Table 1 trains Switch-Base at capacity factors 1.0, 1.25, 2.0 (T5-Base on C4)"}
    # _meta is the last whole run's; a run of some parts keeps it and says so in _part_meta (each part's
    # date, load, reps and command), so a page quoting the whole run's load stays true
    out["_meta"] = prev_meta if prev_meta and set(parts) != set(PARTS) else meta
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("\nload %.2f -> %.2f, %.0f s; wrote %s" % (load0[0], load1[0], time.time() - t0, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
