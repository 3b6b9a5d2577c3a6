#!/usr/bin/env python3
"""exercises.py — make exercises/ from solutions/, and judge a student's exercises (see
notes/README.md, "Exercises").

solutions/ holds the real code. An exercise is a function body marked in solutions/:

    void ring_all_gather(...) {
      // BEGIN EXERCISE ring_all_gather notes/01-collectives.md
      // HINT: the idea, in words (shown in the stub)
      // HINT2: the indices (shown only by `make hint EX=ring_all_gather LEVEL=2`)
      ...the real code...
      // END EXERCISE
    }

exercises/ is the student's copy of the files of solutions/ that hold at least one exercise,
and of no other: each marked body replaced by the BEGIN line, its first-level HINT lines,
`zl_exercise_todo("<name>", "<notes page>");` and the END line. The build takes every other
file from solutions/ (the Makefile: IMPL's *.c, then each solutions/*.c whose name IMPL lacks;
-I$(IMPL) before -Isolutions), so each function is written once. Students write their code
between the BEGIN and END lines in exercises/ (and may add includes and static helpers anywhere
in the file: they are carried along when an exercise is judged); maintainers edit solutions/ and
run `make exercises`.

Commands (SRC is solutions, DST is exercises):
  generate SRC DST [--reset]   write DST's files from SRC: one per SRC file with an exercise;
                               every other file of DST is removed (a file with no exercise,
                               or one SRC lacks). Bodies a student wrote in DST (the
                               zl_exercise_todo call is gone) are kept unless --reset; any DST
                               file that changes or goes and holds student work is first
                               copied to --backup (never under build/), and the output says
                               where (a plain copy an older generate wrote is removed as is).
  check SRC DST [--strict]     regenerate into a temp dir and compare with DST; exit 1 listing
                               the stale files and the lines that differ, a file missing, and
                               a file DST should not hold (no exercise in it, or not in SRC).
                               Student-written bodies are accepted unless --strict (or the CI
                               environment variable).
  list SRC [--chapter NN] [--dst DST] [--status FILE]
                               one line per exercise: name, notes page, file:line in DST (read
                               from DST itself), and the status of the last `make exercise`.
  hint SRC NAME [--level K]    the hints of one exercise up to level K (1: the idea — what must
                               be true, not the code; 2: the shapes and the order; 3: nearly
                               the code), its notes page, and whether a further level exists.
  status SRC DST --chapter NN [--ex NAME] --make CMD --build DIR
                               judge the chapter's exercises (`make exercise CH=NN [EX=name]`):
                               one tree = DST outside the bodies + the student's bodies of the
                               chapter + the reference bodies for every other exercise (the
                               files with no exercise: SRC's, as the Makefile resolves them), built
                               and run against the chapter's tests that call them (suites chNN*
                               but not *_long; EXERCISE_TESTS narrows it where a chapter's tests
                               do not all call every exercise) in exercise mode (short deadlines,
                               the tests one at a time in TEST_ORDER — the cheapest precise check
                               first — stop at the first failing test); when a test fails and
                               several bodies are written, the one the test calls is named, or,
                               when it calls several, each is run alone on that test only. One
                               line per exercise: done (which tests ran, which skipped and why) /
                               not done / wrong / other pattern (values right, communication not
                               the lesson's) / timed out / not overlapped / does not compile,
                               with the reason: the failing check's own message.
  calls SRC --chapter NN --binary BIN
                               the chapter's tests (not *_long) as BIN lists them, one a line:
                               "suite/test: the chapter's exercises it calls" (EXERCISE_TESTS),
                               "-" for none (make test-long checks the map against stubs).
  compile-report DST LOG       the exercises whose bodies a failed build LOG (of IMPL=DST)
                               blames, one line each (make test uses it and goes on).
Exit codes: 0 ok, 1 stale / exercises not done, 2 bad markers or usage.
"""
import argparse
import difflib
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answers  # noqa: E402  (answers/NN.txt beside the stubs: the notes' numeric questions)

ANSWERS_DIR = "answers" + os.sep  # exercises/answers/: not C, kept by generate, checked by answers.py
import time

C_SUFFIXES = (".c", ".h", ".cu", ".cuh")
MARKERISH = re.compile(r"//\s*(BEGIN|END)\s+EXERCISE\b|//\s*HINT\d?\s*:")
BEGIN = re.compile(r"^(\s*)// BEGIN EXERCISE ([A-Za-z_][A-Za-z0-9_]*) (notes/\S+\.md)\s*$")
HINT = re.compile(r"^\s*// HINT(\d?): ?(.*?)\s*$")
END = re.compile(r"^\s*// END EXERCISE\s*$")
TODO = "zl_exercise_todo("
HAS_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:\.\./common/)?exercise\.h[">]')
INCLUDE = re.compile(r"^\s*#\s*include\b")
# exercise mode: the collective deadline the tests give each run (seconds; the tests read it)
EXERCISE_TIMEOUT_S = 8
# The order the chapter's tests run in when an exercise is judged: the cheapest precise check
# first (a unit check of the schedule before 30 s end-to-end runs; the offload runs before the
# checkpoint-resume run that merely goes through the offload), then what is left, alphabetically.
# Patterns are fnmatch globs over "suite/test".
TEST_ORDER = {
    "01": ["ch01_collectives/world3", "ch01_collectives/world2", "ch01_collectives/world4", "ch01_collectives/*",
           "ch01_alltoall/world3", "ch01_alltoall/world2", "ch01_alltoall/world4", "ch01_alltoall/*",
           "ch01_programs/demo_*", "ch01_programs/timeout_names_the_op"],
    "02": ["ch02_buckets/*", "ch02_ddp/variants_bitwise_at_two_ranks", "ch02_ddp/n_ranks_equal_one_rank_sgd",
           "ch02_ddp/n_ranks_equal_one_rank_adamw", "ch02_ddp/variants_agree_*", "ch02_ddp/accumulation_*",
           "ch02_ddp/*", "ch02_ddp_overlap/*"],
    "03": ["ch03_shard/*", "ch03_zero1/parity_n2_*", "ch03_zero1/parity_n3_*", "ch03_zero1/accum_and_clip"],
    "04": ["ch03_shard/*", "ch04_zero2/parity_n2_*", "ch04_zero2/parity_n3_*", "ch04_zero2/accum_and_clip",
           "ch04_zero2/*", "ch04_zero2_overlap/*"],
    "05": ["ch05_zero3/parity_n2_*", "ch05_zero3/parity_n3_*", "ch05_zero3/accum_and_clip",
           "ch05_zero3/prefetch_same_bits_*"],
    "06": ["ch06_grid/*", "ch06_tp/ops_2_ranks", "ch06_tp/ops_4_ranks", "ch06_tp/mlp_check_4_ranks",
           "ch06_tp/example_2_ranks", "ch06_tp/train_tp_equals_one_rank", "ch06_tp/gpt_tp_equals_one_rank",
           "ch06_tp/groups_*", "ch06_tp/ledger_*", "ch06_tp/train_2d_*", "ch06_tp/pa_*"],
    "07": ["ch07_pipeline/schedules_are_valid_*", "ch07_sched/*", "ch07_pipeline/split_is_*",
           "ch07_dualpipev/every_list_runs_*", "ch07_dualpipev/the_checker_*", "ch07_dualpipev/the_table_*",
           "ch07_dualpipev/the_bubble_*", "ch07_dualpipev/equals_one_rank_*", "ch07_dualpipev/data_dimension_*",
           "ch07_pipeline/equals_one_rank_*", "ch07_pipeline/large_messages_*", "ch07_pipeline/gpt_equals_*",
           "ch07_pipeline/two_pipelines_*", "ch07_pipeline/three_d_*"],
    "08": ["ch08_offload/n1_*", "ch08_offload/n2_*", "ch08_offload/n3_*", "ch08_offload/n4_*",
           "ch08_offload/trains_under_*"],
    "09": ["ch09_nodes/hier_*", "ch09_nodes/counters_equal_formula_2x2_ring", "ch09_nodes/counters_*", "ch09_nodes/*",
           "ch09_cluster/two_level_*", "ch09_hsdp/*", "ch09_cluster/*"],
    "10": ["ch10_cp/ring_equals_plain_attention", "ch10_cp/*", "ch10_sp/collectives_2_ranks",
           "ch10_sp/collectives_3_ranks", "ch10_sp/sp_equals_tp_and_one_rank", "ch10_context/cp_equals_one_rank",
           "ch10_context/cp3_equals_one_rank", "ch10_ulysses/a2a_attention_bitwise",
           "ch10_ulysses/transpose_round_trip", "ch10_ulysses/*"],
    "12": ["ch12_moe/plan_contract", "ch12_moe/dispatch_combine_identity", "ch12_moe/one_expert_is_the_dense_gpt",
           "ch12_moe/ep_equals_one_rank", "ch12_moe/*"],
    "13": ["ch13_powersgd/*", "ch13_compress/*", "ch13_codes/*"],
    "14": ["ch14_ft/buddy_placement", "ch14_ft/node_down_*", "ch14_ft/*"],
}
# The tests that call an exercise, for the chapters whose tests do not all call every exercise of
# theirs (fnmatch globs over "suite/test"; "!glob" takes tests out again): a body is judged on these
# only, and a done verdict says so (the chapter's other tests cannot see it; `make test` runs them).
# Whole suites, less the few tests that stop before the exercise, so that a test added to a suite
# counts as calling it until said otherwise. An exercise not listed here is judged on every test of
# its chapter. When a test of these fails and it calls only one of the bodies written, that body is
# named without rebuilding the others alone. make test-long checks the map against the stubs
# (common_exercises_long; `exercises.py calls` prints it).
EXERCISE_TESTS = {
    "pp_dualpipev_phases": ["ch07_dualpipev/*"],
    "owners_update_matrix": ["ch03_muon/owners_equal_one_rank_*"],
    "hier_all_reduce": ["ch09_nodes/*", "!ch09_nodes/bad_node_maps_refused", "ch09_cluster/two_level_*"],
    "tp_sp_all_gather": ["ch10_sp/*", "!ch10_sp/bad_flags_exit_2"],
    "tp_sp_reduce_scatter": ["ch10_sp/*", "!ch10_sp/bad_flags_exit_2"],
    "cp_attend_block": ["ch10_cp/*", "!ch10_cp/layout", "ch10_context/*", "!ch10_context/cp_refusals",
                        "ch10_ulysses/hybrid_equals_one_rank"],
    "ulysses_unpack": ["ch10_ulysses/*", "!ch10_ulysses/a2a_refusals", "!ch10_ulysses/hybrid_refusals"],
    "moe_dispatch_plan": ["ch12_moe/*", "!ch12_moe/refusals", "!ch12_moe/ch00_counts_total_and_active",
                          "!ch12_moe/checkpoint_knows_its_experts"],
    "psgd_residual": ["ch13_powersgd/*", "ch13_compress/*"],
    "qgz_quantise": ["ch13_codes/qgz_*"],
    "ckpt_buddy_of": ["ch14_ft/*", "!ch14_ft/async_files_are_the_sync_files", "!ch14_ft/goodput_arithmetic",
                      "!ch14_ft/bad_flags_one_line_exit_2"],
}
# ... and the most one test may take before Criterion kills it
EXERCISE_TEST_LIMIT_S = 100


class MarkerError(Exception):
    """Bad markers in a file: message names file:line."""


class Region:
    """One marked exercise: lines [begin, end] (0-based, inclusive of the marker lines).
    hints: [(level, text)]."""

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
                cur.hints.append((int(h.group(1) or 1), h.group(2)))
            # a HINT outside an exercise is an ordinary comment: copied as it is
        elif re.search(r"//\s*BEGIN\s+EXERCISE\b", line):
            raise MarkerError(f"{where}: malformed marker {line.strip()!r}; expected "
                              f"'// BEGIN EXERCISE <name> notes/NN-<page>.md'")
        elif re.search(r"//\s*END\s+EXERCISE\b", line):
            raise MarkerError(f"{where}: malformed marker {line.strip()!r}; expected '// END EXERCISE'")
        else:
            raise MarkerError(f"{where}: malformed marker {line.strip()!r}; expected '// HINT: text' "
                              f"(or '// HINT2: text' for a second-level hint) on a line of its own")
    if cur:
        raise MarkerError(f"{path}:{cur.begin + 1}: exercise {cur.name} has no // END EXERCISE")
    return regions


def stub_body(r):
    """What replaces the real code between BEGIN and END in exercises/: the first-level hints,
    a pointer to the next level, the stub call."""
    body = [f"{r.indent}// HINT: {t}".rstrip() + "\n" for lv, t in r.hints if lv == 1]
    if any(lv > 1 for lv, _ in r.hints):
        body.append(f"{r.indent}// HINT: stuck? `make hint EX={r.name} LEVEL=2` gives the next hint\n")
    body.append(f'{r.indent}{TODO}"{r.name}", "{r.notes}");\n')
    return body


def header(src_rel, regions):
    """The comment that opens every generated file (students edit exercises/, maintainers
    regenerate it). src_rel: solutions/<path>; regions: its exercises (never empty)."""
    name = src_rel.split("/", 1)[1] if "/" in src_rel else src_rel
    chapters = " or ".join(sorted({f"CH={r.chapter()}" for r in regions if r.chapter()})) or "CH=NN"
    return [
        f"/* exercises/{name} — YOUR copy of {src_rel}: write each exercise between its\n",
        " * BEGIN EXERCISE and END EXERCISE lines, in place of the zl_exercise_todo call; then\n",
        f" * `make exercise {chapters}` says which are done (stuck: `make hint EX=<name>`).\n",
        f" * Maintainers: generated by `make exercises` from {src_rel}; edit that file and rerun\n",
        " * `make exercises` (bodies a student already wrote here are kept). */\n",
    ]


def read_lines(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.readlines()


def read_text(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def write_if_changed(path, text):
    """Write text to path unless it already holds it (keeps mtimes: make rebuilds less)."""
    if os.path.isfile(path) and read_text(path) == text:
        return False
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
    return True


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


def with_exercises(files):
    """The files of scan() that hold at least one exercise: exercises/ holds these and no other."""
    return {rel: (lines, regions) for rel, (lines, regions) in files.items() if regions}


# The first line an older `make exercises` wrote over its copy of a file with no exercise.
OLD_COPY = re.compile(r"^/\* exercises/\S+ — a copy of \S+, with no exercise in it")


def plain_copy(src, rel, path):
    """True when DST's file `path` is only such a copy, so removing it loses nothing: the old
    header over SRC/rel as it is now, or the old header and the version git holds (git keeps it)."""
    text = read_text(path)
    if not OLD_COPY.match(text):
        return False
    body = text.split("\n", 2)[2] if text.count("\n") >= 2 else ""
    src_path = os.path.join(src, rel)
    return (os.path.isfile(src_path) and body == read_text(src_path)) or committed_as_is(path)


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
    """The exercises/ text of one file with exercises. keep: {name: body} written by the student."""
    out, i = [], 0
    for r in regions:
        out += lines[i:r.begin + 1]
        out += keep[r.name] if keep and r.name in keep else stub_body(r)
        out.append(lines[r.end])
        i = r.end + 1
    out += lines[i:]
    if not any(HAS_INCLUDE.match(ln) for ln in out):
        # after the first block of #include lines (or at the top when there is none)
        first = next((k for k, ln in enumerate(out) if INCLUDE.match(ln)), None)
        at = 0
        if first is not None:
            at = first
            while at < len(out) and INCLUDE.match(out[at]):
                at += 1
        out.insert(at, '#include "exercise.h" // zl_exercise_todo\n')
    return "".join(header(os.path.basename(os.path.normpath(src)) + "/" + rel, regions) + out)


def committed_as_is(path):
    """True when git tracks path and it equals the committed version (False without git)."""
    try:
        d = os.path.dirname(os.path.abspath(path))
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", os.path.basename(path)], cwd=d,
                                 capture_output=True).returncode == 0
        return tracked and subprocess.run(["git", "diff", "--quiet", "HEAD", "--", os.path.basename(path)],
                                          cwd=d, capture_output=True).returncode == 0
    except OSError:
        return False


def write_tree(src, dst, files, keep_work=False, backup=None):
    """Write into dst every file of src that holds an exercise (files: scan(src)); keep_work:
    bodies a student wrote in dst stay. A dst file holding student work (written bodies, markers a
    student broke, or lines changed outside the bodies) is copied to backup/ before it is
    overwritten. Removes every other file of dst (a file with no exercise: the build takes it
    from src; or one src lacks), backed up too unless it is a plain copy an older generate wrote.
    Returns (kept exercise names, removed paths, backed-up paths)."""
    os.makedirs(dst, exist_ok=True)
    kept_names, saved = [], []
    wanted = with_exercises(files)

    def save(rel):
        os.makedirs(os.path.dirname(os.path.join(backup, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(dst, rel), os.path.join(backup, rel))
        saved.append(os.path.join(backup, rel))

    for rel, (lines, regions) in wanted.items():
        path = os.path.join(dst, rel)
        keep, work = {}, False
        if backup and os.path.isfile(path):
            try:
                keep = student_bodies(path)
                # work: bodies written, or edits outside them (what regenerating would lose) that
                # are not simply the committed file (a maintainer regenerating after editing src)
                work = bool(keep) or (read_text(path) != render(src, rel, lines, regions, keep)
                                      and not committed_as_is(path))
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
        old = read_text(path) if os.path.isfile(path) else None
        if old != text:
            if old is not None and backup and (work or lost):
                save(rel)
            write_if_changed(path, text)
    removed = []
    for rel in source_files(dst):
        if rel not in wanted and not rel.startswith(ANSWERS_DIR):
            if backup and not plain_copy(src, rel, os.path.join(dst, rel)):  # it may hold a student's work
                save(rel)
            os.remove(os.path.join(dst, rel))
            removed.append(rel)
    return kept_names, removed, saved


def cmd_generate(a):
    files = scan(a.src)
    backup = os.path.join(a.backup, time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    kept, removed, saved = write_tree(a.src, a.dst, files, not a.reset, backup)
    answers.generate(a.dst)  # answers/NN.txt: the notes' numeric questions (the values written kept)
    wanted = with_exercises(files)
    n = sum(len(r) for _, r in wanted.values())
    msg = (f"exercises: wrote {len(wanted)} files, {n} exercises, into {a.dst}/ from {a.src}/ (the files "
           f"with an exercise; the build takes the other {len(files) - len(wanted)} from {a.src}/)")
    plain = [rel for rel in removed if rel in files]
    gone = [rel for rel in removed if rel not in files]
    if plain:
        msg += f"; removed {', '.join(plain)} (no exercise in them)"
    if gone:
        msg += f"; removed {', '.join(gone)} (not in {a.src}/)"
    print(msg)
    if kept:
        print(f"exercises: kept the bodies you wrote for {', '.join(kept)}")
    if saved:
        print(f"exercises: your previous copies (with everything you wrote) are saved in {backup}/: "
              f"{', '.join(os.path.relpath(p, backup) for p in saved)}")
        print(f"exercises: compare with `diff -r {backup} {a.dst}`; "
              "code you added outside the BEGIN/END lines is there")
    return 0


def diff_lines(old_text, new_text, old_name, new_name, limit=12):
    """The first `limit` changed lines of a unified diff, indented."""
    d = list(difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), old_name, new_name, n=0,
                                  lineterm=""))
    shown = [ln for ln in d[2:] if not ln.startswith("@@")] if d else []
    out = [f"      {ln}" for ln in shown[:limit]]
    if len(shown) > limit:
        out.append(f"      ... ({len(shown) - limit} more changed lines)")
    return out


def cmd_check(a):
    strict = a.strict or os.environ.get("CI", "") not in ("", "0", "false")
    files = scan(a.src)
    stale, notes, kept = [], [], []
    with tempfile.TemporaryDirectory(prefix="zl_exercises_") as tmp:
        fresh = os.path.join(tmp, "exercises")
        write_tree(a.src, fresh, files)
        want = set(with_exercises(files))
        have = {rel for rel in source_files(a.dst) if not rel.startswith(ANSWERS_DIR)} if os.path.isdir(a.dst) \
            else set()
        stale += [(why, []) for why in answers.stale(a.dst)]
        for rel in sorted(want | have):
            if rel not in have:
                stale.append((f"{a.dst}/{rel} (missing: {a.src}/{rel} has an exercise)", []))
                continue
            if rel in files and rel not in want:
                stale.append((f"{a.dst}/{rel} (no exercise in it: {a.dst}/ holds only the files with one; "
                               f"the build takes this one from {a.src}/)", []))
                continue
            if rel not in want:
                stale.append((f"{a.dst}/{rel} (not in {a.src}/)", []))
                continue
            mine = os.path.join(a.dst, rel)
            if filecmp.cmp(os.path.join(fresh, rel), mine, shallow=False):
                continue
            lines, regions = files[rel]
            if strict:
                why = "differs"
                try:
                    done = student_bodies(mine)
                    if done:
                        why = f"holds written exercise bodies ({', '.join(sorted(done))})"
                except MarkerError:
                    pass
                stale.append((f"{mine} ({why})", diff_lines(read_text(mine), read_text(os.path.join(fresh, rel)),
                                                           mine, f"generated from {a.src}/{rel}")))
                continue
            # the student's bodies count as fresh: regenerate keeping them, then compare
            try:
                keep = student_bodies(mine)
            except MarkerError as e:
                stale.append((f"{mine} (exercise markers broken: {e})", []))
                continue
            text = render(a.src, rel, lines, regions, keep)
            if read_text(mine) == text:
                kept += sorted(keep)
            else:
                stale.append((f"{mine} (differs outside your exercise bodies)",
                              diff_lines(read_text(mine), text, mine, f"generated from {a.src}/{rel}")))
    for rel, (lines, regions) in files.items():
        for r in regions:
            if not os.path.isfile(r.notes):
                notes.append(f"{r.path}:{r.begin + 1}: exercise {r.name} points at {r.notes}, "
                             "which does not exist")
    for n in notes:
        print(f"warning: {n}")
    if stale:
        print(f"error: {a.dst}/ is stale — it no longer matches what {a.src}/ generates:")
        for s, d in stale:
            print(f"  {s}")
            for ln in d:
                print(ln)
        if any("holds written" in s for s, _ in stale):
            print(f"fix (maintainers): exercise bodies must not be committed to {a.dst}/; regenerate it with "
                  f"`make exercises RESET=1` (it first saves every written body under exercises-backup/)")
        else:
            print(f"fix: make exercises   (regenerates {a.dst}/ from {a.src}/, keeps the bodies you wrote, and "
                  "saves your current files under exercises-backup/ first)")
        return 1
    n = sum(len(r) for _, r in files.values())
    extra = f"; your bodies kept for {', '.join(kept)}" if kept else ""
    print(f"exercises: {a.dst}/ is up to date ({len(want)} files, {n} exercises{extra}; the build takes the "
          f"other {len(files) - len(want)} files from {a.src}/)")
    return 0


def all_regions(src, chapter=None):
    out = []
    for rel, (lines, regions) in scan(src).items():
        for r in regions:
            if chapter is None or r.chapter() == chapter:
                out.append((rel, r))
    return out


def notes_order(regs):
    """regs sorted as the notes pages list them (first mention after '## Exercises'), the rest
    in file order after them."""
    cache = {}

    def key(item):
        idx, (rel, r) = item
        if r.notes not in cache:
            text = read_text(r.notes) if os.path.isfile(r.notes) else ""
            k = text.find("## Exercises")
            cache[r.notes] = text[k:] if k >= 0 else ""
        pos = cache[r.notes].find(f"`{r.name}`")
        return (r.notes, pos if pos >= 0 else 10 ** 9, idx)

    return [x for _, x in sorted(enumerate(regs), key=key)]


def load_status(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def cmd_list(a):
    regs = all_regions(a.src, a.chapter)
    if not regs:
        where = f" for chapter {a.chapter}" if a.chapter else ""
        print(f"no exercises marked in {a.src}/{where}")
        return 0
    w = max(len(r.name) for _, r in regs)
    files = scan(a.src)
    status = load_status(a.status) if a.status else {}
    dst = a.dst or "exercises"
    for rel, r in notes_order(regs):
        at = None
        try:  # where the BEGIN line is in the student's file now
            for reg in parse(os.path.join(dst, rel), read_lines(os.path.join(dst, rel))):
                if reg.name == r.name:
                    at = reg.begin
        except (OSError, MarkerError):
            pass
        if at is None:  # where it lands in a freshly generated file
            lines, regions = files[rel]
            text = render(a.src, rel, lines, regions).splitlines()
            at = next(k for k, ln in enumerate(text) if BEGIN.match(ln) and BEGIN.match(ln).group(2) == r.name)
        st = status.get(r.name)
        last = f"  last run: {st['state']} ({st['when']})" if st else ""
        print(f"{r.name:<{w}}  {r.notes:<28}  {dst}/{rel}:{at + 1}{last}")
    if not status and a.status:
        print("(no `make exercise` run yet: the last column appears after one)")
    return 0


def cmd_hint(a):
    for rel, r in all_regions(a.src):
        if r.name == a.name:
            top = max([lv for lv, _ in r.hints] or [1])
            level = min(a.level, top)
            print(f"{r.name} (exercises/{rel}) — read {r.notes}")
            shown = [(lv, t) for lv, t in r.hints if lv <= level]
            prev = None
            for lv, t in shown or [(1, "(no hint: the notes page walks through it)")]:
                print(f"  {'hint ' + str(lv) + ':' if lv != prev else '       '} {t}")
                prev = lv
            if a.level > top:
                print(f"  (there is no level-{a.level} hint: level {top} above is the last one)")
            if level < top:
                print(f"  next hint: make hint EX={r.name} LEVEL={level + 1}")
            else:
                print(f"  no further hint: this is the last level; {r.notes} walks through it")
            return 0
    names = ", ".join(r.name for _, r in all_regions(a.src)) or "none marked yet"
    print(f"error: EX={a.name}: no such exercise; allowed: {names}", file=sys.stderr)
    return 2


# ---- judging (make exercise) ------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.t0 = time.time()

    def s(self):
        return f"{time.time() - self.t0:5.1f}s"


def say(clock, msg):
    print(f"[{clock.s()}] {msg}", flush=True)


def judge_tree(a, files, student, chosen, out_dir):
    """Write out_dir: each file of DST (the student's text outside the bodies, so their includes
    and static helpers come along), with the student's body for exercises in `chosen` and the
    reference body for every other one. Like DST, it holds only the files with an exercise: the
    Makefile builds every other file of a tree from solutions/. Returns {rel: [source line
    (1-based) in DST or None for a reference line, per output line]}."""
    linemap = {}
    wanted = with_exercises(files)
    for rel, (lines, regions) in wanted.items():
        dst_path = os.path.join(a.dst, rel)
        ref = {r.name: lines[r.begin + 1:r.end] for r in regions}
        try:
            dl = read_lines(dst_path)
            dregs = parse(dst_path, dl)
        except (OSError, MarkerError):
            dl, dregs = None, []
        if dl is None or sorted(r.name for r in dregs) != sorted(ref):
            # no usable student file: the reference file itself
            write_if_changed(os.path.join(out_dir, rel), "".join(lines))
            linemap[rel] = [None] * len(lines)
            continue
        out, where, i = [], [], 0
        for r in dregs:
            out += dl[i:r.begin + 1]
            where += list(range(i + 1, r.begin + 2))
            if r.name in chosen and r.name in student:
                out += dl[r.begin + 1:r.end]
                where += list(range(r.begin + 2, r.end + 1))
            else:
                out += ref[r.name]
                where += [None] * len(ref[r.name])
            out.append(dl[r.end])
            where.append(r.end + 1)
            i = r.end + 1
        out += dl[i:]
        where += list(range(i + 1, len(dl) + 1))
        write_if_changed(os.path.join(out_dir, rel), "".join(out))
        linemap[rel] = where
    for rel in source_files(out_dir):
        if rel not in wanted:  # a file an earlier judging wrote
            os.remove(os.path.join(out_dir, rel))
    seed_objects(a, out_dir)
    return linemap


def seed_objects(a, tree):
    """Give the judged tree the objects of solutions/ for every file it builds unchanged from
    solutions/ (make then compiles only the files that differ), when missing or older than the source
    or the reference object:
    BUILD/obj/solutions/x.o -> TREE-build/obj/TREE/x.o for a file of the tree equal to
    solutions/x.c, and -> TREE-build/obj/solutions/x.o for one the tree lacks (the Makefile's
    $(OBJ)/$(IMPL)/%.o and $(OBJ)/solutions/%.o)."""
    for rel in source_files(a.src):
        if not rel.endswith(".c"):
            continue
        src_o = os.path.join(a.build, "obj", "solutions", rel[:-2] + ".o")
        mine, ref = os.path.join(tree, rel), os.path.join(a.src, rel)
        if os.path.isfile(mine):
            dst_o = os.path.join(tree + "-build", "obj") + "/" + tree + "/" + rel[:-2] + ".o"
        else:
            dst_o = os.path.join(tree + "-build", "obj", "solutions", rel[:-2] + ".o")
            mine = ref
        if not os.path.isfile(src_o) or read_text(mine) != read_text(ref):
            continue
        # newer than the source AND than the reference object: a header's change rebuilds the reference
        # object (its .d knows the headers; the seeded copy has no .d), so it is copied again
        if os.path.isfile(dst_o) and os.path.getmtime(dst_o) >= max(os.path.getmtime(mine),
                                                                     os.path.getmtime(src_o)):
            continue
        os.makedirs(os.path.dirname(dst_o), exist_ok=True)
        shutil.copyfile(src_o, dst_o)  # a fresh mtime: newer than the source


def norm(body):
    """A body without comments and whitespace (to spot one that is the reference itself)."""
    text = re.sub(r"/\*.*?\*/", "", "".join(body), flags=re.S)
    return re.sub(r"\s+", "", re.sub(r"//[^\n]*", "", text))


ERROR_LINE = re.compile(r"^(?P<path>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:\s*(?P<msg>.*)$")


def compile_errors(log, tree):
    """[(rel, line, message)] of the compiler's `file:line:col: error:` lines about files of tree."""
    out = []
    for ln in log.splitlines():
        m = ERROR_LINE.match(ln.strip())
        if not m:
            continue
        path = os.path.normpath(m.group("path"))
        t = os.path.normpath(tree)
        if path.startswith(t + os.sep):
            out.append((os.path.relpath(path, t), int(m.group("line")), m.group("msg")))
        elif not out:
            out.append((path, int(m.group("line")), m.group("msg")))
    return out


def owner_of(files, a, rel, dst_line):
    """The exercise of DST whose body holds dst_line (1-based) of DST/rel, else None."""
    try:
        for r in parse(os.path.join(a.dst, rel), read_lines(os.path.join(a.dst, rel))):
            if r.begin + 1 < dst_line <= r.end:
                return r.name
    except (OSError, MarkerError):
        pass
    return None


def owner_around(files, a, rel, dst_line):
    """The exercise of DST whose FUNCTION holds dst_line (1-based) of DST/rel outside its body: a line
    after the body's END marker up to the function's closing brace (a `}` in column 0) — where the
    compiler puts a missing return ("control reaches end of non-void function"). Else None."""
    try:
        dl = read_lines(os.path.join(a.dst, rel))
        regs = parse(os.path.join(a.dst, rel), dl)
    except (OSError, MarkerError):
        return None
    before = [r for r in regs if r.end + 1 < dst_line]
    if not before:
        return None
    r = before[-1]
    for i in range(r.end + 1, len(dl)):  # 0-based lines after the END marker
        if dl[i].startswith("}"):
            return r.name if dst_line <= i + 1 else None
    return None


def build(a, tree, clock, label):
    """make IMPL=tree build, printing progress (one line per file compiled or program linked).
    Unused static helpers are not errors here: a helper of a body swapped for the reference
    stays unused. Returns (ok, log)."""
    warn = "-Wall -Wextra -Werror -Wno-unused-parameter -Wno-unused-function"
    # GPU=0: the tests judge on CPU ranks; a CUDA build would recompile every .cu for this tree
    # on every core: a cold tree compiles everything once, a warm one relinks every program
    cmd = f"{a.make} -j{os.cpu_count() or 2} IMPL={tree} WARN='{warn}' GPU=0 build"
    say(clock, f"building {label} ...")
    p = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log, n = [], 0
    for line in p.stdout:
        log.append(line)
        m = re.search(r"\s-c\s+(\S+)\s+-o\s", line) or re.search(r"^mpicc .*\s-o\s+(\S+/(?:bin|tests)/\S+)", line)
        if m:
            n += 1
            print(f"[{clock.s()}]   {'compile' if ' -c ' in line else 'link'} {m.group(1)}", flush=True)
    ok = p.wait() == 0
    say(clock, f"built {label}" if ok else f"build of {label} failed")
    return ok, "".join(log)


def list_tests(binary, filt, env):
    """["suite/test", ...] of the binary matching the Criterion glob filt (fnmatch), as listed; the
    suites named *_long (`make test-long`'s longer sweeps) only when filt names such a suite."""
    import fnmatch
    p = subprocess.run([binary, "--list"], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    out, suite = [], None
    for ln in p.stdout.splitlines():
        m = re.match(r"^(\S+): \d+ tests?$", ln)
        if m:
            suite = m.group(1)
            continue
        m = re.match(r"^\W+\s(\S+)$", ln)
        if m and suite and fnmatch.fnmatchcase(f"{suite}/{m.group(1)}", filt):
            if suite.endswith("_long") and "_long" not in filt:
                continue
            out.append(f"{suite}/{m.group(1)}")
    return out


def calls(test, name):
    """Whether test ("suite/test" or "suite::test") calls exercise `name` (EXERCISE_TESTS; an
    exercise not listed there: every test of its chapter)."""
    import fnmatch
    if name not in EXERCISE_TESTS:
        return True
    t, pats = test.replace("::", "/"), EXERCISE_TESTS[name]
    return (any(fnmatch.fnmatchcase(t, p) for p in pats if not p.startswith("!")) and
            not any(fnmatch.fnmatchcase(t, p[1:]) for p in pats if p.startswith("!")))


def skipped_tests(log):
    """[(suite::test, reason)] of the tests that skipped themselves (cr_skip_test: not root, ...),
    not those a filter left out ("Test is disabled")."""
    return [(m.group(1), m.group(2).strip()) for m in re.finditer(r"^\[SKIP\] (\S+::\S+?):? (.*)$", log, re.M)
            if "Test is disabled" not in m.group(2)]


def ordered_tests(tests, chapter):
    """tests in TEST_ORDER[chapter]'s order (the first pattern each matches), the rest after them
    alphabetically."""
    import fnmatch
    pats = TEST_ORDER.get(chapter, [])
    rank = lambda t: next((i for i, p in enumerate(pats) if fnmatch.fnmatchcase(t, p)), len(pats))
    return sorted(tests, key=lambda t: (rank(t), t))


_RUN_CACHE = []


def run_cache_dir():
    """The reference cache of this judging (tests/zl_test.h, zl_cache_stem): one directory for the
    tests this command runs, removed when it exits — never a cache an earlier run left."""
    if not _RUN_CACHE:
        import atexit
        d = tempfile.mkdtemp(prefix="zl_test_cache.")
        atexit.register(shutil.rmtree, d, True)
        _RUN_CACHE.append(d)
    return _RUN_CACHE[0]


def run_tests(binary, filt, clock, deadline, echo=True, chapter=None, tests=None):
    """Criterion on the tests matching filt (or the list `tests`, "suite/test"), in exercise mode:
    short collective deadlines, stop at the first failure; the chapter's tests one at a time in
    TEST_ORDER (cheapest precise check first). Returns (rc, log, failed test name or None)."""
    env0 = {k: v for k, v in os.environ.items() if not k.startswith(("CRITERION", "BXF"))}
    if tests is None:
        tests = list_tests(binary, filt, env0) if chapter else []
    elif len(tests) == 1:
        filt = tests[0]
    if len(tests) > 1:
        logs = []
        for t in ordered_tests(tests, chapter):
            rc, log, failed = run_tests(binary, t, clock, deadline, echo)
            logs.append(log)
            if rc != 0:
                return rc, "".join(logs), failed
        return 0, "".join(logs), None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRITERION", "BXF"))}
    env = dict(env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               ZL_EXERCISE_TIMEOUT_S=str(deadline), ZL_TEST_CACHE=run_cache_dir())
    args = [binary, "--jobs", "1", "--short-filename", "--fail-fast", "--verbose", "--filter", filt,
            "--timeout", str(EXERCISE_TEST_LIMIT_S)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         stdin=subprocess.DEVNULL)
    log, failed = [], None
    for line in p.stdout:
        log.append(line)
        m = re.match(r"^\[(PASS|FAIL|ERR )\s*\] (\S+::[^:\s]+)", line)
        if m:
            if m.group(1) != "PASS" and failed is None:
                failed = m.group(2)
            if echo:
                t = re.search(r"\(([\d.]+s)\)", line)
                print(f"[{clock.s()}]   {m.group(2):<55} {'ok' if m.group(1) == 'PASS' else 'FAILED'}"
                      f"{' (' + t.group(1) + ')' if t else ''}", flush=True)
        elif echo and line.startswith("[SKIP]") and "Test is disabled" not in line:
            for name, why in skipped_tests(line):
                print(f"[{clock.s()}]   {name:<55} skipped: {why}", flush=True)
    rc = p.wait()
    text = "".join(log)
    if failed is None and rc != 0:
        m = re.search(r"^\[(?:FAIL|ERR )\s*\] (\S+::\S+?)[:\s]", text, re.M)
        tail = [ln.strip() for ln in log if ln.strip() and not ln.startswith("[SKIP]")][-3:]
        failed = m.group(1) if m else f"the test run (exit {rc}: {' / '.join(tail) or 'no output'})"
    return rc, text, failed


def read_measure(path):
    """The totals the judged tests' communicators appended (ZL_MEASURE_FILE): {calls, model_bytes,
    ring_bytes} summed over every rank of every launch."""
    tot = {"calls": 0, "model_bytes": 0, "ring_bytes": 0}
    try:
        for ln in open(path, encoding="utf-8"):
            f = ln.split()
            for k, v in zip(f[0::2], f[1::2]):
                if k in tot:
                    tot[k] += int(v)
    except (OSError, ValueError):
        pass
    return tot


JITTER_US = 5000  # the most a random delay holds a point-to-point task or a wait (REPEAT=N)
# tests that measure time (a bandwidth table, a deadline, an overlap) say nothing of a race and fail by
# design when delays are added: not rerun with them
JITTER_SKIP = ["*collbench*", "*timeout*", "*_overlap/*", "*overlap*"]


def jitter_runs(binary, tests, clock, a, written):
    """The judged tests rerun a.repeat times with random delays in the comm layer (ZL_JITTER_US, a
    seed per run: comm_checks.c's comm_jitter). Returns None when every run passes, else (failed runs,
    the first failing run, its reason)."""
    import fnmatch
    failed, first = 0, None
    tests = [t for t in tests if not any(fnmatch.fnmatchcase(t, p) for p in JITTER_SKIP)]
    if not tests:
        return None
    for k in range(1, a.repeat + 1):
        os.environ["ZL_JITTER_US"], os.environ["ZL_JITTER_SEED"] = str(JITTER_US), str(k)
        try:
            rc, log, test = run_tests(binary, None, clock, a.deadline, echo=False, chapter=a.chapter, tests=tests)
        finally:
            del os.environ["ZL_JITTER_US"], os.environ["ZL_JITTER_SEED"]
        say(clock, f"run {k} of {a.repeat} with random delays: {'ok' if rc == 0 else 'FAILED (' + str(test) + ')'}")
        if rc != 0:
            failed += 1
            if first is None:
                first = (k, f"{test}: {failure_kind(log, test, a.deadline)[1]}")
    return (failed, first[0], first[1]) if failed else None


def failure_kind(log, test, deadline=EXERCISE_TIMEOUT_S):
    """(state, one-line reason, the lines worth showing) for the failing test's log. The reason is
    the first failing check's own message (an assertion in a test .c or a test header .h, or a
    rank's FAIL line); the lines shown under it never repeat it, and they include the program's
    own FAILED / error lines however deep in its output they sit."""
    if test and test.split("::")[0].endswith("_overlap"):
        state = "not overlapped"
    else:
        state = "wrong"
    lines = [ln.rstrip() for ln in log.splitlines()]
    m = re.search(r"did not complete within ([\d.]+) s", log)
    if m or re.search(r"timed out after|exit(?:ed)? (?:code )?124\b|Timed out", log):
        secs = m.group(1) if m else str(deadline)
        return ("timed out", f"timed out after {secs} s — a deadlock? check who sends to whom "
                f"(every send needs the matching receive on the other rank, in the same order)",
                [re.sub(r"^\[----\]\s*", "", ln) for ln in lines if "did not complete within" in ln][:3])
    # the comm layer's decoded MPI errors (comm_mpi.c, comm_checks.c): the line names the call, its tag,
    # the peer and the counts — the most specific message there is
    decoded = [re.sub(r"^(\[----\])?\s*", "", ln) for ln in lines
               if re.search(r"rank \d+: comm_\w+ \(.*\): (the (receive|send) |.* failed: )", ln)
               or "was not issued by this communicator" in ln]
    if decoded:
        return (state, decoded[0], [ln for ln in decoded[1:3] if ln != decoded[0]])
    if "MPI_ERR_TRUNCATE" in log:
        return (state, "the ranks' collectives do not match (MPI_ERR_TRUNCATE: one rank's message is longer "
                "than the other expects): does every rank launch the same operations, of the same sizes, in "
                "the same order?", [re.sub(r"^\[----\]\s*", "", ln) for ln in lines if "MPI_ERR_TRUNCATE" in ln][:2])
    # the comm layer's own verdicts (exercise mode): a handle never waited, a NULL communicator
    comm = [re.sub(r"^(\[----\])?\s*", "", ln) for ln in lines
            if "never waited" in ln or "communicator is NULL" in ln or "is outside the group" in ln]
    fails = [re.sub(r"^(\[----\])?\s*", "", ln) for ln in lines if re.match(r"^(\[----\])?\s*FAIL rank", ln)]
    msgs, inside = [], False  # the assertion messages: the [----] lines after "Assertion Failed"
    for ln in lines:
        body = ln[7:].strip() if ln.startswith("[----]") else None
        if body is None:
            inside = False
        elif re.match(r"^\S+\.[ch]:\d+: (Assertion Failed|Unexpected signal)", body):
            inside = True
            if "signal" in body:
                msgs.append("crashed: " + body)
        elif inside and body and not body.startswith("FAIL rank") and not body.startswith("scn_"):
            msgs.append(body)
    # a wrong value before "values right, but ..." (a count off where the values held, e.g. on 1 rank)
    fails.sort(key=lambda ln: "values right" in ln)
    msgs.sort(key=lambda ln: "values right" in ln)
    first = comm or fails or msgs
    reason = first[0] if first else f"{test} fails (no message: see the test's output with make test)"
    same = lambda ln: re.sub(r"^(?:FAIL )?rank \d+: ", "", ln)  # the same line from another rank
    rest = [ln for ln in first[1:] if same(ln) != same(reason)] if not comm else []
    shown = rest[:5]
    # a program's FAILED / error line past the first few lines (e.g. --mlp-check's "T=2 ... FAILED")
    deep = [ln for ln in msgs[:400] if re.search(r"\bFAILED\b|\berror:|\bWRONG\b|(?:MEASURED|MODEL) != FORMULA", ln)
            and ln != reason and ln not in shown]
    if deep and re.search(r"exit(?:ed)? -?\d+:?$", reason):  # "program exited 1:" then its output
        reason = reason.rstrip(":") + ": " + deep.pop(0)
        shown = []  # its banner says nothing of the failure: its other FAILED lines do
    shown += deep[:3]
    if state == "not overlapped":
        return (state, "correct but not overlapped: " + reason.split("not overlapped: ", 1)[-1], shown)
    if "values right" in reason:  # the rest says the same of other ranks and cases
        return ("other pattern", reason, [])
    return (state, reason, shown)


def cmd_status(a):
    clock = Clock()
    files = scan(a.src)
    regs = [(rel, r) for rel, r in all_regions(a.src, a.chapter)]
    if a.ex:
        regs = [(rel, r) for rel, r in regs if r.name == a.ex]
        if not regs:
            names = ", ".join(r.name for _, r in all_regions(a.src, a.chapter)) or "none"
            print(f"error: EX={a.ex}: no exercise of that name in chapter {a.chapter}; allowed: {names}",
                  file=sys.stderr)
            return 2
    if not regs:
        print(f"chapter {a.chapter}: no exercises marked in {a.src}/")
        return 0
    regs = notes_order(regs)
    student = {}
    for rel in {rel for rel, _ in regs}:
        try:
            student.update(student_bodies(os.path.join(a.dst, rel)))
        except MarkerError as e:
            print(f"error: {e}\n  fix the markers in {a.dst}/{rel} (or `make exercises`: it saves your file "
                  f"under exercises-backup/ before regenerating it)", file=sys.stderr)
            return 2
    results = {r.name: ("not done", f"stub still in {a.dst}/{rel} (make hint EX={r.name})")
               for rel, r in regs if r.name not in student}
    written = [r.name for _, r in regs if r.name in student]
    shown_lines = {}
    work = a.work or a.build
    tree = os.path.join(work, "exercise-check", "impl")
    binary = os.path.join(tree + "-build", "tests", "zl_tests")  # OUT of a custom IMPL (Makefile)
    filt = a.filter or f"ch{a.chapter}*/*"
    what = f"chapter {a.chapter}" + (f", exercise {a.ex}" if a.ex else "")
    say(clock, f"{what}: {len(written)} of {len(regs)} exercise(s) written ({', '.join(written) or 'none'})"
        + ("; the reference code stands in for the others" if len(written) < len(regs) else ""))
    chosen = set(written)
    while chosen:
        linemap = judge_tree(a, files, student, chosen, tree)
        ok, log = build(a, tree, clock, f"your {', '.join(sorted(chosen))} with the reference for the rest")
        if ok:
            break
        errs = compile_errors(log, tree)
        blamed = set()
        for rel, line, msg in errs:
            dline = linemap.get(rel, [])[line - 1] if rel in linemap and 0 < line <= len(linemap[rel]) else None
            name = owner_of(files, a, rel, dline) if dline else None
            if name in chosen and name not in blamed:
                blamed.add(name)
                results[name] = ("does not compile", f"{a.dst}/{rel}:{dline}: error: {msg}")
        for rel, line, msg in errs if not blamed else []:
            # outside every body, but inside the function of one (after its END, before the function's
            # closing brace): that body's — a missing return is reported at the brace
            dline = linemap.get(rel, [])[line - 1] if rel in linemap and 0 < line <= len(linemap[rel]) else None
            name = owner_around(files, a, rel, dline) if dline else None
            if name in chosen and name not in blamed:
                blamed.add(name)
                results[name] = ("does not compile", f"{a.dst}/{rel}:{dline}: error: {msg} (at the end of the "
                                 f"function that holds your body: does every path of the body return a value?)")
        if not blamed:  # an error outside the bodies (or in a file that is not ours)
            rel, line, msg = errs[0] if errs else ("?", 0, "see the build output above")
            dline = linemap.get(rel, [None] * max(line, 1))[line - 1] if rel in linemap else line
            where = f"{a.dst}/{rel}" if rel in linemap else rel  # else a file of solutions/ (or common/)
            print("".join(log[-3000:]) if not errs else "", end="")
            print(f"error: your tree does not compile outside the exercise bodies: {where}:{dline}: "
                  f"error: {msg}\n  (code outside BEGIN/END is kept as you wrote it: includes and static helpers "
                  f"are welcome there, but they must compile)")
            for n in chosen:  # the verdict of each body written: none can be judged (no stale one stays)
                results[n] = ("does not compile", f"not judged: the tree does not compile outside the bodies "
                              f"({where}:{dline}: error: {msg})")
            chosen = set()
            break
        chosen -= blamed
    failed_test = None
    measured_of = {}
    if chosen:
        env0 = {k: v for k, v in os.environ.items() if not k.startswith(("CRITERION", "BXF"))}
        every = list_tests(binary, filt, env0)
        # the tests that call the bodies judged (EXERCISE_TESTS), unless a --filter picked them
        mine = every if a.filter else [t for t in every if any(calls(t, n) for n in chosen)]
        fd, measure = tempfile.mkstemp(prefix="zl_measure.")  # every communicator's totals (comm_checks.c)
        os.close(fd)
        os.environ["ZL_MEASURE_FILE"] = measure
        try:
            rc, log, failed_test = run_tests(binary, filt, clock, a.deadline, chapter=a.chapter, tests=mine)
        finally:
            del os.environ["ZL_MEASURE_FILE"]
            measured = read_measure(measure)
            os.remove(measure)
        tested = len(re.findall(r"^\[(?:PASS|FAIL|ERR )", log, re.M))
        skipped = skipped_tests(log)
        flaky = None
        if rc == 0 and a.repeat > 0:
            flaky = jitter_runs(binary, mine, clock, a, written)
        if rc == 0 and flaky:
            k, first_run, why = flaky
            for n in chosen:
                results[n] = ("flaky", f"flaky {k}/{a.repeat}: passes as it is, fails with random delays in the "
                              f"comm layer (run {first_run}, ZL_JITTER_SEED={first_run}): {why} — a buffer read "
                              f"before its wait, or a send buffer written before its wait?")
        elif rc == 0:
            unwritten = len(regs) - len(written)
            for n in chosen:
                ran = [x for x in mine if calls(x, n)]
                passed = [x.replace("/", "::") for x in ran if x.replace("/", "::") not in dict(skipped)]
                if len(ran) < len(every) and not a.filter:
                    detail = (f"the {len(passed)} tests that call it pass ({', '.join(passed)}); the chapter's "
                              f"{len(every) - len(ran)} other tests do not call it (`make test` runs them)")
                else:
                    detail = f"the chapter's {tested} tests pass"
                if skipped:
                    detail += (f"; {len(skipped)} skipped here: " +
                               "; ".join(f"{s} ({why})" for s, why in skipped[:3]) + ("; ..." if len(skipped) > 3 else ""))
                if unwritten:
                    detail += " (the reference code stands in for the exercises not written)"
                results[n] = ("done", detail)
                measured_of[n] = measured
        else:
            state, reason, shown = failure_kind(log, failed_test, a.deadline)
            ref = {r.name: files[rel][0][r.begin + 1:r.end] for rel, r in regs}
            same = {n for n in chosen if norm(student[n]) == norm(ref[n])}  # the reference itself
            # the bodies the failure names first (its reason and the lines shown: ring_all_gather, or
            # "all_gather"), then notes order
            said = " ".join([reason] + shown)
            named = lambda n: not any(re.search(r"\b%s\b" % re.escape(w), said) for w in [n, n.split("_", 1)[-1]]
                                      if len(w) > 2)
            suspects = sorted(chosen - same, key=lambda n: (named(n), written.index(n)))
            for n in same:
                results[n] = ("pending", "the same as the reference code; judged in full once the chapter passes")
            # the failing test calls only one of them (EXERCISE_TESTS): that one, without rebuilding
            called = [n for n in suspects if calls(failed_test or "", n)]
            if len(called) == 1 and len(suspects) > 1:
                results[called[0]] = (state, f"{failed_test}: {reason}")
                shown_lines[called[0]] = shown
                for n in suspects:
                    if n != called[0]:
                        results[n] = ("pending", f"judged in full once {called[0]} passes ({failed_test} does not call it)")
            elif len(suspects) == 1:
                results[suspects[0]] = (state, f"{failed_test}: {reason}")
                shown_lines[suspects[0]] = shown
            else:
                say(clock, f"{failed_test} fails; running it with each of your bodies alone")
                guilty = []
                for n in suspects:
                    judge_tree(a, files, student, {n}, tree)
                    if not build(a, tree, clock, f"your {n} alone")[0]:
                        results[n] = ("does not compile", "alone (with the reference for the rest)")
                        continue
                    rc1, log1, f1 = run_tests(binary, failed_test.replace("::", "/"), clock, a.deadline)
                    if rc1 != 0:
                        st1, why1, shown1 = failure_kind(log1, f1, a.deadline)
                        results[n] = (st1, f"{f1}: {why1}")
                        shown_lines[n] = shown1
                        guilty.append(n)
                        break  # the others wait until this one passes: a verdict now, not in minutes
                for n in suspects:
                    if n not in guilty and n not in results:
                        results[n] = ("pending", f"judged in full once {', '.join(guilty) or 'the others'} "
                                      f"{'passes' if len(guilty) == 1 else 'pass'}")
                if not guilty and suspects:
                    for n in suspects:
                        results[n] = (state, f"{failed_test} fails with your bodies together, passes with each "
                                      f"alone: {reason}")
    print(f"---- chapter {a.chapter} exercises ({a.dst}/, in the order of {regs[0][1].notes}) ----")
    w = max(len(r.name) for _, r in regs)
    ws = max(len(results[r.name][0]) for _, r in regs)
    for _, r in regs:
        state, detail = results[r.name]
        print(f"{r.name:<{w}}  {state:<{ws}}  {detail}")
        for ln in shown_lines.get(r.name, []):
            print(f"{'':<{w}}  {'':<{ws}}    {ln}")
    bad = [r.name for _, r in regs if results[r.name][0] not in ("done", "not done", "pending")]
    if bad:
        print(f"rerun one: make exercise CH={a.chapter} EX={bad[0]}   (hints: make hint EX={bad[0]})")
    say(clock, "verdict")
    # the status of each exercise for `make exercise-list`
    path = os.path.join(work, "exercise-status.json")
    st = load_status(path)
    now = time.strftime("%Y-%m-%d %H:%M")
    took = round(time.time() - clock.t0, 1)  # this judging, build included: what a student waited
    for _, r in regs:
        st[r.name] = {"state": results[r.name][0], "detail": results[r.name][1], "when": now,
                      "chapter": a.chapter, "seconds": took}
        if r.name in measured_of:
            st[r.name]["measured"] = measured_of[r.name]
    os.makedirs(work, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(st, f, indent=1, sort_keys=True)
    return 0 if all(results[r.name][0] == "done" for _, r in regs) else 1


def cmd_calls(a):
    """The chapter's tests and the exercises each calls (EXERCISE_TESTS), as BIN lists them."""
    names = [r.name for _, r in all_regions(a.src, a.chapter)]
    env0 = {k: v for k, v in os.environ.items() if not k.startswith(("CRITERION", "BXF"))}
    for t in list_tests(a.binary, f"ch{a.chapter}*/*", env0):
        print(f"{t}: {' '.join(n for n in names if calls(t, n)) or '-'}")
    return 0


def cmd_compile_report(a):
    """Name the exercises a failed build of DST blames (make test goes on after it)."""
    log = read_text(a.log) if os.path.isfile(a.log) else ""
    files = scan(a.dst) if os.path.isdir(a.dst) else {}
    errs = compile_errors(log, a.dst)
    seen = set()
    for rel, line, msg in errs:
        name = owner_of(files, a, rel, line) if rel in files else None
        key = name or f"{rel}:{line}"
        if key in seen:
            continue
        seen.add(key)
        who = f"exercise {name}" if name else "outside the exercise bodies"
        where = f"{a.dst}/{rel}" if rel in files else rel  # else a file of solutions/ (or common/)
        print(f"FAIL {who}: {where}:{line}: error: {msg}")
    if not errs:
        print(f"FAIL {a.dst}/ does not build (see {a.log})")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("src"), g.add_argument("dst")
    g.add_argument("--reset", action="store_true", help="discard bodies written in dst (after saving them)")
    g.add_argument("--backup", default="exercises-backup",
                   help="where a dst file holding student work is copied before it is overwritten")
    c = sub.add_parser("check")
    c.add_argument("src"), c.add_argument("dst")
    c.add_argument("--strict", action="store_true", help="written bodies count as stale (CI)")
    ls = sub.add_parser("list")
    ls.add_argument("src"), ls.add_argument("--chapter")
    ls.add_argument("--dst", help="the student's tree the line numbers are read from (default exercises)")
    ls.add_argument("--status", help="the JSON status file `make exercise` writes")
    h = sub.add_parser("hint")
    h.add_argument("src"), h.add_argument("name")
    h.add_argument("--level", type=int, default=1, help="show hints up to this level (1: the idea)")
    s = sub.add_parser("status")
    s.add_argument("src"), s.add_argument("dst")
    s.add_argument("--chapter", required=True)
    s.add_argument("--ex", help="judge this one exercise only")
    s.add_argument("--make", default="make --no-print-directory GPU=0")
    s.add_argument("--build", default="build")
    s.add_argument("--tests", help="(ignored: kept for older Makefiles)")
    s.add_argument("--work", help="where the judged tree and the status file go (default: --build)")
    s.add_argument("--filter", help="Criterion filter of the tests to run (default: ch<NN>*/*)")
    s.add_argument("--repeat", type=int, default=0,
                   help="after a pass, rerun the judged tests N times with random delays in the comm layer "
                        "(ZL_JITTER_US): a race shows as 'flaky k/N'")
    s.add_argument("--deadline", type=int, default=EXERCISE_TIMEOUT_S,
                   help="collective deadline of every test run, seconds (exercise mode)")
    ca = sub.add_parser("calls")
    ca.add_argument("src"), ca.add_argument("--chapter", required=True), ca.add_argument("--binary", required=True)
    cr = sub.add_parser("compile-report")
    cr.add_argument("dst"), cr.add_argument("log")
    a = p.parse_args()
    if getattr(a, "chapter", None) is not None and not re.fullmatch(r"\d\d", a.chapter):
        print(f"error: CH={a.chapter}: allowed: two digits, e.g. 01", file=sys.stderr)
        return 2
    if a.cmd == "compile-report":
        return cmd_compile_report(a)
    if not os.path.isdir(a.src) and a.cmd in ("list", "hint") and os.path.isdir("exercises"):
        a.src = "exercises"  # a student who moved solutions/ away: the stubs keep the hints
    if not os.path.isdir(a.src):
        print(f"error: {a.src}/ not found (run from the repository root)", file=sys.stderr)
        return 2
    try:
        return {"generate": cmd_generate, "check": cmd_check, "list": cmd_list,
                "hint": cmd_hint, "status": cmd_status, "calls": cmd_calls}[a.cmd](a)
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
