"""Columnar tables on a csx device as Arrow.

A table is a device directory in csx's columnar format (``docs/design/columnar.md``,
written by ``csx gen ssb|tpch``, put with ``csx put -r``, or by :func:`put_table`):
``schema.json``, one file per column (``NAME.col``: encoded blocks with zone maps and
CRC-32C checksums in version 2, fixed-width values in version 1) and, for a
dictionary-encoded string column, its sorted dictionary (``NAME.dict``).

This module never parses a column file: csx-data's reader and writer (the native
module, the same code ``csx gen`` and the device scans use) do, so every format version
csx-data reads is read here, with every check it makes. Each column comes back as one
:class:`csx.Buffer` of fixed-width little-endian values that the Arrow array views
(``pyarrow.py_buffer``) without a copy:

=========  ==========================================
int32      ``int32``
int64      ``int64``
uint32     ``uint32``
date       ``date32`` (days since 1970-01-01)
decimal    ``decimal64(18, scale)`` (the scaled int64)
dict       ``dictionary(uint32, string)`` (codes viewed, the dictionary decoded)
=========  ==========================================

A bad table raises :class:`csx.DataError` with csx-data's message: a block whose
checksum fails names the table, column, block and part; a column file of the wrong
length, a dictionary with the wrong number of entries or a code outside the dictionary
names the file (and the row). Never a wrong answer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _native
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
    "read_local_schema",
    "read_local_table",
    "put_table",
]

FORMAT_NAME = "csx-columnar"
#: The version csx-data (and :func:`put_table`) writes: encoded blocks.
FORMAT_VERSION = 2
#: The first version: raw fixed-width column files (still read).
FORMAT_VERSION_RAW = 1
SCHEMA_FILE = "schema.json"

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
        """Bytes per value (as read: a version 2 file stores them encoded)."""
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
    version: int = FORMAT_VERSION

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


def _native_device(dev: Any) -> Any:
    native = getattr(dev, "_dev", None)
    if native is None:
        raise TypeError(f"dev must be a csx.Device, not {type(dev).__name__}")
    return native()


_SchemaInfo = Tuple[str, int, int, List[Tuple[str, str, int, int]]]


def _schema_of(info: _SchemaInfo, d: str) -> TableSchema:
    name, version, rows, cols = info
    return TableSchema(
        table=name,
        rows=rows,
        columns=[Column(name=n, type=t, scale=s, entries=e) for n, t, s, e in cols],
        dir=d,
        version=version,
    )


def _read(dev: Any, table: str, columns: Optional[List[str]]) -> "tuple[TableSchema, Dict[str, pa.Array], int, int]":
    """(schema, arrays, bytes the device sent, modelled ns) of ``columns`` (all when
    None; none when empty) of a device table, read by csx-data."""
    d = _table_dir(table)
    native = _native_device(dev)
    info, read, moved, ns = _native.table_read(native, d, columns)
    schema = _schema_of(info, d)
    return schema, _arrays(schema, read), moved, ns


def _arrays(schema: TableSchema, read: Sequence[Tuple[str, Any, Optional[List[str]]]]) -> Dict[str, "pa.Array"]:
    arrays: Dict[str, pa.Array] = {}
    for n, buf, entries in read:
        col = schema.column(n)
        dictionary = None if entries is None else pa.array(entries, pa.string())
        arrays[n] = column_from_buffer(buf, col, schema.rows, f"{schema.dir}/{n}.col", dictionary)
    return arrays


def read_schema(dev: Any, table: str) -> TableSchema:
    """Reads and validates ``TABLE/schema.json`` on the device (csx-data's reader)."""
    return _read(dev, table, [])[0]


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
    """An Arrow array over ``rows`` decoded values of ``col`` in ``buf`` (a csx.Buffer
    or any bytes-like object of fixed-width little-endian values), without copying
    them; the length and dictionary codes are checked and a failure names ``path``
    (and the row)."""
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


def read_column(dev: Any, schema: TableSchema, name: str) -> "pa.Array":
    """One whole column of a device table as an Arrow array."""
    col = schema.column(name)
    return _read(dev, schema.dir, [col.name])[1][col.name]


def read_table(dev: Any, table: str, columns: Optional[Sequence[str]] = None) -> "pa.Table":
    """The device table ``table`` (a directory) as an Arrow table: every column, or
    the ones named in ``columns``, in that order. Reads whole columns to the host:
    use :func:`csx.duckdb.scan` (or :func:`csx.scan`) to filter on the device."""
    names = None if columns is None else _column_names(columns)
    schema, arrays, _, _ = _read(dev, table, names)
    return pa.table({n: arrays[n] for n in (schema.names if names is None else names)})


def _local_read(path: Any, columns: Optional[List[str]]) -> "tuple[TableSchema, Dict[str, pa.Array]]":
    d = os.path.abspath(os.fspath(path))
    info, read = _native.local_table_read(d, columns)
    schema = _schema_of(info, d)
    return schema, _arrays(schema, read)


def read_local_schema(path: Any) -> TableSchema:
    """The schema of the local table directory ``path`` (csx-data's reader; every
    column file's header or length checked). ``dir`` is the absolute local path."""
    return _local_read(path, [])[0]


def read_local_table(path: Any, columns: Optional[Sequence[str]] = None) -> "pa.Table":
    """The local table directory ``path`` (as ``csx gen`` writes it) as an Arrow
    table, read by csx-data like :func:`read_table`."""
    names = None if columns is None else _column_names(columns)
    schema, arrays = _local_read(path, names)
    return pa.table({n: arrays[n] for n in (schema.names if names is None else names)})


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


def _encode_column(name: str, arr: Any) -> "tuple[Column, bytes, Optional[List[str]]]":
    """(schema column, little-endian values, dictionary entries) of an Arrow array:
    what csx-data's writer takes."""
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
        data = codes.to_numpy(zero_copy_only=False).astype("<u4").tobytes()
        return Column(name, "dict", entries=len(entries)), data, entries
    raise ValueError(
        f"column {name} is {t}; the columnar format stores int32, int64, uint32, date32, "
        "decimal (precision <= 18) and strings"
    )


def put_table(dev: Any, table: str, data: Any, name: Optional[str] = None) -> TableSchema:
    """Writes the Arrow table ``data`` (or anything ``pyarrow.table`` accepts) to the
    device directory ``table`` with csx-data's writer, in the format ``csx gen``
    writes (version 2: encoded blocks, zone maps, checksums): the column files,
    dictionaries and ``schema.json`` (put last, so a reader never sees a schema whose
    columns are not all there). Returns the schema."""
    return _put_table(dev, table, data, name, raw=False)


def _put_table(dev: Any, table: str, data: Any, name: Optional[str], raw: bool) -> TableSchema:
    """:func:`put_table`; ``raw`` writes version 1 (raw column files), for a reader of
    a column file's bytes (a λ of :mod:`csx.dask`)."""
    d = _table_dir(table)
    native = _native_device(dev)
    t = data if isinstance(data, pa.Table) else pa.table(data)
    tname = name or d.rstrip("/").rsplit("/", 1)[-1]
    _check_name("table", tname)
    if t.num_columns == 0:
        raise ValueError(f"table {tname} has no columns; the columnar format needs at least one")
    columns: List[Tuple[str, str, int, bytes]] = []
    dictionaries: List[Tuple[str, List[str]]] = []
    for field, col in zip(t.schema, t.columns):
        _check_name("column", field.name)
        c, values, entries = _encode_column(field.name, col)
        columns.append((c.name, c.type, c.scale, values))
        if entries is not None:
            dictionaries.append((c.name, entries))
    info = _native.table_write(native, d, tname, columns, dictionaries, raw)
    return _schema_of(info, d)
