"""DuckDB with its projection and selection pushed to a csx device.

>>> import duckdb, csx, csx.duckdb
>>> con = duckdb.connect()
>>> rel = csx.duckdb.scan(con, dev, "/tpch/lineitem",
...                       columns=["l_extendedprice", "l_discount"],
...                       filter="l_shipdate >= '1994-01-01' AND l_discount BETWEEN 0.05 AND 0.07")
>>> rel.aggregate("sum(l_extendedprice * l_discount)").fetchall()

:func:`scan` returns a DuckDB relation over an Arrow record batch stream whose rows
were filtered and projected on the device (:mod:`csx.scan`); DuckDB does the rest of
the query (aggregates, joins, ordering). :func:`register` names the stream as a view
for SQL and returns the :class:`csx.scan.Scan`, whose ``stats`` say what the device
did and what crossed to the host.

A filter the device cannot evaluate raises :class:`csx.UnsupportedFilterError`
naming the part: write it in DuckDB's own WHERE instead.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .device import Device
from .scan import Scan
from .scan import scan as _scan

try:
    import duckdb as _duckdb
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        f"csx.duckdb needs duckdb ({e}): pip install duckdb (scripts/setup.sh does)"
    ) from None

__all__ = ["scan", "register"]


def _check_con(con: Any) -> None:
    if not isinstance(con, _duckdb.DuckDBPyConnection):
        raise TypeError(f"con must be a duckdb connection, not {type(con).__name__}")


def scan(
    con: Any,
    device: Device,
    table: str,
    columns: Optional[Sequence[str]] = None,
    filter: Optional[str] = None,
    *,
    chunk_rows: Optional[int] = None,
    engine: str = "jit",
) -> Any:
    """A DuckDB relation of the rows of device table ``table`` that pass ``filter``,
    with ``columns`` (all when None); the filter and the projection run on the device.
    The relation reads its stream once. ``chunk_rows``/``engine``: see
    :func:`csx.scan.scan`."""
    _check_con(con)
    s = _scan(device, table, columns, filter, chunk_rows=chunk_rows, engine=engine)
    return con.from_arrow(s.reader())


def register(
    con: Any,
    name: str,
    device: Device,
    table: str,
    columns: Optional[Sequence[str]] = None,
    filter: Optional[str] = None,
    *,
    chunk_rows: Optional[int] = None,
    engine: str = "jit",
) -> Scan:
    """Registers the pushdown scan as the view ``name`` of ``con`` (for SQL; it can be
    read once) and returns the scan, whose ``stats`` fill in as DuckDB reads it."""
    _check_con(con)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an identifier, got {name!r}")
    s = _scan(device, table, columns, filter, chunk_rows=chunk_rows, engine=engine)
    con.register(name, s.reader())
    return s
