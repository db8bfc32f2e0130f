"""Scale-out: TPC-H Q6 and Q1 over 1..64 csx storage nodes under Dask, with device
pushdown (csx.dask) against Dask reading the same data as Parquet without pushdown.

Two parts.

Wall (this machine). For each node count in --nodes (default 1,2,3): that many node
daemons (csx.dask.LocalNodes, --profile, default lambda-io: the device takes its
modelled time in real time) and a distributed.LocalCluster with one worker per node.
LINEITEM (csx gen tpch --sf) is placed with --partitions partitions, one copy each;
the Parquet copy is written as the same row ranges, one file per partition.

  pushdown  csx.dask.tpch_q6 / tpch_q1: the WHERE and the projection on the nodes,
            Dask aggregates the kept rows;
  parquet   dd.read_parquet of the query's columns (whole), the WHERE and the same
            aggregation in Dask.

Each is run --repeat times (median wall reported) and every answer is checked: the
pushdown answer must equal DuckDB's over the whole Parquet, and so must the Parquet
side's. Bytes into the workers: pushdown, the kept values the nodes sent (csx.dask.stats);
parquet, the query's columns decoded (rows x widths, what "reading the columns" moves
on a csx node: File Read of the column files), and the Parquet column chunks read
(compressed) for reference.

Model (1..64 nodes, --model-nodes, at each --model-sf, default 10 and 100). The same dataset spread
over N nodes, one partition per node (rows / N each). Every node has its own media and
its own link to the host its Dask worker runs on; the coordinator's link (where the
partial results go) is shared by all nodes. For one query:

  T(N)      = max(node(rows / N), N * dispatch) + N * (partial / coord_bw + coord_lat) + combine
  node(r)   pushdown: device(r) + host_kept(kept fraction * r)
            parquet:  pq_bytes(r) / media_bw + pq_bytes(r) / link_bw + link_lat + host_pq(r)
  device(r) = a + b * r, fitted (least squares) to the device's modelled ns of
            partitions of two sizes (the whole table, and eighths) scanned on one
            node under --profile: media -> device memory, the device's compute,
            device -> host link for the kept values, every command's latency
  host_kept the worker's time for the kept rows (Arrow -> pandas and the partial
            aggregate): c + d * kept, fitted to two sizes (all the kept rows, an
            eighth), each the best of 5 on this machine
  host_pq   the worker's time reading a Parquet file's columns, decoding, filtering
            and aggregating: e + f * r, fitted to the whole table's file and one
            partition's, best of 5 (a negative fitted
            intercept, noise, falls back to the proportional line through the
            larger size)
  media_bw, link_bw, link_lat: the profile's (lambda-io: 3.52 GB/s, 3.22 GB/s, 10 us)
  dispatch  the scheduler's wall per task, measured on this machine's LocalCluster
            (a batch of 200 no-op tasks submitted one by one as read() does, best of 5;
            dispatch overlaps the nodes' work, hence the max)
  partial   bytes of one partition's partial result (pickled, as Dask sends it);
            coord_bw, coord_lat: --coord-gbps (default 10 Gb/s) and 50 us
  combine   the final aggregation's wall over 64 partials (best of 5), times N / 64

Speedup(N) = T(1) / T(N). The goals: Q6 pushdown speedup from 1 to 16
nodes >= 12x (modelled), and pushdown's bytes into the workers >= 5x fewer than
reading the columns. Both are printed met or NOT met exactly as computed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import csx
import csx.data
import csx.scan

from . import lineitem as gen
from .tpch import _commit, _cpu, _loadavg

EPOCH = dt.date(1970, 1, 1)
COLUMN_WIDTHS = {"l_shipdate": 4, "l_quantity": 8, "l_extendedprice": 8, "l_discount": 8, "l_tax": 8, "l_returnflag": 4, "l_linestatus": 4}
QUERIES: Dict[str, Dict[str, Any]] = {
    "q6": {"columns": ["l_shipdate", "l_quantity", "l_extendedprice", "l_discount"], "sql": gen.Q6},
    "q1": {"columns": ["l_shipdate"] + gen.Q1_COLUMNS, "sql": gen.Q1},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sf", type=float, default=0.05, help="TPC-H scale factor of the measured data (default 0.05)")
    p.add_argument("--queries", default="q6,q1", help="comma-separated: q6, q1 (default both)")
    p.add_argument("--nodes", default="1,2,3", help="node counts run on this machine (default 1,2,3)")
    p.add_argument("--partitions", type=int, default=6, help="partitions of LINEITEM in the wall runs (default 6)")
    p.add_argument("--runs", "--repeat", dest="repeat", type=int, default=3, help="runs per query, side and node count (--repeat: the old spelling); the median wall is reported (default 3)")
    p.add_argument("--profile", default="lambda-io", help="the nodes' device performance profile (default lambda-io)")
    p.add_argument("--model-nodes", default="1,2,4,8,16,32,64", help="node counts of the model (default 1,2,4,8,16,32,64)")
    p.add_argument("--model-sf", default="10,100", help="scale factors the model spreads over the nodes, comma-separated (default 10,100)")
    p.add_argument("--coord-gbps", type=float, default=10.0, help="the coordinator's shared link, Gb/s (default 10)")
    p.add_argument("--plot", default=None, help="write an SVG of the modelled speedup, the wall times and the bytes here")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[scaleout] {msg}", file=sys.stderr, flush=True)


def _ints(text: str, name: str) -> List[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--{name}: {text!r} is not a comma-separated list of integers") from None
    if not out or any(n < 1 for n in out):
        raise SystemExit(f"--{name}: every count must be at least 1, got {text!r}")
    return out


# -- the Parquet side: Dask reading whole columns -----------------------------------


def _scaled(series: Any) -> np.ndarray:
    """A Parquet decimal column (pandas, Arrow-backed) as its scaled int64 values."""
    a = pa.array(series)
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    d = a.cast(pa.decimal128(18, a.type.scale))
    out: np.ndarray = np.frombuffer(d.buffers()[1], dtype="<i8")[2 * d.offset : 2 * (d.offset + len(d)) : 2].copy()
    return out


def _days(series: Any) -> np.ndarray:
    a = pa.array(series)
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    out: np.ndarray = a.cast(pa.date32()).cast(pa.int32()).to_numpy(zero_copy_only=False)
    return out


def _day(s: str) -> int:
    return (dt.date.fromisoformat(s) - EPOCH).days


def _pq_q6_partial(df: Any) -> Any:
    import pandas as pd

    ship = _days(df["l_shipdate"])
    qty, ext, disc = _scaled(df["l_quantity"]), _scaled(df["l_extendedprice"]), _scaled(df["l_discount"])
    keep = (ship >= _day("1994-01-01")) & (ship < _day("1995-01-01")) & (disc >= 5) & (disc <= 7) & (qty < 2400)
    return pd.DataFrame({"revenue": [int((ext[keep] * disc[keep]).sum())], "rows": [int(keep.sum())]})


def _pq_q1_partial(df: Any) -> Any:
    import pandas as pd

    from csx.dask.queries import _q1_partial

    ship = _days(df["l_shipdate"])
    keep = ship <= _day("1998-09-02")
    flat = pd.DataFrame(
        {
            "l_returnflag": np.asarray(df["l_returnflag"].astype(str))[keep],
            "l_linestatus": np.asarray(df["l_linestatus"].astype(str))[keep],
            **{c: _scaled(df[c])[keep] for c in ("l_quantity", "l_extendedprice", "l_discount", "l_tax")},
        }
    )
    return _q1_partial(flat, 100, 100)


def _q6_answer(revenue: int, rows: int) -> List[Any]:
    from decimal import Decimal

    return [(None,)] if rows == 0 else [(Decimal(int(revenue)).scaleb(-4),)]


def _q1_answer(groups: Any) -> List[Any]:
    from csx.dask.queries import _avg, _dec

    out = []
    for (flag, status), r in sorted(groups.iterrows(), key=lambda kv: kv[0]):
        n = int(r["n"])
        out.append(
            (flag, status, _dec(r["qty"], 2), _dec(r["ext"], 2), _dec(r["disc_price"], 4), _dec(r["charge"], 6),
             _avg(r["qty"], 2, n), _avg(r["ext"], 2, n), _avg(r["disc"], 2, n), n)
        )
    return out


def _run_parquet(files: List[str], query: str) -> List[Any]:
    import dask
    from dask.base import compute as dask_compute
    from dask.delayed import delayed as dask_delayed
    import dask.dataframe as dd
    import pandas as pd

    from csx.dask.queries import _combine

    df = dd.read_parquet(files, columns=QUERIES[query]["columns"])
    if query == "q6":
        meta = pd.DataFrame({"revenue": pd.Series([], dtype="int64"), "rows": pd.Series([], dtype="int64")})
        tot = df.map_partitions(_pq_q6_partial, meta=meta).sum().compute()
        return _q6_answer(int(tot["revenue"]), int(tot["rows"]))
    meta = pd.DataFrame({k: pd.Series([], dtype=object) for k in ("l_returnflag", "l_linestatus", "qty", "ext", "disc_price", "charge", "disc", "n")})
    parts = df.map_partitions(_pq_q1_partial, meta=meta)
    groups = dask_delayed(_combine)(parts.to_delayed(), ["l_returnflag", "l_linestatus"]).compute()
    return _q1_answer(groups)


def _same(query: str, got: List[Any], want: List[Any]) -> bool:
    if query == "q6":
        return got == want
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if g[:6] != w[:6] or g[9] != w[9]:
            return False
        if any(abs(a - b) > 1e-12 * max(abs(a), abs(b)) for a, b in zip(g[6:9], w[6:9])):
            return False
    return True


# -- measurement helpers --------------------------------------------------------------


def _write_parquet_parts(whole: str, out_dir: str, parts: int) -> List[str]:
    """The Parquet copy as ``parts`` files of the same row ranges as the partitions."""
    t = pq.read_table(whole)
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for i in range(parts):
        first = t.num_rows * i // parts
        n = t.num_rows * (i + 1) // parts - first
        f = os.path.join(out_dir, f"part-{i:04d}.parquet")
        pq.write_table(t.slice(first, n), f)
        files.append(f)
    return files


def _parquet_bytes(files: List[str], columns: List[str]) -> int:
    total = 0
    for f in files:
        md = pq.ParquetFile(f).metadata
        for rg in range(md.num_row_groups):
            g = md.row_group(rg)
            for c in range(g.num_columns):
                col = g.column(c)
                if col.path_in_schema in columns:
                    total += col.total_compressed_size
    return total


def _best(fn: Any, n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        best = min(best, time.perf_counter_ns() - t)
    return best


def _dispatch_ns(client: Any, tasks: int = 200) -> float:
    """The scheduler's wall per task: a batch of no-op tasks, best of 5."""

    def batch() -> None:
        fs = [client.submit(int, i, pure=False) for i in range(tasks)]
        client.gather(fs)

    return _best(batch) / tasks


def _fit(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """Least squares y = a + b x. A negative intercept (noise on a loaded machine) is
    replaced by the line through the origin and the largest x's mean y."""
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    b, a = np.polyfit(xs, ys, 1)
    if a < 0 or b < 0:
        top = xs.max()
        return 0.0, float(ys[xs == top].mean() / max(top, 1.0))
    return float(a), float(b)


def _profile_numbers(profile: str) -> Dict[str, float]:
    known = {
        "lambda-io": {"media_bw": 3.52e9, "link_bw": 3.22e9, "link_lat_ns": 10_000.0},
        "daisy": {"media_bw": 3.52e9, "link_bw": 2.65e9, "link_lat_ns": 10_000.0},
    }
    if profile not in known:
        raise SystemExit(f"--profile {profile!r}: the model knows lambda-io and daisy (an unthrottled device has no media or link time)")
    return known[profile]


def run(args: Any) -> int:
    queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    for q in queries:
        if q not in QUERIES:
            raise SystemExit(f"--queries: unknown query {q!r}; known: {', '.join(QUERIES)}")
    node_counts = _ints(args.nodes, "nodes")
    model_nodes = _ints(args.model_nodes, "model-nodes")
    if max(node_counts) > 16:
        raise SystemExit(f"--nodes: at most 16 daemons on one machine, got {max(node_counts)}")
    try:
        model_sfs = [float(x) for x in args.model_sf.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--model-sf: {args.model_sf!r} is not a comma-separated list of numbers") from None
    if args.repeat < 1 or args.partitions < 1 or args.sf <= 0 or not model_sfs or min(model_sfs) <= 0 or args.coord_gbps <= 0:
        raise SystemExit("--repeat, --partitions, --sf, --model-sf and --coord-gbps must be positive")
    prof = _profile_numbers(args.profile)
    try:
        import csx.dask
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise SystemExit(f"scaleout needs dask[dataframe] and distributed ({e}): pip install './python[dask]'") from None
    quiet = args.json
    meta: Dict[str, Any] = {
        "sf": args.sf,
        "profile": args.profile,
        "repeat": args.repeat,
        "partitions": args.partitions,
        "machine": f"{platform.node()}: {os.cpu_count()} cores, {_cpu()}",
        "commit": _commit(),
        "command": "python -m csx.bench scaleout " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["scaleout"] else sys.argv[1:]),
        "loadavg_before": _loadavg(),
    }
    wall: Dict[str, Dict[str, Any]] = {q: {} for q in queries}
    model_in: Dict[str, Dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="csx-bench-scaleout-") as work:
        _progress(f"generating TPC-H SF {args.sf:g}", quiet)
        tables = csx.data.generate("tpch", os.path.join(work, "data"), args.sf, seed=1)
        csx.data.write_parquet(os.path.join(work, "data"), os.path.join(work, "parquet"))
        rows = tables["lineitem"]
        meta["rows"] = rows
        whole = os.path.join(work, "parquet", "lineitem.parquet")
        files = _write_parquet_parts(whole, os.path.join(work, "pq-parts"), args.partitions)
        con = duckdb.connect()
        oracle = {q: con.sql(QUERIES[q]["sql"].replace("{t}", f"read_parquet('{whole}')")).fetchall() for q in queries}
        for n in node_counts:
            _progress(f"{n} node(s): starting daemons and {n} Dask worker(s)", quiet)
            with csx.dask.LocalNodes(os.path.join(work, f"nodes{n}"), n, profile=args.profile, nvm_size=1 << 30, slm_size=256 << 20, engines=1) as nodes, LocalCluster(
                n_workers=n, threads_per_worker=1, processes=False, dashboard_address=":0"
            ) as lc, Client(lc) as client:
                workers = sorted(client.scheduler_info()["workers"])
                cluster = csx.dask.Cluster(nodes.uris, client=client, workers=workers, catalogue=os.path.join(work, f"cat{n}.json"))
                csx.dask.put(os.path.join(work, "data", "lineitem"), cluster, partitions=args.partitions, replicas=1, table="/tpch/lineitem")
                for q in queries:
                    fn = csx.dask.tpch_q6 if q == "q6" else csx.dask.tpch_q1
                    push_walls, pq_walls = [], []
                    for i in range(args.repeat):
                        _progress(f"{n} node(s) {q}: run {i + 1}/{args.repeat}", quiet)
                        t = time.perf_counter_ns()
                        got = fn(cluster)
                        push_walls.append(time.perf_counter_ns() - t)
                        if not _same(q, got, oracle[q]):
                            raise SystemExit(f"{q} pushdown on {n} nodes: the answer differs from DuckDB's:\n{got}\n!=\n{oracle[q]}")
                        t = time.perf_counter_ns()
                        got = _run_parquet(files, q)
                        pq_walls.append(time.perf_counter_ns() - t)
                        if not _same(q, got, oracle[q]):
                            raise SystemExit(f"{q} parquet on {n} nodes: the answer differs from DuckDB's:\n{got}\n!=\n{oracle[q]}")
                    cols = QUERIES[q]["columns"]
                    filt = csx.dask.queries.Q6_FILTER if q == "q6" else csx.dask.queries.Q1_FILTER
                    pcols = csx.dask.queries.Q6_COLUMNS if q == "q6" else csx.dask.queries.Q1_COLUMNS
                    df = csx.dask.read(cluster, "/tpch/lineitem", pcols, filt, decimals="scaled")
                    st = csx.dask.stats(df)
                    wall[q][str(n)] = {
                        "pushdown_wall_ns": statistics.median(push_walls),
                        "parquet_wall_ns": statistics.median(pq_walls),
                        "pushdown_wall_ns_runs": push_walls,
                        "parquet_wall_ns_runs": pq_walls,
                        "bytes_to_workers_pushdown": st.bytes_to_workers,
                        "bytes_to_workers_columns": rows * sum(COLUMN_WIDTHS[c] for c in cols),
                        "bytes_parquet_read": _parquet_bytes(files, cols),
                        "rows_kept": st.rows_kept,
                        "partitions_by_node": st.partitions_by_node,
                        "answer_checked": True,
                    }
                if n == 1:
                    model_in = _measure_model(cluster, client, work, queries, rows, quiet)
        meta["loadavg_after_wall"] = _loadavg()
    model = {q: {f"{sf:g}": _model(model_in[q], prof, rows, args.sf, sf, args.coord_gbps, model_nodes) for sf in model_sfs} for q in queries}
    meta["loadavg_after"] = _loadavg()
    goals: Dict[str, Any] = {}
    if "q6" in queries:
        if 1 in model_nodes and 16 in model_nodes:
            for sf in model_sfs:
                m = model["q6"][f"{sf:g}"]["pushdown"]
                goals[f"q6_speedup_16_sf{sf:g}"] = m["time_ns"]["1"] / m["time_ns"]["16"]
                goals[f"q6_speedup_16_sf{sf:g}_goal_met"] = goals[f"q6_speedup_16_sf{sf:g}"] >= 12
        w = wall["q6"][str(node_counts[0])]
        goals["q6_bytes_reduction"] = w["bytes_to_workers_columns"] / max(1, w["bytes_to_workers_pushdown"])
        goals["q6_bytes_goal_met"] = goals["q6_bytes_reduction"] >= 5
    if "q1" in queries:
        w = wall["q1"][str(node_counts[0])]
        goals["q1_bytes_reduction"] = w["bytes_to_workers_columns"] / max(1, w["bytes_to_workers_pushdown"])
    out = {"meta": meta, "wall": wall, "model_inputs": model_in, "model": model, "goals": goals}
    if args.plot:
        _plot(args.plot, out, node_counts, model_nodes)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    _print(out, node_counts, model_nodes, args)
    return 0


def _measure_model(cluster: Any, client: Any, work: str, queries: List[str], rows: int, quiet: bool) -> Dict[str, Any]:
    """The model's inputs, measured on one node (see the module doc)."""
    import csx.dask
    from csx.dask.pushdown import _to_pandas
    from csx.dask.queries import _combine, _q1_partial

    _progress("model: dispatch cost, device fit, host costs", quiet)
    dispatch = _dispatch_ns(client)
    out: Dict[str, Any] = {}
    for q in queries:
        filt = csx.dask.queries.Q6_FILTER if q == "q6" else csx.dask.queries.Q1_FILTER
        pcols = csx.dask.queries.Q6_COLUMNS if q == "q6" else csx.dask.queries.Q1_COLUMNS
        points = []
        kept = 0
        bytes_kept = 0
        for parts in (1, 8):
            csx.dask.put(os.path.join(work, "data", "lineitem"), cluster, partitions=parts, replicas=1, table="/tpch/fit")
            st = csx.dask.stats(csx.dask.read(cluster, "/tpch/fit", pcols, filt, decimals="scaled"))
            for p in st.per_partition:
                points.append((p["rows_scanned"], p["modelled_ns"]))
            kept, bytes_kept = st.rows_kept, st.bytes_to_workers
        a, b = _fit(points)
        # Host per kept row: the kept rows as Arrow -> pandas -> the partial aggregate.
        dev = csx.Device.open(cluster.nodes[0].uri)
        try:
            entry = cluster.catalogue.get("/tpch/fit")
            arrow = csx.scan.scan(dev, entry.partitions[0].path, pcols, filt).to_table()
            for p in entry.partitions[1:]:
                arrow = pa.concat_tables([arrow, csx.scan.scan(dev, p.path, pcols, filt).to_table()])
        finally:
            dev.close()

        def host(t: Any) -> Any:
            def go() -> None:
                df = _to_pandas(t, "scaled")
                if q == "q6":
                    int((df["l_extendedprice"].to_numpy() * df["l_discount"].to_numpy()).sum())
                else:
                    _q1_partial(df, 100, 100)

            return go

        # Two sizes (all kept rows, an eighth of them): fixed + per kept row.
        eighth = arrow.slice(0, arrow.num_rows // 8)
        host_a, host_b = _fit([(arrow.num_rows, _best(host(arrow))), (eighth.num_rows, _best(host(eighth)))])
        files = sorted(os.path.join(work, "pq-parts", f) for f in os.listdir(os.path.join(work, "pq-parts")))
        cols = QUERIES[q]["columns"]
        whole = os.path.join(work, "parquet", "lineitem.parquet")

        def pq_host(f: str) -> Any:
            def go() -> None:
                df = pq.read_table(f, columns=cols).to_pandas(types_mapper=_arrow_dtype)
                (_pq_q6_partial if q == "q6" else _pq_q1_partial)(df)

            return go

        # Two sizes (the whole table's file, one partition's): fixed + per row.
        pq_a, pq_b = _fit([(rows, _best(pq_host(whole))), (pq.ParquetFile(files[0]).metadata.num_rows, _best(pq_host(files[0])))])
        # One partial result as Dask sends it, and the final combine over 64 partials.
        if q == "q6":
            partial = len(pickle.dumps((0, 0)))
            combine = _best(lambda: sum([1 << 40] * 64))
        else:
            part_df = _q1_partial(_to_pandas(arrow, "scaled"), 100, 100)
            partial = len(pickle.dumps(part_df))
            combine = _best(lambda: _combine([part_df] * 64, ["l_returnflag", "l_linestatus"]))
        out[q] = {
            "device_fit_a_ns": a,
            "device_fit_b_ns_per_row": b,
            "fit_points": points,
            "kept_fraction": kept / rows,
            "bytes_per_kept_row": bytes_kept / max(1, kept),
            "host_fit_a_ns": host_a,
            "host_fit_b_ns_per_kept_row": host_b,
            "host_pq_fit_a_ns": pq_a,
            "host_pq_fit_b_ns_per_row": pq_b,
            "parquet_bytes_per_row": _parquet_bytes(files, cols) / rows,
            "dispatch_ns_per_task": dispatch,
            "partial_bytes": partial,
            "combine_ns_64": combine,
        }
    csx.dask.drop_table(cluster, "/tpch/fit")
    return out


def _arrow_dtype(t: Any) -> Any:
    import pandas as pd

    return pd.ArrowDtype(t)


def _model(m: Dict[str, Any], prof: Dict[str, float], rows: int, sf: float, model_sf: float, coord_gbps: float, nodes: List[int]) -> Dict[str, Any]:
    total = rows * model_sf / sf
    coord_bw = coord_gbps * 1e9 / 8
    coord_lat = 50_000.0
    out: Dict[str, Any] = {"rows": total}
    for side in ("pushdown", "parquet"):
        times = {}
        for n in nodes:
            r = total / n
            if side == "pushdown":
                kept = m["kept_fraction"] * r
                node = m["device_fit_a_ns"] + m["device_fit_b_ns_per_row"] * r + m["host_fit_a_ns"] + m["host_fit_b_ns_per_kept_row"] * kept
            else:
                b = m["parquet_bytes_per_row"] * r
                host = m["host_pq_fit_a_ns"] + m["host_pq_fit_b_ns_per_row"] * r
                node = b / prof["media_bw"] * 1e9 + b / prof["link_bw"] * 1e9 + prof["link_lat_ns"] + host
            t = max(node, n * m["dispatch_ns_per_task"]) + n * (m["partial_bytes"] / coord_bw * 1e9 + coord_lat) + m["combine_ns_64"] * n / 64
            times[str(n)] = t
        base = times[str(nodes[0])]
        out[side] = {
            "time_ns": times,
            "speedup": {k: base / v for k, v in times.items()},
            "bytes_to_workers": (m["bytes_per_kept_row"] * m["kept_fraction"] * total) if side == "pushdown" else m["parquet_bytes_per_row"] * total,
        }
    return out


def _print(out: Dict[str, Any], node_counts: List[int], model_nodes: List[int], args: Any) -> None:
    meta = out["meta"]
    print(f"TPC-H SF {meta['sf']:g}: {meta['rows']:,} LINEITEM rows in {meta['partitions']} partitions; profile {meta['profile']}")
    print(f"machine {meta['machine']}; commit {meta['commit']}")
    print(f"load average before {meta['loadavg_before']}, after the wall runs {meta['loadavg_after_wall']}; median of {meta['repeat']} runs")
    print(f"{'query':5} {'nodes':>5} {'pushdown ms':>12} {'parquet ms':>11} {'into workers: pushdown MB':>26} {'columns MB':>11} {'parquet MB':>11}")
    for q, per in out["wall"].items():
        for n in node_counts:
            w = per[str(n)]
            print(
                f"{q:5} {n:5} {w['pushdown_wall_ns'] / 1e6:12.1f} {w['parquet_wall_ns'] / 1e6:11.1f} "
                f"{w['bytes_to_workers_pushdown'] / 1e6:26.3f} {w['bytes_to_workers_columns'] / 1e6:11.3f} {w['bytes_parquet_read'] / 1e6:11.3f}"
            )
    print(f"model (see the module doc): time ms and speedup over {model_nodes[0]} node(s)")
    print(f"{'query':5} {'SF':>5} {'nodes':>5} {'pushdown ms':>12} {'speedup':>8} {'parquet ms':>11} {'speedup':>8}")
    for q, per_sf in out["model"].items():
        for sf, m in per_sf.items():
            for n in model_nodes:
                p, b = m["pushdown"], m["parquet"]
                print(
                    f"{q:5} {sf:>5} {n:5} {p['time_ns'][str(n)] / 1e6:12.2f} {p['speedup'][str(n)]:8.2f} "
                    f"{b['time_ns'][str(n)] / 1e6:11.2f} {b['speedup'][str(n)]:8.2f}"
                )
    for q, mi in out["model_inputs"].items():
        print(
            f"{q} inputs: device {mi['device_fit_a_ns'] / 1e3:.1f} us + {mi['device_fit_b_ns_per_row']:.2f} ns/row; "
            f"kept {mi['kept_fraction']:.4f}; host {mi['host_fit_a_ns'] / 1e3:.0f} us + {mi['host_fit_b_ns_per_kept_row']:.1f} ns/kept row; "
            f"parquet host {mi['host_pq_fit_a_ns'] / 1e3:.0f} us + {mi['host_pq_fit_b_ns_per_row']:.1f} ns/row, "
            f"{mi['parquet_bytes_per_row']:.2f} B/row; dispatch {mi['dispatch_ns_per_task'] / 1e3:.0f} us/task"
        )
    g = out["goals"]
    for k in sorted(k for k in g if k.startswith("q6_speedup_16_sf") and not k.endswith("_met")):
        sf = k[len("q6_speedup_16_sf") :]
        print(f"Q6 modelled speedup 1 -> 16 nodes at SF {sf}: {g[k]:.2f}x (goal >= 12: {'met' if g[k + '_goal_met'] else 'NOT met'})")
    if "q6_bytes_reduction" in g:
        print(f"Q6 bytes into workers: {g['q6_bytes_reduction']:.1f}x fewer than the columns (goal >= 5: {'met' if g['q6_bytes_goal_met'] else 'NOT met'})")
    if "q1_bytes_reduction" in g:
        print(f"Q1 bytes into workers: {g['q1_bytes_reduction']:.2f}x fewer than the columns")
    if args.plot:
        print(f"plot: {args.plot}")


def _plot(path: str, out: Dict[str, Any], node_counts: List[int], model_nodes: List[int]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"
        matplotlib.rcParams["svg.hashsalt"] = "csx"
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install matplotlib (or './python[bench]')") from None
    meta = out["meta"]
    qs = list(out["model"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9))
    ax = axes[0]
    for q in qs:
        for sf, m in out["model"][q].items():
            for side, style in (("pushdown", "-o"), ("parquet", "--s")):
                sp = m[side]["speedup"]
                ax.plot(model_nodes, [sp[str(n)] for n in model_nodes], style, label=f"{q.upper()} SF {sf} {side}", markersize=3)
    ax.plot(model_nodes, model_nodes, ":", color="#999999", label="linear")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("nodes")
    ax.set_title("modelled speedup", fontsize=10)
    ax.legend(fontsize=6)
    ax = axes[1]
    for q in qs:
        for side, style in (("pushdown", "-o"), ("parquet", "--s")):
            ax.plot(node_counts, [out["wall"][q][str(n)][f"{side}_wall_ns"] / 1e6 for n in node_counts], style, label=f"{q.upper()} {side}")
    ax.set_xticks(node_counts)
    ax.set_xlabel("nodes (this machine)")
    ax.set_title("wall time (ms), median", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[2]
    n0 = str(node_counts[0])
    xs = list(range(len(qs)))
    for i, (key, label, color) in enumerate(
        (("bytes_to_workers_pushdown", "pushdown", "#2a6fb0"), ("bytes_to_workers_columns", "columns", "#888888"), ("bytes_parquet_read", "parquet chunks", "#e08a1e"))
    ):
        vals = [out["wall"][q][n0][key] / 1e6 for q in qs]
        pos = [x - 0.3 + 0.2 * (i + 0.5) for x in xs]
        ax.bar(pos, vals, 0.2, label=label, color=color)
    ax.set_xticks(xs)
    ax.set_xticklabels([q.upper() for q in qs])
    ax.set_title("bytes into the workers (MB)", fontsize=10)
    ax.legend(fontsize=7)
    fig.suptitle(
        f"Scale-out under Dask: TPC-H SF {meta['sf']:g} measured ({meta['rows']:,} rows), commit {meta['commit']}, load {meta['loadavg_before']}",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
