"""From a single-node frame to where it runs: its distributed plan, made by the core from one
:class:`PlanRequest`, or the single-node fallback and why. Frames are planned lazily, when
first used, unless ``fallback="error"`` asks for refusals where the query is written."""

from __future__ import annotations

import logging
import os
import tempfile

import pyarrow as pa
from datafusion import DataFrame
from datafusion.expr import CopyTo, DmlStatement

from datafusion_distributed_py import _internal, object_stores, stream_tables
from datafusion_distributed_py.config import DistributedConfig
from datafusion_distributed_py.dataframe import (
    Fallback,
    Origin,
    Source,
    distributed_frame,
    is_ours,
    pending_frame,
    source_of,
)
from datafusion_distributed_py.engine import Engine
from datafusion_distributed_py.errors import UnsupportedPlanError, UnsupportedTableError
from datafusion_distributed_py.fallback_reasons import (
    check_result_types,
    readable_reason,
    unsupported,
)
from datafusion_distributed_py.monitor import Feed
from datafusion_distributed_py.plan_facts import (
    filtered_windows,
    optimized,
    physical_facts,
    table_scans,
    without_window_topn,
)
from datafusion_distributed_py.plan_request import PlanRequest

_log = logging.getLogger("datafusion_distributed_py")


def lazy(engine: Engine, df: DataFrame, sql: str) -> DataFrame:
    """``df`` as a frame planned distributed when first used (see :func:`plans_at_once`)."""
    if is_ours(df):
        return df
    if plans_at_once(engine):
        return distribute(engine, df, sql)
    assert engine.frames is not None
    return pending_frame(df, engine.frames, sql)


def plans_at_once(engine: Engine) -> bool:
    """Frames are planned when first used (a chain of steps plans once, its parents never);
    with ``fallback="error"`` at once, so that a refusal is raised where the query or step is
    written."""
    return engine.config.fallback == "error"


def distribute(engine: Engine, df: DataFrame, sql: str) -> DataFrame:
    """``df`` (single-node, built on ``ctx``) planned distributed; it stays the twin that the
    DataFrame-API steps of the returned frame apply to."""
    if source_of(df) is not None:
        return df
    assert engine.frames is not None
    feed = engine.feed(sql)
    source = where_it_runs(engine, df, feed)
    if isinstance(source, Fallback):
        # A frame of its own: the caller's df stays as it was.
        own = engine.ctx.create_dataframe_from_logical_plan(df.logical_plan())
        return distributed_frame(own, Origin(source, df, feed, engine.frames, False))
    names = tuple(df.schema().names)
    repeated = names if len(set(names)) < len(names) else None
    origin = Origin(source, df, feed, engine.frames, True, repeated)
    return distributed_frame(engine.ctx.read_table(source), origin)


def source_for(engine: Engine, query_or_df: str | DataFrame) -> Source:
    """Where a query (SQL text, or a frame) runs, planned now unless the frame already
    knows."""
    if isinstance(query_or_df, str):
        df = engine.ctx.sql(query_or_df)
    elif isinstance(query_or_df, DataFrame):
        df = query_or_df
    else:
        raise TypeError(
            f"expected a SQL string or a datafusion.DataFrame, got {type(query_or_df).__name__}"
        )
    existing = source_of(df)
    if existing is not None:
        return existing
    return where_it_runs(engine, df, engine.feed(describe(df)))


def where_it_runs(engine: Engine, df: DataFrame, feed: Feed) -> Source:
    """Where ``df`` runs: its distributed plan, or the single-node fallback and why."""
    try:
        return plan(engine, df, feed)
    except UnsupportedPlanError as e:
        return fallback(engine, e, df)


def fallback(engine: Engine, e: UnsupportedPlanError, df: DataFrame) -> Fallback:
    """The fallback ``e`` calls for, warned about; raised instead under
    ``fallback="error"``."""
    reason = readable_reason(str(e))
    if reason != str(e):
        _log.debug("the full reason this query cannot be distributed: %s", e)
    if engine.config.fallback == "error":
        if isinstance(e, UnsupportedTableError) and reason == str(e):
            raise e
        if not reason.startswith("this query cannot be distributed"):
            reason = f"this query cannot be distributed: {reason}"
        raise UnsupportedTableError(reason) from e
    _log.warning("this query runs on the coordinator, single-node: %s", reason)
    return Fallback(reason, df)


def plan(engine: Engine, df: DataFrame, feed: Feed) -> _internal.DistributedPlan:
    """``df``'s distributed plan, made by the core; raises ``UnsupportedPlanError``."""
    fresh, req = request(engine, df, feed)
    writes = isinstance(fresh.logical_plan().to_variant(), (CopyTo, DmlStatement))
    req.writes, req.live_interval = writes, engine.config.progress_interval
    made = engine.coordinator.distribute(req)
    check_result_types(fresh.schema(), pa.schema(made))
    return made


def request(engine: Engine, df: DataFrame, feed: Feed) -> tuple[DataFrame, PlanRequest]:
    """``df`` re-created under our settings, and what the core plans it from
    (``Coordinator.distribute``, ``keep`` and ``insert``'s request)."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"expected a datafusion.DataFrame, got {type(df).__name__}")
    # What the core runs with first: refused settings (the test suite's mutation run) stop
    # the query before anything is planned.
    req = request_for(engine, feed)
    ctx = engine.ctx
    # A DataFrame plans with the settings of its creation: re-create it under ours.
    fresh = ctx.create_dataframe_from_logical_plan(df.logical_plan())
    try:
        physical = fresh.execution_plan()
    except Exception as e:  # the query's own error: single-node gives it when it runs
        cause = str(e).splitlines()[0]
        raise UnsupportedPlanError(f"its physical plan cannot be made ({cause})") from e
    facts = physical_facts(physical)
    if facts.window_topn:
        physical = without_window_topn(ctx, fresh)
        facts = physical_facts(physical)
    streams = _stream_tables(engine, fresh, facts.stream_scans)
    try:
        req.plan_bytes, wire = engine.wire.serialise(physical, ctx, facts, streams)
    except Exception as e:  # datafusion raises plain Exception subclasses
        raise unsupported(engine.wire.session, fresh, e, ctx) from e
    req.codec, req.session = wire.__datafusion_physical_extension_codec__(), wire
    if facts.reads_memory_rows and 2 * len(req.plan_bytes) > engine.config.keep_tables_above:
        # Rows over the limit travel in this plan: a frame of several in-memory tables, or a
        # table registered again in memory where a file table was (``not_in_memory`` knows
        # tables by name and schema). The next query looks at its tables again and keeps it.
        engine.not_in_memory.clear()
    # The logical plan is read (optimised once more) only for what the physical one lacks.
    if facts.reads_text_files or facts.filters_windows:
        logical = optimized(fresh)
        if facts.reads_text_files:
            req.table_scans = table_scans(logical)
        if facts.filters_windows:
            req.window_filters = filtered_windows(logical)
    return fresh, req


def request_for(engine: Engine, feed: Feed) -> PlanRequest:
    """What the core runs with, the plan left empty: our options over the session's settings
    (the core reads those from the session itself), object stores, progress and retries.
    Every run of the core (a query, a result or table to keep) starts here."""
    config = engine.config
    return PlanRequest(
        plan_bytes=b"",
        codec=engine.ctx.__datafusion_physical_extension_codec__(),
        session=engine.ctx,
        options=config.to_options(),
        stores=object_stores.stores_of(engine.ctx),
        progress=feed.for_core(),
        min_workers=config.min_workers,
        max_retries=config.max_retries,
        stall_timeout=config.stall_timeout or None,
        spool_dir=spool_dir(config),
        # Answered while the wheel plans and encodes the query (which takes longer).
        handshake=engine.coordinator.handshake_ahead(config.min_workers),
    )


def _stream_tables(engine: Engine, df: DataFrame, fetches: list[int | None]) -> list[str]:
    """The unbounded file tables ``df`` scans (see ``stream_tables``), announced to the
    serialiser with the scans' limit; none when it has no stream scan, or scans the codec
    cannot tell apart (their limits differ): the plan then does not serialise."""
    if not fetches or len(set(fetches)) > 1:
        return []
    return stream_tables.scanned(engine.ctx, optimized(df), len(fetches)) or []


def spool_dir(config: DistributedConfig) -> str | None:
    """Where the tasks of a query spool their output (``fault_tolerance="task"``), or None."""
    if config.fault_tolerance != "task":
        return None
    return config.spool_dir or os.path.join(tempfile.gettempdir(), "dfdpy-spool")


def describe(df: DataFrame) -> str:
    """A one-line name for a DataFrame built in Python: its logical plan's top node."""
    first = df.logical_plan().display_indent().strip().split("\n", 1)[0]
    return f"DataFrame: {first.strip()}"
