"""Storage nodes and the Dask workers beside them.

A :class:`Cluster` names each storage node (a csx device URI, usually the ``tcp://``
daemon of ``csx device serve`` or :func:`csx.serve` on that machine), the Dask worker
that runs beside it (the worker whose tasks read that node's partitions) and the
catalogue file. A partition's task is restricted to its primary node's worker with
``allow_other_workers=True``: while that worker lives the task runs there, next to the
data; when it is gone the scheduler runs the task elsewhere, and the task reaches the
node over the network.

Connections to the nodes are opened once per worker process and URI and shared by the
worker's threads (:class:`csx.Device` releases the GIL and may be shared); a failed
connection is closed and dropped, and the next use opens a new one.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union
from urllib.parse import urlparse

from ..device import Device
from .catalogue import Catalogue

__all__ = ["Node", "Cluster", "close_connections"]

#: Nodes a cluster may name.
NODES_MAX = 4096


@dataclass(frozen=True)
class Node:
    """A storage node: its name (what the catalogue records), its device URI and the
    address of the Dask worker beside it (None: no worker is pinned)."""

    name: str
    uri: str
    worker: Optional[str] = None


def _host(address: str) -> str:
    try:
        return (urlparse(address).hostname or "").lower()
    except ValueError:
        return ""


class Cluster:
    """Storage nodes, their Dask workers and the catalogue.

    ``nodes``: a list of device URIs (named ``n0``, ``n1``, ... in order) or a mapping
    ``{name: uri}``. ``client``: a ``distributed.Client`` (None: the current default
    client if there is one, else no client; False: no client even when one exists).
    Without a client, :func:`csx.dask.read` builds its collection lazily, unpinned,
    and Dask's current scheduler computes it.
    ``workers``: the worker beside each node, a list in the nodes' order or a mapping
    ``{name: worker address}``; when None, each node gets a worker on the same host
    (round-robin among them), else none. ``catalogue``: the catalogue file (see
    :mod:`csx.dask.catalogue`; default ``$CSX_DASK_CATALOGUE`` or
    ``~/.cache/csx/dask-catalogue.json``)."""

    def __init__(
        self,
        nodes: Union[Sequence[str], Mapping[str, str]],
        *,
        client: Any = None,
        workers: Union[None, Sequence[Optional[str]], Mapping[str, Optional[str]]] = None,
        catalogue: Union[None, str, "os.PathLike[str]"] = None,
    ) -> None:
        if isinstance(nodes, str):
            raise TypeError("nodes must be a list of device URIs or a {name: uri} mapping, not a str")
        if isinstance(nodes, Mapping):
            pairs = [(str(k), v) for k, v in nodes.items()]
        elif isinstance(nodes, (list, tuple)):
            pairs = [(f"n{i}", v) for i, v in enumerate(nodes)]
        else:
            raise TypeError(f"nodes must be a list of device URIs or a {{name: uri}} mapping, not {type(nodes).__name__}")
        if not pairs:
            raise ValueError("nodes is empty: a cluster needs at least one storage node")
        if len(pairs) > NODES_MAX:
            raise ValueError(f"nodes: {len(pairs)} nodes, the limit is {NODES_MAX}")
        for name, uri in pairs:
            if not isinstance(uri, str) or not uri:
                raise TypeError(f"nodes[{name!r}] must be a device URI (str), not {uri!r}")
            if not name or "/" in name or len(name) > 64:
                raise ValueError(f"node name {name!r} must be 1 to 64 characters without '/'")
        if len({u for _, u in pairs}) != len(pairs):
            raise ValueError("nodes: the same URI is listed twice")
        if client is False:
            client = None
        elif client is None:
            try:
                from distributed import default_client

                client = default_client()
            except (ImportError, ValueError):
                client = None
        self.client = client
        names = [n for n, _ in pairs]
        chosen: Dict[str, Optional[str]] = {}
        if workers is None:
            chosen = self._match_workers(pairs)
        elif isinstance(workers, Mapping):
            unknown = set(map(str, workers)) - set(names)
            if unknown:
                raise ValueError(f"workers names unknown nodes: {', '.join(sorted(unknown))}; nodes: {', '.join(names)}")
            chosen = {n: workers.get(n) for n in names}
        elif isinstance(workers, (list, tuple)):
            if len(workers) != len(pairs):
                raise ValueError(f"workers has {len(workers)} entries, the cluster has {len(pairs)} nodes")
            chosen = dict(zip(names, workers))
        else:
            raise TypeError(f"workers must be a list, a mapping or None, not {type(workers).__name__}")
        self.nodes: List[Node] = [Node(n, u, chosen.get(n)) for n, u in pairs]
        path = catalogue if catalogue is not None else os.environ.get("CSX_DASK_CATALOGUE") or os.path.join(
            os.path.expanduser("~"), ".cache", "csx", "dask-catalogue.json"
        )
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"catalogue must be a path, not {type(path).__name__}")
        self.catalogue = Catalogue(path)

    def _match_workers(self, pairs: List[Any]) -> Dict[str, Optional[str]]:
        if self.client is None:
            return {}
        addrs = sorted(self.client.scheduler_info().get("workers", {}))
        out: Dict[str, Optional[str]] = {}
        used: Dict[str, int] = {}
        for name, uri in pairs:
            h = _host(uri)
            same = [a for a in addrs if _host(a) == h] or ([] if h not in ("127.0.0.1", "localhost", "::1") else addrs)
            if same:
                k = used.get(h, 0)
                out[name] = same[k % len(same)]
                used[h] = k + 1
            else:
                out[name] = None
        return out

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in the cluster; nodes: {', '.join(n.name for n in self.nodes)}")

    @property
    def names(self) -> List[str]:
        return [n.name for n in self.nodes]

    def uris(self) -> Dict[str, str]:
        return {n.name: n.uri for n in self.nodes}

    def __repr__(self) -> str:
        return f"csx.dask.Cluster({[(n.name, n.uri, n.worker) for n in self.nodes]!r}, catalogue={self.catalogue.path!r})"


# -- connections (per process) -----------------------------------------------------

_lock = threading.Lock()
_devices: Dict[str, Device] = {}


def connect(uri: str) -> Device:
    """The process's shared connection to the device at ``uri``."""
    with _lock:
        dev = _devices.get(uri)
        if dev is not None and not dev.closed:
            return dev
    dev = Device.open(uri)
    with _lock:
        other = _devices.get(uri)
        if other is not None and not other.closed:
            dev.close()
            return other
        _devices[uri] = dev
    return dev


def drop(uri: str, dev: Optional[Device] = None) -> None:
    """Closes and forgets the connection to ``uri`` (after a failure on it)."""
    with _lock:
        cur = _devices.get(uri)
        if cur is not None and (dev is None or cur is dev):
            del _devices[uri]
        else:
            cur = dev
    if cur is not None:
        try:
            cur.close()
        except Exception:  # the connection is already broken: nothing to save
            pass


def close_connections() -> None:
    """Closes every connection this process holds to a storage node."""
    with _lock:
        devs = list(_devices.items())
        _devices.clear()
    for _uri, dev in devs:
        try:
            dev.close()
        except Exception:  # a node that is gone: closing is best effort
            pass
