#!/usr/bin/env python3
"""gpt_reference.py — the PyTorch reference for common/model/gpt.c (notes/gpt.md, "PyTorch").

Builds the same GPT-2 in PyTorch (class GPT below: token + position embeddings, pre-LN blocks
with causal self-attention and a tanh-GELU MLP, final LayerNorm, untied head without bias), loads
OUR weights and OUR first training batch (written by the test program scn_gpt_dump, so the script
never re-implements our RNG or data windows), runs one forward and backward in fp32, and writes
the fixture that tests/unit/test_gpt_reference.c compares against. The weights are those of our
ch02_ddp after --steps S steps on the text (default 300; 0: the init): at the init (std 0.02)
attention is nearly uniform and the logits nearly 0, so a wrong mask or scale would hardly show.

  tests/fixtures/gpt_tiny_ref.txt         shape, batch, loss, logits of 4 positions, and per
                                          parameter tensor its gradient's L2 norm and 5 entries
  tests/fixtures/gpt_tiny_ref.params.bin  the weights the reference used (float32, Ψ values)

  python3 common/scripts/gpt_reference.py [--build build] [--preset tiny] [--seed 5] [--batch 2] [--steps 300]
                                          [--data /usr/share/games/fortunes/cookie]
                                          [--out tests/fixtures/gpt_tiny_ref]

torch is optional: without it the script says so and exits 0 (make test never needs it).
bench_gpt.py imports GPT from here, so the benchmark runs the same module.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch works without numpy
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # torch is optional
    torch = None


def layout(n_layer, n_embd, seq_len, vocab):
    """[(name, shape)] in the order of common/model/gpt.h: embedding | blocks | head."""
    C, T, V = n_embd, seq_len, vocab
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(n_layer):
        out += [(f"h{l}.ln1.w", (C,)), (f"h{l}.ln1.b", (C,)),
                (f"h{l}.qkv.W", (3 * C, C)), (f"h{l}.qkv.b", (3 * C,)),
                (f"h{l}.proj.W", (C, C)), (f"h{l}.proj.b", (C,)),
                (f"h{l}.ln2.w", (C,)), (f"h{l}.ln2.b", (C,)),
                (f"h{l}.fc.W", (4 * C, C)), (f"h{l}.fc.b", (4 * C,)),
                (f"h{l}.fcproj.W", (C, 4 * C)), (f"h{l}.fcproj.b", (C,))]
    out += [("lnf.w", (C,)), ("lnf.b", (C,)), ("head.W", (V, C))]
    return out


if torch is not None:

    class Block(nn.Module):
        def __init__(self, C, NH, sdpa):
            super().__init__()
            self.NH, self.sdpa = NH, sdpa
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)

        def attn(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)  # Q | K | V, head h at columns h·hs (as ours)
            q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
            if self.sdpa:  # the fused kernel a PyTorch user would call (bench_gpt.py)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # the definition (the reference fixture)
                s = (q @ k.transpose(-2, -1)) / (C // self.NH) ** 0.5
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
            return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        """GPT-2 as common/model/gpt.c builds it: untied wte and head, the head without bias."""

        def __init__(self, n_layer, n_head, n_embd, seq_len, vocab, sdpa=False):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(seq_len, n_embd)
            self.h = nn.ModuleList(Block(n_embd, n_head, sdpa) for _ in range(n_layer))
            self.lnf = nn.LayerNorm(n_embd, eps=1e-5)
            self.head = nn.Linear(n_embd, vocab, bias=False)
            self.shape = (n_layer, n_head, n_embd, seq_len, vocab)

        def forward(self, idx, targets=None):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for blk in self.h:
                x = blk(x)
            logits = self.head(self.lnf(x))
            if targets is None:
                return logits, None
            return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

        def tensors(self):
            """The module's parameters in the order of our flat buffer (layout())."""
            out = [self.wte.weight, self.wpe.weight]
            for b in self.h:
                out += [b.ln1.weight, b.ln1.bias, b.qkv.weight, b.qkv.bias, b.proj.weight, b.proj.bias,
                        b.ln2.weight, b.ln2.bias, b.fc.weight, b.fc.bias, b.fcproj.weight, b.fcproj.bias]
            return out + [self.lnf.weight, self.lnf.bias, self.head.weight]

        @torch.no_grad()
        def load_flat(self, flat):
            """Copy our flat fp32 buffer (Ψ values, common/model/gpt.h's order) into the module."""
            at = 0
            for p in self.tensors():
                n = p.numel()
                p.copy_(flat[at:at + n].view_as(p))
                at += n
            if at != len(flat):
                raise SystemExit(f"gpt_reference: {len(flat)} weights, the module has {at}")


def train_cmd(build, preset, seed, steps, data, path):
    """Our trainer, 1 rank: the weights after `steps` steps (its defaults otherwise)."""
    return [os.path.join(build, "bin", "ch02_ddp"), "--model", "gpt", "--gpt", preset, "--seed", str(seed),
            "--batch", "8", "--steps", str(steps), "--lr", "3e-3", "--device", "cpu", "--data", data,
            "--save-params", path, "--quiet"]


def run_dump(build, preset, seed, batch, steps, data, tmp):
    exe = os.path.join(build, "tests", "scn_gpt_dump")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"gpt_reference: {exe} not built (make BUILD={build} build)")
    cmd = [exe, preset, str(seed), str(batch), data, tmp]
    if steps > 0:
        weights = os.path.join(tmp, "trained.bin")
        subprocess.run(train_cmd(build, preset, seed, steps, data, weights), check=True, capture_output=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        cmd.append(weights)
    line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    L, NH, C, T, V, psi, B = (int(v) for v in line[1:8])
    flat = read_raw(os.path.join(tmp, "params.bin"), torch.float32)
    xy = read_raw(os.path.join(tmp, "batch.bin"), torch.int32).view(2, B, T).long()
    assert flat.numel() == psi
    return (L, NH, C, T, V), flat, xy[0], xy[1]


def read_raw(path, dtype):
    """A raw little-endian file (scn_gpt_dump's output) as a 1-D tensor."""
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).clone()


def pick(g):
    """5 entries of a gradient: first, a third, two thirds, last, and the largest |g|."""
    n = g.numel()
    return [0, n // 3, 2 * n // 3, n - 1, int(g.abs().argmax())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300, help="train our model this many steps first (0: the init)")
    ap.add_argument("--data", default="/usr/share/games/fortunes/cookie")
    ap.add_argument("--out", default="tests/fixtures/gpt_tiny_ref")
    a = ap.parse_args()
    if torch is None:
        print("gpt_reference: torch is not installed (pip install torch); nothing written")
        return 0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        shape, flat, x, y = run_dump(a.build, a.preset, a.seed, a.batch, a.steps, a.data, tmp)
    L, NH, C, T, V = shape
    model = GPT(*shape).float()
    model.load_flat(flat)
    logits, loss = model(x, y)
    loss.backward()
    B = a.batch
    rows = [0, T - 1, T + T // 2, B * T - 1] if B >= 2 else [0, T // 2, T - 1]
    lg = logits.detach().view(B * T, V).tolist()
    lines = [
        f"# gpt_tiny_ref — PyTorch reference for common/model/gpt.c, written by common/scripts/gpt_reference.py",
        f"# torch {torch.__version__}, python {sys.version.split()[0]}; fp32 on the CPU, 1 thread;",
        f"# command: python3 common/scripts/gpt_reference.py --build {a.build} --preset {a.preset} --seed {a.seed} "
        f"--batch {a.batch} --steps {a.steps} --data {a.data} --out {a.out}",
        "# weights: " + os.path.basename(a.out) + ".params.bin = "
        + ("our init (seed above)" if a.steps == 0 else
           "the --save-params of: ch02_ddp " + " ".join(train_cmd("build", a.preset, a.seed, a.steps, a.data, "W")[1:-1])),
        "# batch: global samples [0, batch) of the train split (tokens, targets below)",
        "# attention written out (masked softmax), GELU tanh, LayerNorm eps 1e-5, mean cross-entropy",
        f"shape {L} {NH} {C} {T} {V}",
        f"seed {a.seed}",
        f"batch {B}",
        "tokens " + " ".join(str(int(v)) for v in x.reshape(-1)),
        "targets " + " ".join(str(int(v)) for v in y.reshape(-1)),
        f"loss {loss.item():.9g}",
    ]
    for r in rows:
        lines.append(f"logits {r} " + " ".join(f"{v:.9g}" for v in lg[r]))
    at = 0
    for (name, shp), p in zip(layout(L, C, T, V), model.tensors()):
        assert tuple(p.shape) == shp, (name, p.shape, shp)
        g = p.grad.detach().reshape(-1)
        n = g.numel()
        norm = float(g.double().square().sum().sqrt())
        ent = " ".join(f"{i} {float(g[i]):.9g}" for i in pick(g))
        lines.append(f"grad {name} {at} {n} {norm:.9g} {ent}")
        at += n
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out + ".params.bin", "wb") as f:
        f.write(bytes(flat.untyped_storage()))  # little endian, as read
    print(f"gpt_reference: loss {loss.item():.6f} (ln {V} = {math.log(V):.4f}); wrote {a.out}.txt and "
          f"{a.out}.params.bin ({flat.numel()} weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
