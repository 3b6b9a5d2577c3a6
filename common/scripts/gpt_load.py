#!/usr/bin/env python3
"""gpt_load.py — load zerolab's GPT weights (safetensors, GPT-2's names) and sample from them
(notes/gpt.md, "Loading the weights in PyTorch"; the format: common/model/export.h).

The file comes from `zl_ckpt export CKPT OUT.safetensors` or from `--save-params PATH` (which
writes PATH.safetensors beside the raw PATH for --model gpt). This script

  1. reads it with the Python standard library alone (header JSON, names, shapes, dtypes, byte
     offsets: read_safetensors below), and checks every tensor GPT-2 has is there;
  2. builds the PyTorch GPT of common/scripts/gpt_reference.py (GPT-2 with an untied head) and
     copies the tensors in, transposing GPT-2's Conv1D matrices (stored (in, out)) back into
     nn.Linear's (out, in);
  3. samples N bytes greedily from a newline, exactly as `--sample N --temperature 0` does: each
     byte the argmax of the logits at the last position of the context (the last seq_len bytes).

  python3 common/scripts/gpt_load.py WEIGHTS.safetensors [--sample 64] [--engine torch|python]
  python3 common/scripts/gpt_load.py WEIGHTS.safetensors --check RAW   (compare with --save-params)

--engine python runs the same forward in plain Python (float64, no numpy, no torch: slow, meant
for the tiny preset; the tests use it); torch is the default when it is installed. --check RAW
compares every tensor with the raw --save-params file (float32, our unit order) and exits 1 on
the first difference, naming the tensor and the index.
"""
import argparse
import array
import json
import math
import os
import struct
import sys

BLOCK = [  # (GPT-2 name, stored as Conv1D (in, out): transposed from ours)
    ("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True), ("attn.c_attn.bias", False),
    ("attn.c_proj.weight", True), ("attn.c_proj.bias", False), ("ln_2.weight", False), ("ln_2.bias", False),
    ("mlp.c_fc.weight", True), ("mlp.c_fc.bias", False), ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]


def read_safetensors(path):
    """(tensors, metadata): tensors maps name -> (shape, flat list of floats in stored order)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SystemExit(f"{path}: {len(raw)} bytes, not a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise SystemExit(f"{path}: truncated: its header says {n} bytes of JSON, the file holds {len(raw) - 8}")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SystemExit(f"{path}: the header is not JSON ({e}): not a safetensors file")
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out, end = {}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}, expected F32")
        b, e = t["data_offsets"]
        numel = math.prod(t["shape"])
        if b != end or e - b != 4 * numel:
            raise SystemExit(f"{path}: {name}: data_offsets [{b}, {e}) for shape {t['shape']} (expected [{end}, {end + 4 * numel}))")
        if e > len(data):
            raise SystemExit(f"{path}: truncated: {name} needs data bytes [{b}, {e}), the file holds {len(data)}")
        vals = array.array("f")
        vals.frombytes(data[b:e])
        if sys.byteorder != "little":
            vals.byteswap()
        out[name] = (tuple(t["shape"]), vals)
        end = e
    if end != len(data):
        raise SystemExit(f"{path}: {len(data) - end} bytes after the last tensor")
    return out, meta


def shape_of(tensors):
    """(n_layer, n_head or None, n_embd, seq_len, vocab) from the tensors (n_head from the metadata)."""
    V, C = tensors["wte.weight"][0]
    T = tensors["wpe.weight"][0][0]
    L = 0
    while f"h.{L}.ln_1.weight" in tensors:
        L += 1
    return L, C, T, V


def names(L):
    """Every tensor name, in our flat order (common/model/gpt.h), with its Conv1D flag."""
    out = [("wte.weight", False), ("wpe.weight", False)]
    for l in range(L):
        out += [(f"h.{l}.{n}", conv) for n, conv in BLOCK]
    return out + [("ln_f.weight", False), ("ln_f.bias", False), ("lm_head.weight", False)]


def ours(shape, vals, conv):
    """The tensor in our (out, in) row-major order: a Conv1D (in, out) is transposed back."""
    if not conv:
        return list(vals)
    i_, o_ = shape
    return [vals[i * o_ + o] for o in range(o_) for i in range(i_)]


def check_raw(tensors, raw_path):
    """Every tensor == the raw --save-params floats at its place, bit for bit."""
    flat = array.array("f")
    with open(raw_path, "rb") as f:
        flat.frombytes(f.read())
    L = shape_of(tensors)[0]
    at = 0
    for name, conv in names(L):
        if name not in tensors:
            raise SystemExit(f"check: {name} missing from the safetensors file")
        shape, vals = tensors[name]
        mine = ours(shape, vals, conv)
        for k, v in enumerate(mine):
            if struct.pack("<f", v) != struct.pack("<f", flat[at + k]):
                raise SystemExit(f"check: {name}[{k}] = {v!r}, --save-params has {flat[at + k]!r} at {at + k}")
        at += len(mine)
    if at != len(flat):
        raise SystemExit(f"check: the tensors hold {at} values, {raw_path} {len(flat)}")
    print(f"check: {len(names(L))} tensors == {raw_path} ({at} float32 values), bit for bit")


# ---- the plain-Python forward (float64): common/model/gpt.c's GPT, one sequence ----------------------

def py_model(tensors, n_head):
    L, C, T, V = shape_of(tensors)
    get = {n: ours(tensors[n][0], tensors[n][1], conv) for n, conv in names(L)}
    return dict(L=L, C=C, T=T, V=V, NH=n_head, w=get)


def _matvec(W, b, x, out, inn):  # W (out, in) row-major
    return [sum(W[o * inn + i] * x[i] for i in range(inn)) + (b[o] if b else 0.0) for o in range(out)]


def _ln(x, w, b):
    m = sum(x) / len(x)
    var = sum((v - m) ** 2 for v in x) / len(x)
    r = 1.0 / math.sqrt(var + 1e-5)
    return [(v - m) * r * w[i] + b[i] for i, v in enumerate(x)]


def _gelu(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def py_logits_last(md, ctx):
    """Logits (V) at the last position of ctx (token ids, len <= seq_len)."""
    C, V, NH, w = md["C"], md["V"], md["NH"], md["w"]
    hs = C // NH
    xs = [[w["wte.weight"][t * C + c] + w["wpe.weight"][p * C + c] for c in range(C)] for p, t in enumerate(ctx)]
    for l in range(md["L"]):
        g = lambda n: w[f"h.{l}.{n}"]
        qkv = [_matvec(g("attn.c_attn.weight"), g("attn.c_attn.bias"), _ln(x, g("ln_1.weight"), g("ln_1.bias")), 3 * C, C)
               for x in xs]
        att = []
        for p in range(len(xs)):
            y = [0.0] * C
            for h in range(NH):
                q = qkv[p][h * hs:(h + 1) * hs]
                s = [sum(q[i] * qkv[j][C + h * hs + i] for i in range(hs)) / math.sqrt(hs) for j in range(p + 1)]
                mx = max(s)
                e = [math.exp(v - mx) for v in s]
                z = sum(e)
                for j in range(p + 1):
                    for i in range(hs):
                        y[h * hs + i] += e[j] / z * qkv[j][2 * C + h * hs + i]
            att.append(y)
        proj = [_matvec(g("attn.c_proj.weight"), g("attn.c_proj.bias"), y, C, C) for y in att]
        xs = [[a + b for a, b in zip(x, pr)] for x, pr in zip(xs, proj)]
        new = []
        for x in xs:
            f = [_gelu(v) for v in _matvec(g("mlp.c_fc.weight"), g("mlp.c_fc.bias"), _ln(x, g("ln_2.weight"), g("ln_2.bias")), 4 * C, C)]
            new.append([a + b for a, b in zip(x, _matvec(g("mlp.c_proj.weight"), g("mlp.c_proj.bias"), f, C, 4 * C))])
        xs = new
    last = _ln(xs[-1], w["ln_f.weight"], w["ln_f.bias"])
    return _matvec(w["lm_head.weight"], None, last, V, C)


# ---- PyTorch ----------------------------------------------------------------------------------

def torch_model(tensors, n_head):
    """The GPT of gpt_reference.py with the file's weights (None when torch is absent)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_reference  # the same module the reference fixture and bench_gpt.py use
    if gpt_reference.torch is None:
        return None
    torch = gpt_reference.torch
    L, C, T, V = shape_of(tensors)
    model = gpt_reference.GPT(L, n_head, C, T, V)
    flat = []
    for name, conv in names(L):
        flat += ours(tensors[name][0], tensors[name][1], conv)
    model.load_flat(torch.tensor(flat, dtype=torch.float32))
    model.eval()
    return model


def sample(logits_last, seq_len, n):
    """n bytes, greedy, from "\\n": what --sample n --temperature 0 prints (bytes outside
    printable ASCII as ?)."""
    ctx, text = [10], []
    for _ in range(n):
        row = logits_last(ctx)
        nxt = max(range(len(row)), key=lambda v: (row[v], -v))  # the first maximum, as loop.c
        text.append(chr(nxt) if 32 <= nxt < 127 or nxt in (9, 10) else "?")
        ctx = (ctx + [nxt])[-seq_len:]
    return "".join(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("weights", help="a .safetensors file (zl_ckpt export, or --save-params PATH.safetensors)")
    ap.add_argument("--sample", type=int, default=0, help="greedy bytes to generate (0: none)")
    ap.add_argument("--engine", choices=["torch", "python"], default=None, help="default: torch when installed")
    ap.add_argument("--n-head", type=int, default=0, help="heads (default: the file's zerolab_shape metadata)")
    ap.add_argument("--check", metavar="RAW", help="compare every tensor with a raw --save-params file")
    a = ap.parse_args()
    tensors, meta = read_safetensors(a.weights)
    missing = [n for n, _ in names(shape_of(tensors)[0]) if n not in tensors]
    if missing:
        raise SystemExit(f"{a.weights}: not a GPT-2 layout, missing {', '.join(missing[:4])}")
    L, C, T, V = shape_of(tensors)
    nh = a.n_head or (int(meta["zerolab_shape"].split()[1]) if "zerolab_shape" in meta else 0)
    print(f"{a.weights}: {len(tensors)} tensors, GPT-2 layout: n_layer {L}, n_embd {C}, seq_len {T}, vocab {V}, "
          f"n_head {nh or '?'}")
    if a.check:
        check_raw(tensors, a.check)
    if a.sample <= 0:
        return
    if not nh:
        raise SystemExit("--sample: the file does not record n_head: pass --n-head")
    engine = a.engine
    model = None
    if engine in (None, "torch"):
        model = torch_model(tensors, nh)
        if model is None and engine == "torch":
            raise SystemExit("--engine torch: torch is not installed (pip install torch), or use --engine python")
        engine = "torch" if model is not None else "python"
    if engine == "torch":
        import torch
        with torch.no_grad():
            f = lambda ctx: model(torch.tensor([ctx]))[0][0, -1].tolist()
            text = sample(f, T, a.sample)
    else:
        md = py_model(tensors, nh)
        text = sample(lambda ctx: py_logits_last(md, ctx), T, a.sample)
    print(f"sample ({a.sample} bytes, greedy, {engine}):\n{text}")


if __name__ == "__main__":
    main()
