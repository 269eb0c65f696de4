"""OpenTelemetry traces: with an SDK configured in the user's process, a query is one trace —
a span per stage and per task under the query's span — and each task's span is timed by the
worker process that ran it, under the trace context sent with the task request.

Spans are collected by the SDK's in-memory exporter, and, from a process of its own whose
global provider exports over OTLP/HTTP, by a real OTLP receiver decoding the protobuf."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import SPLIT_CONFIG, assert_same_rows
from datafusion import SessionContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from datafusion_distributed_py import DistributedContext, LocalCluster, ran_on
from datafusion_distributed_py.tracing import QUERY, STAGE, TASK, use_provider

GROUP_BY = "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k"


def table(ctx: SessionContext) -> SessionContext:
    ctx.from_pydict({"k": [i % 7 for i in range(60_000)], "v": list(range(60_000))}, name="t")
    return ctx


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2) as c:
        yield c


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """This thread's queries traced by a provider whose spans ``exporter`` holds."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.exporter = exporter  # type: ignore[attr-defined]
    with use_provider(provider):
        yield provider
    provider.shutdown()


@pytest.fixture
def spans(provider: TracerProvider) -> InMemorySpanExporter:
    exporter: InMemorySpanExporter = provider.exporter  # type: ignore[attr-defined]
    return exporter


def tree(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {QUERY: [], STAGE: [], TASK: []}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def test_a_two_stage_query_is_one_trace_across_both_worker_processes(cluster, provider, spans):
    ctx = table(SessionContext())
    dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG, progress=False)
    with provider.get_tracer("user").start_as_current_span("nightly-report") as outer:
        df = dctx.sql(GROUP_BY)
        rows = df.to_arrow_table()
    assert ran_on(df) == "workers"
    assert_same_rows(rows, table(SessionContext()).sql(GROUP_BY).to_arrow_table(), ordered=True)

    got = tree(spans)
    (query,) = got[QUERY]
    trace_id = query.context.trace_id
    assert query.parent is not None and query.parent.span_id == outer.get_span_context().span_id
    assert query.attributes["db.query.text"] == GROUP_BY
    assert query.attributes["dfdpy.ran_on"] == "workers"
    assert all(s.context.trace_id == trace_id for spans_ in got.values() for s in spans_)

    stages = {s.context.span_id: s for s in got[STAGE]}
    assert len(stages) >= 2, "a shuffle: the scan-and-partial stage, then the final aggregate"
    assert all(s.parent.span_id == query.context.span_id for s in stages.values())
    tasks = got[TASK]
    assert all(t.parent.span_id in stages for t in tasks)
    for stage in stages.values():
        mine = [t for t in tasks if t.parent.span_id == stage.context.span_id]
        assert len(mine) == stage.attributes["dfdpy.tasks"] >= 1
        assert stage.start_time <= min(t.start_time for t in mine)
        assert stage.end_time >= max(t.end_time for t in mine)

    # Timed in the worker processes, not here: their pids, under the context sent to them.
    worker_pids = {p.pid for p in cluster.processes}
    assert {t.attributes["process.pid"] for t in tasks} == worker_pids
    assert os.getpid() not in worker_pids
    assert {t.attributes["dfdpy.worker_url"] for t in tasks} == set(cluster.urls)
    sent = f"{trace_id:032x}"
    assert all(t.attributes["dfdpy.traceparent"].split("-")[1] == sent for t in tasks)
    assert sum(t.attributes["dfdpy.output_rows"] for t in tasks if t.attributes["dfdpy.stage"]
               == max(s.attributes["dfdpy.stage"] for s in stages.values())) == 7  # fmt: skip
    slack = 50_000_000  # 50 ms: worker clocks are this machine's
    assert all(query.start_time - slack <= t.start_time <= t.end_time <= query.end_time + slack
               for t in tasks)  # fmt: skip

    # The task records say the same.
    records = dctx.metrics(df)
    assert {r["worker_pid"] for r in records} == worker_pids
    assert all(r["traceparent"].split("-")[1] == sent for r in records)


def test_the_embedded_cluster_traces_in_this_process(spans):
    dctx = DistributedContext(table(SessionContext()), config=SPLIT_CONFIG, progress=False)
    df = dctx.sql(GROUP_BY)
    assert len(df.to_pylist()) == 7 and ran_on(df) == "workers"
    got = tree(spans)
    assert len(got[QUERY]) == 1 and len(got[STAGE]) >= 2 and got[TASK]
    assert {t.attributes["process.pid"] for t in got[TASK]} == {os.getpid()}


def test_each_run_is_a_trace_of_its_own(cluster, spans):
    dctx = DistributedContext(table(SessionContext()), workers=cluster, progress=False)
    df = dctx.sql(GROUP_BY)
    df.collect()
    df.collect()
    queries = tree(spans)[QUERY]
    assert len(queries) == 2
    assert queries[0].context.trace_id != queries[1].context.trace_id
    for query in queries:
        tasks = [s for s in tree(spans)[TASK] if s.context.trace_id == query.context.trace_id]
        assert tasks, "each run's tasks sent under that run's context"


def test_a_failed_query_is_an_error_span(cluster, spans):
    ctx = SessionContext()
    ctx.from_pydict({"s": ["x", "1"]}, name="bad")
    dctx = DistributedContext(ctx, workers=cluster, progress=False)
    df = dctx.sql("SELECT CAST(s AS INT) AS i FROM bad")
    with pytest.raises(Exception, match="Cast|cast"):
        df.collect()
    (query,) = tree(spans)[QUERY]
    assert query.attributes["dfdpy.ran_on"] == "workers"
    assert query.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in query.events)


def test_without_an_sdk_no_task_carries_a_trace(cluster):
    dctx = DistributedContext(table(SessionContext()), workers=cluster, progress=False)
    df = dctx.sql(GROUP_BY)
    df.collect()
    assert ran_on(df) == "workers"
    records = dctx.metrics(df)
    assert records and all(r["traceparent"] is None and r["worker_pid"] is None for r in records)


#: The user's program: the global provider exports over OTLP/HTTP to argv[1].
OTLP_PROGRAM = textwrap.dedent(
    """
    import sys
    from datafusion import SessionContext
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster

    provider = TracerProvider(resource=Resource.create({"service.name": "nightly"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
    trace.set_tracer_provider(provider)
    ctx = SessionContext()
    ctx.from_pydict({"k": [i % 7 for i in range(60_000)], "v": list(range(60_000))}, name="t")
    config = DistributedConfig(file_scan_config_bytes_per_partition=16 * 1024)
    with LocalCluster(2) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=config, progress=False)
        dctx.sql("SELECT k, sum(v) FROM t GROUP BY k").collect()
        print(" ".join(str(p.pid) for p in cluster.processes))
    provider.shutdown()
    """
)


def test_spans_reach_the_users_otlp_collector_from_a_program_of_its_own(tmp_path):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    received: list[bytes] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        script = tmp_path / "program.py"
        script.write_text(OTLP_PROGRAM)
        url = f"http://127.0.0.1:{server.server_port}/v1/traces"
        out = subprocess.run([sys.executable, str(script), url], check=True, timeout=300,
                             capture_output=True, text=True)  # fmt: skip
    finally:
        server.shutdown()
    worker_pids = {int(p) for p in out.stdout.split()}
    spans = []
    for body in received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "nightly"
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (query,) = by_name[QUERY]
    assert {s.trace_id for s in spans} == {query.trace_id}
    pids = {a.value.int_value for t in by_name[TASK] for a in t.attributes
            if a.key == "process.pid"}  # fmt: skip
    assert pids == worker_pids and len(pids) == 2
    stage_ids = {s.span_id for s in by_name[STAGE]}
    assert all(s.parent_span_id == query.span_id for s in by_name[STAGE])
    assert all(t.parent_span_id in stage_ids for t in by_name[TASK])
