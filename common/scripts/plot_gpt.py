#!/usr/bin/env python3
"""plot_gpt.py — the GPT's figures (notes/gpt.md).

    python3 common/scripts/plot_gpt.py [--results results] [--out results/figures] [--bin build/bin]
                                       [--only units,acts]

  gpt_units        SCHEMATIC (no inputs): the GPT as the strategies see it, one box per unit
                   (embedding | L pre-LN blocks | final LN + head), the ops inside a block, and
                   what each unit keeps for its backward (common/model/gpt.h).
  ch00_gpt_acts    per-rank memory of an 8B model at sequence lengths 1024 ... 16384, from
                   ch00_memory --json (results/ch00_acts_s<S>.json): model states at DDP and at
                   ZeRO-3 (N = 8) stacked under the activations of one sequence, without and
                   with full recomputation, and the same 8 ranks as one TP group with sequence
                   parallelism (TP+SP: states / 8, activations per rank by Korthikanti et al.'s
                   s·b·h·(34 + 5·a·s/h)/t; notes/10-long-sequences.md). With --bin and a missing
                   JSON, this script runs BIN/ch00_memory itself:
                     ch00_memory --params 8B --layers 32 --hidden 4096 --heads 32 --seq S
                                 --micro-batch 1 --ranks 8 --tp 8 --json results/ch00_acts_s<S>.json
                   The shape is Llama-3-8B's (32 layers, hidden 4096, 32 heads; Ψ = 8B) read as
                   a GPT-style block: Korthikanti et al.'s count assumes multi-head attention
                   and a 4h MLP, where Llama 3 has 8 key/value heads and a 14336 SwiGLU MLP, so
                   the activations are those of the formula, not a measurement of Llama.
A figure whose inputs are missing is skipped with one line; the exit code is 0 unless a figure
that had its inputs failed to draw.
"""
import argparse
import json
import os
import subprocess
import sys

SEQS = [1024, 2048, 4096, 8192, 16384]
ACTS_ARGS = ["--params", "8B", "--layers", "32", "--hidden", "4096", "--heads", "32", "--micro-batch", "1",
             "--ranks", "8", "--tp", "8"]


from zl_mpl import find_matplotlib  # noqa: E402  (common/scripts/zl_mpl.py)

find_matplotlib()
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Patch  # noqa: E402

C_PARAMS, C_GRADS, C_OPT, C_ACTS = "#4C72B0", "#DD8452", "#55A868", "#C44E52"
DPI = 110


def savefig(fig, outdir, name):
    path = os.path.join(outdir, name + ".png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print("  wrote %s" % path)


# ---- the schematic ------------------------------------------------------------------------------
def fig_units(results, outdir, binary):
    fig, ax = plt.subplots(figsize=(12, 6.2))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 6.2)
    ax.axis("off")

    def box(x, y, w, h, text, color, fs=9, bold=False):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", fc=color, ec="#333333", lw=1))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs,
                fontweight="bold" if bold else "normal")

    def arrow(x0, y0, x1, y1):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", lw=1.2, color="#333333"))

    # the three kinds of unit, left to right
    box(0.2, 4.3, 1.9, 1.2, "unit 0\nembedding\nwte[token] + wpe[t]", "#DCE6F2", bold=True)
    box(2.6, 4.3, 6.3, 1.2, "", "#F2E3D5")
    ax.text(5.75, 5.3, "units 1..L: one pre-LN block each", ha="center", fontsize=10, fontweight="bold")
    ops = ["LN1", "qkv\n3C×C", "causal\nattention", "proj\nC×C", "+x", "LN2", "fc\n4C×C", "GELU", "fcproj\nC×4C", "+x2"]
    for i, op in enumerate(ops):
        box(2.72 + i * 0.615, 4.42, 0.54, 0.7, op, "#FFFFFF", fs=7)
    box(9.4, 4.3, 2.4, 1.2, "unit L+1\nhead\nLNf, logits = x·Wᵀ", "#E2EFDA", bold=True)
    arrow(2.1, 4.9, 2.6, 4.9)
    arrow(8.9, 4.9, 9.4, 4.9)
    ax.text(0.2, 5.75, "tokens (B, T)", fontsize=9)
    ax.text(10.0, 5.75, "logits (B, T, V) → loss", fontsize=9)
    # what each keeps for backward
    ax.text(0.2, 3.75, "what each unit keeps for its backward (fp32 elements per sequence; common/model/gpt.h):",
            fontsize=10, fontweight="bold")
    box(0.2, 2.3, 1.9, 1.2, "nothing\n(its input is tokens)\n\n0", "#DCE6F2", fs=8)
    box(2.6, 2.3, 6.3, 1.2, "ln1 out TC, mean/rstd 2T, qkv 3TC, att probs NH·T², att out TC,\n"
        "x2 = x + attn TC, ln2 out TC, mean/rstd 2T, fc pre-GELU 4TC, post-GELU 4TC\n\n"
        "15TC + 4T + NH·T²      (+ its output TC, the next unit's input)", "#F2E3D5", fs=8)
    box(9.4, 2.3, 2.4, 1.2, "lnf out TC,\nmean/rstd 2T\n\nTC + 2T (+ logits TV)", "#E2EFDA", fs=8)
    ax.text(0.2, 1.6, "activation checkpointing (--recompute): keep only every unit's output (its input for the "
            "recompute);\nthe backward of unit u reruns u's forward into ONE shared buffer, sized for the largest "
            "unit: 15TC + 4T + NH·T².", fontsize=9)
    ax.text(0.2, 0.65, "For the strategies a unit is only a flat range of parameters: DDP buckets it, ZeRO shards "
            "it,\nZeRO-3 gathers it just before its forward and again before its backward.", fontsize=9)
    ax.text(11.8, 0.1, "SCHEMATIC (not measured)", ha="right", fontsize=9, color="#888888", style="italic")
    fig.suptitle("The GPT in units (T = seq, C = n_embd, NH = heads, V = vocab, L = layers)", fontsize=12)
    savefig(fig, outdir, "gpt_units")
    return None


# ---- the 8B activations chart --------------------------------------------------------------------
def acts_json(results, binary, seq):
    path = os.path.join(results, "ch00_acts_s%d.json" % seq)
    if not os.path.exists(path) and binary:
        exe = os.path.join(binary, "ch00_memory")
        if not os.access(exe, os.X_OK):
            return None
        os.makedirs(results, exist_ok=True)
        subprocess.run([exe] + ACTS_ARGS + ["--seq", str(seq), "--json", path], check=True,
                       stdout=subprocess.DEVNULL)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fig_acts(results, outdir, binary):
    docs = {s: acts_json(results, binary, s) for s in SEQS}
    if any(d is None for d in docs.values()):
        return "no results/ch00_acts_s<S>.json for S in %s (run with --bin build/bin, or: ch00_memory %s --seq S " \
               "--json ...)" % (SEQS, " ".join(ACTS_ARGS))
    gb = 1e9
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.4))
    for ax, rc in zip(axes, (False, True)):
        top = 0
        for i, s in enumerate(SEQS):
            d = docs[s]
            tr = d["transformer"]
            acts = tr["acts_recompute" if rc else "acts"] / gb
            st = {r["stage"]: r for r in d["stages"]}
            tp = d.get("tp")  # ch00_memory --tp t: t ranks of TP + SP instead of data parallelism
            bars = [(st[0], "DDP", acts, 1), (st[3], "ZeRO-3", acts, 1)]
            if tp:
                bars.append((st[0], "TP+SP", tp["acts_tp_sp_recompute" if rc else "acts_tp_sp"] / gb, tp["t"]))
            w = 0.8 / len(bars)
            for j, (r, lab, a, div) in enumerate(bars):
                x = i + (j - (len(bars) - 1) / 2) * w
                p, g, o = r["params"] / gb / div, r["grads"] / gb / div, r["optim"] / gb / div
                ax.bar(x, p, w * 0.9, color=C_PARAMS)
                ax.bar(x, g, w * 0.9, bottom=p, color=C_GRADS)
                ax.bar(x, o, w * 0.9, bottom=p + g, color=C_OPT)
                ax.bar(x, a, w * 0.9, bottom=p + g + o, color=C_ACTS)
                tot = p + g + o + a
                top = max(top, tot)
                ax.text(x, tot, "%s\n%.0f" % (lab, tot), ha="center", va="bottom", fontsize=6)
        ax.axhline(80, color="#555555", ls="--", lw=1)
        ax.text(-0.45, 80, "80 GB (one H100)", ha="left", va="bottom", fontsize=8, color="#555555")
        ax.set_xticks(range(len(SEQS)))
        ax.set_xticklabels([str(s) for s in SEQS])
        ax.set_xlabel("sequence length s (micro-batch b = 1)")
        ax.set_ylabel("GB per rank")
        ax.set_ylim(0, top * 1.15)
        ax.set_title("full recomputation: 2·s·b·h per layer + one layer" if rc else
                     "no recomputation: s·b·h·(34 + 5·a·s/h) per layer", fontsize=10)
    d0 = docs[SEQS[0]]
    axes[0].legend(handles=[Patch(color=C_PARAMS, label="params (bf16)"), Patch(color=C_GRADS, label="grads (bf16)"),
                            Patch(color=C_OPT, label="optimizer states (K = %g)" % d0["k"]),
                            Patch(color=C_ACTS, label="activations (Korthikanti et al. 2022; TP+SP: t = 8 ranks)")],
                   loc="upper left", fontsize=8)
    fig.suptitle("An 8B model (Llama-3-8B-like: L 32, h 4096, a 32), mixed-precision Adam, N = %d: ZeRO-3 shards the "
                 "model states, never the activations;\nthe same ranks as one TP group with sequence parallelism "
                 "(TP+SP) split both" % d0["world"], fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    savefig(fig, outdir, "ch00_gpt_acts")
    return None


FIGS = {"units": fig_units, "acts": fig_acts}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="results")
    ap.add_argument("--out", default=os.path.join("results", "figures"))
    ap.add_argument("--bin", default=None, help="build/bin: run ch00_memory for missing JSON")
    ap.add_argument("--only", default=",".join(FIGS))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    failed = 0
    for name in a.only.split(","):
        try:
            why = FIGS[name](a.results, a.out, a.bin)
            if why:
                print("  skipped %s: %s" % (name, why))
        except Exception as e:  # a figure whose inputs were there and failed: say so, go on
            print("  FAILED %s: %s" % (name, e))
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
