#!/usr/bin/env python3
"""check_layers.py — common/'s layers stay layers (make test runs it: suite common_layers).

common/ is a stack of folders, lowest first, named by the Makefile's LAYERS line
(base device comm model train). The rules, each one checked here:

  1. every source file of common/ lives in a layer folder (scripts/ and tools/ hold programs,
     explorer/ the browser page, built by emcc (and natively for make build's check, outside
     libzl): nothing of libzl includes it);
  2. every layer folder has a README.md saying what it owns and what it may include;
  3. a file includes headers of its own layer or of a lower one, never of a higher one, and
     never a solutions/ header -- except the one edge the design has on purpose: comm runs the
     chapter-01 exercises' collectives, the rings of solutions/ring.c and the pairwise all-to-all of
     solutions/alltoall.c, and train places chapter 14's snapshot copies by the exercise's
     solutions/ckpt_buddy.c (ALLOWED below);
  4. no include cycle among modules: a module is a file's stem up to its first underscore
     (loop.c, loop_ops.c and loop_internal.h are one module, "loop"), and the graph of
     "a file of module A includes a header of module B" has no cycle;
  5. every host wait of the CUDA path goes through one watchdog: a blocking CUDA wait
     (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a synchronous
     cudaMemcpy) appears in the code (comments aside) of common/ only inside devcu_wait_stream
     (common/device/device_cuda.cu), which polls an event and ends the job past --timeout-s.

  6. no mutable file-scope static in solutions/ or common/train/ (the parallelism and the trainer):
     state lives in the structs a run owns (t->priv, t->transform_priv, a model's ctx), so two
     trainers in one process share nothing and a reader sees every input of a function;
     `static const` tables and static functions are fine.

  7. no line of C or CUDA longer than 110 bytes in chapters/, common/, exercises/, solutions/ or
     tests/: a reader's window, and a diff's, side by side (bytes, as awk and many editors count: a
     '·' or a '−' of UTF-8 is two or three, so a line of them is wrapped earlier than its columns).

  8. no file of solutions/ (the parallelism a student reads) over 400 lines: one lesson per file —
     a file that grows past it is split by lesson.

  python3 common/scripts/check_layers.py [--root DIR]     exit 0 clean, 1 with one line per problem
"""
import argparse
import os
import re
import sys

SRC = re.compile(r"\.(c|h|cu|cuh)$")
# rule 5: the blocking CUDA waits, and the one function allowed to make them
BLOCKING = re.compile(r"\b(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy)\s*\(")
WAIT_HOME = ("common/device/device_cuda.cu", "devcu_wait_stream")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# (layer, header of solutions/) pairs common/ may include; see rule 3
ALLOWED = {("comm", "ring.h"), ("comm", "alltoall.h"), ("train", "ckpt_buddy.h")}


def layers_of(root):
    """The LAYERS line of the Makefile, lowest first."""
    with open(os.path.join(root, "Makefile")) as f:
        m = re.search(r"^LAYERS\s*:=\s*(.+)$", f.read(), re.M)
    if not m:
        sys.exit("check_layers: no `LAYERS := ...` line in %s/Makefile" % root)
    return m.group(1).split()


def strip_comments(src):
    """The code of a C/CUDA source without its comments (string literals kept), line breaks kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif src[i] == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


def blocking_waits(rel, src):
    """Rule 5's problems in one file: each blocking CUDA wait outside devcu_wait_stream."""
    code, problems = strip_comments(src), []
    home = re.search(r"\bvoid\s+%s\s*\([^)]*\)\s*\{" % WAIT_HOME[1], code) if rel == WAIT_HOME[0] else None
    lo = hi = -1
    if home:  # the function's body: to its matching brace
        depth, k = 0, home.end() - 1
        for k in range(home.end() - 1, len(code)):
            depth += {"{": 1, "}": -1}.get(code[k], 0)
            if depth == 0:
                break
        lo, hi = home.start(), k
    for m in BLOCKING.finditer(code):
        if lo <= m.start() <= hi:
            continue
        line = code.count("\n", 0, m.start()) + 1
        problems.append("%s:%d: %s blocks the host with no deadline: wait through devcu_wait_stream (%s), "
                        "whose watchdog ends the job past --timeout-s" % (rel, line, m.group(1), WAIT_HOME[0]))
    return problems


# rule 7: the longest line (bytes), and where
WIDTH = 110
WIDE_WHERE = ("chapters", "common", "exercises", "solutions", "tests")


def wide_lines(root):
    """Rule 7's problems: each C/CUDA line over WIDTH characters."""
    problems = []
    for top in WIDE_WHERE:
        for dirpath, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(names):
                if not SRC.search(name):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, "rb") as f:
                    for n, line in enumerate(f, 1):
                        width = len(line.rstrip(b"\n"))
                        if width > WIDTH:
                            problems.append("%s:%d: %d bytes, over %d (wrap it)" % (rel, n, width, WIDTH))
    return problems


# rule 8: one lesson per file of solutions/
MAX_LINES = 400


def long_files(root):
    """Rule 8's problems: each file of solutions/ over MAX_LINES lines."""
    problems, top = [], os.path.join(root, "solutions")
    for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        if SRC.search(name):
            with open(os.path.join(top, name), "rb") as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                problems.append("solutions/%s: %d lines, over %d (one lesson per file: split it by lesson)"
                                % (name, n, MAX_LINES))
    return problems


# rule 6: where a file-scope static must be const (or a function)
NO_STATE = ("solutions", "common/train")
STATIC = re.compile(r"\bstatic\b")


def file_statics(rel, src):
    """Rule 6's problems in one file: each file-scope `static` object that is not const."""
    code, problems, depth, i = strip_comments(src), [], 0, 0
    while i < len(code):
        ch = code[i]
        if ch == '"':  # a string literal (strip_comments kept them)
            j = i + 1
            while j < len(code) and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            i = j + 1
            continue
        if ch in "{}":
            depth += 1 if ch == "{" else -1
        elif depth == 0 and STATIC.match(code, i) and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            end = len(code)
            for stop in ";{=":
                k = code.find(stop, i)
                if 0 <= k < end:
                    end = k
            decl = code[i:end]
            paren = decl.find("(")
            function = paren >= 0 and not decl[paren + 1:].lstrip().startswith("*")
            if not function and not re.match(r"static\s+(inline\s+)?const\b", decl):
                line = code.count("\n", 0, i) + 1
                problems.append("%s:%d: a mutable file-scope static (%s): keep the state in a struct the run owns "
                                "(t->priv, t->transform_priv, the model's ctx)" % (rel, line, " ".join(decl.split())))
        i += 1
    return problems


def module(name):
    return os.path.basename(name).split(".")[0].split("_")[0]


def find_cycle(graph):
    """One cycle of graph (dict node -> set of nodes) as a list [a, b, ..., a], or None."""
    colour, parent = {}, {}
    for start in sorted(graph):
        if start in colour:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        colour[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
            elif colour.get(nxt) == 1:  # back edge: the cycle is nxt ... node, nxt
                path = [node]
                while path[-1] != nxt:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [nxt]
            elif nxt not in colour:
                colour[nxt], parent[nxt] = 1, node
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return None


def check(root):
    problems = []
    layers = layers_of(root)
    rank = {name: i for i, name in enumerate(layers)}
    common = os.path.join(root, "common")
    for entry in sorted(os.listdir(common)):
        path = os.path.join(common, entry)
        if os.path.isfile(path) and SRC.search(entry):
            problems.append("common/%s: a source file outside the layer folders (%s)" % (entry, " ".join(layers)))
        elif os.path.isdir(path) and entry not in rank and entry not in ("scripts", "tools", "explorer"):
            problems.append("common/%s/: a folder that is not a layer (Makefile LAYERS: %s)" % (entry, " ".join(layers)))
    where = {}  # header basename -> layer
    files = []  # (layer, path relative to root)
    for layer in layers:
        folder = os.path.join(common, layer)
        if not os.path.isdir(folder):
            problems.append("common/%s/: missing (a layer in the Makefile's LAYERS)" % layer)
            continue
        readme = os.path.join(folder, "README.md")
        if not os.path.isfile(readme) or "May include" not in open(readme).read():
            problems.append("common/%s/README.md: missing, or without its `May include` line" % layer)
        for name in sorted(os.listdir(folder)):
            if SRC.search(name):
                if name in where:
                    problems.append("common/%s/%s: the same name as common/%s/%s" % (layer, name, where[name], name))
                where[name] = layer
                files.append((layer, "common/%s/%s" % (layer, name)))
    solutions = set(n for n in os.listdir(os.path.join(root, "solutions")) if n.endswith(".h")) \
        if os.path.isdir(os.path.join(root, "solutions")) else set()
    graph, n_inc = {}, 0
    for layer, rel in files:
        src = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        problems += blocking_waits(rel, src)
        mod = "%s/%s" % (layer, module(rel))
        graph.setdefault(mod, set())
        for inc in INCLUDE.findall(src):
            n_inc += 1
            base = os.path.basename(inc)
            if inc != base:
                problems.append("%s: includes \"%s\": a path; common/'s headers are found by name (-Icommon/LAYER)" % (rel, inc))
            if base in where:
                other = where[base]
                if rank[other] > rank[layer]:
                    problems.append("%s: includes %s of layer %s, above %s (allowed: %s)"
                                    % (rel, base, other, layer, " ".join(layers[: rank[layer] + 1])))
                target = "%s/%s" % (other, module(base))
                if target != mod:
                    graph[mod].add(target)
            elif base in solutions:
                if (layer, base) not in ALLOWED:
                    problems.append("%s: includes solutions/%s (common/ builds on no solution but comm's ring)" % (rel, base))
            else:
                problems.append("%s: includes \"%s\", which is no header of common/'s layers" % (rel, inc))
    for folder in NO_STATE:
        top = os.path.join(root, folder)
        for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
            if SRC.search(name):
                rel = "%s/%s" % (folder, name)
                problems += file_statics(rel, open(os.path.join(root, rel), encoding="utf-8", errors="replace").read())
    problems += wide_lines(root)
    problems += long_files(root)
    cycle = find_cycle(graph)
    if cycle:
        problems.append("include cycle among modules: %s" % " -> ".join(cycle))
    return problems, len(files), n_inc, len(graph)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=".", help="the repository (default: .)")
    args = ap.parse_args()
    problems, n_files, n_inc, n_mod = check(args.root)
    for p in problems:
        print(p)
    print("layers: %s; %d files, %d modules, %d includes, %d problem(s)"
          % (" < ".join(layers_of(args.root)), n_files, n_mod, n_inc, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
