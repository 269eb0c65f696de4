"""``RayCluster``: workers inside Ray actors, one per Ray node (or ``workers_per_node``).

Needs the ``ray`` extra (``pip install 'datafusion-distributed-py[ray]'``); ``ray`` is imported
only when a ``RayCluster`` is made.

Example (not run here: it starts Ray)::

    import ray
    from datafusion_distributed_py import DistributedContext, RayCluster

    ray.init(address="auto")                      # or let RayCluster start a local Ray
    with RayCluster() as workers:                  # token-protected, like LocalCluster
        dctx = DistributedContext(ctx, workers=workers)
        dctx.sql("SELECT ...").show()
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from datafusion import SessionContext

from datafusion_distributed_py.config import memory_limit_bytes
from datafusion_distributed_py.errors import WorkerError
from datafusion_distributed_py.security import Security

log = logging.getLogger("datafusion_distributed_py.ray")

#: Seconds an actor may take to start its worker and report its URL.
START_TIMEOUT = 120.0
#: Seconds a live-set check waits for an actor's answer before leaving it out.
PING_TIMEOUT = 5.0


class _WorkerActor:
    """The body of a Ray actor: one worker serving on its node's IP address."""

    def __init__(
        self, setup: bytes | None, security: dict[str, str], options: dict[str, Any]
    ) -> None:
        import cloudpickle
        import ray

        from datafusion_distributed_py.worker import Worker

        node_ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.worker = Worker(
            host=node_ip,
            port=options.get("port", 0),
            setup=cloudpickle.loads(setup) if setup is not None else None,
            security=Security.from_env(security),
            # "auto" is shared between the workers of this node.
            memory_limit=memory_limit_bytes(
                options.get("memory_limit"), options.get("per_node", 1)
            ),
            spill_dir=options.get("spill_dir"),
            functions=options.get("functions", ()),
        ).start()

    def url(self) -> str:
        return self.worker.url

    def stop(self) -> None:
        self.worker.stop()


class RayCluster:
    """Workers in Ray actors; callable, so each query plans over the live set.

    Args:
        address: the Ray cluster to connect to if Ray is not initialised yet (``"auto"``, a
            ``ray://`` address, ...); ``None`` starts a local Ray. A Ray this object starts is
            shut down by :meth:`close`.
        workers_per_node: worker actors on each alive Ray node.
        setup: run in every worker on its ``SessionContext`` (a callable, cloudpickled).
        functions: packages whose functions every worker registers (import names; see
            :func:`~datafusion_distributed_py.register_functions`).
        security: ``True`` (default) makes a fresh token (:meth:`Security.temporary`) that the
            actors receive through Ray, never on a command line; a ``Security``; or ``False``.
        memory_limit, spill_dir: as for :class:`~datafusion_distributed_py.Worker` ("auto", the
            default, shares 80% of a node's memory between its ``workers_per_node``).
        num_cpus: CPUs each actor reserves from Ray (default 0: workers use their node's CPUs
            without taking Ray's task slots).
        init_kwargs: extra arguments for ``ray.init`` when this object starts Ray.

    Nodes that join later get workers at the next query (each call of the cluster looks);
    actors that died are left out of the next query's set.
    """

    def __init__(
        self,
        address: str | None = None,
        workers_per_node: int = 1,
        setup: Callable[[SessionContext], object] | None = None,
        security: bool | Security = True,
        memory_limit: int | str | None = "auto",
        spill_dir: str | None = None,
        num_cpus: float = 0,
        init_kwargs: dict[str, Any] | None = None,
        functions: Iterable[str] = (),
    ) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "RayCluster needs ray: pip install 'datafusion-distributed-py[ray]'"
            ) from e
        import cloudpickle

        if workers_per_node < 1:
            raise ValueError(f"workers_per_node must be at least 1, got {workers_per_node}")
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, **(init_kwargs or {}))
        if security is True:
            self.security: Security | None = Security.temporary()
        elif isinstance(security, Security):
            self.security = security
        else:
            self.security = None
        self._setup = cloudpickle.dumps(setup) if setup is not None else None
        self._options = {
            "memory_limit": memory_limit,
            "spill_dir": spill_dir,
            "per_node": workers_per_node,
            "functions": list(functions),
        }
        self._num_cpus = num_cpus
        self._per_node = workers_per_node
        self._actor_cls = ray.remote(_WorkerActor)
        #: node id -> [(actor, url)]
        self._actors: dict[str, list[tuple[Any, str]]] = {}
        self._grow()
        if not self._actors:
            raise WorkerError("RayCluster found no alive Ray node to start workers on")

    def _grow(self) -> None:
        """Start workers on alive nodes that have none."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        new: list[tuple[str, Any]] = []
        for node in self._ray.nodes():  # type: ignore[no-untyped-call]
            node_id = node["NodeID"]
            if not node.get("Alive") or node_id in self._actors:
                continue
            for _ in range(self._per_node):
                actor = self._actor_cls.options(
                    num_cpus=self._num_cpus,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(
                    self._setup, self.security.to_env() if self.security else {}, self._options
                )
                new.append((node_id, actor))
        if not new:
            return
        urls = self._ray.get([a.url.remote() for _, a in new], timeout=START_TIMEOUT)
        for (node_id, actor), url in zip(new, urls, strict=True):
            self._actors.setdefault(node_id, []).append((actor, url))
            log.info("worker %s started on Ray node %s", url, node_id)

    def _prune(self) -> None:
        """Forget actors that no longer answer (dead actor, dead node)."""
        pending = {
            a.url.remote(): (node, a, url) for node, s in self._actors.items() for a, url in s
        }
        ready, _ = self._ray.wait(list(pending), num_returns=len(pending), timeout=PING_TIMEOUT)
        alive = set()
        for ref in ready:
            try:
                self._ray.get(ref)
                alive.add(ref)
            except Exception:  # ActorDiedError & co: the actor is gone
                pass
        kept: dict[str, list[tuple[Any, str]]] = {}
        for ref, (node, actor, url) in pending.items():
            if ref in alive:
                kept.setdefault(node, []).append((actor, url))
            else:
                log.warning("worker %s (Ray node %s) is gone; leaving it out", url, node)
        self._actors = kept

    @property
    def urls(self) -> list[str]:
        """The workers' URLs as of the last check (see :meth:`__call__`)."""
        return [url for actors in self._actors.values() for _, url in actors]

    def __call__(self) -> list[str]:
        """The live worker URLs: dead actors left out, new nodes given workers."""
        self._prune()
        self._grow()
        return self.urls

    def close(self) -> None:
        """Stop every worker actor, and Ray itself if this object started it."""
        for actors in self._actors.values():
            for actor, _ in actors:
                with contextlib.suppress(Exception):  # already gone
                    self._ray.kill(actor)
        self._actors = {}
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RayCluster(urls={self.urls!r})"


__all__ = ["RayCluster"]
