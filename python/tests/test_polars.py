"""csx.polars: a Polars IO source over csx tables that receives Polars' projection,
predicate and row limit; the conjuncts the device can evaluate run there, the rest in
Polars. Answers equal Polars over the Parquet copy."""

import datetime as dt
from decimal import Decimal

import polars as pl
import pytest

import csx
import csx.data
import csx.polars

from conftest import ssb_and_tpch


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("pldata")
    d, ssb, tpch = ssb_and_tpch(root, 2, 4)
    yield root, d, ssb, tpch
    d.close()


def rows(df):
    """Rows with decimals as exact Decimals (the two sides' decimal precisions differ)."""
    return sorted(tuple(Decimal(str(v)) if isinstance(v, (Decimal, float)) else v for v in r) for r in df.rows())


def q6(li):
    return li.filter(
        (pl.col("l_shipdate") >= pl.date(1994, 1, 1))
        & (pl.col("l_shipdate") < pl.date(1995, 1, 1))
        & pl.col("l_discount").is_between(Decimal("0.05"), Decimal("0.07"))
        & (pl.col("l_quantity") < 24)
    ).select((pl.col("l_extendedprice") * pl.col("l_discount")).sum().alias("revenue"))


def q1(li):
    return (
        li.filter(pl.col("l_shipdate") <= pl.date(1998, 12, 1) - pl.duration(days=90))
        .group_by("l_returnflag", "l_linestatus")
        .agg(
            pl.col("l_quantity").sum().alias("sum_qty"),
            pl.col("l_extendedprice").sum().alias("sum_base_price"),
            (pl.col("l_extendedprice") * (1 - pl.col("l_discount"))).sum().alias("sum_disc_price"),
            pl.len().alias("count_order"),
        )
        .sort("l_returnflag", "l_linestatus")
    )


def test_tpch_q6_and_q1_equal_polars_over_parquet(data):
    root, d, _ssb, tpch = data
    pq = pl.scan_parquet(root / "tpch-parquet" / "lineitem.parquet")
    src = csx.polars.Source(d, "/tpch/lineitem")
    got = q6(src.lazy()).collect()
    want = q6(pq).collect()
    assert rows(got) == rows(want) and want.item() is not None
    r = src.runs[-1]
    # the whole predicate ran on the device; only the two columns Q6 needs came back
    assert len(r.on_device) == 4 and r.in_polars == [], src.explain()
    assert set(r.columns) == {"l_shipdate", "l_discount", "l_quantity", "l_extendedprice"}
    assert r.stats.rows_scanned == tpch["lineitem"]
    kept = pq.filter(
        (pl.col("l_shipdate") >= pl.date(1994, 1, 1))
        & (pl.col("l_shipdate") < pl.date(1995, 1, 1))
        & pl.col("l_discount").is_between(Decimal("0.05"), Decimal("0.07"))
        & (pl.col("l_quantity") < 24)
    ).select(pl.len()).collect().item()
    assert r.stats.rows_kept == kept < tpch["lineitem"]
    got = q1(src.lazy()).collect()
    assert rows(got) == rows(q1(pq).collect()) and got.height >= 3
    assert src.runs[-1].in_polars == [] and len(src.runs[-1].on_device) == 1


def test_ssb_q1_1_join_equals_polars_over_parquet(data):
    root, d, _ssb, _ = data

    def query(lo, date):
        return (
            lo.join(date, left_on="lo_orderdate", right_on="d_datekey")
            .filter(
                (pl.col("d_year") == 1993)
                & pl.col("lo_discount").is_between(1, 3)
                & (pl.col("lo_quantity") < 25)
            )
            .select((pl.col("lo_extendedprice") * pl.col("lo_discount")).sum())
        )

    lo, date = csx.polars.Source(d, "/ssb/lineorder"), csx.polars.Source(d, "/ssb/date")
    got = query(lo.lazy(), date.lazy()).collect()
    p = root / "ssb-parquet"
    want = query(pl.scan_parquet(p / "lineorder.parquet"), pl.scan_parquet(p / "date.parquet")).collect()
    assert rows(got) == rows(want) and want.item()
    # Polars pushed each table's conjuncts into its own scan
    assert len(lo.runs[-1].on_device) == 2 and lo.runs[-1].in_polars == [], lo.explain()
    assert len(date.runs[-1].on_device) == 1 and date.runs[-1].in_polars == [], date.explain()
    assert lo.runs[-1].stats.rows_kept < lo.runs[-1].stats.rows_scanned


def test_what_the_device_cannot_evaluate_runs_in_polars(data):
    root, d, _ssb, _ = data

    def query(li):
        return (
            li.filter(
                (pl.col("l_shipdate") < dt.date(1996, 1, 1))
                & ((pl.col("l_returnflag") == "R") | (pl.col("l_quantity") > 40))
                & pl.col("l_linestatus").str.starts_with("F")
                & ((pl.col("l_quantity") + 1) > 5)
                & pl.col("l_returnflag").is_in(["A", "R", "Z"])
                & ((pl.col("l_linestatus") == "F") | (pl.col("l_linestatus") == "O"))
                & (pl.col("l_tax") != Decimal("0.01"))
            )
            .group_by("l_returnflag")
            .agg(pl.len(), pl.col("l_quantity").sum())
        )

    src = csx.polars.Source(d, "/tpch/lineitem")
    got = query(src.lazy()).collect()
    want = query(pl.scan_parquet(root / "tpch-parquet" / "lineitem.parquet")).collect()
    assert rows(got) == rows(want) and want.height
    r = src.runs[-1]
    why = dict(r.in_polars)
    assert len(r.on_device) == 4, src.explain()
    assert len(why) == 3, src.explain()
    assert any("OR of something other" in w or "more than one column" in w for w in why.values())
    assert any("starts_with" in t for t in why)


def test_projection_and_row_limit(data):
    root, d, _ssb, _ = data
    src = csx.polars.Source(d, "/tpch/lineitem")
    got = src.lazy().select("l_orderkey", "l_quantity").head(7).collect()
    want = pl.scan_parquet(root / "tpch-parquet" / "lineitem.parquet").select("l_orderkey", "l_quantity").head(7).collect()
    assert rows(got) == rows(want) and got.height == 7
    r = src.runs[-1]
    assert r.n_rows == 7 and r.rows == 7 and set(r.columns) == {"l_orderkey", "l_quantity"}
    # a limit after a filter: Polars 2.1 does not hand the limit to a source that
    # filters (it applies it itself); the device filtered
    got = src.lazy().filter(pl.col("l_quantity") > 45).head(5).collect()
    assert got.height == 5 and (got["l_quantity"] > 45).all()
    r = src.runs[-1]
    assert r.n_rows is None and r.rows == r.stats.rows_kept < r.stats.rows_scanned


def test_polars_source_bad_input(data):
    _root, d, _ssb, _ = data
    with pytest.raises(TypeError):
        csx.polars.Source("dev", "/tpch/lineitem")
    with pytest.raises(csx.NotFoundError):
        csx.polars.Source(d, "/nowhere")
    with pytest.raises(ValueError):
        csx.polars.Source(d, "/tpch/lineitem", engine="magic")


def test_an_is_in_past_the_device_range_limit_runs_in_polars(data):
    root, d, _ssb, _ = data

    def query(li):
        return li.filter(pl.col("l_orderkey").is_in(list(range(1, 200, 3))) & (pl.col("l_quantity") < 30)).select(
            pl.len(), pl.col("l_quantity").sum()
        )

    src = csx.polars.Source(d, "/tpch/lineitem")
    got = query(src.lazy()).collect()
    assert rows(got) == rows(query(pl.scan_parquet(root / "tpch-parquet" / "lineitem.parquet")).collect())
    r = src.runs[-1]
    assert len(r.on_device) == 1 and len(r.in_polars) == 1, src.explain()
    assert "its limit is 16" in r.in_polars[0][1]
