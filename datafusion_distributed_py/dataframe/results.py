"""A whole result read straight from the core for a frame with nothing added to it in Python
(Arrow C streams: no second planning by datafusion-python), and the rows a run gave, for the
monitor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from datafusion import DataFrame

from datafusion_distributed_py import _internal
from datafusion_distributed_py.dataframe.naming import named
from datafusion_distributed_py.dataframe.origin import origin_of

#: The methods that run the query (each run is a query of the monitor); ``count`` runs its
#: counting frame, which records itself.
RUNS = frozenset({
    "collect", "collect_partitioned", "to_arrow_table", "to_pandas", "to_polars", "to_pylist",
    "to_pydict", "show", "write_parquet", "write_csv", "write_json", "write_table",
    "collect_column", "write_parquet_with_options",
})  # fmt: skip


#: The methods that return nothing of the result before all of it is read (or written): a
#: worker lost at any point of their run costs a run again from the start, not the query.
#: Streams (``execute_stream``, ``for batch in df``) hand rows on as they come: see
#: :class:`TranslatedStream`.
WHOLE = RUNS | {"count", "describe"}


def result_rows(out: Any) -> int | None:
    """The rows of a run's result, where the result says."""
    if isinstance(out, bool):
        return None
    if isinstance(out, int):  # count()
        return out
    if isinstance(out, list):  # collect(), to_pylist(), collect_partitioned()
        if out and isinstance(out[0], list):
            return sum(int(b.num_rows) for part in out for b in part)
        return sum(int(getattr(b, "num_rows", 1)) for b in out)
    if isinstance(out, dict):  # to_pydict()
        return len(next(iter(out.values()), []))
    rows = getattr(out, "num_rows", None)  # to_arrow_table()
    if isinstance(rows, int):
        return rows
    try:
        return int(len(out))  # pandas, polars
    except TypeError:
        return None


def read_stream(stream: object) -> list[pa.RecordBatch]:
    """The batches of an ``arrow_array_stream`` capsule."""
    reader = pa.RecordBatchReader._import_from_c_capsule(stream)
    try:
        return list(reader)
    except BaseException:
        # Released now (the run stops, a write aborts), not when the traceback holding this
        # frame is freed: the caller may keep the exception (Ctrl-C) for long.
        reader.close()
        raise


def _batches(df: DataFrame, plan: _internal.DistributedPlan) -> list[pa.RecordBatch]:
    (stream,) = plan.collect_streams()
    batches: list[pa.RecordBatch] = named(read_stream(stream), origin_of(df).names)  # type: ignore[union-attr]
    return batches


def _table(df: DataFrame, plan: _internal.DistributedPlan) -> pa.Table:
    # As datafusion-python builds it: the batches' schema, or the frame's when there are none.
    batches = _batches(df, plan)
    return pa.Table.from_batches(batches) if batches else df.schema().empty_table()


def _polars(df: DataFrame, plan: _internal.DistributedPlan) -> Any:
    import polars  # optional, as in datafusion-python

    return polars.DataFrame(_table(df, plan))


#: The methods that read a whole result, as a frame with nothing added reads it from the core.
DIRECT: dict[str, Callable[[DataFrame, _internal.DistributedPlan], Any]] = {
    "collect": _batches,
    "collect_partitioned": lambda df, plan: [
        named(read_stream(s), origin_of(df).names)  # type: ignore[union-attr]
        for s in plan.collect_streams(True)
    ],
    "to_arrow_table": _table,
    "to_pandas": lambda df, plan: _table(df, plan).to_pandas(),
    "to_pylist": lambda df, plan: _table(df, plan).to_pylist(),
    "to_pydict": lambda df, plan: _table(df, plan).to_pydict(),
    "to_polars": _polars,
}
