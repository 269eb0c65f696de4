"""How cost grows with data and workers: TPC-H at several scale factors × worker counts.

    python -m benchmarks.scaling --sfs 0.1,1,3 --workers 1,2,4 --queries 1,3,5,9,18

For each scale factor: single-node time, then a LocalCluster of each size: time and the
bytes its tasks sent to the next stage (from per-task metrics). Writes a markdown table to
``benchmarks/results/scaling.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from datafusion import SessionContext

from benchmarks.tpch import RESULTS, machine, parse_queries
from datafusion_distributed_py import DistributedContext, LocalCluster
from harness import tpch


def run_all(run, queries: list[int]) -> float:
    start = time.perf_counter()
    for n in queries:
        run(tpch.query(n))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sfs", default="0.1,1")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--queries", default="1,3,5,9,18")
    parser.add_argument("--data", default="benchmarks/data")
    args = parser.parse_args(argv)
    queries = parse_queries(args.queries)
    rows = []
    print(machine())
    for sf in (float(s) for s in args.sfs.split(",")):
        data = tpch.generate(Path(args.data) / f"sf{sf}-p8", sf, 8)
        ctx = SessionContext()
        tpch.register(ctx, data)

        def single_node(sql: str, c: SessionContext = ctx) -> None:
            c.sql(sql).collect()

        run_all(single_node, queries)  # warm the page cache
        single = run_all(single_node, queries)
        print(f"SF{sf:g} single-node {single:.2f}s", flush=True)
        rows.append((sf, "single", single, 0))
        for n in (int(w) for w in args.workers.split(",")):
            with LocalCluster(n) as cluster:
                dctx = DistributedContext(ctx, workers=cluster, progress=False)
                shuffled = 0

                def run(sql: str, d: DistributedContext = dctx) -> None:
                    nonlocal shuffled
                    df = d.sql(sql)
                    df.collect()
                    shuffled += sum(r["output_bytes"] or 0 for r in d.metrics(df))

                elapsed = run_all(run, queries)
            print(
                f"SF{sf:g} LocalCluster({n}) {elapsed:.2f}s, {shuffled / 1e6:.1f} MB between stages"
            )
            rows.append((sf, f"local{n}", elapsed, shuffled))
    RESULTS.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Scaling: TPC-H queries {args.queries}",
        "",
        f"Machine: {machine()}",
        "",
        "| SF | mode | time (s) | ratio to single | MB sent between stages |",
        "|---|---|---|---|---|",
    ]
    singles = {sf: t for sf, mode, t, _ in rows if mode == "single"}
    for sf, mode, t, b in rows:
        lines.append(f"| {sf:g} | {mode} | {t:.2f} | {t / singles[sf]:.2f} | {b / 1e6:.1f} |")
    (RESULTS / "scaling.md").write_text("\n".join(lines) + "\n")
    print(f"results: {RESULTS / 'scaling.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
