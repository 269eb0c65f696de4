"""Helpers to check distributed results against single-node DataFusion.

A comparison proves two things: the rows equal single-node's, **and** the query ran where
it claims to. A test that compares ``dctx.sql(q)`` with ``ctx.sql(q)`` alone passes when both
ran single-node (the default ``fallback="coordinator"`` turns an undistributable query into a
single-node run), so :func:`assert_distributed_equal` checks where it ran too, and
:func:`assert_ran_on_workers` says the same of a frame compared some other way.

Example:
    >>> import pyarrow as pa
    >>> assert_same_rows(pa.table({"a": [2, 1]}), pa.table({"a": [1, 2]}), ordered=False)
    >>> is_distributed("NetworkShuffleExec: ...")
    True
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext

    from datafusion_distributed_py.context import DistributedContext

#: A query as :func:`assert_distributed_equal` takes it: SQL text, or a function that builds
#: the frame from a context (called with ``ctx``, then with the ``DistributedContext``, whose
#: frame makers mirror ``SessionContext``'s).
Query = str | Callable[[Any], "DataFrame"]

NUMBERS = (float, Decimal)
NETWORK_BOUNDARIES = ("NetworkShuffleExec", "NetworkCoalesceExec", "NetworkBroadcastExec")


def is_distributed(plan_text: str) -> bool:
    """True when a rendered plan has at least one network boundary between stages."""
    return any(name in plan_text for name in NETWORK_BOUNDARIES)


def plan_bytes_sent(df: Any) -> int:
    """Bytes of the plan fragments ``df``'s latest run sent to the workers (what a query's
    in-memory rows cost when they travel inside its plan); 0 for a frame that has not run or
    ran single-node.

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext
        >>> df = DistributedContext(SessionContext()).sql("SELECT 1 AS x")
        >>> _ = df.collect()
        >>> 0 < plan_bytes_sent(df) < 10_000
        True
    """
    from datafusion_distributed_py import _internal
    from datafusion_distributed_py.dataframe import source_of

    source = source_of(df)
    if not isinstance(source, _internal.DistributedPlan):
        return 0
    return source.plan_bytes_sent()


def shuffle_bytes(df: Any, *, into_coordinator: bool = False) -> int:
    """Bytes every network boundary of ``df``'s latest run moved (Arrow IPC, after the
    shuffles' compression), or with ``into_coordinator`` only those of the coordinator's head
    stage (what it received); 0 for a frame that has not run or ran single-node.

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext
        >>> df = DistributedContext(SessionContext()).sql("SELECT 1 AS x")
        >>> shuffle_bytes(df)
        0
    """
    from datafusion_distributed_py import _internal
    from datafusion_distributed_py.dataframe import source_of

    source = source_of(df)
    if not isinstance(source, _internal.DistributedPlan):
        return 0
    return sum(
        int(v or 0)
        for name, _, stage, metrics in source.operator_metrics()
        if name.startswith("[Stage") and (stage == 0 or not into_coordinator)
        for what, v, *_ in metrics
        if what == "bytes_transferred"
    )


def _normalize(value: object) -> object:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    return value


def rows(table: pa.Table) -> list[tuple[object, ...]]:
    """The table's rows as tuples (by column position: a result may name two columns alike),
    floats rounded to 6 decimals."""
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(_normalize(c[i]) for c in columns) for i in range(table.num_rows)]


def assert_same_rows(
    got: pa.Table, expected: pa.Table, ordered: bool, tolerance: float | None = None
) -> None:
    """Assert equal column names and rows (floats with tolerance); in order if ``ordered``.

    ``tolerance`` (relative and absolute) also compares decimals approximately, for other
    engines that round decimals differently.
    """
    assert got.column_names == expected.column_names, (got.column_names, expected.column_names)
    got_rows, expected_rows = rows(got), rows(expected)
    if not ordered:
        got_rows = sorted(got_rows, key=repr)
        expected_rows = sorted(expected_rows, key=repr)
    assert len(got_rows) == len(expected_rows), (len(got_rows), len(expected_rows))
    for g, e in zip(got_rows, expected_rows, strict=True):
        for gv, ev in zip(g, e, strict=True):
            if tolerance is not None and isinstance(gv, NUMBERS) and isinstance(ev, NUMBERS):
                assert math.isclose(gv, ev, rel_tol=tolerance, abs_tol=tolerance), (g, e)
            elif isinstance(gv, float) and isinstance(ev, float):
                assert math.isclose(gv, ev, rel_tol=1e-9, abs_tol=1e-6), (g, e)
            else:
                assert gv == ev, (g, e)


def assert_ran_on_workers(df: DataFrame, dctx: DistributedContext, *, stages: bool = True) -> None:
    """Assert that ``df`` (returned by ``dctx``) is planned to run on the workers: not fallen
    back to the coordinator and, with ``stages``, with a network boundary between stages in
    its distributed plan (a plan of one stage runs on one worker; pass ``stages=False`` for a
    query that small).

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext
        >>> ctx = SessionContext()
        >>> _ = ctx.from_pydict({"k": [1, 2, 2]}, name="t")
        >>> dctx = DistributedContext(ctx, progress=False)
        >>> assert_ran_on_workers(dctx.sql("SELECT k, count(*) FROM t GROUP BY k"), dctx)
    """
    # pytest shows the caller's line, not this frame's arguments (a DataFrame's repr runs it).
    __tracebackhide__ = True
    from datafusion_distributed_py.dataframe import ran_on

    where = ran_on(df)
    if where != "workers":
        plan = dctx.explain(df) if where == "coordinator" else ""
        raise AssertionError(f"the query ran on the {where}, not on the workers\n{plan}")
    if stages:
        plan = dctx.explain(df)
        assert is_distributed(plan), f"no network boundary in the distributed plan:\n{plan}"


def assert_ran_on_coordinator(df: DataFrame, because: str) -> None:
    """Assert that ``df`` fell back to single-node on the coordinator for the reason whose
    text matches the regular expression ``because`` (the fallback's warning names it).

    Example:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed_py import DistributedContext
        >>> ctx = SessionContext()
        >>> dctx = DistributedContext(ctx, progress=False)
        >>> df = dctx.sql(  # a Float16 literal is written as a Float32 one
        ...     "SELECT min(h) FROM (SELECT arrow_cast(1, 'Float16') AS h)")
        >>> assert_ran_on_coordinator(df, because="single-node but")
    """
    # pytest shows the caller's line, not this frame's arguments (a DataFrame's repr runs it).
    __tracebackhide__ = True
    from datafusion_distributed_py.dataframe import Fallback, source_of

    source = source_of(df)
    if not isinstance(source, Fallback):
        raise AssertionError(f"expected a fallback ({because}); it ran on the workers")
    if not re.search(because, source.reason):
        raise AssertionError(f"fell back for another reason: {source.reason!r} !~ {because!r}")


def assert_distributed_equal(
    ctx: SessionContext,
    dctx: DistributedContext,
    query: Query,
    *,
    ordered: bool | None = None,
    tolerance: float | None = None,
    expect_fallback: str | None = None,
    stages: bool = True,
) -> pa.Table:
    """Run ``query`` single-node on ``ctx`` and distributed on ``dctx``; assert the same
    column names and rows **and** that it ran on the workers (see
    :func:`assert_ran_on_workers`). Returns the distributed result.

    Args:
        ctx: the single-node session (``dctx.ctx``, or a twin holding the same data).
        dctx: the distributed context.
        query: SQL text, or a function building the frame from a context.
        ordered: compare rows in order; by default when the query sorts its result (its plan
            ends in a sort, under projections and limits).
        tolerance: relative and absolute tolerance for numbers (see :func:`assert_same_rows`).
        expect_fallback: for a query meant to run single-node on the coordinator, a regular
            expression its fallback reason must match (why it falls back); then it is asserted
            that it did.
        stages: with the workers, assert a network boundary in the plan too.

    Example:
        >>> from datafusion import SessionContext, col
        >>> from datafusion_distributed_py import DistributedContext
        >>> ctx = SessionContext()
        >>> _ = ctx.from_pydict({"k": [1, 2, 2]}, name="t")
        >>> dctx = DistributedContext(ctx, progress=False)
        >>> q = "SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k"
        >>> assert_distributed_equal(ctx, dctx, q).to_pylist()
        [{'k': 1, 'n': 1}, {'k': 2, 'n': 2}]
        >>> _ = assert_distributed_equal(ctx, dctx, lambda c: c.table("t").filter(col("k") > 1))
    """
    # pytest shows the caller's line, not this frame's arguments (a DataFrame's repr runs it).
    __tracebackhide__ = True
    single = ctx.sql(query) if isinstance(query, str) else query(ctx)
    df = dctx.sql(query) if isinstance(query, str) else query(dctx)
    if ordered is None:
        ordered = _sorts_its_result(single)
    expected = single.to_arrow_table()
    if expect_fallback is not None:
        assert_ran_on_coordinator(df, because=expect_fallback)
    else:
        assert_ran_on_workers(df, dctx, stages=stages)
    got = df.to_arrow_table()
    want_types = [(f.name, f.type) for f in expected.schema]
    got_types = [(f.name, f.type) for f in got.schema]
    assert got_types == want_types, f"types {got_types} != single-node's {want_types}"
    assert_same_rows(got, expected, ordered=bool(ordered), tolerance=tolerance)
    return got


def _sorts_its_result(df: DataFrame) -> bool:
    """Whether ``df``'s rows come in a defined order: its logical plan's top is a sort, under
    projections, aliases and limits."""
    from datafusion.expr import Limit, Projection, Sort, SubqueryAlias

    plan = df.logical_plan()
    while isinstance(node := plan.to_variant(), (Projection, SubqueryAlias, Limit)):
        (plan,) = plan.inputs()
    return isinstance(node, Sort)
