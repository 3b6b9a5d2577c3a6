#!/usr/bin/env python3
"""check_notes.py — the outputs pasted in notes/*.md still come out of the programs.

A fenced code block of a page whose FIRST line starts with `$ ` is a "checked run": the rest of
that line is a command, the lines after it are its real output (a later `$ ` line in the same
block starts the next run). Commands may be
    build/bin/chNN_x ARGS                              run directly
    bash common/scripts/zlrun NP build/bin/chNN_x ARGS through mpirun
    bash common/scripts/zlrun --restarts R NP build/bin/chNN_x ARGS   the same, relaunched on a failure
    make run CH=NN NP=K ARGS="..." [PROG=name]         = zlrun K <bin>/chNN_<name> ARGS (no make)
with build/bin replaced by --bin DIR. Each run is executed from the repository root (timeout
60 s, stdout and stderr together) and compared with the pasted lines:
  * volatile parts are masked on both sides: timings (a number followed by ms or s, samples/s,
    the `busy ms` column), absolute paths; the `device: auto -> ...` line (CPU-only and CUDA
    builds give different reasons), mpirun noise and a `...` line (an elision) are skipped;
  * every other pasted line must appear in the real output in order (a subsequence), spaces
    collapsed; lines `rank R: ...` come from different processes, so only their presence counts.
Numbers are compared number by number, the rest of the line letter for letter: a whole number
(bytes, counts, steps, ranks) must match exactly; a number with decimals (a loss, a ratio) must be
within NUM_RTOL = 1e-4 relative of the pasted one. Why a tolerance: OpenBLAS picks its GEMM kernel
by CPU, and so the order of every dot product's sum — the same run prints losses ~1e-6 apart
(fp32) and ~1e-5 apart (bf16) on another CPU (measured: the largest gap over the seven kernels
Prescott..Cooperlake was 2.3e-5, a bf16 loss after 6 steps on the Prescott kernel; fp32 losses
1.4e-6; notes/benchmarks.md, "Portability"), a margin of 4x; a wrong loss (a lost 1/N, a dropped
micro-batch or bucket) moves it by 1e-3 or more.
The runs see no GPU (CUDA_VISIBLE_DEVICES empty): the pages show the CPU path.

Measured numbers quoted in prose or tables are checked too. A measured number comes from one
committed JSON (notes/data/*.json: what a benchmark wrote, with the command, machine and load),
and carries a marker right after it on the same line:
    ZeRO-3 with prefetch took **1.35×**<!-- data: data/bench_zero.json step_ms.np2.zero3 / step_ms.np2.ddp -->
The marker names the file (relative to the page) and an expression over dotted keys (list
indices are numbers: `runs_ms.0`) with + - * / and parentheses. The quoted number is the last
number before the marker on its line (−, thousands commas and a trailing % or × allowed); it must
equal the expression rounded to as many decimals as the page shows, and stand beside its own
label: when the words before it (its clause in prose; the cells before it and its column's header in
a table) name a sibling of its key (another record's "layout" or "name", another key of the same
dict: Ulysses' bytes quoted as "the hybrid 1.50"), and not the key itself, that is a failure
(`PAGE:LINE: quoted Q, FILE EXPR: the words around it name 'hybrid', a sibling of ...`; the rules:
common/scripts/notes_labels.py). A new measurement is then a
data change: replace the JSON, rerun, and every page that quotes it says where it went stale.
Exit 0 when every run matches and every marked number agrees, 1 on the first mismatch of each run
(`PAGE:LINE: $ CMD`, the missing line and the closest real one) or on any wrong number
(`PAGE:LINE: quoted Q, FILE EXPR = V`) or label, 2 on bad usage. --numbers checks the marked numbers only.
Links are checked with the numbers: a relative link must name a file that exists, and a
`#anchor` a heading of that page (GitHub's rule: lower case, punctuation dropped, spaces to -).
Without PAGE arguments every notes/*.md and the top-level README.md are checked.
Without PAGE arguments (and without --list or --update) the checks that run no program run too
(common/scripts/notes_claims.py): every chapter page, meeting and program is in the reading plan
of notes/README.md and in README.md's chapter table; the plan's and the pages' reading times
agree with the words at the stated pace; every "not built" / "not yet" sentence is listed and
checked against the flags, programs and sources that exist. --claims runs only those, listing
each claim's checks.

  python3 common/scripts/check_notes.py [--bin DIR] [--list] [--update] [PAGE ...]
PAGE: a path (notes/02-ddp.md, any .md) or part of a name under notes/ (02, zero1).
--update rewrites the pasted output of every selected run with fresh output (for maintainers:
review the diff; the file is replaced atomically). `make check-notes` runs the check;
`make test` runs it too (tests/mpi/test_docs.c, suite common_docs).
"""
import argparse
import ast
import difflib
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import notes_claims  # the checks that run no program: the reading plan, reading times, "not built" claims
import notes_labels  # the words around a measured number name its own key, not a sibling's

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 60

# ---- which lines are volatile, and how lines are compared -------------------------------------
SKIP_LINE = [
    re.compile(r"^device: auto -> "),          # CPU-only vs CUDA builds say different things
    re.compile(r"^\.\.\.$"),                    # an elision in the page
    re.compile(r"^-{10,}$"),                    # mpirun banners
    re.compile(r"^(mpirun|Primary job|prterun|orterun)\b"),
    re.compile(r"^\[[\w.-]+:\d+\]"),            # [host:pid] Open MPI messages
    re.compile(r"ORTE_ERROR_LOG|PMIX_ERROR"),
]
TIMING = re.compile(r"\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s*(?:ms|s|us|samples/s)\b")
PATH = re.compile(r"(?<![\w.)\]/])/(?:[\w.+-]+/)*[\w.+-]+")
RANK_LINE = re.compile(r"^rank \d+: ")


def skipped(line):
    s = line.strip()
    return not s or any(p.search(s) for p in SKIP_LINE)


def normalize(lines):
    """(index, normalized text) of the lines that count, volatile parts masked. After a header
    with `busy ms`, the last number of each row up to the next blank line is a time too."""
    out, busy = [], False
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            busy = False
            continue
        if skipped(s):
            continue
        if "busy ms" in s:
            busy = True
        elif busy:
            s = re.sub(r"\d+(?:\.\d+)?$", "<T>", s)
        s = TIMING.sub("<T>", s)
        s = PATH.sub("<PATH>", s)
        out.append((i, " ".join(s.split())))
    return out


# a number in an output line: sign, digits (thousands commas allowed), decimals, exponent
NUMBER = re.compile(r"(?<![\w.])[-\u2212]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
NUM_RTOL = 1e-4
WIDEST = [0.0, ""]  # the largest relative gap accepted, and its line: the summary prints it


def same_line(want, got):
    """The pasted line want and the real line got agree: the same text around the numbers, whole
    numbers equal, numbers with decimals within NUM_RTOL relative (module docstring)."""
    if want == got:
        return True
    if NUMBER.sub("#", want) != NUMBER.sub("#", got):
        return False
    for w, g in zip(NUMBER.findall(want), NUMBER.findall(got)):
        if w == g:
            continue
        if not re.search(r"[.eE]", w) or not re.search(r"[.eE]", g):
            return False  # a whole number (bytes, a count) is exact
        wv, gv = (float(x.replace(",", "").replace("\u2212", "-")) for x in (w, g))
        if not abs(gv - wv) <= NUM_RTOL * abs(wv):
            return False
        if abs(gv - wv) > WIDEST[0] * abs(wv):
            WIDEST[0], WIDEST[1] = abs(gv - wv) / abs(wv), "%s (pasted %s)" % (got, w)
    return True


def compare(expected, real):
    """None when every counted expected line is found (in order, except `rank R:` lines),
    else (index into expected, closest real line)."""
    got = [t for _, t in normalize(real)]
    used = [False] * len(got)
    pos = 0
    for i, want in normalize(expected):
        if RANK_LINE.match(want):
            k = next((j for j, t in enumerate(got) if not used[j] and same_line(want, t)), None)
        else:
            k = next((j for j in range(pos, len(got)) if not used[j] and same_line(want, got[j])), None)
            if k is not None:
                pos = k + 1
        if k is None:
            close = difflib.get_close_matches(want, got, n=1, cutoff=0.0)
            return i, close[0] if close else "(no output)"
        used[k] = True
    return None


# ---- pages and their checked runs ---------------------------------------------------------------
class Run:
    def __init__(self, page, line, cmd):
        self.page, self.line, self.cmd = page, line, cmd   # line: 1-based, of the `$ ` line
        self.expected = []                                  # the pasted output lines

    def where(self):
        rel = os.path.relpath(self.page, ROOT)
        return "%s:%d: $ %s" % (self.page if rel.startswith("..") else rel, self.line, self.cmd)


def parse(page):
    """Every checked run of a page (blocks whose first line starts with `$ `)."""
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    runs, fence, first, checked = [], None, False, False
    for n, line in enumerate(lines, 1):
        if fence is None:
            m = re.match(r"^(`{3,}|~{3,})", line)
            if m:
                fence, first, checked = m.group(1), True, False
            continue
        if line.startswith(fence) and not line.strip(fence[0]).strip():
            fence = None
            continue
        if first:
            first = False
            checked = line.startswith("$ ")
        if not checked:
            continue
        if line.startswith("$ "):
            runs.append(Run(page, n, line[2:].strip()))
        else:
            runs[-1].expected.append(line)
    return runs


def argv_of(cmd, bindir):
    """The argv a page's command runs as, with build/bin replaced by bindir (ValueError if the
    command is not one of the supported forms)."""
    words = shlex.split(cmd)
    if words[:2] == ["make", "run"]:
        opt = {"NP": "2", "ARGS": "", "PROG": ""}
        for w in words[2:]:
            k, eq, v = w.partition("=")
            if not eq or k not in ("CH", "NP", "ARGS", "PROG"):
                raise ValueError("make run: unsupported word %r" % w)
            opt[k] = v
        if "CH" not in opt:
            raise ValueError("make run without CH=NN")
        dirs = sorted(glob.glob(os.path.join(ROOT, "chapters", opt["CH"] + "_*")))
        if not dirs:
            raise ValueError("no chapter %s under chapters/" % opt["CH"])
        name = opt["PROG"] or os.path.basename(dirs[0]).split("_", 1)[1]
        prog = os.path.join(bindir, "ch%s_%s" % (opt["CH"], name))
        return ["bash", "common/scripts/zlrun", opt["NP"], prog] + shlex.split(opt["ARGS"])
    env = []  # leading VAR=value words (ZL_NODE_OF_RANK=0,0,1,1 ...): run under env
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        env.append(words.pop(0))
    lead = ["env"] + env if env else []
    fixed = [os.path.join(bindir, w[len("build/bin/"):]) if w.startswith("build/bin/") else w
             for w in words]
    if fixed[:2] == ["bash", "common/scripts/zlrun"]:
        # zlrun [--restarts R [--elastic]] NP build/bin/...: the supervisor's options (chapter 14) first
        i = 2
        while i < len(words) and words[i] in ("--restarts", "--elastic"):
            i += 2 if words[i] == "--restarts" else 1
        if i + 1 < len(words) and words[i].isdigit() and words[i + 1].startswith("build/bin/"):
            return lead + fixed
    elif words and words[0].startswith("build/bin/"):
        return lead + fixed
    raise ValueError("unsupported command (build/bin/..., bash common/scripts/zlrun NP build/bin/..., make run CH=..)")


def execute(argv):
    """(exit code, output lines); exit code 124 on timeout."""
    # the pages show the CPU path: GPUs hidden, so --device auto picks the CPU on a GPU box too
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    try:
        p = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = 124, e.stdout or b""
    text = out.decode("utf-8", "replace")
    return rc, text.rstrip("\n").split("\n") if text.strip() else []


# ---- measured numbers: <!-- data: FILE EXPR --> right after the number -----------------------------
MARKER = re.compile(r"<!--\s*data:\s*(\S+)\s+(.+?)\s*-->")
# the last number before a marker: optional sign (- or U+2212), digits with thousands commas, decimals
QUOTED = re.compile(r"([+\u2212-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?=[^\d]*$)")
KEYPATH = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*")


def lookup(data, path):
    """data[k1][k2]... for the dotted path (numbers index lists); KeyError naming the missing part."""
    cur = data
    for part in path.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError("no key %r in %s" % (part, path))
    if not isinstance(cur, (int, float)) or isinstance(cur, bool):
        raise KeyError("%s is not a number" % path)
    return float(cur)


def evaluate(expr, data):
    """The value of EXPR: dotted keys of data, numbers, + - * / and parentheses."""
    names = {}

    def sub(m):
        names["k%d" % len(names)] = lookup(data, m.group(0))
        return "k%d" % (len(names) - 1)
    code = KEYPATH.sub(sub, expr)
    tree = ast.parse(code, mode="eval")
    ok = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub,
          ast.UAdd, ast.Name, ast.Load, ast.Constant)
    for node in ast.walk(tree):
        if not isinstance(node, ok):
            raise ValueError("unsupported expression %r" % expr)
    return float(eval(compile(tree, "<marker>", "eval"), {"__builtins__": {}}, names))


def check_numbers(page):
    """(number of marked numbers, a list of 'PAGE:LINE: ...' failures: empty when all agree)."""
    rel = os.path.relpath(page, ROOT)
    where = page if rel.startswith("..") else rel
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    cache, bad, fence, count = {}, [], False, 0
    # the words around each marked number (notes_labels.py): (line, column of the marker) -> words
    around = {(n, m.start()): words for n, m, words in notes_labels.contexts(lines, MARKER, QUOTED)}
    for n, line in enumerate(lines, 1):
        if re.match(r"^(`{3,}|~{3,})", line):
            fence = not fence
        if fence:  # a marker shown in a code block is an example, not a quote
            continue
        # a marker inside `inline code` is shown, not used: blank the spans out
        line = re.sub(r"`[^`]*`", lambda c: " " * len(c.group(0)), line)
        for m in MARKER.finditer(line):
            count += 1
            path, expr = m.group(1), m.group(2)
            before = MARKER.sub("", line[:m.start()])
            q = QUOTED.search(before)
            if not q:
                bad.append("%s:%d: marker %s %s has no number before it" % (where, n, path, expr))
                continue
            sign = -1.0 if q.group(1) in ("-", "\u2212") else 1.0
            quoted = sign * float(q.group(2).replace(",", "") + ("." + q.group(3) if q.group(3) else ""))
            decimals = len(q.group(3) or "")
            file = os.path.normpath(os.path.join(os.path.dirname(page), path))
            try:
                if file not in cache:
                    with open(file, encoding="utf-8") as f:
                        cache[file] = json.load(f)
                value = evaluate(expr, cache[file])
            except (OSError, ValueError, KeyError, ZeroDivisionError, SyntaxError) as e:
                bad.append("%s:%d: marker %s %s: %s" % (where, n, path, expr, e))
                continue
            if abs(round(value, decimals) - quoted) > 0.5 * 10 ** -decimals + 1e-9:
                bad.append("%s:%d: quoted %s, %s %s = %.*f (%s)" % (where, n, q.group(0).strip(), path, expr,
                                                                    decimals, value, repr(value)))
                continue
            wrong_label = notes_labels.check(cache[file], KEYPATH.findall(expr), around.get((n, m.start()), ""))
            if wrong_label:
                bad.append("%s:%d: quoted %s, %s %s: %s" % (where, n, q.group(0).strip(), path, expr, wrong_label))
    return count, bad


# ---- links: a relative link names a file that exists, and an #anchor a heading of it ----------
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", ""))
    return re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-")


def anchors_of(path):
    out, seen, fence = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^(`{3,}|~{3,})", line):
                fence = not fence
                continue
            m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def prose_lines(page):
    """(page as named in messages, line number, line) for each line outside fenced blocks."""
    rel = os.path.relpath(page, ROOT)
    where = page if rel.startswith("..") else rel
    fence = False
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if re.match(r"^(`{3,}|~{3,})", line):
            fence = not fence
        if not fence:
            yield where, n, line


def check_links(page):
    """'PAGE:LINE: ...' for each relative link whose file or #anchor does not exist."""
    bad = []
    for where, n, line in prose_lines(page):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            if not os.path.exists(path):
                bad.append("%s:%d: link %s: no such file" % (where, n, target))
            elif anchor and path.endswith(".md") and anchor not in anchors_of(path):
                bad.append("%s:%d: link %s: no heading with that anchor in %s" % (where, n, target, file or "this page"))
    return bad


# ---- code references: `common/comm/comm.c` names a file that exists, and `loop_ops.c:trainer_loss`
# (or `loop_ops.c: trainer_loss`) a symbol that file holds; a bare file name must be unique ------
CODE_REF = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:cuh|cu|c|h))\b(?::\s?([A-Za-z_]\w*))?")
SOURCE_DIRS = ("common", "solutions", "chapters", "tests")
_sources = None


def source_files():
    """basename -> [paths relative to ROOT] of every C/CUDA source under SOURCE_DIRS."""
    global _sources
    if _sources is None:
        _sources = {}
        for top in SOURCE_DIRS:
            for d, _, names in os.walk(os.path.join(ROOT, top)):
                for n in names:
                    if re.search(r"\.(c|h|cu|cuh)$", n):
                        _sources.setdefault(n, []).append(os.path.relpath(os.path.join(d, n), ROOT))
    return _sources


def check_code_refs(page):
    """'PAGE:LINE: ...' for each code reference whose file or symbol does not exist."""
    bad = []
    for where, n, line in prose_lines(page):
        for m in CODE_REF.finditer(line):
            file, sym = m.group(1), m.group(2)
            if "/" in file:
                if not file.startswith(SOURCE_DIRS) or file.startswith("exercises/"):
                    continue
                cands = [file] if os.path.exists(os.path.join(ROOT, file)) else []
                if not cands:
                    bad.append("%s:%d: `%s`: no such file" % (where, n, file))
                    continue
            else:
                cands = source_files().get(file, [])
                if not cands:
                    if sym:  # a bare name without a symbol may be a program's output file
                        bad.append("%s:%d: `%s`: no source file of that name" % (where, n, file))
                    continue
            if sym and not any(re.search(r"\b%s\b" % re.escape(sym), open(os.path.join(ROOT, c), encoding="utf-8",
                                                                         errors="replace").read()) for c in cands):
                bad.append("%s:%d: `%s:%s`: %s holds no %s" % (where, n, file, sym, " or ".join(cands), sym))
    return bad


def update_page(page, runs, fresh):
    """Rewrite the pasted output of runs (fresh[i]: new lines) in place, atomically. A pasted
    block ending in `...` keeps its length (the page shows the first lines only)."""
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for run, new in sorted(zip(runs, fresh), key=lambda rn: -rn[0].line):
        new = [l.rstrip() for l in new]
        exp = run.expected
        if exp and exp[-1].strip() == "...":
            new = new[:len(exp) - 1] + ["..."]
        lines[run.line:run.line + len(exp)] = new
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(page), prefix=".check_notes.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.chmod(tmp, os.stat(page).st_mode & 0o777)
    os.replace(tmp, page)


def pages_of(args):
    every = sorted(glob.glob(os.path.join(ROOT, "notes", "*.md")))
    if not args:
        return every + [os.path.join(ROOT, "README.md")]
    out = []
    for a in args:
        if os.path.isfile(a):
            out.append(os.path.abspath(a))
            continue
        hit = [p for p in every if a in os.path.basename(p)]
        if not hit:
            print("error: page %s: no such file, and no notes/*.md name contains it" % a, file=sys.stderr)
            sys.exit(2)
        out += [p for p in hit if p not in out]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pages", nargs="*", help="pages (paths, or part of a notes/*.md name)")
    ap.add_argument("--bin", default="build/bin", help="where the programs are (default build/bin)")
    ap.add_argument("--list", action="store_true", help="list the checked runs, run nothing")
    ap.add_argument("--update", action="store_true", help="rewrite pasted outputs with fresh ones")
    ap.add_argument("--numbers", action="store_true", help="check the marked measured numbers only, run nothing")
    ap.add_argument("--claims", action="store_true", help="check the reading plan, the reading times and the "
                    "'not built' claims only (each claim's checks listed), run nothing")
    a = ap.parse_args()
    if a.claims:
        return 1 if notes_claims.report(ROOT, sys.stdout, verbose=True) else 0
    bindir = a.bin if os.path.isabs(a.bin) else os.path.relpath(os.path.join(os.getcwd(), a.bin), ROOT)
    if not a.list and not a.numbers and not os.path.isdir(os.path.join(ROOT, bindir)):
        print("error: --bin %s: no such directory (make build first?)" % a.bin, file=sys.stderr)
        return 2
    t0, n_runs, failed, n_marks, wrong = time.time(), 0, 0, 0, 0
    for page in pages_of(a.pages):
        marks, wrong_numbers = check_numbers(page)
        n_marks += marks
        for b in wrong_numbers + check_links(page) + check_code_refs(page):
            print(b)
            wrong += 1
        if a.numbers:
            continue
        runs = parse(page)
        fresh = []
        for run in runs:
            n_runs += 1
            try:
                argv = argv_of(run.cmd, bindir)
            except ValueError as e:
                print("%s\n  %s" % (run.where(), e))
                failed += 1
                fresh.append(run.expected)
                continue
            if a.list:
                print("%s\n  runs: %s" % (run.where(), " ".join(shlex.quote(w) for w in argv)))
                continue
            t = time.time()
            rc, real = execute(argv)
            fresh.append(real)
            if a.update:
                print("%s  (%.1f s, exit %d)%s" % (run.where(), time.time() - t, rc,
                                                   "  TIMED OUT" if rc == 124 else ""))
                continue
            miss = compare(run.expected, real) if rc != 124 else (None, "(timed out after %d s)" % TIMEOUT_S)
            if miss is None:
                continue
            failed += 1
            i, close = miss
            print(run.where())
            if i is None:
                print("  the command ran past %d s" % TIMEOUT_S)
            else:
                print("  line %d of the page not in the output (exit %d, %.1f s):\n    %s\n  closest real line:\n    %s"
                      % (run.line + 1 + i, rc, time.time() - t, run.expected[i].strip(), close))
        if a.update and runs and not a.list:
            update_page(page, runs, fresh)
    if not a.pages and not a.list and not a.update:  # the whole repository: the checks that run nothing
        wrong += notes_claims.report(ROOT, sys.stdout)
    dt = time.time() - t0
    if a.list:
        print("%d checked run(s)" % n_runs)
        return 1 if failed or wrong else 0
    verb = "updated" if a.update else "checked"
    print("check_notes: %d run(s) %s, %d mismatch(es); %d measured number(s), %d wrong (a number, its label, a link "
          "or a code reference); %.1f s"
          % (n_runs, verb, failed, n_marks, wrong, dt))
    if WIDEST[0] > 0:
        print("check_notes: largest relative gap of a pasted number with decimals: %.2g (tolerance %g): %s"
              % (WIDEST[0], NUM_RTOL, WIDEST[1]))
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
