"""What this process's distributed queries are doing: running and recent queries with their
stages' progress, fed by progress events, for :meth:`DistributedContext.status` and the
dashboard.

Each distributed DataFrame carries a :class:`Feed`: the progress callback its plan reports
to. Each time the frame runs (``collect``, ``show``, ``to_pandas``...), a
:class:`QueryRecord` is opened in :data:`MONITOR` and the feed's events go to it (and to the
user's own callback or bars), until the run returns or raises.

Example:
    >>> from datafusion import SessionContext
    >>> from datafusion_distributed_py import DistributedContext
    >>> dctx = DistributedContext(SessionContext(), progress=False)
    >>> dctx.sql("SELECT 1 AS x").collect() and None
    >>> q = dctx.status().queries[0]
    >>> q.sql, q.state, q.rows
    ('SELECT 1 AS x', 'finished', 1)
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from datafusion_distributed_py import _internal, tracing
from datafusion_distributed_py.progress import (
    ProgressCallback,
    ProgressEvent,
    RustReport,
    to_rust,
)

#: Finished queries kept per process (running ones are always kept).
KEEP = 50


@dataclass
class StageProgress:
    """One stage of a running or finished query."""

    stage: int
    done: int
    total: int
    rows: int | None = None
    eta_s: float | None = None


class RunLog(Protocol):
    """Where a finished run is recorded beyond this process (``event_log.EventLog``)."""

    def add_run(self, record: QueryRecord, source: Any, error: BaseException | None) -> None:
        """Records ``record``'s run (``source``: what ran it, None once gone)."""
        ...


@dataclass
class QueryRecord:
    """One run of a distributed query (or of a query that fell back to single-node).

    Attributes:
        id: a number unique in this process.
        sql: the SQL text, or a one-line description of a DataFrame built in Python.
        ran_on: ``"workers"``, or ``"coordinator"`` for a query that fell back.
        state: ``"running"``, ``"finished"`` or ``"failed"``.
        started, finished: wall-clock times (``time.time()``).
        rows: rows of the result, when known.
        error: the exception's message, for a failed run.
        attempt: the run of the query (2... after a lost worker made it run again).
        lost_workers: workers lost during the run, each costing a retry.
        stages: progress per stage number.
    """

    id: int
    sql: str
    ran_on: str
    #: Tags (:func:`owner_tag`) of the objects whose dashboards show it: its context, and its
    #: workers.
    owners: frozenset[int]
    started: float = field(default_factory=time.time)
    finished: float | None = None
    state: str = "running"
    rows: int | None = None
    error: str | None = None
    source: Any = field(default=None, repr=False)
    #: Why it ran single-node, for a query that fell back.
    fallback_reason: str | None = None
    #: Where the finished run is recorded beyond this process (the event log), if anywhere.
    log: RunLog | None = field(default=None, repr=False)
    #: The run's OpenTelemetry span, when the process traces (``tracing``).
    trace: tracing.QueryTrace | None = field(default=None, repr=False)
    _plan_text: str | None = field(default=None, repr=False)
    #: The core's queue of this run's events not read yet, while the run is this record's
    #: (see :meth:`Feed.for_core`); read whenever the record is.
    pending: _internal.ProgressQueue | None = field(default=None, repr=False)
    _attempt: int = field(default=1, repr=False)
    _lost_workers: list[str] = field(default_factory=list, repr=False)
    _stages: dict[int, StageProgress] = field(default_factory=dict, repr=False)
    _reading: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def attempt(self) -> int:
        self.catch_up()
        return self._attempt

    @property
    def lost_workers(self) -> list[str]:
        self.catch_up()
        return self._lost_workers

    @property
    def stages(self) -> dict[int, StageProgress]:
        self.catch_up()
        return self._stages

    def catch_up(self) -> None:
        """Applies the events the core holds for this run, oldest first (one reader at a
        time, so that a stage never goes back to an older event)."""
        if self.pending is None:
            return
        with self._reading:
            for event in self.pending.drain():
                self.on_event(ProgressEvent(*event))

    @property
    def duration_s(self) -> float:
        """Seconds the run took (so far, while it runs)."""
        return (self.finished or time.time()) - self.started

    def on_event(self, event: ProgressEvent) -> None:
        if event.kind == "retry":
            self._lost_workers.append(event.worker_url)
            self._attempt = event.attempt + 1
            self._stages = {}
            return
        if event.attempt < self._attempt:
            return  # a late word from a run that was given up
        self._stages[event.stage] = StageProgress(
            event.stage, event.done, event.total, event.rows, event.eta_s
        )

    def plan(self) -> str | None:
        """The distributed plan of a finished run, with its metrics (None otherwise, or once
        the frame that ran it is gone: a record never keeps a plan, nor the data in it)."""
        source = self.source() if self.source is not None else None
        if self._plan_text is None and self.state != "running" and source is not None:
            try:
                self._plan_text = source.display(format="text", analyze=True)
            except Exception as e:  # a run that failed before any task: no metrics
                self._plan_text = f"(no plan with metrics: {e})"
        return self._plan_text

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (what the dashboard shows)."""
        return {
            "id": self.id, "sql": self.sql, "ran_on": self.ran_on, "state": self.state,
            "started": self.started, "duration_s": round(self.duration_s, 3), "rows": self.rows,
            "error": self.error, "attempt": self.attempt, "lost_workers": list(self.lost_workers),
            "stages": [vars(s).copy() for _, s in sorted(self.stages.items())],
        }  # fmt: skip


class Monitor:
    """The running and recent queries of this process."""

    def __init__(self, keep: int = KEEP) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._running: dict[int, QueryRecord] = {}
        self._recent: deque[QueryRecord] = deque(maxlen=keep)

    def begin(
        self,
        sql: str,
        ran_on: str,
        owners: tuple[object, ...],
        source: Any = None,
        log: RunLog | None = None,
        fallback_reason: str | None = None,
    ) -> QueryRecord:
        tags = frozenset(t for t in map(owner_tag, owners) if t is not None)
        # A weak reference: the record outlives the frame, and a plan can hold rows.
        ref = weakref.ref(source) if source is not None else None
        record = QueryRecord(
            next(self._ids), sql, ran_on, tags, source=ref, fallback_reason=fallback_reason,
            log=log,
        )  # fmt: skip
        record.trace = tracing.begin(sql, ran_on, source)
        with self._lock:
            self._running[record.id] = record
        return record

    def end(self, record: QueryRecord, rows: int | None, error: BaseException | None) -> None:
        record.catch_up()
        record.finished = time.time()
        if error is not None:
            record.state, record.error = "failed", str(error).split("\n", 1)[0]
        else:
            record.state = "finished"
            record.rows = rows if rows is not None else _top_stage_rows(record)
        with self._lock:
            self._running.pop(record.id, None)
            self._recent.append(record)
        source = record.source() if record.source else None
        if record.trace is not None:
            tracing.end(record.trace, source, record.rows, error, record.fallback_reason)
        if record.log is not None:
            record.log.add_run(record, source, error)

    def queries(self, owner: object | None = None) -> list[QueryRecord]:
        """Running queries first, then recent ones, newest first; ``owner``'s only if given."""
        with self._lock:
            records = [*self._running.values(), *self._recent]
        records.sort(key=lambda r: (r.state != "running", -r.id))
        tag = owner_tag(owner) if owner is not None else None
        return [r for r in records if owner is None or tag in r.owners]

    def find(self, query_id: int) -> QueryRecord | None:
        return next((r for r in self.queries() if r.id == query_id), None)


_TAGS = itertools.count(1)


def owner_tag(owner: object) -> int | None:
    """A number naming ``owner`` (a context, a cluster) for as long as the process runs; None
    for an object without attributes (a list of URLs), which has no dashboard. Not ``id()``:
    a freed object's id is given to the next, and a new cluster would show an old one's
    queries."""
    state: dict[str, Any] | None = getattr(owner, "__dict__", None)
    if state is None:
        return None
    tag: int | None = state.get("_dfdpy_monitor_tag")
    if tag is None:
        tag = state.setdefault("_dfdpy_monitor_tag", next(_TAGS))
    return tag


def _top_stage_rows(record: QueryRecord) -> int | None:
    """Rows of the last stage (the one the coordinator reads), when a run's size is unknown."""
    if not record.stages:
        return None
    return record.stages[max(record.stages)].rows


#: The process's monitor.
MONITOR = Monitor()


class Feed:
    """The progress callback of one distributed plan: events go to the user's callback (or
    bars) and to the record of the run in progress."""

    def __init__(
        self,
        sql: str,
        owners: tuple[object, ...],
        user: ProgressCallback | None,
        log: RunLog | None = None,
    ) -> None:
        self.sql = sql
        self.owners = owners
        self.user = user
        #: Where its runs are recorded beyond this process (the event log), if anywhere.
        self.log = log
        self.current: QueryRecord | None = None
        #: Where the core holds the events when no one watches them live (no callback).
        self.queue = _internal.ProgressQueue() if user is None else None

    def __call__(self, event: ProgressEvent) -> None:
        record = self.current
        if record is not None:
            record.on_event(event)
        if self.user is not None:
            self.user(event)

    def for_core(self) -> RustReport | _internal.ProgressQueue | None:
        """What the core reports progress to: this feed, called with each event, when the
        user watches them live; else its queue, read when the run's record is (the run's
        tasks then never wait for Python)."""
        return self.queue if self.queue is not None else to_rust(self)

    def attach(self, record: QueryRecord) -> None:
        """The events from now on are ``record``'s (a new run); earlier ones, which no
        record took, are dropped."""
        if self.queue is not None:
            self.queue.drain()
            record.pending = self.queue
        self.current = record

    def detach(self) -> None:
        """The run is over: its record reads what it has not yet, and no more."""
        record, self.current = self.current, None
        if record is not None and record.pending is not None:
            record.catch_up()
            record.pending = None
