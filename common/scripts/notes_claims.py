"""notes_claims.py — the checks of the notes that run no program (imported by check_notes.py).

The checks, each a function returning 'PAGE:LINE: ...' messages (empty: all good):

check_plan(root)
    Every chapter page notes/NN-*.md, each of its meetings (`## Meeting NNx` headings), and every
    chapter program (chapters/NN_name/: main.c is chNN_name, another .c with a main is chNN_x) is
    in the reading plan of notes/README.md (the table under "## A reading plan") and in the
    chapter table of README.md (under "## Chapters"): the page linked, the chapter's programs
    named (`chNN_x`, or `CH=NN` / `PROG=x` in a make command). Every other notes page is in the
    plan too, except the references in REFERENCE_PAGES.
check_reading_times(root)
    The plan's *reading* column and the "NNx about M minutes" of the pages that are two meetings
    agree with the words they name, at PACE words a minute: the words as `wc -w` counts them,
    without HTML comments (the invisible data markers) and without the Exercises and Code map
    sections (the reading track skips them), within TOLERANCE_MIN minutes; a page's time for one
    meeting equals the plan's for that meeting; no week's reading is over BUDGET_MIN minutes, no
    week assigns more than MAX_PAPERS papers (the links of its *read* cell that leave the
    repository) and no week's pages ask more than MAX_QUESTIONS questions (the numbered items of
    their Questions sections, in the week's meetings, "(code)" ones not counted).
check_papers(root)
    Every paper the plan assigns (a link out of the repository in a *read* cell) is in the reading
    list of each page of READING_LISTS (the same link, or for an arXiv paper its id, in a section
    whose heading starts with "Reading list").
check_claims(root)
    Every sentence that says something is not there — "not built", "not yet", "not implemented",
    "not here", "left for later", "zerolab does not have", and every item of a section headed
    "Not built" / "Not built yet" / "What is not here (yet)" / "Left for later" — in notes/*.md
    and README.md must match one entry of CLAIMS (page and a phrase of the sentence). The entry
    names what must NOT exist for the sentence to stay true (a flag of the programs, a program, a
    make target, a pattern in the sources) and what must (a refusal it describes); the check
    fails when a thing claimed missing exists, when a thing claimed present does not, when a
    sentence matches no entry (a new claim: add one), and when an entry matches no sentence (the
    sentence changed: update or drop the entry; only for this repository, not for a tree given with
    --root). `check_notes.py --claims` lists them all.

A flag exists when its string literal ("--flag") is in a C source under chapters/, common/ or
solutions/ (the programs' argument tables and their error messages); a program when chapters/
builds it; a target when the Makefile defines it.
"""
import glob
import os
import re

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACE = 200            # words a minute: the reading plan's stated pace
TOLERANCE_MIN = 2     # stated against computed reading minutes
BUDGET_MIN = 25       # a week's reading at most (notes/README.md says so): past it, split the page
MAX_PAPERS = 2        # papers (links out of the repository) a week assigns at most
MAX_QUESTIONS = 9     # questions a week's pages ask at most, the full track's "(code)" ones not counted
READING_LISTS = ("notes/README.md", "notes/11-choosing-a-layout.md")  # each lists every paper the plan assigns
REFERENCE_PAGES = {"README.md", "design.md"}   # notes pages that are references, not a week's reading
SOURCE_TOPS = ("chapters", "common", "solutions")

# ---- the claims: (page, phrase, checks, why) --------------------------------------------------
# page: the file as named from the repository root; phrase: a regex found in the sentence (spaces
# collapsed, case ignored); checks: "no KIND ARG" (must not exist) or "has KIND ARG" (must), KIND
# one of flag (--x), prog (chNN_x), target (make), src (GLOB /REGEX/); why: what the sentence
# claims, shown by --claims (for a sentence that names nothing one can look for, the reason).
CLAIMS = [
    ("notes/14-fault-tolerance.md", r"^Not built here: a snapshot on the GPU path",
     ["has flag --ckpt-mem-every", "has src common/train/ckpt_elastic.c /int ckpt_elastic_restore/",
      "has src common/train/loop_flags.c /CPU runs only \\(--device cpu\\)/"],
     "issue 51: the GPU snapshot is not built (--ckpt-mem-every refused on a GPU); --elastic only shrinks"),
    ("notes/03-zero1.md", r"^Not built, and refused with the reason: ZeRO-3 and offload with Muon",
     ["has src common/train/loop.c /whole-matrix owners are built for ZeRO-1 and ZeRO-2/",
      "has src common/train/loop_flags.c /with --tp > 1 each rank holds a slice of every matrix/"],
     "Muon refused where matrices are sliced: ZeRO-3, offload, --tp, MoE, checkpoints"),
    ("notes/05-zero3.md", r"not yet issued", [],
     "prose: the prefetch algorithm's events not yet issued, not a feature"),
    ("notes/06-tensor-parallel.md", r"^Not built: the vocab split assumes",
     ["has src chapters/06_tp/main.c /--sample and --eval-every need whole logits/"],
     "--sample and --eval-every refused with --tp (the vocab-parallel head)"),
    ("notes/06-tensor-parallel.md", r"--recompute. with .--tp. reruns the g's",
     [], "unchecked: a behaviour, no flag (recompute reruns the forward's all-reduces: 17, not 13)"),
    ("notes/06-tensor-parallel.md", r"Sequence parallelism, once listed here, is built",
     ["has flag --sp"], "built: --sp (chapter 10, Part 1)"),
    ("notes/07d-dualpipev.md", r"Not built here: DeepSeek's finer interleave",
     ["has flag --fb-overlap", "has src solutions/moe_exchange.c /trainer_fb_fill\\(c->t, swap_aside, c\\)/",
      "has src common/train/loop_fb.c /swapcontext\\(&fb->ctx\\[from\\], &fb->ctx\\[to\\]\\)/"],
     "--fb-overlap: the halves hand over at each posted all-to-all, either way (no finer, hand-made interleave)"),
    ("notes/07-pipeline.md", r"Prefetching .--zero 3.'s gathers",
     ["no src solutions/pipeline*.c /prefetch/"],
     "the pipeline's ZeRO-3 gathers are not prefetched"),
    ("notes/07-pipeline.md", r"Open MPI's single-copy mechanism .CMA.",
     [], "unchecked: an Open MPI transport (ptrace permission), no flag to look for"),
    ("notes/07-pipeline.md", r"step t \+ 1's forwards while step t drains is left for later",
     ["no flag --overlap-steps", "has flag --post-validate"],
     "steps that overlap (ZB-H2's parallelogram): the loop ends each step with a barrier; post-validation is built"),
    ("notes/07-pipeline.md", r"gradient_accumulation_fusion",
     [], "unchecked: the weight-gradient GEMM's beta, no flag (the bitwise contracts keep it 0)"),
    ("notes/08-offload.md", r"Delayed parameter update.*not built",
     ["no flag --dpu", "no flag --delayed-update", "no src solutions/offload*.c /delayed.param|\\bdpu\\b/"],
     "ZeRO-Offload's one-step delayed parameter update"),
    ("notes/13-compression.md", r"Not built yet: 1-bit Adam with ZeRO",
     ["has flag --compress", "has flag --qwz", "has flag --qgz", "has flag --warmup-steps",
      "has src solutions/qgz.c /qgz_reduce/", "has target bench-compress",
      "has src solutions/qgz.c /runs on --device cpu only/", "has src solutions/qwz.c /runs on --device cpu only/"],
     "chapter 13: PowerSGD, 1-bit Adam, qwZ (with hpZ), qgZ and the emulated-node step times built; 1-bit "
     "Adam with ZeRO or on the GPU, qwZ and qgZ on the GPU not (refused)"),
    ("notes/10-long-sequences.md", r"Not built\.\*\* The extra all-gathers are not overlapped",
     ["has src common/train/loop_flags.c /\"--sp\", NULL, \"needs --model gpt/",
      "has src common/train/loop_flags.c /args_error\\(\"--pa\", \"1\", \"with --sp/",
      "has src chapters/06_tp/main.c /--sample and --eval-every need whole logits/"],
     "SP's refusals (the MLP, --pa 1, --sample/--eval-every with --tp); the unoverlapped "
     "all-gathers and the CUDA permutation's copies are unchecked"),
    ("notes/10-long-sequences.md", r"A batch smaller than C·D sequences",
     ["has src common/train/loop_flags.c /args_error\\(\"--batch\", v, \"must be divisible by %s x accum/"],
     "whole sequences per rank: --batch a multiple of ranks x accum, refused otherwise"),
    ("notes/10-long-sequences.md", r"\*\*GPU\.\*\* The ring attention is a host",
     ["has src solutions/cp_report.c /the ring attention runs on the CPU only/"],
     "--cp with --device cuda refused"),
    ("notes/10-long-sequences.md", r".--sample. and .--eval-every. with .--cp. \(they need",
     ["has src solutions/cp_report.c /--sample and --eval-every need whole sequences/",
      "no src chapters/10_long/main.c /TRAIN_FLAG_TP/"],
     "--sample/--eval-every with --cp refused; ch10_long takes no --tp"),
    ("notes/12-experts.md", r"Validation with .--tp.",
     ["has src solutions/moe_report.c /\"--eval-every\", NULL, \"not with --tp/"],
     "--eval-every refused with --tp in ch12_experts"),
    ("notes/12-experts.md", r"A pipeline with MoE blocks",
     ["has src chapters/12_experts/main.c /TRAIN_FLAG_PIPELINE/",
      "has src solutions/moe_report.c /checkpoints of a MoE pipeline are not built/",
      "has src solutions/moe_report.c /TP inside the EP group of a pipeline stage is/"],
     "ch12_experts --pp runs; --tp, the global aux scope and checkpoints refused with it"),
    ("notes/12-experts.md", r".--sample. with .--ep. > 1\*\* is refused",
     ["has src solutions/moe_report.c /\"--sample\", v, \"must be 0 with --ep > 1/"],
     "--sample with --ep > 1 refused"),
    ("notes/12-experts.md", r"The router bias in checkpoints",
     ["has src solutions/moe_report.c /the router bias is not in the checkpoint/",
      "has src common/tools/zl_ckpt.c /a Mixture-of-Experts checkpoint/"],
     "--router-bias-rate with --resume refused (the bias is not saved)"),
    ("notes/12-experts.md", r"Overlap of the all-to-alls",
     ["no flag --moe-overlap", "has flag --shared-experts", "has flag --expert-ffn", "has flag --gate-norm",
      "has src solutions/ep.c /comm_all_to_allv_async\\([^;]*;\\s*comm_wait\\(g, h\\);/"],
     "every exchange waited for at once (ep_exchange_rows), but in 07d's --fb-overlap; shared and fine-grained "
     "experts built"),
    ("notes/12-experts.md", r"Two groups with `--tp` inside EP or `--pp`",
     ["has src solutions/zero3.c /\\.two_groups = 1/",
      "has src common/train/loop.c /s->two_groups && !cfg->sched && cfg->tp <= 1/"],
     "DDP and ZeRO-1/2/3 run two data-parallel groups under --ep; with --tp inside EP or --pp the launcher "
     "opens no dense group"),
    ("notes/12-experts.md", r"On a GPU.*the NCCL path of the all-to-all",
     [], "unchecked: a GPU run of ch12_experts is recorded when one happens"),
    ("notes/11-choosing-a-layout.md", r"delayed parameter update, not built here",
     ["no flag --dpu", "no flag --delayed-update", "no src solutions/offload*.c /delayed.param|\\bdpu\\b/"],
     "ZeRO-Offload's one-step delayed parameter update"),
    ("notes/fp16.md", r"On a GPU .*Not run yet",
     [], "unchecked: a GPU run of the fp16 path (make test-gpu) is recorded when one happens"),
    ("notes/fp16.md", r"The flushed-to-zero count is the CPU backward ops'",
     ["no src common/comm/*.c /flushed/"],
     "the all-reduce's fp16 flushes are not counted"),
    ("notes/design.md", r"not yet run on a GPU",
     [], "unchecked: the NCCL watchdog's GPU run is recorded when one happens"),
    ("notes/benchmarks.md", r"chapter 07's \[Left for later\]", [],
     "a pointer to chapter 07's section, not a claim"),
    ("notes/design.md", r"finds the message not there yet", [],
     "prose: a message not arrived yet, not a feature"),
    ("notes/design.md", r"3 an exercise not written yet", [],
     "prose: exit code 3, a stub the student has not written"),
    ("README.md", r"the exercises you have not written yet", [],
     "prose: the student's exercises, not a feature"),
    ("notes/README.md", r"The plan and \"not built\" claims, checked", [],
     "prose: the heading of this check's description"),
    ("notes/README.md", r"says something is\s+not built, not yet done or left for later", [],
     "prose: this check's description"),
    ("notes/tour.md", r"If a\s+chapter is not built it says so",
     [], "prose: a chapter missing from build/, not a feature"),
]

CLAIM_RE = re.compile(r"\bnot (?:built|implemented|here)\b|\bnot (?:[a-z]+ )?yet\b|\bleft for later\b"
                      r"|\bzerolab does not have\b", re.I)
SECTION_RE = re.compile(r"^#{2,6}\s+(?:what is )?not (?:built|here)(?: yet| \(yet\))?\s*$"
                        r"|^#{2,6}\s+left for later\s*$", re.I)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})")
ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+\.)\s")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _slug(heading):
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.replace("`", ""))
    return re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-")


# ---- what exists ------------------------------------------------------------------------------
class Tree:
    """The flags, programs, make targets and sources of a checkout at root (read once)."""

    def __init__(self, root):
        self.root = root
        self.sources = {}
        for top in SOURCE_TOPS:
            for d, _, names in os.walk(os.path.join(root, top)):
                for n in names:
                    if re.search(r"\.(c|h|cu|cuh)$", n):
                        p = os.path.join(d, n)
                        self.sources[os.path.relpath(p, root)] = _read(p)
        self.flags = set()
        for text in self.sources.values():
            self.flags.update(re.findall(r"\"(--[a-z0-9][a-z0-9-]*)\"", text))
        self.chapters = {}   # "NN" -> (dir name, [programs], main program)
        for d in sorted(glob.glob(os.path.join(root, "chapters", "[0-9][0-9]_*"))):
            name = os.path.basename(d)
            nn, stem = name[:2], name[3:]
            progs, main = [], None
            for c in sorted(glob.glob(os.path.join(d, "*.c"))):
                base = os.path.basename(c)[:-2]
                if base == "main":
                    main = "ch%s_%s" % (nn, stem)
                    progs.insert(0, main)
                elif re.search(r"\bint\s+main\s*\(", _read(c)):
                    progs.append("ch%s_%s" % (nn, base))
            if progs:
                self.chapters[nn] = (name, progs, main)
        mk = os.path.join(root, "Makefile")
        self.targets = set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", _read(mk), re.M)) if os.path.exists(mk) else set()

    def programs(self):
        return {p for _, progs, _ in self.chapters.values() for p in progs}

    def has(self, kind, arg):
        """(exists?, what was looked at) for one check item."""
        if kind == "flag":
            return arg in self.flags, "a \"%s\" literal in %s/" % (arg, "/, ".join(SOURCE_TOPS))
        if kind == "prog":
            return arg in self.programs(), "the programs chapters/ builds"
        if kind == "target":
            return arg in self.targets, "the Makefile's targets"
        if kind == "src":
            m = re.match(r"^(\S+)\s+/(.*)/$", arg)
            if not m:
                raise ValueError("src check %r: expected 'GLOB /REGEX/'" % arg)
            pat = re.compile(m.group(2), re.I)
            files = [p for p in self.sources if glob.fnmatch.fnmatch(p, m.group(1))]
            return any(pat.search(joined_literals(self.sources[p])) for p in files), \
                "%s (%d file(s))" % (m.group(1), len(files))
        raise ValueError("unknown check kind %r" % kind)


def joined_literals(src):
    """C source as its reader means it: adjacent string literals ("a" "b", across lines too) joined
    into one and each line break one space, so a check finds a message however the source wraps it."""
    src = re.sub(r'"[ \t]*(?:\n[ \t]*)?"', "", src)
    return re.sub(r"[ \t]*\n[ \t]*", " ", src)  # and a line break between arguments reads as one space


# ---- pages as blocks --------------------------------------------------------------------------
def blocks_of(path):
    """The prose of a markdown page as blocks: [(first line number, [(line number, text)], kind)],
    kind 'heading' (with its level), 'row' (a table row), 'item' (a list item with its
    continuation lines) or 'para'. Fenced code is left out."""
    out, cur, fence = [], None, False
    for n, line in enumerate(_read(path).split("\n"), 1):
        if FENCE.match(line):
            fence = not fence
            cur = None
            continue
        if fence or not line.strip():
            cur = None
            continue
        h = HEADING.match(line)
        if h:
            out.append((n, [(n, line)], ("heading", len(h.group(1)))))
            cur = None
        elif line.lstrip().startswith("|"):
            out.append((n, [(n, line)], ("row", 0)))
            cur = None
        elif ITEM.match(line) or cur is None:
            cur = (n, [(n, line)], ("item" if ITEM.match(line) else "para", 0))
            out.append(cur)
        else:
            cur[1].append((n, line))
    return out


def _text(lines):
    return re.sub(r"\s+", " ", " ".join(t.strip() for _, t in lines)).strip()


def claims_of(root, rel):
    """[(rel, line, text)] of one page: the blocks that say something is not there."""
    blocks = blocks_of(os.path.join(root, rel))
    out, section = [], None   # section: the level of an open "Not built" heading
    for first, lines, (kind, level) in blocks:
        if kind == "heading":
            if section is not None and level <= section:
                section = None
            if SECTION_RE.match(lines[0][1]):
                section = level
                continue
        if section is not None and kind != "heading":
            out.append((rel, first, _text(lines)))
            continue
        text = _text(lines)
        m = CLAIM_RE.search(text)
        if m:
            # the line of the first match: the first line that holds its start
            pos, line = 0, first
            for n, t in lines:
                pos += len(t.strip()) + 1
                if pos > m.start():
                    line = n
                    break
            out.append((rel, line, text))
    return out


def claim_pages(root):
    pages = sorted(glob.glob(os.path.join(root, "notes", "*.md")))
    top = os.path.join(root, "README.md")
    return [os.path.relpath(p, root) for p in pages + ([top] if os.path.exists(top) else [])]


def claims(root, tree=None):
    """[(rel, line, text, entry or None, [(check, ok, looked)])] for every claim of every page, and
    the messages of the check (see the module's docstring)."""
    tree = tree or Tree(root)
    found, bad, used = [], [], set()
    for rel in claim_pages(root):
        for rel_, line, text in claims_of(root, rel):
            entry = None
            for k, e in enumerate(CLAIMS):
                if e[0] == rel and re.search(e[1], text, re.I):
                    entry = e
                    used.add(k)
                    break
            results = []
            if entry is None:
                bad.append("%s:%d: a 'not built' claim that no entry of CLAIMS in "
                           "common/scripts/notes_claims.py covers (add one: what must not exist): %s"
                           % (rel, line, text[:120]))
            else:
                for check in entry[2]:
                    want, kind, arg = check.split(" ", 2)
                    exists, looked = tree.has(kind, arg)
                    ok = exists if want == "has" else not exists
                    results.append((check, ok, looked))
                    if not ok:
                        bad.append("%s:%d: %s — but %s %s %s (looked at %s): %s"
                                   % (rel, line, entry[3], kind, arg,
                                      "does not exist" if want == "has" else "exists", looked, text[:100]))
            found.append((rel, line, text, entry, results))
    pages = set(claim_pages(root)) if os.path.samefile(root, REPO_ROOT) else set()  # CLAIMS describes this repository
    for k, e in enumerate(CLAIMS):
        if k not in used and e[0] in pages:
            bad.append("%s: the CLAIMS entry /%s/ (%s) matches no sentence any more: update or drop it"
                       % (e[0], e[1], e[3]))
    return found, bad


def check_claims(root, tree=None):
    return claims(root, tree)[1]


# ---- the reading plan and README.md's chapter table --------------------------------------------
def section_lines(path, heading_prefix):
    """(line number, line) of the section whose '## ' heading starts with heading_prefix."""
    lines = _read(path).split("\n")
    out, inside = [], False
    for n, line in enumerate(lines, 1):
        if line.startswith("## "):
            if inside:
                break
            inside = line[3:].startswith(heading_prefix)
            continue
        if inside:
            out.append((n, line))
    return out


def table_rows(sec):
    """[(line number, [cells])] of the table rows of a section (header and rule rows left out)."""
    rows = [(n, [c.strip() for c in l.strip().strip("|").split("|")]) for n, l in sec if l.lstrip().startswith("|")]
    return [r for r in rows[2:]] if len(rows) >= 2 else []


def meetings_of(path):
    """['06a', '06b'] for a page with '## Meeting NNx' headings."""
    return re.findall(r"^## Meeting (\w+)\s*$", _read(path), re.M)


def names_program(text, nn, prog, main):
    """Whether text names program prog of chapter nn: `chNN_x`, or a make command with CH=NN (and
    PROG=x for a program other than the main one) on one line."""
    if re.search(r"\b%s\b" % re.escape(prog), text):
        return True
    short = prog[len("ch%s_" % nn):]
    for cmd in re.findall(r"`([^`]*)`", text):   # each code span: one command
        if re.search(r"\bCH=%s\b" % nn, cmd):
            p = re.search(r"\bPROG=(\w+)", cmd)
            if (p and p.group(1) == short) or (not p and prog == main):
                return True
    return False


def check_plan(root, tree=None):
    tree = tree or Tree(root)
    bad = []
    notes_readme = os.path.join(root, "notes", "README.md")
    readme = os.path.join(root, "README.md")
    for f in (notes_readme, readme):
        if not os.path.exists(f):
            return ["%s: missing (the reading plan and the chapter table are checked there)" % os.path.relpath(f, root)]
    plan = section_lines(notes_readme, "A reading plan")
    table = section_lines(readme, "Chapters")
    if not table_rows(plan):
        bad.append("notes/README.md: no table under '## A reading plan'")
    if not table_rows(table):
        bad.append("README.md: no table under '## Chapters'")
    plan_text = "\n".join(l for _, l in plan if l.lstrip().startswith("|"))
    table_text = "\n".join(l for _, l in table if l.lstrip().startswith("|"))
    plan_links = {os.path.normpath(os.path.join("notes", t)) for t in LINK.findall(plan_text) if not re.match(r"^[a-z]+:", t)}
    table_links = {os.path.normpath(t) for t in LINK.findall(table_text) if not re.match(r"^[a-z]+:", t)}
    pages = sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "notes", "*.md")))
    for page in pages:
        rel = "notes/" + page
        chapter = re.match(r"^(\d\d)-", page)
        if page in REFERENCE_PAGES:
            continue
        if not any(l.split("#")[0] == rel for l in plan_links):
            bad.append("notes/README.md: the reading plan has no week for %s" % rel)
        for m in meetings_of(os.path.join(root, rel)):
            if rel + "#meeting-" + m.lower() not in plan_links:
                bad.append("notes/README.md: the reading plan has no week for meeting %s (%s#meeting-%s)" % (m, rel, m.lower()))
        if chapter and not any(l.split("#")[0] == rel for l in table_links):
            bad.append("README.md: the chapter table has no row linking %s" % rel)
    for nn, (name, progs, main) in sorted(tree.chapters.items()):
        if not glob.glob(os.path.join(root, "notes", nn + "-*.md")):
            bad.append("chapters/%s: no chapter page notes/%s-*.md" % (name, nn))
        if main and not re.search(r"`%s`" % re.escape(main), table_text):
            bad.append("README.md: the chapter table does not name chapter %s's program `%s`" % (nn, main))
        if not re.search(r"\bCH=%s\b|\bch%s_" % (nn, nn), plan_text):
            bad.append("notes/README.md: the reading plan runs nothing of chapter %s (chapters/%s: `make run CH=%s` or build/bin/%s)"
                       % (nn, name, nn, progs[0]))
        every = _read(notes_readme)
        for p in progs:
            if p != main and not names_program(every, nn, p, main):
                bad.append("notes/README.md: chapter %s's program %s is named nowhere (the contents or the plan)" % (nn, p))
    return bad


# ---- reading times ----------------------------------------------------------------------------
SKIP_SECTION = re.compile(r"^(#{2,6})\s+(Exercises|Code map)\b")


def reading_words(text):
    """Words as wc -w counts them, without HTML comments and without the Exercises and Code map
    sections (each up to the next heading of its level or above)."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    kept, skip, fence = [], None, False
    for line in text.split("\n"):
        if FENCE.match(line):
            fence = not fence
        h = None if fence else re.match(r"^(#{1,6})\s", line)
        if h:
            if skip is not None and len(h.group(1)) <= skip:
                skip = None
            s = SKIP_SECTION.match(line)
            if s and skip is None:
                skip = len(s.group(1))
        if skip is None:
            kept.append(line)
    return len("\n".join(kept).split())


def target_words(root, target):
    """Words of 'page.md' (under notes/) or of one meeting 'page.md#meeting-07a': from its heading
    (from the page's start for the first meeting) to the next meeting's heading or the end."""
    file, _, anchor = target.partition("#")
    text = _read(os.path.join(root, "notes", file))
    if not anchor:
        return reading_words(text)
    heads = [(m.start(), "meeting-" + m.group(1).lower()) for m in re.finditer(r"^## Meeting (\w+)\s*$", text, re.M)]
    names = [h[1] for h in heads]
    if anchor not in names:
        raise KeyError(target)
    k = names.index(anchor)
    start = 0 if k == 0 else heads[k][0]
    end = heads[k + 1][0] if k + 1 < len(heads) else len(text)
    return reading_words(text[start:end])


def minutes(words):
    return words / PACE


def check_reading_times(root):
    bad = []
    notes_readme = os.path.join(root, "notes", "README.md")
    if not os.path.exists(notes_readme):
        return []
    plan = section_lines(notes_readme, "A reading plan")
    header = next(([c.strip().lower() for c in l.strip().strip("|").split("|")] for _, l in plan if l.lstrip().startswith("|")), None)
    if not header or "reading" not in header or "read" not in header:
        return ["notes/README.md: the reading plan's table needs a 'read' and a 'reading' column"]
    i_read, i_min = header.index("read"), header.index("reading")
    stated_plan = {}
    for n, cells in table_rows(plan):
        if len(cells) <= max(i_read, i_min):
            bad.append("notes/README.md:%d: a plan row with %d cells" % (n, len(cells)))
            continue
        read = re.split(r"\bskim\b", cells[i_read])[0]
        targets = [t for t in LINK.findall(read) if not re.match(r"^[a-z]+:", t) and t.split("#")[0].endswith(".md")]
        m = re.search(r"(\d+)\s*min", cells[i_min])
        if not targets:
            continue
        if not m:
            bad.append("notes/README.md:%d: week %s: no reading time ('N min') in the reading column" % (n, cells[0]))
            continue
        try:
            words = sum(target_words(root, t) for t in targets)
        except (KeyError, OSError) as e:
            bad.append("notes/README.md:%d: week %s: cannot count the words of %s" % (n, cells[0], e))
            continue
        stated = int(m.group(1))
        if abs(stated - minutes(words)) > TOLERANCE_MIN:
            bad.append("notes/README.md:%d: week %s states %d min of reading; %s: %d words = %.1f min at %d words a minute"
                       % (n, cells[0], stated, " + ".join(targets), words, minutes(words), PACE))
        if minutes(words) > BUDGET_MIN:
            bad.append("notes/README.md:%d: week %s: %s is %.1f min of reading, over the %d-minute budget of a week "
                       "(split it into meetings, or move detail to benchmarks.md)" % (n, cells[0], " + ".join(targets),
                                                                                   minutes(words), BUDGET_MIN))
        if len(targets) == 1:
            stated_plan[targets[0]] = (stated, n)
    for path in sorted(glob.glob(os.path.join(root, "notes", "[0-9][0-9]-*.md"))):
        page = os.path.basename(path)
        meetings = meetings_of(path)
        if not meetings:
            continue
        said = {}
        for where, n, line in ((page, n, l) for n, l in enumerate(_read(path).split("\n"), 1)):
            for m in re.finditer(r"\b(\d\d[a-z]) about (\d+)\b", line):
                said[m.group(1).lower()] = (int(m.group(2)), n)
        for meet in meetings:
            target = "%s#meeting-%s" % (page, meet.lower())
            words = target_words(root, target)
            if meet.lower() not in said:
                bad.append("notes/%s: no reading time for meeting %s ('%s about N minutes')" % (page, meet, meet))
                continue
            stated, n = said[meet.lower()]
            if abs(stated - minutes(words)) > TOLERANCE_MIN:
                bad.append("notes/%s:%d: meeting %s states %d minutes of reading; its %d words are %.1f min at %d words a minute"
                           % (page, n, meet, stated, words, minutes(words), PACE))
            if target in stated_plan and stated_plan[target][0] != stated:
                bad.append("notes/%s:%d: meeting %s states %d minutes, the reading plan (notes/README.md:%d) %d"
                           % (page, n, meet, stated, stated_plan[target][1], stated_plan[target][0]))
    return bad


def questions_in(text):
    """The questions a text asks: numbered items of its Questions sections (up to the next heading
    of their level or above, or an answers block), "(code)" ones not counted."""
    n, level, fence = 0, None, False
    for line in text.split("\n"):
        if FENCE.match(line):
            fence = not fence
            continue
        if fence:
            continue
        h = HEADING.match(line)
        if h:
            level = len(h.group(1)) if re.match(r"questions\b", h.group(2), re.I) else (
                None if level is None or len(h.group(1)) <= level else level)
            continue
        if "<details" in line:
            level = None
        if level is not None and re.match(r"^\d+\.\s+(?!\(code\))", line):
            n += 1
    return n


def target_text(root, target):
    """The text of 'page.md' or of one meeting 'page.md#meeting-07a' (as target_words counts)."""
    file, _, anchor = target.partition("#")
    text = _read(os.path.join(root, "notes", file))
    if not anchor:
        return text
    heads = [(m.start(), "meeting-" + m.group(1).lower()) for m in re.finditer(r"^## Meeting (\w+)\s*$", text, re.M)]
    names = [h[1] for h in heads]
    k = names.index(anchor)
    return text[0 if k == 0 else heads[k][0]:heads[k + 1][0] if k + 1 < len(heads) else len(text)]


def plan_weeks(root):
    """[(line, week, [page targets], [paper links])] of the reading plan's rows (the *read* cell
    before "skim")."""
    plan = section_lines(os.path.join(root, "notes", "README.md"), "A reading plan")
    header = next(([c.strip().lower() for c in l.strip().strip("|").split("|")] for _, l in plan
                   if l.lstrip().startswith("|")), None)
    if not header or "read" not in header:
        return []
    out = []
    for n, cells in table_rows(plan):
        read = re.split(r"\bskim\b", cells[header.index("read")])[0] if len(cells) > header.index("read") else ""
        links = LINK.findall(read)
        pages = [t for t in links if not re.match(r"^[a-z]+:", t) and t.split("#")[0].endswith(".md")]
        papers = [t for t in links if re.match(r"^[a-z]+:", t)]
        out.append((n, cells[0], pages, papers))
    return out


def check_pace(root):
    """At most MAX_PAPERS papers and MAX_QUESTIONS questions a week."""
    bad = []
    for n, week, pages, papers in plan_weeks(root):
        if len(set(papers)) > MAX_PAPERS:
            bad.append("notes/README.md:%d: week %s assigns %d papers (%s), more than %d" % (
                n, week, len(set(papers)), ", ".join(papers), MAX_PAPERS))
        try:
            q = sum(questions_in(target_text(root, t)) for t in pages)
        except (KeyError, ValueError, OSError):
            continue  # a target that does not exist: check_reading_times names it
        if q > MAX_QUESTIONS:
            bad.append("notes/README.md:%d: week %s: %s ask %d questions, more than %d (mark the full track's "
                       "\"(code)\", or move some to another week)" % (n, week, " + ".join(pages), q, MAX_QUESTIONS))
    return bad


def check_papers(root):
    """Every paper of the plan in the reading list of each page of READING_LISTS."""
    bad = []
    assigned = {}
    for n, week, _, papers in plan_weeks(root):
        for link in papers:
            assigned.setdefault(link, (n, week))
    if not assigned:
        return []
    for rel in READING_LISTS:
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            continue
        listed = "\n".join(l for _, l in section_lines(path, "Reading list"))
        if not listed.strip():
            bad.append("%s: no '## Reading list' section (it lists every paper the plan assigns)" % rel)
            continue
        for link, (n, week) in sorted(assigned.items(), key=lambda kv: kv[1][0]):
            arxiv = re.search(r"arxiv\.org/abs/([\d.]+)", link)
            if link not in listed and not (arxiv and arxiv.group(1) in listed):
                bad.append("%s: its reading list lacks %s, which the plan assigns in week %s (notes/README.md:%d)"
                           % (rel, link, week, n))
    return bad


def check_all(root):
    """Every message of the checks."""
    tree = Tree(root)
    return check_plan(root, tree) + check_reading_times(root) + check_pace(root) + check_papers(root) + \
        check_claims(root, tree)


def report(root, out, verbose=False):
    """check_notes.py's part: list every claim (one line each; verbose: with each check), print
    every problem of the three checks, and a summary line; return the number of problems."""
    tree = Tree(root)
    found, bad = claims(root, tree)
    print("'not built' claims (%d; the entries: CLAIMS in common/scripts/notes_claims.py):" % len(found), file=out)
    for rel, line, text, entry, results in found:
        if entry is None:
            status, why = "NO ENTRY", text[:80]
        else:
            status = "--" if not results else "ok" if all(r[1] for r in results) else "FAIL"
            why = entry[3]
        print("  %-8s %s:%d: %s" % (status, rel, line, why), file=out)
        if verbose:
            print("           %s" % (text[:100] + ("..." if len(text) > 100 else "")), file=out)
            for check, ok, looked in results:
                print("           %-4s %s (%s)" % ("ok" if ok else "FAIL", check, looked), file=out)
    problems = check_plan(root, tree) + check_reading_times(root) + check_pace(root) + check_papers(root) + bad
    for b in problems:
        print(b, file=out)
    print("check_notes: the reading plan, README.md's chapter table, the reading times at %d words a "
          "minute and %d 'not built' claim(s): %d problem(s)" % (PACE, len(found), len(problems)), file=out)
    return len(problems)


if __name__ == "__main__":
    import argparse
    import sys
    ap = argparse.ArgumentParser(description="the notes' checks that run no program (see the module's docstring)")
    ap.add_argument("--root", default=REPO_ROOT, help="the repository (default: this script's; another tree: "
                    "its pages against CLAIMS, without the check for entries that match nothing)")
    a = ap.parse_args()
    sys.exit(1 if report(a.root, sys.stdout, verbose=True) else 0)
