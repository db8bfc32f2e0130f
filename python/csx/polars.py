"""Polars over csx tables, with the projection, the filter and the row limit pushed to
the device.

>>> import polars as pl, csx.polars
>>> li = csx.polars.Source(dev, "/tpch/lineitem")
>>> (li.lazy()
...    .filter((pl.col("l_shipdate") >= pl.date(1994, 1, 1)) & (pl.col("l_quantity") < 24))
...    .select((pl.col("l_extendedprice") * pl.col("l_discount")).sum())
...    .collect())
>>> print(li.explain())                       # what ran where, per scan

:meth:`Source.lazy` is a LazyFrame over a Polars IO source
(``polars.io.plugins.register_io_source``). When Polars collects it, it hands the
source the columns it needs, the predicate it pushed down and the row limit. The
predicate's conjuncts the device can evaluate (a column compared with constants:
``== != < <= > >=``, ``is_between``, ``is_in``, an ``|`` of equalities on one column)
run on the device in a :mod:`csx.scan`; the others run in Polars on the kept rows,
and :attr:`Source.runs` says which ran where and why. The predicate is read from
Polars' own serialization of the expression (``Expr.meta.serialize``), and its
constants are evaluated by Polars.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import io
import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Dict, Generator, Iterator, List, Optional, Tuple

import pyarrow as pa

from . import arrow as carrow
from .device import Device
from .errors import UnsupportedFilterError
from .filter import RANGES_MAX, Comparison, bind, raw_ranges
from .scan import Scan, ScanStats, table_dictionary, table_schema

try:
    import polars as pl
    from polars.io.plugins import register_io_source
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"csx.polars needs polars ({e}): pip install polars") from None

__all__ = ["Source", "PolarsScan", "scan"]

_OPS = {"Eq": "=", "NotEq": "!=", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}
_MIRROR = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NOT_CONSTANT = {"Column", "Columns", "Nth", "Len", "Agg", "Window", "Selector", "DtypeColumn", "IndexColumn"}


@dataclass
class PolarsScan:
    """One collection of a :class:`Source`: the columns Polars asked for and the
    columns read, the predicate's conjuncts that ran on the device, those that ran in
    Polars (with the reason), the row limit, the rows returned and the device scan's
    stats."""

    with_columns: Optional[List[str]]
    columns: List[str]
    on_device: List[str]
    in_polars: List[Tuple[str, str]]
    n_rows: Optional[int]
    rows: int = 0
    stats: ScanStats = field(default_factory=ScanStats)


def _polars_type(col: Any) -> Any:
    if col.type == "int32":
        return pl.Int32
    if col.type == "int64":
        return pl.Int64
    if col.type == "uint32":
        return pl.UInt32
    if col.type == "date":
        return pl.Date
    if col.type == "decimal":
        return pl.Decimal(18, col.scale)
    return pl.String


def _has_column(node: Any) -> bool:
    if isinstance(node, dict):
        return any(k in _NOT_CONSTANT or _has_column(v) for k, v in node.items())
    if isinstance(node, list):
        return any(_has_column(v) for v in node)
    return False


def _expr(node: Any) -> "pl.Expr":
    return pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")


def _text(node: Any) -> str:
    return str(_expr(node))


def _value(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        raise UnsupportedFilterError(f"the constant {v!r} is not a number, string or date", repr(v))
    if isinstance(v, int):
        return Fraction(v)
    if isinstance(v, decimal.Decimal):
        return Fraction(v)
    if isinstance(v, float):
        raise UnsupportedFilterError("a floating-point constant compares approximately", repr(v))
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None or v.time() != _dt.time(0):
            raise UnsupportedFilterError(f"the datetime {v} is not a whole day", str(v))
        return v.date()
    if isinstance(v, (_dt.date, str)):
        return v
    raise UnsupportedFilterError(f"the constant {v!r} ({type(v).__name__}) is not a number, string or date", repr(v))


class Source:
    """A csx table as a Polars IO source (see the module doc). ``runs`` has one
    :class:`PolarsScan` per collection."""

    def __init__(self, device: Device, table: str, *, chunk_rows: Optional[int] = None, engine: str = "jit") -> None:
        if not isinstance(device, Device):
            raise TypeError(f"device must be a csx.Device, not {type(device).__name__}")
        if engine not in ("jit", "interp"):
            raise ValueError(f"engine must be 'jit' or 'interp', got {engine!r}")
        self.device = device
        self.table = table
        self.engine = engine
        self.chunk_rows = chunk_rows
        self.schema = table_schema(device, table)
        self.runs: List[PolarsScan] = []
        self._dicts: Dict[str, List[str]] = {}

    def polars_schema(self) -> Dict[str, Any]:
        return {c.name: _polars_type(c) for c in self.schema.columns}

    def lazy(self) -> "pl.LazyFrame":
        """A LazyFrame over the table; every collect scans the device again."""
        return register_io_source(
            self._source,
            schema=self.polars_schema(),
            validate_schema=True,
            explain_name="csx",
            explain_detail=f"{self.device.uri}:{self.schema.dir}",
        )

    def explain(self) -> str:
        lines = []
        for i, r in enumerate(self.runs):
            s = r.stats
            lines.append(f"scan {i} of {self.schema.dir}: columns {', '.join(r.columns)}; row limit {r.n_rows}")
            lines += [f"  device filter: {c}" for c in r.on_device] or ["  device filter: none"]
            lines += [f"  in Polars: {t}  ({why})" for t, why in r.in_polars]
            lines.append(
                f"  ran: {s.rows_kept}/{s.rows_scanned} rows kept on the device, {r.rows} returned, "
                f"{s.bytes_to_host} bytes to the host"
            )
        return "\n".join(lines)

    # -- the predicate -------------------------------------------------------------------

    def _dictionary(self, name: str) -> List[str]:
        if name not in self._dicts:
            d = table_dictionary(self.device, self.schema, name)
            self._dicts[name] = [str(x) for x in d.to_pylist()]
        return self._dicts[name]

    def _column(self, node: Any) -> Optional[str]:
        """The column a plain column reference names, or a cast of one that keeps every
        value (Polars widens a column to compare it: a decimal to more digits, an
        integer to a wider integer)."""
        if isinstance(node, dict) and set(node) == {"Column"} and isinstance(node["Column"], str):
            name = node["Column"]
            if name in self.schema.names:
                return str(name)
        if isinstance(node, dict) and "Cast" in node:
            inner = self._column(node["Cast"].get("expr"))
            if inner is None:
                return None
            col = self.schema.column(inner)
            target = node["Cast"].get("dtype", {}).get("Literal") if isinstance(node["Cast"].get("dtype"), dict) else None
            if col.type == "decimal" and isinstance(target, dict) and "Decimal" in target:
                prec, scale = target["Decimal"]
                if scale is not None and scale >= col.scale and (prec is None or prec - scale >= 18 - col.scale):
                    return inner
            wider = {"int32": ("Int32", "Int64", "Int128"), "uint32": ("UInt32", "UInt64", "Int64", "Int128"),
                     "int64": ("Int64", "Int128")}
            if target in wider.get(col.type, ()):
                return inner
        return None

    def _const(self, node: Any, text: str) -> Any:
        if _has_column(node):
            raise UnsupportedFilterError(
                "the other side is not a constant (compares columns, or a function of a column)", text
            )
        try:
            values = pl.select(_expr(node)).to_series().to_list()
        except Exception as e:  # Polars' own error evaluating the constant
            raise UnsupportedFilterError(f"Polars did not evaluate the constant: {e}", text) from None
        if len(values) != 1:
            raise UnsupportedFilterError("the constant is not a single value", text)
        return values[0]

    def _comparisons(self, node: Dict[str, Any]) -> List[Comparison]:
        text = _text(node)
        if "BinaryExpr" in node:
            b = node["BinaryExpr"]
            op = b.get("op")
            if op in _OPS:
                lc, rc = self._column(b["left"]), self._column(b["right"])
                if lc is not None and rc is None:
                    return [Comparison(lc, _OPS[op], _value(self._const(b["right"], text)), text)]
                if rc is not None and lc is None:
                    return [Comparison(rc, _MIRROR[_OPS[op]], _value(self._const(b["left"], text)), text)]
                if lc is not None:
                    raise UnsupportedFilterError("it compares two columns", text)
                raise UnsupportedFilterError("neither side is a plain column (a function of a column, or a cast)", text)
            if op in ("Or", "LogicalOr"):
                cmps: List[Comparison] = []
                for side in (b["left"], b["right"]):
                    cmps += self._equalities(side, text)
                cols = {c.column for c in cmps}
                if len(cols) != 1:
                    raise UnsupportedFilterError("an OR over more than one column", text)
                values: List[Any] = []
                for c in cmps:
                    values += list(c.value)
                return [Comparison(cols.pop(), "in", tuple(values), text)]
            raise UnsupportedFilterError(f"the operator {op} is not evaluated on the device", text)
        if "Function" in node:
            f = node["Function"]
            fn = f.get("function", {})
            boolean = fn.get("Boolean") if isinstance(fn, dict) else None
            args = f.get("input", [])
            if isinstance(boolean, dict) and "IsBetween" in boolean:
                col = self._column(args[0])
                if col is None:
                    raise UnsupportedFilterError("is_between of something that is not a plain column", text)
                lo, hi = _value(self._const(args[1], text)), _value(self._const(args[2], text))
                closed = boolean["IsBetween"].get("closed", "Both")
                return [
                    Comparison(col, ">=" if closed in ("Both", "Left") else ">", lo, text),
                    Comparison(col, "<=" if closed in ("Both", "Right") else "<", hi, text),
                ]
            if isinstance(boolean, dict) and "IsIn" in boolean:
                return self._equalities(node, text)
        raise UnsupportedFilterError("not a comparison of a column with constants", text)

    def _equalities(self, node: Dict[str, Any], text: str) -> List[Comparison]:
        """An equality or is_in of a column as an IN comparison."""
        if "BinaryExpr" in node and node["BinaryExpr"].get("op") == "Eq":
            b = node["BinaryExpr"]
            lc, rc = self._column(b["left"]), self._column(b["right"])
            col, other = (lc, b["right"]) if lc is not None else (rc, b["left"])
            if col is not None:
                return [Comparison(col, "in", (_value(self._const(other, text)),), text)]
        if "BinaryExpr" in node and node["BinaryExpr"].get("op") in ("Or", "LogicalOr"):
            b = node["BinaryExpr"]
            return self._equalities(b["left"], text) + self._equalities(b["right"], text)
        if "Function" in node:
            f = node["Function"]
            fn = f.get("function", {})
            boolean = fn.get("Boolean") if isinstance(fn, dict) else None
            args = f.get("input", [])
            if isinstance(boolean, dict) and "IsIn" in boolean and len(args) == 2:
                col = self._column(args[0])
                if col is None:
                    raise UnsupportedFilterError("is_in of something that is not a plain column", text)
                v = self._const(args[1], text)
                items = v if isinstance(v, list) else [v]
                return [Comparison(col, "in", tuple(_value(x) for x in items), text)]
        raise UnsupportedFilterError("an OR of something other than equalities and is_in", text)

    def _split(self, predicate: Optional["pl.Expr"]) -> Tuple[List[Comparison], List[str], List[Tuple[str, Any, str]]]:
        """(device comparisons, their texts, [(text, node, reason)] for Polars)."""
        if predicate is None:
            return [], [], []
        tree = json.loads(predicate.meta.serialize(format="json"))
        conjuncts: List[Any] = []

        def flatten(n: Any) -> None:
            if isinstance(n, dict) and "BinaryExpr" in n and n["BinaryExpr"].get("op") in ("And", "LogicalAnd"):
                flatten(n["BinaryExpr"]["left"])
                flatten(n["BinaryExpr"]["right"])
            else:
                conjuncts.append(n)

        flatten(tree)
        device: List[Comparison] = []
        texts: List[str] = []
        rest: List[Tuple[str, Any, str]] = []
        for n in conjuncts:
            try:
                cmps = self._comparisons(n)
                dicts = {
                    c.column: self._dictionary(c.column)
                    for c in cmps
                    if self.schema.column(c.column).type == "dict"
                }
                cols = {c.column for c in cmps}
                for r in bind([c for c in device if c.column in cols] + cmps, self.schema, dicts):
                    count = raw_ranges(r, self.schema.column(r.column).type)
                    if count > RANGES_MAX:
                        raise UnsupportedFilterError(
                            f"with it the device would evaluate {count} value ranges on {r.column}; "
                            f"its limit is {RANGES_MAX}",
                            r.column,
                        )
            except UnsupportedFilterError as e:
                rest.append((_text(n), n, str(e)))
                continue
            device += cmps
            texts.append(_text(n))
        return device, texts, rest

    # -- the IO source -----------------------------------------------------------------

    def _source(
        self, with_columns: Optional[List[str]], predicate: Optional["pl.Expr"], n_rows: Optional[int], batch_size: Optional[int]
    ) -> Iterator["pl.DataFrame"]:
        device, texts, rest = self._split(predicate)
        wanted = list(with_columns) if with_columns is not None else list(self.schema.names)
        needed = set(wanted)
        residual: Optional["pl.Expr"] = None
        for _t, node, _why in rest:
            e = _expr(node)
            residual = e if residual is None else residual & e
            needed |= set(e.meta.root_names())
        columns = [c for c in self.schema.names if c in needed]
        if not columns:
            columns = [min(self.schema.columns, key=lambda c: c.width).name]
        run = PolarsScan(with_columns, columns, texts, [(t, why) for t, _n, why in rest], n_rows)
        self.runs.append(run)
        if n_rows is not None and n_rows <= 0:
            return
        s = Scan(self.device, self.schema.dir, columns, device, chunk_rows=self.chunk_rows, engine=self.engine)
        run.stats = s.stats
        left = n_rows
        batches: Generator["pa.RecordBatch", None, None] = s.batches()
        try:
            for batch in batches:
                df = pl.from_arrow(_plain(batch))
                assert isinstance(df, pl.DataFrame)
                if residual is not None:
                    df = df.filter(residual)
                df = df.select(wanted)
                if left is not None:
                    df = df.head(left)
                    left -= df.height
                run.rows += df.height
                if df.height:
                    yield df
                if left is not None and left <= 0:
                    break
        finally:
            batches.close()


def _plain(batch: "pa.RecordBatch") -> "pa.RecordBatch":
    """Dictionary columns as strings, decimals as decimal128 (what Polars reads)."""
    arrays = []
    fields = []
    for f, a in zip(batch.schema, batch.columns):
        if pa.types.is_dictionary(f.type):
            a = a.cast(pa.string())
        elif pa.types.is_decimal(f.type) and f.type.bit_width == 64:
            a = a.cast(pa.decimal128(18, f.type.scale))
        arrays.append(a)
        fields.append(pa.field(f.name, a.type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def scan(device: Device, table: str, *, chunk_rows: Optional[int] = None, engine: str = "jit") -> "pl.LazyFrame":
    """``Source(device, table).lazy()``: a LazyFrame over a csx table (keep the
    :class:`Source` to read what ran where)."""
    return Source(device, table, chunk_rows=chunk_rows, engine=engine).lazy()

