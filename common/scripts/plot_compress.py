#!/usr/bin/env python3
"""plot_compress.py — chapter 13's figure (notes/13-compression.md), called by plots.py.

  compress  from the committed measurement notes/data/bench_compress.json (make bench-compress
            LINKS=1000,100,20 UPDATE_NOTES=1), four panels: (a) bytes a rank sends per step for each
            code against its uncompressed reference (measured bars, the formula as a black tick);
            (b) ZeRO++ against ZeRO-3: the bytes across the two emulated nodes per step and rank for
            each combination of hpZ, qwZ and qgZ (measured, the formula as a tick), the ratio to
            ZeRO-3's written on each bar; (c) the final loss of every seed for each code, beside the
            band the uncompressed run's own seed spread allows; (d) the median step time of ZeRO-3 and
            of all three codes on two emulated nodes against the link's rate, with the speed-up.
"""
import json
import os

from zl_mpl import find_matplotlib  # common/scripts/zl_mpl.py

find_matplotlib()
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 110
NAMES = {"ddp": "DDP", "powersgd": "PowerSGD:4", "onebit_adam": "1-bit Adam", "zero3": "ZeRO-3",
         "qwz": "qwZ", "hpz": "hpZ", "qwz_hpz": "qwZ+hpZ", "qgz": "qgZ", "qwz_hpz_qgz": "all three"}


def _bars(ax, labels, measured, formula, color, unit=1024.0):
    xs = range(len(labels))
    ax.bar(xs, [m / unit for m in measured], color=color)
    for x, f in zip(xs, formula):
        ax.plot([x - 0.4, x + 0.4], [f / unit] * 2, color="black", lw=1.5)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=20, fontsize=9)
    ax.grid(alpha=0.3, axis="y")


def fig_compress(datadir, outdir):
    doc = json.load(open(os.path.join(datadir, "bench_compress.json")))
    meta, methods = doc["_meta"], doc["methods"]
    fig, ax = plt.subplots(2, 2, figsize=(14, 9))
    (a, b), (c, d) = ax

    order = [k for k in ("ddp", "powersgd", "onebit_adam", "zero3", "qwz") if k in methods]
    _bars(a, [NAMES[k] for k in order], [methods[k]["bytes_per_step_per_rank"] for k in order],
          [methods[k]["formula_bytes_per_step_per_rank"] for k in order],
          ["C7" if methods[k]["reference"] is None else "C0" for k in order])
    a.set_ylabel("KiB sent per rank per step")
    a.set_title("(a) bytes per step, %d ranks (grey: uncompressed; tick: formula)" % meta["ranks"], fontsize=10)

    zp = doc.get("zeropp")
    if zp:
        keys = [k for k in ("zero3", "hpz", "qwz", "qwz_hpz", "qgz", "qwz_hpz_qgz") if k in zp]
        _bars(b, [NAMES[k] for k in keys], [zp[k]["inter_bytes_per_step_per_rank"] for k in keys],
              [zp[k]["formula_inter_bytes_per_step_per_rank"] for k in keys],
              ["C7" if k == "zero3" else "C2" for k in keys])
        for x, k in enumerate(keys):
            b.text(x, zp[k]["inter_bytes_per_step_per_rank"] / 1024.0, "%.2fx" % zp[k]["zero3_over_this"],
                   ha="center", va="bottom", fontsize=9)
        b.set_ylabel("KiB across nodes per rank per step")
        b.set_title("(b) ZeRO++ against ZeRO-3: %d ranks on 2 emulated nodes, bf16 (ratio: ZeRO-3 / this)"
                    % zp["_meta"]["ranks"], fontsize=10)

    for x, k in enumerate(order):
        m = methods[k]
        c.scatter([x] * len(m["final_loss"]), m["final_loss"], color="C7" if m["reference"] is None else "C0",
                  s=18, zorder=3)
        if m.get("band"):
            lo, hi = m["band"]
            c.add_patch(plt.Rectangle((x - 0.3, lo), 0.6, hi - lo, color="C2", alpha=0.15, zorder=1))
    c.set_xticks(range(len(order)))
    c.set_xticklabels([NAMES[k] for k in order], rotation=20, fontsize=9)
    c.set_ylabel("final loss (one dot a seed)")
    c.set_title("(c) loss after %d steps, %d seeds; green: the uncompressed run's seed band"
                % (meta["steps"], meta["seeds"]), fontsize=10)
    c.grid(alpha=0.3, axis="y")

    links = doc.get("links")
    if links:
        rates = sorted((int(r) for r in links if r != "_meta"), reverse=True)
        z = [links[str(r)]["zero3"]["median_step_ms"] for r in rates]
        q = [links[str(r)]["qwz_hpz_qgz"]["median_step_ms"] for r in rates]
        d.plot(rates, z, "o-", color="C7", label="ZeRO-3")
        d.plot(rates, q, "o-", color="C2", label="qwZ + hpZ + qgZ")
        for r, zz, qq in zip(rates, z, q):
            d.text(r, max(zz, qq) * 1.1, "%.2fx" % (zz / qq), ha="center", fontsize=9)
        d.set_xscale("log")
        d.set_yscale("log")
        d.set_xticks(rates)
        d.set_xticklabels([str(r) for r in rates])
        d.minorticks_off()
        d.invert_xaxis()
        d.set_xlabel("link between the nodes, Mbit/s (tc tbf)")
        d.set_ylabel("median step, ms")
        d.legend(fontsize=9)
        d.grid(alpha=0.3)
        la = [links[str(r)]["load_after"][0] for r in rates]
        d.set_title("(d) step time on 2 emulated nodes x 2 ranks, medians of %d (load %.1f-%.1f)"
                    % (links["_meta"]["reps"], min(la), max(la)), fontsize=10)
    fig.suptitle("Chapter 13, measured: make bench-compress (%s, %d cores, load %.1f -> %.1f)" % (
        meta["date"], meta["cpus"], meta["load_before"][0], meta["load_after"][0]), fontsize=11)
    fig.tight_layout()
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "compress.png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print("  wrote %s" % path)
