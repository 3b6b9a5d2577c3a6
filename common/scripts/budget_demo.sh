#!/usr/bin/env bash
# budget_demo.sh BIN RESULTS [BUDGET_MIB] — the largest model each stage can train under one
# per-rank memory budget (--mem-limit-mb, the ledger refuses beyond it), N = 4 ranks, bf16 AdamW,
# beside chapter 00's prediction from the formula (model states only). Model: input 64, classes 10,
# 32 hidden layers of width H (many units, so ZeRO-3's gathered window stays small); the search is
# over H in steps of 8. make budget-demo runs it; notes/benchmarks.md records the result.
set -eu
bin=${1:?usage: budget_demo.sh BIN RESULTS [BUDGET_MIB]}
res=${2:?usage: budget_demo.sh BIN RESULTS [BUDGET_MIB]}
budget=${3:-${ZL_BUDGET_MIB:-64}}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$res"
python3 - "$bin" "$res" "$budget" "$here/zlrun" <<'PY'
import json, os, subprocess, sys, tempfile
bin, res, budget, zlrun = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
N, D, C, L = 4, 64, 10, 32
limit = budget * 1048576
stages = [(0, "DDP", "ch02_ddp --variant bucketed"), (1, "ZeRO-1", "ch03_zero1"), (2, "ZeRO-2", "ch04_zero2"),
          (3, "ZeRO-3", "ch05_zero3 --prefetch 1")]
tmp = tempfile.mkdtemp(prefix="zl_budget_")

def ch00(H):
    """Chapter 00's prediction for width H: (psi, [model-state bytes per rank per stage])."""
    path = os.path.join(tmp, "ch00.json")
    subprocess.run([os.path.join(bin, "ch00_memory"), "--model", "%d,%d,%d,%d" % (D, H, C, L), "--ranks", str(N),
                    "--precision", "bf16", "--json", path], check=True, stdout=subprocess.DEVNULL)
    d = json.load(open(path))
    return d["params"], [s["total"] for s in sorted(d["stages"], key=lambda s: s["stage"])]

def largest(fits, lo=8, hi=8192):
    """Largest H (multiple of 8) in [lo, hi) with fits(H); lo must fit."""
    if not fits(lo):
        return None
    while hi - lo > 8:
        mid = (lo + hi) // 16 * 8
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo

last_msg = {}
def trains(stage, cmd, H):
    args = ["bash", zlrun, str(N)] + [os.path.join(bin, cmd.split()[0])] + cmd.split()[1:] + [
        "--input", str(D), "--hidden", str(H), "--classes", str(C), "--layers", str(L), "--batch", str(N),
        "--steps", "1", "--precision", "bf16", "--mem-limit-mb", "%g" % budget, "--quiet",
        "--json", os.path.join(tmp, "run.json")]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        lines = [l for l in p.stdout.splitlines() if "out of memory budget" in l]
        if not lines:
            sys.exit("budget demo: %s H=%d failed for another reason than the budget:\n%s" % (cmd, H, p.stdout))
        last_msg[stage] = lines[0]
    return p.returncode == 0

print("largest model per stage under --mem-limit-mb %g per rank, N = %d, bf16 AdamW, MLP %d -> %d x H -> %d (H in steps of 8)"
      % (budget, N, D, L, C))
print("%-7s %11s %12s %11s %12s %10s  %s" % ("stage", "predicted H", "predicted Ψ", "measured H", "measured Ψ", "Ψ vs DDP",
                                            "first refusal above it"))
rows, ddp_psi = [], None
for stage, name, cmd in stages:
    pH = largest(lambda H: ch00(H)[1][stage] <= limit)
    pPsi = ch00(pH)[0]
    mH = largest(lambda H: trains(stage, cmd, H), hi=pH + 16)
    mPsi = ch00(mH)[0] if mH else 0
    if stage == 0:
        ddp_psi = mPsi
    rows.append({"stage": stage, "name": name, "predicted_hidden": pH, "predicted_params": pPsi, "measured_hidden": mH,
                 "measured_params": mPsi, "refusal": last_msg.get(stage, "")})
    print("%-7s %11d %12d %11s %12d %9.2fx  %s" % (name, pH, pPsi, mH, mPsi, mPsi / ddp_psi if ddp_psi else 0,
                                                 last_msg.get(stage, "")))
json.dump({"budget_mib": budget, "world": N, "precision": "bf16", "model": {"input": D, "classes": C, "layers": L},
           "rows": rows}, open(os.path.join(res, "budget_demo.json"), "w"), indent=1)
print("predicted: chapter 00's formula (model states only); measured: the run's ledger, which also counts")
print("activations, op workspaces and communication buffers (ZeRO-3: the gathered units in flight).")
print("results: %s" % os.path.join(res, "budget_demo.json"))
PY
