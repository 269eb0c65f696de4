"""``ClusterStatus``: workers and queries at one moment, for a notebook or a terminal (what
the dashboard shows, without the page)."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from typing import Any

from datafusion_distributed_py.monitor import QueryRecord


@dataclass(frozen=True)
class WorkerState:
    """One worker as it answered (or not).

    Attributes:
        url: the worker's URL.
        up: it answered.
        error: why it did not answer.
        cpu_percent: its process's CPU use, in percent of the machine.
        rss_bytes: its process's resident memory.
        running_tasks: tasks it runs now (of every query).
    """

    url: str
    up: bool
    error: str | None
    cpu_percent: float
    rss_bytes: int
    running_tasks: int

    @classmethod
    def from_core(cls, d: dict[str, Any]) -> WorkerState:
        return cls(
            d["url"], d["error"] is None, d["error"], float(d["cpu_percent"]),
            int(d["rss_bytes"]), int(d["running_tasks"]),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class ClusterStatus:
    """Workers and queries at one moment: ``dctx.status()``. In Jupyter it shows as tables.

    Attributes:
        workers: each worker's state.
        queries: running queries first, then recent ones (newest first).
        taken_at: when (``time.time()``).

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext
        >>> dctx = DistributedContext(SessionContext(), progress=False)
        >>> status = dctx.status()
        >>> all(w.up for w in status.workers), "<table" in status._repr_html_()
        (True, True)
    """

    workers: list[WorkerState]
    queries: list[QueryRecord]
    taken_at: float

    @classmethod
    def take(cls, workers: list[dict[str, Any]], queries: list[QueryRecord]) -> ClusterStatus:
        return cls([WorkerState.from_core(w) for w in workers], queries, time.time())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (what the dashboard's page fetches)."""
        return {
            "taken_at": self.taken_at,
            "workers": [w.to_dict() for w in self.workers],
            "queries": [q.to_dict() for q in self.queries],
        }

    def __repr__(self) -> str:
        up = sum(w.up for w in self.workers)
        lines = [f"ClusterStatus: {up} of {len(self.workers)} workers up"]
        for w in self.workers:
            state = "up" if w.up else f"DOWN ({w.error})"
            lines.append(
                f"  {w.url}  {state}  cpu {w.cpu_percent:.0f}%  "
                f"mem {w.rss_bytes / 2**20:.0f} MiB  tasks {w.running_tasks}"
            )
        for q in self.queries[:10]:
            rows = "" if q.rows is None else f"  {q.rows:,} rows"
            lines.append(f"  #{q.id} {q.state:<8} {q.duration_s:7.2f}s{rows}  {_short(q.sql)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        workers = "".join(
            f"<tr><td>{e(w.url)}</td><td>{'up' if w.up else 'down: ' + e(w.error or '')}</td>"
            f"<td>{w.cpu_percent:.0f}%</td><td>{w.rss_bytes / 2**20:.0f} MiB</td>"
            f"<td>{w.running_tasks}</td></tr>"
            for w in self.workers
        )
        queries = "".join(
            f"<tr><td>{q.id}</td><td>{e(q.state)}</td><td><code>{e(_short(q.sql))}</code></td>"
            f"<td>{q.duration_s:.2f} s</td><td>{'' if q.rows is None else f'{q.rows:,}'}</td>"
            f"<td>{e(_stages(q))}</td><td>{e(q.error or ', '.join(q.lost_workers))}</td></tr>"
            for q in self.queries
        )
        return (
            "<table><tr><th>worker</th><th>state</th><th>CPU</th><th>memory</th>"
            f"<th>running tasks</th></tr>{workers}</table>"
            "<table><tr><th>#</th><th>state</th><th>query</th><th>duration</th><th>rows</th>"
            f"<th>stages (tasks done)</th><th>failure / lost workers</th></tr>{queries}</table>"
        )


def _short(sql: str, width: int = 80) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _stages(q: QueryRecord) -> str:
    return " ".join(f"S{s.stage}:{s.done}/{s.total}" for _, s in sorted(q.stages.items()))
