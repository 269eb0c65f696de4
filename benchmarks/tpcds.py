"""TPC-DS side by side: single-node datafusion, the embedded cluster and LocalCluster worker
processes, on the same data (DuckDB's dsdgen, generated here, never committed) in one run.

    python -m benchmarks.tpcds --sf 1 --modes single,embedded,local2 --repeat 2 --budget 1

The modes take turns on each query and each keeps its best time; with ``--budget``, a short
query (tens of milliseconds, where a busy moment of the machine doubles a time) gets more
turns, up to 10, until the runs of all modes together took that many seconds.

Every mode's rows are checked against single-node (``(!)`` marks a difference, ``(f)`` a query
that ran single-node through the fallback). Prints a per-query table and writes CSV, markdown
and a PNG chart under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from contextlib import ExitStack
from pathlib import Path

from datafusion import SessionContext

from benchmarks.tpch import (
    Runner,
    best_times,
    machine,
    parse_queries,
    ratio,
    same_values,
    write_results,
)
from datafusion_distributed_py import DistributedContext, LocalCluster, ran_on
from harness import tpcds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--data", default=str(Path("benchmarks") / "data"))
    parser.add_argument("--modes", default="single,embedded,local2")
    parser.add_argument("--repeat", type=int, default=1, help="runs per query; best is kept")
    parser.add_argument(
        "--budget",
        type=float,
        default=0.0,
        help="seconds per query: short queries get more runs (up to 10) until the modes' "
        "runs together take this long",
    )
    parser.add_argument("--queries", default="1-99")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # fallbacks are marked in the table instead
    modes = [m for m in args.modes.split(",") if m]
    if "single" not in modes:
        modes.insert(0, "single")
    queries = parse_queries(args.queries)
    print(f"generating TPC-DS SF{args.sf} with DuckDB's dsdgen...", flush=True)
    data = tpcds.generate(Path(args.data) / f"tpcds-sf{args.sf}", args.sf)
    ctx = SessionContext()
    tpcds.register(ctx, data)
    print(machine(), flush=True)
    times: dict[str, dict[int, float]] = {m: {} for m in modes}
    checks: dict[str, dict[int, str]] = {m: {} for m in modes}
    with ExitStack() as stack:
        dctxs: dict[str, DistributedContext] = {}
        for mode in modes[1:]:
            if mode == "embedded":
                dctxs[mode] = DistributedContext(ctx, progress=False)
            elif m := re.fullmatch(r"local(\d+)", mode):
                cluster = stack.enter_context(LocalCluster(int(m.group(1))))
                dctxs[mode] = DistributedContext(ctx, workers=cluster, progress=False)
            else:
                parser.error(f"unknown mode {mode!r}")
        print(" ".join(f"{h:>10}" for h in ["query", *modes]), flush=True)
        runners: dict[str, Runner] = {"single": lambda s: ctx.sql(s).to_arrow_table()}
        for mode, dctx in dctxs.items():
            runners[mode] = lambda s, d=dctx: d.sql(s).to_arrow_table()
        for n in queries:
            sql = tpcds.query(data, n)
            best, results = best_times(runners, sql, args.repeat, args.budget)
            expected = results["single"]
            times["single"][n], checks["single"][n] = best["single"], "ref"
            for mode, dctx in dctxs.items():
                times[mode][n], got = best[mode], results[mode]
                ok = same_values(got, expected, "order by" in sql.lower())
                fell_back = ran_on(dctx.sql(sql)) != "workers"
                checks[mode][n] = "DIFFERENT" if not ok else "fallback" if fell_back else "equal"
            row = " ".join(
                f"{times[m][n]:9.3f}{'' if checks[m][n] in ('ref', 'equal') else '!'}"
                for m in modes
            )
            print(f"{'q' + str(n):>10} {row}", flush=True)
    totals = {m: sum(times[m].values()) for m in modes}
    print("\ntotal (s):  " + "  ".join(f"{m}={totals[m]:.2f}" for m in modes))
    for m in modes[1:]:
        worst = max(queries, key=lambda n: ratio(times, m, n))
        print(
            f"{m} / single = {totals[m] / totals['single']:.2f} (worst: q{worst} "
            f"{ratio(times, m, worst):.2f}x)"
        )
    stem = f"tpcds_sf{args.sf:g}_{'_'.join(modes)}"
    write_results(stem, args, modes, queries, times, checks, totals, suite="TPC-DS")
    return 1 if any(c == "DIFFERENT" for m in modes for c in checks[m].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
