"""Terminal methods planned as single-node plans them, so that the work stays on the workers:
``count``, ``cache``, ``show``, ``tail``, ``collect_column``, ``explain``, ``execution_plan``
and the writes (``frame_methods`` lists them as ``DISTRIBUTED``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from datafusion import DataFrame, ExecutionPlan
from datafusion import functions as f
from datafusion.dataframe_formatter import get_formatter
from datafusion.expr import Projection, SubqueryAlias, TableScan

from datafusion_distributed_py import _internal, plan_metrics
from datafusion_distributed_py.dataframe.origin import lineage_of, origin_of, source_of, sql_of
from datafusion_distributed_py.dataframe.running import (
    ON_FRAME,
    derive,
    repeats_names,
    single_node_refusal,
)
from datafusion_distributed_py.dataframe.source import Fallback
from datafusion_distributed_py.dataframe.writes import (
    write_csv,
    write_json,
    write_parquet,
    write_parquet_with_options,
)
from datafusion_distributed_py.monitor import MONITOR

#: ``count(*)`` as single-node's ``count()`` writes it; made once (each ``lit`` costs an
#: import lookup in datafusion 55).
_COUNT_ROWS = f.count().alias("count(*)")


def _count(df: DataFrame) -> int:
    """Rows of the frame, planned as single-node plans ``count()`` (from statistics where
    they answer, else partial counts on the workers): one row reaches the coordinator."""
    pending = df.__dict__.get("_dfdpy_pending")
    if pending is None or (pending.root and _reads_a_whole_table(pending.twin)):
        # Its own plan may know the rows (a table read whole: its files' footers), answering
        # without a run; anything else is counted by its count query, planned instead.
        origin = origin_of(df)
        source = origin.source if origin is not None else None
        if isinstance(source, _internal.DistributedPlan) and origin is not None and origin.root:
            rows = source.exact_rows  # the frame's own plan knows: nothing to run or plan
            if rows is not None:
                # A query of the monitor all the same (answered, as single-node answers it,
                # from the files' statistics).
                feed = origin.feed
                sql = f"{sql_of(origin)} \u2192 count()"
                owners = feed.owners if feed is not None else (origin.owner,)
                log = feed.log if feed is not None else None
                MONITOR.end(MONITOR.begin(sql, "workers", owners, log=log), 1, None)
                return rows
    counted = derive(df, "count", DataFrame.aggregate, [], [_COUNT_ROWS])
    (row,) = ON_FRAME["to_pylist"](counted)
    return int(row["count(*)"])


def _reads_a_whole_table(df: DataFrame) -> bool:
    """Whether ``df``'s query is one table's scan (projected, aliased) without filter or
    limit: the one kind whose row count statistics can know exactly."""
    plan = df.logical_plan()
    while isinstance(node := plan.to_variant(), (Projection, SubqueryAlias)):
        (plan,) = plan.inputs()
    return isinstance(node, TableScan) and not node.filters() and node.fetch() is None


def _cache(df: DataFrame) -> DataFrame:
    """The result kept where the workers compute it, and a frame reading it there: later
    queries on it carry a reference to it, not its rows."""
    twin, owner, sql = lineage_of(df)
    if repeats_names(twin):  # single-node cannot keep it either: its error, as it gives it
        return single_node_refusal(twin, DataFrame.cache)  # type: ignore[no-any-return]
    return owner.cache(twin, sql)


def _show(df: DataFrame, num: int = 20) -> None:
    """As single-node's ``show``: the first ``num`` rows, the limit inside the distributed
    plan so that the workers' scans stop early."""
    limited = derive(df, "show", DataFrame.limit, num)
    if origin_of(limited).names is None:  # type: ignore[union-attr]
        return ON_FRAME["show"](limited, num)  # type: ignore[no-any-return]
    # Printed here with single-node's names (datafusion's own printing reads the core's).
    batches = ON_FRAME["collect"](limited)
    if not sum(b.num_rows for b in batches):
        print("DataFrame has no rows")
    else:
        print(as_text(batches, limited.schema(), has_more=False))
    return None


def as_text(batches: list[pa.RecordBatch], schema: pa.Schema, has_more: bool) -> str:
    """Batches printed as datafusion prints a frame (``show``, ``repr``)."""
    return DataFrame.default_str_repr(batches, schema, has_more, str(uuid.uuid4()))


def first_rows(df: DataFrame) -> tuple[list[pa.RecordBatch], bool]:
    """The rows a frame's ``repr`` shows (as many as datafusion's formatter shows) and
    whether there are more."""
    shown = get_formatter().max_rows
    table = ON_FRAME["to_arrow_table"](derive(df, "repr", DataFrame.limit, shown + 1))
    return table.slice(0, shown).to_batches(), table.num_rows > shown


def _tail(df: DataFrame, n: int = 5) -> DataFrame:
    """As single-node's ``tail``: the count and the limit both distributed."""
    return derive(df, "tail", DataFrame.limit, n, max(0, _count(df) - n))  # type: ignore[no-any-return]


def _collect_column(df: DataFrame, column_name: str) -> Any:
    """As single-node's ``collect_column``: only that column leaves the workers."""
    selected = derive(df, "collect_column", DataFrame.select, column_name)
    return ON_FRAME["collect_column"](selected, column_name)


def _explain(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
    """As single-node's ``explain``: the query's own plan (its twin's); with ``analyze`` the
    frame runs, distributed, and the plan printed is the one that ran.
    :meth:`DistributedContext.explain` gives the distributed plan with its stages."""
    analyze = kwargs.get("analyze", args[1] if len(args) > 1 else False)
    if analyze:
        return ON_FRAME["explain"](df, *args, **kwargs)
    return DataFrame.explain(lineage_of(df)[0], *args, **kwargs)


def _execution_plan(df: DataFrame) -> ExecutionPlan:
    """As single-node's: the query's physical plan (its twin's); after a run, each operator
    with the metrics the run recorded for it, summed over its tasks (see ``plan_metrics``)."""
    plan = DataFrame.execution_plan(lineage_of(df)[0])
    if "_dfdpy_pending" in df.__dict__:  # never planned, so never ran
        return plan
    source = source_of(df)
    if isinstance(source, Fallback):  # it ran as this single-node frame
        return DataFrame.execution_plan(source.df)
    if source is None:
        return plan
    operators = source.operator_metrics()
    return plan_metrics.with_run_metrics(plan, operators) if operators else plan


#: Terminal methods planned as single-node plans them, so that the work stays on the workers.
COMPOSED: dict[str, Callable[..., Any]] = {
    "cache": _cache,
    "count": _count,
    "show": _show,
    "tail": _tail,
    "collect_column": _collect_column,
    "explain": _explain,
    "execution_plan": _execution_plan,
    "write_parquet": write_parquet,
    "write_csv": write_csv,
    "write_json": write_json,
    "write_parquet_with_options": write_parquet_with_options,
}
