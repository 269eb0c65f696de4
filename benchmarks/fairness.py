"""A short query beside a long one: how long one user's quick question waits while another
user's big query runs, side by side with single-node datafusion on the same data, in one run.

    python -m benchmarks.fairness --sf 1 [--modes single,embedded,local2] [--runs 15]

Each mode has one context shared by two threads, as a service answering two people would.
The light user runs each light query (``--light``, TPC-H numbers or ``nation``: a ``nation``
group-by) ``--runs`` times alone, then again while the heavy user runs TPC-H ``--heavy`` over
and over (at least ``--runs`` times and ``--seconds``: through every phase of the heavy
query). A light query's figure is its median latency beside the heavy one over its median
alone: what a long query costs a short one. Sharing is fair when that slowdown is about
single-node's (two cores then serve two queries instead of one). Every answer is checked
against single-node's, and every distributed plan for its network boundary. Writes
``benchmarks/results/fairness_sf<SF>.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
from datafusion import SessionContext

from benchmarks.concurrency import distributed_context
from benchmarks.tpch import RESULTS, machine, same_values
from datafusion_distributed_py.testing import is_distributed
from harness import tpch

NATION = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY n_regionkey ORDER BY 1"

Run = Callable[[str], pa.Table]


def light_sql(name: str) -> str:
    return NATION if name == "nation" else tpch.query(int(name.removeprefix("q")))


def latencies(
    run: Run, sql: str, runs: int, expected: pa.Table, seconds: float = 0.0
) -> list[float]:
    """Milliseconds of each run of ``sql``, run ``runs`` times and for at least ``seconds``
    (beside a long query: through all of its phases); raises on a wrong answer."""
    took: list[float] = []
    began = time.perf_counter()
    while len(took) < runs or time.perf_counter() - began < seconds:
        start = time.perf_counter()
        got = run(sql)
        took.append((time.perf_counter() - start) * 1e3)
        if not same_values(got, expected, "order by" in sql.lower()):
            raise AssertionError(f"wrong answer: {sql[:60]}")
    return took


def beside(
    run: Run, heavy: str, sql: str, runs: int, expected: pa.Table, seconds: float
) -> tuple[list[float], int]:
    """``latencies`` of ``sql`` while another thread runs ``heavy`` over and over, and how
    many heavy runs ended meanwhile (the heavy user is not starved either)."""
    stop, done, errors = threading.Event(), [0], []

    def heavy_user() -> None:
        while not stop.is_set():
            try:
                run(heavy)
            except Exception as e:  # reported after the light user is done
                errors.append(e)
                return
            done[0] += 1

    thread = threading.Thread(target=heavy_user, daemon=True)
    thread.start()
    time.sleep(0.5)  # the heavy query is under way before the light one starts
    try:
        took = latencies(run, sql, runs, expected, seconds)
    finally:
        stop.set()
        thread.join()
    if errors:
        raise errors[0]
    return took, done[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--modes", default="single,embedded,local2")
    parser.add_argument("--light", default="nation,q11,q6", help="light queries, in turn")
    parser.add_argument("--heavy", type=int, default=18, help="the TPC-H query run beside")
    parser.add_argument("--runs", type=int, default=15, help="runs of each light query")
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="least time a light query runs beside"
    )
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--data", default="benchmarks/data")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if modes[0] != "single":
        parser.error("the first mode must be single (the reference)")
    data = tpch.generate(Path(args.data) / f"sf{args.sf:g}-p{args.parts}", args.sf, args.parts)
    ctx = SessionContext()
    tpch.register(ctx, data)
    heavy = tpch.query(args.heavy)
    lights = args.light.split(",")
    expected = {name: ctx.sql(light_sql(name)).to_arrow_table() for name in lights}

    slowdown: dict[tuple[str, str], float] = {}
    rows = []
    with ExitStack() as stack:
        for mode in modes:
            if mode == "single":
                run: Run = lambda sql: ctx.sql(sql).to_arrow_table()  # noqa: E731
            else:
                dctx = distributed_context(ctx, mode, stack)
                for sql in [heavy, *map(light_sql, lights)]:
                    if not is_distributed(dctx.explain(sql)):
                        print(f"{mode}: not distributed: {sql[:60]}", file=sys.stderr)
                        return 1
                run = lambda sql, d=dctx: d.sql(sql).to_arrow_table()  # noqa: E731
            for name in lights:
                sql = light_sql(name)
                latencies(run, sql, 3, expected[name])  # warm-up
                alone = statistics.median(latencies(run, sql, args.runs, expected[name]))
                took, heavy_runs = beside(run, heavy, sql, args.runs, expected[name], args.seconds)
                along = statistics.median(took)
                slowdown[(mode, name)] = along / alone
                line = (
                    f"{mode:9} {name:7} alone {alone:8.1f} ms  beside q{args.heavy} "
                    f"{along:8.1f} ms  slowdown {along / alone:5.2f}x  "
                    f"(heavy runs meanwhile: {heavy_runs})"
                )
                print(line, flush=True)
                rows.append((mode, name, alone, along, heavy_runs))

    lines = [
        f"# A short query beside a long one, TPC-H SF{args.sf:g}",
        "",
        f"Machine: {machine()}. `python -m benchmarks.fairness --sf {args.sf:g}`: each light "
        f"query's median latency over {args.runs} runs alone, then over at least {args.runs} "
        f"runs and {args.seconds:g} s while another thread runs TPC-H q{args.heavy} over and "
        "over on the same context; every answer checked against single-node's.",
        "",
        "| mode | light query | alone (ms) | beside the long query (ms) | slowdown "
        "| slowdown / single-node's | long-query runs meanwhile |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, name, alone, along, heavy_runs in rows:
        ratio = slowdown[(mode, name)] / slowdown[("single", name)]
        lines.append(
            f"| {mode} | {name} | {alone:.1f} | {along:.1f} | {along / alone:.2f} "
            f"| {ratio:.2f} | {heavy_runs} |"
        )
    for name in lights:
        print(
            f"{name}: slowdown / single-node's: "
            + "  ".join(
                f"{m} {slowdown[(m, name)] / slowdown[('single', name)]:.2f}" for m in modes[1:]
            )
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"fairness_sf{args.sf:g}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
