"""The catalogue of placed tables: where each partition of each table lives.

One local JSON file (``Cluster(catalogue=PATH)``), rewritten whole and atomically on
every change (a temporary file beside it, fsync, rename, fsync of the directory) under
an advisory lock (``PATH.lock``), so a crash leaves either the old or the new
catalogue, never a torn one::

    {"format": "csx-dask-catalogue", "version": 1,
     "tables": {"/tpch/lineitem": {
         "rows": 60175, "placement": "3f9c...", "replicas": 2,
         "columns": [{"name": "l_shipdate", "type": "date", ...}, ...],
         "partitions": [{"index": 0, "first_row": 0, "rows": 10029,
                         "path": "/tpch/lineitem/.csx-dask-3f9c.../p0000",
                         "nodes": ["n0", "n1"]}, ...]}}}

Each node holding a partition of a table also keeps that table's entry
(``.csx-dask-PLACEMENT/catalogue.json``, see :mod:`csx.dask.place`), from which
:func:`csx.dask.recover_catalogue` rebuilds a lost catalogue.

A partition is a columnar table (``schema.json`` and the column files) at ``path`` on
every node in ``nodes`` (the first is its primary). ``placement`` is new for every
:func:`csx.dask.put`, and the partitions' paths contain it: a path names exactly one
copy of one row range, so any node that holds the path holds the right rows.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from ..errors import CsxError

__all__ = ["Catalogue", "CatalogueError", "TableEntry", "PartitionEntry"]

FORMAT_NAME = "csx-dask-catalogue"
FORMAT_VERSION = 1
#: A catalogue larger than this is refused (it is read whole).
CATALOGUE_SIZE_MAX = 64 << 20


class CatalogueError(CsxError):
    """The catalogue is missing a table, cannot be read or is malformed (the message
    names the file and the entry)."""


@dataclass(frozen=True)
class PartitionEntry:
    """Rows ``first_row .. first_row + rows`` of a table, at ``path`` on ``nodes``."""

    index: int
    first_row: int
    rows: int
    path: str
    nodes: List[str]


@dataclass(frozen=True)
class TableEntry:
    """A placed table: its total rows, columns (the schema's entries), the placement id
    and its partitions in row order."""

    table: str
    rows: int
    placement: str
    replicas: int
    columns: List[Dict[str, Any]]
    partitions: List[PartitionEntry] = field(default_factory=list)

    @property
    def nodes(self) -> List[str]:
        """Every node holding a partition of the table."""
        seen: Dict[str, None] = {}
        for p in self.partitions:
            for n in p.nodes:
                seen.setdefault(n)
        return list(seen)

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        del d["table"]
        return d


def _entry(path: str, table: str, raw: Any) -> TableEntry:
    where = f"{path}: table {table!r}"
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: not a JSON object")
    try:
        parts = []
        for i, p in enumerate(raw["partitions"]):
            e = PartitionEntry(
                index=int(p["index"]),
                first_row=int(p["first_row"]),
                rows=int(p["rows"]),
                path=str(p["path"]),
                nodes=[str(n) for n in p["nodes"]],
            )
            if e.index != i or e.rows < 0 or not e.nodes:
                raise CatalogueError(f"{where}: partition {i} is malformed: {p!r}")
            parts.append(e)
        entry = TableEntry(
            table=table,
            rows=int(raw["rows"]),
            placement=str(raw["placement"]),
            replicas=int(raw["replicas"]),
            columns=list(raw["columns"]),
            partitions=parts,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CatalogueError(f"{where}: malformed entry ({type(e).__name__}: {e})") from None
    covered = 0
    for p in entry.partitions:
        if p.first_row != covered:
            raise CatalogueError(
                f"{where}: partition {p.index} starts at row {p.first_row}, expected {covered} "
                "(partitions must cover the rows in order)"
            )
        covered += p.rows
    if covered != entry.rows:
        raise CatalogueError(f"{where}: partitions cover {covered} rows, the table has {entry.rows}")
    return entry


class Catalogue:
    """The catalogue file at ``path`` (see the module doc). Reads are of the file as it
    is now; :meth:`update` is read-modify-write under the lock."""

    def __init__(self, path: "str | os.PathLike[str]") -> None:
        self.path = os.path.abspath(os.fspath(path))

    def __repr__(self) -> str:
        return f"csx.dask.Catalogue({self.path!r})"

    def _load(self) -> Dict[str, Any]:
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "tables": {}}
        if size > CATALOGUE_SIZE_MAX:
            raise CatalogueError(f"{self.path}: {size} bytes, the limit for a catalogue is {CATALOGUE_SIZE_MAX}")
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
        except ValueError as e:
            raise CatalogueError(f"{self.path}: not JSON: {e}") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
            raise CatalogueError(f"{self.path}: not a csx.dask catalogue (format {raw.get('format') if isinstance(raw, dict) else None!r})")
        if raw.get("version") != FORMAT_VERSION:
            raise CatalogueError(
                f"{self.path}: catalogue version {raw.get('version')!r}, this package reads version {FORMAT_VERSION}"
            )
        if not isinstance(raw.get("tables"), dict):
            raise CatalogueError(f"{self.path}: 'tables' is not an object")
        return raw

    def tables(self) -> List[str]:
        """The placed tables' names (device paths), sorted."""
        return sorted(self._load()["tables"])

    def get(self, table: str) -> TableEntry:
        """The entry of ``table``; :class:`CatalogueError` naming the known tables when
        it is not placed."""
        tables = self._load()["tables"]
        key = _key(table)
        if key not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise CatalogueError(f"{self.path}: table {key!r} is not in the catalogue; placed tables: {known}")
        return _entry(self.path, key, tables[key])

    def find(self, table: str) -> Optional[TableEntry]:
        tables = self._load()["tables"]
        key = _key(table)
        return _entry(self.path, key, tables[key]) if key in tables else None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def update(self, table: str, entry: Optional[TableEntry]) -> Optional[TableEntry]:
        """Sets (or, with None, removes) ``table``'s entry; returns the entry it
        replaced. The whole file is rewritten atomically."""
        key = _key(table)
        with self._locked():
            raw = self._load()
            old_raw = raw["tables"].get(key)
            old = _entry(self.path, key, old_raw) if old_raw is not None else None
            if entry is None:
                raw["tables"].pop(key, None)
            else:
                raw["tables"][key] = entry.to_json()
            self._write(raw)
            return old

    def _write(self, raw: Dict[str, Any]) -> None:
        d = os.path.dirname(self.path)
        data = json.dumps(raw, indent=1, sort_keys=True).encode()
        fd, tmp = tempfile.mkstemp(prefix=".catalogue-", suffix=".tmp", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _key(table: str) -> str:
    if not isinstance(table, str):
        raise TypeError(f"table must be a device path (str), not {type(table).__name__}")
    if not table.startswith("/"):
        raise ValueError(f"table must be an absolute device path, got {table!r}")
    return table.rstrip("/") or "/"
