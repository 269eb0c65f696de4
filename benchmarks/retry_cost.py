"""What a worker lost mid-query costs (issue 53), side by side in one run.

    python -m benchmarks.retry_cost [--sf 1] [--repeat 2]

On ``LocalCluster(2)``, TPC-H at ``--sf``, the issue's query — ``SELECT l_orderkey,
l_linenumber, score(l_comment) AS s FROM lineitem WHERE l_quantity > 25``, ``score`` a Python
UDF, its rows flowing back as it runs — read with ``to_arrow_table()``:

* undisturbed (the median of ``--repeat`` runs);
* one worker process killed (SIGKILL) at 30% and at 70% of the undisturbed time: the run is
  dropped and the query runs again from the start on the workers left (whole-query retry),
  or runs again reading what its finished tasks spooled (``fault_tolerance="task"``);
* without failures, the 22 TPC-H queries in each mode (the recovery mode's cost on short
  queries).

Each disturbed run is checked equal to single-node and to have run twice (``attempt`` 2 in
``dctx.metrics``). Prints a table of times and ratios to the undisturbed time, and writes
``benchmarks/results/retry_cost.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from datafusion import SessionContext, udf

from benchmarks.tpch import machine
from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_same_rows
from harness import tpch

RESULTS = Path(__file__).parent / "results"
DATA = Path(__file__).parent / "data"
SQL = "SELECT l_orderkey, l_linenumber, score(l_comment) AS s FROM lineitem WHERE l_quantity > 25"


def score(a: pa.Array) -> pa.Array:
    time.sleep(len(a) * 0.000006)  # ~9 s single-node on SF1's lineitem, over 5 s on two workers
    return pc.utf8_length(a)


def session(sf: float) -> SessionContext:
    ctx = SessionContext()
    tpch.register(ctx, tpch.generate(DATA / f"sf{sf}-p8", scale_factor=sf, parts=8))
    ctx.register_udf(udf(score, [pa.string()], pa.int32(), "immutable", name="score"))
    return ctx


def healed(cluster: LocalCluster) -> None:
    cluster.wait_for_workers()
    time.sleep(1.0)


def timed(
    dctx: DistributedContext, kill_at: float | None, cluster: LocalCluster
) -> tuple[float, pa.Table, set[int]]:
    df = dctx.sql(SQL)
    if kill_at is not None:
        pid = cluster.processes[1].pid

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

        threading.Timer(kill_at, kill).start()
    start = time.monotonic()
    got = df.to_arrow_table()
    seconds = time.monotonic() - start
    return seconds, got, {m["attempt"] for m in dctx.metrics(df)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    ctx = session(args.sf)
    expected = ctx.sql(SQL).to_arrow_table()
    rows: list[tuple[str, float, float, str]] = []
    with LocalCluster(2) as cluster:
        modes = {
            "whole-query retry": DistributedConfig(),
            "task-level recovery": DistributedConfig(fault_tolerance="task"),
        }
        base = None
        for mode, config in modes.items():
            dctx = DistributedContext(ctx, workers=cluster, config=config, progress=False)
            healed(cluster)
            undisturbed = statistics.median(
                timed(dctx, None, cluster)[0] for _ in range(args.repeat)
            )
            base = base or undisturbed
            rows.append((f"undisturbed, {mode}", undisturbed, undisturbed / base, "1"))
            for at in (0.3, 0.7):
                healed(cluster)
                seconds, got, attempts = timed(dctx, at * undisturbed, cluster)
                assert_same_rows(got, expected, ordered=False)
                assert max(attempts) >= 2, attempts
                rows.append((f"killed at {at:.0%}, {mode}", seconds, seconds / base,
                             ", ".join(map(str, sorted(attempts)))))  # fmt: skip
        # The recovery mode's cost without failures on short queries: TPC-H's 22, in turns.
        suite: dict[str, float] = {mode: 0.0 for mode in modes}
        for n in tpch.QUERIES:
            for mode, config in modes.items():
                dctx = DistributedContext(ctx, workers=cluster, config=config, progress=False)
                start = time.monotonic()
                dctx.sql(tpch.query(n)).to_arrow_table()
                suite[mode] += time.monotonic() - start
    lines = [
        f"# A worker lost mid-query (TPC-H SF{args.sf:g}, LocalCluster(2), {machine()})",
        "",
        f"`{SQL}` (`score`: a Python UDF), read with `to_arrow_table()`; equal to single-node "
        "in every run.",
        "",
        "| run | seconds | × undisturbed (whole-query mode) | runs (attempts) |",
        "|---|---|---|---|",
        *(f"| {name} | {s:.2f} | {r:.2f} | {a} |" for name, s, r, a in rows),
        "",
        "Without failures, TPC-H's 22 queries (sub-second each), total seconds:",
        "",
        "| mode | seconds | × whole-query mode |",
        "|---|---|---|",
        *(
            f"| {mode} | {t:.2f} | {t / suite['whole-query retry']:.2f} |"
            for mode, t in suite.items()
        ),  # fmt: skip
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "retry_cost.md").write_text(text)


if __name__ == "__main__":
    main()
