#!/usr/bin/env python3
"""plots.py — the tutorial's figures, drawn from the programs' JSON results (notes/tour.md).

    python3 common/scripts/plots.py [--results results] [--out notes/figures] [--only NAME,...]
    python3 common/scripts/plots.py --check [--out notes/figures]   (every PNG there, none blank)

Every number comes from a file the programs wrote (--json, --trace, ch00_memory --json,
ch01_collbench --json); formulas are recomputed here from notes/design.md's table only to
draw them as outlines beside the measurement. The schematics are the exception: they are
drawn from a synthetic schedule (made-up durations, computed below) or by hand (the GPT's
units, plot_gpt.py), labelled "schematic" in the figure, and need no input. A figure whose inputs are missing is skipped
with one line saying which file to make (common/scripts/demo.sh makes them all); the exit
code is 0 unless a figure that had its inputs failed to draw.

Figures (--only NAME) and their inputs, relative to --results:
  memory, traffic  sweep/<strategy>_np<N>.json          strategy ddp zero1 zero2 zero3, one model
  ch00             ch00_paper.json, ch00_8b.json         ch00_memory --json
  ch00_gpt_acts    ch00_acts_s<S>.json, S = 1024 .. 16384 ch00_memory --seq S --json (plot_gpt.py)
  collbench        collbench_np<N>.json                  ch01_collbench --json
  timeline_ddp     ch02_naive.trace.json, ch02_bucketed.trace.json (+ the .json beside each)
  timeline_zero3   ch05_zero3.trace.json (+ ch05_zero3.json); ch05_zero3_p0.* (no prefetch) if there
  timeline_pipeline pipeline/<schedule>.trace.json       ch07_pipeline --trace (plot_pipeline.py)
  timeline_offload offload.trace.json                    ch08_offload --trace (plot_offload.py)
  loss             loss/<strategy>_np<N>.json            same model, batch, seed and steps
Schematics (no inputs; counted on their own line):
  schematic_ddp    with timeline_ddp: naive vs bucketed, one rank, synthetic durations
  schematic_zero3  with timeline_zero3: --prefetch 0 vs 1, one rank, synthetic durations
  gpt_units        --only gpt_units: the GPT as the strategies see it (plot_gpt.py)
  schematic_tp     --only schematic_tp: one tensor-parallel MLP block on 2 ranks, f and g (chapter 06)
  schematic_cp     --only schematic_cp: a sequence over 4 CP ranks, the K/V ring, the causal work (chapter 10)
Data figures (committed measurements, --data notes/data):
  zeror_cb         bench_zeror.json (make bench-zeror);  long_seq  bench_long.json (make bench-long, chapter 10)
  long_split       bench_long.json: SP, ring, Ulysses, hybrid bytes and step time, and on emulated nodes (chapter 10)
  experts          bench_experts.json (make bench-experts): drops, balance, all-to-all bytes, EP step and memory, trace (chapter 12)
  experts_groups   bench_experts.json beside bench_experts_two_groups.json: the old layout's step rows against two groups (12)
  experts_groups_zero1  the same for ZeRO-1's rows: bench_experts_zero1_old.json beside _two_groups.json (12)
  compress         bench_compress.json (make bench-compress): bytes per code, ZeRO++ across nodes, loss bands, link rates (13)
The results objects follow notes/design.md's --json contract; traces are Chrome traces
(common/base/trace.h: pid = rank, tid 0 compute, tid 1 communication).
"""
import argparse
import glob
import json
import os
import re
import sys

from zl_mpl import find_matplotlib  # common/scripts/zl_mpl.py

find_matplotlib()
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401
from matplotlib.patches import Patch, Rectangle  # noqa: E402

import plot_gpt  # noqa: E402  (common/scripts/plot_gpt.py: gpt_units, ch00_gpt_acts)
import plot_offload  # noqa: E402  (common/scripts/plot_offload.py: timeline_offload)
import plot_pipeline  # noqa: E402  (common/scripts/plot_pipeline.py: timeline_pipeline)
import plot_long  # noqa: E402  (common/scripts/plot_long.py: schematic_cp, long_seq)
import plot_experts  # noqa: E402  (common/scripts/plot_experts.py: experts, chapter 12)
import plot_compress  # noqa: E402  (common/scripts/plot_compress.py: compress, chapter 13)

STAGES = [("ddp", 0, "DDP (ZeRO-0)"), ("zero1", 1, "ZeRO-1"), ("zero2", 2, "ZeRO-2"), ("zero3", 3, "ZeRO-3")]
STAGE_OF = {s: k for s, k, _ in STAGES}
STAGE_LABEL = {s: lab for s, _, lab in STAGES}
WORLDS = [1, 2, 4, 8]
C_PARAMS, C_GRADS, C_OPT = "#4C72B0", "#DD8452", "#55A868"
DPI = 110

# ---- small helpers --------------------------------------------------------------------------


def load_json(path):
    with open(path) as f:
        return json.load(f)


def note(msg):
    print("  " + msg)


def bytes_unit(maxval):
    """(divisor, name) so that maxval reads between 1 and 1024."""
    for div, name in [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]:
        if maxval >= div:
            return div, name
    return 1, "bytes"


def strategy_key(res):
    """'ddp', 'zero1', ... from a results object (strategy may be 'ddp-bucketed')."""
    s = str(res.get("strategy", ""))
    for k in STAGE_OF:
        if s == k or s.startswith(k + "-") or s.startswith(k + "_"):
            return k
    ch = str(res.get("chapter", ""))
    for k, stage in STAGE_OF.items():
        if ch.startswith("0%d_" % (2 + stage)):
            return k
    return s


def formula_states(stage, psi, world, precision, optimizer):
    """notes/design.md's table: bytes per rank (params, grads, master+optimizer)."""
    wb = 2.0 if precision == "bf16" else 4.0
    master = 4.0 if precision == "bf16" else 0.0
    nstates = 2 if optimizer == "adamw" else 1  # AdamW m, v; SGD momentum
    k = master + 4.0 * nstates
    n = float(world)
    p = wb * psi / (n if stage >= 3 else 1)
    g = wb * psi / (n if stage >= 2 else 1)
    o = k * psi / (n if stage >= 1 else 1)
    return p, g, o


def formula_text(stage, precision, optimizer):
    wb = 2 if precision == "bf16" else 4
    k = (4 if precision == "bf16" else 0) + 4 * (2 if optimizer == "adamw" else 1)
    if stage == 0:
        return "%dΨ" % (2 * wb + k)
    if stage == 1:
        return "%dΨ + %dΨ/N" % (2 * wb, k)
    if stage == 2:
        return "%dΨ + %dΨ/N" % (wb, wb + k)
    return "%dΨ/N" % (2 * wb + k)


def per_rank_max(res, key):
    rows = res.get("memory", {}).get("per_rank", [])
    vals = [r.get(key, 0) or 0 for r in rows]
    return max(vals) if vals else None


def savefig(fig, outdir, name):
    path = os.path.join(outdir, name + ".png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print("  wrote %s" % path)
    return path


def sweep_runs(results):
    """{(strategy, N): results object} from results/sweep/*.json."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "sweep", "*.json"))):
        try:
            res = load_json(path)
        except (OSError, ValueError) as e:
            note("skipping %s: %s" % (path, e))
            continue
        if "memory" not in res:
            continue
        runs[(strategy_key(res), int(res.get("world", 0)))] = res
    return runs


# ---- figure 1: memory per rank, stacked, measured vs formula --------------------------------


def fig_memory(results, outdir):
    runs = sweep_runs(results)
    if not runs:
        return "no results/sweep/*.json (make demo, or make demo CH=02..05, writes them)"
    ref = next(iter(runs.values()))
    psi = float(ref["params"])
    prec, opt = ref.get("precision", "fp32"), ref.get("optimizer", "adamw")
    shapes = {(r["params"], r.get("precision"), r.get("optimizer")) for r in runs.values()}
    if len(shapes) > 1:
        return "results/sweep/*.json mix model sizes or precisions %s: re-run the sweep" % sorted(map(str, shapes))
    worlds = sorted(set(WORLDS) | {w for _, w in runs})
    top = 0
    for s, stage, _ in STAGES:
        for n in worlds:
            top = max(top, sum(formula_states(stage, psi, n, prec, opt)))
            r = runs.get((s, n))
            if r:
                top = max(top, sum(per_rank_max(r, k) or 0 for k in ("params", "grads", "master", "optim")))
    div, unit = bytes_unit(top)
    fig, axes = plt.subplots(1, 4, figsize=(13, 4.8), sharey=True)
    for ax, (s, stage, label) in zip(axes, STAGES):
        xs = list(range(len(worlds)))
        for x, n in zip(xs, worlds):
            r = runs.get((s, n))
            fj = (r or {}).get("memory", {}).get("formula")
            if fj and all(k in fj for k in ("params", "grads", "optim")):  # the program's own formula
                fp, fg, fo = fj["params"] / div, fj["grads"] / div, (fj.get("master", 0) + fj["optim"]) / div
            else:  # no run at this N: notes/design.md's table, recomputed here
                fp, fg, fo = (v / div for v in formula_states(stage, psi, n, prec, opt))
            if r:
                mp = per_rank_max(r, "params") / div
                mg = per_rank_max(r, "grads") / div
                mo = (per_rank_max(r, "master") + per_rank_max(r, "optim")) / div
                ax.bar(x, mp, 0.6, color=C_PARAMS)
                ax.bar(x, mg, 0.6, bottom=mp, color=C_GRADS)
                ax.bar(x, mo, 0.6, bottom=mp + mg, color=C_OPT)
            else:
                ax.text(x, fp + fg + fo + top / div * 0.01, "not run", ha="center", va="bottom", fontsize=8,
                        color="0.35")
            # the formula: one dashed outline per component, slightly wider than the bar
            y = 0
            for h in (fp, fg, fo):
                ax.add_patch(Rectangle((x - 0.38, y), 0.76, h, fill=False, ls="--", lw=1.2, ec="black"))
                y += h
        ax.set_xticks(xs)
        ax.set_xticklabels(["N=%d" % n for n in worlds])
        ax.set_xlim(-0.6, len(worlds) - 0.4)
        ax.set_title("%s: %s" % (label, formula_text(stage, prec, opt)), fontsize=11)
        ax.set_xlabel("ranks (N)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("model states per rank (%s)" % unit)
    axes[0].set_ylim(0, top / div * 1.08)
    handles = [Patch(color=C_PARAMS, label="params"), Patch(color=C_GRADS, label="grads"),
               Patch(color=C_OPT, label="optimizer (+ fp32 master)" if prec == "bf16" else "optimizer (Adam m, v)"),
               Patch(fill=False, ls="--", ec="black", label="formula (notes/design.md)")]
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False)
    fig.suptitle("Memory per rank, measured by the ledger (bars) vs the formula (dashed), "
                 "Ψ = %s params, %s, %s" % (f"{int(psi):,}", prec, opt), fontsize=12)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    savefig(fig, outdir, "memory_per_rank")
    return None


# ---- figure 6: traffic per step per rank, measured vs formula ------------------------------


def fig_traffic(results, outdir):
    runs = sweep_runs(results)
    runs = {k: r for k, r in runs.items() if k[1] > 1 and "comm" in r}
    if not runs:
        return "no multi-rank results/sweep/*.json with a comm object (make demo CH=02..05)"
    ref = next(iter(runs.values()))
    psi = float(ref["params"])
    wb = 2.0 if ref.get("precision") == "bf16" else 4.0
    worlds = sorted({w for _, w in runs})
    fig, (ax, axn) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.4, 1]})
    width = 0.8 / len(worlds)
    top = max(max(r["comm"]["bytes_per_step_per_rank"], r["comm"].get("formula_bytes_per_step_per_rank", 0))
              for r in runs.values())
    div, unit = bytes_unit(top)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3"]
    for i, n in enumerate(worlds):
        for j, (s, stage, _) in enumerate(STAGES):
            x = j + (i - (len(worlds) - 1) / 2) * width
            r = runs.get((s, n))
            fb = (3.0 if stage == 3 else 2.0) * (n - 1) / n * psi * wb
            if r:
                ax.bar(x, r["comm"]["bytes_per_step_per_rank"] / div, width * 0.9, color=colors[i % len(colors)],
                       label="measured, N=%d" % n if j == 0 else None)
            ax.add_patch(Rectangle((x - width * 0.5, 0), width, fb / div, fill=False, ls="--", lw=1.2, ec="black"))
    ax.set_xticks(range(len(STAGES)))
    ax.set_xticklabels([lab for _, _, lab in STAGES])
    ax.set_xlabel("strategy (bars: N ranks)")
    ax.set_ylabel("bytes sent per rank per step (%s)" % unit)
    ax.set_ylim(0, top / div * 1.15)
    ax.set_title("Measured (bars) vs ring formula (dashed)")
    h, lab = ax.get_legend_handles_labels()
    h.append(Patch(fill=False, ls="--", ec="black"))
    lab.append("formula 2(N−1)/N·Ψ, ZeRO-3 3(N−1)/N·Ψ")
    ax.legend(h, lab, fontsize=9, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    # right: normalised by Ψ·bytes per element, so the formula reads 2(N−1)/N and 3(N−1)/N
    ns = [1 + 0.05 * k for k in range(0, 141)]
    axn.plot(ns, [2 * (n - 1) / n for n in ns], "k--", lw=1, label="2(N−1)/N  (DDP, ZeRO-1, ZeRO-2)")
    axn.plot(ns, [3 * (n - 1) / n for n in ns], "k:", lw=1.4, label="3(N−1)/N  (ZeRO-3)")
    markers = {"ddp": "o", "zero1": "s", "zero2": "^", "zero3": "D"}
    for s, _, lab in STAGES:
        pts = sorted((n, r["comm"]["bytes_per_step_per_rank"] / (psi * wb)) for (ss, n), r in runs.items() if ss == s)
        if pts:
            axn.plot([p[0] for p in pts], [p[1] for p in pts], markers[s], ms=8, mfc="none", mew=1.6, label=lab)
    axn.set_xlabel("ranks (N)")
    axn.set_ylabel("bytes per rank per step / (Ψ × bytes per element)")
    axn.set_title("Normalised: approaches 2Ψ (DDP, ZeRO-1/2) and 3Ψ (ZeRO-3)")
    axn.set_ylim(0, 3.3)
    axn.grid(alpha=0.3)
    axn.legend(fontsize=8, loc="lower right")
    fig.suptitle("Communication per step per rank, Ψ = %s params (%s)" % (f"{int(psi):,}", ref.get("precision", "fp32")),
                 fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    savefig(fig, outdir, "traffic_per_step")
    return None


# ---- figure 2: ch00, the ZeRO paper's Figure 1 and an 8B model -----------------------------


def ch00_rows(doc):
    """[(stage, params, grads, optim_total, total)] from ch00_memory --json, whatever its nesting."""
    rows = doc.get("stages") or doc.get("rows") or doc.get("table") or []
    out = []
    for r in rows:
        st = r.get("stage")
        if isinstance(st, str):
            m = re.search(r"(\d)", st)
            st = int(m.group(1)) if m else (0 if "ddp" in st.lower() else None)
        if st is None:
            continue
        p, g = float(r.get("params", 0)), float(r.get("grads", 0))
        o = float(r.get("optim", 0)) + float(r.get("master", 0))
        if "optimizer" in r and isinstance(r["optimizer"], (int, float)):
            o = float(r["optimizer"])
        total = float(r.get("total", p + g + o))
        out.append((int(st), p, g, o, total))
    return sorted(out)


def fig_ch00(results, outdir):
    paper = os.path.join(results, "ch00_paper.json")
    big = os.path.join(results, "ch00_8b.json")
    have = [p for p in (paper, big) if os.path.exists(p)]
    if not have:
        return "no results/ch00_paper.json or ch00_8b.json (make demo CH=00: ch00_memory --json)"
    fig, axes = plt.subplots(1, len(have), figsize=(6.5 * len(have), 5))
    if len(have) == 1:
        axes = [axes]
    names = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
    for ax, path in zip(axes, have):
        doc = load_json(path)
        rows = ch00_rows(doc)
        if not rows:
            raise ValueError("%s: no per-stage rows" % path)
        formulas = {int(r["stage"]): r.get("formula", "") for r in doc.get("stages", []) if "stage" in r}
        xs = [r[0] for r in rows]
        gb = 1e9  # the paper prints GB (10^9 bytes)
        p = [r[1] / gb for r in rows]
        g = [r[2] / gb for r in rows]
        o = [r[3] / gb for r in rows]
        k = doc.get("k")
        ax.bar(xs, p, 0.6, color=C_PARAMS, label="params (%sΨ)" % doc.get("param_bytes", "?"))
        ax.bar(xs, g, 0.6, bottom=p, color=C_GRADS, label="grads (%sΨ)" % doc.get("grad_bytes", "?"))
        ax.bar(xs, o, 0.6, bottom=[a + b for a, b in zip(p, g)], color=C_OPT,
               label="optimizer states (KΨ, K = %g)" % k if k is not None else "optimizer states")
        top = max(r[4] for r in rows) / gb
        for x, r in zip(xs, rows):
            ax.text(x, r[4] / gb + top * 0.01, "%.1f GB" % (r[4] / gb), ha="center", va="bottom", fontsize=10)
        ax.set_xticks(xs)
        ax.set_xticklabels(["%s\n%s" % (names[x], formulas.get(x, "")) for x in xs])
        psi = float(doc.get("psi", doc.get("params", 0)))
        world = doc.get("world", doc.get("N", "?"))
        # a reference, not a result: the memory of one 80 GB accelerator (A100-80G, H100)
        if top > 80:
            ax.axhline(80, color="C3", ls=":", lw=1.5, label="one 80 GB GPU (reference)")
        ax.set_ylabel("model states per rank (GB = 10⁹ bytes)")
        ax.set_xlabel("ZeRO stage, and its bytes per rank (Ψ params, N ranks)")
        what = "ZeRO paper, Figure 1" if os.path.basename(path) == "ch00_paper.json" else "An %.3g B model" % (psi / 1e9)
        ax.set_title("%s: Ψ = %.3g B params, N = %s ranks, %s" % (what, psi / 1e9, world, doc.get("precision", "")),
                     fontsize=11)
        ax.set_ylim(0, top * 1.15)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=9, loc="upper right")
    fig.suptitle("Model states per rank by ZeRO stage (ch00_memory)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    savefig(fig, outdir, "ch00_memory")
    return None


# ---- figure 3: collbench busbw vs message size ---------------------------------------------


def human_bytes(x, _pos=None):
    """4096 -> '4K', 1048576 -> '1M' (powers of 1024, as collbench's -b/-e flags)."""
    for div, sfx in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if x >= div:
            return "%g%s" % (x / div, sfx)
    return "%g" % x


def collbench_rows(doc):
    """[(op, impl, nbytes, busbw_GBps)] from ch01_collbench --json."""
    rows = doc.get("rows") or doc.get("results") or []
    out = []
    for r in rows:
        op = r.get("op") or r.get("collective")
        impl = r.get("impl") or r.get("collectives") or r.get("variant")
        nbytes = r.get("nbytes", r.get("bytes", r.get("size")))
        bw = r.get("busbw_gbs", r.get("busbw_gbps", r.get("busbw")))
        if None in (op, impl, nbytes, bw):
            continue
        out.append((str(op), str(impl), float(nbytes), float(bw)))
    return out


def fig_collbench(results, outdir):
    files = sorted(glob.glob(os.path.join(results, "collbench_np*.json")),
                   key=lambda p: int(re.search(r"np(\d+)", p).group(1)))
    if not files:
        return "no results/collbench_np*.json (make demo CH=01: ch01_collbench --json)"
    docs = [(int(re.search(r"np(\d+)", p).group(1)), load_json(p)) for p in files]
    ops = []
    for _, d in docs:
        for r in collbench_rows(d):
            if r[0] not in ops:
                ops.append(r[0])
    if not ops:
        raise ValueError("collbench JSON without rows")
    ncols = min(3, len(ops))
    nrows = (len(ops) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 0.6 + 3.9 * nrows), squeeze=False)
    styles = {"vendor": "-", "ring": "--"}
    for ax in axes.flat[len(ops):]:
        ax.set_visible(False)
    for ax, op in zip(axes.flat, ops):
        for ci, (n, d) in enumerate(docs):
            for impl in ("vendor", "ring"):
                pts = sorted((r[2], r[3]) for r in collbench_rows(d) if r[0] == op and r[1] == impl)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[impl], marker="o", ms=3,
                            color="C%d" % ci, label="%s, %d ranks" % (impl, n))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(human_bytes))
        ax.set_title(op.replace("_", "-"))
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    d0 = docs[0][1]
    fig.suptitle("Bus bandwidth vs message size: vendor (%s) vs our ring (solutions/ring.c), %s ranks, %s, median of %s iterations"
                 % (d0.get("backend", "MPI"), " and ".join(str(n) for n, _ in docs), d0.get("dtype", "float"),
                    d0.get("iters", "?")), fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    savefig(fig, outdir, "collbench_busbw")
    return None


# ---- figure 4: timelines from the Chrome traces ---------------------------------------------

CATS = [  # (category, colour, keywords in the event name or its args.op) — first match wins
    ("wait", "#F0F0F0", ("wait", "sync")),
    ("control", "#7F7F7F", ("control", "ctl_")),
    ("forward", "#4C72B0", ("forward", "fwd", "loss")),
    ("backward", "#DD8452", ("backward", "bwd")),
    ("optimizer", "#55A868", ("optim", "adam", "sgd", "update", "cast")),
    ("all-reduce", "#C44E52", ("all_reduce", "allreduce", "all-reduce")),
    ("reduce-scatter", "#8172B3", ("reduce_scatter", "reducescatter", "reduce-scatter")),
    ("all-gather", "#937860", ("all_gather", "allgather", "all-gather", "gather")),
    ("free", "#DA8BC3", ("free", "release")),
    ("broadcast", "#8C8C8C", ("broadcast", "bcast")),
]


def ev_category(name):
    low = name.lower()
    if low.startswith("["):  # a communication event: its op decides
        low = low[1:low.index("]")] if "]" in low else low
    for cat, color, keys in CATS:
        if any(k in low for k in keys):
            return cat, color
    return "other", "#CCCCCC"


def trace_events(path):
    doc = load_json(path)
    evs = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    out = []
    for e in evs:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        name = str(e.get("name", ""))
        args = e.get("args") or {}
        if int(e.get("tid", 0)) == 1 and isinstance(args, dict) and args.get("op"):
            name = "[%s] %s" % (args["op"], name)  # comm events are named by their tag; op says what
        out.append((int(e.get("pid", 0)), int(e.get("tid", 0)), float(e["ts"]), float(e["dur"]), name))
    return out


def step_window(evs):
    """(t0, t1) of rank 0's typical step: the one of median duration, leaving out step 0 (warm-up).
    Without 'step ...' events on the compute row: the last 40% of the trace."""
    steps = sorted((ts, ts + d) for pid, tid, ts, d, name in evs
                   if pid == 0 and tid == 0 and re.match(r"^step\b", name.lower()))
    if len(steps) > 2:
        steps = steps[1:]
    if steps:
        by_len = sorted(steps, key=lambda w: w[1] - w[0])
        return by_len[(len(by_len) - 1) // 2]
    t0 = min(e[2] for e in evs)
    t1 = max(e[2] + e[3] for e in evs)
    return t0 + 0.6 * (t1 - t0), t1


def draw_timeline(ax, evs, title, span):
    """One step of every rank: two rows per rank (compute, comm). span: the window length (us)."""
    t0, t1 = step_window(evs)
    pad = 0.03 * span
    lo, hi = t0 - pad, t1 + pad  # only this step's events; the axis is as long as the longest panel's
    ranks = sorted({e[0] for e in evs})
    labels, seen = [], {}
    for i, r in enumerate(ranks):
        for tid, rowname in ((0, "compute"), (1, "comm")):
            y = (len(ranks) - 1 - i) * 2.4 + (1.1 if tid == 0 else 0)
            labels.append((y + 0.45, "rank %d %s" % (r, rowname)))
            for pid, t, ts, d, name in evs:
                if pid != r or t != tid or ts + d < lo or ts > hi:
                    continue
                if tid == 0 and re.match(r"^step\b", name.lower()):
                    continue  # the enclosing step span would hide its phases
                cat, color = ev_category(name)
                style = dict(facecolors=color, edgecolor="white", linewidth=0.3)
                if cat == "wait":  # waiting is idle time: hatched, not a solid block
                    style = dict(facecolors=color, edgecolor="#999999", linewidth=0.3, hatch="////")
                ax.broken_barh([((ts - t0) / 1000.0, d / 1000.0)], (y, 0.9), **style)
                seen[cat] = color
    ax.axvline(0, color="black", lw=0.8, alpha=0.5)
    ax.axvline((t1 - t0) / 1000.0, color="black", lw=0.8, alpha=0.5)
    ax.set_yticks([y for y, _ in labels])
    ax.set_yticklabels([lab for _, lab in labels], fontsize=9)
    ax.set_xlim(-pad / 1000.0, (span + pad) / 1000.0)
    ax.set_xlabel("time since the start of rank 0's step (ms); thin lines: rank 0's step begins and ends")
    ax.set_title(title, fontsize=10.5)
    ax.grid(axis="x", alpha=0.3)
    return seen


def results_beside(trace_path):
    """The results object written by the same run as a trace (X.trace.json -> X.json), or None."""
    jpath = trace_path[: -len(".trace.json")] + ".json"
    if not os.path.exists(jpath):
        return None
    try:
        return load_json(jpath)
    except (OSError, ValueError):
        return None


def overlap_saved_ms(res):
    """The report's overlap figure — step time saved against naive in the same alternating run, in
    ms, negative when overlap loses — if this results object carries one (a numeric field of
    "overlap" whose name says "saved"); None otherwise."""
    ov = (res or {}).get("overlap") or {}
    if not isinstance(ov, dict):
        return None
    for key in sorted(ov):
        v = ov[key]
        if "saved" in key.lower() and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v) * (1e-3 if key.lower().endswith("_us") else 1.0)
    return None


def run_summary(trace_path):
    """' — 2 ranks on cpu, median step 12.3 ms' from the results JSON beside a trace."""
    res = results_beside(trace_path)
    if res is None:
        return ""
    parts = []
    dev = res.get("device")
    if dev:
        n = int(res.get("world", 0))
        parts.append("%d rank%s on %s" % (n, "" if n == 1 else "s", dev))
    if res.get("median_step_ms") is not None:
        parts.append("median step %.3g ms" % float(res["median_step_ms"]))
    parts.append("the step shown: rank 0's step of median length")
    return "\n" + ", ".join(parts)


def step_difference(base_trace, other_trace, base_name, other_name):
    """The measured step-time difference for a figure title: the report's own overlap figure when
    the results JSON has one, else the difference of the two runs' median steps."""
    a, b = results_beside(base_trace), results_beside(other_trace)
    saved = overlap_saved_ms(b)
    if saved is not None:
        return "measured: %s saves %+.3g ms per step against %s (the report's figure; negative: it loses)" % (
            other_name, saved, base_name)
    if a and b and a.get("median_step_ms") is not None and b.get("median_step_ms") is not None:
        ma, mb = float(a["median_step_ms"]), float(b["median_step_ms"])
        d = ma - mb
        return "measured: %s saves %+.3g ms per step against %s (%+.0f%%; median steps %.3g vs %.3g ms, two separate runs)" % (
            other_name, d, base_name, 100.0 * d / ma if ma else 0.0, mb, ma)
    return ""


def fig_timelines_ddp(results, outdir):
    paths = [(os.path.join(results, "ch02_naive.trace.json"),
              "DDP naive: one all-reduce of all gradients after the whole backward"),
             (os.path.join(results, "ch02_bucketed.trace.json"),
              "DDP bucketed: a bucket's all-reduce starts as soon as its layers' backward is done")]
    have = [(p, t + run_summary(p)) for p, t in paths if os.path.exists(p)]
    if not have:
        return "no results/ch02_naive.trace.json or ch02_bucketed.trace.json (make demo CH=02: ch02_ddp --trace)"
    diff = step_difference(paths[0][0], paths[1][0], "naive", "bucketed") if len(have) == 2 else ""
    return draw_timeline_fig(have, outdir, "timeline_ddp",
                             "Measured timeline of one DDP step per rank, same time scale (ch02_ddp --trace)"
                             + ("\n" + diff if diff else ""))


def fig_timelines_zero3(results, outdir):
    paths = [(os.path.join(results, "ch05_zero3_p0.trace.json"),
              "ZeRO-3, --prefetch 0: each unit's all-gather starts only when the unit is needed"),
             (os.path.join(results, "ch05_zero3.trace.json"),
              "ZeRO-3, --prefetch 1: all-gather each unit before its forward and again before its backward, "
              "the next one prefetched; reduce-scatter its grads")]
    if not os.path.exists(paths[1][0]):
        return "no results/ch05_zero3.trace.json (make demo CH=05: ch05_zero3 --trace)"
    have = [(p, t + run_summary(p)) for p, t in paths if os.path.exists(p)]
    diff = step_difference(paths[0][0], paths[1][0], "--prefetch 0", "--prefetch 1") if len(have) == 2 else ""
    return draw_timeline_fig(have, outdir, "timeline_zero3",
                             "Measured timeline of one ZeRO-3 step per rank, same time scale (ch05_zero3 --trace)"
                             + ("\n" + diff if diff else ""))


PIPELINE_ORDER = ["naive", "gpipe", "1f1b", "interleaved"]


def fig_timeline_pipeline(results, outdir):
    paths = glob.glob(os.path.join(results, "pipeline", "*.trace.json"))
    if not paths:
        return "no results/pipeline/<schedule>.trace.json (make demo CH=07: ch07_pipeline --schedule S --trace ...)"
    sched = {os.path.basename(p)[:-len(".trace.json")]: p for p in paths}
    order = [k for k in PIPELINE_ORDER if k in sched] + sorted(k for k in sched if k not in PIPELINE_ORDER)
    png = os.path.join(outdir, "timeline_pipeline.png")
    if plot_pipeline.plot_pipeline({k: sched[k] for k in order}, png) == 0:
        raise ValueError("no trace under %s had a 'step N' event" % os.path.join(results, "pipeline"))
    print("  wrote %s" % png)
    return None


def fig_timeline_offload(results, outdir):
    path = os.path.join(results, "offload.trace.json")
    if not os.path.exists(path):
        return "no results/offload.trace.json (make demo CH=08: ch08_offload --trace results/offload.trace.json)"
    plot_offload.plot_trace(path, os.path.join(outdir, "timeline_offload.png"))
    return None


def fig_gpt_acts(results, outdir):
    missing = [s for s in plot_gpt.SEQS if not os.path.exists(os.path.join(results, "ch00_acts_s%d.json" % s))]
    if missing:
        return "no results/ch00_acts_s<S>.json for S = %s (make demo CH=00: ch00_memory %s --seq S --json ...)" % (
            " ".join(map(str, missing)), " ".join(plot_gpt.ACTS_ARGS))
    return plot_gpt.fig_acts(results, outdir, None)


def schematic_gpt_units(outdir):
    plot_gpt.fig_units(None, outdir, None)


# ---- schematics: the schedule each strategy aims for, from synthetic durations ---------------
# Not measurements: made-up durations in "time units", and the assumption that communication runs
# on a resource of its own (a GPU's NCCL stream and links, or a free core), so it never slows the
# compute down. That is the picture the pages start from; the measured timelines come after it.

SCHEM_U = 4                                   # units (layers)
SCHEM_T = dict(fwd=1.0, bwd=2.0, opt=1.0, ar=1.4, ag=0.8, rs=0.8)  # time units per unit


def _stream(free, at, dur):
    """Start and end of an operation issued at `at` on a stream that is free from `free`."""
    start = max(at, free)
    return start, start + dur


def schedule_ddp(bucket_units):
    """(compute, comm, step end) of one DDP step: bucket_units = units per bucket (U: naive)."""
    T, U = SCHEM_T, SCHEM_U
    comp, comm, t, free = [], [], 0.0, 0.0
    for u in range(U):
        comp.append((t, T["fwd"], "forward", "fwd %d" % u))
        t += T["fwd"]
    for i, u in enumerate(reversed(range(U))):
        comp.append((t, T["bwd"], "backward", "bwd %d" % u))
        t += T["bwd"]
        last_of_bucket = (i + 1) % bucket_units == 0 or u == 0
        if last_of_bucket and bucket_units < U:  # bucketed: launch as soon as the bucket is done
            n = min(bucket_units, i + 1 - (i // bucket_units) * bucket_units)
            a, b = _stream(free, t, T["ar"] * n)
            comm.append((a, b - a, "all-reduce", "bucket %d" % (i // bucket_units)))
            free = b
    if bucket_units >= U:  # naive: one all-reduce of everything after the backward
        a, b = _stream(free, t, T["ar"] * U)
        comm.append((a, b - a, "all-reduce", "all gradients"))
        free = b
    if free > t:
        comp.append((t, free - t, "wait", "wait grads"))
        t = free
    comp.append((t, T["opt"], "optimizer", "optimizer"))
    return comp, comm, t + T["opt"]


def schedule_zero3(prefetch):
    """(compute, comm, step end) of one ZeRO-3 step with this prefetch depth (solutions/zero3.c's
    order: gather_acquire(e) issues e..e+prefetch, a unit's reduce-scatter is queued after its
    backward, the communication stream runs in issue order)."""
    T, U = SCHEM_T, SCHEM_U
    events = [("forward", u) for u in range(U)] + [("backward", u) for u in reversed(range(U))]
    comp, comm, t, free, done = [], [], 0.0, 0.0, {}
    for e, (phase, u) in enumerate(events):
        for j in range(e, min(e + prefetch, len(events) - 1) + 1):
            if j not in done:
                a, b = _stream(free, t, T["ag"])
                comm.append((a, b - a, "all-gather", "ag %d" % events[j][1]))
                free = done[j] = b
        if done[e] > t:
            comp.append((t, done[e] - t, "wait", "wait"))
            t = done[e]
        d = T["fwd"] if phase == "forward" else T["bwd"]
        comp.append((t, d, phase, "%s %d" % ("fwd" if phase == "forward" else "bwd", u)))
        t += d
        if phase == "backward":
            a, b = _stream(free, t, T["rs"])
            comm.append((a, b - a, "reduce-scatter", "rs %d" % u))
            free = b
    if free > t:
        comp.append((t, free - t, "wait", "wait"))
        t = free
    comp.append((t, T["opt"], "optimizer", "opt"))
    return comp, comm, t + T["opt"]


def draw_schedule(ax, comp, comm, title, span):
    colors = {c: col for c, col, _ in CATS}
    for y, rows in ((1.1, comp), (0.0, comm)):
        for ts, d, cat, label in rows:
            style = dict(facecolors=colors.get(cat, "#CCCCCC"), edgecolor="white", linewidth=0.5)
            if cat == "wait":
                style = dict(facecolors=colors["wait"], edgecolor="#999999", linewidth=0.5, hatch="////")
            ax.broken_barh([(ts, d)], (y, 0.9), **style)
            if d >= 0.7:
                ax.text(ts + d / 2, y + 0.45, label, ha="center", va="center", fontsize=7.5,
                        color="black" if cat == "wait" else "white")
    ax.set_yticks([0.45, 1.55])
    ax.set_yticklabels(["comm stream", "compute"], fontsize=9)
    ax.set_xlim(-0.2, span + 0.2)
    ax.set_xlabel("time (synthetic units)")
    ax.set_title(title, fontsize=10.5)
    ax.grid(axis="x", alpha=0.3)


def draw_schematic(outdir, name, panels, suptitle):
    """panels: [(title, (compute, comm, end))]; one rank, one step each, same scale."""
    span = max(end for _, (_, _, end) in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 1.2 + 2.0 * len(panels)), squeeze=False)
    for ax, (title, (comp, comm, end)) in zip(axes[:, 0], panels):
        draw_schedule(ax, comp, comm, "%s — step %.1f units" % (title, end), span)
        ax.axvline(end, color="black", lw=0.8, alpha=0.5)
    cats = [c for c, _, _ in CATS if any(c == ev[2] for _, (cp, cm, _) in panels for ev in cp + cm)]
    handles = [Patch(facecolor=col, edgecolor="#999999", hatch="////" if c == "wait" else None,
                     label="wait (idle)" if c == "wait" else c) for c, col, _ in CATS if c in cats]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
    fig.suptitle("SCHEMATIC (synthetic durations, not a measurement)\n" + suptitle, fontsize=12)
    fig.tight_layout(rect=(0, 0.06, 1, 0.92))
    savefig(fig, outdir, name)


def schematic_ddp(outdir):
    naive, bucketed = schedule_ddp(SCHEM_U), schedule_ddp(2)
    draw_schematic(outdir, "schematic_ddp", [
        ("naive: the all-reduce waits for the whole backward", naive),
        ("bucketed (2 units per bucket): a bucket's all-reduce starts when its last unit's backward ends", bucketed)],
        "Schematic of one DDP step (one rank): naive vs bucketed — saves %.1f of %.1f units, "
        "if communication has a resource of its own" % (naive[2] - bucketed[2], naive[2]))


def schematic_zero3(outdir):
    p0, p1 = schedule_zero3(0), schedule_zero3(1)
    draw_schematic(outdir, "schematic_zero3", [
        ("--prefetch 0: gather each unit when it is needed, compute waits", p0),
        ("--prefetch 1: the next unit's gather is issued before the current unit computes", p1)],
        "Schematic of one ZeRO-3 step (one rank): gather, compute, discard — prefetch saves %.1f of %.1f units, "
        "if communication has a resource of its own" % (p0[2] - p1[2], p0[2]))


def schematic_tp(outdir):
    """One MLP block on T = 2 ranks (Megatron's column-then-row split): which slice of each matrix
    a rank holds, where f and g sit, and what they do forward and backward. Drawn by hand."""
    from matplotlib.patches import FancyArrowPatch
    fig, ax = plt.subplots(figsize=(13, 5.2))
    ax.set_xlim(0, 13)
    ax.set_ylim(0, 5.2)
    ax.axis("off")
    rank_col = ["#4C72B0", "#DD8452"]

    def box(x, y, w, h, text, color, alpha=1.0, fs=9):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=0.8, alpha=alpha))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs,
                color="white" if alpha > 0.6 and color != "#EEEEEE" else "black")

    def arrow(x0, y0, x1, y1, color="black"):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=12, lw=1.0, color=color))

    # the input x, whole on both ranks
    for r, y in enumerate((3.0, 1.0)):
        ax.text(0.15, y + 0.45, "rank %d" % r, fontsize=10, color=rank_col[r], weight="bold", va="center")
        box(1.0, y, 1.0, 0.9, "x\n(B, h)\nwhole", "#EEEEEE")
        arrow(2.0, y + 0.45, 3.5, y + 0.45)
        # column-parallel W1: rank r holds rows r of W1 (= output columns r)
        box(3.5, y - 0.1, 1.9, 1.1, "x · W1_%dᵀ + b1_%d\ncolumn-parallel\n(ffn/T, h) slice" % (r, r), rank_col[r])
        arrow(5.4, y + 0.45, 6.0, y + 0.45)
        box(6.0, y + 0.1, 0.9, 0.7, "GELU", rank_col[r], alpha=0.55)
        arrow(6.9, y + 0.45, 7.5, y + 0.45)
        box(7.5, y - 0.1, 1.9, 1.1, "u_%d · W2_%dᵀ\nrow-parallel\n(h, ffn/T) slice" % (r, r), rank_col[r])
        arrow(9.4, y + 0.45, 10.5, y + 0.45)
        box(11.3, y, 1.4, 0.9, "+ b2 → y\n(B, h) whole", "#EEEEEE")
        arrow(10.9, y + 0.45, 11.3, y + 0.45)
    # f and g: the two points that talk
    for x, name, fwd, bwd in ((2.75, "f", "forward: identity", "backward: all-reduce dx"),
                              (10.7, "g", "forward: all-reduce y", "backward: identity")):
        ax.add_patch(Rectangle((x - 0.2, 0.8), 0.4, 3.3, facecolor="#55A868", edgecolor="black", lw=0.8, alpha=0.85))
        ax.text(x, 2.45, name, ha="center", va="center", fontsize=14, color="white", weight="bold")
        ax.text(x, 4.35, fwd, ha="center", fontsize=9)
        ax.text(x, 0.45, bwd, ha="center", fontsize=9)
    ax.text(6.45, 2.45, "u_r = GELU(x · W1_rᵀ + b1_r): rank r's ffn/T columns,\n"
            "exactly the rows of W2 it holds — nothing to send", ha="center", va="center", fontsize=9, style="italic")
    ax.text(6.5, 4.85, "per block: one all-reduce of (B, h) forward (g), one backward (f); weights, their "
            "gradients and the (B, ffn) activation never move", ha="center", fontsize=9.5)
    fig.suptitle("SCHEMATIC (drawn by hand, not a measurement)\n"
                 "Tensor parallel MLP block on T = 2 ranks: column-parallel, GELU, row-parallel (Megatron's f and g)",
                 fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    savefig(fig, outdir, "schematic_tp")


SCHEMATICS = [  # (drawn with this figure of FIGURES, or a --only name of its own; function, the PNG it writes)
    ("timeline_ddp", schematic_ddp, "schematic_ddp"), ("timeline_zero3", schematic_zero3, "schematic_zero3"),
    ("gpt_units", schematic_gpt_units, "gpt_units"), ("schematic_tp", schematic_tp, "schematic_tp"),
    ("schematic_cp", plot_long.schematic_cp, "schematic_cp"),
]


def draw_timeline_fig(items, outdir, name, suptitle):
    loaded = []
    for path, title in items:
        evs = trace_events(path)
        if not evs:
            raise ValueError("%s: no complete ('X') events" % path)
        loaded.append((evs, title))
    span = max(b - a for a, b in (step_window(evs) for evs, _ in loaded))  # one scale for all panels
    nrows = sum(len({e[0] for e in evs}) for evs, _ in loaded)
    fig, axes = plt.subplots(len(loaded), 1, figsize=(13, 1.3 + 1.0 * nrows + 1.3 * len(loaded)), squeeze=False)
    seen = {}
    for ax, (evs, title) in zip(axes[:, 0], loaded):
        seen.update(draw_timeline(ax, evs, title, span))
    order = [c for c, _, _ in CATS] + ["other"]
    handles = [Patch(facecolor=seen[c], edgecolor="#999999", hatch="////" if c == "wait" else None,
                     label="wait (idle)" if c == "wait" else c) for c in order if c in seen]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
    fig.suptitle(suptitle, fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    savefig(fig, outdir, name)
    return None


# ---- figure 5: loss curves -----------------------------------------------------------------


def fig_loss(results, outdir):
    files = sorted(glob.glob(os.path.join(results, "loss", "*.json")))
    runs = []
    for p in files:
        res = load_json(p)
        if res.get("steps"):
            runs.append(res)
    if not runs:
        return "no results/loss/*.json with steps (make demo CH=02..05: --json)"
    # runs compare only on the same model, batch and steps: keep the largest such group
    groups = {}
    for r in runs:
        groups.setdefault((r.get("params"), r.get("batch"), len(r["steps"]), r.get("precision")), []).append(r)
    best = max(groups.values(), key=lambda g: (len(g), any(int(r.get("world", 1)) == 1 for r in g)))
    if len(groups) > 1:
        note("loss: %d of %d runs left out (another model size, batch or step count)" % (len(runs) - len(best), len(runs)))
    runs = best
    order = {s: i for i, (s, _, _) in enumerate(STAGES)}
    runs.sort(key=lambda r: (int(r.get("world", 1)) > 1, order.get(strategy_key(r), 9), int(r.get("world", 1))))
    fig, (ax, axd) = plt.subplots(1, 2, figsize=(14, 5.4), gridspec_kw={"width_ratios": [1.5, 1]})
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1))]
    widths = [5.0, 3.6, 2.6, 1.8, 1.2, 0.8]  # thick first: coinciding curves stay visible
    ref = runs[0]  # the 1-rank run when there is one (sorted first)
    ref_loss = {s["step"]: s["loss"] for s in ref["steps"]}
    floor = 1e-9  # a difference of exactly 0 (bitwise equal) is drawn here on the log axis
    labels = []
    for i, r in enumerate(runs):
        xs = [s["step"] for s in r["steps"]]
        ys = [s["loss"] for s in r["steps"]]
        n = int(r.get("world", 1))
        label = "%s, %d rank%s (%s)" % (STAGE_LABEL.get(strategy_key(r), r.get("strategy")), n, "s" if n > 1 else "",
                                        r.get("collectives", "vendor"))
        labels.append(label)
        line, = ax.plot(xs, ys, ls=styles[i % len(styles)], lw=widths[min(i, len(widths) - 1)], alpha=0.85, label=label)
        if r is not ref:
            d = [max(abs(s["loss"] - ref_loss[s["step"]]) / max(abs(ref_loss[s["step"]]), 1e-30), floor)
                 for s in r["steps"] if s["step"] in ref_loss]
            axd.plot([s["step"] for s in r["steps"] if s["step"] in ref_loss], d, ls="-", marker="o", ms=3, lw=1.2,
                     color=line.get_color(), label=label)
    ent = [r.get("teacher_entropy") for r in runs if r.get("teacher_entropy") is not None]
    if ent:
        ax.axhline(float(ent[0]), color="black", ls=":", lw=1.5, label="floor: teacher entropy %.3f nats" % float(ent[0]))
        lo = min(min(s["loss"] for s in r["steps"]) for r in runs)
        ax.set_ylim(min(lo, float(ent[0])) - 0.1, None)
    else:
        note("loss: no 'teacher_entropy' in the results JSON, the floor line is left out")
    finals = [r.get("final_loss", r["steps"][-1]["loss"]) for r in runs]
    spread = (max(finals) - min(finals)) / max(abs(min(finals)), 1e-30)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.set_title("Training loss, Ψ = %s params, %s, global batch %s, same data and seed" % (
        f"{int(ref.get('params', 0)):,}", ref.get("precision", "fp32"), ref.get("batch", "?")), fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    axd.set_yscale("log")
    axd.set_ylim(floor / 2, 1e-2)
    axd.axhline(1e-5, color="C3", ls=":", lw=1.2, label="1e-5: the test's tolerance (fp32)")
    axd.set_xlabel("step")
    axd.set_ylabel("|loss − loss of %s| / loss" % labels[0].rsplit(" (", 1)[0])
    axd.set_title("Difference from the %s run (0 drawn at 1e-9)" % labels[0].rsplit(" (", 1)[0], fontsize=11)
    axd.grid(alpha=0.3, which="both")
    axd.legend(fontsize=8, loc="upper left")
    fig.suptitle("Loss curves: 1 rank, N ranks, DDP and ZeRO-1/2/3 coincide (final losses within %.1e relative)"
                 % spread, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    savefig(fig, outdir, "loss_curves")
    return None


def fig_zeror_cb(datadir, outdir):
    """ZeRO-R constant-size buffers: memory against synchronization points (notes/zero-r.md),
    from the committed measurement notes/data/bench_zeror.json (make bench-zeror)."""
    doc = load_json(os.path.join(datadir, "bench_zeror.json"))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, (strat, rows) in zip(axes, sorted(doc["cb"].items())):
        rows = sorted(rows, key=lambda r: -(r["buffer_mb"] or 1e9))
        xs = [r["calls_per_step"] for r in rows]
        ys = [r["comm_peak"] / 2**20 for r in rows]
        ax.plot(xs, ys, "o-", color="C0", lw=1.8)
        labels = {}  # sizes that measure the same share one label
        for r, x, y in zip(rows, xs, ys):
            labels.setdefault((x, y), []).append("unbounded" if not r["buffer_mb"] else "%g MiB" % r["buffer_mb"])
        for (x, y), names in labels.items():
            ax.annotate(", ".join(names), (x, y), textcoords="offset points", xytext=(6, 6), fontsize=9)
        ax.set_xscale("log")
        ax.set_xlabel("collective calls per step (synchronization points), rank 0")
        ax.set_ylabel("comm / temporary peak, MiB (rank 0)")
        ax.set_title("%s: bytes sent per step %.2f MiB at every size" % (strat.upper().replace("ZERO", "ZeRO-"),
                                                                       rows[0]["bytes_per_step"] / 2**20), fontsize=10)
        ax.set_ylim(0, max(ys) * 1.25)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle("Constant-size buffers (--buffer-mb), GPT, N = 2: smaller buffers, more synchronization points "
                 "(measured; one unit is the floor)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    savefig(fig, outdir, "zeror_cb")
    return None


def fig_nodes_links(datadir, outdir):
    """Chapter 09: step time of each strategy on 2 emulated nodes x 2 ranks against the inter-node
    link rate, and the bytes per step per rank that crossed nodes (notes/09-nodes.md), from the
    committed measurement notes/data/bench_nodes_links.json (make bench-nodes LINKS=...)."""
    doc = load_json(os.path.join(datadir, "bench_nodes_links.json"))
    links = sorted(doc["steps"], key=int)
    names = list(doc["steps"][links[0]])
    labels = {"ddp": "DDP", "zero3": "ZeRO-3 (all ranks)", "hsdp": "HSDP (--shard-group node)", "hpz": "ZeRO++ hpZ",
              "tp2_in_node": "TP=2 in node, DP across", "tp2_across_nodes": "TP=2 across nodes"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for i, n in enumerate(names):
        ys = [doc["steps"][L][n]["median_step_ms"] for L in links]
        axes[0].plot([int(L) for L in links], ys, "o-", color="C%d" % i, label=labels.get(n, n))
    axes[0].set_xscale("log", base=2)
    axes[0].set_yscale("log")
    axes[0].set_xticks([int(L) for L in links])
    axes[0].set_xticklabels(links)
    axes[0].set_xlabel("link between the nodes, Mbit/s each way")
    axes[0].set_ylabel("median step, ms")
    axes[0].set_title("step time (MLP, fp32, batch 240; median of %d runs)" % doc["_meta"]["reps"], fontsize=10)
    axes[0].grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    across = [doc["steps"][links[0]][n]["inter_bytes_per_step_per_rank"] + doc["steps"][links[0]][n]["tp_inter_bytes_per_step_per_rank"]
              for n in names]
    axes[1].barh(range(len(names)), [a / 1024 for a in across], color=["C%d" % i for i in range(len(names))])
    axes[1].set_yticks(range(len(names)))
    axes[1].set_yticklabels([labels.get(n, n) for n in names], fontsize=9)
    axes[1].invert_yaxis()
    axes[1].set_xlabel("KiB per step per rank across nodes (mean over ranks, measured)")
    axes[1].set_title("bytes that cross the slow link", fontsize=10)
    axes[1].grid(alpha=0.3, axis="x")
    fig.suptitle("2 emulated nodes x 2 ranks: step time against the inter-node link (measured on a shared 2-core box)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    savefig(fig, outdir, "nodes_links")
def fig_pipeline_bubble(datadir, outdir):
    """ch07: the measured bubble of GPipe / 1F1B / interleaved beside its formula, and the step
    time beside the ideal, from the committed notes/data/bench_pipeline.json (make bench-pipeline)."""
    doc = load_json(os.path.join(datadir, "bench_pipeline.json"))
    cases = doc["sets"]["after"]["cases"]
    models = [m for m in ("mlp", "gpt") if any(c["model"] == m for c in cases.values())]
    fig, axes = plt.subplots(2, len(models), figsize=(6.2 * len(models), 8.2), squeeze=False)
    scheds = [("gpipe", "C0"), ("1f1b", "C1"), ("interleaved", "C2")]
    for col, m in enumerate(models):
        rows = [c for c in cases.values() if c["model"] == m]
        labels = sorted({(c["P"], c["M"]) for c in rows})
        xs = range(len(labels))
        axb, axt = axes[0][col], axes[1][col]
        w = 0.26
        for i, (sc, color) in enumerate(scheds):
            meas = [next((c for c in rows if c["schedule"] == sc and (c["P"], c["M"]) == pm), None) for pm in labels]
            pos = [x + (i - 1) * w for x in xs]
            axb.bar([p for p, c in zip(pos, meas) if c], [c["bubble_fraction"] for c in meas if c], w, color=color,
                    label="%s measured" % sc)
            axb.scatter([p for p, c in zip(pos, meas) if c], [c["bubble_formula"] for c in meas if c], marker="_",
                        s=260, color="black", zorder=3, label="formula (equal stages)" if i == 0 else None)
            st = [(p, c["bubble_formula_stages"]) for p, c in zip(pos, meas) if c and c.get("bubble_formula_stages")]
            if st:  # the same formula for the stages as they ran (their measured busy times)
                axb.scatter([p for p, _ in st], [v for _, v in st], marker="x", s=40, color="black", zorder=4,
                            label="formula, stages as measured" if i == 0 else None)
            axt.bar([p for p, c in zip(pos, meas) if c], [c["ratio"] for c in meas if c], w, color=color, label=sc)
        axb.set_xticks(list(xs))
        axb.set_xticklabels(["P=%d M=%d" % pm for pm in labels])
        axb.set_ylabel("bubble fraction")
        axb.set_ylim(0, 1)
        axb.set_title("%s: bubble measured (bars); formula: - equal stages, x stages as run" % m.upper(), fontsize=10)
        axb.legend(fontsize=8)
        axb.grid(alpha=0.3, axis="y")
        axt.axhline(1.0, color="black", lw=1)
        axt.axhline(1.15, color="gray", lw=1, ls="--")
        axt.set_xticks(list(xs))
        axt.set_xticklabels(["P=%d M=%d" % pm for pm in labels])
        axt.set_ylabel("step / ideal  ((M+P-1)/(MP) x 1-rank step)")
        axt.set_title("%s: step time over the ideal (1 = formula; dashed: 1.15)" % m.upper(), fontsize=10)
        axt.legend(fontsize=8)
        axt.grid(alpha=0.3, axis="y")
    meta = doc["_meta"]
    fig.suptitle("Pipeline bubble, measured (make bench-pipeline, %s, load %.1f -> %.1f, medians of %d)" %
                 (meta["date"], meta["load_before"][0], meta["load_after"][0], meta["reps"]), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    savefig(fig, outdir, "pipeline_bubble")
    return None


def fig_pipeline_zero_bubble(datadir, outdir):
    """ch07c: 1F1B, ZB-H1 and ZB-H2 at P = 2, M = 4, 8 — the measured bubble (bars; the build before
    the receives posted ahead hatched, when the file has it) beside the simulator fed with the same
    run's F, B, W (markers) and its 10% + 0.02 band, and the step times, from the committed
    notes/data/bench_pipeline_zb.json (make bench-pipeline ZL_BENCH_CASES=zb)."""
    doc = load_json(os.path.join(datadir, "bench_pipeline_zb.json"))
    after = doc["sets"]["after"]["cases"]
    before_name = next((k for k in doc["sets"] if k.startswith("before")), None)
    before = doc["sets"][before_name]["cases"] if before_name else {}
    models = [m for m in ("mlp", "gpt") if any(c["model"] == m for c in after.values())]
    scheds = [("1f1b", "C1"), ("zb-h1", "C2"), ("zb-h2", "C3")]
    fig, axes = plt.subplots(2, len(models), figsize=(6.2 * len(models), 7.6), squeeze=False)
    for col, m in enumerate(models):
        axb, axt = axes[0][col], axes[1][col]
        Ms = sorted({c["M"] for c in after.values() if c["model"] == m})
        w = 0.13 if before else 0.26
        for i, (sc, color) in enumerate(scheds):
            for j, M in enumerate(Ms):
                key = "%s_%s_P2_M%d" % (m, sc.replace("-", ""), M)
                a, b = after.get(key), before.get(key)
                x = j + (i - 1) * (2 * w if before else w)
                if b:
                    axb.bar(x - w / 2, b["bubble_fraction"], w, color=color, alpha=0.45, hatch="//",
                            label="%s, before (%s)" % (sc, doc["_meta"].get("base")) if j == 0 else None)
                    axt.bar(x - w / 2, b["step_ms"], w, color=color, alpha=0.45, hatch="//")
                if not a:
                    continue
                xa = x + w / 2 if b else x
                axb.bar(xa, a["bubble_fraction"], w, color=color, label="%s measured" % sc if j == 0 else None)
                axt.bar(xa, a["step_ms"], w, color=color, label=sc if j == 0 else None)
                if a.get("bubble_sim") is not None:
                    sim = a["bubble_sim"]
                    axb.errorbar(xa, sim, yerr=0.1 * sim + 0.02, fmt="_", color="black", ms=14, capsize=3,
                                 label="simulated (F, B, W of the run), 10% + 0.02" if i == 0 and j == 0 else None)
        for ax in (axb, axt):
            ax.set_xticks(range(len(Ms)))
            ax.set_xticklabels(["P=2 M=%d" % M for M in Ms])
            ax.grid(alpha=0.3, axis="y")
        axb.set_ylabel("bubble fraction")
        axb.set_title("%s: bubble measured (bars) and simulated (marker, band)" % m.upper(), fontsize=10)
        axb.legend(fontsize=7)
        axt.set_ylabel("step ms (median)")
        axt.set_title("%s: step time" % m.upper(), fontsize=10)
        axt.legend(fontsize=7)
    meta = doc["_meta"]
    fig.suptitle("Zero bubble at P = 2, measured (make bench-pipeline ZL_BENCH_CASES=zb, %s, load %.1f -> %.1f, "
                 "medians of %d)" % (meta["date"], meta["load_before"][0], meta["load_after"][0], meta["reps"]),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    savefig(fig, outdir, "pipeline_zero_bubble")
    return None


def fig_overlap_saved(datadir, outdir):
    """ch02 / ch05: step time that overlap saved (DDP bucketed vs naive, ZeRO-3 prefetch 1 vs 0)
    beside the most it could save (the collectives' own time in the run without overlap), from
    the committed notes/data/bench_overlap.json (make bench-overlap)."""
    doc = load_json(os.path.join(datadir, "bench_overlap.json"))
    keys = [k for k in ("ddp_N2", "ddp_N4", "zero3_N2", "zero3_N4") if k in doc["cases"]]
    cs = [doc["cases"][k] for k in keys]
    fig, ax = plt.subplots(figsize=(9, 4.6))
    xs = range(len(keys))
    ax.bar([x - 0.2 for x in xs], [c["collectives_alone_ms"] for c in cs], 0.4, color="C7",
           label="could save: the collectives' time in the run without overlap")
    ax.bar([x + 0.2 for x in xs], [c["saved_ms"] for c in cs], 0.4, color="C2", label="saved: step(without) - step(with)")
    ax.axhline(0, color="black", lw=0.8)
    names = {"ddp": "DDP bucketed vs naive", "zero3": "ZeRO-3 prefetch 1 vs 0"}
    ax.set_xticks(list(xs))
    ax.set_xticklabels(["%s\nN = %s" % (names[k.split("_")[0]], k.split("N")[1]) for k in keys], fontsize=9)
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    meta = doc["_meta"]
    ax.set_title("Overlap, measured (make bench-overlap, %s, load %.1f -> %.1f, medians of %d)" %
                 (meta["date"], meta["load_before"][0], meta["load_after"][0], meta["reps"]), fontsize=10)
    fig.tight_layout()
    savefig(fig, outdir, "overlap_saved")
    return None


DATA_FIGURES = [  # drawn from the committed measurements in notes/data (no results/ needed): name, function, PNG
    ("zeror_cb", fig_zeror_cb, "zeror_cb"), ("long_seq", plot_long.fig_long_seq, "long_seq"),
    ("long_split", plot_long.fig_long_split, "long_split"),
    ("nodes_links", fig_nodes_links, "nodes_links"),
    ("pipeline_bubble", fig_pipeline_bubble, "pipeline_bubble"),
    ("pipeline_zero_bubble", fig_pipeline_zero_bubble, "pipeline_zero_bubble"),
    ("overlap_saved", fig_overlap_saved, "overlap_saved"),
    ("experts", plot_experts.fig_experts, "experts"),
    ("experts_groups", plot_experts.fig_experts_groups, "experts_groups"),
    ("experts_groups_zero1", plot_experts.fig_experts_groups_zero1, "experts_groups_zero1"),
    ("compress", plot_compress.fig_compress, "compress"),
]

FIGURES = [  # (name for --only, function, the PNG it writes)
    ("memory", fig_memory, "memory_per_rank"), ("ch00", fig_ch00, "ch00_memory"),
    ("ch00_gpt_acts", fig_gpt_acts, "ch00_gpt_acts"),
    ("collbench", fig_collbench, "collbench_busbw"), ("timeline_ddp", fig_timelines_ddp, "timeline_ddp"),
    ("timeline_zero3", fig_timelines_zero3, "timeline_zero3"),
    ("timeline_pipeline", fig_timeline_pipeline, "timeline_pipeline"),
    ("timeline_offload", fig_timeline_offload, "timeline_offload"), ("loss", fig_loss, "loss_curves"),
    ("traffic", fig_traffic, "traffic_per_step"),
]
ONLY_NAMES = ([f[0] for f in FIGURES] + [s[0] for s in SCHEMATICS if s[0] not in [f[0] for f in FIGURES]]
              + [d[0] for d in DATA_FIGURES])


def check_pngs(outdir, names):
    """The CI check: each PNG exists, decodes, is a real figure (not blank). Returns failures."""
    import numpy as np
    bad = 0
    for name in names:
        path = os.path.join(outdir, name + ".png")
        if not os.path.exists(path):
            print("  MISSING %s" % path)
            bad += 1
            continue
        nbytes = os.path.getsize(path)
        img = plt.imread(path)[..., :3]  # floats in [0, 1]
        gray = img.mean(axis=2)
        ink = float((gray < 0.9).mean())              # share of pixels that are not background
        colours = len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0))
        ok = nbytes > 10000 and gray.std() > 0.05 and ink > 0.02 and colours > 8
        print("  %s %s: %d bytes, %dx%d px, %.1f%% ink, %d colours" % (
            "ok  " if ok else "BLANK", path, nbytes, img.shape[1], img.shape[0], 100 * ink, colours))
        bad += 0 if ok else 1
    return bad


def main():
    ap = argparse.ArgumentParser(description="Draw the tutorial's figures from results/*.json.")
    ap.add_argument("--results", default="results", help="folder with the programs' JSON (default results)")
    ap.add_argument("--out", default=os.path.join("notes", "figures"), help="where the PNGs go (default notes/figures)")
    ap.add_argument("--data", default=os.path.join("notes", "data"),
                    help="the committed measurements the data figures read (default notes/data)")
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(ONLY_NAMES))
    ap.add_argument("--strict", action="store_true", help="exit 1 when any figure is skipped")
    ap.add_argument("--check", action="store_true",
                    help="draw nothing: check that every PNG of --out exists and is not blank (exit 1 if not)")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    bad = [s for s in only if s not in ONLY_NAMES]
    if bad:
        sys.stderr.write("error: --only %s: allowed %s\n" % (",".join(bad), ", ".join(ONLY_NAMES)))
        return 2
    if args.check:
        names = [png for name, _, png in FIGURES if not only or name in only]
        names += [png for name, _, png in SCHEMATICS if not only or name in only]
        names += [png for name, _, png in DATA_FIGURES if not only or name in only]
        nbad = check_pngs(args.out, names)
        print("plots check: %d of %d figures ok in %s" % (len(names) - nbad, len(names), args.out))
        return 1 if nbad else 0
    os.makedirs(args.out, exist_ok=True)
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 11})
    skipped, failed = [], []
    for name, fn, _ in FIGURES:
        if only and name not in only:
            continue
        try:
            why = fn(args.results, args.out)
        except Exception as e:  # one bad input must not cost the other figures
            failed.append(name)
            print("  FAILED %s: %s: %s" % (name, type(e).__name__, e))
            continue
        if why:
            skipped.append(name)
            print("  skipped %s: %s" % (name, why.replace("results/", args.results.rstrip("/") + "/")))
    nschem, schem_failed = 0, []
    for name, fn, _ in SCHEMATICS:  # synthetic: no inputs, drawn with their timeline
        if only and name not in only:
            continue
        try:
            fn(args.out)
            nschem += 1
        except Exception as e:
            schem_failed.append(name)
            print("  FAILED schematic for %s: %s: %s" % (name, type(e).__name__, e))
    if nschem:
        print("schematics: %d drawn (synthetic or drawn by hand, labelled as such; no inputs needed)" % nschem)
    ndata = 0
    for name, fn, _ in DATA_FIGURES:  # measured, but committed: drawn wherever notes/data is
        if only and name not in only:
            continue
        try:
            fn(args.data, args.out)
            ndata += 1
        except Exception as e:
            schem_failed.append(name)
            print("  FAILED data figure %s: %s: %s" % (name, type(e).__name__, e))
    if ndata:
        print("data figures: %d drawn (from the committed measurements in %s)" % (ndata, args.data))
    print("plots: %d drawn, %d skipped, %d failed -> %s" % (
        len([f for f in FIGURES if (not only or f[0] in only)]) - len(skipped) - len(failed),
        len(skipped), len(failed) + len(schem_failed), args.out))
    if failed or schem_failed or (args.strict and skipped):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
