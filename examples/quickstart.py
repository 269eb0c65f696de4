"""Quickstart: a TPC-H join + group-by run distributed on the embedded cluster.

    python examples/quickstart.py [--sf 0.1] [--data data/tpch]

Generates a small TPC-H dataset with tpchgen-cli (several parquet files per table), registers
it on an ordinary ``datafusion.SessionContext`` and runs the query through
``DistributedContext`` with no workers named, i.e. on an in-process cluster.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext

# TPC-H data and queries come from the repository's test harness, not the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's harness/
from harness import tpch  # noqa: E402

QUERY = """
SELECT n_name AS nation,
       count(*) AS orders,
       round(sum(o_totalprice), 2) AS revenue
FROM orders
JOIN customer ON o_custkey = c_custkey
JOIN nation ON c_nationkey = n_nationkey
WHERE o_orderdate >= DATE '1995-01-01'
GROUP BY n_name
ORDER BY revenue DESC
LIMIT 10
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument("--data", default="data/tpch", help="where to write the data")
    args = parser.parse_args()

    data = tpch.generate(f"{args.data}/sf{args.sf}", scale_factor=args.sf, parts=4)
    ctx = SessionContext()
    tpch.register(ctx, data)

    dctx = DistributedContext(ctx)  # no workers named: an embedded in-process cluster
    print(f"embedded cluster workers: {dctx.worker_urls}")
    df = dctx.sql(QUERY)
    start = time.perf_counter()
    df.show()
    print(f"ran in {time.perf_counter() - start:.3f}s\n")
    print("distributed plan:")
    print(dctx.explain(df))


if __name__ == "__main__":
    main()
