"""A datafusion-python DataFrame program, ported to a cluster by changing ``ctx.`` to ``dctx.``
where frames are made; every step after runs on the workers as one distributed query.

    python examples/dataframe_api.py [--sf 0.1] [--data data/tpch]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa
from datafusion import DataFrame, SessionContext, col, lit
from datafusion import functions as f

from datafusion_distributed_py import DistributedContext, ran_on

# TPC-H data and queries come from the repository's test harness, not the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's harness/
from harness import tpch  # noqa: E402


def revenue_by_priority(frames: SessionContext | DistributedContext) -> DataFrame:
    """The same program for both: ``frames`` is ``ctx`` or ``dctx``."""
    orders = frames.table("orders").filter(
        col("o_orderdate") >= lit("1995-01-01").cast(pa.date32())
    )
    items = frames.table("lineitem").select("l_orderkey", "l_extendedprice", "l_discount")
    return (
        orders.join(items, left_on="o_orderkey", right_on="l_orderkey")
        .aggregate(
            [col("o_orderpriority")],
            [f.sum(col("l_extendedprice") * (lit(1) - col("l_discount"))).alias("revenue")],
        )
        .sort(col("o_orderpriority"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument("--data", default="data/tpch", help="where to write the data")
    args = parser.parse_args()

    ctx = SessionContext()
    tpch.register(ctx, tpch.generate(f"{args.data}/sf{args.sf}", scale_factor=args.sf, parts=4))
    dctx = DistributedContext(ctx)

    df = revenue_by_priority(dctx)
    df.show()
    same = df.to_pylist() == revenue_by_priority(ctx).to_pylist()
    print(f"ran on: {ran_on(df)}; same as single-node: {same}")
    print(dctx.explain(df))


if __name__ == "__main__":
    main()
