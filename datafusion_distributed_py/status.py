"""``ClusterStatus``: workers and queries at one moment, for a notebook or a terminal (what
the dashboard shows, without the page)."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
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
class KeptTableState:
    """A result kept on the workers (``CREATE TABLE AS``, ``cache()``, a big in-memory table).

    Attributes:
        name: the table's name (``cache of <query>`` for a cached frame).
        shares: where its rows are, one dict per holder: ``holder`` (a worker URL), ``parts``,
            ``rows``, ``bytes`` and ``on_disk_bytes`` (spilled to the worker's disk).
    """

    name: str
    shares: list[dict[str, Any]]

    @property
    def rows(self) -> int:
        return sum(int(s["rows"]) for s in self.shares)

    @property
    def bytes(self) -> int:
        return sum(int(s["bytes"]) for s in self.shares)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self.rows, "bytes": self.bytes,
                "shares": [dict(s) for s in self.shares]}  # fmt: skip


@dataclass(frozen=True)
class ClusterStatus:
    """Workers and queries at one moment: ``dctx.status()``. In Jupyter it shows as tables.

    Attributes:
        workers: each worker's state.
        queries: running queries first, then recent ones (newest first).
        taken_at: when (``time.time()``).
        kept: the results kept on the workers, with their rows and bytes per worker.

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
    kept: list[KeptTableState] = field(default_factory=list)

    @classmethod
    def take(
        cls,
        workers: list[dict[str, Any]],
        queries: list[QueryRecord],
        kept: list[tuple[str, str, list[dict[str, Any]]]] = (),  # type: ignore[assignment]
    ) -> ClusterStatus:
        tables = [KeptTableState(name, shares) for _, name, shares in kept]
        return cls([WorkerState.from_core(w) for w in workers], queries, time.time(), tables)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (what the dashboard's page fetches)."""
        return {
            "taken_at": self.taken_at,
            "workers": [w.to_dict() for w in self.workers],
            "queries": [q.to_dict() for q in self.queries],
            "kept": [k.to_dict() for k in self.kept],
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
        for k in self.kept:
            lines.append(f"  kept {k.name!r}: {k.rows:,} rows, {k.bytes / 2**20:.1f} MiB")
            for s in k.shares:
                lines.append(
                    f"    {s['holder']}  {s['rows']:,} rows  {s['bytes'] / 2**20:.1f} MiB"
                    f" ({s['on_disk_bytes'] / 2**20:.1f} MiB on disk)"
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
        kept = "".join(
            f"<tr><td>{e(k.name)}</td><td>{e(s['holder'])}</td><td>{s['rows']:,}</td>"
            f"<td>{s['bytes'] / 2**20:.1f} MiB</td>"
            f"<td>{s['on_disk_bytes'] / 2**20:.1f} MiB</td></tr>"
            for k in self.kept
            for s in k.shares
        )
        kept_table = (
            "<table><tr><th>kept table</th><th>worker</th><th>rows</th><th>memory</th>"
            f"<th>on disk</th></tr>{kept}</table>"
            if kept
            else ""
        )
        return (
            "<table><tr><th>worker</th><th>state</th><th>CPU</th><th>memory</th>"
            f"<th>running tasks</th></tr>{workers}</table>"
            "<table><tr><th>#</th><th>state</th><th>query</th><th>duration</th><th>rows</th>"
            f"<th>stages (tasks done)</th><th>failure / lost workers</th></tr>{queries}</table>"
            f"{kept_table}"
        )


def _short(sql: str, width: int = 80) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _stages(q: QueryRecord) -> str:
    return " ".join(f"S{s.stage}:{s.done}/{s.total}" for _, s in sorted(q.stages.items()))
