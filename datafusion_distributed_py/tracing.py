"""OpenTelemetry traces of distributed queries.

When the process has an OpenTelemetry SDK configured (a ``TracerProvider`` set with
``opentelemetry.trace.set_tracer_provider``), each run of a query is one span,
``datafusion_distributed.query``, under whatever span is current where the query runs; its
stages are spans under it, and each stage's tasks spans under those. The query span's W3C
``traceparent`` travels with every task request, and each worker times its tasks under it in
its own process (its clock, pid and host); the spans come back with the task's metrics and
are exported here, by the exporter the user configured, so workers need no collector of their
own. Without an SDK (or without ``opentelemetry-api`` installed) nothing is traced and a
query pays one check.

Example:
    >>> from datafusion import SessionContext
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    ...     InMemorySpanExporter)
    >>> from datafusion_distributed_py import DistributedContext
    >>> exporter = InMemorySpanExporter()
    >>> provider = TracerProvider()
    >>> provider.add_span_processor(SimpleSpanProcessor(exporter))
    >>> tracer = provider.get_tracer("example")
    >>> ctx = SessionContext()
    >>> ctx.from_pydict({"k": [1, 2, 1]}, name="t") and None
    >>> with use_provider(provider):
    ...     _ = DistributedContext(ctx).sql("SELECT k, count(*) FROM t GROUP BY k").collect()
    >>> names = [s.name for s in exporter.get_finished_spans()]
    >>> names.count("datafusion_distributed.query"), "datafusion_distributed.task" in names
    (1, True)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datafusion_distributed_py.task_metrics import run_tasks

#: Span names, one per level of the tree.
QUERY, STAGE, TASK = (
    "datafusion_distributed.query",
    "datafusion_distributed.stage",
    "datafusion_distributed.task",
)

_SCOPE = "datafusion_distributed_py"
#: Seconds a finished run's end waits for its tasks' metrics (their spans).
METRICS_WAIT_S = 0.5
# A provider for this process's queries in place of the global one (tests, examples).
_local = threading.local()


@dataclass
class QueryTrace:
    """The open span of one run and the context its tasks are sent under."""

    span: Any
    tracer: Any
    traceparent: str


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


@contextlib.contextmanager
def use_provider(provider: Any) -> Iterator[None]:
    """Traces this thread's queries with ``provider`` instead of the global one, for the
    block (the global provider can be set only once per process)."""
    before = getattr(_local, "provider", None)
    _local.provider = provider
    try:
        yield
    finally:
        _local.provider = before


def begin(sql: str, ran_on: str, source: Any) -> QueryTrace | None:
    """Opens the span of a run starting now (None when nothing records it), and sends
    ``source``'s tasks (a distributed plan) under it."""
    trace = _api()
    if trace is None:
        return None
    provider = getattr(_local, "provider", None)
    # The API's own providers record nothing until an SDK's is set: no span to open.
    unset = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    if provider is None and isinstance(trace.get_tracer_provider(), unset):
        _send_under(source, None)
        return None
    tracer = (provider.get_tracer(_SCOPE) if provider is not None
              else trace.get_tracer(_SCOPE))  # fmt: skip
    span = tracer.start_span(QUERY, attributes={
        "db.system.name": "datafusion", "db.query.text": sql, "dfdpy.ran_on": ran_on,
    })  # fmt: skip
    if not span.is_recording():
        _send_under(source, None)
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    traceparent = carrier.get("traceparent", "")
    _send_under(source, traceparent or None)
    return QueryTrace(span, tracer, traceparent)


def _send_under(source: Any, traceparent: str | None) -> None:
    setter = getattr(source, "set_trace_parent", None)
    if setter is not None:
        setter(traceparent)


def end(
    run: QueryTrace,
    source: Any,
    rows: int | None,
    error: BaseException | None,
    fallback_reason: str | None,
) -> None:
    """Closes ``run``'s span, with its stages and the tasks its workers timed."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    span = run.span
    if fallback_reason:
        span.set_attribute("dfdpy.fallback_reason", fallback_reason)
    if rows is not None:
        span.set_attribute("dfdpy.rows", rows)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    elif source is not None:
        tasks = _tasks(source)
        if tasks:
            span.set_attribute("dfdpy.attempts", max(t["attempt"] for t in tasks))
        parent = trace.set_span_in_context(span)
        stages: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for t in tasks:
            stages.setdefault((t["attempt"], t["stage"]), []).append(t)
        for (attempt, stage), mine in sorted(stages.items()):
            _stage_span(run.tracer, parent, attempt, stage, mine)
    span.end()
    _send_under(source, None)


def _tasks(source: Any) -> list[dict[str, Any]]:
    """The run's tasks that a worker timed (a task sent before a lost worker may not be)."""
    # A run read to its end has its metrics within milliseconds; one stopped early (a LIMIT)
    # may never have them all: its spans are those that came.
    records = run_tasks(source, wait_s=METRICS_WAIT_S)
    return [t for t in records if t.get("worker_start_ns") is not None]


def _stage_span(
    tracer: Any, parent: Any, attempt: int, stage: int, tasks: list[dict[str, Any]]
) -> None:
    from opentelemetry import trace

    start = min(t["worker_start_ns"] for t in tasks)
    stop = max(t["worker_end_ns"] for t in tasks)
    span = tracer.start_span(STAGE, context=parent, start_time=start, attributes={
        "dfdpy.stage": stage, "dfdpy.attempt": attempt, "dfdpy.tasks": len(tasks),
        "dfdpy.workers": sorted({t["worker_url"] for t in tasks}),
    })  # fmt: skip
    under = trace.set_span_in_context(span)
    for t in sorted(tasks, key=lambda t: t["task"]):
        attributes = {
            "dfdpy.stage": stage, "dfdpy.task": t["task"], "dfdpy.attempt": attempt,
            "dfdpy.worker_url": t["worker_url"], "process.pid": t["worker_pid"],
            "host.name": t["worker_host"] or "", "dfdpy.traceparent": t["traceparent"],
        }  # fmt: skip
        for key in ("output_rows", "output_bytes", "spill_count", "spilled_bytes"):
            if t.get(key) is not None:
                attributes[f"dfdpy.{key}"] = t[key]
        task = tracer.start_span(
            TASK, context=under, start_time=t["worker_start_ns"], attributes=attributes
        )
        task.end(end_time=t["worker_end_ns"])
    span.end(end_time=stop)
