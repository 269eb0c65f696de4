"""Kept data at TPC-H SF1, side by side: single-node, the embedded cluster and LocalCluster(2).

    python -m benchmarks.kept [--sf 1] [--parts 4] [--repeat 3] [--since 1998-07-01,...]
                              [--pandas-mb 500]

A notebook keeps a result, then asks it questions. For each size of kept result (lineitem
shipped since a date: ~0.3 M, 1.6 M, 3.3 M and all 6 M rows) and each way of keeping it
(``CREATE TABLE kept AS ...``; ``ctx.register_view("kept", df.cache())``), and for a
``from_pandas`` table of ``--pandas-mb`` MB, each mode keeps it once (``ctx`` single-node,
``dctx`` on the clusters, each mode on a session of its own) and runs three follow-up queries
on it, the modes taking turns. Per follow-up it prints the best time of each mode, the ratio
to single-node (target: at most 1.2), the bytes of plan the coordinator sent to the workers
(target: at most 1 MB whatever the size) and how far the process's RSS rose above its level
before the follow-ups (target: at most 200 MB). Every result is checked equal to
single-node's.
"""

from __future__ import annotations

import argparse
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
from datafusion import SessionContext

from benchmarks.tpch import RESULTS, data_arguments, machine, same_values, tpch_data, turn_times
from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import plan_bytes_sent
from harness import tpch

FOLLOW_UPS = {
    "sums by flag and status": (
        "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, sum(l_extendedprice) AS p, "
        "count(*) AS n FROM kept GROUP BY l_returnflag, l_linestatus "
        "ORDER BY l_returnflag, l_linestatus"
    ),
    "distinct orders, quantity > 30": (
        "SELECT count(DISTINCT l_orderkey) AS orders FROM kept WHERE l_quantity > 30"
    ),
    "average discount by flag": (
        "SELECT l_returnflag, avg(l_discount) AS d FROM kept GROUP BY l_returnflag "
        "ORDER BY l_returnflag"
    ),
}

#: Numeric and short text columns a pandas user would hold (the ``from_pandas`` table).
PANDAS_COLUMNS = (
    "l_orderkey, l_partkey, l_suppkey, l_linenumber, l_quantity, l_extendedprice, "
    "l_discount, l_tax, l_returnflag, l_linestatus"
)


class PeakRss:
    """The highest RSS of this process seen since ``reset`` (sampled every 10 ms)."""

    def __init__(self) -> None:
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss())

    def reset(self) -> None:
        self.base = self.peak = _rss()

    def rise(self) -> int:
        return max(self.peak, _rss()) - self.base

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _runner(maker, sql: str, rss: PeakRss, frames: dict, rises: dict, mode: str):
    """Runs ``sql`` on ``maker``, noting its frame and how far the RSS rose meanwhile."""

    def run(_: str) -> pa.Table:
        rss.reset()
        df = maker.sql(sql)
        table = df.to_arrow_table()
        frames[mode] = df
        rises[mode] = max(rises.get(mode, 0), rss.rise())
        return table

    return run


def _keep(how: str, maker, since: str | None, pdf) -> None:
    """Keeps the result as ``kept`` on ``maker`` (``ctx`` or a ``DistributedContext``)."""
    query = f"SELECT * FROM lineitem WHERE l_shipdate >= '{since}'"
    ctx = maker if isinstance(maker, SessionContext) else maker.ctx
    if how == "CREATE TABLE AS":
        maker.sql(f"CREATE TABLE kept AS {query}")
    elif how == "cache()":
        ctx.register_view("kept", maker.sql(query).cache())
    else:
        ctx.from_pandas(pdf, name="kept")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(parser, repeat=3)
    parser.add_argument(
        "--since", default="1998-07-01,1997-01-01,1995-06-01,1992-01-01",
        help="l_shipdate bounds of the kept results (each a size)",
    )  # fmt: skip
    parser.add_argument("--pandas-mb", type=int, default=500, help="0: no from_pandas row")
    args = parser.parse_args(argv)
    sf = f"{args.sf:g}"
    data = tpch_data(args)
    lines = [
        f"# Kept data at TPC-H SF{sf} ({args.parts} files per table)",
        "",
        f"Machine: {machine()}. Best of {args.repeat} turns, modes taking turns. `sent`: bytes "
        "of plan the coordinator sent to the workers for the follow-up; `RSS rise`: how far "
        "the process's RSS rose above its level before the follow-ups (one process runs all "
        "modes: the coordinators and the embedded workers).",
        "",
        "| kept | rows | keep s (single / emb / local2) | follow-up | single s | embedded s "
        "| local2 s | emb/single | local2/single | sent emb / local2 | RSS rise emb / local2 "
        "| equal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    cases = [(how, s) for s in args.since.split(",") for how in ("CREATE TABLE AS", "cache()")]
    if args.pandas_mb:
        cases.append(("from_pandas", None))
    rss = PeakRss()
    with ExitStack() as stack:
        stack.callback(rss.close)
        cluster = stack.enter_context(LocalCluster(2))
        for how, since in cases:
            pdf = None
            if how == "from_pandas":
                pdf = _pandas(data, args.pandas_mb)
            contexts: dict[str, object] = {}
            for mode in ("single", "embedded", "local2"):
                ctx = SessionContext()
                tpch.register(ctx, data)
                contexts[mode] = (
                    ctx
                    if mode == "single"
                    else DistributedContext(
                        ctx, workers=cluster if mode == "local2" else None, progress=False
                    )
                )
            keep_s = {}
            for mode, maker in contexts.items():
                start = time.perf_counter()
                _keep(how, maker, since, pdf)
                keep_s[mode] = time.perf_counter() - start
            single_ctx = contexts["single"]
            assert isinstance(single_ctx, SessionContext)
            rows = single_ctx.sql("SELECT count(*) FROM kept").to_pylist()[0]["count(*)"]
            label = f"{how}" + (f" since {since}" if since else f" {args.pandas_mb} MB")
            for name, sql in FOLLOW_UPS.items():
                frames: dict[str, object] = {}
                rises: dict[str, int] = {}
                runners = {m: _runner(contexts[m], sql, rss, frames, rises, m) for m in contexts}
                times, results = turn_times(runners, "", args.repeat, 0.0)
                best = {m: min(ts) for m, ts in times.items()}
                equal = all(
                    same_values(results[m], results["single"], ordered=True, tolerance=1e-9)
                    for m in ("embedded", "local2")
                )
                sent = " / ".join(f"{plan_bytes_sent(frames[m]):,}" for m in ("embedded", "local2"))
                rise = " / ".join(f"{rises[m] / 2**20:.0f} MB" for m in ("embedded", "local2"))
                row = (
                    f"| {label} | {rows:,} | {keep_s['single']:.2f} / {keep_s['embedded']:.2f} / "
                    f"{keep_s['local2']:.2f} | {name} | {best['single']:.3f} | "
                    f"{best['embedded']:.3f} | {best['local2']:.3f} | "
                    f"{best['embedded'] / best['single']:.2f} | "
                    f"{best['local2'] / best['single']:.2f} | {sent} | {rise} | "
                    f"{'yes' if equal else 'NO'} |"
                )
                lines.append(row)
                print(row, flush=True)
            for maker in contexts.values():
                ctx = maker if isinstance(maker, SessionContext) else maker.ctx
                ctx.deregister_table("kept")
            del contexts, frames, pdf
    out = RESULTS / f"kept_sf{sf}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"results: {out.resolve()}")
    return 0


def _pandas(data: Path, mb: int):
    """A pandas frame of lineitem's columns of about ``mb`` MB (at most all its rows)."""
    ctx = SessionContext()
    tpch.register(ctx, data)
    table = ctx.sql(f"SELECT {PANDAS_COLUMNS} FROM lineitem").to_arrow_table()
    pdf = table.to_pandas()
    size = pdf.memory_usage(deep=True).sum()
    if size > mb * 2**20:
        pdf = pdf.iloc[: int(len(pdf) * mb * 2**20 / size)].reset_index(drop=True)
    return pdf


if __name__ == "__main__":
    raise SystemExit(main())
