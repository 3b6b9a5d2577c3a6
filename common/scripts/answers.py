#!/usr/bin/env python3
"""answers.py — the notes' numeric questions answered in a file, checked by the project's own
calculators (xv6-style answer files; notes/README.md, "Exercises").

exercises/answers/NN.txt holds one line `ID = ` per numeric question of chapter NN, each under a
comment that says where the question is (notes page and number), what to give and in which unit.
`make exercises` writes the files (keeping the values a student wrote: generate()); `make answers
CH=NN` (check) computes every answer with ch00_memory (its --json: the memory, traffic and
pipeline numbers the chapters print) or chapter 07's simulator (ch07_pipeline --simulate), and names each wrong
or missing answer with the command that computed it. A value is right within REL_TOL of the
calculator's (answers rounded to 3 significant digits pass).

  answers.py check --chapter NN --bin build/bin [--dst exercises]   exit 0: all right, 1: not, 2: usage
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REL_TOL = 0.01


def ch00(bin_dir, args):
    """ch00_memory ARGS --json: its JSON object (and the command, for the verdict)."""
    with tempfile.TemporaryDirectory(prefix="zl_answers.") as d:
        path = os.path.join(d, "m.json")
        cmd = [os.path.join(bin_dir, "ch00_memory")] + args.split() + ["--json", path]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
        with open(path, encoding="utf-8") as f:
            return json.load(f), "ch00_memory " + args


def stage(j, s, key):
    return next(x for x in j["stages"] if x["stage"] == s)[key]


def zero2_under_60(b):
    """The smallest N at which ZeRO-2's model states are under 60% of ZeRO-1's (Ψ = 1B, bf16)."""
    for n in range(1, 1025):
        j, _ = ch00(b, f"--params 1e9 --ranks {n}")
        if stage(j, 2, "total") < 0.6 * stage(j, 1, "total"):
            return n, f"ch00_memory --params 1e9 --ranks N for N = 1, 2, ... (first N: {n})"
    raise RuntimeError("no N up to 1024")


def comm(b, s):
    j, cmd = ch00(b, "--params 1e9 --ranks 8")
    return stage(j, s, "comm_bytes_per_step") / 1e9, cmd


def extra_ms(b):
    (z2, cmd), (z3, _) = comm(b, 2), comm(b, 3)
    return (z3 - z2) * 1e9 / 100e9 * 1e3, f"{cmd}: (comm/step of ZeRO-3 - of ZeRO-2) / 100 GB/s"


def paper(b, s):
    j, cmd = ch00(b, "--params 7.5e9 --ranks 64")
    return stage(j, s, "total") / 1e9, cmd


def simulate(b, P, M):
    """ch07_pipeline --simulate's 1F1B at P stages, M micro-batches (F 1, B 2, W 1): (bubble, step)."""
    cmd = [os.path.join(b, "ch07_pipeline"), "--simulate", "--schedule", "1f1b", "--pp", str(P),
           "--micro-batches", str(M), "--costs", "1,2,1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^step ([\d.]+); bubble ([\d.]+)", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip() or p.stdout[-200:]}")
    return float(m.group(2)), float(m.group(1))


def bubble(b, P, M):
    idle, step = simulate(b, P, M)
    return idle / step, (f"ch07_pipeline --simulate --schedule 1f1b --pp {P} --micro-batches {M} --costs 1,2,1: "
                         f"bubble {idle:g} of a step of {step:g}")


def bubble_m(b, P, target):
    for m in range(P, 1025):  # the simulator takes M >= P (below P the bubble is only larger)
        idle, step = simulate(b, P, m)
        if idle / step < target:
            return m, (f"ch07_pipeline --simulate --schedule 1f1b --pp {P} --micro-batches M for M = P, P+1, ... "
                       f"(first under {target:g}: M = {m})")
    raise RuntimeError("no M up to 1024")


def in_flight(b, s):
    j, cmd = ch00(b, "--layers 8 --hidden 256 --heads 4 --seq 128 --ranks 4 --pp 4")
    return j["pp"]["per_stage"][s]["in_flight"], cmd


MOE = "--layers 2 --hidden 64 --heads 4 --seq 32 --ranks 8 --experts 8 --topk 2 --ep 4"


def moe(b, key):
    j, cmd = ch00(b, MOE)
    return j["moe"][key], cmd


# chapter -> [(id, where in the notes, what to give, unit, calculator(bin_dir) -> (value, how))]
BANK = {
    "00": [
        ("q5", "notes/00-memory.md, question 5",
         "the smallest N at which ZeRO-2's model states are under 60% of ZeRO-1's (Psi = 1B, bf16, Adam)",
         "ranks", zero2_under_60),
        ("q6_zero2", "notes/00-memory.md, question 6",
         "bytes one rank sends per step at ZeRO-2 (Psi = 1B, N = 8, bf16)", "GB", lambda b: comm(b, 2)),
        ("q6_zero3", "notes/00-memory.md, question 6",
         "bytes one rank sends per step at ZeRO-3 (same)", "GB", lambda b: comm(b, 3)),
        ("q6_ms", "notes/00-memory.md, question 6",
         "the extra time of ZeRO-3's traffic over ZeRO-2's at 100 GB/s", "ms", extra_ms),
    ],
    "03": [
        ("paper_zero1", "notes/03-zero1.md (the paper's Figure 1)",
         "model states per rank at ZeRO-1 (P_os) for Psi = 7.5B, N = 64, bf16, Adam", "GB",
         lambda b: paper(b, 1)),
    ],
    "04": [
        ("paper_zero2", "notes/04-zero2.md (the paper's Figure 1)",
         "model states per rank at ZeRO-2 (P_os+g), Psi = 7.5B, N = 64, bf16, Adam", "GB", lambda b: paper(b, 2)),
    ],
    "05": [
        ("paper_zero3", "notes/05-zero3.md (the paper's Figure 1)",
         "model states per rank at ZeRO-3 (P_os+g+p), Psi = 7.5B, N = 64, bf16, Adam", "GB", lambda b: paper(b, 3)),
    ],
    "07": [
        ("q1_bubble", "notes/07-pipeline.md, question 1",
         "the idle fraction of a 1F1B pipeline at P = 8, M = 8", "fraction (0..1)", lambda b: bubble(b, 8, 8)),
        ("q1_m", "notes/07-pipeline.md, question 1",
         "the smallest M that brings it under 10% at P = 8", "micro-batches", lambda b: bubble_m(b, 8, 0.1)),
        ("q2_stage0", "notes/07-pipeline.md, question 2",
         "micro-batches of activations stage 0 holds in flight with 1F1B at P = 4", "micro-batches",
         lambda b: in_flight(b, 0)),
    ],
    "12": [
        ("q1_total", "notes/12-experts.md, question 1",
         "parameters of the GPT (L 2, h 64, 4 heads, S 32, vocab 256) with E = 8 top-2 experts in every block",
         "parameters", lambda b: moe(b, "params_total")),
        ("q1_active", "notes/12-experts.md, question 1",
         "of those, the parameters one token passes through (active)", "parameters",
         lambda b: moe(b, "params_active")),
    ],
}


def template(ch, values=None):
    """The text of answers/NN.txt: each question's comment and `ID = value` (values: the student's)."""
    values = values or {}
    out = [f"# Chapter {ch}: the notes' numeric questions. Write each answer after its '=' (a number; 1.5e9",
           f"# and 1,500,000,000 both read). `make answers CH={ch}` checks them against the project's",
           f"# calculators (within {REL_TOL:.0%}). Lines starting with '#' are kept as they are.", ""]
    for qid, where, ask, unit, _ in BANK[ch]:
        v = values.get(qid, "")
        out += [f"# {where}: {ask} [{unit}]", f"{qid} = {v}" if v else f"{qid} =", ""]
    return "\n".join(out)


LINE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=\s*(.*?)\s*$")


def parse(text):
    """{id: value text} of an answers file (comments and blank lines skipped)."""
    return {m.group(1): m.group(2) for ln in text.splitlines()
            if not ln.lstrip().startswith("#") and (m := LINE.match(ln))}


def path_of(dst, ch):
    return os.path.join(dst, "answers", f"{ch}.txt")


def generate(dst):
    """Write dst/answers/NN.txt for every chapter of the bank, keeping the values written there."""
    for ch in BANK:
        path = path_of(dst, ch)
        old = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
        text = template(ch, parse(old))
        if text != old:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)


def stale(dst):
    """The answers files that differ from a fresh template with their own values (or are missing)."""
    out = []
    for ch in BANK:
        path = path_of(dst, ch)
        if not os.path.isfile(path):
            out.append(f"{path} (missing: make exercises writes it)")
        elif open(path, encoding="utf-8").read() != template(ch, parse(open(path, encoding="utf-8").read())):
            out.append(f"{path} (differs outside the answers: make exercises rewrites it, keeping them)")
    return out


def number(text):
    try:
        return float(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None


def check(ch, bin_dir, dst):
    if ch not in BANK:
        print(f"error: CH={ch}: no numeric questions for that chapter; chapters with some: {', '.join(BANK)}",
              file=sys.stderr)
        return 2
    path = path_of(dst, ch)
    if not os.path.isfile(path):
        print(f"error: {path} does not exist: make exercises writes it", file=sys.stderr)
        return 2
    given = parse(open(path, encoding="utf-8").read())
    right = 0
    print(f"---- chapter {ch}: the numeric questions ({path}) ----")
    w = max(len(q[0]) for q in BANK[ch])
    for qid, where, ask, unit, calc in BANK[ch]:
        want, how = calc(bin_dir)
        got = number(given.get(qid, ""))
        if got is None:
            state = "not answered" if not given.get(qid) else f"not a number ({given[qid]!r})"
            print(f"{qid:<{w}}  {state}  ({where}: {ask}, in {unit})")
        elif abs(got - want) <= REL_TOL * abs(want):
            right += 1
            print(f"{qid:<{w}}  right  {got:g} {unit} (the calculator: {want:.6g}; {how})")
        else:
            print(f"{qid:<{w}}  wrong  you wrote {got:g} {unit}, the calculator says {want:.6g} — {how} "
                  f"({where}: {ask})")
    print(f"chapter {ch}: {right}/{len(BANK[ch])} right")
    return 0 if right == len(BANK[ch]) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--chapter", required=True)
    c.add_argument("--bin", required=True)
    c.add_argument("--dst", default="exercises")
    a = p.parse_args()
    return check(a.chapter, a.bin, a.dst)


if __name__ == "__main__":
    sys.exit(main())
