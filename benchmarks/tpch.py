"""TPC-H side by side: single-node datafusion, our embedded and multi-process clusters, and
PySpark, on the same data in one run.

    python -m benchmarks.tpch --sf 1                                   # single vs embedded
    python -m benchmarks.tpch --sf 1 --workers 2                       # single vs LocalCluster(2)
    python -m benchmarks.tpch --sf 1 --modes single,embedded,local2,local4,spark
    python -m benchmarks.tpch --sf 1 --modes single,local2-plain,local2,local2-tls  # security cost

``localN`` is ``LocalCluster(N)`` as users get it (a token on every RPC); ``-plain`` has no
token, ``-tls`` adds TLS and ``-mtls`` mutual TLS to the token.

Every mode's rows are checked against single-node. Prints a per-query table (times and ratio
to single-node) and writes CSV, markdown and a PNG chart under ``benchmarks/results/`` with the
machine (cores, memory) and package versions.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import datafusion
import pyarrow as pa
from datafusion import SessionContext

import datafusion_distributed_py
from datafusion_distributed_py import DistributedContext, LocalCluster, Security
from datafusion_distributed_py.testing import assert_same_rows, is_distributed
from harness import tpch

RESULTS = Path(__file__).parent / "results"
Runner = Callable[[str], pa.Table]


def best_time(run: Runner, sql: str, repeat: int) -> tuple[float, pa.Table]:
    """``run``'s best time for ``sql`` over ``repeat`` runs, and its result."""
    best, results = best_times({"run": run}, sql, repeat, budget=0.0)
    return best["run"], results["run"]


def best_times(
    runners: dict[str, Runner], sql: str, repeat: int, budget: float, most: int = 10
) -> tuple[dict[str, float], dict[str, pa.Table]]:
    """Each mode's best time for ``sql`` and its result (see ``turn_times``)."""
    times, results = turn_times(runners, sql, repeat, budget, most)
    return {mode: min(ts) for mode, ts in times.items()}, results


def turn_times(
    runners: dict[str, Runner],
    sql: str,
    repeat: int,
    budget: float,
    most: int = 10,
    rotate: bool = False,
) -> tuple[dict[str, list[float]], dict[str, pa.Table]]:
    """Each mode's time for ``sql`` in every turn, and its result. The modes take turns
    (single, embedded, local2, single, ...) so a slow spell of a busy machine hits them alike;
    a short query gets more turns, up to ``most``, until ``budget`` seconds were spent on it.
    ``rotate``: each turn starts with the next mode, so that none always runs after the same
    one."""
    times: dict[str, list[float]] = {mode: [] for mode in runners}
    results: dict[str, pa.Table] = {}
    modes = list(runners)
    spent, turns = 0.0, 0
    while turns < repeat or (spent < budget and turns < most):
        k = turns % len(modes) if rotate else 0
        for mode in modes[k:] + modes[:k]:
            start = time.perf_counter()
            results[mode] = runners[mode](sql)
            took = time.perf_counter() - start
            times[mode].append(took)
            spent += took
        turns += 1
    return times, results


def data_arguments(parser: argparse.ArgumentParser, repeat: int) -> argparse.ArgumentParser:
    """The TPC-H data options the side-by-side benchmarks share (SF1, 4 files per table)."""
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--parts", type=int, default=4, help="files per table")
    parser.add_argument("--data", default="benchmarks/data")
    parser.add_argument("--repeat", type=int, default=repeat, help="runs; the best is kept")
    return parser


def tpch_data(args: argparse.Namespace) -> Path:
    """The TPC-H data ``data_arguments`` name (``<data>/sf<sf>-p<parts>``), made first when
    it is not there."""
    data = Path(args.data) / f"sf{args.sf:g}-p{args.parts}"
    if not (data / "lineitem").exists():
        tpch.generate(data, args.sf, args.parts)
    return data


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores, {mem:.0f} GiB, {platform.machine()}, Python "
        f"{platform.python_version()}, datafusion {datafusion.__version__}, "
        f"datafusion-distributed-py {datafusion_distributed_py.__version__}"
    )


def spark_runner(stack: ExitStack, data: Path) -> Runner:
    """PySpark local[*] over the same parquet files (optional: pip install pyspark)."""
    import warnings

    from pyspark.sql import SparkSession

    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("tpch")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(os.cpu_count() or 2))
        .config("spark.driver.memory", "8g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stack.callback(spark.stop)
    for table in tpch.TABLES:
        spark.read.parquet(str(data / table)).createOrReplaceTempView(table)

    def run(sql: str) -> pa.Table:
        return pa.Table.from_pandas(spark.sql(sql.rstrip().rstrip(";")).toPandas())

    return run


def same_values(got: pa.Table, expected: pa.Table, ordered: bool, tolerance=None) -> bool:
    """Rows equal; for engines that name columns their own way, by position."""
    got = (
        got.rename_columns(expected.column_names)
        if got.num_columns == expected.num_columns
        else got
    )
    try:
        got = got.cast(expected.schema, safe=False)
        assert_same_rows(got, expected, ordered, tolerance)
        return True
    except (AssertionError, pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0, help="scale factor (default 1)")
    parser.add_argument("--parts", type=int, default=8, help="files per table")
    parser.add_argument("--data", default=os.path.join("benchmarks", "data"))
    parser.add_argument(
        "--modes",
        default="single,embedded",
        help="comma list of: single, embedded, localN[-plain|-tls|-mtls] (N worker "
        "processes), spark",
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="shorthand for --modes single,localN"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per query; best is kept")
    parser.add_argument("--queries", default="1-22", help="e.g. 1-22 or 1,3,5")
    parser.add_argument("--out", default=None, help="results file stem (default from modes)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.workers:
        modes = ["single", f"local{args.workers}"]
    if "single" not in modes:
        modes.insert(0, "single")
    queries = parse_queries(args.queries)

    print(f"generating TPC-H SF{args.sf} ({args.parts} files per table)...", flush=True)
    data = tpch.generate(Path(args.data) / f"sf{args.sf}-p{args.parts}", args.sf, args.parts)
    ctx = SessionContext()
    tpch.register(ctx, data)
    print(machine(), flush=True)

    times: dict[str, dict[int, float]] = {m: {} for m in modes}
    checks: dict[str, dict[int, str]] = {m: {} for m in modes}
    with ExitStack() as stack:
        runners: dict[str, Runner] = {}
        explainers: dict[str, DistributedContext] = {}
        for mode in modes:
            if mode == "single":
                runners[mode] = lambda sql: ctx.sql(sql).to_arrow_table()
            elif mode == "embedded":
                dctx = DistributedContext(ctx, progress=False)
                runners[mode], explainers[mode] = _dist_runner(dctx), dctx
            elif m := re.fullmatch(r"local(\d+)(?:-(plain|tls|mtls))?", mode):
                security = {
                    None: True,
                    "plain": False,
                    "tls": Security.temporary(tls=True),
                    "mtls": Security.temporary(mutual=True),
                }[m.group(2)]
                cluster = stack.enter_context(LocalCluster(int(m.group(1)), security=security))
                dctx = DistributedContext(ctx, workers=cluster, progress=False)
                runners[mode], explainers[mode] = _dist_runner(dctx), dctx
            elif mode == "spark":
                runners[mode] = spark_runner(stack, data)
            else:
                parser.error(f"unknown mode {mode!r}")

        print(" ".join(f"{h:>12}" for h in ["query", *modes]), flush=True)
        for n in queries:
            sql = tpch.query(n)
            ordered = "order by" in sql.lower()
            expected = None
            row = []
            for mode in modes:
                t, got = best_time(runners[mode], sql, args.repeat)
                times[mode][n] = t
                if mode == "single":
                    expected, checks[mode][n] = got, "ref"
                else:
                    # Spark rounds decimals half-up where DataFusion truncates: last digit.
                    tolerance = 1e-5 if mode == "spark" else None
                    ok = same_values(got, expected, ordered, tolerance)
                    if mode in explainers and not is_distributed(explainers[mode].explain(sql)):
                        ok = False
                    checks[mode][n] = "equal" if ok else "DIFFERENT"
                mark = "" if checks[mode][n] in ("ref", "equal") else "!"
                row.append(f"{t:11.3f}{mark or ' '}")
            print(f"{'q' + str(n):>12} " + " ".join(row), flush=True)

    totals = {m: sum(times[m].values()) for m in modes}
    print("\ntotal (s):  " + "  ".join(f"{m}={totals[m]:.2f}" for m in modes))
    for m in modes[1:]:
        print(f"{m} / single = {totals[m] / totals['single']:.2f}")
    stem = args.out or f"tpch_sf{args.sf:g}_{'_'.join(modes)}"
    write_results(stem, args, modes, queries, times, checks, totals)
    bad = [(m, n) for m in modes for n in queries if checks[m][n] == "DIFFERENT"]
    if bad:
        print(f"rows differ from single-node (or plan not distributed): {bad}", file=sys.stderr)
        return 1
    return 0


def _dist_runner(dctx: DistributedContext) -> Runner:
    return lambda sql: dctx.sql(sql).to_arrow_table()


def ratio(times: dict[str, dict[int, float]], mode: str, query: int) -> float:
    """``mode``'s time for ``query`` over single-node's."""
    return times[mode][query] / max(times["single"][query], 1e-9)


def write_results(stem, args, modes, queries, times, checks, totals, suite="TPC-H") -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"{stem}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query", *[f"{m}_s" for m in modes], *[f"{m}_rows" for m in modes[1:]]])
        for n in queries:
            w.writerow(
                [
                    f"q{n}",
                    *[f"{times[m][n]:.4f}" for m in modes],
                    *[checks[m][n] for m in modes[1:]],
                ]
            )
    lines = [
        f"# {suite} SF{args.sf:g}, best of {args.repeat}"
        + (
            f" (modes taking turns; short queries up to 10 turns within {args.budget:g} s)"
            if getattr(args, "budget", 0)
            else ""
        ),
        "",
        f"Machine: {machine()}",
        "",
        "| query | " + " | ".join(f"{m} (s)" for m in modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for n in queries:
        cells = [
            f"{times[m][n]:.3f}"
            + {"ref": "", "equal": "", "fallback": " (f)"}.get(checks[m][n], " (!)")
            for m in modes
        ]
        lines.append(f"| q{n} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{totals[m]:.2f}**" for m in modes) + " |")
    lines.append(
        "| ratio to single | "
        + " | ".join(f"{totals[m] / totals['single']:.2f}" for m in modes)
        + " |"
    )
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        # Times above, each mode's ratio to single-node below: with many queries (TPC-DS)
        # the ratios are what to read, and the line at 1.0 is single-node's speed.
        wide = min(max(12.0, 0.08 * len(queries) * len(modes)), 26.0)
        fig, (ax, rx) = plt.subplots(2, 1, figsize=(wide, 7), sharex=True)
        width = 0.8 / len(modes)
        ticks = [q + 0.4 - width / 2 for q in range(len(queries))]
        for i, m in enumerate(modes):
            xs = [q + i * width for q in range(len(queries))]
            ax.bar(xs, [times[m][n] for n in queries], width, label=m)
            if m != "single":
                rx.bar(xs, [ratio(times, m, n) for n in queries], width, label=m, color=f"C{i}")
        rx.axhline(1.0, color="black", linewidth=0.8)
        rx.set_ylabel("ratio to single-node")
        rx.set_xticks(ticks)
        rx.set_xticklabels([f"q{n}" for n in queries], rotation=90 if len(queries) > 30 else 0)
        ax.set_yscale("log")  # a 10 s query and a 20 ms one both stay readable
        ax.set_ylabel("seconds (best of runs, log scale)")
        ratio_totals = ", ".join(
            f"{m} {totals[m] / totals['single']:.2f}x" for m in modes if m != "single"
        )
        ax.set_title(f"{suite} SF{args.sf:g}: {ratio_totals} — {machine()}", fontsize=8)
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / f"{stem}.png", dpi=100)
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
    print(f"results: {RESULTS / stem}.{{csv,md,png}}")


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
