"""Writes at TPC-H SF1, side by side: single-node, the embedded cluster and LocalCluster(2).

    python -m benchmarks.writes [--sf 1] [--parts 4] [--repeat 2]

Each write is a ``COPY (query) TO 'dir/' STORED AS ...`` (run as ``ctx.sql`` single-node and
``dctx.sql`` on the clusters), into a fresh directory each turn. For each it prints the best
time of each mode, the ratio to single-node (target: at most 1.0), the writers (sinks that
wrote files: one per task when the workers write) and the bytes the coordinator received from
the workers (what its head stage's network boundaries transferred: counts, not rows). Every
output is read back with stock single-node datafusion and its row count checked.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
from datafusion import SessionContext

from benchmarks.tpch import RESULTS, best_times, data_arguments, machine, tpch_data
from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import shuffle_bytes
from harness import tpch

SHIPPED = "SELECT * FROM lineitem WHERE l_shipdate >= '1994-01-01'"
WRITES = {
    "Parquet, shipped since 1994": f"COPY ({SHIPPED}) TO '{{out}}/' STORED AS PARQUET",
    "CSV, shipped since 1994": f"COPY ({SHIPPED}) TO '{{out}}/' STORED AS CSV",
    "Parquet, whole lineitem": "COPY (SELECT * FROM lineitem) TO '{out}/' STORED AS PARQUET",
    "Parquet by l_returnflag": (
        f"COPY ({SHIPPED}) TO '{{out}}/' STORED AS PARQUET PARTITIONED BY (l_returnflag)"
    ),
    # Not SQL: the DataFrame method on the frame of the query (``None`` returns).
    "`df.write_parquet`, shipped since 1994": "write_parquet",
}


def writers(out: Path) -> int:
    names = (p.name for p in out.rglob("*") if p.is_file())
    return len({m.group(1) for n in names if (m := re.match(r"([A-Za-z0-9]{16})", n))})


_TURNS = itertools.count()


def _writer(mode: str, copy: str, seen: dict, maker, scratch: Path):
    """Runs ``copy`` into a fresh directory of ``scratch`` with ``maker`` (``ctx`` or a
    ``DistributedContext``); keeps the latest output in ``seen[mode]``, removes the one
    before."""

    def write(_: str) -> pa.Table:
        out = scratch / f"{mode}-{next(_TURNS)}"
        if copy == "write_parquet":
            df = maker.sql(SHIPPED)
            df.write_parquet(str(out))
            rows = SessionContext().read_parquet(str(out) + "/").count()
            table = pa.table({"count": pa.array([rows], pa.uint64())})
        else:
            df = maker.sql(copy.format(out=out))
            table = df.to_arrow_table()
        if mode in seen:
            shutil.rmtree(seen[mode][0], ignore_errors=True)
        seen[mode] = (out, df)
        return table

    return write


def _received(name: str, dctx: DistributedContext, df) -> str:
    if name.startswith("`df."):  # its COPY is a frame of its own, out of reach here
        return "(counts only)"
    return f"{shuffle_bytes(df, into_coordinator=True):,} B"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(parser, repeat=2)
    args = parser.parse_args(argv)
    sf = f"{args.sf:g}"
    data = tpch_data(args)
    ctx = SessionContext()
    tpch.register(ctx, data)
    scratch = Path(tempfile.mkdtemp(prefix="dfdpy-writes-"))
    lines = [
        f"# Writes at TPC-H SF{sf} ({args.parts} files per table)",
        "",
        f"Machine: {machine()}. Best of {args.repeat} turns, modes taking turns. `writers`: "
        "sinks that wrote files (one per task when the workers write); `recv`: bytes the "
        "coordinator received from workers (Arrow IPC through its head stage).",
        "",
        "| write | rows | single s | embedded s | local2 s | embedded/single | local2/single "
        "| writers (single / embedded / local2) | recv (local2) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, scratch, True)
        cluster = stack.enter_context(LocalCluster(2))
        contexts = {
            "embedded": DistributedContext(ctx, progress=False),
            "local2": DistributedContext(ctx, workers=cluster, progress=False),
        }
        for name, copy in WRITES.items():
            seen: dict[str, tuple[Path, object]] = {}
            runners = {
                m: _writer(m, copy, seen, ctx if m == "single" else contexts[m], scratch)
                for m in ("single", *contexts)
            }
            best, results = best_times(runners, "", args.repeat, 0)
            counts = {m: results[m].column(0)[0].as_py() for m in results}
            assert len(set(counts.values())) == 1, counts
            for mode, (out, _) in seen.items():
                check = SessionContext()
                back = check.read_parquet if "parquet" in name.lower() else check.read_csv
                assert back(str(out) + "/").count() == counts["single"], (name, mode)
            row = (
                f"| {name} | {counts['single']:,} | {best['single']:.2f} | {best['embedded']:.2f} "
                f"| {best['local2']:.2f} | {best['embedded'] / best['single']:.2f} | "
                f"{best['local2'] / best['single']:.2f} | "
                f"{' / '.join(str(writers(seen[m][0])) for m in ('single', 'embedded', 'local2'))} "
                f"| {_received(name, contexts['local2'], seen['local2'][1])} |"
            )
            lines.append(row)
            print(row, flush=True)
    out = RESULTS / f"writes_sf{sf}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"results: {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
