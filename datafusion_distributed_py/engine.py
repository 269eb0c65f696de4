"""What every job of one ``DistributedContext`` shares: its session, settings, cluster and
wire, and the frames' way back to it. State only: the jobs (``planning``, ``kept_data``,
``writes``) are functions over it, and ``context`` is the front door that owns it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from datafusion import ExecutionPlan, SessionContext

from datafusion_distributed_py import _internal
from datafusion_distributed_py.cluster_wiring import Workers
from datafusion_distributed_py.config import DistributedConfig
from datafusion_distributed_py.event_log import writer_for
from datafusion_distributed_py.monitor import Feed
from datafusion_distributed_py.progress import ProgressCallback
from datafusion_distributed_py.security import Security
from datafusion_distributed_py.wire import Wire

if TYPE_CHECKING:
    from datafusion_distributed_py.dataframe import Distributor


@dataclass
class Engine:
    """One context's shared state.

    Attributes:
        owner: the object whose ``status()`` and dashboard list its queries (the context).
        ctx: the user's session: catalog, functions, settings; it plans single-node.
        config: the current planner settings (``SET distributed.*`` replaces them).
        workers: what ``workers=`` was given (URLs, a cluster, a resolver, or None).
        progress: where progress events go (bars, a callback, or nowhere).
        security: the token / TLS the workers are reached with.
        coordinator: the core's coordinator for those workers.
        wire: the twin session plans are serialised through.
        frames: what the frames this context returns distribute their steps with.
        not_to_keep: tables found to need no keeping on the workers, by reference, with the
            schema they had then and the ``keep_tables_above`` they were found under (None:
            not in memory, under any limit), so that a file table or a small in-memory one
            is not planned again for each query that reads it.
    """

    owner: object
    ctx: SessionContext
    config: DistributedConfig
    workers: Workers
    progress: ProgressCallback | None
    security: Security | None
    coordinator: _internal.Coordinator
    wire: Wire
    frames: Distributor | None = None
    not_to_keep: dict[str, tuple[pa.Schema, int | None]] = field(default_factory=dict)

    def forget_small_tables(self, memory_scans: list[ExecutionPlan]) -> None:
        """Forgets the in-memory tables found small (``not_to_keep``) when one of a query's
        in-memory scans (``memory_scans``) is not: a table was registered again with more
        rows under a name and schema remembered small. That query carries its rows in its
        plan, as a frame of unregistered rows does; the next one keeps the table."""
        limit = self.config.keep_tables_above
        if not any(2 * len(scan.to_bytes()) > limit for scan in memory_scans):
            return
        for ref, (_, found_under) in list(self.not_to_keep.items()):
            if found_under is not None:
                del self.not_to_keep[ref]

    def feed(self, sql: str) -> Feed:
        """The progress feed of one run of ``sql``, listed as this context's (and its
        cluster's)."""
        config = self.config
        log = writer_for(config.event_log, config.event_log_max_bytes) if config.event_log else None
        return Feed(sql, (self.owner, self.workers), self.progress, log)
