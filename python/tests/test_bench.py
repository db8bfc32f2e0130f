"""python -m csx.bench tpch runs end to end at a tiny scale: answers checked against
DuckDB over Parquet inside the benchmark, bytes accounted (no timing is asserted)."""

import json
import subprocess
import sys


def test_bench_tpch_runs_and_accounts_bytes(tmp_path):
    plot = tmp_path / "tpch.svg"
    out = subprocess.run(
        [sys.executable, "-m", "csx.bench", "tpch", "--sf", "0.002", "--runs", "1", "--engines", "jit,interp", "--json", "--plot", str(plot)],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(out.stdout)
    # The build of the module the embedded device ran (the tests import the dev build).
    from csx import _native

    assert r["meta"]["native_build"] == f"{_native.BUILD_PROFILE} (opt-level {_native.BUILD_OPT_LEVEL})"
    assert _native.BUILD_PROFILE in ("dev", "release")
    rows = r["meta"]["rows"]
    assert 10_000 < rows < 14_000  # csx gen tpch at SF 0.002: about 6e6 * SF lines
    q6 = r["results"]["q6"]
    assert q6["answer_checked"]
    # Alone reads four whole columns, as stored: csx gen's encoded blocks, fewer bytes
    # than the raw values (l_shipdate 4 bytes, three decimals 8 each) but more than the
    # kept rows pushdown sends.
    alone = q6["alone"]["bytes_to_host"]
    assert q6["pushdown"]["bytes_to_host"] < alone < rows * (4 + 8 + 8 + 8)
    # Pushdown reads only the kept rows' two decimals, staged as 4-byte values (their
    # blocks' values fit 4 bytes) and widened back on the host.
    assert q6["pushdown"]["bytes_to_host"] == q6["pushdown"]["rows_kept"] * 8
    assert 0 < q6["pushdown"]["rows_kept"] < rows
    assert set(r["goals"]) >= {"q6_wall_ratio", "q6_bytes_reduction", "q6_modelled_ratio"}
    # Pushdown on the interpreter kept the same rows.
    assert q6["pushdown_interp"]["rows_kept"] == q6["pushdown"]["rows_kept"]
    assert q6["pushdown_interp"]["bytes_to_host"] == q6["pushdown"]["bytes_to_host"]
    assert r["results"]["q1"]["answer_checked"]
    # DuckDB alone on the host over the same data, no bytes from the device.
    for side in ("duckdb_parquet", "duckdb_parquet_cold", "duckdb_memory"):
        assert q6[side]["bytes_to_host"] == 0 and q6[side]["wall_ns"] > 0, side
    assert r["meta"]["duckdb_threads"] == 2 and r["meta"]["cold_drop"]
    # The resident row found its staged columns kept: only the sentinels were read.
    res = q6["pushdown_resident"]
    assert res["reused"] and res["rows_kept"] == q6["pushdown"]["rows_kept"]
    assert res["bytes_staged"] < 64 < q6["pushdown"]["bytes_staged"]
    # The side-by-side verdicts, as the walls say: fresh pushdown against Parquet,
    # resident against DuckDB's memory.
    for side, ours in (("duckdb_parquet", "pushdown"), ("duckdb_memory", "pushdown_resident")):
        met = r["goals"][f"q6_pushdown_le_{side}_met"]
        assert met == (q6[ours]["wall_ns"] <= q6[side]["wall_ns"]), side
    # Offload against host-only, modelled under both profiles, with daisy's verdict.
    m = r["goals"]["modelled_offload"]
    assert set(m) == {"daisy", "lambda-io"}
    for prof, per_q in m.items():
        assert set(per_q) == {"q6", "q1"}
        for v in per_q.values():
            assert v["offload_modelled_ns"] > 0 and v["host_only_modelled_ns"] > 0
            assert v["resident_modelled_ns"] > 0
            assert v["offload_speedup"] == v["host_only_modelled_ns"] / v["offload_modelled_ns"]
            if prof == "daisy":
                assert v["goal_speedup"] == 2.0 and v["goal_met"] == (v["offload_speedup"] >= 2.0)
            else:
                assert v["goal_met"] is None
    assert plot.read_text().lstrip().startswith("<?xml")


def test_bench_rejects_bad_arguments():
    out = subprocess.run(
        [sys.executable, "-m", "csx.bench", "tpch", "--queries", "q99"], capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "q99" in out.stderr
