"""csx-data from Python: benchmark data, its Parquet copy, and SSB on the device.

>>> csx.data.generate("tpch", "/tmp/tpch", sf=0.1)        # columnar, one dir per table
{'orders': 150000, 'lineitem': 600572}
>>> csx.data.write_parquet("/tmp/tpch", "/tmp/tpch-parquet")   # the oracle's copy
>>> csx.data.put_dir(dev, "/tmp/tpch", "/tpch")             # csx put -r
>>> r = csx.data.ssb_run(dev, "q3.3", data_dir="/ssb/sf1")  # Delilah's query, offloaded
>>> r.rows, r.modelled_ns, r.bytes_to_host

The generators are csx-data's (``csx gen ssb|tpch``: the specifications'
distributions, deterministic for a seed); so are the SSB runs, and the pushdown scan
behind :func:`csx.scan.scan` and :func:`csx.duckdb.scan`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _native
from .device import Device, _check_opt_int, _check_str, _local_path

__all__ = [
    "generate",
    "write_parquet",
    "put_dir",
    "ssb_queries",
    "ssb_run",
    "SsbRun",
    "STRATEGIES",
    "SPLITS",
    "PROBES",
]

STRATEGIES = ("bitmask", "unrolled", "accel")
SPLITS = ("offload", "host-agg", "host")
PROBES = ("emitted", "operator")

_Path = Union[str, "os.PathLike[str]"]


def generate(kind: str, out: _Path, sf: float, *, seed: int = 1) -> Dict[str, int]:
    """Generates benchmark ``kind`` ("tpch": ORDERS, LINEITEM; "ssb": LINEORDER,
    CUSTOMER, SUPPLIER, PART, DATE) at scale factor ``sf`` (may be fractional) into the
    local directory ``out``; returns {table: rows}."""
    if kind not in ("tpch", "ssb"):
        raise ValueError(f"kind must be 'tpch' or 'ssb', got {kind!r}")
    if isinstance(sf, bool) or not isinstance(sf, (int, float)):
        raise TypeError(f"sf must be a number, not {type(sf).__name__}")
    if not sf > 0:
        raise ValueError(f"sf must be positive, got {sf}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return dict(_native.generate(kind, _local_path("out", out), float(sf), seed))


def write_parquet(dataset: _Path, out: _Path) -> None:
    """Writes ``out/TABLE.parquet`` for every table of a generated dataset (pyarrow)."""
    _native.write_parquet(_local_path("dataset", dataset), _local_path("out", out))


def put_dir(device: Device, local: _Path, dev_dir: str) -> Tuple[int, int, int]:
    """Copies the local directory ``local`` to ``dev_dir`` on the device (``csx put
    -r``); returns (files, directories, bytes)."""
    if not isinstance(device, Device):
        raise TypeError(f"device must be a csx.Device, not {type(device).__name__}")
    _check_str("dev_dir", dev_dir)
    if not dev_dir.startswith("/"):
        raise ValueError(f"dev_dir must be an absolute device path, got {dev_dir!r}")
    return tuple(_native.put_dir(device._dev(), _local_path("local", local), dev_dir))  # type: ignore[return-value]


def ssb_queries() -> Dict[str, str]:
    """The SSB queries csx runs on the device: {"q1.1": SQL as DuckDB runs it, ...}."""
    return {name.lower(): sql for name, sql in _native.ssb_queries()}


@dataclass(frozen=True)
class SsbRun:
    """An SSB query's answer (``rows``: (group keys..., sum) tuples, sorted) and what it
    cost: modelled ns under the device's profile, bytes to the host, media bytes, fuel,
    commands, the phases (name, modelled ns, wall ns), host ns, wall ns, the LINEORDER
    partitions probed at once and the rows joined."""

    query: str
    sql: str
    rows: List[Tuple[Any, ...]]
    split: str
    modelled_ns: int
    bytes_to_host: int
    media_bytes: int
    fuel: int
    commands: int
    phases: List[Tuple[str, int, int]]
    host_ns: int
    wall_ns: int
    partitions: int
    joined: int


def ssb_run(
    device: Device,
    query: str,
    *,
    data_dir: str = "/ssb/sf1",
    split: str = "offload",
    engine: str = "jit",
    strategy: str = "bitmask",
    partitions: Optional[int] = None,
    probe: str = "emitted",
) -> SsbRun:
    """Runs SSB ``query`` (q1.1-q1.3, q3.1-q3.4) over the dataset at ``data_dir`` on the
    device: ``split`` "offload" (every operator on the device), "host-agg" (the host
    aggregates) or "host" (the device only reads); ``engine`` "jit" or "interp";
    ``strategy`` the selection: "bitmask", "unrolled" or "accel"; ``probe`` what joins
    LINEORDER: "emitted" (eBPF made for the query: its selections, the joins and the sum
    in one pass) or "operator" (the filter operators, then the C probe operator)."""
    if not isinstance(device, Device):
        raise TypeError(f"device must be a csx.Device, not {type(device).__name__}")
    _check_str("query", query)
    _check_str("data_dir", data_dir)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
    if engine not in ("jit", "interp"):
        raise ValueError(f"engine must be 'jit' or 'interp', got {engine!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(map(repr, STRATEGIES))}, got {strategy!r}")
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {', '.join(map(repr, PROBES))}, got {probe!r}")
    r = _native.ssb_run(
        device._dev(),
        data_dir,
        query.lower(),
        split=split,
        engine=engine,
        strategy=strategy,
        partitions=_check_opt_int("partitions", partitions, 1, 16),
        probe=probe,
    )
    rows = [tuple(keys) + (value,) for keys, value in json.loads(r.rows_json)]
    return SsbRun(
        query=r.query,
        sql=r.sql,
        rows=rows,
        split=r.split,
        modelled_ns=r.modelled_ns,
        bytes_to_host=r.bytes_to_host,
        media_bytes=r.media_bytes,
        fuel=r.fuel,
        commands=r.commands,
        phases=list(r.phases),
        host_ns=r.host_ns,
        wall_ns=r.wall_ns,
        partitions=r.partitions,
        joined=r.joined,
    )
