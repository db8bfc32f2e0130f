"""csx.dask: a dataset placed over three storage nodes (daemon processes on loopback,
started and stopped by the fixtures) and queried with a distributed.LocalCluster of
three workers; every answer checked against DuckDB over the Parquet copy of the
whole data. Fault tests kill a node's daemon (SIGKILL) in the middle of a query."""

import json
import os
import signal
import sys

import duckdb
import numpy as np
import pytest

import csx
import csx.arrow
import csx.data

try:
    import csx.dask
    from distributed import Client, LocalCluster
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"csx.dask's tests need dask[dataframe] and distributed ({e}): run scripts/python-test.sh") from None

from csx.bench.lineitem import Q1, Q6

SF = 0.01


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask-tpch")
    tables = csx.data.generate("tpch", root / "data", SF, seed=5)
    csx.data.write_parquet(root / "data", root / "parquet")
    return root, tables


@pytest.fixture(scope="module")
def ssb(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask-ssb")
    # SF 0.05: the smallest scale whose Q3.3 keeps rows (its cities are rare).
    tables = csx.data.generate("ssb", root / "data", 0.05, seed=1)
    csx.data.write_parquet(root / "data", root / "parquet")
    return root, tables


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=":0") as lc:
        with Client(lc) as c:
            yield c
    csx.dask.close_connections()


def _workers(client):
    return sorted(client.scheduler_info()["workers"])


@pytest.fixture
def nodes(tmp_path):
    """Three fresh daemons (a test may kill one); none is left running after it."""
    n = csx.dask.LocalNodes(tmp_path / "nodes", 3)
    yield n
    procs = [p for p in n.procs if p is not None]
    n.close()
    csx.dask.close_connections()
    assert all(p.poll() is not None for p in procs)


@pytest.fixture
def cluster(nodes, client, tmp_path):
    return csx.dask.Cluster(nodes.uris, client=client, workers=_workers(client), catalogue=tmp_path / "catalogue.json")


@pytest.fixture
def hook():
    """Installs a fault hook for one test."""
    from csx.dask import pushdown

    def install(fn):
        pushdown._fault_hook = fn

    yield install
    pushdown._fault_hook = None


def oracle(sql, parquet_dir, tables):
    con = duckdb.connect()
    for t in tables:
        con.sql(f'create view "{t}" as select * from read_parquet(\'{parquet_dir}/{t}.parquet\')')
    return con.sql(sql).fetchall()


def assert_q1_equal(got, want):
    """Sums and counts exactly; the double averages to 1e-12 relative (see csx.dask.queries)."""
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g[:6] == w[:6] and g[9] == w[9], (g, w)
        for a, b in zip(g[6:9], w[6:9]):
            assert a == pytest.approx(b, rel=1e-12), (g, w)


def test_put_splits_by_rows_with_replicas_and_writes_the_catalogue(cluster, tpch):
    root, tables = tpch
    entries = csx.dask.put(root / "data", cluster, partitions={"lineitem": 6}, replicas=2, table="/tpch")
    li = entries["/tpch/lineitem"]
    assert set(entries) == {"/tpch/lineitem", "/tpch/orders"}
    assert li.rows == tables["lineitem"] and len(li.partitions) == 6
    assert len(entries["/tpch/orders"].partitions) == 1
    raw = json.loads(open(cluster.catalogue.path).read())
    assert raw["tables"]["/tpch/lineitem"]["placement"] == li.placement
    assert cluster.catalogue.get("/tpch/lineitem") == li
    local = csx.arrow.read_local_table(root / "data" / "lineitem", ["l_shipdate", "l_returnflag"])
    per_node = {}
    for p in li.partitions:
        assert len(set(p.nodes)) == 2
        for name in p.nodes:
            per_node[name] = per_node.get(name, 0) + 1
            with csx.Device.open(cluster.node(name).uri) as dev:
                got = csx.arrow.read_table(dev, p.path, ["l_shipdate", "l_returnflag"])
                assert got.to_pylist() == local.slice(p.first_row, p.rows).to_pylist()
    assert per_node == {"n0": 4, "n1": 4, "n2": 4}
    # The catalogue is lost: the nodes' copies rebuild it.
    os.unlink(cluster.catalogue.path)
    with pytest.raises(csx.dask.CatalogueError):
        cluster.catalogue.get("/tpch/lineitem")
    assert csx.dask.recover_catalogue(cluster) == ["/tpch/lineitem", "/tpch/orders"]
    assert cluster.catalogue.get("/tpch/lineitem") == li
    # Placing again writes a new placement and deletes the old one's files.
    again = csx.dask.put(root / "data" / "lineitem", cluster, partitions=3, replicas=1, table="/tpch/lineitem")
    assert again["/tpch/lineitem"].placement != li.placement
    for name in cluster.names:
        with csx.Device.open(cluster.node(name).uri) as dev:
            assert not [f for f in dev.ls("/tpch/lineitem") if li.placement in f.path]


def test_tpch_q6_and_q1_equal_duckdb_with_pushdown_on_each_node(cluster, client, tpch):
    root, tables = tpch
    csx.dask.put(root / "data", cluster, partitions={"lineitem": 6}, replicas=2, table="/tpch")
    want6 = oracle(Q6.replace("{t}", "lineitem"), root / "parquet", tables)
    assert csx.dask.tpch_q6(cluster) == want6 and want6[0][0] is not None
    assert_q1_equal(csx.dask.tpch_q1(cluster), oracle(Q1.replace("{t}", "lineitem"), root / "parquet", tables))
    # Each partition ran on the worker beside its primary node, and only the kept
    # rows' two decimals came into the workers.
    df = csx.dask.read(cluster, "/tpch/lineitem", ["l_extendedprice", "l_discount"], csx.dask.queries.Q6_FILTER)
    st = csx.dask.stats(df)
    entry = cluster.catalogue.get("/tpch/lineitem")
    for p in entry.partitions:
        assert st.workers[p.index] == cluster.node(p.nodes[0]).worker
    assert st.partitions_by_node == {"n0": 2, "n1": 2, "n2": 2}
    assert st.failovers == []
    assert st.rows_scanned == tables["lineitem"]
    assert st.bytes_to_workers == st.rows_kept * 16 == len(df) * 16
    column_bytes = tables["lineitem"] * (4 + 8 + 8 + 8)
    assert st.bytes_to_workers * 5 <= column_bytes
    assert len(set(st.workers.values())) == 3


def test_ssb_q33_equals_duckdb(cluster, ssb):
    root, tables = ssb
    csx.dask.put(root / "data", cluster, partitions={"lineorder": 6}, replicas=2, table="/ssb")
    got = csx.dask.ssb_q3_3(cluster, "/ssb")
    want = oracle(csx.data.ssb_queries()["q3.3"], root / "parquet", tables)
    assert got, "Q3.3 kept no row at this scale: the test checks nothing"
    assert got == sorted(want, key=lambda t: (t[2], -t[3], t[0], t[1]))


def test_read_returns_typed_columns_and_a_lambda_bag(cluster, tpch):
    root, tables = tpch
    csx.dask.put(root / "data" / "lineitem", cluster, partitions=5, replicas=1, table="/tpch/lineitem")
    df = csx.dask.read(cluster, "/tpch/lineitem", ["l_shipdate", "l_returnflag", "l_tax"], "l_returnflag = 'R'")
    pdf = df.compute()
    assert str(pdf["l_shipdate"].dtype).startswith("datetime64")
    assert set(pdf["l_returnflag"]) == {"R"}
    want = oracle("select count(*), sum(l_tax) from lineitem where l_returnflag = 'R'", root / "parquet", tables)[0]
    assert len(pdf) == want[0]
    assert pdf["l_tax"].sum() == pytest.approx(float(want[1]), rel=1e-12)
    # A λ per partition: stats64 over each partition's l_extendedprice (scaled cents).
    bag = csx.dask.read(
        cluster, "/tpch/lineitem", lambda_=csx.dask.Lambda(csx.sdk_program("stats64"), "l_extendedprice", output_size=32, dtype="<u8")
    )
    parts = bag.compute()
    assert len(parts) == 5
    count = sum(int(p[0]) for p in parts)
    total = sum(int(p[1]) for p in parts)
    lo, hi = min(int(p[2]) for p in parts), max(int(p[3]) for p in parts)
    w = oracle("select count(*), sum(l_extendedprice), min(l_extendedprice), max(l_extendedprice) from lineitem", root / "parquet", tables)[0]
    assert (count, total, lo, hi) == (w[0], int(w[1].scaleb(2)), int(w[2].scaleb(2)), int(w[3].scaleb(2)))
    st = csx.dask.stats(bag)
    assert st.partitions == 5 and st.bytes_to_workers == 5 * 32


def test_without_a_distributed_client_dask_local_scheduler_reads_the_nodes(nodes, tpch, tmp_path):
    import dask

    root, tables = tpch
    cl = csx.dask.Cluster(nodes.uris, client=False, catalogue=tmp_path / "local.json")
    assert cl.client is None and all(n.worker is None for n in cl.nodes)
    csx.dask.put(root / "data" / "lineitem", cl, partitions=4, replicas=2, table="/tpch/lineitem")
    with dask.config.set(scheduler="threads"):  # not the module's distributed client
        assert csx.dask.tpch_q6(cl) == oracle(Q6.replace("{t}", "lineitem"), root / "parquet", tables)
        df = csx.dask.read(cl, "/tpch/lineitem", ["l_quantity"], "l_quantity < 10")
        with pytest.raises(ValueError, match="compute the collection first"):
            csx.dask.stats(df)
        n = len(df)
    st = csx.dask.stats(df)
    assert st.partitions == 4 and st.rows_kept == n and st.bytes_to_workers == n * 8
    assert set(st.workers.values()) == {None}


def test_put_of_an_arrow_table_reads_back_row_for_row(cluster):
    from csx.bench.lineitem import lineitem

    t = lineitem(5_000, seed=9)
    entry = csx.dask.put(t, cluster, partitions=3, replicas=2, table="/arrow/li")["/arrow/li"]
    assert [p.rows for p in entry.partitions] == [1666, 1667, 1667]
    back = csx.dask.read(cluster, "/arrow/li", decimals="scaled").compute()
    assert list(back.columns) == t.column_names
    assert back["l_orderkey"].tolist() == t.column("l_orderkey").to_pylist()
    assert back["l_returnflag"].tolist() == t.column("l_returnflag").to_pylist()
    assert back["l_extendedprice"].tolist() == [int(v.scaleb(2)) for v in t.column("l_extendedprice").to_pylist()]
    days = back["l_shipdate"].to_numpy().astype("datetime64[D]").astype("int64").tolist()
    assert days == t.column("l_shipdate").cast("int32").to_pylist()


def test_a_node_killed_mid_query_is_replaced_by_its_replica(cluster, nodes, tpch, hook):
    root, tables = tpch
    csx.dask.put(root / "data" / "lineitem", cluster, partitions=6, replicas=2, table="/tpch/lineitem")
    killed = []

    def kill_n1_mid_scan(event, node, partition, batch):
        # After the first chunk of the first partition read from n1: the scan is
        # half done when its node dies.
        if event == "batch" and node == "n1" and not killed:
            killed.append(partition)
            nodes.kill(1)

    hook(kill_n1_mid_scan)
    got = csx.dask.tpch_q6(cluster, chunk_rows=1000)
    assert killed and not nodes.alive(1)
    assert got == oracle(Q6.replace("{t}", "lineitem"), root / "parquet", tables)
    # Every later query still answers right from the replicas, and says what failed.
    assert_q1_equal(csx.dask.tpch_q1(cluster, chunk_rows=1000), oracle(Q1.replace("{t}", "lineitem"), root / "parquet", tables))
    df = csx.dask.read(cluster, "/tpch/lineitem", ["l_quantity"], "l_quantity < 10")
    st = csx.dask.stats(df)
    assert "n1" not in st.partitions_by_node
    assert st.failovers and all(node == "n1" for _p, node, _e in st.failovers)
    assert st.rows_scanned == tables["lineitem"]
    assert len(df) == oracle("select count(*) from lineitem where l_quantity < 10", root / "parquet", tables)[0][0]


def test_a_bad_copy_on_a_node_is_never_an_answer(cluster, tpch):
    root, tables = tpch
    entry = csx.dask.put(root / "data" / "lineitem", cluster, partitions=3, replicas=2, table="/tpch/lineitem")["/tpch/lineitem"]
    p0, p1 = entry.partitions[0], entry.partitions[1]
    # Partition 0's primary copy claims other rows; partition 1's primary copy lost the
    # end of a column file.
    with csx.Device.open(cluster.node(p0.nodes[0]).uri) as dev:
        raw = json.loads(bytes(dev.get(f"{p0.path}/schema.json")))
        raw["rows"] -= 1
        dev.put(f"{p0.path}/schema.json", json.dumps(raw).encode())
    with csx.Device.open(cluster.node(p1.nodes[0]).uri) as dev:
        col = bytes(dev.get(f"{p1.path}/l_discount.col"))
        dev.put(f"{p1.path}/l_discount.col", col[:-8])
    df = csx.dask.read(cluster, "/tpch/lineitem", ["l_extendedprice", "l_discount"], csx.dask.queries.Q6_FILTER)
    st = csx.dask.stats(df)
    bad = {(p, n): e for p, n, e in st.failovers}
    assert set(bad) == {(0, p0.nodes[0]), (1, p1.nodes[0])}
    assert "rows" in bad[(0, p0.nodes[0])] and "DataError" in bad[(0, p0.nodes[0])]
    assert "l_discount.col" in bad[(1, p1.nodes[0])]
    assert csx.dask.tpch_q6(cluster) == oracle(Q6.replace("{t}", "lineitem"), root / "parquet", tables)


def test_without_a_replica_a_dead_node_fails_the_query_naming_node_and_partition(cluster, nodes, tpch, hook):
    root, tables = tpch
    csx.dask.put(root / "data" / "lineitem", cluster, partitions=6, replicas=1, table="/tpch/lineitem")
    entry = cluster.catalogue.get("/tpch/lineitem")
    on_n2 = [p.index for p in entry.partitions if p.nodes == ["n2"]]
    assert on_n2

    def kill_n2(event, node, partition, batch):
        if event == "batch" and node == "n2" and nodes.alive(2):
            nodes.kill(2)

    hook(kill_n2)
    with pytest.raises(csx.dask.PartitionUnavailableError) as e:
        csx.dask.tpch_q6(cluster, chunk_rows=1000)
    err = e.value
    assert err.partition in on_n2 and err.table == "/tpch/lineitem"
    assert [a[0] for a in err.attempts] == ["n2"]
    assert f"partition {err.partition} of /tpch/lineitem" in str(err) and "node n2" in str(err)
    assert isinstance(err, csx.CsxError)


def test_a_gone_worker_leaves_its_partitions_to_the_others(nodes, tpch, tmp_path):
    root, tables = tpch
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=":0") as lc, Client(lc) as c:
        ws = _workers(c)
        cl = csx.dask.Cluster(nodes.uris, client=c, workers=ws, catalogue=tmp_path / "cat.json")
        csx.dask.put(root / "data" / "lineitem", cl, partitions=6, replicas=1, table="/tpch/lineitem")
        c.retire_workers(workers=[ws[1]], close_workers=True)
        c.wait_for_workers(2)
        assert ws[1] not in _workers(c)
        assert csx.dask.tpch_q6(cl) == oracle(Q6.replace("{t}", "lineitem"), root / "parquet", tables)
        df = csx.dask.read(cl, "/tpch/lineitem", ["l_quantity"], "l_quantity < 10")
        st = csx.dask.stats(df)
        # n1's partitions ran on the other workers, which read them from n1 over the network.
        assert st.partitions_by_node == {"n0": 2, "n1": 2, "n2": 2}
        assert set(st.workers.values()) == {ws[0], ws[2]}
        assert st.failovers == []


def _kill_this_worker_mid_scan(node_name, marker):
    """A fault hook for worker processes: the first time a scan of ``node_name``'s
    partition has read a chunk, the worker process running it dies (SIGKILL)."""
    from csx.dask import pushdown

    def hook(event, node, partition, batch):
        if event == "batch" and node == node_name:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, str(partition).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)

    pushdown._fault_hook = hook


def test_a_worker_killed_mid_query_is_rerun_elsewhere(nodes, tpch, tmp_path):
    import cloudpickle

    root, tables = tpch
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = str(tmp_path / "killed")
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0") as lc, Client(lc) as c:
        ws = _workers(c)
        cl = csx.dask.Cluster(nodes.uris, client=c, workers=ws, catalogue=tmp_path / "cat.json")
        csx.dask.put(root / "data" / "lineitem", cl, partitions=6, replicas=1, table="/tpch/lineitem")
        c.run(_kill_this_worker_mid_scan, "n1", marker)
        got = csx.dask.tpch_q6(cl, chunk_rows=1000)
        assert os.path.exists(marker), "no worker was killed: the test checked nothing"
        assert got == oracle(Q6.replace("{t}", "lineitem"), root / "parquet", tables)
        c.wait_for_workers(3)
        assert ws[1] not in _workers(c)  # the nanny started a new worker process


def test_bad_arguments_and_a_bad_catalogue_are_named(cluster, tpch, tmp_path):
    root, _ = tpch
    with pytest.raises(ValueError, match="replicas is 4; .*3 nodes"):
        csx.dask.put(root / "data", cluster, replicas=4, table="/tpch")
    with pytest.raises(ValueError, match="partitions of /tpch/lineitem is 0"):
        csx.dask.put(root / "data", cluster, partitions=0, table="/tpch")
    with pytest.raises(ValueError, match="unknown tables: nation"):
        csx.dask.put(root / "data", cluster, partitions={"nation": 2})
    with pytest.raises(ValueError, match="not a directory"):
        csx.dask.put(tmp_path / "missing", cluster)
    with pytest.raises(csx.dask.CatalogueError, match="'/nothing' is not in the catalogue"):
        csx.dask.read(cluster, "/nothing")
    csx.dask.put(root / "data" / "orders", cluster, partitions=2, table="/tpch/orders")
    with pytest.raises(ValueError, match="no column 'o_nothing'"):
        csx.dask.read(cluster, "/tpch/orders", ["o_nothing"])
    with pytest.raises(csx.UnsupportedFilterError):
        csx.dask.read(cluster, "/tpch/orders", filter="o_orderkey = 1 or o_orderkey = 2")
    with pytest.raises(ValueError, match="lambda_"):
        csx.dask.read(cluster, "/tpch/orders", ["o_orderkey"], lambda_=csx.dask.Lambda(b"", "o_orderkey"))
    with pytest.raises(ValueError, match="decimals"):
        csx.dask.read(cluster, "/tpch/orders", decimals="exact")
    with pytest.raises(ValueError, match="the same URI"):
        csx.dask.Cluster([cluster.nodes[0].uri, cluster.nodes[0].uri], catalogue=tmp_path / "c.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(csx.dask.CatalogueError, match="bad.json: not JSON"):
        csx.dask.Cluster(cluster.uris(), catalogue=bad).catalogue.get("/tpch/orders")
    # A catalogue whose partitions do not cover the rows is refused, not half-read.
    raw = json.loads(open(cluster.catalogue.path).read())
    raw["tables"]["/tpch/orders"]["rows"] += 1
    bad.write_text(json.dumps(raw))
    with pytest.raises(csx.dask.CatalogueError, match="cover"):
        csx.dask.Cluster(cluster.uris(), catalogue=bad).catalogue.get("/tpch/orders")


def test_local_nodes_start_serve_and_stop_without_leftovers(tmp_path):
    with csx.dask.LocalNodes(tmp_path / "n", 2) as ln:
        pids = [p.pid for p in ln.procs]
        assert len(set(ln.uris)) == 2 and all(u.startswith("tcp://127.0.0.1:") for u in ln.uris)
        with csx.Device.open(ln.uris[1]) as dev:
            dev.put("/x", np.arange(4, dtype="<u8"))
        ln.stop(1)
        assert not ln.alive(1)
        ln.start(1)  # the device's state survived the stop
        with csx.Device.open(ln.uris[1]) as dev:
            assert list(dev.read_array("/x", "<u8")) == [0, 1, 2, 3]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
