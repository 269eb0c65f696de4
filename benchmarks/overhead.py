"""Fixed per-query overhead and result-transfer throughput, distributed vs single-node.

    python -m benchmarks.overhead [--sf 1] [--runs 50]

* overhead: median wall time of ``SELECT 1``, of a query over a tiny in-memory table and of
  the same query over it kept on the workers (``CREATE TABLE AS``; single-node reads its
  own), distributed minus single-node, in ms (planning, FFI, dispatch to workers);
* transfer: ``to_arrow_table()`` of a multi-million-row scan, MB/s distributed and
  single-node, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext, LocalCluster
from harness import tpch


def median_ms(run, runs: int) -> float:
    run()  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--data", default="benchmarks/data")
    parser.add_argument("--workers", type=int, default=0, help="also measure LocalCluster(N)")
    args = parser.parse_args(argv)

    data = tpch.generate(Path(args.data) / f"sf{args.sf}-p8", args.sf, 8)
    ctx = SessionContext()
    tpch.register(ctx, data)
    ctx.from_pydict({"a": [1, 2, 3]}, name="tiny")
    modes = {"embedded": DistributedContext(ctx, progress=False)}
    cluster = LocalCluster(args.workers) if args.workers else None
    if cluster:
        modes[f"local{args.workers}"] = DistributedContext(ctx, workers=cluster, progress=False)

    try:
        print("fixed per-query overhead (median ms; distributed minus single-node)")
        for mode, dctx in modes.items():
            dctx.sql(f"CREATE TABLE kept_{mode} AS SELECT a FROM tiny")
        for label, sql in (
            ("SELECT 1", "SELECT 1"),
            ("tiny table", "SELECT sum(a) FROM tiny"),
            ("kept table", "SELECT sum(a) FROM {kept}"),
        ):
            single = median_ms(lambda s=sql: ctx.sql(s.format(kept="tiny")).collect(), args.runs)
            for mode, dctx in modes.items():
                mine = sql.format(kept=f"kept_{mode}")
                dist = median_ms(lambda s=mine, d=dctx: d.sql(s).collect(), args.runs)
                print(
                    f"  {label:<11} {mode:<10} single {single:7.2f}  distributed {dist:7.2f}  "
                    f"overhead {dist - single:7.2f}"
                )

        sql = "SELECT l_orderkey, l_partkey, l_quantity, l_extendedprice FROM lineitem"
        print(f"\nresult transfer: to_arrow_table() of `{sql}` (best of 3, modes taking turns)")
        runners = {"single-node": lambda: ctx.sql(sql).to_arrow_table()}
        for mode, dctx in modes.items():
            runners[mode] = lambda d=dctx: d.sql(sql).to_arrow_table()
        best = dict.fromkeys(runners, float("inf"))
        rows: dict[str, int] = {}
        for _ in range(3):
            for mode, run in runners.items():
                start = time.perf_counter()
                table = run()
                best[mode] = min(best[mode], time.perf_counter() - start)
                rows[mode] = table.num_rows
        mb = table.nbytes / 1e6
        single_s = best.pop("single-node")
        print(f"  {rows['single-node']:,} rows, {mb:.0f} MB; single-node {mb / single_s:8.0f} MB/s")
        for mode, dist_s in best.items():
            assert rows[mode] == rows["single-node"]
            print(
                f"  {mode:<10} {mb / dist_s:8.0f} MB/s  "
                f"= {single_s / dist_s * 100:5.1f}% of single-node"
            )
    finally:
        if cluster:
            cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
