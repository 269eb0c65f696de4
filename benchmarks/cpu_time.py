"""CPU time per TPC-H query, side by side with single-node datafusion on the same data, in one
run: what a query costs the machine rather than how long it waits.

    python -m benchmarks.cpu_time --sf 0.1 --parts 8 --modes single,embedded,local2

Wall time on a busy 2-core machine moves by milliseconds between runs; the CPU a query spends
moves far less, and it is what many users at once contend for: when every core is busy, the
wall time of N users is about their CPU time over the cores (``benchmarks.concurrency``).
A mode's CPU is this process's (the coordinator, and the embedded cluster's workers, which
are threads of it) plus, for ``localN``, the worker processes' (read from ``/proc``). Each
query's figure is its least CPU over ``--repeat`` runs, the modes taking turns; every answer
is compared with single-node's. Writes ``benchmarks/results/cpu_time_sf<SF>.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
from datafusion import SessionContext

from benchmarks.concurrency import DEFAULT_QUERIES
from benchmarks.tpch import RESULTS, data_arguments, machine, parse_queries, same_values
from datafusion_distributed_py import DistributedContext, LocalCluster
from harness import tpch

_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has spent so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_clock(pids: list[int]) -> Callable[[], float]:
    """CPU seconds spent so far by this process and the processes ``pids``."""
    return lambda: time.process_time() + sum(process_cpu(p) for p in pids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(parser, repeat=3)
    parser.add_argument("--modes", default="single,embedded,local2")
    parser.add_argument("--queries", default=DEFAULT_QUERIES, help="e.g. 1-22 or 1,3,5")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    queries = parse_queries(args.queries)
    data = Path(args.data) / f"sf{args.sf:g}-p{args.parts}"
    if not (data / "lineitem").exists():
        tpch.generate(data, args.sf, args.parts)
    print(machine(), flush=True)
    with ExitStack() as stack:
        runners: dict[str, tuple[Callable[[str], pa.Table], Callable[[], float]]] = {}
        for mode in modes:
            ctx = SessionContext()
            tpch.register(ctx, data)
            if mode == "single":
                runners[mode] = (lambda sql, c=ctx: c.sql(sql).to_arrow_table(), time.process_time)
                continue
            cluster = None
            if mode.startswith("local"):
                cluster = stack.enter_context(LocalCluster(int(mode[len("local") :])))
            dctx = DistributedContext(ctx, workers=cluster, progress=False)
            pids = [p.pid for p in cluster.processes] if cluster is not None else []
            runners[mode] = (lambda sql, d=dctx: d.sql(sql).to_arrow_table(), cpu_clock(pids))
        cpu: dict[str, dict[int, float]] = {m: {} for m in modes}
        wrong: list[tuple[str, int]] = []
        for n in queries:
            sql = tpch.query(n)
            expected = None
            for turn in range(args.repeat + 1):  # the first turn warms up, uncounted
                for mode, (run, clock) in runners.items():
                    before = clock()
                    got = run(sql)
                    spent = clock() - before
                    if turn == 0:
                        if mode == "single":
                            expected = got
                        elif not same_values(got, expected, "order by" in sql.lower(), None):
                            wrong.append((mode, n))
                        continue
                    cpu[mode][n] = min(cpu[mode].get(n, spent), spent)
            cells = "  ".join(f"{cpu[m][n] * 1e3:9.1f}" for m in modes)
            print(f"q{n:<3} {cells}", flush=True)
    totals = {m: sum(cpu[m].values()) for m in modes}
    lines = [
        f"# CPU time per TPC-H query, SF{args.sf:g} ({args.parts} files per table)",
        "",
        f"Machine: {machine()}. `python -m benchmarks.cpu_time --sf {args.sf:g} --parts "
        f"{args.parts} --modes {args.modes}`: each query's least CPU (ms, user + system, the "
        f"coordinator's process and any worker processes) over {args.repeat} runs, the modes "
        "taking turns, after one uncounted run whose answers are compared with single-node's.",
        "",
        "| query | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
        *(
            f"| q{n} | " + " | ".join(f"{cpu[m][n] * 1e3:.1f}" for m in modes) + " |"
            for n in queries
        ),
        "| total | " + " | ".join(f"{totals[m] * 1e3:.0f}" for m in modes) + " |",
        "",
        *(f"- {m} / single: {totals[m] / totals['single']:.2f}" for m in modes if m != "single"),
        f"- answers differing from single-node's: {wrong or 'none'}",
    ]
    out = RESULTS / f"cpu_time_sf{args.sf:g}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(modes) :]))
    print(f"results: {out}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
