"""Differential check of csx.filter against a reference implementation of it: random
filter strings (valid and invalid) over the TPC-H and SSB schemas and dictionaries,
parsed and bound by both; the comparisons, ranges and error kinds and messages must
agree.

    python tests/filter_differential.py REFERENCE.py [CASES] [SEED]

REFERENCE.py is a ``csx.filter`` module of another version, for instance the Python
parser and binder the package had before it called csx-data's
(``git show 55c2679:python/csx/filter.py > /tmp/filter_ref.py``). Exits non-zero and
prints the first disagreements when there are any. Cases where the reference raises
an exception outside csx's classes (a date overflow) and csx.filter raises
UnsupportedFilterError are counted apart: those are the reference's faults.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import random
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, List, Tuple

import csx
import csx.arrow
import csx.data
import csx.filter

OPS = ["=", "==", "!=", "<>", "<", "<=", ">", ">=", "=>", "=<", "!", "<<"]
UNITS = ["DAY", "days", "Month", "MONTHS", "year", "YEARS", "week", "HOUR", "'1'"]
JUNK = ["OR", "NOT", "IN (1, 2)", "LIKE 'a%'", "IS NULL", "AND", "BETWEEN", "(", ")", ",", "+", "-",
        "*", "/", "%", "|", "~", ";", ".", "\"", "'", "é", "\t", "\n", "DATE", "INTERVAL", "NULL", "x(1)"]


def load_reference(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("csx._filter_reference", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "csx"
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def schemas(tmp: Path) -> List[Tuple[Any, Dict[str, List[str]]]]:
    """(TableSchema, dictionaries) of every generated TPC-H and SSB table."""
    out = []
    for kind in ("tpch", "ssb"):
        csx.data.generate(kind, tmp / kind, 0.001)
        for sj in sorted((tmp / kind).glob("*/schema.json")):
            s = json.loads(sj.read_text())
            cols = [csx.arrow.Column(c["name"], c["type"], c.get("scale", 0), c.get("entries", 0)) for c in s["columns"]]
            dicts = {
                c.name: (sj.parent / f"{c.name}.dict").read_text().split("\n")[: c.entries]
                for c in cols
                if c.type == "dict"
            }
            out.append((csx.arrow.TableSchema(s["table"], s["rows"], cols, str(sj.parent)), dicts))
    return out


class Gen:
    def __init__(self, rng: random.Random, schema: Any, dicts: Dict[str, List[str]]) -> None:
        self.r, self.schema, self.dicts = rng, schema, dicts

    def column(self) -> Any:
        return self.r.choice(self.schema.columns)

    def name(self, col: Any) -> str:
        r = self.r.random()
        if r < 0.04:
            return self.r.choice(["nosuch", "x", "l_nope", "_"])
        if r < 0.1:
            return col.name.upper()
        return col.name

    def number(self) -> str:
        r = self.r
        k = r.random()
        if k < 0.2:
            return str(r.choice([0, 1, 2, 24, 100, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 10**30]))
        if k < 0.5:
            return str(r.randint(0, 10**r.randint(1, 6)))
        places = r.randint(0, 7)
        whole = str(r.randint(0, 10**r.randint(0, 4))) if r.random() < 0.9 else ""
        frac = "".join(r.choice("0123456789") for _ in range(places))
        dot = "." if places or r.random() < 0.1 else ""
        return (whole + dot + frac) or "0"

    def string(self, col: Any) -> str:
        r = self.r
        entries = self.dicts.get(col.name) or ["A", "MAIL", "zz"]
        k = r.random()
        if k < 0.4:
            s = r.choice(entries)
        elif k < 0.6:
            s = r.choice(entries)
            s = s[: r.randint(0, len(s))] + r.choice(["", "A", "z", " ", "~", "'"])
        elif k < 0.8:
            s = r.choice(["", "zzz", "A", "a", "ZZZZ", "0", " ", "it's", "é", "MAIL", "1994-01-01"])
        else:
            s = self.date_text()
        return "'" + s.replace("'", "''") + "'"

    def date_text(self) -> str:
        r = self.r
        k = r.random()
        if k < 0.6:
            return f"{r.randint(1990, 1999)}-{r.randint(1, 12):02d}-{r.randint(1, 31):02d}"
        return r.choice(["1994-1-1", "19940101", "1994-W05-3", "1994W053", "2020-W53", "1994-W53-1", "0001-01-01",
                         "9999-12-31", "0000-01-01", "1994-02-29", "2000-02-29", " 1994-01-01 ", "1994/01/01", "x",
                         "1994-13-01", "99999-01-01", "1994-001"])

    def date(self) -> str:
        r = self.r
        d = f"DATE '{self.date_text()}'" if r.random() < 0.85 else self.string(self.column())
        while r.random() < 0.4:
            count = r.choice(["'1'", "'-3'", "' 2 '", "'1_0'", "'x'", "3", "'1.5'", "2.", "'+4'",
                              f"'{r.randint(0, 500)}'", "'99999999'", "'99999999999999999999'"])
            d += f" {r.choice(['+', '-'])} INTERVAL {count} {r.choice(UNITS)}"
        return d

    def constant(self, col: Any) -> str:
        r = self.r
        t = col.type if r.random() < 0.85 else r.choice(["int32", "decimal", "date", "dict"])
        if t == "date":
            return self.date()
        if t == "dict":
            return self.string(col)
        v = ("-" if r.random() < 0.2 else "") + self.number()
        while r.random() < 0.25:
            v += f" {r.choice(['+', '-'])} {self.number()}"
        if r.random() < 0.03:
            v += " + INTERVAL '1' DAY"
        return v

    def predicate(self, depth: int = 0) -> str:
        r = self.r
        col = self.column()
        k = r.random()
        if k < 0.08 and depth < 2:
            return "(" + self.conjunction(depth + 1) + ")"
        if k < 0.25:
            return f"{self.name(col)} BETWEEN {self.constant(col)} AND {self.constant(col)}"
        op = r.choice(OPS[:8]) if r.random() < 0.97 else r.choice(OPS)
        if k < 0.35:
            return f"{self.constant(col)} {op} {self.name(col)}"
        return f"{self.name(col)} {op} {self.constant(col)}"

    def conjunction(self, depth: int = 0) -> str:
        n = self.r.choice([1, 1, 2, 2, 3, 4])
        return f" {self.r.choice(['AND', 'and', 'And'])} ".join(self.predicate(depth) for _ in range(n))

    def filter(self) -> str:
        text = self.conjunction()
        r = self.r
        if r.random() < 0.3:
            words = text.split(" ")
            for _ in range(r.randint(1, 2)):
                i = r.randrange(len(words) + 1)
                if r.random() < 0.5 and words:
                    del words[min(i, len(words) - 1)]
                else:
                    words.insert(i, r.choice(JUNK))
            text = " ".join(words)
        if r.random() < 0.05:
            i = r.randrange(len(text) + 1)
            text = text[:i] + r.choice(JUNK) + text[i:]
        return text


    def value(self, col: Any) -> Any:
        """A constant as csx.polars and csx.duckdb hand them to bind (or a bad one)."""
        r = self.r
        k = r.random()
        if k < 0.4:
            return Fraction(r.randint(-10**6, 10**6), r.choice([1, 1, 10, 100, 1000, 3, 7, 10**9]))
        if k < 0.5:
            return Fraction(r.choice([2**31, 2**63, -(2**63) - 1, 10**40]), r.choice([1, 3]))
        if k < 0.7:
            return self.string(col)[1:-1].replace("''", "'")
        if k < 0.85:
            return _dt.date(r.randint(1, 9999), r.randint(1, 12), r.randint(1, 28))
        return r.choice([3, None, 2.5, ("interval", 1, "DAY"), _dt.datetime(1994, 1, 1)])

    def comparisons(self, mod: Any) -> List[Any]:
        out = []
        for _ in range(self.r.randint(1, 4)):
            col = self.column()
            op = self.r.choice(["=", "!=", "<", "<=", ">", ">=", "between", "in", "in"])
            n = {"between": 2, "in": self.r.randint(0, 5)}.get(op, 1)
            vs = tuple(self.value(col) for _ in range(n))
            out.append(mod.Comparison(self.name(col), op, vs if op in ("between", "in") else vs[0], f"c{len(out)}"))
        return out


def outcome(mod: Any, text: Any, schema: Any, dicts: Dict[str, List[str]]) -> Tuple[Any, ...]:
    try:
        cmps = mod.parse(text) if isinstance(text, str) else [mod.Comparison(*c) for c in text]
        parsed = [(c.column, c.op, c.value, c.text) for c in cmps]
        ranges = mod.bind(cmps, schema, dicts)
    except (csx.QueryError,) as e:
        return ("error", type(e).__name__, str(e), getattr(e, "part", None))
    except Exception as e:  # the reference's own faults
        return ("crash", type(e).__name__, str(e))
    out = []
    for g in ranges:
        out.append((g.column, "empty") if g.empty else (g.column, g.lo, g.hi, tuple(g.excluded), g.values))
    return ("ok", parsed, out)


def main() -> int:
    ref = load_reference(sys.argv[1])
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    with tempfile.TemporaryDirectory() as tmp:
        tables = schemas(Path(tmp))
    kinds: Dict[str, int] = {}
    bad = []
    for _ in range(cases):
        schema, dicts = rng.choice(tables)
        gen = Gen(rng, schema, dicts)
        # Every fourth case: comparisons built directly (as csx.polars and csx.duckdb
        # build them) rather than parsed.
        text: Any = gen.filter() if rng.random() < 0.75 else [
            (c.column, c.op, c.value, c.text) for c in gen.comparisons(csx.filter)
        ]
        want = outcome(ref, text, schema, dicts)
        got = outcome(csx.filter, text, schema, dicts)
        key = want[0] if want == got else ("reference fault" if want[0] == "crash" and got[1] == "UnsupportedFilterError" else "disagree")
        if want[0] == "crash" and got[0] == "crash":
            key = "disagree"
        kinds[key] = kinds.get(key, 0) + 1
        if key == "disagree":
            bad.append((text, want, got))
    print(f"{cases} filters compared: {kinds}")
    for text, want, got in bad[:15]:
        print(f"\n{text!r}\n  reference: {want}\n  csx:       {got}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
