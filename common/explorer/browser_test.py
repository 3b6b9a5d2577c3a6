#!/usr/bin/env python3
"""browser_test.py — the explorer page in a real browser against the native programs (make test-long,
suite explorer_long; common/explorer/README.md).

Headless Chromium loads PAGE (results/explorer/index.html, from disk) with a list of random
configurations in its address (#test=...): the page sets its sliders for each in turn and writes
back what it shows. Then, for every configuration:
  memory       the native BIN/ch00_memory runs the page's flags: its printout must equal the page's
               text to the byte, its exit code and refusal line the page's, and every byte count of
               its --json the page's number (bitwise: the same double);
  schedules    solutions/pipeline_sim.c (and the pure files it links: the schedules, the checker, the
               groups) compiled natively here (cc -shared) runs pp_simulate for
               the same P, M, v, F, B, W and c: its bubble must equal the page's (bitwise), and the
               cases it refuses the page must refuse;
  collectives  ring.c's and alltoall.c's outputs on the page (reduce-scatter, all-gather, all-reduce,
               broadcast, reduce, all-to-all) must be what chapter 01's inputs give, every rank's bytes
               the ring model's; where the page runs chapter 01's own case, bitwise what
               ch01_collectives --impl ring prints on as many MPI ranks (zlrun), the all-reduce's
               state after its reduce-scatter included (rank r: ch01's reduce-scatter output);
  compress     chapter 13's table (the memory panel's last fold) at one small configuration
               (COMPRESS_CFG): every method's bytes per rank per step and across nodes = the formula
               ch13_compress and ch05_zero3 print in their --json for the same GPT on 4 ranks, 2 nodes.
A failure names the configuration, the flag line, what the page showed and what the program said.
--shots DIR also saves a 1280x720 screenshot of each panel on notes/tour.md's lecture path
(DIR/explorer_{memory,schedules,collectives}.png; where ch00_memory has --experts: explorer_memory_preset.png,
DeepSeek-V3's experts; where it has --pp: explorer_memory_pp.png and explorer_memory_cp.png, the pipeline and
CP + offload).

  python3 common/explorer/browser_test.py --page results/explorer/index.html --bin build/bin
      [--n 50] [--seed 41] [--shots notes/figures] [--chromium chromium]
Exit 0 when everything matches, 1 with one line per mismatch.
"""
import argparse
import ctypes
import html
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse

# the page's slider lengths (explorer.js, V): index ranges
LEN = {"m-psi": 13, "m-ranks": 12, "m-stage": 5, "m-k": 6, "m-layers": 10, "m-hidden": 9, "m-heads": 8, "m-seq": 9,
       "m-micro": 7, "m-tp": 5, "m-vocab": 4}
SCHED_OK = {0, 1, 2, 3, 4, 5}
# pp_simulate (pipeline_sim.c) and what it links: the schedules, the checker (its lists' rules), the groups
PIPELINE_PURE_C = ["pipeline_sched.c", "pipeline_sim.c", "pipeline_check.c", "pipeline_check_stage.c",
                   "pipeline_groups.c"]


MOE_LEN = {"m-experts": 7, "m-topk": 4, "m-moe": 3, "m-ep": 7}  # where ch00_memory has chapter 12's flags
GRID_LEN = {"m-pp": 5, "m-cp": 5}  # where ch00_memory has chapters 07 and 10's flags (and 08's --offload)


def memory_configs(rng, n, moe, grid, muon_ok=False, block_ok=False):
    out = []
    for _ in range(n):
        c = {k: rng.randrange(v) for k, v in LEN.items()}
        if moe:
            c.update({k: rng.randrange(v) for k, v in MOE_LEN.items()})
            if rng.random() < 0.5:
                c["m-experts"] = 0
        if grid:  # mostly one of P, C at a time, without TP and experts (what ch00 computes); the rest refused alike
            c.update({k: rng.randrange(v) for k, v in GRID_LEN.items()})
            r = rng.random()
            if r < 0.35:
                c["m-cp"], c["m-tp"], c["m-experts"] = 0, 0, 0
            elif r < 0.7:
                c["m-pp"], c["m-tp"], c["m-experts"] = 0, 0, 0
            elif r < 0.9:
                c["m-pp"], c["m-cp"] = 0, 0
            if r < 0.7 and rng.random() < 0.8:  # a transformer on 16..1024 ranks: P and C divide them
                c["grid"] = True
            if c["m-pp"] and rng.random() < 0.8:  # P <= L + 2 mostly: 6 layers and up
                c["m-layers"] = max(c["m-layers"], 2)
            c["m-offload"] = rng.random() < (0.05 if c["m-pp"] else 0.3)  # with --pp: refused
            if c["m-offload"] and rng.random() < 0.7:
                c["m-stage"] = rng.choice([2, 4])  # ZeRO-2 or all: offload's
        c["m-kind"] = "gpt" if c.pop("grid", False) else rng.choice(["psi", "gpt"])
        muon = muon_ok and rng.random() < 0.25  # issue 52: --optimizer muon, fp32, what it composes with mostly
        if muon_ok:  # before the precision: choosing Muon on the page picks fp32
            c["m-optimizer"] = "adamw"
        if c["m-kind"] == "gpt" and (c.get("m-pp") or c.get("m-cp")):
            c["m-ranks"] = max(c["m-ranks"], 5)  # 16 and up
        c["m-precision"] = rng.choice(["bf16", "bf16", "fp32"])
        c["m-fp32grads"] = rng.random() < (0.3 if c["m-precision"] == "bf16" else 0.05)  # fp32: refused
        c["m-acts"] = rng.choice(["all", "selective", "full"])
        if muon:
            c.update({"m-optimizer": "muon", "m-precision": "fp32", "m-fp32grads": False})
            if rng.random() < 0.85:
                c.update({"m-k": 0, "m-tp": 0, "m-pp": 0, "m-cp": 0, "m-experts": 0, "m-offload": False})
        if c["m-kind"] == "gpt" and rng.random() < 0.8:  # most shapes valid: heads divide hidden
            c["m-heads"] = rng.choice([0, 1, 2, 3, 4])  # 1, 2, 4, 12, 16
            c["m-hidden"] = rng.choice([3, 4, 5, 6, 8]) if c["m-heads"] <= 4 else c["m-hidden"]
            c["m-tp"] = min(c["m-tp"], [0, 1, 2, 2, 4][c["m-heads"]])  # t divides the heads
        if block_ok:  # a real model's block (memcalc_shape.c) now and then; K, F where the block is Llama's
            c.update({"m-block": "llama" if rng.random() < 0.25 else "gpt", "m-tied": rng.random() < 0.15,
                      "m-kv": rng.choice([0, 1, 2, 4]), "m-ffn": rng.choice([0, 0, 256, 1024, 5000])})
        out.append(c)
    return out


def schedule_configs(rng, n):
    out = []
    for _ in range(n):
        sched = rng.choice([1, 2, 3, 4, 5, 0])
        P = rng.randint(1, 16)
        M = rng.randint(1, 32)
        if sched == 3 and rng.random() < 0.8:  # interleaved: mostly M a multiple of P
            M = P * rng.randint(1, max(1, 32 // P))
        out.append({"s-sched": sched, "s-P": P, "s-M": M, "s-v": rng.randint(1, 4), "s-f": rng.randint(1, 30),
                    "s-b": rng.randint(1, 30), "s-w": rng.randint(0, 30), "s-c": rng.choice([0, 0, rng.randint(0, 10)])})
    return out


COLL_OPS = ["reduce_scatter", "all_gather", "all_reduce", "broadcast", "reduce", "all_to_all"]  # ch01's --op


def collective_configs(rng, n):
    """Chapter 01's three-rank reduce-scatter first; the all-reduce at 3 ranks after its reduce-scatter
    (step N-1) and at its end; every collective at N = 8 with chapter 01's chunk (2, the all-to-all's 1);
    then random ones."""
    out = [{"c-op": 0, "c-N": 3, "c-per": 2, "c-step": 2},
           {"c-op": 2, "c-N": 3, "c-per": 2, "c-step": 2}, {"c-op": 2, "c-N": 3, "c-per": 2, "c-step": 4}]
    for op in range(6):
        out.append({"c-op": op, "c-N": 8, "c-per": 1 if op == 5 else 2, "c-step": 14 if op == 2 else 7})
    out.append({"c-op": 2, "c-N": 8, "c-per": 2, "c-step": 7})
    for _ in range(n):
        N, op = rng.randint(2, 8), rng.randint(0, 5)
        out.append({"c-op": op, "c-N": N, "c-per": rng.randint(1, 4), "c-step": 2 * (N - 1) if op == 2 else N - 1})
    return out


def chromium_dom(chromium, url, budget_ms=20000):
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
           "--virtual-time-budget=%d" % budget_ms, "--dump-dom", url]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    return r.stdout.decode("utf-8", "replace")


def chromium_shot(chromium, url, path, size="1280,720"):  # a projector's view
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=" + size,
           "--virtual-time-budget=5000", "--screenshot=" + path, url]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return os.path.isfile(path)


class Sim:
    """pp_simulate of solutions/pipeline_sim.c, compiled natively with the files it links (plain C)."""

    class Cost(ctypes.Structure):
        _fields_ = [("f", ctypes.c_double), ("b", ctypes.c_double), ("w", ctypes.c_double)]

    class Out(ctypes.Structure):
        _fields_ = [(k, ctypes.c_double) for k in ("makespan", "span", "busy", "bubble", "bubble_makespan")]

    def __init__(self, srcs):
        self.dir = tempfile.mkdtemp(prefix="zl_explorer_sim.")
        so = os.path.join(self.dir, "pp.so")
        subprocess.run(["cc", "-std=c11", "-O2", "-shared", "-fPIC"] + srcs + ["-o", so], check=True)
        self.lib = ctypes.CDLL(so)
        self.lib.pp_simulate.argtypes = [ctypes.c_int] * 4 + [ctypes.POINTER(Sim.Cost), ctypes.c_double,
                                                              ctypes.POINTER(Sim.Out)]

    def run(self, sched, P, M, v, f, b, w, c):
        cost = (Sim.Cost * P)(*[Sim.Cost(f, b, w) for _ in range(P)])
        out = Sim.Out()
        rc = self.lib.pp_simulate(sched, P, M, v if sched == 3 else 1, cost, c, ctypes.byref(out))
        return rc, out.bubble


def native_value(j, key):
    parts = key.split(".")
    if parts[0] == "stages":
        for s in j["stages"]:
            if s["stage"] == int(parts[1]):
                return s[parts[2]]
        return None
    v = j  # obj.key, or obj.list.index.key (pp.per_stage.0.acts)
    for p in parts:
        if isinstance(v, list) and p.isdigit() and int(p) < len(v):
            v = v[int(p)]
        elif isinstance(v, dict) and p in v:
            v = v[p]
        else:
            return None
    return v


PRESET_OK = []  # the presets whose every number equalled ch00_memory's
SEQ_OK = [0, 0]  # the chart vs s: points equal to ch00_memory --json, flag lines run
FLAG_OK = {}  # flag -> configurations with it whose every number equalled the program's


def check_memory(res, binary, problems):
    n_ok = n_refused = n_numbers = 0
    tmp = tempfile.mkdtemp(prefix="zl_explorer_ch00.")
    for i, r in enumerate(res):
        path = os.path.join(tmp, "m%d.json" % i)
        argv = [binary] + r["flags"].split() + ["--json", path]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        out, err = p.stdout.decode(), p.stderr.decode().strip()
        where = "memory %d (ch00_memory %s)" % (i, r["flags"])
        if p.returncode != r["rc"]:
            problems.append("%s: the page's exit code %s, the program's %d (%s)" % (where, r["rc"], p.returncode, err))
            continue
        if p.returncode != 0:
            want = err + " (exit %d)" % p.returncode
            if r["err"] != want:
                problems.append("%s: the page says %r, the program %r" % (where, r["err"], want))
            else:
                n_refused += 1
                if os.environ.get("ZL_EXPLORER_VERBOSE"):
                    print("refused alike: ch00_memory %s: %s" % (r["flags"], want))
            continue
        if r["text"] != out:
            a, b = r["text"].splitlines(), out.splitlines()
            k = next((x for x in range(min(len(a), len(b))) if a[x] != b[x]), min(len(a), len(b)))
            problems.append("%s: the page's text differs from the printout at line %d: page %r, program %r"
                            % (where, k + 1, a[k] if k < len(a) else None, b[k] if k < len(b) else None))
            continue
        with open(path) as f:
            j = json.load(f)
        bad = 0
        for key, v in r["numbers"].items():
            want = native_value(j, key)
            if want is None or float(v) != float(want):
                problems.append("%s: %s on the page %s, in the program's --json %r" % (where, key, v, want))
                bad += 1
        n_numbers += len(r["numbers"])
        if not r["numbers"]:
            problems.append("%s: no number read back from the page" % where)
        elif not bad:
            n_ok += 1
            if r["cfg"].get("m-preset"):
                PRESET_OK.append(r["cfg"]["m-preset"] + (" (Muon)" if "--optimizer" in r["flags"] else ""))
            for flag in ("--pp", "--cp", "--offload", "--experts", "--tp", "--optimizer", "--kv-heads", "--tied-head"):  # what the equal ones exercised
                if flag in r["flags"].split():
                    FLAG_OK[flag] = FLAG_OK.get(flag, 0) + 1
        check_seq(r, binary, tmp, where, problems)
    shutil.rmtree(tmp, ignore_errors=True)
    return n_ok, n_refused, n_numbers


def check_seq(r, binary, tmp, where, problems):
    """The memory panel's chart vs s: at its first, middle and last s, every point = ch00_memory --json."""
    lines = []
    for pt in r.get("seq", []):
        if pt["flags"] not in lines:
            lines.append(pt["flags"])
    for flags in {lines[0], lines[len(lines) // 2], lines[-1]} if lines else ():
        path = os.path.join(tmp, "seq.json")
        p = subprocess.run([binary] + flags.split() + ["--json", path], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=30)
        if p.returncode != 0:
            problems.append("%s: the chart vs s drew ch00_memory %s, which says %r" % (where, flags, p.stderr.decode()))
            continue
        with open(path) as f:
            j = json.load(f)
        SEQ_OK[1] += 1
        for pt in (q for q in r["seq"] if q["flags"] == flags):
            want = native_value(j, pt["key"])
            if want is None or float(pt["v"]) != float(want):
                problems.append("%s: the chart vs s at ch00_memory %s: %s %s, its --json %r"
                                % (where, flags, pt["key"], pt["v"], want))
            else:
                SEQ_OK[0] += 1


def check_schedules(res, sim, problems):
    n_ok = n_refused = 0
    for i, r in enumerate(res):
        c = r["cfg"]
        f, b, w, cc = c["s-f"] / 10, c["s-b"] / 10, c["s-w"] / 10, c["s-c"] / 10
        rc, bubble = sim.run(c["s-sched"], c["s-P"], c["s-M"], c["s-v"], f, b, w, cc)
        where = "schedule %d (sched %d P %d M %d v %d F %g B %g W %g c %g)" % (i, c["s-sched"], c["s-P"], c["s-M"], c["s-v"], f, b, w, cc)
        if (rc != 0) != (r["rc"] != 0):
            problems.append("%s: the page's simulator returned %s, pp_simulate %d" % (where, r["rc"], rc))
        elif rc != 0:
            n_refused += 1
        elif r["bubble"] is None or float(r["bubble"]) != bubble:
            problems.append("%s: bubble on the page %s, pp_simulate %r" % (where, r["bubble"], bubble))
        else:
            n_ok += 1
    return n_ok, n_refused


def coll_expected(op, N, per, rank):
    """What rank `rank` ends with, from chapter 01's inputs (explorer.c, input()), and the bytes it sends in
    all by the ring model (the pairwise all-to-all: every block but its own; the chains: the whole buffer
    from every rank but the chain's last)."""
    def rs(j, e):  # chunk j summed over the ranks
        return float(sum(((q + 1) * (e + 1)) ** (j + 1) for q in range(N)))
    n = 4 if op in (3, 4) else N * per
    part = (n - (n // N + (1 if rank < n % N else 0))) * 4
    if op == 0:
        return [rs(rank, e) for e in range(per)], part
    if op == 1:
        return [float(10 * q + e + 1) for q in range(N) for e in range(per)], part
    if op == 2:
        return [rs(j, e) for j in range(N) for e in range(per)], 2 * part
    if op == 3:
        return [1.0, 2.0, 3.0, 4.0], 0 if rank == N - 1 else 16
    if op == 4:
        return ([float(N * (N + 1) // 2 * (i + 1)) for i in range(4)] if rank == 0 else []), 0 if rank == 0 else 16
    return [float(10 * (q + 1) + rank + 100 * e) for q in range(N) for e in range(per)], part


def f32(x):
    """The float that ch01's %.9g names (nine digits tell every float apart): its bits, bitwise comparable."""
    return struct.unpack("f", struct.pack("f", float(x)))[0]


NATIVE_COLL = {}  # (op, N) -> {rank: values}: ch01_collectives --impl ring's "After" lines


def ch01_after(binary, op, N):
    """Run chapter 01's program on N ranks (zlrun, --impl ring: solutions/ring.c and alltoall.c as MPI
    processes) and read each rank's buffer after the call."""
    if (op, N) not in NATIVE_COLL:
        p = subprocess.run(["bash", "common/scripts/zlrun", str(N), binary, "--op", COLL_OPS[op], "--impl", "ring"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        got = {}
        for m in re.finditer(r"^After \w+ on rank (\d+): (.*)$", p.stdout.decode(), re.M):
            got[int(m.group(1))] = json.loads(m.group(2)) if m.group(2).startswith("[") else []
        NATIVE_COLL[(op, N)] = got
    return NATIVE_COLL[(op, N)]


def check_collectives(res, problems, ch01=None):
    """The page's outputs against chapter 01's inputs summed and moved as each collective says (a
    tolerance for the float sums), every rank's bytes against the ring model; where the page runs
    chapter 01's own case (2 elements per chunk; the all-to-all's 1; broadcast and reduce always),
    bitwise against ch01_collectives --impl ring on as many MPI ranks. The all-reduce: after its
    reduce-scatter (step N-1) rank r holds chunk r = ch01's reduce-scatter output on rank r, and at
    its end every rank holds them all, in order: reduce-scatter + all-gather, end to end."""
    n_ok = n_native = 0
    for i, r in enumerate(res):
        c, nums = r["cfg"], r["numbers"]
        op, N, per, step = c["c-op"], c["c-N"], c["c-per"], c["c-step"]
        where = "collective %d (%s, N %d, %d per chunk, step %d)" % (i, COLL_OPS[op], N, per, step)
        final = step == (2 * (N - 1) if op == 2 else N - 1)
        native = None
        if ch01 and (op in (3, 4) or (op == 5 and per == 1) or (op != 5 and per == 2)):
            native = ch01_after(ch01, 0 if op == 2 else op, N)
        bad = 0
        for rank in range(N):
            want, sent = coll_expected(op, N, per, rank)
            tol = [(2 * N - 1) * 2.0 ** -24 * x if op in (0, 2, 4) else 0 for x in want]
            if final:
                got = json.loads(nums.get("out.%d" % rank, "null") or "null")
            else:  # the all-reduce after its reduce-scatter: the piece rank r holds
                piece = json.loads(nums.get("after.%d" % rank, "null") or "null")
                got = piece["v"] if piece and piece["lo"] == rank * per else None
                want, tol = want[rank * per:(rank + 1) * per], tol[rank * per:(rank + 1) * per]
            if got is None or len(got) != len(want) or any(abs(g - x) > t for g, x, t in zip(got, want, tol)):
                problems.append("%s: rank %d's buffer on the page %s, expected %s (bound %s)" % (where, rank, got, want, tol))
                bad += 1
            elif native is not None:
                nat = native.get(rank)
                if op == 2 and final:
                    nat = [x for q in range(N) for x in native.get(q, [])]
                if nat is None or [f32(x) for x in nat] != [float(x) for x in got]:
                    problems.append("%s: rank %d on the page %s, ch01_collectives --impl ring %s" % (where, rank, got, nat))
                    bad += 1
            if float(nums.get("sent.%d" % rank, "nan")) != sent:
                problems.append("%s: rank %d sent %s bytes on the page, the ring model %d" % (where, rank, nums.get("sent.%d" % rank), sent))
                bad += 1
        n_ok += bad == 0
        n_native += bad == 0 and native is not None
    return n_ok, n_native


# the projector's view: each panel's main picture inside 1280x720, text >= 16 px, contrast >= 4.5:1 (WCAG AA)
LAYOUT = [{"panel": "memory", "cfg": {}},
          {"panel": "memory", "cfg": {"m-kind": "gpt", "m-layers": 4, "m-hidden": 4, "m-heads": 4, "m-tp": 2}},
          {"panel": "schedules", "cfg": {"s-sched": 4, "s-P": 4, "s-M": 8}},
          {"panel": "collectives", "cfg": {"c-op": 0, "c-N": 3, "c-per": 2, "c-step": 1}},
          {"panel": "collectives", "cfg": {"c-op": 2, "c-N": 8, "c-per": 2, "c-step": 9}},
          {"panel": "collectives", "cfg": {"c-op": 5, "c-N": 8, "c-per": 1, "c-step": 3}},
          {"panel": "memory", "cfg": {"m-preset": "dsv3", "m-ranks": 7}},
          {"panel": "memory", "cfg": {"m-optimizer": "muon", "m-preset": "gpt3", "m-ranks": 9}}]


def check_layout(chromium, page, problems):
    """The page at 1280x720 measures itself (explorer.js, measureLayout); then the shared clock: at P = 4,
    M = 8 (F = B = W = 1) ZB-H1's bar is drawn shorter than 1F1B's, by their steps' ratio 27/33."""
    tests = {"schedules": [{"s-sched": 2, "s-P": 4, "s-M": 8, "s-f": 10, "s-b": 10, "s-w": 10, "s-c": 0}],
             "layout": LAYOUT}
    url = "file://" + page + "#test=" + urllib.parse.quote(json.dumps(tests, separators=(",", ":")))
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,720",
           "--virtual-time-budget=20000", "--dump-dom", url]
    for _ in range(3):  # as the main run: a browser that did not get the page running in time, once more
        dom = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=240).stdout.decode()
        m = re.search(r'<pre id="zx-test-out"[^>]*>(.*?)</pre>', dom, re.S)
        if m and m.group(1).strip():
            break
    if not m or not m.group(1).strip():
        problems.append("layout: the page at 1280x720 wrote no results")
        return "browser_test: layout not measured"
    res = json.loads(html.unescape(m.group(1)))
    for L in res["layout"]:
        p, where = L["pic"], "layout %s at %dx%d" % (L["panel"], L["vw"], L["vh"])
        if p["left"] < 0 or p["top"] < 0 or p["right"] > L["vw"] + 0.5 or p["bottom"] > L["vh"] + 0.5:
            problems.append("%s: the main picture at %s, outside the first view" % (where, p))
        if L["minFont"] < 16:
            problems.append("%s: text of %g px (%s), below 16" % (where, L["minFont"], L["minFontAt"]))
        if L["minContrast"] < 4.5:
            problems.append("%s: contrast %.2f:1 (%s), below 4.5" % (where, L["minContrast"], L["minContrastAt"]))
    bars = res["schedules"][0]["bars"]
    h1, f1 = bars.get("ZB-H1", {}), bars.get("1F1B", {})
    ok = h1 and f1 and h1["width"] < f1["width"] and abs(h1["width"] / f1["width"] - h1["step"] / f1["step"]) < 0.01
    if not ok:
        problems.append("shared clock: at P 4, M 8 ZB-H1's bar %s, 1F1B's %s: not shorter by the steps' ratio" % (h1, f1))
    return ("browser_test: layout at 1280x720: %d views, main picture inside, text >= %g px, contrast >= %.2f:1; "
            "shared clock: ZB-H1's bar %.0f px (step %g) < 1F1B's %.0f px (step %g)"
            % (len(res["layout"]), min(L["minFont"] for L in res["layout"]),
               min(L["minContrast"] for L in res["layout"]), h1.get("width", 0), h1.get("step", 0),
               f1.get("width", 0), f1.get("step", 0)))


# chapter 13's table (the memory panel's fold): at one small configuration, the GPT --gpt tiny (L2 NH2 C32
# T16 V256) in fp32 on 4 ranks over 2 nodes (ZL_NODE_OF_RANK=0,0,1,1), every method's bytes per rank per step
# and across nodes on the page = what ch13_compress and ch05_zero3 print as their formula (--json: comm's
# formula_bytes_per_step_per_rank, nodes' formula_inter_bytes_per_step_per_rank), exactly.
COMPRESS_CFG = {"m-kind": "gpt", "m-layers-n": 2, "m-heads-n": 2, "m-hidden-n": 32, "m-seq-n": 16, "m-vocab-n": 256,
                "m-ranks-n": 4, "m-precision": "fp32", "q-nodes": 2, "q-rank": 4, "q-block": 32, "q-warmup": 1,
                "q-steps": 3}
COMPRESS_RUNS = [("ch13_compress", []), ("ch13_compress", ["--compress", "powersgd:4"]),
                 ("ch13_compress", ["--optimizer", "onebit-adam", "--warmup-steps", "1"]), ("ch05_zero3", []),
                 ("ch05_zero3", ["--qwz"]), ("ch05_zero3", ["--qwz", "--hpz"]), ("ch05_zero3", ["--qgz"]),
                 ("ch05_zero3", ["--qwz", "--hpz", "--qgz"])]  # the page's rows, in order


def check_compress(res, bindir, problems):
    """The page's bytes by method = the programs' printed formula bytes at COMPRESS_CFG; returns the count equal."""
    if len(res) != 1 or res[0]["err"] or len(res[0]["numbers"]) != 2 * len(COMPRESS_RUNS):
        problems.append("compress: the table did not show at %s: %r" % (COMPRESS_CFG, res))
        return 0
    nums, ok = res[0]["numbers"], 0
    env = dict(os.environ, ZL_NODE_OF_RANK="0,0,1,1")
    with tempfile.TemporaryDirectory() as tmp:
        for k, (prog, flags) in enumerate(COMPRESS_RUNS):
            path = os.path.join(tmp, "c%d.json" % k)
            cmd = ["bash", "common/scripts/zlrun", "4", os.path.join(bindir, prog), "--model", "gpt", "--gpt", "tiny",
                   "--precision", "fp32", "--batch", "8", "--steps", "3", "--quiet"] + flags
            cmd += ["--quant-block", "32"] if ("--qwz" in flags or "--qgz" in flags) else []
            p = subprocess.run(cmd + ["--json", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                               timeout=120)
            if p.returncode != 0:
                problems.append("compress: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stdout.decode()[-300:]))
                continue
            with open(path) as f:
                j = json.load(f)
            want = (j["comm"]["formula_bytes_per_step_per_rank"], j["nodes"]["formula_inter_bytes_per_step_per_rank"])
            got = (nums["bytes.%d" % k], nums["inter.%d" % k])
            if all(abs(g - w) <= 1e-9 * max(1.0, abs(w)) for g, w in zip(got, want)):
                ok += 1
            else:
                problems.append("compress: row %d (%s %s): the page %r, the program's formula %r"
                                % (k, prog, " ".join(flags), got, want))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--page", default="results/explorer/index.html")
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--sched-src", nargs="+", default=["solutions/" + f for f in PIPELINE_PURE_C],
                    help="the C files pp_simulate needs (default: the schedules' pure files)")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--shots", default=None)
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    a = ap.parse_args()
    if not (os.path.isfile(a.chromium) and os.access(a.chromium, os.X_OK)) and not shutil.which(a.chromium):
        print("browser_test: no chromium (%s) to run the page in (Debian: apt-get install chromium, or "
              "common/scripts/deps.sh --explorer)" % a.chromium)
        return 1
    page = os.path.abspath(a.page)
    if not os.path.isfile(page):
        print("browser_test: no page at %s: make explorer builds it (it needs emcc)" % page)
        return 1
    rng = random.Random(a.seed)
    binary = os.path.join(a.bin, "ch00_memory")
    helptext = subprocess.run([binary, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
    moe = "--experts" in helptext
    grid = "--pp" in helptext
    block = "--kv-heads" in helptext  # a real model's block: Llama 3, GPT-2's tied head
    presets = [{"m-optimizer": "adamw", "m-precision": "bf16", "m-preset": name, "m-ranks": 7, "m-stage": 4}
               for name in ("gpt2", "gpt3", "dsv3") + (("llama8", "llama70", "llama405") if block else ())
               ] if moe else []  # each real model's shape: = ch00_memory
    presets += [{"m-optimizer": "muon", "m-preset": "gpt3", "m-ranks": 9}] if "--optimizer" in helptext else []
    tests = {"memory": presets + memory_configs(rng, a.n, moe, grid, "--optimizer" in helptext, block), "schedules": schedule_configs(rng, a.n),
             "collectives": collective_configs(rng, 8), "compress": [COMPRESS_CFG]}
    url = "file://" + page + "#test=" + urllib.parse.quote(json.dumps(tests, separators=(",", ":")))
    for attempt in range(3):  # a browser that did not get the page running in time: once more, said
        dom = chromium_dom(a.chromium, url, budget_ms=20000 * (attempt + 1))
        m = re.search(r'<pre id="zx-test-out"[^>]*>(.*?)</pre>', dom, re.S)
        if m and m.group(1).strip():
            break
        print("browser_test: try %d: the page wrote no results (did the WebAssembly load?); the DOM began: %r"
              % (attempt + 1, dom[:300]))
    else:
        return 1
    res = json.loads(html.unescape(m.group(1)))
    problems = []
    m_ok, m_ref, m_num = check_memory(res["memory"], binary, problems)
    sim = Sim(a.sched_src)
    s_ok, s_ref = check_schedules(res["schedules"], sim, problems)
    shutil.rmtree(sim.dir, ignore_errors=True)
    c_ok, c_native = check_collectives(res["collectives"], problems, os.path.join(a.bin, "ch01_collectives"))
    k_ok = check_compress(res.get("compress", []), a.bin, problems)
    layout_line = check_layout(a.chromium, page, problems)
    for p in problems:
        print(p)
    print("browser_test (Chromium, %s): memory %d of %d configurations equal ch00_memory's printout and --json "
          "(%d numbers; %d refused alike); schedules %d of %d bubbles equal pp_simulate's bitwise (%d refused alike); "
          "collectives %d of %d runs of ring.c and alltoall.c give the expected buffers and bytes (%d of them bitwise "
          "= ch01_collectives --impl ring on as many MPI ranks; the all-reduce = its reduce-scatter + all-gather)"
          % (os.path.basename(a.chromium), m_ok + m_ref, len(res["memory"]), m_num, m_ref, s_ok + s_ref,
             len(res["schedules"]), s_ref, c_ok, len(res["collectives"]), c_native))
    print(layout_line)
    print("browser_test: chapter 13's table: %d of %d methods' bytes (per rank, across nodes) = the programs' "
          "printed formula at %s" % (k_ok, len(COMPRESS_RUNS), " ".join("%s=%s" % kv for kv in COMPRESS_CFG.items())))
    print("browser_test: memory configurations equal with each flag: %s; presets equal: %s; the chart vs s: %d "
          "points = ch00_memory --json on %d flag lines"
          % (", ".join("%s %d" % (f, n) for f, n in sorted(FLAG_OK.items())), ", ".join(PRESET_OK) or "none",
             SEQ_OK[0], SEQ_OK[1]))
    if block and not SEQ_OK[0]:
        problems.append("the chart vs s: no point checked")
    if moe and len(PRESET_OK) < len(presets):
        problems.append("presets: %d of %d equal ch00_memory's numbers" % (len(PRESET_OK), len(presets)))
        print(problems[-1])
    if a.shots:
        os.makedirs(a.shots, exist_ok=True)
        # the lecture path (notes/tour.md): the paper's Figure 1 (the defaults), 1F1B's clock beside ZB-H1's
        # at P = 4, M = 8, the all-reduce at 3 ranks after its reduce-scatter; DeepSeek-V3's experts
        views = {"memory": ("memory", {}),
                 "schedules": ("schedules", {"s-sched": 4, "s-P": 4, "s-M": 8, "s-f": 10, "s-b": 10, "s-w": 10}),
                 "collectives": ("collectives", {"c-op": 2, "c-N": 3, "c-per": 2, "c-step": 2})}
        if moe:
            views["memory_preset"] = ("memory", {"m-preset": "dsv3", "m-ranks": 7})
        if grid:  # chapters 07, 10, 08: GPT-2 small's shape on 64 ranks (V 256: the blocks split evenly), 4 pipeline
            # stages; then V 50304, S 8192, C = 4 and offload
            views["memory_pp"] = ("memory", {"m-kind": "gpt", "m-layers": 3, "m-hidden": 2, "m-heads": 3, "m-seq": 3,
                                             "m-micro": 0, "m-vocab": 0, "m-ranks": 7, "m-pp": 2})
            views["memory_cp"] = ("memory", {"m-kind": "gpt", "m-layers": 3, "m-hidden": 2, "m-heads": 3, "m-seq": 6,
                                             "m-micro": 0, "m-vocab": 2, "m-ranks": 7, "m-cp": 2, "m-offload": True})
        for name, (panel, cfg) in views.items():
            shot = os.path.join(a.shots, "explorer_%s.png" % name)
            h = urllib.parse.quote(json.dumps({"panel": panel, "cfg": cfg}, separators=(",", ":")))
            ok = chromium_shot(a.chromium, "file://" + page + "#panel=" + h, shot)
            print("browser_test: %s %s" % (shot, "written" if ok else "NOT written"))
            if not ok:
                problems.append("no screenshot %s" % shot)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
