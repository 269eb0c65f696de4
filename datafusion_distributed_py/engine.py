"""What every job of one ``DistributedContext`` shares: its session, settings, cluster and
wire, and the frames' way back to it. State only: the jobs (``planning``, ``kept_data``,
``writes``) are functions over it, and ``context`` is the front door that owns it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from datafusion import SessionContext

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
        not_in_memory: tables found not to be in memory, by reference, with the schema
            they had then (so a file table is not inspected again for each query).
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
    not_in_memory: dict[str, pa.Schema] = field(default_factory=dict)

    def feed(self, sql: str) -> Feed:
        """The progress feed of one run of ``sql``, listed as this context's (and its
        cluster's)."""
        config = self.config
        log = writer_for(config.event_log, config.event_log_max_bytes) if config.event_log else None
        return Feed(sql, (self.owner, self.workers), self.progress, log)
