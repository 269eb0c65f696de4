"""``DistributedContext.metrics``: one record per task of a frame's latest run; and the
task records of a run as the dashboard, the event log and traces read them.

It knows runs, not frames (the context finds a frame's latest run), so that the monitor's
readers below the frames can use it."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import pyarrow as pa

#: The schema metadata key that marks a table as ``metrics_table``'s (shown as HTML in a
#: notebook, ``notebook.py``).
METRICS_MARK = b"datafusion_distributed_py"


class MetricsRecord(TypedDict):
    """One task of a query's latest run, as :meth:`DistributedContext.metrics` lists them.

    Attributes:
        query_id: the distributed query's id, as workers' event logs name it (one per run).
        stage: stage number (as in ``explain``).
        task: task number within the stage.
        tasks_in_stage: tasks of the stage.
        worker_url: the worker the task ran on.
        output_rows: rows the task produced (None if its worker reported no metrics).
        output_bytes: bytes the task produced (None likewise).
        elapsed_compute_ms: compute time of the task (None likewise).
        duration_ms: from sending the task to its end (None if its end was not seen).
        ran_on: ``"workers"``; ``"coordinator"`` for the one record of a query that could not
            be distributed and ran single-node (see ``DistributedConfig.fallback``).
        attempt: the run of the query the task belongs to: 1, or more when a lost worker
            made the query run again (the earlier runs' tasks are listed too).
        spill_count: spill files the task's operators wrote (memory limit reached).
        spilled_bytes: bytes they spilled.
        worker_pid, worker_host: the process that ran the task, and its host, when the run
            was traced (``tracing``: an OpenTelemetry SDK is configured); else None.
        worker_start_ns, worker_end_ns: the task's start and end on its worker's clock (Unix
            nanoseconds), when traced.
        traceparent: the W3C trace context the task ran under, when traced.
    """

    query_id: str | None
    stage: int
    task: int
    tasks_in_stage: int
    worker_url: str
    output_rows: int | None
    output_bytes: int | None
    elapsed_compute_ms: float | None
    duration_ms: float | None
    ran_on: Literal["workers", "coordinator"]
    attempt: int
    spill_count: int | None
    spilled_bytes: int | None
    worker_pid: int | None
    worker_host: str | None
    worker_start_ns: int | None
    worker_end_ns: int | None
    traceparent: str | None


def task_records(source: Any) -> list[MetricsRecord]:
    """The records of a frame's latest run (``dataframe.latest_run``): a distributed plan's
    tasks, or one coordinator record for a query that fell back (it has no tasks); raises
    ``ValueError`` for None, a frame no ``DistributedContext`` returned."""
    if source is None:
        raise ValueError("metrics() takes a DataFrame returned by this DistributedContext")
    if not hasattr(source, "task_metrics"):  # a fallback: it ran single-node
        return [
            MetricsRecord(
                query_id=None, stage=0, task=0, tasks_in_stage=1, worker_url="coordinator",
                output_rows=None, output_bytes=None, elapsed_compute_ms=None,
                duration_ms=None, ran_on="coordinator", attempt=1, spill_count=None,
                spilled_bytes=None, worker_pid=None, worker_host=None, worker_start_ns=None,
                worker_end_ns=None, traceparent=None,
            )
        ]  # fmt: skip
    records: list[MetricsRecord] = source.task_metrics()
    return records


def task_table(source: Any) -> pa.Table:
    """:func:`task_records` as a pyarrow Table, marked for the notebook's HTML."""
    table = pa.Table.from_pylist(task_records(source))
    return table.replace_schema_metadata({METRICS_MARK: b"metrics_table"})


def run_tasks(source: Any, wait_s: float = 5.0) -> list[dict[str, Any]]:
    """The task records of ``source``'s latest run (a distributed plan or a kept table) as
    plain dicts, for the dashboard, the event log and traces; ``[]`` for a source that has
    none or cannot say. Read only for a finished run: a failed one's workers may never
    report, and waiting for them would hold its reader ``wait_s`` seconds."""
    if source is None or not hasattr(source, "task_metrics"):
        return []
    try:
        return [dict(t) for t in source.task_metrics(wait_s=wait_s)]
    except Exception:  # a run that never reached a worker
        return []
