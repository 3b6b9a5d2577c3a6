#!/usr/bin/env python3
"""bench_pipeline.py — `make bench-pipeline`: the pipeline's bubble and step time beside their
formulas (notes/07-pipeline.md, notes/design.md: the stream model).

Matrix (--bin, this build): ch07_pipeline GPipe, 1F1B and interleaved 1F1B (2 virtual stages) at
P = 2, M = 1, 4, 8 and P = 4, M = 8, on two models: the MLP --input 512 --hidden 2048 --layers 4
--batch 256 and --model gpt --gpt small --batch 32; and the 1-rank step (ch02_ddp, 1 rank) of each
model at the same batch. Interleaved needs P x 2 units and M a multiple of P: where not, it is
skipped, and the table says so. Reps alternate the order of the cases (forward, then reversed); medians
of --reps.

Printed per case: the chapter's measured bubble_fraction beside its formula ((P-1)/(M+P-1),
interleaved (P-1)/(vM+P-1)), "ok" when within 10% (relative) + 0.02 of it; beside the same formula
for the stages as they ran ("stages": bubble_formula_stages, from each stage's measured busy time,
solutions/pipeline.c pp_bubble_stages: the slowest stage paces the step), ok alike; the step time beside
the ideal: (1-rank step / P) / (1 - formula bubble) = (M+P-1)/(M P) x the 1-rank step; and the
same with the 1-rank step run as M accumulated micro-batches (ch02_ddp --accum M): what the
stages' compute costs when cut as small as the pipeline cuts it.

--base-bin (make bench-pipeline BENCH_BASE=REV): the same MLP P = 2 cases with another build,
alternating with this one rep by rep (before/after a change of the communication engine); with
--cases zb, every zero-bubble row and 1-rank step with both builds (before/after a change of the
pipeline's messages). The JSON's sets: "after" (--bin) and "before" (--base-bin; _meta.base names it).

The zero-bubble rows (meeting 07c): zb-h1 and zb-h2 beside 1f1b at P = 2, M = 4, 8. For every case
the chapter's own simulator fed with the run's measured F, B, W per micro-batch and stage
("bubble_sim": solutions/pipeline_sim.c with messages free; "ok" within 10% + 0.02 of it); the
activation peak per stage, the loop's slots (acts_inflight_peak_s*) beside the schedule's formula
(in-flight count x slot bytes) and the ledger's acts peak; and, labelled PREDICTED, P = 4 and 8 at
M = 8, 16, 32 from the same simulator (solutions/pipeline_sim.c and the pure files it links,
compiled here into a shared library and called through ctypes: they need nothing but libc), each
stage costing 2/P of the P = 2 zb-h1 run's measured stage. --cases zb (ZL_BENCH_CASES=zb): only
those P = 2 rows and the 1-rank steps; all (the default): the whole matrix.
JSON: --out, with _meta (command, machine, date, load before and after).

--cases fb (ZL_BENCH_CASES=fb; notes/07d-dualpipev.md, "F&B"): DualPipeV's overlapped forward-backward
on 2 emulated nodes (common/scripts/cluster.sh, root; elsewhere it says why and writes nothing), the
MoE GPT of chapter 12 (FB_MODEL: 6 blocks of width 128, every one MoE, EP 2 x PP 2 on 4 ranks placed round-robin,
mpirun --map-by node: each EP group's two ranks on two nodes, each pipeline link inside a node), the
inter-node link shaped to each of --fb-links Mbit/s (0: unshaped): 1f1b, zb-h1, dualpipev and dualpipev
--fb-overlap, --reps runs each, the order alternating. Per row, medians: the step, the measured
bubble beside the simulator fed with the run's F, B, W; the all-to-alls' time on the stream, the main
thread's wait for them (exposed) and the part of it inside the F's of the pairs the list marks F&B;
the compute of those pairs' B's; the most an overlap can hide (min of those two, per rank); and with
--fb-overlap the backward's compute that ran while the forward's all-to-alls travelled, and the other way
the wait inside those B's and the forward's compute run while the backward's travelled (the moe_*/fb_* extras of
ch12_experts --json, the mean over the 4 ranks, ms per step). --out gets only these rows."""
import argparse, ctypes, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

MODELS = {
    "mlp": ["--input", "512", "--hidden", "2048", "--layers", "4", "--batch", "256"],
    "gpt": ["--model", "gpt", "--gpt", "small", "--batch", "32"],
}
UNITS = {"mlp": 5, "gpt": 6}  # the models' units (ch07's split prints them): interleaved needs P*v of them
V = 2  # virtual stages of the interleaved runs


def run(np_, binary, args, steps):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = ["bash", "common/scripts/zlrun", str(np_), binary] + args + ["--steps", str(steps), "--quiet", "--json", path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        d = json.load(f)
    os.unlink(path)
    return d


SCHEDS = {"naive": 0, "gpipe": 1, "1f1b": 2, "interleaved": 3, "zb-h1": 4, "zb-h2": 5}  # pp_schedule_t


def formula(sched, P, M):
    """The equal-stage formulas (pp_bubble_formula; the zero-bubble ones with F = B = W)."""
    if sched == "zb-h1":
        return (P - 1) / (3 * M + P - 1)
    if sched == "zb-h2":
        return 0.0
    return (P - 1) / (V * M + P - 1) if sched == "interleaved" else (P - 1) / (M + P - 1)


class Sim:
    """pp_simulate of solutions/pipeline_sim.c through ctypes (compiled here with what it links)."""

    class Cost(ctypes.Structure):
        _fields_ = [("f", ctypes.c_double), ("b", ctypes.c_double), ("w", ctypes.c_double)]

    class Out(ctypes.Structure):
        _fields_ = [(k, ctypes.c_double) for k in ("makespan", "span", "busy", "bubble", "bubble_makespan")]

    def __init__(self):
        cc = shutil.which("cc") or shutil.which("gcc")
        self.dir = tempfile.mkdtemp(prefix="zl_ppsim.")
        so = os.path.join(self.dir, "libppsched.so")
        srcs = ["solutions/" + f for f in ("pipeline_sched.c", "pipeline_sim.c", "pipeline_check.c",
                                            "pipeline_check_stage.c", "pipeline_groups.c")]
        subprocess.run([cc, "-std=c11", "-O2", "-shared", "-fPIC", "-o", so] + srcs, check=True)
        self.lib = ctypes.CDLL(so)
        self.lib.pp_simulate.argtypes = [ctypes.c_int] * 4 + [ctypes.POINTER(Sim.Cost), ctypes.c_double,
                                                               ctypes.POINTER(Sim.Out)]

    def run(self, sched, P, M, f, b, w, c=0.0):
        cost = (Sim.Cost * P)(*[Sim.Cost(f, b, w)] * P)
        out = Sim.Out()
        if self.lib.pp_simulate(SCHEDS[sched], P, M, 1, cost, c, ctypes.byref(out)) != 0:
            return None
        return {"bubble": out.bubble, "bubble_makespan": out.bubble_makespan, "step": out.makespan, "span": out.span}


def case_key(model, sched, P, M):
    """mlp_zbh1_P2_M4: no '-' (the notes' data markers read '-' as a minus)."""
    return "%s_%s_P%d_M%d" % (model, sched.replace("-", ""), P, M)


def predict(cases, models):
    """P = 4 and 8 from the simulator: each stage 2/P of the P = 2 zb-h1 M = 8 run's measured stage
    (the same model cut finer, messages free)."""
    sim, pred = Sim(), {}
    for m in models:
        c = cases.get(case_key(m, "zb-h1", 2, 8))
        if not c or not c.get("fbw_ms"):
            continue
        f2, b2, w2 = c["fbw_ms"]
        rows = []
        for P in (4, 8):
            for M in (8, 16, 32):
                f, b, w = (x * 2 / P for x in (f2, b2, w2))
                r = {"P": P, "M": M, "stage_fbw_ms": [f, b, w], "predicted": True}
                for sched in ("1f1b", "zb-h1", "zb-h2"):  # keys without '-' (the notes' data markers)
                    s = sim.run(sched, P, M, f, b, w)
                    r[sched.replace("-", "")] = s["bubble_makespan"] if s else None
                    if sched == "zb-h2" and s:
                        r["zbh2_span"] = s["bubble"]
                rows.append(r)
        pred[m] = rows
    shutil.rmtree(sim.dir, ignore_errors=True)
    return pred


FB_MODEL = ["--model", "gpt", "--gpt", "tiny", "--n-layer", "6", "--n-embd", "128", "--n-head", "4", "--batch", "16",
            "--moe", "4", "--topk", "2", "--ep", "2", "--pp", "2", "--micro-batches", "4", "--optimizer", "sgd",
            "--lr", "0.1"]
FB_ROWS = [("1f1b", ["--schedule", "1f1b"]), ("zb-h1", ["--schedule", "zb-h1"]),
           ("dualpipev", ["--schedule", "dualpipev"]), ("dualpipev_fb", ["--schedule", "dualpipev", "--fb-overlap"])]
FB_KEYS = ["median_step_ms", "bubble_fraction", "bubble_sim", "moe_a2a_stream_ms_per_step", "moe_a2a_wait_ms_per_step",
           "moe_a2a_wait_fb_ms_per_step", "fb_b_ms_per_step", "fb_hideable_ms_per_step", "fb_hidden_ms_per_step",
           "moe_a2a_bytes_per_step", "moe_a2a_wait_fb_b_ms_per_step", "fb_f_hidden_ms_per_step"]


def run_fb(a):
    """--cases fb: the F&B rows on 2 emulated nodes (the module's docstring)."""
    env = dict(os.environ, ZL_MPIRUN_FLAGS="--map-by node", ZL_CLUSTER=os.environ.get("ZL_CLUSTER", "zlfb"),
               ZL_CLUSTER_SUBNET=os.environ.get("ZL_CLUSTER_SUBNET", "10.209.49"))
    chk = subprocess.run(["bash", "common/scripts/cluster.sh", "check"], capture_output=True, text=True, env=env)
    if chk.returncode != 0:
        print("bench-pipeline --cases fb: no emulated nodes here (%s): nothing written" % chk.stdout.strip())
        return
    links = [int(x) for x in a.fb_links.split(",")]
    load0, t0, raw = os.getloadavg(), time.time(), {}
    subprocess.run(["bash", "common/scripts/cluster.sh", "up", "2", "--link-mbit", str(links[0]), "--ttl", "3600"],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    try:
        for link in links:
            for rep in range(a.reps):
                rows = FB_ROWS if rep % 2 == 0 else FB_ROWS[::-1]
                for name, flags in rows:
                    fd, path = tempfile.mkstemp(suffix=".json")
                    os.close(fd)
                    cmd = ["bash", "common/scripts/zlrun", "--nodes", "2", "--link-mbit", str(link), "4",
                           os.path.join(a.bin, "ch12_experts")] + FB_MODEL + flags + [
                           "--steps", str(a.steps), "--quiet", "--timeout-s", "120", "--json", path]
                    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, timeout=600)
                    with open(path) as f:
                        d = json.load(f)
                    os.unlink(path)
                    raw.setdefault((link, name), []).append({k: d.get(k) for k in FB_KEYS})
                print("link %d Mbit/s rep %d/%d done (load %.2f, %.0f s so far)" % (
                    link, rep + 1, a.reps, os.getloadavg()[0], time.time() - t0), file=sys.stderr)
    finally:
        subprocess.run(["bash", "common/scripts/cluster.sh", "down"], stdout=subprocess.DEVNULL, env=env)
    load1 = os.getloadavg()
    med = lambda xs, k: statistics.median(x[k] for x in xs) if all(x[k] is not None for x in xs) else None
    rows = {}
    print("\nDualPipeV's F&B on 2 emulated nodes (EP across the link, PP inside a node), ms per step, medians of %d "
          "reps of %d steps; load %.1f before, %.1f after (2 cores)" % (a.reps, a.steps, load0[0], load1[0]))
    print("%-5s %-13s %7s %7s %7s %8s %8s %9s %7s %9s %7s %9s %8s" % (
        "link", "schedule", "step", "bubble", "sim", "a2a", "exposed", "in F&B F", "F&B B", "hideable", "hidden",
        "in F&B B", "F hidden"))
    for (link, name), xs in raw.items():
        r = {k: med(xs, k) for k in FB_KEYS}
        r.update({"link_mbit": link, "schedule": name, "reps": len(xs), "runs": xs})
        rows["%s_link%d" % (name.replace("-", ""), link)] = r
        f = lambda v: "%.2f" % v if v is not None else "-"
        print("%-5s %-13s %7s %7s %7s %8s %8s %9s %7s %9s %7s %9s %8s" % (
            link or "-", name, f(r["median_step_ms"]), f(r["bubble_fraction"]), f(r["bubble_sim"]),
            f(r["moe_a2a_stream_ms_per_step"]), f(r["moe_a2a_wait_ms_per_step"]), f(r["moe_a2a_wait_fb_ms_per_step"]),
            f(r["fb_b_ms_per_step"]), f(r["fb_hideable_ms_per_step"]), f(r["fb_hidden_ms_per_step"]),
            f(r["moe_a2a_wait_fb_b_ms_per_step"]), f(r["fb_f_hidden_ms_per_step"])))
    res = {"_meta": {"command": "make bench-pipeline " + " ".join(sys.argv[1:]), "machine": platform.node() + " %d cores"
                     % os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                     "load_before": load0, "load_after": load1, "reps": a.reps, "steps": a.steps,
                     "model": "ch12_experts " + " ".join(FB_MODEL), "placement": "4 ranks on 2 emulated nodes, "
                     "mpirun --map-by node: EP groups {0,1} and {2,3} across the link, pipeline links 0-2 and 1-3 "
                     "inside a node", "links_mbit": links, "note": a.note,
                     "columns": "ms per step, the mean over the 4 ranks: a2a = the all-to-alls' time on the EP "
                     "stream, exposed = the main thread's wait for them, in F&B F = that wait inside the F's of the "
                     "pairs dualpipev marks F&B, F&B B = those pairs' B compute, hideable = min(in F&B F, F&B B) per "
                     "rank (the most the overlap can hide: measured on the run itself), hidden = B compute run while "
                     "F's all-to-all travelled (--fb-overlap), in F&B B = the wait inside those B's, F hidden = F "
                     "compute run while B's all-to-all travelled (--fb-overlap)"}, "rows": rows}
    with open(a.out, "w") as fo:
        json.dump(res, fo, indent=1)
    print("results: %s" % a.out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--base-bin", default="")
    ap.add_argument("--base-name", default="base")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--models", default="mlp,gpt")
    ap.add_argument("--cases", default="all", choices=["all", "zb", "fb"])
    ap.add_argument("--fb-links", default="0,100", help="--cases fb: inter-node link rates, Mbit/s (0 unshaped)")
    ap.add_argument("--note", default="", help="a line for _meta (what else ran on the box)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cases == "fb":
        return run_fb(a)
    models = a.models.split(",")
    cases, skipped = [], {}
    for model in models:
        for P, M in ((2, 1), (2, 4), (2, 8), (4, 8)):
            scheds = ("gpipe", "1f1b", "interleaved") + (("zb-h1", "zb-h2") if P == 2 and M > 1 else ())
            if a.cases == "zb":
                scheds = ("1f1b", "zb-h1", "zb-h2") if P == 2 and M > 1 else ()
            for sched in scheds:
                if sched == "interleaved" and P * V > UNITS[model]:
                    skipped[case_key(model, sched, P, M)] = "needs P x %d = %d units, the model has %d" % (
                        V, P * V, UNITS[model])
                    continue
                if sched == "interleaved" and M % P:
                    skipped[case_key(model, sched, P, M)] = "M must be a multiple of P (ch07 refuses M %d)" % M
                    continue
                cases.append((model, sched, P, M))
    sets = [("after", a.bin)] + ([("before", a.base_bin)] if a.base_bin else [])  # _meta.base names the base
    load0 = os.getloadavg()
    raw = {name: {} for name, _ in sets}
    t_start = time.time()
    for rep in range(a.reps):
        order = list(sets if rep % 2 == 0 else sets[::-1])
        for name, b in order:
            every = name == "after" or a.cases == "zb"  # --cases zb: the base build runs the same rows
            todo = [c for c in cases if every or (c[0] == "mlp" and c[2] == 2 and c[1] in ("gpipe", "1f1b"))]
            todo = [("1rank", m, acc) for m in models for acc in (1, 4, 8) if every or m == "mlp"] + todo
            if rep % 2:
                todo = todo[::-1]
            for c in todo:
                if c[0] == "1rank":  # the whole batch at once, and as M accumulated micro-batches
                    d = run(1, os.path.join(b, "ch02_ddp"), MODELS[c[1]] + ["--accum", str(c[2])], a.steps)
                    key = "1rank_" + c[1] + ("" if c[2] == 1 else "_accum%d" % c[2])
                    raw[name].setdefault(key, []).append({"ms": d["median_step_ms"]})
                    continue
                model, sched, P, M = c
                args = MODELS[model] + ["--schedule", sched, "--micro-batches", str(M), "--pp", str(P)]
                if sched == "interleaved":
                    args += ["--virtual-stages", str(V)]
                d = run(P, os.path.join(b, "ch07_pipeline"), args, a.steps)
                per = d.get("memory", {}).get("per_rank", [])
                raw[name].setdefault(case_key(*c), []).append(
                    {"ms": d["median_step_ms"], "bubble": d["bubble_fraction"], "formula": d["bubble_formula"],
                     "stages": d.get("bubble_formula_stages"), "sim": d.get("bubble_sim"),
                     "sim_span": d.get("bubble_sim_span"),
                     "fbw_ms": [d.get("op_f_ms"), d.get("op_b_ms"), d.get("op_w_ms", 0.0)],
                     "inflight": [[d.get("acts_inflight_peak_s%d" % s), d.get("acts_inflight_formula_s%d" % s)]
                                  for s in range(min(P, 2))],
                     "ledger_acts_peak": [r.get("acts_peak") for r in per],
                     "cpu": d.get("cpu", {}).get("per_rank", [])})
            print("rep %d/%d %s done (load %.2f, %.0f s so far)" % (rep + 1, a.reps, name, os.getloadavg()[0],
                                                                    time.time() - t_start), file=sys.stderr)
    load1 = os.getloadavg()
    res = {"_meta": {"command": "make bench-pipeline " + " ".join(sys.argv[1:]), "machine": platform.node() + " " +
                     platform.processor() + " %d cores" % os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                     time.gmtime()), "load_before": load0, "load_after": load1, "reps": a.reps, "steps": a.steps,
                     "models": {m: " ".join(MODELS[m]) for m in models}, "virtual_stages": V,
                     "base": a.base_name if a.base_bin else None,
                     "ok_rule": "|measured - formula| <= 0.1 formula + 0.02 (within: the equal-stage formula; "
                     "within_stages: the formula for the stages' measured busy times; within_sim: the simulator fed "
                     "with the run's measured F, B, W)",
                     "skipped": skipped, "box": "%d cores; whatever else runs on the box runs beside the benchmark "
                     "(load_before, load_after)%s" % (os.cpu_count(), ": " + a.note if a.note else "")}, "sets": {}}
    print("\npipeline bubble and step time: medians of %d reps (case order alternating), %d steps each; "
          "load %.2f -> %.2f" % (a.reps, a.steps, load0[0], load1[0]))
    hdr = "%-20s %-5s %-12s %2s %3s %8s %8s %4s %8s %4s %10s %10s %6s"
    print(hdr % ("build", "model", "schedule", "P", "M", "bubble", "formula", "ok", "stages", "ok", "step ms", "ideal ms",
                 "x"))
    for name, _ in sets:
        r = raw[name]
        out = {"one_rank_step_ms": {}, "cases": {}, "raw": r}
        for k in r:
            if k.startswith("1rank_"):
                out["one_rank_step_ms"][k[6:]] = statistics.median(x["ms"] for x in r[k])
        for c in cases:
            k = case_key(*c)
            if k not in r:
                continue
            model, sched, P, M = c
            xs = r[k]
            bub = statistics.median(x["bubble"] for x in xs)
            ms = statistics.median(x["ms"] for x in xs)
            f = formula(sched, P, M)
            one = out["one_rank_step_ms"][model]
            ideal = one / P / (1 - f)
            acc = out["one_rank_step_ms"].get(model + ("" if M == 1 else "_accum%d" % M))
            ideal_acc = acc / P / (1 - f) if acc else None
            ok = abs(bub - f) <= 0.1 * f + 0.02
            st = [x["stages"] for x in xs if x.get("stages") is not None]
            fs = statistics.median(st) if st else None  # the formula for the stages as they ran (their busy times)
            ok_s = fs is not None and abs(bub - fs) <= 0.1 * fs + 0.02
            sims = [x["sim"] for x in xs if x.get("sim") is not None]
            sim = statistics.median(sims) if sims else None  # the simulator fed with this run's F, B, W
            ok_sim = sim is not None and abs(bub - sim) <= 0.1 * sim + 0.02
            fbw = [statistics.median(x["fbw_ms"][i] or 0.0 for x in xs) for i in range(3)] if "fbw_ms" in xs[0] else None
            out["cases"][k] = {"model": model, "schedule": sched, "P": P, "M": M, "bubble_fraction": bub,
                               "bubble_formula": f, "within": ok, "bubble_formula_stages": fs, "within_stages": ok_s,
                               "bubble_sim": sim, "within_sim": ok_sim, "fbw_ms": fbw,
                               "acts_inflight": xs[0].get("inflight"), "ledger_acts_peak": xs[0].get("ledger_acts_peak"),
                               "step_ms": ms, "ideal_ms": ideal,
                               "ratio": ms / ideal, "ideal_same_micro_ms": ideal_acc,
                               "ratio_same_micro": ms / ideal_acc if ideal_acc else None}
            sims_span = [x["sim_span"] for x in xs if x.get("sim_span") is not None]
            if sims_span:
                out["cases"][k]["bubble_sim_span"] = statistics.median(sims_span)
            print(hdr.replace("%8s %8s", "%8.3f %8.3f").replace("%10s %10s %6s", "%10.1f %10.1f %6.2f") %
                  (name, model, sched, P, M, bub, f, "ok" if ok else "no", "%.3f" % fs if fs is not None else "-",
                   "ok" if ok_s else "no", ms, ideal, ms / ideal) +
                  ("   same micro-batches: ideal %.1f, x %.2f" % (ideal_acc, ms / ideal_acc) if ideal_acc else ""))
        zb = [k for k in out["cases"] if out["cases"][k]["schedule"] in ("zb-h1", "zb-h2", "1f1b")
              and out["cases"][k]["P"] == 2 and out["cases"][k]["M"] > 1]
        if zb:
            print("\n%-20s zero bubble at P = 2: measured bubble beside the simulator fed with the run's F, B, W "
                  "(messages free); activations in flight per stage (bytes) beside the formula; the ledger's acts peak" % name)
            for k in zb:
                c = out["cases"][k]
                fl = c["acts_inflight"] or []
                print("%-20s %-5s %-6s M %d: bubble %.3f  sim %s %s  F/B/W %s ms  in flight %s  ledger %s" % (
                    name, c["model"], c["schedule"], c["M"], c["bubble_fraction"],
                    "%.3f" % c["bubble_sim"] if c["bubble_sim"] is not None else "-", "ok" if c["within_sim"] else "no",
                    "/".join("%.2f" % v for v in c["fbw_ms"]) if c["fbw_ms"] else "-",
                    " ".join("%s (formula %s)" % (int(p), int(q)) for p, q in fl if p is not None),
                    " ".join(str(x) for x in c["ledger_acts_peak"] or [])))
            out["predicted"] = predict(out["cases"], models)
            for m, rows in out["predicted"].items():
                for r in rows:
                    print("%-20s PREDICTED %s P %d M %2d (stage costs 2/P of P = 2's): 1f1b %.3f  zb-h1 %.3f  zb-h2 %.3f "
                          "(its own window %.3f)" % (name, m, r["P"], r["M"], r["1f1b"], r["zbh1"], r["zbh2"],
                                                      r["zbh2_span"]))
        for m, v in sorted(out["one_rank_step_ms"].items()):
            print("%-20s 1-rank step (ch02_ddp, 1 rank, same batch%s) %s: %.1f ms" % (
                name, ", --accum " + m.split("accum")[1] if "accum" in m else "", m.split("_")[0], v))
        res["sets"][name] = out
    for k, why in skipped.items():
        print("skipped %s: %s" % (k, why))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("results: %s" % a.out)


if __name__ == "__main__":
    main()
