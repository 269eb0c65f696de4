"""The history view: past queries from an event log, on the dashboard's own page, after the
processes that ran them have ended.

``python -m datafusion_distributed_py.history DIR`` (or ``datafusion-distributed-history DIR``)
serves the page for the event log at ``DIR`` (or a URI such as ``s3://bucket/prefix``): every
query, newest first, to filter by state, time and text; a click shows its stages and tasks
with their times. The log is read again as it grows.

Example:
    >>> import tempfile
    >>> from datafusion import SessionContext
    >>> from datafusion_distributed_py import DistributedConfig, DistributedContext, event_log
    >>> log = tempfile.mkdtemp()
    >>> dctx = DistributedContext(SessionContext(), config=DistributedConfig(event_log=log))
    >>> _ = dctx.sql("SELECT 1 AS x").collect()
    >>> event_log.flush()
    >>> with serve(log) as page:
    ...     page.url.startswith("http://127.0.0.1:")
    True
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from datafusion_distributed_py.dashboard import Dashboard
from datafusion_distributed_py.event_log import LogReader


class History:
    """The records of one event log, its new lines read when asked after ``every`` seconds."""

    def __init__(self, location: str, every: float = 1.0) -> None:
        self.location = location
        self._every = every
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._events: list[dict[str, Any]] = []
        self._reader = LogReader(location)

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._every:
                self._events = self._reader.read(kind="query")
                self._read_at = time.monotonic()
            return self._events

    def status(self) -> dict[str, Any]:
        """The page's data, as the live dashboard's ``/api/status`` gives it."""
        queries = [_summary(e) for e in reversed(self.events())]
        return {
            "mode": "history",
            "source": self.location,
            "taken_at": time.time(),
            "workers": [],
            "queries": queries,
            "kept": [],
        }

    def query(self, query_id: str) -> dict[str, Any] | None:
        """One query's stages and tasks, as the page shows them when it is clicked."""
        event = next((e for e in self.events() if e.get("id") == query_id), None)
        if event is None:
            return None
        return {"id": query_id, "plan": None, "stages": event["stages"], "tasks": event["tasks"]}


def _summary(event: dict[str, Any]) -> dict[str, Any]:
    failure = event.get("failure") or {}
    error = None
    if failure:
        error = failure.get("message") or f"{failure.get('kind')} error ({failure.get('type')})"
    if event.get("fallback_reason"):
        error = f"ran single-node: {event['fallback_reason']}" + (f"; {error}" if error else "")
    return {
        "id": event["id"],
        "sql": event["sql"],
        "ran_on": event["ran_on"],
        "state": event["state"],
        "started": event["started"],
        "duration_s": event["duration_s"],
        "rows": event["rows"],
        "error": error,
        "attempt": event["attempt"],
        "lost_workers": event["lost_workers"],
        "stages": [
            {
                "stage": s["stage"],
                "done": s["tasks"] or 0,
                "total": s["tasks"] or 0,
                "rows": s["rows"],
                "eta_s": None,
            }
            for s in event["stages"]
            if s["stage"] > 0
        ],  # fmt: skip
    }


def serve(
    location: str, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> Dashboard:
    """Serve the history of the event log at ``location``; ``.url`` is the page, ``.close()``
    stops it. On 127.0.0.1 by default; another interface needs a ``token``."""
    history = History(location)
    history.events()  # a log that cannot be read fails here, not on the page
    return Dashboard(history.status, host=host, port=port, token=token, query=history.query)


def main(argv: list[str] | None = None) -> None:
    """``datafusion-distributed-history LOCATION``: serve it until interrupted."""
    parser = argparse.ArgumentParser(
        prog="datafusion-distributed-history",
        description="Show past queries from a datafusion-distributed-py event log.",
    )
    parser.add_argument("location", help="the event log: a directory or a URI (s3://...)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument("--token", default=None, help="a secret the page asks for")
    args = parser.parse_args(argv)
    page = serve(args.location, args.host, args.port, args.token)
    print(f"history of {args.location}: {page.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        page.close()


if __name__ == "__main__":
    main()
