#!/usr/bin/env python3
"""bad_inputs.py — notes/reliability.md's bad-input table, generated from tests/bad_inputs.txt.

The table file lists every bad input the programs and tools are run against (tests/mpi/test_bad_inputs.c
runs it: suites common_bad_inputs and common_bad_inputs_long). The notes show the same rows grouped by
program, between the two marker lines below; this script writes that block (--write) or checks that it
is current (--check: exit 1 naming the difference; make test runs it).
  python3 common/scripts/bad_inputs.py --write
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "tests", "bad_inputs.txt")
NOTES = os.path.join(ROOT, "notes", "reliability.md")
BEGIN = "<!-- bad-inputs: generated from tests/bad_inputs.txt by common/scripts/bad_inputs.py --write -->"
END = "<!-- bad-inputs: end -->"


def rows():
    """(kind, np, exit, secs, command, expect) of every row, in file order."""
    out = []
    with open(TABLE, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.rstrip("\n").split(" | ", 5)]
            if len(parts) != 6 or parts[0] not in ("fast", "long"):
                sys.exit(f"{TABLE}:{n}: expected 'fast|long | np | exit | secs | command | expect'")
            out.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3]), parts[4], parts[5]))
    return out


def program_and_input(cmd):
    """('ch02_ddp', '--lr nan') from a command; a bash line: its tool, and the line."""
    if cmd.startswith("sh:"):
        line = cmd[3:].strip()
        words = line.replace("&&", " ").split()
        tool = next((os.path.basename(w) for w in words if w.endswith(".py") or w.endswith("zlrun")), "bash")
        return tool, line
    prog, _, args = cmd.partition(" ")
    return prog, args.strip() or "(no arguments)"


def block():
    """The markdown between the markers."""
    rs = rows()
    groups = {}  # (program, exit) -> inputs, in file order
    for kind, np_, code, _secs, cmd, _expect in rs:
        prog, arg = program_and_input(cmd)
        text = f"`{arg}`" + (f" (N = {np_})" if np_ > 0 else "")
        groups.setdefault((prog, code), []).append(text)
    fast = sum(1 for r in rs if r[0] == "fast")
    lines = [BEGIN,
             f"{len(rs)} inputs, {fast} of them in `make test` (suite `common_bad_inputs`), the other "
             f"{len(rs) - fast} in `make test-long` (`common_bad_inputs_long`); N = ranks under mpirun. Exit 2: "
             "one line, naming the flag and what is allowed, before anything runs.",
             "",
             "| program | exit | inputs |",
             "|---|---|---|"]
    for (prog, code), inputs in groups.items():
        lines.append(f"| `{prog}` | {code} | {' · '.join(i.replace('|', '&#124;') for i in inputs)} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="write the block into notes/reliability.md")
    g.add_argument("--check", action="store_true", help="exit 1 unless the block is current")
    a = ap.parse_args()
    with open(NOTES, encoding="utf-8") as f:
        text = f.read()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        sys.exit(f"{NOTES}: no block between '{BEGIN}' and '{END}'")
    j += len(END) + 1
    want = block()
    if text[i:j] == want:
        return 0
    if a.check:
        print(f"{NOTES}: the bad-input table differs from {TABLE}'s rows: run python3 "
              "common/scripts/bad_inputs.py --write")
        return 1
    with open(NOTES, "w", encoding="utf-8") as f:
        f.write(text[:i] + want + text[j:])
    print(f"{NOTES}: bad-input table written ({len(rows())} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
