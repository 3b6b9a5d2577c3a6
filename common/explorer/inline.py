#!/usr/bin/env python3
"""inline.py — the explorer page as one file: every <script src="NAME"></script> of index.html replaced
by NAME's text, so the page works copied alone (common/explorer/README.md; make explorer runs it).

  python3 common/explorer/inline.py common/explorer/index.html --from DIR [DIR ...] -o OUT/index.html

Each NAME is looked for in the --from folders in turn (the built zl_explorer.js with its WebAssembly
inlined as base64, measured.js; the sources' explorer.js). A script whose text holds "</script" would
end the tag early: refused, as is a NAME found nowhere. Exit 0, or 1 with one line.
"""
import argparse
import os
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("page")
    ap.add_argument("--from", dest="dirs", nargs="+", required=True)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    with open(a.page, encoding="utf-8") as f:
        page = f.read()
    problems = []

    def script(m):
        name = m.group(1)
        for d in a.dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if "</script" in text.lower():
                    problems.append("%s holds '</script': it cannot be inlined" % path)
                return "<script>/* %s */\n%s\n</script>" % (name, text)
        problems.append("%s: not found in %s" % (name, ", ".join(a.dirs)))
        return m.group(0)

    out = re.sub(r'<script src="([^"/]+)"></script>', script, page)
    if problems:
        print("inline.py: " + "; ".join(problems), file=sys.stderr)
        return 1
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
