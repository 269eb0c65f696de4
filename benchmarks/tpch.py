"""TPC-H side by side: single-node datafusion vs DistributedContext, in one run.

    python -m benchmarks.tpch --sf 1                # embedded cluster
    python -m benchmarks.tpch --sf 1 --workers 2    # LocalCluster of 2 worker processes

Prints a per-query table (times, ratio distributed / single-node) and the total ratio, and
checks that every query returns the same rows in both modes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack

import pyarrow as pa
from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext, tpch
from datafusion_distributed_py.testing import assert_same_rows, is_distributed


def best_time(run: Callable[[], pa.Table], repeat: int) -> tuple[float, pa.Table]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0, help="scale factor (default 1)")
    parser.add_argument("--parts", type=int, default=8, help="files per table")
    parser.add_argument("--data", default=os.path.join("benchmarks", "data"))
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run on a LocalCluster of N worker processes (0 = embedded)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per query; best is kept")
    parser.add_argument("--queries", default="1-22", help="e.g. 1-22 or 1,3,5")
    args = parser.parse_args(argv)
    queries = parse_queries(args.queries)

    print(f"generating TPC-H SF{args.sf} ({args.parts} files per table)...", flush=True)
    data = tpch.generate(os.path.join(args.data, f"sf{args.sf}-p{args.parts}"), args.sf, args.parts)
    ctx = SessionContext()
    tpch.register(ctx, data)

    with ExitStack() as stack:
        if args.workers:
            from datafusion_distributed_py import LocalCluster

            cluster = stack.enter_context(LocalCluster(args.workers))
            dctx = DistributedContext(ctx, workers=cluster)
            mode = f"LocalCluster({args.workers})"
        else:
            dctx = DistributedContext(ctx)
            mode = f"embedded({len(dctx.worker_urls)})"
        print(f"mode: {mode}, cores: {os.cpu_count()}, repeat: {args.repeat}\n")
        columns = ("query", 5), ("single (s)", 11), ("distributed (s)", 16), ("ratio", 7)
        header = " ".join(f"{name:>{width}}" for name, width in columns) + "  dist? rows"
        print(header)
        print("-" * len(header))
        total_single = total_dist = 0.0
        failures = []
        for n in queries:
            sql = tpch.query(n)
            t_single, expected = best_time(lambda q=sql: ctx.sql(q).to_arrow_table(), args.repeat)
            t_dist, got = best_time(lambda q=sql: dctx.sql(q).to_arrow_table(), args.repeat)
            distributed = is_distributed(dctx.explain(sql))
            try:
                assert_same_rows(got, expected, ordered="order by" in sql.lower())
                same = "equal"
            except AssertionError:
                same = "DIFFERENT"
                failures.append(n)
            total_single += t_single
            total_dist += t_dist
            print(
                f"{'q' + str(n):>5} {t_single:11.3f} {t_dist:16.3f} {t_dist / t_single:7.2f} "
                f"{'yes' if distributed else 'no':>6} {same}",
                flush=True,
            )
        print("-" * len(header))
        ratio = total_dist / total_single
        print(f"{'total':>5} {total_single:11.3f} {total_dist:16.3f} {ratio:7.2f}")
        print(f"\nSF{args.sf} {mode}: total distributed / single-node = {ratio:.2f}")
        if failures:
            print(f"rows differ for queries {failures}", file=sys.stderr)
            return 1
    return 0


def parse_queries(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


if __name__ == "__main__":
    sys.exit(main())
