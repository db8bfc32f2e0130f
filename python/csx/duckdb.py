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

:func:`sql` takes one SQL statement over csx tables and needs no second filter::

    >>> q = csx.duckdb.sql(con, dev, "SELECT sum(l_extendedprice * l_discount) FROM lineitem "
    ...                    "WHERE l_shipdate >= DATE '1994-01-01' AND l_quantity < 24",
    ...                    tables="/tpch")
    >>> q.fetchall(); print(q.explain())

DuckDB parses the statement; the WHERE conjuncts the device can evaluate (a column
compared with constants: ``= != < <= > >=``, ``BETWEEN``, ``IN``, an ``OR`` of
equalities on one column) run on the device, each csx table is read with only the
columns the statement mentions, and DuckDB runs the rest of the statement (joins, the
other conjuncts, aggregates, ordering) over the device's record batch streams.
``q.stats`` and ``q.explain()`` say which conjunct ran where and why.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa

from . import _sqlplan
from . import arrow as carrow
from .device import Device
from .errors import NotFoundError, QueryError
from .scan import ResidentScans, Scan, ScanStats, table_dictionary, table_schema
from .scan import scan as _scan

try:
    import duckdb as _duckdb
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        f"csx.duckdb needs duckdb ({e}): pip install duckdb (scripts/setup.sh does)"
    ) from None

__all__ = ["scan", "register", "sql", "Query", "PushdownStats", "TablePushdown"]


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
    resident: Union[bool, ResidentScans, None] = None,
) -> Any:
    """A DuckDB relation of the rows of device table ``table`` that pass ``filter``,
    with ``columns`` (all when None); the filter and the projection run on the device.
    The relation reads its stream once. ``chunk_rows``/``engine``/``resident``: see
    :func:`csx.scan.scan`."""
    _check_con(con)
    s = _scan(device, table, columns, filter, chunk_rows=chunk_rows, engine=engine, resident=resident)
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
    resident: Union[bool, ResidentScans, None] = None,
) -> Scan:
    """Registers the pushdown scan as the view ``name`` of ``con`` (for SQL; it can be
    read once) and returns the scan, whose ``stats`` fill in as DuckDB reads it."""
    _check_con(con)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an identifier, got {name!r}")
    s = _scan(device, table, columns, filter, chunk_rows=chunk_rows, engine=engine, resident=resident)
    con.register(name, s.reader())
    return s


# -- one SQL statement, its WHERE pushed down ----------------------------------------


@dataclass
class TablePushdown:
    """One reference to a csx table in a statement: its name and alias in the SQL,
    its device directory, the columns read, the conjuncts the device evaluates
    (DuckDB's rendering of each), and the scans that ran for it (one per execution)."""

    table: str
    alias: str
    path: str
    columns: List[str]
    on_device: List[str]
    scans: List[ScanStats] = field(default_factory=list)


@dataclass
class PushdownStats:
    """What ran where for a :func:`sql` statement: ``on_device`` the WHERE conjuncts
    the device evaluated, ``in_duckdb`` the (conjunct, reason) pairs DuckDB evaluated,
    ``tables`` per csx table reference, ``duckdb_sql`` the statement DuckDB ran over the
    device's streams."""

    sql: str
    duckdb_sql: str
    tables: List[TablePushdown]
    on_device: List[str]
    in_duckdb: List[Tuple[str, str]]

    def _sum(self, name: str) -> int:
        return sum(getattr(s, name) for t in self.tables for s in t.scans)

    @property
    def rows_scanned(self) -> int:
        return self._sum("rows_scanned")

    @property
    def rows_kept(self) -> int:
        return self._sum("rows_kept")

    @property
    def bytes_to_host(self) -> int:
        return self._sum("bytes_to_host")

    @property
    def bytes_staged(self) -> int:
        return self._sum("bytes_staged")

    @property
    def modelled_ns(self) -> int:
        return self._sum("modelled_ns")

    def explain(self) -> str:
        lines = ["csx pushdown:"]
        for t in self.tables:
            name = t.table if t.alias == t.table else f"{t.table} AS {t.alias}"
            lines.append(f"  scan {name} ({t.path}) on the device: columns {', '.join(t.columns)}")
            for c in t.on_device:
                lines.append(f"    device filter: {c}")
            if not t.on_device:
                lines.append("    device filter: none (every row)")
            for s in t.scans:
                kept = ""
                if s.resident:
                    kept = ", staged columns reused from resident memory" if s.reused else ", staged columns kept resident"
                lines.append(
                    f"    ran: {s.rows_kept}/{s.rows_scanned} rows kept, {s.bytes_to_host} bytes to the host, "
                    f"{s.bytes_staged} bytes staged, modelled {s.modelled_ns} ns{kept}"
                )
        for text, why in self.in_duckdb:
            lines.append(f"  in DuckDB: {text}  ({why})")
        lines.append(f"  DuckDB runs: {self.duckdb_sql}")
        return "\n".join(lines)


class _DeviceStream:
    """An Arrow C stream source DuckDB can scan any number of times: each stream it
    asks for is a new lazy pushdown scan, started only when DuckDB reads its first
    batch (DuckDB also asks for streams only to learn the schema)."""

    def __init__(
        self,
        device: Device,
        ref: Any,
        arrow_schema: "pa.Schema",
        into: TablePushdown,
        chunk_rows: Optional[int],
        engine: str,
        resident: Union[bool, ResidentScans, None],
    ) -> None:
        self.device, self.ref, self.schema = device, ref, arrow_schema
        self.into, self.chunk_rows, self.engine = into, chunk_rows, engine
        self.resident = resident
        self._lock = threading.Lock()

    def _batches(self) -> Iterator["pa.RecordBatch"]:
        s = Scan(
            self.device,
            self.ref.path,
            self.ref.columns,
            list(self.ref.comparisons),
            chunk_rows=self.chunk_rows,
            engine=self.engine,
            resident=self.resident,
            _schema_info=self.ref.schema,
        )
        with self._lock:
            self.into.scans.append(s.stats)
        yield from s.batches()

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        reader = pa.RecordBatchReader.from_batches(self.schema, self._batches())
        return reader.__arrow_c_stream__(requested_schema)


_views = itertools.count()


class Query:
    """A statement over csx tables (see :func:`sql`): ``relation`` is the DuckDB
    relation (lazy; every execution scans the device again), ``stats`` what ran where.
    The fetch methods run it; :meth:`close` unregisters its views."""

    def __init__(self, con: Any, relation: Any, stats: PushdownStats, views: List[str]) -> None:
        self.con = con
        self.relation = relation
        self.stats = stats
        self._views = views

    def fetchall(self) -> List[Tuple[Any, ...]]:
        return list(self.relation.fetchall())

    def fetchone(self) -> Optional[Tuple[Any, ...]]:
        return self.relation.fetchone()  # type: ignore[no-any-return]

    def arrow(self) -> "pa.Table":
        r = self.relation.arrow()
        return r.read_all() if isinstance(r, pa.RecordBatchReader) else r

    def df(self) -> Any:
        return self.relation.df()

    def tables_columns(self) -> List[List[str]]:
        """The columns read from each csx table reference, sorted."""
        return [sorted(t.columns) for t in self.stats.tables]

    def explain(self) -> str:
        """What ran where (see :class:`PushdownStats`)."""
        return self.stats.explain()

    def close(self) -> None:
        for v in self._views:
            try:
                self.con.unregister(v)
            except Exception:  # pragma: no cover - already gone with the connection
                pass
        self._views = []

    def __enter__(self) -> "Query":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sql(
    con: Any,
    device: Device,
    query: str,
    tables: Union[str, Mapping[str, str]] = "/",
    *,
    chunk_rows: Optional[int] = None,
    engine: str = "jit",
    resident: Union[bool, ResidentScans, None] = None,
) -> Query:
    """One SQL statement over csx tables, its device-evaluable WHERE conjuncts run on
    the device (see the module doc). ``tables``: a device directory whose
    subdirectories are tables (``"/ssb/sf1"``: ``lineorder`` is ``/ssb/sf1/lineorder``;
    the device's root by default), or a mapping of table names to device table
    directories. A table name the
    statement uses that is not a csx table is left to DuckDB (its own tables and
    views). ``resident``: keep each scan's staged columns on the device for the next
    statement (see :mod:`csx.scan`; ``stats`` say what was reused). Returns a
    :class:`Query`."""
    _check_con(con)
    if not isinstance(device, Device):
        raise TypeError(f"device must be a csx.Device, not {type(device).__name__}")
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    if engine not in ("jit", "interp"):
        raise ValueError(f"engine must be 'jit' or 'interp', got {engine!r}")
    if isinstance(tables, str):
        root = carrow._table_dir(tables)

        def path_of(name: str) -> Optional[str]:
            return f"{root.rstrip('/')}/{name}"

    elif isinstance(tables, Mapping):
        lowered = {}
        for k, v in tables.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("tables must map table names (str) to device directories (str)")
            lowered[k.lower()] = carrow._table_dir(v)

        def path_of(name: str) -> Optional[str]:
            return lowered.get(name.lower())

    else:
        raise TypeError(f"tables must be a device directory or a mapping, not {type(tables).__name__}")

    def resolve(name: str) -> Optional[Tuple[str, Any]]:
        p = path_of(name)
        if p is None:
            return None
        try:
            return p, table_schema(device, p)
        except NotFoundError:
            if isinstance(tables, Mapping):
                raise QueryError(f"table {name}: no csx table at {p} (no {p}/schema.json)") from None
            return None

    dict_cache: Dict[Tuple[str, str], List[str]] = {}

    def dictionaries(ref: Any, column: str) -> List[str]:
        key = (ref.path, column)
        if key not in dict_cache:
            d = table_dictionary(device, ref.schema, column)
            dict_cache[key] = [str(x) for x in d.to_pylist()]
        return dict_cache[key]

    prefix = f"csx_view_{next(_views)}_"
    plan = _sqlplan.plan_statement(_sqlplan.private_connection(), query, resolve, dictionaries, prefix)
    infos = []
    for ref in plan.refs:
        infos.append(TablePushdown(ref.name, ref.alias, ref.path, list(ref.columns), list(ref.pushed)))
    stats = PushdownStats(
        sql=query,
        duckdb_sql=plan.duckdb_sql,
        tables=infos,
        on_device=[c.text for c in plan.conjuncts if c.where == "device"],
        in_duckdb=[(c.text, c.reason) for c in plan.conjuncts if c.where == "duckdb"],
    )
    views = []
    try:
        for ref, info in zip(plan.refs, infos):
            schema = pa.schema([(c, carrow.arrow_type(ref.schema.column(c))) for c in ref.columns])
            con.register(ref.view, _DeviceStream(device, ref, schema, info, chunk_rows, engine, resident))
            views.append(ref.view)
        relation = con.sql(plan.duckdb_sql)
    except BaseException:
        for v in views:
            con.unregister(v)
        raise
    return Query(con, relation, stats, views)
