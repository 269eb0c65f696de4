"""Worker resolvers: callables that return the current worker URLs each time a query is
planned (pass one as ``DistributedContext(ctx, workers=...)``).

Example:
    >>> workers = dns_workers("localhost", 50051)
    >>> workers()
    ['http://127.0.0.1:50051']
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Protocol


def dns_workers(name: str, port: int, scheme: str = "http") -> Callable[[], list[str]]:
    """Workers behind a DNS name, such as a Kubernetes headless Service
    (``"dfdpy-workers.dfdpy.svc.cluster.local"``): its A/AAAA records, looked up afresh at each
    planning, so pods that come and go are seen. ``scheme`` is ``"https"`` for TLS workers.

    Raises (when called) ``LookupError`` naming the name if it resolves to nothing.
    """
    if scheme not in ("http", "https"):
        raise ValueError(f"scheme must be 'http' or 'https', got {scheme!r}")
    if not 0 < int(port) < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")

    def resolve() -> list[str]:
        try:
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise LookupError(f"worker DNS name {name!r} does not resolve: {e}") from e
        addresses = sorted({str(info[4][0]) for info in infos}, key=_address_key)
        if not addresses:
            raise LookupError(f"worker DNS name {name!r} has no addresses")
        return [f"{scheme}://{_host(a)}:{port}" for a in addresses]

    resolve.__name__ = f"dns_workers({name!r}, {port})"
    return resolve


def _address_key(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(address)
    return (ip.version, int(ip))


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


__all__ = ["dns_workers"]


class _Urls(Protocol):
    @property
    def urls(self) -> Sequence[str]: ...


class ClusterUrls:
    """A cluster's URLs (anything with ``urls``: ``LocalCluster``, ``RayCluster``) as a
    resolver, asked at each planning; with the cluster's ``starting()`` (a ``LocalCluster``
    restarting a dead worker), which a run again after a lost worker waits for.

    Example:
        >>> class Two:
        ...     urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
        >>> resolver = ClusterUrls(Two())
        >>> resolver(), resolver.starting()
        (['http://127.0.0.1:1', 'http://127.0.0.1:2'], 0)
    """

    def __init__(self, cluster: _Urls) -> None:
        self._cluster = cluster

    def __call__(self) -> list[str]:
        return list(self._cluster.urls)

    def starting(self) -> int:
        starting = getattr(self._cluster, "starting", None)
        return int(starting()) if callable(starting) else 0
