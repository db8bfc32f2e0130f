"""``python -m csx.bench``: benchmarks of the Python package.

    python -m csx.bench tpch [--sf 1] [--json] [--plot docs/plots/tpch.svg]
    python -m csx.bench scaleout [--sf 0.05] [--nodes 1,2,3] [--json] [--plot docs/plots/scaleout.svg]

See ``python -m csx.bench tpch --help`` and ``python -m csx.bench scaleout --help``.
"""

from __future__ import annotations

import argparse
import sys

from . import scaleout, tpch


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m csx.bench",
        description="Benchmarks of the csx Python package. Each prints a table (or JSON) "
        "with the machine, the load average and the numbers as measured.",
    )
    sub = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    tpch.add_arguments(
        sub.add_parser(
            "tpch",
            help="TPC-H Q6 and Q1: DuckDB reading the columns vs DuckDB with device pushdown",
            description=tpch.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    scaleout.add_arguments(
        sub.add_parser(
            "scaleout",
            help="TPC-H Q6 and Q1 over 1..64 storage nodes under Dask: pushdown vs Dask reading Parquet",
            description=scaleout.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    args = parser.parse_args(argv)
    if args.bench == "tpch":
        return tpch.run(args)
    if args.bench == "scaleout":
        return scaleout.run(args)
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
