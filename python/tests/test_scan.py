"""Pushdown scans and DuckDB: TPC-H Q6 and Q1 through the device, checked against
DuckDB over the Parquet copy of the same data (DuckDB is the oracle)."""

import datetime as dt
import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import csx
import csx.arrow
import csx.duckdb
import csx.filter
from csx.bench.lineitem import Q1, Q1_COLUMNS, Q1_FILTER, Q1_SELECT, Q6, Q6_FILTER, Q6_SELECT, lineitem

ROWS = 60_000


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    t = lineitem(ROWS)
    path = tmp_path_factory.mktemp("parquet") / "lineitem.parquet"
    pq.write_table(t, path)
    return t, path


@pytest.fixture
def table(dev, data):
    csx.arrow.put_table(dev, "/tpch/lineitem", data[0])
    return "/tpch/lineitem"


def oracle(sql, parquet):
    con = duckdb.connect()
    return con.sql(sql.replace("{t}", f"read_parquet('{parquet}')")).fetchall()


def test_put_and_read_table_round_trips(dev, data, table):
    t, _ = data
    back = csx.arrow.read_table(dev, table)
    assert back.num_rows == ROWS
    for name in t.column_names:
        assert back.column(name).to_pylist() == t.column(name).to_pylist(), name
    # Fixed-width columns view the device's bytes (no copy): dates are date32.
    assert back.schema.field("l_shipdate").type == pa.date32()
    assert back.schema.field("l_discount").type == pa.decimal64(18, 2)


@pytest.mark.parametrize("chunk_rows", [None, 7_001])
def test_q6_through_duckdb_pushdown_equals_duckdb_over_parquet(dev, data, table, chunk_rows):
    con = duckdb.connect()
    s = csx.duckdb.register(
        con, "li", dev, table, columns=["l_extendedprice", "l_discount"], filter=Q6_FILTER, chunk_rows=chunk_rows
    )
    got = con.sql(Q6_SELECT.replace("{t}", "li")).fetchall()
    want = oracle(Q6, data[1])
    assert got == want
    assert want[0][0] is not None and want[0][0] > 0
    st = s.stats
    assert st.rows_scanned == ROWS
    kept = con.sql(Q6.replace("{t}", f"read_parquet('{data[1]}')").replace("sum(l_extendedprice * l_discount) as revenue", "count(*)")).fetchall()[0][0]
    assert st.rows_kept == kept
    # Only the kept rows' two columns crossed to the host, at 4 bytes a value: the
    # decimals' encoded blocks all hold values that fit 4 bytes, so the scan staged them
    # narrow (and widened them back on the host: the answer above is DuckDB's).
    assert st.bytes_to_host == kept * 8
    assert st.chunks == (1 if chunk_rows is None else -(-ROWS // chunk_rows))
    # put_table writes encoded columns: each chunk stages the one block (all 60000 rows)
    # of the four columns the query reads, as stored (the file less its 64-byte header
    # and its one 64-byte directory entry).
    stored = sum(
        dev.stat(f"{table}/{c}.col").size - 128 for c in ("l_shipdate", "l_discount", "l_quantity", "l_extendedprice")
    )
    assert stored < ROWS * (4 + 8 + 8 + 8)
    assert st.bytes_staged == st.chunks * stored


def test_q1_through_duckdb_pushdown_equals_duckdb_over_parquet(dev, data, table):
    con = duckdb.connect()
    rel = csx.duckdb.scan(con, dev, table, columns=Q1_COLUMNS, filter=Q1_FILTER)
    got = rel.query("li", Q1_SELECT.replace("{t}", "li").replace("{where}", "")).fetchall()
    want = oracle(Q1, data[1])
    assert len(want) == 4
    assert got == want


def test_scan_to_table_matches_duckdb_filter(dev, data, table):
    flt = "l_returnflag = 'R' and l_quantity >= 10.5 and l_shipdate between '1993-03-01' and '1996-02-29' and l_tax <> 0.04"
    got = csx.scan.scan(dev, table, ["l_orderkey", "l_returnflag", "l_tax"], flt).to_table()
    want = duckdb.connect().sql(
        f"select l_orderkey, l_returnflag, l_tax from read_parquet('{data[1]}') where "
        "l_returnflag = 'R' and l_quantity >= 10.5 and l_shipdate between date '1993-03-01' and date '1996-02-29' and l_tax <> 0.04 order by l_orderkey"
    ).fetchall()
    rows = list(zip(*(got.column(n).to_pylist() for n in got.column_names)))
    assert rows == want
    assert len(want) > 100


@pytest.mark.parametrize(
    "flt, expected",
    [
        ("l_returnflag < 'N'", "l_returnflag < 'N'"),
        ("l_returnflag > 'B' and l_returnflag <= 'R'", "l_returnflag > 'B' and l_returnflag <= 'R'"),
        ("l_returnflag = 'X'", "l_returnflag = 'X'"),
        ("l_discount = 0.055", "l_discount = 0.055"),
        ("l_discount > 0.055 and l_discount < 0.085", "l_discount > 0.055 and l_discount < 0.085"),
        ("l_quantity > 100000000000000", "l_quantity > 100000000000000"),
        ("24 > l_quantity", "l_quantity < 24"),
        ("l_shipdate > date '1998-02-28' + interval '1' month", "l_shipdate > date '1998-03-28'"),
    ],
)
def test_filter_edges_match_duckdb(dev, data, table, flt, expected):
    got = csx.scan.scan(dev, table, ["l_orderkey"], flt).to_table().column(0).to_pylist()
    want = [r[0] for r in duckdb.connect().sql(
        f"select l_orderkey from read_parquet('{data[1]}') where {expected} order by 1"
    ).fetchall()]
    assert got == want


def test_unsupported_filter_names_the_part(dev, table):
    for flt, part in [
        ("l_quantity < 24 or l_discount > 0.05", "l_quantity < 24 or l_discount > 0.05"),
        ("l_quantity < 24 and l_discount in (0.05, 0.06)", "l_discount in (0.05, 0.06)"),
        ("l_quantity < l_discount", "l_quantity < l_discount"),
        ("year(l_shipdate) = 1994", "year(l_shipdate) = 1994"),
    ]:
        with pytest.raises(csx.UnsupportedFilterError) as e:
            csx.scan.scan(dev, table, ["l_orderkey"], flt)
        assert e.value.part == part
        assert part in str(e.value)
        assert isinstance(e.value, ValueError)
    with pytest.raises(csx.QueryError) as e:
        csx.scan.scan(dev, table, ["l_orderkey"], "l_nosuch > 3")
    assert "l_nosuch" in str(e.value)
    with pytest.raises(csx.UnsupportedFilterError) as e:
        csx.scan.scan(dev, table, ["l_orderkey"], "l_shipdate > 5")
    assert "date" in str(e.value)


def test_a_short_column_file_is_an_error_naming_it(dev, table):
    path = f"{table}/l_discount.col"
    data = bytes(dev.get(path))
    dev.put(path, data[:-8])
    with pytest.raises(csx.DataError) as e:
        csx.scan.scan(dev, table, ["l_discount"], "l_quantity < 24")
    assert path in str(e.value) and f"file of {len(data) - 8} bytes" in str(e.value), str(e.value)
    with pytest.raises(csx.DataError) as e:
        csx.arrow.read_table(dev, table, ["l_discount"])
    assert path in str(e.value) and f"file of {len(data) - 8} bytes" in str(e.value), str(e.value)


def test_a_bad_dictionary_index_is_an_error_naming_file_and_row(dev, data, table):
    path = f"{table}/l_linestatus.col"
    # The dictionary cut to its first entry ("F"): the first "O" row's code is outside.
    assert bytes(dev.get(f"{table}/l_linestatus.dict")) == b"F\nO\n"
    row = data[0].column("l_linestatus").to_pylist().index("O")
    schema = json.loads(bytes(dev.get(f"{table}/schema.json")))
    for c in schema["columns"]:
        if c["name"] == "l_linestatus":
            c["entries"] = 1
    dev.put(f"{table}/l_linestatus.dict", b"F\n")
    dev.put(f"{table}/schema.json", json.dumps(schema).encode())
    for run in (
        lambda: csx.scan.scan(dev, table, ["l_linestatus"], "l_quantity < 100").to_table(),
        lambda: csx.arrow.read_table(dev, table, ["l_linestatus"]),
    ):
        with pytest.raises(csx.DataError) as e:
            run()
        assert path in str(e.value) and f"row {row}" in str(e.value), str(e.value)


def test_scan_bad_arguments(dev, table):
    with pytest.raises(TypeError) as e:
        csx.scan.scan("not a device", table)
    assert "device" in str(e.value)
    with pytest.raises(TypeError) as e:
        csx.scan.scan(dev, table, "l_quantity")
    assert "columns" in str(e.value)
    with pytest.raises(ValueError) as e:
        csx.scan.scan(dev, table, ["l_quantity"], chunk_rows=0)
    assert "chunk_rows" in str(e.value)
    with pytest.raises(TypeError) as e:
        csx.duckdb.scan("con", dev, table)
    assert "con" in str(e.value)
    with pytest.raises(TypeError) as e:
        csx.scan.scan(dev, table, ["l_quantity"], filter=3)
    assert "filter" in str(e.value)


def test_filter_binding_rounds_decimals_and_dates_exactly():
    from csx.arrow import Column, TableSchema

    schema = TableSchema("t", 0, [Column("d", "decimal", scale=2), Column("s", "date"), Column("i", "int32")], "/t")
    r = csx.filter.bind(csx.filter.parse("d > 0.055 and d <= 0.07 and s < '1970-01-11' and i != 3 and i >= -2"), schema, {})
    assert [(x.column, x.lo, x.hi, x.excluded) for x in r] == [
        ("d", 6, 7, ()),
        ("s", -(1 << 31), 9, ()),
        ("i", -2, (1 << 31) - 1, (3,)),
    ]
    assert csx.filter.bind(csx.filter.parse("d = 0.055"), schema, {})[0].empty
    assert csx.filter.parse("s >= date '2000-01-31' + interval '1' month")[0].value == dt.date(2000, 2, 29)


def test_raw_range_counts_are_csx_datas_compilation():
    R = csx.filter.Range
    i32 = (-(1 << 31), (1 << 31) - 1)
    cases = [
        (R("i", -5, 5), "int32", 2),  # a signed interval across zero is two raw ranges
        (R("i", *i32), "int32", 0),  # every value: no filter run
        (R("i", *i32, excluded=(3,)), "int32", 3),
        (R("u", 0, 10, excluded=(3,)), "uint32", 2),
        (R("i", *i32, values=(-1, 0, 1, 2, 3, 7)), "int32", 3),  # adjacent values merge
        (R("i", 4, 3), "int32", 0),  # empty
        (R("i", *i32, values=tuple(range(0, 80, 2))), "int32", 40),  # over the limit: counted
        (R("d", -(1 << 63), -1), "decimal", 1),
    ]
    for r, ty, want in cases:
        assert csx.filter.raw_ranges(r, ty) == want, (r, ty)
    assert csx.filter.RANGES_MAX == 16
    assert csx.filter._BOUNDS["dict"] == (0, (1 << 32) - 1) and csx.filter._BOUNDS["date"] == i32
    with pytest.raises(ValueError, match='column type "text" is not one of'):
        csx.filter.raw_ranges(R("i", 1, 2), "text")


def test_a_query_shape_is_built_and_loaded_once_per_device(dev, table):
    flt = "l_quantity < 5 and l_discount >= 0.09"
    first = csx.scan.scan(dev, table, ["l_orderkey"], flt)
    a = first.to_table()
    assert len(dev._kept) == 1
    slot = next(iter(dev._kept.values())).slot
    again = csx.scan.scan(dev, table, ["l_orderkey"], flt)
    assert again.to_table().equals(a)
    assert again.stats.program_build_ns == 0
    assert [p.slot for p in dev._kept.values()] == [slot]
    with pytest.raises(csx.QueryError):
        again.to_table()  # a scan runs once


def test_host_table_reads_whole_columns_with_their_cost(dev, data, table):
    from csx.scan import host_table

    t, meter = host_table(dev, table, ["l_shipdate", "l_discount"])
    assert t.column("l_shipdate").to_pylist() == data[0].column("l_shipdate").to_pylist()
    # csx-data reads the schema and the two column files, sent as stored (encoded).
    files = sum(dev.stat(f"{table}/{c}").size for c in ("schema.json", "l_shipdate.col", "l_discount.col"))
    assert meter["bytes_to_host"] == files
    assert files < ROWS * (4 + 8)
    assert meter["modelled_ns"] >= 0
