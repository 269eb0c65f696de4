"""A small kept table held whole by one worker, or spread where it was made: follow-ups side by
side with single-node.

    python -m benchmarks.kept_whole [--sf 1] [--parts 8] [--since 1998-07-01] [--runs 40]

Keeps lineitem shipped since ``--since`` (``CREATE TABLE kept AS ...``) once per mode: single-
node, and on the embedded cluster and ``LocalCluster(2)`` each with ``hold_whole_below`` at its
default (the table held whole by one worker) and at 0 (each part where the task that made it
ran). Then runs three follow-ups, the modes taking turns, and prints each mode's median and its
ratio to single-node's; every answer is checked equal to single-node's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack

from datafusion import SessionContext

from benchmarks.kept import FOLLOW_UPS
from benchmarks.tpch import RESULTS, data_arguments, machine, same_values, tpch_data
from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(parser, repeat=1)
    parser.add_argument("--since", default="1998-07-01", help="l_shipdate bound of the table")
    parser.add_argument("--runs", type=int, default=40, help="runs of each follow-up per mode")
    args = parser.parse_args(argv)
    sf = f"{args.sf:g}"
    data = tpch_data(args)
    make = f"CREATE TABLE kept AS SELECT * FROM lineitem WHERE l_shipdate >= '{args.since}'"

    def session() -> SessionContext:
        ctx = SessionContext()
        ctx.register_parquet("lineitem", str(data / "lineitem"))
        return ctx

    with ExitStack() as stack:
        cluster = stack.enter_context(LocalCluster(2))
        single = session()
        single.sql(make).collect()
        modes: dict[str, DistributedContext] = {}
        for kind, workers in (("embedded", None), ("local2", cluster)):
            for label, limit in (("whole", DistributedConfig().hold_whole_below), ("spread", 0)):
                config = DistributedConfig(hold_whole_below=limit)
                dctx = DistributedContext(session(), workers, config=config, progress=False)
                dctx.sql(make)
                holders = {s["holder"] for k in dctx.status().kept for s in k.shares}
                modes[f"{kind} {label} ({len(holders)} holder{'s' * (len(holders) > 1)})"] = dctx
        rows = single.sql("SELECT count(*) AS n FROM kept").to_pylist()[0]["n"]
        lines = [
            f"# A kept table held whole or spread, TPC-H SF{sf} ({args.parts} files per table)",
            "",
            f"Machine: {machine()}. `kept`: lineitem shipped since {args.since} ({rows:,} rows). "
            f"Median of {args.runs} runs of each follow-up, the modes taking turns; ratio to "
            "single-node's median in brackets.",
            "",
            "| follow-up | single ms | " + " | ".join(f"{m} ms" for m in modes) + " | equal |",
            "|---|---|" + "---|" * len(modes) + "---|",
        ]
        for name, sql in FOLLOW_UPS.items():
            want = single.sql(sql).to_arrow_table()
            equal = all(
                same_values(d.sql(sql).to_arrow_table(), want, ordered=True) for d in modes.values()
            )
            times: dict[str, list[float]] = {m: [] for m in ["single", *modes]}
            runners: list[tuple[str, SessionContext | DistributedContext]] = [
                ("single", single),
                *modes.items(),
            ]
            for _ in range(args.runs):
                for m, runner in runners:
                    started = time.perf_counter()
                    runner.sql(sql).collect()
                    times[m].append(time.perf_counter() - started)
            base = statistics.median(times["single"])
            medians = [statistics.median(times[m]) for m in modes]
            cells = [f"{t * 1000:.1f} ({t / base:.2f})" for t in medians]
            lines.append(
                f"| {name} | {base * 1000:.1f} | "
                + " | ".join(cells)
                + f" | {'yes' if equal else 'NO'} |"
            )
            print(lines[-1], flush=True)
    out = RESULTS / f"kept_whole_sf{sf}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"results: {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
