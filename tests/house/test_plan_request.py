"""The one request every entry point of the core takes (``plan_request.PlanRequest``), and the
callback it carries called as the core calls it."""

from __future__ import annotations

import dataclasses
import inspect
import typing

from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext, progress
from datafusion_distributed_py.plan_request import PlanRequest


def test_the_progress_callback_takes_what_the_core_sends():
    """The core calls the request's callback with eight values; the stub's type says eight
    and the adapter takes eight (a real query calls it: one event per task at least)."""
    events: list[progress.ProgressEvent] = []
    report = progress.to_rust(events.append)
    assert report is not None
    arity = len(typing.get_args(progress.RustReport)[0])
    assert arity == 8 == len(inspect.signature(report).parameters)
    ctx = SessionContext()
    ctx.from_pydict({"k": list(range(100))}, name="t")
    dctx = DistributedContext(ctx, progress=events.append)
    assert dctx.sql("SELECT k % 7 AS m, count(*) FROM t GROUP BY m").count() == 7
    assert events and all(isinstance(e, progress.ProgressEvent) for e in events)
    assert any(e.done == e.total and e.worker_url for e in events), events


def test_every_entry_point_takes_the_one_request():
    from datafusion_distributed_py import _internal

    for method in ("distribute", "keep", "insert"):
        doc = getattr(_internal.Coordinator, method).__text_signature__ or ""
        assert "request" in doc, (method, doc)
    fields = {f.name for f in dataclasses.fields(PlanRequest)}
    assert {"plan_bytes", "codec", "session", "options", "progress", "writes"} <= fields
