"""Which workers a ``DistributedContext`` plans for, and how it reaches them: what
``workers=`` accepts, the embedded cluster's size, the security to use, and the core's
coordinator made from them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from datafusion import SessionContext

from datafusion_distributed_py import _internal
from datafusion_distributed_py.resolvers import ClusterUrls
from datafusion_distributed_py.security import Security
from datafusion_distributed_py.session_runtime import runtime_budget


@runtime_checkable
class HasUrl(Protocol):
    """A worker that stands for its URL, such as a started :class:`Worker`."""

    @property
    def url(self) -> str:
        """``http://host:port`` of the worker."""
        ...


@runtime_checkable
class HasUrls(Protocol):
    """A set of workers that stands for their URLs, such as a :class:`LocalCluster`."""

    @property
    def urls(self) -> Sequence[str]:
        """``http://host:port`` of each worker."""
        ...


#: What ``workers=`` accepts: None (embedded cluster), URL strings (or started ``Worker``s),
#: an object with ``.urls`` (such as ``LocalCluster``), or a callable returning URL strings at
#: each query's planning.
Workers = Sequence[str | HasUrl] | HasUrls | Callable[[], Sequence[str]] | None


def default_worker_count() -> int:
    """Workers of the embedded cluster: one per CPU, at least 2."""
    return max(2, os.cpu_count() or 2)


def security_for(workers: Workers, security: Security | None) -> Security | None:
    """The security to reach ``workers`` with: the one given, else the cluster's own (a
    ``LocalCluster`` makes a token), else the ``DFDPY_*`` environment variables."""
    if security is not None:
        if not isinstance(security, Security):
            raise TypeError(f"security must be a Security, got {type(security).__name__}")
        return security
    # A LocalCluster (or a started Worker, or a list of them) carries its own.
    members = workers if isinstance(workers, (list, tuple)) else [workers]
    owned = {id(s): s for s in (getattr(m, "security", None) for m in members)}
    if len(owned) == 1:
        (own,) = owned.values()
        if isinstance(own, Security):
            return own
    return Security.from_env()


def coordinator_for(
    workers: Workers, security: Security | None, ctx: SessionContext
) -> _internal.Coordinator:
    """The core's coordinator for ``workers`` (see :data:`Workers`), reaching them with
    ``security``; the embedded cluster bounded as ``ctx``'s own queries are."""
    core = security._to_core() if security is not None else None
    if workers is None:
        # The embedded cluster's tasks run in this process: bounded as ctx's own queries are.
        # Under a bounded pool, one worker: each stage's task runs single-node's partitions,
        # so the pool holds as many operators at once as single-node's (with a worker per
        # CPU it held that many times more, and ran out where single-node fits).
        budget = runtime_budget(ctx)
        return _internal.Coordinator.embedded(
            default_worker_count() if budget.memory_limit is None else 1,
            memory_limit=budget.memory_limit,
            spill_dirs=budget.spill_dirs,
            max_spill_bytes=budget.max_spill_bytes,
        )
    if isinstance(workers, str):
        raise TypeError("workers must be a list of URLs, not a single string; wrap it in [...]")
    if callable(workers):
        return _internal.Coordinator.remote(workers, core)
    if isinstance(workers, HasUrls):
        # Asked at each planning: a LocalCluster replaces workers that die.
        return _internal.Coordinator.remote(ClusterUrls(workers), core)
    if isinstance(workers, (list, tuple)):
        if not workers:
            raise ValueError("workers=[] names no workers; pass None for the embedded cluster")
        urls: list[str] = []
        for worker in workers:
            url = worker.url if isinstance(worker, HasUrl) else worker  # a started Worker
            if not isinstance(url, str):
                raise TypeError(f"worker URLs must be strings, got {type(url).__name__}")
            urls.append(url)
        return _internal.Coordinator.remote(urls, core)
    raise TypeError(
        "workers must be None, a list of URLs, a LocalCluster or a callable returning URLs; "
        f"got {type(workers).__name__}"
    )
