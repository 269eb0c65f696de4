"""A small HTTP server of this process, served from a daemon thread (the dashboard, the
history view, ``/metrics``), and the rule they share: loopback, or a token."""

from __future__ import annotations

import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only reaches this machine.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


class LocalServer:
    """Serves ``handler`` on ``host:port`` (0: a free port) until :meth:`close`; refuses an
    interface other than loopback without a ``token`` (``what`` names the server)."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        token: str | None,
        what: str,
    ) -> None:
        if token is None and not is_loopback(host):
            raise ValueError(
                f"{what} on {host!r} would be open to the network without a token: give one "
                "(the cluster's, Security(token=...)) or listen on 127.0.0.1"
            )
        self._token = token
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dfdpy-http", daemon=True
        )
        self._thread.start()

    def _address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
