"""Scale-out: a columnar dataset spread over many csx storage nodes, queried with Dask.

>>> import csx.dask
>>> from distributed import Client
>>> client = Client("tcp://scheduler:8786")
>>> cluster = csx.dask.Cluster(["tcp://node0:4420", "tcp://node1:4420", "tcp://node2:4420"],
...                            client=client, catalogue="/data/csx-catalogue.json")
>>> csx.dask.put("/data/tpch", cluster, partitions=12, replicas=2)   # csx gen tpch output
>>> df = csx.dask.read(cluster, "/tpch/lineitem", columns=["l_extendedprice", "l_discount"],
...                    filter="l_shipdate >= date '1994-01-01' and l_quantity < 24")
>>> (df.l_extendedprice * df.l_discount).sum().compute()
>>> csx.dask.stats(df).bytes_to_workers

Dask schedules; csx does the storage side. The pieces:

- :class:`Cluster` (:mod:`csx.dask.cluster`): the storage nodes (device URIs, usually
  ``tcp://`` daemons: ``csx device serve`` or :func:`csx.serve`), the Dask worker
  beside each, and the catalogue file.
- :func:`put` (:mod:`csx.dask.place`): splits each table by row ranges into
  partitions, each a columnar table of its own on ``replicas`` nodes, and records
  them in the catalogue (:mod:`csx.dask.catalogue`: local JSON, written atomically,
  with a copy of each table's entry on its nodes: :func:`recover_catalogue`).
- :func:`read` (:mod:`csx.dask.pushdown`): a Dask DataFrame with one partition per
  table partition, each computed by a task on the worker beside the partition's node
  running :func:`csx.scan.scan` there (the projection and selection on the device);
  only the kept rows travel. With ``lambda_`` a Bag of λ outputs. A node that fails
  mid-query is replaced by a replica; with no replica left the error names the node
  and the partition. Never a partial partition.
- :mod:`csx.dask.queries`: TPC-H Q6 and Q1 and SSB Q3.3 end to end, answers in
  DuckDB's form; :class:`LocalNodes` (:mod:`csx.dask.local`): daemons on this
  machine for tests and ``python -m csx.bench scaleout``.

Data path of one partition: Dask task (on the node's worker) -> the node's daemon
(tcp) -> the device copies the needed column ranges into its memory and runs the
scan program -> the kept values come back as Arrow -> pandas -> Dask.
"""

from __future__ import annotations

try:
    import dask  # noqa: F401
    import dask.dataframe  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        f"csx.dask needs dask[dataframe] and distributed ({e}): pip install 'dask[dataframe]' distributed "
        "(scripts/python-test.sh does)"
    ) from None

from .catalogue import Catalogue, CatalogueError, PartitionEntry, TableEntry
from .cluster import Cluster, Node, close_connections
from .local import LocalNodes, NodeStartError
from .place import PARTITIONS_MAX, drop_table, put, recover_catalogue
from .pushdown import DECIMALS, Lambda, PartitionUnavailableError, ReadStats, read, scales, stats
from .queries import ssb_q3_3, tpch_q1, tpch_q6

__all__ = [
    "Catalogue",
    "CatalogueError",
    "Cluster",
    "DECIMALS",
    "Lambda",
    "LocalNodes",
    "Node",
    "NodeStartError",
    "PARTITIONS_MAX",
    "PartitionEntry",
    "PartitionUnavailableError",
    "ReadStats",
    "TableEntry",
    "close_connections",
    "drop_table",
    "put",
    "read",
    "recover_catalogue",
    "scales",
    "ssb_q3_3",
    "stats",
    "tpch_q1",
    "tpch_q6",
]
