#!/usr/bin/env python3
"""plot_pipeline.py — chapter 07's picture, drawn from real traces (notes/07-pipeline.md).

    python3 common/scripts/plot_pipeline.py --out FIG.png naive=T1.json gpipe=T2.json 1f1b=T3.json

Each trace is a ch07_pipeline --trace file (Chrome trace, common/base/trace.h: pid = rank, tid 0
compute, tid 1 communication). For each schedule, one panel: the stages as rows (rank r of a
pipeline with D = 1 is stage r), the forward ("F k"), backward ("B k") and weight-gradient ("W k",
the zero-bubble schedules) blocks of every
micro-batch k of the LAST step ("F k.c": on chunk c, interleaved), and the point-to-point messages (send/recv act/grad) as thin
bars under them. All panels share one time axis (ms from the start of the step), so the
bubble — the white space — compares across schedules at a glance. The title of each panel
gives the measured idle fraction of that step (1 − busy / window, averaged over the stages)
beside the formula.

plot_pipeline(traces, out) is the function plots.py can call: traces maps a schedule name to
a trace path (missing files are skipped with a line saying so); returns the number of panels.
"""
import argparse
import json
import os
import re
import sys

F_COLOR, B_COLOR, W_COLOR, MSG_COLOR = "#4c78a8", "#f58518", "#54a24b", "#9d9d9d"


def load_events(path):
    with open(path) as f:
        doc = json.load(f)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in evs if e.get("ph") == "X"]


def last_step(evs):
    """(t0, t1) of the last 'step N' on rank 0, and N."""
    steps = [(int(m.group(1)), e) for e in evs if e.get("pid") == 0 and e.get("tid") == 0
             for m in [re.match(r"step (\d+)$", e.get("name", ""))] if m]
    if not steps:
        return None
    n, e = max(steps, key=lambda x: x[0])
    return e["ts"], e["ts"] + e["dur"], n


def blocks(evs, t0, t1):
    """Per rank: F/B blocks and messages that start inside [t0, t1)."""
    out = {}
    for e in evs:
        if not (t0 <= e["ts"] < t1):
            continue
        name = e.get("name", "")
        m = re.match(r"([FBW]) (\d+)(?:\.(\d+))?$", name)  # "F k", or "F k.c" on chunk c (interleaved); W: zero bubble
        r = out.setdefault(e["pid"], {"fb": [], "msg": []})
        if m and e.get("tid") == 0:
            r["fb"].append((m.group(1), int(m.group(2)), e["ts"], e["dur"], int(m.group(3) or 0)))
        elif e.get("tid") == 1 and re.match(r"(send|recv) (act|grad) \d+$", name):
            r["msg"].append((name, e["ts"], e["dur"]))
    return out


def bubble_of(per_rank):
    """Mean over stages of idle / window, the window being the pipeline's span of this step."""
    starts = [f[2] for r in per_rank.values() for f in r["fb"]]
    ends = [f[2] + f[3] for r in per_rank.values() for f in r["fb"]]
    if not starts:
        return float("nan"), 0.0, 0.0
    lo, hi = min(starts), max(ends)
    fr = [1 - sum(f[3] for f in r["fb"]) / (hi - lo) for r in per_rank.values() if r["fb"]]
    return sum(fr) / len(fr), lo, hi


def formula(sched, P, M, v=1):
    """Equal stages, messages free (solutions/pipeline_sim.h, pp_bubble_formula): the zero-bubble
    ones with F = B = W, in their stated ranges (ZB-H1 M >= P, ZB-H2 M >= 2P - 1)."""
    if sched == "naive":
        return (P - 1) / P
    if sched == "zb-h1":
        return (P - 1) / (3 * M + P - 1)
    if sched == "zb-h2":
        return 0.0
    return (P - 1) / (v * M + P - 1)  # v = 1 but for interleaved


def plot_pipeline(traces, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = []
    for sched, path in traces.items():
        if not os.path.exists(path):
            print(f"plot_pipeline: {path} missing (run ch07_pipeline --schedule {sched} --trace {path}); skipped")
            continue
        evs = load_events(path)
        win = last_step(evs)
        if not win:
            print(f"plot_pipeline: {path} has no 'step N' event; skipped")
            continue
        per_rank = blocks(evs, win[0], win[1])
        fr, lo, hi = bubble_of(per_rank)
        P = len([r for r in per_rank.values() if r["fb"]])
        M = max((f[1] for r in per_rank.values() for f in r["fb"]), default=-1) + 1
        v = (max((f[4] for r in per_rank.values() for f in r["fb"]), default=0) + 1 + P - 1) // P if P else 1
        panels.append((sched, per_rank, fr, lo, hi, P, M, win[2], v))
    if not panels:
        return 0
    span = max(p[4] - p[3] for p in panels) / 1000.0
    height = 0.8 + sum(0.6 + 0.5 * p[5] for p in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, height), sharex=True, squeeze=False)
    for ax, (sched, per_rank, fr, lo, hi, P, M, step, v) in zip(axes[:, 0], panels):
        for rank, r in sorted(per_rank.items()):
            y = P - 1 - rank  # stage 0 on top
            for kind, k, ts, d, c in r["fb"]:
                x, w = (ts - lo) / 1000.0, d / 1000.0
                color = F_COLOR if kind == "F" else B_COLOR if kind == "B" else W_COLOR
                ax.barh(y + 0.12, w, left=x, height=0.62, color=color, edgecolor="black",
                        linewidth=0.4, alpha=1.0 if c < P else 0.6)  # later chunks (interleaved) lighter
                if w > span / 60:
                    label = f"{kind}{k}" + (f".{c}" if v > 1 else "")
                    ax.text(x + w / 2, y + 0.12, label, ha="center", va="center", fontsize=7, color="white")
            for name, ts, d in r["msg"]:
                ax.barh(y - 0.3, max(d, 1.0) / 1000.0, left=(ts - lo) / 1000.0, height=0.12, color=MSG_COLOR)
        ax.set_yticks(range(P))
        ax.set_yticklabels([f"stage {P - 1 - i}" for i in range(P)])
        ax.set_ylim(-0.5, P - 0.4)
        vs = f", v = {v}" if v > 1 else ""
        ax.set_title(f"{sched}: P = {P}, M = {M}{vs} (step {step}); idle fraction measured {fr:.2f}, "
                     f"formula {formula(sched, P, M, v):.2f}; step {(hi - lo) / 1000.0:.1f} ms", fontsize=9, loc="left")
        ax.set_xlim(0, span * 1.02)
    axes[-1, 0].set_xlabel("ms from the first block of the step (one scale for every panel); "
                           "blue F k: forward of micro-batch k, orange B k: backward\n(zero bubble: its input "
                           "gradient), green W k: the weights' gradient, grey: send/recv")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return len(panels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("traces", nargs="+", help="SCHEDULE=TRACE.json, in panel order")
    a = ap.parse_args()
    traces = {}
    for t in a.traces:
        if "=" not in t:
            sys.exit(f"error: {t}: expected SCHEDULE=TRACE.json")
        k, v = t.split("=", 1)
        traces[k] = v
    n = plot_pipeline(traces, a.out)
    if n == 0:
        sys.exit("error: no trace could be drawn")
    print(f"plot_pipeline: {n} panel{'s' if n > 1 else ''} -> {a.out}")


if __name__ == "__main__":
    main()
