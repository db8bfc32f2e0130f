"""TPC-H Q6 and Q1: DuckDB alone against DuckDB with device pushdown.

Both sides start from the same LINEITEM on the same device (an embedded device under a
performance profile, lambda-io by default, in a temporary directory; throttling off, as
in `csx bench ssb`: wall times are this machine's, modelled times the profile's):

  alone     the query's columns are read whole to the host (File Read commands) as
            Arrow, and DuckDB runs the whole query over them;
  pushdown  csx.duckdb.sql over the query's own SQL text: its WHERE clause and the
            projection run on the device (csx.scan), DuckDB aggregates the record
            batch stream of kept rows.
  pushdown_resident
            the same with resident scans (csx.scan.ResidentScans): the staged columns
            stay in device memory between queries (one run before the timed ones
            stages them; each timed run must find them, "reused").

For each query and side it reports the median wall time of --repeat runs, the
modelled time (the device commands' modelled ns under the profile, plus the host's
own measured time for the DuckDB part), and the bytes that crossed to the host. Every
answer is checked against DuckDB over the Parquet copy of the data.

Side by side, interleaved with the runs above, DuckDB on the host alone over the same
data with no device (threads 2, this machine's cores):

  duckdb_parquet       over the Parquet copy, its pages in the page cache (warm);
  duckdb_parquet_cold  the same after the copy's pages are dropped from the page cache
                       (posix_fadvise DONTNEED: permitted without privileges, the
                       kernel may keep pages others map; "cold_drop" says what ran);
  duckdb_memory        from a table in DuckDB's own memory.

Modelled offload (--profiles, default daisy and lambda-io): each query's alone
(host-only: the columns to the host, DuckDB there) and pushdown (offload) sides once on
a device under each profile; the verdict per profile is offload's speedup against the
goal (daisy: offload at least 2x faster than host-only; lambda-io: reported).

Pushdown runs csx-data's scan (a program emitted per query, one pass per chunk) on
the device's JIT ("pushdown"), and with --engines jit,interp on its interpreter too
("pushdown_interp").

The data: LINEITEM from csx-data's `csx gen tpch` (the specification's distributions;
--data takes an existing output), or with --generator package the package's seeded
generator of the Q1/Q6 columns (csx.bench.lineitem), about 6,000,000 * SF rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import csx
import csx.arrow
import csx.data
import csx.duckdb
import csx.scan
from csx.scan import host_table

from . import lineitem as gen

QUERIES: Dict[str, Dict[str, Any]] = {
    "q6": {
        "columns_all": ["l_shipdate", "l_discount", "l_quantity", "l_extendedprice"],
        "pushdown_columns": ["l_extendedprice", "l_discount"],
        "filter": gen.Q6_FILTER,
        "sql": gen.Q6,
        "select": gen.Q6_SELECT,
    },
    "q1": {
        "columns_all": ["l_shipdate"] + gen.Q1_COLUMNS,
        "pushdown_columns": gen.Q1_COLUMNS,
        "filter": gen.Q1_FILTER,
        "sql": gen.Q1,
        "select": gen.Q1_SELECT.replace("{where}", ""),
    },
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sf", type=float, default=1.0, help="scale factor (LINEITEM has 6e6 * SF rows; default 1)")
    p.add_argument("--queries", default="q6,q1", help="comma-separated: q6, q1 (default both)")
    p.add_argument("--runs", "--repeat", dest="repeat", type=int, default=5, help="runs per query and side (--repeat: the old spelling); the median is reported (default 5)")
    p.add_argument("--profile", default="lambda-io", help="the device's performance profile (default lambda-io)")
    p.add_argument("--chunk-rows", type=int, default=None, help="rows per device scan chunk (default 1Mi)")
    p.add_argument("--data", default=None, help="a `csx gen tpch` output directory to use instead of generating")
    p.add_argument(
        "--generator",
        choices=["csx-data", "package"],
        default="csx-data",
        help="csx-data: `csx gen tpch` (the specification's distributions, default); "
        "package: csx.bench.lineitem (the Q1/Q6 columns only)",
    )
    p.add_argument(
        "--engines",
        default="jit",
        help="engine kinds the pushdown scan runs on: jit, interp, comma-separated (default jit)",
    )
    p.add_argument("--plot", default=None, help="write an SVG bar chart of wall, modelled time and bytes here")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument(
        "--profiles",
        default="daisy,lambda-io",
        help="profiles to model offload against host-only under, comma-separated ('' for none; default daisy,lambda-io)",
    )
    p.add_argument("--keep", default=None, help="keep the device and data in this directory (default: a temporary one, deleted)")


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def _commit() -> str:
    # The package's own checkout, else the working directory's (a release build runs the
    # package from an install outside the tree, started from the tree's root).
    for where in (os.path.dirname(os.path.abspath(__file__)), os.getcwd()):
        try:
            return subprocess.run(
                ["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
    return "unknown"


def native_build() -> str:
    """The Cargo profile and optimisation level ``csx._native`` was built with: the
    device embedded in this process runs that code ("dev": unoptimised workspace
    crates, what scripts/python-test.sh builds; scripts/python-release.sh builds and
    runs "release")."""
    from csx import _native

    profile = getattr(_native, "BUILD_PROFILE", "unknown")
    opt = getattr(_native, "BUILD_OPT_LEVEL", "unknown")
    return f"{profile} (opt-level {opt})"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[tpch] {msg}", file=sys.stderr, flush=True)


def _load_lineitem(args: Any, work: str, quiet: bool) -> "tuple[Optional[pa.Table], Optional[str], str, str]":
    """(LINEITEM as Arrow or None, the local dataset directory or None, its Parquet
    path, a description)."""
    rows = int(round(6_000_000 * args.sf))
    if args.data:
        _progress(f"using {args.data}", quiet)
        pq_dir = os.path.join(work, "parquet")
        csx.data.write_parquet(args.data, pq_dir)
        return None, args.data, os.path.join(pq_dir, "lineitem.parquet"), f"csx gen tpch output {args.data}"
    if args.generator == "csx-data":
        data = os.path.join(work, "data")
        _progress(f"generating TPC-H SF {args.sf:g} (csx-data)", quiet)
        tables = csx.data.generate("tpch", data, args.sf, seed=1)
        pq_dir = os.path.join(work, "parquet")
        _progress("writing the Parquet copy", quiet)
        csx.data.write_parquet(data, pq_dir)
        return None, data, os.path.join(pq_dir, "lineitem.parquet"), f"csx gen tpch --sf {args.sf:g} --seed 1 ({tables['lineitem']:,} LINEITEM rows)"
    _progress(f"generating LINEITEM, {rows:,} rows (csx.bench.lineitem)", quiet)
    t = gen.lineitem(rows, seed=1)
    path = os.path.join(work, "lineitem.parquet")
    pq.write_table(t, path)
    return t, None, path, "csx.bench.lineitem (seeded, the Q1/Q6 columns' TPC-H domains)"


def _read_local_table(table_dir: str) -> pa.Table:
    """A local columnar table directory as Arrow (csx-data's reader, as csx.arrow)."""
    return csx.arrow.read_local_table(table_dir)


def _median(xs: List[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _run_alone(con: Any, dev: Any, q: Dict[str, Any]) -> Dict[str, Any]:
    t0 = time.perf_counter_ns()
    table, meter = host_table(dev, "/tpch/lineitem", q["columns_all"])
    t1 = time.perf_counter_ns()
    con.register("li_alone", table)
    answer = con.sql(q["sql"].replace("{t}", "li_alone")).fetchall()
    t2 = time.perf_counter_ns()
    con.unregister("li_alone")
    return {
        "answer": answer,
        "wall_ns": t2 - t0,
        "device_wall_ns": t1 - t0,
        "host_ns": t2 - t1,
        "device_modelled_ns": meter["modelled_ns"],
        "modelled_ns": meter["modelled_ns"] + (t2 - t1),
        "bytes_to_host": meter["bytes_to_host"],
    }


def _run_pushdown(con: Any, dev: Any, q: Dict[str, Any], chunk_rows: Optional[int], engine: str, resident: Any = None) -> Dict[str, Any]:
    t0 = time.perf_counter_ns()
    # The query's own SQL text: csx.duckdb.sql moves its WHERE to the device.
    pq = csx.duckdb.sql(
        con, dev, q["sql"].replace("{t}", "lineitem"), {"lineitem": "/tpch/lineitem"},
        chunk_rows=chunk_rows, engine=engine, resident=resident,
    )
    answer = pq.fetchall()
    t1 = time.perf_counter_ns()
    pq.close()
    if pq.stats.in_duckdb or pq.tables_columns() != [sorted(q["pushdown_columns"])]:
        raise SystemExit(f"the pushdown plan is not the expected one:\n{pq.explain()}")
    st = pq.stats.tables[0].scans[0]
    host_ns = max(0, (t1 - t0) - st.wall_ns - st.program_build_ns - st.setup_ns)
    return {
        "answer": answer,
        "wall_ns": t1 - t0,
        "device_wall_ns": st.wall_ns + st.setup_ns,
        "host_ns": host_ns,
        "device_modelled_ns": st.modelled_ns,
        "modelled_ns": st.modelled_ns + host_ns,
        "bytes_to_host": st.bytes_to_host,
        "bytes_staged": st.bytes_staged,
        "rows_kept": st.rows_kept,
        "rows_scanned": st.rows_scanned,
        "program_build_ns": st.program_build_ns,
        "reused": st.reused,
    }


def _run_resident(con: Any, dev: Any, q: Dict[str, Any], chunk_rows: Optional[int], keeper: Any) -> Dict[str, Any]:
    """A pushdown run through ``keeper`` that must find its staged columns kept."""
    r = _run_pushdown(con, dev, q, chunk_rows, "jit", keeper)
    if not r["reused"]:
        raise SystemExit("a resident run staged its columns again: nothing wrote the table")
    return r


# DuckDB's threads beside csx (this machine's cores), as `csx bench ssb`.
DUCKDB_THREADS = 2

# The device's resident memory (the resident scans' sentinels: one byte a file) and the
# resident scans' budget (Q6 keeps 168 MB at SF 1; Q1 another 280 MB).
RESIDENT_MEMORY = 16 << 20
RESIDENT_BUDGET = 1 << 30

# What each profile's modelled offload must reach against host-only (speedup); None:
# reported without a goal.
PROFILE_GOALS: Dict[str, Optional[float]] = {"daisy": 2.0, "lambda-io": None}


def _close(a: Any, b: Any) -> bool:
    """Equal answers, floats to a relative 1e-9 (summation order)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _drop_cached(path: str) -> str:
    """Drops ``path``'s pages from the page cache where permitted; what ran."""
    if not hasattr(os, "posix_fadvise"):
        return "not permitted here (no posix_fadvise): warm"
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return "posix_fadvise DONTNEED"


def _run_duckdb(con: Any, sql: str, source: str) -> Dict[str, Any]:
    t0 = time.perf_counter_ns()
    answer = con.sql(sql.replace("{t}", source)).fetchall()
    t1 = time.perf_counter_ns()
    return {
        "answer": answer,
        "wall_ns": t1 - t0,
        "device_wall_ns": 0,
        "host_ns": t1 - t0,
        "device_modelled_ns": 0,
        "modelled_ns": t1 - t0,
        "bytes_to_host": 0,
    }


def _duckdb_sides(host_con: Any, q: Dict[str, Any], parquet: str) -> Dict[str, Dict[str, Any]]:
    """One round of DuckDB alone on the host: Parquet warm, Parquet cold, memory."""
    src = f"read_parquet('{parquet}')"
    out = {"duckdb_parquet": _run_duckdb(host_con, q["sql"], src)}
    _drop_cached(parquet)
    out["duckdb_parquet_cold"] = _run_duckdb(host_con, q["sql"], src)
    out["duckdb_memory"] = _run_duckdb(host_con, q["sql"], "li_memory")
    return out


def _model_profiles(args: Any, work: str, data_dir: Optional[str], t: Optional[pa.Table], queries: List[str], quiet: bool) -> Dict[str, Any]:
    """Each query's host-only (alone) and offload (pushdown) sides once on a device under
    each of --profiles; modelled ns, speedup and verdict."""
    profiles = [x.strip() for x in args.profiles.split(",") if x.strip()]
    out: Dict[str, Any] = {}
    for prof in profiles:
        _progress(f"modelling under {prof}", quiet)
        dev = csx.Device.init(
            os.path.join(work, f"dev-{prof}"),
            profile=prof,
            nvm_size=8 << 30,
            slm_size=2 << 30,
            resident_memory=RESIDENT_MEMORY,
            throttle=False,
        )
        try:
            if t is not None:
                csx.arrow.put_table(dev, "/tpch/lineitem", t)
            else:
                assert data_dir is not None
                csx.data.put_dir(dev, os.path.join(data_dir, "lineitem"), "/tpch/lineitem")
            con = duckdb.connect()
            con.execute(f"SET threads = {DUCKDB_THREADS}")
            per_q: Dict[str, Any] = {}
            for name in queries:
                q = QUERIES[name]
                # The host's part of each side is measured: the median of up to 3 runs.
                alones, pushes, kept = [], [], []
                keeper = csx.scan.ResidentScans(dev, budget=RESIDENT_BUDGET)
                _run_pushdown(con, dev, q, args.chunk_rows, "jit", keeper)
                for _ in range(max(1, min(args.repeat, 3))):
                    alones.append(_run_alone(con, dev, q))
                    pushes.append(_run_pushdown(con, dev, q, args.chunk_rows, "jit"))
                    kept.append(_run_resident(con, dev, q, args.chunk_rows, keeper))
                    if not alones[-1]["answer"] == pushes[-1]["answer"] == kept[-1]["answer"]:
                        raise SystemExit(f"{name} under {prof}: pushdown and host-only answers differ")
                keeper.close()
                alone, push, res = _summary(alones), _summary(pushes), _summary(kept)
                speedup = alone["modelled_ns"] / max(1, push["modelled_ns"])
                goal = PROFILE_GOALS.get(prof)
                per_q[name] = {
                    "host_only_modelled_ns": alone["modelled_ns"],
                    "offload_modelled_ns": push["modelled_ns"],
                    "offload_device_modelled_ns": push["device_modelled_ns"],
                    "offload_speedup": speedup,
                    "resident_modelled_ns": res["modelled_ns"],
                    "resident_speedup": alone["modelled_ns"] / max(1, res["modelled_ns"]),
                    "goal_speedup": goal,
                    "goal_met": None if goal is None else speedup >= goal,
                }
            out[prof] = per_q
        finally:
            dev.close()
            shutil.rmtree(os.path.join(work, f"dev-{prof}"), ignore_errors=True)
    return out


def _summary(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    keys = ["wall_ns", "device_wall_ns", "host_ns", "device_modelled_ns", "modelled_ns"]
    out: Dict[str, Any] = {k: _median([r[k] for r in runs]) for k in keys}
    out["wall_ns_runs"] = [r["wall_ns"] for r in runs]
    out["bytes_to_host"] = runs[-1]["bytes_to_host"]
    for k in ("bytes_staged", "rows_kept", "rows_scanned", "reused"):
        if k in runs[-1]:
            out[k] = runs[-1][k]
    return out


def _plot(path: str, results: Dict[str, Any], meta: Dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a small SVG
        matplotlib.rcParams["svg.hashsalt"] = "csx"  # stable ids between runs
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install matplotlib (or './python[bench]')") from None
    qs = list(results)
    sides = [k for k in results[qs[0]] if isinstance(results[qs[0]][k], dict)]
    labels = {"alone": "DuckDB alone", "pushdown": "DuckDB + csx pushdown (JIT)", "pushdown_interp": "DuckDB + csx pushdown (interpreter)", "pushdown_resident": "DuckDB + csx pushdown, resident"}
    colors = {"alone": "#888888", "pushdown": "#2a6fb0", "pushdown_interp": "#e08a1e", "pushdown_resident": "#4caf50"}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    metrics = [
        ("wall_ns", "wall time (ms)", 1e6),
        ("modelled_ns", f"modelled time, {meta['profile']} (ms)", 1e6),
        ("bytes_to_host", "bytes to host (MB)", 1e6),
    ]
    width = 0.8 / len(sides)
    for ax, (key, label, div) in zip(axes, metrics):
        xs = list(range(len(qs)))
        for i, side in enumerate(sides):
            vals = [results[q][side][key] / div for q in qs]
            pos = [x - 0.4 + width * (i + 0.5) for x in xs]
            ax.bar(pos, vals, width, label=labels.get(side, side), color=colors.get(side))
            for x, v in zip(pos, vals):
                ax.annotate(f"{v:.3g}", (x, v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(xs)
        ax.set_xticklabels([q.upper() for q in qs])
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"TPC-H SF {meta['sf']:g} on csx ({meta['rows']:,} LINEITEM rows; commit {meta['commit']}, "
        f"csx._native {meta['native_build']}, load {meta['loadavg_before']})",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def run(args: Any) -> int:
    queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    for q in queries:
        if q not in QUERIES:
            raise SystemExit(f"--queries: unknown query {q!r}; known: {', '.join(QUERIES)}")
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    if args.sf <= 0:
        raise SystemExit("--sf must be positive")
    engines = [b.strip() for b in args.engines.split(",") if b.strip()]
    for b in engines:
        if b not in ("jit", "interp"):
            raise SystemExit(f"--engines: unknown engine {b!r}; known: jit, interp")
    quiet = args.json
    work_ctx = tempfile.TemporaryDirectory(prefix="csx-bench-tpch-") if args.keep is None else None
    work = work_ctx.name if work_ctx else args.keep
    os.makedirs(work, exist_ok=True)
    meta: Dict[str, Any] = {
        "sf": args.sf,
        "profile": args.profile,
        "throttle": False,
        "repeat": args.repeat,
        "machine": f"{platform.node()}: {os.cpu_count()} cores, {_cpu()}",
        "commit": _commit(),
        "command": "python -m csx.bench tpch " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["tpch"] else sys.argv[1:]),
        "loadavg_before": _loadavg(),
        "duckdb": duckdb.__version__,
        "native_build": native_build(),
    }
    try:
        t, data_dir, parquet, source = _load_lineitem(args, work, quiet)
        meta["data"] = source
        meta["engines"] = engines
        _progress(f"creating an embedded device ({args.profile}) and putting LINEITEM on it", quiet)
        dev = csx.Device.init(
            os.path.join(work, "dev"),
            profile=args.profile,
            nvm_size=8 << 30,
            slm_size=2 << 30,
            resident_memory=RESIDENT_MEMORY,
            throttle=False,
        )
        try:
            if t is not None:
                csx.arrow.put_table(dev, "/tpch/lineitem", t)
            else:
                assert data_dir is not None
                csx.data.put_dir(dev, os.path.join(data_dir, "lineitem"), "/tpch/lineitem")
            meta["rows"] = csx.arrow.read_schema(dev, "/tpch/lineitem").rows
            con = duckdb.connect()
            # DuckDB alone on the host: its own connection, threads as beside csx.
            host_con = duckdb.connect()
            host_con.execute(f"SET threads = {DUCKDB_THREADS}")
            host_con.execute(f"CREATE TABLE li_memory AS SELECT * FROM read_parquet('{parquet}')")
            meta["duckdb_threads"] = DUCKDB_THREADS
            meta["cold_drop"] = _drop_cached(parquet)
            results: Dict[str, Any] = {}
            keeper = csx.scan.ResidentScans(dev, budget=RESIDENT_BUDGET)
            for name in queries:
                q = QUERIES[name]
                oracle = con.sql(q["sql"].replace("{t}", f"read_parquet('{parquet}')")).fetchall()
                runs: Dict[str, List[Dict[str, Any]]] = {"alone": []}
                for b in engines:
                    runs["pushdown" if b == "jit" else "pushdown_interp"] = []
                runs["pushdown_resident"] = []
                # Stages the resident entry (checked against the oracle too).
                first = _run_pushdown(con, dev, q, args.chunk_rows, "jit", keeper)
                if first["answer"] != oracle:
                    raise SystemExit(f"{name} pushdown_resident (staging): the answer differs from DuckDB over Parquet")
                for side in ("duckdb_parquet", "duckdb_parquet_cold", "duckdb_memory"):
                    runs[side] = []
                for i in range(args.repeat):
                    _progress(f"{name}: run {i + 1}/{args.repeat}", quiet)
                    got = {"alone": _run_alone(con, dev, q)}
                    for b in engines:
                        side = "pushdown" if b == "jit" else "pushdown_interp"
                        got[side] = _run_pushdown(con, dev, q, args.chunk_rows, b)
                    got["pushdown_resident"] = _run_resident(con, dev, q, args.chunk_rows, keeper)
                    got.update(_duckdb_sides(host_con, q, parquet))
                    for side, r in got.items():
                        # DuckDB's own runs on other threads may sum floats in another
                        # order: their AVGs agree to rounding.
                        same = _close(r["answer"], oracle) if side.startswith("duckdb") else r["answer"] == oracle
                        if not same:
                            raise SystemExit(f"{name} {side}: the answer differs from DuckDB over Parquet:\n{r['answer']}\n!=\n{oracle}")
                        runs[side].append(r)
                results[name] = {side: _summary(rs) for side, rs in runs.items()}
                results[name]["answer_checked"] = True
            keeper.close()
            host_con.close()
        finally:
            dev.close()
        modelled = _model_profiles(args, work, data_dir, t, queries, quiet)
    finally:
        meta["loadavg_after"] = _loadavg()
        if work_ctx:
            work_ctx.cleanup()
    goals = {}
    if "q6" in results and "pushdown" in results["q6"]:
        r = results["q6"]
        goals["q6_wall_ratio"] = r["pushdown"]["wall_ns"] / r["alone"]["wall_ns"]
        goals["q6_wall_goal_met"] = goals["q6_wall_ratio"] <= 1.5
        goals["q6_bytes_reduction"] = r["alone"]["bytes_to_host"] / max(1, r["pushdown"]["bytes_to_host"])
        goals["q6_bytes_goal_met"] = goals["q6_bytes_reduction"] >= 5
        goals["q6_modelled_ratio"] = r["pushdown"]["modelled_ns"] / r["alone"]["modelled_ns"]
        goals["q6_modelled_goal_met"] = goals["q6_modelled_ratio"] < 1
        # Side by side (medians of interleaved runs, warm): the pushdown with fresh
        # staging against DuckDB over Parquet, the resident pushdown (staged columns kept
        # on the device) against DuckDB from its own memory.
        pairs = {"duckdb_parquet": "pushdown", "duckdb_memory": "pushdown_resident"}
        for side, ours in pairs.items():
            if side in r and ours in r:
                goals[f"q6_pushdown_le_{side}_met"] = r[ours]["wall_ns"] <= r[side]["wall_ns"]
                goals[f"q6_{ours}_vs_{side}_wall_ratio"] = r[ours]["wall_ns"] / r[side]["wall_ns"]
    if args.plot:
        _plot(args.plot, results, meta)
    goals["modelled_offload"] = modelled
    out = {"meta": meta, "results": results, "goals": goals}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"TPC-H SF {args.sf:g}: {meta['rows']:,} LINEITEM rows ({meta['data']})")
    print(f"machine {meta['machine']}; commit {meta['commit']}; duckdb {meta['duckdb']}; csx._native {meta['native_build']}")
    print(f"load average before {meta['loadavg_before']}, after {meta['loadavg_after']}; median of {args.repeat} runs")
    print(f"{'query':6} {'side':19} {'wall ms':>9} {'modelled ms':>12} {'device ms':>10} {'host ms':>8} {'to host MB':>11}")
    for name, r in results.items():
        for side in [k for k in r if isinstance(r[k], dict)]:
            s = r[side]
            print(
                f"{name:6} {side:19} {s['wall_ns'] / 1e6:9.1f} {s['modelled_ns'] / 1e6:12.1f} "
                f"{s['device_modelled_ns'] / 1e6:10.1f} {s['host_ns'] / 1e6:8.1f} {s['bytes_to_host'] / 1e6:11.2f}"
            )
    if goals:
        print(
            f"Q6 goals: wall pushdown/alone {goals['q6_wall_ratio']:.2f} (goal <= 1.5: {'met' if goals['q6_wall_goal_met'] else 'NOT met'}), "
            f"bytes {goals['q6_bytes_reduction']:.1f}x fewer (goal >= 5: {'met' if goals['q6_bytes_goal_met'] else 'NOT met'}), "
            f"modelled pushdown/alone {goals['q6_modelled_ratio']:.2f} (goal < 1: {'met' if goals['q6_modelled_goal_met'] else 'NOT met'})"
        )
        for side, ours in (("duckdb_parquet", "pushdown"), ("duckdb_memory", "pushdown_resident")):
            k = f"q6_pushdown_le_{side}_met"
            if k in goals:
                ratio = goals[f"q6_{ours}_vs_{side}_wall_ratio"]
                print(f"Q6 {ours} wall <= {side.replace('_', ' ')}: {ratio:.2f}x ({'met' if goals[k] else 'NOT met'})")
    for prof, per_q in modelled.items():
        for name, m in per_q.items():
            goal = m["goal_speedup"]
            verdict = "no goal" if goal is None else (f"goal >= {goal:g}x: " + ("met" if m["goal_met"] else "NOT met"))
            print(
                f"modelled under {prof}: {name} offload {m['offload_modelled_ns'] / 1e6:.1f} ms, host-only "
                f"{m['host_only_modelled_ns'] / 1e6:.1f} ms: {m['offload_speedup']:.2f}x ({verdict}); "
                f"resident {m['resident_modelled_ns'] / 1e6:.1f} ms: {m['resident_speedup']:.2f}x"
            )
    if args.plot:
        print(f"plot: {args.plot}")
    return 0
