#!/usr/bin/env python3
"""plot_offload.py — chapter 08's timeline: what moves where and when, from a --trace of
build/bin/ch08_offload (notes/08-offload.md).

  python3 common/scripts/plot_offload.py TRACE.json [--step K] [--png OUT.png]

Prints, for rank 0, the milliseconds per step of each phase (steps from 1 on: step 0 warms up):
forward, backward, the copies device -> host of the gradient pieces, the host optimizer, the
copies host -> device of the updated pieces, and the waits. With --png (matplotlib needed), draws
step K (default: the last) of every rank: compute row coloured by phase, communication row below.
plot_trace(trace, png) is the function plots.py calls (figure timeline_offload, make plots).
"""
import argparse
import json
import sys

# phase name (trace event name, prefix match) -> (group, colour)
GROUPS = [
    ("fwd", "forward", "#4c72b0"),
    ("loss", "forward", "#4c72b0"),
    ("bwd", "backward", "#55a868"),
    ("copy grads D->H", "copy D->H (grads)", "#c44e52"),
    ("optimizer (host)", "optimizer on the host", "#8172b2"),
    ("copy params H->D", "copy H->D (params)", "#dd8452"),
    ("wait", "waiting", "#bbbbbb"),
    ("grad norm", "grad norm", "#937860"),
    ("issue all-gather", "issue all-gather", "#da8bc3"),
]


def group_of(name):
    for prefix, group, colour in GROUPS:
        if name.startswith(prefix):
            return group, colour
    return None, None


def load(path):
    with open(path) as f:
        j = json.load(f)
    ev = j["traceEvents"] if isinstance(j, dict) else j
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    spans = [e for e in ev if e.get("ph") == "X"]
    return spans, threads


def step_windows(spans, pid):
    """[(k, t0, t1)] of the 'step k' spans of rank pid."""
    out = []
    for e in spans:
        if e["pid"] == pid and e["name"].startswith("step "):
            out.append((int(e["name"].split()[1]), e["ts"], e["ts"] + e["dur"]))
    return sorted(out)


def summary(spans, threads):
    steps = [w for w in step_windows(spans, 0) if w[0] >= 1] or step_windows(spans, 0)
    if not steps:
        sys.exit("plot_offload: no 'step K' spans on rank 0 in this trace")
    totals = {}
    for e in spans:
        if e["pid"] != 0 or threads.get((e["pid"], e["tid"])) != "compute":
            continue
        if not any(t0 <= e["ts"] < t1 for _, t0, t1 in steps):
            continue
        g, _ = group_of(e["name"])
        if g:
            totals[g] = totals.get(g, 0.0) + e["dur"]
    wall = sum(t1 - t0 for _, t0, t1 in steps)
    print(f"rank 0, {len(steps)} steps, {wall / len(steps) / 1000:.3f} ms per step:")
    for _, g, _ in GROUPS:
        if g in totals:
            ms = totals.pop(g) / len(steps) / 1000
            print(f"  {g:<24} {ms:9.3f} ms per step  ({100 * ms * 1000 * len(steps) / wall:5.1f}%)")


def plot(spans, threads, step, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_offload: --png needs matplotlib (python3-matplotlib)")
    pids = sorted({e["pid"] for e in spans})
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.9 * len(pids)))
    rows, labels, seen = 0, [], set()
    t_origin, shown = None, set()
    for pid in pids:
        win = dict((k, (t0, t1)) for k, t0, t1 in step_windows(spans, pid))
        k = step if step is not None else max(win, default=None)
        if k not in win:
            continue
        t0, t1 = win[k]
        shown.add(k)
        if t_origin is None:
            t_origin = t0
        for e in spans:
            if e["pid"] != pid or not (t0 <= e["ts"] < t1):
                continue
            row = threads.get((pid, e["tid"]), "")
            y = rows + (0 if row == "compute" else 1)
            if row == "compute":
                g, c = group_of(e["name"])
                if not g:
                    continue
            else:
                g, c = "communication", "#999999"
            ax.barh(y, e["dur"] / 1000, left=(e["ts"] - t0) / 1000, height=0.8, color=c,
                    label=g if g not in seen else None)
            seen.add(g)
        labels += [f"rank {pid} compute", f"rank {pid} comm"]
        rows += 2
    if rows == 0:
        plt.close(fig)
        raise ValueError("no rank has step %s in this trace" % ("(any)" if step is None else step))
    ax.set_yticks(range(rows))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the start of the step (MEASURED, each rank from its own step start)")
    ax.set_title(f"ZeRO-Offload: step {', '.join(map(str, sorted(shown)))} of every rank, from the trace")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    print(f"  wrote {png}")


def plot_trace(trace, png, step=None):
    """Draw step `step` (default: the last) of the ch08_offload trace at `trace` into `png`."""
    spans, threads = load(trace)
    plot(spans, threads, step, png)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--png", default=None)
    a = ap.parse_args()
    spans, threads = load(a.trace)
    summary(spans, threads)
    if a.png:
        plot(spans, threads, a.step, a.png)


if __name__ == "__main__":
    main()
