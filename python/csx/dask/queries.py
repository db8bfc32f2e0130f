"""TPC-H Q6 and Q1 and SSB Q3.3 over a placed dataset: the selection and projection on
the nodes (:func:`csx.dask.read`), the aggregation in Dask.

Every answer has the shape and the types of DuckDB's ``fetchall()`` of the same SQL,
so it compares with DuckDB over the Parquet copy directly: sums of decimals are exact
(:class:`decimal.Decimal`, computed from the stored scaled integers) and counts are
ints, both equal to DuckDB's; averages are the exact quotient rounded once to a
double, which DuckDB's (rounded through its own steps) matches to about 1e-15.

How each runs:

- Q6: the whole WHERE runs on the nodes; Dask multiplies the kept (scaled)
  ``l_extendedprice`` and ``l_discount`` and sums them.
- Q1: the WHERE runs on the nodes; each partition groups its kept rows by return
  flag and line status (int64 sums: a partition is limited to
  :data:`Q1_PARTITION_ROWS_MAX` rows so they cannot overflow); Dask adds the
  partitions' groups as Python integers (exact at any size) in one last task.
- SSB Q3.3: the three dimension tables are read with their filters pushed down
  (the cities' range on the device, the exact cities on the host), then LINEORDER
  with the key ranges the dimensions allow pushed down; Dask joins each partition
  with the (small) dimension rows and sums the revenue by city, city and year.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any, List, Optional, Tuple

from .cluster import Cluster
from .pushdown import read, scales

__all__ = ["tpch_q6", "tpch_q1", "ssb_q3_3", "Q1_PARTITION_ROWS_MAX", "Q6_FILTER", "Q1_FILTER", "Q1_COLUMNS"]

Q6_FILTER = (
    "l_shipdate >= date '1994-01-01' and l_shipdate < date '1994-01-01' + interval '1' year "
    "and l_discount between 0.06 - 0.01 and 0.06 + 0.01 and l_quantity < 24"
)
Q6_COLUMNS = ["l_extendedprice", "l_discount"]
Q1_FILTER = "l_shipdate <= date '1998-12-01' - interval '90' day"
Q1_COLUMNS = ["l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount", "l_tax"]
#: A partition's Q1 sums are int64: ext (< 2^31) * (10^s - disc) * (10^s + tax) is
#: below 2^40 for TPC-H's values, so 2^22 rows cannot overflow 2^63.
Q1_PARTITION_ROWS_MAX = 1 << 22
KI_CITIES = ("UNITED KI1", "UNITED KI5")


def _dec(v: int, scale: int) -> Decimal:
    return Decimal(int(v)).scaleb(-scale)


def tpch_q6(cluster: Cluster, table: str = "/tpch/lineitem", **read_kw: Any) -> List[Tuple[Optional[Decimal]]]:
    """TPC-H Q6: ``[(revenue,)]`` (None when no row passes, as in SQL)."""
    import dask
    from dask.base import compute as dask_compute
    from dask.delayed import delayed as dask_delayed

    df = read(cluster, table, Q6_COLUMNS, Q6_FILTER, decimals="scaled", **read_kw)
    s = scales(cluster, table)
    # int64 products (< 2^31 * 100) summed in int64: exact below 9e10 kept rows.
    revenue, rows = dask_compute((df["l_extendedprice"] * df["l_discount"]).sum(), df["l_discount"].count())
    if int(rows) == 0:
        return [(None,)]
    return [(_dec(revenue, s["l_extendedprice"] + s["l_discount"]),)]


def _combine(partials: List[Any], keys: List[str]) -> Any:
    """The partitions' partial sums (Python ints) added by group: Dask's last task."""
    import pandas as pd

    partials = [p for p in partials if len(p)]
    if not partials:
        return None
    return pd.concat(partials).groupby(keys, sort=True).sum()


def _avg(total: int, scale: int, n: int) -> float:
    """The exact average, correctly rounded to a double (SQL engines round their
    double averages in their own ways: compare to about 1e-12 relative)."""
    return float(Fraction(int(total), n * 10**scale))


def _q1_partial(df: Any, one_disc: int, one_tax: int) -> Any:
    import numpy as np
    import pandas as pd

    ext = df["l_extendedprice"].to_numpy(dtype="int64")
    disc = df["l_discount"].to_numpy(dtype="int64")
    tax = df["l_tax"].to_numpy(dtype="int64")
    disc_price = ext * (one_disc - disc)
    work = pd.DataFrame(
        {
            "l_returnflag": df["l_returnflag"].to_numpy(dtype=object),
            "l_linestatus": df["l_linestatus"].to_numpy(dtype=object),
            "qty": df["l_quantity"].to_numpy(dtype="int64"),
            "ext": ext,
            "disc_price": disc_price,
            "charge": disc_price * (one_tax + tax),
            "disc": disc,
            "n": np.ones(len(df), dtype="int64"),
        }
    )
    g = work.groupby(["l_returnflag", "l_linestatus"], sort=True).sum()
    # Python ints from here: the sum over partitions is exact at any size.
    return g.astype(object).reset_index()


def tpch_q1(cluster: Cluster, table: str = "/tpch/lineitem", **read_kw: Any) -> List[Tuple[Any, ...]]:
    """TPC-H Q1: one row per (return flag, line status), in order: the flag and
    status, sum_qty, sum_base_price, sum_disc_price, sum_charge (exact decimals),
    avg_qty, avg_price, avg_disc (floats), count_order."""
    import dask
    from dask.base import compute as dask_compute
    from dask.delayed import delayed as dask_delayed
    import pandas as pd

    entry = cluster.catalogue.get(table)
    big = [p for p in entry.partitions if p.rows > Q1_PARTITION_ROWS_MAX]
    if big:
        raise ValueError(
            f"{table}: partition {big[0].index} has {big[0].rows} rows; Q1's exact int64 partition sums allow "
            f"{Q1_PARTITION_ROWS_MAX}: place it with more partitions"
        )
    s = scales(cluster, table)
    sq, se, sd, st = s["l_quantity"], s["l_extendedprice"], s["l_discount"], s["l_tax"]
    df = read(cluster, table, Q1_COLUMNS, Q1_FILTER, decimals="scaled", **read_kw)
    meta = pd.DataFrame(
        {
            "l_returnflag": pd.Series([], dtype=object),
            "l_linestatus": pd.Series([], dtype=object),
            **{k: pd.Series([], dtype=object) for k in ("qty", "ext", "disc_price", "charge", "disc", "n")},
        }
    )
    parts = df.map_partitions(_q1_partial, 10**sd, 10**st, meta=meta)
    groups = dask_delayed(_combine)(parts.to_delayed(), ["l_returnflag", "l_linestatus"]).compute()
    out: List[Tuple[Any, ...]] = []
    if groups is None:
        return out
    for (flag, status), r in sorted(groups.iterrows(), key=lambda kv: kv[0]):
        n = int(r["n"])
        out.append(
            (
                flag,
                status,
                _dec(r["qty"], sq),
                _dec(r["ext"], se),
                _dec(r["disc_price"], se + sd),
                _dec(r["charge"], se + sd + st),
                _avg(r["qty"], sq, n),
                _avg(r["ext"], se, n),
                _avg(r["disc"], sd, n),
                n,
            )
        )
    return out


def _q33_partial(df: Any) -> Any:
    return df.groupby(["c_city", "s_city", "d_year"], sort=False)["lo_revenue"].sum().astype(object).reset_index()


def ssb_q3_3(cluster: Cluster, root: str = "/ssb", **read_kw: Any) -> List[Tuple[Any, ...]]:
    """SSB Q3.3: ``[(c_city, s_city, d_year, revenue)]`` ordered by year, then revenue
    descending (then the cities, for a total order)."""
    import dask
    from dask.base import compute as dask_compute
    from dask.delayed import delayed as dask_delayed
    import pandas as pd

    lo_cities = f"between '{KI_CITIES[0]}' and '{KI_CITIES[-1]}'"
    cust = read(cluster, f"{root}/customer", ["c_custkey", "c_city"], f"c_city {lo_cities}", **read_kw).compute()
    supp = read(cluster, f"{root}/supplier", ["s_suppkey", "s_city"], f"s_city {lo_cities}", **read_kw).compute()
    date = read(cluster, f"{root}/date", ["d_datekey", "d_year"], "d_year >= 1992 and d_year <= 1997", **read_kw).compute()
    cust = cust[cust["c_city"].isin(KI_CITIES)]
    supp = supp[supp["s_city"].isin(KI_CITIES)]
    if not len(cust) or not len(supp) or not len(date):
        return []
    keys = (
        f"lo_custkey between {int(cust['c_custkey'].min())} and {int(cust['c_custkey'].max())} "
        f"and lo_suppkey between {int(supp['s_suppkey'].min())} and {int(supp['s_suppkey'].max())} "
        f"and lo_orderdate between {int(date['d_datekey'].min())} and {int(date['d_datekey'].max())}"
    )
    lo = read(cluster, f"{root}/lineorder", ["lo_custkey", "lo_suppkey", "lo_orderdate", "lo_revenue"], keys, **read_kw)
    joined = (
        lo.merge(cust, left_on="lo_custkey", right_on="c_custkey")
        .merge(supp, left_on="lo_suppkey", right_on="s_suppkey")
        .merge(date, left_on="lo_orderdate", right_on="d_datekey")
    )
    meta = pd.DataFrame(
        {
            "c_city": pd.Series([], dtype=object),
            "s_city": pd.Series([], dtype=object),
            "d_year": pd.Series([], dtype="uint32"),
            "lo_revenue": pd.Series([], dtype=object),
        }
    )
    parts = joined.map_partitions(_q33_partial, meta=meta)
    groups = dask_delayed(_combine)(parts.to_delayed(), ["c_city", "s_city", "d_year"]).compute()
    if groups is None:
        return []
    rows = [(str(c), str(s), int(y), int(r["lo_revenue"])) for (c, s, y), r in groups.iterrows()]
    return sorted(rows, key=lambda t: (t[2], -t[3], t[0], t[1]))
