"""notes_labels.py — a quoted number must stand beside its own label, not a sibling's (imported by
check_notes.py, for the measured numbers).

check_notes.py checks that a marked number equals its JSON expression. That alone cannot see a number
quoted under the wrong name: "the hybrid 1.50<!-- data: ... comm.6.... -->, Ulysses 3.00<!-- comm.7 -->"
passes when comm.6 is Ulysses' record and comm.7 the hybrid's, because each number is right for its
key. This module reads the words around the number and the names the JSON gives the key, and fails
when those words name one of the key's siblings and not the key itself.

The names of a key (its labels), level by level along each dotted path of the marker's expression:
  * an element of a list of records: the record's name field (the first of LABEL_FIELDS it has,
    e.g. "layout": "Ulysses (a2a)"), and its small identity numbers (P, M, C, N: "P = 4");
  * a key of a dict whose values are all records (dicts) or all numbers: the key itself
    ("zero3", "top1_aux_cf100"), and the record's name field when it has one.
A record with mixed fields (numbers, strings, lists) names nothing by its field names: "seq",
"layers" or "ep" are read as fields, not as labels. Siblings are the other elements or keys of the
same container.

The words around a number:
  * in a table row, the cells before it, its column's header and its own cell (the marker's own
    number excluded);
  * in prose, the words before it in its clause: back to the previous marked number, one of
    , ; : ( ) — or a sentence end, or a word that starts a new term (and, against, than, vs, ...).
    The words after a number are not read: "0.78 of the link against the flat ring's 0.95" names
    the second number's label after the first.

A label is named when its words appear there in order (words: lower case, hyphens and apostrophes
dropped, so ZeRO-3's reads zero3 and ZB-H1 zbh1), the label's head only ("hybrid" of "hybrid (a2a 2
x ring 2)"), or its shortest tail that no sibling shares ("ep 2" of "MoE EP 2"); an identity number
when "P = 4" (any spacing) appears. A sibling competes unless its words are all among the key's own
(the sibling "TP 4" of "TP 4 + SP", "zero3" of "zero3-noprefetch"), or it is itself a label of
another key of the same expression (a ratio names both). The check fails when a competing sibling is
named and no label of the key at that level is: the message gives both names."""
import re

LABEL_FIELDS = ("layout", "name", "algorithm", "impl", "op", "label", "schedule")
IDENTITY_FIELDS = ("P", "M", "C", "N")   # small whole numbers that name a record: "P = 4"
MEASURE = re.compile(r"(^|_)(ms|s|bytes)(_|$)")   # a key that names a measurement: step_ms
DELIMS = re.compile(r"[,;:()\u2014]|\.(?=\s|$)|\b(?:and|against|vs|versus|than|while|whereas|but)\b", re.I)


def words(text):
    """A text's words as labels are compared: lower case, hyphens and apostrophes dropped."""
    text = text.lower().replace("\u2019", "'").replace("\u2212", "-").replace("\u00d7", " x ")
    text = re.sub(r"'s\b|'", "", text)
    return [w.replace("-", "") for w in re.findall(r"[a-z0-9][a-z0-9.+-]*[a-z0-9+]|[a-z0-9]", text)
            if w.replace("-", "")]


def key_words(key):
    """A dict key's words: zero3-noprefetch -> zero3 noprefetch, top1_aux_cf100 -> top1 aux cf100."""
    return [w for w in re.split(r"[_\s-]+", key.lower()) if w]


def head_words(name):
    """A record name's head: the words before its first parenthesis."""
    return words(name.split("(")[0]) or words(name)


NEGATIONS = {"no", "not", "without", "non"}


def contains(seq, sub, affirmed=False):
    """Whether the word list sub appears in seq, in order and adjacent (affirmed: and not right after
    a negation, "no recompute" names no recompute)."""
    n = len(sub)
    return n > 0 and any(seq[i:i + n] == sub and not (affirmed and i > 0 and seq[i - 1] in NEGATIONS)
                         for i in range(len(seq) - n + 1))


class Label:
    """One name of a key: its words (all), its head, and (later) its forms that count as naming it."""

    def __init__(self, full, head, tails=True):
        self.full, self.head, self.forms, self.tails = full, head, [head], tails

    def __repr__(self):
        return " ".join(self.head)


def _record_name(rec):
    for f in LABEL_FIELDS:
        if isinstance(rec, dict) and isinstance(rec.get(f), str) and len(rec[f]) <= 60:
            return rec[f]
    return None


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _labels_of(container, key, measured=False):
    """(labels of key in container, [labels of each sibling]) at one level, or None when the level
    names nothing (a record's fields, a list of numbers, the sections of a file). measured: a key
    above container names a measurement (step_ms), so container's number keys are labels."""
    def names(elem, k):
        out = []
        name = _record_name(elem)
        if name:
            out.append(Label(words(name), head_words(name)))
        if k is not None:
            out.append(Label(key_words(k), key_words(k), tails=False))
        return out

    if isinstance(container, list):
        if not container or not all(isinstance(e, dict) for e in container):
            return None
        own = names(container[key], None)
        sibs = [names(e, None) for i, e in enumerate(container) if i != key]
        ident = [f for f in IDENTITY_FIELDS
                 if all(isinstance(e.get(f), int) and not isinstance(e.get(f), bool) for e in container)
                 and len({e[f] for e in container}) > 1]
        for f in ident:
            own.append(("=", f, container[key][f]))
            for i, e in enumerate((e for i, e in enumerate(container) if i != key)):
                sibs[i].append(("=", f, e[f]))
        return (own, sibs) if any(own) else None
    if isinstance(container, dict):
        items = [(k, v) for k, v in container.items() if not k.startswith("_") and k != key]
        mine = container[key]
        if isinstance(mine, dict):   # records: the siblings of the same shape (not other sections)
            items = [(k, v) for k, v in items if isinstance(v, dict) and _alike(mine, v)]
        elif not (_is_number(mine) and measured and all(_is_number(v) for _, v in items)):
            return None              # numbers name a key only under a measurement (step_ms.np2.zero3)
        if not items:
            return None
        return names(mine, key), [names(v, k) for k, v in items]
    return None


def _alike(a, b):
    """Two records of one collection: at least half their keys shared."""
    ka, kb = set(a), set(b)
    return len(ka & kb) >= 0.5 * len(ka | kb)


def _shorten(own, sibs):
    """Give each name label its shortest unique tail: one no sibling head holds in order."""
    others = [l.head for s in sibs for l in s if isinstance(l, Label)]
    for l in own:
        if not isinstance(l, Label) or not l.tails:
            continue
        for k in range(2, len(l.head)):   # two words at least: "ep 2", never a lone "rank"
            tail = l.head[-k:]
            if any(not re.fullmatch(r"[0-9.]+", w) for w in tail) and \
                    not any(contains(o, tail) for o in others if o != l.head):
                l.forms.append(tail)
                break


def levels(data, path):
    """[(own labels, sibling label lists)] along one dotted path (only the levels that name)."""
    out, cur, measured = [], data, False
    for part in path.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            key = int(part)
        elif isinstance(cur, dict) and part in cur:
            key = part
        else:
            return out
        lv = _labels_of(cur, key, measured)
        if lv:
            own, sibs = lv
            _shorten(own, sibs)
            for s in sibs:
                _shorten(s, [own] + [t for t in sibs if t is not s])
            out.append(lv)
        cur = cur[key]
        measured = measured or bool(isinstance(key, str) and MEASURE.search(key))
    return out


def named(label, text, ws):
    """Whether the words ws (of text) name label."""
    if isinstance(label, tuple):
        _, f, v = label
        return re.search(r"(?<![\w.])%s\s*=\s*%s(?![\w.])" % (re.escape(f), v), text) is not None
    return any(contains(ws, form, affirmed=True) for form in label.forms)


def _subset(a, b):
    """Label a's words all among label b's (a names nothing b does not)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return set(a.head) <= set(b.full) or set(a.full) <= set(b.full)


def check(data, keypaths, text):
    """'' when the words of text fit the keys, else what they name instead (a sibling) and what they
    should name."""
    ws = words(text)
    all_own = [l for p in keypaths for own, _ in levels(data, p) for l in own]
    for path in keypaths:
        for own, sibs in levels(data, path):
            if any(named(l, text, ws) for l in own):
                continue
            hits = [l for sib in sibs for l in sib if named(l, text, ws)
                    and not any(_subset(l, o) for o in all_own)]
            if hits:  # the sibling named most fully: "hybrid (a2a 2 x ring 2)" before its "ring"
                hit = max(hits, key=lambda l: 1 if isinstance(l, tuple) else len(l.full))
                return "the words around it name %s, a sibling of %s (%s): %s" % (
                    _show(hit), path, " / ".join(_show(l) for l in own), " ".join(text.split()))
    return ""


def _show(label):
    if isinstance(label, tuple):
        return "%s = %s" % (label[1], label[2])
    return "'%s'" % " ".join(label.head)


# ---- the words around each marked number of a page -----------------------------------------------
def contexts(lines, marker_re, quoted_re):
    """For each marker of a page (outside fenced code and inline code): (line number, match of the
    marker in its line, the words around its number). lines: the page's lines."""
    out, fence, i = [], False, 0
    blank = [re.sub(r"`[^`]*`", lambda c: " " * len(c.group(0)), l) for l in lines]
    while i < len(lines):
        line = blank[i]
        if re.match(r"^(`{3,}|~{3,})", lines[i]):
            fence = not fence
            i += 1
            continue
        if fence:
            i += 1
            continue
        if line.lstrip().startswith("|"):
            j = i   # the table's first row: its header
            while j > 0 and blank[j - 1].lstrip().startswith("|"):
                j -= 1
            header = _cells(blank[j]) if j != i else None
            out += _row_contexts(i + 1, line, header, marker_re, quoted_re)
            i += 1
            continue
        # a prose block: this line and the next ones up to a blank line, a heading, a table, a list item
        j = i + 1
        while j < len(lines) and blank[j].strip() and not re.match(r"^\s*(#|\||[-*+] |\d+\. |`{3,}|~{3,})",
                                                                   blank[j]):
            j += 1
        out += _prose_contexts(list(range(i + 1, j + 1)), blank[i:j], marker_re, quoted_re)
        i = j
    return out


def _cells(row):
    return [c for c in row.strip().strip("|").split("|")]


def _strip_markers(text, marker_re):
    return marker_re.sub(" ", text)


def _row_contexts(n, line, header, marker_re, quoted_re):
    """The markers of one table row, each with the cells before its own, its column's header and
    its own cell up to its number."""
    out = []
    for m in marker_re.finditer(line):
        bars = [k for k, ch in enumerate(line[:m.start()]) if ch == "|"]
        ci = len(bars) - 1                      # the cell's index (the row starts with a |)
        cell = line[bars[-1] + 1:m.start()] if bars else line[:m.start()]
        before = _strip_markers(cell, marker_re)
        q = quoted_re.search(before)
        own = before[:q.start()] if q else before
        prev = _strip_markers(line[:bars[-1]], marker_re) if bars else ""
        head = header[ci] if header is not None and 0 <= ci < len(header) else ""
        out.append((n, m, " | ".join([prev.replace("|", " | "), head, own])))
    return out


def _prose_contexts(numbers, block_lines, marker_re, quoted_re):
    """The markers of one prose block, each with its clause."""
    text, starts = "", []
    for l in block_lines:
        starts.append(len(text))
        text += l + "\n"
    marks = list(marker_re.finditer(text))
    # the quoted number of each marker: the last number before it, after the previous marker
    spans = []
    for k, m in enumerate(marks):
        lo = marks[k - 1].end() if k else 0
        seg = text[lo:m.start()]
        q = quoted_re.search(seg)
        spans.append((lo + q.start(), lo + q.end()) if q else (m.start(), m.start()))
    out = []
    for k, m in enumerate(marks):
        lo = marks[k - 1].end() if k else 0
        left = text[lo:spans[k][0]]
        d = list(DELIMS.finditer(left))
        left = left[d[-1].end():] if d else left
        line_idx = max(i for i, s in enumerate(starts) if s <= m.start())
        lm_start = m.start() - starts[line_idx]
        lm = next(x for x in marker_re.finditer(block_lines[line_idx]) if x.start() == lm_start)
        out.append((numbers[line_idx], lm, _strip_markers(left, marker_re)))
    return out
