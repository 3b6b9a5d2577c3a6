#!/usr/bin/env python3
"""bench_ft.py — this machine's checkpoint costs δ and restart cost R for chapter 14's goodput
(notes/14-fault-tolerance.md; ch00_memory --goodput takes them).

Three runs of ch03_zero1 on 2 ranks save every K steps — to disk synchronously (--ckpt), to disk
with the write in the background (--ckpt-async), in RAM with a buddy's copy (--ckpt-mem-every) —
and their --json extras give the stall per save (ckpt_stall_ms, ckpt_mem_stall_ms). R: the same
in-memory run with rank 1 killed at step F under zlrun --restarts 1, from the supervisor's line
that the attempt failed to the relaunch's line that it restored from RAM (each line timed as it
arrives): mpirun, MPI_Init, setup and the restore; the steps redone come on top.

  python3 common/scripts/bench_ft.py [--out notes/data/ft_costs.json] [--bin build/bin]
"""
import argparse, json, os, subprocess, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = ["--hidden", "512", "--input", "64", "--classes", "16", "--layers", "4", "--batch", "32",
         "--seed", "7", "--quiet", "--log-every", "0", "--steps", "20"]
K, FAIL = 5, 13  # a save every K steps; the kill at the start of step FAIL (redo FAIL - 10)


def run(binary, extra, tmp, name, restarts=None):
    """The run's --json, and when each line of its output arrived (seconds from the start)."""
    js = os.path.join(tmp, name + ".json")
    cmd = ["bash", "common/scripts/zlrun"] + (["--restarts", str(restarts)] if restarts is not None else [])
    cmd += ["2", os.path.join(binary, "ch03_zero1")] + MODEL + extra + ["--json", js]
    env = dict(os.environ, ZL_JOB_ID="bench-ft-%d-%s" % (os.getpid(), name))
    t0, lines = time.monotonic(), []
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
    rc = p.wait(timeout=600)
    if rc != 0:
        raise SystemExit("bench_ft: %s exited %d:\n%s" % (name, rc, "\n".join(l for _, l in lines)))
    with open(js) as f:
        d = json.load(f)
    return d, lines


def when(lines, text):
    """The time the first line holding text arrived."""
    for t, l in lines:
        if text in l:
            return t
    raise SystemExit("bench_ft: no line with %r:\n%s" % (text, "\n".join(l for _, l in lines)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "ft_costs.json"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    a = ap.parse_args()
    out = {"_meta": {"command": "python3 common/scripts/bench_ft.py --out notes/data/ft_costs.json",
                     "machine": os.uname().nodename + ", %d cores" % os.cpu_count(),
                     "date": time.strftime("%Y-%m-%d"),
                     "load": "1-minute load average %.2f at the start (the box is shared)" % os.getloadavg()[0],
                     "what": "ch03_zero1 on 2 ranks, fp32 AdamW MLP " + " ".join(MODEL) +
                             "; a save every %d steps; R: rank 1 killed at step %d, zlrun --restarts 1" % (K, FAIL)}}
    with tempfile.TemporaryDirectory() as tmp:
        d, _ = run(a.bin, ["--ckpt", os.path.join(tmp, "s"), "--save-every", str(K)], tmp, "sync")
        out["sync_stall_ms"] = d["ckpt_stall_ms"]
        d, _ = run(a.bin, ["--ckpt", os.path.join(tmp, "a"), "--save-every", str(K), "--ckpt-async"], tmp, "async")
        out["async_stall_ms"], out["async_background_write_ms"] = d["ckpt_stall_ms"], d["ckpt_background_write_ms"]
        d, _ = run(a.bin, ["--ckpt-mem-every", str(K)], tmp, "mem")
        out["mem_stall_ms"], out["mem_snapshot_bytes"] = d["ckpt_mem_stall_ms"], d["ckpt_mem_snapshot_bytes"]
        out["step_ms"] = d["median_step_ms"]
        d, lines = run(a.bin, ["--ckpt-mem-every", str(K), "--fault", "1:%d:kill" % FAIL], tmp, "kill", restarts=1)
        out["restore_ms"] = d["ckpt_mem_restore_ms"]
        # R: from the supervisor seeing the failed attempt to the relaunch restored from RAM
        out["restart_s"] = round(when(lines, "restored from RAM") - when(lines, "zlrun: attempt 1 failed"), 3)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
