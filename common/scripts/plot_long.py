#!/usr/bin/env python3
"""plot_long.py — chapter 10's figures (notes/10-long-sequences.md), called by plots.py.

  schematic_cp     SCHEMATIC (no inputs): one sequence over C = 4 ranks with --cp-balance 1 (two
                   mirrored chunks each), the ring the K/V blocks travel, and the causal work each
                   rank's queries do against each block, contiguous against balanced (computed here
                   from the layout: cells = score pairs, the same count solutions/cp.c measures).
  long_seq         the long-sequence demo from the committed measurement notes/data/bench_long.json
                   (make bench-long): the largest S per layout under one per-rank budget, and
                   each row's peak split into model states and the rest.
  long_split       the sequence splits side by side from the same JSON: SP, the ring, Ulysses and the
                   hybrid at C = 2, 4 (bytes per rank per step, measured; the step time on one 2-core
                   box), and on 2 emulated nodes the step time against the link rate with the time the
                   ranks waited for the ring's hops and for the all-to-alls (exposed).
"""
import json
import os

from zl_mpl import find_matplotlib  # common/scripts/zl_mpl.py

find_matplotlib()
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

DPI = 110


def positions(S, C, balance, q):
    """solutions/cp.c's cp_positions: rank q's positions of a sequence of S."""
    n = S // C
    if not balance:
        return list(range(q * n, (q + 1) * n))
    h = S // (2 * C)
    return list(range(q * h, (q + 1) * h)) + list(range((2 * C - 1 - q) * h, (2 * C - q) * h))


def work(S, C, balance, q, src):
    """Score pairs rank q's queries compute against rank src's keys (causal: key <= query)."""
    kp = positions(S, C, balance, src)
    return sum(sum(1 for k in kp if k <= p) for p in positions(S, C, balance, q))


def schematic_cp(outdir):
    S, C = 16, 4
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]
    fig = plt.figure(figsize=(13, 5.8))
    ax = fig.add_axes([0.02, 0.52, 0.96, 0.38])
    ax.set_xlim(-0.5, S + 0.5)
    ax.set_ylim(-1.6, 2.2)
    ax.axis("off")
    for bal, y, label in ((0, 1.2, "--cp-balance 0: chunk q of C"), (1, -0.2, "--cp-balance 1: chunks q and 2C-1-q of 2C")):
        for q in range(C):
            for p in positions(S, C, bal, q):
                ax.add_patch(Rectangle((p, y), 0.95, 0.7, color=colors[q], alpha=0.85))
                ax.text(p + 0.47, y + 0.35, str(p), ha="center", va="center", fontsize=8, color="white")
        ax.text(-0.4, y + 0.95, label, fontsize=10, ha="left")
    ax.text(S / 2, -1.3, "positions of one sequence (S = 16), coloured by the rank that holds them; every layer but "
            "attention runs on a rank's own positions", ha="center", fontsize=9)
    # the ring
    axr = fig.add_axes([0.02, 0.02, 0.3, 0.45])
    axr.set_xlim(-1.6, 1.6)
    axr.set_ylim(-1.4, 1.4)
    axr.axis("off")
    import math
    pts = [(math.cos(math.pi / 2 - 2 * math.pi * q / C), math.sin(math.pi / 2 - 2 * math.pi * q / C)) for q in range(C)]
    for q, (x, y) in enumerate(pts):
        axr.add_patch(Rectangle((x - 0.28, y - 0.16), 0.56, 0.32, color=colors[q]))
        axr.text(x, y, "rank %d" % q, ha="center", va="center", color="white", fontsize=9)
        x1, y1 = pts[(q + 1) % C]
        axr.add_patch(FancyArrowPatch((x * 0.8, y * 0.8), (x1 * 0.8, y1 * 0.8), arrowstyle="-|>", mutation_scale=14,
                                      connectionstyle="arc3,rad=-0.3", color="#444444"))
    axr.text(0, 0, "K/V blocks\nr -> r+1\n(C-1 hops fwd;\nbwd: +dK/dV,\n+1 hop home)", ha="center", va="center",
             fontsize=8)
    # the work matrices
    for k, bal in enumerate((0, 1)):
        axm = fig.add_axes([0.40 + 0.30 * k, 0.09, 0.22, 0.34])
        m = [[work(S, C, bal, q, src) for src in range(C)] for q in range(C)]
        axm.imshow(m, cmap="Blues", vmin=0, vmax=max(max(r) for r in m) * 1.2)
        for q in range(C):
            for src in range(C):
                axm.text(src, q, str(m[q][src]), ha="center", va="center", fontsize=9)
            axm.text(C - 0.3, q, "  = %d" % sum(m[q]), ha="left", va="center", fontsize=9)
        axm.set_xticks(range(C))
        axm.set_yticks(range(C))
        axm.set_xlabel("keys of rank (the block)")
        axm.set_ylabel("queries of rank")
        tot = [sum(r) for r in m]
        axm.set_title("--cp-balance %d: score pairs, max/mean %.2f" % (bal, max(tot) / (sum(tot) / C)), fontsize=9)
    fig.suptitle("SCHEMATIC — context parallelism, C = 4: what each rank holds, where K/V travel, "
                 "the causal work per (queries, block)", fontsize=12)
    fig.savefig(os.path.join(outdir, "schematic_cp.png"), dpi=DPI)
    plt.close(fig)


def fig_long_seq(datadir, outdir):
    doc = json.load(open(os.path.join(datadir, "bench_long.json")))
    rows = [r for r in doc["rows"]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.6))
    names = [r["layout"] for r in rows]
    a1.barh(names, [r["max_seq"] for r in rows], color="#4C72B0")
    for i, r in enumerate(rows):
        a1.text(r["max_seq"], i, " %d" % r["max_seq"], va="center", fontsize=9)
    a1.invert_yaxis()
    a1.set_xlabel("largest sequence length S that trains (global batch 4)")
    a1.set_title("under %g MiB per rank (--mem-limit-mb)" % doc["budget_mib"])
    ok = [r for r in rows if r.get("peak")]
    st = [r["model_states"] / 2**20 for r in ok]
    rest = [(r["peak"] - r["model_states"]) / 2**20 for r in ok]
    a2.barh([r["layout"] for r in ok], st, color="#55A868", label="model states")
    a2.barh([r["layout"] for r in ok], rest, left=st, color="#DD8452", label="activations, workspaces, buffers")
    a2.axvline(doc["budget_mib"], color="black", ls="--", lw=1)
    a2.invert_yaxis()
    a2.set_xlabel("peak MiB per rank at that S (ledger)")
    a2.legend(fontsize=8, loc="lower right")
    fig.suptitle("Long sequences (measured): %s" % doc["model"], fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(os.path.join(outdir, "long_seq.png"), dpi=DPI)
    plt.close(fig)


def fig_long_split(datadir, outdir):
    doc = json.load(open(os.path.join(datadir, "bench_long.json")))
    comm = doc["comm"]
    colors = {"SP": "#8172B3", "ring": "#4C72B0", "Ulysses": "#DD8452", "hybrid": "#55A868"}

    def color(name):
        return next(v for k, v in colors.items() if name.startswith(k))
    nodes = doc.get("nodes")
    fig, axs = plt.subplots(1, 3 if nodes else 2, figsize=(16 if nodes else 11, 4.8))
    a1, a2 = axs[0], axs[1]
    labels, sent, ms, cols = [], [], [], []
    for r in comm:
        labels.append("%s, C=%d" % (r["layout"], r["C"]))
        sent.append(r["sent_bytes_per_step"] / 2**20)
        ms.append(r["step_ms"])
        cols.append(color(r["layout"]))
    ys = range(len(labels))
    a1.barh(ys, sent, color=cols)
    for y, v in zip(ys, sent):
        a1.text(v, y, " %.2f" % v, va="center", fontsize=8)
    a1.set_yticks(list(ys))
    a1.set_yticklabels(labels, fontsize=8)
    a1.invert_yaxis()
    a1.set_xlabel("MiB sent per rank per step (S %d, batch %d, L %d; SP: all its collectives)"
                  % (comm[0]["seq"], comm[0]["batch"], comm[0]["layers"]), fontsize=8)
    a1.set_title("bytes per rank per step (the CP rows: measured = formula)", fontsize=10)
    a2.barh(ys, ms, color=cols)
    a2.set_yticks(list(ys))
    a2.set_yticklabels([])
    a2.invert_yaxis()
    a2.set_xlabel("median step ms, one shared %d-core box (C = 4 oversubscribes it)" % doc["_meta"]["cores"], fontsize=8)
    a2.set_title("step time (the ring's fold is a scalar kernel, Ulysses' attention BLAS)", fontsize=9)
    if nodes:
        a3 = axs[2]
        runs = [r for r in nodes["runs"] if r["C"] == 4]
        links = sorted({r["link_mbit"] for r in runs if r["link_mbit"] > 0}, reverse=True)
        for name in sorted({r["layout"] for r in runs}, key=lambda n: list(colors).index(n.split()[0])):
            pts = sorted([r for r in runs if r["layout"] == name and r["link_mbit"] > 0], key=lambda r: -r["link_mbit"])
            xs = [r["link_mbit"] for r in pts]
            a3.plot(xs, [r["step_ms"] for r in pts], "o-", color=color(name), label=name + ": step")
            a3.plot(xs, [r["hops_wait_ms"] + r["a2a_wait_ms"] for r in pts], "x--", color=color(name),
                    label=name + ": waited for CP comm")
        a3.set_xscale("log")
        a3.set_yscale("log")
        a3.set_xticks(links)
        a3.set_xticklabels([str(x) for x in links])
        a3.invert_xaxis()
        a3.set_xlabel("link between the 2 emulated nodes, Mbit/s each way (tc)", fontsize=8)
        a3.set_ylabel("ms per step (median of %d runs)" % nodes["reps"], fontsize=8)
        a3.set_title("C = 4 on 2 nodes x 2 ranks", fontsize=10)
        a3.legend(fontsize=7)
        a3.grid(alpha=0.3, which="both")
    fig.suptitle("The sequence splits side by side (measured, make bench-long %s): the small GPT with 2 layers, S %d, "
                 "global batch %d, 4 steps" % (doc["_meta"].get("date", ""), comm[0]["seq"], comm[0]["batch"]), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(os.path.join(outdir, "long_split.png"), dpi=DPI)
    plt.close(fig)
