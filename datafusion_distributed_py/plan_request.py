"""What the Rust core plans a query from: one typed object, the same for every entry point
(``Coordinator.distribute``, ``keep``, ``insert``), read attribute by attribute by the core
(``src/python/request.rs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from datafusion import SessionContext

from datafusion_distributed_py.progress import RustReport

if TYPE_CHECKING:
    from datafusion_distributed_py._internal import Handshake, ProgressQueue

#: A store as the core rebuilds it: ``(url, kind, options)``.
StoreSpec = tuple[str, str, dict[str, str]]


@dataclass
class PlanRequest:
    """A query for the core to plan and run.

    Example:
        >>> from datafusion import SessionContext
        >>> ctx = SessionContext()
        >>> request = PlanRequest(b"", ctx, ctx, {"distributed.min_workers": "1"})
        >>> request.max_retries, request.writes
        (1, False)
    """

    #: The physical plan as datafusion-python serialised it.
    plan_bytes: bytes
    #: The session's physical extension codec (its capsule, or the session itself).
    codec: object
    #: The session the plan was serialised through: its settings and functions.
    session: SessionContext | None
    #: Entries set over the session's settings: ``distributed.*`` and planning overrides.
    options: dict[str, str]
    #: The session's object stores, for the workers.
    stores: list[StoreSpec] = field(default_factory=list)
    #: Called by the core with each progress event (``progress.to_rust``), or a queue that
    #: holds them until the run's record is read (``monitor.Feed.for_core``).
    progress: RustReport | ProgressQueue | None = None
    min_workers: int = 1
    #: Runs after the first when a worker is lost.
    max_retries: int = 1
    #: Seconds without a batch before a stream is declared stalled (None: never).
    stall_timeout: float | None = None
    #: Where tasks spool their output (task-level recovery), or None.
    spool_dir: str | None = None
    #: The plan's logical table scans: a CSV or NDJSON table's compression.
    table_scans: list[bytes] = field(default_factory=list)
    #: Its window expressions with a ``FILTER``.
    window_filters: list[bytes] = field(default_factory=list)
    #: The query writes: it is never run twice.
    writes: bool = False
    #: Seconds between asks for running tasks' rows (0: never).
    live_interval: float = 0.5
    #: The workers' handshake, started before the query is planned (``handshake_ahead``).
    handshake: Handshake | None = None
