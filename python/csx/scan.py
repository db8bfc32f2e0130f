"""Pushdown scans: projection and selection of a columnar table, run on the device.

>>> s = csx.scan(dev, "/tpch/lineitem", columns=["l_extendedprice", "l_discount"],
...              filter="l_shipdate >= DATE '1994-01-01' AND l_quantity < 24")
>>> for batch in s.batches(): ...          # pyarrow.RecordBatch of the kept rows
>>> s.stats.bytes_to_host, s.stats.modelled_ns

How it runs: the filter is parsed (:mod:`csx.filter`) and bound to the table's schema
as inclusive ranges over the stored integers (dates as days, decimals scaled,
strings as dictionary codes). csx-data's scan (``csx_data::Scanner``, through
``csx._native``) emits a scan program for the query: raw eBPF with the ranges, the
column types and the dictionary sizes compiled in (no compiler runs). The program is
loaded on the device once per query shape and kept. For each chunk of rows the device
copies the needed column ranges of the files into its memory (the bytes never leave
the device), the program keeps the rows that pass every range and writes their
projected values to its output window in one pass, and only those values are read to
the host, where they become Arrow arrays without a further copy.

The program also checks every dictionary code it reads against the dictionary's size
and stops at the first bad one; the scan then reads the staged codes back and names
the file and the row, so a corrupt column file is an error, never a wrong answer.

Resident scans (``resident=True``, or a :class:`ResidentScans` of your own): the staged
columns of each chunk stay in device memory after the scan, under a byte budget (least
recently used out), and the next scan over the same table and columns, whatever its
predicate, stages nothing and only runs its program over them. Any write to the table's
files since is seen: the scan stages them again (the device must have resident memory,
``csx.Device.init(..., resident_memory=...)``, for an entry to be known current; without
it every scan stages). ``stats.resident``/``stats.reused`` say what happened.

Windows: a scan's device memory (input, output and staged-block windows) is kept between
scans by the device (:func:`device_scan_windows`, at most :data:`SCAN_WINDOWS_BUDGET`
bytes; freed when the device closes), so the next scan stages into memory that is mapped
and needs no zeroing; ``resident=False`` allocates and frees a scan's own instead.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any, Dict, Generator, List, Optional, Sequence, Tuple, Union

import pyarrow as pa

from . import _native
from . import arrow as carrow
from .device import Device, _check_opt_int
from .errors import QueryError
from .filter import _BOUNDS, Comparison, Range, bind, parse

__all__ = ["Scan", "ScanStats", "ResidentScans", "scan", "predicates"]

#: Rows per chunk when not given: bounded so a chunk's windows fit in device memory.
CHUNK_ROWS_DEFAULT = 1 << 20


@dataclass
class ScanStats:
    """What a scan cost: rows scanned and kept, chunks, bytes staged on the device
    (never sent to the host), bytes read to the host, the device's modelled ns
    (every command of the chunks), the device ns the program ran, the host wall ns
    of the chunks, of loading the program (JIT compile included; first use of a query
    shape on a device only) and of the setup (schema, dictionaries, file checks,
    emitting the program)."""

    rows_scanned: int = 0
    rows_kept: int = 0
    chunks: int = 0
    bytes_staged: int = 0
    bytes_to_host: int = 0
    modelled_ns: int = 0
    execute_ns: int = 0
    wall_ns: int = 0
    program_build_ns: int = 0
    setup_ns: int = 0
    fuel_used: int = 0
    #: The staged columns are kept by a resident entry, and were found there (nothing
    #: was staged: ``bytes_staged`` is the entry's check alone).
    resident: bool = False
    reused: bool = False


class ResidentScans:
    """Staged scan inputs kept in ``device``'s memory between scans, at most ``budget``
    bytes (default 1 GiB), each entry invalidated by any write to its table's files
    (see the module doc). ``kept_bytes`` and ``entries`` say what is kept; :meth:`close`
    frees it (closing the device does too for the device's own, ``resident=True``)."""

    def __init__(self, device: Device, budget: Optional[int] = None, *, keep_inputs: bool = True) -> None:
        if not isinstance(device, Device):
            raise TypeError(f"device must be a csx.Device, not {type(device).__name__}")
        self._native = _native.ResidentScans(
            device._dev(), budget=_check_opt_int("budget", budget, 0), keep_inputs=bool(keep_inputs)
        )

    @property
    def kept_bytes(self) -> int:
        return int(self._native.kept_bytes)

    @property
    def entries(self) -> int:
        return int(self._native.entries)

    def close(self) -> None:
        self._native.close()


def device_resident_scans(device: Device) -> ResidentScans:
    """The device's own :class:`ResidentScans` (default budget), made on first use and
    closed with the device."""
    if device._resident_scans is None:
        device._resident_scans = ResidentScans(device)
    keeper: ResidentScans = device._resident_scans
    return keeper


#: Device memory the windows of scans that keep no inputs stay in between scans
#: (:func:`device_scan_windows`): a scan's windows at SF 1 Q6 take about 200 MB.
SCAN_WINDOWS_BUDGET = 256 << 20


def device_scan_windows(device: Device) -> ResidentScans:
    """The windows the device's scans without resident inputs (``resident=None``) keep
    between scans, at most :data:`SCAN_WINDOWS_BUDGET` bytes (made on first use,
    closed with the device): such a scan stages every chunk from the media as before,
    into device memory that is mapped already and needs no zeroing."""
    if device._scan_windows is None:
        device._scan_windows = ResidentScans(device, SCAN_WINDOWS_BUDGET, keep_inputs=False)
    keeper: ResidentScans = device._scan_windows
    return keeper


def _keeper(device: Device, resident: Union[bool, ResidentScans, None]) -> Optional[ResidentScans]:
    if resident is False:
        return None
    if resident is None:
        return device_scan_windows(device)
    if resident is True:
        return device_resident_scans(device)
    if isinstance(resident, ResidentScans):
        return resident
    raise TypeError(f"resident must be a bool or a csx.scan.ResidentScans, not {type(resident).__name__}")


def table_schema(device: Device, table: str) -> carrow.TableSchema:
    """The schema of the columnar table ``table`` on ``device``, read and checked by
    csx-data's reader (the native module), so the scan follows the format csx-data
    reads."""
    d = carrow._table_dir(table)
    name, rows, cols = _native.table_schema(device._dev(), d)
    return carrow.TableSchema(
        table=name,
        rows=rows,
        columns=[carrow.Column(name=n, type=t, scale=s, entries=e) for n, t, s, e in cols],
        dir=d,
    )


def table_dictionary(device: Device, schema: carrow.TableSchema, column: str) -> "pa.Array":
    """A dict column's dictionary (csx-data's reader), as an Arrow string array."""
    return pa.array(_native.table_dictionary(device._dev(), schema.dir, column), pa.string())


def predicates(ranges: Sequence[Range], schema: Any) -> List[Tuple[str, str, List[int]]]:
    """csx-data predicates (column, op, values) for bound filter ranges: op "between"
    with [lo, hi], "!=" with [v], "in" with the values."""
    out: List[Tuple[str, str, List[int]]] = []
    for r in ranges:
        if r.values is not None:
            out.append((r.column, "in", list(r.values)))
            continue
        lo_b, hi_b = _BOUNDS[schema.column(r.column).type]
        if r.lo > lo_b or r.hi < hi_b:
            out.append((r.column, "between", [r.lo, r.hi]))
        for e in r.excluded:
            out.append((r.column, "!=", [e]))
    return out


class Scan:
    """One pushdown scan (see the module doc). Iterate :meth:`batches` once, or take
    :meth:`reader` (a ``pyarrow.RecordBatchReader``) or :meth:`to_table`. ``stats``
    fills in as it runs."""

    def __init__(
        self,
        device: Device,
        table: str,
        columns: Optional[Sequence[str]] = None,
        filter: Union[str, Sequence[Comparison], None] = None,
        *,
        chunk_rows: Optional[int] = None,
        engine: str = "jit",
        resident: Union[bool, ResidentScans, None] = None,
        _schema_info: Optional[carrow.TableSchema] = None,
    ) -> None:
        if not isinstance(device, Device):
            raise TypeError(f"device must be a csx.Device, not {type(device).__name__}")
        keeper = _keeper(device, resident)
        if engine not in ("jit", "interp"):
            raise ValueError(f"engine must be 'jit' or 'interp', got {engine!r}")
        t_setup = time.perf_counter_ns()
        self.device = device
        self.engine = engine
        # A caller that read the schema already (csx.duckdb's planning) passes it; the
        # native scan reads and checks it again on the device either way.
        self.schema_info = _schema_info if _schema_info is not None else table_schema(device, table)
        info = self.schema_info
        names = info.names if columns is None else carrow._column_names(columns)
        self.outputs = [info.column(n) for n in names]
        if filter is None or isinstance(filter, str):
            comparisons = parse(filter or "")
        elif isinstance(filter, (list, tuple)):
            comparisons = list(filter)
            for item in comparisons:
                if not isinstance(item, Comparison):
                    raise TypeError(f"filter must be a str or csx.filter.Comparison values, not {type(item).__name__}")
        else:
            raise TypeError(f"filter must be a str or a list of csx.filter.Comparison, not {type(filter).__name__}")
        dicts: Dict[str, List[str]] = {}
        self._dictionaries: Dict[str, pa.Array] = {}
        for c in {cmp.column for cmp in comparisons} | {o.name for o in self.outputs}:
            try:
                col = info.column(c)
            except ValueError as e:
                raise QueryError(str(e)) from None
            if col.type == "dict":
                d = table_dictionary(device, info, c)
                self._dictionaries[c] = d
                dicts[c] = d.to_pylist()
        self.ranges = bind(comparisons, info, dicts)
        self.empty = any(r.empty for r in self.ranges)
        self.chunk_rows = _check_opt_int("chunk_rows", chunk_rows, 1, 1 << 28) or CHUNK_ROWS_DEFAULT
        self.arrow_schema = pa.schema([(o.name, carrow.arrow_type(o)) for o in self.outputs])
        self.stats = ScanStats()
        # Opening checks every column file's size against the schema (a DataError
        # naming the file) and emits the program.
        self._native = _native.Scanner(
            device._dev(),
            info.dir,
            [o.name for o in self.outputs],
            [] if self.empty else predicates(self.ranges, info),
            engine=engine,
            chunk_rows=self.chunk_rows,
            resident=None if keeper is None else keeper._native,
        )
        self.stats.resident = bool(self._native.resident)
        self.stats.reused = bool(self._native.reused)
        self._consumed = False
        self.stats.setup_ns += time.perf_counter_ns() - t_setup

    @property
    def program(self) -> bytes:
        """The scan program (raw eBPF) the device runs for this query."""
        return bytes(self._native.program)

    def batches(self) -> Generator["pa.RecordBatch", None, None]:
        """The kept rows, one record batch per chunk (an empty scan yields none)."""
        if self._consumed:
            raise QueryError("a scan runs once; make a new one")
        self._consumed = True
        info = self.schema_info
        sc = self._native
        try:
            if self.empty or sc.chunks == 0:
                return
            image = bytes(sc.program)
            t = time.perf_counter_ns()
            # The program stays loaded on the device for the next scan of the same shape.
            key = "csx.scan:" + self.engine + ":" + hashlib.sha256(image).hexdigest()
            fresh = key not in self.device._kept or not self.device._kept[key]._loaded
            prog = self.device._kept_program(key, image, self.engine)
            if fresh:
                self.stats.program_build_ns += time.perf_counter_ns() - t
            else:
                self.stats.setup_ns += time.perf_counter_ns() - t
            sc.use_loaded(prog.slot)
            try:
                while True:
                    t = time.perf_counter_ns()
                    chunk = sc.next()
                    if chunk is None:
                        break
                    st = self.stats
                    st.chunks += 1
                    st.rows_scanned += chunk.rows
                    st.rows_kept += chunk.kept
                    (st.modelled_ns, st.bytes_to_host, st.bytes_staged, st.fuel_used, _, st.execute_ns) = sc.meter
                    arrays: List[Any] = []
                    for col, buf in zip(self.outputs, chunk.columns):
                        arrays.append(
                            carrow.column_from_buffer(
                                buf,
                                col,
                                chunk.kept,
                                f"{info.dir}/{col.name}.col",
                                self._dictionaries.get(col.name),
                                chunk.first_row,
                            )
                        )
                    st.wall_ns += time.perf_counter_ns() - t
                    yield pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
            except BaseException:
                # After a failure the device's state is unknown: free the slot.
                self.device._kept.pop(key, None)
                prog.unload()
                raise
        finally:
            sc.close()

    def reader(self) -> "pa.RecordBatchReader":
        """The scan as a record batch stream (what DuckDB consumes)."""
        return pa.RecordBatchReader.from_batches(self.arrow_schema, self.batches())

    def to_table(self) -> "pa.Table":
        return pa.Table.from_batches(list(self.batches()), schema=self.arrow_schema)


def scan(
    device: Device,
    table: str,
    columns: Optional[Sequence[str]] = None,
    filter: Optional[str] = None,
    *,
    chunk_rows: Optional[int] = None,
    engine: str = "jit",
    resident: Union[bool, ResidentScans, None] = None,
) -> Scan:
    """A pushdown scan of the device table ``table`` (see :class:`Scan`): ``columns``
    to return (all when None), ``filter`` evaluated on the device (see
    :mod:`csx.filter`; :class:`csx.UnsupportedFilterError` names a part it cannot
    evaluate), ``chunk_rows`` rows per chunk (default 1Mi), ``engine`` "jit" or
    "interp", ``resident`` True (the device's :class:`ResidentScans`) or a keeper of
    your own to keep the staged columns for the next scan, None (the default: the scan
    stages, into windows the device keeps between scans) or False (its own windows,
    freed when it ends)."""
    return Scan(device, table, columns, filter, chunk_rows=chunk_rows, engine=engine, resident=resident)


def host_table(device: Device, table: str, columns: Sequence[str]) -> "tuple[pa.Table, Dict[str, int]]":
    """The host-only path: whole columns read to the host as Arrow (File Read
    commands; an encoded column's blocks sent as stored and decoded, and checked, on
    the host by csx-data), with the bytes the device sent (schema, column files and
    dictionaries) and the commands' modelled ns."""
    names = carrow._column_names(list(columns))
    _, arrays, moved, modelled = carrow._read(device, table, names)
    return pa.table({n: arrays[n] for n in names}), {"bytes_to_host": moved, "modelled_ns": modelled}
