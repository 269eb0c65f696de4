"""A small local web page showing workers (up/down, CPU, memory, running tasks) and running
and recent queries (SQL, duration, rows, per-stage progress, the plan with metrics, failures
and retries). Served by the standard library; the page is one file with its script inline
(no CDN), refreshed every second from ``/api/status``.

Started by :meth:`DistributedContext.dashboard` or ``LocalCluster(dashboard=True)``. It listens
on 127.0.0.1 by default; with a token (the cluster's, where one is set), every request must
carry it: open :attr:`Dashboard.url`, which holds it once and leaves it in a cookie.
"""

from __future__ import annotations

import hmac
import html
import json
from collections.abc import Callable
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from datafusion_distributed_py.local_server import LocalServer
from datafusion_distributed_py.monitor import MONITOR
from datafusion_distributed_py.status import ClusterStatus
from datafusion_distributed_py.task_metrics import run_tasks

_COOKIE = "dfdpy_dashboard"


class Dashboard(LocalServer):
    """A running dashboard server.

    Args:
        status: called for each refresh of the page (about once a second): a
            :class:`ClusterStatus`, or its ``to_dict()`` form (a history, ``history.py``).
        host: the interface to listen on; ``127.0.0.1`` by default. Another one needs a token.
        port: 0 picks a free port.
        token: the secret every request must carry (``?token=``, the cookie the page sets, or
            ``Authorization: Bearer``); None for none.
        query: one query's details by id (its plan, stages and tasks) for the page; by
            default this process's (:func:`live_query`).

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext
        >>> dctx = DistributedContext(SessionContext(), progress=False)
        >>> with dctx.dashboard() as board:
        ...     board.url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        status: Callable[[], ClusterStatus | dict[str, Any]],
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        query: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> None:
        members = {
            "status": staticmethod(status),
            "token": token,
            "query": staticmethod(query or live_query),
        }
        handler = type("Handler", (_Handler,), members)
        super().__init__(host, port, handler, token, "the dashboard")

    @property
    def url(self) -> str:
        """The page's address (with the token, when there is one: keep it private)."""
        host, port = self._address()
        base = f"http://{host}:{port}/"
        return base if self._token is None else f"{base}?token={quote(self._token)}"

    def _repr_html_(self) -> str:
        """A link to the page, where a notebook shows the dashboard."""
        url = html.escape(self.url, quote=True)
        return (
            f"<a href='{url}' target='_blank' rel='noopener'>datafusion-distributed-py "
            "dashboard</a> (live: workers and queries, refreshed every second)"
        )

    def __repr__(self) -> str:
        host, port = self._address()
        return f"Dashboard(http://{host}:{port}/)"


def _page() -> bytes:
    return resources.files("datafusion_distributed_py").joinpath("dashboard.html").read_bytes()


def live_query(query_id: str) -> dict[str, Any] | None:
    """One of this process's queries as the page shows it when clicked: its plan with metrics
    and its tasks (while the frame that ran it lives)."""
    record = MONITOR.find(int(query_id)) if query_id.isdigit() else None
    if record is None:
        return None
    source = record.source() if record.source is not None else None
    tasks = run_tasks(source) if record.state == "finished" else []
    return {"id": query_id, "plan": record.plan(), "tasks": tasks}


class _Handler(BaseHTTPRequestHandler):
    status: Callable[[], ClusterStatus | dict[str, Any]]
    token: str | None
    query: Callable[[str], dict[str, Any] | None]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # requests are not worth a line each on the user's terminal

    def _allowed(self, query: dict[str, list[str]]) -> tuple[bool, bool]:
        """(allowed, given in the URL)."""
        if self.token is None:
            return True, False
        offered = query.get("token", [None])[0]
        if offered is not None:
            return hmac.compare_digest(offered, self.token), True
        cookie = SimpleCookie(self.headers.get("Cookie", ""))
        if _COOKIE in cookie:
            return hmac.compare_digest(cookie[_COOKIE].value, self.token), False
        bearer = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return bool(bearer) and hmac.compare_digest(bearer, self.token), False

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        allowed, in_url = self._allowed(query)
        if not allowed:
            self._send(401, b"this dashboard needs its token: open the URL it was started with")
            return
        if url.path == "/":
            extra = {}
            if in_url:  # keep it in a cookie, out of the address bar and the page's requests
                extra["Set-Cookie"] = f"{_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            self._send(200, _page(), "text/html; charset=utf-8", extra)
        elif url.path == "/api/status":
            status = self.status()
            data = status if isinstance(status, dict) else status.to_dict()
            self._send(200, json.dumps(data).encode(), "application/json")
        elif url.path == "/api/query":
            details = self.query(query.get("id", [""])[0])
            body = json.dumps(details if details is not None else {"error": "no such query"})
            self._send(200 if details is not None else 404, body.encode(), "application/json")
        elif url.path == "/api/plan":
            details = self.query(query.get("id", [""])[0])
            text = details.get("plan") if details is not None else None
            self._send(200 if text else 404, (text or "no plan yet").encode(), "text/plain")
        else:
            self._send(404, b"not found")

    def _send(
        self, code: int, body: bytes, kind: str = "text/plain", extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
