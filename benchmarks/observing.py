"""What observing costs: TPC-H with the event log, Prometheus metrics and OpenTelemetry
traces all on, against all off.

    python -m benchmarks.observing [--sf 1] [--workers 2] [--runs 2]

The same 22 queries on ``LocalCluster(N)`` (each worker serving ``/metrics``, scraped once a
second by a thread here, as Prometheus would, and logging its tasks) with ``event_log`` set
and every run traced by an OpenTelemetry SDK (a batch processor exporting to memory), and on
a cluster with none of them; each query's best of ``--runs``, the two modes taking turns.
Prints the total and per-query ratios, the records the log holds and the spans exported.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster, tracing
from datafusion_distributed_py import event_log as event_log_mod
from harness import tpch


def scraper(urls: list[str], stop: threading.Event) -> threading.Thread:
    """Scrapes every URL once a second until ``stop``."""

    def run() -> None:
        while not stop.wait(1.0):
            for url in urls:
                urllib.request.urlopen(url, timeout=10).read()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--data", default="benchmarks/data")
    args = parser.parse_args(argv)

    data = tpch.generate(Path(args.data) / f"sf{args.sf}-p8", args.sf, 8)
    ctx = SessionContext()
    tpch.register(ctx, data)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log = tempfile.mkdtemp(prefix="dfdpy-events-")
    stop = threading.Event()
    with (
        LocalCluster(args.workers) as plain,
        LocalCluster(args.workers, metrics=True, event_log=log) as seen,
    ):
        scraper(seen.metrics_urls, stop)
        modes = {
            "off": DistributedContext(ctx, workers=plain, progress=False),
            "on": DistributedContext(
                ctx, workers=seen, config=DistributedConfig(event_log=log), progress=False
            ),
        }
        best: dict[str, dict[int, float]] = {m: {} for m in modes}
        for n in tpch.QUERIES:
            sql = tpch.query(n)
            for _ in range(args.runs):
                for mode, dctx in modes.items():
                    traced = tracing.use_provider(provider if mode == "on" else None)
                    with traced:
                        start = time.perf_counter()
                        dctx.sql(sql).collect()
                        took = time.perf_counter() - start
                    best[mode][n] = min(best[mode].get(n, float("inf")), took)
        stop.set()
        event_log_mod.flush()
    provider.force_flush()
    total_off, total_on = sum(best["off"].values()), sum(best["on"].values())
    print(f"TPC-H SF{args.sf} on LocalCluster({args.workers}), best of {args.runs} per query")
    for n in tpch.QUERIES:
        off, on = best["off"][n], best["on"][n]
        print(f"  q{n:<2}  off {off:7.3f} s  on {on:7.3f} s  ratio {on / off:5.3f}")
    ratio = total_on / total_off
    print(f"total off {total_off:.2f} s, on {total_on:.2f} s: on/off = {ratio:.3f}")
    queries = len(event_log_mod.read_events(log, kind="query"))
    tasks = len(event_log_mod.read_events(log, kind="task"))
    print(f"event log: {queries} query and {tasks} task records in {log}")
    print(f"traces: {len(exporter.get_finished_spans())} spans exported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
