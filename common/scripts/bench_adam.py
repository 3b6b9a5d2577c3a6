#!/usr/bin/env python3
"""bench_adam.py — host AdamW throughput: our host step (solutions/offload.c: offload_host_adamw,
elementwise.h's ew_adamw over the range, --host-threads K) against PyTorch's CPU AdamW
(torch.optim.AdamW with its defaults: foreach on, fused off) on the same number of fp32
parameters, at 1..K threads. Notes: notes/08-offload.md, numbers in notes/benchmarks.md.

  python3 common/scripts/bench_adam.py [--params 16M] [--threads 1,2] [--bin build/bin/ch08_offload]

Needs torch for its half of the table; without it, it says so, prints ours alone and exits 0
(make test never runs it). Each figure: median over 20 steps after 3 warm-up steps.
"""
import argparse
import re
import statistics
import subprocess
import sys
import time


def count(s):
    m = re.fullmatch(r"([0-9.]+)([KMB]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"{s}: a count like 16M")
    return int(float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9}[m.group(2)])


def ours(binary, n, threads):
    out = subprocess.run([binary, "--bench-adam", str(n), "--host-threads", str(threads)], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"median ([0-9.]+) ms per step", out)
    if not m:
        sys.exit(f"bench_adam: unexpected output of {binary}: {out!r}")
    return float(m.group(1))


def torch_adamw(torch, n, threads):
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.arange(n, dtype=torch.float32).remainder_(97).mul_(0.01))
    p.grad = torch.arange(n, dtype=torch.float32).mul_(31).remainder_(101).mul_(0.001).sub_(0.05)
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)  # foreach default, fused=False
    times = []
    for r in range(23):
        t0 = time.perf_counter()
        opt.step()
        if r >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=count, default=count("16M"))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--bin", default="build/bin/ch08_offload")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    try:
        import torch
    except ImportError:
        torch = None
        print("bench_adam: torch is not installed: PyTorch's column is skipped (pip install torch, CPU wheel)")
    n = a.params
    print(f"host AdamW on {n} fp32 parameters, median ms per step (Mparams/s)")
    print(f"{'threads':>7} {'ours':>22} {'torch.optim.AdamW':>22} {'ours / torch':>13}")
    for t in threads:
        mo = ours(a.bin, n, t)
        row = f"{t:>7} {mo:>10.2f} ({n / mo / 1e3:>8.1f})"
        if torch is not None:
            mt = torch_adamw(torch, n, t)
            row += f" {mt:>10.2f} ({n / mt / 1e3:>8.1f}) {mt / mo:>12.2f}x"
        print(row)
    if torch is not None:
        print(f"torch {torch.__version__}, AdamW defaults (foreach, fused=False)")


if __name__ == "__main__":
    main()
