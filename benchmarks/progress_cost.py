"""What live progress costs: TPC-H with workers asked for running tasks' rows every
``progress_interval`` (0.5 s) against the same queries with live progress off, side by side
in one run (the two alternate query by query, best of ``--repeat``).

    python -m benchmarks.progress_cost --sf 1 --modes embedded,local2

Writes ``benchmarks/results/progress_cost_sf<sf>.md``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from contextlib import ExitStack
from pathlib import Path

from datafusion import SessionContext

from benchmarks.tpch import best_time, machine, parse_queries, same_values
from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    ProgressEvent,
)
from harness import tpch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--data", default=str(Path("benchmarks") / "data"))
    parser.add_argument("--modes", default="embedded,local2")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--queries", default="1-22")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    data = tpch.generate(Path(args.data) / f"sf{args.sf}-p8", args.sf, 8)
    ctx = SessionContext()
    tpch.register(ctx, data)
    print(machine(), flush=True)
    events = {"rows": 0}

    def listen(e: ProgressEvent) -> None:  # what a progress bar or dashboard would get
        events["rows"] += e.kind == "rows"

    lines = [f"# Live progress cost, TPC-H SF{args.sf:g}", "", machine(), ""]
    lines += ["| mode | live off (s) | live on, 0.5 s (s) | on / off | rows events |"]
    lines += ["|---|---|---|---|---|"]
    with ExitStack() as stack:
        for mode in args.modes.split(","):
            workers = None
            if m := re.fullmatch(r"local(\d+)", mode):
                workers = stack.enter_context(LocalCluster(int(m.group(1))))
            off = DistributedContext(
                ctx, workers, DistributedConfig(progress_interval=0), progress=listen
            )
            on = DistributedContext(
                ctx, workers, DistributedConfig(progress_interval=0.5), progress=listen
            )
            totals = {"off": 0.0, "on": 0.0}
            events["rows"] = 0
            for n in parse_queries(args.queries):
                sql = tpch.query(n)
                expected = ctx.sql(sql).to_arrow_table()
                for label, dctx in (("off", off), ("on", on)):
                    t, got = best_time(
                        lambda s, d=dctx: d.sql(s).to_arrow_table(), sql, args.repeat
                    )
                    assert same_values(got, expected, "order by" in sql.lower()), (mode, n)
                    totals[label] += t
            ratio = totals["on"] / totals["off"]
            print(
                f"{mode}: off {totals['off']:.2f} s, on {totals['on']:.2f} s, on/off "
                f"{ratio:.3f} ({events['rows']} rows events)",
                flush=True,
            )
            lines.append(
                f"| {mode} | {totals['off']:.2f} | {totals['on']:.2f} | {ratio:.3f} | "
                f"{events['rows']} |"
            )
    out = Path("benchmarks") / "results" / f"progress_cost_sf{args.sf:g}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
