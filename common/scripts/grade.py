#!/usr/bin/env python3
"""grade.py — `make grade`: every chapter's exercises judged (`make exercise CH=NN` for each chapter
with exercises, or CH's alone), then one report a course can import:
  per chapter "chapter NN: done/total", per exercise its verdict and the time that verdict took against
  the budget (a verdict within VERDICT_BUDGET_S, the project's "named within two minutes"), what its
  tests' communicators sent (bytes by the ring model, calls, the ring's own bytes: ZL_MEASURE_FILE), and the
  same as JSON (grade.json) and JUnit XML (grade.xml: a testsuite per chapter, a testcase per
  exercise, <failure> for every verdict but done, <skipped> for not done) in --out.
  grade.py run    --make M --build B --out DIR [--chapter NN]   judge, then report
  grade.py report --status FILE --out DIR [--chapter NN]        report from the verdicts make exercise
                                                                 saved (BUILD/exercise-status.json)
Exit code 0 once the report is written (whatever the verdicts: they are in it), 2 on bad arguments."""
import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exercises as ex  # noqa: E402

VERDICT_BUDGET_S = 120


def chapters_of(src, only=None):
    """{chapter: [exercise names, in the notes' order]} of src's markers (only: that chapter)."""
    out = {}
    for rel, r in ex.notes_order(ex.all_regions(src)):
        if only is None or r.chapter() == only:
            out.setdefault(r.chapter(), []).append(r.name)
    return dict(sorted(out.items()))


def report(src, status_path, out_dir, only=None):
    status = ex.load_status(status_path)
    chapters = chapters_of(src, only)
    if not chapters:
        print(f"error: CH={only}: no exercises in that chapter; chapters with exercises: "
              f"{', '.join(chapters_of(src)) or 'none'}", file=sys.stderr)
        return 2
    doc = {"budget_s": VERDICT_BUDGET_S, "chapters": []}
    suites = ET.Element("testsuites", name="zerolab exercises")
    for ch, names in chapters.items():
        rows = []
        for n in names:
            st = status.get(n) or {"state": "not judged", "detail": "no `make exercise` verdict yet"}
            rows.append({"exercise": n, "state": st["state"], "detail": st.get("detail", ""),
                         "seconds": st.get("seconds"), "when": st.get("when"), "measured": st.get("measured")})
        done = sum(r["state"] == "done" for r in rows)
        doc["chapters"].append({"chapter": ch, "done": done, "total": len(rows), "exercises": rows})
        print(f"chapter {ch}: {done}/{len(rows)} done")
        w = max(len(r["exercise"]) for r in rows)
        for r in rows:
            took = (f"verdict in {r['seconds']:.0f} s of the {VERDICT_BUDGET_S} s budget"
                    if r["seconds"] is not None else "")
            m = r["measured"]
            if m and r["state"] == "done":  # what its tests' ranks sent, beside the ring model's bytes
                took += (f"; its tests sent {m['model_bytes'] / 1e6:.1f} MB by the ring model "
                         f"in {m['calls']} collective and point-to-point calls"
                         + (f", {m['ring_bytes'] / 1e6:.1f} MB of them through the ring's own sends"
                            if m["ring_bytes"] else ""))
            detail = took if r["state"] == "done" else r["detail"]
            print(f"  {r['exercise']:<{w}}  {r['state']:<16}  {detail}")
        suite = ET.SubElement(suites, "testsuite", name=f"chapter {ch}", tests=str(len(rows)),
                              failures=str(sum(r["state"] not in ("done", "not done", "not judged") for r in rows)),
                              skipped=str(sum(r["state"] in ("not done", "not judged") for r in rows)))
        for r in rows:
            case = ET.SubElement(suite, "testcase", classname=f"chapter{ch}", name=r["exercise"],
                                 time=str(r["seconds"] or 0))
            if r["state"] in ("not done", "not judged"):
                ET.SubElement(case, "skipped", message=r["detail"])
            elif r["state"] != "done":
                ET.SubElement(case, "failure", message=f"{r['state']}: {r['detail']}")
    total = sum(c["total"] for c in doc["chapters"])
    done = sum(c["done"] for c in doc["chapters"])
    doc["done"], doc["total"] = done, total
    print(f"all: {done}/{total} done")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "grade.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    ET.ElementTree(suites).write(os.path.join(out_dir, "grade.xml"), encoding="utf-8", xml_declaration=True)
    print(f"wrote {out_dir}/grade.json and {out_dir}/grade.xml (JUnit)")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--make", required=True)
    r.add_argument("--build", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--chapter")
    q = sub.add_parser("report")
    q.add_argument("--status", required=True)
    q.add_argument("--out", required=True)
    q.add_argument("--chapter")
    a = p.parse_args()
    src = "solutions"
    if a.chapter and not chapters_of(src, a.chapter):
        print(f"error: CH={a.chapter}: no exercises in that chapter; chapters with exercises: "
              f"{', '.join(chapters_of(src))}", file=sys.stderr)
        return 2
    if a.cmd == "run":
        for ch in chapters_of(src, a.chapter):
            print(f"==== make exercise CH={ch}", flush=True)
            subprocess.call([sys.executable, os.path.join(os.path.dirname(__file__), "exercises.py"), "status",
                             src, "exercises", "--chapter", ch, "--build", a.build, "--make", a.make])
        return report(src, os.path.join(a.build, "exercise-status.json"), a.out, a.chapter)
    return report(src, a.status, a.out, a.chapter)


if __name__ == "__main__":
    sys.exit(main())
