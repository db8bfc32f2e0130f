"""csx.data: csx-data's generators, Parquet copy and put -r from Python; TPC-H Q6/Q1
through csx.duckdb on both engine kinds, and SSB queries on the device, every
answer checked against DuckDB over the Parquet copy."""

import duckdb
import pytest

import csx
import csx.data
import csx.duckdb
from csx.bench.lineitem import Q1, Q1_COLUMNS, Q1_FILTER, Q1_SELECT, Q6, Q6_FILTER, Q6_SELECT


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    root = tmp_path_factory.mktemp("tpch")
    tables = csx.data.generate("tpch", root / "data", 0.002, seed=3)
    csx.data.write_parquet(root / "data", root / "parquet")
    return root, tables


def over_parquet(sql, parquet_dir, tables):
    con = duckdb.connect()
    for t in tables:
        con.sql(f"create view \"{t}\" as select * from read_parquet('{parquet_dir}/{t}.parquet')")
    return con.sql(sql).fetchall()


def test_generate_is_deterministic_and_put_dir_copies_it(dev, tpch, tmp_path):
    root, tables = tpch
    assert set(tables) == {"orders", "lineitem"}
    assert tables["lineitem"] > 10_000
    again = csx.data.generate("tpch", tmp_path / "again", 0.002, seed=3)
    assert again == tables
    a = (root / "data" / "lineitem" / "l_shipdate.col").read_bytes()
    assert (tmp_path / "again" / "lineitem" / "l_shipdate.col").read_bytes() == a
    files, _dirs, nbytes = csx.data.put_dir(dev, root / "data", "/tpch")
    assert files > 10 and nbytes > 0
    assert bytes(dev.get("/tpch/lineitem/l_shipdate.col")) == a


@pytest.mark.parametrize("engine, chunk_rows", [("jit", None), ("interp", None), ("jit", 1_000)])
def test_tpch_q6_and_q1_on_csx_gen_data_equal_duckdb(dev, tpch, engine, chunk_rows):
    root, tables = tpch
    csx.data.put_dir(dev, root / "data", "/tpch")
    con = duckdb.connect()
    s = csx.duckdb.register(
        con, "li", dev, "/tpch/lineitem", ["l_extendedprice", "l_discount"], Q6_FILTER, engine=engine, chunk_rows=chunk_rows
    )
    got = con.sql(Q6_SELECT.replace("{t}", "li")).fetchall()
    want = over_parquet(Q6.replace("{t}", "lineitem"), root / "parquet", tables)
    assert got == want and want[0][0] is not None
    assert 0 < s.stats.rows_kept < tables["lineitem"]
    assert s.stats.bytes_to_host < tables["lineitem"] * 16 / 5
    rel = csx.duckdb.scan(con, dev, "/tpch/lineitem", Q1_COLUMNS, Q1_FILTER, engine=engine, chunk_rows=chunk_rows)
    got = rel.query("li1", Q1_SELECT.replace("{t}", "li1").replace("{where}", "")).fetchall()
    assert got == over_parquet(Q1.replace("{t}", "lineitem"), root / "parquet", tables)


@pytest.fixture(scope="module")
def ssb(tmp_path_factory):
    root = tmp_path_factory.mktemp("ssb")
    tables = csx.data.generate("ssb", root / "data", 0.01, seed=1)
    csx.data.write_parquet(root / "data", root / "parquet")
    return root, tables


@pytest.mark.parametrize(
    "query, split, strategy, probe",
    [
        ("q1.1", "offload", "bitmask", "emitted"),
        ("q1.1", "offload", "bitmask", "operator"),
        ("q1.1", "offload", "unrolled", "operator"),
        ("q1.1", "offload", "accel", "operator"),
        ("q3.3", "offload", "bitmask", "emitted"),
        ("q3.3", "offload", "bitmask", "operator"),
        ("q3.3", "host-agg", "bitmask", "emitted"),
        ("q3.1", "host", "bitmask", "emitted"),
    ],
)
def test_ssb_runs_equal_duckdb(dev, ssb, query, split, strategy, probe):
    root, tables = ssb
    csx.data.put_dir(dev, root / "data", "/ssb/sf0.01")
    r = csx.data.ssb_run(
        dev, query, data_dir="/ssb/sf0.01", split=split, strategy=strategy, probe=probe
    )
    want = over_parquet(csx.data.ssb_queries()[query], root / "parquet", tables)
    assert sorted(r.rows) == sorted(tuple(row) for row in want)
    assert r.split == split and r.bytes_to_host > 0 and r.phases


def test_data_bad_arguments(dev, tmp_path):
    with pytest.raises(ValueError) as e:
        csx.data.generate("tpcds", tmp_path, 1)
    assert "kind" in str(e.value)
    with pytest.raises(ValueError) as e:
        csx.data.generate("tpch", tmp_path, 0)
    assert "sf" in str(e.value)
    with pytest.raises(ValueError) as e:
        csx.data.ssb_run(dev, "q1.1", split="sideways")
    assert "split" in str(e.value)
    with pytest.raises(ValueError) as e:
        csx.data.ssb_run(dev, "q9.9", data_dir="/nothing")
    assert "q9.9" in str(e.value)
    with pytest.raises(csx.CsxError):
        csx.data.ssb_run(dev, "q1.1", data_dir="/nothing")
    with pytest.raises(ValueError) as e:
        csx.data.ssb_run(dev, "q1.1", strategy="magic")
    assert "strategy" in str(e.value)
    with pytest.raises(ValueError) as e:
        csx.data.ssb_run(dev, "q1.1", probe="magic")
    assert "probe" in str(e.value)
    with pytest.raises(ValueError) as e:
        csx.scan.scan(dev, "/x", engine="magic")
    assert "engine" in str(e.value)
