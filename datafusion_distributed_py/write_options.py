"""``df.write_parquet/csv/json`` of a distributed frame as the ``COPY ... TO`` that each task
of the last stage writes (see ``docs/what-runs-where.md``, "Writes").

A write's options are translated into the statement's own options, so that both mean the
same thing: ``ParquetWriterOptions`` fields are DataFusion's ``format.*`` keys by name
(``format.<key>::<column>`` for column-specific ones) and ``partition_by`` is ``PARTITIONED
BY``. What ``COPY`` from every task cannot express — ``single_file_output`` (one writer is the
point), insert operations other than append (single-node refuses them; its error is the
answer) and ``sort_by`` (one ordered stream, as single-node writes it: see
:func:`without_sort`) — is written by the coordinator, as single-node writes it.

``DataFrameWriteOptions`` keeps its arguments only inside datafusion-python's Rust object, so
:func:`remembering` has its constructor note them on the instance; options made
before this package was imported are not readable and are written by the coordinator.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datafusion import DataFrame, DataFrameWriteOptions, InsertOp
from datafusion.dataframe import Compression, ParquetWriterOptions

#: A column name ``PARTITIONED BY`` reads as itself.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: The attribute on a ``DataFrameWriteOptions`` holding its constructor's arguments.
_ARGS = "_dfdpy_args"


def remembering() -> dict[str, Any]:
    """``DataFrameWriteOptions(...)`` noting its arguments on the instance (the object keeps
    them unreadable), so ``df.write_*`` can write from every task."""
    init = DataFrameWriteOptions.__init__

    @functools.wraps(init)
    def noting(self: DataFrameWriteOptions, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        object.__setattr__(self, _ARGS, _bound_args(init, self, *args, **kwargs))

    return {"__init__": noting}


def _bound_args(init: Any, self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    bound = inspect.signature(init).bind(self, *args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k != "self"}


@dataclass(frozen=True)
class Copy:
    """A write as ``COPY (SELECT * FROM <frame>) TO path STORED AS ... PARTITIONED BY ...
    OPTIONS (...)``.

    Attributes:
        frame: the rows to write (the frame, sorted if the write sorts).
        options: the statement's ``OPTIONS``, by key.
        partition_by: the ``PARTITIONED BY`` columns.
    """

    frame: DataFrame
    options: dict[str, str]
    partition_by: tuple[str, ...] = ()


def as_copy(
    frame: DataFrame, options: dict[str, str], write_options: DataFrameWriteOptions | None
) -> Copy | None:
    """The ``COPY`` that writes ``frame`` as the options say, or None when the coordinator
    writes it (``single_file_output``, an insert operation other than append, options whose
    arguments are unknown); a sorted write never comes here (:func:`without_sort`)."""
    if write_options is None:
        return Copy(frame, options)
    args = getattr(write_options, _ARGS, None)
    if args is None:
        return None
    op = args.get("insert_operation")
    if (op is not None and op != InsertOp.APPEND) or args.get("single_file_output"):
        return None
    partition_by = args.get("partition_by") or ()
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    if not all(_PLAIN_NAME.fullmatch(c) for c in partition_by):
        return None  # COPY's PARTITIONED BY takes names as written, unquoted
    return Copy(frame, options, tuple(partition_by))


def without_sort(
    write_options: DataFrameWriteOptions | None,
) -> tuple[list[Any], DataFrameWriteOptions] | None:
    """A write's ``sort_by`` keys and the same options without them, or None when it sorts
    nothing (or its arguments are unknown).

    Single-node writes a sorted write as one ordered stream, split into files in order; files
    written by several tasks at once would each hold a share. So the sort runs on the workers
    (its merge ends on the coordinator) and the coordinator writes the ordered stream.
    """
    args = getattr(write_options, _ARGS, None)
    if args is None or args.get("sort_by") is None:
        return None
    sort_by = args["sort_by"]
    keys = list(sort_by) if isinstance(sort_by, Sequence) else [sort_by]
    return keys, DataFrameWriteOptions(**{**args, "sort_by": None})


def parquet_options(compression: Any, level: int | None) -> dict[str, str] | None:
    """``write_parquet``'s codec as ``COPY``'s options (None: not a codec this can name)."""
    if isinstance(compression, ParquetWriterOptions):
        return writer_options(compression)
    if not isinstance(compression, (str, Compression)):
        return None
    codec = Compression.from_str(compression) if isinstance(compression, str) else compression
    if level is None:
        level = codec.get_default_level()
    return {"format.compression": codec.value if level is None else f"{codec.value}({level})"}


def writer_options(options: ParquetWriterOptions) -> dict[str, str]:
    """``ParquetWriterOptions`` as ``format.*`` keys: its fields are DataFusion's
    ``ParquetOptions`` by name; a field left ``None`` keeps DataFusion's default."""
    keys = {
        f"format.{name}": _option_text(value)
        for name, value in vars(options).items()
        if name != "column_specific_options" and value is not None
    }
    for column, column_options in (options.column_specific_options or {}).items():
        for name, value in vars(column_options).items():
            if value is not None:
                keys[f"format.{name}::{column}"] = _option_text(value)
    return keys


def _option_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
