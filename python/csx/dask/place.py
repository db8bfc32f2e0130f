"""Placement: spreading a columnar table over the storage nodes.

:func:`put` splits each table by row ranges into ``partitions`` partitions (rows
``n * i // N .. n * (i + 1) // N``), each a columnar table of its own on ``replicas``
nodes: partition ``i`` on nodes ``i, i + 1, ..., i + R - 1`` (mod the node count), so
every node holds about ``R / nodes`` of the rows and the copies of one partition are
on different nodes. A partition's column files are byte ranges of the table's (the
values are fixed-width); dictionary files are copied whole, so every code keeps its
meaning.

Order of writes, for crash safety: every partition's files, its ``schema.json`` last;
a copy of the table's catalogue entry on every node that holds a partition
(``.csx-dask-PLACEMENT/catalogue.json``) and a flush of every node; then the catalogue
(atomically); then the previous placement's files are deleted.
:func:`recover_catalogue` rebuilds a lost catalogue from the nodes' copies. Partitions live under a directory named by a new placement id, so
a crash at any point leaves the old catalogue pointing at the old, intact files.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .. import arrow as carrow
from .catalogue import PartitionEntry, TableEntry
from .cluster import Cluster, connect

__all__ = ["put", "drop_table", "recover_catalogue", "PARTITIONS_MAX"]

#: Partitions a table may be split into.
PARTITIONS_MAX = 65536
_READ_MAX = 64 << 20
#: The copy of a placement's catalogue entry on each of its nodes.
NODE_COPY_FILE = "catalogue.json"
NODE_COPY_FORMAT = "csx-dask-placement"


class _LocalTable:
    """A local columnar table directory, its schema read and checked by csx-data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def schema(self) -> carrow.TableSchema:
        return carrow.read_local_schema(self.path)


def _tables_of(dataset: Any, table: Optional[str]) -> List[Tuple[str, Any]]:
    """[(device table path, local table dir or Arrow table)]."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover
        pa = None
    if pa is not None and isinstance(dataset, pa.Table):
        if table is None:
            raise ValueError("table is required when dataset is an Arrow table (the device path to place it at)")
        return [(_abs("table", table), dataset)]
    if not isinstance(dataset, (str, os.PathLike)):
        raise TypeError(f"dataset must be a local directory or a pyarrow.Table, not {type(dataset).__name__}")
    root = os.path.abspath(os.fspath(dataset))
    if not os.path.isdir(root):
        raise ValueError(f"dataset {root!r} is not a directory")
    base = _abs("table", table) if table is not None else "/" + os.path.basename(root.rstrip("/"))
    if os.path.isfile(os.path.join(root, carrow.SCHEMA_FILE)):
        return [(base, root)]
    subs = sorted(
        d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, carrow.SCHEMA_FILE))
    )
    if not subs:
        raise ValueError(
            f"dataset {root!r} is neither a columnar table (no {carrow.SCHEMA_FILE}) nor a directory of tables"
        )
    return [(f"{base.rstrip('/')}/{d}", os.path.join(root, d)) for d in subs]


def _abs(name: str, path: str) -> str:
    if not isinstance(path, str):
        raise TypeError(f"{name} must be a device path (str), not {type(path).__name__}")
    if not path.startswith("/") or path.rstrip("/") == "":
        raise ValueError(f"{name} must be an absolute device path below /, got {path!r}")
    return path.rstrip("/")


def _check_count(name: str, value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} is {value}; it must be between {lo} and {hi} ({what})")
    return value


def _schema_json(info: carrow.TableSchema, rows: int) -> bytes:
    cols = []
    for c in info.columns:
        d: Dict[str, Any] = {"name": c.name, "type": c.type}
        if c.scale:
            d["scale"] = c.scale
        if c.entries:
            d["entries"] = c.entries
        cols.append(d)
    return json.dumps(
        {"format": carrow.FORMAT_NAME, "version": carrow.FORMAT_VERSION_RAW, "table": info.table, "rows": rows, "columns": cols},
        indent=2,
    ).encode()


def _columns_json(info: carrow.TableSchema) -> List[Dict[str, Any]]:
    return [{"name": c.name, "type": c.type, "scale": c.scale, "entries": c.entries} for c in info.columns]


def _read_range(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    if len(data) != length:
        raise ValueError(f"{path}: {length} bytes at offset {offset} expected, the file has fewer")
    return data


def _put_local_partition(dev: Any, local: str, info: carrow.TableSchema, dest: str, first: int, rows: int) -> int:
    moved = 0
    for c in info.columns:
        src = os.path.join(local, f"{c.name}.col")
        size = os.path.getsize(src)
        if size != info.rows * c.width:
            raise ValueError(f"{src}: {size} bytes, expected {info.rows * c.width} ({info.rows} rows of {c.width} bytes)")
        # Large partitions go in pieces of at most _READ_MAX bytes of local memory.
        total = rows * c.width
        if total <= _READ_MAX:
            moved += dev.put(f"{dest}/{c.name}.col", _read_range(src, first * c.width, total))
        else:
            import tempfile

            with tempfile.NamedTemporaryFile(prefix="csx-dask-part-") as tmp:
                done = 0
                while done < total:
                    n = min(_READ_MAX, total - done)
                    tmp.write(_read_range(src, first * c.width + done, n))
                    done += n
                tmp.flush()
                moved += dev.put_file(tmp.name, f"{dest}/{c.name}.col")
        if c.type == "dict":
            moved += dev.put_file(os.path.join(local, f"{c.name}.dict"), f"{dest}/{c.name}.dict")
    moved += dev.put(f"{dest}/{carrow.SCHEMA_FILE}", _schema_json(info, rows))
    return int(moved)


def _remove_tree(dev: Any, root: str) -> None:
    """Best effort: every file under ``root`` on ``dev``, then the directories."""
    try:
        files = dev.ls(root)
    except Exception:  # nothing there, or the node is gone: nothing to remove
        return
    dirs = set()
    for f in files:
        try:
            dev.rm(f.path)
        except Exception:
            continue
        d = f.path.rsplit("/", 1)[0]
        while d.startswith(root) and d not in dirs:
            dirs.add(d)
            d = d.rsplit("/", 1)[0]
    for d in sorted(dirs, key=len, reverse=True):
        try:
            dev.rm(d)
        except Exception:
            pass


def put(
    dataset: Any,
    cluster: Cluster,
    partitions: Union[int, Mapping[str, int]] = 1,
    replicas: int = 1,
    *,
    table: Optional[str] = None,
    progress: bool = False,
) -> Dict[str, TableEntry]:
    """Places ``dataset`` on ``cluster``'s nodes and records it in the catalogue.

    ``dataset``: a local columnar table directory (``schema.json`` and column files,
    as ``csx gen tpch|ssb`` writes them), a directory of such tables (a whole
    ``csx gen`` output) or a ``pyarrow.Table``. ``table``: the device path (default
    ``/NAME`` of the directory; a directory of tables goes to ``/NAME/TABLE``).
    ``partitions``: per table, an int or ``{table name: int}`` (tables not named get
    one partition); at most one partition per row. ``replicas``: copies of each
    partition, on different nodes (at most the node count). Returns the catalogue
    entries, by device path. ``progress`` prints a line per partition to stderr."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a csx.dask.Cluster, not {type(cluster).__name__}")
    _check_count("replicas", replicas, 1, len(cluster.nodes), f"the cluster has {len(cluster.nodes)} nodes")
    targets = _tables_of(dataset, table)
    if isinstance(partitions, Mapping):
        names = {t.rsplit("/", 1)[-1] for t, _ in targets}
        unknown = set(partitions) - names
        if unknown:
            raise ValueError(f"partitions names unknown tables: {', '.join(sorted(unknown))}; tables: {', '.join(sorted(names))}")
        counts = {t: partitions.get(t.rsplit("/", 1)[-1], 1) for t, _ in targets}
    else:
        counts = {t: partitions for t, _ in targets}
    for t, n in counts.items():
        _check_count(f"partitions of {t}", n, 1, PARTITIONS_MAX, "the limit of partitions per table")
    out: Dict[str, TableEntry] = {}
    for dest, src in targets:
        out[dest] = _put_table(cluster, dest, src, counts[dest], replicas, progress)
    return out


def _put_table(cluster: Cluster, dest: str, src: Any, nparts: int, replicas: int, progress: bool) -> TableEntry:
    info: Optional[carrow.TableSchema] = None
    if isinstance(src, str):
        info = _LocalTable(src).schema()
        if info.version != carrow.FORMAT_VERSION_RAW:
            # Encoded column files are not sliced by byte ranges: the table is read
            # (csx-data's reader) and its partitions written like an Arrow table's
            # (raw, as every partition is).
            src = carrow.read_local_table(src)
            info = None
    rows = info.rows if info is not None else src.num_rows
    nparts = max(1, min(nparts, rows))
    placement = secrets.token_hex(8)
    root = f"{dest}/.csx-dask-{placement}"
    nodes = cluster.nodes
    parts: List[PartitionEntry] = []
    columns: Optional[List[Dict[str, Any]]] = _columns_json(info) if info is not None else None
    used = set()
    for i in range(nparts):
        first = rows * i // nparts
        n = rows * (i + 1) // nparts - first
        holders = [nodes[(i + k) % len(nodes)] for k in range(replicas)]
        path = f"{root}/p{i:04d}"
        for node in holders:
            dev = connect(node.uri)
            if info is not None:
                _put_local_partition(dev, src, info, path, first, n)
            else:
                # Raw column files (version 1): a λ reads a partition's column bytes.
                written = carrow._put_table(dev, path, src.slice(first, n), dest.rsplit("/", 1)[-1], raw=True)
                if columns is None:
                    columns = _columns_json(written)
            used.add(node.uri)
        parts.append(PartitionEntry(index=i, first_row=first, rows=n, path=path, nodes=[h.name for h in holders]))
        if progress:
            print(
                f"[csx.dask.put] {dest}: partition {i + 1}/{nparts} (rows {first}..{first + n}) on {', '.join(h.name for h in holders)}",
                file=sys.stderr,
                flush=True,
            )
    assert columns is not None
    entry = TableEntry(table=dest, rows=rows, placement=placement, replicas=replicas, columns=columns, partitions=parts)
    # A copy of the entry on every node that holds a partition, written once all the
    # partitions are there (see recover_catalogue), then a flush of every node.
    copy = json.dumps({"format": NODE_COPY_FORMAT, "created_ns": time.time_ns(), "table": dest, "entry": entry.to_json()}).encode()
    for uri in sorted(used):
        dev = connect(uri)
        dev.put(f"{root}/{NODE_COPY_FILE}", copy)
        dev.flush()
    old = cluster.catalogue.update(dest, entry)
    if old is not None and old.placement != placement:
        drop_files(cluster, old)
    return entry


def drop_files(cluster: Cluster, entry: TableEntry) -> None:
    """Deletes a placement's files from the nodes that are reachable (best effort)."""
    root = f"{entry.table}/.csx-dask-{entry.placement}"
    for name in entry.nodes:
        try:
            uri = cluster.node(name).uri
            _remove_tree(connect(uri), root)
        except Exception:  # an unknown or unreachable node keeps its stale copy
            continue


def drop_table(cluster: Cluster, table: str) -> None:
    """Removes ``table`` from the catalogue, then its files from the nodes."""
    old = cluster.catalogue.update(table, None)
    if old is not None:
        drop_files(cluster, old)


def recover_catalogue(cluster: Cluster) -> List[str]:
    """Rebuilds the catalogue's entries from the copies on the reachable nodes (when
    the local catalogue file was lost): for each table, the newest placement whose
    copy a node holds. Returns the tables recovered. Unreachable nodes are skipped;
    a table whose partitions are on them still reads from the other replicas."""
    from .catalogue import _entry

    best: Dict[str, Tuple[int, Dict[str, Any]]] = {}
    for node in cluster.nodes:
        try:
            dev = connect(node.uri)
            files = [f.path for f in dev.ls("/") if f.path.endswith(f"/{NODE_COPY_FILE}") and "/.csx-dask-" in f.path]
            for path in files:
                try:
                    raw = json.loads(bytes(dev.get(path)))
                except ValueError:
                    continue  # a torn copy: another node has a whole one
                if not isinstance(raw, dict) or raw.get("format") != NODE_COPY_FORMAT:
                    continue
                table, created = str(raw.get("table")), int(raw.get("created_ns", 0))
                if table not in best or created > best[table][0]:
                    best[table] = (created, raw["entry"])
        except Exception:  # an unreachable node: the others may hold the copies
            continue
    out = []
    for table, (_created, raw_entry) in sorted(best.items()):
        cluster.catalogue.update(table, _entry(f"{NODE_COPY_FILE} on the nodes", table, raw_entry))
        out.append(table)
    return out
