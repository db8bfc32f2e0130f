"""csx.arrow reads and writes tables only through csx-data (the native module): a table
`csx gen` writes (version 2: encoded blocks, zone maps, CRC-32C) reads with the values
DuckDB reads from its Parquet copy; put_table writes that same format and round-trips
edge values; a corrupt block is csx-data's error naming the table, column and block."""

import datetime as dt
import decimal
import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import csx
import csx.arrow
import csx.data
from csx.scan import host_table


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    root = tmp_path_factory.mktemp("tpch")
    tables = csx.data.generate("tpch", root / "data", 0.002, seed=5)
    csx.data.write_parquet(root / "data", root / "parquet")
    return root, tables


def parquet_columns(path):
    rel = duckdb.connect().sql(f"select * from read_parquet('{path}')")
    t = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.fetch_arrow_table()
    return {n: t.column(n).to_pylist() for n in t.column_names}


def test_a_csx_gen_table_reads_the_values_duckdb_reads_from_parquet(dev, tpch):
    root, tables = tpch
    csx.data.put_dir(dev, root / "data", "/tpch")
    for name, rows in tables.items():
        schema = json.loads(bytes(dev.get(f"/tpch/{name}/schema.json")))
        assert schema["version"] == 2, "csx gen writes the encoded format"
        assert csx.arrow.read_schema(dev, f"/tpch/{name}").version == 2
        got = csx.arrow.read_table(dev, f"/tpch/{name}")
        local = csx.arrow.read_local_table(root / "data" / name)
        want = parquet_columns(root / "parquet" / f"{name}.parquet")
        assert got.num_rows == rows and local.num_rows == rows
        assert got.column_names == list(want)
        for c in got.column_names:
            assert got.column(c).to_pylist() == want[c], f"{name}.{c}"
            assert local.column(c).to_pylist() == want[c], f"{name}.{c} (local)"
        if name == "lineitem":
            # The comparison covered the types that need decoding on the way to Arrow.
            types = {got.schema.field(c).type for c in got.column_names}
            assert pa.date32() in types
            assert pa.dictionary(pa.uint32(), pa.string()) in types
            assert any(pa.types.is_decimal(t) for t in types)


def test_read_column_and_host_table_read_through_csx_data(dev, tpch):
    root, _ = tpch
    csx.data.put_dir(dev, root / "data", "/tpch")
    schema = csx.arrow.read_schema(dev, "/tpch/lineitem")
    want = parquet_columns(root / "parquet" / "lineitem.parquet")
    assert csx.arrow.read_column(dev, schema, "l_shipdate").to_pylist() == want["l_shipdate"]
    t, meter = host_table(dev, "/tpch/lineitem", ["l_returnflag", "l_extendedprice"])
    assert t.column("l_returnflag").to_pylist() == want["l_returnflag"]
    assert t.column("l_extendedprice").to_pylist() == want["l_extendedprice"]
    # The encoded files travel as stored: fewer bytes than the decoded values.
    files = sum(dev.stat(f"/tpch/lineitem/{f}").size for f in ("l_returnflag.col", "l_extendedprice.col"))
    assert files <= meter["bytes_to_host"] < files + (1 << 16)
    assert files < schema.rows * (4 + 8)


EDGE = pa.table(
    {
        "i32": pa.array([-(2**31), 2**31 - 1, -1, 0, 7], pa.int32()),
        "i64": pa.array([-(2**63), 2**63 - 1, -1, 0, 1], pa.int64()),
        "u32": pa.array([0, 2**32 - 1, 1, 2**31, 5], pa.uint32()),
        "day": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(2000, 2, 29)]),
        "money": pa.array([decimal.Decimal(v) for v in ("-99999999999999.9999", "99999999999999.9999", "-0.0001", "0", "1.5")], pa.decimal128(18, 4)),
        "name": pa.array(["", "zürich", "A", "a b", "zürich"]),
    }
)


@pytest.mark.parametrize("rows", [slice(0, 5), slice(0, 1), slice(3, 4), slice(0, 0)])
def test_put_table_round_trips_edge_values_in_the_csx_gen_format(dev, rows):
    t = EDGE.slice(rows.start, rows.stop - rows.start)
    schema = csx.arrow.put_table(dev, "/edge/t", t)
    assert schema.version == 2 and schema.rows == t.num_rows
    on_disk = json.loads(bytes(dev.get("/edge/t/schema.json")))
    assert on_disk["version"] == 2 and on_disk["rows"] == t.num_rows
    back = csx.arrow.read_table(dev, "/edge/t")
    assert back.num_rows == t.num_rows
    for c in t.column_names:
        assert back.column(c).to_pylist() == t.column(c).to_pylist(), c
    assert back.schema.field("money").type == pa.decimal64(18, 4)
    assert back.schema.field("day").type == pa.date32()
    assert back.schema.field("name").type == pa.dictionary(pa.uint32(), pa.string())
    if t.num_rows:
        assert back.column("name").chunk(0).dictionary.to_pylist() == sorted(set(t.column("name").to_pylist()))


def test_put_table_writes_encoded_blocks(dev):
    n = 200_000
    csx.arrow.put_table(dev, "/enc", {"k": pa.array(np.full(n, 42, dtype=np.int64)), "s": pa.array(np.arange(n, dtype=np.int32))})
    # Raw, the columns would be 8n and 4n bytes; encoded, a constant and a run of
    # consecutive values take a small part of that.
    assert dev.stat("/enc/k.col").size < n
    assert dev.stat("/enc/s.col").size < 4 * n
    back = csx.arrow.read_table(dev, "/enc", ["s", "k"])
    assert back.column_names == ["s", "k"]
    assert np.array_equal(back.column("s").to_numpy(), np.arange(n, dtype=np.int32))
    assert np.array_equal(back.column("k").to_numpy(), np.full(n, 42))


def test_a_flipped_bit_is_csx_datas_error_naming_table_column_and_block(dev):
    n = 3 * 65_536 + 100
    vals = np.random.default_rng(7).integers(-(2**62), 2**62, n, dtype=np.int64)
    csx.arrow.put_table(dev, "/flip/facts", {"v": vals, "w": np.arange(n, dtype=np.int64)})
    path = "/flip/facts/v.col"
    data = bytearray(bytes(dev.get(path)))
    data[len(data) // 2] ^= 0x10
    dev.put(path, bytes(data))
    with pytest.raises(csx.DataError) as e:
        csx.arrow.read_table(dev, "/flip/facts")
    msg = str(e.value)
    assert "table facts" in msg and "column v" in msg and "block 1" in msg, msg
    with pytest.raises(csx.DataError) as e:
        host_table(dev, "/flip/facts", ["v"])
    assert "column v" in str(e.value) and "block 1" in str(e.value)
    # The other column is intact and still reads.
    assert np.array_equal(csx.arrow.read_table(dev, "/flip/facts", ["w"]).column("w").to_numpy(), np.arange(n))


def test_a_code_outside_the_dictionary_is_an_error_naming_file_and_row(dev):
    csx.arrow.put_table(dev, "/codes", {"s": pa.array(["a", "a", "b", "a"])})
    # A dictionary cut to one entry: code 1 ("b", row 2) is outside it.
    schema = json.loads(bytes(dev.get("/codes/schema.json")))
    schema["columns"][0]["entries"] = 1
    dev.put("/codes/s.dict", b"a\n")
    dev.put("/codes/schema.json", json.dumps(schema).encode())
    with pytest.raises(csx.DataError) as e:
        csx.arrow.read_table(dev, "/codes")
    assert "/codes/s.col" in str(e.value) and "row 2" in str(e.value), str(e.value)


def test_a_version_1_table_still_reads(dev):
    # The raw format, written byte by byte: what csx-data's version-1 writer writes.
    dev.put("/raw/a.col", np.array([5, -6, 2**40], dtype="<i8").tobytes())
    dev.put("/raw/s.col", np.array([1, 0, 1], dtype="<u4").tobytes())
    dev.put("/raw/s.dict", b"x\ny\n")
    schema = {
        "format": "csx-columnar",
        "version": 1,
        "table": "raw",
        "rows": 3,
        "columns": [{"name": "a", "type": "int64"}, {"name": "s", "type": "dict", "entries": 2}],
    }
    dev.put("/raw/schema.json", json.dumps(schema).encode())
    back = csx.arrow.read_table(dev, "/raw")
    assert csx.arrow.read_schema(dev, "/raw").version == 1
    assert back.column("a").to_pylist() == [5, -6, 2**40]
    assert back.column("s").to_pylist() == ["y", "x", "y"]
    dev.put("/raw/a.col", np.array([5, -6], dtype="<i8").tobytes())
    with pytest.raises(csx.DataError) as e:
        csx.arrow.read_table(dev, "/raw")
    assert "/raw/a.col" in str(e.value) and "expected 24" in str(e.value)


def test_put_table_refuses_what_the_format_cannot_store(dev, tmp_path):
    with pytest.raises(ValueError, match="nulls"):
        csx.arrow.put_table(dev, "/bad", {"a": pa.array([1, None], pa.int64())})
    with pytest.raises(ValueError, match="newline"):
        csx.arrow.put_table(dev, "/bad", {"s": pa.array(["a\nb"])})
    with pytest.raises(ValueError, match="precision"):
        csx.arrow.put_table(dev, "/bad", {"d": pa.array([decimal.Decimal("1")], pa.decimal128(30, 0))})
    with pytest.raises(ValueError, match="column name"):
        csx.arrow.put_table(dev, "/bad", {"Bad": pa.array([1], pa.int64())})
    with pytest.raises(ValueError, match="no columns"):
        csx.arrow.put_table(dev, "/bad", pa.table({}))
    with pytest.raises(TypeError, match="csx.Device"):
        csx.arrow.put_table(object(), "/bad", {"a": pa.array([1], pa.int64())})
    with pytest.raises(TypeError, match="csx.Device"):
        csx.arrow.read_table(str(tmp_path), "/bad")
    # Nothing was written by a refused put.
    with pytest.raises(csx.CsxError):
        dev.stat("/bad/schema.json")


def test_a_raw_put_writes_version_1_for_readers_of_column_bytes(dev):
    # csx.dask's partitions: a λ reads a column file's bytes, so they stay raw.
    schema = csx.arrow._put_table(dev, "/rawput", {"a": pa.array([3, -4], pa.int64()), "s": pa.array(["q", "p"])}, None, raw=True)
    assert schema.version == 1
    assert bytes(dev.get("/rawput/a.col")) == np.array([3, -4], dtype="<i8").tobytes()
    assert bytes(dev.get("/rawput/s.col")) == np.array([1, 0], dtype="<u4").tobytes()
    assert csx.arrow.read_table(dev, "/rawput").to_pylist() == [{"a": 3, "s": "q"}, {"a": -4, "s": "p"}]
