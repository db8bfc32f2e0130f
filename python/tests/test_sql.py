"""csx.duckdb.sql: one SQL statement over csx tables, its device-evaluable WHERE on the
device and the rest in DuckDB. Every implemented SSB and TPC-H query's text gives the
answer DuckDB gives over the Parquet copy, with every single-table conjunct on the
device (the stats say so)."""

import duckdb
import pytest

import csx
import csx.data
import csx.duckdb
from csx.bench.lineitem import Q1, Q6

from conftest import ssb_and_tpch


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sqldata")
    d, ssb, tpch = ssb_and_tpch(root, 1, 3)
    yield root, d, ssb, tpch
    d.close()


def over_parquet(sql, parquet_dir, tables):
    con = duckdb.connect()
    for t in tables:
        con.sql(f"create view \"{t}\" as select * from read_parquet('{parquet_dir}/{t}.parquet')")
    return con.sql(sql).fetchall()


def join_condition(text):
    # a conjunct left to DuckDB in these queries must be a join: column = column
    return "=" in text and all(c.isidentifier() for c in (p.strip() for p in text.strip("()").split("=")))


QUERIES = [("ssb", q) for q in sorted(csx.data.ssb_queries())] + [("tpch", "q6"), ("tpch", "q1")]


@pytest.mark.parametrize("bench, name", QUERIES)
def test_benchmark_query_text_equals_duckdb_over_parquet(data, bench, name):
    root, d, ssb, tpch = data
    if bench == "ssb":
        text = csx.data.ssb_queries()[name]
        tables = ssb
    else:
        text = (Q6 if name == "q6" else Q1).replace("{t}", "lineitem")
        tables = tpch
    want = over_parquet(text, root / f"{bench}-parquet", tables)
    con = duckdb.connect()
    q = csx.duckdb.sql(con, d, text, tables=f"/{bench}")
    got = q.fetchall()
    assert sorted(got) == sorted(want)
    # SSB Q3.3 and Q3.4 select nothing at this scale factor; the rest select rows
    assert want or name in ("q3.3", "q3.4")
    st = q.stats
    # every conjunct the device can evaluate ran there; only joins stayed in DuckDB
    assert st.on_device, st.explain()
    for text_, why in st.in_duckdb:
        assert join_condition(text_), (text_, why)
    if bench == "tpch":
        assert st.in_duckdb == []
    if name == "q6":
        # the columns only the device filter reads stay on the device
        assert q.tables_columns() == [["l_discount", "l_extendedprice"]]
    # and left DuckDB's WHERE: DuckDB's statement names no filtered column with a constant
    for c in st.on_device:
        assert c not in st.duckdb_sql
    # the device scanned every row of the tables with a filter and kept fewer
    filtered = [t for t in st.tables if t.on_device]
    assert filtered and all(len(t.scans) == 1 for t in st.tables)
    for t in filtered:
        s = t.scans[0]
        assert s.rows_scanned == tables[t.table] and s.rows_kept < s.rows_scanned
        # exactly the rows DuckDB keeps over Parquet with the same conjuncts
        count = f'select count(*) from "{t.table}" as "{t.alias}" where ' + " and ".join(t.on_device)
        assert s.rows_kept == over_parquet(count, root / f"{bench}-parquet", tables)[0][0]
    assert "device filter" in q.explain()
    # the relation runs again (a fresh scan per execution)
    assert sorted(q.fetchall()) == sorted(want)
    assert all(len(t.scans) == 2 for t in st.tables)
    q.close()


def test_what_the_device_cannot_evaluate_runs_in_duckdb_with_the_reason(data):
    root, d, _ssb, tpch = data
    text = """
        select l_returnflag, count(*) as n, sum(l_quantity) as q
        from lineitem
        where l_shipdate < date '1995-01-01'
          and (l_returnflag = 'R' or l_quantity > 40)
          and l_linestatus like 'F%'
          and l_quantity + 1 > 5
          and l_discount not in (0.01, 0.02)
          and l_tax <> 0.01
          and l_shipdate < '1996-01-01'
          and l_quantity in (1, 2, 3, 10, 20, 30, 40, 49.5)
          and l_discount > 0.001::double
        group by l_returnflag order by l_returnflag"""
    want = over_parquet(text, root / "tpch-parquet", tpch)
    con = duckdb.connect()
    q = csx.duckdb.sql(con, d, text, tables={"lineitem": "/tpch/lineitem"})
    assert q.fetchall() == want and want
    st = q.stats
    dev_texts = " ".join(st.on_device).lower()
    assert "l_shipdate < cast('1995-01-01' as date)" in dev_texts
    assert "l_tax != 0.01" in dev_texts or "l_tax <> 0.01" in dev_texts
    assert "'1996-01-01'" in dev_texts and "in (1, 2, 3" in dev_texts
    reasons = dict(st.in_duckdb)
    assert len(reasons) == 5, st.explain()
    texts = " | ".join(reasons)
    for part in ("OR", "~~", "+ 1", "NOT", "double"):
        assert part in texts, (part, texts)
    assert any("an OR of something other than equalities" in r for r in reasons.values()), reasons
    assert any("LIKE" in r for r in reasons.values())
    assert any("floating-point" in r for r in reasons.values())
    # the kept rows are exactly those of the pushed conjuncts
    pushed_only = over_parquet(
        "select count(*) from lineitem where l_shipdate < date '1995-01-01' and l_tax <> 0.01 "
        "and l_quantity in (1, 2, 3, 10, 20, 30, 40)",
        root / "tpch-parquet",
        tpch,
    )[0][0]
    assert st.tables[0].scans[0].rows_kept == pushed_only


def test_outer_join_subquery_cte_and_duckdb_tables_mix(data):
    root, d, ssb, _ = data
    con = duckdb.connect()
    # a DuckDB table beside the csx tables
    con.sql("create table regions as select * from (values ('ASIA', 1), ('EUROPE', 2)) t(r, k)")
    text = """
        with big as (select lo_custkey, lo_revenue from lineorder where lo_quantity > 45)
        select c.c_region, r.k, count(*) as n, sum(b.lo_revenue) as rev,
               (select count(*) from supplier where s_region = 'ASIA') as asian_suppliers
        from customer c left join big b on b.lo_custkey = c.c_custkey
             join regions r on r.r = c.c_region
        where c.c_nation != 'CHINA' and (b.lo_revenue is null or b.lo_revenue > 100)
        group by all order by all"""
    q = csx.duckdb.sql(con, d, text, tables="/ssb")
    got = q.fetchall()
    pq = duckdb.connect()
    pq.sql("create table regions as select * from (values ('ASIA', 1), ('EUROPE', 2)) t(r, k)")
    for t in ssb:
        pq.sql(f"create view \"{t}\" as select * from read_parquet('{root}/ssb-parquet/{t}.parquet')")
    assert got == pq.sql(text).fetchall() and got
    st = q.stats
    assert "(c.c_nation != 'CHINA')" in st.on_device or "c.c_nation != 'CHINA'" in " ".join(st.on_device)
    assert any("lo_quantity > 45" in c for c in st.on_device)
    assert any("s_region = 'ASIA'" in c for c in st.on_device)
    assert any("IS NULL" in t or "IS NOT NULL" in t or "OR" in t for t, _ in st.in_duckdb)
    assert {t.table for t in st.tables} == {"lineorder", "customer", "supplier"}


def test_right_side_of_a_left_join_keeps_its_where_in_duckdb(data):
    root, d, ssb, _ = data
    text = """select count(*) from customer left join lineorder on lo_custkey = c_custkey
              where lo_quantity < 10 and c_region = 'ASIA'"""
    q = csx.duckdb.sql(duckdb.connect(), d, text, tables="/ssb")
    assert q.fetchall() == over_parquet(text, root / "ssb-parquet", ssb)
    assert any("c_region" in c for c in q.stats.on_device)
    why = dict(q.stats.in_duckdb)
    assert any("lo_quantity" in t and "outer join" in r for t, r in why.items()), why


def test_sql_bad_input(data):
    _root, d, _ssb, _ = data
    con = duckdb.connect()
    with pytest.raises(csx.QueryError) as e:
        csx.duckdb.sql(con, d, "selec 1 from lineitem", tables="/tpch")
    assert "parse" in str(e.value)
    with pytest.raises(csx.QueryError) as e:
        csx.duckdb.sql(con, d, "select 1; select 2", tables="/tpch")
    assert "2 statements" in str(e.value)
    with pytest.raises(csx.QueryError) as e:
        csx.duckdb.sql(con, d, "select 1 from li", tables={"li": "/nowhere"})
    assert "/nowhere" in str(e.value)
    with pytest.raises(TypeError):
        csx.duckdb.sql(con, d, "select 1", tables=3)
    with pytest.raises(csx.QueryError):
        csx.duckdb.sql(con, d, "select * from lineitem l(a, b)", tables="/tpch")
    # a column that does not exist: DuckDB's binder error, naming it
    with pytest.raises(duckdb.Error) as e:
        csx.duckdb.sql(con, d, "select nope from lineitem where l_quantity < 3", tables="/tpch").fetchall()
    assert "nope" in str(e.value)


def test_an_in_list_past_the_device_range_limit_runs_in_duckdb(data):
    root, d, _ssb, tpch = data
    keys = ", ".join(str(k) for k in range(1, 200, 3))  # 67 separate values
    text = f"""select count(*), sum(l_quantity) from lineitem
               where l_orderkey in ({keys}) and l_quantity in (1, 3, 5) and l_tax != 0.02"""
    q = csx.duckdb.sql(duckdb.connect(), d, text, tables="/tpch")
    assert q.fetchall() == over_parquet(text, root / "tpch-parquet", tpch)
    why = dict(q.stats.in_duckdb)
    assert len(why) == 1 and "value ranges on l_orderkey; its limit is 16" in next(iter(why.values()))
    assert len(q.stats.on_device) == 2


def test_samples_and_outer_selects_keep_their_where_in_duckdb(data):
    root, d, _ssb, tpch = data
    con = duckdb.connect()
    for text, reason in [
        ("select count(*) from lineitem where l_quantity < 40 using sample 10 rows", "USING SAMPLE"),
        ("select count(*) from lineitem tablesample 10 rows where l_quantity < 40", "has a SAMPLE"),
    ]:
        q = csx.duckdb.sql(con, d, text, tables="/tpch")
        assert q.fetchall()[0][0] <= 10
        assert q.stats.on_device == [] and reason in q.stats.in_duckdb[0][1]
        s = q.stats.tables[0].scans[0]
        assert s.rows_kept == s.rows_scanned == tpch["lineitem"]
    text = "select count(*) from (select * from lineitem where l_quantity < 10) t where t.l_tax = 0"
    q = csx.duckdb.sql(con, d, text, tables="/tpch")
    assert q.fetchall() == over_parquet(text, root / "tpch-parquet", tpch)
    assert q.stats.on_device == ["(l_quantity < 10)"]
    assert "reads no csx table directly" in dict(q.stats.in_duckdb)["(t.l_tax = 0)"]


def test_tables_default_to_the_device_root(dev):
    import numpy as np
    import pyarrow as pa

    import csx.arrow

    csx.arrow.put_table(dev, "/nums", pa.table({"a": pa.array(np.arange(1000, dtype=np.int64))}))
    con = duckdb.connect()
    con.sql("create table other as select 5 as a")  # a DuckDB table stays DuckDB's
    q = csx.duckdb.sql(con, dev, "select sum(n.a), max(o.a) from nums n, other o where n.a < 10 and o.a = 5")
    assert q.fetchall() == [(45, 5)]
    assert q.stats.on_device == ["(n.a < 10)"] and [t.table for t in q.stats.tables] == ["nums"]
    assert "reads relations that are not csx tables" not in q.explain()
    assert q.stats.tables[0].scans[0].rows_kept == 10


def test_a_statement_planned_again_reuses_its_plan_until_a_table_changes(dev, monkeypatch):
    import numpy as np
    import pyarrow as pa

    import csx._sqlplan
    import csx.arrow

    planned = []
    real_plan = csx._sqlplan.Planner.plan
    monkeypatch.setattr(csx._sqlplan.Planner, "plan", lambda self: planned.append(self.sql) or real_plan(self))

    def put(values, ty=pa.int64()):
        n = len(values)
        csx.arrow.put_table(dev, "/cache_t", pa.table({"a": pa.array(values, ty), "s": pa.array(["x", "y"] * (n // 2))}))

    put(np.arange(100))
    con = duckdb.connect()
    text = "select sum(a), count(*) from cache_t where a >= 90"
    answers = [csx.duckdb.sql(con, dev, text).fetchall() for _ in range(3)]
    assert answers == [[(945, 10)]] * 3
    assert len(planned) == 1, "the same text over the same tables is planned once"
    # New values, the same schema: the kept plan, the new data's answer.
    put(np.arange(100) + 1)
    assert csx.duckdb.sql(con, dev, text).fetchall() == [(1045, 11)] and len(planned) == 1
    # More rows, then another type: the schema changed, so the statement is planned anew.
    put(np.arange(200))
    assert csx.duckdb.sql(con, dev, text).fetchall() == [(sum(range(90, 200)), 110)] and len(planned) == 2
    put(np.arange(200), pa.int32())
    q = csx.duckdb.sql(con, dev, text)
    assert q.fetchall() == [(sum(range(90, 200)), 110)] and len(planned) == 3
    assert q.stats.on_device == ["(a >= 90)"]
    # The schema removed: the name is DuckDB's again (an error there), never the old plan.
    dev.rm("/cache_t/schema.json")
    with pytest.raises(duckdb.Error):
        csx.duckdb.sql(con, dev, text).fetchall()
    # A value bound through a dict column's dictionary is planned every time.
    put(np.arange(100))
    ds = "select count(*) from cache_t where s = 'y'"
    assert [csx.duckdb.sql(con, dev, ds).fetchall() for _ in range(2)] == [[(50,)]] * 2
    assert planned.count(ds) == 2
