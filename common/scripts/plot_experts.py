#!/usr/bin/env python3
"""plot_experts.py — chapter 12's figure (notes/12-experts.md), called by plots.py.

  experts   from the committed measurement notes/data/bench_experts.json (make bench-experts), five
            panels: (a) the share of choices dropped against the capacity factor, top-1 and top-2, with
            and without Switch's aux loss, beside the Switch paper's "typically < 1%" (a line, their
            setting: T5-Base on C4, not ours); (b) max/mean expert load per step with no balancing, the
            aux loss and the aux-free bias; (c) the all-to-all bytes per rank per step at EP 2 (measured,
            the formula as a tick) beside TP 2 of the dense MLPs (notes/06's formula) and ch06_tp's whole
            model (measured); (d) step time and (e) peak bytes per rank of top-1 MoE at EP 1, 2, 4
            against dense DDP with the same active parameters; (f) rank 0's time per step in the
            dispatch / experts / combine spans of a --trace (compute thread; hatched: the all-to-all on
            the communication thread inside each).
  experts_groups  two data-parallel groups against the old layout: the step rows of bench_experts.json
            (everything over D: the old column) beside bench_experts_two_groups.json (DDP's dense gradients
            over all N), EP 1, 2 and 4: bytes sent, step time and model states / peak per rank.
  experts_groups_zero1  the same panels for ZeRO-1's MoE rows: bench_experts_zero1_old.json (a build before
            ZeRO's two groups) beside bench_experts_zero1_two_groups.json (dense states over all N).
"""
import json
import os

from zl_mpl import find_matplotlib  # common/scripts/zl_mpl.py

find_matplotlib()
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 110


def fig_experts(datadir, outdir):
    doc = json.load(open(os.path.join(datadir, "bench_experts.json")))
    fig, ax = plt.subplots(2, 3, figsize=(16, 9))
    (a, b, c), (d, e, f) = ax

    # (a) drop rate against the capacity factor
    rows = list(doc["drop"].values())
    cfs = sorted({r["cf"] for r in rows})
    series = [(1, 0.01, "C0", "-"), (2, 0.01, "C1", "-"), (1, 0.0, "C0", "--"), (2, 0.0, "C1", "--")]
    for k, aux, col, ls in series:
        pts = sorted((r["cf"], r["drop_rate"]) for r in rows if r["k"] == k and r["aux"] == aux)
        if pts:
            a.plot([p[0] for p in pts], [100 * p[1] for p in pts], "o" + ls, color=col,
                   label="top-%d, %s" % (k, "aux loss 0.01" if aux else "no aux loss"))
    a.axhline(1.0, color="black", lw=1, ls=":")
    a.text(cfs[0], 1.5, "Switch paper: \"typically < 1%\" (T5-Base on C4, their setting)", fontsize=8)
    a.set_xticks(cfs)
    a.set_xlabel("--capacity-factor")
    a.set_ylabel("choices dropped, % (over 40 steps)")
    a.set_title("(a) drops against capacity (E 8, EP 2)", fontsize=10)
    a.legend(fontsize=8)
    a.grid(alpha=0.3)

    # (b) load balance over the first steps
    for i, r in enumerate(doc["balance"].values()):
        b.plot(range(len(r["ratios"])), r["ratios"], "o-", ms=3, color="C%d" % i,
               label="%s (step %d: %.2f)" % (r["name"], r["steps"] - 1, r["last"]))
    b.axhline(4.0, color="black", lw=1, ls=":")
    b.text(0, 4.05, "E/k = 4: every token on the same 2 experts", fontsize=8)
    b.axhline(1.0, color="gray", lw=1, ls=":")
    b.set_ylim(0.9, 4.4)
    b.set_xlabel("step")
    b.set_ylabel("max / mean expert load (mean over the MoE blocks)")
    b.set_title("(b) balance (E 8, top-2, dropless)", fontsize=10)
    b.legend(fontsize=8, loc="lower right")
    b.grid(alpha=0.3)

    # (c) bytes: EP all-to-all vs TP all-reduce of the MLPs
    by = dict(doc["bytes"])
    by["ep"] = list(by["ep"].values())
    names = [r["name"] for r in by["ep"]] + ["TP 2: the MLPs\n(notes/06 formula)", "TP 2: whole model\n(ch06_tp, measured)"]
    vals = [r["measured"] for r in by["ep"]] + [by["tp"]["mlp_formula"], by["tp"]["measured"]]
    cols = ["C2"] * len(by["ep"]) + ["C7", "C7"]
    ys = range(len(names))
    c.barh(list(ys), [v / 2**20 for v in vals], color=cols)
    c.scatter([r["formula"] / 2**20 for r in by["ep"]], list(range(len(by["ep"]))), marker="|", s=300, color="black",
              zorder=3, label="formula")
    for y, v in zip(ys, vals):
        c.text(v / 2**20, y, " %.2f" % (v / 2**20), va="center", fontsize=8)
    c.set_yticks(list(ys))
    c.set_yticklabels([n.replace("EP 2 ", "EP 2: ") for n in names], fontsize=8)
    c.invert_yaxis()
    c.set_xlabel("MiB sent per rank per step (%d MoE blocks / MLPs)" % by["layers"])
    c.set_title("(c) all-to-all (EP) vs all-reduce (TP), 2 ranks, batch %d" % by["global_batch"], fontsize=10)
    c.legend(fontsize=8, loc="center right")
    c.grid(alpha=0.3, axis="x")

    # (d), (e) step time and peak per rank
    st = list(doc["step"].values())
    labels = ["%s\nN=%d" % (r["name"].replace("MoE ", "").replace("dense ", "dense\n").replace(" TP", "\nTP"), r["N"])
              for r in st]
    colors = ["C7" if r["name"].startswith("dense") else "C%d" % (r["ep"] + (r.get("tp", 1) > 1) + r.get("sp", 0))
              for r in st]
    xs = range(len(st))
    d.bar(list(xs), [r["median_step_ms"] for r in st], color=colors)
    for x, r in zip(xs, st):
        d.scatter([x] * len(r["step_ms_runs"]), r["step_ms_runs"], color="black", s=8, zorder=3)
        if "sent_bytes_per_step" in r:  # what the rank sent per step: the strategy's, the EP all-reduce, the all-to-alls
            d.text(x, 2, "%.1f MiB\nsent" % (r["sent_bytes_per_step"] / 2**20), ha="center", va="bottom", fontsize=7,
                   color="white")
    d.set_xticks(list(xs))
    d.set_xticklabels(labels, fontsize=7)
    d.set_ylabel("median step, ms (dots: each run)")
    d.set_title("(d) step, top-1 E 4 vs dense; in the bars: sent per rank\n(N=4: 4 ranks on 2 cores)", fontsize=10)
    d.grid(alpha=0.3, axis="y")
    e.bar(list(xs), [r["model_states_bytes"] / 2**20 for r in st], color=colors, label="model states")
    e.bar(list(xs), [(r["peak_bytes"] - r["model_states_bytes"]) / 2**20 for r in st],
          bottom=[r["model_states_bytes"] / 2**20 for r in st], color=colors, alpha=0.4,
          label="activations, buffers (lighter)")
    e.set_xticks(list(xs))
    e.set_xticklabels(labels, fontsize=7)
    e.set_ylabel("peak MiB per rank (ledger, max over ranks)")
    e.set_title("(e) memory per rank (global batch 16)", fontsize=10)
    e.legend(fontsize=8)
    e.grid(alpha=0.3, axis="y")

    # (f) the trace's spans
    tr = doc["trace"]
    spans = list(tr["compute_ms_per_step"])
    yy = range(len(spans))
    f.barh(list(yy), [tr["compute_ms_per_step"][s] for s in spans], color="C0", label="span (compute thread)")
    f.barh(list(yy), [tr["all_to_all_ms_per_step"].get(s, 0) for s in spans], color="none", edgecolor="black",
           hatch="//", label="its all-to-all (comm thread)")
    f.set_yticks(list(yy))
    f.set_yticklabels([x.replace("_", " ") for x in spans], fontsize=8)
    f.invert_yaxis()
    f.set_xlabel("ms per step, rank 0 (steps 1..%d)" % tr["steps_counted"])
    f.set_title("(f) trace, EP 2: median step %.1f ms" % tr["median_step_ms"], fontsize=10)
    f.legend(fontsize=8, loc="lower right")
    f.grid(alpha=0.3, axis="x")

    m = doc["_meta"]
    pm = doc.get("_part_meta", {})
    when = "; ".join("%s %s, load %.1f" % (p, pm[p]["date"][:16], pm[p]["load_before"][0]) for p in ("drop", "step") if p in pm)
    fig.suptitle("Mixture of Experts, measured (make bench-experts, %s; %s; (d)(e) medians of %d)" %
                 (m["model"], when or m["date"], pm.get("step", m).get("reps", m["reps"])), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(os.path.join(outdir, "experts.png"), dpi=DPI)
    plt.close(fig)
    print("  wrote %s" % os.path.join(outdir, "experts.png"))


def fig_experts_groups(datadir, outdir):
    return groups_fig(datadir, outdir, "bench_experts.json", "bench_experts_two_groups.json", "experts_groups",
                      "Two data-parallel groups (DDP, GPT small, top-1 of 4 experts, global batch 16): the old "
                      "layout's step rows beside the new")


def fig_experts_groups_zero1(datadir, outdir):
    return groups_fig(datadir, outdir, "bench_experts_zero1_old.json", "bench_experts_zero1_two_groups.json",
                      "experts_groups_zero1",
                      "ZeRO-1 on two data-parallel groups (GPT small, top-1 of 4 experts, global batch 16): "
                      "the old layout (a build before it) beside the new")


def groups_fig(datadir, outdir, old_name, new_name, out_name, suptitle):
    paths = [os.path.join(datadir, n) for n in (old_name, new_name)]
    missing = [q for q in paths if not os.path.exists(q)]
    if missing:
        print("  %s: no %s (make bench-experts EXPERTS_PARTS=step ...): skipped" % (out_name, missing[0]))
        return None
    docs = [json.load(open(q)) for q in paths]
    old, new = (d["step"] for d in docs)
    loads = [d.get("_part_meta", {}).get("step", d["_meta"])["load_before"][0] for d in docs]
    keys = [k for k in ("ep1_N2", "ep2_N2", "ep1_N4", "ep2_N4", "ep4_N4") if k in old and k in new]
    labels = ["EP %d\nN=%d" % (new[k]["ep"], new[k]["N"]) for k in keys]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.6))
    xs = list(range(len(keys)))
    w = 0.38
    panels = [("sent_bytes_per_step", 2**20, "MiB sent per rank per step", "(a) sent per rank"),
              ("median_step_ms", 1, "median step, ms",
               "(b) step time, 2 shared cores: load %.1f (old) and %.1f (new)\nat the start" % tuple(loads)),
              ("model_states_bytes", 2**20, "MiB per rank (hatched: peak)", "(c) model states and peak")]
    for p, (field, div, ylabel, title) in zip(ax, panels):
        for i, (doc, name, col) in enumerate(((old, "old: everything over D", "C7"),
                                              (new, "two groups: dense over N", "C0"))):
            xx = [x + (i - 0.5) * w for x in xs]
            p.bar(xx, [doc[k][field] / div for k in keys], w, color=col, label=name)
            if field == "model_states_bytes":
                p.bar(xx, [(doc[k]["peak_bytes"] - doc[k]["model_states_bytes"]) / div for k in keys], w,
                      bottom=[doc[k]["model_states_bytes"] / div for k in keys], color="none", edgecolor=col,
                      hatch="//")
        p.set_xticks(xs)
        p.set_xticklabels(labels, fontsize=8)
        p.set_ylabel(ylabel)
        p.set_title(title, fontsize=10)
        p.grid(alpha=0.3, axis="y")
    ax[0].legend(fontsize=8)
    fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(os.path.join(outdir, out_name + ".png"), dpi=DPI)
    plt.close(fig)
    print("  wrote %s" % os.path.join(outdir, out_name + ".png"))
    return None
