"""Helpers to check distributed results against single-node DataFusion.

Example:
    >>> import pyarrow as pa
    >>> assert_same_rows(pa.table({"a": [2, 1]}), pa.table({"a": [1, 2]}), ordered=False)
    >>> is_distributed("NetworkShuffleExec: ...")
    True
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pyarrow as pa

NUMBERS = (float, Decimal)
NETWORK_BOUNDARIES = ("NetworkShuffleExec", "NetworkCoalesceExec", "NetworkBroadcastExec")


def is_distributed(plan_text: str) -> bool:
    """True when a rendered plan has at least one network boundary between stages."""
    return any(name in plan_text for name in NETWORK_BOUNDARIES)


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
    """The table's rows as tuples, floats rounded to 6 decimals."""
    return [tuple(_normalize(v) for v in row.values()) for row in table.to_pylist()]


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
