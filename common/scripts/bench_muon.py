#!/usr/bin/env python3
"""bench_muon.py — Muon against AdamW on the GPT at equal steps, a few learning rates each, the
best of each; Newton–Schulz's time per step against its FLOPs; the owners' imbalance
(notes/03-zero1.md, "Muon: whole matrices, not slices", "Measured").

    python3 common/scripts/bench_muon.py [--bin build/bin] [--out results/bench_muon.json]
                                         [--gpt tiny] [--batch 8] [--steps 300]
    make bench-muon                      (the same, into results/)

Every run: 1 rank, `ch02_ddp --model gpt --gpt G --batch B --steps S --seed K --precision fp32`
on the repository's text (the GPT's default data), AdamW with --lr in LRS_ADAMW, or
--optimizer muon with --muon-lr in LRS_MUON (its AdamW part at --lr 3e-3, the default), each at
the seeds in SEEDS. The loss compared: the mean training loss of the last 20 steps (less noisy
than the last one), averaged over the seeds; a best lr at either end of its grid is flagged
("at_grid_edge"): the grid would then have to grow before the comparison means anything.

Newton–Schulz FLOPs per step, for each Muon matrix of s × l (s <= l, the smaller side first): 5
iterations of A = X Xᵀ (2 s² l), B = bA + cA² (2 s³) and B X (2 s² l), so 5 (4 s² l + 2 s³); the GPT
has per block qkv 3C × C, proj C × C, fc 4C × C, fcproj C × 4C. Its time per step is measured as
Muon's median step minus AdamW's (medians over the lrs; the rest of the step is the same), beside the GEMM rate the
training itself reaches (6 Ψ tokens FLOPs per step over the AdamW step).

The imbalance: ch03_zero1 --shard owner on 2 ranks prints each rank's matrix params (the greedy).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LRS_ADAMW = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
LRS_MUON = [0.00125, 0.0025, 0.005, 0.01, 0.02, 0.04]  # the best of each must sit inside its grid
SEEDS = [1, 2]
SHAPES = {"tiny": (2, 32, 16), "small": (4, 128, 64)}  # L, C, T (common/model/gpt.c's presets)


def run(bin_dir, args, np=1, quiet=True):
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "r.json")
        cmd = [os.path.join(HERE, "zlrun"), str(np), os.path.join(bin_dir, args[0])] + args[1:] + \
              ["--json", js] + (["--quiet"] if quiet else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("bench_muon: %s exited %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
        with open(js) as f:
            return json.load(f), p.stdout


def ns_flops(L, C):
    total = 0
    for rows, cols in [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)]:
        s, l = min(rows, cols), max(rows, cols)
        total += 5 * (4 * s * s * l + 2 * s ** 3)
    return L * total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="results/bench_muon.json")
    ap.add_argument("--gpt", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    base = ["ch02_ddp", "--model", "gpt", "--gpt", a.gpt, "--batch", str(a.batch), "--steps", str(a.steps),
            "--precision", "fp32", "--device", "cpu"]
    runs = []
    for opt, lrs in (("adamw", LRS_ADAMW), ("muon", LRS_MUON)):
        for lr in lrs:
            extra = ["--optimizer", opt] + (["--lr", str(lr)] if opt == "adamw" else ["--muon-lr", str(lr)])
            per_seed, steps_ms = [], []
            for seed in SEEDS:
                j, _ = run(a.bin, base + extra + ["--seed", str(seed)])
                losses, psi = [s["loss"] for s in j["steps"]], j["params"]
                per_seed.append(statistics.mean(losses[-20:]))
                steps_ms.append(j["timing"]["median_step_ms"] if "timing" in j else j.get("median_step_ms"))
            r = {"optimizer": opt, "lr": lr, "loss_last20": statistics.mean(per_seed),
                 "loss_last20_per_seed": per_seed, "loss_first": losses[0],
                 "median_step_ms": statistics.median(steps_ms)}
            runs.append(r)
            print("%-6s lr %-7g loss (last 20 steps, mean of %d seeds) %.4f  %s  median step %.3f ms" %
                  (opt, lr, len(SEEDS), r["loss_last20"], " ".join("%.4f" % x for x in per_seed),
                   r["median_step_ms"]), flush=True)
    best = {o: min((r for r in runs if r["optimizer"] == o), key=lambda r: r["loss_last20"])
            for o in ("adamw", "muon")}
    grids = {"adamw": LRS_ADAMW, "muon": LRS_MUON}
    edge = {o: best[o]["lr"] in (min(grids[o]), max(grids[o])) for o in best}
    L, C, T = SHAPES[a.gpt]
    fl = ns_flops(L, C)
    step = {o: statistics.median(r["median_step_ms"] for r in runs if r["optimizer"] == o) for o in best}
    extra_ms = step["muon"] - step["adamw"]  # the median over the lrs: a shared machine is noisy
    train_gflops = 6.0 * psi * a.batch * T / (step["adamw"] * 1e6)
    _, text = run(a.bin, ["ch03_zero1", "--shard", "owner", "--model", "gpt", "--gpt", a.gpt, "--batch",
                          str(a.batch), "--steps", "2", "--optimizer", "muon"], np=2, quiet=False)
    loads = [int(x) for x in re.findall(r"rank \d+ owns[^:]*: (\d+) matrix params", text)]
    out = {"gpt": a.gpt, "batch": a.batch, "steps": a.steps, "seeds": SEEDS, "runs": runs,
           "best": {o: {"lr": best[o]["lr"], "loss_last20": best[o]["loss_last20"],
                        "at_grid_edge": edge[o]} for o in best},
           "loss_ratio_muon_over_adamw": best["muon"]["loss_last20"] / best["adamw"]["loss_last20"],
           "ns_flops_per_step": fl, "ns_formula": "sum over matrices of 5 (4 s^2 l + 2 s^3), s <= l",
           "median_step_ms": step, "muon_extra_ms_per_step": extra_ms,
           "ns_gflops_implied": fl / (extra_ms * 1e6) if extra_ms > 0 else None,
           "train_gflops": train_gflops, "psi": psi,
           "owner_loads_n2": loads, "owner_bytes_n2": [4 * x for x in loads]}
    print("best: AdamW lr %g loss %.4f; Muon lr %g loss %.4f (ratio %.3f)" % (
        best["adamw"]["lr"], best["adamw"]["loss_last20"], best["muon"]["lr"], best["muon"]["loss_last20"],
        out["loss_ratio_muon_over_adamw"]))
    for o in best:
        if edge[o]:
            print("note: %s's best lr %g is at its grid's edge %s: widen the grid" % (o, best[o]["lr"], grids[o]))
    print("Newton-Schulz: %d FLOPs per step (5 (4 s^2 l + 2 s^3) per matrix); Muon's step - AdamW's: %.3f ms"
          % (fl, extra_ms))
    print("owners on 2 ranks: matrix params %s (momentum bytes %s)" % (loads, [4 * x for x in loads]))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
