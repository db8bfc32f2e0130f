"""Parsing the filters a device scan can evaluate.

A filter is a conjunction (``AND``) of comparisons between a column and a constant::

    l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR
    AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 24

Comparisons: ``=``, ``==``, ``!=``, ``<>``, ``<``, ``<=``, ``>``, ``>=`` and
``BETWEEN a AND b`` (inclusive), with the column on the left (or on the right of a
comparison, which is mirrored). Constants: integers, decimals, ``'strings'``,
``DATE 'yyyy-mm-dd'``, a date plus or minus ``INTERVAL 'n' DAY|MONTH|YEAR``, and sums
and differences of numbers. Parentheses group conjunctions.

Anything else (``OR``, ``NOT``, ``IN``, ``LIKE``, ``IS NULL``, functions, arithmetic on a
column, a comparison of two columns) raises :class:`csx.UnsupportedFilterError` whose
``part`` is the text the device cannot evaluate.

:func:`parse` returns :class:`Comparison` values; :func:`bind` turns them, against a
table's schema, into inclusive integer ranges over the stored values (dates as days,
decimals scaled, strings as dictionary codes), which is what the device evaluates.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as _dt
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from .errors import QueryError, UnsupportedFilterError

__all__ = ["Comparison", "Range", "parse", "bind"]

Value = Union[Fraction, str, _dt.date]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>\d+(?:\.\d*)?|\.\d+)
      | (?P<str>'(?:[^']|'')*')
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<punct>[-+(),*/%|])
      | (?P<other>\S)
    )""",
    re.VERBOSE,
)

_KEYWORDS = {"AND", "BETWEEN", "DATE", "INTERVAL", "OR", "NOT", "IN", "LIKE", "IS", "NULL"}
_UNITS = {"DAY", "DAYS", "MONTH", "MONTHS", "YEAR", "YEARS"}
_MIRROR = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Comparison:
    """``column op value`` (op one of = != < <= > >=), ``column BETWEEN lo AND hi``
    (op "between", value the pair) or ``column IN (v, ...)`` (op "in", value the tuple
    of values)."""

    column: str
    op: str
    value: Any
    text: str


@dataclass(frozen=True)
class Range:
    """The rows whose stored integer value v of ``column`` has lo <= v <= hi and
    v not in ``excluded`` (and, when ``values`` is not None, v in ``values``: an IN
    list); an empty range (lo > hi, or no value left) keeps no row."""

    column: str
    lo: int
    hi: int
    excluded: Tuple[int, ...] = ()
    values: Optional[Tuple[int, ...]] = None

    @property
    def empty(self) -> bool:
        return self.lo > self.hi or (self.values is not None and not self.values)


class _Tok:
    __slots__ = ("kind", "text", "start", "end")

    def __init__(self, kind: str, text: str, start: int, end: int) -> None:
        self.kind, self.text, self.start, self.end = kind, text, start, end

    @property
    def word(self) -> str:
        return self.text.upper() if self.kind == "ident" else ""


def _tokens(text: str) -> List[_Tok]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        kind = m.lastgroup or "other"
        out.append(_Tok(kind, m.group(kind), m.start(kind), m.end(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, k: int = 0) -> Optional[_Tok]:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self) -> _Tok:
        t = self.peek()
        if t is None:
            raise self.unsupported(len(self.text), len(self.text), "the filter ends too early")
        self.i += 1
        return t

    def unsupported(self, start: int, end: int, why: str) -> UnsupportedFilterError:
        part = self.text[start:end].strip() or self.text.strip()
        return UnsupportedFilterError(
            f"unsupported filter part {part!r}: {why}; the device evaluates conjunctions "
            "(AND) of comparisons and BETWEENs of a column with constants",
            part,
        )

    def unsupported_from(self, start: int, why: str) -> UnsupportedFilterError:
        """The part from `start` to the end of the current predicate."""
        depth = 0
        j = self.i
        end = len(self.text)
        while j < len(self.toks):
            t = self.toks[j]
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                if depth == 0:
                    end = t.start
                    break
                depth -= 1
            elif t.word == "AND" and depth == 0 and not self._between_and(j):
                end = t.start
                break
            j += 1
        return self.unsupported(start, end, why)

    def _between_and(self, j: int) -> bool:
        # The AND of a BETWEEN in the current predicate.
        for k in range(j - 1, self.i - 6, -1):
            if k < 0:
                break
            w = self.toks[k].word
            if w == "BETWEEN":
                return True
            if w == "AND":
                return False
        return False

    def conjunction(self) -> List[Comparison]:
        preds = self.predicate()
        while True:
            t = self.peek()
            if t is None or t.text == ")":
                return preds
            if t.word == "AND":
                self.take()
                preds += self.predicate()
            elif t.word == "OR":
                raise self.unsupported(0, len(self.text), "OR is not supported")
            else:
                raise self.unsupported_from(t.start, f"unexpected {t.text!r}")

    def predicate(self) -> List[Comparison]:
        t = self.peek()
        if t is None:
            raise self.unsupported(len(self.text), len(self.text), "a predicate is missing")
        start = t.start
        if t.text == "(":
            self.take()
            inner = self.conjunction()
            close = self.peek()
            if close is None or close.text != ")":
                raise self.unsupported(start, len(self.text), "a parenthesis is not closed")
            self.take()
            return inner
        if t.word in ("NOT", "OR"):
            raise self.unsupported_from(start, f"{t.word} is not supported")
        left_col = self.column_ref()
        if left_col is None:
            # constant op column
            value = self.value(start)
            op_t = self.take()
            if op_t.kind != "op":
                raise self.unsupported_from(start, f"expected a comparison, found {op_t.text!r}")
            col = self.column_ref()
            if col is None:
                raise self.unsupported_from(start, "a comparison needs a column on one side")
            op = _norm_op(op_t.text)
            self.end_of_predicate(start)
            return [Comparison(col, _MIRROR[op], value, self.text[start:self.prev_end()].strip())]
        t = self.peek()
        if t is None:
            raise self.unsupported(start, len(self.text), "a column alone is not a predicate")
        if t.word == "BETWEEN":
            self.take()
            lo = self.value(start)
            and_t = self.take()
            if and_t.word != "AND":
                raise self.unsupported_from(start, "BETWEEN needs AND")
            hi = self.value(start)
            self.end_of_predicate(start)
            return [Comparison(left_col, "between", (lo, hi), self.text[start:self.prev_end()].strip())]
        if t.kind == "op":
            self.take()
            nxt = self.peek()
            if nxt is not None and nxt.kind == "ident" and nxt.word not in _KEYWORDS:
                raise self.unsupported_from(start, "comparing two columns is not supported")
            value = self.value(start)
            self.end_of_predicate(start)
            return [Comparison(left_col, _norm_op(t.text), value, self.text[start:self.prev_end()].strip())]
        if t.word in ("IN", "LIKE", "IS", "NOT"):
            raise self.unsupported_from(start, f"{t.word} is not supported")
        if t.text in "+-*/%|":
            raise self.unsupported_from(start, "arithmetic on a column is not supported")
        raise self.unsupported_from(start, f"unexpected {t.text!r} after column {left_col}")

    def prev_end(self) -> int:
        return self.toks[self.i - 1].end if self.i else 0

    def end_of_predicate(self, start: int) -> None:
        t = self.peek()
        if t is None or t.word == "AND" or t.text == ")":
            return
        if t.word == "OR":
            raise self.unsupported(0, len(self.text), "OR is not supported")
        raise self.unsupported_from(start, f"unexpected {t.text!r}")

    def column_ref(self) -> Optional[str]:
        t = self.peek()
        if t is None or t.kind != "ident" or t.word in _KEYWORDS:
            return None
        nxt = self.peek(1)
        if nxt is not None and nxt.text == "(":
            raise self.unsupported_from(t.start, f"function {t.text}() is not supported")
        self.take()
        # table.column is accepted as column.
        dot = self.peek()
        if dot is not None and dot.text == ".":  # pragma: no cover
            self.take()
            return self.take().text.lower()
        return t.text.lower()

    def value(self, start: int) -> Value:
        v: Value = self.term(start)
        while True:
            t = self.peek()
            if t is None or t.text not in ("+", "-"):
                return v
            self.take()
            w = self.term(start)
            v = _add(v, w, t.text == "-", lambda why: self.unsupported_from(start, why))

    def term(self, start: int) -> Any:
        t = self.take()
        if t.kind == "num":
            return Fraction(t.text)
        if t.text == "-":
            n = self.take()
            if n.kind != "num":
                raise self.unsupported_from(start, "a minus sign needs a number")
            return -Fraction(n.text)
        if t.kind == "str":
            return t.text[1:-1].replace("''", "'")
        if t.word == "DATE":
            s = self.take()
            if s.kind != "str":
                raise self.unsupported_from(start, "DATE needs a 'yyyy-mm-dd' string")
            return _date(s.text[1:-1], lambda why: self.unsupported_from(start, why))
        if t.word == "INTERVAL":
            s = self.take()
            unit = self.take()
            if s.kind != "str" and s.kind != "num":
                raise self.unsupported_from(start, "INTERVAL needs a count")
            if unit.word not in _UNITS:
                raise self.unsupported_from(start, f"INTERVAL unit {unit.text!r} is not DAY, MONTH or YEAR")
            try:
                count = int(s.text.strip("'").strip())
            except ValueError:
                raise self.unsupported_from(start, f"INTERVAL count {s.text} is not an integer") from None
            return ("interval", count, unit.word.rstrip("S"))
        if t.kind == "ident" and t.word not in _KEYWORDS:
            raise self.unsupported_from(start, f"{t.text} is not a constant (arithmetic on columns is not supported)")
        raise self.unsupported_from(start, f"unexpected {t.text!r} where a constant belongs")


def _norm_op(op: str) -> str:
    return {"==": "=", "<>": "!="}.get(op, op)


def _date(text: str, fail: Any) -> _dt.date:
    try:
        return _dt.date.fromisoformat(text.strip())
    except ValueError:
        raise fail(f"{text!r} is not a yyyy-mm-dd date") from None


def _add_months(d: _dt.date, months: int) -> _dt.date:
    m = d.month - 1 + months
    y = d.year + m // 12
    m = m % 12 + 1
    return _dt.date(y, m, min(d.day, calendar.monthrange(y, m)[1]))


def _add(a: Any, b: Any, minus: bool, fail: Any) -> Any:
    if isinstance(a, str) and isinstance(b, tuple):
        a = _date(a, fail)
    if isinstance(a, _dt.date) and isinstance(b, tuple):
        _, n, unit = b
        n = -n if minus else n
        if unit == "DAY":
            return a + _dt.timedelta(days=n)
        if unit == "MONTH":
            return _add_months(a, n)
        return _add_months(a, 12 * n)
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a - b if minus else a + b
    raise fail("only numbers add to numbers and intervals to dates")


def parse(text: str) -> List[Comparison]:
    """The comparisons of a filter (see the module doc)."""
    if not isinstance(text, str):
        raise TypeError(f"filter must be a str, not {type(text).__name__}")
    if not text.strip():
        return []
    p = _Parser(text)
    for t in p.toks:
        if t.kind == "other":
            raise p.unsupported(t.start, t.end, f"unexpected character {t.text!r}")
        if t.kind == "str" and not t.text.endswith("'"):  # pragma: no cover
            raise p.unsupported(t.start, t.end, "unterminated string")
    preds = p.conjunction()
    rest = p.peek()
    if rest is not None:
        raise p.unsupported(rest.start, len(text), f"unexpected {rest.text!r}")
    return preds


# -- binding to a schema ------------------------------------------------------------

_EPOCH = _dt.date(1970, 1, 1)
#: The smallest and largest stored value of each column type (csx-data's domain).
_BOUNDS: Dict[str, Tuple[int, int]] = {t: _native.filter_domain(t) for t in _native.filter_types()}


def _floor(x: Fraction) -> int:
    return x.numerator // x.denominator


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _scaled(col: Any, value: Any, c: Comparison) -> Fraction:
    """The constant as a (possibly fractional) stored value of a numeric or date
    column."""
    if col.type == "date":
        if isinstance(value, str):
            value = _date(value, lambda why: UnsupportedFilterError(f"{c.text}: {why}", c.text))
        if not isinstance(value, _dt.date):
            raise UnsupportedFilterError(
                f"unsupported filter part {c.text!r}: column {col.name} is a date; compare it with DATE 'yyyy-mm-dd'",
                c.text,
            )
        return Fraction((value - _EPOCH).days)
    if not isinstance(value, Fraction):
        raise UnsupportedFilterError(
            f"unsupported filter part {c.text!r}: column {col.name} is {col.type}; compare it with a number",
            c.text,
        )
    return value * (10 ** col.scale) if col.type == "decimal" else value


def _dict_bounds(entries: Sequence[str], op: str, s: str) -> Tuple[int, int, Tuple[int, ...]]:
    """Code range for `code op s` over a sorted dictionary."""
    n = len(entries)
    lo_i = bisect.bisect_left(entries, s)
    hi_i = bisect.bisect_right(entries, s)
    found = lo_i < hi_i
    if op == "=":
        return (lo_i, lo_i, ()) if found else (1, 0, ())
    if op == "!=":
        return (0, n - 1, (lo_i,) if found else ())
    if op == "<":
        return (0, lo_i - 1, ())
    if op == "<=":
        return (0, hi_i - 1, ())
    if op == ">":
        return (hi_i, n - 1, ())
    return (lo_i, n - 1, ())  # >=


def bind(comparisons: Sequence[Comparison], schema: Any, dictionaries: Mapping[str, Sequence[str]]) -> List[Range]:
    """Inclusive stored-value ranges, one per filtered column (comparisons on one
    column intersect). ``dictionaries`` holds the sorted entries of each dict column
    filtered."""
    ranges: Dict[str, Range] = {}
    order: List[str] = []
    for c in comparisons:
        try:
            col = schema.column(c.column)
        except ValueError as e:
            raise QueryError(f"filter {c.text!r}: {e}") from None
        lo_b, hi_b = _BOUNDS[col.type]
        values: Optional[Tuple[int, ...]] = None
        if c.op == "in":
            values = _in_values(col, c, dictionaries)
            pieces: List[Tuple[str, Any]] = []
        elif c.op == "between":
            pieces = [(">=", c.value[0]), ("<=", c.value[1])]
        else:
            pieces = [(c.op, c.value)]
        lo, hi = lo_b, hi_b
        excl: Tuple[int, ...] = ()
        for op, value in pieces:
            if col.type == "dict":
                if not isinstance(value, str):
                    raise UnsupportedFilterError(
                        f"unsupported filter part {c.text!r}: column {col.name} holds strings; compare it with a 'string'",
                        c.text,
                    )
                a, b, ex = _dict_bounds(list(dictionaries[col.name]), op, value)
            else:
                ex = ()
                x = _scaled(col, value, c)
                if op == "=":
                    a, b, ex = (int(x), int(x), ()) if x.denominator == 1 else (1, 0, ())
                elif op == "!=":
                    a, b, ex = lo_b, hi_b, ((int(x),) if x.denominator == 1 else ())
                elif op == "<":
                    a, b, ex = lo_b, _ceil(x) - 1, ()
                elif op == "<=":
                    a, b, ex = lo_b, _floor(x), ()
                elif op == ">":
                    a, b, ex = _floor(x) + 1, hi_b, ()
                else:
                    a, b, ex = _ceil(x), hi_b, ()
            lo, hi, excl = max(lo, a), min(hi, b), excl + ex
        prev = ranges.get(col.name)
        if prev is not None:
            lo, hi, excl = max(lo, prev.lo), min(hi, prev.hi), prev.excluded + excl
            if prev.values is not None:
                values = prev.values if values is None else tuple(v for v in values if v in set(prev.values))
        else:
            order.append(col.name)
        lo, hi = max(lo, lo_b), min(hi, hi_b)
        excluded = tuple(sorted(set(e for e in excl if lo <= e <= hi)))
        if values is not None:
            values = tuple(sorted(set(v for v in values if lo <= v <= hi and v not in excluded)))
            excluded = ()
        ranges[col.name] = Range(col.name, lo, hi, excluded, values)
    return [ranges[n] for n in order]


def _in_values(col: Any, c: Comparison, dictionaries: Mapping[str, Sequence[str]]) -> Tuple[int, ...]:
    """The stored values of an IN list (values the column cannot hold are dropped)."""
    out = []
    if col.type == "dict":
        entries = list(dictionaries[col.name])
        for v in c.value:
            if not isinstance(v, str):
                raise UnsupportedFilterError(
                    f"unsupported filter part {c.text!r}: column {col.name} holds strings; compare it with a 'string'",
                    c.text,
                )
            i = bisect.bisect_left(entries, v)
            if i < len(entries) and entries[i] == v:
                out.append(i)
        return tuple(out)
    lo_b, hi_b = _BOUNDS[col.type]
    for v in c.value:
        x = _scaled(col, v, c)
        if x.denominator == 1 and lo_b <= x <= hi_b:
            out.append(int(x))
    return tuple(out)


#: Most value ranges the device's filter evaluates on one column (csx-data's RANGES_MAX).
RANGES_MAX: int = _native.RANGES_MAX


def raw_ranges(r: Range, type: str) -> int:
    """How many ranges of raw (unsigned) values the device's filter needs for ``r`` on
    a column of ``type``: at most :data:`RANGES_MAX` compile (a signed interval across
    zero is two). csx-data's compilation counts them, the one the scan runs."""
    if r.empty:
        return 0
    preds: List[Tuple[str, str, List[int]]] = []
    if r.values is not None:
        preds.append((r.column, "in", list(r.values)))
    else:
        preds.append((r.column, "between", [r.lo, r.hi]))
        preds += [(r.column, "!=", [e]) for e in r.excluded]
    ranges = _native.filter_raw_ranges(r.column, type, preds)
    return 0 if ranges is None else len(ranges)
