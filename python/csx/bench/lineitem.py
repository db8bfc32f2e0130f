"""A LINEITEM-like table for the pushdown tests and the benchmark: the columns of TPC-H Q1 and Q6
with the specification's value domains (quantity 1-50, discount 0.00-0.10, tax
0.00-0.08, return flags A/N/R, line status F/O, ship dates 1992-01-02..1998-12-01; the flag N for lines received after
1995-06-17, the status O for lines shipped after it),
drawn from a seeded generator, as Arrow (the oracle's Parquet copy is written from
the same table)."""

import datetime as dt

import numpy as np
import pyarrow as pa

EPOCH = dt.date(1970, 1, 1)


def lineitem(rows: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    qty = rng.integers(1, 51, rows) * 100  # scale 2
    price = rng.integers(90_000, 10_500_000, rows)  # cents
    extended = qty // 100 * price
    discount = rng.integers(0, 11, rows)  # 0.00-0.10
    tax = rng.integers(0, 9, rows)
    start = (dt.date(1992, 1, 2) - EPOCH).days
    end = (dt.date(1998, 12, 1) - EPOCH).days
    ship = rng.integers(start, end + 1, rows).astype(np.int32)
    cutoff = (dt.date(1995, 6, 17) - EPOCH).days
    receipt = ship + rng.integers(1, 31, rows)
    status = np.where(ship > cutoff, "O", "F")
    flag = np.where(receipt > cutoff, "N", np.where(rng.random(rows) < 0.5, "R", "A"))

    def dec(v: "np.ndarray", p: int = 15) -> "pa.Array":
        return pa.Array.from_buffers(pa.decimal64(p, 2), rows, [None, pa.py_buffer(np.ascontiguousarray(v, dtype="<i8"))]).cast(pa.decimal128(p, 2))

    return pa.table(
        {
            "l_orderkey": pa.array(np.arange(1, rows + 1, dtype=np.int64)),
            "l_quantity": dec(qty),
            "l_extendedprice": dec(extended),
            "l_discount": dec(discount),
            "l_tax": dec(tax),
            "l_returnflag": pa.array(flag.astype(str)),
            "l_linestatus": pa.array(status.astype(str)),
            "l_shipdate": pa.Array.from_buffers(pa.date32(), rows, [None, pa.py_buffer(ship)]),
        }
    )


Q6_FILTER = (
    "l_shipdate >= date '1994-01-01' and l_shipdate < date '1994-01-01' + interval '1' year "
    "and l_discount between 0.06 - 0.01 and 0.06 + 0.01 and l_quantity < 24"
)
Q6_SELECT = "select sum(l_extendedprice * l_discount) as revenue from {t}"
Q6 = Q6_SELECT + " where " + Q6_FILTER

Q1_FILTER = "l_shipdate <= date '1998-12-01' - interval '90' day"
Q1_COLUMNS = ["l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount", "l_tax"]
Q1_SELECT = """
select l_returnflag, l_linestatus,
       sum(l_quantity) as sum_qty,
       sum(l_extendedprice) as sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
       avg(l_quantity) as avg_qty,
       avg(l_extendedprice) as avg_price,
       avg(l_discount) as avg_disc,
       count(*) as count_order
from {t}
{where}
group by l_returnflag, l_linestatus
order by l_returnflag, l_linestatus
"""
Q1 = Q1_SELECT.replace("{where}", "where " + Q1_FILTER)

