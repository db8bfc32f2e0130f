"""Reading a placed table: one Dask task per partition, the pushdown on its node.

:func:`read` looks the table up in the catalogue and submits one task per partition,
restricted to the worker beside the partition's primary node (``allow_other_workers``:
if that worker is gone the task runs elsewhere). The task runs :func:`csx.scan.scan`
(the projection and selection, on the device) against the partition's copy on a node
and turns the kept rows into a pandas DataFrame: only those rows crossed from the
node to the worker. With ``lambda_`` it runs a λ over one column file of the
partition instead (:meth:`csx.Device.read_lambda`) and the result is a Dask Bag of
the λ outputs.

Faults. A partition's task tries the partition's replicas in order (the one beside
its worker first): a node that cannot be opened, whose connection breaks mid-scan,
whose copy is missing or differs from the catalogue (rows, columns) or fails the
scan's own checks (a column file of the wrong size, a bad dictionary code), is
recorded and the next replica is tried
from the partition's first row again; the rows of a failed attempt are discarded
whole, so an answer is made only of complete partitions. When every replica failed
the task raises :class:`PartitionUnavailableError` naming the table, the partition,
its rows and each node with its error. A bad query (an unknown column, a filter the
device cannot evaluate) is raised as it is: it fails the same on every node.
"""

from __future__ import annotations

import secrets
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from .. import arrow as carrow
from .. import filter as cfilter
from ..errors import ClosedError, CsxError, DataError, LimitError, OpenError, QueryError, ServerError, TransportError
from ..scan import scan as _scan
from .catalogue import PartitionEntry, TableEntry
from .cluster import Cluster, connect, drop

__all__ = ["read", "stats", "Lambda", "ReadStats", "PartitionUnavailableError", "DECIMALS"]

#: How decimal columns arrive in pandas: "float" (float64 values) or "scaled" (the
#: stored int64, value * 10**scale: exact; :func:`scales` gives the scales).
DECIMALS = ("float", "scaled")

#: A test seam: called as hook(event, node, partition, batch) in the task, event
#: "open" before a node is used and "batch" after each record batch of a scan. A
#: fault-injection test kills a node's daemon from here.
_fault_hook: Optional[Callable[[str, str, int, Optional[int]], None]] = None


class PartitionUnavailableError(CsxError):
    """No replica of a partition could be read. ``table``, ``partition``,
    ``first_row``, ``rows`` and ``attempts`` ([(node, uri, error)]) say which and why."""

    def __init__(self, table: str, partition: int, first_row: int, rows: int, attempts: List[Tuple[str, str, str]]) -> None:
        self.table = table
        self.partition = partition
        self.first_row = first_row
        self.rows = rows
        self.attempts = list(attempts)
        tried = "; ".join(f"node {n} ({u}): {e}" for n, u, e in self.attempts) or "no node holds it"
        super().__init__(
            f"partition {partition} of {table} (rows {first_row}..{first_row + rows}) is unavailable: {tried}"
        )

    def __reduce__(self) -> Any:
        return (PartitionUnavailableError, (self.table, self.partition, self.first_row, self.rows, self.attempts))


@dataclass(frozen=True)
class Lambda:
    """A λ for :func:`read`: ``program`` (an object file's bytes, a path, or C source
    for :func:`csx.build`) run by :meth:`csx.Device.read_lambda` over the partition's
    file of ``column`` (``mode`` "device", the default, runs it on the node), its
    output read as ``dtype``."""

    program: Union[bytes, str]
    column: str
    output_size: Optional[int] = None
    dtype: str = "u1"
    cparam1: int = 0
    cparam2: int = 0
    params: bytes = b""
    mode: str = "device"
    entry: Optional[str] = None


@dataclass
class ReadStats:
    """What a read cost, summed over its partitions: rows scanned and kept, bytes from
    the nodes into the workers, bytes staged on the devices (never sent), the devices'
    modelled ns (in total and by node), the partitions each node served, the worker
    that ran each partition, and every failed attempt (partition, node, error)."""

    partitions: int = 0
    rows_scanned: int = 0
    rows_kept: int = 0
    bytes_to_workers: int = 0
    bytes_staged: int = 0
    modelled_ns: int = 0
    task_wall_ns: int = 0
    modelled_ns_by_node: Dict[str, int] = field(default_factory=dict)
    partitions_by_node: Dict[str, int] = field(default_factory=dict)
    workers: Dict[int, Optional[str]] = field(default_factory=dict)
    failovers: List[Tuple[int, str, str]] = field(default_factory=list)
    per_partition: List[Dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Task:
    table: str
    part: PartitionEntry
    replicas: List[Tuple[str, str, Optional[str]]]  # (node, uri, worker beside it)
    columns: Optional[List[str]]
    filter: Optional[str]
    decimals: str
    chunk_rows: Optional[int]
    engine: str
    lambda_: Optional[Lambda]
    token: str
    schema: Tuple[Tuple[str, str, int], ...]  # (name, type, scale) per column, from the catalogue


class _Items(List[Any]):
    """A Bag partition (the λ outputs) carrying its stats."""

    csx_stats: Dict[str, Any]


def _worker() -> Optional[str]:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return None


def _to_pandas(t: "pa.Table", decimals: str) -> Any:
    cols = []
    names = []
    for f, col in zip(t.schema, t.columns):
        a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_decimal(f.type):
            d = a.cast(pa.decimal128(18, f.type.scale))
            words = np.frombuffer(d.buffers()[1], dtype="<i8")[2 * d.offset : 2 * (d.offset + len(d)) : 2]
            a = pa.array(words.astype(np.int64) if decimals == "scaled" else words / 10.0**f.type.scale)
        elif pa.types.is_dictionary(f.type):
            a = a.cast(pa.string())
        cols.append(a)
        names.append(f.name)
    return pa.table(cols, names=names).to_pandas(date_as_object=False)


def _meta(entry: TableEntry, columns: Optional[Sequence[str]], decimals: str) -> Any:
    cols = {c["name"]: carrow.Column(c["name"], c["type"], int(c.get("scale", 0)), int(c.get("entries", 0))) for c in entry.columns}
    names = list(cols) if columns is None else list(columns)
    empty = pa.table({n: pa.array([], carrow.arrow_type(cols[n])) for n in names})
    return _to_pandas(empty, decimals)


def _check_copy(dev: Any, task: _Task) -> carrow.TableSchema:
    """The node's copy of the partition has the catalogue's rows and columns (else
    :class:`csx.DataError`: a bad copy, and the next replica is tried)."""
    part = task.part
    info = carrow.read_schema(dev, part.path)
    if info.rows != part.rows:
        raise DataError(f"{part.path}/schema.json: {info.rows} rows, the catalogue says partition {part.index} has {part.rows}")
    got = tuple((c.name, c.type, c.scale) for c in info.columns)
    if got != task.schema:
        raise DataError(f"{part.path}/schema.json: columns {list(got)} differ from the catalogue's {list(task.schema)}")
    return info


def _scan_partition(dev: Any, task: _Task, node: str) -> Tuple[Any, Dict[str, Any]]:
    part = task.part
    _check_copy(dev, task)
    s = _scan(dev, part.path, task.columns, task.filter, chunk_rows=task.chunk_rows, engine=task.engine)
    batches = []
    for k, b in enumerate(s.batches()):
        batches.append(b)
        if _fault_hook is not None:
            _fault_hook("batch", node, part.index, k)
    st = s.stats
    if st.rows_scanned not in (0, part.rows) or (st.rows_scanned == 0 and not s.empty and part.rows):
        raise DataError(f"{part.path}: the scan read {st.rows_scanned} rows of {part.rows}")
    table = pa.Table.from_batches(batches, schema=s.arrow_schema)
    stats = {
        "rows_scanned": part.rows if s.empty else st.rows_scanned,
        "rows_kept": st.rows_kept,
        "bytes_to_workers": st.bytes_to_host,
        "bytes_staged": st.bytes_staged,
        "modelled_ns": st.modelled_ns,
    }
    return _to_pandas(table, task.decimals), stats


def _lambda_partition(dev: Any, task: _Task, node: str) -> Tuple[Any, Dict[str, Any]]:
    lam = task.lambda_
    assert lam is not None
    part = task.part
    info = _check_copy(dev, task)
    col = info.column(lam.column)
    path = f"{part.path}/{col.name}.col"
    if part.rows == 0:
        out = np.zeros(0, dtype=lam.dtype)
        return _Items([out]), {"rows_scanned": 0, "rows_kept": 0, "bytes_to_workers": 0, "bytes_staged": 0, "modelled_ns": 0}
    r = dev.read_lambda(
        path,
        lam.program,
        mode=lam.mode,
        output_size=lam.output_size,
        cparam1=lam.cparam1,
        cparam2=lam.cparam2,
        params=lam.params,
        entry=lam.entry,
    )
    if _fault_hook is not None:
        _fault_hook("batch", node, part.index, 0)
    out = r.array(lam.dtype).copy()
    stats = {
        "rows_scanned": part.rows,
        "rows_kept": part.rows,
        "bytes_to_workers": int(out.nbytes),
        "bytes_staged": part.rows * col.width,
        "modelled_ns": int(r.modelled_ns or 0),
    }
    return _Items([out]), stats


def _try_node(task: _Task, node: str, uri: str) -> Any:
    """(result, stats) from the copy on ``node``, or the error (a str) that makes the
    next replica worth trying."""
    # The connection is shared by the worker's threads: another thread that saw it
    # break closes it, and then this one gets ClosedError. That says nothing about the
    # node yet: retry once on a new connection.
    for retry in (False, True):
        dev = None
        try:
            if _fault_hook is not None:
                _fault_hook("open", node, task.part.index, None)
            dev = connect(uri)
            if task.lambda_ is not None:
                return _lambda_partition(dev, task, node)
            return _scan_partition(dev, task, node)
        except (QueryError, LimitError):
            raise  # the query is wrong: it fails the same on every replica
        except ClosedError as e:
            if retry:
                return f"{type(e).__name__}: {e}"
        except (OpenError, TransportError, ServerError) as e:
            drop(uri, dev)  # the connection is broken: the next use opens a new one
            return f"{type(e).__name__}: {e}"
        except CsxError as e:
            return f"{type(e).__name__}: {e}"  # the node answered: its copy is bad
    raise AssertionError("unreachable")  # pragma: no cover


def _run_partition(task: _Task) -> Any:
    """One partition, on the first replica that answers (see the module doc)."""
    t0 = time.perf_counter_ns()
    here = _worker()
    order = sorted(task.replicas, key=lambda r: 0 if (here is not None and r[2] == here) else 1)
    attempts: List[Tuple[str, str, str]] = []
    for node, uri, _w in order:
        got = _try_node(task, node, uri)
        if isinstance(got, str):
            attempts.append((node, uri, got))
            continue
        result, st = got
        st.update(
            partition=task.part.index,
            node=node,
            worker=here,
            failed=[[n, e] for n, _u, e in attempts],
            task_wall_ns=time.perf_counter_ns() - t0,
        )
        if isinstance(result, _Items):
            result.csx_stats = st
        else:
            result.attrs["csx"] = st
        _record_local(task.token, st)
        return result
    raise PartitionUnavailableError(task.table, task.part.index, task.part.first_row, task.part.rows, attempts)


def _stats_of(result: Any) -> Dict[str, Any]:
    if isinstance(result, _Items):
        return dict(result.csx_stats)
    return dict(result.attrs["csx"])


# -- bookkeeping for stats() -------------------------------------------------------

_lock = threading.Lock()
_local_stats: Dict[str, List[Dict[str, Any]]] = {}
_reads: "OrderedDict[str, Tuple[str, Any, List[Any], int]]" = OrderedDict()
_READS_KEPT = 256


def _record_local(token: str, st: Dict[str, Any]) -> None:
    with _lock:
        if token in _local_stats:
            _local_stats[token].append(st)


def _remember(out: Any, token: str, client: Any, futures: List[Any], nparts: int) -> None:
    """Keeps what stats() needs while the collection lives: the registry holds the
    partitions' futures, so it lets go of them (and the workers of the data) when the
    collection is collected."""
    name = _name_of(out)
    with _lock:
        _reads[name] = (token, client, futures, nparts)
        while len(_reads) > _READS_KEPT:
            _, (old, _c, _f, _n) = _reads.popitem(last=False)
            _local_stats.pop(old, None)
    weakref.finalize(out, _forget, name, token)


def _forget(name: str, token: str) -> None:
    with _lock:
        got = _reads.get(name)
        if got is not None and got[0] == token:
            del _reads[name]
        _local_stats.pop(token, None)


def _name_of(obj: Any) -> str:
    n = getattr(obj, "_name", None) or getattr(obj, "name", None)
    if not isinstance(n, str):
        raise TypeError(f"stats() takes what csx.dask.read returned, not {type(obj).__name__}")
    return n


def stats(result: Any) -> ReadStats:
    """What :func:`read` cost, for the DataFrame (or Bag) it returned: waits for every
    partition (an unavailable partition raises its error here too)."""
    with _lock:
        got = _reads.get(_name_of(result))
    if got is None:
        raise ValueError("stats() knows only the collections csx.dask.read returned (the last 256 still alive)")
    token, client, futures, nparts = got
    if client is not None:
        per = client.gather([client.submit(_stats_of, f, pure=False) for f in futures])
    else:
        with _lock:
            per = list(_local_stats.get(token, []))
        if len(per) < nparts:
            raise ValueError(
                f"stats(): {len(per)} of {nparts} partitions have run; compute the collection first "
                "(without a distributed client it runs lazily)"
            )
        # A lazily computed collection may run twice: keep one result per partition.
        per = list({p["partition"]: p for p in per}.values())
    out = ReadStats()
    for p in sorted(per, key=lambda p: p["partition"]):
        out.partitions += 1
        for k in ("rows_scanned", "rows_kept", "bytes_to_workers", "bytes_staged", "modelled_ns", "task_wall_ns"):
            setattr(out, k, getattr(out, k) + int(p[k]))
        node = p["node"]
        out.modelled_ns_by_node[node] = out.modelled_ns_by_node.get(node, 0) + int(p["modelled_ns"])
        out.partitions_by_node[node] = out.partitions_by_node.get(node, 0) + 1
        out.workers[p["partition"]] = p["worker"]
        for n, e in p["failed"]:
            out.failovers.append((p["partition"], n, e))
        out.per_partition.append(p)
    return out


def scales(cluster: Cluster, table: str) -> Dict[str, int]:
    """The scale of each decimal column of a placed table (value = stored / 10**scale)."""
    entry = cluster.catalogue.get(table)
    return {c["name"]: int(c.get("scale", 0)) for c in entry.columns if c["type"] == "decimal"}


def read(
    cluster: Cluster,
    table: str,
    columns: Optional[Sequence[str]] = None,
    filter: Optional[str] = None,
    lambda_: Optional[Lambda] = None,
    *,
    decimals: str = "float",
    chunk_rows: Optional[int] = None,
    engine: str = "jit",
) -> Any:
    """The placed ``table`` as a Dask DataFrame whose partitions are the rows of each
    partition that pass ``filter``, with ``columns`` (all when None): the selection and
    the projection run on the node that holds the partition (see the module doc).
    ``filter``: the device's filter language (:mod:`csx.filter`; a filter it cannot
    evaluate raises :class:`csx.UnsupportedFilterError` here, naming the part).
    ``decimals``: see :data:`DECIMALS`. With ``lambda_`` (a :class:`Lambda`; no
    ``columns`` or ``filter``) the result is a Dask Bag with one item per partition,
    the λ's output as a numpy array.

    With a distributed client the partitions start on their nodes' workers now
    (futures) and the collection is lazy from there; without one the collection is
    lazy and unpinned, computed by Dask's current scheduler when asked.
    :func:`stats` tells what it cost (without a client: once computed, by tasks that
    ran in this process)."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a csx.dask.Cluster, not {type(cluster).__name__}")
    if decimals not in DECIMALS:
        raise ValueError(f"decimals must be one of {', '.join(map(repr, DECIMALS))}, got {decimals!r}")
    if engine not in ("jit", "interp"):
        raise ValueError(f"engine must be 'jit' or 'interp', got {engine!r}")
    entry = cluster.catalogue.get(table)
    known = [c["name"] for c in entry.columns]
    if columns is not None:
        columns = carrow._column_names(list(columns) if isinstance(columns, tuple) else columns)
        for c in columns:
            if c not in known:
                raise ValueError(f"table {entry.table} has no column {c!r}; columns: {', '.join(known)}")
    if filter is not None:
        for cmp in cfilter.parse(filter):
            if cmp.column not in known:
                raise ValueError(f"the filter names column {cmp.column!r}, which table {entry.table} does not have; columns: {', '.join(known)}")
    if lambda_ is not None:
        if not isinstance(lambda_, Lambda):
            raise TypeError(f"lambda_ must be a csx.dask.Lambda, not {type(lambda_).__name__}")
        if columns is not None or filter is not None:
            raise ValueError("lambda_ runs over one column file: give no columns or filter with it")
        if lambda_.column not in known:
            raise ValueError(f"table {entry.table} has no column {lambda_.column!r}; columns: {', '.join(known)}")
        np.dtype(lambda_.dtype)
    token = secrets.token_hex(8)
    schema = tuple((c["name"], c["type"], int(c.get("scale", 0))) for c in entry.columns)
    nodes = {n.name: n for n in cluster.nodes}
    tasks = []
    for p in entry.partitions:
        replicas = [(n, nodes[n].uri, nodes[n].worker) for n in p.nodes if n in nodes]
        missing = [n for n in p.nodes if n not in nodes]
        if not replicas:
            raise PartitionUnavailableError(
                entry.table, p.index, p.first_row, p.rows, [(n, "?", "the cluster has no node of this name") for n in missing]
            )
        tasks.append(_Task(entry.table, p, replicas, columns, filter, decimals, chunk_rows, engine, lambda_, token, schema))
    client = cluster.client
    if client is not None:
        futures = [
            client.submit(
                _run_partition,
                t,
                key=f"csx-read-{token}-{t.part.index}",
                workers=[t.replicas[0][2]] if t.replicas[0][2] else None,
                allow_other_workers=True,
                pure=False,
            )
            for t in tasks
        ]
    if lambda_ is not None:
        import dask.bag as db

        if client is not None:
            out = db.from_delayed(futures)
        else:
            import dask
            from dask.base import compute as dask_compute
            from dask.delayed import delayed as dask_delayed

            out = db.from_delayed([dask_delayed(_run_partition)(t) for t in tasks])
    else:
        import dask.dataframe as dd

        meta = _meta(entry, columns, decimals)
        if client is not None:
            out = dd.from_delayed(futures, meta=meta, verify_meta=False)
        else:
            out = dd.from_map(_run_partition, tasks, meta=meta, enforce_metadata=False, label="csx-read")
    if client is None:
        with _lock:
            _local_stats[token] = []
    _remember(out, token, client, futures if client is not None else [], len(tasks))
    return out
