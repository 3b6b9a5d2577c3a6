#!/usr/bin/env python3
"""budget_gpt.py — the largest GPT each stage trains under one per-rank memory budget
(--mem-limit-mb: the ledger refuses beyond it), N = 4 ranks, bf16 AdamW; the GPT counterpart of
budget_demo.sh (notes/benchmarks.md, GPT section).

    python3 common/scripts/budget_gpt.py [--bin build/bin] [--out results/budget_gpt.json] [--budget 64] [--tp 2]

Model: --n-layer 8 --n-head 4 --seq-len 64, vocab 256, one sequence per rank (--batch 4); the search
is over n_embd in steps of 16. Predicted: chapter 00 for the same shape (model states per stage
+ this repository's fp32 activations of one sequence, gpt_acts_bytes); measured: the largest
n_embd whose one-step run the ledger does not refuse. The ledger also counts op workspaces,
communication buffers and, in ZeRO-3, the gathered units in flight, which the prediction leaves out.
With --tp T, rows follow for tensor parallel × each stage (ch06_tp --tp T --zero S: T ranks split
every layer, the stage shards what they hold over D = N/T): the same N, the same global batch of N
sequences (so each TP rank runs N/D of them); measured only — chapter 00 has no TP formula.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
N, L, NH, T, V = 4, 8, 4, 64, 256
STAGES = [(0, "DDP", ["ch02_ddp", "--variant", "bucketed"]), (1, "ZeRO-1", ["ch03_zero1"]),
          (2, "ZeRO-2", ["ch04_zero2"]), (3, "ZeRO-3", ["ch05_zero3", "--prefetch", "1"])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="results/budget_gpt.json")
    ap.add_argument("--budget", type=float, default=64, help="MiB per rank")
    ap.add_argument("--tp", type=int, default=0, help="also tensor parallel x each stage with T ranks per layer (0: no)")
    a = ap.parse_args()
    limit = a.budget * 1048576
    tmp = tempfile.mkdtemp(prefix="zl_budget_gpt_")

    def ch00(C):
        """(Ψ, [model states + fp32 activations per rank, per stage]) from chapter 00."""
        path = os.path.join(tmp, "ch00.json")
        subprocess.run([os.path.join(a.bin, "ch00_memory"), "--layers", str(L), "--hidden", str(C), "--heads", str(NH),
                        "--seq", str(T), "--micro-batch", "1", "--vocab", str(V), "--ranks", str(N), "--precision", "bf16",
                        "--json", path], check=True, stdout=subprocess.DEVNULL)
        d = json.load(open(path))
        acts = d["transformer"]["ours_fp32_acts"]
        return d["params"], [s["total"] + acts for s in sorted(d["stages"], key=lambda s: s["stage"])]

    def largest(fits, lo=16, hi=4096):
        if not fits(lo):
            return None
        while hi - lo > 16:
            mid = (lo + hi) // 32 * 16
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    refusal = {}

    def trains(stage, cmd, C):
        args = ["bash", os.path.join(HERE, "zlrun"), str(N), os.path.join(a.bin, cmd[0])] + cmd[1:] + [
            "--model", "gpt", "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C), "--seq-len", str(T),
            "--batch", str(N), "--steps", "1", "--precision", "bf16", "--device", "cpu",
            "--mem-limit-mb", "%g" % a.budget, "--quiet", "--json", os.path.join(tmp, "run.json")]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            lines = [x for x in p.stdout.splitlines() if "out of memory budget" in x]
            if not lines:
                sys.exit("budget_gpt: %s n_embd %d failed for another reason than the budget:\n%s" % (cmd[0], C, p.stdout))
            refusal[stage] = lines[0]
        return p.returncode == 0

    print("largest GPT per stage under --mem-limit-mb %g per rank, N = %d, bf16 AdamW, L %d, heads %d, seq %d, "
          "vocab %d, 1 sequence per rank (n_embd in steps of 16)" % (a.budget, N, L, NH, T, V))
    print("%-7s %10s %12s %10s %12s %9s  %s" % ("stage", "pred. C", "predicted Ψ", "meas. C", "measured Ψ", "Ψ vs DDP",
                                               "first refusal above it"))
    rows, ddp_psi = [], None
    for stage, name, cmd in STAGES:
        pc = largest(lambda C: ch00(C)[1][stage] <= limit)
        mc = largest(lambda C: trains(stage, cmd, C), hi=pc + 32)
        ppsi, mpsi = ch00(pc)[0], ch00(mc)[0] if mc else 0
        ddp_psi = ddp_psi or mpsi
        rows.append({"stage": stage, "name": name, "predicted_n_embd": pc, "predicted_params": ppsi,
                     "measured_n_embd": mc, "measured_params": mpsi, "refusal": refusal.get(stage, "")})
        print("%-7s %10d %12d %10s %12d %8.2fx  %s" % (name, pc, ppsi, mc, mpsi, mpsi / ddp_psi if ddp_psi else 0,
                                                      refusal.get(stage, "")), flush=True)
    if a.tp > 1:
        top = max(r["measured_n_embd"] or 16 for r in rows)
        for stage, name, _ in STAGES:
            cmd = ["ch06_tp", "--tp", str(a.tp), "--zero", str(stage)]
            mc = largest(lambda C: trains(10 + stage, cmd, C), hi=2 * top + 64)
            mpsi = ch00(mc)[0] if mc else 0
            rows.append({"stage": stage, "name": "TP%d x %s" % (a.tp, name), "tp": a.tp, "measured_n_embd": mc,
                         "measured_params": mpsi, "refusal": refusal.get(10 + stage, "")})
            print("%-7s %10s %12s %10s %12d %8.2fx  %s" % ("TP%d×%s" % (a.tp, name.replace("ZeRO-", "Z")), "-", "-", mc, mpsi,
                                                          mpsi / ddp_psi if ddp_psi else 0, refusal.get(10 + stage, "")),
                  flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    json.dump({"budget_mib": a.budget, "world": N, "precision": "bf16",
               "model": {"n_layer": L, "n_head": NH, "seq_len": T, "vocab": V, "batch_per_rank": 1}, "rows": rows},
              open(a.out, "w"), indent=1)
    print("predicted: chapter 00 (model states + fp32 activations of one sequence); measured: the ledger, which also")
    print("counts op workspaces and communication buffers (ZeRO-3: the gathered units in flight).")
    print("results: %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
