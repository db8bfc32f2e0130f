"""python -m csx.bench scaleout runs end to end at a tiny scale: every answer (pushdown
and Dask over Parquet, on 1 and 2 nodes) is checked against DuckDB inside the
benchmark; here the bytes accounting and the model's shape are checked (no timing is
asserted)."""

import json
import subprocess
import sys


def test_bench_scaleout_runs_checks_answers_and_accounts_bytes(tmp_path):
    plot = tmp_path / "scaleout.svg"
    out = subprocess.run(
        [sys.executable, "-m", "csx.bench", "scaleout", "--sf", "0.005", "--nodes", "1,2", "--runs", "1",
         "--model-nodes", "1,2,16", "--model-sf", "100", "--json", "--plot", str(plot)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    rows = r["meta"]["rows"]
    assert 25_000 < rows < 35_000  # csx gen tpch at SF 0.005: about 6e6 * SF lines
    for n in ("1", "2"):
        q6 = r["wall"]["q6"][n]
        assert q6["answer_checked"] and r["wall"]["q1"][n]["answer_checked"]
        # Pushdown sends the kept rows' two decimals; reading the columns moves all four.
        assert q6["bytes_to_workers_pushdown"] == q6["rows_kept"] * 16
        assert q6["bytes_to_workers_columns"] == rows * (4 + 8 + 8 + 8)
        assert 0 < q6["bytes_parquet_read"]
        assert sum(q6["partitions_by_node"].values()) == 6 and len(q6["partitions_by_node"]) == int(n)
    # At SF 100 a node's share of the data, not the scheduler, sets the time of 2 nodes.
    m = r["model"]["q6"]["100"]["pushdown"]
    assert m["speedup"]["1"] == 1.0 and m["speedup"]["2"] > 1.5
    assert m["time_ns"]["16"] < m["time_ns"]["2"] < m["time_ns"]["1"]
    assert set(r["goals"]) >= {"q6_speedup_16_sf100", "q6_speedup_16_sf100_goal_met", "q6_bytes_reduction", "q6_bytes_goal_met"}
    assert r["goals"]["q6_bytes_reduction"] == r["wall"]["q6"]["1"]["bytes_to_workers_columns"] / r["wall"]["q6"]["1"]["bytes_to_workers_pushdown"]
    assert plot.read_text().lstrip().startswith("<?xml")


def test_bench_scaleout_rejects_bad_arguments():
    for argv, word in ((["--queries", "q99"], "q99"), (["--nodes", "0"], "--nodes"), (["--profile", "unthrottled"], "unthrottled")):
        out = subprocess.run([sys.executable, "-m", "csx.bench", "scaleout", *argv], capture_output=True, text=True)
        assert out.returncode != 0
        assert word in out.stderr
