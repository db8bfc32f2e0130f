"""Parsing the filters a device scan can evaluate.

A filter is a conjunction (``AND``) of comparisons between a column and a constant::

    l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR
    AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 24

Comparisons: ``=``, ``==``, ``!=``, ``<>``, ``<``, ``<=``, ``>``, ``>=`` and
``BETWEEN a AND b`` (inclusive), with the column on the left (or on the right of a
comparison, which is mirrored). Constants: integers, decimals, ``'strings'``,
``DATE 'yyyy-mm-dd'``, a date plus or minus ``INTERVAL 'n' DAY|MONTH|YEAR``, and sums
and differences of numbers (written in ASCII digits). Parentheses group conjunctions.

Anything else (``OR``, ``NOT``, ``IN``, ``LIKE``, ``IS NULL``, functions, arithmetic on a
column, a comparison of two columns) raises :class:`csx.UnsupportedFilterError` whose
``part`` is the text the device cannot evaluate.

:func:`parse` returns :class:`Comparison` values; :func:`bind` turns them, against a
table's schema, into inclusive integer ranges over the stored values (dates as days,
decimals scaled, strings as dictionary codes), which is what the device evaluates.
Both are csx-data's (``csx_data::filter``, through the native module): one parser and
one binder serve Rust and Python.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

from . import _native
from .errors import QueryError, UnsupportedFilterError

__all__ = ["Comparison", "Range", "parse", "bind"]

Value = Union[Fraction, str, _dt.date]

_UNITS = ("DAY", "MONTH", "YEAR")


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


def _constant(kind: str, text: str, count: int) -> Any:
    """A constant from the native module as csx.filter's values."""
    if kind == "num":
        return Fraction(text)
    if kind == "date":
        return _dt.date.fromisoformat(text)
    if kind == "interval":
        return ("interval", count, text)
    return text


def _number_text(x: Fraction) -> str:
    """``x`` as exact decimal text. A fraction with no finite decimal (1/3) becomes its
    first 60 places and a trailing 1: strictly between the same 60-place neighbours,
    so it compares with every number of at most 60 places as ``x`` does."""
    den, twos, fives = x.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    places = max(twos, fives) if den == 1 else 60
    scaled, rest = divmod(abs(x.numerator) * 10**places, x.denominator)
    digits = str(scaled).rjust(places + 1, "0")
    text = digits[: len(digits) - places] + ("." + digits[len(digits) - places :] if places else "")
    return ("-" if x < 0 else "") + text + ("1" if rest else "")


def _native_constant(v: Any) -> Tuple[str, str, int]:
    if isinstance(v, Fraction):
        return ("num", _number_text(v), 0)
    if isinstance(v, str):
        return ("str", v, 0)
    if isinstance(v, _dt.date) and not isinstance(v, _dt.datetime):
        return ("date", v.isoformat(), 0)
    if isinstance(v, tuple) and len(v) == 3 and v[0] == "interval" and isinstance(v[1], int) and v[2] in _UNITS:
        return ("interval", v[2], max(-(1 << 63), min(v[1], (1 << 63) - 1)))
    return ("other", repr(v), 0)


def _raise(err: Tuple[str, str, str]) -> NoReturn:
    kind, message, part = err
    if kind == "unsupported":
        raise UnsupportedFilterError(message, part)
    raise QueryError(message)


def parse(text: str) -> List[Comparison]:
    """The comparisons of a filter (see the module doc)."""
    if not isinstance(text, str):
        raise TypeError(f"filter must be a str, not {type(text).__name__}")
    got, err = _native.filter_parse(text)
    if err is not None:
        _raise(err)
    out = []
    for column, op, values, ctext in got:
        consts = [_constant(*v) for v in values]
        value: Any = consts[0] if op not in ("between", "in") else tuple(consts)
        out.append(Comparison(column, op, value, ctext))
    return out


# -- binding to a schema ------------------------------------------------------------

#: The smallest and largest stored value of each column type (csx-data's domain).
_BOUNDS: Dict[str, Tuple[int, int]] = {t: _native.filter_domain(t) for t in _native.filter_types()}


def bind(comparisons: Sequence[Comparison], schema: Any, dictionaries: Mapping[str, Sequence[str]]) -> List[Range]:
    """Inclusive stored-value ranges, one per filtered column (comparisons on one
    column intersect). ``dictionaries`` holds the sorted entries of each dict column
    filtered. A decimal constant with more places than the column's scale rounds as
    each operator needs; a string absent from a dictionary orders between its
    entries."""
    cmps = []
    for c in comparisons:
        values = list(c.value) if c.op in ("between", "in") else [c.value]
        cmps.append((c.column, c.op, [_native_constant(v) for v in values], c.text))
    dicts = {c.column: list(dictionaries[c.column]) for c in comparisons if c.column in dictionaries}
    columns = [(col.name, col.type, col.scale) for col in schema.columns]
    got, err = _native.filter_bind(schema.table, columns, cmps, dicts)
    if err is not None:
        _raise(err)
    return [Range(n, lo, hi, tuple(ex), None if vs is None else tuple(vs)) for n, lo, hi, ex, vs in got]


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
