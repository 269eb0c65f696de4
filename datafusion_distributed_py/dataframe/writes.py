"""``write_parquet``, ``write_csv``, ``write_json`` of a distributed frame: a ``COPY ... TO``
written by every task, or single-node's own method over the distributed result where no
``COPY`` says the same."""

from __future__ import annotations

import inspect
import logging
import os
import tempfile
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from datafusion import DataFrame, SessionContext

from datafusion_distributed_py import write_options
from datafusion_distributed_py.dataframe.errors import translate
from datafusion_distributed_py.dataframe.origin import lineage_of
from datafusion_distributed_py.dataframe.running import ON_FRAME, derive, repeats_names
from datafusion_distributed_py.errors import UnsupportedPlanError

_log = logging.getLogger("datafusion_distributed_py")


def write_parquet(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_parquet``: each task writes its own files (the equivalent
    ``COPY ... TO``, see ``write_options``); ``single_file_output`` or an insert operation
    other than append on the coordinator, as single-node writes them."""
    bound = _bind(DataFrame.write_parquet, df, path, *args, **kwargs)
    options = write_options.parquet_options(
        bound.get("compression", "zstd"), bound.get("compression_level")
    )
    return _write(df, "write_parquet", path, "PARQUET", options, bound, args, kwargs)


def write_parquet_with_options(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_parquet_with_options``, written as in ``write_parquet``."""
    bound = _bind(DataFrame.write_parquet_with_options, df, path, *args, **kwargs)
    options = write_options.writer_options(bound["options"])
    return _write(df, "write_parquet_with_options", path, "PARQUET", options, bound, args, kwargs)


def write_csv(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_csv``, written as in ``write_parquet``."""
    bound = _bind(DataFrame.write_csv, df, path, *args, **kwargs)
    header = {"format.has_header": "true" if bound.get("with_header", False) else "false"}
    return _write(df, "write_csv", path, "CSV", header, bound, args, kwargs)


def write_json(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_json``, written as in ``write_parquet``."""
    bound = _bind(DataFrame.write_json, df, path, *args, **kwargs)
    return _write(df, "write_json", path, "JSON", {}, bound, args, kwargs)


def _write(
    df: DataFrame,
    name: str,
    path: Any,
    stored_as: str,
    options: dict[str, str] | None,
    bound: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """Writes from every task when the write is a ``COPY``; otherwise the coordinator writes
    the distributed result with single-node's own method (honouring every option)."""
    twin, owner, _ = lineage_of(df)
    if stored_as == "PARQUET":
        _raise_as_single_node_would(twin, name, bound)
    sorting = write_options.without_sort(bound.get("write_options"))
    if sorting is not None:
        keys, unsorted = sorting
        ordered = derive(df, name, DataFrame.sort, *keys)
        call = {k: v for k, v in bound.items() if k not in ("self", "write_options")}
        return ON_FRAME[name](ordered, **call, write_options=unsorted)  # type: ignore[no-any-return]
    copy = None
    if options is not None:
        copy = write_options.as_copy(twin, options, bound.get("write_options"))
    if copy is None:
        return ON_FRAME[name](df, path, *args, **kwargs)  # type: ignore[no-any-return]
    try:
        owner.copy(copy, str(path), stored_as)
    except UnsupportedPlanError as e:
        _log.warning("this write runs on the coordinator, single-node: %s", e)
        return getattr(DataFrame, name)(twin, path, *args, **kwargs)  # type: ignore[no-any-return]
    except Exception as e:  # the write's own errors read as single-node's
        clean = translate(e)
        if clean is None:
            raise
        raise clean from None
    return None


def _raise_as_single_node_would(twin: DataFrame, name: str, bound: dict[str, Any]) -> None:
    """Raises what single-node raises for the write's options (a codec level out of range, a
    dictionary encoding as fallback, an unknown writer version), with its type and message,
    here at the call: single-node's own method writes no row of the query into a directory
    thrown away. A distributed write would fail later, on a worker, as another type.

    The row written is one row of nulls of the query's columns, not the query's: Parquet's
    writer properties are checked when a file is opened, which an empty result never does."""
    call = {k: v for k, v in bound.items() if k not in ("self", "path")}
    fields = [f.with_nullable(True) for f in twin.schema()]
    if repeats_names(twin):  # a table cannot repeat a name (``SELECT *`` of a join)
        fields = [f.with_name(f"{f.name}#{i}") for i, f in enumerate(fields)]
    schema = pa.schema(fields)
    nulls = pa.table([pa.nulls(1, field.type) for field in schema], schema=schema)
    with tempfile.TemporaryDirectory(prefix="dfdpy-options-") as scratch:
        frame = SessionContext().from_arrow(nulls)
        getattr(DataFrame, name)(frame, os.path.join(scratch, "out.parquet"), **call)


def _bind(method: Callable[..., Any], df: DataFrame, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments of a call of ``method``, by name (raising as the method would on a
    wrong call)."""
    return dict(inspect.signature(method).bind(df, *args, **kwargs).arguments)
