"""Resident pushdown scans: the staged columns stay on the device between queries; a
resident run equals a fresh one and DuckDB over Parquet, and a write to the table
between two resident queries is seen by the second."""

import decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import csx
import csx.arrow
import csx.duckdb
import csx.scan
from csx.bench.lineitem import Q6, lineitem

ROWS = 50_000
SQL = Q6.replace("{t}", "lineitem")
TABLES = {"lineitem": "/tpch/lineitem"}


@pytest.fixture
def rdev(tmp_path):
    d = csx.Device.init(tmp_path / "dev", resident_memory=16 << 20)
    yield d
    d.close()


def oracle(t, tmp_path):
    path = tmp_path / "li.parquet"
    pq.write_table(t, path)
    return duckdb.connect().sql(Q6.replace("{t}", f"read_parquet('{path}')")).fetchall()


def run(dev, resident, chunk_rows=7_001):
    q = csx.duckdb.sql(duckdb.connect(), dev, SQL, TABLES, chunk_rows=chunk_rows, resident=resident)
    with q:
        return q.fetchall(), q.stats.tables[0].scans[0], q.explain()


def test_a_resident_run_equals_a_fresh_run_and_stages_nothing(rdev, tmp_path):
    t = lineitem(ROWS, seed=3)
    csx.arrow.put_table(rdev, "/tpch/lineitem", t)
    keeper = csx.scan.ResidentScans(rdev, budget=64 << 20)
    fresh, fs, _ = run(rdev, None)
    first, s1, _ = run(rdev, keeper)
    second, s2, text = run(rdev, keeper)
    assert fresh == first == second == oracle(t, tmp_path)
    assert not fs.resident and s1.resident and not s1.reused
    assert s2.reused, text
    assert "reused from resident memory" in text
    # Only the sentinels (a byte a file) are read from the media.
    assert s2.bytes_staged < 64 < s1.bytes_staged
    assert keeper.entries == 1 and keeper.kept_bytes > 0
    keeper.close()
    assert keeper.kept_bytes == 0


def test_fresh_scans_stage_into_the_devices_kept_windows(rdev, tmp_path):
    t = lineitem(ROWS, seed=5)
    csx.arrow.put_table(rdev, "/tpch/lineitem", t)
    own, so, _ = run(rdev, False)
    assert rdev._scan_windows is None
    fresh, s1, _ = run(rdev, None)
    windows = csx.scan.device_scan_windows(rdev)
    kept = windows.kept_bytes
    # The second query stages into the first one's windows: no more are made.
    again, s2, _ = run(rdev, None)
    assert own == fresh == again == oracle(t, tmp_path)
    assert not s1.resident and not s2.resident and not s2.reused
    assert s1.bytes_staged == s2.bytes_staged == so.bytes_staged
    assert kept > 0 and windows.entries == 0 and windows.kept_bytes == kept
    rdev.close()
    assert rdev._scan_windows is None


def test_a_write_between_resident_queries_is_seen(rdev, tmp_path):
    t = lineitem(ROWS, seed=4)
    csx.arrow.put_table(rdev, "/tpch/lineitem", t)
    before, _, _ = run(rdev, True)
    again, s, _ = run(rdev, True)
    assert again == before and s.reused
    # Every discount 0.06 (inside Q6's range): the revenue changes.
    disc = pa.array([decimal.Decimal("0.06")] * ROWS, t.schema.field("l_discount").type)
    t2 = t.set_column(t.schema.get_field_index("l_discount"), "l_discount", disc)
    csx.arrow.put_table(rdev, "/tpch/lineitem", t2)
    after, s, _ = run(rdev, True)
    fresh, _, _ = run(rdev, None)
    assert not s.reused, "the rewritten table is staged again"
    assert after == fresh == oracle(t2, tmp_path)
    assert after != before
    last, s, _ = run(rdev, True)
    assert last == after and s.reused


def test_without_resident_memory_every_resident_scan_stages(dev, tmp_path):
    t = lineitem(ROWS, seed=5)
    csx.arrow.put_table(dev, "/tpch/lineitem", t)
    a, _, _ = run(dev, True)
    b, s, _ = run(dev, True)
    assert a == b == oracle(t, tmp_path)
    assert s.resident and not s.reused


def test_resident_bad_arguments(rdev):
    t = lineitem(1_000)
    csx.arrow.put_table(rdev, "/tpch/lineitem", t)
    with pytest.raises(TypeError, match="resident must be"):
        csx.scan.scan(rdev, "/tpch/lineitem", resident="yes")
    with pytest.raises(TypeError, match="device must be"):
        csx.scan.ResidentScans("not a device")
    with pytest.raises(ValueError):
        csx.scan.ResidentScans(rdev, budget=-1)
    # A budget too small for any entry: the scan stages into its own memory.
    small = csx.scan.ResidentScans(rdev, budget=1)
    s = csx.scan.scan(rdev, "/tpch/lineitem", ["l_discount"], "l_quantity < 24", resident=small)
    n = s.to_table().num_rows
    assert n > 0 and not s.stats.resident and small.entries == 0


def test_closing_the_keeper_under_a_running_scan_is_an_error_not_a_wrong_answer(rdev):
    t = lineitem(ROWS, seed=6)
    csx.arrow.put_table(rdev, "/tpch/lineitem", t)
    keeper = csx.scan.ResidentScans(rdev)
    cols, flt = ["l_extendedprice", "l_discount"], "l_quantity < 24"
    want = csx.scan.scan(rdev, "/tpch/lineitem", cols, flt, chunk_rows=5_000).to_table()
    assert csx.scan.scan(rdev, "/tpch/lineitem", cols, flt, chunk_rows=5_000, resident=keeper).to_table() == want
    s = csx.scan.scan(rdev, "/tpch/lineitem", cols, flt, chunk_rows=5_000, resident=keeper)
    assert s.stats.reused
    batches = s.batches()
    first = next(batches)
    keeper.close()
    # The next chunks would read freed device memory: the device refuses.
    with pytest.raises(csx.CsxError):
        list(batches)
    assert first.num_rows > 0
    # The device still serves fresh scans.
    assert csx.scan.scan(rdev, "/tpch/lineitem", cols, flt, chunk_rows=5_000).to_table() == want
