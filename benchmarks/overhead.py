"""Fixed per-query cost by step, and result-transfer throughput, distributed vs single-node.

    python -m benchmarks.overhead [--sf 1] [--runs 200] [--workers 2]

* fixed cost: the median wall time of ``SELECT 1``, of a 100-row in-memory table, of a
  ``nation`` group-by and of the 100-row table kept on the workers (``CREATE TABLE AS``;
  single-node reads its own), distributed minus single-node, in ms, on the embedded cluster
  and on ``LocalCluster(N)``; then the same queries taken apart step by step (each step's
  median): the wheel's SQL planning, our check for in-memory tables to send, the wheel's
  physical planning (with its FFI scans of our tables), the encoding, our planning for the
  workers (its own steps from ``DistributedPlan.steps()``), starting the run and running it;
* transfer: ``to_arrow_table()`` of a multi-million-row scan, MB/s distributed and
  single-node, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext, LocalCluster, kept_data, planning
from harness import tpch

SHAPES = (
    ("SELECT 1", "SELECT 1", "SELECT 1"),
    ("100-row table", "SELECT sum(a) FROM t100", None),
    ("nation group-by", "SELECT n_regionkey, count(*) FROM nation GROUP BY n_regionkey", None),
    ("tiny kept table", "SELECT sum(a) FROM t100", "SELECT sum(a) FROM {kept}"),
)


def median_ms(run: Callable[[], Any], runs: int) -> float:
    for _ in range(5):  # warm-up
        run()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def steps_ms(dctx: DistributedContext, sql: str, runs: int) -> dict[str, float]:
    """The median of each step of running ``sql`` on ``dctx`` as ``dctx.sql(sql).collect()``
    does, the steps called one by one."""
    engine, ctx = dctx._engine, dctx.ctx
    took: dict[str, list[float]] = defaultdict(list)

    def timed(step: str, work: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        value = work(*args)
        took[step].append((time.perf_counter() - start) * 1e3)
        return value

    for _ in range(runs + 5):
        df = timed("wheel: SQL to logical plan", ctx.sql, sql)
        timed("in-memory tables to send?", kept_data.keep_memory_tables, engine, df)
        # The project's own request (the wheel's physical plan, then encoding), and the
        # physical plan alone once more: encoding is the difference.
        start = time.perf_counter()
        _, req = planning.request(engine, df, engine.feed(sql))
        request_ms = (time.perf_counter() - start) * 1e3
        fresh = ctx.create_dataframe_from_logical_plan(df.logical_plan())
        timed("wheel: physical plan (FFI scans)", fresh.execution_plan)
        physical_ms = took["wheel: physical plan (FFI scans)"][-1]
        took["request, encode"].append(max(request_ms - physical_ms, 0.0))
        made = timed("ours: plan for the workers", engine.coordinator.distribute, req)
        timed("result types read", pa.schema, made)
        made.collect_streams()
        for step, seconds in made.steps():
            group = "  run" if step in ("start run", "run") else "  planning"
            took[f"{group}: {step}"].append(seconds * 1e3)
    return {step: statistics.median(values[5:]) for step, values in took.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--data", default="benchmarks/data")
    parser.add_argument("--workers", type=int, default=0, help="also measure LocalCluster(N)")
    parser.add_argument("--no-transfer", action="store_true", help="skip the transfer part")
    args = parser.parse_args(argv)

    data = tpch.generate(Path(args.data) / f"sf{args.sf}-p8", args.sf, 8)
    ctx = SessionContext()
    tpch.register(ctx, data)
    ctx.from_pydict({"a": list(range(100))}, name="t100")
    modes = {"embedded": DistributedContext(ctx, progress=False)}
    cluster = LocalCluster(args.workers) if args.workers else None
    if cluster:
        modes[f"local{args.workers}"] = DistributedContext(ctx, workers=cluster, progress=False)

    try:
        for mode, dctx in modes.items():
            dctx.sql(f"CREATE TABLE kept_{mode} AS SELECT a FROM t100")
        print(f"fixed per-query cost (median of {args.runs} ms; distributed minus single-node)")
        for label, sql, kept_sql in SHAPES:
            single = median_ms(lambda s=sql: ctx.sql(s).collect(), args.runs)
            for mode, dctx in modes.items():
                mine = (kept_sql or sql).format(kept=f"kept_{mode}")
                dist = median_ms(lambda s=mine, d=dctx: d.sql(s).collect(), args.runs)
                print(
                    f"  {label:<16} {mode:<9} single {single:6.2f}  distributed {dist:6.2f}  "
                    f"over {dist - single:5.2f}"
                )
        print("\nthe same, step by step (median ms of each step)")
        for label, sql, kept_sql in SHAPES:
            by_mode = {
                mode: steps_ms(dctx, (kept_sql or sql).format(kept=f"kept_{mode}"), args.runs)
                for mode, dctx in modes.items()
            }
            print(f"  {label}: " + "  ".join(f"{m:>9}" for m in by_mode))
            for step in next(iter(by_mode.values())):
                cells = "  ".join(f"{by_mode[m].get(step, 0.0):9.3f}" for m in by_mode)
                print(f"    {step:<34} {cells}")
        if args.no_transfer:
            return 0

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
