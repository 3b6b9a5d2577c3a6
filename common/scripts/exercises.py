#!/usr/bin/env python3
"""exercises.py — make exercises/ from solutions/ (see notes/README.md, "Exercises").

solutions/ holds the real code. An exercise is a function body marked in solutions/:

    void ring_all_gather(...) {
      // BEGIN EXERCISE ring_all_gather notes/01-collectives.md
      // HINT: at step s, pass chunk (r - s) mod N to rank r+1.
      ...the real code...
      // END EXERCISE
    }

exercises/ is the student's copy: the same files, each marked body replaced by the BEGIN line,
its HINT lines, `zl_exercise_todo("<name>", "<notes page>");` and the END line. Students write
their code between the BEGIN and END lines in exercises/; maintainers edit solutions/ and run
`make exercises`.

Commands (SRC is solutions, DST is exercises):
  generate SRC DST [--reset]   write DST from SRC; files of DST that SRC lacks are removed.
                               Exercise bodies a student already wrote in DST (the
                               zl_exercise_todo call is gone) are kept unless --reset.
  check SRC DST [--strict]     regenerate into a temp dir and compare with DST; exit 1 listing
                               the stale files. Student-written bodies are accepted unless
                               --strict (or the CI environment variable is set).
  list SRC [--chapter NN]      one line per exercise: name, notes page, file.
  hint SRC NAME                the HINT lines and notes page of one exercise.
  status SRC DST --chapter NN --tests BIN --make CMD --build DIR
                               run chapter NN's tests (suites chNN_*) from BIN, then one line per
                               exercise of the chapter: done / not done / wrong. A written body is
                               judged alone when the chapter fails: solutions/ with only that body
                               swapped in, built by CMD IMPL=DIR/exercise-check/impl.
                               (`make exercise CH=NN`)
Exit codes: 0 ok, 1 stale / exercises not done, 2 bad markers or usage.
"""
import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

C_SUFFIXES = (".c", ".h", ".cu", ".cuh")
MARKERISH = re.compile(r"//\s*(BEGIN|END)\s+EXERCISE\b|//\s*HINT\s*:")
BEGIN = re.compile(r"^(\s*)// BEGIN EXERCISE ([A-Za-z_][A-Za-z0-9_]*) (notes/\S+\.md)\s*$")
HINT = re.compile(r"^\s*// HINT: ?(.*?)\s*$")
END = re.compile(r"^\s*// END EXERCISE\s*$")
TODO = "zl_exercise_todo("
HAS_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:\.\./common/)?exercise\.h[">]')
INCLUDE = re.compile(r"^\s*#\s*include\b")


class MarkerError(Exception):
    """Bad markers in a file: message names file:line."""


class Region:
    """One marked exercise: lines [begin, end] (0-based, inclusive of the marker lines)."""

    def __init__(self, name, notes, indent, begin, end, hints, path):
        self.name, self.notes, self.indent = name, notes, indent
        self.begin, self.end, self.hints, self.path = begin, end, hints, path

    def chapter(self):
        m = re.match(r"notes/(\d\d)-", self.notes)
        return m.group(1) if m else ""


def parse(path, lines):
    """The exercise regions of a file. Raises MarkerError on unbalanced or malformed markers."""
    regions, cur = [], None
    for i, line in enumerate(lines):
        if not MARKERISH.search(line):
            continue
        where = f"{path}:{i + 1}"
        b, e, h = BEGIN.match(line), END.match(line), HINT.match(line)
        if b:
            if cur:
                raise MarkerError(f"{where}: BEGIN EXERCISE {b.group(2)} inside exercise {cur.name} "
                                  f"(opened at line {cur.begin + 1}); close it with // END EXERCISE first")
            cur = Region(b.group(2), b.group(3), b.group(1), i, -1, [], path)
        elif e:
            if not cur:
                raise MarkerError(f"{where}: END EXERCISE without a BEGIN EXERCISE before it")
            cur.end = i
            regions.append(cur)
            cur = None
        elif h:
            if cur:
                cur.hints.append(h.group(1))
            # a HINT outside an exercise is an ordinary comment: copied as it is
        elif re.search(r"//\s*BEGIN\s+EXERCISE\b", line):
            raise MarkerError(f"{where}: malformed marker {line.strip()!r}; expected "
                              f"'// BEGIN EXERCISE <name> notes/NN-<page>.md'")
        else:
            raise MarkerError(f"{where}: malformed marker {line.strip()!r}; expected '// END EXERCISE'")
    if cur:
        raise MarkerError(f"{path}:{cur.begin + 1}: exercise {cur.name} has no // END EXERCISE")
    return regions


def stub_body(r):
    """What replaces the real code between BEGIN and END in exercises/."""
    body = [f"{r.indent}// HINT: {h}".rstrip() + "\n" for h in r.hints]
    body.append(f'{r.indent}{TODO}"{r.name}", "{r.notes}");\n')
    return body


def header(src_rel, regions):
    """The comment that opens every generated file (students edit exercises/, maintainers
    regenerate it). src_rel: solutions/<path>."""
    name = src_rel.split("/", 1)[1] if "/" in src_rel else src_rel
    if not regions:
        return [f"/* exercises/{name} — a copy of {src_rel}, with no exercise in it: read it, no need\n",
                " * to edit it. Generated by `make exercises` (maintainers: edit solutions/ and rerun it). */\n"]
    chapters = " or ".join(sorted({f"CH={r.chapter()}" for r in regions if r.chapter()})) or "CH=NN"
    return [
        f"/* exercises/{name} — YOUR copy of {src_rel}: write each exercise between its\n",
        " * BEGIN EXERCISE and END EXERCISE lines, in place of the zl_exercise_todo call; then\n",
        f" * `make exercise {chapters}` says which are done (stuck: `make hint EX=<name>`).\n",
        f" * Maintainers: generated by `make exercises` from {src_rel}; edit that file and rerun\n",
        " * `make exercises` (bodies a student already wrote here are kept). */\n",
    ]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.readlines()


def source_files(src):
    """Relative paths of every file under src (sorted)."""
    out = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.startswith(".") or f.endswith((".o", ".d", "~")):
                continue
            out.append(os.path.relpath(os.path.join(root, f), src))
    return out


def scan(src):
    """{relpath: (lines, regions)} for every C file of src; checks names are unique."""
    files, seen = {}, {}
    for rel in source_files(src):
        path = os.path.join(src, rel)
        if not rel.endswith(C_SUFFIXES):
            files[rel] = (None, [])
            continue
        lines = read_lines(path)
        regions = parse(path, lines)
        for r in regions:
            if r.name in seen:
                raise MarkerError(f"{path}:{r.begin + 1}: duplicate exercise name {r.name} "
                                  f"(also at {seen[r.name]}); names must be unique across {src}/")
            seen[r.name] = f"{path}:{r.begin + 1}"
        files[rel] = (lines, regions)
    return files


def student_bodies(dst_path):
    """{name: body lines} of the exercises a student already wrote in an existing exercises/ file
    (the zl_exercise_todo call is gone). Raises MarkerError when its markers are broken."""
    if not os.path.isfile(dst_path):
        return {}
    lines = read_lines(dst_path)
    kept = {}
    for r in parse(dst_path, lines):
        body = lines[r.begin + 1:r.end]
        if not any(TODO in ln for ln in body):
            kept[r.name] = body
    return kept


def render(src, rel, lines, regions, keep=None):
    """The exercises/ text of one file. keep: {name: body} written by the student."""
    if lines is None:  # not C: copied as it is
        with open(os.path.join(src, rel), encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    out, i = [], 0
    for r in regions:
        out += lines[i:r.begin + 1]
        out += keep[r.name] if keep and r.name in keep else stub_body(r)
        out.append(lines[r.end])
        i = r.end + 1
    out += lines[i:]
    if regions and not any(HAS_INCLUDE.match(ln) for ln in out):
        # after the first block of #include lines (or at the top when there is none)
        first = next((k for k, ln in enumerate(out) if INCLUDE.match(ln)), None)
        at = 0
        if first is not None:
            at = first
            while at < len(out) and INCLUDE.match(out[at]):
                at += 1
        out.insert(at, '#include "exercise.h" // zl_exercise_todo\n')
    return "".join(header(os.path.basename(os.path.normpath(src)) + "/" + rel, regions) + out)


def write_tree(src, dst, files, keep_work=False, backup=None):
    """Write every file of src into dst; keep_work: bodies a student wrote in dst stay.
    A dst file holding student work (written bodies, or markers a student broke) is copied to
    backup/ before it is overwritten. Removes files of dst that src lacks.
    Returns (kept exercise names, removed paths, backed-up paths)."""
    os.makedirs(dst, exist_ok=True)
    kept_names, saved = [], []
    for rel, (lines, regions) in files.items():
        path = os.path.join(dst, rel)
        keep, work = {}, False
        if backup and lines is not None:
            try:
                keep = student_bodies(path)
                work = bool(keep)
            except MarkerError as e:
                print(f"warning: {e}: the exercise markers of {path} are broken, "
                      "so its bodies cannot be kept", file=sys.stderr)
                work = True
            if not keep_work:
                keep = {}
        lost = sorted(n for n in keep if n not in {r.name for r in regions})  # exercise removed
        keep = {n: b for n, b in keep.items() if n not in lost}
        kept_names += sorted(keep)
        text = render(src, rel, lines, regions, keep)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        old = None
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                old = f.read()
        if old != text:
            if old is not None and backup and (work or lost):
                os.makedirs(os.path.dirname(os.path.join(backup, rel)), exist_ok=True)
                shutil.copyfile(path, os.path.join(backup, rel))
                saved.append(os.path.join(backup, rel))
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
    removed = []
    for rel in source_files(dst):
        if rel not in files:
            if backup:  # it may hold a student's work
                os.makedirs(os.path.dirname(os.path.join(backup, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(dst, rel), os.path.join(backup, rel))
                saved.append(os.path.join(backup, rel))
            os.remove(os.path.join(dst, rel))
            removed.append(rel)
    return kept_names, removed, saved


def cmd_generate(a):
    files = scan(a.src)
    backup = os.path.join(a.backup, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    kept, removed, saved = write_tree(a.src, a.dst, files, not a.reset, backup)
    n = sum(len(r) for _, r in files.values())
    msg = f"exercises: wrote {len(files)} files, {n} exercises, into {a.dst}/ from {a.src}/"
    if removed:
        msg += f"; removed {', '.join(removed)}"
    print(msg)
    if kept:
        print(f"exercises: kept the bodies you wrote for {', '.join(kept)} "
              f"(make exercises RESET=1 discards them)")
    if saved:
        print(f"exercises: your previous copies are saved in {', '.join(saved)}")
    return 0


def cmd_check(a):
    strict = a.strict or os.environ.get("CI", "") not in ("", "0", "false")
    files = scan(a.src)
    stale, notes, kept = [], [], []
    with tempfile.TemporaryDirectory(prefix="zl_exercises_") as tmp:
        fresh = os.path.join(tmp, "exercises")
        write_tree(a.src, fresh, files)
        want = set(files)
        have = set(source_files(a.dst)) if os.path.isdir(a.dst) else set()
        for rel in sorted(want | have):
            if rel not in have:
                stale.append(f"{a.dst}/{rel} (missing)")
                continue
            if rel not in want:
                stale.append(f"{a.dst}/{rel} (no longer in {a.src}/)")
                continue
            if filecmp.cmp(os.path.join(fresh, rel), os.path.join(a.dst, rel), shallow=False):
                continue
            lines, regions = files[rel]
            if strict or not regions:
                why = "differs"
                if strict and regions:
                    try:
                        done = student_bodies(os.path.join(a.dst, rel))
                        if done:
                            why = f"holds written exercise bodies ({', '.join(sorted(done))})"
                    except MarkerError:
                        pass
                stale.append(f"{a.dst}/{rel} ({why})")
                continue
            # the student's bodies count as fresh: regenerate keeping them, then compare
            try:
                keep = student_bodies(os.path.join(a.dst, rel))
            except MarkerError as e:
                stale.append(f"{a.dst}/{rel} (exercise markers broken: {e})")
                continue
            text = render(a.src, rel, lines, regions, keep)
            with open(os.path.join(a.dst, rel), encoding="utf-8") as f:
                if f.read() == text:
                    kept += sorted(keep)
                else:
                    stale.append(f"{a.dst}/{rel} (differs outside your exercise bodies)")
    for rel, (lines, regions) in files.items():
        for r in regions:
            if not os.path.isfile(r.notes):
                notes.append(f"{r.path}:{r.begin + 1}: exercise {r.name} points at {r.notes}, "
                             "which does not exist")
    for n in notes:
        print(f"warning: {n}")
    if stale:
        print(f"error: {a.dst}/ is stale — it no longer matches what {a.src}/ generates:")
        for s in stale:
            print(f"  {s}")
        if any("holds written" in x for x in stale):
            print(f"fix: make exercises RESET=1   (exercise bodies must not be committed to {a.dst}/)")
        else:
            print(f"fix: make exercises   (regenerates {a.dst}/ from {a.src}/; bodies a student wrote "
                  "are kept, make exercises RESET=1 discards them)")
        return 1
    n = sum(len(r) for _, r in files.values())
    extra = f"; your bodies kept for {', '.join(kept)}" if kept else ""
    print(f"exercises: {a.dst}/ is up to date ({len(files)} files, {n} exercises{extra})")
    return 0


def all_regions(src, chapter=None):
    out = []
    for rel, (lines, regions) in scan(src).items():
        for r in regions:
            if chapter is None or r.chapter() == chapter:
                out.append((rel, r))
    return out


def cmd_list(a):
    regs = all_regions(a.src, a.chapter)
    if not regs:
        where = f" for chapter {a.chapter}" if a.chapter else ""
        print(f"no exercises marked in {a.src}/{where}")
        return 0
    w = max(len(r.name) for _, r in regs)
    files = scan(a.src)
    for rel, r in regs:
        lines, regions = files[rel]
        if os.path.basename(os.path.normpath(a.src)) == "exercises":
            at = r.begin  # listing exercises/ itself
        else:  # where the BEGIN line lands in the generated file
            text = render(a.src, rel, lines, regions).splitlines()
            at = next(k for k, ln in enumerate(text) if BEGIN.match(ln) and BEGIN.match(ln).group(2) == r.name)
        print(f"{r.name:<{w}}  {r.notes:<28}  exercises/{rel}:{at + 1}")
    return 0


def cmd_hint(a):
    for rel, r in all_regions(a.src):
        if r.name == a.name:
            print(f"{r.name} (exercises/{rel}) — read {r.notes}")
            for h in r.hints or ["(no hint: the notes page walks through it)"]:
                print(f"  hint: {h}")
            return 0
    names = ", ".join(r.name for _, r in all_regions(a.src)) or "none marked yet"
    print(f"error: EX={a.name}: no such exercise; allowed: {names}", file=sys.stderr)
    return 2


def written_in(dst, rel, name):
    """True when the student replaced the stub of exercise `name` in dst/rel."""
    try:
        return name in student_bodies(os.path.join(dst, rel))
    except MarkerError:
        return True  # broken markers: treat as written, the build or tests will say more


def run_chapter_tests(binary, chapter, echo):
    """Run the chapter's Criterion tests (suites ch<NN>_*). Returns (exit code, tests run, output)."""
    p = subprocess.Popen(["bash", "common/scripts/run_tests.sh", binary, f"ch{chapter}*/*"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()
    rc = p.wait()
    m = re.search(r"Synthesis: Tested: (\d+)", "".join(lines))
    return rc, int(m.group(1)) if m else 0, "".join(lines)


def failed_tests(log):
    """Names (suite::test) of the tests Criterion reported failing or crashing in log."""
    return [m.group(1) for m in re.finditer(r"^\[FAIL\] (\S+::[^:\s]+)", log, re.M)]


def cmd_status(a):
    regs = all_regions(a.src, a.chapter)
    rc, tested, _ = run_chapter_tests(a.tests, a.chapter, echo=True)
    if not regs:
        print(f"chapter {a.chapter}: no exercises marked in {a.src}/")
        return rc
    results = []
    reference = {}  # filled once, by the first check that sees a failure
    for rel, r in regs:
        if not written_in(a.dst, rel, r.name):
            results.append((r.name, "not done", f"stub still in {a.dst}/{rel} (make hint EX={r.name})"))
        elif tested == 0:
            results.append((r.name, "untested", f"no ch{a.chapter}_* tests to run yet"))
        elif rc == 0:
            results.append((r.name, "done", f"the {tested} chapter {a.chapter} tests pass"))
        else:
            # The chapter failed (another stub fails it too): judge this body alone, in solutions/
            # with only this body swapped in; wrong = fails a test the reference code passes.
            results.append((r.name,) + try_alone(a, rel, r, reference))
    print(f"---- chapter {a.chapter} exercises ({a.dst}/) ----")
    w = max(len(n) for n, _, _ in results)
    for name, state, detail in results:
        print(f"{name:<{w}}  {state:<8}  {detail}")
    return 0 if all(s == "done" for _, s, _ in results) else 1


def reference_failures(a):
    """The chapter's tests that fail with solutions/ itself (normally none)."""
    build = subprocess.run(f"{a.make} IMPL={a.src} build", shell=True, capture_output=True, text=True)
    if build.returncode != 0:
        return set()
    tests = os.path.join(a.build, "tests", "zl_tests")  # OUT of IMPL=solutions is BUILD itself
    _, _, log = run_chapter_tests(tests, a.chapter, echo=False)
    return set(failed_tests(log))


def try_alone(a, rel, r, reference):
    """Build solutions/ with only exercise r taken from exercises/, run the chapter's tests.
    Returns (state, detail)."""
    keep = student_bodies(os.path.join(a.dst, rel))
    # One tree for every check, rewritten file by file only where it changes, so its objects
    # (the tests' above all) are built once and later checks only recompile the swapped file.
    impl = os.path.join(a.build, "exercise-check", "impl")
    files = scan(a.src)
    for frel, (lines, regions) in files.items():
        path = os.path.join(impl, frel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(os.path.join(a.src, frel), encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
        if frel == rel:
            out, i = [], 0
            for reg in regions:  # the student's body for r, the reference body for the others
                out += lines[i:reg.begin + 1]
                out += keep[r.name] if reg.name == r.name else lines[reg.begin + 1:reg.end]
                out.append(lines[reg.end])
                i = reg.end + 1
            text = "".join(out + lines[i:])
        old = None
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                old = f.read()
        if old != text:
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
    for frel in source_files(impl):
        if frel not in files:
            os.remove(os.path.join(impl, frel))
    build = subprocess.run(f"{a.make} IMPL={impl} build", shell=True, capture_output=True, text=True)
    if build.returncode != 0:
        err = [ln for ln in (build.stdout + build.stderr).splitlines() if "error" in ln]
        return "wrong", "does not compile: " + (err[0].strip() if err else f"see make IMPL={a.dst}")
    tests = os.path.join(impl + "-build", "tests", "zl_tests")  # OUT of a custom IMPL (Makefile)
    rc, tested, log = run_chapter_tests(tests, a.chapter, echo=False)
    fails = failed_tests(log)
    if fails and "set" not in reference:
        reference["set"] = reference_failures(a)
    blamed = [f for f in fails if f not in reference.get("set", set())]
    if rc == 0 or (fails and not blamed):
        if not fails:
            return "done", "with the reference code for the rest, the chapter's tests pass"
        return "done", (f"with the reference code for the rest, it passes every chapter test the "
                        f"reference passes ({len(fails)} fail with the reference code too)")
    shown = ", ".join(blamed[:3]) + (" ..." if len(blamed) > 3 else "")
    return "wrong", f"with the reference code for the rest, it fails {shown or 'the chapter (crash?)'}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("src"), g.add_argument("dst")
    g.add_argument("--reset", action="store_true", help="discard bodies written in dst")
    g.add_argument("--backup", default="build/exercises-backup",
                   help="where a dst file holding student work is copied before it is overwritten")
    c = sub.add_parser("check")
    c.add_argument("src"), c.add_argument("dst")
    c.add_argument("--strict", action="store_true", help="written bodies count as stale (CI)")
    ls = sub.add_parser("list")
    ls.add_argument("src"), ls.add_argument("--chapter")
    h = sub.add_parser("hint")
    h.add_argument("src"), h.add_argument("name")
    s = sub.add_parser("status")
    s.add_argument("src"), s.add_argument("dst")
    s.add_argument("--chapter", required=True)
    s.add_argument("--tests", required=True, help="the Criterion binary built from DST")
    s.add_argument("--make", default="make --no-print-directory GPU=0")
    s.add_argument("--build", default="build")
    a = p.parse_args()
    if getattr(a, "chapter", None) is not None and not re.fullmatch(r"\d\d", a.chapter):
        print(f"error: CH={a.chapter}: allowed: two digits, 00..05", file=sys.stderr)
        return 2
    if not os.path.isdir(a.src) and a.cmd in ("list", "hint") and os.path.isdir("exercises"):
        a.src = "exercises"  # a student who moved solutions/ away: the stubs keep the hints
    if not os.path.isdir(a.src):
        print(f"error: {a.src}/ not found (run from the repository root)", file=sys.stderr)
        return 2
    try:
        return {"generate": cmd_generate, "check": cmd_check, "list": cmd_list,
                "hint": cmd_hint, "status": cmd_status}[a.cmd](a)
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
