"""Prometheus metrics: this process's tasks, rows, bytes, memory and kept data at
``/metrics``, in Prometheus' text format, for a monitoring system to scrape.

A worker serves them with ``--metrics-port`` (``LocalCluster(metrics=True)`` asks each of its
workers; ``.metrics_urls`` lists them); the coordinator's process with :func:`serve_metrics`
(there the embedded cluster's tasks are counted). Nothing listens unless asked; by default on
127.0.0.1 only, and another interface needs a token (``Authorization: Bearer``), as a
worker's own port does. Built on ``prometheus_client`` (``pip install
'datafusion-distributed-py[metrics]'``).

Example:
    >>> import urllib.request
    >>> with serve_metrics() as endpoint:
    ...     text = urllib.request.urlopen(endpoint.url).read().decode()
    >>> "dfdpy_tasks_started_total" in text
    True
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from datafusion_distributed_py import _internal
from datafusion_distributed_py._build import DATAFUSION_MAJOR
from datafusion_distributed_py.local_server import LocalServer

#: Counters (they only grow): meter name -> (metric name, help).
COUNTERS = {
    "tasks_started": ("dfdpy_tasks_started", "Tasks this process started."),
    "tasks_finished": ("dfdpy_tasks_finished", "Tasks that ended without an error."),
    "tasks_failed": ("dfdpy_tasks_failed", "Tasks that ended with an error."),
    "rows_out": ("dfdpy_rows_out", "Rows the tasks produced."),
    "bytes_out": ("dfdpy_bytes_out", "Bytes of the batches the tasks produced."),
    "rows_in": ("dfdpy_rows_in", "Rows the tasks' leaves read (files, other tasks, kept data)."),
    "bytes_in": ("dfdpy_bytes_in", "Bytes the tasks' file scans read."),
    "requests_refused": ("dfdpy_grpc_requests_refused", "gRPC requests refused (wrong token)."),
    "grpc_errors": (
        "dfdpy_grpc_errors",
        "gRPC calls answered with an error status, at once or inside a stream.",
    ),
}
#: Gauges: meter name -> (metric name, help).
GAUGES = {
    "tasks_running": ("dfdpy_tasks_running", "Tasks running now."),
    "memory_pool_used_bytes": ("dfdpy_memory_pool_used_bytes", "Bytes the memory pool lends."),
    "memory_pool_limit_bytes": (
        "dfdpy_memory_pool_limit_bytes",
        "The memory pool's size (0: unbounded).",
    ),
    "spill_bytes": ("dfdpy_spill_bytes", "Bytes of spill files on disk now."),
    "kept_parts": ("dfdpy_kept_parts", "Parts of kept tables held here."),
    "kept_memory_bytes": ("dfdpy_kept_memory_bytes", "Bytes of kept tables held in memory."),
    "kept_disk_bytes": ("dfdpy_kept_disk_bytes", "Bytes of kept tables held on disk."),
}


class _Collector:
    """Reads the process's meters at each scrape."""

    def __init__(self, role: str) -> None:
        self.role = role

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        meters = _internal.process_meters()
        for key, (name, text) in COUNTERS.items():
            yield CounterMetricFamily(name, text, value=meters[key])
        for key, (name, text) in GAUGES.items():
            yield GaugeMetricFamily(name, text, value=meters[key])
        yield InfoMetricFamily(
            "dfdpy_build",
            "This build of datafusion-distributed-py.",
            value={
                "version": _internal.__version__,
                "datafusion": str(DATAFUSION_MAJOR),
                "role": self.role,
            },
        )


class MetricsEndpoint(LocalServer):
    """A running ``/metrics`` server (see :func:`serve_metrics`)."""

    def __init__(self, host: str, port: int, token: str | None, role: str) -> None:
        try:
            from prometheus_client import CollectorRegistry, generate_latest
        except ImportError as e:
            raise ImportError(
                "serving /metrics needs prometheus_client: "
                "pip install 'datafusion-distributed-py[metrics]'"
            ) from e
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(role))

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.split("?", 1)[0] != "/metrics":
                    self._send(404, b"not found: scrape /metrics", "text/plain")
                    return
                if token is not None:
                    given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                    if not hmac.compare_digest(given.encode(), token.encode()):
                        self._send(401, b"this endpoint needs its token", "text/plain")
                        return
                body = generate_latest(registry)
                self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")

            def _send(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(host, port, Handler, token, "/metrics")

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host, port = self._address()
        return f"http://{host}:{port}/metrics"


def serve_metrics(
    host: str = "127.0.0.1", port: int = 0, token: str | None = None, role: str = "coordinator"
) -> MetricsEndpoint:
    """Serve this process's metrics at ``http://host:port/metrics`` (0: a free port) until
    ``.close()``; another interface than loopback needs ``token``."""
    return MetricsEndpoint(host, port, token, role)
