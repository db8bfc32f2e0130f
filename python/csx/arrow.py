"""Columnar tables on a csx device as Arrow.

A table is a device directory in csx's columnar format (``docs/design/columnar.md``,
written by ``csx gen ssb|tpch`` and put with ``csx put -r``): ``schema.json``, one file
of fixed-width little-endian values per column (``NAME.col``) and, for a
dictionary-encoded string column, its sorted dictionary (``NAME.dict``, entries joined
by newlines).

Column types map to Arrow without a copy after the transfer: the bytes read from the
device stay in one :class:`csx.Buffer` that the Arrow array views
(``pyarrow.py_buffer``):

=========  ==========================================
int32      ``int32``
int64      ``int64``
uint32     ``uint32``
date       ``date32`` (days since 1970-01-01)
decimal    ``decimal64(18, scale)`` (the scaled int64)
dict       ``dictionary(uint32, string)`` (codes viewed, the dictionary decoded)
=========  ==========================================

Every read is validated: a column file of the wrong length, a dictionary with the wrong
number of entries or a code outside the dictionary raises :class:`csx.DataError` naming
the file (and the row), never a wrong answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .errors import DataError

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        f"csx.arrow needs pyarrow ({e}): pip install pyarrow (scripts/setup.sh does)"
    ) from None

__all__ = [
    "Column",
    "TableSchema",
    "read_schema",
    "arrow_type",
    "column_from_buffer",
    "read_column",
    "read_table",
    "put_table",
]

FORMAT_NAME = "csx-columnar"
FORMAT_VERSION = 1
SCHEMA_FILE = "schema.json"
SCHEMA_SIZE_MAX = 1 << 20
DICT_SIZE_MAX = 1 << 30

_WIDTHS = {"int32": 4, "int64": 8, "uint32": 4, "date": 4, "decimal": 8, "dict": 4}
_NUMPY = {"int32": "<i4", "int64": "<i8", "uint32": "<u4", "date": "<i4", "decimal": "<i8", "dict": "<u4"}


@dataclass(frozen=True)
class Column:
    """One column of a table's schema."""

    name: str
    type: str
    scale: int = 0
    entries: int = 0

    @property
    def width(self) -> int:
        """Bytes per value."""
        return _WIDTHS[self.type]

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(_NUMPY[self.type])


@dataclass(frozen=True)
class TableSchema:
    """A table's ``schema.json``: its name, row count and columns."""

    table: str
    rows: int
    columns: List[Column]
    dir: str

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise ValueError(
            f"table {self.table} has no column {name!r}; columns: "
            + ", ".join(c.name for c in self.columns)
        )

    @property
    def names(self) -> List[str]:
        return [c.name for c in self.columns]


def _table_dir(table: str) -> str:
    if not isinstance(table, str):
        raise TypeError(f"table must be a device directory path (str), not {type(table).__name__}")
    if not table.startswith("/"):
        raise ValueError(f"table must be an absolute device path, got {table!r}")
    return table.rstrip("/") or "/"


def read_schema(dev: Any, table: str) -> TableSchema:
    """Reads and validates ``TABLE/schema.json`` on the device."""
    d = _table_dir(table)
    path = f"{d}/{SCHEMA_FILE}"
    size = dev.stat(path).size
    if size > SCHEMA_SIZE_MAX:
        raise DataError(f"{path}: {size} bytes, the limit for a schema is {SCHEMA_SIZE_MAX}")
    try:
        raw = json.loads(bytes(dev.get(path)))
    except ValueError as e:
        raise DataError(f"{path}: bad schema: not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: bad schema: not a JSON object")
    if raw.get("format") != FORMAT_NAME:
        raise DataError(f"{path}: bad schema: format is {raw.get('format')!r}, expected {FORMAT_NAME!r}")
    if raw.get("version") != FORMAT_VERSION:
        raise DataError(
            f"{path}: bad schema: version {raw.get('version')!r} is not supported, "
            f"this package reads version {FORMAT_VERSION}"
        )
    rows = raw.get("rows")
    if not isinstance(rows, int) or rows < 0 or rows > (1 << 32) - 1:
        raise DataError(f"{path}: bad schema: rows {rows!r} is not an integer in [0, 2^32-1]")
    cols = []
    for i, c in enumerate(raw.get("columns") or []):
        if not isinstance(c, dict) or c.get("type") not in _WIDTHS or not isinstance(c.get("name"), str):
            raise DataError(f"{path}: bad schema: column {i} is {c!r}; types: {', '.join(_WIDTHS)}")
        cols.append(
            Column(
                name=c["name"],
                type=c["type"],
                scale=int(c.get("scale", 0)),
                entries=int(c.get("entries", 0)),
            )
        )
    if not cols:
        raise DataError(f"{path}: bad schema: no columns")
    return TableSchema(table=str(raw.get("table", "")), rows=rows, columns=cols, dir=d)


def arrow_type(col: Column) -> "pa.DataType":
    """The Arrow type of a column (see the module doc)."""
    if col.type == "int32":
        return pa.int32()
    if col.type == "int64":
        return pa.int64()
    if col.type == "uint32":
        return pa.uint32()
    if col.type == "date":
        return pa.date32()
    if col.type == "decimal":
        return pa.decimal64(18, col.scale)
    return pa.dictionary(pa.uint32(), pa.string())


def decode_dictionary(data: bytes, entries: int, path: str) -> "pa.Array":
    """A dictionary file's entries as an Arrow string array, checked against the
    schema's entry count."""
    if entries == 0:
        if data:
            raise DataError(f"{path}: {len(data)} bytes for an empty dictionary")
        return pa.array([], pa.string())
    if not data.endswith(b"\n"):
        raise DataError(f"{path}: the dictionary does not end with a newline")
    items = data[:-1].split(b"\n")
    if len(items) != entries:
        raise DataError(f"{path}: {len(items)} dictionary entries, the schema says {entries}")
    try:
        return pa.array([s.decode("utf-8") for s in items], pa.string())
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: a dictionary entry is not UTF-8: {e}") from None


def check_codes(codes: np.ndarray, entries: int, path: str, first_row: int = 0) -> None:
    """Raises DataError naming the first row whose code is outside the dictionary."""
    bad = np.flatnonzero(codes >= entries)
    if bad.size:
        row = int(bad[0])
        raise DataError(
            f"{path}: row {first_row + row}: dictionary index {int(codes[row])} out of range, "
            f"the dictionary has {entries} entries"
        )


def column_from_buffer(
    buf: Any,
    col: Column,
    rows: int,
    path: str,
    dictionary: Optional["pa.Array"] = None,
    first_row: int = 0,
) -> "pa.Array":
    """An Arrow array over ``rows`` values of ``col`` in ``buf`` (a csx.Buffer or any
    bytes-like object), without copying the values; the length and dictionary codes
    are checked and a failure names ``path`` (and the row)."""
    expected = rows * col.width
    if len(buf) != expected:
        raise DataError(
            f"{path}: {len(buf)} bytes, expected {expected} ({rows} rows of {col.width} bytes)"
        )
    data = pa.py_buffer(buf)
    if col.type == "dict":
        if dictionary is None:
            raise ValueError(f"column {col.name} is dict: give its dictionary")
        codes = np.frombuffer(buf, dtype="<u4")
        check_codes(codes, len(dictionary), path, first_row)
        indices = pa.Array.from_buffers(pa.uint32(), rows, [None, data])
        return pa.DictionaryArray.from_arrays(indices, dictionary)
    return pa.Array.from_buffers(arrow_type(col), rows, [None, data])


def read_dictionary(dev: Any, schema: TableSchema, col: Column) -> "pa.Array":
    path = f"{schema.dir}/{col.name}.dict"
    size = dev.stat(path).size
    if size > DICT_SIZE_MAX:
        raise DataError(f"{path}: {size} bytes, the limit for a dictionary is {DICT_SIZE_MAX}")
    return decode_dictionary(bytes(dev.get(path)), col.entries, path)


def read_column(dev: Any, schema: TableSchema, name: str) -> "pa.Array":
    """One whole column of a device table as an Arrow array."""
    col = schema.column(name)
    path = f"{schema.dir}/{col.name}.col"
    dictionary = read_dictionary(dev, schema, col) if col.type == "dict" else None
    return column_from_buffer(dev.get(path), col, schema.rows, path, dictionary)


def read_table(dev: Any, table: str, columns: Optional[Sequence[str]] = None) -> "pa.Table":
    """The device table ``table`` (a directory) as an Arrow table: every column, or
    the ones named in ``columns``, in that order. Reads whole columns to the host:
    use :func:`csx.duckdb.scan` (or :func:`csx.scan`) to filter on the device."""
    schema = read_schema(dev, table)
    names = schema.names if columns is None else _column_names(columns)
    arrays: Dict[str, Any] = {}
    for n in names:
        arrays[n] = read_column(dev, schema, n)
    return pa.table(arrays)


def _column_names(columns: Any) -> List[str]:
    if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
        raise TypeError(f"columns must be a list of column names, not {type(columns).__name__}")
    for i, c in enumerate(columns):
        if not isinstance(c, str):
            raise TypeError(f"columns[{i}] must be a str, not {type(c).__name__}")
    if not columns:
        raise ValueError("columns is empty")
    return list(columns)


# -- writing ------------------------------------------------------------------------

_NAME_OK = set("abcdefghijklmnopqrstuvwxyz0123456789_")


def _check_name(kind: str, name: str) -> None:
    if not (1 <= len(name) <= 64) or not set(name) <= _NAME_OK:
        raise ValueError(f"{kind} name {name!r} must be 1 to 64 characters of a-z, 0-9 and _")


def _encode_column(name: str, arr: Any) -> "tuple[Column, bytes, Optional[bytes]]":
    """(schema column, column bytes, dictionary bytes) of an Arrow array."""
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise ValueError(f"column {name} has {arr.null_count} nulls; the columnar format has no nulls")
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    if pa.types.is_int32(t):
        return Column(name, "int32"), arr.to_numpy().astype("<i4").tobytes(), None
    if pa.types.is_int64(t):
        return Column(name, "int64"), arr.to_numpy().astype("<i8").tobytes(), None
    if pa.types.is_uint32(t):
        return Column(name, "uint32"), arr.to_numpy().astype("<u4").tobytes(), None
    if pa.types.is_date32(t):
        days = arr.cast(pa.int32()).to_numpy()
        return Column(name, "date"), days.astype("<i4").tobytes(), None
    if pa.types.is_decimal(t):
        if t.precision > 18:
            raise ValueError(f"column {name} is {t}: precision over 18 does not fit the int64 of a decimal column")
        # The unscaled integers: decimal128 stores 16-byte little-endian two's
        # complement values, whose low 8 bytes are the int64 when precision <= 18.
        d128 = arr.cast(pa.decimal128(max(t.precision, 1), t.scale))
        words = np.frombuffer(d128.buffers()[1], dtype="<i8")
        off = d128.offset
        scaled = words[2 * off : 2 * (off + len(d128)) : 2]
        return Column(name, "decimal", scale=t.scale), scaled.astype("<i8").tobytes(), None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        uniq = pc.unique(arr).cast(pa.string()).to_pylist()
        for s in uniq:
            if "\n" in s:
                raise ValueError(f"column {name}: a value holds a newline, which a dictionary cannot store")
        entries = sorted(uniq)
        codes = pc.index_in(arr.cast(pa.string()), value_set=pa.array(entries, pa.string()))
        data = codes.to_numpy().astype("<u4").tobytes()
        dict_bytes = "".join(e + "\n" for e in entries).encode("utf-8")
        return Column(name, "dict", entries=len(entries)), data, dict_bytes
    raise ValueError(
        f"column {name} is {t}; the columnar format stores int32, int64, uint32, date32, "
        "decimal (precision <= 18) and strings"
    )


def put_table(dev: Any, table: str, data: Any, name: Optional[str] = None) -> TableSchema:
    """Writes the Arrow table ``data`` (or anything ``pyarrow.table`` accepts) to the
    device directory ``table`` in the columnar format: the column files, dictionaries
    and ``schema.json`` (written last, so a reader never sees a schema whose columns
    are not all there). Returns the schema."""
    d = _table_dir(table)
    t = data if isinstance(data, pa.Table) else pa.table(data)
    tname = name or d.rstrip("/").rsplit("/", 1)[-1]
    _check_name("table", tname)
    cols = []
    for field, col in zip(t.schema, t.columns):
        _check_name("column", field.name)
        c, data_bytes, dict_bytes = _encode_column(field.name, col)
        dev.put(f"{d}/{c.name}.col", data_bytes)
        if dict_bytes is not None:
            dev.put(f"{d}/{c.name}.dict", dict_bytes)
        cols.append(c)
    schema = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "table": tname,
        "rows": t.num_rows,
        "columns": [
            {k: v for k, v in (("name", c.name), ("type", c.type), ("scale", c.scale), ("entries", c.entries)) if v or k in ("name", "type")}
            for c in cols
        ],
    }
    dev.put(f"{d}/{SCHEMA_FILE}", json.dumps(schema, indent=2).encode())
    return TableSchema(table=tname, rows=t.num_rows, columns=cols, dir=d)
