#!/usr/bin/env python3
"""bench_gpt.py — tokens/s of our GPT training (ch02_ddp --model gpt) against PyTorch eager on
the identical model, on the CPU (notes/benchmarks.md, "GPT"; notes/gpt.md).

    python3 common/scripts/bench_gpt.py [--bin build/bin] [--out results/bench_gpt.json]
                                        [--gpt small] [--batch 16] [--steps 20] [--reps 5]
                                        [--ranks 1,2]
    make bench-gpt                      (the same, into results/)

Both sides: the same GPT (gpt_reference.GPT, the module the reference fixture checks against
common/model/gpt.c), fp32, AdamW (lr 3e-3, betas 0.9/0.999, eps 1e-8, no weight decay: our defaults),
the same GLOBAL batch of --batch sequences split over N ranks, one thread per rank (ours: one
OpenBLAS thread per MPI rank, zlrun; PyTorch: torch.set_num_threads(1) per process).
  ours     common/scripts/zlrun N BIN/ch02_ddp --model gpt --gpt P --batch B --steps S
           --optimizer adamw --precision fp32 --device cpu --json ...   (DDP, bucketed)
  PyTorch  N = 1: a plain loop; N = 2: DistributedDataParallel over gloo (torch.multiprocessing);
           attention through F.scaled_dot_product_attention(is_causal=True), what a PyTorch
           user would write; random tokens (ours reads the text file inside its step).
One run = S steps; its step time is the median over the steps (ours: median_step_ms of --json;
PyTorch: the same median of wall times per step, rank 0). The repetitions alternate
ours / PyTorch for each N, so drift (other processes, frequency) hits both alike; the table
gives the median over --reps runs. Without torch the PyTorch side is skipped (ours still runs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from gpt_reference import GPT
except ImportError:
    torch = None

# common/model/gpt.c gpt_preset: (n_layer, n_head, n_embd, seq_len, vocab); checked against ours' --json
PRESETS = {"tiny": (2, 2, 32, 16, 256), "small": (4, 4, 128, 64, 256), "124m-shape": (12, 12, 768, 1024, 256)}
HP = dict(lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


# ---- PyTorch side -----------------------------------------------------------------------------
def torch_worker(rank, world, shape, batch, steps, port, out):
    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model = GPT(*shape, sdpa=True)
    if world > 1:
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), **HP)
    b, T, V = batch // world, shape[3], shape[4]
    times = []
    for step in range(steps):
        x = torch.randint(0, V, (b, T))
        y = torch.randint(0, V, (b, T))
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"median_step_ms": 1e3 * statistics.median(times), "final_loss": loss.item()}, f)


def run_torch(world, shape, batch, steps, tmp, rep):
    out = os.path.join(tmp, f"torch_np{world}_{rep}.json")
    port = 29500 + (os.getpid() + rep * 7 + world) % 2000
    if world == 1:
        torch_worker(0, 1, shape, batch, steps, port, out)
    else:
        mp.spawn(torch_worker, args=(world, shape, batch, steps, port, out), nprocs=world, join=True)
    with open(out) as f:
        return json.load(f)["median_step_ms"]


# ---- ours -------------------------------------------------------------------------------------
def ours_cmd(binary, world, preset, batch, steps, json_path):
    return ["bash", os.path.join(HERE, "zlrun"), str(world), binary, "--model", "gpt", "--gpt", preset,
            "--batch", str(batch), "--steps", str(steps), "--optimizer", "adamw", "--precision", "fp32",
            "--device", "cpu", "--lr", str(HP["lr"]), "--json", json_path, "--quiet"]


def run_ours(binary, world, preset, shape, batch, steps, tmp, rep):
    js = os.path.join(tmp, f"ours_np{world}_{rep}.json")
    r = subprocess.run(ours_cmd(binary, world, preset, batch, steps, js), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_gpt: ch02_ddp N={world} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    with open(js) as f:
        d = json.load(f)
    m = d["model"]
    got = (m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab"])
    if got != shape:
        raise SystemExit(f"bench_gpt: ours trained {got}, the PyTorch side builds {shape}")
    return d["median_step_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="results/bench_gpt.json")
    ap.add_argument("--gpt", default="small", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16, help="global batch (sequences per step)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", default="1,2")
    a = ap.parse_args()
    binary = os.path.join(a.bin, "ch02_ddp")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"bench_gpt: {binary} not built (make build)")
    ranks = [int(n) for n in a.ranks.split(",")]
    shape = PRESETS[a.gpt]
    tokens = a.batch * shape[3]
    if torch is None:
        print("bench_gpt: torch is not installed (pip install torch): PyTorch side skipped, ours only")
    else:
        print(f"bench_gpt: torch {torch.__version__}")
    print(f"bench_gpt: --gpt {a.gpt} {shape} (L, NH, C, T, V), global batch {a.batch} x {shape[3]} = {tokens} "
          f"tokens/step, {a.steps} steps per run, {a.reps} repetitions alternating ours / PyTorch, fp32, AdamW")
    ms = {(side, n): [] for side in ("ours", "torch") for n in ranks}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for n in ranks:
                ms[("ours", n)].append(run_ours(binary, n, a.gpt, shape, a.batch, a.steps, tmp, rep))
                if torch is not None:
                    ms[("torch", n)].append(run_torch(n, shape, a.batch, a.steps, tmp, rep))
                line = f"  rep {rep + 1}/{a.reps} N={n}: ours {ms[('ours', n)][-1]:.1f} ms"
                if torch is not None:
                    line += f", PyTorch {ms[('torch', n)][-1]:.1f} ms"
                print(line, flush=True)
    rows = []
    print(f"\n{'N':>3} {'ours ms':>9} {'ours tok/s':>11} {'torch ms':>9} {'torch tok/s':>12} {'ratio':>7}")
    for n in ranks:
        o = statistics.median(ms[("ours", n)])
        row = {"world": n, "ours_step_ms": o, "ours_tokens_per_s": tokens / o * 1e3, "ours_runs_ms": ms[("ours", n)]}
        t_txt = f"{'-':>9} {'-':>12} {'-':>7}"
        if torch is not None:
            t = statistics.median(ms[("torch", n)])
            row.update(torch_step_ms=t, torch_tokens_per_s=tokens / t * 1e3, torch_runs_ms=ms[("torch", n)],
                       ratio=t / o)
            t_txt = f"{t:9.1f} {tokens / t * 1e3:12.0f} {t / o:6.2f}x"
        print(f"{n:3d} {o:9.1f} {tokens / o * 1e3:11.0f} {t_txt}")
        rows.append(row)
    print("ratio = our tokens/s over PyTorch's (> 1: ours is faster); medians over the repetitions")
    doc = {"bench": "gpt_cpu", "preset": a.gpt, "shape": dict(zip(("n_layer", "n_head", "n_embd", "seq_len", "vocab"), shape)),
           "batch": a.batch, "tokens_per_step": tokens, "steps": a.steps, "reps": a.reps, "precision": "fp32",
           "optimizer": "adamw", "torch": torch.__version__ if torch is not None else None, "nproc": os.cpu_count(),
           "command": " ".join(sys.argv), "ours_cmd": " ".join(ours_cmd(binary, "N", a.gpt, a.batch, a.steps, "J")),
           "rows": rows}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"bench_gpt: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
