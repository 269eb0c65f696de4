"""The event log: what each query did, kept after the process that ran it has ended.

With ``DistributedConfig(event_log="dir")`` (or a URI pyarrow opens, ``s3://bucket/prefix``)
every run of a query appends one JSON object, one line, to a file of this process's own —
``events-<start>-<host>-<pid>-<n>.jsonl`` — so coordinators running at once never write to
one file; past ``event_log_max_bytes`` the next file is started. Records are written by a
background thread, after the run has returned, so a query does not wait for its record.

A record (``"v": 1``) holds the query's text, where it ran (``"workers"``, or
``"coordinator"`` and the fallback's reason), its state, times, rows and bytes, spill,
retries and the workers lost, the kind of its failure, its stages (tasks, workers, operators
by name) and its tasks (worker, rows, bytes, times, attempt). It never holds a table's values:
no rows, no operator's expressions (a subquery's result is written into the plan as a
literal), no error message of the query's own (a cast error quotes the value it failed on).
The format is documented in docs/observing.md; :func:`read_events` reads a log back.

Example:
    >>> import tempfile
    >>> from datafusion import SessionContext
    >>> from datafusion_distributed_py import DistributedConfig, DistributedContext
    >>> log = tempfile.mkdtemp()
    >>> dctx = DistributedContext(SessionContext(), config=DistributedConfig(event_log=log))
    >>> _ = dctx.sql("SELECT 1 AS x").collect()
    >>> flush()
    >>> [(e["sql"], e["state"], e["rows"]) for e in read_events(log)]
    [('SELECT 1 AS x', 'finished', 1)]
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from datafusion_distributed_py.errors import WorkerError
from datafusion_distributed_py.monitor import QueryRecord
from datafusion_distributed_py.task_metrics import run_tasks

_log = logging.getLogger("datafusion_distributed_py")

#: The format's version, in every record as ``"v"``.
VERSION = 1
PREFIX = "events-"
SUFFIX = ".jsonl"


@dataclass(frozen=True)
class Entry:
    """A finished run to write: its record, what ran it (held until written), its error."""

    record: QueryRecord
    source: Any
    error: BaseException | None


class EventLog:
    """This process's writer of one event log location (see the module).

    Args:
        location: a local directory (made if missing) or a URI pyarrow's filesystems open.
        max_bytes: a file is closed past this size and the next one started.
    """

    def __init__(self, location: str, max_bytes: int) -> None:
        self.location = location
        self.max_bytes = max_bytes
        try:
            self._fs, self._root = _filesystem(location)
            self._fs.create_dir(self._root, recursive=True)
        except Exception as e:  # pyarrow's own errors name the filesystem's complaint
            raise ValueError(f"event_log={location!r} cannot be written: {e}") from e
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        host = socket.gethostname().replace("-", "_")
        self._stem = f"{PREFIX}{stamp}-{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._file_no = 0
        self._written = 0
        # Object stores cannot append: the current file is written whole again each time.
        self._local = isinstance(self._fs, pafs.LocalFileSystem)
        self._content: list[bytes] = []
        self._queue: queue.Queue[Entry | dict[str, Any] | threading.Event] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="dfdpy-event-log", daemon=True)
        self._thread.start()

    def add_run(self, record: QueryRecord, source: Any, error: BaseException | None) -> None:
        """Queues ``record``'s finished run to be written (``monitor.RunLog``)."""
        self._queue.put(Entry(record, source, error))

    def add_record(self, record: dict[str, Any]) -> None:
        """Queues a record ready to be written (a worker's task, ``WorkerTaskLog``)."""
        self._queue.put(record)

    def flush(self, timeout: float = 30.0) -> None:
        """Waits until every record added so far is written."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                event = item if isinstance(item, dict) else _as_event(item)
                self._write(json.dumps(event, separators=(",", ":")).encode() + b"\n")
            except Exception as e:  # the log must never fail a query, nor stop logging
                _log.warning("could not write the event log at %s: %s", self.location, e)

    def _path(self) -> str:
        return f"{self._root}/{self._stem}-{self._file_no:04d}{SUFFIX}"

    def _write(self, line: bytes) -> None:
        if self._written and self._written + len(line) > self.max_bytes:
            self._file_no, self._written, self._content = self._file_no + 1, 0, []
        if self._local:
            with open(self._path(), "ab") as out:  # one write of a whole line
                out.write(line)
        else:
            self._content.append(line)
            with self._fs.open_output_stream(self._path()) as out:
                out.write(b"".join(self._content))
        self._written += len(line)


_WRITERS: dict[str, EventLog] = {}
_WRITERS_LOCK = threading.Lock()


def writer_for(location: str, max_bytes: int) -> EventLog:
    """This process's writer of ``location`` (one per location, shared by its contexts)."""
    with _WRITERS_LOCK:
        log = _WRITERS.get(location)
        if log is None:
            if not _WRITERS:  # records still queued when the interpreter exits are written
                atexit.register(flush)
            log = _WRITERS[location] = EventLog(location, max_bytes)
        log.max_bytes = max_bytes
        return log


def flush(timeout: float = 30.0) -> None:
    """Waits until every record this process has added to any event log is written."""
    with _WRITERS_LOCK:
        logs = list(_WRITERS.values())
    for log in logs:
        log.flush(timeout)


def read_events(location: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Every record of the event log at ``location`` (all processes' files), oldest first;
    only those whose ``"event"`` is ``kind`` if given (``"query"``: a coordinator's runs,
    ``"task"``: workers' tasks). A line that is not a whole record (a file being written) is
    skipped."""
    return LogReader(location).read(kind)


class LogReader:
    """Reads an event log as it grows: each file from where the last read stopped (its files
    only grow: appended here, or written again whole with more on an object store)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._fs, self._root = _filesystem(location)
        self._read: dict[str, int] = {}  # path -> bytes of whole lines read
        self._events: list[dict[str, Any]] = []

    def read(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every record so far, oldest first (``kind`` as :func:`read_events`'s)."""
        selector = pafs.FileSelector(self._root, allow_not_found=True)
        grown = False
        for info in self._fs.get_file_info(selector):
            name = info.base_name
            done = self._read.get(info.path, 0)
            if not (name.startswith(PREFIX) and name.endswith(SUFFIX)) or info.size <= done:
                continue
            with self._fs.open_input_file(info.path) as f:
                f.seek(done)
                data = f.read()
            whole = data.rfind(b"\n") + 1  # a line still being written is read next time
            self._events.extend(_records(data[:whole]))
            self._read[info.path] = done + whole
            grown = grown or whole > 0
        if grown:
            self._events.sort(key=lambda e: (e.get("started") or 0, e.get("id", "")))
        return [e for e in self._events if kind is None or e.get("event") == kind]


def _records(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("v") == VERSION:
            yield event


def _filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    fs, root = pafs.FileSystem.from_uri(location)
    return fs, root.rstrip("/")


def _as_event(entry: Entry) -> dict[str, Any]:
    """The JSON record of a finished run."""
    r = entry.record
    # A failed run's workers may never report its tasks: only a finished run's are read.
    source = entry.source if r.state == "finished" else None
    tasks = _tasks(source)
    operators = _operators(source)
    stages = []
    for number in sorted({t["stage"] for t in tasks} | set(r.stages) | set(operators)):
        mine = [t for t in tasks if t["stage"] == number and t["attempt"] == r.attempt]
        progress = r.stages.get(number)
        stages.append({
            "stage": number,
            "tasks": len(mine) or (progress.total if progress else None),
            "workers": sorted({t["worker_url"] for t in mine}),
            "rows": _total(mine, "output_rows") if mine else (progress.rows if progress else None),
            "bytes": _total(mine, "output_bytes"),
            "duration_ms": max((t["duration_ms"] or 0 for t in mine), default=None),
            "operators": operators.get(number, []),
        })  # fmt: skip
    return {
        "v": VERSION,
        "event": "query",
        "id": f"{os.getpid()}-{r.id}-{uuid.uuid4().hex[:8]}",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "sql": r.sql,
        "ran_on": r.ran_on,
        "fallback_reason": r.fallback_reason,
        "state": r.state,
        "started": r.started,
        "finished": r.finished,
        "duration_s": round(r.duration_s, 6),
        "rows": r.rows,
        "bytes": _total(tasks, "output_bytes", last_stage_of=tasks),
        "spill_count": _total(tasks, "spill_count"),
        "spilled_bytes": _total(tasks, "spilled_bytes"),
        "attempt": r.attempt,
        "retries": r.attempt - 1,
        "lost_workers": list(r.lost_workers),
        "failure": _failure(entry.error),
        "query_ids": sorted({t["query_id"] for t in tasks if t.get("query_id")}),
        "stages": stages,
        "tasks": tasks,
    }


def _failure(error: BaseException | None) -> dict[str, Any] | None:
    """What kind of failure ended a run: a worker's (its URL, kind and message, which name no
    table value), else the query's own error by type only (its message may quote a value)."""
    if error is None:
        return None
    if isinstance(error, WorkerError):
        message = str(error).split("\n", 1)[0]
        return {"kind": "worker", "type": type(error).__name__, "worker_url": error.worker_url,
                "worker_failure": getattr(error, "kind", None), "message": message}  # fmt: skip
    if isinstance(error, KeyboardInterrupt):
        return {"kind": "cancelled", "type": type(error).__name__}
    return {"kind": "query", "type": type(error).__name__}


_TASK_FIELDS = (
    "query_id", "stage", "task", "tasks_in_stage", "worker_url", "output_rows", "output_bytes",
    "elapsed_compute_ms", "duration_ms", "attempt", "spill_count", "spilled_bytes",
)  # fmt: skip


def _tasks(source: Any) -> list[dict[str, Any]]:
    return [{k: t.get(k) for k in _TASK_FIELDS} for t in run_tasks(source)]


def _operators(source: Any) -> dict[int, list[str]]:
    """Each stage's operators by name only: their lines hold expressions, and a subquery's
    result is planned into them as a literal."""
    if source is None or not hasattr(source, "operator_metrics"):
        return {}
    try:
        operators = source.operator_metrics()
    except Exception:
        return {}
    out: dict[int, list[str]] = {}
    for name, _line, stage, _metrics in operators:
        out.setdefault(stage, []).append(name)
    return out


def _total(
    tasks: list[dict[str, Any]], key: str, last_stage_of: list[dict[str, Any]] | None = None
) -> int | None:
    if last_stage_of is not None:  # a result's bytes: those of the stage the coordinator read
        if not last_stage_of:
            return None
        last = max(t["stage"] for t in last_stage_of)
        tasks = [t for t in last_stage_of if t["stage"] == last]
    values = [t[key] for t in tasks if t.get(key) is not None]
    return sum(values) if values else None


class WorkerTaskLog:
    """A worker's side of the event log (the worker CLI's ``--event-log``): one ``"task"``
    record per task the worker process ran — its query's id (as the coordinator's record
    lists it in ``query_ids``), stage, task, times, rows and bytes out and in, state — taken
    from the core every ``interval`` seconds by a background thread.

    Args:
        location: as :class:`EventLog`'s.
        max_bytes: as :class:`EventLog`'s.
        worker_url: the worker's URL, written in each record.
        interval: seconds between takes.
    """

    def __init__(
        self, location: str, max_bytes: int, worker_url: str, interval: float = 1.0
    ) -> None:
        from datafusion_distributed_py import _internal

        self._internal = _internal
        self._log = writer_for(location, max_bytes)
        self._common = {
            "v": VERSION, "event": "task", "host": socket.gethostname(), "pid": os.getpid(),
            "worker_url": worker_url,
        }  # fmt: skip
        self._interval = interval
        self._stopped = threading.Event()
        _internal.keep_task_events(True)
        self._thread = threading.Thread(target=self._run, name="dfdpy-task-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self.take()

    def take(self) -> int:
        """Queues the tasks ended since the last take; how many."""
        events = self._internal.take_task_events()
        for event in events:
            self._log.add_record({**self._common, **event})
        return len(events)

    def stop(self, timeout: float = 30.0) -> None:
        """Stops taking, after a last take, and waits until every record is written."""
        self._stopped.set()
        self._thread.join(timeout)
        self.take()
        self._internal.keep_task_events(False)
        self._log.flush(timeout)
